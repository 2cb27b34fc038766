"""The EOF family side by side: plain, Hilbert, rotated and extended EOFs, daskpca against xeofs.

Run from the repository root::

    python -m benchmarks.eof_family                       # ~0.4 GB field, threaded scheduler
    python -m benchmarks.eof_family --cluster 2x1GiB      # on a LocalCluster whose workers hold
                                                          # 1 GiB each (the field is larger)

One synthetic field (float32 zarr, time × lat × lon, in chunks of every time step and a band of
latitudes: column strips, as Hilbert EOFs want them, that flatten into matrix columns without a
rechunk): an eastward travelling wave, a standing pattern and noise.
For each variant it prints the passes daskpca's model reports (the chunk-read tests in tests/
prove those counts), the chunk reads measured during the fit divided by the field's chunk count
("reads": every read of a chunk, by this process or a cluster's workers, is logged by the store),
the wall time, and the accuracy against an independent float64 NumPy computation on the same
data held in memory: sin θ of the leading subspace (complex for Hilbert EOFs), or for rotated
EOFs the largest distance of a rotated pattern from NumPy's (varimax written out on NumPy's
loadings). xeofs runs on the same dask-backed DataArray with its defaults (what a user gets); a
failing peer is reported, not hidden. ``other CPU`` is the busy share of the machine outside
this process and its cluster's workers during the row (the machines here are shared); ``peak
worker RSS`` the largest resident memory of any worker process during the row.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from zarr.storage import WrapperStore

from .runner import _busy_cpu_seconds, machine_info
from .tables import markdown_table

K = 3  # the travelling wave (a pair) and the standing pattern: well separated from the noise
N_LAGS, LAG_STEP = 3, 2


class ReadLog(WrapperStore):
    """A zarr store that appends the key of every chunk read to ``log_path`` (one line each,
    ``O_APPEND``: safe from many processes), so reads by a cluster's workers are counted too."""

    def __init__(self, store, log_path: str | None = None):
        super().__init__(store)
        self.log_path = log_path

    async def get(self, key, prototype, byte_range=None):
        if self.log_path and "/c/" in "/" + key:
            fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            try:
                os.write(fd, (key + "\n").encode())
            finally:
                os.close(fd)
        return await self._store.get(key, prototype, byte_range)


def chunk_reads(log_path: Path) -> int:
    return len(log_path.read_text().splitlines()) if log_path.exists() else 0


