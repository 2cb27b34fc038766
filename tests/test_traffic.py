"""benchmarks.traffic: the recording scheduler and the placement simulation behind docs/scaling.md.

Each test records a real small fit and checks the simulation on cases small enough to place by
hand, then that the node formulas plus tree_reduce's structure reproduce a real recorded graph.
"""

from __future__ import annotations

from benchmarks.traffic_model import SolverModel, predicted_step, size_formulas
from benchmarks.traffic_place import PLACEMENTS, simulate
from benchmarks.traffic_record import PROXIES, proxy_array, record_fit, record_solver


def _covariance_recording(folder, n_blocks, n_rows=20, d=12):
    X = proxy_array(folder, n_blocks * n_rows, d, (n_rows, d))
    return record_fit(X, "covariance", 3, dict(n=n_blocks * n_rows, d=d, n_i=n_rows, k=3))


def _merges(step):
    return sorted((t for t in step.tasks.values() if t.kind == "covariance-merge"), key=lambda t: t.key)


def test_one_pass_one_step_and_one_worker_moves_nothing(tmp_path):
    recording = _covariance_recording(tmp_path, 8)
    assert recording.n_passes == 1
    assert [s.reads_input for s in recording.steps] == [True]
    (step,) = simulate(recording.steps, 1)
    assert step.between_workers == 0
    # The client still ships the zarr handle and the task specs, and gets the merged moments.
    (merge,) = _merges(recording.steps[0])
    assert step.to_client == merge.out_bytes
    assert step.client_data > 0 and step.task_specs > 0


def test_covariance_on_two_workers_by_hand(tmp_path):
    d = 12
    # 8 blocks: one merge of all 8 leaves. Blocks 0-3 on worker 0, 4-7 on worker 1; the merge
    # holds 4 leaves' bytes on each, the tie goes to worker 0, so 4 leaf results cross.
    recording = _covariance_recording(tmp_path, 8, d=d)
    step = recording.steps[0]
    leaves = [t for t in step.tasks.values() if t.kind == "covariance-chunk"]
    (moved,) = simulate([step], 2)
    assert moved.between_workers == 4 * leaves[0].out_bytes
    assert moved.crossings == {"covariance-chunk": (4, 4 * leaves[0].out_bytes)}
    # Each crossing result is a d×d float64 scatter plus the mean and pickling overhead, and the
    # node formula names it so from the recorded arrays' shapes.
    assert 8 * d * d <= leaves[0].out_bytes <= 8 * d * d + 8 * d + 1000
    out, _ = size_formulas(recording)["covariance-chunk"]
    assert dict(out.terms) == {("d", "d"): 8, ("d",): 8}

    # 16 blocks: each worker merges its own 8 leaves; only one merge result crosses to the root.
    step = _covariance_recording(tmp_path, 16, d=d).steps[0]
    first_level = [t for t in _merges(step) if len(t.deps) == 8]
    (moved,) = simulate([step], 2)
    assert len(first_level) == 2
    assert moved.crossings == {"covariance-merge": (1, first_level[1].out_bytes)}
    # Round-robin reads put neighbouring blocks on different workers: half the leaves cross.
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
