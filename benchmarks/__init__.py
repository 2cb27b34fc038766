"""daskpca's benchmarks, run as modules from the repository root.

Entry points (each a thin ``main()``)::

    python -m benchmarks.run              # side-by-side table per case: floors, daskpca, peers
    python -m benchmarks.growth           # time against n and d, the planner's cost model checked
    python -m benchmarks.traffic          # bytes moved between workers (docs/scaling.md)
    python -m benchmarks.profile_kernels  # per-chunk kernels and thread layouts

The pieces they share, one copy each:

- :mod:`benchmarks.cases`: the cases, their synthetic inputs, exact answers and sin θ
  (**a new case: one entry there**);
- :mod:`benchmarks.methods`: what a row can run — floors, daskpca solvers and variants, peers
  (**a new method: a change there only**);
- :mod:`benchmarks.runner`: one row in a fresh subprocess (time, peak memory, reads, other CPU),
  page cache, machine info;
- :mod:`benchmarks.tables`: Markdown / text tables and the row's columns;
- :mod:`benchmarks.growth_series`, :mod:`benchmarks.growth_report`: the growth run's points and
  its tables, cost model and figure;
- :mod:`benchmarks.traffic_record`, :mod:`benchmarks.traffic_place`,
  :mod:`benchmarks.traffic_model`, :mod:`benchmarks.traffic_report`: the recording scheduler,
  the placement simulation, the node formulas and scaled passes, and the tables of
  docs/scaling.md.
"""
