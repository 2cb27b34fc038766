#!/usr/bin/env python
"""Side-by-side benchmark of daskpca against its floors and its peers.

    python benchmarks/run.py --cases tall,wide,square [--quick] [--json out.json]
                             [--data-dir DIR] [--methods floor-*,daskpca-*] [--cluster]

For every case the script

1. generates a zarr v3 input once (low rank + noise, float32, with a mean offset) under
   ``--data-dir`` (default ``benchmarks/data``, git-ignored) after checking free disk space, and
   reuses it afterwards (the generation parameters are stored in the array's attributes; a
   half-written array is regenerated);
2. computes the exact top-k answer once, in float64 with NumPy, streaming over the zarr in blocks
   (row blocks + exact Chan merge for n ≫ d, column strips + centered Gram for n ≪ d), and caches
   it as ``.npy`` next to the data;
3. runs every method in a fresh subprocess and prints one table.

Why one subprocess per method: the peak memory of a row is then that method's alone (the RSS of a
Python process never shrinks back after a big allocation), and no method inherits another's warm
caches (imported modules, dask's tokenize cache, zarr's metadata). What the subprocesses *do*
share is the OS page cache: the script reads the array once before the first row, so every row
runs with the input in the page cache (cold-cache numbers need root to drop caches; they would
add the disk's read time to every row equally).

Columns
-------
wall s      seconds of the fit alone (imports, cluster start-up and data generation excluded;
            scikit-learn rows include loading the array into memory, which they need).
×read       wall / wall of ``floor-read`` (one read of the array).
×gram       wall / wall of ``floor-gram`` (one read + one float64 blockwise XᵀX or XXᵀ: the
            floor for any exact one-pass PCA).
peak GB     peak RSS of the method's whole process tree (the subprocess plus every descendant:
            distributed workers and nanny processes included), sampled every 20 ms with psutil
            from this parent process. Includes the interpreter and imports (~0.15–0.3 GB).
passes      full reads of the input the method says it made (``n_passes_``), if it says.
reads       bytes the process tree read during the fit (``read_chars`` from /proc, page-cache
            hits included) divided by the stored size of the array: a measured pass count that
            does not trust the method.
sin θ       largest principal angle between the method's top-k subspace and the exact one
            (‖(I − QₓQₓᵀ)Q‖₂, accurate down to ~1e-15).
other CPU   CPU time used by processes *outside* the method's tree while the row ran, as a % of
            the machine (cores × elapsed). Above ~10 % the row was slowed by someone else's work
            (on a shared 2-core machine that matters); rerun it or use --repeat.
"""

from __future__ import annotations

import argparse
import datetime
import fnmatch
import inspect
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import psutil

HERE = Path(__file__).resolve().parent
DEFAULT_DATA_DIR = HERE / "data"
GIB = 2**30

# --------------------------------------------------------------------------------------------
# Cases and the synthetic data
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    n: int
    d: int
    chunks: tuple
    k: int = 20
    rank: int = 30  # rank of the signal; the top k of it are asked for
    noise: float = 0.1  # standard deviation of the isotropic float32 noise
    top_singular: float = 20.0  # s_i = top_singular · decay**i
    decay: float = 0.92
    mean_low: float = 10.0  # per-feature mean offset ~ U(mean_low, mean_low + 5)
    seed: int = 12345

    @property
    def wide(self) -> bool:
        return self.n < self.d

    @property
    def nbytes(self) -> int:
        return self.n * self.d * 4

    def params(self) -> dict:
        p = asdict(self)
        p["chunks"] = list(self.chunks)
        return p


FULL_CASES = {
    "tall": Case("tall", 1_000_000, 500, (20_000, 500)),
    "wide": Case("wide", 2_000, 200_000, (2_000, 10_000)),
    "square": Case("square", 100_000, 4_000, (5_000, 4_000)),
    # Larger than this machine's RAM (24 GiB): 40 GB of float32, 2000 row chunks of 20 MB. Run it
    # with --methods 'floor-*,daskpca-covariance' (the peers would not finish, or not fit).
    "huge": Case("huge", 10_000_000, 1_000, (5_000, 1_000)),
}
# 10× smaller along the long axis, same chunk shapes scaled alike: for smoke tests.
QUICK_CASES = {
    "tall": Case("tall-quick", 100_000, 500, (2_000, 500)),
    "wide": Case("wide-quick", 2_000, 20_000, (2_000, 1_000)),
    "square": Case("square-quick", 10_000, 4_000, (500, 4_000)),
    "huge": Case("huge-quick", 1_000_000, 1_000, (5_000, 1_000)),
}


