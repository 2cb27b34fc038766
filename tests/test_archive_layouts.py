"""Stores chunked the way public archives are: every pass reads each storage chunk once, in tasks
of many chunks, whatever the layout (one time step per chunk, spatial tiles, zarr v3 shards).

The fields are opened as a user would (``xr.open_zarr``, ``zarr.open_array``) through a store that
counts every read by key and byte range, and a dask callback counts the tasks a fit runs.
"""

from collections import Counter

import dask
import numpy as np
import pytest
import xarray as xr
import zarr
from dask.callbacks import Callback
from zarr.storage import LocalStore

from daskpca import PCA
from daskpca.passes._geometry import geometry_of, group_chunks, regroup

from _helpers import CountingStore, align_signs, sin_theta
from test_publish_s3 import s3  # noqa: F401  (the moto server fixture)


@pytest.fixture(autouse=True)
def _no_pass_cache():
    """These tests count each pass's reads of the stored chunks: the pass cache (on by default, see
    tests/test_pass_cache.py) would serve passes 2+ from the first read's blocks."""
    with dask.config.set({"daskpca.cache": False}):
        yield

N_TIME, N_LAT, N_LON = 360, 12, 16


class RangeCountingStore(CountingStore):
    """Counts reads by (key, byte range): an inner chunk of a shard is one range of its object."""

    async def get(self, key, prototype, byte_range=None):
        if "c/" in key or key.startswith("c"):
            with self._lock:
                self.reads[(key, repr(byte_range))] += 1
        return await self._store.get(key, prototype, byte_range)

    def chunk_reads(self) -> Counter:
        return Counter({k: v for k, v in self.reads.items() if "/c/" in "/" + k[0]})


class TaskCounter(Callback):
    def __init__(self):
        super().__init__()
        self.tasks = 0

    def _pretask(self, key, dsk, state):
        self.tasks += 1


def _field(seed=0):
    """A (time, lat, lon) field: 4 modes above noise, a large mean, float32."""
    rng = np.random.default_rng(seed)
    d = N_LAT * N_LON
    modes = np.linalg.qr(rng.standard_normal((d, 4)))[0].T
    scores = rng.standard_normal((N_TIME, 4)) * [12.0, 8.0, 5.0, 3.0]
    values = (scores @ modes + 0.3 * rng.standard_normal((N_TIME, d)) + 280).astype(np.float32)
    return xr.Dataset(
        {"t2m": (("time", "latitude", "longitude"), values.reshape(N_TIME, N_LAT, N_LON))},
        coords={"time": np.datetime64("2001-01-01") + np.arange(N_TIME).astype("timedelta64[D]"),
                "latitude": np.linspace(60, -60, N_LAT), "longitude": np.arange(N_LON) * 22.5},
    )


def _stored(tmp_path, chunks, shards=None, counter=CountingStore):
    ds = _field()
    encoding = {"t2m": {"chunks": chunks, **({"shards": shards} if shards else {})}}
    ds.to_zarr(tmp_path / "era.zarr", encoding=encoding, zarr_format=3, consolidated=False)
    store = counter(LocalStore(str(tmp_path / "era.zarr"), read_only=True))
    return ds, xr.open_zarr(store, consolidated=False), store


def _reference(ds, k):
    """Float64 NumPy reference of the coslat-weighted field."""
    X = ds.t2m.values.reshape(ds.sizes["time"], -1).astype(np.float64)
    w = np.repeat(np.sqrt(np.cos(np.deg2rad(ds.latitude.values))), N_LON)
    Z = (X - X.mean(0)) * w
    _, s, vt = np.linalg.svd(Z, full_matrices=False)
    return vt[:k], s[:k] ** 2 / (len(X) - 1)


def _fit(opened, **params):
    counter = TaskCounter()
    with dask.config.set(scheduler="threads"), counter:
        pca = PCA(4, weights="coslat", **params).fit(opened.t2m, sample_dims="time")
    return pca, counter.tasks


LAYOUTS = {
    # ERA5's layout: one time step per chunk.
    "one step per chunk": dict(chunks=(1, N_LAT, N_LON)),
    # Satellite products: spatial tiles, a few steps each.
    "spatial tiles": dict(chunks=(5, 4, 8)),
    # Newer stores: zarr v3 shards of 30 steps, one step per inner chunk.
    "shards": dict(chunks=(1, N_LAT, N_LON), shards=(30, N_LAT, N_LON), counter=RangeCountingStore),
}


