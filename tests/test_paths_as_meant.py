"""Paths as the user meant them (``~``, ``file://``, ``FILE://``, relative parts) on every road —
the overlap check, the writer, the publisher and the completion marker see one path — and the
command line's own voice: CLI flags in its errors and warnings, a JSON error object with
``--json``, help text from the registries; the API's clear errors for NetCDF paths and strings.
Issue 38, part B."""

import json
import os
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import daskpca
from daskpca import PCA, cli, io
from daskpca.cli.command import build_parser
from daskpca.exceptions import AccuracyWarning, ConvergenceWarning, InputError, InputTypeError, NonFiniteInputError, StoreChangedError
from daskpca.store.paths import as_meant

from _helpers import low_rank_data, write_zarr


@pytest.fixture
def home(tmp_path, monkeypatch):
    """``$HOME`` and the working directory are two different folders of ``tmp_path``."""
    home, work = tmp_path / "home", tmp_path / "jobs"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    X = low_rank_data(60, 5)
    write_zarr(work / "in.zarr", X, (30, 5))
    return home, work, X


def _run(capsys, *argv):
    capsys.readouterr()
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# ----------------------------------------------------------------------------- the normalisation


@pytest.mark.parametrize("given, meant", [
    ("~/m.zarr", "{home}/m.zarr"),
    ("m.zarr", "{work}/m.zarr"),
    ("./a/../m.zarr/", "{work}/a/../m.zarr"),  # ".." kept: through a symlink it means what the OS says
    ("file:///abs/m.zarr", "/abs/m.zarr"),
    ("FILE:///abs/m.zarr", "/abs/m.zarr"),
    ("File://localhost/abs/m.zarr", "/abs/m.zarr"),
    ("file://LOCALHOST/abs/m.zarr", "/abs/m.zarr"),
    ("file://~/m.zarr", None),  # a host named "~": refused below
    ("s3://bucket/a/../b/", "s3://bucket/a/../b/"),  # object stores untouched
    ("S3://bucket/Key", "s3://bucket/Key"),  # but their scheme, case-insensitive (RFC 3986), lower-cased
])
def test_one_spelling_per_meaning(home, given, meant):
    home_dir, work, _ = home
    if meant is None:
        with pytest.raises(InputError, match="'~'"):
            as_meant(given)
        return
    assert as_meant(given) == meant.format(home=home_dir, work=work)
    assert as_meant(Path(given)) == as_meant(given) if "://" not in given else True
    assert as_meant(as_meant(given)) == as_meant(given)  # once is enough
    assert as_meant(None) is None


@pytest.mark.parametrize("given", ["~/m.zarr", "m.zarr", "file:///abs/m.zarr", "FILE://localhost/abs/m.zarr",
                                   "S3://bucket/m.zarr", "gs://bucket/a/../b/", "memory://m.zarr"])
def test_a_meant_path_says_whether_it_is_a_url(home, given):
    # Decided once where the path is put as meant: the claim, the publisher, the writer and the
    # integrity record read the answer instead of asking store.paths again.
    from daskpca.store.paths import MeantPath, is_url

    meant = as_meant(given)
    assert isinstance(meant, MeantPath) and meant.remote == is_url(str(meant)) == is_url(meant)
    assert meant.remote == ("://" in given and not given.lower().startswith("file:"))


def test_the_write_road_asks_store_paths_nothing_of_a_meant_path(tmp_path):
    # A model's save under the job's claim: claiming it again, publishing, writing and recording
    # its checksums take the URL question's answer from the MeantPath (one where it entered).
    import sys

    target = as_meant(tmp_path / "m.zarr")
    ds = xr.Dataset({"a": ("x", np.arange(3.0))})
    asked = []

    def trace(frame, event, arg):
        if event == "call" and frame.f_globals.get("__name__") == "daskpca.store.paths":
            asked.append(frame.f_code.co_name)

    with io.claims([target]):
        sys.setprofile(trace)
        try:
            io.write_dataset(ds, target, marker={"format": io.DATA_FORMAT})
        finally:
            sys.setprofile(None)
    assert asked == []
    assert io.verify(target)["format"] == io.DATA_FORMAT


def test_a_file_url_naming_another_host_is_refused_by_name():
    with pytest.raises(InputError, match=r"'fileserver'.*file:///abs/m\.zarr"):
        as_meant("file://fileserver/abs/m.zarr")


# ----------------------------------------------------------------------------- `~` on every road


