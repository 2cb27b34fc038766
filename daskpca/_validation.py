"""Input checks. Every error names the value, the form that was expected and the fix.

Checks that need only metadata (shape, dtype, chunks) run before any data is read. The check
for NaN/±inf needs the data, so solvers run it inside their first pass
(:func:`find_nonfinite` per block, :meth:`NonFinite.merge` in the reduction,
:func:`raise_if_nonfinite` on the merged result) instead of paying an extra pass for it.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

#: Target chunk size used when a NumPy array is wrapped into a dask array.
NUMPY_CHUNK_BYTES = 64 * 2**20


@dataclass(frozen=True)
class NonFinite:
    """How many NaN/±inf entries a part of the input held and where the first one is.

    ``first`` is the (row, column) of the first non-finite entry in row-major order of the
    whole array, or ``None`` when ``count == 0``.
    """

    count: int = 0
    first: tuple[int, int] | None = None

    def merge(self, other: "NonFinite") -> "NonFinite":
        firsts = [f for f in (self.first, other.first) if f is not None]
        return NonFinite(self.count + other.count, min(firsts) if firsts else None)


def find_nonfinite(block: np.ndarray, row_offset: int = 0, col_offset: int = 0) -> NonFinite:
    """Count the NaN/±inf entries of a block; locate the first in global (row, column)."""
    if block.dtype.kind != "f":
        return NonFinite()
    bad = ~np.isfinite(block)
    count = int(bad.sum())
    if not count:
        return NonFinite()
    row, col = np.argwhere(bad)[0]
    return NonFinite(count, (int(row) + row_offset, int(col) + col_offset))


def raise_if_nonfinite(nonfinite: NonFinite) -> None:
    """Raise the library's standard error for NaN/±inf input."""
    if nonfinite.count:
        row, col = nonfinite.first
        raise ValueError(
            f"X contains {nonfinite.count} non-finite value(s) (NaN or ±inf); the first is at "
            f"row {row}, column {col}. PCA needs finite data: drop or fill those entries, or fit "
            "with a missing-value solver (PCA(solver='ppca')), which treats NaN as missing."
        )


def as_dask_matrix(X, *, name: str = "X"):
    """Return ``(dask_array, kind)`` for a supported input, without reading any data.

    Parameters
    ----------
    X : ndarray, dask.array.Array, zarr.Array, or str / os.PathLike
        A 2-D real array of shape (n_samples, n_features); a string or path is opened as a zarr
        array (local path or fsspec URL).
    name : str
        What to call the value in error messages.

    Returns
    -------
    array : dask.array.Array of shape (n_samples, n_features)
        Floating dtype: float32 and float64 are kept as they are (read as stored, converted to
        float64 block by block inside the solvers); integer and boolean data become float64.
    kind : {"numpy", "dask"}
        ``"numpy"`` when the caller handed in data already in memory, so results can be
        returned as NumPy arrays too.
    """
    import dask.array as da

    kind = "dask"
    if isinstance(X, (str, os.PathLike)):
        X = _open_zarr(os.fspath(X), name)
    elif _is_zarr_array(X):
        X = da.from_zarr(X)
    if isinstance(X, da.Array):
        array = X
    elif hasattr(X, "__array__") and not hasattr(X, "dims"):
        array = np.asarray(X)
        kind = "numpy"
    else:
        raise TypeError(
            f"{name} must be a NumPy array, a dask array, a zarr.Array or the path/URL of a zarr "
            f"array; got {type(X).__name__}. For xarray objects pass the DataArray with "
            "sample_dims=..., or convert with .data."
        )

    _check_dtype(array.dtype, name)
    if array.ndim != 2:
        raise ValueError(
            f"{name} must be 2-D (n_samples, n_features); got {array.ndim}-D with shape "
            f"{array.shape}. Reshape it, e.g. X.reshape(X.shape[0], -1) to flatten the feature "
            "axes, or X.reshape(-1, 1) for a single feature."
        )
    n_samples, n_features = array.shape
    if kind == "numpy":
        if n_samples and n_features:
            rows = max(1, NUMPY_CHUNK_BYTES // max(1, n_features * array.dtype.itemsize))
            array = da.from_array(array, chunks=(min(rows, n_samples), n_features))
        else:
            array = da.from_array(array)
    if any(math.isnan(c) for dim in array.chunks for c in dim):
        raise ValueError(
            f"{name} has unknown chunk sizes {array.chunks}; PCA needs to know where every row "
            "block starts. Call X.compute_chunk_sizes() first (one extra read), or build the "
            "array with known chunks."
        )
    if n_samples == 0 or n_features == 0:
        raise ValueError(
            f"{name} has shape {array.shape}: it needs at least one sample (row) and one "
            "feature (column)."
        )
    if array.dtype.kind in "biu":
        array = array.astype(np.float64)
    return array, kind


def _check_dtype(dtype, name: str) -> None:
    if dtype.kind == "c":
        raise TypeError(
            f"{name} has complex dtype {dtype}; PCA here works on real data. Pass the real and "
            "imaginary parts as separate features (np.hstack([X.real, X.imag])) or take abs(X)."
        )
    if dtype.kind not in "biuf":
        raise TypeError(
            f"{name} has dtype {dtype}; PCA needs numbers (float32/float64, or integers that "
            "are converted to float64). Convert the data with X.astype('float64')."
        )


def _is_zarr_array(X) -> bool:
    try:
        import zarr
    except ImportError:  # pragma: no cover - zarr is a dependency
        return False
    return isinstance(X, zarr.Array)


def _open_zarr(path: str, name: str):
    import dask.array as da
    import zarr

    try:
        node = zarr.open(path, mode="r")
    except FileNotFoundError as exc:
        raise FileNotFoundError(
            f"{name}={path!r}: no zarr array or group found there. Check the path, or write the "
            "data first with dask.array.to_zarr / zarr.create_array."
        ) from exc
    if not isinstance(node, zarr.Array):
        names = sorted(node.array_keys())
        raise ValueError(
            f"{name}={path!r} is a zarr group, not an array. Pass one of its arrays, e.g. "
            f"{path!r} + '/{names[0] if names else 'NAME'}' (arrays here: {names})."
        )
    return da.from_zarr(node)


def check_n_features(array, n_features_in: int, name: str = "X") -> None:
    """Raise when ``array`` does not have the number of features the model was fitted on."""
    if array.shape[1] != n_features_in:
        raise ValueError(
            f"{name} has {array.shape[1]} features (columns), but this PCA was fitted on "
            f"{n_features_in}. Pass data with the same columns as at fit time."
        )
