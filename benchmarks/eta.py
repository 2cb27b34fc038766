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
took. Nothing else should run meanwhile.
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
    n, d, k = 16_000, 2_000, 10
    rest = d - k
    yield "continuum", k, lambda: spectral_data(np.concatenate([np.geomspace(10, 1, k), 0.9 * np.linspace(1, 0.8, rest)]), n, d)
    yield "plateau", k, lambda: spectral_data(np.concatenate([np.geomspace(30, 1.5, k), np.ones(5),
                                                             np.geomspace(0.5, 1e-3, rest - 5)]), n, d)
    yield "0.8^i", k, lambda: spectral_data(0.8 ** np.arange(d), n, d)
    yield "reanalysis", 20, lambda: reanalysis(n, d, 20)
    yield "archive 8760×90×180", 10, lambda: reanalysis(8760, 90 * 180, 10).astype(np.float32)


def measure(path: str, k: int, tol: float) -> list[str]:
    """One watched fit of the store at ``path``: the row of the table."""
    source = zarr.open_array(path, mode="r")
    starts = []
    with listen(lambda r: starts.append((time.perf_counter(), r)) if r.seconds is None else None), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = PCA(k, solver="krylov", tol=tol, random_state=0).fit(source)
    end = time.perf_counter()
    plan = model._fit_plan
    at, second = next((t, r) for t, r in starts if r.number == 2)
    later = [p + c for p, c in zip(model.pass_seconds_[1:], model.client_seconds_[1:])]
    # The fit's own prediction from the start of pass 3 on (after the probe's, on its own Ritz values).
    own = [str(r.predicted) for _, r in starts if r.number >= 3]
    return [f"{tol:.0e}", f"{plan.passes}", f"{model.n_passes_}", f"{plan.passes / model.n_passes_:.2f}",
            " ".join(own) or "–",
            f"{plan.seconds:.2f}", f"{model.fit_seconds_:.2f}", f"{plan.seconds / model.fit_seconds_:.2f}",
            f"{second.cycle_seconds:.3f} / {np.mean(later):.3f}", f"{second.seconds_left:.2f} / {end - at:.2f}",
            f"{second.seconds_left / (end - at):.2f}"]


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
            X = make()
            path = f"{folder}/{len(rows)}.zarr"
            zarr.create_array(store=path, shape=X.shape, chunks=(1, X.shape[1]), dtype=X.dtype)[...] = X
            del X
            for tol in args.tol:
                rows.append([name, *measure(path, k, tol)])
                print(" | ".join(rows[-1]), flush=True)
    print(markdown_table(["field", "tol", "plan passes", "made", "ratio", "predicted from pass 3", "plan s", "fit s", "ratio",
                          "cycle after pass 1: counted / measured", "time left after pass 1: counted / taken", "ratio"], rows))


if __name__ == "__main__":
    main()
