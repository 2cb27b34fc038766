"""The pass cache: the first read keeps the input's blocks, later passes read those.

Proven with chunk-read counters on real zarr stores (each stored chunk read exactly once by a
fit of many passes, and by the CLI's fit + scores), results identical to the uncached fit, the
disk copy gone after the fit (success, SIGTERM, SIGKILL and a rerun), a full or unusable scratch
folder a single warning, and an object store asked for nothing after the first pass.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr

from daskpca import PCA
from daskpca.passes import _cache, _copies
from daskpca.coupled.mca import MCA
from daskpca.eof.hilbert import HilbertPCA
from daskpca.exceptions import CacheWarning, InvalidParameterError, ScratchDamagedError, ScratchError
from daskpca.store import scratch

from _helpers import CountingStore, sin_theta, write_zarr
from test_publish_s3 import s3  # noqa: F401  (the moto server fixture)
from test_solver_krylov import hard_spectrum

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def scratch_dir(tmp_path, monkeypatch):
    folder = tmp_path / "scratch"
    folder.mkdir()
    monkeypatch.setenv("DASKPCA_SCRATCH", str(folder))
    return folder


def _left(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("daskpca-"))


SOLVERS = {  # solver → parameters that make it read several times
    "randomized": dict(n_power_iter=3),
    "krylov": dict(max_passes=4),
    "als": dict(max_iter=6, tol=0.0),
    "ppca": dict(max_iter=6, tol=0.0),
}


@pytest.mark.parametrize("chunks", [(1, 60), (40, 15)], ids=["one row per chunk", "tiles"])
@pytest.mark.parametrize("kind", ["memory", "disk"])
@pytest.mark.parametrize("solver", sorted(SOLVERS))
def test_every_iterative_solver_reads_the_source_once_and_the_cache_after(tmp_path, scratch_dir, solver, kind, chunks):
    X = hard_spectrum(240, 60, 4, 2.0, dtype=np.float32)
    params = dict(solver=solver, random_state=0, **SOLVERS[solver])
    with dask.config.set(scheduler="threads"):
        plain, plain_store = write_zarr(tmp_path / "plain.zarr", X, chunks)
        uncached = PCA(4, cache=False, **params).fit(plain)
        array, store = write_zarr(tmp_path / "x.zarr", X, chunks)
        cached = PCA(4, cache=kind, **params).fit(array)
    n_chunks = (240 // chunks[0]) * (60 // chunks[1])
    assert uncached.n_passes_ == cached.n_passes_ > 1
    assert set(plain_store.chunk_reads().values()) == {uncached.n_passes_}  # no cache: every pass reads
    reads = store.chunk_reads()
    assert len(reads) == n_chunks and set(reads.values()) == {1}  # cached: the first pass only
    assert cached.cache_["kind"] == kind and cached.cache_["bytes"] == X.nbytes
    assert sin_theta(cached.components_, uncached.components_) <= 1e-10
    np.testing.assert_array_equal(cached.components_, uncached.components_)  # the same arithmetic
    np.testing.assert_array_equal(cached.explained_variance_, uncached.explained_variance_)
    assert _left(scratch_dir) == []


def test_the_disk_cache_maps_its_chunk_files_zero_and_edge_blocks_included(tmp_path, scratch_dir):
    """Later passes map the copy's chunk files (``_copies._read_block``): a block of zeros reads as
    zeros, an edge block smaller than the chunk as its own rows and columns, and the fit is the
    uncached one to the bit."""
    X = hard_spectrum(250, 60, 4, 2.0, dtype=np.float32)
    X[100:140] = 0.0  # whole task blocks of zeros at the task geometry below
    fits = {}
    for cache in (False, "disk"):
        array, _ = write_zarr(tmp_path / f"{cache}.zarr", X, (20, 60))  # 250 rows: a short last block
        with dask.config.set(scheduler="threads", **{"daskpca.regroup": False}):
            fits[cache] = PCA(4, solver="krylov", max_passes=4, random_state=0, cache=cache).fit(array)
    assert fits["disk"].cache_["kind"] == "disk"
    np.testing.assert_array_equal(fits["disk"].components_, fits[False].components_)
    np.testing.assert_array_equal(fits["disk"].mean_, fits[False].mean_)
    # The read itself: a padded chunk gives the block; every block is written (zeros too), so a
    # missing chunk file is a damaged copy, never the fill value (issue 38).
    chunk = tmp_path / "chunk"
    written = _copies._write_block(np.arange(6, dtype=np.float32).reshape(2, 3), str(chunk), np.float32, (3, 4))
    assert written[0] == 48
    np.testing.assert_array_equal(_copies._read_block(str(chunk), np.float32, (3, 4), (2, 3), written), [[0, 1, 2], [3, 4, 5]])
    with pytest.raises(ScratchDamagedError, match="is missing"):
        _copies._read_block(str(tmp_path / "absent"), np.float32, (3, 4), (2, 4), written)
    assert _left(scratch_dir) == []


def _nested_funcs(node) -> set:
    """The functions of the tasks nested inside ``node``'s arguments."""
    from dask._task_spec import Task

    found = set()
    for arg in (*getattr(node, "args", ()), *getattr(node, "kwargs", {}).values()):
        if isinstance(arg, Task):
            found |= {arg.func} | _nested_funcs(arg)
    return found


