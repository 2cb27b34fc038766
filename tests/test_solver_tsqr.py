"""The TSQR solver: exact on every layout, one pass, accurate where the covariance path fails,
and a peak memory of a few d×d R factors."""

import tracemalloc

import dask
import dask.callbacks
import dask.array as da
import numpy as np
import pytest

from daskpca.solvers import covariance, tsqr
from daskpca.solvers._base import ComponentRequest

from _helpers import low_rank_data, reference_pca, sin_theta, write_zarr

LAYOUTS = [
    # (shape, chunks): tall, regular row blocks
    ((400, 30), (64, 30)),
    # tall, irregular row blocks and column pieces (concatenated per row block, not re-read)
    ((400, 30), ((1, 150, 49, 200), (10, 20))),
    # tall, small blocks: many levels of the merge tree, blocks with fewer rows than columns
    ((400, 30), (7, 13)),
    # wide: R factors are n_i × d (trapezoidal)
    ((40, 120), (16, 50)),
    # square-ish
    ((90, 80), (25, 40)),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape, chunks", LAYOUTS)
def test_matches_lapack_reference(shape, chunks, dtype):
    X = low_rank_data(*shape, dtype=dtype)
    # The reference sees exactly the stored values, so float32 input must be exact too.
    components, variance, mean = reference_pca(X.astype(np.float64))
    k = 5
    result = tsqr.solve(da.from_array(X, chunks=chunks), ComponentRequest(k, *shape))
    assert result.n_passes == 1
    assert result.components.shape == (k, shape[1])
    np.testing.assert_allclose(result.components @ result.components.T, np.eye(k), atol=1e-12)
    assert sin_theta(result.components, components[:k]) <= 1e-10
    np.testing.assert_allclose(result.explained_variance, variance[:k], rtol=1e-10)
    np.testing.assert_allclose(result.mean, mean, rtol=1e-13)
    assert result.total_variance == pytest.approx(variance.sum(), rel=1e-10)
    # Every eigenvalue: relative to the largest (the noise ones are tiny next to the 1e4 offset).
    assert result.spectrum.shape == (min(shape),)
    np.testing.assert_allclose(result.spectrum, variance, rtol=0, atol=1e-10 * variance[0])


def test_spectrum_drives_fraction_and_mle():
    X = low_rank_data(300, 20)
    Xd = da.from_array(X, chunks=(50, 20))
    fraction = tsqr.solve(Xd, ComponentRequest(0.9, *X.shape))
    _, variance, _ = reference_pca(X)
    expected = int(np.searchsorted(np.cumsum(variance) / variance.sum(), 0.9, side="right") + 1)
    assert len(fraction.explained_variance) == expected
    assert len(tsqr.solve(Xd, ComponentRequest("mle", *X.shape)).explained_variance) >= 1


def _ill_conditioned(n=2_000, d=20, condition=1e10, seed=0):
    """Centered-exact data with singular values logspace(0, -log10(κ), d), plus a mean offset."""
    rng = np.random.default_rng(seed)
    u = rng.standard_normal((n, d))
    u -= u.mean(axis=0)  # columns orthogonal to 1: the centered data has exactly these σ
    u, _ = np.linalg.qr(u)
    v, _ = np.linalg.qr(rng.standard_normal((d, d)))
    singular_values = np.logspace(0, -np.log10(condition), d)
    return (u * singular_values) @ v.T + 0.05 * rng.standard_normal(d), singular_values


def test_recovers_small_singular_values_where_covariance_cannot():
    X, designed = _ill_conditioned()
    n, d = X.shape
    Xd = da.from_array(X, chunks=(300, 7))
    request = ComponentRequest(d, n, d)
    smallest = np.sqrt(tsqr.solve(Xd, request).explained_variance[-1] * (n - 1))
    lapack = np.linalg.svd(X - X.mean(axis=0), compute_uv=False)[-1]
    assert abs(smallest / designed[-1] - 1) <= 1e-6  # measured: 1.4e-7 (LAPACK SVD: 9e-9)
    assert abs(smallest / lapack - 1) <= 1e-6
    # The covariance path squares κ: λ_min = 1e-20·λ_max is below its ε·λ_max noise floor.
    via_covariance = np.sqrt(covariance.solve(Xd, request).explained_variance[-1] * (n - 1))
    assert abs(via_covariance / designed[-1] - 1) > 1e-2


def test_nonfinite_input_raises_with_location():
    X = low_rank_data(100, 10)
    X[57, 3] = np.nan
    with pytest.raises(ValueError, match="row 57, column 3"):
        tsqr.solve(da.from_array(X, chunks=(30, 4)), ComponentRequest(2, 100, 10))


@pytest.mark.parametrize("chunks", [(130, 40), (130, 15)])
def test_one_read_of_each_chunk(tmp_path, chunks):
    X = low_rank_data(1_000, 40, dtype=np.float32)
    array, store = write_zarr(tmp_path / "x.zarr", X, chunks)
    n_chunks = int(np.prod([-(-s // c) for s, c in zip(X.shape, chunks)]))
    with dask.config.set(scheduler="threads"):
        result = tsqr.solve(da.from_zarr(array), ComponentRequest(5, *X.shape))
    reads = store.chunk_reads()
    assert len(reads) == n_chunks and set(reads.values()) == {1}
    assert result.n_passes == 1


def _held_bytes(array: np.ndarray) -> int:
    """Bytes an array keeps alive: its own, or its base's when it is a view."""
    while array.base is not None:
        array = array.base
    return array.nbytes


@pytest.mark.parametrize("shape, chunks", [((37 * 40, 30), (40, 30)), ((37 * 10, 30), (10, 30))])
def test_merges_take_two_r_factors_and_results_own_their_memory(shape, chunks):
    # A merge that stacks many d×d R factors holds them all plus the stack and LAPACK's copies
    # (fan-in 8 peaked at 33·d²); a result that is a view of the stack keeps the stack alive.
    # 37 blocks: odd counts at some levels. Blocks of 10 rows < d: trapezoidal R, dense merges.
    graph = tsqr.r_graph(da.from_array(low_rank_data(*shape), chunks=chunks))
    dsk = dict(graph.__dask_graph__())
    merges = [key for key in dsk if key[0].startswith("tsqr-merge")]
    assert max(len(dask.core.get_dependencies(dsk, key)) for key in merges) <= 2
    assert len(merges) >= 36  # a binary tree: 36 pairwise merges, plus the odd ones passed up

    results = {}

    class Keep(dask.callbacks.Callback):
        def _posttask(self, key, result, dsk, state, id):
            if isinstance(result, tsqr._RPart):
                results[key] = result

    with dask.config.set(scheduler="sync"), Keep():
        dask.compute(graph)
    assert len(results) == 37 + len(merges)
    for key, part in results.items():
        assert _held_bytes(part.r) == part.r.nbytes, key
        assert part.r.shape[0] <= shape[1]


def test_peak_memory_is_a_few_r_factors():
    # The whole one-pass graph on float32 row blocks of d rows: the largest task holds ~4·d²
    # float64 (a merge: two R factors and its two private copies) and, run depth-first, one
    # finished R per tree level waits for its sibling. Measured ~8.6·d²; fan-in 8 took ~57·d².
    n_blocks, d = 32, 400
    X = da.from_array(np.random.default_rng(0).standard_normal((n_blocks * d, d)).astype(np.float32), chunks=(d, d))
    with dask.config.set(scheduler="sync"):
        dask.compute(tsqr.r_graph(X[:40, :8]))  # warm-up: imports and caches are not the solver's
        tracemalloc.start()
        try:
            dask.compute(tsqr.r_graph(X))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    r_factor = 8 * d * d
    assert peak <= (np.log2(n_blocks) + 6) * r_factor, peak / r_factor
