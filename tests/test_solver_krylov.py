"""Block Krylov: the error bound is conservative and tight, tol drives the passes, parity, stability."""

import warnings

import dask
import dask.array as da
import numpy as np
import pytest
from scipy.linalg import subspace_angles
from sklearn.utils.extmath import randomized_svd

from daskpca.exceptions import AccuracyWarning
from daskpca.passes import _sketch
from daskpca.solvers import krylov, randomized
from daskpca.solvers._base import ComponentRequest
from daskpca.store.checkpoint import CheckpointFile

from _helpers import reference_pca, sin_theta, spectral_data, write_zarr
from test_solver_randomized import _slow_decay  # σ_i = i^(-1/2)


def hard_spectrum(n, d, k, ratio, *, seed=0, slope=0.2, offset=1e3, dtype=np.float64):
    """k signal modes (variances 10·ratio … ratio, geometric) above a flat noise continuum
    (variances 1 → 1 − slope): λ_k/λ_{k+1} = ratio exactly, the case that decides the approximate
    path. Exact singular values (random orthonormal factors, left ones ⟂ 1) plus a mean offset."""
    rng = np.random.default_rng(seed)
    r = min(n - 1, d)
    u = rng.standard_normal((n, r))
    u, _ = np.linalg.qr(u - u.mean(axis=0))
    v, _ = np.linalg.qr(rng.standard_normal((d, r)))
    variances = np.concatenate([np.geomspace(10 * ratio, ratio, k), np.linspace(1.0, 1.0 - slope, r - k)])
    return ((u * np.sqrt(variances * (n - 1))) @ v.T + offset * rng.random(d)).astype(dtype)


def _trace_passes(monkeypatch):
    """Record (components, error_bound, basis) of the answer every pass's estimate would return
    (the one with the smallest bound, Estimate.best)."""
    seen = []
    original = krylov.estimate

    def spy(basis, k, **options):
        result = original(basis, k, **options)
        if options.get("stable") and seen and seen[-1][2] is basis.V:  # the returned answer replaces this pass's
            seen.pop()
        answer, _ = result.best()
        seen.append((answer.components, answer.error_bound, basis.V))
        return result

    monkeypatch.setattr(krylov, "estimate", spy)
    return seen


CASES = [
    # (n, d, k, λ_k/λ_{k+1}, passes)
    (600, 100, 4, 1.2, 7),  # tall, a gap of 20 % above the continuum
    (600, 100, 4, 3.0, 6),  # tall, a wide gap
    (100, 600, 4, 1.5, 8),  # wide
    (300, 300, 8, 2.0, 7),  # square
]
BIG_CASES = [
    (1_200, 150, 6, 1.1, 12),
    (1_200, 150, 6, 1.2, 9),
    (1_200, 150, 6, 3.0, 6),
    (150, 1_200, 6, 1.5, 8),
    (400, 400, 10, 2.0, 7),
]


