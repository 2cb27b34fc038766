"""The passes' reads decode local zarr v3 chunks through zarrs (daskpca/passes/_decode.py).

What must hold: the values are those zarr-python decodes, to the bit, on the layouts archives use
(one step per chunk, tiles, shards, chunks never written, CF-packed integers read through xarray);
zarrs is really used where it applies and not where it does not (zarr v2, stores it cannot read,
``daskpca.zarrs`` False); a store it cannot read after all falls back to zarr-python, and a fit's
answer does not depend on which decoded it.
"""

from __future__ import annotations

import pickle

import dask
import numpy as np
import pytest
import xarray as xr
import zarr

from daskpca import PCA
from daskpca.passes import _decode
from daskpca.passes._geometry import plain_source, regroup

pytest.importorskip("zarrs")


def _field(n=240, lat=12, lon=20, seed=0):
    rng = np.random.default_rng(seed)
    modes = rng.standard_normal((3, lat * lon))
    data = (rng.standard_normal((n, 3)) * [5, 3, 2]) @ modes + 0.3 * rng.standard_normal((n, lat * lon)) + 280
    return xr.Dataset(
        {"t2m": (("time", "latitude", "longitude"), data.reshape(n, lat, lon).astype(np.float32))},
        coords={"time": np.arange(n), "latitude": np.linspace(60, -60, lat), "longitude": np.arange(lon) * 18.0},
    )


LAYOUTS = {
    "one step per chunk": {"chunks": (1, 12, 20)},
    "tiles": {"chunks": (24, 6, 10)},
    "shards": {"chunks": (1, 12, 20), "shards": (40, 12, 20)},
}


def _regrouped_reader(array):
    """The regrouped dask array of ``array`` and the array-like its tasks read."""
    grouped = regroup(array, 0)
    return grouped, plain_source(grouped)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_zarrs_reads_the_bytes_zarr_python_reads(tmp_path, layout):
    path = tmp_path / "field.zarr"
    _field().to_zarr(path, encoding={"t2m": LAYOUTS[layout]}, zarr_format=3, consolidated=False)
    opened = xr.open_zarr(path, consolidated=False).t2m
    with dask.config.set(scheduler="threads"):
        grouped, reader = _regrouped_reader(opened.data)
        assert isinstance(reader, _decode.ZarrsRead), type(reader)
        fast = grouped.compute()
        assert reader._twin is not None and not reader._failed  # zarrs decoded every task
        with dask.config.set({_decode.CONFIG_KEY: False}):
            plain, plain_reader = _regrouped_reader(opened.data)
            assert not isinstance(plain_reader, _decode.ZarrsRead)
            slow = plain.compute()
    np.testing.assert_array_equal(fast, slow)
    np.testing.assert_array_equal(fast, opened.values)


def test_cf_packed_integers_and_unwritten_chunks_decode_the_same(tmp_path):
    """int16 with scale/offset and a _FillValue (xarray's CF decoding stays in the chain), and
    chunks never written (the fill value, then NaN after decoding)."""
    ds = _field(n=96)
    path = tmp_path / "packed.zarr"
    encoding = {"t2m": {"dtype": "int16", "scale_factor": 0.01, "add_offset": 280.0, "_FillValue": -32768, "chunks": (8, 12, 20)}}
    ds.to_zarr(path, encoding=encoding, zarr_format=3, consolidated=False, compute=True)
    raw = zarr.open_array(str(path / "t2m"), mode="r+")
    raw[16:24] = -32768  # a missing stretch
    store_chunk = path / "t2m" / "c" / "5"
    assert store_chunk.is_dir()
    import shutil

    shutil.rmtree(store_chunk)  # rows 40–47 never written: zarr returns the fill value
    opened = xr.open_zarr(path, consolidated=False).t2m
    grouped = regroup(opened.data.rechunk((8, 12, 20)), 0)
    reader = plain_source(grouped)
    expected = opened.values
    assert np.isnan(expected[16:24]).all() and np.unique(expected[40:48]).size == 1  # the fill value, decoded
    assert isinstance(reader, _decode.ZarrsRead)
    np.testing.assert_array_equal(grouped.compute(scheduler="threads"), expected)
    direct = _decode.fast_source(plain_source(opened.data))
    assert isinstance(direct, _decode.ZarrsRead)
    np.testing.assert_array_equal(np.asarray(direct[(slice(0, 96), slice(None), slice(None))]), expected)
    assert direct._twin is not None and not direct._failed