def _rng(case: Case, *key: int) -> np.random.Generator:
    return np.random.default_rng([case.seed, *key])


def generate_block(case: Case, r0: int, r1: int, c0: int, c1: int) -> np.ndarray:
    """Rows r0:r1, columns c0:c1 of X = Z·diag(s)·W + noise·E + μ (deterministic per block).

    Z (n×rank) and E are standard normal, W (rank×d) is standard normal / √d (rows of ~unit
    norm, nearly orthogonal), so the covariance's top eigenvalues are ≈ s_i² and well separated
    (ratio decay² ≈ 0.85) from each other and from the noise. Row pieces of Z are drawn per
    stored row-chunk and column pieces of W, μ per stored column-chunk, so any block can be made
    independently and in parallel.
    """
    rows_per, cols_per = case.chunks
    i, j = r0 // rows_per, c0 // cols_per
    s = case.top_singular * case.decay ** np.arange(case.rank)
    z = _rng(case, 1, i).standard_normal((r1 - r0, case.rank))
    w = _rng(case, 2, j).standard_normal((case.rank, c1 - c0)) / math.sqrt(case.d)
    mu = case.mean_low + 5.0 * _rng(case, 4, j).random(c1 - c0)
    block = (z * s) @ w
    block += mu
    block = block.astype(np.float32)
    block += np.float32(case.noise) * _rng(case, 3, i, j).standard_normal((r1 - r0, c1 - c0), dtype=np.float32)
    return block


def _chunk_slices(case: Case):
    rows_per, cols_per = case.chunks
    for r0 in range(0, case.n, rows_per):
        for c0 in range(0, case.d, cols_per):
            yield r0, min(r0 + rows_per, case.n), c0, min(c0 + cols_per, case.d)


def data_path(data_dir: Path, case: Case) -> Path:
    return data_dir / f"{case.name}.zarr"


def exact_paths(data_dir: Path, case: Case) -> tuple[Path, Path]:
    stem = f"{case.name}.exact-k{case.k}"
    return data_dir / f"{stem}.components.npy", data_dir / f"{stem}.eigvals.npy"


def stored_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _is_complete(path: Path, case: Case) -> bool:
    import zarr

    if not path.exists():
        return False
    try:
        arr = zarr.open_array(str(path), mode="r")
    except Exception:
        return False
    return arr.attrs.get("complete") is True and arr.attrs.get("params") == case.params()


def check_disk(data_dir: Path, need_bytes: int) -> None:
    """Refuse clearly when the data directory's file system cannot hold the input."""
    data_dir.mkdir(parents=True, exist_ok=True)
    usage = shutil.disk_usage(data_dir)
    margin = 1 * GIB  # leave room for the cached exact answers, results and the system
    print(
        f"disk check: {data_dir} has {usage.free / GIB:.1f} GiB free; this input needs "
        f"{need_bytes / GIB:.2f} GiB (+{margin / GIB:.0f} GiB margin)",
        flush=True,
    )
    if usage.free < need_bytes + margin:
        sys.exit(
            f"refusing to generate: only {usage.free / GIB:.2f} GiB free under {data_dir}, "
            f"need {(need_bytes + margin) / GIB:.2f} GiB. Free space, or pass --data-dir on a "
            "larger file system, or use --quick (10× smaller inputs)."
        )


