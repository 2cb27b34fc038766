"""Publishing on a real S3 API (moto's server on loopback): versions + a conditional pointer switch,
history and rollback, verified reads, claims, and a writer SIGKILLed at every publish step."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import uuid

import numpy as np
import pytest
import xarray as xr

pytest.importorskip("moto")
pytest.importorskip("s3fs")

from _helpers import assert_equal_up_to_rounding  # noqa: E402
import daskpca  # noqa: E402
from daskpca import PCA, cli, io  # noqa: E402
from daskpca.store.claims import acquire  # noqa: E402
from daskpca.store import publish as _publish  # noqa: E402
from daskpca.store.publish import POINTER, STEPS, start  # noqa: E402
from daskpca.exceptions import DamagedModelError, DamagedStoreError, OutputClaimedError, OutputExistsError  # noqa: E402

from _publish_faults import kill_at_every_step  # noqa: E402

BUCKET = "daskpca-test"
X = np.random.default_rng(5).standard_normal((80, 6))


class Endpoint(dict):
    """The env that points clients at the moto server, and :meth:`silenced` to stop it answering."""

    def __init__(self, env: dict, server):
        super().__init__(env)
        self.server = server

    @contextlib.contextmanager
    def silenced(self):
        """Within: the server accepts connections and requests but answers none (a hung server);
        the requests held answer on the way out, to clients long gone."""
        inner = self.server._server  # werkzeug's server: each request thread calls .app
        app, gate = inner.app, threading.Event()

        def held(environ, start_response):
            gate.wait()
            return app(environ, start_response)

        inner.app = held
        try:
            yield
        finally:
            inner.app = app
            gate.set()


@pytest.fixture(scope="module")
def s3():
    """A moto S3 server on 127.0.0.1 (random free port) and the env that points clients at it
    (an :class:`Endpoint`)."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": f"http://{host}:{port}"}
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    import boto3
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    boto3.client("s3").create_bucket(Bucket=BUCKET)
    try:
        yield Endpoint(env, server)
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def url(name: str) -> str:
    return f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}/{name}"


def _fs():
    import s3fs

    return s3fs.S3FileSystem()


def _versions(target: str) -> list[str]:
    fs = _fs()
    fs.invalidate_cache()
    return sorted(p.rsplit("/", 1)[-1] for p in fs.ls(f"{target[5:]}/versions", detail=False))


def test_save_load_overwrite_history_rollback(s3, monkeypatch):
    monkeypatch.setattr(io, "MODEL_HISTORY", 1)
    target = url("model.zarr")
    first, second = PCA(2).fit(X), PCA(4).fit(X)
    first.save(target)
    assert_equal_up_to_rounding(daskpca.load(target).transform(X), first.transform(X))  # loaded: another layout
    with pytest.raises(OutputExistsError, match="already exists; pass --overwrite"):
        second.save(target)
    second.save(target, overwrite=True)
    assert daskpca.load(target).n_components_ == 4
    versions = io.history(target)
    assert [v["current"] for v in versions] == [True, False] and _versions(target) == sorted(v["version"] for v in versions)
    assert cli.main(["rollback", target, "--to", versions[1]["version"], "--quiet"]) == 0
    assert daskpca.load(target).n_components_ == 2
    assert cli.main(["rollback", target, "--to", "nope", "--quiet"]) == 2
    first.save(target, overwrite=True)  # the oldest version leaves the history, readable for the grace period
    assert len(_versions(target)) == io.MODEL_HISTORY + 2 and len(io.history(target)) == io.MODEL_HISTORY + 1
    monkeypatch.setattr(_publish, "RETIRE_GRACE_SECONDS", 0.0)
    second.save(target, overwrite=True)  # past its grace: collected
    assert len(_versions(target)) == io.MODEL_HISTORY + 1 == len(io.history(target))


def test_a_reader_of_the_replaced_version_finishes_reading_it(s3, monkeypatch):
    # A results store keeps no history: the version a reader opened just before the switch is
    # still whole until its grace period has passed, then the next publish deletes it.
    target = url("scores.zarr")
    old = xr.DataArray(np.arange(200.0).reshape(50, 4), dims=("time", "mode"), name="scores").chunk(time=10)
    io.write_xarray(old, target)
    reader = io.open_xarray(target)["scores"]  # lazy: resolved to the current version, nothing read yet
    io.write_xarray(old + 1000, target, overwrite=True)
    np.testing.assert_array_equal(reader.values, old.values)  # every chunk of the old version still there
    np.testing.assert_array_equal(io.open_xarray(target)["scores"].values, old.values + 1000)
    assert len(_versions(target)) == 2 and len(io.history(target)) == 1
    monkeypatch.setattr(_publish, "RETIRE_GRACE_SECONDS", 0.0)
    io.write_xarray(old + 2000, target, overwrite=True)
    assert len(_versions(target)) == 1


def test_scores_written_by_dask_and_a_missing_chunk_is_refused(s3):
    target = url("scores.zarr")
    scores = xr.DataArray(np.arange(200.0).reshape(50, 4), dims=("time", "mode"), name="scores").chunk(time=10)
    io.write_xarray(scores, target)
    np.testing.assert_array_equal(io.open_xarray(target)["scores"].values, scores.values)
    current = io.resolve(target)
    fs = _fs()
    fs.rm(f"{current[5:]}/scores/c/2/0")
    with pytest.raises(DamagedStoreError, match="'scores': 1 of 5 chunk file"):
        io.open_xarray(target)


def test_damaged_model_on_s3_is_refused(s3):
    target = url("model.zarr")
    PCA(2).fit(X).save(target)
    fs = _fs()
    current = io.resolve(target)[5:]
    fs.pipe_file(f"{current}/model_components/c/0/0", fs.cat_file(f"{current}/model_mean/c/0"))
    with pytest.raises(DamagedModelError, match="'model_components': chunk contents differ"):
        daskpca.load(target)


