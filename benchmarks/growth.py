#!/usr/bin/env python
"""Growth of the fit time in n and in d, and the planner's cost model checked against it.

    python benchmarks/growth.py --series n,d [--methods 'floor-*,daskpca-*'] [--max-n 'daskpca-als=1e6']
                                [--quick | --scale S] [--json out.json] [--plot out.png]
    python benchmarks/growth.py --from-json out.json [--plot out.png]     # re-print / re-plot only

Two series of inputs, made by run.py's generator (low rank + noise, float32 zarr, k = 20):

- **n-series**: d = 1000, chunks (5000, 1000), n = 1e5, 1e6, 1e7. The n = 1e7 point *is*
  run.py's ``FULL_CASES["huge"]`` (40 GB), so the data generated for it is reused.
- **d-series**: n = 1e5, chunks (5000, d), d = 100, 500, 1000, 2000, 5000. Its d = 1000 point is
  the n-series' n = 1e5 point (same data, measured once per run).

Every method of every point runs in a fresh subprocess through run.py's ``run_method_best``
(same timing, memory, pass and sin θ columns; same page-cache rule: warmed unless the array is
larger than half the RAM). Three tables follow:

1. wall seconds per method and point, for each series;
2. per-row cost (wall / n) along the n-series and its largest deviation from the method's mean:
   linear growth means the deviation stays within ±20 %;
3. the cost model: the planner's passes and flops (``daskpca._plan.estimate_solvers``) turned into
   seconds with ``time ≈ passes · t_read + flops / flop_rate``, where ``t_read`` is floor-read's
   wall at the same point (one read of the stored bytes, so ``passes · stored / read_rate``) and
   ``flop_rate`` one machine constant fitted by least squares on the relative error over every
   daskpca row (``--flop-rate gram``: taken from floor-gram instead). Printed per row as
   model / measured, with a line per point saying whether the planner's ranking of the solvers
   (its own order: passes, then flops) and the model's ranking match the measured one.

The iterative solvers (ALS, PPCA) have no predicted pass count ("1/iter") and per-iteration flops
in the planner: the model uses their *measured* passes for them (marked ``*``).
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import run as bench  # noqa: E402  (run.py next to this file: Case, data, exact answer, runner)
from run import markdown_table as table  # noqa: E402

N_VALUES = (100_000, 1_000_000, 10_000_000)  # the n-series, at d = BASE.d
D_VALUES = (100, 500, 1000, 2000, 5000)  # the d-series, at n = D_SERIES_N
D_SERIES_N = 100_000
DEFAULT_METHODS = ("floor-read,floor-gram,daskpca-covariance,daskpca-tsqr,daskpca-randomized-q2,"
                   "daskpca-als,daskpca-ppca")
SPREAD_LIMIT = 0.20  # issue 8: per-row cost within ±20 % from 1e5 to 1e7 rows
#: Every point shares the huge case's generator parameters (k, rank, noise, spectrum, seed);
#: only the name, n, d and chunks change, so the n = 1e7 point is that case exactly.
BASE = bench.FULL_CASES["huge"]


# --------------------------------------------------------------------------------------------
# Points and methods
# --------------------------------------------------------------------------------------------


def make_case(n: int, d: int, scale: int = 1) -> bench.Case:
    """The case for nominal size n × d, with n and the chunk rows divided by ``scale``.

    Names carry n, d and the chunk rows: ``ensure_data`` regenerates an array whose stored
    parameters differ, so two different cases must never share a name.
    """
    if scale == 1 and (n, d) == (BASE.n, BASE.d):
        return BASE
    n_s = max(1, n // scale)
    rows = max(1, min(BASE.chunks[0] // scale, n_s))
    return dataclasses.replace(BASE, name=f"growth-{n_s}x{d}-c{rows}", n=n_s, d=d, chunks=(rows, d))


def series_points(series: str, scale: int, n_values, d_values) -> list[tuple[int, bench.Case]]:
    """``(nominal x, case)`` along one series (x = n for the n-series, d for the d-series)."""
    if series == "n":
        return [(n, make_case(n, BASE.d, scale)) for n in n_values]
    return [(d, make_case(D_SERIES_N, d, scale)) for d in d_values]


def select_methods(patterns: str) -> list[str]:
    """Method names from comma-separated names or globs, in the order given, without repeats.

    Globs are matched against the floors and every registered solver (plus randomized with
    q = 1, 2); a plain name is taken as is (run.py understands ``daskpca-randomized-q<N>``).
    """
    from daskpca.solvers import SOLVERS

    known = ["floor-read", "floor-gram", *(f"daskpca-{s}" for s in SOLVERS),
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


def planner_estimates(case: bench.Case, methods: list[str]) -> dict:
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


def refuse_if_being_written(path: Path, case: bench.Case) -> None:
    """Stop when the array is incomplete and was written to in the last 10 minutes.

    ``ensure_data`` deletes an incomplete array and writes it again: right for a run that was
    interrupted, wrong while another process (e.g. ``run.py --cases huge``) is still writing it.
    """
    if not path.exists() or bench._is_complete(path, case):
        return
    newest = max((f.stat().st_mtime for f in path.rglob("*")), default=0.0)
    if time.time() - newest < 600:
        sys.exit(f"{path} is incomplete and was written {time.time() - newest:.0f} s ago: another process "
                 "is probably generating it. Wait for it to finish (or delete it if nothing is writing it).")


def run_point(case: bench.Case, x: int, nominal_n: int, methods, caps, args, tmp: Path) -> dict:
    """Generate (or reuse) one point's data and exact answer, then run every method on it."""
    path = bench.data_path(args.data_dir, case)
    refuse_if_being_written(path, case)
    path = bench.ensure_data(args.data_dir, case)
    exact = bench.ensure_exact(args.data_dir, case, path)
    stored = bench.stored_bytes(path)
    cache = bench.prepare_page_cache(path, stored)
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
            row = bench.run_method_best(method, case, path, args, tmp)
            comp_file = tmp / f"{case.name}.{method}.npy"
            if row.get("status") == "ok" and comp_file.exists():
                row["sin_theta"] = bench.sin_theta(np.load(comp_file), exact)
                comp_file.unlink()
        rows.append(row)
        wall = f"{row['wall']:.2f} s" if row.get("status") == "ok" else ""
        print(f"  {method}: {row.get('status')} {wall} {str(row.get('note') or '')[:160]}".rstrip(), flush=True)
    return {"x": x, "case": case.params(), "stored_bytes": stored, "cache": cache, "plan": plan, "rows": rows}