def ensure_data(data_dir: Path, case: Case) -> Path:
    import zarr

    path = data_path(data_dir, case)
    if _is_complete(path, case):
        print(f"[{case.name}] reusing {path} ({stored_bytes(path) / GIB:.2f} GiB on disk)", flush=True)
        return path
    if path.exists():
        print(f"[{case.name}] {path} is incomplete or was made with other parameters: regenerating", flush=True)
        shutil.rmtree(path)
    check_disk(data_dir, case.nbytes)
    print(f"[{case.name}] generating {case.n} × {case.d} float32 ({case.nbytes / GIB:.2f} GiB) chunks {case.chunks} → {path}", flush=True)
    t0 = time.perf_counter()
    # zarr v3, default codecs (zstd): random float32 barely compresses, so the stored size is
    # ~ the raw size and decompression is close to a memcpy.
    arr = zarr.create_array(
        str(path), shape=(case.n, case.d), chunks=case.chunks, dtype="float32", zarr_format=3,
        attributes={"params": case.params(), "complete": False},
        dimension_names=("sample", "feature"),
    )

    def write(sl):
        r0, r1, c0, c1 = sl
        arr[r0:r1, c0:c1] = generate_block(case, r0, r1, c0, c1)

    with ThreadPoolExecutor(max(1, min(4, os.cpu_count() or 1))) as pool:
        list(pool.map(write, _chunk_slices(case)))
    arr.attrs["complete"] = True
    print(f"[{case.name}] generated in {time.perf_counter() - t0:.1f} s", flush=True)
    return path


# --------------------------------------------------------------------------------------------
# The exact answer (float64, streamed with NumPy)
# --------------------------------------------------------------------------------------------


def _exact_rows(arr, case: Case):
    """Top-k of the covariance from row blocks merged exactly (Chan–Golub–LeVeque)."""
    from scipy.linalg import eigh
    from scipy.linalg.blas import dsyrk

    count, mean, scatter = 0, np.zeros(case.d), np.zeros((case.d, case.d))
    step = case.chunks[0]
    for r0 in range(0, case.n, step):
        x = np.asarray(arr[r0 : r0 + step, :], dtype=np.float64)
        m = x.shape[0]
        mu = x.mean(axis=0)
        x -= mu
        s = dsyrk(1.0, x.T, trans=0, lower=0)
        s = np.triu(s) + np.triu(s, 1).T
        if count:
            delta = mu - mean
            total = count + m
            scatter += s + np.outer(delta, delta) * (count * m / total)
            mean = mean + delta * (m / total)
            count = total
        else:
            count, mean, scatter = m, mu, s
    cov = scatter / (count - 1)
    vals, vecs = eigh(cov, subset_by_index=(case.d - case.k - 1, case.d - 1))
    order = np.argsort(vals)[::-1]
    return vecs[:, order[: case.k]].T.copy(), vals[order]


def _exact_columns(arr, case: Case):
    """Top-k through the centered n×n Gram matrix from column strips (two streams)."""
    from scipy.linalg import eigh
    from scipy.linalg.blas import dsyrk

    step = case.chunks[1]
    gram = np.zeros((case.n, case.n))
    means = []
    for c0 in range(0, case.d, step):
        x = np.asarray(arr[:, c0 : c0 + step], dtype=np.float64)
        mu = x.mean(axis=0)
        means.append(mu)
        x -= mu
        g = dsyrk(1.0, x.T, trans=1, lower=0)
        gram += np.triu(g) + np.triu(g, 1).T
    vals, vecs = eigh(gram, subset_by_index=(case.n - case.k - 1, case.n - 1))
    order = np.argsort(vals)[::-1]
    vals, vecs = vals[order], vecs[:, order]
    basis = vecs[:, : case.k] / np.sqrt(vals[: case.k])
    comps = np.empty((case.k, case.d))
    for j, c0 in enumerate(range(0, case.d, step)):
        x = np.asarray(arr[:, c0 : c0 + step], dtype=np.float64) - means[j]
        comps[:, c0 : c0 + x.shape[1]] = (x.T @ basis).T
    # Re-orthonormalise (exact in exact arithmetic; removes round-off).
    q, r = np.linalg.qr(comps.T)
    q *= np.sign(np.diag(r))
    return q.T.copy(), vals / (case.n - 1)


