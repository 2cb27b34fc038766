"""The demo's sample data: where ``daskpca demo`` keeps it and how it is made (a low-rank field
plus noise, written once and reused). Imports only the store layer's writer; imported by
:mod:`daskpca.cli.command`.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .options import UsageError


def demo_data(path: Path, n_samples: int, n_features: int, rank: int, chunk_rows: int, seed: int):
    """Write (or reuse) a low-rank-plus-noise float32 zarr array; returns it opened lazily."""
    import dask.array as da
    import zarr

    from ..io import write_array

    if path.exists():
        existing = zarr.open_array(str(path), mode="r")
        if existing.shape == (n_samples, n_features):
            print(f"reusing the sample array {path} {existing.shape} {existing.dtype}")
            return da.from_zarr(existing)
        raise UsageError(f"{path} holds an array of shape {existing.shape}, not ({n_samples}, {n_features}); pass another --dir or remove it.")
    rng = da.random.default_rng(seed)
    basis = np.linalg.qr(np.random.default_rng(seed).standard_normal((n_features, rank)))[0]
    scales = 10.0 * 0.7 ** np.arange(rank)
    scores = rng.standard_normal((n_samples, rank), chunks=(chunk_rows, rank)) * scales
    noise = rng.standard_normal((n_samples, n_features), chunks=(chunk_rows, n_features))
    X = (scores @ basis.T + 0.5 * noise + 100.0).astype(np.float32)
    write_array(X, path)
    print(f"wrote the sample array {path} {X.shape} float32 ({X.nbytes / 2**20:.0f} MiB)")
    return da.from_zarr(str(path))


def demo_folder() -> Path:
    """The demo's default folder: ``$DASKPCA_DEMO_DIR``, else the user's cache folder."""
    if os.environ.get("DASKPCA_DEMO_DIR"):
        return Path(os.environ["DASKPCA_DEMO_DIR"])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "daskpca" / "demo"
