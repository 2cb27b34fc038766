r"""Bytes each solver moves between workers, measured from the task graphs of real fits.

Every solver builds one dask graph per step and hands it to the scheduler. This script runs real
``daskpca.PCA(...).fit`` calls on small zarr proxies under a *recording* scheduler
(:class:`benchmarks.traffic_record.Recorder`): each ``dask.compute`` / ``dask.persist`` call is one step; its graph
(who depends on whom), the pickled size of every task's output (what a worker would send) and
of every task's spec (what the scheduler sends with the task) are recorded while the graph runs
on the synchronous scheduler. Data the client puts in the graph as keys of their own (the zarr
handle; Ω, the basis, the mean: ``daskpca.passes._graph.shared``) are recorded apart: such a key is sent
to each worker that runs a task needing it, once.

:func:`benchmarks.traffic_place.simulate` then places a recording on W workers the way a balanced ``distributed``
cluster would: input blocks in contiguous ranges (each worker holds 1/W of the array), every
other task on the worker that already holds the most bytes of its dependencies (dask's locality
rule; ties go to the least-loaded worker), and counts every dependency that has to cross to
another worker (each (key, destination) once), the data keys each worker needs (once per
worker), the task specs and what the client gets back.

To reach 10 TB without running anything big, two things are measured and then combined:

- **node sizes** (:func:`benchmarks.traffic_model.size_formulas`): every array in every recorded output and task spec
  has its dimensions matched to the proxy's n, d, k, ℓ, rows per block n_i, columns per strip
  d_j (all given distinct values), so a node's bytes become a polynomial such as
  ``8·d² + 8·d + 306`` (a covariance merge); a proxy of other sizes checks the polynomials.
- **the tree** (:func:`benchmarks.traffic_model.tree_step`): the structure of a pass is rebuilt at any number of blocks
  with the solvers' own :func:`daskpca.passes._graph.tree_reduce`, weighted with the node polynomials
  and placed by the same :func:`simulate`. The ``check`` table compares this formula with the
  simulation of the real recorded graph, pass by pass and per W.

Run ``python -m benchmarks.traffic`` (one to three minutes on one core) for the tables (plus the
per-case check); ``--update docs/scaling.md`` writes them into the doc's marked blocks
(:mod:`benchmarks.traffic_report`).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from .tables import text_table
from .traffic_model import build_models
from .traffic_rates import measure_throughputs
from .traffic_record import SOLVERS
from .traffic_report import (
    MEMORIES,
    check_rows,
    check_summary,
    crossover_rows,
    example_rows,
    fmt_bytes,
    formula_rows,
    largest_rows,
    tree_rows,
    update_doc,
)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog=f"python -m {__spec__.name}", description=__doc__.split("\n\n")[0])
    parser.add_argument("--solvers", default=",".join(SOLVERS), help="comma-separated (default: all)")
    parser.add_argument("--markdown", action="store_true", help="print the tables as markdown")
    parser.add_argument("--update", type=Path, metavar="DOC",
                        help="write the markdown tables into DOC's <!-- traffic.py:NAME --> blocks (docs/scaling.md)")
    args = parser.parse_args(argv)
    md = args.markdown or args.update is not None
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        models = build_models(Path(tmp), [s for s in args.solvers.split(",") if s])
        rates = measure_throughputs(Path(tmp))
    checks = check_rows(models)
    pass_rows, total_rows = example_rows(models, rates)
    client = "; ".join(f"{name} {c:.3g} s/s³ and {m:.2f} × 8s² bytes" for name, (c, m) in rates["client"].items())
    blocks = {
        "nodes": text_table(["solver", "task kind", "result", "task spec", "dask.sizeof / pickled (largest)"],
                             formula_rows(models), md),
        "check": text_table(["solver", "cases", "worst formula / measured", "largest measured B"], check_summary(checks), md),
        "tree": text_table(["blocks B", "reads placed", "W = 10", "W = 100", "W = 1000"], tree_rows(), md),
        "rates": (f"Measured on this machine, one thread: read {fmt_bytes(rates['read'])}/s (zarr → NumPy); syrk "
                  f"{rates['syrk']:.3g}, QR {rates['qr']:.3g}, GEMM {rates['gemm']:.3g} flop/s (planner units); "
                  f"client steps (s = d, or n for gram): {client}; one TSQR merge {rates['tsqr_merge']:.3g}·d³ s."),
        "passes": text_table(["array", "solver", "pass × count", "between workers", "busiest worker receives",
                               "task specs", "data keys", "to client", "largest task (graph)"], pass_rows, md),
        "fit": text_table(["array", "solver", "passes", "read per worker", "between workers", "task specs", "data keys", "to client",
                            "largest task: planner / graph", "time est. (+ network)", "single-node step (est.)"], total_rows, md),
        "largest": text_table(["solver", *[f"{m} GB" for m in MEMORIES]], largest_rows(models, rates), md),
        "crossover": text_table(["solver", "d (n for gram)", "distributed passes take", "client memory then"],
                                 crossover_rows(models, rates), md),
    }
    if args.update is not None:
        update_doc(args.update, blocks)
        print(f"updated {args.update} in {time.perf_counter() - start:.0f} s")
        return
    if not md:
        print("### Check: bytes between workers, real recorded graph vs formula, per pass, W and placement\n")
        print(text_table(["solver", "step", "W", "placement", "measured B", "formula B", "ratio",
                           "specs + client data: measured", "formula"], checks, md), "\n")
    for name, body in blocks.items():
        print(f"### {name}\n\n{body}\n")
    print(f"(recorded and simulated in {time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
