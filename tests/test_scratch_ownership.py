"""Scratch folders own only what they made, and temporary copies cannot lie (issue 38, part A).

- Folders named ``daskpca-*`` that daskpca did not make — a git clone, a results folder, one with
  a garbage, foreign or old-format ``owner.json``, a copied record, a symlink — survive every fit
  that makes a disk cache or a Gram re-layout, library and CLI, in ``$DASKPCA_SCRATCH`` and in the
  system's temporary directory, however old; a valid record of a provably dead job is removed.
- The scratch root is one of the job's declared paths: inside (or through a symlink into) an input
  or output, or an input inside a daskpca scratch folder, is refused before anything is read.
- A chunk file of the disk cache or of the strip copy removed, truncated or changed between the
  first pass and a later one is a :class:`~daskpca.exceptions.ScratchDamagedError` naming it,
  never the fill value.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr

import daskpca
from daskpca import PCA, cli
from daskpca.exceptions import ScratchDamagedError, ScratchError
from daskpca.store import claims, scratch

from _helpers import sin_theta, write_zarr
from test_solver_krylov import hard_spectrum

ROOT = Path(__file__).resolve().parents[1]
DAY = 86400


def _tree(root: Path) -> dict:
    """Every path under ``root`` (symlinks not followed) with its content's hash or kind."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                out[rel] = "-> " + os.readlink(path)
            elif path.is_file():
                out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                out[rel] = "dir"
    return out


def _age(path: Path, days: float) -> None:
    """Set the mtime of ``path`` and everything under it to ``days`` ago."""
    when = time.time() - days * DAY
    for dirpath, dirnames, filenames in os.walk(path):
        for name in filenames:
            os.utime(Path(dirpath) / name, (when, when))
    os.utime(path, (when, when))


def _dead_identity() -> dict:
    """A process that has exited: its pid and identity (read while it is a zombie, before it is reaped)."""
    child = subprocess.Popen(["sleep", "0"])
    identity = claims._process_identity(child.pid)
    child.wait()
    assert identity and "pid_start" in identity
    return {"pid": child.pid, **identity}


def _record(name: str, **changes) -> str:
    return json.dumps({**scratch.owner_record(name), **changes})


