"""Stores laid out the way public archives are, each against its floors and the peers, in one run.

Run from the repository root::

    python -m benchmarks.archives                          # the reanalysis layout, all rows
    python -m benchmarks.archives --layouts step,year,tiles --rows daskpca,floors
    python -m benchmarks.archives --n-time 2920            # a smaller field (one third of a year)
    python -m benchmarks.archives --n-time 1460 --rows '' --s3   # the store on a local S3 server

The field is reanalysis-shaped: ``t2m(time, latitude, longitude)`` on a 1° grid (181 × 360, so
d = 65 160), hourly steps (8760 = a year), float32, zstd (zarr v3), with 20 modes just above a
flat white-noise continuum (λ₂₀ ≈ 1.9 × the continuum's upper edge, the Marchenko–Pastur
(√d + √n)²/n): the hard case for approximate solvers. Layouts:

- ``step``: one time step per chunk (ERA5's zarr copies);
- ``year``: 730 steps per chunk (CMIP-style output chunked by year at 12-hourly… here a month);
- ``tiles``: 24 steps × 45 × 90 spatial tiles (satellite products).

Every fit is opened as the README shows (``xr.open_zarr``, ``PCA(20, weights="coslat", ...)
.fit(ds.t2m, sample_dims="time")``). Rows: the read at the storage chunking and regrouped (the
floor), daskpca with ``tol=1e-4`` and without (its plan's predicted time beside the measured one),
scikit-learn's randomized PCA in memory with its load, and dask's ``svd_compressed`` (q = 2) on the
regrouped array. The true error is sin θ against the exact float64 answer (eigh of the n×n Gram
matrix of the weighted field, computed once and cached beside the data). ``other CPU`` is the busy
share of the machine outside this process during the row (the machines here are shared).
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np

from .runner import _busy_cpu_seconds, machine_info
from .tables import markdown_table

N_LAT, N_LON, K = 181, 360, 20
LAYOUTS = {"step": (1, N_LAT, N_LON), "year": (730, N_LAT, N_LON), "tiles": (24, 45, 90)}


def make_store(path: Path, n_time: int, chunks: tuple) -> Path:
    """Write the field once (reused when its attributes match)."""
    import xarray as xr
    import zarr

    tag = f"{n_time}-{chunks}"
    if path.exists():
        try:
            if zarr.open_group(str(path), mode="r").attrs.get("daskpca_benchmark") == tag:
                return path
        except Exception:
            pass
    d = N_LAT * N_LON
    rng = np.random.default_rng(0)
    edge = (np.sqrt(d) + np.sqrt(n_time)) ** 2 / n_time
    variances = edge * (1.5 + 30 * 0.8 ** np.arange(K))
    modes = np.linalg.qr(rng.standard_normal((d, K)))[0].T.astype(np.float32)
    ds = xr.Dataset(
        {"t2m": (("time", "latitude", "longitude"), np.zeros((n_time, N_LAT, N_LON), np.float32))},
        coords={"time": np.datetime64("2000-01-01T00") + np.arange(n_time).astype("timedelta64[h]"),
                "latitude": np.linspace(90, -90, N_LAT), "longitude": np.arange(N_LON) * 1.0},
    )
    ds.to_zarr(path, mode="w", encoding={"t2m": {"chunks": chunks}}, compute=False, zarr_format=3, consolidated=False)
    array = zarr.open_array(str(path / "t2m"), mode="r+")
    step = chunks[0] * max(1, 730 // chunks[0])
    for start in range(0, n_time, step):
        stop = min(n_time, start + step)
        scores = (rng.standard_normal((stop - start, K)) * np.sqrt(variances)).astype(np.float32)
        block = scores @ modes + rng.standard_normal((stop - start, d), dtype=np.float32) + 280
        array[start:stop] = block.reshape(stop - start, N_LAT, N_LON)
    zarr.open_group(str(path), mode="r+").attrs["daskpca_benchmark"] = tag
    return path


def weights() -> np.ndarray:
    return np.repeat(np.sqrt(np.cos(np.deg2rad(np.linspace(90, -90, N_LAT))).clip(0)), N_LON)


def exact_answer(path: Path) -> np.ndarray:
    """The exact leading components (k × d) of the coslat-weighted field, float64, cached."""
    cache = path.with_suffix(".exact-k20.npy")
    if cache.exists():
        return np.load(cache)
    import zarr
    from scipy.linalg import eigh

    array = zarr.open_array(str(path / "t2m"), mode="r")
    n = array.shape[0]
    w = weights()
    X = np.empty((n, N_LAT * N_LON), np.float64)
    for start in range(0, n, 730):
        X[start:start + 730] = array[start:start + 730].reshape(-1, N_LAT * N_LON)
    X -= X.mean(axis=0)
    X *= w
    values, vectors = eigh(X @ X.T, subset_by_index=[n - K, n - 1])
    components = (X.T @ vectors[:, ::-1]) / np.sqrt(values[::-1])
    np.save(cache, components.T)
    return components.T


def sin_theta(a, b) -> float:
    from scipy.linalg import subspace_angles

    return float(np.sin(np.max(subspace_angles(np.asarray(a).T, np.asarray(b).T))))


def timed(fn):
    busy, start = _busy_cpu_seconds(), time.perf_counter()
    cpu0 = time.process_time()
    out = fn()
    wall = time.perf_counter() - start
    other = max((_busy_cpu_seconds() - busy) - (time.process_time() - cpu0), 0.0)
    import os

    return out, wall, other / (wall * (os.cpu_count() or 1))


def rows_for(path: Path, which: set[str]) -> list[list[str]]:
    import dask.array as da
    import xarray as xr

    from daskpca import PCA
    from daskpca.solvers._geometry import geometry_of, regroup

    warnings.simplefilter("ignore")
    exact = exact_answer(path)
    rows = []

    def row(name, wall, other, passes="", error="", bound="", predicted="", note=""):
        rows.append([name, f"{wall:.1f}", passes, predicted, error, bound, f"{other:.0%}", note])
        print(" | ".join(rows[-1]), flush=True)

    def opened():
        return xr.open_zarr(str(path), consolidated=False).t2m

    if "floors" in which:
        _, wall, other = timed(lambda: opened().sum().compute())
        row("read at storage chunking", wall, other, "1", note=f"{opened().data.npartitions} tasks")
        grouped = regroup(opened().data, 0)
        _, wall, other = timed(lambda: grouped.sum().compute())
        row("read regrouped (the floor)", wall, other, "1", note=geometry_of(grouped).describe())
    if "daskpca" in which:
        for tol in (1e-4, None):
            pca = PCA(K, weights="coslat", tol=tol, random_state=0)
            plan = pca.plan(opened(), sample_dims="time")
            _, wall, other = timed(lambda: pca.fit(opened(), sample_dims="time"))
            predicted = plan.seconds
            row(f"daskpca tol={tol}", wall, other, str(pca.n_passes_), f"{sin_theta(pca.components_, exact):.1e}",
                f"{pca.error_bound_:.1e}", f"{predicted:.1f}" if predicted else "—", f"{pca.solver_}: {pca.solver_reason_[:90]}")
    if "sklearn" in which:
        from sklearn.decomposition import PCA as SkPCA

        def sk():
            X = opened().values.reshape(-1, N_LAT * N_LON) * weights().astype(np.float32)
            return SkPCA(K, svd_solver="randomized", random_state=0).fit(X)

        model, wall, other = timed(sk)
        row("scikit-learn randomized, in memory (load included)", wall, other, "1", f"{sin_theta(model.components_, exact):.1e}")
    if "svd_compressed" in which:
        def compressed():
            X = regroup(opened().data, 0).reshape(-1, N_LAT * N_LON)
            X = (X - X.mean(axis=0)) * weights()
            _, _, v = da.linalg.svd_compressed(X, K, n_power_iter=2, seed=0)
            return v.compute()

        v, wall, other = timed(compressed)
        row("dask svd_compressed q=2 (regrouped)", wall, other, "≥ 6", f"{sin_theta(v, exact):.1e}")
    return rows


def object_store_rows(path: Path) -> list[list[str]]:
    """The same store on an S3-compatible server (moto's, on loopback): a read at the storage
    chunking, a regrouped read (zarr's concurrent selections) and a Krylov fit, beside the local
    regrouped read. Each chunk is one GET: latency, not bandwidth, decides the first row."""
    import logging
    import os

    import fsspec
    import xarray as xr
    from moto.server import ThreadedMotoServer

    from daskpca import PCA
    from daskpca.solvers._geometry import regroup

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    os.environ.update({"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": "us-east-1",
                       "AWS_ENDPOINT_URL": f"http://{host}:{port}"})
    rows = []
    try:
        import boto3

        boto3.client("s3").create_bucket(Bucket="bench")
        local = xr.open_zarr(str(path), consolidated=False)
        url = "s3://bench/era.zarr"
        start = time.perf_counter()
        fsspec.filesystem("s3").put(str(path), url, recursive=True)
        rows.append(["upload to the S3 server (not a pass)", f"{time.perf_counter() - start:.1f}", "", "", "", "", "", ""])

        def opened():
            return xr.open_zarr(url, consolidated=False).t2m

        for name, fn in [
            ("local read regrouped", lambda: regroup(local.t2m.data, 0).sum().compute()),
            ("S3 read at storage chunking", lambda: opened().sum().compute()),
            ("S3 read regrouped (task selections)", lambda: regroup(opened().data, 0).sum().compute()),
        ]:
            _, wall, other = timed(fn)
            rows.append([name, f"{wall:.1f}", "1", "", "", "", f"{other:.0%}", ""])
            print(" | ".join(rows[-1]), flush=True)
        pca = PCA(K, weights="coslat", tol=1e-4, random_state=0)
        _, wall, other = timed(lambda: pca.fit(opened(), sample_dims="time"))
        rows.append(["daskpca tol=1e-4 on S3", f"{wall:.1f}", str(pca.n_passes_), "", "", f"{pca.error_bound_:.1e}", f"{other:.0%}", pca.solver_])
        print(" | ".join(rows[-1]), flush=True)
    finally:
        server.stop()
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-time", type=int, default=8760)
    ap.add_argument("--layouts", default="step")
    ap.add_argument("--rows", default="floors,daskpca,sklearn,svd_compressed")
    ap.add_argument("--data-dir", default="benchmarks/data")
    ap.add_argument("--s3", action="store_true", help="also the same store on a local S3-compatible server (moto)")
    args = ap.parse_args(argv)
    info = machine_info()
    print(f"# archives, {info['date']}, {info['cpus']} CPUs, {info['ram_gib']} GiB")
    header = ["row", "wall s", "passes", "plan s", "sin θ", "bound", "other CPU", "note"]
    for layout in args.layouts.split(","):
        path = make_store(Path(args.data_dir) / f"archive-{layout}-{args.n_time}.zarr", args.n_time, LAYOUTS[layout])
        print(f"\n## {layout}: {args.n_time} × {N_LAT} × {N_LON} float32, chunks {LAYOUTS[layout]}\n")
        rows = rows_for(path, set(args.rows.split(","))) if args.rows else []
        if args.s3:
            rows += object_store_rows(path)
        print("\n" + markdown_table(header, rows))


if __name__ == "__main__":
    main()
