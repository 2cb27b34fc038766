"""The planner: solver choice from metadata only, a readable report, and clear refusals."""

import dask.array as da
import numpy as np
import pytest
from distributed import Client, LocalCluster

from daskpca import PCA
from daskpca._plan import ILL_CONDITIONED_RATIO
from daskpca.solvers import krylov
from daskpca.exceptions import IllConditionedWarning

from _helpers import largest_task_bytes, spectral_data


def lazy(shape, chunks, dtype="f4"):
    return da.zeros(shape, chunks=chunks, dtype=dtype)  # never computed: plan reads no data


@pytest.mark.parametrize(
    "shape, chunks, k, expected",
    [
        ((1_000_000, 500), (20_000, 500), 20, "covariance"),  # tall: one pass, 500×500
        ((2_000, 200_000), (2_000, 10_000), 20, "gram"),  # wide: N < D trick
        ((1_000_000, 100_000), (2_000, 100_000), 20, "krylov"),  # both large, k small: block Krylov, its bound reported
        ((100_000, 4_000), (5_000, 4_000), 0.95, "covariance"),  # a fraction needs every eigenvalue
    ],
)
def test_auto_choice_and_report(shape, chunks, k, expected):
    plan = PCA(k).plan(lazy(shape, chunks))
    assert plan.solver == expected
    text = str(plan)
    assert f"solver: {expected!r}" in text and "passes over the data" in text and "runner-up" in text
    assert "peak memory per task" in text and "flops" in text
    chosen = plan.estimate(expected)
    assert chosen.feasible and chosen.task_bytes > 0 and chosen.flops > 0
    assert plan.runner_up != expected


def test_pass_counts_in_the_plan_match_the_solvers():
    plan = PCA(5, solver="randomized", n_power_iter=3).plan(lazy((10_000, 300), (1_000, 300)))
    assert plan.estimate("covariance").passes == 1
    assert plan.estimate("gram").passes == 2
    assert plan.estimate("tsqr").passes == 1
    assert plan.estimate("randomized").passes == 3 + 1


def test_memory_budget_comes_from_the_cluster():
    with LocalCluster(n_workers=1, threads_per_worker=2, memory_limit="512MiB", processes=False,
                      dashboard_address=None) as cluster, Client(cluster):
        plan = PCA(10).plan(lazy((1_000_000, 20_000), (200, 20_000)))
    assert plan.memory_source == "from the distributed workers' memory limits"
    assert plan.task_memory_budget == int(0.5 * 512 * 2**20 / 2)
    assert not plan.estimate("covariance").feasible  # 20k² float64 = 3.2 GB per matrix
    assert plan.solver == "krylov"


def test_requested_solver_that_cannot_fit_names_the_limit_and_an_alternative():
    with LocalCluster(n_workers=1, threads_per_worker=1, memory_limit="256MiB", processes=False,
                      dashboard_address=None) as cluster, Client(cluster):
        with pytest.raises(ValueError, match=r"solver='covariance' needs about .* GiB in one task .* budget of 128.0 MiB.*Use solver='(randomized|als)'"):
            PCA(5, solver="covariance").fit(lazy((100_000, 30_000), (100, 30_000)))


def test_ill_conditioned_data_warns_and_points_to_tsqr():
    rng = np.random.default_rng(0)
    u, _ = np.linalg.qr(rng.standard_normal((2_000, 12)))
    v, _ = np.linalg.qr(rng.standard_normal((12, 12)))
    s = np.logspace(0, -10, 12)  # κ = 1e10
    X = (u * s) @ v.T
    with pytest.warns(IllConditionedWarning, match=r"below 1e-10.*solver='tsqr'"):
        PCA(12, solver="covariance").fit(X)
    tsqr = PCA(12, solver="tsqr").fit(X)
    reference = np.linalg.svd(X - X.mean(0), compute_uv=False)
    np.testing.assert_allclose(tsqr.singular_values_[-1], reference[-1], rtol=1e-6)
    assert ILL_CONDITIONED_RATIO == 1e-10


def test_plan_reads_nothing(tmp_path):
    from _helpers import low_rank_data, write_zarr

    array, store = write_zarr(tmp_path / "x.zarr", low_rank_data(500, 10), (100, 10))
    PCA(3).plan(array)
    assert not store.chunk_reads()


@pytest.mark.parametrize("rows", [300, 1_200])  # merge-bound (blocks of d rows), leaf-bound (4·d)
def test_tsqr_task_memory_is_the_largest_measured_task(rows):
    # Peak traced memory of every task of the real TSQR graph (inputs included), against the
    # planner's estimate of the largest one. Fan-in-8 merges measured 33·d² against a plan of 11.5·d².
    from daskpca._plan import estimate_solvers
    from daskpca.solvers import tsqr

    d = 300
    X = da.from_array(np.random.default_rng(0).standard_normal((16 * rows, d)).astype(np.float32), chunks=(rows, d))
    largest = largest_task_bytes(tsqr.r_graph(X), tsqr._RPart, tsqr.r_graph(X[:40, :8]))
    (estimate,) = estimate_solvers(*X.shape, 5, X.chunks, 4, available=("tsqr",))
    assert largest / 1.5 <= estimate.task_bytes <= 1.5 * largest, (estimate.task_bytes / (8 * d * d), largest / (8 * d * d))


