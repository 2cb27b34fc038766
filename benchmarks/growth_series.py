"""The growth series: their points (cases), the methods asked for, the planner's estimates and
the run of one point (see :mod:`benchmarks.growth`).

Every point shares :data:`BASE`'s generator parameters; a method name is run by
:mod:`benchmarks.methods` like any ``benchmarks.run`` row.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import sys
import time
from pathlib import Path

from . import cases, runner
from .cases import Case
from .methods import FLOORS

N_VALUES = (100_000, 1_000_000, 10_000_000)  # the n-series, at d = BASE.d
D_VALUES = (100, 500, 1000, 2000, 5000)  # the d-series, at n = D_SERIES_N
D_SERIES_N = 100_000
DEFAULT_METHODS = ("floor-read,floor-gram,daskpca-covariance,daskpca-tsqr,daskpca-randomized-q2,"
                   "daskpca-als,daskpca-ppca")
#: Every point shares the huge case's generator parameters (k, rank, noise, spectrum, seed);
#: only the name, n, d and chunks change, so the n = 1e7 point is that case exactly.
BASE = cases.FULL_CASES["huge"]


# --------------------------------------------------------------------------------------------
# Points and methods
# --------------------------------------------------------------------------------------------


def make_case(n: int, d: int, scale: int = 1) -> Case:
    """The case for nominal size n × d, with n and the chunk rows divided by ``scale``.

    Names carry n, d and the chunk rows: ``ensure_data`` regenerates an array whose stored
    parameters differ, so two different cases must never share a name.
    """
    if scale == 1 and (n, d) == (BASE.n, BASE.d):
        return BASE
    n_s = max(1, n // scale)
    rows = max(1, min(BASE.chunks[0] // scale, n_s))
    return dataclasses.replace(BASE, name=f"growth-{n_s}x{d}-c{rows}", n=n_s, d=d, chunks=(rows, d))


def series_points(series: str, scale: int, n_values, d_values) -> list[tuple[int, Case]]:
    """``(nominal x, case)`` along one series (x = n for the n-series, d for the d-series)."""
    if series == "n":
        return [(n, make_case(n, BASE.d, scale)) for n in n_values]
    return [(d, make_case(D_SERIES_N, d, scale)) for d in d_values]


def select_methods(patterns: str) -> list[str]:
    """Method names from comma-separated names or globs, in the order given, without repeats.

    Globs are matched against the floors and every registered solver (plus randomized with
    q = 1, 2); a plain name is taken as is (``benchmarks.methods`` understands
    ``daskpca-randomized-q<N>``).
    """
    from daskpca.solvers import SOLVERS

    known = [*FLOORS, *(f"daskpca-{s}" for s in SOLVERS),
             "daskpca-randomized-q1", "daskpca-randomized-q2"]
    out = []
    for pat in (p.strip() for p in patterns.split(",")):
        if pat:
            out += [m for m in known if fnmatch.fnmatch(m, pat)] if any(c in pat for c in "*?[") else [pat]
    return list(dict.fromkeys(out))


def parse_max_n(text: str) -> list[tuple[str, float]]:
    """``'daskpca-als=1e6,daskpca-ppca=1e6'`` → ``[('daskpca-als', 1e6), ...]`` (keys may be globs)."""
    caps = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        pat, _, value = item.partition("=")
        caps.append((pat.strip(), float(value)))
    return caps


def solver_of(method: str) -> tuple[str, int | str]:
    """``('randomized', 2)`` for daskpca-randomized-q2(-p20), ``('als', 'auto')`` for daskpca-als(-i10)."""
    solver = method.removeprefix("daskpca-")
    if solver.startswith("randomized-q"):
        return "randomized", int(solver.removeprefix("randomized-q").partition("-p")[0])
    return solver.partition("-i")[0], "auto"


def planner_estimates(case: Case, methods: list[str]) -> dict:
    """The planner's passes / flops / feasibility for each daskpca method, and its own choice."""
    from dask.array.core import normalize_chunks

    from daskpca import _plan
    from daskpca.solvers import SOLVERS

    chunks = normalize_chunks(case.chunks, (case.n, case.d))
    budget, _ = _plan.task_memory_budget()  # what PCA.fit checks a requested solver against
    out = {}
    for method in methods:
        solver, q = solver_of(method)
        if not method.startswith("daskpca-") or solver not in SOLVERS:
            continue
        (e,) = _plan.estimate_solvers(case.n, case.d, case.k, chunks, 4, n_power_iter=q, budget=budget, available=(solver,))
        out[method] = {"passes": e.passes, "flops": e.flops, "feasible": e.feasible, "note": e.note}
    choice = _plan.make_plan(case.n, case.d, case.k, chunks, 4, available=tuple(SOLVERS)).solver
    return {"methods": out, "choice": choice}


# --------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------


def refuse_if_being_written(path: Path, case: Case) -> None:
    """Stop when the array is incomplete and was written to in the last 10 minutes.

    ``ensure_data`` deletes an incomplete array and writes it again: right for a run that was
    interrupted, wrong while another process (e.g. ``benchmarks.run --cases huge``) is still writing it.
    """
    if not path.exists() or cases.is_complete(path, case):
        return
    newest = max((f.stat().st_mtime for f in path.rglob("*")), default=0.0)
    if time.time() - newest < 600:
        sys.exit(f"{path} is incomplete and was written {time.time() - newest:.0f} s ago: another process "
                 "is probably generating it. Wait for it to finish (or delete it if nothing is writing it).")


def run_point(case: Case, x: int, nominal_n: int, methods, caps, args, tmp: Path) -> dict:
    """Generate (or reuse) one point's data and exact answer, then run every method on it."""
    path = cases.data_path(args.data_dir, case)
    refuse_if_being_written(path, case)
    path = cases.ensure_data(args.data_dir, case)
    exact = cases.ensure_exact(args.data_dir, case, path)
    stored = cases.stored_bytes(path)
    cache = runner.prepare_page_cache(path, stored)
    print(f"\n## {case.name}: {case.n} × {case.d}, chunks {case.chunks}, {stored / 1e9:.2f} GB stored ({cache})", flush=True)
    plan = planner_estimates(case, methods)
    rows = []
    for method in methods:
        cap = next((v for pat, v in caps if fnmatch.fnmatch(method, pat)), None)
        est = plan["methods"].get(method)
        if cap is not None and nominal_n > cap:
            row = {"method": method, "status": "skip", "note": f"n = {nominal_n:.0e} > --max-n {cap:.0e}"}
        elif est is not None and not est["feasible"]:  # PCA.fit would refuse it at once
            row = {"method": method, "status": "skip", "note": "the planner says it does not fit in a task's memory"}
        else:
            row = runner.run_scored(method, case, path, exact, args, tmp)
        rows.append(row)
        wall = f"{row['wall']:.2f} s" if row.get("status") == "ok" else ""
        print(f"  {method}: {row.get('status')} {wall} {str(row.get('note') or '')[:160]}".rstrip(), flush=True)
    return {"x": x, "case": case.params(), "stored_bytes": stored, "cache": cache, "plan": plan, "rows": rows}
