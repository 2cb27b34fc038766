"""Resumable iterative solvers: a fit killed mid-way and rerun resumes from its checkpoint,
reads less, and ends bit-for-bit where an uninterrupted fit ends."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest

import daskpca
from daskpca import PCA, cli
from daskpca.exceptions import CheckpointWarning
from daskpca.store.checkpoint import Checkpoint, job_fingerprint
from daskpca.passes import _sketch
from daskpca.solvers import als, ppca

from _helpers import low_rank_data, write_zarr


@pytest.fixture(autouse=True)
def _no_pass_cache():
    """These tests count each pass's reads of the source: the pass cache (on by default, see
    tests/test_pass_cache.py) would serve passes 2+ from the first read's blocks."""
    with dask.config.set({"daskpca.cache": False}):
        yield

SHAPE, CHUNKS = (600, 30), (100, 30)
N_CHUNKS = 6
#: Where each solver's passes call dask (the randomized passes are the sketch kernel's).
MODULES = {"randomized": _sketch, "als": als, "ppca": ppca}


class Killed(Exception):
    """Stands for the job being killed in the middle of a pass."""


class _DaskThatDies:
    """The solver module's ``dask``, dying when the ``fail_on``-th pass is launched."""

    def __init__(self, fail_on):
        self.fail_on, self.calls = fail_on, 0

    def __getattr__(self, name):
        return getattr(dask, name)

    def _launch(self):
        self.calls += 1
        if self.calls == self.fail_on:
            raise Killed(f"killed at pass {self.calls}")

    def compute(self, *args, **kwargs):
        self._launch()
        return dask.compute(*args, **kwargs)

    def persist(self, *args, **kwargs):
        self._launch()
        return dask.persist(*args, **kwargs)


def _data(solver, seed=1, n=SHAPE[0]):
    X = low_rank_data(n, SHAPE[1], seed=seed)
    if solver == "ppca":  # exercise the missing-value path too
        X[np.random.default_rng(seed).random(X.shape) < 0.02] = np.nan
    return X


def _open(tmp_path, X, label="x"):
    """The data as a zarr-backed dask array whose chunk reads are counted (fixed dask name:
    a CountingStore cannot be hashed, and the name is part of the job's identity)."""
    array, store = write_zarr(tmp_path / f"{label}.zarr", X, CHUNKS)
    return da.from_zarr(array, name=f"checkpoint-test-{label}"), store


def _fit(X, solver, checkpoint, **params):
    with dask.config.set(scheduler="threads"):
        return PCA(3, solver=solver, random_state=0, checkpoint=checkpoint, **params).fit(X)


def _killed_fit(monkeypatch, X, solver, checkpoint, fail_on, **params):
    with monkeypatch.context() as patch:
        patch.setattr(MODULES[solver], "dask", _DaskThatDies(fail_on))
        with pytest.raises(Killed):
            _fit(X, solver, checkpoint, **params)


@pytest.mark.parametrize("solver, fail_on", [("randomized", 5), ("als", 5), ("ppca", 5)])
def test_rerun_resumes_and_equals_the_uninterrupted_fit(tmp_path, monkeypatch, solver, fail_on):
    X, store = _open(tmp_path, _data(solver))
    path = tmp_path / "job.checkpoint.npz"
    full = _fit(X, solver, path)  # checkpointing along the way changes nothing
    assert not path.exists()  # removed when the fit completes
    assert set(store.chunk_reads().values()) == {full.n_passes_}
    assert full.solver_info_["resumed_from_pass"] is None
    assert full.solver_info_["total_passes"] == full.n_passes_

    _killed_fit(monkeypatch, X, solver, path, fail_on)
    assert path.exists()
    with np.load(path) as saved:  # small state only: nothing n-sized
        assert max(saved[key].size for key in saved.files) <= SHAPE[1] * 13
        assert all(SHAPE[0] not in saved[key].shape for key in saved.files)

    store.reads.clear()
    resumed = _fit(X, solver, path)
    info = resumed.solver_info_
    assert info["resumed_from_pass"] == (4 if solver == "randomized" else fail_on - 1)
    assert resumed.n_passes_ == full.n_passes_ - info["resumed_from_pass"]
    assert info["total_passes"] == full.n_passes_
    reads = store.chunk_reads()
    assert len(reads) == N_CHUNKS and set(reads.values()) == {resumed.n_passes_}  # fewer reads
    assert not path.exists()
    for name in ("components_", "explained_variance_", "mean_", "total_variance_", "noise_variance_"):
        np.testing.assert_array_equal(getattr(resumed, name), getattr(full, name), err_msg=name)  # bit-for-bit
    assert {k: v for k, v in info.items() if k not in ("resumed_from_pass",)} == {
        k: v for k, v in full.solver_info_.items() if k not in ("resumed_from_pass",)
    }