def test_tilde_out_writes_a_readable_model_in_home(home, capsys):
    home_dir, work, X = home
    code, out, err = _run(capsys, "fit", "in.zarr", "-k", "2", "--out", "~/new.zarr")
    assert code == 0, err
    assert f"wrote the model to {home_dir / 'new.zarr'}" in out
    assert not (work / "~").exists()
    assert sorted(p.name for p in home_dir.iterdir()) == ["new.zarr"]  # no partial left behind
    np.testing.assert_allclose(daskpca.load(home_dir / "new.zarr").explained_variance_,
                               PCA(2).fit(X).explained_variance_, rtol=1e-10)
    assert _run(capsys, "inspect", "~/new.zarr")[0] == 0
    assert _run(capsys, "transform", "~/new.zarr", "~/../jobs/in.zarr", "--out", "~/s.zarr")[0] == 0
    assert (home_dir / "s.zarr").is_dir() and not (work / "~").exists()


def test_a_path_is_put_as_meant_once_where_it_enters_and_passed_on(home, monkeypatch, capsys):
    # The claim, the checks, the writer and the publisher are handed the MeantPath made where the
    # path entered (the command line's declared paths; a library writer's argument), and do not
    # resolve it again: each spelling the user typed is resolved exactly once.
    from daskpca.store import paths

    home_dir, work, _ = home
    resolved = []
    resolve = paths._resolved
    monkeypatch.setattr(paths, "_resolved", lambda path: resolved.append(path) or resolve(path))
    code, _, err = _run(capsys, "fit", "in.zarr", "-k", "2", "--out", "~/once.zarr")
    assert code == 0, err
    assert resolved.count("in.zarr") == 1 and resolved.count("~/once.zarr") == 1, resolved
    resolved.clear()
    daskpca.load(home_dir / "once.zarr").save("~/again.zarr")
    assert resolved.count("~/again.zarr") == 1, resolved
    resolved.clear()
    assert daskpca.load("~/again.zarr").n_components_ == 2
    assert resolved.count("~/again.zarr") == 1, resolved
    assert (home_dir / "again.zarr").is_dir() and not (work / "~").exists()


def test_tilde_in_a_job_file(home, capsys):
    home_dir, work, _ = home
    (home_dir / "job.toml").write_text('out = "~/from-config.zarr"\nn-components = 2\n')
    code, _, err = _run(capsys, "fit", "in.zarr", "--config", "~/job.toml")
    assert code == 0, err
    assert daskpca.load(home_dir / "from-config.zarr").n_components_ == 2 and not (work / "~").exists()


def test_the_overlap_check_sees_the_path_the_writer_would(home, capsys):
    home_dir, work, _ = home
    code, _, err = _run(capsys, "fit", "~/../jobs/in.zarr", "-k", "2", "--out", f"file://localhost{work}/in.zarr",
                        "--overwrite")
    assert code == 2 and "is the same store as the input SOURCE" in err


def test_save_load_and_io_expand_tilde(home):
    home_dir, work, X = home
    pca = PCA(2).fit("~/../jobs/in.zarr")  # an input path, too
    pca.save("~/api.zarr")
    assert not (work / "~").exists() and (home_dir / "api.zarr").is_dir()
    np.testing.assert_array_equal(PCA.load("~/api.zarr").components_, pca.components_)
    # Loaded through one spelling, saved back through another: the same store, its version checked.
    loaded = PCA.load(f"file://{home_dir}/api.zarr")
    PCA(2).fit(X[::-1]).save(f"{home_dir}/api.zarr", overwrite=True)  # another writer, meanwhile
    with pytest.raises(StoreChangedError):
        loaded.save("~/api.zarr", overwrite=True)
    assert len(io.history("~/api.zarr")) == 2
    assert io.write_array(X, "~/x.zarr") == str(home_dir / "x.zarr")
    assert io.verify("~/x.zarr")["format"] == io.DATA_FORMAT
    io.write_xarray(xr.DataArray(X, dims=("time", "x"), name="v"), "~/labeled.zarr")
    np.testing.assert_array_equal(io.open_xarray("~/labeled.zarr")["v"].values, X)
    assert sorted(p.name for p in home_dir.iterdir() if not p.name.startswith(".")) == [
        "api.zarr", "labeled.zarr", "x.zarr"]


# ----------------------------------------------------------------------------- file:// URLs


