"""Hostile trial, store side (issue 23 A): nothing destroyed, nothing misreported.

An output that is an input, ``--overwrite`` of folders daskpca never wrote, lazy readers racing a
publish, checkpoints over a rewritten input, integrity records edited away, claim leftovers and
an object store that stops answering. CLI cases run in-process (``cli.main``) on small zarr
stores with the threaded scheduler.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

from daskpca import PCA, cli, io
from daskpca.exceptions import OutputExistsError

try:  # the moto S3 server fixture; without moto/s3fs its tests are skipped, not this module
    from test_publish_s3 import s3, url as s3_url  # noqa: F401
except pytest.skip.Exception:
    s3_url = None

    @pytest.fixture
    def s3():
        pytest.skip("needs moto and s3fs")

X = np.random.default_rng(23).standard_normal((120, 6)) @ np.diag([5.0, 3.0, 2.0, 1.0, 0.5, 0.1]) + 2.0


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(Path(folder).rglob("*")):
        h.update(str(path.relative_to(folder)).encode())
        if path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()


@pytest.fixture
def job(tmp_path):
    """A source array, a saved model and a results store in a fresh folder."""
    zarr.create_array(str(tmp_path / "s.zarr"), shape=X.shape, chunks=(40, 6), dtype="f8")[...] = X
    PCA(2).fit(X).save(tmp_path / "m.zarr")
    io.write_array(np.ones((4, 2)), tmp_path / "r.zarr")
    (tmp_path / "sub").mkdir()
    os.symlink(tmp_path / "s.zarr", tmp_path / "link.zarr")
    return tmp_path


# ----------------------------------------------------------------------------- 1. no output is an input


def _spellings(root: Path, name: str) -> list[str]:
    """Other spellings of ``root/name``: relative, trailing slash, ``..``, a symlink, file://."""
    return [os.path.relpath(root / name), f"{root / name}/", f"{root}/sub/../{name}", f"file://{root / name}"]


@pytest.mark.parametrize("case", [
    # (argv with {s} for the spelling of the protected store, the protected store, its label)
    (["fit", "{r}/s.zarr", "-k", "2", "--out", "{s}", "--overwrite"], "s.zarr", "SOURCE"),
    (["fit", "{r}/s.zarr", "-k", "2", "--out", "{r}/new.zarr", "--scores", "{s}", "--overwrite"], "s.zarr", "SOURCE"),
    (["fit", "{r}/s.zarr", "-k", "2", "--out", "{s}", "--scores", "{r}/m.zarr", "--overwrite"], "m.zarr", "--scores"),
    (["transform", "{r}/m.zarr", "{r}/s.zarr", "--out", "{s}", "--overwrite"], "s.zarr", "SOURCE"),
    (["transform", "{r}/m.zarr", "{r}/s.zarr", "--out", "{s}", "--overwrite"], "m.zarr", "MODEL"),
    (["update", "{s}", "{r}/m.zarr"], "m.zarr", "SOURCE"),
    (["report", "{r}/m.zarr", "--out", "{s}", "--overwrite"], "m.zarr", "MODEL"),
])
def test_an_output_that_is_an_input_is_refused_before_anything_is_touched(job, case, capsys):
    argv, protected, label = case
    before = {name: _digest(job / name) for name in ("s.zarr", "m.zarr", "r.zarr")}
    for spelling in _spellings(job, protected) + ([str(job / "link.zarr")] if protected == "s.zarr" else []):
        code = cli.main([a.format(r=job, s=spelling) for a in argv])
        err = capsys.readouterr().err
        assert code == 2, err
        assert "is the same store as" in err and label in err and "path of its own" in err, err
    assert {name: _digest(job / name) for name in before} == before
    assert not list(job.glob(".*claim*")) and not (job / "new.zarr").exists()


def test_an_output_that_contains_or_lies_inside_an_input_is_refused(job, capsys):
    inside = cli.main(["fit", str(job / "s.zarr"), "-k", "2", "--out", str(job / "s.zarr" / "model.zarr")])
    err = capsys.readouterr().err
    assert inside == 2 and "lies inside the input SOURCE" in err, err
    contains = cli.main(["transform", str(job / "m.zarr"), str(job / "s.zarr"), "--out", str(job), "--overwrite"])
    err = capsys.readouterr().err
    assert contains == 2 and "contains the input MODEL" in err, err