def test_resume_again_after_a_second_kill(tmp_path, monkeypatch):
    X, _ = _open(tmp_path, _data("als"))
    path = tmp_path / "job.npz"
    full = _fit(X, "als", None)
    _killed_fit(monkeypatch, X, "als", path, 4)  # saved after pass 3
    _killed_fit(monkeypatch, X, "als", path, 5)  # resumed at 3, saved after 7
    resumed = _fit(X, "als", path)
    assert resumed.solver_info_["resumed_from_pass"] == 7
    assert resumed.n_passes_ == full.n_passes_ - 7
    np.testing.assert_array_equal(resumed.components_, full.components_)


@pytest.mark.parametrize(
    "change",
    [
        {"n_components": 2},  # other parameters
        {"max_iter": 150},
        {"random_state": 1},
        {"solver": "ppca"},  # another solver's state
        {"rows": 500},  # another input shape
    ],
)
def test_checkpoint_of_another_job_is_ignored(tmp_path, monkeypatch, change):
    X, _ = _open(tmp_path, _data("als"))
    path = tmp_path / "job.npz"
    _killed_fit(monkeypatch, X, "als", path, 4)
    other = X[: change["rows"]] if "rows" in change else X
    params = dict(n_components=3, solver="als", random_state=0, checkpoint=path)
    params.update({k: v for k, v in change.items() if k != "rows"})
    with dask.config.set(scheduler="threads"):
        fresh = PCA(**{**params, "checkpoint": None}).fit(other)
        with pytest.warns(CheckpointWarning, match="not resumed: the (job|input) differs.* changed"):
            pca = PCA(**params).fit(other)
    assert pca.solver_info_["resumed_from_pass"] is None
    assert pca.n_passes_ == fresh.n_passes_
    np.testing.assert_array_equal(pca.components_, fresh.components_)
    assert not path.exists()


def test_unreadable_checkpoint_is_ignored(tmp_path):
    X, _ = _open(tmp_path, _data("als"))
    path = tmp_path / "job.npz"
    path.write_bytes(b"not a zip file")
    pca = _fit(X, "als", path)
    assert pca.solver_info_["resumed_from_pass"] is None and not path.exists()


def test_checkpoint_round_trip_and_fingerprint(tmp_path):
    X = da.zeros((10, 4), chunks=(5, 4))
    store = Checkpoint(tmp_path / "c.npz", job_fingerprint(X, solver="als", k=2))
    assert store.load() is None
    store.save({"basis": np.arange(8.0).reshape(4, 2), "passes": 3, "sigma2": 0.1})
    state = store.load()
    assert store.resumed_from == 3 and state["passes"] == 3 and state["sigma2"] == 0.1
    np.testing.assert_array_equal(state["basis"], np.arange(8.0).reshape(4, 2))
    with pytest.warns(CheckpointWarning, match="the job differs: k changed"):
        assert Checkpoint(tmp_path / "c.npz", job_fingerprint(X, solver="als", k=3)).load() is None
    # The same input in other tasks (a --workers change regroups them) is said as such, not "another job".
    store.save({"passes": 3})
    with pytest.warns(CheckpointWarning, match=r"split into other tasks .*--workers") as caught:
        assert Checkpoint(tmp_path / "c.npz", job_fingerprint(X.rechunk((10, 4)), solver="als", k=2)).load() is None
    assert "another job" not in str(caught[0].message)
    store.save({"passes": 3})
    with pytest.warns(CheckpointWarning, match="the input changed"):
        assert Checkpoint(tmp_path / "c.npz", job_fingerprint(X, solver="als", k=2), "other").load() is None
    assert not list(tmp_path.glob(".*.tmp.npz"))  # the temporary was renamed into place
    store.clear()
    assert not (tmp_path / "c.npz").exists()


def test_checkpoint_must_be_a_local_path():
    X = da.from_array(low_rank_data(100, 10), chunks=(50, 10))
    with pytest.raises(ValueError, match="local"):
        PCA(2, solver="als", checkpoint="s3://bucket/c.npz").fit(X)
    with pytest.raises(TypeError, match="checkpoint"):
        PCA(2, solver="als", checkpoint=3).fit(X)


# ---------------------------------------------------------------- a real SIGKILL of the CLI


def _cli(src, out, *extra):
    return [sys.executable, "-m", "daskpca.cli", "fit", str(src), "--n-components", "3", "--solver", "als",
            "--out", str(out), "--random-state", "0", "--workers", "1", "--max-iter", "20", "--tol", "0",
            "--json", "--quiet", *extra]


