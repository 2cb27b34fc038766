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
import zarr

from daskpca import PCA, cli, io
from daskpca.exceptions import OutputExistsError

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