def _check_bound(monkeypatch, n, d, k, ratio, passes, seed):
    # Every pass's reported bound against sin θ to a float64 LAPACK reference. Measured over
    # 6 seeds (all cases here): never below it; once the bound is ≤ 0.1 at most 2.95× the truth
    # (≤ 2.3× at ≤ 1e-2, the range of the tol one asks for), at most 4.9× before (pass 2, a bound
    # near 0.7). It was up to 39× before the refined answer (module notes of krylov.py).
    X = hard_spectrum(n, d, k, ratio, seed=seed)
    exact = reference_pca(X)[0][:k]
    seen = _trace_passes(monkeypatch)
    with dask.config.set(scheduler="sync"):
        krylov.solve(da.from_array(X, chunks=(n // 3, d)), ComponentRequest(k, n, d), random_state=seed, max_passes=passes)
    assert len(seen) <= passes  # fewer once the Krylov space is invariant (ℓ·passes ≥ rank)
    for components, bound, _ in seen:
        true = sin_theta(components, exact)
        assert true <= bound
        if true > 1e-10 and bound <= 0.1:  # above round-off, in the range a tol asks for
            assert bound <= 3 * true, (true, bound)
        elif true > 1e-10 and bound < 1:  # informative, the gap not yet well resolved
            assert bound <= 6 * true, (true, bound)
    assert seen[-1][1] < 1e-3  # and it does converge


@pytest.mark.parametrize("seed", [0])
@pytest.mark.parametrize("n, d, k, ratio, passes", CASES)
def test_bound_is_never_below_the_true_error_and_close_to_it(monkeypatch, n, d, k, ratio, passes, seed):
    _check_bound(monkeypatch, n, d, k, ratio, passes, seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("n, d, k, ratio, passes", BIG_CASES)
def test_bound_on_larger_hard_spectra_over_many_seeds(monkeypatch, n, d, k, ratio, passes, seed):
    _check_bound(monkeypatch, n, d, k, ratio, passes, seed)


def plateau_spectrum(n, d, k, ratio, *, seed=0, width=5):
    """k signal modes (variances 10·ratio … ratio) above a plateau of ``width`` equal modes at 1
    (λ_k/λ_{k+1} = ratio), then a decaying tail (0.5 → 1e-3): the spectrum where the next Ritz
    block decides how tight the bound can be (issue 41)."""
    rng = np.random.default_rng(seed)
    r = min(n - 1, d)
    u = np.linalg.qr(rng.standard_normal((n, r)))[0]
    u = np.linalg.qr(u - u.mean(axis=0))[0]
    v = np.linalg.qr(rng.standard_normal((d, r)))[0]
    variances = np.concatenate([np.geomspace(10 * ratio, ratio, k), np.ones(width),
                                np.geomspace(0.5, 1e-3, r - k - width)])
    return (u * np.sqrt(variances * (n - 1))) @ v.T + 10 * rng.random(d)


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("n, d, k, ratio, width", [(600, 150, 4, 1.5, 5), (200, 500, 6, 1.3, 8), (800, 120, 4, 1.2, 6)])
def test_bound_on_a_plateau_below_the_kth_mode_stays_close_to_the_truth(monkeypatch, n, d, k, ratio, width, seed):
    """Equal eigenvalues just below λ_k: every pass's bound never below sin θ to a float64 LAPACK
    reference; on the issue's plateau (five modes, λ_k/λ_{k+1} = 1.5) within 3× of it in the
    range a tol asks for (1e-4 … 0.1), and within 16× everywhere above round-off. Measured here:
    2.4–2.7× and at most 15× deep in the tail (the refined answer's error sits on eigenvalues far
    below the plateau there, which no residual of the kept passes shows); 9–120× with the gap to
    λ_{k+1} alone, before the next Ritz block separated the plateau (_bounds.split_bounds)."""
    X = plateau_spectrum(n, d, k, ratio, seed=seed, width=width)
    exact = reference_pca(X)[0][:k]
    seen = _trace_passes(monkeypatch)
    with dask.config.set(scheduler="sync"), warnings.catch_warnings():
        warnings.simplefilter("ignore", AccuracyWarning)
        krylov.solve(da.from_array(X, chunks=(n // 2, d)), ComponentRequest(k, n, d), random_state=seed, max_passes=8)
    informative = 0
    for components, bound, _ in seen:
        true = sin_theta(components, exact)
        assert true <= bound + 1e-14
        if true > 1e-10 and bound <= 0.1:
            informative += 1
            assert bound <= 16 * true, (true, bound)
            if (k, ratio, width) == (4, 1.5, 5) and bound >= 1e-4:
                assert bound <= 3 * true, (true, bound)
    assert informative >= 3


def _random_spectrum(rng, n, d, k):
    """Variances of one of four shapes with λ_k/λ_{k+1} drawn from exactly repeated to wide: a
    noise continuum, a plateau straddling the k-th mode (a cluster), fast decay, and slow decay."""
    r = min(n - 1, d)
    ratio = rng.choice([1.0, 1 + 1e-9, 1 + 1e-6, 1.001, 1.05, 1.3, 3.0])
    shape = rng.choice(["continuum", "plateau", "fast", "slow"])
    if shape == "continuum":
        tail = np.linspace(1.0, 0.5, r - k)
    elif shape == "plateau":  # modes k + 1 … k + 5 at the level of λ_k / ratio, then decay
        tail = np.concatenate([np.ones(5), np.geomspace(0.5, 1e-3, r - k - 5)])
    elif shape == "fast":
        tail = 0.5 ** np.arange(r - k)
    else:
        tail = 1 / np.sqrt(np.arange(1, r - k + 1))
    head = np.geomspace(rng.uniform(1.5, 20), 1.0, k) * ratio
    if ratio == 1.0:  # a repeated eigenvalue across the cut: the subspace is not determined
        head[-2:] = ratio
    variances = np.concatenate([head, tail])
    u = np.linalg.qr(rng.standard_normal((n, r)) - 0)[0]
    u = np.linalg.qr(u - u.mean(axis=0))[0]
    v = np.linalg.qr(rng.standard_normal((d, r)))[0]
    return (u * np.sqrt(variances * (n - 1))) @ v.T + 10 * rng.random(d), ratio


@pytest.mark.parametrize("seed", range(12))
def test_bound_is_never_below_the_truth_on_random_spectra_repeated_and_clustered_included(monkeypatch, seed):
    """Property test: spectra, shapes and budgets drawn at random, every pass's returned bound
    against a float64 LAPACK reference. Never below the truth; where λ_k is repeated (ratio 1 or
    within 1e-9) the bound is 1 and a fit asking for a tol warns."""
    rng = np.random.default_rng(seed)
    n, d = (int(rng.integers(150, 400)), int(rng.integers(40, 120)))
    n, d = (n, d) if rng.random() < 0.5 else (d, n)
    k = int(rng.integers(2, 7))
    X, ratio = _random_spectrum(rng, n, d, k)
    exact, variance, _ = reference_pca(X)
    seen = _trace_passes(monkeypatch)
    tol = 1e-6 if ratio - 1 < 1e-8 else None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = krylov.solve(da.from_array(X, chunks=(n // 2, d)), ComponentRequest(k, n, d), random_state=seed,
                              tol=tol, max_passes=int(rng.integers(2, 7)))
    # The reference is itself accurate only to LAPACK's backward error over the gap (Wedin):
    # ~ε·σ₁/(σ_k − σ_{k+1}), 2e-12 at a gap ratio of 1.001, where a truth of 1.13e-12 stood against
    # a bound of 1.12e-12 with OpenBLAS 0.3.31 (numpy 2.4.6): neither is resolved there.
    singular = np.sqrt(variance * (X.shape[0] - 1))
    gap = singular[k - 1] - singular[k]
    reference_error = np.sqrt(max(n, d)) * np.finfo(float).eps * singular[0] / gap if gap > 0 else np.inf
    for components, bound, _ in seen:
        assert sin_theta(components, exact[:k]) <= bound + max(reference_error, 1e-14)
    if ratio - 1 < 1e-8:  # not separated (to the reference's own accuracy): no certificate
        assert result.info["error_bound"] == 1.0 and not result.info["converged"]
        assert any(issubclass(w.category, AccuracyWarning) for w in caught)


def _drawn_operator(seed, complex_=False):
    """A scatter C = Q·diag(λ)·Qᴴ·(n − 1) with exactly known eigenvectors, its spectrum one of five
    shapes (a flat or noisy continuum, a plateau of 2–9 equal modes, fast or slow decay) with
    λ_k/λ_{k+1} from 1.01 to 3, tall or wide (rank min(n − 1, d)), and a block Krylov run on it as
    :func:`krylov.solve` makes it (block size, passes drawn too); ``complex_``: Hermitian, as
    Hilbert's Krylov road certifies it."""
    rng = np.random.default_rng(seed)

    def draw(*shape):
        return rng.standard_normal(shape) + 1j * rng.standard_normal(shape) if complex_ else rng.standard_normal(shape)

    n, d, k = int(rng.integers(60, 500)), int(rng.integers(40, 400)), int(rng.integers(2, 8))
    r = min(n - 1, d)
    ratio = rng.choice([1.01, 1.05, 1.2, 1.5, 3.0])
    shape = rng.choice(["continuum", "plateau", "fast", "slow", "noisy continuum"])
    if shape == "continuum":
        tail = np.linspace(1.0, rng.uniform(0.5, 0.99), r - k)
    elif shape == "noisy continuum":
        tail = np.linspace(1.0, 0.8, r - k) * (1 + 0.01 * rng.standard_normal(r - k))
    elif shape == "plateau":
        width = int(rng.integers(2, 10))
        tail = np.concatenate([np.ones(width), np.geomspace(rng.uniform(0.3, 0.9), 1e-3, r - k - width)])
    elif shape == "fast":
        tail = rng.uniform(0.5, 0.9) ** np.arange(r - k)
    else:
        tail = 1 / np.arange(1, r - k + 1) ** rng.uniform(0.3, 1.0)
    variances = np.sort(np.concatenate([np.geomspace(rng.uniform(1.5, 20), 1.0, k) * ratio, np.abs(tail)]))[::-1]
    Q = np.linalg.qr(draw(d, r))[0]
    C = (Q * variances * (n - 1)) @ Q.conj().T
    block = np.linalg.qr(draw(d, k + int(rng.integers(2, 12))))[0]
    return (C + C.conj().T) / 2, Q[:, :k], n, k, block, int(rng.integers(3, 10))


#: Seeds of _drawn_operator whose returned bound was below the truth before next_eigenvalue's floor
#: and resolved_cuts (15 of the first 300 fits' passes, up to 9×): wide continua whose basis found
#: C's null space before the continuum (108, 191, 214), Ritz values unresolved inside a continuum
#: (82, 141, 154, 160, 201, 229, 275), a plateau member not yet found (285).
UNDER_THE_TRUTH_BEFORE = [82, 108, 141, 154, 160, 191, 201, 214, 229, 275, 285]


@pytest.mark.parametrize("seed", UNDER_THE_TRUTH_BEFORE + [300, 301, 302, 303])
def test_the_bound_holds_where_the_krylov_space_has_missed_eigenvalues_above_its_ritz_values(seed):
    """Every pass's bound (the answer estimate() returns, and the refined answer's) against the
    exact eigenvectors: never below the truth where that is above round-off. λ̂_{k+s+1}, the next
    Ritz value plus its residual, is below λ_{k+s+1} on these operators at many depths; the floor
    by the trace (next_eigenvalue) and splitting only at resolved Ritz values (resolved_cuts) keep
    the bounds above the truth (measured on 1000 drawn operators: none below it above 1e-11)."""
    from daskpca.passes import Basis
    from daskpca.passes._linalg import orthonormal_extension

    C, exact, n, k, block, passes = _drawn_operator(seed)
    basis, total, informative = Basis.empty(C.shape[0]), float(np.trace(C)), 0
    for _ in range(passes):
        basis = basis.extend(block, C @ block)
        found = krylov.estimate(basis, k, n_samples=n, total=total)
        answers = [(found.best()[0].components, found.certified()), (found.components, found.error_bound)]
        for components, bound in ((found.refined_components, found.refined_bound),
                                  (found.augmented_components, found.augmented_bound)):
            if components is not None:
                answers.append((components, bound))
        for components, bound in answers:
            true = sin_theta(components, exact.T)
            assert true <= bound or true < 1e-10, (true, bound)
            informative += bound < 1
        block = orthonormal_extension(basis.V, basis.W[:, -block.shape[1]:], basis.T[:, -block.shape[1]:])
        if block.shape[1] == 0:
            break
    assert informative  # the bounds certified something on the way


#: The seeds of the first 300 complex Hermitian _drawn_operator runs whose plain or augmented bound
#: was below the truth before this round (28): the augmented vectors formed where the basis left
#: fewer than k directions outside it (m > d − k: bounds of 1e-5 for errors of 0.2–0.6), splits in
#: unresolved continua, and (214) a split below a band whose next Ritz value was C's null space,
#: λ̂ floored at 0.88 under a true 0.95.
HERMITIAN_UNDER_THE_TRUTH_BEFORE = [11, 29, 30, 36, 53, 65, 82, 85, 102, 108, 111, 112, 141, 142, 150, 154, 160, 162,
                                    172, 191, 195, 214, 229, 230, 239, 275, 285, 295]


@pytest.mark.parametrize("seed", HERMITIAN_UNDER_THE_TRUTH_BEFORE)
def test_hilbert_krylovs_hermitian_bounds_hold_where_the_basis_nearly_spans_the_space(seed):
    """The same on complex Hermitian operators, through certify() as Hilbert's Krylov road calls
    it: the plain Ritz vectors' and the augmented vectors' bounds against the exact eigenvectors,
    never below the truth above round-off (HERMITIAN_UNDER_THE_TRUTH_BEFORE failed before)."""
    from daskpca.passes import Basis
    from daskpca.passes._linalg import orthonormal_extension
    from daskpca.solvers._bounds import certify

    C, exact, n, k, block, passes = _drawn_operator(seed, complex_=True)
    basis, total = Basis.empty(C.shape[0], dtype=np.complex128), float(np.trace(C).real)
    for _ in range(passes):
        basis = basis.extend(block, C @ block)
        found = certify(basis, k, *basis.ritz(), n, total)
        answers = [(found["X"], found["bound"])]
        if found["augmented_vectors"] is not None:
            answers.append((found["augmented_vectors"], found["augmented"]))
        for vectors, bound in answers:
            true = float(np.sin(np.max(subspace_angles(vectors, exact))))
            assert true <= bound or true < 1e-10, (true, bound)
        block = orthonormal_extension(basis.V, basis.W[:, -block.shape[1]:], basis.T[:, -block.shape[1]:])
        if block.shape[1] == 0:
            break


def test_next_eigenvalue_is_floored_by_the_variance_the_top_k_cannot_hold():
    """Wide data: the basis converges on C's null space (Ritz values ≈ 0, tiny residuals) before
    the continuum above it, and θ_{k+1} + ‖r_{k+1}‖ is ~0. The mean of the variance the top k
    leave, (trace − Σ_{i≤k}(θ_i + ‖r_i‖))/(rank − k), is a lower bound on λ_{k+1}: λ̂ takes it."""
    from daskpca.solvers._bounds import next_eigenvalue

    theta, norms = np.array([10.0, 5.0, 1e-3]), np.array([1e-3, 1e-3, 1e-3])
    total = 10 + 5 + 90 * 0.9  # 90 continuum modes at 0.9, unseen
    assert next_eigenvalue(theta, norms, 2, total) == pytest.approx(2e-3)  # no rank: the estimate alone
    floored = next_eigenvalue(theta, norms, 2, total, rank=92)
    assert 0.9 * 90 / 92 * 0.99 < floored <= 0.9  # the mean of the rest, below the true λ_3 = 0.9
    assert next_eigenvalue(theta, norms, 2, 15.002, rank=92) == pytest.approx(2e-3, rel=1e-3)  # nothing unseen


@pytest.mark.parametrize("q", [0, 1, 3])
@pytest.mark.parametrize("seed", [0, 1])
def test_never_worse_than_subspace_iteration_or_scikit_learn_at_equal_passes(q, seed):
    # q + 1 passes each. Pass 1 is the same projection as randomized's (measured equal); beyond
    # it the whole Krylov space wins (measured 3–20× smaller sin θ at q = 1…3).
    X = _slow_decay()
    exact = reference_pca(X)[0][:5]
    request = ComponentRequest(5, *X.shape)
    dask_X = da.from_array(X, chunks=(90, 50))
    ours = krylov.solve(dask_X, request, random_state=np.random.RandomState(seed), max_passes=q + 1)
    subspace = randomized.solve(dask_X, request, random_state=np.random.RandomState(seed), n_power_iter=q)
    _, _, sklearn = randomized_svd(X - X.mean(axis=0), 5, n_oversamples=10, n_iter=q, random_state=np.random.RandomState(seed))
    error = sin_theta(ours.components, exact)
    assert ours.n_passes == q + 1
    assert error <= sin_theta(subspace.components, exact) * (1 + 1e-6) + 1e-12
    assert error <= sin_theta(sklearn, exact) * (1 + 1e-6) + 1e-12
    assert sin_theta(ours.components, exact) <= ours.info["error_bound"]


@pytest.mark.parametrize("tol", [1e-3, 1e-4, 1e-7])
def test_tol_stops_at_the_first_pass_whose_bound_meets_it_and_reads_that_often(tmp_path, tol):
    X = hard_spectrum(1_000, 120, 5, 1.5, seed=3, dtype=np.float32, offset=1e4)
    exact, variance, mean = reference_pca(X.astype(np.float64))
    array, store = write_zarr(tmp_path / "x.zarr", X, (250, 50))
    with dask.config.set(scheduler="threads"):
        result = krylov.solve(da.from_zarr(array), ComponentRequest(5, *X.shape), random_state=0, tol=tol)
    info = result.info
    history = info["bound_history"]
    assert info["converged"] and info["tol"] == tol and info["error_bound"] <= tol
    assert info["projection"] in ("left", "refined", "plain")  # whichever answer is certified first
    assert history[-1] <= tol < min(history[:-1]) and len(history) == result.n_passes
    assert set(store.chunk_reads().values()) == {result.n_passes} and len(store.chunk_reads()) == 12
    assert sin_theta(result.components, exact[:5]) <= info["error_bound"]
    # float32 input with a 1e4 offset: the mean and eigenvalues to float64 accuracy.
    np.testing.assert_allclose(result.mean, mean, rtol=1e-12)
    assert np.all(np.abs(result.explained_variance / variance[:5] - 1) <= info["eigenvalue_error_bounds"] + 1e-12)
    assert np.all(info["eigenvalue_error_bounds"] < tol)
    assert len(info["residual_norms"]) == 5 and info["gap"] > 0


def test_budget_spent_before_tol_warns_with_the_bound_reached(tmp_path):
    X = hard_spectrum(600, 80, 4, 1.2, seed=0)
    array, store = write_zarr(tmp_path / "x.zarr", X, (200, 80))
    with dask.config.set(scheduler="threads"), pytest.warns(AccuracyWarning, match=r"budget of 3 passes .* error bound of"):
        result = krylov.solve(da.from_zarr(array), ComponentRequest(4, *X.shape), random_state=0, tol=1e-9, max_passes=3)
    assert result.n_passes == 3 and not result.info["converged"]
    assert set(store.chunk_reads().values()) == {3}
    assert sin_theta(result.components, reference_pca(X)[0][:4]) <= result.info["error_bound"]


def test_no_tol_runs_the_default_budget_without_warning():
    X = hard_spectrum(500, 200, 3, 1.1, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = krylov.solve(da.from_array(X, chunks=(250, 200)), ComponentRequest(3, *X.shape), random_state=0)
    assert result.n_passes == krylov.DEFAULT_PASSES and result.info["tol"] is None
    assert result.info["max_passes"] == krylov.DEFAULT_PASSES


def test_basis_stays_orthonormal_at_condition_number_1e10(monkeypatch):
    # σ_i = 10^(-10·i/59) over 60 directions plus a 1e2 offset: every block after the first is
    # almost entirely inside the span of the earlier ones, the case that breaks a single
    # Gram–Schmidt sweep.
    rng = np.random.default_rng(3)
    n, d, rank, k = 400, 200, 60, 8
    u, _ = np.linalg.qr(rng.standard_normal((n, rank)))
    v, _ = np.linalg.qr(rng.standard_normal((d, rank)))
    X = (u * np.logspace(0, -10, rank)) @ v.T + 100 * rng.random(d)
    exact, variance, _ = reference_pca(X)
    seen = _trace_passes(monkeypatch)
    result = krylov.solve(da.from_array(X, chunks=(100, 60)), ComponentRequest(k, n, d), random_state=0, max_passes=8)
    basis = seen[-1][2]
    assert basis.shape[1] >= 50  # blocks kept until the bound is at round-off (53 of the rank 60)
    np.testing.assert_allclose(basis.T @ basis, np.eye(basis.shape[1]), atol=1e-13)  # measured 1.1e-15
    np.testing.assert_allclose(result.components @ result.components.T, np.eye(k), atol=1e-13)
    assert sin_theta(result.components, exact[:k]) <= 1e-11  # measured 3e-13
    np.testing.assert_allclose(result.explained_variance, variance[:k], rtol=1e-10)


def test_results_do_not_depend_on_chunking():
    X = hard_spectrum(600, 90, 4, 2.0, seed=4)
    request = ComponentRequest(4, *X.shape)
    results = [krylov.solve(da.from_array(X, chunks=chunks), request, random_state=5, max_passes=4)
               for chunks in [(600, 90), (97, 30), ((5, 295, 300), (45, 45))]]
    for other in results[1:]:
        assert sin_theta(other.components, results[0].components) <= 1e-11
        np.testing.assert_allclose(other.explained_variance, results[0].explained_variance, rtol=1e-11)
        assert other.info["error_bound"] == pytest.approx(results[0].info["error_bound"], rel=1e-6)


def test_thick_restart_keeps_the_client_basis_bounded_and_the_bound_valid(monkeypatch):
    X = hard_spectrum(800, 200, 5, 1.3, seed=2)
    exact = reference_pca(X)[0][:5]
    monkeypatch.setattr(krylov, "BASIS_BYTES", 16 * 200 * 60)  # 60 columns: restart every ~2 blocks
    result = krylov.solve(da.from_array(X, chunks=(400, 200)), ComponentRequest(5, *X.shape), random_state=0, tol=1e-6)
    assert result.info["restarts"] >= 2 and result.info["basis_size"] <= 60
    assert result.info["converged"]
    assert sin_theta(result.components, exact) <= result.info["error_bound"] <= 1e-6


def test_an_invariant_krylov_space_stops_with_the_exact_answer():
    # Rank-4 data, ℓ = 5: the first block already holds the whole range; the next is empty.
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 4)) @ rng.standard_normal((4, 40)) * np.arange(1, 41)
    result = krylov.solve(da.from_array(X, chunks=(100, 40)), ComponentRequest(3, *X.shape), random_state=0,
                          n_oversamples=2, tol=1e-8)
    assert result.n_passes <= 2 and result.info["converged"]
    assert sin_theta(result.components, reference_pca(X)[0][:3]) <= 1e-12


def test_resume_from_a_checkpoint_equals_the_uninterrupted_fit(tmp_path, monkeypatch):
    X = da.from_array(hard_spectrum(400, 50, 3, 1.5, seed=6), chunks=(100, 50), name="krylov-checkpoint-test")
    request, path = ComponentRequest(3, *X.shape), tmp_path / "job.npz"
    full = krylov.solve(X, request, random_state=0, tol=1e-8, checkpoint=CheckpointFile(path))
    assert not path.exists()
    calls = []

    def dying_pass(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt("killed in pass 3")
        return _sketch.run_pass(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(krylov, "run_pass", dying_pass)
        with pytest.raises(KeyboardInterrupt):
            krylov.solve(X, request, random_state=0, tol=1e-8, checkpoint=CheckpointFile(path))
    assert path.exists()
    resumed = krylov.solve(X, request, random_state=0, tol=1e-8, checkpoint=CheckpointFile(path))
    assert resumed.info["resumed_from_pass"] == 2 and resumed.n_passes == full.n_passes - 2
    assert resumed.info["total_passes"] == full.n_passes
    np.testing.assert_array_equal(resumed.components, full.components)
    assert resumed.info["error_bound"] == full.info["error_bound"]


def test_options_are_validated_and_nonfinite_input_raises():
    X = da.from_array(hard_spectrum(100, 12, 2, 2.0), chunks=(50, 12))
    request = ComponentRequest(2, 100, 12)
    for bad in (0, 1.0, -1e-3, "1e-4", True):
        with pytest.raises(ValueError, match="tol="):
            krylov.solve(X, request, tol=bad)
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match="max_passes="):
            krylov.solve(X, request, max_passes=bad)
    with pytest.raises(ValueError, match="full spectrum"):
        krylov.solve(X, ComponentRequest(0.9, 100, 12))
    data = hard_spectrum(100, 12, 2, 2.0)
    data[7, 3] = np.nan
    with pytest.raises(ValueError, match="row 7, column 3"):
        krylov.solve(da.from_array(data, chunks=(30, 12)), request)
    assert krylov.OPTIONS == ("n_oversamples", "tol", "max_passes", "checkpoint")


def test_the_fit_learns_its_pass_count_and_the_progress_line_shows_it():
    """Before any read the planner's figure; from the first informative bound the rate the bound
    falls by: then the prediction is the actual pass count (within one), and the time left is
    the passes predicted to remain, not the whole budget."""
    from daskpca.passes._progress import listen

    X = hard_spectrum(1_500, 300, 6, 2.0, seed=1)
    starts = []
    with listen(lambda report: starts.append(report) if report.seconds is None else None):
        result = krylov.solve(da.from_array(X, chunks=(500, 300)), ComponentRequest(6, *X.shape), random_state=0, tol=1e-6)
    history = result.info["bound_history"]
    assert result.info["converged"] and len(starts) == result.n_passes
    assert starts[0].predicted == krylov.predicted_passes(1e-6)  # nothing read yet: the prior
    informative = next(i for i, bound in enumerate(history) if bound < krylov.INFORMATIVE_BOUND)
    predicted = [report.predicted for report in starts]
    # One informative bound: its gap's Chebyshev rate; two or more: the measured fall.
    assert result.n_passes / 1.5 <= predicted[informative + 1] <= 1.5 * result.n_passes, (predicted, history)
    for report in starts[informative + 2:]:  # pass j starts knowing the bounds of passes 1 … j − 1
        assert abs(report.predicted - result.n_passes) <= 1, (predicted, history)
        assert f", {report.predicted} predicted (krylov" in report.describe()
    last = starts[-1]
    assert last.seconds_left == pytest.approx((last.predicted - last.number + 1) * last.cycle_seconds)


def test_passes_left_extrapolates_the_measured_fall_of_the_bound():
    assert krylov.passes_left([1.0, 1.0], 1e-4) is None  # nothing learnt: the caller keeps the prior
    assert krylov.passes_left([1.0, 0.1, 0.01], 1e-6) == 4  # 10× a pass
    assert krylov.passes_left([1.0, 0.1], 1e-4, gap_ratio=9.0) == 2  # the Chebyshev rate of the gap (34×)
    assert krylov.passes_left([1.0, 0.1], 1e-4, gap_ratio=1.1) == 3  # at least the planner's (16×)
    assert krylov.passes_left([0.1, 1e-5], 1e-4) == 0
    assert krylov.passes_left([1e-3, 1e-3], 1e-4) is None  # stalled: no rate to extrapolate


def fast_spectrum(n, d, k, rate, *, seed=0):
    """Variances falling geometrically by ``rate`` per mode from the first (a halving spectrum
    at 0.5): the basis sees nearly all the variance after two passes, and the error of the answer
    sits on eigenvalues far below λ_{k+1} (issue 41)."""
    rng = np.random.default_rng(seed)
    r = min(n - 1, d)
    u = np.linalg.qr(rng.standard_normal((n, r)))[0]
    u = np.linalg.qr(u - u.mean(axis=0))[0]
    v = np.linalg.qr(rng.standard_normal((d, r)))[0]
    return (u * np.sqrt(rate ** np.arange(r) * 2.0**k * (n - 1))) @ v.T + 10 * rng.random(d)


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("n, d, k, rate", [(600, 150, 4, 0.5), (800, 300, 8, 0.7)])
def test_bound_on_a_fast_decaying_spectrum_sees_the_unseen_variance(monkeypatch, n, d, k, rate, seed):
    """Fast decay: the refined answer's bound was up to 93× its truth (the contraction λ̂_{k+1}/θ_k
    cannot see that the error sits far below λ_{k+1}); the augmented answer's, from the variance
    the basis has not seen (_bounds.unseen_variance_bound), and the left projection's own, from
    the variance the Nyström approximation leaves out (_bounds.nystrom_bound), are returned
    there. Every pass's bound never below sin θ to a float64 LAPACK reference. At rate 0.7, pass 2
    the left components are certified at 4.7e-5 and 7.5e-5 (the augmented answer's bound was
    3.3e-3 and 8.4e-3): 70× smaller, yet 48× and 56× their truth (9.6e-7, 1.3e-6), which runs far
    ahead of what the unseen variance τ_N can show — the 3× contract is NOT met here (measured,
    not hidden); at rate 0.5 the returned answers are below 1e-10 after pass 1."""
    X = fast_spectrum(n, d, k, rate, seed=seed)
    exact = reference_pca(X)[0][:k]
    seen = _trace_passes(monkeypatch)
    with dask.config.set(scheduler="sync"):
        result = krylov.solve(da.from_array(X, chunks=(n // 2, d)), ComponentRequest(k, n, d), random_state=seed,
                              max_passes=3)
    for components, bound, _ in seen:
        true = sin_theta(components, exact)
        assert true <= bound + 1e-14
        if true > 1e-10 and bound < 1:
            assert bound <= 64 * true, (true, bound)
    if rate == 0.7:  # pass 2 certifies the left components far below the augmented answer's bound
        assert seen[1][1] < 1e-4
    assert result.info["projection"] in ("left", "augmented") or result.info["error_bound"] < 1e-10
    assert sin_theta(result.components, exact) <= result.info["error_bound"]


@pytest.mark.parametrize("tol", [1e-3, 1e-5, 1e-7])
def test_a_fast_decaying_spectrum_stops_on_the_augmented_bound(tol):
    X = fast_spectrum(600, 150, 4, 0.5, seed=2)
    with dask.config.set(scheduler="sync"):
        result = krylov.solve(da.from_array(X, chunks=(300, 150)), ComponentRequest(4, *X.shape), random_state=0,
                              tol=tol)
    true = sin_theta(result.components, reference_pca(X)[0][:4])
    assert result.info["converged"] and true <= result.info["error_bound"] <= tol
    # The refined bound needed 3 passes for 1e-5 (7e-5 at pass 2), the augmented one 3 for 1e-7;
    # the left projection's Nyström bound is below 1e-7 at pass 2.
    assert result.n_passes == 2


def _fit_reports(X, k, tol, chunks=250):
    from daskpca.passes._progress import listen

    starts = []
    with listen(lambda report: starts.append(report) if report.seconds is None else None):
        result = krylov.solve(da.from_array(X, chunks=(chunks, X.shape[1])), ComponentRequest(k, *X.shape),
                              random_state=0, tol=tol)
    return result, starts


@pytest.mark.parametrize("name, tol", [("rate 0.8", 1e-6), ("continuum", 1e-4), ("plateau", 1e-6), ("reanalysis", 1e-4)])
def test_the_simulated_fit_predicts_the_pass_count_within_one(name, tol):
    """From pass 2 on the fit simulates itself on the spectrum its Ritz values and the unseen
    variance show (krylov.model_spectrum): the passes it predicts are the passes it makes, ±1, on
    fast decay, a continuum just below λ_k, a plateau and a reanalysis-like field (20 modes above
    white noise at its Marchenko–Pastur edge) — where the planner's constant prior is 5 or 7."""
    n, d, k = 1_000, 200, 10
    rest = d - k
    if name == "reanalysis":
        k = 20
        rng = np.random.default_rng(3)
        edge = (np.sqrt(d) + np.sqrt(n)) ** 2 / n
        modes = np.linalg.qr(rng.standard_normal((d, k)))[0].T
        X = (rng.standard_normal((n, k)) * np.sqrt(edge * (1.5 + 30 * 0.8 ** np.arange(k)))) @ modes
        X = X + rng.standard_normal((n, d)) + 280
    else:
        variances = {"rate 0.8": 0.8 ** np.arange(d),
                     "continuum": np.concatenate([np.geomspace(10, 1, k), 0.9 * np.linspace(1, 0.8, rest)]),
                     "plateau": np.concatenate([np.geomspace(30, 1.5, k), np.ones(5), np.geomspace(0.5, 1e-3, rest - 5)]),
                     }[name]
        X = spectral_data(variances, n, d)
    result, starts = _fit_reports(X, k, tol)
    assert result.info["converged"] and result.n_passes >= 3, result.info["bound_history"]
    learnt = [report for report in starts if report.learnt is not None]
    assert learnt and learnt[0].number == krylov.SIMULATED_FROM_PASS + 1  # learnt after pass 2
    for report in learnt:
        assert abs(report.predicted - result.n_passes) <= 1, ([r.predicted for r in starts], result.n_passes)


def test_the_binned_spectrum_keeps_a_continuums_spread():
    """A continuum of 1990 distinct values 0.9·λ_k down to 0.72·λ_k, binned for the simulation: one
    value a bin is an exact eigenspace the block's spare columns deflate at once (8 passes
    simulated for tol 1e-4); kept as a few distinct values a bin (krylov.BIN_PARTS) the count is
    the unbinned spectrum's (10, the fit's), on a diagonal of under half the entries, the mass
    exact."""
    k, d, ell = 10, 2000, 20
    values = np.concatenate([np.geomspace(10, 1, k), 0.9 * np.linspace(1, 0.8, d - k)])
    binned, sizes = krylov.binned_spectrum(values[:k], values[k:], k)
    assert sizes.sum() == d and np.dot(binned, sizes) == pytest.approx(values.sum(), rel=1e-12)
    assert np.minimum(sizes, ell).sum() < d / 2
    exact = krylov.simulated_passes(values, np.ones(d, dtype=np.int64), k, ell, 1e-4, 20)
    assert len(krylov.simulated_passes(binned, sizes, k, ell, 1e-4, 20)) == len(exact) == 10


def test_the_fits_own_simulation_takes_its_head_at_the_ritz_values_upper_ends():
    """From pass 2 the fit's simulation keeps the top k at θ_i + ‖r_i‖ (krylov.model_spectrum):
    at θ_i the gap the passes had not yet opened was read as the spectrum's, and a continuum
    just below λ_k (2400 × 600) was predicted 11 passes from pass 3 where 13 were made, 8–9 from
    pass 6; a plateau 10 for 8. Every prediction from pass 3 on is now within one pass of the
    count made."""
    n, d, k = 2400, 600, 10
    rest = d - k
    for variances in (np.concatenate([np.geomspace(10, 1, k), 0.9 * np.linspace(1, 0.8, rest)]),
                      np.concatenate([np.geomspace(30, 1.5, k), np.ones(5), np.geomspace(0.5, 1e-3, rest - 5)])):
        X = spectral_data(variances, n, d)
        for tol in (1e-4, 1e-6):
            result, starts = _fit_reports(X, k, tol, chunks=n // 2)
            predicted = [report.predicted for report in starts[krylov.SIMULATED_FROM_PASS:]]
            assert result.info["converged"] and predicted
            assert all(abs(count - result.n_passes) <= 1 for count in predicted), (predicted, result.n_passes)


def test_the_progress_line_names_where_its_eta_was_learnt():
    from daskpca.passes._progress import PassReport

    X = spectral_data(np.concatenate([np.geomspace(10, 1, 6), 0.9 * np.linspace(1, 0.8, 114)]), 600, 120)
    _, starts = _fit_reports(X, 6, 1e-4, chunks=200)
    before, after = starts[1], starts[-1]
    assert before.learnt is None and "ETA" not in before.describe()  # the planner's prior, timed but not learnt
    assert after.learnt == after.number - 1
    assert f"{after.predicted} predicted (krylov" in after.describe()
    assert after.describe().endswith(f"left (ETA from pass {after.learnt})")
    report = PassReport("krylov", 4, 20, True, None, 41.0, 3.1e-2, 1e-4, 7, 45.0, 2)
    assert report.describe() == ("pass 4 of ≤ 20, 7 predicted (krylov, bound 3.1e-02 → tol 1e-04), 45 s a pass, "
                                 "~3.0 min left (ETA from pass 2)")


def test_after_the_first_pass_the_time_left_is_counted_in_later_passes_not_the_first(monkeypatch):
    """The first pass reads and decodes the source (and keeps its blocks); the passes after it
    over kept blocks repeat only its compute. After pass 1 the cycle the ETA counts in is the
    first pass's compute on the threads that share it (Passes.computed), not its wall time —
    unless the later passes read the source again."""
    import time

    from daskpca.passes import _cache, _geometry
    from daskpca.passes._progress import Passes, listen

    matrix = da.zeros((400, 10), chunks=(100, 10))  # 4 tasks a pass
    monkeypatch.setattr(_geometry, "worker_resources", lambda: (2, None, "two threads"))
    for reads, slow in ((("memory", 0.0), False), (("disk", 0.05), False), (("source", 0.0), True)):
        starts = []
        with listen(lambda report: starts.append(report) if report.seconds is None else None):
            passes = Passes("krylov", 5, at_most=True, tol=1e-4)
            passes.predict(5)
            with passes.read():
                time.sleep(0.3)  # the source's read and decode
            monkeypatch.setattr(_cache, "what_later_passes_read", lambda _, reads=reads: reads)
            passes.computed(0.2, matrix)  # 0.2 s of compute over 4 tasks on 2 threads: 0.1 s a pass
            with passes.read():
                pass
        cycle = starts[1].cycle_seconds
        if slow:
            assert cycle >= 0.3
        else:
            assert 0.1 + reads[1] <= cycle < 0.1 + reads[1] + 0.1, cycle
            assert starts[1].seconds_left == pytest.approx(4 * cycle)


def test_the_time_left_scales_the_clients_work_by_how_it_grows():
    """Block Krylov's client work after pass j grows with its basis (client_flops): the time left
    counts each pass to come with the last measured client time scaled by the solver's model,
    not the mean so far — and one-off work (a simulation, Passes.spent) is left out of it."""
    import time

    from daskpca.passes._progress import Passes, listen

    starts = []
    with listen(lambda report: starts.append(report) if report.seconds is None else None):
        passes = Passes("krylov", 10, at_most=True, tol=1e-4)
        passes.client_grows(lambda j: float(j))  # the client's work after pass j ∝ j
        passes.predict(4)
        with passes.read():
            time.sleep(0.05)
        time.sleep(0.1)  # the client after pass 1
        passes.spent(0.0)
        with passes.read():
            time.sleep(0.05)
        time.sleep(0.2)  # the client after pass 2, of which 0.1 s one-off
        passes.spent(0.1)
        with passes.read():
            pass
    second, third = starts[1], starts[2]
    # After pass 1: passes 2–4 to come, their client work 2, 3, 4 × pass 1's (0.1 s): 0.05 + 0.3 s each.
    assert 0.35 <= second.cycle_seconds < 0.45 and second.seconds_left == pytest.approx(3 * second.cycle_seconds)
    # After pass 2: passes 3–4, client 3, 4 × (0.2 − 0.1)/2 s.
    assert 0.05 + 0.1 * 3.5 / 2 <= third.cycle_seconds < 0.05 + 0.1 * 3.5 / 2 + 0.1, third.cycle_seconds


def test_a_pass_reports_its_tasks_compute_and_a_later_pass_over_kept_blocks_repeats_it(tmp_path):
    """Each sketch carries the seconds its tasks spent computing (leaves and merges, summed): on a
    store whose every chunk read is slowed, the first pass's wall time is mostly the reads, its
    compute is what the later passes over the kept blocks take, and the fit's ETA after pass 1
    counts in that, not in the first pass's time."""
    import time

    import zarr
    from zarr.storage import LocalStore, WrapperStore

    from daskpca import PCA
    from daskpca.passes._progress import listen

    class SlowStore(WrapperStore):
        async def get(self, key, prototype, byte_range=None):
            if "/c/" in "/" + key:
                time.sleep(0.02)  # blocks zarr's event loop: the chunk reads run one after another
            return await self._store.get(key, prototype, byte_range)

    X = spectral_data(np.concatenate([np.geomspace(10, 1, 6), 0.9 * np.linspace(1, 0.8, 114)]), 600, 120)
    array = zarr.create_array(store=LocalStore(tmp_path / "x.zarr"), shape=X.shape, chunks=(20, 120), dtype="f8")
    array[...] = X
    slow = zarr.open_array(SlowStore(LocalStore(tmp_path / "x.zarr", read_only=True)), mode="r")
    seen = []
    with listen(lambda report: seen.append((time.perf_counter(), report))), dask.config.set(scheduler="threads"):
        model = PCA(6, solver="krylov", tol=1e-4, random_state=0).fit(slow)
    passes = [report.seconds for _, report in seen if report.seconds is not None]
    second = [report for _, report in seen if report.seconds is None][1]
    assert model.n_passes_ >= 3 and passes[0] > 0.3  # 30 chunks at 20 ms each, not all at once
    assert second.cycle_seconds < passes[0] / 2  # the ETA after pass 1 counts in a later pass
    assert max(passes[1:]) < passes[0] / 2


def test_a_watched_fit_probes_its_input_unasked_where_the_probe_is_cheap(tmp_path):
    """Someone watching the passes (a progress line, a listener, the log at INFO) gets an ETA from
    the first pass: the fit probes ≤ 1 % of the rows itself (whole storage chunks) and says so in
    its plan. Nobody watching: no probe, no read beyond the fit's. A store of row blocks larger
    than 1 % of the rows (whole blocks would be decoded for a slice) is not probed unasked."""
    import zarr

    from daskpca import PCA
    from daskpca.passes._progress import listen
    from tests._helpers import CountingStore
    from zarr.storage import LocalStore

    X = spectral_data(np.concatenate([np.geomspace(10, 1, 6), 0.9 * np.linspace(1, 0.8, 114)]), 1000, 120)
    for rows, probed in ((5, True), (100, False)):
        path = tmp_path / f"x{rows}.zarr"
        zarr.create_array(store=LocalStore(path), shape=X.shape, chunks=(rows, 120), dtype="f8")[...] = X
        for watched in (True, False):
            store = CountingStore(LocalStore(path, read_only=True))
            starts = []
            with listen(lambda report: starts.append(report) if report.seconds is None else None, shows_predictions=watched), \
                    dask.config.set(scheduler="threads"):
                model = PCA(6, solver="krylov", tol=1e-4, random_state=0).fit(zarr.open_array(store, mode="r"))
            probe = model._fit_plan.probe
            assert (probe is not None) == (probed and watched), (rows, watched)
            reads = store.chunk_reads()
            if probe is not None:
                assert probe.rows == 10 and probe.chunks == 2 and "probed: 10 of 1000 rows" in str(model._fit_plan)
                assert starts[0].learnt == 0 and starts[0].predicted == probe.passes  # the ETA from the probe
                assert sum(reads.values()) == 200 + 2  # the fit's one read of 200 chunks (then its cache), the probe's 2
            else:
                assert sum(reads.values()) == 1000 // rows and starts[0].learnt is None


def test_a_labeled_field_is_probed_from_the_dataset_itself(tmp_path):
    """An xarray field (one time step per chunk, as archives store it) is probed by reading its
    sampled time steps from the dataset — the storage chunks holding them, ≤ 1 % — not the
    stacked matrix's task blocks (which would read hundreds of steps each); asked for
    (plan(probe=True)) or by a watched fit. Several sample dims: the rows dask stacks, sampled
    where they need few of its blocks (_probe.computed_rows)."""
    import xarray as xr
    import zarr
    from zarr.storage import LocalStore

    from daskpca import PCA
    from daskpca.passes._progress import listen
    from tests._helpers import CountingStore

    X = spectral_data(np.concatenate([np.geomspace(10, 1, 4), 0.9 * np.linspace(1, 0.8, 116)]), 600, 120)
    field = xr.DataArray(X.reshape(600, 10, 12), dims=("time", "lat", "lon"), name="t2m",
                         coords={"time": np.arange(600), "lat": np.linspace(-45, 45, 10), "lon": np.arange(12.0)})
    field.to_dataset().chunk({"time": 1}).to_zarr(LocalStore(tmp_path / "t.zarr"), zarr_format=3, consolidated=False)
    store = CountingStore(LocalStore(tmp_path / "t.zarr", read_only=True))
    data = xr.open_zarr(store, consolidated=False)["t2m"]
    estimator = PCA(4, solver="krylov", tol=1e-4, random_state=0)
    plan = estimator.plan(data, sample_dims="time", probe=True)
    steps = [key for key in store.chunk_reads() if key.startswith("t2m/")]
    assert plan.probe.passes is not None and plan.probe.rows == 6 and len(steps) == 6
    starts = []
    with listen(lambda report: starts.append(report) if report.seconds is None else None), dask.config.set(scheduler="threads"):
        model = estimator.fit(data, sample_dims="time")
    assert model._fit_plan.probe is not None and starts[0].learnt == 0
    stacked = field.expand_dims(member=[0, 1]).stack(sample=("member", "time")).transpose("sample", "lat", "lon")
    stacked = stacked.unstack("sample").transpose("member", "time", "lat", "lon")
    several = PCA(4, solver="krylov", tol=1e-4).plan(stacked, sample_dims=("member", "time"), probe=True)
    assert several.probe.passes is not None and several.probe.rows == 12  # from the stacked rows dask computes


def test_a_probe_that_cannot_read_its_rows_keeps_the_prior_and_says_why():
    """The probe only predicts: rows it cannot read here (a store only the workers reach, a damaged
    chunk) leave the prior point estimate, with the reason in the plan — a watched fit that probes
    unasked is never failed by its probe."""
    from daskpca import _probe

    def unreachable(start, stop):
        raise FileNotFoundError(f"/scratch/only-on-workers/x.zarr/c/{start}/0")

    matrix = da.zeros((1000, 50), chunks=(10, 50))
    found = _probe.probe(matrix, 4, tol=1e-4, max_passes=None, rows_of=unreachable)
    assert found.passes is None and found.prior == krylov.predicted_passes(1e-4)
    assert "could not be read here (FileNotFoundError: /scratch/only-on-workers" in found.reason


@pytest.mark.parametrize("case", ["constant", "rank 3", "all equal"])
def test_prediction_survives_degenerate_spectra(case):
    """The simulation runs (a listener is installed) on data with no variance, rank below k + 1, and
    equal eigenvalues (no gap, an invariant space at once: the simulated fit stops, as the fit does)."""
    n, d, k = 300, 40, 4
    rng = np.random.default_rng(0)
    if case == "constant":
        X = np.ones((n, d)) * 3.0
    elif case == "rank 3":
        X = rng.standard_normal((n, 3)) @ rng.standard_normal((3, d))
    else:
        X = spectral_data(np.ones(d), n, d)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result, starts = _fit_reports(X, k, 1e-6, chunks=100)
    assert len(starts) == result.n_passes
    assert all(report.predicted is None or 1 <= report.predicted <= report.budget for report in starts)
    assert krylov.model_spectrum(np.zeros(5), 0.0, d, k) is None
    model = krylov.model_spectrum(np.ones(10), float(d), d, k)  # all equal: a flat tail
    assert np.allclose(model[0], 1.0) and model[1].sum() == d
    # C = I on the model: its Krylov space is invariant after one pass, nothing certified (as the fit)
    assert krylov.simulated_passes(*model, k, k + 10, 1e-6, 5) == [1.0]


def clustered_spectrum(n, d, k, split, *, seed=0):
    """k modes (variances 10·(1 + split) … 1 + split) above a noise continuum starting at 1:
    λ_k/λ_{k+1} = 1 + ``split``, a cluster across the cut (0: λ_k = λ_{k+1} repeated)."""
    rng = np.random.default_rng(seed)
    r = min(n - 1, d)
    variances = np.concatenate([np.geomspace(10.0, 1.0, k) * (1 + split), np.linspace(1.0, 0.5, r - k)])
    u = np.linalg.qr(rng.standard_normal((n, r)))[0]
    u = np.linalg.qr(u - u.mean(axis=0))[0]
    v = np.linalg.qr(rng.standard_normal((d, r)))[0]
    return (u * np.sqrt(variances * (n - 1))) @ v.T + 10 * rng.random(d)


#: Each spectrum of the issue-41 grid, and the most its returned bound was measured to exceed the
#: returned answer's true sin θ where that is above 1e-10 (tol 1e-3 … 1e-7, 600 × 150, k = 4).
#: Only the continuum meets the 3× contract; where the ratio is larger the answer runs ahead of
#: the bound (the left components at fast decay, by 10–10³× what τ_N certifies: no bound computed
#: from the fit's observations can be within 3× there, see
#: test_on_fast_decay_no_bound_from_the_fits_observations_is_within_3x_of_the_truth) or its error
#: sits below a plateau (the refined answer: 2.4–5.2×). None: nothing is certified (bound 1).
TIGHTNESS_GRID = {
    "fast 0.5": (lambda: fast_spectrum(600, 150, 4, 0.5), None),  # truths below 1e-10: 6e-11 at pass 2
    "fast 0.8": (lambda: fast_spectrum(600, 150, 4, 0.8), 16.0),  # measured 8.8× (pass 3), 14.7× (pass 4)
    "continuum": (lambda: hard_spectrum(600, 150, 4, 1.2), 3.0),  # measured 1.4–1.6×
    # measured 2.4× (1e-3), 4.2×, 5.2× (1e-5, 1e-6), 3.8× (1e-7; 6.9× with two bands 16 deep, 7.7× with one)
    "plateau": (lambda: plateau_spectrum(600, 150, 4, 1.5), 6.0),
    "cluster": (lambda: clustered_spectrum(600, 300, 4, 1e-6), None),  # λ_k/λ_{k+1} = 1 + 1e-6
    "repeated": (lambda: clustered_spectrum(600, 300, 4, 0.0), None),  # λ_k = λ_{k+1}
}


@pytest.mark.parametrize("tol", [1e-3, 1e-5, 1e-7])
@pytest.mark.parametrize("spectrum", list(TIGHTNESS_GRID))
def test_returned_bound_against_the_truth_over_spectra_and_tols(spectrum, tol):
    """Issue 41: the returned bound is never below the true sin θ (float64 LAPACK reference), and
    within the measured factor of it (:data:`TIGHTNESS_GRID`); where λ_k and λ_{k+1} are not
    separated within the budget the bound is 1 and the fit warns."""
    make, most = TIGHTNESS_GRID[spectrum]
    X = make()
    n, d = X.shape
    exact = reference_pca(X)[0][:4]
    with dask.config.set(scheduler="sync"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = krylov.solve(da.from_array(X, chunks=(n // 2, d)), ComponentRequest(4, n, d), random_state=0, tol=tol,
                              max_passes=8 if most is None and spectrum != "fast 0.5" else 12)
    true, bound = sin_theta(result.components, exact), result.info["error_bound"]
    assert true <= bound + 1e-14
    if most is not None and true > 1e-10:
        assert bound <= most * true, (true, bound)
    if spectrum in ("cluster", "repeated"):  # honest: nothing certified, and said so
        assert bound == 1.0 and not result.info["converged"]
        assert any(issubclass(w.category, AccuracyWarning) for w in caught)
    else:
        assert result.info["converged"] and bound <= tol


def _what_the_fit_observed(X, k, passes, monkeypatch):
    """``(basis, result, true, nystrom)`` of a block Krylov fit of ``passes`` passes (tol 1e-12):
    its basis (V, W = C·V, T), its result, the returned answer's true sin θ and the Nyström part
    W·T⁻¹·Wᵀ — what the tests below build a C' observing the same from."""
    n, d = X.shape
    seen = {}
    original = krylov.estimate
    with monkeypatch.context() as patch, dask.config.set(scheduler="sync"), warnings.catch_warnings():
        patch.setattr(krylov, "estimate", lambda basis, k, **o: seen.update(basis=basis) or original(basis, k, **o))
        warnings.simplefilter("ignore", AccuracyWarning)
        result = krylov.solve(da.from_array(X, chunks=(n // 2, d)), ComponentRequest(k, n, d), random_state=0,
                              tol=1e-12, max_passes=passes)
    basis = seen["basis"]
    nystrom = basis.W @ np.linalg.solve(basis.T, basis.W.T)
    return basis, result, sin_theta(result.components, reference_pca(X)[0][:k]), (nystrom + nystrom.T) / 2


def test_on_fast_decay_no_bound_from_the_fits_observations_is_within_3x_of_the_truth(monkeypatch):
    """Why the 3× contract is out of reach on fast decay (rate 0.8; TIGHTNESS_GRID): the returned
    answer (the left projection) runs ahead of what the passes observed. Everything a fit sees —
    V, W = C·V and trace C — is also what it sees of C' = W·T⁻¹·Wᵀ + τ_N·zzᵀ, the Nyström part
    plus the unseen variance τ_N = trace C − trace(W·T⁻¹·Wᵀ) put on z, the direction of the answer
    outside span V: C'·V = W, the same trace, every λ'_{k+s} below the λ̂_{k+s} the bounds assume.
    So the fit on C' makes the same basis, answer and bound — and that answer's true error on C' is
    within 1.7× of the bound, 7–9× its true error on C: any bound computed from these observations
    that holds on C' is ≥ 7× the truth on C. (The reported bound holds on C' too.)"""
    from daskpca.solvers._bounds import NEXT_CLUSTER, ROUNDOFF_RESIDUAL, next_eigenvalue, resolved_cuts

    X = fast_spectrum(600, 150, 4, 0.8)
    n, d, k = X.shape[0], X.shape[1], 4
    centered = X - X.mean(axis=0)
    scatter = centered.T @ centered
    for passes in (3, 4):
        basis, result, true, nystrom = _what_the_fit_observed(X, k, passes, monkeypatch)
        answer, bound = result.components, result.info["error_bound"]
        assert result.info["projection"] == "left"
        outside = answer.T - basis.V @ (basis.V.T @ answer.T)
        z = np.linalg.svd(outside, full_matrices=False)[0][:, 0]
        other = nystrom + (np.trace(scatter) - np.trace(nystrom)) * np.outer(z, z)
        assert np.linalg.norm(other @ basis.V - basis.W) <= 1e-9 * np.linalg.norm(basis.W)  # it observes the same
        assert np.trace(other) == pytest.approx(np.trace(scatter), rel=1e-12)
        values, vectors = np.linalg.eigh(other)
        values, vectors = values[::-1], vectors[:, ::-1]
        theta, Y = basis.ritz()
        norms = np.linalg.norm(basis.W @ Y - (basis.V @ Y) * theta, axis=0)
        roundoff = ROUNDOFF_RESIDUAL * np.sqrt(n) * theta[0]
        most = min(NEXT_CLUSTER, theta.size - k - 1)
        below = [next_eigenvalue(theta, norms, k + s, np.trace(scatter), roundoff, min(n, d)) for s in range(most + 1)]
        cuts = resolved_cuts(theta, norms, k, most, below, roundoff)
        for s in (s for s, used in enumerate(cuts) if used):  # within the bounds' assumption, where they use it
            assert values[k + s] <= below[s]
        worst = sin_theta(answer, vectors[:, :k].T)
        assert worst <= bound <= 1.7 * worst  # the bound holds there, and is near what it must cover
        assert worst >= 6 * true  # so no valid bound is within 3x (nor 6x) of the truth on C


def test_on_a_plateau_no_bound_from_the_fits_observations_is_within_3x_of_the_truth(monkeypatch):
    """Why the 3× contract is out of reach on TIGHTNESS_GRID's plateau at mid tolerances (λ_k/λ_{k+1}
    = 1.5, five equal modes, then a tail; the refined answer returned, its bound 4–5× its truth):
    C' = W·T⁻¹·Wᵀ (the Nyström part) plus the unseen variance on the answer's directions outside
    span V — each at the largest level the used cuts' λ̂_{k+s+1} allow, the rest spread thin on
    the directions orthogonal to both — observes what C does (C'·V = W to round-off, the same
    trace), so the fit on C' makes the same basis, answer and bound. The bound holds on C' (within
    1.4× of the answer's error there), and that error is 3.4× and 3.8× the answer's error on C
    after passes 5 and 6: no bound from these observations can be within 3× there."""
    from daskpca.solvers._bounds import NEXT_CLUSTER, ROUNDOFF_RESIDUAL, next_eigenvalue, resolved_cuts

    X = plateau_spectrum(600, 150, 4, 1.5)
    n, d, k = X.shape[0], X.shape[1], 4
    centered = X - X.mean(axis=0)
    scatter = centered.T @ centered
    total = np.trace(scatter)
    for passes, least in ((5, 3.3), (6, 3.7)):
        basis, result, true, nystrom = _what_the_fit_observed(X, k, passes, monkeypatch)
        answer, bound = result.components, result.info["error_bound"]
        assert result.info["projection"] == "refined"
        unseen = total - np.trace(nystrom)
        outside = np.linalg.svd(answer.T - basis.V @ (basis.V.T @ answer.T), full_matrices=False)[0]
        for _ in range(3):  # the outside part is ~1e-6 of the answer: orthogonal to span V to round-off
            outside = np.linalg.qr(outside - basis.V @ (basis.V.T @ outside))[0]
        spare = np.linalg.qr(np.hstack([basis.V, outside, np.random.default_rng(0).standard_normal((d, d))]))[0]
        spare = spare[:, basis.V.shape[1] + k:]
        theta, Y = basis.ritz()
        norms = np.linalg.norm(basis.W @ Y - (basis.V @ Y) * theta, axis=0)
        roundoff = ROUNDOFF_RESIDUAL * np.sqrt(n) * theta[0]
        most = min(NEXT_CLUSTER, theta.size - k - 1)
        below = [next_eigenvalue(theta, norms, k + s, total, roundoff, min(n, d)) for s in range(most + 1)]
        used = [s for s, cut in enumerate(resolved_cuts(theta, norms, k, most, below, roundoff)) if cut]

        def twin(level):
            other = nystrom + level * outside @ outside.T
            other += (unseen - k * level) / spare.shape[1] * spare @ spare.T
            values, vectors = np.linalg.eigh(other)
            return other, values[::-1], vectors[:, ::-1]

        low, high = 0.0, unseen / k  # the largest level within the bounds' assumption where they use it
        for _ in range(40):
            middle = (low + high) / 2
            values = twin(middle)[1]
            low, high = (middle, high) if all(values[k + s] <= below[s] for s in used) else (low, middle)
        other, values, vectors = twin(low)
        assert np.linalg.norm(other @ basis.V - basis.W) <= 1e-12 * np.linalg.norm(basis.W)  # it observes the same
        assert np.trace(other) == pytest.approx(total, rel=1e-12)
        worst = sin_theta(answer, vectors[:, :k].T)
        assert worst <= bound <= 1.4 * worst  # the bound holds there, and is near what it must cover
        assert worst >= least * true  # so no valid bound is within 3x of the truth on C


def test_the_issues_hard_field_meets_1e_4_in_at_most_7_passes():
    """Issue 41's hard spectrum scaled from 4·10⁴ × 10⁴ to 2000 × 500 (the same n/d, so the same
    Marchenko–Pastur edge): 20 modes s_i = 10·0.92^i, the 20th just above a unit noise continuum,
    float32. tol = 1e-4 in ≤ 7 passes, the bound within 3× of the truth (measured at 3000 × 750:
    6 passes, 6.1e-5 against 3.0e-5)."""
    rng = np.random.default_rng(0)
    n, d, k = 2000, 500, 20
    signal = (rng.standard_normal((n, k)) * 10.0 * 0.92 ** np.arange(k)) @ (rng.standard_normal((k, d)) / np.sqrt(d))
    X = (signal + 5 * rng.random(d) + rng.standard_normal((n, d))).astype(np.float32)
    with dask.config.set(scheduler="sync"):
        result = krylov.solve(da.from_array(X, chunks=(n // 4, d)), ComponentRequest(k, n, d), random_state=0, tol=1e-4)
    true = sin_theta(result.components, reference_pca(X)[0][:k])
    assert result.info["converged"] and result.n_passes <= 7
    assert true <= result.info["error_bound"] <= 3 * true


def test_the_next_eigenvalue_estimate_allows_the_products_round_off():
    """λ̂_{k+1} = θ_{k+1} + ‖r_{k+1}‖ rests on a computed residual, which cannot see the round-off
    of W = C·V; the same allowance as ‖R_k‖'s is added, so that at the round-off floor (a residual
    computed as 0) the estimate stays above θ_{k+1} by it, and the gap, hence the bound, is not
    overstated. The trace figure needs none (its own TRACE_RTOL)."""
    from daskpca.solvers._bounds import next_eigenvalue

    theta, norms = np.array([4.0, 3.0, 2.0, 1.0]), np.zeros(4)
    assert next_eigenvalue(theta, norms, 2, None) == 2.0
    assert next_eigenvalue(theta, norms, 2, None, roundoff=1e-12) == 2.0 + 1e-12
    assert next_eigenvalue(theta, norms, 2, 10.0, roundoff=1e-12) == 2.0 + 1e-12  # the trace figure, 10 − 8 + 1e-7, is larger


def test_the_probes_prediction_stands_until_the_fits_own_simulation_can_run(monkeypatch):
    """A fit given a probed plan shows the probe's simulated count from its first pass; from pass 2
    (krylov.SIMULATED_FROM_PASS) its own simulation, on Ritz values that know the k-th gap 1 % of
    the rows could not resolve, replaces it: a continuum the probe under-predicts (16 000 × 2000:
    7 and 9 passes for 10 and 14; the fit's own 11 and 15) is predicted within a pass of the count
    made from the start of pass 3, and so is 0.75ⁱ, whose probe was right. Kept while the fit
    kept to the probe's course (the fifth session's rule), the continuum's count was the probe's
    until pass 5."""
    from daskpca import PCA
    from daskpca.passes._progress import listen

    calls = []
    real = krylov.simulated_total
    monkeypatch.setattr(krylov, "simulated_total", lambda *a, **k: calls.append(1) or real(*a, **k))
    n, d, k = 2400, 200, 10
    spectra = {"rate 0.75": 0.75 ** np.arange(d),
               "continuum": np.concatenate([np.geomspace(10, 1, k), 0.9 * np.linspace(1, 0.8, d - k)])}
    for name, variances in spectra.items():
        X = spectral_data(variances, n, d)
        estimator = PCA(k, solver="krylov", tol=1e-6, random_state=0)
        plan = estimator.plan(X, probe=True)
        calls.clear()
        starts = []
        with listen(lambda report: starts.append(report) if report.seconds is None else None):
            model = estimator.fit(X, plan=plan)
        made = model.n_passes_
        assert [report.learnt for report in starts[:2]] == [0, 0]  # the probe's, before the fit knows more
        assert starts[0].predicted == plan.probe.passes
        assert calls and all(report.learnt >= krylov.SIMULATED_FROM_PASS for report in starts[2:])
        assert all(abs(report.predicted - made) <= 1 for report in starts[2:]), ([r.predicted for r in starts], made)
        if name == "continuum":
            assert plan.probe.passes < made - 1  # the probe's count was off by more than a pass


def test_three_informative_bounds_decide_the_count_by_their_measured_fall(monkeypatch):
    """Once the last three bounds are informative their fall is the fit's own rate: it sets the
    count from then on, and no simulation is run for it (a model spectrum's was off by 2–4 passes
    both ways on continua and plateaus at 16 000 × 2000, the measured fall exact from pass 5). A
    continuum λ_k/λ_{k+1} = 1.2 at 2400 × 200, tol 1e-6: 9 passes, predicted 9 at every start from
    the sixth (the simulation's 7, 8, 8, 9 before); the count never passes the pass at which the
    basis spans the data (here 10: min(n − 1, d) / ℓ)."""
    from daskpca import PCA
    from daskpca.passes._progress import listen

    calls = []
    real = krylov.simulated_total
    monkeypatch.setattr(krylov, "simulated_total", lambda *a, **k: calls.append(1) or real(*a, **k))
    n, d, k = 2400, 200, 10
    X = spectral_data(np.concatenate([np.geomspace(12, 1.2, k), np.linspace(1.0, 0.8, d - k)]), n, d)
    starts = []
    with listen(lambda report: starts.append((report, len(calls))) if report.seconds is None else None):
        model = PCA(k, solver="krylov", tol=1e-6, random_state=0).fit(X)
    history = model.solver_info_["bound_history"]

    def informative(before: int) -> bool:  # the three bounds before pass `before` all informative
        return before > 3 and all(b < krylov.INFORMATIVE_BOUND for b in history[before - 4:before - 1])

    decided = [(report, sims) for report, sims in starts if informative(report.number)]
    assert len(decided) >= 3
    for report, sims in decided:
        assert report.predicted == model.n_passes_ and report.learnt == report.number - 1
        assert sims == decided[0][1]  # no simulation once the fall decides
    assert all(report.predicted <= 10 for report, _ in starts)


def test_the_pass_count_is_simulated_only_where_someone_is_shown_it(monkeypatch):
    """The simulated prediction of the passes left costs client time (a small fit on a model
    spectrum): a fit nobody watches — its own PassClock only times the passes — skips it; a
    progress line (any listener that shows predictions) gets it."""
    from daskpca import PCA
    from daskpca.passes._progress import listen

    calls = []
    real = krylov.simulated_total
    monkeypatch.setattr(krylov, "simulated_total", lambda *a, **k: calls.append(1) or real(*a, **k))
    X = hard_spectrum(600, 150, 4, 1.2)
    plain = PCA(4, solver="krylov", tol=1e-6, random_state=0).fit(X)
    assert calls == [] and plain.n_passes_ > 3
    shown = []
    with listen(lambda report: shown.append(report.predicted)):
        watched = PCA(4, solver="krylov", tol=1e-6, random_state=0).fit(X)
    assert calls and any(p is not None for p in shown)
    np.testing.assert_array_equal(watched.components_, plain.components_)  # the answer does not depend on it
