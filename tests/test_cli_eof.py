"""daskpca fit --hilbert / --rotation / --lags: the EOF family from the command line, in-process."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from _helpers import assert_equal_up_to_rounding
from daskpca import HilbertPCA, Rotator, load
from daskpca.cli import main
from daskpca.io import open_xarray


@pytest.fixture(scope="module")
def field(tmp_path_factory):
    rng = np.random.default_rng(0)
    t = np.arange(120)[:, None, None]
    lon = np.arange(8)[None, None, :]
    values = np.cos(2 * np.pi * (t / 24 - lon / 8)) + 0.1 * rng.standard_normal((120, 3, 8)) + 5.0
    values[:, 0, :2] = np.nan
    path = tmp_path_factory.mktemp("eof") / "field.zarr"
    xr.DataArray(values.astype("f4"), dims=("time", "lat", "lon"), name="sst",
                 coords={"time": np.arange(120), "lat": [-20.0, 0.0, 20.0], "lon": np.arange(8) * 45.0}
                 ).to_dataset().chunk({"time": 40}).to_zarr(path)
    return str(path)


def _fit(field, tmp_path, *extra):
    out, scores = tmp_path / "model.zarr", tmp_path / "scores.zarr"
    code = main(["fit", field, "--var", "sst", "--sample-dims", "time", "--weights", "coslat",
                 "--n-components", "3", "--out", str(out), "--scores", str(scores), "--quiet", *extra])
    return code, out, scores


@pytest.mark.parametrize("extra, kind", [(["--hilbert"], HilbertPCA), (["--hilbert", "--solver", "krylov", "--tol", "1e-6"], HilbertPCA),
                                         (["--rotation", "promax", "--power", "2"], Rotator),
                                         (["--lags", "3", "--lag-step", "2"], None)])
def test_each_variant_fits_saves_and_transforms_as_it_scored(field, tmp_path, extra, kind):
    code, out, scores = _fit(field, tmp_path, *extra)
    assert code == 0
    if kind is Rotator:
        model = Rotator.load(out)
        assert model.power == 2
    else:
        model = load(out)
        assert kind is None or isinstance(model, kind)
        if "krylov" in extra:
            assert model.solver_ == "hilbert-krylov" and model.error_bound_ <= 1e-6 and model.tol == 1e-6
    assert main(["transform", str(out), field, "--var", "sst", "--out", str(tmp_path / "again.zarr"), "--quiet"]) == 0
    written, again = open_xarray(scores).scores, open_xarray(tmp_path / "again.zarr").scores
    # fit's scores come from the fitted model, transform's from the model it wrote and read back:
    # the same arithmetic on arrays of another layout, where the BLAS kernel decides the last bit
    assert_equal_up_to_rounding(written.values, again.values)
    if "--lags" in extra:
        assert written.sizes["time"] == 120 - 4 and "lag" in model.to_xarray()["components"].dims


@pytest.mark.parametrize("extra, message", [
    (["--hilbert", "--rotation", "varimax"], "Drop one of --hilbert and --rotation"),
    (["--hilbert", "--solver", "tsqr"], "--hilbert takes --solver auto, gram (exact) or krylov"),
    (["--hilbert", "--max-iter", "5"], "--max-iter would be ignored: it sets max_iter, which this fit (HilbertPCA) does not take"),
    (["--power", "3"], "add --rotation promax"),
    (["--lag-step", "2"], "needs --lags"),
    (["--lags", "200"], "no window fits"),
])
def test_bad_combinations_exit_2_naming_the_fix_and_write_nothing(field, tmp_path, capsys, extra, message):
    code, out, scores = _fit(field, tmp_path, *extra)
    assert code == 2 and message in capsys.readouterr().err
    assert not out.exists() and not scores.exists()
