"""Probabilistic PCA by EM: NaN is missing, the subspace survives 20% missing values."""

import dask
import dask.array as da
import numpy as np
import pytest

from daskpca.solvers import ppca
from daskpca.solvers._base import ComponentRequest
from daskpca.exceptions import ConvergenceWarning

from _helpers import low_rank_data, reference_pca, sin_theta, write_zarr


def _factor_data(n=2_000, d=30, seed=0):
    """Rank-3 signal with feature-dependent loadings, isotropic noise 0.5², offset means."""
    rng = np.random.default_rng(seed)
    loadings = rng.standard_normal((d, 3)) * (0.2 + 3 * rng.random(d))[:, None]
    scores = rng.standard_normal((n, 3)) * np.array([3.0, 2.0, 1.5])
    return scores @ loadings.T + 0.5 * rng.standard_normal((n, d)) + 5 * rng.random(d)


def _with_missing(X, fraction=0.2, seed=1):
    X = X.copy()
    X[np.random.default_rng(seed).random(X.shape) < fraction] = np.nan
    return X


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(
    "shape, chunks, max_iter",
    [
        ((600, 30), (150, 30), 200),  # tall, row blocks
        ((600, 30), ((7, 293, 300), (10, 20)), 200),  # irregular rows, column pieces
        ((80, 120), (30, 50), 400),  # wide: σ² is averaged over many zero eigenvalues, ~240 iterations
    ],
)
def test_without_missing_values_matches_exact_pca(shape, chunks, max_iter, dtype):
    X = low_rank_data(*shape, rank=5, noise=0.5, dtype=dtype)
    components, variance, mean = reference_pca(X.astype(np.float64))
    k = 5
    result = ppca.solve(da.from_array(X, chunks=chunks), ComponentRequest(k, *shape), random_state=0, max_iter=max_iter)
    assert result.info["converged"] and result.info["n_missing"] == 0
    assert result.n_passes == 1 + result.info["n_iter"]
    np.testing.assert_allclose(result.components @ result.components.T, np.eye(k), atol=1e-12)
    assert sin_theta(result.components, components[:k]) <= 1e-6  # measured ≈ 6e-9
    # At the ML fixed point the model variances are the sample eigenvalues, σ² the mean of the rest.
    np.testing.assert_allclose(result.explained_variance, variance[:k], rtol=1e-6)
    rest = variance[k:].sum() / (shape[1] - k)  # the d - k discarded eigenvalues (0 beyond min(n, d))
    assert result.info["noise_variance"] == pytest.approx(rest, rel=1e-6)
    np.testing.assert_allclose(result.mean, mean, rtol=1e-12)
    assert result.total_variance == pytest.approx(variance.sum(), rel=1e-10)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("chunks", [(500, 30), ((100, 900, 1000), (12, 18))])
def test_twenty_percent_missing_recovers_the_subspace(chunks, dtype):
    X = _factor_data()
    complete, _, _ = reference_pca(X)
    missing = _with_missing(X).astype(dtype)
    result = ppca.solve(da.from_array(missing, chunks=chunks), ComponentRequest(3, *X.shape), random_state=0)
    ours = sin_theta(result.components, complete[:3])
    # Mean imputation + exact PCA on the same data: biased towards high-variance features.
    imputed = np.where(np.isnan(missing), np.nanmean(missing, axis=0), missing).astype(np.float64)
    baseline = sin_theta(reference_pca(imputed)[0][:3], complete[:3])
    assert ours <= 0.05  # measured ≈ 3e-3
    assert ours <= baseline / 5  # measured baseline ≈ 6e-2
    assert result.info["n_missing"] == int(np.isnan(missing).sum())
    assert result.info["missing_fraction"] == pytest.approx(0.2, abs=0.01)
    np.testing.assert_allclose(result.mean, np.nanmean(missing.astype(np.float64), axis=0), rtol=1e-12)
    expected_total = np.nanvar(missing.astype(np.float64), axis=0, ddof=1).sum()
    assert result.total_variance == pytest.approx(expected_total, rel=1e-12)
    assert result.info["noise_variance"] == pytest.approx(0.25, rel=0.1)


def test_warm_start_and_warning_at_max_iter():
    X = _with_missing(_factor_data(n=800))
    Xd = da.from_array(X, chunks=(200, 30))
    request = ComponentRequest(3, *X.shape)
    cold = ppca.solve(Xd, request, random_state=0)
    warm = ppca.solve(Xd, request, init=cold.components + 1e-3)
    # init fixes the starting subspace only; the scales and σ² still start from the average
    # variance, and their convergence sets the iteration count here (measured: 13 and 13).
    assert warm.info["converged"] and warm.info["n_iter"] <= cold.info["n_iter"]
    assert sin_theta(warm.components, cold.components) <= 1e-6
    with pytest.warns(ConvergenceWarning, match="max_iter=2"):
        short = ppca.solve(Xd, request, random_state=0, max_iter=2)
    assert short.n_passes == 3 and not short.info["converged"]


def test_infinity_is_an_error_but_nan_is_missing():
    X = low_rank_data(100, 10)
    X[5, 5] = np.nan
    ppca.solve(da.from_array(X, chunks=(30, 10)), ComponentRequest(2, 100, 10), random_state=0)
    X[7, 2] = -np.inf
    with pytest.raises(ValueError, match="row 7, column 2"):
        ppca.solve(da.from_array(X, chunks=(30, 10)), ComponentRequest(2, 100, 10))
    assert ppca.OPTIONS == ("max_iter", "tol", "init", "checkpoint")


def test_a_feature_never_observed_gets_zero_loading():
    X = _factor_data(n=300, d=12)
    X[:, 4] = np.nan
    result = ppca.solve(da.from_array(X, chunks=(100, 12)), ComponentRequest(2, *X.shape), random_state=0)
    np.testing.assert_allclose(result.components[:, 4], 0, atol=1e-12)
    assert np.all(np.isfinite(result.components))


@pytest.mark.parametrize("chunks", [(130, 40), (130, 15)])
def test_reads_each_chunk_once_plus_once_per_iteration(tmp_path, chunks):
    X = _with_missing(low_rank_data(1_000, 40, noise=0.5)).astype(np.float32)
    array, store = write_zarr(tmp_path / "x.zarr", X, chunks)
    n_chunks = int(np.prod([-(-s // c) for s, c in zip(X.shape, chunks)]))
    with dask.config.set(scheduler="threads"):
        result = ppca.solve(da.from_zarr(array), ComponentRequest(4, *X.shape), random_state=0)
    reads = store.chunk_reads()
    assert len(reads) == n_chunks and set(reads.values()) == {1 + result.info["n_iter"]}
    assert result.n_passes == 1 + result.info["n_iter"]
