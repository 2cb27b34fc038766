"""The `daskpca` console script, run as a real subprocess against real zarr stores."""

import json
import re
import os
import shutil
import subprocess
import sys
import time

import dask
import numpy as np
import pytest
import xarray as xr
import zarr

import daskpca
from daskpca import PCA, cli

from _helpers import low_rank_data, write_zarr

FAST = ["--workers", "1", "--threads", "2", "--memory-limit", "1GiB"]


def daskpca_cli(*args, timeout=240, cwd=None, env=None):
    executable = shutil.which("daskpca") or None
    command = [executable] if executable else [sys.executable, "-m", "daskpca.cli"]
    return subprocess.run([*command, *map(str, args)], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=None if env is None else {**os.environ, **env})


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """A bare zarr array and a labeled zarr dataset (time × lat × lon, plus a string variable)."""
    root = tmp_path_factory.mktemp("sources")
    X = low_rank_data(2_000, 24, dtype=np.float32)
    write_zarr(root / "matrix.zarr", X, (250, 24))
    ds = xr.Dataset(
        {"sst": (("time", "lat", "lon"), X.reshape(2_000, 4, 6)), "station": (("time",), np.array(["a"] * 2_000, dtype="S1"))},
        coords={"time": np.arange(2_000), "lat": np.linspace(-30, 30, 4), "lon": np.arange(6.0)},
    )
    ds.chunk({"time": 250}).to_zarr(root / "field.zarr", zarr_format=3, consolidated=False)
    ds[["sst"]].to_netcdf(root / "field.nc")
    return root, X


