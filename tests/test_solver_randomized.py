"""Randomized subspace iteration: accuracy with defaults, q + 1 passes, parity with scikit-learn."""

import threading

import dask
import dask.array as da
import numpy as np
import pytest
from sklearn.utils.extmath import randomized_svd

from daskpca.passes import _sketch
from daskpca.solvers import krylov, randomized
from daskpca.solvers._base import ComponentRequest

from _helpers import low_rank_data, reference_pca, sin_theta, write_zarr

LAYOUTS = [
    ((600, 40), (100, 40)),  # tall, row blocks
    ((600, 40), ((5, 295, 300), (15, 25))),  # tall, irregular rows, column pieces
    ((60, 300), (25, 120)),  # wide: blocks with fewer rows than ℓ
    ((150, 120), (40, 50)),  # square-ish
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape, chunks", LAYOUTS)
def test_default_settings_match_exact_subspace(shape, chunks, dtype):
    # Rank-5 signal (variances 100 … 0.4) over noise 0.05²: a well-separated spectrum.
    X = low_rank_data(*shape, dtype=dtype)
    components, variance, mean = reference_pca(X.astype(np.float64))
    k = 4
    result = randomized.solve(da.from_array(X, chunks=chunks), ComponentRequest(k, *shape), random_state=0)
    q = 7 if k < 0.1 * min(shape) else 4
    assert result.info["n_power_iter"] == q
    assert result.n_passes == q + 1
    np.testing.assert_allclose(result.components @ result.components.T, np.eye(k), atol=1e-12)
    assert sin_theta(result.components, components[:k]) <= 1e-6  # measured ≈ 2e-15
    np.testing.assert_allclose(result.explained_variance, variance[:k], rtol=1e-8)
    np.testing.assert_allclose(result.mean, mean, rtol=1e-13)
    assert result.total_variance == pytest.approx(variance.sum(), rel=1e-10)
    assert result.spectrum is None


def _slow_decay(n=500, d=80, seed=1):
    """σ_i = i^(-1/2): a hard spectrum where the power iterations matter."""
    rng = np.random.default_rng(seed)
    u, _ = np.linalg.qr(rng.standard_normal((n, d)))
    v, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return (u / np.sqrt(np.arange(1, d + 1))) @ v.T + 3.0


@pytest.mark.parametrize("q", [0, 2, 6])
@pytest.mark.parametrize("seed", [0, 1])
def test_never_worse_than_scikit_learn(q, seed):
    X = _slow_decay()
    centered = X - X.mean(axis=0)
    exact, _, _ = reference_pca(X)
    k = 5
    # The same RandomState draws the same Ω (d×ℓ) in both implementations.
    ours = randomized.solve(
        da.from_array(X, chunks=(90, 50)),
        ComponentRequest(k, *X.shape),
        random_state=np.random.RandomState(seed),
        n_power_iter=q,
    )
    _, _, theirs = randomized_svd(centered, k, n_oversamples=10, n_iter=q, random_state=np.random.RandomState(seed))
    ours_error, their_error = sin_theta(ours.components, exact[:k]), sin_theta(theirs, exact[:k])
    assert ours_error <= their_error * (1 + 1e-6) + 1e-12
    assert ours.n_passes == q + 1


def test_reproducible_and_options_validated():
    X = da.from_array(low_rank_data(200, 30), chunks=(50, 30))
    request = ComponentRequest(3, 200, 30)
    a = randomized.solve(X, request, random_state=7, n_power_iter=1)
    b = randomized.solve(X, request, random_state=7, n_power_iter=1)
    np.testing.assert_array_equal(a.components, b.components)
    for bad in (-1, 1.5, "often"):
        with pytest.raises(ValueError, match="n_power_iter"):
            randomized.solve(X, request, n_power_iter=bad)
    with pytest.raises(ValueError, match="n_oversamples"):
        randomized.solve(X, request, n_oversamples=-2)
    with pytest.raises(ValueError, match="full spectrum"):
        randomized.solve(X, ComponentRequest(0.9, 200, 30))
    assert randomized.OPTIONS == ("n_oversamples", "n_power_iter", "checkpoint")


def test_sketch_size_is_capped_by_the_shape():
    X = low_rank_data(30, 12, rank=3)
    result = randomized.solve(da.from_array(X, chunks=(7, 5)), ComponentRequest(10, 30, 12), random_state=0)
    assert result.info["sketch_size"] == 12
    components, variance, _ = reference_pca(X)
    assert sin_theta(result.components, components[:10]) <= 1e-10  # ℓ = d: the exact answer
    np.testing.assert_allclose(result.explained_variance, variance[:10], rtol=1e-8)


def test_nonfinite_input_raises_in_the_first_pass():
    X = low_rank_data(100, 10)
    X[3, 9] = np.inf
    with pytest.raises(ValueError, match="row 3, column 9"):
        randomized.solve(da.from_array(X, chunks=(30, 4)), ComponentRequest(2, 100, 10))


def test_nonfinite_entries_in_a_later_slab_are_counted_and_located(monkeypatch):
    # NaN in the first slab's rows (which give the block's shift) and in a later slab: both are
    # found, the count is exact and the first one is reported by its global position.
    monkeypatch.setattr(_sketch, "SLAB_BYTES", 1)  # 2·(ℓ + 1) = 14 rows per slab
    X = low_rank_data(120, 10)
    X[61, 2] = X[95, 7] = np.nan
    X[2, 4] = -np.inf
    part = _sketch._sketch_block(X[56:], 56, np.ones((10, 6)))
    assert part.nonfinite.count == 2 and part.nonfinite.first == (61, 2)
    with pytest.raises(ValueError, match=r"3 non-finite value.*row 2, column 4"):
        randomized.solve(da.from_array(X, chunks=(56, 10)), ComponentRequest(2, 120, 10), n_oversamples=4)


@pytest.mark.parametrize("q", [0, 1, 3])
@pytest.mark.parametrize("chunks", [(130, 40), (130, 15)])
def test_reads_each_chunk_q_plus_1_times(tmp_path, q, chunks):
    X = low_rank_data(1_000, 40, dtype=np.float32)
    array, store = write_zarr(tmp_path / "x.zarr", X, chunks)
    n_chunks = int(np.prod([-(-s // c) for s, c in zip(X.shape, chunks)]))
    with dask.config.set(scheduler="threads"):
        result = randomized.solve(da.from_zarr(array), ComponentRequest(5, *X.shape), random_state=0, n_power_iter=q)
    reads = store.chunk_reads()
    assert len(reads) == n_chunks and set(reads.values()) == {q + 1}
    assert sum(reads.values()) == result.n_passes * n_chunks


def _textbook_subspace_iteration(X, omega, q):
    """Halko et al. Algorithm 4.4 in NumPy: an explicit QR after every multiply (2q + 2 products)."""
    centered = X - X.mean(axis=0)
    basis, _ = np.linalg.qr(centered @ omega)
    for _ in range(q):
        right, _ = np.linalg.qr(centered.T @ basis)
        basis, _ = np.linalg.qr(centered @ right)
    _, singular_values, vt = np.linalg.svd(basis.T @ centered, full_matrices=False)
    return singular_values, vt


@pytest.mark.parametrize("q", [0, 1, 3])
def test_one_pass_iteration_equals_the_textbook_scheme_on_a_steep_spectrum(q):
    # σ_i = 10^(-i/2) over 24 directions (κ(XΩ) ≈ 1e11) plus a mean offset. The fused pass uses
    # only orthogonal transformations, so it must agree with explicit QR after every multiply
    # to round-off relative to σ_1 (measured ≤ 3e-15·10^(i/2)); undoing X̃ᵀX̃Ω with R⁻¹ instead
    # would not (measured 7e-7 on component 8 with q = 0, same spectrum with a 1e3 offset).
    rng = np.random.default_rng(3)
    n, d, rank, k = 400, 60, 24, 8
    u, _ = np.linalg.qr(rng.standard_normal((n, rank)))
    v, _ = np.linalg.qr(rng.standard_normal((d, rank)))
    X = (u * 10.0 ** (-np.arange(rank) / 2)) @ v.T + rng.random(d)
    ours = randomized.solve(
        da.from_array(X, chunks=((37, 163, 200), (25, 35))), ComponentRequest(k, n, d),
        random_state=np.random.RandomState(5), n_power_iter=q,
    )
    omega = np.random.RandomState(5).standard_normal((d, k + 10))
    singular_values, vt = _textbook_subspace_iteration(X, omega, q)
    for i in range(k):  # every component on its own (the gaps are wide): angle, then variance
        assert sin_theta(ours.components[i : i + 1], vt[i : i + 1]) <= 1e-13 * 10 ** (i / 2)
    np.testing.assert_allclose(ours.explained_variance, singular_values[:k] ** 2 / (n - 1), rtol=1e-11)


def test_fewer_rows_than_the_sketch():
    # n = 8 rows: the centered data has rank 7 < ℓ; blocks of 3 rows have fewer rows than ℓ.
    X = low_rank_data(8, 50, rank=3)
    k = 8
    result = randomized.solve(da.from_array(X, chunks=(3, 20)), ComponentRequest(k, 8, 50), random_state=0)
    components, variance, _ = reference_pca(X)
    np.testing.assert_allclose(result.components @ result.components.T, np.eye(k), atol=1e-12)
    assert sin_theta(result.components[:7], components[:7]) <= 1e-10
    np.testing.assert_allclose(result.explained_variance[:7], variance[:7], rtol=1e-8, atol=1e-12)
    assert result.explained_variance[7] == 0.0


def test_slabs_inside_a_block_change_nothing(monkeypatch):
    # A leaf centers its block a cache-sized slab of rows at a time; many slabs per block (and a
    # ragged last one) must give the one-slab answer to round-off.
    X = low_rank_data(900, 40)
    X[::7] += 3.0  # rows that differ from their neighbours: slab boundaries matter
    dask_X = da.from_array(X, chunks=(450, 40))
    request = ComponentRequest(4, *X.shape)
    whole = randomized.solve(dask_X, request, random_state=0, n_power_iter=2)
    monkeypatch.setattr(_sketch, "SLAB_BYTES", 1)  # the minimum: 2·(ℓ + 1) = 30 rows per slab
    monkeypatch.setattr(_sketch, "WIDE_SLAB_BYTES", 1)
    assert len(_sketch._row_slabs(450, 40, 14)) == 15  # > SPLIT_EVERY: merged in two rounds
    slabbed = randomized.solve(dask_X, request, random_state=0, n_power_iter=2)
    assert sin_theta(slabbed.components, whole.components) <= 1e-12
    np.testing.assert_allclose(slabbed.explained_variance, whole.explained_variance, rtol=1e-12)
    assert slabbed.total_variance == pytest.approx(whole.total_variance, rel=1e-13)


def test_wide_data_gets_slabs_of_many_rows_for_cheap_merges():
    # d = 65 160, ℓ = 30: a 16 MiB slab would be 32 rows and the merges half the products' cost.
    assert _sketch.slab_rows(65_160, 30) == _sketch.MERGE_ROWS * 31
    assert _sketch.slab_rows(500, 30) == _sketch.SLAB_BYTES // (8 * 500)  # narrow: cache-sized
    assert _sketch.slab_rows(10**7, 30) == 2 * 31  # very wide: the floor, not 2.5 GB slabs


def test_each_thread_keeps_one_slab_buffer_until_the_fit_ends(monkeypatch):
    # A fresh cache-sized slab per leaf would be page-faulted and zeroed every time; the fit's
    # end drops the kept ones.
    seen = []
    scratch = _sketch._scratch

    def watched(n_rows, n_features):
        buffer = scratch(n_rows, n_features)
        seen.append((threading.get_ident(), buffer.__array_interface__["data"][0], len(_sketch._slab_buffers)))
        return buffer

    monkeypatch.setattr(_sketch, "_scratch", watched)
    monkeypatch.setattr(_sketch, "SLAB_BYTES", 200 * 40 * 8)  # 200-row slabs, two a leaf
    _sketch.release_slab_buffers()  # counted from none: this process ran other fits before
    X = da.from_array(low_rank_data(1200, 40), chunks=(300, 40))
    with dask.config.set(scheduler="threads", num_workers=2):
        randomized.solve(X, ComponentRequest(4, *X.shape), random_state=0, n_power_iter=2)
    assert len(seen) > 8
    by_thread = {}
    for thread, address, _ in seen:
        by_thread.setdefault(thread, set()).add(address)
    assert all(len(addresses) == 1 for addresses in by_thread.values())  # one buffer per thread, reused
    assert max(count for *_, count in seen) <= len(by_thread)
    assert _sketch._slab_buffers == {}  # released when the fit ended


@pytest.mark.parametrize("solver", [randomized, krylov])
def test_a_fit_stopped_by_an_error_drops_its_slab_buffers(monkeypatch, solver):
    # A fit that raises after its first pass kept one buffer per thread for the process's life,
    # and the next fit's threads added theirs (seen as 4 buffers for a 2-thread fit in CI).
    run_pass = solver.run_pass

    def failing_after_one(*args, first, **kwargs):
        if first:
            return run_pass(*args, first=first, **kwargs)
        assert _sketch._slab_buffers  # the first pass kept its threads' buffers
        raise RuntimeError("stopped between passes")

    monkeypatch.setattr(_sketch, "SLAB_BYTES", 200 * 40 * 8)
    monkeypatch.setattr(solver, "run_pass", failing_after_one)
    X = da.from_array(low_rank_data(1200, 40), chunks=(300, 40))
    with dask.config.set(scheduler="threads", num_workers=2), pytest.raises(RuntimeError, match="between passes"):
        solver.solve(X, ComponentRequest(4, *X.shape), random_state=0)
    assert _sketch._slab_buffers == {}


def test_an_empty_row_block_changes_nothing():
    X = low_rank_data(100, 10)
    empty = _sketch._sketch_block(X[:0], 0, np.ones((10, 6)))
    assert empty.count == 0 and empty.r.shape == (0, 6) and empty.ht.shape == (0, 10)
    request = ComponentRequest(3, *X.shape)
    with_gap = randomized.solve(da.from_array(X, chunks=((50, 0, 50), (10,))), request, random_state=0)
    without = randomized.solve(da.from_array(X, chunks=((50, 50), (10,))), request, random_state=0)
    assert sin_theta(with_gap.components, without.components) <= 1e-12