def test_overlaps_of_object_store_urls_are_resolved():
    from daskpca.store.paths import overlaps

    assert overlaps({"SOURCE": "s3://b/x/s.zarr"}, {"--out": "s3://b/x/../x/s.zarr/"})
    assert overlaps({"SOURCE": "s3://b/x/s.zarr"}, {"--out": "s3://b/x"})
    assert not overlaps({"SOURCE": "s3://b/x/s.zarr"}, {"--out": "s3://b/x/s.zarr2"})
    assert not overlaps({"SOURCE": "s3://b/x/s.zarr"}, {"--out": "gs://b/x/s.zarr"})


# ----------------------------------------------------------------------------- 2. --overwrite: daskpca's own only


@pytest.mark.parametrize("command", ["fit", "report", "transform"])
def test_overwrite_refuses_a_folder_daskpca_did_not_write(job, command, capsys):
    users = job / "mine"
    users.mkdir()
    (users / "thesis.tex").write_text("years of work")
    zarr.create_array(str(job / "other.zarr"), shape=(3,), dtype="f8")[...] = 1.0
    for target in (users, job / "other.zarr"):
        before = _digest(target)
        argv = {"fit": ["fit", str(job / "s.zarr"), "-k", "2", "--out", str(target), "--overwrite"],
                "report": ["report", str(job / "m.zarr"), "--out", str(target), "--overwrite"],
                "transform": ["transform", str(job / "m.zarr"), str(job / "s.zarr"), "--out", str(target),
                              "--overwrite"]}[command]
        code = cli.main(argv)
        err = capsys.readouterr().err
        assert code == 2 and "not a store daskpca wrote" in err and "move or delete it yourself" in err, err
        assert _digest(target) == before
    assert not list(job.glob(".mine*")) and not list(job.glob(".other.zarr*"))


def test_overwrite_replaces_what_daskpca_wrote(job, capsys):
    pytest.importorskip("matplotlib")
    assert cli.main(["report", str(job / "m.zarr"), "--out", str(job / "rep")]) == 0
    assert cli.main(["report", str(job / "m.zarr"), "--out", str(job / "rep"), "--overwrite"]) == 0
    assert cli.main(["fit", str(job / "s.zarr"), "-k", "3", "--out", str(job / "m.zarr"), "--overwrite"]) == 0
    assert len(io.history(job / "m.zarr")) == 2  # the replaced model is kept
    assert cli.main(["transform", str(job / "m.zarr"), str(job / "s.zarr"), "--out", str(job / "r.zarr"),
                     "--overwrite"]) == 0
    capsys.readouterr()


def test_api_overwrite_refuses_a_foreign_folder(job):
    (job / "sub" / "notes.txt").write_text("keep")
    with pytest.raises(OutputExistsError, match="not a store daskpca wrote"):
        PCA(2).fit(X).save(job / "sub", overwrite=True)
    with pytest.raises(OutputExistsError, match="not a store daskpca wrote"):
        io.write_array(np.ones(3), job / "sub", overwrite=True)
    assert (job / "sub" / "notes.txt").read_text() == "keep"


# ----------------------------------------------------------------------------- 3. one version per reader


def _series(value: float, n: int = 40):
    import xarray as xr

    return xr.DataArray(np.full((n, 3), value), dims=("time", "x"), name="v").chunk({"time": 10})


def test_a_lazy_reader_of_a_replaced_model_store_reads_the_version_it_opened(tmp_path):
    """A model store keeps the version it replaces (history): the pinned reader finishes on it."""
    first, second = PCA(2).fit(X), PCA(2).fit(X[::-1] * 3.0)
    first.save(tmp_path / "m.zarr")
    opened = io.open_xarray(tmp_path / "m.zarr")
    second.save(tmp_path / "m.zarr", overwrite=True)
    np.testing.assert_array_equal(opened["model_mean"].values, first.mean_)
    np.testing.assert_array_equal(io.open_xarray(tmp_path / "m.zarr")["model_mean"].values, second.mean_)


