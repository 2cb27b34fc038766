"""Coordinates keep their dtype and attrs through fit, transform, inverse_transform, save and load."""

import dask.array as da
import numpy as np
import pytest
import xarray as xr

from daskpca import PCA


def _field(time_unit="us", n=30):
    rng = np.random.default_rng(0)
    time = (np.datetime64("2001-01", "M") + np.arange(n)).astype(f"datetime64[{time_unit}]")
    values = rng.standard_normal((n, 3, 4)) + 10.0
    values[:, 0, 0] = np.nan
    return xr.DataArray(
        values, dims=("time", "lat", "lon"), name="sst", attrs={"units": "K"},
        coords={
            "time": ("time", time, {"long_name": "time", "standard_name": "time"}),
            "lat": ("lat", [-10.5, 0.0, 10.5], {"units": "degrees_north"}),
            "lon": ("lon", [100.0, 150.0, 200.0, 250.0], {"units": "degrees_east"}),
            "depth": ((), 5.0, {"units": "m"}),
        },
    )


@pytest.mark.parametrize("lazy", [False, True])
@pytest.mark.parametrize("unit", ["us", "s", "ns"])
def test_sample_coordinate_dtype_and_attrs_in_scores_and_fields(unit, lazy):
    A = _field(unit)
    source = A.chunk({"time": 10}) if lazy else A
    pca = PCA(3).fit(source, sample_dims="time")
    scores = pca.transform(source)
    assert isinstance(scores.data, da.Array) == lazy
    assert scores.time.dtype == np.dtype(f"datetime64[{unit}]")
    assert scores.time.attrs == A.time.attrs
    field = pca.inverse_transform(scores)
    assert field.time.dtype == A.time.dtype and field.time.attrs == A.time.attrs
    for name in ("lat", "lon"):
        assert field[name].attrs == A[name].attrs and field[name].dtype == A[name].dtype
    assert field.attrs == A.attrs
    assert pca.score_samples(source).time.dtype == A.time.dtype


@pytest.mark.parametrize("unit", ["us", "s"])
def test_feature_coordinates_survive_save_and_load(tmp_path, unit):
    """A datetime feature coordinate (here: time as a feature, space as samples) keeps its unit
    through the store, which decodes times as datetime64[ns] by itself."""
    A = _field(unit).stack(point=("lat", "lon")).reset_index("point").transpose("point", "time")
    A = A.dropna("point", how="all")
    pca = PCA(2).fit(A, sample_dims="point")
    before = pca.to_xarray()
    pca.save(tmp_path / "model.zarr")
    loaded = PCA.load(tmp_path / "model.zarr")
    after = loaded.to_xarray()
    assert after.time.dtype == before.time.dtype == np.dtype(f"datetime64[{unit}]")
    assert after.time.attrs == before.time.attrs == A.time.attrs
    np.testing.assert_array_equal(after.time.values, A.time.values)
    np.testing.assert_allclose(loaded.transform(A).values, pca.transform(A).values, rtol=1e-12, atol=1e-12)


def test_grid_coordinates_survive_save_and_load(tmp_path):
    A = _field()
    pca = PCA(2, weights="coslat").fit(A, sample_dims="time")
    pca.save(tmp_path / "model.zarr")
    loaded = PCA.load(tmp_path / "model.zarr")
    for name in ("lat", "lon"):
        assert loaded.to_xarray()[name].attrs == A[name].attrs
        assert loaded.to_xarray()[name].dtype == A[name].dtype
    scores = loaded.transform(A)
    assert scores.time.dtype == A.time.dtype and scores.time.attrs == A.time.attrs
    assert loaded.inverse_transform(scores).attrs == A.attrs
