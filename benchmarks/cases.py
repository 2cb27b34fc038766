"""The benchmark cases: their synthetic zarr inputs, the exact answers and the sin θ score.

**Adding a case is one entry in** :data:`FULL_CASES` (and its 10× smaller twin in
:data:`QUICK_CASES`, same key): ``--cases`` of ``benchmarks.run``, ``benchmarks.growth`` (its
``BASE``) and ``benchmarks.profile_kernels fit --case`` all read these two dicts. A case is a
:class:`Case`: shape, stored chunks, k and the generator's spectrum (rank, noise,
``top_singular · decay**i``); :func:`generate_block` makes any block of it deterministically.

- :func:`ensure_data` generates the zarr v3 input once under the data directory (default
  ``benchmarks/data``, git-ignored) after checking free disk space, and reuses it afterwards (the
  generation parameters are stored in the array's attributes; a half-written array is
  regenerated);
- :func:`ensure_exact` computes the exact top-k answer once, in float64 with NumPy, streaming over
  the zarr in blocks (row blocks + exact Chan merge for n ≫ d, column strips + centered Gram for
  n ≪ d), and caches it as ``.npy`` next to the data;
- :func:`sin_theta` scores a method's components against it.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

DEFAULT_DATA_DIR = Path(__file__).resolve().parent / "data"
GIB = 2**30


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
    # Hard spectra (issue 14): k = 20 modes just above a flat noise continuum (noise σ = 1 gives a
    # Marchenko–Pastur bulk up to (1 + √(d/n))² = 2.25 at d/n = 1/4; the signal s_i = 10·0.92^i
    # puts λ_20 ≈ 5.5, so λ_21/λ_20 ≈ 0.4). Both large: the case the exact solvers barely fit.
    "hard": Case("hard", 40_000, 10_000, (2_000, 10_000), rank=20, noise=1.0, top_singular=10.0),
    "hard-tall": Case("hard-tall", 200_000, 2_000, (10_000, 2_000), rank=20, noise=1.0, top_singular=7.5),
}
# 10× smaller along the long axis, same chunk shapes scaled alike: for smoke tests.
QUICK_CASES = {
    "tall": Case("tall-quick", 100_000, 500, (2_000, 500)),
    "wide": Case("wide-quick", 2_000, 20_000, (2_000, 1_000)),
    "square": Case("square-quick", 10_000, 4_000, (500, 4_000)),
    "huge": Case("huge-quick", 1_000_000, 1_000, (5_000, 1_000)),
    "hard": Case("hard-quick", 4_000, 10_000, (400, 10_000), rank=20, noise=1.0, top_singular=10.0),
    "hard-tall": Case("hard-tall-quick", 20_000, 2_000, (1_000, 2_000), rank=20, noise=1.0, top_singular=7.5),
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


def is_complete(path: Path, case: Case) -> bool:
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
    if is_complete(path, case):
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
