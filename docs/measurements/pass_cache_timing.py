"""Time of a pass served by the pass cache against one that decodes the store (issue 30).

A reanalysis-shaped float32 field stored one time step per chunk (zstd), ~300 MB; the same
Krylov fit (k = 20, coslat weights, 5 passes) with ``cache=False``, ``"memory"`` and ``"disk"``;
each pass's wall time (``pass_seconds_``) and the fit's. One run each, threaded scheduler.

    python docs/measurements/pass_cache_timing.py [FOLDER] [N_TIME]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import dask
import numpy as np
import xarray as xr

from daskpca import PCA


def field(folder: Path, n_time: int) -> Path:
    path = folder / "field.zarr"
    if path.exists():
        return path
    rng = np.random.default_rng(0)
    lat, lon = np.linspace(90, -90, 181), np.arange(0, 360, 1.5)
    d = lat.size * lon.size
    modes = np.linalg.qr(rng.standard_normal((d, 30)))[0].T.astype(np.float32)
    scores = (rng.standard_normal((n_time, 30)) * np.geomspace(40, 4, 30)).astype(np.float32)
    values = scores @ modes * 100 + 280 + rng.standard_normal((n_time, d), dtype=np.float32)
    ds = xr.Dataset({"t2m": (("time", "latitude", "longitude"), values.reshape(n_time, lat.size, lon.size))},
                    coords={"time": np.arange(n_time), "latitude": lat, "longitude": lon})
    ds.to_zarr(path, encoding={"t2m": {"chunks": (1, lat.size, lon.size)}}, zarr_format=3, consolidated=False)
    return path


def main() -> None:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.gettempdir()) / "daskpca-measure"
    n_time = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
    folder.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    path = field(folder, n_time)
    print(f"store {path}: written/opened in {time.perf_counter() - start:.1f} s")
    os.environ.setdefault("DASKPCA_SCRATCH", str(folder))
    for cache in (False, "memory", "disk", False):  # uncached twice: first and last (page cache warm)
        t2m = xr.open_zarr(path, consolidated=False).t2m
        pca = PCA(20, solver="krylov", max_passes=5, weights="coslat", random_state=0, cache=cache)
        with dask.config.set(scheduler="threads"):
            pca.fit(t2m, sample_dims="time")
        passes = ", ".join(f"{s:.2f}" for s in pca.pass_seconds_)
        later = np.mean(pca.pass_seconds_[1:])
        print(f"cache={cache!s:6} {pca.cache_['kind']!s:6} {pca.cache_['bytes'] / 2**20:7.1f} MiB  fit {pca.fit_seconds_:6.2f} s"
              f"  passes [{passes}] s  later/first {later / pca.pass_seconds_[0]:.2f}")
    print(pca._fit_plan)


if __name__ == "__main__":
    main()
