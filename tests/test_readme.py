"""The README's labeled-data example runs as written (on a small field of the same shape)."""

import re
from pathlib import Path

import numpy as np
import xarray as xr

README = Path(__file__).resolve().parents[1] / "README.md"


def test_labeled_example_fits_and_writes_maps_and_scores(tmp_path, monkeypatch):
    text = README.read_text()
    code = re.search(r"### Labeled data.*?```python\n(.*?)```", text, re.S).group(1)
    assert 'sample_dims="time"' in code and 'weights="coslat"' in code and "to_zarr" in code
    rng = np.random.default_rng(0)
    n = 24
    values = rng.standard_normal((n, 4, 5)) + 15.0
    values[:, 0, :2] = np.nan  # land
    sst = xr.DataArray(
        values, dims=("time", "lat", "lon"), name="sst",
        coords={"time": (np.datetime64("2001-01", "M") + np.arange(n)).astype("datetime64[ns]"),
                "lat": ("lat", [-30.0, -10.0, 10.0, 30.0], {"units": "degrees_north"}),
                "lon": ("lon", [0.0, 90.0, 180.0, 270.0, 300.0], {"units": "degrees_east"})},
    )
    monkeypatch.chdir(tmp_path)
    sst.to_dataset().chunk({"time": 8}).to_zarr("sst.zarr")
    namespace = {}
    exec(compile(code, str(README), "exec"), namespace)
    # The EOF-family example continues from the same field and model.
    family = re.search(r"### The EOF family.*?```python\n(.*?)```", text, re.S).group(1)
    exec(compile(family, str(README), "exec"), namespace)
    assert namespace["hpca"].solver_ == "hilbert" and namespace["epca"].to_xarray()["components"].dims[1] == "lag"
    assert namespace["rot"].components_.shape[0] == 4
    eofs, pcs = xr.open_zarr("eofs.zarr"), xr.open_zarr("pcs.zarr")
    assert eofs.components.dims == ("mode", "lat", "lon") and eofs.sizes["mode"] == 10
    assert np.isnan(eofs.components.values[:, 0, :2]).all() and np.isfinite(eofs.components.values[:, 1:]).all()
    assert pcs.scores.dims == ("time", "mode") and pcs.sizes["time"] == n
