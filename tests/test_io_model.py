"""Model save/load and labeled zarr output: no pickle, atomic, versioned, never half-written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import numpy as np
import pytest
import xarray as xr

from _helpers import assert_equal_up_to_rounding, assert_identical_up_to_rounding
import daskpca
from daskpca import PCA, load
from daskpca.exceptions import IncompleteStoreError, NewerFormatError, OutputExistsError
from daskpca.io import COMPLETE_MARKER, open_xarray, write_xarray


def field(n=48, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 4, 5)) @ np.diag([3.0, 2.0, 1.0, 0.5, 0.2]) + 1.0
    X[:, 0, 0] = np.nan  # a land point
    return xr.DataArray(
        X,
        dims=("time", "lat", "lon"),
        coords={"time": ("time", np.arange(n), {"units": "days since 2000-01-01"}),
                "lat": ("lat", [-30.0, -10.0, 10.0, 30.0], {"units": "degrees_north"}),
                "lon": np.arange(5) * 2.5},
        name="sst",
        attrs={"units": "K", "long_name": "sea surface temperature"},
    )


def test_labeled_round_trip_on_lazily_opened_zarr(tmp_path):
    """fit → save → load → transform on a lazily opened zarr dataset: identical scores."""
    field().to_dataset().chunk({"time": 10}).to_zarr(tmp_path / "in.zarr", zarr_format=3, consolidated=False)
    ds = xr.open_zarr(tmp_path / "in.zarr", consolidated=False)
    assert ds["sst"].chunks is not None  # lazy
    pca = PCA(3, weights="coslat").fit(ds, sample_dims="time")
    pca.save(tmp_path / "model.zarr")
    loaded = load(tmp_path / "model.zarr")

    scores, again = pca.transform(ds), loaded.transform(ds)
    assert_identical_up_to_rounding(again, scores)  # the loaded model's arrays: another layout
    assert again["time"].attrs == ds["time"].attrs
    xr.testing.assert_identical(pca.to_xarray(), loaded.to_xarray())
    assert loaded.get_params() == pca.get_params()
    for name in ("components_", "mean_", "explained_variance_", "singular_values_"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(pca, name))
    recon = loaded.inverse_transform(again, modes=[1, 3])
    assert recon["sst"].attrs["units"] == "K" and recon["lat"].attrs["units"] == "degrees_north"
    # sufficient statistics of the covariance solver for exact updates
    m0, m1 = pca.solver_info_["moments"], loaded.solver_info_["moments"]
    assert m1.count == m0.count
    np.testing.assert_array_equal(m1.mean, m0.mean)
    np.testing.assert_array_equal(m1.scatter, m0.symmetric_scatter())

    # scores of a zarr input written streamed, chunked along samples, read back
    write_xarray(scores, tmp_path / "scores.zarr")
    back = open_xarray(tmp_path / "scores.zarr")
    assert back["scores"].chunks == ((10, 10, 10, 10, 8), (3,))
    np.testing.assert_array_equal(back["scores"].values, scores.values)
    assert back["scores"].attrs["scaling"] == "none"


def test_memory_url_and_plain_model():
    pytest.importorskip("fsspec")
    url = f"memory://daskpca-{uuid.uuid4().hex}/model.zarr"
    X = np.random.default_rng(0).standard_normal((40, 6))
    pca = PCA(2, whiten=True).fit(X)
    pca.save(url)
    loaded = load(url)
    assert_equal_up_to_rounding(loaded.transform(X), pca.transform(X))  # the loaded model's arrays: another layout
    assert_equal_up_to_rounding(loaded.inverse_transform(pca.transform(X)), pca.inverse_transform(pca.transform(X)))
    with pytest.raises(OutputExistsError, match="already exists"):
        pca.save(url)
    other = PCA(3).fit(X)
    other.save(url, overwrite=True)
    assert load(url).n_components_ == 3

    scores_url = url.replace("model.zarr", "scores.zarr")
    A = field()
    labeled = PCA(2).fit(A, sample_dims="time")
    write_xarray(labeled.transform(A.chunk(time=16)), scores_url)
    # written from blocks of 16 time steps, compared with one block: the BLAS kernel can differ per shape
    assert_equal_up_to_rounding(open_xarray(scores_url)["scores"].values, labeled.transform(A).values)


def test_overwrite_false_refuses_and_keeps_the_store(tmp_path):
    A = field()
    first = PCA(2).fit(A, sample_dims="time")
    first.save(tmp_path / "m.zarr")
    before = sorted(p.name for p in (tmp_path / "m.zarr").iterdir())
    with pytest.raises(OutputExistsError, match="overwrite=True"):
        PCA(3).fit(A, sample_dims="time").save(tmp_path / "m.zarr")
    assert load(tmp_path / "m.zarr").n_components_ == 2
    assert sorted(p.name for p in (tmp_path / "m.zarr").iterdir()) == before
    with pytest.raises(OutputExistsError):
        write_xarray(first.transform(A), tmp_path / "m.zarr")
    assert [p.name for p in tmp_path.iterdir()] == ["m.zarr"]  # no partial leftovers


def test_newer_format_and_missing_marker_are_refused(tmp_path):
    PCA(2).fit(field(), sample_dims="time").save(tmp_path / "m.zarr")
    marker = tmp_path / "m.zarr" / COMPLETE_MARKER
    body = json.loads(marker.read_text())
    marker.write_text(json.dumps({**body, "format_version": 99}))
    with pytest.raises(NewerFormatError, match="format 99.*reads format 1 and older. Upgrade daskpca"):
        load(tmp_path / "m.zarr")
    marker.unlink()
    with pytest.raises(IncompleteStoreError, match="no completion marker"):
        load(tmp_path / "m.zarr")
    with pytest.raises(FileNotFoundError):
        load(tmp_path / "nothing.zarr")


def test_bad_input_writes_nothing(tmp_path):
    A = field()
    pca = PCA(2).fit(A, sample_dims="time")
    with pytest.raises(ValueError, match="coordinate 'lat'"):
        write_xarray(pca.transform(A.assign_coords(lat=A.lat + 1)), tmp_path / "scores.zarr")
    with pytest.raises(ValueError, match="sample_dims"):
        PCA(2).fit(A, sample_dims="times").save(tmp_path / "model.zarr")
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- SIGKILL midway

_SLOW_SCORES_WRITER = """
import sys, time
import dask, dask.array as da, numpy as np, xarray as xr
from daskpca.io import write_xarray