def _plant(place: Path, user: Path, dead: dict) -> set[str]:
    """Folders named like daskpca's under ``place`` that are not a dead job's (they must survive),
    and one that is (``daskpca-dead``); returns the names that must survive."""
    place.mkdir(parents=True, exist_ok=True)
    user = user / place.name
    user.mkdir()
    (place / "daskpca-src" / ".git").mkdir(parents=True)  # a git clone, two days old
    (place / "daskpca-src" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (place / "daskpca-src" / "setup.py").write_text("print('mine')\n")
    (place / "daskpca-results-2025").mkdir()  # new, no record
    (place / "daskpca-results-2025" / "table.csv").write_text("a,b\n1,2\n")
    (place / "daskpca-thesis-figures").mkdir()
    (place / "daskpca-thesis-figures" / "fig1.png").write_bytes(b"\x89PNG")
    (place / "daskpca-garbage").mkdir()
    (place / "daskpca-garbage" / "owner.json").write_text("{not json")
    (place / "daskpca-foreign").mkdir()  # someone else's owner.json, naming a dead pid
    (place / "daskpca-foreign" / "owner.json").write_text(json.dumps({"owner": "alice", "pid": dead["pid"]}))
    (place / "daskpca-legacy").mkdir()  # what an older daskpca wrote (no marker): not provably ours
    (place / "daskpca-legacy" / "owner.json").write_text(json.dumps(
        {"host": scratch.socket.gethostname(), "created": time.time() - 3 * DAY, **dead}))
    (place / "daskpca-copied").mkdir()  # a valid dead record copied from another folder
    (place / "daskpca-copied" / "owner.json").write_text(_record("daskpca-elsewhere", **dead))
    (place / "daskpca-recordlink").mkdir()  # owner.json a symlink to a valid dead record
    (user / "record.json").write_text(_record("daskpca-recordlink", **dead))
    os.symlink(user / "record.json", place / "daskpca-recordlink" / "owner.json")
    (place / "daskpca-live").mkdir()  # a live process's (this one's) valid record
    (place / "daskpca-live" / "owner.json").write_text(_record("daskpca-live"))
    (user / "target").mkdir()  # a symlink named daskpca-x to a user folder holding a dead record of that name
    (user / "target" / "owner.json").write_text(_record("daskpca-link", **dead))
    (user / "target" / "data.txt").write_text("precious")
    os.symlink(user / "target", place / "daskpca-link")
    (place / "daskpca-file").write_text("a file, not a folder")
    survivors = {p.name for p in place.iterdir()}
    (place / "daskpca-dead").mkdir()  # a killed job's: removed by the next job that makes a copy
    (place / "daskpca-dead" / "owner.json").write_text(_record("daskpca-dead", **dead))
    (place / "daskpca-dead" / "input-0.zarr").mkdir()
    for name in {p.name for p in place.iterdir()} - {"daskpca-live"}:
        if not (place / name).is_symlink():
            _age(place / name, 3)
    return survivors


@pytest.fixture
def places(tmp_path, monkeypatch):
    """``$DASKPCA_SCRATCH`` and the system's temporary directory (``$TMPDIR``), both planted."""
    env, system, user = tmp_path / "scratch", tmp_path / "systmp", tmp_path / "user"
    user.mkdir()
    dead = _dead_identity()
    survivors = {"env": (env, _plant(env, user, dead)), "system": (system, _plant(system, user, dead))}
    monkeypatch.setenv("TMPDIR", str(system))
    monkeypatch.setattr(tempfile, "tempdir", None)  # asked again: $TMPDIR
    return survivors, user


def _row_stored(path: Path, monkeypatch):
    """A field stored by rows only that the Gram road re-lays out into ~5 column strips."""
    rng = np.random.default_rng(1)
    X = (rng.standard_normal((40, 4)) * [9, 5, 3, 2]) @ np.linalg.qr(rng.standard_normal((3000, 4)))[0].T
    X = (X + 0.1 * rng.standard_normal((40, 3000)) + 50).astype(np.float32)
    zarr.create_array(store=str(path), shape=X.shape, chunks=(1, 3000), dtype=X.dtype)[...] = X
    monkeypatch.setattr("daskpca.passes._geometry.STRIP_BYTES", 40 * 4 * 700)
    monkeypatch.setattr("daskpca.passes._geometry.RELAYOUT_BYTES", 40 * 4 * 2000)
    return X


def _reference(X, k):
    Xc = X.astype(np.float64) - X.astype(np.float64).mean(0)
    return np.linalg.svd(Xc, full_matrices=False)[2][:k]


@pytest.mark.parametrize("where", ["env", "system"], ids=["$DASKPCA_SCRATCH", "system temp dir"])
@pytest.mark.parametrize("road", ["library cache", "library gram", "cli cache", "cli gram"])
def test_folders_daskpca_did_not_make_survive_every_fit_and_a_dead_jobs_is_removed(tmp_path, places, monkeypatch,
                                                                                  where, road):
    survivors, user = places
    if where == "env":
        monkeypatch.setenv("DASKPCA_SCRATCH", str(survivors["env"][0]))
    else:
        monkeypatch.delenv("DASKPCA_SCRATCH", raising=False)
    before = {name: _tree(place) for name, (place, _) in survivors.items()}
    user_before = _tree(user)
    data = tmp_path / "data"
    data.mkdir()
    if "gram" in road:
        X = _row_stored(data / "x.zarr", monkeypatch)
    else:
        X = hard_spectrum(200, 30, 3, 3.0, dtype=np.float32)
        write_zarr(data / "x.zarr", X, (20, 30))
    if road.startswith("library"):
        with dask.config.set(scheduler="threads"):
            if "gram" in road:
                pca = PCA(3, solver="gram").fit(str(data / "x.zarr"))
                assert "strips of 700 columns" in pca.solver_info_["relayout"]
            else:
                pca = PCA(3, solver="krylov", max_passes=4, random_state=0, cache="disk").fit(str(data / "x.zarr"))
                assert pca.cache_["kind"] == "disk"
    else:
        argv = ["fit", str(data / "x.zarr"), "-k", "3", "--out", str(data / "m.zarr")]
        argv += ["--solver", "gram"] if "gram" in road else ["--solver", "krylov", "--max-passes", "4", "--cache", "disk"]
        assert cli.main(argv) == 0
        pca = daskpca.load(data / "m.zarr")
    assert sin_theta(pca.components_, _reference(X, 3)) < 1e-5
    for name, (place, names) in survivors.items():
        left = {p.name for p in place.iterdir()}
        if name == where:  # the sweep ran here: the dead job's folder went, nothing else did
            assert left == names, left ^ names
            assert _tree(place) == {k: v for k, v in before[name].items() if not k.startswith("daskpca-dead")}
        else:
            assert _tree(place) == before[name]
    assert _tree(user) == user_before


def test_a_removal_interrupted_by_a_kill_is_finished_by_the_next_sweep(tmp_path):
    dead = _dead_identity()
    tomb = tmp_path / ".daskpca-cache-abc.removing"  # renamed aside, then the remover was killed
    (tomb / "input-0.zarr").mkdir(parents=True)
    (tomb / "owner.json").write_text(_record("daskpca-cache-abc", **dead))
    lookalike = tmp_path / ".daskpca-notes.removing"  # no record: not ours
    lookalike.mkdir()
    assert scratch.remove_dead(tmp_path) == [str(tomb)]
    assert not tomb.exists() and lookalike.exists()


def test_a_new_folder_has_its_record_from_the_moment_it_has_its_name(tmp_path, monkeypatch):
    monkeypatch.setenv("DASKPCA_SCRATCH", str(tmp_path))
    seen = []
    real_rename = os.rename

    def watching(src, dst, *args, **kwargs):
        if Path(dst).name.startswith(scratch.PREFIX):  # the moment a daskpca-* name appears
            seen.append(json.loads((Path(src) / scratch.OWNER_FILE).read_text()))
        return real_rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(scratch.os, "rename", watching)
    with scratch.scratch_folder("cache") as folder:
        assert folder.name.startswith("daskpca-cache-")
        record = json.loads((folder / scratch.OWNER_FILE).read_text())
    assert seen and seen[0] == record
    assert record[scratch.SCHEMA_KEY] == scratch.SCHEMA and record["folder"] == folder.name
    assert record["pid"] == os.getpid() and "pid_start" in record
    assert list(tmp_path.iterdir()) == []  # removed, nothing left aside


# ----------------------------------------------------------------------------- the scratch root as a declared path


def test_reproducer_2_an_input_named_like_scratch_in_the_scratch_root_is_read_not_removed(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    X = hard_spectrum(200, 30, 6, 3.0, dtype=np.float32)
    write_zarr(d / "daskpca-field.zarr", X, (20, 30))
    _age(d / "daskpca-field.zarr", 2)
    previous = PCA(5, solver="tsqr").fit(np.random.default_rng(3).standard_normal((40, 30)))
    previous.save(tmp_path / "m.zarr")  # the previous good model, which the fit replaces
    before = _tree(d / "daskpca-field.zarr")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DASKPCA_SCRATCH": "."}
    done = subprocess.run([sys.executable, "-m", "daskpca.cli", "fit", "daskpca-field.zarr", "-k", "5", "--solver",
                           "krylov", "--cache", "disk", "--out", "../m.zarr", "--overwrite"],
                          cwd=d, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert _tree(d / "daskpca-field.zarr") == before  # the input, untouched
    assert sorted(p.name for p in d.iterdir()) == ["daskpca-field.zarr"]  # the cache folder gone
    model = daskpca.load(tmp_path / "m.zarr")
    assert sin_theta(model.components_, _reference(X, 5)) < 1e-6


def _fit_argv(source: Path, out: Path) -> list[str]:
    return ["fit", str(source), "-k", "3", "--solver", "krylov", "--max-passes", "3", "--cache", "disk",
            "--out", str(out), "--overwrite"]


@pytest.mark.parametrize("case", ["inside the input", "a symlink into the input", "the input itself",
                                  "inside the output", "input inside a scratch folder"])
def test_a_scratch_root_inside_an_input_or_output_is_refused_before_anything(tmp_path, monkeypatch, capsys, case):
    job = tmp_path / "job"
    job.mkdir()
    source = job / "x.zarr"
    write_zarr(source, hard_spectrum(100, 12, 3, 3.0, dtype=np.float32), (20, 12))
    out = job / "m.zarr"
    PCA(3, solver="tsqr").fit(np.random.default_rng(3).standard_normal((40, 12))).save(out)  # an output to replace
    if case == "inside the input":
        root = source / "c"
    elif case == "a symlink into the input":
        os.symlink(source, job / "scratch")
        root = job / "scratch"
    elif case == "the input itself":
        root = source
    elif case == "inside the output":
        root = out / "components"
    else:  # the input lies in a (live) daskpca scratch folder: removed when that job ends
        folder = job / "daskpca-cache-live"
        folder.mkdir()
        (folder / "owner.json").write_text(_record("daskpca-cache-live"))
        source.rename(folder / "x.zarr")
        source, root = folder / "x.zarr", tmp_path
    monkeypatch.setenv("DASKPCA_SCRATCH", str(root))
    before = _tree(job)
    assert cli.main(_fit_argv(source, out)) == 2
    err = capsys.readouterr().err
    assert "$DASKPCA_SCRATCH" in err or "scratch folder" in err, err
    assert ("SOURCE" in err or "--out" in err) and "outside" in err, err
    assert _tree(job) == before  # nothing read, written or removed
    # The library refuses too, knowing the input's path from the zarr array it reads (a path,
    # dask's from_zarr: an fsspec store, a zarr array).
    if case != "inside the output":
        for given in (str(source), da.from_zarr(str(source)), zarr.open_array(str(source), mode="r")):
            with pytest.raises(ScratchError, match=r"\$DASKPCA_SCRATCH|scratch folder"):
                PCA(3, solver="krylov", max_passes=3, cache="disk").fit(given)
        assert _tree(job) == before


def test_a_labeled_field_read_lazily_refuses_a_scratch_root_inside_its_store(tmp_path, monkeypatch):
    field = xr.DataArray(hard_spectrum(60, 12, 3, 3.0, dtype=np.float32).reshape(60, 3, 4), dims=("time", "lat", "lon"),
                         name="t")
    field.to_dataset().to_zarr(tmp_path / "f.zarr", mode="w", zarr_format=3, consolidated=False)
    monkeypatch.setenv("DASKPCA_SCRATCH", str(tmp_path / "f.zarr" / "t" / "c"))
    before = _tree(tmp_path)
    with pytest.raises(ScratchError, match=r"\$DASKPCA_SCRATCH.*inside the input X"):
        PCA(3, solver="krylov", max_passes=3, cache="disk").fit(xr.open_zarr(tmp_path / "f.zarr", consolidated=False).t,
                                                                sample_dims="time")
    assert _tree(tmp_path) == before


def test_the_gram_relayout_refuses_a_scratch_root_inside_its_input(tmp_path, monkeypatch):
    _row_stored(tmp_path / "x.zarr", monkeypatch)
    monkeypatch.setenv("DASKPCA_SCRATCH", str(tmp_path / "x.zarr" / "c"))
    before = _tree(tmp_path)
    with dask.config.set(scheduler="threads"), pytest.raises(ScratchError, match=r"\$DASKPCA_SCRATCH.*inside the input"):
        PCA(3, solver="gram").fit(str(tmp_path / "x.zarr"))
    assert _tree(tmp_path) == before


def test_a_scratch_root_beside_the_input_is_the_common_case_and_works(tmp_path, monkeypatch):
    X = hard_spectrum(100, 12, 3, 3.0, dtype=np.float32)
    write_zarr(tmp_path / "x.zarr", X, (20, 12))
    monkeypatch.setenv("DASKPCA_SCRATCH", str(tmp_path))  # like DASKPCA_SCRATCH=/tmp with /tmp/x.zarr
    assert cli.main(_fit_argv(tmp_path / "x.zarr", tmp_path / "m.zarr")) == 0
    assert sin_theta(daskpca.load(tmp_path / "m.zarr").components_, _reference(X, 3)) < 1e-6
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.zarr", "x.zarr"]


# ----------------------------------------------------------------------------- copies that cannot lie


def _damage(file: Path, how: str) -> None:
    if how == "removed":
        file.unlink()
    elif how == "truncated":
        os.truncate(file, file.stat().st_size // 2)
    elif how == "zeroed":  # same size, other bytes (a block of the fill value)
        file.write_bytes(bytes(file.stat().st_size))
    else:  # replaced by another file of the same size
        data = bytearray(file.read_bytes())
        data[len(data) // 2] ^= 0xFF
        file.unlink()
        file.write_bytes(bytes(data))


def _damaging_scheduler(scratch_dir: Path, pattern: str, how: str, hit: list):
    """A scheduler that damages one chunk file of the copy before the first graph run after the
    copy exists (between the pass that wrote it and the first that reads it)."""

    def schedule(dsk, keys, **kwargs):
        files = sorted(p for p in scratch_dir.glob(pattern) if p.is_file())
        if files and not hit:
            hit.append(files[len(files) // 2])
            _damage(hit[0], how)
        return dask.threaded.get(dsk, keys, **kwargs)

    return schedule


HOW = ["removed", "truncated", "zeroed", "replaced"]


@pytest.mark.parametrize("how", HOW)
def test_reproducer_6_a_damaged_disk_cache_chunk_is_an_error_naming_it(tmp_path, monkeypatch, how):
    scratch_dir = tmp_path / "scratch"
    scratch_dir.mkdir()
    monkeypatch.setenv("DASKPCA_SCRATCH", str(scratch_dir))
    array, _ = write_zarr(tmp_path / "x.zarr", hard_spectrum(200, 30, 3, 3.0, dtype=np.float32), (50, 30))
    hit = []
    schedule = _damaging_scheduler(scratch_dir, "daskpca-cache-*/input-0.zarr/c/**/*", how, hit)
    with dask.config.set(scheduler=schedule, **{"daskpca.regroup": False}), \
            pytest.raises(ScratchDamagedError) as caught:
        PCA(3, solver="krylov", max_passes=4, random_state=0, cache="disk").fit(array)
    assert hit, "the copy was never written"
    message = str(caught.value)
    assert str(hit[0]) in message and "expected" in message and "$DASKPCA_SCRATCH" in message, message
    assert ("missing" in message) == (how == "removed"), message
    assert list(scratch_dir.iterdir()) == []  # the damaged copy is still removed


@pytest.mark.parametrize("how", HOW)
def test_a_damaged_tile_of_the_gram_strip_copy_is_an_error_naming_it(tmp_path, monkeypatch, how):
    scratch_dir = tmp_path / "scratch"
    scratch_dir.mkdir()
    monkeypatch.setenv("DASKPCA_SCRATCH", str(scratch_dir))
    _row_stored(tmp_path / "x.zarr", monkeypatch)
    hit = []
    schedule = _damaging_scheduler(scratch_dir, "daskpca-strips-*/strips.zarr/c/**/*", how, hit)
    with dask.config.set(scheduler=schedule), pytest.raises(ScratchDamagedError) as caught:
        PCA(3, solver="gram").fit(str(tmp_path / "x.zarr"))
    assert hit, "the strip copy was never written"
    assert str(hit[0]) in str(caught.value) and "expected" in str(caught.value)
    assert list(scratch_dir.iterdir()) == []


def test_an_undamaged_copy_gives_the_uncached_fit_to_the_bit(tmp_path, monkeypatch):
    monkeypatch.setenv("DASKPCA_SCRATCH", str(tmp_path))
    X = _row_stored(tmp_path / "x.zarr", monkeypatch)
    X[10:20] = 0.0  # whole tiles of zeros: written and checked like any other
    zarr.open_array(str(tmp_path / "x.zarr"), mode="r+")[...] = X
    with dask.config.set(scheduler="threads"):
        copied = PCA(3, solver="gram").fit(str(tmp_path / "x.zarr"))
        direct = PCA(3, solver="gram").fit(X)
    assert "strips of 700 columns" in copied.solver_info_["relayout"]
    np.testing.assert_allclose(copied.explained_variance_, direct.explained_variance_, rtol=1e-9)
    assert sin_theta(copied.components_, direct.components_) < 1e-9


def test_a_block_larger_than_the_fingerprints_stride_is_checked_across_its_length(tmp_path):
    from daskpca.passes import _copies

    block = np.random.default_rng(0).standard_normal((64, 4096)).astype(np.float32)  # 1 MiB: 16 strides
    path = tmp_path / "chunk"
    written = _copies._write_block(block, str(path), np.float32, block.shape)
    np.testing.assert_array_equal(_copies._read_block(str(path), np.float32, block.shape, block.shape, written), block)
    pristine = path.read_bytes()
    stride = _copies.FINGERPRINT_STRIDE
    for start in range(0, len(pristine), stride):  # any aligned stride zeroed (a hole punched, a page cleared)
        path.write_bytes(pristine[:start] + bytes(stride) + pristine[start + stride:])
        with pytest.raises(ScratchDamagedError, match="other bytes"):
            _copies._read_block(str(path), np.float32, block.shape, block.shape, written)
    path.write_bytes(pristine[:-4])
    with pytest.raises(ScratchDamagedError, match=f"holds {len(pristine) - 4} bytes"):
        _copies._read_block(str(path), np.float32, block.shape, block.shape, written)


def test_a_jobs_own_folder_is_removed_even_when_something_took_its_record(tmp_path, monkeypatch):
    monkeypatch.setenv("DASKPCA_SCRATCH", str(tmp_path))
    with scratch.scratch_folder("cache") as folder:
        (folder / "input-0.zarr").mkdir()
        (folder / scratch.OWNER_FILE).unlink()  # a cleaner took it: still the very folder this job made
    assert list(tmp_path.iterdir()) == []
    with scratch.scratch_folder("cache") as folder:  # swapped for someone else's folder of that name
        os.rename(folder, tmp_path / "mine-now")
        folder.mkdir()
        (folder / "theirs.txt").write_text("keep")
    assert (folder / "theirs.txt").read_text() == "keep" and (tmp_path / "mine-now").exists()


def test_a_folder_still_being_made_is_removed_only_with_a_dead_owners_record(tmp_path):
    dead = _dead_identity()
    recorded = tmp_path / ".daskpca-making-abc"  # killed after writing the record, before the rename
    recorded.mkdir()
    (recorded / "owner.json").write_text(_record("daskpca-cache-0123", **dead))
    empty = tmp_path / ".daskpca-making-def"  # killed before writing it: nobody can tell whose
    empty.mkdir()
    assert scratch.remove_dead(tmp_path) == [str(recorded)]
    assert not recorded.exists() and empty.exists()