def _run(command, **kwargs):
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **kwargs)


def test_cli_fit_killed_with_sigkill_resumes(tmp_path, capsys):
    import zarr

    rng = np.random.default_rng(0)
    X = rng.standard_normal((2_000, 40)) * np.linspace(2.0, 1.0, 40) + 5.0  # small eigengaps: slow ALS
    zarr.create_array(store=str(tmp_path / "src.zarr"), shape=X.shape, chunks=(250, 40), dtype="f8")[...] = X
    src, model, reference = tmp_path / "src.zarr", tmp_path / "model.zarr", tmp_path / "reference.zarr"
    checkpoint = Path(f"{model}.checkpoint.npz")

    victim = _run(_cli(src, model))
    try:
        deadline = time.monotonic() + 60
        while not checkpoint.exists() and victim.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert checkpoint.exists(), "the fit never wrote a checkpoint"
        os.killpg(victim.pid, signal.SIGKILL)  # the CLI and its local cluster's workers
        victim.wait(timeout=30)
    finally:
        if victim.poll() is None:
            os.killpg(victim.pid, signal.SIGKILL)
    assert victim.returncode == -signal.SIGKILL
    assert checkpoint.exists() and not model.exists()  # killed mid-fit

    rerun = subprocess.run(_cli(src, model), capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    # The uninterrupted fit: the same command in this process, on threads (an interpreter and a
    # cluster less; every task is a pure function of its inputs, so where it runs does not
    # change a bit), with the pass cache as a fresh process has it.
    argv = _cli(src, reference)[3:]
    del argv[argv.index("--workers"):argv.index("--workers") + 2]
    capsys.readouterr()
    with dask.config.set({"daskpca.cache": "auto"}):  # undo this file's autouse fixture
        assert cli.main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert not checkpoint.exists()

    summary, reference_summary = json.loads(rerun.stdout), json.loads(out)
    assert summary["n_passes"] < reference_summary["n_passes"] == 20
    assert summary["resumed_from_pass"] >= 1 and reference_summary["resumed_from_pass"] is None
    resumed, full = daskpca.load(model), daskpca.load(reference)
    assert resumed.solver_info_["resumed_from_pass"] >= 1
    assert resumed.solver_info_["total_passes"] == 20
    assert full.solver_info_["resumed_from_pass"] is None
    for name in ("components_", "explained_variance_", "mean_"):
        a, b = getattr(resumed, name), getattr(full, name)
        assert np.max(np.abs(a - b)) <= 1e-10 * np.max(np.abs(b)), name


def _krylov(X, checkpoint):
    with dask.config.set(scheduler="threads"):
        return PCA(3, solver="krylov", tol=1e-9, random_state=0, checkpoint=checkpoint).fit(X)


@pytest.mark.parametrize("rewritten", [False, True], ids=["unchanged", "rewritten-in-place"])
def test_krylov_resumes_only_over_the_input_it_checkpointed(tmp_path, monkeypatch, rewritten):
    # Issue 23: a Krylov fit killed after one pass, its input rewritten in place (same shape,
    # chunks, dtype: same dask name), resumed from the old data's state and published a wrong
    # model silently. The checkpoint now carries the input's storage stats: a changed input
    # starts afresh with a warning; an unchanged one resumes and says so.
    import warnings

    import zarr

    from _helpers import reference_pca, sin_theta

    old, new = low_rank_data(*SHAPE, seed=1), low_rank_data(*SHAPE, seed=2)
    source, path = str(tmp_path / "x.zarr"), tmp_path / "job.checkpoint.npz"
    zarr.create_array(store=source, shape=SHAPE, chunks=CHUNKS, dtype="f8")[...] = old
    with monkeypatch.context() as patch:
        patch.setattr(_sketch, "dask", _DaskThatDies(2))  # Krylov's passes run through the sketch kernel's run_pass
        with pytest.raises(Killed):
            _krylov(source, path)
    assert path.exists()  # saved after pass 1
    if rewritten:
        zarr.open_array(source, mode="r+")[...] = new
        with pytest.warns(CheckpointWarning, match=r"job.checkpoint.npz' is not resumed: the input changed"):
            pca = _krylov(source, path)
        assert pca.solver_info_["resumed_from_pass"] is None
        fresh = _krylov(source, None)
        np.testing.assert_array_equal(pca.components_, fresh.components_)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("error", CheckpointWarning)
            pca = _krylov(source, path)
        assert pca.solver_info_["resumed_from_pass"] == 1
    data = new if rewritten else old
    assert sin_theta(pca.components_, reference_pca(data)[0][:3]) <= 1e-7
    assert not path.exists()