def ensure_exact(data_dir: Path, case: Case, path: Path) -> np.ndarray:
    import zarr

    comp_path, val_path = exact_paths(data_dir, case)
    if comp_path.exists() and val_path.exists() and comp_path.stat().st_mtime >= (path / "zarr.json").stat().st_mtime:
        return np.load(comp_path)
    print(f"[{case.name}] computing the exact float64 top-{case.k} answer (cached afterwards)", flush=True)
    t0 = time.perf_counter()
    arr = zarr.open_array(str(path), mode="r")
    comps, vals = (_exact_columns if case.wide else _exact_rows)(arr, case)
    np.save(comp_path, comps)
    np.save(val_path, vals)
    gaps = vals[1 : case.k + 1] / vals[: case.k]
    print(
        f"[{case.name}] exact answer in {time.perf_counter() - t0:.1f} s; λ_1 = {vals[0]:.4g}, "
        f"λ_{case.k} = {vals[case.k - 1]:.4g}, λ_{case.k + 1} = {vals[case.k]:.4g}, "
        f"max λ_(i+1)/λ_i = {gaps.max():.3f}",
        flush=True,
    )
    return comps


def sin_theta(estimate: np.ndarray, exact: np.ndarray) -> float:
    """Largest principal angle's sine between the row spaces of estimate and exact (k×d)."""
    estimate = np.asarray(estimate, dtype=np.float64)
    if estimate.ndim != 2 or estimate.shape != exact.shape or not np.all(np.isfinite(estimate)):
        return float("nan")
    q, _ = np.linalg.qr(estimate.T)
    qx, _ = np.linalg.qr(exact.T)
    return float(np.linalg.norm(q - qx @ (qx.T @ q), 2))


def prepare_page_cache(path: Path, stored: int) -> str:
    """Warm the page cache with the input unless it cannot stay cached; say which (for the header).

    An input larger than half the RAM would be evicted while it is read: every row (floors
    included) then reads it from disk.
    """
    if stored < 0.5 * psutil.virtual_memory().total:
        return f"page cache warmed in {warm_page_cache(path):.1f} s"
    return "larger than half the RAM: not cached, every row reads from disk"


def warm_page_cache(path: Path) -> float:
    t0 = time.perf_counter()
    for f in sorted(path.rglob("*")):
        if f.is_file():
            with open(f, "rb") as fh:
                while fh.read(16 * 2**20):
                    pass
    return time.perf_counter() - t0


# --------------------------------------------------------------------------------------------
# Methods (each runs inside a child process)
# --------------------------------------------------------------------------------------------


def list_methods(case: Case) -> list[str]:
    """Every method applicable to a case, in table order (optional ones checked at runtime)."""
    methods = ["floor-read", "floor-gram"]
    try:
        from daskpca.solvers import SOLVERS
    except Exception:  # pragma: no cover - the package is the point of this script
        SOLVERS = {}
    exact_solver = "gram" if case.wide else "covariance"
    for name in [exact_solver, "randomized", "tsqr", "als"]:
        if name in SOLVERS:
            methods.append(f"daskpca-{name}")
    if "randomized" in SOLVERS:
        # Fewer power iterations than the accuracy-first default (q = 7 when k < 0.1·min(n, d));
        # with q = 1 a larger sketch (p = 20) buys accuracy for no extra pass.
        methods += ["daskpca-randomized-q1", "daskpca-randomized-q1-p20", "daskpca-randomized-q2"]
    methods += ["sklearn-covariance_eigh", "sklearn-full", "sklearn-randomized", "dask-ml-full", "dask-ml-randomized", "xeofs"]
    return methods


def _open_dask(path: str):
    import dask.array as da

    return da.from_zarr(path)


def _tall_view(X, wide: bool):
    """The matrix whose XᵀX is the small Gram: X itself (n ≥ d) or Xᵀ (n < d)."""
    return X.T if wide else X


def m_floor_read(path, case, ctx):
    X = _open_dask(path)
    X.sum(dtype=np.float64).compute()
    return None, 1, None


def _gram_block(b):
    b = b.astype(np.float64)
    return (b.T @ b)[None]  # numpy uses syrk for a.T @ a


def m_floor_gram(path, case, ctx):
    X = _tall_view(_open_dask(path), case.wide)
    X = X.rechunk({1: -1})
    p = X.shape[1]
    nb = X.numblocks[0]
    parts = X.map_blocks(_gram_block, new_axis=[2], chunks=((1,) * nb, (p,), (p,)), dtype=np.float64)
    parts.sum(axis=0, split_every=8).compute()
    return None, 1, None