def test_the_disk_cache_reads_run_inside_the_tasks_that_use_them(tmp_path, scratch_dir):
    """A later pass maps a block's chunk file inside the task that consumes the block: a read
    task of its own would make the ~100 MB block a result the scheduler may move between
    workers, where mapping the file again costs ~30 ms."""
    array, _ = write_zarr(tmp_path / "x.zarr", hard_spectrum(200, 30, 3, 3.0, dtype=np.float32), (20, 30))
    graphs = []

    def recording(dsk, keys, **kwargs):
        graphs.append(dict(dsk))
        return dask.threaded.get(dsk, keys, **kwargs)

    with dask.config.set(scheduler=recording, **{"daskpca.regroup": False}):
        pca = PCA(3, solver="krylov", max_passes=3, random_state=0, cache="disk").fit(array)
    assert pca.cache_["kind"] == "disk" and pca.n_passes_ == 3
    later = [g for g in graphs if any(_cache._read_block in _nested_funcs(node) for node in g.values())]
    assert len(later) == 2  # passes 2 and 3
    for graph in later:
        assert not [node for node in graph.values() if getattr(node, "func", None) is _cache._read_block]
    assert _left(scratch_dir) == []


@pytest.mark.parametrize("how", ["weighted labeled", "standardized"])
def test_the_feature_stage_is_applied_to_cached_blocks_as_to_read_ones(tmp_path, how):
    X = hard_spectrum(200, 48, 3, 3.0, dtype=np.float32)
    X[:, [0, 7]] = np.nan  # land: masked features
    results = {}
    for cache in ("auto", False):
        array, store = write_zarr(tmp_path / f"{cache}.zarr", X.reshape(200, 6, 8), (1, 6, 8))
        field = xr.DataArray(da.from_zarr(array), dims=("time", "lat", "lon"),
                             coords={"lat": np.linspace(-60, 60, 6), "lon": np.arange(8.0)})
        params = dict(weights="coslat") if how == "weighted labeled" else dict(standardize=True)
        with dask.config.set(scheduler="threads"):
            pca = PCA(3, solver="krylov", max_passes=4, random_state=1, cache=cache, **params).fit(field, sample_dims="time")
        results[cache] = pca
        expected = {1} if cache == "auto" else {pca.n_passes_}
        assert set(store.chunk_reads().values()) == expected, cache
    assert results["auto"].cache_["kind"] == "memory"
    np.testing.assert_array_equal(results["auto"].components_, results[False].components_)


