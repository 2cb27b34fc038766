"""Extended EOFs (daskpca.eof.lagged): the lazy time-delay embedding against an explicit one, the
components' lag dimension, and one read per pass."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import xarray as xr

from daskpca import PCA
from daskpca.exceptions import InvalidParameterError
from daskpca.eof.lagged import LAG, lag_embed

from _helpers import reference_pca, sin_theta, write_zarr


def _propagating(n=300, n_lat=4, n_lon=10, seed=0):
    """A wave travelling east plus noise: the signal that extended EOFs capture as a lagged pair."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)[:, None, None]
    lon = np.arange(n_lon)[None, None, :]
    lat = np.linspace(-1, 1, n_lat)[None, :, None]
    wave = np.cos(2 * np.pi * (t / 24.0 - lon / n_lon)) * np.exp(-lat**2)
    return wave + 0.2 * rng.standard_normal((n, n_lat, n_lon)) + 3.0


def _explicit(X, n_lags, lag_step):
    m = X.shape[0] - (n_lags - 1) * lag_step
    return np.concatenate([X[l * lag_step : l * lag_step + m] for l in range(n_lags)], axis=1)


@pytest.mark.parametrize("n_lags, lag_step", [(1, 1), (3, 2), (5, 1)])
def test_matrix_embedding_equals_the_explicit_one_and_fits_like_it(n_lags, lag_step):
    X = _propagating().reshape(300, -1)
    embedded = lag_embed(da.from_array(X, chunks=(70, 40)), n_lags, lag_step)
    explicit = _explicit(X, n_lags, lag_step)
    assert isinstance(embedded, da.Array)
    np.testing.assert_array_equal(embedded.compute(), explicit)
    pca = PCA(4, solver="covariance").fit(embedded)
    components, variance, _ = reference_pca(explicit)
    assert sin_theta(pca.components_, components[:4]) < 1e-10
    np.testing.assert_allclose(pca.explained_variance_, variance[:4], rtol=1e-10)


def test_labeled_components_come_back_with_a_lag_dimension_and_one_read_per_pass(tmp_path):
    field = _propagating()
    field[:, 0, :2] = np.nan  # masked points stay masked at every lag
    array, store = write_zarr(tmp_path / "f.zarr", field, chunks=(60, 4, 10))
    X = xr.DataArray(da.from_zarr(array), dims=("time", "lat", "lon"),
                     coords={"time": np.arange(300) * 10, "lat": np.linspace(-30, 30, 4), "lon": np.arange(10) * 36.0})
    embedded = lag_embed(X, 4, 3, sample_dim="time")
    assert embedded.dims == ("time", LAG, "lat", "lon") and list(embedded[LAG].values) == [0, 3, 6, 9]
    assert embedded.sizes["time"] == 300 - 9 and int(embedded["time"][-1]) == (300 - 10) * 10
    assert not store.chunk_reads()  # building it read nothing
    pca = PCA(2, solver="covariance", weights="coslat").fit(embedded, sample_dims="time")
    assert pca.n_passes_ == 1 and set(store.chunk_reads().values()) == {1} and len(store.chunk_reads()) == 5
    eofs = pca.to_xarray()["components"]
    assert eofs.dims == ("mode", LAG, "lat", "lon")
    assert bool(eofs.isel(lat=0, lon=slice(0, 2)).isnull().all()) and not bool(eofs.isel(lat=1).isnull().any())
    # The travelling wave is one lagged pair: the two leading modes explain most of its variance.
    assert pca.explained_variance_ratio_[:2].sum() > 0.5
    explicit = _explicit(np.nan_to_num(field).reshape(300, -1), 4, 3)
    weights = np.tile(np.sqrt(np.cos(np.deg2rad(X["lat"].values)))[:, None] * np.ones(10), (4, 1, 1)).ravel()
    keep = ~np.isnan(_explicit(field.reshape(300, -1), 4, 3)).any(axis=0)
    components, _, _ = reference_pca(explicit[:, keep] * weights[keep])
    assert sin_theta(pca.components_, components[:2]) < 1e-9


@pytest.mark.parametrize(
    "kwargs, match",
    [(dict(n_lags=0), "n_lags"), (dict(n_lags=2, lag_step=0), "lag_step"), (dict(n_lags=200, lag_step=2), "no window fits")],
)
def test_bad_embeddings_name_the_fix(kwargs, match):
    with pytest.raises(InvalidParameterError, match=match):
        lag_embed(np.zeros((300, 3)), **kwargs)
    with pytest.raises(InvalidParameterError, match="sample_dim"):
        lag_embed(xr.DataArray(np.zeros((30, 3)), dims=("time", "x")), 2)
