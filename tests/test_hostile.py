"""Hostile input and misuse through the CLI, job files, the API and stored models.

Every case asserts the exit code (or exception type), that the one-line message names the
problem, and that nothing was written and nothing existing was changed. CLI cases run in-process
(``cli.main`` returns the exit code); small inputs take the threaded scheduler, so no cluster
starts.
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

import daskpca
from daskpca import PCA, cli, io
from daskpca.exceptions import (DataRangeError, IncompleteStoreError, OutputClaimedError, OutputExistsError)

X = np.random.default_rng(11).standard_normal((200, 6)) @ np.diag([5.0, 3.0, 2.0, 1.0, 0.5, 0.1]) + 3.0


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """Sources, a covariance model, a tsqr model and a results store, shared read-only."""
    root = tmp_path_factory.mktemp("hostile")
    zarr.create_array(str(root / "matrix.zarr"), shape=X.shape, chunks=(50, 6), dtype="f8")[...] = X
    zarr.create_array(str(root / "wide.zarr"), shape=(20, 9), chunks=(10, 9), dtype="f8")[...] = 1.0
    # metadata only (no chunk written): 800 MB row blocks, for the planner's memory check
    zarr.create_array(str(root / "huge.zarr"), shape=(200_000, 5_000), chunks=(20_000, 5_000), dtype="f8")
    bad = X.copy()
    bad[17, 4] = np.nan
    zarr.create_array(str(root / "nan.zarr"), shape=X.shape, chunks=(50, 6), dtype="f8")[...] = bad
    ds = xr.Dataset({"sst": (("time", "lat", "lon"), X.reshape(200, 2, 3)),
                     "name": (("time",), np.array(["a"] * 200, dtype="S1"))},
                    coords={"time": np.arange(200), "lat": [-10.0, 10.0], "lon": [0.0, 1.0, 2.0]})
    ds.chunk({"time": 50}).to_zarr(root / "field.zarr", zarr_format=3, consolidated=False)
    PCA(3, solver="covariance").fit(X).save(root / "model.zarr")
    PCA(2, solver="tsqr").fit(X).save(root / "tsqr.zarr")
    io.write_array(np.ones((4, 2)), root / "results.zarr")
    (root / "file.txt").write_text("not a folder")
    return root


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        h.update(str(path.relative_to(folder)).encode())
        if path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()


FIT = ["fit", "{root}/matrix.zarr", "--n-components", "2", "--out", "{tmp}/m.zarr"]

CLI_CASES = {
    # cluster options: validated before anything runs (they used to hang or flood)
    "workers 0": (FIT + ["--workers", "0"], 2, r"--workers: expected an integer ≥ 1, got '0'"),
    "workers negative": (FIT + ["--workers", "-3"], 2, r"--workers: expected an integer ≥ 1, got '-3'"),
    "threads 0": (FIT + ["--threads", "0"], 2, r"--threads: expected an integer ≥ 1"),
    "memory limit tiny": (FIT + ["--memory-limit", "1MiB"], 2, r"'1MiB' is too small for a Dask worker.*give e.g. 1GiB"),
    "memory limit words": (FIT + ["--memory-limit", "lots"], 2, r"expected 'auto' or a size such as 4GiB"),
    "memory limit below the planned task": (["fit", "{root}/huge.zarr", "--n-components", "2", "--out", "{tmp}/m.zarr",
                                             "--workers", "1", "--memory-limit", "1GiB"], 2,
                                            r"--memory-limit 1.00 GiB is too small for this job: solver '\w+' needs .* per task.*Give --memory-limit"),
    # the component request
    "n-components 0": (["fit", "{root}/matrix.zarr", "--n-components", "0", "--out", "{tmp}/m.zarr"], 2,
                       r"-k 0 is out of range"),
    "n-components negative": (["fit", "{root}/matrix.zarr", "--n-components", "-1", "--out", "{tmp}/m.zarr"], 2,
                              r"-k -1"),
    "n-components word": (["fit", "{root}/matrix.zarr", "--n-components", "two", "--out", "{tmp}/m.zarr"], 2,
                          r"--n-components 'two': expected an int"),
    "n-components 1.5": (["fit", "{root}/matrix.zarr", "--n-components", "1.5", "--out", "{tmp}/m.zarr"], 2,
                         r"-k 1\.5"),
    "n-components too many": (["fit", "{root}/matrix.zarr", "--n-components", "7", "--out", "{tmp}/m.zarr"], 2,
                              r"-k 7 is out of range"),
    "no --out": (["fit", "{root}/matrix.zarr", "--n-components", "2"], 2, r"needs --out"),
    "no --n-components": (["fit", "{root}/matrix.zarr", "--out", "{tmp}/m.zarr"], 2, r"needs --n-components"),
    "no SOURCE": (["fit", "--n-components", "2", "--out", "{tmp}/m.zarr"], 2, r"needs SOURCE"),
    "SOURCE swallowed by --sample-dims": (["fit", "--n-components", "2", "--out", "{tmp}/m.zarr", "--sample-dims",
                                           "time", "nowhere.zarr"], 2, r"--sample-dims took \['time', 'nowhere.zarr'\].*Put SOURCE first"),
    # sources
    "missing source": (["fit", "{root}/missing.zarr", "--n-components", "2", "--out", "{tmp}/m.zarr"], 2,
                       r"SOURCE '.*missing.zarr' does not exist"),
    "source is a text file": (["fit", "{root}/file.txt", "--n-components", "2", "--out", "{tmp}/m.zarr"], 2,
                              r"is not a zarr store"),
    "--var on a bare array": (FIT + ["--var", "sst"], 2, r"is a single zarr array; --var sst applies to datasets only"),
    "unknown --var": (["fit", "{root}/field.zarr", "--var", "nope", "--n-components", "2", "--out", "{tmp}/m.zarr"], 2,
                      r"--var nope is not in .*its variables are \['name', 'sst'\]"),
    "dataset without --var": (["fit", "{root}/field.zarr", "--n-components", "2", "--out", "{tmp}/m.zarr"], 2,
                              r"holds variables \['name', 'sst'\]; choose one with --var"),
    "non-numeric variable": (["fit", "{root}/field.zarr", "--var", "name", "--n-components", "2", "--out", "{tmp}/m.zarr"], 2,
                             r"has dtype \|S1; PCA needs numbers"),
    "unknown sample dim": (["fit", "{root}/field.zarr", "--var", "sst", "--sample-dims", "month", "--n-components", "2",
                            "--out", "{tmp}/m.zarr"], 2, r"--sample-dims \['month'\] not found"),
    "sample dims on a bare array": (FIT + ["--sample-dims", "time"], 2, r"--sample-dims applies to labeled"),
    "NaN in the data": (["fit", "{root}/nan.zarr", "--n-components", "2", "--out", "{tmp}/m.zarr"], 2,
                        r"non-finite value.*row 17, column 4"),
    # estimator options
    "unknown solver": (FIT + ["--solver", "fast"], 2, r"--solver fast: expected one of 'auto', 'covariance'"),
    "unknown weights": (FIT + ["--weights", "cos"], 2, r"--weights: invalid choice: 'cos'"),
    "coslat on a bare array": (FIT + ["--weights", "coslat"], 2, r"--weights coslat needs labeled input"),
    "max-iter 0": (FIT + ["--max-iter", "0"], 2, r"--max-iter: expected an integer ≥ 1"),
    "tol word": (FIT + ["--tol", "tight"], 2, r"--tol: invalid float value: 'tight'"),
    "random-state word": (FIT + ["--random-state", "x"], 2, r"--random-state: invalid int value: 'x'"),
    # outputs: checked and claimed before any compute
    "out exists": (["fit", "{root}/matrix.zarr", "--n-components", "2", "--out", "{root}/model.zarr"], 2,
                   r"model.zarr' already exists; pass --overwrite"),
    "scores exists": (FIT + ["--scores", "{root}/results.zarr"], 2, r"results.zarr' already exists"),
    "out and scores the same": (FIT + ["--scores", "{tmp}/m.zarr"], 2, r"is the same store as the output"),
    "out under a file": (["fit", "{root}/matrix.zarr", "--n-components", "2", "--out", "{root}/file.txt/m.zarr"], 2,
                         r"cannot write .*file.txt/m.zarr'.*is not a folder"),
    "scores under a file": (FIT + ["--scores", "{root}/file.txt/s.zarr"], 2, r"cannot write .*is not a folder"),
    # models
    "transform: no model": (["transform", "{tmp}/none.zarr", "{root}/matrix.zarr", "--out", "{tmp}/s.zarr"], 2, r"no store at"),
    "transform: data store as MODEL": (["transform", "{root}/matrix.zarr", "{root}/matrix.zarr", "--out", "{tmp}/s.zarr"], 2,
                                       r"is a zarr array that daskpca did not write as a model.*a data store\?"),
    "transform: results store as MODEL": (["transform", "{root}/results.zarr", "{root}/matrix.zarr", "--out", "{tmp}/s.zarr"],
                                          2, r"a results store: pass the MODEL written by `daskpca fit --out`"),
    "transform: wrong width": (["transform", "{root}/model.zarr", "{root}/wide.zarr", "--out", "{tmp}/s.zarr"], 2,
                               r"9 features.*6"),
    "transform: NaN in the data": (["transform", "{root}/model.zarr", "{root}/nan.zarr", "--out", "{tmp}/s.zarr"], 2,
                                   r"row 17"),
    "transform: unknown nan policy": (["transform", "{root}/model.zarr", "{root}/matrix.zarr", "--out", "{tmp}/s.zarr",
                                       "--nan", "ignore"], 2, r"--nan: invalid choice: 'ignore'"),
    "transform: no --out": (["transform", "{root}/model.zarr", "{root}/matrix.zarr"], 2, r"needs --out"),
    "update: model without statistics": (["update", "{root}/tsqr.zarr", "{root}/matrix.zarr"], 2,
                                         r"fitted with `daskpca fit --solver tsqr`, which keeps no sufficient statistics"),
    "update: wrong width": (["update", "{root}/model.zarr", "{root}/wide.zarr"], 2, r"9 features.*6"),
    "report: negative maps": (["report", "{root}/model.zarr", "--out", "{tmp}/r", "--n-maps", "-1"], 2,
                              r"--n-maps: expected an integer ≥ 1, got '-1'"),
    "report: existing out": (["report", "{root}/model.zarr", "--out", "{root}/results.zarr"], 2, r"already exists"),
    "inspect: nothing there": (["inspect", "{tmp}/none.zarr"], 2, r"SOURCE '.*none.zarr' does not exist"),
    "history: nothing there": (["history", "{tmp}/none.zarr"], 2, r"no store at"),
    "rollback: unknown version": (["rollback", "{root}/model.zarr", "--to", "v0"], 2, r"has no version 'v0'; its versions are"),
    "unknown command": (["fitt", "{root}/matrix.zarr"], 2, r"invalid choice: 'fitt'"),
    "unknown flag": (FIT + ["--fast"], 2, r"unrecognized arguments: --fast"),
}

CONFIG_CASES = {
    "switch given a string": ('whiten = "no"', 2, r"key 'whiten' \(--whiten\) is a switch: expected true or false, got 'no'"),
    "list given a string": ('sample-dims = "time"', 2, r"key 'sample-dims' .* expects a list of names, got 'time'; write e.g. sample-dims = \[\"time\"\]"),
    "empty list": ("sample_dims = []", 2, r"expects a list of names, got \[\]"),
    "workers 0": ("workers = 0", 2, r"key 'workers' \(--workers\): expected an integer ≥ 1, got '0'"),
    "workers fraction": ("workers = 2.5", 2, r"key 'workers' .*expected an integer, got '2.5'"),
    "workers word": ('workers = "two"', 2, r"key 'workers' .*expected an integer, got 'two'"),
    "n-components boolean": ("n-components = true", 2, r"key 'n-components' .*expects one value .*got True"),
    "weights not a choice": ('weights = "cos"', 2, r"key 'weights' .*'cos' is not one of \['coslat'\]"),
    "unknown key": ("colour = 3", 2, r"unknown key 'colour' for `daskpca fit`; its keys are"),
    "invalid TOML": ("n-components = ", 2, r"--config .*job.toml"),
    "memory limit tiny": ('memory-limit = "1MiB"', 2, r"key 'memory-limit' .*too small for a Dask worker"),
    "quiet as a word": ('quiet = "yes"', 2, r"key 'quiet' \(--quiet\) is a switch"),
    "scalar given a list": ('var = ["sst"]', 2, r"key 'var' \(--var\) expects one value"),
    "tol word": ('tol = "tight"', 2, r"key 'tol' \(--tol\): could not convert string to float: 'tight'"),
    "max-iter negative": ("max-iter = -4", 2, r"key 'max-iter' .*expected an integer ≥ 1, got '-4'"),
    "table as a value": ("[solver]\nname = 'x'", 2, r"key 'solver' .*expects one value"),
}


def _run(argv, tmp, root, capsys):
    fill = lambda s: s.format(root=root, tmp=tmp)  # noqa: E731
    code = cli.main([fill(a) for a in argv])
    return code, capsys.readouterr().err.strip()


def _assert_clean(err, code, expected_code, message, root, tmp, before):
    assert code == expected_code, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("daskpca: error: "), err
    assert "Traceback" not in err
    import re

    assert re.search(message, lines[0]), lines[0]
    assert sorted(p.name for p in tmp.iterdir() if p.name != "job.toml") == [], "something was written"
    assert _digest(root) == before, "an existing store was changed"


@pytest.fixture(scope="module")
def before(root):
    return _digest(root)


@pytest.mark.parametrize("case", CLI_CASES)
def test_cli(case, root, before, tmp_path, capsys):
    argv, expected, message = CLI_CASES[case]
    code, err = _run(argv, tmp_path, root, capsys)
    _assert_clean(err, code, expected, message, root, tmp_path, before)


@pytest.mark.parametrize("case", CONFIG_CASES)
def test_config(case, root, before, tmp_path, capsys):
    text, expected, message = CONFIG_CASES[case]
    (tmp_path / "job.toml").write_text(text + "\n")
    code, err = _run(FIT + ["--config", "{tmp}/job.toml"], tmp_path, root, capsys)
    _assert_clean(err, code, expected, message, root, tmp_path, before)


def test_config_missing_file(root, before, tmp_path, capsys):
    code, err = _run(FIT + ["--config", "{tmp}/none.toml"], tmp_path, root, capsys)
    _assert_clean(err, code, 2, r"--config .*none.toml.*No such file", root, tmp_path, before)


# ----------------------------------------------------------------------------- damaged input, runtime failures


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_a_damaged_input_chunk_is_the_inputs_fault_exit_2(damage, root, before, tmp_path, capsys):
    # A chunk zarr's codecs cannot decode is damaged input (exit 2, the fix named), not a daskpca
    # failure; nothing is published.
    source = tmp_path / "cut.zarr"
    zarr.create_array(str(source), shape=X.shape, chunks=(50, 6), dtype="f8")[...] = X
    chunk = source / "c" / "1" / "0"
    chunk.write_bytes(chunk.read_bytes()[:20] if damage == "truncated" else b"\x00not zstd" * 50)
    code, err = _run(["fit", str(source), "--n-components", "2", "--out", "{tmp}/m.zarr"], tmp_path, root, capsys)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "a chunk of the input could not be decoded" in err and "Re-copy or re-write the source" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.zarr"]


def test_internal_failure_is_not_a_usage_error_and_verbose_shows_the_traceback(root, before, tmp_path, capsys,
                                                                                monkeypatch, caplog):
    import daskpca._features as features

    def broken(*args, **kwargs):
        return {}["missing key"]  # a bug: a KeyError deep inside

    monkeypatch.setattr(features, "_checked", broken)
    code, err = _run(FIT, tmp_path, root, capsys)
    assert code == 1 and "KeyError" in err and "not a usage error" in err and len(err.splitlines()) == 1
    code, err = _run(FIT + ["--verbose"], tmp_path, root, capsys)
    assert code == 1 and "Traceback" in caplog.text
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    assert _digest(root) == before


def test_numpy_value_error_inside_is_exit_1(root, before, tmp_path, capsys, monkeypatch):
    import daskpca._features as features

    def broken(*args, **kwargs):
        return np.reshape(np.arange(3), (2, 2))  # a ValueError raised by numpy, not by daskpca

    monkeypatch.setattr(features, "_checked", broken)
    code, err = _run(FIT, tmp_path, root, capsys)
    assert code == 1 and "ValueError" in err


# ----------------------------------------------------------------------------- API


@pytest.mark.parametrize("scale", [1e200, 1e-200])
def test_data_beyond_float64_squares_is_refused(scale):
    with pytest.raises(DataRangeError, match="(overflowed|underflowed).*Rescale the data"):
        PCA(2).fit(X * scale)


def test_ppca_on_constant_data_is_a_clear_error():
    with pytest.raises(DataRangeError, match="'ppca' failed.*no variance \\(every feature constant\\)"):
        PCA(2, solver="ppca").fit(np.ones((30, 4)))


def test_api_store_misuse(root, before, tmp_path):
    model = daskpca.load(root / "model.zarr")
    with pytest.raises(OutputExistsError, match="already exists; pass --overwrite"):
        model.save(root / "model.zarr")
    with pytest.raises(OutputExistsError):
        io.write_array(np.ones((2, 2)), root / "results.zarr")
    with pytest.raises(IncompleteStoreError, match="did not write as a model"):
        daskpca.load(root / "matrix.zarr")
    with pytest.raises(ValueError, match="a results store"):
        daskpca.load(root / "results.zarr")
    with pytest.raises(FileNotFoundError, match="no store at"):
        daskpca.load(tmp_path / "none.zarr")
    with pytest.raises(IncompleteStoreError, match="no completion marker"):
        io.open_xarray(root / "field.zarr")
    with pytest.raises(ValueError, match="has no version 'nope'"):
        io.rollback(root / "model.zarr", "nope")
    live = {"token": "z", "pid": os.getppid(), "host": os.uname().nodename, "started": 0, "command": "daskpca update"}
    (tmp_path / ".m.zarr.daskpca-claim").write_text(json.dumps(live))
    with pytest.raises(OutputClaimedError, match="'daskpca update'.*Wait for it"):
        model.save(tmp_path / "m.zarr")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".m.zarr.daskpca-claim"]
    assert _digest(root) == before


def test_nan_in_transform_input_raises_or_propagates_when_asked(root, tmp_path, capsys):
    bad = X.copy()
    bad[3, 1] = np.nan
    model = daskpca.load(root / "model.zarr")
    with pytest.raises(ValueError, match="row 3"):
        model.transform(bad)
    code = cli.main(["transform", str(root / "model.zarr"), str(root / "nan.zarr"), "--out", str(tmp_path / "s.zarr"),
                     "--nan", "propagate", "--quiet"])
    assert code == 0, capsys.readouterr().err
    scores = zarr.open_array(str(tmp_path / "s.zarr"), mode="r")[...]
    assert np.isnan(scores[17]).all() and np.isfinite(np.delete(scores, 17, axis=0)).all()