def test_upper_case_file_scheme_and_localhost_host(home, capsys):
    home_dir, work, _ = home
    code, _, err = _run(capsys, "fit", "in.zarr", "-k", "2", "--out", f"FILE://{home_dir}/upper.zarr")
    assert code == 0, err
    code, _, err = _run(capsys, "fit", "in.zarr", "-k", "2", "--out", f"file://localhost{home_dir}/local.zarr")
    assert code == 0, err
    assert daskpca.load(home_dir / "upper.zarr") and daskpca.load(home_dir / "local.zarr")
    assert not (work / "localhost").exists()


def test_a_file_url_naming_another_host_is_a_usage_error(home, capsys):
    code, _, err = _run(capsys, "fit", "in.zarr", "-k", "2", "--out", "file://fileserver/abs/m.zarr")
    assert code == 2 and "--out" in err and "'fileserver'" in err and not Path("fileserver").exists()


# ----------------------------------------------------------------------------- help text


def test_help_text_is_not_doubled_and_lists_every_registered_solver():
    from daskpca.coupled.mca import PATHS
    from daskpca.eof.hilbert import HILBERT_SOLVERS
    from daskpca.solvers import SOLVERS

    parser = build_parser()
    texts = {name: sub.format_help() for name, sub in parser.command_parsers.items()}
    assert not any("existing an existing" in " ".join(text.split()) for text in texts.values())
    solver_help = next(a.help for a in parser.command_parsers["fit"]._actions if a.dest == "solver")
    for name in [*SOLVERS, *HILBERT_SOLVERS, *PATHS]:
        assert re.search(rf"\b{name}\b", solver_help), (name, solver_help)


# ----------------------------------------------------------------------------- CLI speaks CLI


@pytest.fixture
def nan_source(home):
    _, work, X = home
    X = X.copy()
    X[3, 2] = np.nan
    write_zarr(work / "nan.zarr", X, (30, 5))
    return work / "nan.zarr"


def test_errors_name_flags_not_api_parameters(home, nan_source, capsys):
    home_dir, work, _ = home
    code, _, err = _run(capsys, "fit", nan_source, "-k", "2", "--out", "m.zarr")
    assert code == 2 and "--solver ppca" in err and "PCA(" not in err and "solver=" not in err
    assert _run(capsys, "fit", "in.zarr", "-k", "2", "--out", "m.zarr", "--quiet")[0] == 0
    code, _, err = _run(capsys, "update", "m.zarr", nan_source)
    # update cannot change the solver: the flag is named with the command that takes it.
    assert code == 2 and "`daskpca fit --solver ppca`" in err and "PCA(" not in err
    code, _, err = _run(capsys, "transform", "m.zarr", nan_source, "--out", "s.zarr")
    assert code == 2 and "--nan propagate" in err and "nan=" not in err
    code, _, err = _run(capsys, "fit", "in.zarr", "-k", "2", "--out", "m.zarr")
    assert code == 2 and "--overwrite" in err and "overwrite=True" not in err
    # The API keeps its own voice.
    with pytest.raises(NonFiniteInputError, match=re.escape("PCA(solver='ppca')")):
        PCA(2).fit(str(nan_source))


def test_translation_of_api_syntax():
    from daskpca.cli.errors import as_cli

    assert as_cli("use PCA(solver='ppca'), which", "fit") == "use --solver ppca, which"
    assert as_cli("an exact solver (solver='covariance' or 'gram'; --solver on the command line) where",
                  "fit") == "an exact solver (--solver covariance or gram) where"
    assert as_cli("stopped after max_iter=200 iterations, > tol=1e-08. Increase max_iter, loosen tol.",
                  "fit") == "stopped after --max-iter 200 iterations, > --tol 1e-08. Increase --max-iter, loosen --tol."
    assert as_cli("or call transform(X, nan='propagate') to get NaN", "transform") == "or pass --nan propagate to get NaN"
    assert as_cli("pass --overwrite (overwrite=True in Python) to replace it", "fit") == "pass --overwrite to replace it"
    assert as_cli("with PCA(solver='ppca')", "update") == "with `daskpca fit --solver ppca`"
    assert as_cli("init=..., tolerance, the solver", "fit") == "init=..., tolerance, the solver"  # no flag: kept
    assert as_cli("'/data/tol/solver=x/n_components.zarr' is damaged", "fit") == (
        "'/data/tol/solver=x/n_components.zarr' is damaged")  # paths are not parameters


