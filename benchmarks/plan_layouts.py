"""The plan's seconds against the fit's on the layouts archives use (issue 41).

Run from the repository root (about a minute on the 2-core machine; nothing else benchmarking)::

    python -m benchmarks.plan_layouts            # n = 3000 time steps of a 60 × 120 field
    python -m benchmarks.plan_layouts --n 8760

One float32 field (20 modes decaying by 0.85 over unit noise), stored three ways and read the way
users read them: a 2-D zarr array of one time step per chunk (daskpca reads it by one zarr
selection per task), the same field stored (time, lat, lon) one step per chunk and read through
``da.from_zarr(...).reshape`` (dask blocks joined inside each task: one zarr call per block), and
both again in yearly-like blocks of 250 steps. ``PCA(10)`` (the default road) and
``PCA(10, tol=1e-4)``, planned then fitted with that plan, the default pass cache on. Columns: the
plan's road, passes and seconds; the fit's road, passes and seconds; their ratio; the probed
plan's (``plan(X, probe=True)``: ≤ 1 % of the rows read, the road kept) passes, seconds and ratio;
each pass's seconds; how a pass reads the storage chunks (the plan's :class:`~daskpca.passes.Geometry`).
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings

import numpy as np

from .tables import markdown_table


def field(n: int, lat: int = 60, lon: int = 120, seed: int = 0) -> np.ndarray:
    """(n, lat, lon) float32: 20 modes, variances 0.85^(2i), over unit white noise."""
    rng = np.random.default_rng(seed)
    modes = rng.standard_normal((20, lat * lon)).astype(np.float32)
    data = np.empty((n, lat, lon), np.float32)
    for start in range(0, n, 500):
        rows = min(500, n - start)
        scores = rng.standard_normal((rows, 20)) * 0.85 ** np.arange(20)
        data[start:start + rows] = (scores @ modes + rng.standard_normal((rows, lat * lon))).reshape(rows, lat, lon)
    return data


def main(argv=None) -> None:
    import dask.array as da
    import zarr

    from daskpca import PCA

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=3000)
    args = parser.parse_args(argv)
    data = field(args.n)
    n, lat, lon = data.shape
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for layout, steps in (("one step per chunk", 1), ("250 steps per chunk", 250)):
            flat = zarr.create_array(store=f"{folder}/{steps}-2d.zarr", shape=(n, lat * lon), chunks=(steps, lat * lon),
                                     dtype="f4")
            flat[:] = data.reshape(n, -1)
            cube = zarr.create_array(store=f"{folder}/{steps}-3d.zarr", shape=data.shape, chunks=(steps, lat, lon), dtype="f4")
            cube[:] = data
            for read, X in (("2-D zarr", flat), ("3-D zarr, reshaped", da.from_zarr(cube).reshape(n, lat * lon))):
                for params in (dict(n_components=10), dict(n_components=10, tol=1e-4)):
                    model = PCA(**params)
                    plan = model.plan(X)
                    probed = model.plan(X, probe=True)  # ≤ 1 % of the rows read: the passes from their spectrum
                    start = time.perf_counter()
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        model.fit(X, plan=plan)
                    seconds = time.perf_counter() - start
                    rows.append([layout, read, "default" if "tol" not in params else "tol 1e-4",
                                 f"{plan.solver}, {plan.passes}, {plan.seconds:.2f}", f"{model.solver_}, {model.n_passes_}, {seconds:.2f}",
                                 f"{plan.seconds / seconds:.2f}",
                                 f"{probed.passes}, {probed.seconds:.2f}, {probed.seconds / seconds:.2f}"
                                 if probed.probe is not None and probed.probe.passes is not None else "—",
                                 " ".join(f"{s:.2f}" for s in model.pass_seconds_),
                                 plan.geometry.describe() if plan.geometry is not None else "—"])
                    print(" | ".join(rows[-1]), flush=True)
    print(markdown_table(["layout", "read", "asked", "plan: road, passes, s", "fit: road, passes, s", "plan/fit",
                          "probed plan: passes, s, /fit", "pass s", "how a pass reads"], rows))


if __name__ == "__main__":
    main()