def test_a_writer_whose_pointer_moved_publishes_nothing(s3):
    target = url("model.zarr")
    PCA(1).fit(X).save(target)
    slow = start(target, overwrite=True)  # read the pointer, then another job publishes
    PCA(2).fit(X).save(target, overwrite=True)
    PCA(3).fit(X).to_dataset().to_zarr(slow.location, mode="w", zarr_format=3, consolidated=False)
    with pytest.raises(OutputClaimedError, match="published by another job while this one ran"):
        slow.commit({"format": io.MODEL_FORMAT})
    slow.abort()
    assert daskpca.load(target).n_components_ == 2
    assert slow.version not in _versions(target)


def test_claims_on_s3_are_exclusive(s3):
    target = url("model.zarr")
    other = {"token": "t", "pid": 1, "host": "elsewhere", "started": 0, "command": "daskpca fit remote"}
    _fs().pipe_file(target.rsplit("/", 1)[0][5:] + "/.model.zarr.daskpca-claim", json.dumps(other).encode())
    with pytest.raises(OutputClaimedError, match=r"host 'elsewhere'.*If that job is gone.*--break-claim"):
        acquire(target)
    acquire(target, break_stale=True).release()
    claim = acquire(target)
    fs = _fs()
    from daskpca.store import objects as _objects

    assert not _objects.create(fs, claim.location[5:], b"{}")  # If-None-Match: * enforced by the server
    claim.release()


def test_cli_fit_to_s3_and_an_old_unversioned_store(s3, tmp_path):
    import zarr

    source = tmp_path / "in.zarr"
    zarr.create_array(str(source), shape=X.shape, chunks=(20, 6), dtype="f8")[...] = X
    model, scores = url("model.zarr"), url("scores.zarr")
    assert cli.main(["fit", str(source), "--n-components", "3", "--out", model, "--scores", scores, "--quiet"]) == 0
    loaded = daskpca.load(model)
    stored = zarr.open_array(io.resolve(scores), mode="r")[...]
    np.testing.assert_allclose(stored, loaded.transform(X), atol=1e-12)
    # a store in the old layout (marker at the root, no pointer, no integrity record) is not read
    # unverified (issue 23: a marker without a record is indistinguishable from one edited to
    # skip the checks), and is replaced by a version
    legacy = url("legacy.zarr")
    PCA(2).fit(X).to_dataset().to_zarr(legacy, mode="w", zarr_format=3, consolidated=False)
    _fs().pipe_file(f"{legacy[5:]}/.daskpca-complete", json.dumps({"format": io.MODEL_FORMAT, "format_version": 1}).encode())
    with pytest.raises(DamagedModelError, match="legacy.zarr' cannot be verified: the integrity record .* is missing"):
        daskpca.load(legacy)
    PCA(3).fit(X).save(legacy, overwrite=True)
    assert daskpca.load(legacy).n_components_ == 3
    assert sorted(p.rsplit("/", 1)[-1] for p in _fs().ls(legacy[5:], detail=False)) == [POINTER, "versions"]


_KILLED_SAVE = """
import sys
import numpy as np
import daskpca
X = np.random.default_rng(5).standard_normal((80, 6))
daskpca.PCA(4).fit(X).save(sys.argv[1], overwrite=True)
"""


def test_sigkill_at_every_s3_publish_step_leaves_a_complete_model(s3):
    targets = {step: url("model.zarr") for step in STEPS}
    for target in targets.values():
        PCA(2).fit(X).save(target)
    kill_at_every_step(_KILLED_SAVE, {step: [target] for step, target in targets.items()})
    for step, target in targets.items():
        switched = STEPS.index(step) >= STEPS.index("switched")
        assert daskpca.load(target).n_components_ == (4 if switched else 2), step  # complete and verified
        assert len(_versions(target)) == 2  # the killed writer's version (or the retired one) is left over
    target = targets["data-written"]  # the next publish (clearing the dead writer's claim) collects the orphan
    PCA(3).fit(X).save(target, overwrite=True)
    assert len(_versions(target)) == len(io.history(target)) == 2
    assert daskpca.load(target).n_components_ == 3


def test_results_daskpca_writes_to_s3_are_sources_for_every_command(s3, tmp_path, capsys):
    # Published stores are a pointer to a version: every SOURCE (fit, inspect, --with, report --data)
    # reads the current version, not the pointer's prefix ("is not a zarr store").
    import zarr

    source = tmp_path / "in.zarr"
    zarr.create_array(str(source), shape=X.shape, chunks=(20, 6), dtype="f8")[...] = X
    model, scores = url("model.zarr"), url("scores.zarr")
    assert cli.main(["fit", str(source), "-k", "3", "--out", model, "--scores", scores, "--quiet"]) == 0
    assert cli.main(["inspect", scores, "--json"]) == 0  # 3 columns: the default k is at most 3
    assert json.loads(capsys.readouterr().out)["shape"] == [80, 3]
    again = url("again.zarr")
    assert cli.main(["fit", scores, "-k", "2", "--solver", "covariance", "--out", again, "--quiet"]) == 0
    assert cli.main(["fit", str(source), "--mca", "--with", scores, "-k", "2", "--out", url("mca.zarr"), "--quiet"]) == 0
    pytest.importorskip("matplotlib")
    assert cli.main(["report", again, "--out", str(tmp_path / "rep"), "--bootstrap", "200", "--data", scores,
                     "--quiet"]) == 0
    assert "Moving-block bootstrap (200 replicates" in (tmp_path / "rep" / "summary.md").read_text()
