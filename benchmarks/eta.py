"""The time left after the first pass against what the fit then took, on fits of seconds (issue 41).

A watched fit (a listener that shows predictions, as the progress line) of block Krylov given no
plan: it probes ≤ 1 % of the rows unasked, predicts its passes from them, and after pass 1 counts
a later pass at the first pass's compute and the client's work by how it grows. One row per storage
chunk, on disk (zarr), the pass cache on (the default)::

    PYTHONPATH=. python benchmarks/eta.py [--only continuum archive] [--tol 1e-4 1e-6]

Cases: 16 000 × 2000 float64 (continuum just below λ_10, plateau, 0.8ⁱ decay, a reanalysis-like
field of 20 modes over white noise) and an archive-like 8760 × (90 × 180) float32 field (10 modes).
Columns: the plan's passes and seconds (probed), the fit's, their ratios, the passes predicted at
the start of each pass from the third (the probe's while the fit keeps to its course, then the
fit's own simulation or measured fall), the cycle counted after
pass 1 against the mean cycle then measured, the time left after pass 1 against what the fit then
took. Then the same for a fit of another draw of the field (new rows, the same spectrum: the next
version a scheduled refit reads) whose plan probes the first fit's model instead of its rows
(``plan(X, probe=model)``, :func:`daskpca._probe.from_model`). Nothing else should run meanwhile.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings

import numpy as np
import zarr

from daskpca import PCA
from daskpca.passes._progress import listen

from .probe import reanalysis, spectral_data
from .tables import markdown_table


def cases():
    """``(name, k, make)``: ``make(draw)`` the field's data, ``draw`` 1 another draw of the same
    spectrum (new rows: the next version a scheduled refit reads)."""
    n, d, k = 16_000, 2_000, 10
    rest = d - k
    yield "continuum", k, lambda draw: spectral_data(np.concatenate([np.geomspace(10, 1, k), 0.9 * np.linspace(1, 0.8, rest)]),
                                                     n, d, seed=draw)
    yield "plateau", k, lambda draw: spectral_data(np.concatenate([np.geomspace(30, 1.5, k), np.ones(5),
                                                                   np.geomspace(0.5, 1e-3, rest - 5)]), n, d, seed=draw)
    yield "0.8^i", k, lambda draw: spectral_data(0.8 ** np.arange(d), n, d, seed=draw)
    yield "reanalysis", 20, lambda draw: reanalysis(n, d, 20, seed=3 + draw)
    yield "archive 8760×90×180", 10, lambda draw: reanalysis(8760, 90 * 180, 10, seed=3 + draw).astype(np.float32)


def watched_fit(path: str, k: int, tol: float, earlier=None):
    """A watched fit of the store at ``path`` (its plan probed with ``earlier``'s spectrum where
    given, else the fit probes its rows unasked): ``(model, plan, [(time, report) at each pass's
    start], end time)``."""
    source = zarr.open_array(path, mode="r")
    starts = []
    estimator = PCA(k, solver="krylov", tol=tol, random_state=0)
    with listen(lambda r: starts.append((time.perf_counter(), r)) if r.seconds is None else None), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = None if earlier is None else estimator.plan(source, probe=earlier)
        model = estimator.fit(source, plan=plan)
    return model, model._fit_plan, starts, time.perf_counter()


def after_pass_1(starts, end) -> tuple[float, float, object]:
    """``(time left counted at the start of pass 2, time then taken, that report)``."""
    at, second = next((t, r) for t, r in starts if r.number == 2)
    return second.seconds_left, end - at, second


def measure(path: str, next_path: str, k: int, tol: float) -> list[str]:
    """A watched fit of the store at ``path`` probing its rows, then one of ``next_path`` (another
    draw) given the first's model: the row of the table."""
    model, plan, starts, end = watched_fit(path, k, tol)
    left, taken, second = after_pass_1(starts, end)
    later = [p + c for p, c in zip(model.pass_seconds_[1:], model.client_seconds_[1:])]
    # The fit's own prediction from the start of pass 3 on (after the probe's, on its own Ritz values).
    own = [str(r.predicted) for _, r in starts if r.number >= 3]
    refit, replan, restarts, reend = watched_fit(next_path, k, tol, earlier=model)
    releft, retaken, _ = after_pass_1(restarts, reend)
    return [f"{tol:.0e}", f"{plan.passes}", f"{model.n_passes_}", f"{plan.passes / model.n_passes_:.2f}",
            " ".join(own) or "–",
            f"{plan.seconds:.2f}", f"{model.fit_seconds_:.2f}", f"{plan.seconds / model.fit_seconds_:.2f}",
            f"{second.cycle_seconds:.3f} / {np.mean(later):.3f}", f"{left:.2f} / {taken:.2f}", f"{left / taken:.2f}",
            f"{replan.passes} / {refit.n_passes_}", f"{replan.seconds / refit.fit_seconds_:.2f}",
            f"{releft:.2f} / {retaken:.2f}", f"{releft / retaken:.2f}"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tol", type=float, nargs="+", default=[1e-4, 1e-6])
    parser.add_argument("--only", nargs="*")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name, k, make in cases():
            if args.only and not any(name.startswith(o) for o in args.only):
                continue
            paths = [f"{folder}/{len(rows)}-{draw}.zarr" for draw in (0, 1)]
            for draw, path in enumerate(paths):
                X = make(draw)
                zarr.create_array(store=path, shape=X.shape, chunks=(1, X.shape[1]), dtype=X.dtype)[...] = X
                del X
            for tol in args.tol:
                rows.append([name, *measure(*paths, k, tol)])
                print(" | ".join(rows[-1]), flush=True)
    print(markdown_table(["field", "tol", "plan passes", "made", "ratio", "predicted from pass 3", "plan s", "fit s", "ratio",
                          "cycle after pass 1: counted / measured", "time left after pass 1: counted / taken", "ratio",
                          "refit, earlier model: plan / made", "plan s / fit s", "time left after pass 1", "ratio"],
                         rows))


if __name__ == "__main__":
    main()
