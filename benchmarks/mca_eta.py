"""MCA's Krylov path: the plan's passes and seconds against the fit's, first fits and refits (issue 41).

Two float32 fields on disk (zarr), their cross-covariance's singular values known exactly (X =
√(n − 1)·Q + 3, Y = √(n − 1)·Q·M − 1, Q centred orthonormal, M = U·diag(σ)·Vᵀ), fitted watched
(a listener, as the progress line) with the Krylov path to a tol, the pass cache on (the
default)::

    PYTHONPATH=. python -m benchmarks.mca_eta [--tol 1e-4 1e-6] [--only continuum]

Spectra (k = 6): a continuum just below σ_k (σ_k/σ_{k+1} = 1.25, down to 0.1·σ_k), a plateau of six
equal values under σ_k, then a tail, and fast decay (0.7ⁱ). Layouts: 20 000 samples in 2000-row
chunks, and 8760 samples one per chunk (an archive's time steps). dx = 2000, dy = 1500.
Columns: the plan's passes and seconds against the fit's (a first fit: the planner's model,
blind to the spectrum), the count shown at the start of pass 3 (the first Krylov pass's bound
known), the time left counted at the start of pass 3 against what the fit then took; then a
refit of another draw of the same fields given the first fit (``earlier=``: the version a
scheduled refit replaces), its plan against its fit. Nothing else should run meanwhile.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings

import numpy as np
import zarr

from daskpca import MCA
from daskpca.passes._progress import listen

from .tables import markdown_table

K = 6


def spectra(rank: int):
    """``(name, σ)``: the cross-covariance's singular values (``rank`` of them)."""
    yield "continuum", np.concatenate([np.geomspace(10, 5, K), np.linspace(5 / 1.25, 0.5, rank - K)])
    yield "plateau", np.concatenate([np.geomspace(20, 6, K), np.full(6, 4.5), np.geomspace(2, 1e-3, rank - K - 6)])
    yield "0.7^i", 100 * 0.7 ** np.arange(rank)


def fields(n: int, dx: int, dy: int, values: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """X (n × dx) and Y (n × dy), float32, whose cross-covariance (ddof=1) has singular values
    ``values`` (before the rounding to float32): new rows for every ``seed``, the same spectrum."""
    rng = np.random.default_rng(seed)
    basis = rng.standard_normal((n, dx))
    Q = np.linalg.qr(basis - basis.mean(axis=0))[0]
    del basis
    structure = np.random.default_rng(0)  # U, V: the same for every draw (the same fields)
    U = np.linalg.qr(structure.standard_normal((dx, values.size)))[0]
    V = np.linalg.qr(structure.standard_normal((dy, values.size)))[0]
    X = np.sqrt(n - 1) * Q
    Y = (X @ U * values) @ V.T
    return (X + 3).astype(np.float32), (Y - 1).astype(np.float32)


def write(folder: str, name: str, array: np.ndarray, rows: int) -> zarr.Array:
    store = zarr.create_array(store=f"{folder}/{name}.zarr", shape=array.shape, chunks=(rows, array.shape[1]),
                              dtype=array.dtype)
    store[...] = array
    return zarr.open_array(f"{folder}/{name}.zarr", mode="r")


def watched_fit(x, y, tol: float, earlier=None):
    """``(model, plan, [(time, report) at each pass's start], fit seconds)``."""
    estimator = MCA(K, solver="krylov", tol=tol, random_state=0)
    starts = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = estimator.plan(x, y, earlier=earlier)
        begin = time.perf_counter()
        with listen(lambda r: starts.append((time.perf_counter(), r)) if r.seconds is None else None):
            estimator.fit(x, y, earlier=earlier)
    return estimator, plan, starts, time.perf_counter() - begin


def measure(first: tuple, second: tuple, tol: float) -> list[str]:
    """A watched first fit of ``first`` (x, y), then a refit of ``second`` given it: a row."""
    model, plan, starts, seconds = watched_fit(*first, tol)
    end = starts[0][0] + seconds
    third = next(((t, r) for t, r in starts if r.number == 3), None)
    left = "–" if third is None or third[1].seconds_left is None else \
        f"{third[1].seconds_left:.2f} / {end - third[0]:.2f}"
    shown = "–" if third is None or third[1].predicted is None else str(third[1].predicted)
    refit, replan, _, reseconds = watched_fit(*second, tol, earlier=model)
    return [f"{tol:.0e}", f"{plan.passes} / {model.n_passes_}", f"{plan.passes / model.n_passes_:.2f}",
            f"{plan.seconds:.2f} / {seconds:.2f}", f"{plan.seconds / seconds:.2f}", shown, left,
            f"{replan.passes} / {refit.n_passes_}", f"{replan.seconds:.2f} / {reseconds:.2f}",
            f"{replan.seconds / reseconds:.2f}", refit.solver_info_["planned_from"]]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tol", type=float, nargs="+", default=[1e-4, 1e-6])
    parser.add_argument("--only", nargs="*")
    args = parser.parse_args(argv)
    dx, dy = 2000, 1500
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for layout, n, chunk in (("2000-row chunks", 20_000, 2000), ("one sample a chunk", 8760, 1)):
            for name, values in spectra(min(dx, dy)):
                if args.only and name not in args.only:
                    continue
                draws = []
                for draw in (0, 1):
                    X, Y = fields(n, dx, dy, values, seed=1 + draw)
                    draws.append((write(folder, f"{layout[:3]}-{name}-x{draw}", X, chunk),
                                  write(folder, f"{layout[:3]}-{name}-y{draw}", Y, chunk)))
                    del X, Y
                for tol in args.tol:
                    rows.append([name, f"{n} × ({dx} + {dy}), {layout}", *measure(*draws, tol)])
                    print(" | ".join(rows[-1]), flush=True)
    print(markdown_table(["spectrum", "fields", "tol", "plan / made passes", "ratio", "plan s / fit s", "ratio",
                          "count shown at pass 3", "time left at pass 3: counted / taken",
                          "refit: plan / made passes", "plan s / fit s", "ratio", "refit's count from"], rows))


if __name__ == "__main__":
    main()