def test_fit_transform_inspect_report_json(sources, tmp_path, capsys):
    root, X = sources
    done = daskpca_cli("fit", root / "matrix.zarr", "--n-components", 4, "--out", tmp_path / "model.zarr",
                       "--scores", tmp_path / "scores.zarr", "--json", *FAST)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    reference = PCA(4).fit(X)
    assert summary["solver"] == "covariance" and summary["n_passes"] == 1 and summary["n_components"] == 4
    np.testing.assert_allclose(summary["explained_variance"], reference.explained_variance_, rtol=1e-10)
    assert "Dask dashboard: http" in done.stderr and summary["timings"]["fit_s"] > 0

    model = daskpca.load(tmp_path / "model.zarr")
    stored = zarr.open_array(str(tmp_path / "scores.zarr"), mode="r")
    # Chunked like the pass's tasks: whole row chunks of the input (250 rows) grouped.
    assert stored.shape == (2_000, 4) and stored.chunks[0] % 250 == 0
    np.testing.assert_allclose(stored[...], model.transform(X), rtol=1e-6, atol=1e-4)

    # The other commands run in this process (the real process: the fit above; the transform
    # still on an embedded cluster, without a second interpreter start).
    capsys.readouterr()
    assert cli.main(["transform", str(tmp_path / "model.zarr"), str(root / "matrix.zarr"), "--out",
                     str(tmp_path / "again.zarr"), *FAST]) == 0
    assert "wrote scores (2000, 4)" in capsys.readouterr().out
    assert cli.main(["inspect", str(tmp_path / "model.zarr")]) == 0
    assert "4 components of 24 features" in capsys.readouterr().out
    assert cli.main(["inspect", str(root / "field.zarr"), "--var", "sst", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["matrix_shape"] == [2000, 24] and info["plan"]["solver"] == "covariance"

    assert cli.main(["report", str(tmp_path / "model.zarr"), "--out", str(tmp_path / "report"), "--quiet"]) == 0
    assert {p.name for p in (tmp_path / "report").iterdir() if not p.name.startswith(".")} == {
        "scree.png", "cumulative.png", "distortion.png", "components.png", "summary.md"}
    assert "| 1 |" in (tmp_path / "report" / "summary.md").read_text()


def test_labeled_source_with_weights_and_config_file(sources, tmp_path, capsys):
    # In this process (the config file and the source are the point; the real process is run by
    # test_fit_transform_inspect_report_json): still on the one-worker cluster the file asks for.
    root, X = sources
    config = tmp_path / "job.toml"
    config.write_text('n-components = 3\nvar = "sst"\nweights = "coslat"\nsample_dims = ["time"]\nworkers = 1\n')
    capsys.readouterr()
    code = cli.main(["fit", str(root / "field.zarr"), "--config", str(config), "--n-components", "2",  # flag overrides file
                     "--out", str(tmp_path / "model.zarr"), "--quiet"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.out == ""
    model = daskpca.load(tmp_path / "model.zarr")
    assert model.n_components_ == 2 and model.weights == "coslat"
    field = xr.open_zarr(root / "field.zarr", consolidated=False)["sst"]
    expected = PCA(2, weights="coslat").fit(field, sample_dims="time")
    np.testing.assert_allclose(model.components_, expected.components_, atol=1e-10)


def test_netcdf_source(sources, tmp_path, capsys):
    # In this process, on an embedded cluster (the source format is the point).
    root, X = sources
    capsys.readouterr()
    code = cli.main(["fit", str(root / "field.nc"), "--var", "sst", "--n-components", "3",
                     "--out", str(tmp_path / "model.zarr"), "--json", *FAST])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    expected = PCA(3).fit(X)  # the same values, stacked (time) × (lat·lon)
    np.testing.assert_allclose(json.loads(captured.out)["explained_variance"], expected.explained_variance_, rtol=1e-9)
    model = daskpca.load(tmp_path / "model.zarr")
    assert model.to_xarray()["components"].dims == ("mode", "lat", "lon")


def test_update_equals_refit_and_reads_only_new_data(tmp_path):
    X = low_rank_data(3_000, 20)
    split = 2_100  # 70 % / 30 %
    write_zarr(tmp_path / "old.zarr", X[:split], (300, 20))
    write_zarr(tmp_path / "new.zarr", X[split:], (300, 20))
    # The first fit in this process on threads (the CLI's fit on a cluster is checked above): the
    # update, the command under test, runs as a real process on an embedded cluster.
    assert cli.main(["fit", str(tmp_path / "old.zarr"), "--n-components", "5", "--solver", "covariance",
                     "--out", str(tmp_path / "model.zarr"), "--quiet"]) == 0
    shutil.rmtree(tmp_path / "old.zarr")  # the update cannot read the old data: it is gone
    done = daskpca_cli("update", tmp_path / "model.zarr", tmp_path / "new.zarr", "--json", *FAST)
    assert done.returncode == 0, done.stderr
    updated = daskpca.load(tmp_path / "model.zarr")
    full = PCA(5, solver="covariance").fit(X)
    assert updated.n_samples_ == 3_000
    np.testing.assert_allclose(updated.components_, full.components_, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(updated.explained_variance_, full.explained_variance_, rtol=1e-10)
    np.testing.assert_allclose(updated.mean_, full.mean_, rtol=1e-12)
    np.testing.assert_allclose(updated.transform(X), full.transform(X), rtol=1e-9, atol=1e-9)


def test_update_reads_each_new_chunk_once(tmp_path):
    X = low_rank_data(1_000, 12)
    array, store = write_zarr(tmp_path / "all.zarr", X, (100, 12))
    with dask.config.set(scheduler="threads"):
        import dask.array as da

        model = PCA(3, solver="covariance").fit(da.from_zarr(array)[:700])
        store.reads.clear()
        model.update(da.from_zarr(array)[700:])
    assert sorted(store.chunk_reads()) == [f"c/{i}/0" for i in range(7, 10)]
    assert set(store.chunk_reads().values()) == {1}
    np.testing.assert_allclose(model.components_, PCA(3, solver="covariance").fit(X).components_, atol=1e-12)


def test_update_refuses_models_without_statistics(sources, tmp_path, capsys):
    # In-process, like test_bad_input_exits_2_with_one_line (a real process reports bad input the
    # same way: test_a_real_process_reports_bad_input_the_same_way).
    root, X = sources
    PCA(2, solver="tsqr").fit(X).save(tmp_path / "model.zarr")  # the refusal comes before any cluster starts
    capsys.readouterr()
    code = cli.main(["update", str(tmp_path / "model.zarr"), str(root / "matrix.zarr"), *FAST])
    stderr = capsys.readouterr().err
    assert code == 2
    assert "fitted with `daskpca fit --solver tsqr`, which keeps no sufficient statistics" in stderr  # flags, not PCA(...)
    assert len(stderr.strip().splitlines()) == 1


def test_on_a_separately_started_scheduler_and_workers(sources, tmp_path):
    root, X = sources
    bin_dir = os.path.dirname(sys.executable)
    scheduler_file = tmp_path / "scheduler.json"
    scheduler = subprocess.Popen([os.path.join(bin_dir, "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0",
                                  "--no-dashboard", "--scheduler-file", scheduler_file],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = None
    try:
        deadline = time.monotonic() + 60
        while not scheduler_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        address = json.loads(scheduler_file.read_text())["address"]
        worker = subprocess.Popen([os.path.join(bin_dir, "dask"), "worker", address, "--nthreads", "2",
                                   "--memory-limit", "1GiB", "--no-dashboard", "--host", "127.0.0.1"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        done = daskpca_cli("fit", root / "matrix.zarr", "--n-components", 3, "--out", tmp_path / "model.zarr",
                           "--scheduler", address, "--json")
        assert done.returncode == 0, done.stderr
        assert f"Dask scheduler: {address}" in done.stderr
        np.testing.assert_allclose(json.loads(done.stdout)["explained_variance"], PCA(3).fit(X).explained_variance_, rtol=1e-10)
    finally:
        for process in (worker, scheduler):
            if process is not None:
                process.terminate()
                process.wait(timeout=30)


@pytest.mark.parametrize(
    "args, message",
    [
        (["fit", "{root}/missing.zarr", "--n-components", "2", "--out", "{tmp}/m.zarr"], "SOURCE '{root}/missing.zarr' does not exist"),
        (["fit", "{root}/field.zarr", "--var", "nope", "--n-components", "2", "--out", "{tmp}/m.zarr"], "--var nope is not in"),
        (["fit", "{root}/field.zarr", "--var", "sst", "--sample-dims", "month", "--n-components", "2", "--out", "{tmp}/m.zarr"],
         "--sample-dims ['month'] not found; 'sst' has dims ['time', 'lat', 'lon']"),
        (["fit", "{root}/field.zarr", "--var", "station", "--n-components", "2", "--out", "{tmp}/m.zarr"], "has dtype |S1; PCA needs numbers"),
        (["fit", "{root}/field.zarr", "--n-components", "2", "--out", "{tmp}/m.zarr"], "holds variables ['sst', 'station']; choose one with --var"),
        (["fit", "{root}/matrix.zarr", "--n-components", "99", "--out", "{tmp}/m.zarr"], "-k 99 is out of range"),
        (["fit", "{root}/matrix.zarr", "--n-components", "two", "--out", "{tmp}/m.zarr"], "--n-components 'two'"),
        (["fit", "{root}/matrix.zarr", "--out", "{tmp}/m.zarr"], "needs --n-components"),
        (["fit", "{root}/matrix.zarr", "--n-components", "2", "--out", "{root}/field.zarr"], "already exists; pass --overwrite"),
        (["fit", "{root}/matrix.zarr", "--n-components", "2", "--out", "{root}/matrix.zarr"], "writing it would destroy what the job reads"),
        (["transform", "{tmp}/no-model.zarr", "{root}/matrix.zarr", "--out", "{tmp}/s.zarr"], "no store at"),
    ],
)
def test_bad_input_exits_2_with_one_line(sources, tmp_path, capsys, args, message):
    # In-process (cli.main returns the exit code): the same code path as the command, without a
    # 3 s interpreter start per case; test_a_real_process_reports_bad_input_the_same_way runs one.
    root, _ = sources
    fill = lambda s: s.format(root=root, tmp=tmp_path)  # noqa: E731
    code = cli.main([*map(fill, args), *FAST])
    stderr = capsys.readouterr().err
    assert code == 2, stderr
    lines = [line for line in stderr.strip().splitlines() if not line.startswith("progress:")]
    assert len(lines) == 1 and lines[0].startswith("daskpca: error: "), stderr
    assert fill(message) in lines[0]
    assert "Traceback" not in stderr
    assert not (tmp_path / "m.zarr").exists() and not (tmp_path / "s.zarr").exists()


def test_a_real_process_reports_bad_input_the_same_way(sources, tmp_path):
    root, _ = sources
    done = daskpca_cli("fit", root / "field.zarr", "--var", "nope", "--n-components", "2", "--out", tmp_path / "m.zarr", *FAST)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--var nope is not in" in done.stderr
    assert not (tmp_path / "m.zarr").exists()


def test_unreachable_scheduler_fails_fast_with_exit_1(sources, tmp_path):
    root, _ = sources
    start = time.monotonic()
    done = daskpca_cli("fit", root / "matrix.zarr", "--n-components", "2", "--out", tmp_path / "m.zarr",
                       "--scheduler", "tcp://127.0.0.1:9", env={"DASKPCA_CONNECT_TIMEOUT": "1"})
    assert done.returncode == 1
    assert "could not reach the Dask scheduler at 'tcp://127.0.0.1:9'" in done.stderr
    assert time.monotonic() - start < 60
    assert not (tmp_path / "m.zarr").exists()


def test_progress_names_the_pass_and_never_reaches_100_percent_before_the_end(sources):
    # One line per pass in logs, in passes (not tasks): the budget, the passes predicted, the
    # Krylov bound against the tol asked for, time a pass and time left; "done" only once the fit has ended. (log_after=0:
    # these passes take milliseconds; by default a log gets a pass's line after 2 s of it.)
    import io

    root, _ = sources
    stream = io.StringIO()
    with daskpca.progress(stream, log_after=0):
        pca = PCA(3, solver="krylov", tol=1e-9, max_passes=5, random_state=0).fit(str(root / "matrix.zarr"))
    lines = stream.getvalue().splitlines()
    assert lines[0] == "progress: pass 1 of ≤ 5, 5 predicted (krylov)"  # the planner's figure, within the budget
    assert re.fullmatch(r"progress: pass 2 of ≤ 5, \d predicted \(krylov, bound \d\.\de[-+]\d\d → tol 1e-09\), "
                        r"[\d.]+ s a pass, ~[\d.]+ s left(?: \(ETA from pass 1\))?", lines[1]), lines[1]
    assert len(lines) == pca.n_passes_ + 1 and re.fullmatch(rf"progress: done: {pca.n_passes_} passes in [\d.]+ s", lines[-1])
    assert "%" not in stream.getvalue()

    stream = io.StringIO()
    with daskpca.progress(stream, log_after=0):
        PCA(3, solver="covariance").fit(str(root / "matrix.zarr"))
    assert stream.getvalue().splitlines()[0] == "progress: pass 1 of 1 (covariance)"


def test_the_predicted_time_is_the_fit_plans_with_its_pass_cache(sources):
    # What the summary reports is the estimate of the solver that ran in the plan the fit made in
    # its job: the pass cache's (a fit followed by its scores) timing included.
    from daskpca.cli.summary import summary
    from daskpca.passes import job

    root, _ = sources
    with job(later_reads=1):
        pca = PCA(3, solver="covariance").fit(str(root / "matrix.zarr"))
    plan = pca._fit_plan
    assert plan.cache is not None and plan.solver == pca.solver_
    assert summary(pca, model=None, plan=plan)["predicted_seconds"] == plan.seconds is not None


def test_fit_says_what_ran_in_text_and_json(sources, tmp_path, capsys):
    root, X = sources
    argv = ["fit", str(root / "matrix.zarr"), "-k", "3", "--solver", "krylov", "--tol", "1e-6", "--random-state", "0"]
    assert cli.main([*argv, "--out", str(tmp_path / "a.zarr")]) == 0
    captured = capsys.readouterr()
    pca = daskpca.load(tmp_path / "a.zarr")
    assert "solver: krylov (" in captured.out
    assert re.search(rf"passes over the data: {pca.n_passes_} passes, [\d.]+ s a pass \+ [\d.]+ s on the client; fit [\d.]+ s "
                     r"\(the plan predicted ≈ [\d.]+ s in \d+ passes(, from a probe of \d+ rows)?\)", captured.out), captured.out
    assert re.search(r"error bound: \d\.?\d*e-\d\d on sin θ; tol asked for 1e-06", captured.out), captured.out
    # Passes of milliseconds: the log has only the last line (a pass's own after 2 s of it).
    assert f"progress: done: {pca.n_passes_} passes in" in captured.err and "resumed" not in captured.out

    assert cli.main([*argv, "--out", str(tmp_path / "b.zarr"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["solver"] == "krylov" and summary["solver_reason"] and summary["tol"] == 1e-6
    assert 0 < summary["error_bound"] <= 1e-6 and summary["resumed_from_pass"] is None
    assert len(summary["pass_seconds"]) == summary["n_passes"] == pca.n_passes_
    assert summary["seconds_per_pass"] == pytest.approx(np.mean(summary["pass_seconds"]))
    assert summary["fit_seconds"] >= sum(summary["pass_seconds"]) and summary["predicted_seconds"] > 0
    # The client's share: one entry per pass (its work after that pass), inside the fit's time.
    assert len(summary["client_seconds"]) == summary["n_passes"] and min(summary["client_seconds"]) >= 0
    assert sum(summary["pass_seconds"]) + sum(summary["client_seconds"]) <= summary["fit_seconds"]

    # An exact solver: its round-off bound, no tol; a solver that computes no bound says so (null in JSON).
    assert cli.main(["fit", str(root / "matrix.zarr"), "-k", "3", "--out", str(tmp_path / "c.zarr")]) == 0
    said = re.search(r"error bound: ([0-9.e+-]+) on sin θ\n", capsys.readouterr().out)
    assert said and 0 < float(said.group(1)) < 1e-10
    assert cli.main(["fit", str(root / "matrix.zarr"), "-k", "3", "--solver", "als", "--out", str(tmp_path / "d.zarr"),
                     "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["error_bound"] is None


def test_help_shows_required_options_as_required():
    from daskpca.cli.command import build_parser

    text = build_parser().command_parsers["fit"].format_help()
    required = text.split("required (on the command line or in --config):")[1].split("\n\n")[0]
    assert "--n-components K" in required and "--out MODEL" in required


def test_k_is_short_for_n_components_and_job_files_keep_the_long_name(sources, tmp_path):
    # scikit-learn users type -k; the TOML key stays "n-components".
    from daskpca import load

    root, _ = sources
    assert cli.main(["fit", str(root / "matrix.zarr"), "-k", "2", "--out", str(tmp_path / "a.zarr"), "--quiet"]) == 0
    (tmp_path / "job.toml").write_text('n-components = 2\n')
    assert cli.main(["fit", str(root / "matrix.zarr"), "--config", str(tmp_path / "job.toml"), "--out",
                     str(tmp_path / "b.zarr"), "--quiet"]) == 0
    assert load(tmp_path / "a.zarr").n_components_ == load(tmp_path / "b.zarr").n_components_ == 2


def test_small_input_runs_threaded_says_where_it_wrote_and_keeps_history(sources, tmp_path, capsys):
    root, X = sources
    model, scores = tmp_path / "m.zarr", tmp_path / "s.zarr"
    # SOURCE after a list option is taken back from it, not swallowed
    assert cli.main(["fit", "--var", "sst", "--n-components", "2", "--out", str(model), "--scores", str(scores),
                     "--sample-dims", "time", str(root / "field.zarr")]) == 0
    out = capsys.readouterr().out
    assert "running on the threaded scheduler in this process" in out and "dashboard" not in out
    assert f"wrote the model to {model} and the scores (2000, 2) to {scores}" in out
    assert cli.main(["fit", str(root / "matrix.zarr"), "--n-components", "3", "--out", str(model), "--overwrite",
                     "--quiet"]) == 0
    assert cli.main(["history", str(model), "--json"]) == 0
    versions = json.loads(capsys.readouterr().out)["versions"]
    assert [v["current"] for v in versions] == [True, False]
    assert cli.main(["rollback", str(model), "--to", versions[1]["version"], "--quiet"]) == 0
    assert daskpca.load(model).n_components_ == 2
    assert cli.main(["inspect", str(model)]) == 0
    assert "(1 pass)" in capsys.readouterr().out


def test_long_variance_tables_are_cut_unless_all(sources, tmp_path, capsys):
    root, X = sources
    assert cli.main(["fit", str(root / "matrix.zarr"), "--n-components", "all", "--out", str(tmp_path / "m.zarr")]) == 0
    out = capsys.readouterr().out
    assert "   20 " in out and "   21 " not in out and "… 4 more modes (to 100.00%); --all prints every one" in out
    assert cli.main(["inspect", str(tmp_path / "m.zarr"), "--all"]) == 0
    assert "   24 " in capsys.readouterr().out


def test_demo_defaults_to_a_named_cache_folder_and_replaces_its_results(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("DASKPCA_DEMO_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    args = ["demo", "--n-samples", "2000", "--n-features", "8", "--chunk-rows", "500", "--n-components", "2",
            "--workers", "1", "--memory-limit", "1GiB", "--quiet"]
    assert cli.main(args) == 0
    folder = tmp_path / "cache" / "daskpca" / "demo"
    assert f"demo folder: {folder}" in capsys.readouterr().out
    assert sorted(p.name for p in folder.iterdir()) == ["input.zarr", "results-latest"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]  # nothing in the current folder


def test_a_log_gets_a_pass_line_once_the_pass_runs_long_and_a_quick_failure_only_its_error():
    import io

    from daskpca.passes._progress import Passes

    stream = io.StringIO()
    with daskpca.progress(stream, log_after=0.2):
        passes = Passes("krylov", 3, at_most=True)
        with passes.read():
            time.sleep(0.6)  # long enough to be logged
        with passes.read():
            pass  # too short: only counted in the last line
    lines = stream.getvalue().splitlines()
    assert lines == ["progress: pass 1 of ≤ 3 (krylov)", lines[1]] and lines[1].startswith("progress: done: 2 passes in")

    stream = io.StringIO()
    with pytest.raises(RuntimeError), daskpca.progress(stream):
        with Passes("covariance", 1).read():
            raise RuntimeError("fails within the first second")
    assert stream.getvalue() == ""


def test_update_refuses_to_overwrite_a_model_replaced_while_it_ran(tmp_path, monkeypatch, capsys):
    """`daskpca update` loads through the one load path (``load_as``), so its save is tied to the
    version it read: a model saved there meanwhile (another job's update) is not silently dropped."""
    X = low_rank_data(400, 6, dtype=np.float64)
    write_zarr(tmp_path / "new.zarr", X[300:], (100, 6))
    PCA(3, solver="covariance").fit(X[:300]).save(tmp_path / "model.zarr")
    real_update = PCA.update

    def meanwhile(self, data, *args, **kwargs):
        PCA(3, solver="covariance").fit(X[:200]).save(tmp_path / "model.zarr", overwrite=True)  # the other job
        return real_update(self, data, *args, **kwargs)

    monkeypatch.setattr(PCA, "update", meanwhile)
    capsys.readouterr()
    code = cli.main(["update", str(tmp_path / "model.zarr"), str(tmp_path / "new.zarr")])
    assert code != 0
    assert "was replaced after this model was loaded from it" in capsys.readouterr().err
    assert daskpca.load(tmp_path / "model.zarr").n_samples_ == 200  # the other job's model stands


def test_inspect_probe_reads_a_stated_sample_of_the_source(tmp_path, capsys):
    """``inspect --probe``: 1 % of the rows, whole storage chunks (10 rows each: 2 of 200), and the
    plan's point estimate for block Krylov from their spectrum; without --probe nothing is said."""
    from _helpers import write_zarr

    rng = np.random.default_rng(0)
    X = (rng.standard_normal((2000, 5)) * [9.0, 6.0, 4.0, 2.0, 1.0]) @ rng.standard_normal((5, 300))
    write_zarr(tmp_path / "x.zarr", X + 0.1 * rng.standard_normal((2000, 300)), (10, 300))
    assert cli.main(["inspect", str(tmp_path / "x.zarr"), "-k", "4"]) == 0
    assert "probed" not in capsys.readouterr().out
    assert cli.main(["inspect", str(tmp_path / "x.zarr"), "-k", "4", "--probe", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert re.match(r"probed: 20 of 2000 rows \(1\.0 %\), point estimate \d+ passes? from their spectrum",
                    info["plan"]["probe"])


def test_a_refit_over_its_own_model_predicts_its_passes_from_that_models_spectrum(tmp_path, capsys):
    """`fit --out MODEL --overwrite` of a new draw of the same field (a scheduled refit) predicts
    block Krylov's passes from the model it replaces, reading nothing more; --spectrum-from names
    another. A damaged model there is only a hint gone: the refit runs and replaces it. An asked
    --spectrum-from that cannot be read, or with --mca, is an error."""
    from _helpers import spectral_data

    n, d, k = 2400, 200, 10
    variances = np.concatenate([np.geomspace(10, 1, k), 0.9 * np.linspace(1, 0.8, d - k)])
    for draw in (0, 1):
        write_zarr(tmp_path / f"x{draw}.zarr", spectral_data(variances, n, d, seed=draw), (100, d))
    model = tmp_path / "model.zarr"
    fit = ["fit", "-k", "10", "--solver", "krylov", "--tol", "1e-4", "--random-state", "1", "--json"]

    def run(source, *more):
        assert cli.main([*fit, str(tmp_path / source), *map(str, more)]) == 0
        return json.loads(capsys.readouterr().out)

    first = run("x0.zarr", "--out", model)
    assert first["probed_spectrum_of"] is None
    version = daskpca.io.history(model)[0]["version"]
    second = run("x1.zarr", "--out", model, "--overwrite")
    assert second["probed_spectrum_of"] == f"the model at '{model}' (version {version})"
    assert abs(second["predicted_passes"] - second["n_passes"]) <= 1 and second["n_passes"] == 8
    other = run("x1.zarr", "--out", tmp_path / "other.zarr", "--spectrum-from", model)
    assert other["probed_spectrum_of"].startswith(f"the model at '{model}' (version ")
    assert other["predicted_passes"] == second["n_passes"]

    (model / "model_components" / "c" / "0" / "0").write_bytes(b"damaged")
    assert run("x1.zarr", "--out", model, "--overwrite")["probed_spectrum_of"] is None
    assert daskpca.load(model).n_passes_ == 8  # replaced whole

    assert cli.main([*fit, str(tmp_path / "x1.zarr"), "--out", str(tmp_path / "third.zarr"),
                     "--spectrum-from", str(tmp_path / "missing.zarr")]) != 0
    assert "missing.zarr" in capsys.readouterr().err
    assert not (tmp_path / "third.zarr").exists()
    assert cli.main(["fit", str(tmp_path / "x0.zarr"), "-k", "2", "--mca", "--with", str(tmp_path / "x1.zarr"),
                     "--out", str(tmp_path / "mca.zarr"), "--spectrum-from", str(model)]) == 2
    assert "--spectrum-from apply to one field's PCA, not to --mca" in capsys.readouterr().err