@pytest.mark.parametrize("shape, rows", [((40_000, 300), 8_000), ((4_000, 3_000), 800)])  # slab-bound, factor-bound
def test_randomized_task_memory_is_the_largest_measured_task(shape, rows, monkeypatch):
    # A randomized leaf holds its block, one float64 slab and up to SPLIT_EVERY d×(ℓ + 1) partial
    # factors; the planner's per-task estimate must be the largest task of one real pass.
    from daskpca._plan import estimate_solvers
    from daskpca.passes import _sketch

    # The slab buffer is reused per thread; allocate it per leaf here so the trace sees it.
    monkeypatch.setattr(_sketch, "_scratch", lambda n_rows, n_features: np.empty((n_rows, n_features)))

    X = da.from_array(np.random.default_rng(0).standard_normal(shape).astype(np.float32), chunks=(rows, shape[1]))
    k, p = 20, 10
    omega = np.random.default_rng(1).standard_normal((shape[1], k + p))
    largest = largest_task_bytes(_sketch.pass_graph(X, omega), _sketch._Sketch, _sketch.pass_graph(X[:100, :40], omega[:40]))
    (estimate,) = estimate_solvers(*X.shape, k, X.chunks, 4, n_oversamples=p, available=("randomized",))
    assert largest / 1.5 <= estimate.task_bytes <= 1.5 * largest, (estimate.task_bytes / 2**20, largest / 2**20)


# ---- accuracy asked for (tol): the fastest solver that guarantees it --------------------------


def test_predicted_krylov_passes_follow_tol_and_the_budget():
    from daskpca.solvers.krylov import DEFAULT_PASSES, predicted_passes

    from daskpca.solvers.krylov import predicted_pass_range

    # Between the measured ends of EOF spectra (krylov's module notes): the reanalysis year (4 and
    # 5 passes for 1e-4 and 1e-6) and the hard 4e4 × 1e4 field (7 and 9 with the refined bound):
    # the point estimate within 1.5× of both, the range from 2 to the budget.
    assert [predicted_passes(t) for t in (1e-2, 1e-4, 1e-6)] == [4, 5, 7]
    assert predicted_passes(None) == DEFAULT_PASSES and predicted_passes(1e-6, 6) == 6
    assert predicted_pass_range(1e-4) == (2, 5, 20) and predicted_pass_range(None, 5) == (5, 5, 5)
    plan = PCA(10, tol=1e-4, solver="krylov").plan(lazy((40_000, 10_000), (2_000, 10_000)))
    note = plan.estimate("krylov").note
    assert plan.estimate("krylov").passes == 5 and "tol = 0.0001" in note and "2–20 possible" in note
    assert "accuracy asked: sin θ ≤ 0.0001" in str(plan)


@pytest.mark.parametrize(
    "shape, chunks, tol, expected",
    [
        ((40_000, 10_000), (2_000, 10_000), 1e-4, "krylov"),  # both large: 7 reads beat n·d² + d³
        ((1_000_000, 500), (20_000, 500), 1e-4, "covariance"),  # tall, small d: one exact pass wins
        ((100_000, 4_000), (5_000, 4_000), 1e-2, "krylov"),  # a loose tol: 4 reads beat 1.6e12 flops
        ((100_000, 4_000), (5_000, 4_000), 1e-8, "covariance"),  # a tight one: exact is cheaper
        ((2_000, 200_000), (2_000, 10_000), 1e-4, "gram"),  # wide, small n: the Gram trick
    ],
)
def test_tol_picks_the_fastest_solver_that_guarantees_it(shape, chunks, tol, expected):
    plan = PCA(10, tol=tol).plan(lazy(shape, chunks))
    assert plan.solver == expected, str(plan)
    assert f"tol = {tol:g}" in plan.reason
    chosen = plan.estimate(expected)
    for other in plan.estimates:  # nothing that guarantees tol is predicted faster
        if other.name in ("covariance", "gram", "tsqr") and other.feasible:
            assert chosen.seconds <= other.seconds


@pytest.mark.parametrize(
    "shape, chunks, expected",
    [
        ((1_000_000, 500), (20_000, 500), "covariance"),  # tall: one exact pass at the read floor
        ((2_000, 200_000), (2_000, 10_000), "gram"),  # wide in column strips: two passes, small n²·d
        ((40_000, 10_000), (2_000, 10_000), "krylov"),  # n·d² + d³ cost several times the certified road
    ],
)
def test_without_tol_auto_is_exact_only_where_it_costs_about_the_certified_road(shape, chunks, expected):
    from daskpca._plan import DEFAULT_TOL, EXACT_PREMIUM

    plan = PCA(10).plan(lazy(shape, chunks))
    assert plan.solver == expected, str(plan)
    krylov = plan.estimate("krylov")
    assert "tol = 1e-06" in krylov.note  # the certified road is costed for the default accuracy
    exact = min((e for e in plan.estimates if e.exact and e.feasible), key=lambda e: e.seconds)
    if expected == "krylov":
        assert exact.seconds > EXACT_PREMIUM * krylov.seconds
        assert plan.default_tol == DEFAULT_TOL and "sin θ ≤ 1e-06, the default" in str(plan)
        assert "default accuracy" in plan.reason and not plan.warnings
    else:
        assert plan.estimate(expected).seconds <= EXACT_PREMIUM * krylov.seconds and plan.default_tol is None
        assert "exact at about the cost of a certified answer" in plan.reason


def test_forced_exact_solvers_stay_exact_without_tol():
    for solver in ("covariance", "gram", "tsqr"):
        plan = PCA(10, solver=solver).plan(lazy((4_000, 1_000), (500, 1_000)))
        assert plan.solver == solver and plan.default_tol is None and "accuracy asked: none" in str(plan)