# ----------------------------------------------------------------------------- --json on failure


FAILING = {  # one failing line per command that takes --json
    "fit": ["fit", "missing.zarr", "-k", "2", "--out", "m.zarr"],
    "transform": ["transform", "missing.zarr", "in.zarr", "--out", "s.zarr"],
    "update": ["update", "missing.zarr", "in.zarr"],
    "inspect": ["inspect", "missing.zarr"],
    "report": ["report", "missing.zarr", "--out", "r"],
    "history": ["history", "missing.zarr"],
    "rollback": ["rollback", "missing.zarr", "--to", "v1"],
    "demo": ["demo", "--n-features", "0"],
}


def test_every_json_command_prints_an_error_object_on_failure(home, capsys):
    parser = build_parser()
    with_json = {name for name, sub in parser.command_parsers.items()
                 if any(a.dest == "json" for a in sub._actions)}
    assert with_json == set(FAILING)
    for name, argv in FAILING.items():
        code, out, err = _run(capsys, *argv, "--json")
        assert code == 2, (name, err)
        error = json.loads(out)["error"]
        assert error["exit_code"] == 2 and error["type"] and error["message"] in err, (name, out, err)
    code, out, err = _run(capsys, "fit", "in.zarr", "--json", "--no-such-flag")  # a parse error
    assert code == 2 and json.loads(out)["error"]["type"] == "UsageError"


# ----------------------------------------------------------------------------- warnings


def test_warnings_are_one_line_in_the_clis_voice(home, capsys):
    code, out, err = _run(capsys, "fit", "in.zarr", "-k", "2", "--out", "m.zarr", "--solver", "ppca", "--max-iter", "3",
                          "--quiet")
    assert code == 0, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines and all(line.startswith("daskpca: warning: ") for line in lines), err
    assert ".py:" not in err and "ConvergenceWarning" not in err and "max_iter" not in err and "--max-iter" in err
    with pytest.warns(ConvergenceWarning):  # the API still warns as Python does, after the command is done
        PCA(2, solver="ppca", max_iter=3).fit(low_rank_data(60, 5))


def test_the_warning_hook_speaks_flags_for_daskpca_and_leaves_others(capsys):
    from daskpca.cli.errors import cli_warnings

    # Another library's warning (raised here, in a test: not daskpca's) goes where Python sends it.
    with pytest.warns(UserWarning, match="a library's own warning"):
        with cli_warnings("fit"), warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn("solver='auto' ran the approximate 'krylov' solver. Pass tol= (e.g. 1e-4) to ask for an "
                          "accuracy, or use an exact solver (solver='covariance' or 'gram').", AccuracyWarning)
            warnings.warn("a library's own warning", UserWarning)
    assert capsys.readouterr().err == (
        "daskpca: warning: --solver auto ran the approximate 'krylov' solver. Pass --tol (e.g. 1e-4) to ask for "
        "an accuracy, or use an exact solver (--solver covariance or gram).\n")


# ----------------------------------------------------------------------------- API input errors


def test_a_netcdf_path_given_to_the_api_says_how_to_open_it(tmp_path):
    X = low_rank_data(40, 6)
    field = xr.Dataset({"sst": (("time", "x"), X), "slp": (("time", "x"), X)})
    field.to_netcdf(tmp_path / "field.nc")
    with pytest.raises(InputError) as caught:
        PCA(2).fit(str(tmp_path / "field.nc"))
    message = str(caught.value)
    assert not isinstance(caught.value, FileNotFoundError)
    assert "NetCDF" in message and "['slp', 'sst']" in message and "daskpca.io.open_source" in message
    # The reader the command line uses is the one the message names: it gives a fittable DataArray.
    sst = io.open_source(tmp_path / "field.nc", var="sst")
    np.testing.assert_allclose(PCA(2).fit(sst, sample_dims="time").explained_variance_,
                               PCA(2).fit(X).explained_variance_, rtol=1e-10)
    with pytest.raises(InputError, match=r"var='NAME'.*\['slp', 'sst'\]|\['slp', 'sst'\].*var='NAME'"):
        io.open_source(tmp_path / "field.nc")


def test_strings_in_an_object_array_are_an_input_error():
    X = np.array([["1.5", "a"], ["2", "b"], ["3", "c"]], dtype=object)
    with pytest.raises(InputTypeError, match=r"dtype object.*'a'.*float64"):
        PCA(1).fit(X)