# --------------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------------


def fmt_x(x: int) -> str:
    """1e5 for powers of ten, the plain number otherwise."""
    e = math.log10(x) if x > 0 else 0.5
    return f"1e{int(e)}" if e == int(e) and x >= 1000 else str(x)


def ok_rows(point: dict) -> dict:
    return {r["method"]: r for r in point["rows"] if r.get("status") == "ok"}


def methods_of(points: list[dict]) -> list[str]:
    return list(dict.fromkeys(r["method"] for p in points for r in p["rows"]))


def wall_table(name: str, points: list[dict]) -> str:
    header = ["method", *(f"{name}={fmt_x(p['x'])}" for p in points), "worst sin θ"]
    rows = []
    for m in methods_of(points):
        cells, sins = [], []
        for p in points:
            r = next((r for r in p["rows"] if r["method"] == m), None)
            if r is None:
                cells.append("")
            elif r.get("status") == "ok":
                cells.append(f"{r['wall']:.2f}")
                if r.get("sin_theta") is not None and not math.isnan(r["sin_theta"]):
                    sins.append(r["sin_theta"])
            else:
                cells.append(str(r.get("status")))
        rows.append([m, *cells, f"{max(sins):.1e}" if sins else ""])
    return table(header, rows)


def per_row_table(points: list[dict]) -> str:
    """µs per row along the n-series, the largest deviation from the mean and the ±20 % verdict."""
    header = ["method", *(f"n={fmt_x(p['x'])} µs/row" for p in points), "spread", "linear in n (±20 %)"]
    rows = []
    for m in methods_of(points):
        cost = {}
        for p in points:
            r = ok_rows(p).get(m)
            if r is not None:
                cost[p["x"]] = 1e6 * r["wall"] / p["case"]["n"]
        cells = [f"{cost[p['x']]:.3g}" if p["x"] in cost else "" for p in points]
        if len(cost) < 2:
            rows.append([m, *cells, "", "n/a (fewer than 2 points)"])
            continue
        mean = np.mean(list(cost.values()))
        spread = max(abs(c / mean - 1) for c in cost.values())
        span = f"{fmt_x(min(cost))}→{fmt_x(max(cost))}"
        verdict = ("pass" if spread <= SPREAD_LIMIT else "FAIL") + f" over n = {span}"
        rows.append([m, *cells, f"±{100 * spread:.0f} %", verdict])
    return table(header, rows)