def m_daskpca(solver, **options):
    """daskpca with ``solver`` and estimator ``options`` (e.g. n_power_iter for randomized-q2)."""

    def run(path, case, ctx):
        import daskpca

        X = _open_dask(path)
        if hasattr(daskpca, "PCA"):
            kwargs = dict(n_components=case.k, solver=solver, **options)
            if "random_state" in inspect.signature(daskpca.PCA).parameters:
                kwargs["random_state"] = 0
            model = daskpca.PCA(**kwargs).fit(X)
            ctx["api"] = "daskpca.PCA"
            ctx["solver_"] = getattr(model, "solver_", solver)
            return np.asarray(model.components_), getattr(model, "n_passes_", None), None
        from daskpca.solvers import SOLVERS
        from daskpca.solvers._base import ComponentRequest

        ctx["api"] = f"daskpca.solvers.{solver}.solve"
        res = SOLVERS[solver].solve(X, ComponentRequest(case.k, case.n, case.d), random_state=0)
        return res.components, res.n_passes, None

    return run


def _load_numpy(path):
    import zarr

    return zarr.open_array(path, mode="r")[...]


def m_sklearn(svd_solver):
    def run(path, case, ctx):
        from sklearn.decomposition import PCA

        total = psutil.virtual_memory().total
        if case.nbytes > total / 3:
            return "skip", None, f"input {case.nbytes / GIB:.1f} GiB > RAM/3"
        X = _load_numpy(path)  # timed: an in-memory method has to load the data
        model = PCA(n_components=case.k, svd_solver=svd_solver, random_state=0).fit(X)
        return model.components_, 1, None

    return run


def m_dask_ml(svd_solver):
    def run(path, case, ctx):
        try:
            from dask_ml.decomposition import PCA
        except Exception as exc:  # not installed / broken with this dask
            return "skip", None, f"dask-ml unavailable: {type(exc).__name__}: {exc}"[:120]
        X = _open_dask(path)
        kwargs = dict(n_components=case.k, svd_solver=svd_solver, random_state=0)
        if svd_solver == "randomized":
            kwargs["iterated_power"] = 3
        if svd_solver == "full":
            # dask-ml's exact path is TSQR, which needs a single column block.
            X = X.rechunk({1: -1})
        model = PCA(**kwargs).fit(X)
        return np.asarray(model.components_), None, None

    return run


def m_xeofs(path, case, ctx):
    try:
        import xarray as xr
        import xeofs
    except Exception as exc:
        return "skip", None, f"xeofs unavailable: {type(exc).__name__}: {exc}"[:120]
    a = _open_dask(path)
    # xeofs needs index coordinates on both dims (it stacks them into a MultiIndex).
    X = xr.DataArray(a, dims=("sample", "feature"), coords={"sample": np.arange(a.shape[0]), "feature": np.arange(a.shape[1])})
    model = xeofs.single.EOF(n_modes=case.k, random_state=0)
    model.fit(X, dim="sample")
    comps = model.components().transpose("mode", "feature").values
    return np.asarray(comps), None, f"xeofs {xeofs.__version__} solver=auto"


def method_function(name: str):
    if name == "floor-read":
        return m_floor_read
    if name == "floor-gram":
        return m_floor_gram
    if name.startswith("daskpca-randomized-q"):  # fixed power iterations q (and oversampling p): -q1, -q1-p20
        q, _, p = name.removeprefix("daskpca-randomized-q").partition("-p")
        return m_daskpca("randomized", n_power_iter=int(q), **({"n_oversamples": int(p)} if p else {}))
    if name.startswith(("daskpca-als-i", "daskpca-ppca-i")):  # exactly N iterations (tol=0): cost per pass
        solver, _, iterations = name.removeprefix("daskpca-").partition("-i")
        return m_daskpca(solver, max_iter=int(iterations), tol=0.0)
    if name.startswith("daskpca-"):
        return m_daskpca(name.removeprefix("daskpca-"))
    if name.startswith("sklearn-"):
        return m_sklearn(name.removeprefix("sklearn-"))
    if name.startswith("dask-ml-"):
        return m_dask_ml(name.removeprefix("dask-ml-"))
    if name == "xeofs":
        return m_xeofs
    raise ValueError(f"unknown method {name!r}")


#: Methods that run on the distributed LocalCluster under --cluster (the others are not dask
#: based, or are peers measured with their default scheduler).
CLUSTER_METHODS = ("floor-read", "floor-gram", "daskpca-*")