def test_tol_beyond_the_budget_falls_back_to_exact_or_warns():
    # max_passes = 3 cannot reach 1e-6 (predicted 10): the exact solver is chosen where it fits...
    assert PCA(10, tol=1e-6, max_passes=3).plan(lazy((40_000, 2_000), (2_000, 2_000))).solver == "covariance"
    # ... and where nothing exact fits, Krylov runs with a warning in the plan.
    plan = PCA(10, tol=1e-6, max_passes=3).plan(lazy((1_000_000, 100_000), (2_000, 100_000)))
    assert plan.solver == "krylov" and any("may not be reached" in w for w in plan.warnings)


@pytest.mark.parametrize("d", [300])
def test_covariance_task_memory_is_the_largest_measured_task(d):
    # Pairwise in-place merges: a merge holds its two inputs and one output (3·d²); a leaf its
    # block, a float64 copy and d². Measured against the planner's estimate of the largest task.
    from daskpca.passes._moments import Moments
    from daskpca._plan import estimate_solvers
    from daskpca.solvers import covariance

    X = da.from_array(np.random.default_rng(0).standard_normal((16 * 100, d)).astype(np.float32), chunks=(100, d))
    largest = largest_task_bytes(covariance.moments_graph(X), Moments, covariance.moments_graph(X[:40, :8]))
    (estimate,) = estimate_solvers(*X.shape, 5, X.chunks, 4, available=("covariance",))
    assert largest / 1.5 <= estimate.task_bytes <= 1.5 * largest, (estimate.task_bytes / (8 * d * d), largest / (8 * d * d))
    assert estimate.task_bytes <= 3.2 * 8 * d * d


@pytest.mark.parametrize("shape, width", [((2_000, 3_000), 1_000), ((300, 40_000), 10_000)])  # merge-bound, strip-bound
def test_gram_task_memory_is_the_largest_measured_task(shape, width):
    # Leaves hold their strip, a float64 copy and n²; pairwise merges three n×n matrices.
    from daskpca._plan import estimate_solvers
    from daskpca.solvers import gram

    X = da.from_array(np.random.default_rng(0).standard_normal(shape).astype(np.float32), chunks=(shape[0], width))
    largest = largest_task_bytes(gram.gram_graph(X), gram._GramPart, gram.gram_graph(X[:40, :8]))
    (estimate,) = estimate_solvers(*X.shape, 5, X.chunks, 4, available=("gram",))
    assert largest / 1.5 <= estimate.task_bytes <= 1.5 * largest, (estimate.task_bytes / 2**20, largest / 2**20)


def test_the_default_road_weighs_the_pass_cache(tmp_path):
    # An hourly year stored one step per chunk (metadata only: nothing is read). Read from the
    # store on every pass, 7 predicted certified Krylov passes cost ~0.6× the exact Gram road; with
    # later passes served from memory (their flops only) Krylov is several times cheaper — the
    # plan must weigh what each road really costs, not the uncached Krylov.
    import dask.array as da
    import zarr

    zarr.create_array(store=str(tmp_path / "year.zarr"), shape=(8760, 65160), chunks=(1, 65160), dtype="float32")
    year = da.from_zarr(str(tmp_path / "year.zarr"))
    cached, uncached = PCA(20).plan(year), PCA(20, cache=False).plan(year)
    assert cached.solver == "krylov" and cached.cache.kind == "memory", str(cached)
    krylov = cached.estimate("krylov")
    assert krylov.seconds < krylov.uncached_seconds == uncached.estimate("krylov").seconds
    assert cached.seconds == krylov.seconds and "against" in cached.reason
    assert uncached.cache.kind is None and uncached.estimate("gram").seconds > 1.25 * uncached.estimate("krylov").seconds, str(uncached)


def test_on_a_cluster_each_pass_also_moves_its_tasks_results():
    # A distributed pass serialises every task's result to the worker that merges it: the plan
    # counts tasks × result bytes a pass at TRANSFER_BYTES_PER_SECOND (the Krylov fit of the
    # reanalysis field on 2 × 1 GiB workers was 1.4–1.5× longer than planned without it).
    from daskpca._plan import TRANSFER_BYTES_PER_SECOND, estimate_solvers, predicted_seconds

    n, d, k = 8760, 65_160, 20
    chunks = ((337,) * 26, (d,))
    (krylov,) = estimate_solvers(n, d, k, chunks, 4, available=("krylov",), tol=1e-6)
    assert krylov.result_bytes == (k + 10 + 1) * d * 8
    local, cluster = (predicted_seconds(krylov, n, d, 4, threads=2, distributed=flag) for flag in (False, True))
    moved = krylov.passes * 26 * krylov.result_bytes / TRANSFER_BYTES_PER_SECOND
    assert cluster - local == pytest.approx(moved, rel=1e-9) and moved > 5


# ---- the plan's probe (daskpca._probe, issue 41) -------------------------------------------------


