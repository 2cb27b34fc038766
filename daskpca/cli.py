"""The ``daskpca`` command line: batch jobs wiring config → cluster → io → estimator → io.

No math lives here. Exit codes: 0 success, 2 bad usage or bad input (one line on stderr naming the
problem and the fix), 1 a runtime failure.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime
from pathlib import Path

import numpy as np


def _demo_data(path: Path, n_samples: int, n_features: int, rank: int, chunk_rows: int, seed: int):
    """Write (or reuse) a low-rank-plus-noise float32 zarr array; returns it opened lazily."""
    import dask.array as da
    import zarr

    if path.exists():
        existing = zarr.open_array(str(path), mode="r")
        if existing.shape == (n_samples, n_features):
            print(f"reusing the sample array {path} {existing.shape} {existing.dtype}")
            return da.from_zarr(existing)
        raise SystemExit(
            f"daskpca demo: {path} holds an array of shape {existing.shape}, not "
            f"({n_samples}, {n_features}); pass another --dir or remove it."
        )
    rng = da.random.default_rng(seed)
    basis = np.linalg.qr(np.random.default_rng(seed).standard_normal((n_features, rank)))[0]
    scales = 10.0 * 0.7 ** np.arange(rank)
    scores = rng.standard_normal((n_samples, rank), chunks=(chunk_rows, rank)) * scales
    noise = rng.standard_normal((n_samples, n_features), chunks=(chunk_rows, n_features))
    X = (scores @ basis.T + 0.5 * noise + 100.0).astype(np.float32)
    from .io import write_array

    write_array(X, path)
    print(f"wrote the sample array {path} {X.shape} float32 ({X.nbytes / 2**20:.0f} MiB)")
    return da.from_zarr(str(path))


def _run_demo(args) -> int:
    from distributed import Client, LocalCluster

    from . import PCA
    from .io import write_array

    root = Path(args.dir)
    with LocalCluster(n_workers=args.workers, threads_per_worker=1, memory_limit=args.memory_limit,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        print(f"Dask dashboard: {client.dashboard_link}")
        X = _demo_data(root / "input.zarr", args.n_samples, args.n_features, 10, args.chunk_rows, seed=0)
        start = time.perf_counter()
        pca = PCA(n_components=args.n_components).fit(X)
        elapsed = time.perf_counter() - start
        print(f"fitted {pca.solver_!r} PCA on {X.shape} in {elapsed:.1f} s "
              f"({pca.n_passes_} pass{'es' if pca.n_passes_ > 1 else ''} over the data; {pca.solver_reason_})")
        print(_variance_table(pca))
        out = root / f"results-{datetime.now():%Y%m%d-%H%M%S}"
        write_array(pca.components_, out / "components.zarr", name="principal axes (mode × feature)")
        write_array(pca.transform(X), out / "scores.zarr", name="scores (sample × mode)")
        print(f"wrote {out / 'components.zarr'} {pca.components_.shape} and {out / 'scores.zarr'} "
              f"({X.shape[0]}, {pca.n_components_})")
    return 0


def _variance_table(pca) -> str:
    lines = [" mode   variance    ratio  cumulative"]
    cumulative = np.cumsum(pca.explained_variance_ratio_)
    for i, (var, ratio, cum) in enumerate(zip(pca.explained_variance_, pca.explained_variance_ratio_, cumulative), 1):
        lines.append(f"{i:5d} {var:10.4g} {ratio:8.2%} {cum:10.2%}")
    lines.append(f"distortion J (sum of discarded eigenvalues) = {pca.distortion_:.4g}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="daskpca", description="Out-of-core PCA on Dask.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo",
        help="write a sample zarr array, fit PCA on an embedded Dask cluster, write results",
        description="Writes a sample float32 zarr array (reused on later runs), starts a local "
        "Dask cluster (dashboard link printed), fits PCA, prints the explained-variance table "
        "and writes components and scores to a new results folder.",
    )
    demo.add_argument("--dir", default="daskpca-demo", help="folder for the sample data and results (default: %(default)s)")
    demo.add_argument("--n-samples", type=int, default=200_000, help="rows of the sample array (default: %(default)s)")
    demo.add_argument("--n-features", type=int, default=200, help="columns of the sample array (default: %(default)s)")
    demo.add_argument("--chunk-rows", type=int, default=20_000, help="rows per chunk (default: %(default)s)")
    demo.add_argument("--n-components", type=int, default=10, help="components to keep (default: %(default)s)")
    demo.add_argument("--workers", type=int, default=2, help="local worker processes (default: %(default)s)")
    demo.add_argument("--memory-limit", default="2GiB", help="memory limit per worker (default: %(default)s)")
    demo.set_defaults(run=_run_demo)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