def _tree_read_chars() -> int:
    total = 0
    me = psutil.Process()
    for p in [me, *me.children(recursive=True)]:
        try:
            total += p.io_counters().read_chars
        except (psutil.Error, AttributeError):
            pass
    return total


def _preimport(method: str) -> None:
    """Import what a method needs before the clock starts (imports are not the method's cost)."""
    import importlib

    mods = ["dask.array", "zarr", "scipy.linalg"]
    if method.startswith("daskpca-"):
        mods += ["daskpca", "daskpca.solvers"]
    elif method.startswith("sklearn-"):
        mods += ["sklearn.decomposition"]
    elif method.startswith("dask-ml-"):
        mods += ["dask_ml.decomposition"]
    elif method == "xeofs":
        mods += ["xarray", "xeofs"]
    for mod in mods:
        try:
            importlib.import_module(mod)
        except Exception:
            pass  # the method reports the failure itself


def child_main(spec: dict) -> None:
    """Run one method and write its result (JSON + components .npy) where the parent said."""
    case = Case(**{**spec["case"], "chunks": tuple(spec["case"]["chunks"])})
    method = spec["method"]
    result = {"method": method, "scheduler": "threads"}
    ctx: dict = {}
    import dask

    if spec.get("blas_threads"):
        from threadpoolctl import threadpool_limits

        threadpool_limits(int(spec["blas_threads"]))
    client = cluster = None
    if spec.get("cluster") and any(fnmatch.fnmatch(method, pat) for pat in CLUSTER_METHODS):
        from distributed import Client, LocalCluster

        t0 = time.perf_counter()
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
        client = Client(cluster)
        result["scheduler"] = "LocalCluster 2×1"
        result["cluster_start_s"] = time.perf_counter() - t0
    else:
        dask.config.set(scheduler="threads")
    func = method_function(method)
    _preimport(method)
    reads0 = _tree_read_chars()
    t0 = time.perf_counter()
    comps, passes, note = func(spec["path"], case, ctx)
    wall = time.perf_counter() - t0
    reads1 = _tree_read_chars()
    if isinstance(comps, str) and comps == "skip":
        result.update(status="skip", note=note)
    else:
        result.update(status="ok", wall=wall, passes=passes, note=note, read_bytes=reads1 - reads0, **ctx)
        if comps is not None:
            np.save(spec["components_out"], np.asarray(comps, dtype=np.float64))
    if client is not None:
        client.close()
        cluster.close()
    with open(spec["result_out"], "w") as fh:
        json.dump(result, fh)


# --------------------------------------------------------------------------------------------
# Parent: run each method in a subprocess, sample the process tree's RSS
# --------------------------------------------------------------------------------------------


class TreeRSSSampler(threading.Thread):
    """Peak of Σ RSS over a process and all its descendants, sampled every ``interval`` s."""

    def __init__(self, pid: int, interval: float = 0.02):
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.peak = 0
        self.cpu = {}  # pid -> last seen user+system seconds (the tree's own CPU use)
        self._halt = threading.Event()

    def run(self):
        try:
            root = psutil.Process(self.pid)
        except psutil.Error:
            return
        while not self._halt.is_set():
            total = 0
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                break
            for p in procs:
                try:
                    total += p.memory_info().rss
                    t = p.cpu_times()
                    self.cpu[p.pid] = t.user + t.system
                except psutil.Error:
                    pass
            self.peak = max(self.peak, total)
            self._halt.wait(self.interval)

    def stop(self):
        self._halt.set()
        self.join()


def _busy_cpu_seconds() -> float:
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + getattr(t, "irq", 0) + getattr(t, "softirq", 0) + getattr(t, "steal", 0)


def run_method_best(method: str, case: Case, path: Path, args, tmp: Path) -> dict:
    """Run a method ``--repeat`` times; keep the fastest run's row and the largest peak."""
    rows = [run_method(method, case, path, args, tmp) for _ in range(max(1, args.repeat))]
    ok = [r for r in rows if r.get("status") == "ok"]
    if not ok:
        return rows[-1]
    best = dict(min(ok, key=lambda r: r["wall"]))
    best["peak_rss"] = max(r["peak_rss"] for r in ok)
    best["walls"] = [r["wall"] for r in ok]
    return best