def model_inputs(point: dict, method: str):
    """``(passes, total flops, passes came from the measurement)`` for the time model, or None."""
    est = point["plan"]["methods"].get(method)
    row = ok_rows(point).get(method)
    if est is None or row is None:
        return None
    if isinstance(est["passes"], int):
        return est["passes"], est["flops"], False
    if row.get("passes") is None:
        return None
    # "1/iter": the planner cannot know the iterations; its flops are per iteration.
    return row["passes"], est["flops"] * row["passes"], True


def flop_rate(all_points: list[dict], how: str) -> float:
    """Flops per second: fitted over every daskpca row, or the median of floor-gram's.

    The fit minimises Σ ((passes·t_read + F·x) / t − 1)² over x = 1/rate: least squares on the
    *relative* error, so that the slowest point (1e7 rows) does not decide the rate alone.
    """
    if how == "gram":
        rates = []
        for p in all_points:
            ok = ok_rows(p)
            if "floor-read" in ok and "floor-gram" in ok and ok["floor-gram"]["wall"] > ok["floor-read"]["wall"]:
                rates.append(p["case"]["n"] * p["case"]["d"] ** 2 / (ok["floor-gram"]["wall"] - ok["floor-read"]["wall"]))
        return float(np.median(rates)) if rates else math.nan
    a, b = [], []
    for p in all_points:
        ok = ok_rows(p)
        if "floor-read" not in ok:
            continue
        for m in ok:
            inputs = model_inputs(p, m)
            if inputs:
                passes, flops, _ = inputs
                t = ok[m]["wall"]
                a.append(flops / t)
                b.append(1 - passes * ok["floor-read"]["wall"] / t)
    a, b = np.array(a), np.array(b)
    x = float(a @ b / (a @ a)) if len(a) and a @ a > 0 else math.nan
    return 1 / x if x > 0 else math.nan


def model_flop_rate(all_points: list[dict], how: str) -> tuple[float, str]:
    """The flop rate the model uses and where it came from (floor-gram when the fit fails).

    The fit fails (x ≤ 0) when the read term alone already predicts more than the measured
    times, e.g. on tiny inputs where floor-read is mostly scheduling overhead.
    """
    rate = flop_rate(all_points, how)
    if how == "fit" and not rate > 0:
        return flop_rate(all_points, "gram"), "from floor-gram (the least-squares fit gave no positive rate)"
    return rate, "fitted over all daskpca rows" if how == "fit" else "from floor-gram"


def model_tables(points: list[dict], rate: float) -> str:
    """The cost-model check, one table and one ranking line per point."""
    out = []
    for p in points:
        ok = ok_rows(p)
        c = p["case"]
        title = f"{c['n']} × {c['d']} ({p['stored_bytes'] / 1e9:.2f} GB)"
        if "floor-read" not in ok:
            out.append(f"\n{title}: floor-read not measured here, no model")
            continue
        t_read = ok["floor-read"]["wall"]
        rows, pred, meas, plan_key = [], {}, {}, {}
        for m, est in p["plan"]["methods"].items():
            inputs = model_inputs(p, m)
            if inputs is None:
                continue
            passes, flops, measured = inputs
            r = ok[m]
            pred[m] = passes * t_read + flops / rate
            meas[m] = r["wall"]
            # The planner's own order of solvers (make_plan's runner-up sort): passes, then flops.
            plan_key[m] = (est["passes"] if isinstance(est["passes"], int) else 10.0, est["flops"])
            reads = f"{r['read_bytes'] / p['stored_bytes']:.2f}" if r.get("read_bytes") is not None else ""
            rows.append([m, str(est["passes"]), f"{passes}{'*' if measured else ''}",
                         "" if r.get("passes") is None else str(r["passes"]), reads, f"{flops:.3g}",
                         f"{pred[m]:.2f}", f"{r['wall']:.2f}", f"{pred[m] / r['wall']:.2f}"])
        out.append(f"\n{title}: t_read {t_read:.2f} s ({p['stored_bytes'] / t_read / 1e9:.2f} GB/s); "
                   f"the planner would pick {p['plan']['choice']!r}")
        if not rows:
            continue
        out.append(table(["method", "planner passes", "model passes", "n_passes_", "reads", "flops",
                          "model s", "wall s", "model/wall"], rows))
        wrong = [f"{m} ({e['passes']} vs {ok[m]['passes']})" for m, e in p["plan"]["methods"].items()
                 if m in ok and isinstance(e["passes"], int) and ok[m].get("passes") not in (None, e["passes"])]
        if wrong:
            out.append(f"planner's passes ≠ the solver's n_passes_: {', '.join(wrong)}")
        order = lambda d: sorted(d, key=d.get)  # noqa: E731
        measured_order = order(meas)
        for label, key in (("planner (passes, flops)", plan_key), ("time model", pred)):
            match = "matches" if order(key) == measured_order else "does NOT match"
            out.append(f"ranking by {label}: {' < '.join(order(key))} — {match} measured {' < '.join(measured_order)}")
    return "\n".join(out)