@pytest.mark.parametrize("layout", LAYOUTS, ids=list(LAYOUTS))
@pytest.mark.parametrize("solver, params", [("covariance", {}), ("krylov", {"tol": 1e-6})], ids=["covariance", "krylov"])
def test_each_storage_chunk_is_read_once_per_pass_in_tasks_of_many_chunks(tmp_path, layout, solver, params):
    ds, opened, store = _stored(tmp_path, **LAYOUTS[layout])
    pca, tasks = _fit(opened, solver=solver, random_state=0, **params)
    reads = {key: count for key, count in store.chunk_reads().items() if str(key).startswith(("t2m/", "('t2m/"))}
    n_chunks = len(reads)
    assert n_chunks >= N_TIME // 30  # every chunk (or inner chunk of a shard) was read …
    assert set(reads.values()) == {pca.n_passes_}, f"reads per chunk {Counter(reads.values())}"  # … once a pass
    # Tasks are groups of chunks: far fewer tasks than stored chunks (a task a chunk would be 1:1;
    # a shard is read whole, in one request).
    inner = np.prod([-(-s // c) for s, c in zip((N_TIME, N_LAT, N_LON), LAYOUTS[layout]["chunks"])])
    assert tasks < 0.5 * inner * pca.n_passes_
    components, variances = _reference(ds, 4)
    assert sin_theta(pca.components_, components) < 1e-6
    np.testing.assert_allclose(pca.explained_variance_, variances, rtol=1e-6)


def test_results_do_not_depend_on_the_storage_layout(tmp_path):
    fits = []
    for i, layout in enumerate(LAYOUTS.values()):
        folder = tmp_path / str(i)
        folder.mkdir()
        _, opened, _ = _stored(folder, **layout)
        fits.append(_fit(opened, solver="covariance")[0])
    in_memory = PCA(4, weights="coslat", solver="covariance").fit(_field().load().t2m, sample_dims="time")
    for pca in fits:
        aligned, _ = align_signs(pca.components_, in_memory.components_)
        np.testing.assert_allclose(aligned, in_memory.components_, atol=1e-9)
        np.testing.assert_allclose(pca.transform(opened.t2m).values, in_memory.transform(_field().t2m).values,
                                   rtol=1e-6, atol=1e-6)


def test_a_plain_zarr_array_with_one_row_per_chunk_is_read_in_selections(tmp_path):
    X = _field().t2m.values.reshape(N_TIME, -1)
    zarr.create_array(store=str(tmp_path / "x.zarr"), shape=X.shape, chunks=(1, X.shape[1]), dtype=X.dtype)[...] = X
    store = CountingStore(LocalStore(str(tmp_path / "x.zarr"), read_only=True))
    array = zarr.open_array(store=store, mode="r")
    counter = TaskCounter()
    with dask.config.set(scheduler="threads"), counter:
        pca = PCA(3, solver="covariance").fit(array)
    assert set(store.chunk_reads().values()) == {1} and len(store.chunk_reads()) == N_TIME
    assert counter.tasks < N_TIME / 4
    assert geometry_of(regroup(__import__("dask.array").array.from_zarr(array))).read == "selection"


def test_data_computed_by_dask_is_regrouped_by_joining_neighbouring_blocks():
    X = _field().t2m.values.reshape(N_TIME, -1).astype(np.float64)
    computed = dask.array.from_array(X, chunks=(1, -1)) * 1.0  # not a plain read: an expression
    regrouped = regroup(computed)
    geometry = geometry_of(regrouped)
    assert geometry.read == "concatenated" and geometry.tasks < N_TIME / 4 and geometry.tasks >= 2
    assert all(sum(group) == N_TIME for group in [regrouped.chunks[0]])
    np.testing.assert_array_equal(regrouped.compute(), X)


def test_few_chunks_are_left_as_stored():
    X = dask.array.zeros((400, 30), chunks=(100, 30))
    assert regroup(X) is X or regroup(X).chunks == X.chunks


def test_groups_hold_whole_chunks_and_whole_shards():
    assert group_chunks((1,) * 10, 4) == (4, 4, 2)
    assert group_chunks((3, 3, 3, 3), 5, align=6) == (6, 6)
    assert group_chunks((7, 7, 7), 5) == (7, 7, 7)  # a chunk larger than the target is its own group
    assert sum(group_chunks((1,) * 8760, 512)) == 8760


def test_the_plan_states_the_geometry_and_a_time(tmp_path):
    _, opened, _ = _stored(tmp_path, chunks=(1, N_LAT, N_LON))
    plan = PCA(4, weights="coslat").plan(opened.t2m, sample_dims="time")
    text = str(plan)
    assert f"storage: {N_TIME} chunk(s) of 1 row(s)" in text and "one zarr selection each" in text
    assert plan.geometry.tasks < N_TIME / 4 and plan.seconds is not None and plan.seconds > 0


def test_gram_on_a_field_stored_by_rows_reads_it_once_into_column_strips(tmp_path, monkeypatch):
    # Fewer samples than features, one sample per chunk: Gram's column strips would each be the
    # whole field. It copies the input into strips (one read, one write), then reads the copy.
    monkeypatch.setenv("DASKPCA_SCRATCH", str(tmp_path / "scratch"))
    (tmp_path / "scratch").mkdir()
    rng = np.random.default_rng(1)
    X = (rng.standard_normal((40, 4)) * [9, 5, 3, 2]) @ np.linalg.qr(rng.standard_normal((3000, 4)))[0].T
    X = (X + 0.1 * rng.standard_normal((40, 3000)) + 50).astype(np.float32)
    zarr.create_array(store=str(tmp_path / "x.zarr"), shape=X.shape, chunks=(1, 3000), dtype=X.dtype)[...] = X
    store = CountingStore(LocalStore(str(tmp_path / "x.zarr"), read_only=True))
    array = zarr.open_array(store=store, mode="r")
    monkeypatch.setattr("daskpca.passes._geometry.STRIP_BYTES", 40 * 4 * 700)  # ~5 strips
    monkeypatch.setattr("daskpca.passes._geometry.RELAYOUT_BYTES", 40 * 4 * 2000)  # this small field counts as large
    plan = PCA(3, solver="gram").plan(array)
    assert "re-laid out into 5 column strips" in plan.estimate("gram").note and plan.estimate("gram").feasible
    with dask.config.set(scheduler="threads"):
        pca = PCA(3, solver="gram").fit(array)
    assert set(store.chunk_reads().values()) == {1} and len(store.chunk_reads()) == 40
    assert pca.n_passes_ == 1 and "strips of 700 columns" in pca.solver_info_["relayout"]
    assert not list((tmp_path / "scratch").iterdir())  # the temporary copy is gone
    Xc = X.astype(np.float64) - X.astype(np.float64).mean(0)
    _, s, vt = np.linalg.svd(Xc, full_matrices=False)
    assert sin_theta(pca.components_, vt[:3]) < 1e-10
    np.testing.assert_allclose(pca.explained_variance_, s[:3] ** 2 / 39, rtol=1e-10)


def test_a_pass_over_an_object_store_reads_each_chunk_once_in_task_selections(s3):
    # One time step per chunk on an S3-compatible server (moto on loopback): every chunk is a
    # request; a task's selection fetches its chunks concurrently, once per pass.
    pytest.importorskip("s3fs")
    from zarr.storage import FsspecStore

    ds = _field().isel(time=slice(0, 96))  # every chunk is a request to a slow test server
    url = "s3://daskpca-test/archive-layouts/era.zarr"
    ds.to_zarr(url, mode="w", encoding={"t2m": {"chunks": (1, N_LAT, N_LON)}}, zarr_format=3, consolidated=False)
    store = CountingStore(FsspecStore.from_url(url, read_only=True))
    pca, tasks = _fit(xr.open_zarr(store, consolidated=False), solver="covariance")
    reads = {key: count for key, count in store.chunk_reads().items() if key.startswith("t2m/")}
    assert len(reads) == 96 and set(reads.values()) == {1}
    assert tasks < 96 / 2
    components, variances = _reference(ds, 4)
    assert sin_theta(pca.components_, components) < 1e-6
    np.testing.assert_allclose(pca.explained_variance_, variances, rtol=1e-6)
