"""As tight as the data allows (issue 41): predicted against actual passes and seconds, and
block Krylov's bound against the true error, on four spectra and two store layouts.

Run from the repository root (a few minutes on the 2-core machine; nothing else benchmarking)::

    python -m benchmarks.tightness               # tol = 1e-4
    python -m benchmarks.tightness --tol 1e-6

Spectra (n × d = 3000 × 1000 float32, k = 10, written once as zarr under a temporary folder):
``fast`` (σ² halving per mode), ``continuum`` (k modes with λ_k/λ_{k+1} = 1.2 above a flat
noise continuum), ``plateau`` (modes k+1 … k+5 on one level, λ_k/λ_{k+1} = 1.5, then decay) and
``reanalysis`` (20 modes λ₂₀ ≈ 1.9× a white-noise continuum's Marchenko–Pastur edge, the
archive benchmark's field at a tenth of its size; k = 20). Layouts: ``step`` (one row per
chunk, ERA5's) and ``blocks`` (300 rows per chunk). Columns: the plan's point estimate and
range, the passes the fit predicted at the start of pass 2 (the planner's prior: nothing is
learnt from one random block) and once it has simulated itself on the spectrum its passes show
(after pass ``SIMULATED_FROM_PASS``, :func:`daskpca.solvers.krylov.simulated_total`), each over
the passes made; seconds planned and measured; the ETA shown at that pass's start against the
seconds the fit actually took from there; the bound, the true sin θ against a float64 LAPACK
reference and their ratio. The fit runs with a listener, so the simulation's client time is in
the measured seconds.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from .tables import markdown_table


def spectrum(name: str, n: int, d: int, seed: int = 0) -> tuple[np.ndarray, int]:
    """The data matrix of one spectrum (float32) and its k."""
    rng = np.random.default_rng(seed)
    r = min(n - 1, d)
    k = 20 if name == "reanalysis" else 10
    if name == "reanalysis":
        edge = (np.sqrt(d) + np.sqrt(n)) ** 2 / n
        variances = edge * (1.5 + 30 * 0.8 ** np.arange(k))
        modes = np.linalg.qr(rng.standard_normal((d, k)))[0].T
        X = (rng.standard_normal((n, k)) * np.sqrt(variances)) @ modes + rng.standard_normal((n, d)) + 280
        return X.astype(np.float32), k
    head = {"fast": 0.5 ** np.arange(k) * 2.0 ** k, "continuum": np.geomspace(12.0, 1.2, k),
            "plateau": np.geomspace(30.0, 1.5, k)}[name]
    tail = {"fast": 0.5 ** np.arange(k, r) * 2.0 ** k, "continuum": np.linspace(1.0, 0.8, r - k),
            "plateau": np.concatenate([np.ones(5), np.geomspace(0.5, 1e-3, r - k - 5)])}[name]
    u = np.linalg.qr(rng.standard_normal((n, r)))[0]
    u = np.linalg.qr(u - u.mean(axis=0))[0]
    v = np.linalg.qr(rng.standard_normal((d, r)))[0]
    X = (u * np.sqrt(np.concatenate([head, tail]) * (n - 1))) @ v.T + 10 * rng.random(d)
    return X.astype(np.float32), k


def row(folder: Path, name: str, layout: str, tol: float, n: int, d: int) -> list:
    import dask
    import zarr

    from daskpca import PCA
    from daskpca.passes._progress import listen
    from daskpca.solvers.krylov import SIMULATED_FROM_PASS, predicted_pass_range

    X, k = spectrum(name, n, d)
    path = folder / f"{name}-{layout}.zarr"
    zarr.create_array(store=str(path), shape=X.shape, chunks=(1 if layout == "step" else 300, d), dtype="float32",
                      overwrite=True)[:] = X
    centered = X.astype(np.float64) - X.astype(np.float64).mean(axis=0)
    exact = np.linalg.eigh(centered.T @ centered)[1][:, ::-1][:, :k]
    model = PCA(k, solver="krylov", tol=tol, random_state=0)
    plan = model.plan(str(path))
    starts = []  # (report, its wall time) of every pass start: the progress line's figures
    with dask.config.set({"daskpca.cache": False}), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with listen(lambda report: starts.append((report, time.perf_counter())) if report.seconds is None else None):
            start = time.perf_counter()
            model.fit(str(path))
            end = time.perf_counter()
    seconds = end - start
    passes = model.n_passes_
    # The first pass whose start knows a learnt prediction (after pass SIMULATED_FROM_PASS): its
    # predicted passes and time left against those actually made after its start.
    # (A probed fit's pass 1 starts with the probe's prediction, learnt = 0, but no time left yet.)
    learnt = next(((report, at) for report, at in starts
                   if report.learnt is not None and report.seconds_left is not None), None)
    if learnt is not None:
        report, at = learnt
        predicted = f"{report.predicted} ({report.predicted / passes:.2f}×)"
        eta = f"{report.seconds_left:.1f} / {end - at:.1f} ({report.seconds_left / (end - at):.2f}×)"
    else:  # converged before anything was learnt
        predicted = eta = f"— (done in {passes})"
    components = np.asarray(model.components_).T
    true = float(np.linalg.norm(components - exact @ (exact.T @ components), 2))
    bound = model.error_bound_
    fewest, point, most = predicted_pass_range(tol)
    after_first = starts[1][0].predicted if len(starts) > 1 else "—"
    return [name, layout, f"{point} ({fewest}–{most}) {point / passes:.2f}×", after_first,
            predicted, passes, f"{plan.seconds:.1f} ({plan.seconds / seconds:.2f}×)", f"{seconds:.1f}", eta,
            f"{bound:.1e}", f"{true:.1e}", f"{bound / true:.2f}" if true > 0 else "—", model.solver_info_["projection"]]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tol", type=float, default=1e-4)
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--d", type=int, default=1000)
    args = parser.parse_args(argv)
    from daskpca.solvers.krylov import SIMULATED_FROM_PASS
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name in ("fast", "continuum", "plateau", "reanalysis"):
            for layout in ("step", "blocks"):
                rows.append(row(Path(folder), name, layout, args.tol, args.n, args.d))
                print(" | ".join(map(str, rows[-1])), flush=True)
    print(markdown_table(["spectrum", "layout", "plan passes (range) /actual", "predicted after pass 1 (prior)",
                          f"predicted after pass {SIMULATED_FROM_PASS} /actual", "passes", "plan s /actual", "fit s",
                          f"ETA after pass {SIMULATED_FROM_PASS} / actual s", "bound", "true sin θ", "bound/true",
                          "answer"], [[str(c) for c in r] for r in rows]))


if __name__ == "__main__":
    main()