def report(data: dict) -> None:
    # Each distinct input once: the n = 1e5 / d = 1000 point is in both series.
    all_points = list({p["case"]["name"]: p for s in data["series"].values() for p in s}.values())
    rate, source = model_flop_rate(all_points, data.get("flop_rate", "fit"))
    for name, points in data["series"].items():
        if not points:
            continue
        fixed = f"d = {points[0]['case']['d']}" if name == "n" else f"n = {points[0]['case']['n']}"
        print(f"\n### {name}-series ({fixed}): wall s per method (fit alone, best of {data.get('repeat', 1)})\n")
        print(wall_table(name, points))
        if name == "n":
            print("\nper-row cost (wall / n) and its largest deviation from the method's mean\n")
            print(per_row_table(points))
        print(f"\ncost model: time ≈ passes·t_read + flops / flop_rate "
              f"(flop rate {rate / 1e9:.1f} GF/s {source}; "
              "* = measured passes of an iterative solver)")
        print(model_tables(points, rate))


# --------------------------------------------------------------------------------------------
# Plot
# --------------------------------------------------------------------------------------------


def plot(data: dict, out: Path) -> None:
    """Time vs n (log-log), per-row cost vs n, time vs d (log-log): one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n_pts, d_pts = data["series"].get("n", []), data["series"].get("d", [])
    panels = [p for p in (("n", n_pts, "wall"), ("n", n_pts, "per-row"), ("d", d_pts, "wall")) if p[1]]
    if not panels:
        return
    methods = methods_of(n_pts + d_pts)
    colors = {m: plt.cm.tab10(i % 10) for i, m in enumerate(methods)}
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), squeeze=False)
    for ax, (var, points, kind) in zip(axes[0], panels):
        for m in methods:
            xs, ys = [], []
            for p in points:
                r = ok_rows(p).get(m)
                if r is not None:
                    xs.append(p["case"][var])
                    ys.append(r["wall"] if kind == "wall" else 1e6 * r["wall"] / p["case"]["n"])
            if xs:
                ax.plot(xs, ys, "o-", color=colors[m], label=m)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(var)
        ax.set_ylabel("wall s" if kind == "wall" else "µs per row")
        ax.grid(True, which="both", alpha=0.3)
        if kind == "wall":  # slope guides: linear (and quadratic in d, the covariance's d²)
            lo, hi = min(p["case"][var] for p in points), max(p["case"][var] for p in points)
            ys = [l.get_ydata()[0] for l in ax.get_lines()] or [1.0]
            y0 = min(ys)
            ax.plot([lo, hi], [y0, y0 * hi / lo], ":", color="gray", label=f"∝ {var}")
            if var == "d":
                ax.plot([lo, hi], [y0, y0 * (hi / lo) ** 2], "--", color="gray", label="∝ d²")
        fixed = f"d = {points[0]['case']['d']}" if var == "n" else f"n = {points[0]['case']['n']}"
        ax.set_title(f"time vs {var}, {fixed}" if kind == "wall" else f"per-row cost, {fixed} (flat = linear)")
    # One legend for all panels, below them (inside, it hides the lines it names).
    handles = {l.get_label(): l for ax in axes[0] for l in ax.get_lines()}
    fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=min(len(handles), 5), fontsize=8)
    fig.tight_layout(rect=(0, 0.06 + 0.035 * math.ceil(len(handles) / 5), 1, 1))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    print(f"\nwrote {out}")


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--series", default="n,d", help="comma-separated: n, d (default both)")
    ap.add_argument("--methods", default=DEFAULT_METHODS, help=f"names or globs (default {DEFAULT_METHODS})")
    ap.add_argument("--max-n", default="", help="skip a method above a nominal n, e.g. 'daskpca-als=1e6,daskpca-ppca=1e6'")
    ap.add_argument("--n-values", default=",".join(map(str, N_VALUES)), help="nominal n of the n-series")
    ap.add_argument("--d-values", default=",".join(map(str, D_VALUES)), help="d of the d-series")
    ap.add_argument("--scale", type=int, default=1, help="divide n and the chunk rows by S (smoke tests)")
    ap.add_argument("--quick", action="store_true", help="same as --scale 100")
    ap.add_argument("--flop-rate", choices=("fit", "gram"), default="fit", help="model's flop rate: fitted (default) or from floor-gram")
    ap.add_argument("--json", type=Path, help="write every row, the planner's estimates and machine info here")
    ap.add_argument("--plot", type=Path, help="write the figure here (PNG)")
    ap.add_argument("--from-json", type=Path, help="re-print (and --plot) a saved run without running anything")
    ap.add_argument("--data-dir", type=Path, default=bench.DEFAULT_DATA_DIR)
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds before a method is killed (default 3600)")
    ap.add_argument("--repeat", type=int, default=1, help="fastest of N runs per method (default 1)")
    ap.add_argument("--blas-threads", type=int, default=None, help="limit BLAS threads in every method (threadpoolctl)")
    ap.add_argument("--cluster", action="store_true", help="floors and daskpca on a 2-worker LocalCluster")
    ap.add_argument("--verbose", action="store_true", help="show each method's own output")
    args = ap.parse_args(argv)

    if args.from_json:
        data = json.loads(args.from_json.read_text())
        data["flop_rate"] = args.flop_rate
    else:
        scale = 100 if args.quick else args.scale
        series = [s.strip() for s in args.series.split(",") if s.strip()]
        if not set(series) <= {"n", "d"}:
            ap.error("--series takes n, d or n,d")
        methods = select_methods(args.methods)
        caps = parse_max_n(args.max_n)
        n_values = [int(float(v)) for v in args.n_values.split(",")]
        d_values = [int(float(v)) for v in args.d_values.split(",")]
        info = bench.machine_info()
        print(f"# {info['date']}  {info['cpus']} CPUs, {info['ram_gib']} GiB RAM; methods: {', '.join(methods)}"
              f"{'; scale 1/' + str(scale) if scale > 1 else ''}", flush=True)
        data = {"machine": info, "scale": scale, "repeat": args.repeat, "blas_threads": args.blas_threads,
                "cluster": args.cluster, "flop_rate": args.flop_rate, "series": {}}
        plan = {s: series_points(s, scale, n_values, d_values) for s in series}
        # All the inputs still to generate, checked at once: better than failing hours in.
        cases = {c.name: c for pts in plan.values() for _, c in pts}
        missing = sum(c.nbytes for c in cases.values() if not bench._is_complete(bench.data_path(args.data_dir, c), c))
        if missing:
            bench.check_disk(args.data_dir, missing)
        done = {}  # case name → point: the shared n = 1e5, d = 1000 point runs once
        with tempfile.TemporaryDirectory(prefix="daskpca-growth-") as tmpdir:
            for s, points in plan.items():
                data["series"][s] = []
                for x, case in points:
                    nominal_n = x if s == "n" else D_SERIES_N
                    if case.name not in done:
                        done[case.name] = run_point(case, x, nominal_n, methods, caps, args, Path(tmpdir))
                    data["series"][s].append({**done[case.name], "x": x})
                    if args.json:  # after every point: a long run stopped midway keeps what it measured
                        args.json.parent.mkdir(parents=True, exist_ok=True)
                        args.json.write_text(json.dumps(data, indent=1, default=str))
        if args.json:
            print(f"\nwrote {args.json}")
    report(data)
    if args.plot:
        plot(data, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