@pytest.mark.parametrize("storage_rows, chunks_read", [(1, 20), (500, 4)])
def test_the_probe_reads_at_most_one_percent_of_the_rows_and_the_plan_says_so(tmp_path, monkeypatch, storage_rows,
                                                                               chunks_read):
    """One row per chunk: every 100th row, 20 chunks; row blocks larger than 1 % of n: a slice of
    5 rows from each of 4 blocks spread along the samples. Without probe= nothing is read."""
    from _helpers import write_zarr

    n, d, k = 2000, 30, 4
    X = spectral_data(np.concatenate([np.geomspace(10, 1, k), 0.9 * np.linspace(1, 0.8, d - k)]), n, d)
    array, store = write_zarr(tmp_path / "x.zarr", X, (storage_rows, d))
    estimator = PCA(k, solver="krylov", tol=1e-4)
    plain = estimator.plan(array)
    assert not store.chunk_reads() and plain.probe is None
    plan = estimator.plan(array, probe=True)
    reads = store.chunk_reads()
    assert plan.probe.rows == 20 <= 0.01 * n and plan.probe.chunks == chunks_read
    assert len(reads) == chunks_read and max(reads.values()) == 1  # each chunk once
    if storage_rows == 1:  # spread evenly: one row in every hundred
        rows = sorted(int(key.split("/")[-2]) for key in reads)
        assert np.all(np.diff(rows) == 100)
    assert f"probed: 20 of {n} rows (1.0 %), point estimate {plan.probe.passes} passes from their spectrum" in str(plan)
    # The plan counts the probed passes (the prior's were 5) and their time: what a plan of that
    # many passes costs (the first pass's read and keep not scaled by the count, the client's
    # work grown as it grows), plus the probe's read of 1 % of a pass.
    assert plan.passes == plan.probe.passes != plain.passes == plan.probe.prior == 5
    monkeypatch.setattr(krylov, "predicted_passes", lambda tol, max_passes=None: plan.probe.passes)
    same = estimator.plan(array)
    assert same.passes == plan.passes and same.estimate("krylov").client_flops == plan.estimate("krylov").client_flops
    assert plan.seconds == pytest.approx(same.seconds + 0.01 * plain.estimate("krylov").pass_seconds, rel=1e-9)


def _case(name, draw=0):
    """One of the probe's fields (``draw``: another draw of the same spectrum, new rows)."""
    n, d, k = 2400, 200, 10
    if name in ("reanalysis", "archive"):  # modes above white noise at its Marchenko–Pastur edge
        # The archive: few rows probed against many features (20 of 2000 rows, d = 1500: the probe's
        # d/m is 79), as a one-step-per-chunk store of a gridded field gives.
        n, d, k = (2000, 1500, 10) if name == "archive" else (n, d, 20)
        rng = np.random.default_rng(3 + draw)
        edge = (np.sqrt(d) + np.sqrt(n)) ** 2 / n
        modes = np.linalg.qr(rng.standard_normal((d, k)))[0].T
        X = (rng.standard_normal((n, k)) * np.sqrt(edge * (1.5 + 30 * 0.8 ** np.arange(k)))) @ modes
        return X + rng.standard_normal((n, d)) + 280, k
    variances = {"rate 0.5": 0.5 ** np.arange(d), "rate 0.8": 0.8 ** np.arange(d),
                 "continuum": np.concatenate([np.geomspace(10, 1, k), 0.9 * np.linspace(1, 0.8, d - k)]),
                 "plateau": np.concatenate([np.geomspace(30, 1.5, k), np.ones(5), np.geomspace(0.5, 1e-3, d - k - 5)])}
    return spectral_data(variances[name], n, d, seed=draw), k


@pytest.mark.parametrize("name", ["rate 0.5", "rate 0.8", "continuum", "plateau", "reanalysis", "archive"])
@pytest.mark.parametrize("tol", [1e-4, 1e-6])
def test_the_probes_point_estimate_is_within_one_and_a_half_times_the_passes_made(name, tol):
    """1 % of the rows (24 of 2400; the archive's 20 of 2000 against 1500 features) predict the
    passes block Krylov makes within 1.5× on fast decay, a continuum just below λ_k, a plateau, a
    reanalysis-like field and an archive-like one (spikes over white noise, m ≪ d); the fit given
    the probed plan shows an ETA from the probe from its first pass."""
    from daskpca.passes._progress import listen

    X, k = _case(name)
    estimator = PCA(k, solver="krylov", tol=tol, random_state=0)
    plan = estimator.plan(X, probe=True)
    starts = []
    with listen(lambda report: starts.append(report) if report.seconds is None else None):
        made = estimator.fit(X, plan=plan).n_passes_
    assert plan.probe.rows == X.shape[0] // 100 and plan.probe.passes is not None
    assert 1 / 1.5 <= plan.probe.passes / made <= 1.5, (plan.probe.passes, made, plan.probe.prior)
    # The plan names the model its estimate rests on: white noise under the fields' spikes, a
    # coloured tail under the others.
    model = "over white noise σ² = " if name in ("reanalysis", "archive") else "the sample spectrum less its floor"
    if name != "continuum":  # its tail is nearly white (0.9 → 0.72): either model may be chosen
        assert model in plan.probe.describe()
    assert starts[0].learnt == 0 and starts[0].predicted == plan.probe.passes and starts[0].source is None
    if made > 2:
        assert starts[1].describe().endswith("left (ETA from the probe)")


