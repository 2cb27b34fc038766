"""The growth run's tables, its cost-model check and its figure (see :mod:`benchmarks.growth`).

Everything here reads the run's data dict (what ``--json`` writes), so ``--from-json`` re-prints
and re-plots a saved run without running anything.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from .tables import markdown_table as table

SPREAD_LIMIT = 0.20  # issue 8: per-row cost within ±20 % from 1e5 to 1e7 rows


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