def test_hilbert_krylov_and_mca_krylov_read_their_sources_once(tmp_path, scratch_dir):
    rng = np.random.default_rng(0)
    t = np.arange(300)[:, None]
    X = (np.sin(t / 9) * rng.standard_normal(40) + 0.3 * rng.standard_normal((300, 40))).astype(np.float32)
    Y = (np.cos(t / 9) * rng.standard_normal(30) + 0.3 * rng.standard_normal((300, 30))).astype(np.float32)
    out = {}
    for cache in ("auto", "disk", False):
        x, sx = write_zarr(tmp_path / f"hx-{cache}.zarr", X, (1, 40))
        with dask.config.set(scheduler="threads"):
            hilbert = HilbertPCA(3, solver="krylov", max_passes=4, random_state=0, cache=cache).fit(x)
        assert set(sx.chunk_reads().values()) == ({hilbert.n_passes_} if cache is False else {1})
        x, sx = write_zarr(tmp_path / f"mx-{cache}.zarr", X, (1, 40))
        y, sy = write_zarr(tmp_path / f"my-{cache}.zarr", Y, (7, 30))
        with dask.config.set(scheduler="threads"):
            mca = MCA(3, solver="krylov", max_passes=4, random_state=0, cache=cache).fit(x, y)
        expected = {mca.n_passes_} if cache is False else {1}
        assert set(sx.chunk_reads().values()) == expected and set(sy.chunk_reads().values()) == expected
        assert mca.cache_["kind"] == (None if cache is False else "memory" if cache == "auto" else "disk")
        out[cache] = (hilbert.components_, mca.components_x_)
    for cache in ("auto", "disk"):
        np.testing.assert_array_equal(out[cache][0], out[False][0])
        np.testing.assert_array_equal(out[cache][1], out[False][1])
    assert _left(scratch_dir) == []


def test_no_cache_for_input_in_memory_one_read_or_when_switched_off(tmp_path):
    X = hard_spectrum(200, 30, 3, 3.0)
    kw = dict(solver="krylov", max_passes=3, random_state=0)
    assert "in-memory array" in PCA(3, **kw).fit(X).cache_["reason"]  # NumPy
    persisted = da.from_array(X, chunks=(20, 30)).persist()
    fitted = PCA(3, **kw).fit(persisted)
    assert fitted.cache_["kind"] is None and "already in memory" in fitted.cache_["reason"]
    array, _ = write_zarr(tmp_path / "x.zarr", X, (20, 30))
    assert "once" in PCA(3, solver="covariance").fit(array).cache_["reason"]  # one pass: nothing to reuse
    with dask.config.set({"daskpca.cache": False}):  # the config key overrides "auto"
        assert PCA(3, **kw).fit(array).cache_ == {"kind": None, "bytes": 0, "where": None,
                                                  "reason": "dask config 'daskpca.cache' is False"}
    with dask.config.set({"daskpca.cache": "disk"}):
        assert PCA(3, **kw).plan(array).cache.kind == "disk"
    with dask.config.set({"daskpca.cache": "sometimes"}), pytest.raises(InvalidParameterError, match="daskpca.cache"):
        PCA(3, **kw).plan(array)
    with pytest.raises(InvalidParameterError, match="cache=True"):
        PCA(3, cache=True).plan(array)


def test_the_plan_states_the_cache_and_its_later_passes(tmp_path):
    array, _ = write_zarr(tmp_path / "x.zarr", hard_spectrum(200, 30, 3, 3.0, dtype=np.float32), (1, 30))
    plan = PCA(3, solver="krylov", max_passes=5).plan(array)
    assert plan.cache.kind == "memory" and plan.cache.nbytes == 200 * 30 * 4
    assert plan.cache.pass_seconds is not None and plan.cache.pass_seconds < plan.cache.read_seconds
    krylov = plan.estimate("krylov")  # timed with passes 2+ at the cached time, the choice weighed so
    assert plan.seconds == krylov.seconds < krylov.uncached_seconds
    assert "pass cache: memory, 23.4 KiB" in str(plan) and "passes 2+" in str(plan)


