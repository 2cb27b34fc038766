"""Growth of the fit time in n and in d, and the planner's cost model checked against it.

    python -m benchmarks.growth --series n,d [--methods 'floor-*,daskpca-*'] [--max-n 'daskpca-als=1e6']
                                [--quick | --scale S] [--json out.json] [--plot out.png]
    python -m benchmarks.growth --from-json out.json [--plot out.png]     # re-print / re-plot only

Two series of inputs (:mod:`benchmarks.growth_series`), made by the cases' generator (low rank +
noise, float32 zarr, k = 20):

- **n-series**: d = 1000, chunks (5000, 1000), n = 1e5, 1e6, 1e7. The n = 1e7 point *is*
  ``benchmarks.cases.FULL_CASES["huge"]`` (40 GB), so the data generated for it is reused.
- **d-series**: n = 1e5, chunks (5000, d), d = 100, 500, 1000, 2000, 5000. Its d = 1000 point is
  the n-series' n = 1e5 point (same data, measured once per run).

Every method of every point runs in a fresh subprocess through ``benchmarks.runner``
(same timing, memory, pass and sin θ columns; same page-cache rule: warmed unless the array is
larger than half the RAM). Three tables follow (:mod:`benchmarks.growth_report`, with the plot):

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
import json
import sys
import tempfile
from pathlib import Path

from . import cases, growth_report, runner
from . import growth_series as series


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}", description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--series", default="n,d", help="comma-separated: n, d (default both)")
    ap.add_argument("--methods", default=series.DEFAULT_METHODS, help=f"names or globs (default {series.DEFAULT_METHODS})")
    ap.add_argument("--max-n", default="", help="skip a method above a nominal n, e.g. 'daskpca-als=1e6,daskpca-ppca=1e6'")
    ap.add_argument("--n-values", default=",".join(map(str, series.N_VALUES)), help="nominal n of the n-series")
    ap.add_argument("--d-values", default=",".join(map(str, series.D_VALUES)), help="d of the d-series")
    ap.add_argument("--scale", type=int, default=1, help="divide n and the chunk rows by S (smoke tests)")
    ap.add_argument("--quick", action="store_true", help="same as --scale 100")
    ap.add_argument("--flop-rate", choices=("fit", "gram"), default="fit", help="model's flop rate: fitted (default) or from floor-gram")
    ap.add_argument("--json", type=Path, help="write every row, the planner's estimates and machine info here")
    ap.add_argument("--plot", type=Path, help="write the figure here (PNG)")
    ap.add_argument("--from-json", type=Path, help="re-print (and --plot) a saved run without running anything")
    ap.add_argument("--data-dir", type=Path, default=cases.DEFAULT_DATA_DIR)
    runner.add_row_options(ap, timeout=3600.0)
    args = ap.parse_args(argv)

    if args.from_json:
        data = json.loads(args.from_json.read_text())
        data["flop_rate"] = args.flop_rate
    else:
        scale = 100 if args.quick else args.scale
        wanted = [s.strip() for s in args.series.split(",") if s.strip()]
        if not set(wanted) <= {"n", "d"}:
            ap.error("--series takes n, d or n,d")
        methods = series.select_methods(args.methods)
        caps = series.parse_max_n(args.max_n)
        n_values = [int(float(v)) for v in args.n_values.split(",")]
        d_values = [int(float(v)) for v in args.d_values.split(",")]
        info = runner.machine_info()
        print(f"# {info['date']}  {info['cpus']} CPUs, {info['ram_gib']} GiB RAM; methods: {', '.join(methods)}"
              f"{'; scale 1/' + str(scale) if scale > 1 else ''}", flush=True)
        data = {"machine": info, "scale": scale, "repeat": args.repeat, "blas_threads": args.blas_threads,
                "cluster": args.cluster, "flop_rate": args.flop_rate, "series": {}}
        plan = {s: series.series_points(s, scale, n_values, d_values) for s in wanted}
        # All the inputs still to generate, checked at once: better than failing hours in.
        inputs = {c.name: c for pts in plan.values() for _, c in pts}
        missing = sum(c.nbytes for c in inputs.values() if not cases.is_complete(cases.data_path(args.data_dir, c), c))
        if missing:
            cases.check_disk(args.data_dir, missing)
        done = {}  # case name → point: the shared n = 1e5, d = 1000 point runs once
        with tempfile.TemporaryDirectory(prefix="daskpca-growth-") as tmpdir:
            for s, points in plan.items():
                data["series"][s] = []
                for x, case in points:
                    nominal_n = x if s == "n" else series.D_SERIES_N
                    if case.name not in done:
                        done[case.name] = series.run_point(case, x, nominal_n, methods, caps, args, Path(tmpdir))
                    data["series"][s].append({**done[case.name], "x": x})
                    if args.json:  # after every point: a long run stopped midway keeps what it measured
                        args.json.parent.mkdir(parents=True, exist_ok=True)
                        args.json.write_text(json.dumps(data, indent=1, default=str))
        if args.json:
            print(f"\nwrote {args.json}")
    growth_report.report(data)
    if args.plot:
        growth_report.plot(data, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
