"""The tables of docs/scaling.md, from the solver models (part of :mod:`benchmarks.traffic`).

The formulas checked against the recorded graphs (:func:`check_rows`), the node formulas, the
10 TB example arrays (:data:`EXAMPLES`, and the assumptions next to them), the largest d per
memory, the single-node crossover, tree_reduce's crossings, and :func:`update_doc`, which writes
the tables into the doc's ``<!-- traffic.py:NAME -->`` blocks.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

from dask.utils import key_split

from daskpca import _plan

from .traffic_model import NotATreePass, PassShape, SizeFormula, tree_structure, predicted_step, tree_step
from .traffic_place import PLACEMENTS, simulate
from .traffic_record import PROXIES, SOLVERS


def fmt_bytes(n: float) -> str:
    """Bytes with a decimal unit (the doc speaks of a 10 TB array)."""
    for unit in ("B", "kB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000 or unit == "PB":
            break
        n /= 1000
    return f"{n:.0f} B" if unit == "B" else f"{n:.3g} {unit}"


def fmt_time(seconds: float) -> str:
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.2g} s"


def check_rows(models: dict, workers=(1, 4, 16)) -> list[list]:
    """Measured (simulated real graph of the ``check`` proxy) vs formula, per pass, W and placement."""
    rows = []
    for solver, model in models.items():
        recording = model.check
        for n_workers, placement in itertools.product(workers, PLACEMENTS):
            if n_workers == 1 and placement != PLACEMENTS[0]:
                continue  # one worker: nothing to place
            measured = simulate(recording.steps, n_workers, placement)
            for index, (step, traffic) in enumerate(zip(recording.steps, measured)):
                if not step.reads_input:
                    continue
                row = [solver, index + 1, n_workers, placement, traffic.between_workers]
                try:
                    formula = predicted_step(model, step.signature(), PROXIES["check"]["blocks"], recording.symbols,
                                             n_workers, placement)
                except NotATreePass:
                    rows.append([*row, "not a tree pass", "", "", ""])
                    continue
                ratio = formula.between_workers / traffic.between_workers if traffic.between_workers else 1.0 + formula.between_workers
                rows.append([*row, formula.between_workers, f"{ratio:.3f}",
                             traffic.task_specs + traffic.client_data, formula.task_specs + formula.client_data])
    return rows


def check_summary(rows: list[list]) -> list[list]:
    """Per solver: cases checked (pass × W × placement) and the worst formula / measured ratio."""
    summary: dict = {}
    for solver, _, _, _, measured, _, ratio, *_ in rows:
        cases, worst, moved = summary.get(solver, (0, 1.0, 0))
        ratio = float(ratio) if ratio else math.inf
        summary[solver] = (cases + 1, max(worst, ratio, key=lambda r: abs(r - 1)), max(moved, measured))
    return [[solver, cases, f"{worst:.3f}", moved] for solver, (cases, worst, moved) in summary.items()]


def formula_rows(models: dict) -> list[list]:
    """Node formulas per solver and task kind, and what dask.sizeof believes they weigh."""
    rows = []
    for solver, model in models.items():
        tasks = [t for s in model.fit.steps for t in s.tasks.values()]
        for kind, (out, spec) in model.formulas.items():
            of_kind = [t for t in tasks if t.kind == kind]
            if not of_kind:  # a pass's shared arrays: one data key, sent once to each worker
                rows.append([solver, kind, str(out), "— (a key)", "—"])
                continue
            largest = max(of_kind, key=lambda t: t.out_bytes)
            rows.append([solver, kind, str(out), str(spec), f"{largest.sizeof_bytes} / {largest.out_bytes}"])
    return rows


#: The 10 TB float32 arrays of docs/scaling.md: shape, layout, rows (or columns) per block of
#: 250 MB.
EXAMPLES = {
    "tall 2.5e9 × 1e3": dict(n=2_500_000_000, d=1_000, layout="rows", block=62_500),
    "wide 2.5e7 × 1e5": dict(n=25_000_000, d=100_000, layout="rows", block=625),
    "short-fat 2e4 × 1.25e8": dict(n=20_000, d=125_000_000, layout="columns", block=3_125),
}
EXAMPLE_K, EXAMPLE_OVERSAMPLES, EXAMPLE_WORKERS, EXAMPLE_THREADS = 20, 10, 100, 2
#: Power iterations of the example (what n_power_iter="auto" picks for k ≪ min(n, d)) and
#: ALS / PPCA iterations (they depend on the spectrum: an assumption).
EXAMPLE_ITERATIONS = {"randomized": 7, "als": 30, "ppca": 30}
#: Network bandwidth per worker: an assumption (not measurable here), 10 Gbit/s.
NETWORK = 1.25e9


def _example(ex: dict) -> tuple[int, dict, tuple]:
    """(blocks, symbol values, chunks) of an example array."""
    n, d, block = ex["n"], ex["d"], ex["block"]
    values = {"n": n, "d": d, "k": EXAMPLE_K, "ℓ": EXAMPLE_K + EXAMPLE_OVERSAMPLES, "n_i": block, "d_j": block}
    if ex["layout"] == "rows":
        return math.ceil(n / block), values, ((block,), (d,))
    return math.ceil(d / block), values, ((n,), (block,))


def _tree_size(n_blocks: int, split_every: int) -> tuple[int, int]:
    """(levels, merge tasks) of tree_reduce over ``n_blocks`` blocks."""
    merges = [key for key in tree_structure(n_blocks, True, split_every)[0] if key_split(key) == "merge"]
    return len({key[0] for key in merges}), len(merges)


def _single_node(solver: str, ex: dict, rates: dict, n_blocks: int) -> tuple[float, float, str]:
    """(seconds, bytes, description) of the solver's step on one node, from measured rates.

    For TSQR the merge tree is added: every merge is a QR of two stacked d×d R factors, and the
    levels run one after another, so it takes at least max(levels, merges / threads) QR times.
    """
    if solver not in rates["client"]:
        return 0.0, 0.0, "QR/SVD of a d×ℓ matrix: O(d·ℓ²), under a second"
    side = ex["n"] if solver == "gram" else ex["d"]
    per_cube, per_square = rates["client"][solver]
    seconds, memory = per_cube * side**3, per_square * 8 * side**2
    what = {"covariance": f"eigh of {side:.3g}² (k = {EXAMPLE_K})", "gram": f"eigh of {side:.3g}²",
            "tsqr": f"SVD of R {side:.3g}²"}[solver]
    if solver == "tsqr":
        from daskpca.solvers import tsqr

        levels, merges = _tree_size(n_blocks, tsqr.MERGE_SPLIT_EVERY)
        qr_s = rates["tsqr_merge"] * side**3
        tree = qr_s * max(levels, merges / (EXAMPLE_WORKERS * EXAMPLE_THREADS))
        return seconds + tree, memory, f"{what} {fmt_time(seconds)}; merge tree {fmt_time(tree)} ({merges} QRs of 2d×d, {fmt_time(qr_s)} each, {levels} levels)"
    return seconds, memory, f"{what}: {fmt_time(seconds)}"


def example_rows(models: dict, rates: dict, workers: int = EXAMPLE_WORKERS) -> tuple[list, list]:
    """Per example array: one row per solver pass kind, and one row of totals per solver.

    Byte counts are given for both :data:`PLACEMENTS` as "contiguous / round-robin".
    """
    def both(values):
        return " / ".join(fmt_bytes(v) for v in values)

    pass_rows, total_rows = [], []
    for name, ex in EXAMPLES.items():
        blocks, values, chunks = _example(ex)
        estimates = {e.name: e for e in _plan.estimate_solvers(ex["n"], ex["d"], EXAMPLE_K, chunks, 4, EXAMPLE_OVERSAMPLES,
                                                               n_power_iter=EXAMPLE_ITERATIONS["randomized"], available=SOLVERS)}
        read_per_worker = ex["n"] * ex["d"] * 4 / workers
        for solver, model in models.items():
            if (solver == "gram") != (ex["layout"] == "columns"):
                continue  # gram reads column strips (n ≪ d); the others row blocks
            passes = model.passes(EXAMPLE_ITERATIONS.get(solver, 0))
            moved, received = [0, 0], [0, 0]
            specs = data = client = task = 0
            for signature, count in passes.items():
                traffic = [predicted_step(model, signature, blocks, values, workers, p) for p in PLACEMENTS]
                pass_rows.append([name, solver, f"{model.shapes()[signature].leaf} × {count}",
                                  both(t.between_workers for t in traffic), both(t.received_max for t in traffic),
                                  fmt_bytes(traffic[0].task_specs), fmt_bytes(traffic[0].client_data), fmt_bytes(traffic[0].to_client),
                                  fmt_bytes(traffic[0].largest_task)])
                moved = [m + count * t.between_workers for m, t in zip(moved, traffic)]
                received = [r + count * t.received_max for r, t in zip(received, traffic)]
                specs += count * traffic[0].task_specs
                data += count * traffic[0].client_data
                client += count * traffic[0].to_client
                task = max(task, traffic[0].largest_task)
            n_passes = sum(passes.values())
            estimate = estimates[solver]
            iterations = EXAMPLE_ITERATIONS[solver] if solver in ("als", "ppca") else 1  # their flops are per iteration
            flops_per_pass = estimate.flops * iterations / n_passes
            kernel = {"covariance": "syrk", "gram": "syrk", "tsqr": "qr"}.get(solver, "gemm")
            pass_s = max(read_per_worker / (rates["read"] * EXAMPLE_THREADS),
                         flops_per_pass / (rates[kernel] * workers * EXAMPLE_THREADS))
            _, local_bytes, local = _single_node(solver, ex, rates, blocks)
            total_rows.append([
                name, solver, n_passes, fmt_bytes(n_passes * read_per_worker), both(moved), fmt_bytes(specs), fmt_bytes(data), fmt_bytes(client),
                f"{fmt_bytes(estimate.task_bytes)} / {fmt_bytes(task)}",
                f"{fmt_time(n_passes * pass_s)} (+{fmt_time(received[0] / NETWORK)} / {fmt_time(received[1] / NETWORK)})",
                f"{local}; {fmt_bytes(local_bytes)}" if local_bytes else local,
            ])
    return pass_rows, total_rows


MEMORIES = (8, 32, 128, 512)  # GB of memory per worker thread


def _largest(test) -> int:
    """Largest positive integer for which ``test`` holds, 0 if none (``test`` is monotone)."""
    low, high = 0, 10**12
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if test(mid) else (low, mid)
    return low


def largest_rows(models: dict, rates: dict, block_bytes: float = 250e6) -> list[list]:
    """Largest d (n for gram) whose largest task fits ``TASK_MEMORY_FRACTION`` of a worker
    thread's memory: by the planner's model, and by the recorded graph's lower bound (inputs +
    result of the largest task, from the node formulas on a 64-block tree). 250 MB input blocks,
    k = 20, ℓ = 30; gram with d = 1e9 columns (its second pass's tasks read the whole mean, 8·d).
    "none" when no side fits. Then the largest side of the exact solvers' step on a client of
    that memory.
    """

    def sizes(solver, side):
        if solver == "gram":
            n, d, block = side, 10**9, max(1, int(block_bytes / (4 * side)))
            chunks = ((n,), (block,))
        else:
            n, d, block = 10**10, side, max(1, int(block_bytes / (4 * side)))
            chunks = ((block,), (d,))
        values = {"n": n, "d": d, "k": EXAMPLE_K, "ℓ": EXAMPLE_K + EXAMPLE_OVERSAMPLES, "n_i": block, "d_j": block}
        return n, d, chunks, values

    def planner_fits(solver, side, budget):
        n, d, chunks, _ = sizes(solver, side)
        (estimate,) = _plan.estimate_solvers(n, d, EXAMPLE_K, chunks, 4, EXAMPLE_OVERSAMPLES, budget=budget, available=(solver,))
        return estimate.feasible

    def graph_fits(model, side, budget):
        _, _, _, values = sizes(model.solver, side)
        return all(predicted_step(model, signature, 64, values, 1).largest_task <= budget for signature in model.shapes())

    rows = []
    for solver, model in models.items():
        row = [f"{solver} ({'n' if solver == 'gram' else 'd'})"]
        for memory in MEMORIES:
            budget = _plan.TASK_MEMORY_FRACTION * memory * 1e9
            planner = _largest(lambda side: planner_fits(solver, side, budget))
            graph = _largest(lambda side: graph_fits(model, side, budget))
            row.append(" / ".join(f"{side:.3g}" if side else "none" for side in (planner, graph)))
        rows.append(row)
    for solver, (_, per_square) in rates["client"].items():
        rows.append([f"client: {solver} step ({'n' if solver == 'gram' else 'd'})"] +
                    [f"{math.sqrt(memory * 1e9 / (8 * per_square)):.3g}" for memory in MEMORIES])
    return rows


def crossover_rows(models: dict, rates: dict, total_bytes: float = 1e13, block_bytes: float = 250e6) -> list[list]:
    """For a 10 TB float32 array on the example cluster: the side (d, or n for gram) from which
    the exact solvers' single-node step takes longer than all their distributed passes."""
    cores = EXAMPLE_WORKERS * EXAMPLE_THREADS
    read_s = total_bytes / EXAMPLE_WORKERS / (rates["read"] * EXAMPLE_THREADS)
    blocks = int(total_bytes / block_bytes)
    rows = []
    for solver in ("covariance", "tsqr", "gram"):
        if solver not in models:
            continue

        def distributed(side):
            other = int(total_bytes / 4 / side)
            n, d = (side, other) if solver == "gram" else (other, side)
            chunks = ((n,), (max(1, int(block_bytes / (4 * n))),)) if solver == "gram" else ((max(1, int(block_bytes / (4 * d))),), (d,))
            (estimate,) = _plan.estimate_solvers(n, d, EXAMPLE_K, chunks, 4, EXAMPLE_OVERSAMPLES, available=(solver,))
            kernel = "qr" if solver == "tsqr" else "syrk"
            return estimate.passes * max(read_s, estimate.flops / estimate.passes / (rates[kernel] * cores))

        def single(side):
            ex = {"n": side, "d": side}
            return _single_node(solver, ex, rates, blocks)[0]

        side = _largest(lambda s: single(s) < distributed(s))
        rows.append([solver, f"{side:.3g}", fmt_time(distributed(side)), fmt_bytes(rates["client"][solver][1] * 8 * side**2)])
    return rows


def tree_rows(blocks=(40_000, 4_000), workers=(10, 100, 1000)) -> list[list]:
    """Crossings of one tree_reduce pass (leaf results + merge results; the busiest worker's
    count in brackets) for several B and W, both placements."""
    unit = (SizeFormula((), 1), SizeFormula((), 0))
    formulas = {"read": unit, "leaf": unit, "merge": unit}
    rows = []
    for n_blocks, placement in itertools.product(blocks, PLACEMENTS):
        step = tree_step(PassShape("read", "leaf", "merge"), n_blocks, formulas, {})
        row = [n_blocks, placement]
        for n_workers in workers:
            (traffic,) = simulate([step], n_workers, placement)
            leaf, merge = (traffic.crossings.get(kind, (0, 0))[0] for kind in ("leaf", "merge"))
            row.append(f"{leaf} + {merge} ({traffic.received_max})")
        rows.append(row)
    return rows


def update_doc(path: Path, blocks: dict) -> None:
    """Replace each ``<!-- traffic.py:NAME -->`` … ``<!-- /traffic.py:NAME -->`` block of ``path``."""
    text = path.read_text()
    for name, body in blocks.items():
        begin, end = f"<!-- traffic.py:{name} -->", f"<!-- /traffic.py:{name} -->"
        if begin not in text or end not in text:
            raise ValueError(f"{path} has no {begin} … {end} block")
        head, rest = text.split(begin, 1)
        text = f"{head}{begin}\n{body}\n{end}{rest.split(end, 1)[1]}"
    path.write_text(text)