def _twin(X, probed_rows, omega, modes, factor):
    """X with the rows the probe reads kept, the mean, trace C and C·Ω kept (Ω the first pass's
    start block, d × ℓ orthonormal), and C's ``modes`` raised by ``factor`` on the directions
    orthogonal to Ω: C' = C + Δ with Δ·Ω = 0 and trace Δ = 0. The other rows are re-mixed
    (Z·M, M = G^-1/2·(G + Δ)^1/2 for their centred Gram G), so their sum and the probed rows stay."""
    d, ell = X.shape[1], omega.shape[1]
    mean = X.mean(axis=0)
    centered = X - mean
    values, vectors = np.linalg.eigh(centered.T @ centered)
    values, vectors = values[::-1], vectors[:, ::-1]
    outside = np.eye(d) - omega @ omega.T
    raised = outside @ vectors[:, modes] * np.sqrt((factor - 1) * values[modes])
    delta = raised @ raised.T - np.trace(raised @ raised.T) / (d - ell) * outside
    rest = np.ones(len(X), dtype=bool)
    for start, stop in probed_rows:
        rest[start:stop] = False
    shift = centered[rest].mean(axis=0)
    Z = centered[rest] - shift
    gram_values, gram_vectors = np.linalg.eigh(Z.T @ Z)
    new_values, new_vectors = np.linalg.eigh(Z.T @ Z + delta)
    assert new_values.min() > 0  # a scatter rows can have
    mixing = (gram_vectors / np.sqrt(gram_values)) @ gram_vectors.T @ (new_vectors * np.sqrt(new_values)) @ new_vectors.T
    twin = X.copy()
    twin[rest] = mean + shift + Z @ mixing
    return twin


def test_fields_the_probe_and_the_first_pass_cannot_tell_apart_take_4_8_and_10_passes(monkeypatch):
    """Why the ETA after pass 1 cannot be within 1.25× on every field, nor the plan's estimate
    within 1.5×, from what a first fit has seen by then. That is the probe's rows, and from pass 1
    C·Ω, trace C and the mean (the sketch's R and H are functions of C·Ω). The continuum (k = 10 over a
    continuum 0.9 → 0.72 of λ_k; 2400 × 200, tol 1e-4) has two twins that keep all of it. Every
    other row is re-mixed so that C' = C + Δ with Δ·Ω = 0 and trace Δ = 0 (:func:`_twin`). Raising
    the signal 3× on the directions Ω misses gives a fit of 4 passes; raising the continuum's top
    40 modes 1.1× gives one of 10, where the field itself takes 8. Any prediction made from those
    observations is the same for all three, so after pass 1 it is off by more than 1.25² on one of
    them (3 passes left against 9), and the plan's by more than 1.5² (4 against 10). The probe,
    given 1 % of the rows, predicts 6 for all three. An earlier fit of the same field
    (``plan(X, probe=model)``) is what tells them apart (tests below)."""
    from daskpca import _probe
    from daskpca.passes._progress import listen

    X, k = _case("continuum")
    seen = {}
    probe_rows, run_pass = _probe.probe_rows, krylov.run_pass

    def recorded_rows(*args, **kwargs):
        seen["rows"] = probe_rows(*args, **kwargs)
        return seen["rows"]

    def recorded_pass(source, block, first):
        root = run_pass(source, block, first=first)
        if first:
            seen.update(omega=block.copy(), image=root.ht.T @ root.r, total=root.m2, mean=root.mean)
        return root

    monkeypatch.setattr(_probe, "probe_rows", recorded_rows)
    monkeypatch.setattr(krylov, "run_pass", recorded_pass)

    def fit(data):
        estimator = PCA(k, solver="krylov", tol=1e-4, random_state=0)
        plan = estimator.plan(data, probe=True)
        shown = []  # the passes predicted when pass 2 starts: what the ETA after pass 1 counts
        with listen(lambda report: shown.append(report.predicted) if report.seconds is None else None):
            made = estimator.fit(data, plan=plan).n_passes_
        observed = {key: seen[key] for key in ("rows", "omega", "image", "total", "mean")}
        return plan.probe, made, shown[1], observed

    probe, made, after_one, observed = fit(X)
    fast = _twin(X, observed["rows"], observed["omega"], np.arange(k), 3.0)
    slow = _twin(X, observed["rows"], observed["omega"], np.arange(k, k + 40), 1.1)
    counts = [made]
    for twin in (fast, slow):
        for start, stop in observed["rows"]:
            np.testing.assert_array_equal(twin[start:stop], X[start:stop])  # the probe reads the same rows
        twin_probe, twin_made, twin_after_one, twin_observed = fit(twin)
        np.testing.assert_array_equal(twin_observed["omega"], observed["omega"])
        np.testing.assert_allclose(twin_observed["image"], observed["image"], rtol=0, atol=1e-11 * np.abs(observed["image"]).max())
        np.testing.assert_allclose(twin_observed["mean"], observed["mean"], rtol=1e-12, atol=1e-12)
        assert twin_observed["total"] == pytest.approx(observed["total"], rel=1e-12)
        assert (twin_probe.passes, twin_after_one) == (probe.passes, after_one)  # the same prediction
        counts.append(twin_made)
    assert (counts[2] - 1) / (counts[1] - 1) > 1.25**2  # no ETA after pass 1 within 1.25x of both
    assert counts[2] / counts[1] > 1.5**2  # no plan within 1.5x of both