def slow(block):
    time.sleep(0.05)
    return block

data = da.ones((4000, 8), chunks=(10, 8)).map_blocks(slow)
dask.config.set(scheduler="synchronous")
write_xarray(xr.DataArray(data, dims=("time", "mode"), name="scores"), sys.argv[1], overwrite=True)
"""

_SLOW_MODEL_SAVER = """
import sys, time
import numpy as np, xarray as xr
import daskpca

original = xr.Dataset.to_zarr
def to_zarr_then_stall(self, *args, **kwargs):
    result = original(self, *args, **kwargs)
    print("DATA WRITTEN", flush=True)
    time.sleep(60)  # the data is all there, the completion marker not yet
    return result
xr.Dataset.to_zarr = to_zarr_then_stall

X = np.random.default_rng(1).standard_normal((30, 5))
daskpca.PCA(4).fit(X).save(sys.argv[1], overwrite=True)
"""


def _run_and_kill(script, target, ready):
    process = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), str(target)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90  # a fresh interpreter importing dask: slow on a loaded machine
    try:
        while not ready(process):
            assert process.poll() is None, process.stderr.read()
            assert time.monotonic() < deadline, "writer never got midway"
            time.sleep(0.05)
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        process.stdout.close()
        process.stderr.close()
    assert process.returncode == -signal.SIGKILL


def _partials(tmp_path, name):
    return [p for p in tmp_path.iterdir() if p.name.startswith(f".{name}.partial-")]


def test_sigkill_during_scores_write_leaves_previous_store_intact(tmp_path):
    target = tmp_path / "scores.zarr"
    previous = xr.DataArray(np.full((20, 8), 7.0), dims=("time", "mode"), name="scores")
    write_xarray(previous, target)

    def midway(_):
        partial = _partials(tmp_path, "scores.zarr")
        return partial and len(list((partial[0] / "scores" / "c").rglob("*"))) > 20 if partial and (partial[0] / "scores" / "c").exists() else False

    _run_and_kill(_SLOW_SCORES_WRITER, target, midway)
    np.testing.assert_array_equal(open_xarray(target)["scores"].values, previous.values)
    (partial,) = _partials(tmp_path, "scores.zarr")
    with pytest.raises(IncompleteStoreError):
        open_xarray(partial)
    with pytest.raises(IncompleteStoreError):
        load(partial)


def test_sigkill_during_model_save_leaves_previous_model_intact(tmp_path):
    target = tmp_path / "model.zarr"
    X = np.random.default_rng(1).standard_normal((30, 5))
    previous = PCA(2).fit(X)
    previous.save(target)

    lines = []

    def data_written(process):
        import select

        if select.select([process.stdout], [], [], 0.05)[0]:
            lines.append(process.stdout.readline())
        return any("DATA WRITTEN" in line for line in lines)

    _run_and_kill(_SLOW_MODEL_SAVER, target, data_written)
    loaded = load(target)
    assert loaded.n_components_ == 2
    assert_equal_up_to_rounding(loaded.transform(X), previous.transform(X))  # loaded: another layout
    (partial,) = _partials(tmp_path, "model.zarr")
    assert (partial / "zarr.json").exists()  # the data is there, complete-looking to zarr...
    with pytest.raises(IncompleteStoreError, match="no completion marker"):
        load(partial)  # ...but not to daskpca
    # and a new path killed midway leaves nothing a reader accepts
    lines.clear()
    _run_and_kill(_SLOW_MODEL_SAVER, tmp_path / "fresh.zarr", data_written)
    assert _partials(tmp_path, "fresh.zarr")
    with pytest.raises(FileNotFoundError):
        load(tmp_path / "fresh.zarr")


def test_load_is_exported():
    assert daskpca.load is load and "load" in daskpca.__all__
