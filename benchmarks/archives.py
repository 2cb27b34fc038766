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
floor), daskpca by default and with ``tol=1e-4`` (its plan's predicted time beside the measured
one, each pass's and the client's seconds; without and with the pass cache when the estimator
takes ``cache=``, and the cache's kind, bytes and place), with ``--rows ...,gram`` the exact Gram
road beside its floor (the strip re-layout alone and NumPy's float64 X·Xᵀ), with ``--cluster`` the
default fit on 2 workers × 1 GiB (less than the full-year field: the disk cache),
scikit-learn's randomized PCA in memory with its load (as a user of xarray writes it,
``xr.open_zarr(...).t2m.values``; and the fastest load one could write: no dask graph, the zarrs
codec pipeline daskpca's reads use — both ratios are printed), and dask's ``svd_compressed`` (q = 2) on the
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

    from daskpca.passes._linalg import top_eigenpairs

    array = zarr.open_array(str(path / "t2m"), mode="r")
    n = array.shape[0]
    w = weights()
    X = np.empty((n, N_LAT * N_LON), np.float64)
    for start in range(0, n, 730):
        X[start:start + 730] = array[start:start + 730].reshape(-1, N_LAT * N_LON)
    X -= X.mean(axis=0)
    X *= w
    # The k leading pairs of the n×n Gram: certified Lanczos (residuals at round-off and a
    # Cholesky inertia check, else LAPACK): LAPACK's subset eigh of 8760² alone took > 10 min here.
    values, vectors, _ = top_eigenpairs(X @ X.T, K)
    components = (X.T @ vectors) / np.sqrt(values)
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
    from daskpca.passes._geometry import geometry_of, regroup

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
        for label, params in daskpca_fits(which):
            fit_rows(row, label, params, opened, exact)
    if "gram" in which:
        gram_floor_rows(row, opened)
    if "sklearn" in which:
        from sklearn.decomposition import PCA as SkPCA

        def sk():
            X = opened().values.reshape(-1, N_LAT * N_LON) * weights().astype(np.float32)
            return SkPCA(K, svd_solver="randomized", random_state=0).fit(X)

        model, wall, other = timed(sk)
        row("scikit-learn randomized, in memory (load included)", wall, other, "1", f"{sin_theta(model.components_, exact):.1e}")

        def sk_best():
            # The fastest load a scikit-learn user could write: no dask graph (chunks=None, one
            # selection) and the zarrs codec pipeline that daskpca's own reads use.
            import zarr

            with zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"}):
                field = xr.open_zarr(str(path), consolidated=False, chunks=None).t2m.values
            X = field.reshape(-1, N_LAT * N_LON) * weights().astype(np.float32)
            return SkPCA(K, svd_solver="randomized", random_state=0).fit(X)

        model, wall, other = timed(sk_best)
        row("scikit-learn randomized, loaded without dask through zarrs", wall, other, "1",
            f"{sin_theta(model.components_, exact):.1e}")
    if "svd_compressed" in which:
        def compressed():
            X = regroup(opened().data, 0).reshape(-1, N_LAT * N_LON)
            X = (X - X.mean(axis=0)) * weights()
            _, _, v = da.linalg.svd_compressed(X, K, n_power_iter=2, seed=0)
            return v.compute()

        v, wall, other = timed(compressed)
        row("dask svd_compressed q=2 (regrouped)", wall, other, "≥ 6", f"{sin_theta(v, exact):.1e}")
    return rows


def has_cache() -> bool:
    """Whether this daskpca's estimators take ``cache=`` (the pass cache of issue 30)."""
    from daskpca import PCA

    return "cache" in PCA().get_params()


def daskpca_fits(which: set[str]) -> list[tuple[str, dict]]:
    """The fits of a case: the default and ``tol=1e-4``, each without and (when the estimator
    takes ``cache=``) with the pass cache; ``gram`` adds the exact Gram road forced."""
    fits = []
    for label, params in (("default", {}), ("tol=1e-4", {"tol": 1e-4})):
        if has_cache():
            fits += [(f"daskpca {label}, cache=False", {**params, "cache": False}),
                     (f"daskpca {label}, cache='auto'", {**params, "cache": "auto"})]
        else:
            fits.append((f"daskpca {label}", params))
    if "gram" in which:
        fits.append(("daskpca solver='gram' (exact)", {"solver": "gram"}))
    return fits


def fit_rows(row, label: str, params: dict, opened, exact):
    """One fit as the README shows it, with its plan's prediction, each pass's and the client's
    seconds, the cache it kept, its true error and its bound."""
    from daskpca import PCA

    pca = PCA(K, weights="coslat", random_state=0, **params)
    plan = pca.plan(opened(), sample_dims="time")
    _, wall, other = timed(lambda: pca.fit(opened(), sample_dims="time"))
    cache = getattr(pca, "cache_", None) or {}
    where = f"{cache.get('kind')} {cache.get('bytes', 0) / 2**30:.2f} GiB {cache.get('where') or ''}".strip() if cache else "—"
    passes = " ".join(f"{s:.1f}" for s in pca.pass_seconds_)
    client = getattr(pca, "client_seconds_", None)
    row(label, wall, other, str(pca.n_passes_), f"{sin_theta(pca.components_, exact):.1e}", f"{pca.error_bound_:.1e}",
        f"{plan.seconds:.1f}" if plan.seconds else "—",
        f"{pca.solver_}; passes {passes} s; client {np.sum(client):.1f} s; cache {where}" if client is not None else pca.solver_)
    return pca


def gram_floor_rows(row, opened):
    """The Gram road's floor on this machine, in the same run: the strip re-layout alone (one
    read of the store, one write of the copy) and NumPy's float64 X̃·X̃ᵀ, timed on a tenth of the
    columns and scaled by 10 (the flops are linear in d)."""
    from daskpca import labeled
    from daskpca.passes._geometry import ColumnStrips

    source = labeled.from_xarray(opened(), "time", "coslat")
    _, wall, other = timed(lambda: ColumnStrips(source.matrix).__enter__().__exit__(None, None, None))
    row("Gram floor: strip re-layout alone (read + write)", wall, other, "1")
    n, d = source.matrix.shape
    tenth = np.asarray(source.matrix[:, : d // 10].compute(), dtype=np.float64)
    tenth -= tenth.mean(axis=0)
    _, wall, other = timed(lambda: tenth @ tenth.T)
    row("Gram floor: NumPy float64 X·Xᵀ (a tenth of the columns × 10)", 10 * wall, other, "",
        note=f"{n}² × {d} = {n * n * d:.2g} multiply-adds")


def cluster_rows(path: Path, exact, memories: tuple[str, ...] = ("1GiB", "4GiB")) -> list[list[str]]:
    """The default fit on a LocalCluster of 2 workers whose memory limits add up to less than
    the field (2 × 1 GiB against 2.1 GiB): with the pass cache it must go to disk. Same answer
    as the threaded fit (sin θ between them), within the workers' limits. Then the same fit on
    2 workers with room for the field (2 × 4 GiB): the memory-cached fit on the same kind of
    cluster, the other yardstick of the disk cache."""
    import xarray as xr
    from distributed import Client, LocalCluster

    rows = []
    for memory in memories:
        with LocalCluster(n_workers=2, threads_per_worker=1, memory_limit=memory, dashboard_address=None) as cluster, \
                Client(cluster):
            def opened():
                return xr.open_zarr(str(path), consolidated=False).t2m

            def row(name, wall, other, passes="", error="", bound="", predicted="", note=""):
                rows.append([name, f"{wall:.1f}", passes, predicted, error, bound, f"{other:.0%}", note])
                print(" | ".join(rows[-1]), flush=True)

            params = {"cache": "auto"} if has_cache() else {}
            fit_rows(row, f"daskpca default on 2 workers × {memory}" + (", cache='auto'" if params else ""), params, opened,
                     exact)
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
    from daskpca.passes._geometry import regroup

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


def with_ratios(rows: list[list[str]]) -> list[list[str]]:
    """Each row's wall time over scikit-learn's in the same run (ratios survive a noisy machine;
    absolute times do not)."""
    sklearn = next((float(r[1]) for r in rows if r[0].startswith("scikit-learn")), None)
    best = next((float(r[1]) for r in rows if r[0].startswith("scikit-learn") and "zarrs" in r[0]), None)
    return [r + ([f"{float(r[1]) / sklearn:.2f}"] if sklearn and r[1] else [""])
            + ([f"{float(r[1]) / best:.2f}"] if best and r[1] else [""]) for r in rows]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-time", type=int, default=8760)
    ap.add_argument("--layouts", default="step")
    ap.add_argument("--rows", default="floors,daskpca,sklearn,svd_compressed",
                    help="comma-separated: floors, daskpca (default and tol=1e-4 fits), gram (the exact Gram road "
                         "and its floor: re-layout + NumPy flops), sklearn, svd_compressed")
    ap.add_argument("--cluster", action="store_true",
                    help="also the default fit on a LocalCluster of 2 workers × 1 GiB (less than a full-year field: "
                         "disk cache) and × 4 GiB (memory cache)")
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
        if args.cluster:
            rows += cluster_rows(path, exact_answer(path))
        if args.s3:
            rows += object_store_rows(path)
        print("\n" + markdown_table(header + ["× sklearn", "× sklearn, zarrs load"], with_ratios(rows)))


if __name__ == "__main__":
    main()
