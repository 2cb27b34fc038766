"""One writer per output: claims, concurrent jobs (real processes), SIGKILL at every local publish step."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import zarr

import daskpca
from daskpca import PCA, cli, io
from daskpca.store.claims import acquire, claim_location
from daskpca.store.publish import STEPS
from daskpca.exceptions import OutputClaimedError

from _forked import forked_jobs
from _publish_faults import kill_at_every_step

X = np.random.default_rng(3).standard_normal((400, 6))


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    path = tmp_path_factory.mktemp("claims") / "in.zarr"
    array = zarr.create_array(str(path), shape=X.shape, chunks=(100, 6), dtype="f8")
    array[...] = X
    return path


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def test_second_claim_names_the_holder_and_release_frees_it(tmp_path):
    target = tmp_path / "m.zarr"
    claim = acquire(target, command="daskpca fit a")
    with pytest.raises(OutputClaimedError, match=rf"being written by another job: pid {os.getpid()} .*'daskpca fit a'"):
        acquire(target)
    claim.release()
    assert not os.path.exists(claim_location(target))
    acquire(target).release()


def test_a_claim_is_refused_where_its_folder_cannot_be_written_before_any_folder_is_made(tmp_path):
    (tmp_path / "file.txt").write_text("a file")
    target = tmp_path / "file.txt" / "new" / "m.zarr"
    with pytest.raises(PermissionError, match=r"cannot write .*m\.zarr'.*file\.txt' is not a folder"):
        acquire(target)
    # Several targets: the ones claimed before are released, and their folders removed.
    with pytest.raises(PermissionError, match="is not a folder"), io.claims([tmp_path / "a" / "ok.zarr", target]):
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt"]


def test_stale_claim_is_explained_and_cleared_only_on_request(tmp_path, source):
    target = tmp_path / "m.zarr"
    record = {"token": "x", "pid": _dead_pid(), "host": os.uname().nodename, "started": time.time() - 90,
              "command": "daskpca fit killed"}
    with open(claim_location(target), "w") as handle:
        json.dump(record, handle)
    with pytest.raises(OutputClaimedError, match=r"stale claim: pid \d+ .*'daskpca fit killed'.*9\d s ago.*no longer running.*--break-claim"):
        PCA(2).fit(X).save(target)
    assert not target.exists()
    code = cli.main(["fit", str(source), "--n-components", "2", "--out", str(target), "--quiet"])
    assert code == 2 and not target.exists()
    assert cli.main(["fit", str(source), "--n-components", "2", "--out", str(target), "--quiet", "--break-claim"]) == 0
    assert daskpca.load(target).n_components_ == 2 and not os.path.exists(claim_location(target))


def test_a_claim_of_a_provably_dead_job_is_cleared_with_a_warning(tmp_path, caplog):
    from daskpca.store.claims import _process_identity

    target = tmp_path / "m.zarr"
    dead = {"token": "d", "pid": _dead_pid(), "host": os.uname().nodename, "started": time.time(),
            "command": "daskpca fit dead", **_process_identity(os.getpid())}
    reused = {**dead, "pid": os.getpid(), "pid_start": dead["pid_start"] - 1, "command": "daskpca fit reused"}
    for record in (dead, reused):  # pid gone; pid now belongs to a later process
        with open(claim_location(target), "w") as handle:
            json.dump(record, handle)
        with caplog.at_level(logging.WARNING, logger="daskpca"):
            acquire(target).release()
        assert f"'{record['command']}'" in caplog.text and "no longer running" in caplog.text
    other_namespace = {**dead, "pid_namespace": 1}  # a container whose processes are not visible here
    with open(claim_location(target), "w") as handle:
        json.dump(other_namespace, handle)
    with pytest.raises(OutputClaimedError, match="--break-claim"):
        acquire(target)


def test_break_claim_refuses_a_live_holder_and_unreadable_claims_are_explained(tmp_path):
    target = tmp_path / "m.zarr"
    held = acquire(target)
    with pytest.raises(OutputClaimedError, match="still running on this host: --break-claim only clears"):
        acquire(target, break_stale=True)
    held.release()
    open(claim_location(target), "w").close()  # a writer killed between create and write
    with pytest.raises(OutputClaimedError, match="unreadable claim.*--break-claim"):
        acquire(target)
    acquire(target, break_stale=True).release()


def test_cli_fails_before_reading_when_an_output_is_claimed(tmp_path, source, capsys):
    other = {"token": "y", "pid": os.getppid(), "host": os.uname().nodename, "started": time.time(),
             "command": "daskpca fit other"}  # a live job in another process
    (tmp_path / ".s.zarr.daskpca-claim").write_text(json.dumps(other))
    code = cli.main(["fit", str(source), "--n-components", "2", "--out", str(tmp_path / "m.zarr"),
                     "--scores", str(tmp_path / "s.zarr")])
    err = capsys.readouterr().err
    assert code == 2 and "being written by another job" in err and "'daskpca fit other'" in err
    assert len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [".s.zarr.daskpca-claim"]  # the model's claim was released


def test_a_failed_scores_write_publishes_no_model(tmp_path, source, monkeypatch):
    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(io, "write_array", broken)
    code = cli.main(["fit", str(source), "--n-components", "2", "--out", str(tmp_path / "m.zarr"),
                     "--scores", str(tmp_path / "s.zarr"), "--quiet"])
    assert code == 1 and os.listdir(tmp_path) == []
    monkeypatch.undo()
    assert cli.main(["fit", str(source), "--n-components", "2", "--out", str(tmp_path / "m.zarr"),
                     "--scores", str(tmp_path / "s.zarr"), "--quiet"]) == 0  # the same command now runs


# ----------------------------------------------------------------------------- real processes

_RACER = """
import sys
from daskpca import cli
sys.exit(cli.main(sys.argv[1:]))
"""


def _race(jobs):
    """Start every job (argv, cwd) in its own process; release them together once all have
    imported daskpca; return (exit code, stdout, stderr) per job.

    The processes are forked from one interpreter that did the imports (tests/_forked.py): the
    race is the same, without an interpreter start per job."""
    started = forked_jobs(_RACER, [{"argv": argv, "cwd": cwd} for argv, cwd in jobs], jobs[0][1].parent / "jobs",
                          imports=("daskpca", "daskpca.io", "daskpca.cli", "distributed", "xarray", "zarr"),
                          wait_for_go=True)
    started.release()
    return started.wait(timeout=120)


def _check_one_winner(results, folder, overwrite):
    codes = [code for code, _, _ in results]
    assert codes.count(0) == 1, results
    assert set(codes) == {0, 2}, results
    for code, _, err in results:
        if code == 2:
            assert len(err.strip().splitlines()) == 1, err
            assert "being written by another job: pid" in err or (not overwrite and "already exists" in err), err
    winner = codes.index(0)
    model = daskpca.load(folder / "m.zarr")
    assert model.n_components_ == 1 + winner % 4
    io.verify(folder / "s.zarr")  # complete, every chunk as written
    stored = zarr.open_array(str(folder / "s.zarr"), mode="r")[...]
    np.testing.assert_allclose(stored, model.transform(X), atol=1e-10)  # the winner's scores, the winner's model
    assert not [p for p in os.listdir(folder) if "partial" in p or "claim" in p]


def _jobs(source, folder, n_jobs, overwrite):
    folder.mkdir()
    if overwrite:  # an existing store: replaced by exactly one job, never by two
        assert cli.main(["fit", str(source), "--n-components", "5", "--out", str(folder / "m.zarr"),
                         "--scores", str(folder / "s.zarr"), "--quiet"]) == 0
    return [(["fit", str(source), "--n-components", str(1 + i % 4), "--out", "m.zarr", "--scores", "s.zarr", "--quiet"]
             + (["--overwrite"] if overwrite else []), folder) for i in range(n_jobs)]


def test_two_concurrent_jobs_exactly_one_wins(tmp_path, source):
    """Two jobs on a new target and two replacing an existing one, all four racing at once."""
    fresh, existing = _jobs(source, tmp_path / "new", 2, False), _jobs(source, tmp_path / "old", 2, True)
    results = _race(fresh + existing)
    _check_one_winner(results[:2], tmp_path / "new", False)
    _check_one_winner(results[2:], tmp_path / "old", True)


@pytest.mark.slow
def test_eight_concurrent_jobs_exactly_one_wins(tmp_path, source):
    _check_one_winner(_race(_jobs(source, tmp_path / "new", 8, False)), tmp_path / "new", False)


_KILLED_SAVE = """
import sys
import numpy as np
import daskpca
X = np.random.default_rng(1).standard_normal((60, 5))
daskpca.PCA(int(sys.argv[2])).fit(X).save(sys.argv[1], overwrite=True)
"""


def test_sigkill_at_every_local_publish_step_leaves_a_complete_model(tmp_path, caplog):
    Y = np.random.default_rng(1).standard_normal((60, 5))
    targets = {step: tmp_path / step / "m.zarr" for step in STEPS}
    for target in targets.values():
        PCA(2).fit(Y).save(target)
    kill_at_every_step(_KILLED_SAVE, {step: [target, 4] for step, target in targets.items()})
    for step, target in targets.items():
        loaded = daskpca.load(target)  # complete, verified: the previous model until the switch, then the new one
        assert loaded.n_components_ == (2 if STEPS.index(step) < STEPS.index("switched") else 4), step
    # the replaced model is in the history once retired; a rollback (clearing the dead job's claim) restores it
    target = targets["retired"]
    assert [entry["current"] for entry in io.history(target)] == [True, False]
    with caplog.at_level(logging.WARNING, logger="daskpca"):
        assert cli.main(["rollback", str(target), "--to", io.history(target)[-1]["version"], "--quiet"]) == 0
    assert daskpca.load(target).n_components_ == 2
    # the killed job provably cannot be running (same host, boot and pid namespace; its pid gone):
    # the next writer clears its claim and says so — rerunning a killed job just works
    assert "cleared the stale claim" in caplog.text and "no longer running" in caplog.text
    for step in ("data-written", "switched"):
        PCA(3).fit(Y).save(targets[step], overwrite=True)
        assert daskpca.load(targets[step]).n_components_ == 3
    # The model swapped out by the job killed at "switched" was not yet retired: the next writer
    # moves it into the history (nothing lost) and leaves no partial folder behind.
    from daskpca.store.publish import history_folder

    entries = io.history(targets["switched"])
    assert [e["current"] for e in entries] == [True, False, False]
    kept = [daskpca.load(history_folder(targets["switched"]) / e["version"]).n_components_ for e in entries[1:]]
    assert kept == [4, 2], kept  # the killed job's model (swapped in), then the one it swapped out
    assert not [p for step in ("data-written", "switched") for p in os.listdir(targets[step].parent) if "partial" in p]


# ----------------------------------------------------------------------------- load → update → save


def test_saving_a_loaded_model_back_refuses_a_store_replaced_since(tmp_path):
    from daskpca.exceptions import StoreChangedError

    rng = np.random.default_rng(0)
    path = tmp_path / "m.zarr"
    PCA(3, solver="covariance").fit(rng.standard_normal((200, 6))).save(path)
    mine, theirs = daskpca.load(path), daskpca.load(path)
    theirs.update(rng.standard_normal((50, 6))).save(path, overwrite=True)
    mine.update(rng.standard_normal((70, 6)))
    with pytest.raises(StoreChangedError, match=r"was replaced after this model was loaded from it.*Load it again"):
        mine.save(path, overwrite=True)
    assert daskpca.load(path).n_samples_ == 250  # their update kept
    mine.save(tmp_path / "other.zarr")  # elsewhere: nothing to compare with
    again = daskpca.load(path).update(rng.standard_normal((70, 6)))
    again.save(path, overwrite=True)
    again.update(rng.standard_normal((10, 6))).save(path, overwrite=True)  # its own save is the new base
    assert daskpca.load(path).n_samples_ == 330
    # A new fit replaces rather than modifies: overwrite=True means it, for a loaded model too.
    refit = daskpca.load(path)
    PCA(2).fit(rng.standard_normal((40, 6))).save(path, overwrite=True)
    refit.fit(rng.standard_normal((90, 6))).save(path, overwrite=True)
    assert daskpca.load(path).n_samples_ == 90


_UPDATER = """
import sys, time
import numpy as np
import daskpca
from daskpca.exceptions import OutputClaimedError, StoreChangedError
path, seed, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(seed)
retries = 0
for _ in range(rounds):
    rows = rng.standard_normal((10, 6))
    while True:
        model = daskpca.load(path).update(rows)
        try:
            model.save(path, overwrite=True)
            break
        except (StoreChangedError, OutputClaimedError):
            retries += 1