def make_field(path: Path, n_time: int, n_lat: int, n_lon: int, seed: int = 0, lat_chunk: int | None = None):
    """Write the benchmark field (float32) to ``path``; return it as a lazy DataArray read
    through :class:`ReadLog` (log: ``path`` + ``.reads``) and its number of chunks.

    Chunks: all time steps × ``lat_chunk`` latitudes (default an eighth) × all longitudes.
    """
    from zarr.storage import LocalStore

    import dask.array as da
    import xarray as xr
    import zarr

    rng = np.random.default_rng(seed)
    lat = np.linspace(-60, 60, n_lat)
    lon = np.linspace(0, 360, n_lon, endpoint=False)
    store = zarr.create_array(str(path), shape=(n_time, n_lat, n_lon), dtype="f4",
                              chunks=(n_time, lat_chunk or max(1, n_lat // 8), n_lon), overwrite=True)
    envelope = np.exp(-(lat[:, None] / 30.0) ** 2)
    standing = np.cos(np.deg2rad(lat))[:, None] * np.sin(np.deg2rad(2 * lon))[None, :]
    for start in range(0, n_time, 256):
        t = np.arange(start, min(start + 256, n_time))[:, None, None]
        wave = np.cos(2 * np.pi * (t / 60.0 - lon[None, None, :] / 360.0)) * envelope
        amplitude = rng.standard_normal((len(t), 1, 1))
        noise = 0.5 * rng.standard_normal((len(t), n_lat, n_lon))
        store[start : start + len(t)] = (2.0 * wave + amplitude * standing + noise + 15.0).astype("f4")
    logged = zarr.open_array(store=ReadLog(LocalStore(str(path), read_only=True), str(path) + ".reads"), mode="r")
    field = xr.DataArray(da.from_zarr(logged), dims=("time", "lat", "lon"),
                         coords={"time": np.arange(n_time), "lat": lat, "lon": lon}, name="field")
    return field, int(np.prod(store.cdata_shape))


# ---------------------------------------------------------------------------------------- references


def _weighted_matrix(field) -> np.ndarray:
    weights = np.sqrt(np.cos(np.deg2rad(field["lat"].values.astype(np.float64))))[:, None] * np.ones(field.sizes["lon"])
    return field.values.astype(np.float64).reshape(field.sizes["time"], -1) * weights.ravel()


#: Columns of the reference matrices formed at a time: the references hold the float64 field
#: once (X) plus one block, so the cluster-sized field (~1 GiB float32) fits this machine.
REFERENCE_COLUMNS = 4096


def _top_right_vectors(block, n_columns: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k right singular vectors (rows) of a centered matrix given by ``block(columns)``,
    through its n×n Gram matrix (formed with plain ``@``, in column blocks)."""
    spans = [slice(j, min(j + REFERENCE_COLUMNS, n_columns)) for j in range(0, n_columns, REFERENCE_COLUMNS)]
    whole = block(slice(0, n_columns)) if n_columns < block(slice(0, 1)).shape[0] else None
    if whole is not None:  # more samples than features (long series): the d×d covariance instead
        values, vectors = np.linalg.eigh(whole.conj().T @ whole)
        top = np.argsort(values)[::-1][:k]
        return vectors[:, top].T, values[top] / (whole.shape[0] - 1)
    gram = sum(b @ b.conj().T for b in map(block, spans))
    values, vectors = np.linalg.eigh(gram)
    top = np.argsort(values)[::-1][:k]
    basis = vectors[:, top] / np.sqrt(values[top])
    rows = np.concatenate([(block(span).conj().T @ basis) for span in spans]).T
    return rows, values[top] / (gram.shape[0] - 1)


def references(field, variants=("plain", "hilbert", "rotated", "extended")) -> dict:
    from scipy.signal import hilbert

    X = _weighted_matrix(field)
    n, d = X.shape
    mean = X.mean(axis=0)
    out = {}
    if {"plain", "rotated"} & set(variants):
        plain, variance = _top_right_vectors(lambda c: X[:, c] - mean[c], d, K)
        out.update(plain=plain, rotated=_varimax(plain.T * np.sqrt(variance)))

    def analytic(columns):  # scipy's FFT Hilbert transform, no padding; imaginary part centered
        z = hilbert(X[:, columns] - mean[columns], axis=0)
        return z.real + 1j * (z.imag - z.imag.mean(axis=0))

    if {"hilbert", "hilbert-krylov"} & set(variants):
        out["hilbert"] = out["hilbert-krylov"] = _top_right_vectors(analytic, d, 2)[0]
    m = n - (N_LAGS - 1) * LAG_STEP

    def embedded(columns):  # columns of [X(t), X(t + step), …] (lag-major), centered
        lags = range(columns.start // d, (columns.stop - 1) // d + 1)
        parts = [X[lag * LAG_STEP : lag * LAG_STEP + m, max(columns.start - lag * d, 0) : min(columns.stop - lag * d, d)]
                 for lag in lags]
        part = np.concatenate(parts, axis=1)
        return part - part.mean(axis=0)

    if "extended" in variants:
        out["extended"] = _top_right_vectors(embedded, N_LAGS * d, K)[0]
    return out


def _varimax(L: np.ndarray, iterations: int = 20000, eps: float = 1e-15) -> np.ndarray:
    """R's stats::varimax (normalize=TRUE), written out and iterated until the rotation stops
    moving; returns unit-norm rotated patterns (rows)."""
    h = np.sqrt(np.sum(L**2, axis=1))
    x = L / h[:, None]
    R = np.eye(L.shape[1])
    for _ in range(iterations):
        z = x @ R
        u, s, vt = np.linalg.svd(x.T @ (z**3 - z @ np.diag(np.sum(z**2, axis=0)) / x.shape[0]))
        R, previous = u @ vt, R
        if np.max(np.abs(R - previous)) < eps:
            break
    rotated = ((x @ R) * h[:, None]).T
    return rotated / np.linalg.norm(rotated, axis=1)[:, None]


def sin_theta(estimate: np.ndarray, exact: np.ndarray) -> float:
    from scipy.linalg import subspace_angles

    return float(np.sin(np.max(subspace_angles(np.asarray(estimate).T, np.asarray(exact).T))))


def pattern_distance(estimate: np.ndarray, exact: np.ndarray) -> float:
    """Largest distance ‖a − b‖ between a unit pattern and its best-matching exact one, after
    sign alignment (formed as the difference: √(2 − 2·cos) would floor at ~1e-8)."""
    estimate = estimate / np.linalg.norm(estimate, axis=1)[:, None]
    cosines = estimate @ exact.T
    match = np.argmax(np.abs(cosines), axis=1)
    signs = np.sign(cosines[np.arange(len(match)), match])
    return float(np.max(np.linalg.norm(estimate * signs[:, None] - exact[match], axis=1)))


# ---------------------------------------------------------------------------------------- methods


def _kept(rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows).reshape(rows.shape[0], -1)
    return rows[:, ~np.isnan(rows).any(axis=0)]


def run_daskpca(variant: str, field):
    from daskpca import PCA
    from daskpca.eof.hilbert import HilbertPCA
    from daskpca.eof.lagged import lag_embed
    from daskpca.eof.rotation import Rotator

    if variant == "plain":
        model = PCA(K, weights="coslat").fit(field, sample_dims="time")
        return model.components_, model.n_passes_
    if variant.startswith("hilbert"):  # "hilbert": exact (Gram); "hilbert-krylov": block Krylov to 1e-6
        options = {"solver": "krylov", "tol": 1e-6, "random_state": 0} if variant == "hilbert-krylov" else {"solver": "gram"}
        model = HilbertPCA(2, weights="coslat", padding="none", **options).fit(field, sample_dims="time")
        return model.components_, model.n_passes_
    if variant == "rotated":
        model = PCA(K, weights="coslat").fit(field, sample_dims="time")
        return Rotator(n_modes=K).fit(model).components_, model.n_passes_
    embedded = lag_embed(field, N_LAGS, LAG_STEP, sample_dim="time")
    model = PCA(K, weights="coslat").fit(embedded, sample_dims="time")
    return model.components_, model.n_passes_


def run_xeofs(variant: str, field):
    import xeofs as xe

    if variant == "plain":
        model = xe.single.EOF(n_modes=K, use_coslat=True)
        model.fit(field, dim="time")
        components = model.components()
    elif variant == "hilbert":
        model = xe.single.HilbertEOF(n_modes=2, use_coslat=True, padding=None)
        model.fit(field, dim="time")
        components = model.components()
    elif variant == "rotated":
        base = xe.single.EOF(n_modes=K, use_coslat=True)
        base.fit(field, dim="time")
        model = xe.single.EOFRotator(n_modes=K)
        model.fit(base)
        components = model.components()
    else:
        model = xe.single.ExtendedEOF(n_modes=K, tau=LAG_STEP, embedding=N_LAGS, use_coslat=True)
        model.fit(field, dim="time")
        components = model.components().transpose("mode", "embedding", ...)
    return _kept(np.asarray(components.transpose("mode", ...).values)), "—"


def score(variant: str, components, exact) -> str:
    components = np.asarray(components)
    if variant == "rotated":
        return f"{pattern_distance(components, exact):.1e}"
    return f"{sin_theta(components, exact):.1e}"


def _own_cpu_seconds() -> float:
    """CPU seconds of this process and its children alive now (a LocalCluster's workers)."""
    import psutil

    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:
            pass
    return total


class PeakWorkerMemory:
    """Largest resident memory of any child process (a LocalCluster's workers) while in use,
    sampled every 0.1 s: the evidence that no worker held the field."""

    def __enter__(self):
        import threading

        self.peak, self._stop = 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        import psutil

        me = psutil.Process()
        while not self._stop.wait(0.1):
            for child in me.children(recursive=True):
                try:
                    self.peak = max(self.peak, child.memory_info().rss)
                except psutil.Error:
                    pass

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.eof_family", description=__doc__.split("\n")[0])
    ap.add_argument("--n-time", type=int, default=1460)
    ap.add_argument("--n-lat", type=int, default=90)
    ap.add_argument("--n-lon", type=int, default=720)
    ap.add_argument("--lat-chunk", type=int, help="latitudes per chunk (default n_lat // 8)")
    ap.add_argument("--cluster", metavar="WxMEM", help="run on a LocalCluster, e.g. 2x1GiB")
    ap.add_argument("--variants", default="plain,hilbert,rotated,extended")
    ap.add_argument("--skip-peers", action="store_true")
    args = ap.parse_args(argv)
    import dask

    with tempfile.TemporaryDirectory(dir=".") as tmp:
        field, n_chunks = make_field(Path(tmp) / "field.zarr", args.n_time, args.n_lat, args.n_lon, lat_chunk=args.lat_chunk)
        read_log = Path(tmp) / "field.zarr.reads"
        size = field.nbytes / 2**30
        print(f"field {dict(field.sizes)} float32, {size:.2f} GiB; {machine_info()}")
        exact = references(field, args.variants.split(","))
        client = None
        if args.cluster:
            from distributed import Client, LocalCluster

            workers, memory = args.cluster.split("x")
            cluster = LocalCluster(n_workers=int(workers), threads_per_worker=1, memory_limit=memory,
                                   dashboard_address=":0", host="127.0.0.1")
            client = Client(cluster)
            print(f"LocalCluster: {workers} workers × {memory} (the field is {size:.2f} GiB)")
        rows = []
        for variant in args.variants.split(","):
            for library, run in (("daskpca", run_daskpca), ("xeofs", run_xeofs)):
                if library == "xeofs" and (args.skip_peers or variant == "hilbert-krylov"):
                    continue
                read0, busy, own, start = chunk_reads(read_log), _busy_cpu_seconds(), _own_cpu_seconds(), time.perf_counter()
                try:
                    with warnings.catch_warnings(), PeakWorkerMemory() as watch:
                        warnings.simplefilter("ignore")
                        components, passes = run(variant, field)
                    wall = time.perf_counter() - start
                    accuracy = score(variant, components, exact[variant])
                except Exception as error:  # a failing peer is a result, shown as such
                    wall, passes, accuracy = time.perf_counter() - start, "—", f"failed: {type(error).__name__}"
                reads = f"{(chunk_reads(read_log) - read0) / n_chunks:.2f}"
                outside = (_busy_cpu_seconds() - busy) - (_own_cpu_seconds() - own)
                other = max(outside, 0.0) / max(wall, 1e-9) / os.cpu_count() * 100
                worker = f"{watch.peak / 2**20:.0f} MiB" if client is not None else "—"
                rows.append([variant, library, str(passes), reads, f"{wall:.2f}", accuracy, worker, f"{other:.0f} %"])
                print(rows[-1], flush=True)
        if client is not None:
            client.close()
            cluster.close()
        dask.config.refresh()
    print(markdown_table(["variant", "library", "passes", "reads", "wall s", "accuracy vs NumPy float64",
                          "peak worker RSS", "other CPU"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