def test_a_full_scratch_folder_is_one_warning_and_a_correct_fit(tmp_path, scratch_dir, monkeypatch):
    X = hard_spectrum(200, 30, 3, 3.0, dtype=np.float32)
    array, store = write_zarr(tmp_path / "x.zarr", X, (1, 30))
    reference = PCA(3, solver="krylov", max_passes=4, random_state=0, cache=False).fit(X)

    def full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_cache, "_write_block", full)
    with warnings.catch_warnings(record=True) as caught, dask.config.set(scheduler="threads"):
        warnings.simplefilter("always")
        pca = PCA(3, solver="krylov", max_passes=4, random_state=0, cache="disk").fit(array)
    said = [w for w in caught if issubclass(w.category, CacheWarning)]
    assert len(said) == 1 and "is full" in str(said[0].message) and "$DASKPCA_SCRATCH" in str(said[0].message)
    assert "Errno" not in str(said[0].message)
    assert pca.cache_["kind"] is None and "full" in pca.cache_["reason"]
    assert sin_theta(pca.components_, reference.components_) < 1e-6
    assert _left(scratch_dir) == []


@pytest.mark.parametrize("problem", ["missing", "a file"])
def test_an_unusable_scratch_folder_is_one_warning_naming_it_and_a_correct_fit(tmp_path, monkeypatch, problem):
    place = tmp_path / "scratch"
    if problem == "a file":
        place.write_text("not a folder")
    monkeypatch.setenv("DASKPCA_SCRATCH", str(place))
    array, _ = write_zarr(tmp_path / "x.zarr", hard_spectrum(200, 30, 3, 3.0, dtype=np.float32), (1, 30))
    with pytest.warns(CacheWarning, match=r"\$DASKPCA_SCRATCH") as caught:
        pca = PCA(3, solver="krylov", max_passes=3, cache="disk").fit(array)
    # One CacheWarning (pytest records every warning of the block: a previous test's objects
    # collected meanwhile can add a ResourceWarning under xdist).
    said = [w for w in caught if issubclass(w.category, CacheWarning)]
    assert len(said) == 1, [f"{w.category.__name__}: {w.message}" for w in caught]
    assert "does not exist" in str(said[0].message) or "is a file" in str(said[0].message)
    assert pca.cache_["kind"] is None
    with pytest.raises(ScratchError, match=r"\$DASKPCA_SCRATCH"):  # the Gram re-layout: a clear error
        scratch.check_root()


def test_a_lower_memory_limit_than_the_cache_takes_the_disk_and_the_same_answer(tmp_path, scratch_dir):
    from distributed import Client, LocalCluster

    X = hard_spectrum(400, 200, 4, 2.0, dtype=np.float32)
    write_zarr(tmp_path / "x.zarr", X, (1, 200))  # (distributed cannot tokenize a counting store: a path)
    kw = dict(solver="krylov", max_passes=4, random_state=0)
    with dask.config.set(scheduler="threads"):
        reference = PCA(4, cache=False, **kw).fit(str(tmp_path / "x.zarr"))
    # Workers of 360 MiB: with their footprint (350 MiB) there is no room for any cached byte.
    # In-process workers (fast to start) would measure this whole test process against that
    # limit and pause: their memory management is off, only the limit they report is read.
    quiet = {f"distributed.worker.memory.{key}": False for key in ("target", "spill", "pause", "terminate")}
    with dask.config.set(quiet), LocalCluster(n_workers=2, threads_per_worker=1, processes=False, memory_limit="360MiB",
                                              dashboard_address=None) as cluster, Client(cluster):
        pca = PCA(4, **kw).fit(str(tmp_path / "x.zarr"))
        in_memory = PCA(4, cache="memory", **kw).fit(str(tmp_path / "x.zarr"))  # futures on the workers
    assert pca.cache_["kind"] == "disk" and "exceeds the memory room" in pca.cache_["reason"]
    assert in_memory.cache_["kind"] == "memory" and "workers' memory" in in_memory.cache_["where"]
    assert sin_theta(pca.components_, reference.components_) <= 1e-10
    assert sin_theta(in_memory.components_, reference.components_) <= 1e-10
    assert _left(scratch_dir) == []