def test_a_tail_the_probes_rows_cannot_resolve_is_modelled_from_its_bulks_moments():
    """160 rows of 2000 features (1 % of 16 000): a plateau of five modes under λ_k = 1.5·(its level)
    and a tail decaying to 1e-3 lift every sample value by the tail's variance over the rows, and
    the bulk's top (2.0–2.5 here) is that spread's, not a mode after λ_k. Less its smallest value
    (the floor model) the head and that top gave a gap of ~1.04 and 10 passes for tol 1e-4; from
    the bulk's mean and its first two moments (effective rank within 15 % of the tail's) the
    probe predicts what the same simulation makes on the true spectrum. A tail the rows resolve
    (fast decay) keeps the floor model, which continues the sample's own trailing values."""
    from daskpca._probe import sample_spectrum, unresolved_tail, without_floor

    n, d, k, m, tol = 16_000, 2_000, 10, 160, 1e-4
    rng = np.random.default_rng(0)
    plateau = np.concatenate([np.geomspace(30, 1.5, k), np.ones(5), np.geomspace(0.5, 1e-3, d - k - 5)])
    fast = 0.8 ** np.arange(d)
    for variances, resolved in ((plateau, False), (fast, True)):
        rows = rng.standard_normal((m, d)) * np.sqrt(variances)  # any rotation: the probe sees only the spectrum
        values, total, _ = sample_spectrum(rows, n)
        scatter = variances * (n - 1)
        made = len(krylov.simulated_passes(*krylov.binned_spectrum(scatter[:k], scatter[k:], k), k, k + 10, tol, 20, n))
        floor = len(krylov.simulated_total(without_floor(values), total, d, k, k + 10, tol, 20, n))
        tail = unresolved_tail(values, total, k, d)
        if resolved:
            assert tail is None and floor == made
            continue
        tail_rank = np.sum(variances[k:]) ** 2 / np.sum(variances[k:] ** 2)
        assert tail is not None and abs(tail[2] / tail_rank - 1) < 0.15
        assert len(krylov.simulated_passes(*tail[:2], k, k + 10, tol, 20, n)) == made == 6 < floor


def test_the_spiked_model_recovers_the_noise_and_the_spikes_from_their_sample_eigenvalues():
    """Baik–Silverstein's map inverted: 400 rows of 8000 features (γ = 20: the sample spikes sit
    at 1.2–2× their population values, the bulk at σ²(√γ ∓ 1)²) give back σ² and the spike strengths
    s = λ − σ² within their sampling error (√(2/m) ≈ 7 %); without spikes nothing is modelled, and a
    coloured tail (σ_i² = 1/i) is not taken for white noise."""
    from daskpca._probe import sample_spectrum, spikes_over_white_noise

    rng = np.random.default_rng(0)
    n, m, d, sigma2 = 40_000, 400, 8000, 2.0
    strengths = np.array([400.0, 200.0, 100.0, 40.0])
    modes = np.linalg.qr(rng.standard_normal((d, strengths.size)))[0]
    rows = (rng.standard_normal((m, strengths.size)) * np.sqrt(strengths)) @ modes.T
    rows += np.sqrt(sigma2) * rng.standard_normal((m, d))
    values, total, features = sample_spectrum(rows, n)
    model = spikes_over_white_noise(values, total, n, m, features)
    assert model is not None and model.noise == pytest.approx(sigma2, rel=0.02)
    np.testing.assert_allclose(model.strengths, strengths, rtol=0.25)
    assert "4 spikes over white noise σ² = 2" in model.describe(4)
    noise_only = sample_spectrum(np.sqrt(sigma2) * rng.standard_normal((m, d)), n)
    assert spikes_over_white_noise(*noise_only[:2], n, m, d) is None  # nothing above the edge
    coloured = sample_spectrum(rng.standard_normal((m, d)) / np.sqrt(np.arange(1, d + 1)), n)
    assert spikes_over_white_noise(*coloured[:2], n, m, d) is None


@pytest.mark.parametrize("case", ["constant", "n < 200", "computed"])
def test_a_degenerate_probe_keeps_the_prior_and_says_why(case):
    n, d = (150, 20) if case == "n < 200" else (2000, 20)
    rng = np.random.default_rng(0)
    X = np.full((n, d), 3.0) if case == "constant" else rng.standard_normal((n, d))
    if case == "computed":  # a dask computation, not a stored read: a row sample would compute whole blocks
        X = da.from_array(X, chunks=(500, d)) * 2.0
    plan = PCA(4, solver="krylov", tol=1e-4).plan(X, probe=True)
    reason = {"constant": "no variance (constant)", "n < 200": "n = 150 samples: 1 % of them is less than 2 rows",
              "computed": "not a plain stored array"}[case]
    assert plan.probe.passes is None and reason in plan.probe.reason
    assert plan.passes == plan.probe.prior == 5 and "the prior point estimate stands" in str(plan)


def test_rows_dask_computes_are_probed_where_they_need_few_of_its_blocks(tmp_path):
    """A cube of one time step per chunk read as da.from_zarr(cube).reshape(n, -1) (its rows
    computed by dask, joined into task blocks by the pass geometry): the probe computes its 1 % of
    the rows from the blocks they come from, reading only their storage chunks, once each. Rows a
    rechunk joins from column strips would compute most of the graph: not probed, nothing read,
    and the plan says why; not probed unasked either."""
    import zarr
    from zarr.storage import LocalStore

    from _helpers import CountingStore
    from daskpca import _probe

    n, k = 3000, 4
    X = spectral_data(np.concatenate([np.geomspace(10, 1, k), 0.9 * np.linspace(1, 0.8, 48 - k)]), n, 48)
    zarr.create_array(store=LocalStore(tmp_path / "cube.zarr"), shape=(n, 6, 8), chunks=(1, 6, 8), dtype="f8")[...] = \
        X.reshape(n, 6, 8)
    store = CountingStore(LocalStore(tmp_path / "cube.zarr", read_only=True))
    cube = da.from_zarr(zarr.open_array(store, mode="r")).reshape(n, 48)
    plan = PCA(k, solver="krylov", tol=1e-4).plan(cube, probe=True)
    reads = store.chunk_reads()
    assert plan.geometry.read == "concatenated" and plan.probe.passes is not None  # joined blocks, yet probed
    assert plan.probe.rows == 30 and len(reads) == 30 and max(reads.values()) == 1  # 1 % of the steps, once each
    assert _probe.affordable(cube)  # a watched fit probes it unasked
    strips = CountingStore(LocalStore(tmp_path / "strips.zarr"))
    zarr.create_array(store=strips, shape=(n, 48), chunks=(n, 8), dtype="f8")[...] = X
    strips = CountingStore(LocalStore(tmp_path / "strips.zarr", read_only=True))
    rows = da.from_zarr(zarr.open_array(strips, mode="r")).rechunk((100, 48))
    refused = PCA(k, solver="krylov", tol=1e-4).plan(rows, probe=True)
    assert refused.probe.passes is None and "not a plain stored array" in refused.probe.reason
    assert "% of its graph's tasks" in refused.probe.reason and not strips.chunk_reads()
    assert not _probe.affordable(rows)