def test_a_lazy_reader_of_a_replaced_data_store_fails_instead_of_mixing(tmp_path):
    from daskpca.exceptions import StoreReplacedError

    path = tmp_path / "scores.zarr"
    io.write_xarray(_series(1.0), path)
    opened = io.open_xarray(path)["v"]
    assert float(opened[:10].sum()) == 30.0  # the first chunk, read before the replacement
    io.write_xarray(_series(2.0), path, overwrite=True)  # the version opened is deleted
    with pytest.raises(StoreReplacedError, match="replaced or deleted while it was read"):
        opened[10:].values


def test_a_lazy_reader_sent_to_another_process_checks_the_version_on_every_read(tmp_path):
    """A descriptor does not travel: an unpickled reader reads the path and fails once it holds
    another version (a worker would otherwise read the new version's chunks)."""
    import pickle

    from daskpca.exceptions import StoreReplacedError

    path = tmp_path / "scores.zarr"
    io.write_xarray(_series(1.0), path)
    opened = io.open_xarray(path)["v"].data
    travelled = pickle.loads(pickle.dumps(opened))
    assert float(travelled[:10].sum().compute()) == 30.0
    io.write_xarray(_series(2.0), path, overwrite=True)
    with pytest.raises(StoreReplacedError, match="replaced or deleted while it was read"):
        travelled[10:].compute()


def test_a_lazy_reader_during_back_to_back_publishes_never_mixes(tmp_path):
    """Another thread replaces the store while chunks are read one by one: every completed read
    is of one version (all chunks equal), else the error."""
    import threading
    import time

    from daskpca.exceptions import StoreReplacedError

    path = tmp_path / "m.zarr"
    base = PCA(2).fit(X)
    base.save(path)
    # Version s holds the fit of X·s: mean s·m, variances s²·λ — so λ₁/m₁² is one number in
    # every version, and another in a mix of two.
    invariant = base.explained_variance_[0] / base.mean_[0] ** 2
    stop = threading.Event()

    def publish():
        scale = 1.0
        while not stop.is_set():
            scale += 1.0
            PCA(2).fit(X * scale).save(path, overwrite=True)

    writer = threading.Thread(target=publish)
    writer.start()
    read = 0
    try:
        for _ in range(6):
            opened = io.open_xarray(path)
            try:
                mean = opened["model_mean"].values
                time.sleep(0.3)  # a publish or two lands here (xr.open_zarr mixed in 5 of 6 rounds)
                variance = opened["model_explained_variance"].values
            except StoreReplacedError:
                continue
            read += 1
            assert variance[0] / mean[0] ** 2 == pytest.approx(invariant, rel=1e-9)
    finally:
        stop.set()
        writer.join()
    assert read > 0


def test_an_object_store_that_stops_answering_fails_in_bounded_time_naming_the_url(s3, monkeypatch, capsys):
    # The moto server answers while the model and the input are written, then stops answering
    # (accepts requests, never replies): every road in fails within about TIMEOUT × ATTEMPTS
    # per request, naming the URL and $DASKPCA_OBJECT_TIMEOUT, instead of waiting for good.
    import time

    from daskpca.store import objects

    model, data = s3_url("m.zarr"), s3_url("s.zarr")
    PCA(2).fit(X).save(model)
    io.write_xarray(xr.DataArray(X, dims=("time", "space"), name="x").chunk(time=60), data)
    assert PCA.load(model).n_components_ == 2
    monkeypatch.setattr(objects, "TIMEOUT", 0.5)  # new storage options: new s3fs instances
    with s3.silenced():
        for call in (lambda: PCA.load(model), lambda: io.open_xarray(data)):
            started = time.monotonic()
            with pytest.raises(TimeoutError, match=r"did not answer for 's3://.*\$DASKPCA_OBJECT_TIMEOUT"):
                call()
            assert time.monotonic() - started < 3 * objects.ATTEMPTS * objects.TIMEOUT + 2
        started = time.monotonic()
        code = cli.main(["fit", data, "-k", "2", "--out", s3_url("out.zarr")])
        err = capsys.readouterr().err
        assert code == 1 and "did not answer for 's3://" in err and "$DASKPCA_OBJECT_TIMEOUT" in err, err
        assert time.monotonic() - started < 3 * objects.ATTEMPTS * objects.TIMEOUT + 2