_JOB = textwrap.dedent("""
    import sys, time
    import dask.array as da, numpy as np
    from daskpca import PCA
    slow = float(sys.argv[2])
    def block(b):
        time.sleep(slow)
        return b
    X = da.from_zarr(sys.argv[1]).map_blocks(block, dtype=np.float32)
    print("fitting", flush=True)
    PCA(3, solver="krylov", max_passes=3, cache="disk").fit(X)
    print("done", flush=True)
""")


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_no_copy_is_left_after_a_sigterm_or_a_sigkill_and_a_rerun(tmp_path, scratch_dir, how):
    write_zarr(tmp_path / "x.zarr", hard_spectrum(200, 30, 3, 3.0, dtype=np.float32), (1, 30))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DASKPCA_SCRATCH": str(scratch_dir)}
    job = subprocess.Popen([sys.executable, "-c", _JOB, str(tmp_path / "x.zarr"), "0.05"], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not _left(scratch_dir) and time.time() < deadline and job.poll() is None:
        time.sleep(0.05)
    assert _left(scratch_dir), job.communicate()
    time.sleep(0.3)  # mid-pass: the first pass writes its blocks into the copy
    job.send_signal(how)
    _, err = job.communicate(timeout=60)
    if how == signal.SIGTERM:
        assert job.returncode != 0 and "Terminated" in err
        assert _left(scratch_dir) == []  # removed on the way out
    else:
        assert _left(scratch_dir)  # a SIGKILLed job cannot clean up: the next one does
    # The rerun: the same fit, in this process (DASKPCA_SCRATCH is set here too; an interpreter
    # start less). It removes what the killed job left and its own copy.
    rerun = PCA(3, solver="krylov", max_passes=3, cache="disk").fit(da.from_zarr(str(tmp_path / "x.zarr")))
    assert rerun.cache_["kind"] == "disk"
    assert _left(scratch_dir) == []


def test_a_live_jobs_folder_is_never_removed(scratch_dir):
    with scratch.scratch_folder("cache") as mine:
        assert scratch.remove_dead() == [] and mine.exists()
        record = json.loads((mine / scratch.OWNER_FILE).read_text())
        assert record["pid"] == os.getpid() and "pid_start" in record
    assert not mine.exists()


def test_sigterm_cleanup_leaves_a_users_handler_alone():
    def mine(signum, frame):
        pass

    before = signal.signal(signal.SIGTERM, mine)
    try:
        with scratch.terminate_as_interrupt():
            assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, before)
    with scratch.terminate_as_interrupt():
        assert signal.getsignal(signal.SIGTERM) is scratch._raise_terminated
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


@pytest.mark.parametrize("cache, expected", [("auto", 1), ("off", 5)])  # 4 Krylov passes + the scores
def test_fit_with_scores_reads_the_source_once(tmp_path, scratch_dir, cache, expected):
    from daskpca import cli

    X = hard_spectrum(240, 96, 3, 1.5, dtype=np.float32)  # d > 4 Krylov blocks: no early exact stop
    ds = xr.Dataset({"t2m": (("time", "lat", "lon"), X.reshape(240, 8, 12))},
                    coords={"lat": np.linspace(-45, 45, 8), "lon": np.arange(12.0)})
    ds.to_zarr(tmp_path / "field.zarr", encoding={"t2m": {"chunks": (1, 8, 12)}}, zarr_format=3, consolidated=False)
    counted = {}
    real = cli.command.open_source

    def counting_open(path, var=None):
        from zarr.storage import LocalStore

        store = counted.setdefault(path, CountingStore(LocalStore(path, read_only=True)))
        return xr.open_zarr(store, consolidated=False)[var] if var else real(path, var)

    import daskpca.cli.command as command
    original, command.open_source = command.open_source, counting_open
    try:
        with dask.config.set(scheduler="threads"):
            code = cli.main(["fit", str(tmp_path / "field.zarr"), "--var", "t2m", "-k", "3", "--solver", "krylov",
                             "--max-passes", "4", "--out", str(tmp_path / "m.zarr"), "--scores", str(tmp_path / "s.zarr"),
                             "--cache", cache, "--json", "--quiet"])
    finally:
        command.open_source = original
    assert code == 0
    reads = counted[str(tmp_path / "field.zarr")].chunk_reads()
    data = {k: v for k, v in reads.items() if k.startswith("t2m/")}
    assert len(data) == 240 and set(data.values()) == {expected}
    scores = xr.open_zarr(tmp_path / "s.zarr", consolidated=False)
    assert int(np.prod(list(scores.sizes.values()))) == 240 * 3