def test_a_fit_is_the_same_whichever_decodes(tmp_path):
    path = tmp_path / "field.zarr"
    _field(n=600).to_zarr(path, encoding={"t2m": {"chunks": (1, 12, 20)}}, zarr_format=3, consolidated=False)
    fits = []
    for fast in (True, False):
        with dask.config.set({_decode.CONFIG_KEY: fast}):
            pca = PCA(3, weights="coslat", solver="krylov", tol=1e-8, random_state=0, cache=False)
            fits.append(pca.fit(xr.open_zarr(path, consolidated=False).t2m, sample_dims="time"))
    np.testing.assert_array_equal(fits[0].components_, fits[1].components_)
    np.testing.assert_array_equal(fits[0].explained_variance_, fits[1].explained_variance_)


def test_where_zarrs_does_not_apply_the_source_is_read_as_it_is(tmp_path):
    ds = _field(n=48)
    ds.to_zarr(tmp_path / "v2.zarr", zarr_format=2, consolidated=False)
    v2 = zarr.open_array(str(tmp_path / "v2.zarr" / "t2m"), mode="r")
    assert not _decode.applies(v2) and _decode.fast_source(v2) is v2
    memory = zarr.create_array(store=zarr.storage.MemoryStore(), shape=(48, 240), dtype="f4", chunks=(1, 240))
    assert not _decode.applies(memory)
    assert not _decode.applies(np.zeros((4, 4)))
    ds.to_zarr(tmp_path / "v3.zarr", zarr_format=3, consolidated=False)
    v3 = zarr.open_array(str(tmp_path / "v3.zarr" / "t2m"), mode="r")
    assert _decode.applies(v3)
    with dask.config.set({_decode.CONFIG_KEY: False}):
        assert not _decode.applies(v3)


def test_a_store_zarrs_cannot_read_falls_back_to_zarr_python(tmp_path, monkeypatch, caplog):
    _field(n=48).to_zarr(tmp_path / "f.zarr", zarr_format=3, consolidated=False)
    source = zarr.open_array(str(tmp_path / "f.zarr" / "t2m"), mode="r")
    expected = source[:]

    class Refuses:
        def __getitem__(self, key):
            raise NotImplementedError("codec not supported by zarrs")

    monkeypatch.setattr(_decode, "_twin_chain", lambda s: Refuses())
    reader = _decode.ZarrsRead(source)
    with caplog.at_level("INFO", logger="daskpca"):
        np.testing.assert_array_equal(reader[:], expected)
    assert reader._failed and "zarrs cannot read" in caplog.text
    np.testing.assert_array_equal(reader[:], expected)  # and from then on, without trying again

    def cannot_open(s):
        raise TypeError("store not supported")

    monkeypatch.setattr(_decode, "_twin_chain", cannot_open)
    reader = _decode.ZarrsRead(source)
    np.testing.assert_array_equal(reader[:], expected)
    assert reader._failed


def test_the_reader_pickles_as_its_source_alone(tmp_path):
    _field(n=48).to_zarr(tmp_path / "f.zarr", zarr_format=3, consolidated=False)
    reader = _decode.ZarrsRead(zarr.open_array(str(tmp_path / "f.zarr" / "t2m"), mode="r"))
    first = reader[:4]
    assert reader._twin is not None
    copy = pickle.loads(pickle.dumps(reader))
    assert copy._twin is None and not copy._failed
    np.testing.assert_array_equal(copy[:4], first)