def run_method(method: str, case: Case, path: Path, args, tmp: Path) -> dict:
    spec = {
        "case": case.params(),
        "method": method,
        "path": str(path),
        "cluster": args.cluster,
        "blas_threads": args.blas_threads,
        "components_out": str(tmp / f"{case.name}.{method}.npy"),
        "result_out": str(tmp / f"{case.name}.{method}.json"),
    }
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)]
    t0 = time.perf_counter()
    busy0 = _busy_cpu_seconds()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    sampler = TreeRSSSampler(proc.pid)
    sampler.start()
    try:
        output, _ = proc.communicate(timeout=args.timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the child's own session: it and its workers only
        output, _ = proc.communicate()
        timed_out = True
    sampler.stop()
    elapsed = time.perf_counter() - t0
    # CPU time other processes used while this row ran: a shared machine makes rows slower.
    foreign = max(0.0, _busy_cpu_seconds() - busy0 - sum(sampler.cpu.values()))
    row = {
        "case": case.name, "method": method, "peak_rss": sampler.peak, "elapsed_total": elapsed,
        "other_cpu_pct": 100.0 * foreign / (elapsed * (os.cpu_count() or 1)),
    }
    if timed_out:
        row.update(status="timeout", note=f"killed after {args.timeout:.0f} s")
        return row
    try:
        with open(spec["result_out"]) as fh:
            row.update(json.load(fh))
    except FileNotFoundError:
        tail = " | ".join(line for line in output.strip().splitlines()[-3:])
        row.update(status="error", note=tail[-300:])
        return row
    if args.verbose and output.strip():
        print(output, flush=True)
    return row


def fmt_row(row: dict, floors: dict, stored: int) -> list[str]:
    def num(x, f):
        return "" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, f)

    ok = row.get("status") == "ok"
    wall = row.get("wall") if ok else None
    xr = wall / floors["floor-read"] if ok and floors.get("floor-read") else None
    xg = wall / floors["floor-gram"] if ok and floors.get("floor-gram") else None
    reads = row.get("read_bytes") / stored if ok and row.get("read_bytes") is not None and stored else None
    sin = row.get("sin_theta")
    note = row.get("note") or ""
    if not ok:
        note = f"{row.get('status')}: {note}"
    elif row.get("scheduler") != "threads":
        note = f"[{row['scheduler']}] {note}".strip()
    return [
        row["method"],
        num(wall, ".2f"),
        num(xr, ".2f"),
        num(xg, ".2f"),
        num(row.get("peak_rss", 0) / 1e9, ".2f") if row.get("status") != "skip" else "",
        "" if row.get("passes") is None else str(row["passes"]),
        num(reads, ".2f"),
        "" if sin is None else ("—" if isinstance(sin, float) and math.isnan(sin) else f"{sin:.1e}"),
        "" if row.get("other_cpu_pct") is None or row.get("status") == "skip" else f"{row['other_cpu_pct']:.0f}%",
        note,
    ]


HEADER = ["method", "wall s", "×read", "×gram", "peak GB", "passes", "reads", "sin θ", "other CPU", "note"]


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table with padded columns (readable as plain text too)."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def render_table(rows: list[list[str]]) -> str:
    return markdown_table(HEADER, rows)


