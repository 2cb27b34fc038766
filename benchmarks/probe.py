"""The plan's probe (issue 41): its point estimate of passes and time against the fit's, with and
without the probe, and the ETA after the first pass against the time the fit then still took.

Small, on the 2-core machine: n × d = 4000 × 1000 (one row per storage chunk, so the probe reads
whole chunks, 40 rows) on fast decay, a continuum just below λ_k, a plateau and a reanalysis-like
field; and an archive-like 2000 × (40 × 80) one-step-per-chunk store (float32, 20 rows probed).

    PYTHONPATH=. python benchmarks/probe.py [--tol 1e-4 1e-6] [--out DIR]

Prints one row per (spectrum, tol): the plan's passes without and with the probe, the passes made,
their ratios, the plan's seconds with the probe against the fit's, and after pass 1 the passes
predicted left and the ETA against what the fit then still took — with the probed plan, and for a
fit given no plan, which probes unasked because someone watches its passes (daskpca.pca's
``_probes_unasked``).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import zarr

from daskpca import PCA
from daskpca.passes._progress import listen


def spectral_data(variances, n, d, seed=0):
    """Data whose centered scatter has exactly ``variances`` (times n − 1) as eigenvalues."""
    rng = np.random.default_rng(seed)
    u = np.linalg.qr(rng.standard_normal((n, variances.size)))[0]
    u = np.linalg.qr(u - u.mean(axis=0))[0]
    v = np.linalg.qr(rng.standard_normal((d, variances.size)))[0]
    return (u * np.sqrt(variances * (n - 1))) @ v.T + rng.random(d)


def reanalysis(n, d, k, seed=3):
    """k modes above white noise at its Marchenko–Pastur edge, on a mean of 280 (tests' field)."""
    rng = np.random.default_rng(seed)
    edge = (np.sqrt(d) + np.sqrt(n)) ** 2 / n
    modes = np.linalg.qr(rng.standard_normal((d, k)))[0].T
    X = (rng.standard_normal((n, k)) * np.sqrt(edge * (1.5 + 30 * 0.8 ** np.arange(k)))) @ modes
    return X + rng.standard_normal((n, d)) + 280


def cases(n=4000, d=1000):
    k = 10
    rest = d - k
    yield "0.5^i", k, lambda: spectral_data(0.5 ** np.arange(d), n, d)
    yield "0.8^i", k, lambda: spectral_data(0.8 ** np.arange(d), n, d)
    yield "continuum", k, lambda: spectral_data(np.concatenate([np.geomspace(10, 1, k), 0.9 * np.linspace(1, 0.8, rest)]), n, d)
    yield "plateau", k, lambda: spectral_data(np.concatenate([np.geomspace(30, 1.5, k), np.ones(5),
                                                             np.geomspace(0.5, 1e-3, rest - 5)]), n, d)
    yield "reanalysis", 20, lambda: reanalysis(n, d, 20)
    yield "archive 2000×40×80", 10, lambda: reanalysis(2000, 40 * 80, 10).astype(np.float32)


def run_fit(path, k, tol, plan=None):
    """Fit; return (model, passes predicted after pass 1, ETA after pass 1, seconds left after pass 1)."""
    seen = []
    with listen(lambda r: seen.append((time.perf_counter(), r)) if r.seconds is None else None):
        model = PCA(k, solver="krylov", tol=tol, random_state=0).fit(zarr.open_array(path, mode="r"), plan=plan)
    end = time.perf_counter()
    second = next(((t, r) for t, r in seen if r.number == 2), None)
    if second is None:
        return model, None, None, None
    t, r = second
    return model, r.predicted, r.seconds_left, end - t


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tol", type=float, nargs="+", default=[1e-4, 1e-6])
    parser.add_argument("--only", nargs="*")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    print(f"{'spectrum':<20} {'tol':>6} {'prior':>5} {'probe':>5} {'made':>4} {'prior/made':>10} {'probe/made':>10} "
          f"{'plan s':>7} {'fit s':>6} {'s ratio':>7} {'left@1 pred/act':>15} {'ETA@1/act (probe)':>17} "
          f"{'ETA@1/act (unasked)':>19}")
    with tempfile.TemporaryDirectory() as folder:
        for name, k, make in cases():
            if args.only and name not in args.only:
                continue
            X = make()
            path = str(Path(folder) / f"{name.replace(' ', '_')}.zarr")
            array = zarr.create_array(store=path, shape=X.shape, chunks=(1, X.shape[1]), dtype=X.dtype)
            array[...] = X
            for tol in args.tol:
                source = zarr.open_array(path, mode="r")
                estimator = PCA(k, solver="krylov", tol=tol, random_state=0)
                prior = estimator.plan(source).passes
                plan = estimator.plan(source, probe=True)
                model, left, eta, actual = run_fit(path, k, tol, plan)
                made = model.n_passes_
                _, _, eta0, actual0 = run_fit(path, k, tol)  # no plan: the watched fit probes unasked
                probed = plan.passes
                print(f"{name:<20} {tol:>6.0e} {prior:>5} {probed:>5} {made:>4} {prior / made:>10.2f} "
                      f"{probed / made:>10.2f} {plan.seconds:>7.3g} {model.fit_seconds_:>6.3g} "
                      f"{plan.seconds / model.fit_seconds_:>7.2f} "
                      f"{'—' if left is None else f'{left - 1}/{made - 1} = {(left - 1) / (made - 1):.2f}':>15} "
                      f"{'—' if eta is None else f'{eta / actual:.2f}':>17} "
                      f"{'—' if eta0 is None else f'{eta0 / actual0:.2f}':>19}"
                      f"  [{plan.probe.describe()}]", flush=True)
    print(f"run time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