def test_on_an_object_store_passes_after_the_first_make_no_request(s3):
    from daskpca.passes._progress import listen

    rng = np.random.default_rng(2)
    values = (rng.standard_normal((96, 3)) @ rng.standard_normal((3, 48)) + 0.1 * rng.standard_normal((96, 48)))
    ds = xr.Dataset({"t2m": (("time", "lat", "lon"), values.reshape(96, 6, 8).astype(np.float32))},
                    coords={"lat": np.linspace(-50, 50, 6), "lon": np.arange(8.0)})
    prefix = "pass-cache/era.zarr"
    ds.to_zarr(f"s3://daskpca-test/{prefix}", mode="w", encoding={"t2m": {"chunks": (1, 6, 8)}}, zarr_format=3,
               consolidated=False)
    inner = s3.server._server  # werkzeug's server: count the requests for the source's objects
    app, requests = inner.app, []

    def counting(environ, start_response):
        if prefix in environ.get("PATH_INFO", "") + environ.get("QUERY_STRING", ""):
            requests.append(environ["PATH_INFO"])
        return app(environ, start_response)

    marks = []  # requests so far at each pass's start and end
    inner.app = counting
    try:
        field = xr.open_zarr(f"s3://daskpca-test/{prefix}", consolidated=False).t2m
        with dask.config.set(scheduler="threads"), listen(lambda report: marks.append(len(requests))):
            pca = PCA(3, solver="krylov", max_passes=4, random_state=0).fit(field, sample_dims="time")
    finally:
        inner.app = app
    passes = pca.n_passes_  # 3 or 4: Krylov stops once its bound is at round-off
    assert pca.cache_["kind"] == "memory" and passes >= 3 and len(marks) == 2 * passes
    first = marks[1] - marks[0]
    assert first >= 96  # the first pass fetched every chunk
    assert [marks[i + 1] - marks[i] for i in range(2, 2 * passes, 2)] == [0] * (passes - 1)  # later passes: no request


def test_the_next_scratch_copy_removes_a_killed_jobs_copies_and_only_those(scratch_dir):
    # A job that made a strip re-layout (or a disk cache) and died: its owner record names a pid
    # that is gone. A live job's folder and a fresh folder without a record stay.
    child = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(ROOT)!r})
        os.environ["DASKPCA_SCRATCH"] = {str(scratch_dir)!r}
        from daskpca.store import scratch
        held = scratch.scratch_folder("strips")
        folder = held.__enter__()  # never left: as if SIGKILLed
        print(folder, flush=True)
        os._exit(0)
    """)], capture_output=True, text=True, timeout=60)
    dead = Path(child.stdout.strip())
    assert dead.exists() and (dead / scratch.OWNER_FILE).exists()
    fresh = scratch_dir / "daskpca-strips-unowned"
    fresh.mkdir()
    with scratch.scratch_folder("cache") as mine:
        assert not dead.exists() and fresh.exists() and mine.exists()
        assert scratch.remove_dead() == []  # nothing else is dead: this job's folder stays
    assert _left(scratch_dir) == ["daskpca-strips-unowned"]