def test_a_pass_is_priced_for_the_storage_chunks_its_tasks_read_one_call_each(tmp_path):
    # Issue 41: a store of one time step per chunk read through da.from_zarr(...).reshape joins
    # its blocks into each task: every block is a task and a zarr call of its own (serialised),
    # which the plan counted as nothing (planned 0.87 s, fitted in 9.2 s at 3000 steps).
    import dask.array as da
    import zarr

    from daskpca import _plan

    n, d = 600, 48
    z = zarr.create_array(store=str(tmp_path / "steps.zarr"), shape=(n, 6, 8), chunks=(1, 6, 8), dtype="f4")
    z[:] = np.random.default_rng(0).standard_normal((n, 6, 8))
    stored = da.from_zarr(z).reshape(n, d)
    in_memory = da.from_array(np.asarray(z[:]).reshape(n, d), chunks=(1, d))
    plans = {name: PCA(4, solver="covariance", cache=False).plan(X) for name, X in (("stored", stored), ("memory", in_memory))}
    for plan in plans.values():
        assert plan.geometry.read == "concatenated" and plan.geometry.storage_chunks == n
    extra = plans["stored"].seconds - plans["memory"].seconds  # one pass: the zarr calls, nothing else differs
    assert extra == pytest.approx(n * _plan.CHUNK_CALL_SECONDS, rel=1e-9)
    assert plans["memory"].seconds > n * _plan.BLOCK_SECONDS
    # Read by one zarr selection per task, a chunk costs a fraction of that; read as stored, the
    # tasks themselves are counted (TASK_SECONDS).
    selection = _plan.Geometry(storage_rows=1, task_rows=300, tasks=4, storage_chunks=n, read="selection")
    assert _plan.chunk_seconds(selection, stored=True) == pytest.approx(n * _plan.SELECTION_CHUNK_SECONDS)
    as_stored = _plan.Geometry(storage_rows=1, task_rows=1, tasks=n, storage_chunks=n, read="as stored")
    assert _plan.chunk_seconds(as_stored, stored=True) == 0.0
    assert _plan.chunk_seconds(plans["stored"].geometry, stored=True, processes=4) == pytest.approx(
        n * (_plan.CHUNK_CALL_SECONDS + _plan.BLOCK_SECONDS) / 4)


# ---- the spectrum of an earlier fit of the same model (daskpca._probe.from_model, issue 41) -------


@pytest.mark.parametrize("name", ["rate 0.8", "continuum", "plateau", "reanalysis", "archive"])
@pytest.mark.parametrize("tol", [1e-4, 1e-6])
def test_an_earlier_fits_spectrum_predicts_a_new_draws_passes_within_one(name, tol, monkeypatch):
    """A block Krylov model of one draw predicts the passes of a fit on another draw of the same
    field (a next year, a scheduled refit) within one, reading nothing: on the continuum just
    below λ_k, where 1 % of the rows predicts 6 and 8 for 8 and 10, as on the others (the count
    made on all ten here); the fit shows that count from its first pass and, on its course, spends
    no client time simulating itself."""
    from daskpca.passes._progress import listen

    X, k = _case(name)
    earlier = PCA(k, solver="krylov", tol=tol, random_state=0).fit(X)
    assert len(earlier.solver_info_["ritz_values"]) == earlier.solver_info_["sketch_size"]
    Y, _ = _case(name, draw=1)
    estimator = PCA(k, solver="krylov", tol=tol, random_state=1)
    plan = estimator.plan(Y, probe=earlier)
    starts, simulated = [], []
    monkeypatch.setattr(krylov, "simulated_total", lambda *args, **kwargs: simulated.append(args))
    with listen(lambda report: starts.append(report) if report.seconds is None else None):
        made = estimator.fit(Y, plan=plan).n_passes_
    assert not simulated and all(report.learnt == 0 or report.number > 3 for report in starts)
    assert plan.probe.rows == 0 and plan.probe.earlier and plan.probe.passes is not None
    assert abs(plan.probe.passes - made) <= 1, (plan.probe.passes, made)
    assert plan.passes == plan.probe.passes and "(nothing read)" in str(plan)
    assert f"its block Krylov fit's {k + 10} leading Ritz values" in plan.probe.describe()
    assert starts[0].learnt == 0 and starts[0].predicted == plan.probe.passes
    assert abs(starts[0].predicted - made) <= 1
    assert starts[1].describe().endswith("left (ETA from an earlier fit)")  # named, not "the probe"