def machine_info() -> dict:
    info = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "ram_gib": round(psutil.virtual_memory().total / GIB, 1),
        "env": {k: v for k, v in os.environ.items() if k.startswith(("OPENBLAS", "OMP_", "MKL_", "DASK_"))},
    }
    versions = {}
    for mod in ["numpy", "scipy", "dask", "distributed", "zarr", "sklearn", "daskpca", "dask_ml", "xeofs"]:
        try:
            versions[mod] = __import__(mod).__version__
        except Exception:
            versions[mod] = None
    info["versions"] = versions
    try:
        import scipy.linalg  # noqa: F401  (loads scipy's BLAS so it is listed)
        from threadpoolctl import threadpool_info

        info["blas"] = [
            f"{i['internal_api']} {i.get('version')} {i.get('architecture', '')} threads={i['num_threads']}".replace("  ", " ")
            for i in threadpool_info()
        ]
    except Exception:
        pass
    return info


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="tall,wide,square", help="comma-separated: tall, wide, square, huge (40 GB on disk)")
    ap.add_argument("--quick", action="store_true", help="10× smaller inputs (smoke test)")
    ap.add_argument("--json", type=Path, help="also write all rows and machine info here")
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    ap.add_argument("--methods", default="*", help="comma-separated names or globs, e.g. 'floor-*,daskpca-*'; exact names may "
                    "also be variants: daskpca-randomized-q<q>[-p<p>], daskpca-als-i<iterations>, daskpca-ppca-i<iterations>")
    ap.add_argument("--cluster", action="store_true", help="run floors and daskpca rows on a 2-worker distributed LocalCluster")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds before a method is killed (default 900)")
    ap.add_argument("--repeat", type=int, default=1, help="run each method N times, report the fastest (default 1)")
    ap.add_argument("--blas-threads", type=int, default=None, help="limit BLAS threads in every method (threadpoolctl); default: leave as is")
    ap.add_argument("--list", action="store_true", help="print the methods for each case and exit")
    ap.add_argument("--verbose", action="store_true", help="show each method's own output")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.child:
        child_main(json.loads(args.child))
        return 0

    table = QUICK_CASES if args.quick else FULL_CASES
    names = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in names if c not in table]
    if unknown:
        ap.error(f"unknown case(s) {unknown}; choose from {sorted(table)}")
    patterns = [p.strip() for p in args.methods.split(",") if p.strip()]
    info = machine_info()
    print(f"# {info['date']}  {info['cpus']} CPUs, {info['ram_gib']} GiB RAM, python {info['python']}")
    print(f"# versions: {', '.join(f'{k} {v}' for k, v in info['versions'].items())}")
    print(f"# BLAS: {'; '.join(info.get('blas', []))}; env: {info['env'] or 'no OPENBLAS_*/OMP_* set'}")
    all_rows = []
    with tempfile.TemporaryDirectory(prefix="daskpca-bench-") as tmpdir:
        tmp = Path(tmpdir)
        for name in names:
            case = table[name]
            path = ensure_data(args.data_dir, case)
            exact = ensure_exact(args.data_dir, case, path)
            stored = stored_bytes(path)
            methods = [m for m in list_methods(case) if any(fnmatch.fnmatch(m, p) for p in patterns)]
            # Exact names outside the default list are variants method_function knows (-q3-p30, -i10).
            methods += [p for p in patterns if not any(c in p for c in "*?[") and p not in methods]
            if args.list:
                print(f"{case.name}: {', '.join(methods)}")
                continue
            cache_note = prepare_page_cache(path, stored)
            print(f"\n## {case.name}: {case.n} × {case.d} float32, chunks {case.chunks}, k = {case.k}, "
                  f"{stored / 1e9:.2f} GB stored ({cache_note})"
                  f"{', --cluster' if args.cluster else ''}{f', BLAS threads {args.blas_threads}' if args.blas_threads else ''}", flush=True)
            rows, floors = [], {}
            for method in methods:
                row = run_method_best(method, case, path, args, tmp)
                comp_file = tmp / f"{case.name}.{method}.npy"
                if row.get("status") == "ok" and comp_file.exists():
                    row["sin_theta"] = sin_theta(np.load(comp_file), exact)
                    comp_file.unlink()
                if method.startswith("floor-") and row.get("status") == "ok":
                    floors[method] = row["wall"]
                rows.append(row)
                sin_part = "" if row.get("sin_theta") is None else f", sin θ {row['sin_theta']:.1e}"
                note_part = "" if not row.get("note") else " — " + str(row["note"])[:160]
                print(f"  {method}: {row.get('status')} {row.get('wall', float('nan')):.2f} s, "
                      f"peak {row['peak_rss'] / 1e9:.2f} GB{sin_part}{note_part}", flush=True)
            print()
            print(render_table([fmt_row(r, floors, stored) for r in rows]), flush=True)
            for r in rows:
                r["stored_bytes"] = stored
                r["case_params"] = case.params()
            all_rows += rows
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        with open(args.json, "w") as fh:
            json.dump({"machine": info, "cluster": args.cluster, "blas_threads": args.blas_threads, "quick": args.quick, "rows": all_rows}, fh, indent=1, default=str)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
