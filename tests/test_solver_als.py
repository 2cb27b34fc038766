"""ALS: converges to the exact principal subspace, one read per iteration, warm starts help."""

import warnings

import dask
import dask.array as da
import numpy as np
import pytest

from daskpca.solvers import als
from daskpca.solvers._base import ComponentRequest
from daskpca.exceptions import ConvergenceWarning

from _helpers import low_rank_data, reference_pca, sin_theta, write_zarr

LAYOUTS = [
    ((500, 40), (100, 40)),  # tall, row blocks
    ((500, 40), ((3, 197, 300), (15, 25))),  # tall, irregular rows, column pieces
    ((60, 200), (25, 80)),  # wide
    ((120, 100), (35, 40)),  # square-ish
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape, chunks", LAYOUTS)
def test_converges_to_the_exact_solution(shape, chunks, dtype):
    X = low_rank_data(*shape, dtype=dtype)
    components, variance, mean = reference_pca(X.astype(np.float64))
    k = 4
    result = als.solve(da.from_array(X, chunks=chunks), ComponentRequest(k, *shape), random_state=0)
    assert result.info["converged"]
    assert result.n_passes == result.info["n_iter"]  # the mean pass is fused with iteration 1
    np.testing.assert_allclose(result.components @ result.components.T, np.eye(k), atol=1e-12)
    assert sin_theta(result.components, components[:k]) <= 1e-6  # measured ≈ 1e-8 (tol 1e-8)
    np.testing.assert_allclose(result.explained_variance, variance[:k], rtol=1e-8)
    assert np.all(np.diff(result.explained_variance) <= 0)
    np.testing.assert_allclose(result.mean, mean, rtol=1e-13)
    assert result.total_variance == pytest.approx(variance.sum(), rel=1e-10)


def test_warm_start_needs_fewer_iterations():
    X = low_rank_data(400, 30, rank=6, noise=0.5)
    Xd = da.from_array(X, chunks=(100, 30))
    request = ComponentRequest(5, *X.shape)
    cold = als.solve(Xd, request, random_state=0)
    exact, _, _ = reference_pca(X)
    nearby = exact[:5] + 1e-4 * np.random.default_rng(1).standard_normal((5, 30))
    warm = als.solve(Xd, request, init=nearby)
    assert warm.info["converged"] and cold.info["converged"]
    assert warm.info["n_iter"] < cold.info["n_iter"]
    assert sin_theta(warm.components, exact[:5]) <= 1e-6


def test_warns_when_max_iter_is_reached():
    X = da.from_array(low_rank_data(200, 20), chunks=(50, 20))
    with pytest.warns(ConvergenceWarning, match="max_iter=2"):
        result = als.solve(X, ComponentRequest(3, 200, 20), random_state=0, max_iter=2)
    assert not result.info["converged"] and result.n_passes == 2
    # Still a valid answer: orthonormal rows, variances of the data along them.
    np.testing.assert_allclose(result.components @ result.components.T, np.eye(3), atol=1e-12)
    assert issubclass(ConvergenceWarning, UserWarning)


def test_options_are_validated():
    X = da.from_array(low_rank_data(100, 10), chunks=(50, 10))
    request = ComponentRequest(2, 100, 10)
    with pytest.raises(ValueError, match="init has shape"):
        als.solve(X, request, init=np.ones((3, 10)))
    with pytest.raises(ValueError, match="max_iter"):
        als.solve(X, request, max_iter=0)
    with pytest.raises(ValueError, match="tol"):
        als.solve(X, request, tol=-1.0)
    with pytest.raises(ValueError, match="full spectrum"):
        als.solve(X, ComponentRequest("mle", 100, 10))
    assert als.OPTIONS == ("max_iter", "tol", "init", "checkpoint")


def test_nonfinite_input_raises_in_the_first_pass():
    X = low_rank_data(100, 10)
    X[42, 1] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # must raise before iterating, not warn at max_iter
        with pytest.raises(ValueError, match="row 42, column 1"):
            als.solve(da.from_array(X, chunks=(30, 4)), ComponentRequest(2, 100, 10))


@pytest.mark.parametrize("chunks", [(130, 40), (130, 15)])
def test_reads_each_chunk_once_per_iteration(tmp_path, chunks):
    X = low_rank_data(1_000, 40, dtype=np.float32)
    array, store = write_zarr(tmp_path / "x.zarr", X, chunks)
    n_chunks = int(np.prod([-(-s // c) for s, c in zip(X.shape, chunks)]))
    with dask.config.set(scheduler="threads"):
        result = als.solve(da.from_zarr(array), ComponentRequest(5, *X.shape), random_state=0)
    reads = store.chunk_reads()
    assert len(reads) == n_chunks and set(reads.values()) == {result.info["n_iter"]}
    assert result.n_passes == result.info["n_iter"]
