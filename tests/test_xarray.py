"""The labeled layer: dims ↔ matrix, NaN masks in the solver's own pass, weights, EOF options."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr

from daskpca import PCA
from daskpca.labeled import MODE

from _helpers import write_zarr


def field(n=60, nlat=5, nlon=6, *, seed=0, land=True, name="sst"):
    """A (time, lat, lon) field with a structured signal and, optionally, always-NaN land points."""
    rng = np.random.default_rng(seed)
    d = nlat * nlon
    basis, _ = np.linalg.qr(rng.standard_normal((d, 4)))
    X = (rng.standard_normal((n, 4)) * [5.0, 3.0, 2.0, 1.0]) @ basis.T + 0.1 * rng.standard_normal((n, d)) + 10.0
    X = X.reshape(n, nlat, nlon)
    if land:
        X[:, 0, :2] = np.nan
        X[:, 3, 4] = np.nan
    return xr.DataArray(
        X,
        dims=("time", "lat", "lon"),
        coords={
            "time": np.arange(n),
            "lat": ("lat", np.linspace(-60, 60, nlat), {"units": "degrees_north"}),
            "lon": np.arange(nlon) * 10.0,
        },
        name=name,
        attrs={"units": "K"},
    )


def reference(Z):
    """Float64 SVD reference of a (n, d) matrix without NaN: components, eigenvalues, mean."""
    mean = Z.mean(axis=0)
    _, s, vt = np.linalg.svd(Z - mean, full_matrices=False)
    return vt, s**2 / (Z.shape[0] - 1), mean


def aligned_error(a, b):
    signs = np.sign(np.sum(a * b, axis=1))
    return float(np.max(np.abs(a * signs[:, None] - b)) / np.max(np.abs(b)))


# ----------------------------------------------------------------------------- masks and passes


@pytest.mark.parametrize("solver,passes", [("covariance", 1), ("gram", 2)])
def test_nan_mask_costs_no_extra_read(tmp_path, solver, passes):
    """Every stored chunk is read exactly `passes` times: the mask comes from the solver's pass
    (the pass cache off: it would serve Gram's second pass from the first's blocks)."""
    A = field()
    array, store = write_zarr(tmp_path / "x.zarr", A.values.astype(np.float64), chunks=(10, 5, 6))
    lazy = A.copy(data=da.from_zarr(array))
    with dask.config.set(scheduler="synchronous"):
        pca = PCA(3, solver=solver, cache=False).fit(lazy, sample_dims="time")
    reads = store.chunk_reads()
    assert len(reads) == 6 and set(reads.values()) == {passes}
    assert pca.n_passes_ == passes and pca.solver_info_["n_masked_features"] == 3
    keep = ~np.isnan(A.values[0].ravel())
    vt, lam, _ = reference(A.values.reshape(60, -1)[:, keep])
    assert aligned_error(pca.components_, vt[:3]) < 1e-10
    np.testing.assert_allclose(pca.explained_variance_, lam[:3], rtol=1e-10)


def test_standardize_and_weights_match_reference():
    A = field()
    X = A.values.reshape(60, -1)
    keep = ~np.isnan(X[0])
    w = np.sqrt(np.cos(np.deg2rad(A.lat.values)))[:, None] * np.ones(6)
    for solver in ("covariance", "gram"):
        pca = PCA(4, solver=solver, weights="coslat", standardize=True).fit(A, sample_dims="time")
        Z = X[:, keep] / X[:, keep].std(axis=0, ddof=1) * w.ravel()[keep]
        vt, lam, _ = reference(Z)
        assert aligned_error(pca.components_, vt[:4]) < 1e-9, solver
        np.testing.assert_allclose(pca.explained_variance_, lam[:4], rtol=1e-9)
    # gram + standardize needs the std before its pass 1: one documented extra read
    assert pca.n_passes_ == 3 and "mask_pass" in pca.solver_info_
    # reconstructions come back in data units with every mode
    full = PCA(None, weights="coslat", standardize=True).fit(A, sample_dims="time")
    np.testing.assert_allclose(full.inverse_transform(full.transform(A)).values, A.values, rtol=1e-9)


def test_partially_missing_feature_is_an_error_that_counts_and_points_to_ppca():
    A = field()
    A.values[5:8, 2, 2] = np.nan
    A.values[0, 1, 1] = np.nan
    for solver in ("covariance", "gram"):
        with pytest.raises(ValueError, match=r"2 feature\(s\) are missing .*\(4 missing entries.*solver='ppca'"):
            PCA(2, solver=solver).fit(A, sample_dims="time")


def test_all_features_masked_is_an_error():
    A = field() * np.nan
    with pytest.raises(ValueError, match="all 30 features are NaN"):
        PCA(2).fit(A, sample_dims="time")


# ----------------------------------------------------------------------------- labels


def test_scores_and_reconstruction_keep_dims_coords_attrs_and_modes_from_one():
    A = field()
    pca = PCA(5).fit(A, sample_dims="time")
    scores = pca.fit_transform(A, sample_dims="time")
    assert scores.dims == ("time", MODE) and list(scores[MODE].values) == [1, 2, 3, 4, 5]
    assert scores.attrs["scaling"] == "none"
    recon = pca.inverse_transform(scores.sel(mode=[1, 2]))
    same = pca.inverse_transform(scores, modes=[1, 2])
    xr.testing.assert_identical(recon, same)
    assert recon.dims == A.dims and recon.attrs == A.attrs and recon.name == "sst"
    xr.testing.assert_identical(recon.lat, A.lat)
    np.testing.assert_array_equal(np.isnan(recon.values), np.isnan(A.values))
    # modes [1, 2] by hand: mean + Σ p_m e_m
    keep = ~np.isnan(A.values[0].ravel())
    by_hand = scores.values[:, :2] @ pca.components_[:2] + pca.mean_
    np.testing.assert_allclose(recon.values.reshape(60, -1)[:, keep], by_hand, rtol=1e-12)
    with pytest.raises(ValueError, match=r"modes \[9\] are not in the scores"):
        pca.inverse_transform(scores, modes=[1, 9])


def test_lazy_input_gives_lazy_results():
    A = field().chunk({"time": 15})
    pca = PCA(3).fit(A, sample_dims="time")
    with dask.config.set(scheduler=_forbid_compute):
        scores = pca.transform(A)
        recon = pca.inverse_transform(scores)
        maps = pca.component_maps(A)
    assert isinstance(scores.data, da.Array) and scores.chunks[0] == (15, 15, 15, 15)
    assert isinstance(recon.data, da.Array) and isinstance(maps.data, da.Array)


def _forbid_compute(*args, **kwargs):
    raise AssertionError("computed when it should have stayed lazy")


def test_several_sample_dims_and_multivariate_dataset():
    rng = np.random.default_rng(3)
    a = xr.DataArray(rng.standard_normal((8, 4, 5)), dims=("time", "member", "x"), coords={"x": np.arange(5)})
    b = xr.DataArray(rng.standard_normal((4, 8, 3, 2)) * 100, dims=("member", "time", "y", "z"))
    ds = xr.Dataset({"a": a, "b": b}).chunk({"time": 3})
    pca = PCA(4, weights={"b": 0.01}).fit(ds, sample_dims=("time", "member"))
    # rows: C order over (time, member); columns: a's x, then b's (y, z)
    X = np.hstack([a.values.reshape(32, 5), b.transpose("time", "member", "y", "z").values.reshape(32, 6) * 0.01])
    vt, lam, _ = reference(X)
    assert aligned_error(pca.components_, vt[:4]) < 1e-10
    scores = pca.transform(ds)
    assert scores.dims == ("time", "member", MODE) and scores.shape == (8, 4, 4)
    out = pca.to_xarray()
    assert out["components_a"].dims == (MODE, "x") and out["components_b"].dims == (MODE, "y", "z")
    recon = pca.inverse_transform(scores)
    assert isinstance(recon, xr.Dataset) and recon["b"].dims == ("time", "member", "y", "z")
    xr.testing.assert_allclose(recon["b"].transpose(*b.dims), b, rtol=1e-8) if pca.n_components_ >= 11 else None


def test_to_xarray_contents():
    A = field()
    pca = PCA(3, weights="coslat").fit(A, sample_dims="time")
    out = pca.to_xarray()
    assert set(out.data_vars) >= {
        "components", "mean", "feature_scale", "explained_variance", "explained_variance_ratio",
        "variance_fraction_percent", "singular_values", "north_error",
    }
    assert out["components"].dims == (MODE, "lat", "lon") and out.lat.attrs["units"] == "degrees_north"
    assert np.isnan(out["components"].values[:, 0, :2]).all() and np.isnan(out["mean"].values[3, 4])
    np.testing.assert_allclose(out["mean"].values, A.values.mean(axis=0), rtol=1e-12)  # NaN where masked
    np.testing.assert_allclose(out["north_error"], pca.explained_variance_ * np.sqrt(2 / 60))
    assert out.attrs["solver"] == pca.solver_ and out.attrs["n_passes"] == 1
    assert '"weights": "coslat"' in out.attrs["parameters"] and "daskpca_version" in out.attrs


def test_plain_matrix_with_weights_and_scaling():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((50, 6))
    w = np.arange(1.0, 7.0)
    pca = PCA(3, weights=w).fit(X)
    vt, lam, mean = reference(X * w)
    assert aligned_error(pca.components_, vt[:3]) < 1e-10
    unit = pca.transform(X, scaling="unit")
    np.testing.assert_allclose(unit.std(axis=0, ddof=1), 1, rtol=1e-10)
    full = PCA(None, weights=w).fit(X)
    np.testing.assert_allclose(full.inverse_transform(full.transform(X)), X, rtol=1e-10)


# ----------------------------------------------------------------------------- bad input


def test_missing_sample_dim_lists_existing_dims():
    with pytest.raises(ValueError, match=r"sample_dims \['tim'\] not found in X; X has dims \['time', 'lat', 'lon'\]"):
        PCA(2).fit(field(), sample_dims="tim")
    with pytest.raises(TypeError, match="needs sample_dims"):
        PCA(2).fit(field())


def test_dataset_variables_must_share_sample_dims():
    ds = xr.Dataset({"sst": field(), "orography": field().isel(time=0, drop=True)})
    with pytest.raises(ValueError, match=r"'orography' has dims \('lat', 'lon'\).*X\[\['sst'\]\]"):
        PCA(2).fit(ds, sample_dims="time")


@pytest.mark.parametrize(
    "weights,match",
    [
        (np.ones(4), r"weights of shape \(4,\) do not broadcast over the feature dims \['lat', 'lon'\]"),
        (xr.DataArray(np.ones(3), dims="depth"), r"\['depth'\] are not feature dims"),
        (xr.DataArray(np.ones(4), dims="lat"), "size 4 along 'lat'"),
        (-np.ones(6), "finite and > 0"),
    ],
)
def test_weights_that_do_not_broadcast(weights, match):
    with pytest.raises(ValueError, match=match):
        PCA(2, weights=weights).fit(field(), sample_dims="time")


def test_coslat_without_latitude():
    A = field().rename(lat="row")
    with pytest.raises(ValueError, match="needs a latitude coordinate"):
        PCA(2, weights="coslat").fit(A.assign_coords(row=A.row.assign_attrs(units="m")), sample_dims="time")


def test_transform_coords_mismatch_names_the_dim():
    A = field()
    pca = PCA(2).fit(A, sample_dims="time")
    shifted = A.assign_coords(lon=A.lon + 1.0)
    with pytest.raises(ValueError, match=r"coordinate 'lon' does not match .* position 0 it is 1.0 here but 0.0"):
        pca.transform(shifted)
    with pytest.raises(ValueError, match="dimension 'lat' of variable 'sst' has size 4 here but 5"):
        pca.transform(A.isel(lat=slice(0, 4)))
    with pytest.raises(TypeError, match="fitted on labeled data"):
        pca.transform(A.values.reshape(60, -1))
    # new samples (other times) are fine
    assert pca.transform(A.isel(time=slice(0, 7))).shape == (7, 2)


def test_other_solvers_pay_one_documented_extra_read():
    A = field().chunk({"time": 20})
    X = A.values.reshape(60, -1)
    keep = ~np.isnan(X[0])
    vt, _, _ = reference(X[:, keep])
    pca = PCA(3, solver="tsqr").fit(A, sample_dims="time")
    assert aligned_error(pca.components_, vt[:3]) < 1e-10
    assert pca.n_passes_ == 2 and "one extra read" in pca.solver_info_["mask_pass"]
    # the missing-value solver accepts partially missing features (all-NaN ones still dropped)
    B = field()
    B.values[3:5, 2, 2] = np.nan
    ppca = PCA(2, solver="ppca", random_state=0).fit(B, sample_dims="time")
    assert ppca.n_features_in_ == keep.sum() and np.isnan(ppca.to_xarray()["components"].values[:, 0, :2]).all()


def test_update_keeps_the_labeled_state_and_equals_a_full_fit():
    A = field().chunk({"time": 20})
    full = PCA(3, solver="covariance", weights="coslat").fit(A, sample_dims="time")
    part = PCA(3, solver="covariance", weights="coslat").fit(A.isel(time=slice(0, 30)), sample_dims="time")
    part.update(A.isel(time=slice(30, None)))
    assert aligned_error(part.components_, full.components_) < 1e-12
    xr.testing.assert_allclose(part.transform(A), full.transform(A), rtol=1e-10)


def test_a_misspelt_variable_in_a_weights_dict_is_refused_by_name():
    rng = np.random.default_rng(0)
    ds = xr.Dataset({"sst": (("time", "x"), rng.standard_normal((20, 4))),
                     "slp": (("time", "x"), rng.standard_normal((20, 4)))})
    with pytest.raises(ValueError, match=r"\['stt'\].*\['sst', 'slp'\]"):
        PCA(2, weights={"stt": 2.0}).fit(ds, sample_dims="time")
    assert PCA(2, weights={"sst": 2.0}).fit(ds, sample_dims="time").n_components_ == 2


def test_chunks_along_a_later_feature_dim_warn_with_the_regrouping_and_the_fix():
    # dask's reshape collapses (lat, lon) chunk-for-chunk only when 'lon' is one chunk; tiles
    # along 'lon' are regrouped into bands of whole rows, which a user on small workers must know.
    import warnings

    import dask.array as da

    from daskpca.exceptions import ChunkLayoutWarning

    values = np.random.default_rng(0).standard_normal((50, 8, 24))
    dims = ("time", "lat", "lon")
    tiles = xr.DataArray(da.from_array(values, chunks=(50, 4, 6)), dims=dims, name="sst")
    with pytest.warns(ChunkLayoutWarning, match=r"'sst' is chunked along feature dimension 'lon' \(chunks of 6 of 24\).*"
                      r"about 0 MiB held per task.*\.chunk\(\{'lon': -1\}\)") as caught:
        tiled = PCA(2).fit(tiles, sample_dims="time")
    assert caught[0].filename == __file__  # points at the user's call
    with warnings.catch_warnings():
        warnings.simplefilter("error", ChunkLayoutWarning)
        strips = PCA(2).fit(tiles.chunk({"lon": -1}), sample_dims="time")  # the fix it names
        PCA(2).fit(xr.DataArray(values, dims=dims), sample_dims="time")  # NumPy-backed: nothing to regroup
        level = xr.DataArray(da.from_array(values[:, None], chunks=(50, 1, 4, 24)), dims=("time", "lev", "lat", "lon"))
        PCA(2).fit(level, sample_dims="time")  # a length-1 dim before 'lat' regroups nothing
    np.testing.assert_allclose(np.abs(tiled.components_), np.abs(strips.components_), atol=1e-12)
