"""benchmarks.traffic: the recording scheduler and the placement simulation behind docs/scaling.md.

Each test records a real small fit and checks the simulation on cases small enough to place by
hand, then that the node formulas plus tree_reduce's structure reproduce a real recorded graph.
"""

from __future__ import annotations

import dask
import pytest

from benchmarks.traffic_model import SolverModel, predicted_step, size_formulas
from benchmarks.traffic_place import PLACEMENTS, simulate
from benchmarks.traffic_record import PROXIES, proxy_array, record_fit, record_solver


@pytest.fixture(autouse=True)
def _no_pass_cache():
    """The recorded graphs and the traffic formulas are those of uncached passes (the pass cache,
    tests/test_pass_cache.py, keeps the first read's blocks on the workers instead)."""
    with dask.config.set({"daskpca.cache": False}):
        yield


def _covariance_recording(folder, n_blocks, n_rows=20, d=12):
    X = proxy_array(folder, n_blocks * n_rows, d, (n_rows, d))
    return record_fit(X, "covariance", 3, dict(n=n_blocks * n_rows, d=d, n_i=n_rows, k=3))


def _merges(step):
    return sorted((t for t in step.tasks.values() if t.kind == "covariance-merge"), key=lambda t: t.key)


def _root(step):
    """The merge no other merge depends on (the tree's root, whose result goes to the client)."""
    merges = _merges(step)
    used = {dep for t in merges for dep in t.deps}
    (root,) = [t for t in merges if t.key not in used]
    return root


def test_one_pass_one_step_and_one_worker_moves_nothing(tmp_path):
    recording = _covariance_recording(tmp_path, 8)
    assert recording.n_passes == 1
    assert [s.reads_input for s in recording.steps] == [True]
    (step,) = simulate(recording.steps, 1)
    assert step.between_workers == 0
    # The client still ships the zarr handle and the task specs, and gets the merged moments.
    assert step.to_client == _root(recording.steps[0]).out_bytes
    assert step.client_data > 0 and step.task_specs > 0


def test_covariance_on_two_workers_by_hand(tmp_path):
    d = 12
    # 8 blocks, merged pairwise (3·d² per merge task): 4 + 2 + 1 merges. Blocks 0-3 on worker 0,
    # 4-7 on worker 1: every merge below the root has both parts on one worker, so nothing
    # crosses until the root, which takes one level-1 result from the other worker.
    recording = _covariance_recording(tmp_path, 8, d=d)
    step = recording.steps[0]
    leaves = [t for t in step.tasks.values() if t.kind == "covariance-chunk"]
    merges = _merges(step)
    assert len(leaves) == 8 and len(merges) == 7 and all(len(t.deps) == 2 for t in merges)
    (moved,) = simulate([step], 2)
    below_root = [t for t in merges if t.key in _root(step).deps]
    assert moved.crossings == {"covariance-merge": (1, below_root[1].out_bytes)}
    # Each leaf result is a d×d float64 scatter plus three d-vectors — the mean and the shift and
    # offset it is carried as, unrounded (passes/_moments.py) — and pickling overhead; the node
    # formula names it so from the recorded arrays' shapes.
    assert 8 * d * d <= leaves[0].out_bytes <= 8 * d * d + 3 * 8 * d + 1000
    out, _ = size_formulas(recording)["covariance-chunk"]
    assert dict(out.terms) == {("d", "d"): 8, ("d",): 3 * 8}
    # Round-robin reads put neighbouring blocks on different workers: one leaf of every first-level
    # merge crosses (8 of 16).
    step = _covariance_recording(tmp_path, 16, d=d).steps[0]
    (moved,) = simulate([step], 2, "round-robin")
    assert moved.crossings["covariance-chunk"][0] == 8


def test_formulas_reproduce_a_recorded_graph_of_other_sizes(tmp_path):
    # Randomized: the solver whose graph changes most often; the formulas come from its code.
    fit = record_solver("randomized", tmp_path, PROXIES["fit"])
    # Ω (d×ℓ float64) is one data key of its own, not in any task spec: it is counted once per
    # worker (with the zarr handle the reads need), whatever the number of tasks.
    step = fit.steps[0]
    (omega,) = step.args()
    d, ell = fit.symbols["d"], fit.symbols["ℓ"]
    assert step.client_data[omega] >= 8 * d * ell > max(t.spec_bytes for t in step.tasks.values())
    for n_workers in (1, 4):
        (moved,) = simulate([step], n_workers)
        assert moved.client_data == n_workers * sum(step.client_data.values())
    check = record_solver("randomized", tmp_path, PROXIES["check"])
    model = SolverModel("randomized", fit, check, size_formulas(fit))
    blocks = PROXIES["check"]["blocks"]
    for placement in PLACEMENTS:
        measured = simulate(check.steps, 4, placement)
        for step, real in zip(check.steps, measured):
            predicted = predicted_step(model, step.signature(), blocks, check.symbols, 4, placement)
            assert predicted.between_workers == real.between_workers
            assert predicted.to_client == real.to_client
            assert predicted.client_data == real.client_data