print(retries)
"""


def test_two_processes_updating_one_model_lose_no_update(tmp_path):
    # Real processes, each load → update → save in a loop: every update lands exactly once.
    path = tmp_path / "m.zarr"
    PCA(3, solver="covariance").fit(np.random.default_rng(0).standard_normal((100, 6))).save(path)
    rounds = 6
    # Two processes forked from one interpreter that did the imports (tests/_forked.py).
    results = forked_jobs(_UPDATER, [{"argv": [path, seed, rounds]} for seed in (1, 2)], tmp_path / "jobs",
                          imports=("numpy", "daskpca")).wait(timeout=240)
    assert all(code == 0 for code, _, _ in results), results
    assert daskpca.load(path).n_samples_ == 100 + 2 * rounds * 10


_REPLACER = """
import sys
import numpy as np
import daskpca
X = np.random.default_rng(0).standard_normal((60, 5))
X -= X.mean(axis=0)
print("ready", flush=True)
for i in range(int(sys.argv[2])):
    k = 1 + i % 4
    daskpca.PCA(k).fit(X + 10.0 * k).save(sys.argv[1], overwrite=True)
"""


def test_loads_while_another_process_replaces_the_model_read_one_whole_version(tmp_path):
    # Each saved version is recognisable (k components, mean 10·k): a load racing the swaps
    # returns one of them whole — never an error, never parts of two versions.
    path = tmp_path / "m.zarr"
    X = np.random.default_rng(0).standard_normal((60, 5))
    PCA(1).fit(X - X.mean(axis=0) + 10.0).save(path)  # data with variance (a constant field is refused)
    writer = subprocess.Popen([sys.executable, "-c", _REPLACER, str(path), "40"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    assert writer.stdout.readline() == "ready\n"
    loads = 0
    while writer.poll() is None:
        model = daskpca.load(path)
        np.testing.assert_allclose(model.mean_, 10.0 * model.n_components_, atol=1e-9)
        loads += 1
    assert writer.returncode == 0, writer.stderr.read()
    assert loads >= 5


def test_a_job_that_fails_before_writing_leaves_no_folders_its_claim_made(tmp_path, source, capsys):
    # Issue 23: the claim made the output's missing parent folders and a failed job left them.
    deep = tmp_path / "new" / "deeper"
    code = cli.main(["fit", str(source), "--n-components", "99", "--out", str(deep / "m.zarr"),
                     "--scores", str(tmp_path / "other" / "s.zarr"), "--quiet"])
    assert code == 2, capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # neither the claims nor their folders
    (tmp_path / "kept").mkdir()  # a folder that was there before is never removed
    acquire(tmp_path / "kept" / "a" / "m.zarr").release()
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == ["kept"]
    assert cli.main(["fit", str(source), "--n-components", "2", "--out", str(deep / "m.zarr"), "--quiet"]) == 0
    assert daskpca.load(deep / "m.zarr").n_components_ == 2  # a published output keeps its folders


def test_break_claim_on_a_claim_whose_pid_was_reused_clears_it_like_a_plain_rerun(tmp_path, caplog):
    # The pid is alive, but it is a later process's (its start time differs): the holder is dead.
    from daskpca.store.claims import _process_identity

    target = tmp_path / "m.zarr"
    reused = {"token": "r", "pid": os.getpid(), "host": os.uname().nodename, "started": time.time() - 60,
              "command": "daskpca fit reused", **_process_identity(os.getpid())}
    reused["pid_start"] -= 1
    for break_stale in (False, True):
        with open(claim_location(target), "w") as handle:
            json.dump(reused, handle)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="daskpca"):
            acquire(target, break_stale=break_stale).release()
        assert "'daskpca fit reused'" in caplog.text and "no longer running" in caplog.text
        assert not os.path.exists(claim_location(target))