def test_an_exact_fits_spectrum_predicts_the_passes_and_a_saved_model_is_read_by_its_path(tmp_path):
    """The covariance solver's model knows λ_{k+1} (and its whole spectrum where it kept one):
    either predicts a continuum's passes within one. A saved model is named by its store and
    version, and the plan reads none of the new data."""
    from _helpers import write_zarr

    X, k = _case("continuum")
    Y, _ = _case("continuum", draw=1)
    made = PCA(k, solver="krylov", tol=1e-4, random_state=1).fit(Y).n_passes_
    array, store = write_zarr(tmp_path / "y.zarr", Y, (1, Y.shape[1]))
    for earlier in (PCA(k, solver="covariance").fit(X), PCA(0.99, solver="covariance").fit(X)):
        plan = PCA(k, solver="krylov", tol=1e-4).plan(array, probe=earlier)
        assert abs(plan.probe.passes - made) <= 1, (plan.probe.passes, made, plan.probe.model)
    assert "exact spectrum (200 values)" in plan.probe.model
    PCA(k, solver="krylov", tol=1e-4).fit(X).save(tmp_path / "model.zarr")
    plan = PCA(k, solver="krylov", tol=1e-4).plan(array, probe=tmp_path / "model.zarr")
    assert not store.chunk_reads()
    assert abs(plan.probe.passes - made) <= 1
    assert f"probed: the spectrum of the model at '{tmp_path / 'model.zarr'}' (version " in str(plan)


@pytest.mark.parametrize("case", ["other features", "standardized", "weighted", "no bound", "too few", "no tol",
                                  "edited"])
def test_an_earlier_model_that_cannot_tell_keeps_the_prior_and_says_why(case):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((500, 20)) * np.linspace(3, 1, 20)
    params = dict(solver="krylov", tol=None if case == "no tol" else 1e-4)
    earlier = {"no bound": PCA(6, solver="randomized", random_state=0), "too few": PCA(4, solver="covariance"),
               "standardized": PCA(4, solver="covariance", standardize=True),
               "weighted": PCA(4, solver="covariance", weights=np.linspace(1, 2, 20))}.get(case, PCA(6, solver="krylov"))
    earlier.fit(X[:, :10] if case == "other features" else X)
    if case == "edited":  # a model's JSON edited by hand (read with verify=False): a prediction, not an error
        earlier.solver_info_["ritz_values"] = ["nan", "x"]
        earlier.explained_variance_ = np.array([np.inf, 1.0, 1.0, 1.0, 1.0, 1.0])
    plan = PCA(5 if case == "too few" else 4, **params).plan(X, probe=earlier)
    reason = {"other features": "it was fitted on 10 features, this input has 20: not the same field",
              "standardized": "it was fitted with standardize=True, this fit asks standardize=False",
              "weighted": "it weighted its features otherwise than this fit asks (weights=)",
              "no bound": "its variances carry no error bound under 0.1 (solver 'randomized'",
              "too few": "it knows 5 leading variances (solver 'covariance'); k = 5 and the one after need 6",
              "no tol": "no tol: block Krylov reads its budget of 8 passes",
              "edited": "its recorded variances are not finite non-negative numbers (a damaged or edited model)"}[case]
    assert plan.probe.passes is None and reason in plan.probe.reason, plan.probe.reason
    assert plan.passes == plan.probe.prior and "(nothing read); no point estimate from it" in str(plan)


def test_a_watched_fit_probes_its_rows_where_the_earlier_model_could_not_tell():
    from daskpca.passes._progress import listen

    X, k = _case("plateau")
    plan = PCA(k, solver="krylov", tol=1e-4).plan(X, probe=PCA(k, solver="randomized").fit(X))
    with listen(lambda report: None):
        model = PCA(k, solver="krylov", tol=1e-4).fit(X, plan=plan)
    assert plan.probe.passes is None and model._fit_plan.probe.rows == 24 and not model._fit_plan.probe.earlier


def test_an_earlier_model_of_another_kind_or_form_is_refused_by_name():
    from daskpca import HilbertPCA
    from daskpca.exceptions import InputError

    X = np.random.default_rng(0).standard_normal((400, 12))
    with pytest.raises(InputError, match=r"is a HilbertPCA model; this plan is a PCA's"):
        PCA(3, solver="krylov", tol=1e-4).plan(X, probe=HilbertPCA(3).fit(X))
    with pytest.raises(InputError, match=r"probe=3: expected True \(read ≤ 1 % of the rows\), False, or an earlier fit"):
        PCA(3, solver="krylov", tol=1e-4).plan(X, probe=3)


def test_a_watched_refit_predicts_its_passes_from_its_own_last_fit(tmp_path):
    """A fitted (or loaded) PCA refitted on the next draw of its field, watched, predicts from its
    own last fit's spectrum and reads no rows for it; refitted on another field, it probes rows."""
    from daskpca.passes._progress import listen

    X, k = _case("continuum")
    Y, _ = _case("continuum", draw=1)
    PCA(k, solver="krylov", tol=1e-4, random_state=0).fit(X).save(tmp_path / "model.zarr")
    model = PCA.load(tmp_path / "model.zarr")
    starts = []
    with listen(lambda report: starts.append(report) if report.seconds is None else None):
        model.fit(Y)
    probe = model._fit_plan.probe
    assert probe.earlier == "its own last fit (on 2400 samples)" and probe.rows == 0
    assert starts[0].learnt == 0 and abs(starts[0].predicted - model.n_passes_) <= 1
    assert starts[0].source == "an earlier fit"
    with listen(lambda report: None):
        model.fit(Y[:, :150])
    assert model._fit_plan.probe.rows == 24 and not model._fit_plan.probe.earlier
    unwatched = PCA.load(tmp_path / "model.zarr").fit(Y)
    assert unwatched._fit_plan.probe is None
