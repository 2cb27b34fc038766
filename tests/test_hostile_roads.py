"""Hostile input on the roads issue 29 found unguarded: two fields, update, latitudes. One fast
test per class, on the API and the CLI."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from daskpca import MCA, PCA, cli
from daskpca.exceptions import InputError


def test_mca_of_a_constant_field_or_one_sample_is_refused_by_name():
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((50, 4)), np.full((50, 3), 7.0)
    for solver in ("exact", "krylov"):
        with pytest.raises(InputError, match="field Y is constant"):
            MCA(2, solver=solver).fit(x, y)
    with pytest.raises(InputError, match="at least 2 shared samples"):
        MCA(1).fit(x[:1], x[:1, :2])


def test_cli_mca_of_a_constant_field_exits_2(tmp_path, capsys):
    import zarr

    rng = np.random.default_rng(1)
    zarr.create_array(str(tmp_path / "x.zarr"), shape=(40, 4), dtype="f8")[...] = rng.standard_normal((40, 4))
    zarr.create_array(str(tmp_path / "y.zarr"), shape=(40, 3), dtype="f8")[...] = 2.0
    code = cli.main(["fit", str(tmp_path / "x.zarr"), "--mca", "--with", str(tmp_path / "y.zarr"), "-k", "1",
                     "--out", str(tmp_path / "m.zarr")])
    assert code == 2 and "field Y is constant" in capsys.readouterr().err
    assert not (tmp_path / "m.zarr").exists()


def _field(lat, units=None):
    rng = np.random.default_rng(2)
    data = rng.standard_normal((30, len(lat), 4))
    coord = xr.DataArray(lat, dims="lat", attrs={} if units is None else {"units": units})
    return xr.DataArray(data, dims=("time", "lat", "lon"), coords={"lat": coord, "lon": np.arange(4.0)})


def test_coslat_reads_radians_when_the_coordinate_says_so():
    degrees = np.array([-60.0, 0.0, 30.0, 75.0])
    in_degrees = PCA(2, weights="coslat").fit(_field(degrees), sample_dims="time")
    in_radians = PCA(2, weights="coslat").fit(_field(np.deg2rad(degrees), "radians"), sample_dims="time")
    np.testing.assert_allclose(in_radians.feature_stage_.factor, in_degrees.feature_stage_.factor, rtol=1e-12)
    with pytest.raises(InputError, match=r"no latitude in radians .* 1 of its 4 value\(s\)"):
        PCA(2, weights="coslat").fit(_field(np.array([-1.0, 0.0, 0.5, 2.0]), "radians"), sample_dims="time")


def test_latitudes_are_counted_as_latitudes_and_strings_are_refused_by_name():
    # 2 bad latitudes of 4 (not 8 of 16 grid points).
    with pytest.raises(InputError, match=r"2 of its 4 value\(s\) are so"):
        PCA(2, weights="coslat").fit(_field(np.array([-100.0, 0.0, 30.0, 95.0])), sample_dims="time")
    with pytest.raises(InputError, match="holds <U3 values .* not numbers"):
        PCA(2, weights="coslat").fit(_field(np.array(["10N", "0N", "10S", "20S"])), sample_dims="time")


def _series(start, n=24, seed=3):
    rng = np.random.default_rng(seed)
    time = np.arange(np.datetime64(start, "D"), np.datetime64(start, "D") + n)
    return xr.DataArray(rng.standard_normal((n, 5)), dims=("time", "x"), coords={"time": time}, name="v")


def test_update_refuses_samples_the_model_already_holds_naming_them(tmp_path, capsys):
    first, later = _series("2000-01-01"), _series("2000-01-25", seed=4)
    pca = PCA(2, solver="covariance").fit(first, sample_dims="time")
    with pytest.raises(InputError, match=r"24 of the 24 new samples have 'time' stamps the model already holds "
                                          r"\(2000-01-01T00:00:00.000000000"):
        pca.update(first)
    pca.update(later)  # the next samples fold in, and are held from then on (also once saved)
    assert pca.n_samples_ == 48
    pca.save(tmp_path / "m.zarr")
    later.to_dataset().to_zarr(tmp_path / "later.zarr", zarr_format=3, consolidated=False)
    assert cli.main(["update", str(tmp_path / "m.zarr"), str(tmp_path / "later.zarr")]) == 2
    err = capsys.readouterr().err
    assert "stamps the model already holds (2000-01-25" in err, err
    from daskpca import load

    assert load(tmp_path / "m.zarr").n_samples_ == 48


def test_a_lags_model_of_a_bare_array_embeds_new_data_for_update_and_transform(tmp_path, capsys):
    import zarr

    from daskpca import lag_embed, load

    rng = np.random.default_rng(5)
    old, new = rng.standard_normal((60, 4)), rng.standard_normal((30, 4))
    for name, values in (("old.zarr", old), ("new.zarr", new)):
        zarr.create_array(str(tmp_path / name), shape=values.shape, chunks=(20, 4), dtype="f8")[...] = values
    model = str(tmp_path / "m.zarr")
    assert cli.main(["fit", str(tmp_path / "old.zarr"), "-k", "3", "--lags", "3", "--lag-step", "2",
                     "--solver", "covariance", "--out", model, "--quiet"]) == 0
    assert cli.main(["update", model, str(tmp_path / "new.zarr"), "--quiet"]) == 0, capsys.readouterr().err
    updated = load(model)
    both = np.vstack([np.asarray(lag_embed(old, 3, 2)), np.asarray(lag_embed(new, 3, 2))])
    assert updated.n_samples_ == both.shape[0] == 56 + 26
    np.testing.assert_allclose(updated.explained_variance_, PCA(3, solver="covariance").fit(both).explained_variance_,
                               rtol=1e-10)
    assert cli.main(["transform", model, str(tmp_path / "new.zarr"), "--out", str(tmp_path / "s.zarr"), "--quiet"]) == 0
    np.testing.assert_allclose(zarr.open_array(str(tmp_path / "s.zarr"), mode="r")[...],
                               updated.transform(np.asarray(lag_embed(new, 3, 2))), atol=1e-10)
