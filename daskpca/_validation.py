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

from .exceptions import InputError, InputTypeError, NonFiniteInputError

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


def raise_if_nonfinite(nonfinite: NonFinite, *, nan_is_missing: bool = False) -> None:
    """Raise the library's standard error for NaN/±inf input (for a solver that reads NaN as
    missing, ``nonfinite`` counts ±inf only, and the message says so)."""
    if nonfinite.count and nan_is_missing:
        row, col = nonfinite.first
        raise NonFiniteInputError(
            f"X contains {nonfinite.count} infinite value(s) (±inf); the first is at row {row}, column {col}. "
            "NaN is read as a missing value here, but ±inf is not missing data: replace it with NaN (to "
            "treat it as missing) or with a finite value."
        )
    if nonfinite.count:
        row, col = nonfinite.first
        raise NonFiniteInputError(
            f"X contains {nonfinite.count} non-finite value(s) (NaN or ±inf); the first is at "
            f"row {row}, column {col}. PCA needs finite data: drop or fill those entries, or fit "
            "with a missing-value solver (PCA(solver='ppca')), which treats NaN as missing."
        )


#: ``nan=`` of ``transform`` / ``score_samples``: refuse NaN/±inf (default), or let them through.
NAN_POLICIES = ("raise", "propagate")


def check_nan_policy(nan) -> str:
    """Raise for a ``nan=`` value that is not one of :data:`NAN_POLICIES`."""
    if not (isinstance(nan, str) and nan in NAN_POLICIES):
        raise InputError(
            f"nan={nan!r}: use 'raise' (refuse NaN/±inf, the default) or 'propagate' (NaN "
            "results for the samples that hold them)."
        )
    return nan


class Positions:
    """Names a (row, column) of the analysed matrix in error messages: plain numbers, the input
    column when a feature mask dropped some (``columns[j]`` = input column of kept column j).
    The labeled layer subclasses it to name coordinates instead."""

    def __init__(self, columns=None):
        self.columns = None if columns is None else np.asarray(columns)

    def input_column(self, col: int) -> int:
        return int(col if self.columns is None else self.columns[col])

    def describe(self, row: int, col: int) -> str:
        return f"row {row}, column {self.input_column(col)}"


def check_finite_rows(result: np.ndarray, block: np.ndarray, row_offset: int, method: str,
                      positions: Positions | None = None) -> None:
    """Inside a projection task: raise when ``block`` (rows ``row_offset``…) holds NaN/±inf.

    Cheap on the good path: only the small ``result`` (rows × k) is tested; a NaN/±inf of the
    input reaches every result column it touches, so the block is searched only when the result
    is not finite. Raised from the task, so a lazy result raises at ``compute``, naming the
    position.
    """
    if np.isfinite(result).all():
        return
    found = find_nonfinite(block if hasattr(block, "dtype") else np.asarray(block), row_offset)
    if not found.count:
        return  # finite input whose result overflowed: not a NaN/±inf of the data
    row, col = found.first
    where = (positions or Positions()).describe(row, col)
    raise NonFiniteInputError(
        f"X contains {found.count} non-finite value(s) (NaN or ±inf) in rows {row_offset}–"
        f"{row_offset + len(block) - 1}; the first is at {where}. {method} refuses NaN/±inf by "
        f"default: drop or fill those samples, or call {method}(X, nan='propagate') to get NaN "
        "for them instead."
    )


def as_dask_matrix(X, *, name: str = "X"):
    """Return ``(dask_array, kind)`` for a supported input, without reading any data.

    Parameters
    ----------
    X : array-like, dask.array.Array, zarr.Array, or str / os.PathLike
        A 2-D real array of shape (n_samples, n_features): a NumPy array or anything
        ``numpy.asarray`` takes (nested lists, pandas DataFrames, ...); a string or path is
        opened as a zarr array (local path or fsspec URL; ``~`` and ``file://`` as meant, see
        :func:`daskpca.store.paths.as_meant`). Sparse matrices are refused, and so is a NetCDF
        path, naming the reader that opens it (:func:`daskpca.io.open_source`).
    name : str
        What to call the value in error messages.

    Returns
    -------
    array : dask.array.Array of shape (n_samples, n_features)
        Floating dtype: float32 and float64 are kept as they are (read as stored, converted to
        float64 block by block inside the solvers); integer, boolean and numeric object data
        become float64.
    kind : {"numpy", "dask"}
        ``"numpy"`` when the caller handed in data already in memory, so results can be
        returned as NumPy arrays too.

    The error messages carry scikit-learn's standard wording (``Reshape your data``,
    ``0 feature(s) (shape=(n, 0)) while a minimum of 1 is required``, ``Complex data not
    supported``, ``Sparse data was passed``) followed by the fix.
    """
    import dask.array as da

    kind = "dask"
    if isinstance(X, (str, os.PathLike)):
        X = _open_zarr(os.fspath(X), name)
    elif _is_zarr_array(X):
        X = da.from_zarr(X)
    if isinstance(X, da.Array):
        array = X
    else:
        array = _as_numpy(X, name)
        kind = "numpy"

    _check_dtype(array.dtype, name, allow_object=kind == "numpy")
    if array.ndim != 2:
        raise InputError(
            f"{name} must be 2-D (n_samples, n_features); got {array.ndim}-D with shape "
            f"{array.shape}. Reshape your data: X.reshape(-1, 1) for a single feature, "
            "X.reshape(1, -1) for a single sample, X.reshape(X.shape[0], -1) to flatten the "
            "feature axes."
        )
    n_samples, n_features = array.shape
    if n_samples == 0 or n_features == 0:
        count, what = (n_samples, "sample") if n_samples == 0 else (n_features, "feature")
        raise InputError(
            f"{name} has {count} {what}(s) (shape={array.shape}) while a minimum of 1 is "
            f"required: an array of shape {array.shape}, but PCA needs at least one sample (row) "
            "and one feature (column)."
        )
    if kind == "numpy":
        if array.dtype.kind == "O":
            array = _numeric_object_array(array, name)
        rows = max(1, NUMPY_CHUNK_BYTES // max(1, n_features * array.dtype.itemsize))
        array = da.from_array(array, chunks=(min(rows, n_samples), n_features))
    if any(math.isnan(c) for dim in array.chunks for c in dim):
        raise InputError(
            f"{name} has unknown chunk sizes {array.chunks}; PCA needs to know where every row "
            "block starts. Call X.compute_chunk_sizes() first (one extra read), or build the "
            "array with known chunks."
        )
    if array.dtype.kind in "biu":
        array = array.astype(np.float64)
    return array, kind


def _as_numpy(X, name: str) -> np.ndarray:
    """An in-memory array-like as a NumPy array (sparse matrices and non-array objects refused)."""
    if hasattr(X, "dims") or hasattr(X, "data_vars"):
        raise InputTypeError(
            f"{name} is an xarray {type(X).__name__}; pass it with sample_dims=... to fit "
            "(e.g. pca.fit(X, sample_dims='time')), or convert it with X.data."
        )
    if _is_sparse(X):
        raise InputTypeError(
            f"Sparse data was passed for {name} ({type(X).__name__}), but dense data is "
            "required: PCA centers the data, which makes it dense. Convert it with X.toarray() "
            "if it fits in memory."
        )
    try:
        array = np.asarray(X)
    except (TypeError, ValueError) as error:  # ragged nested lists
        raise InputError(f"{name} could not be read as a 2-D array: {error}") from error
    if array.dtype.kind == "O" and array.ndim == 0:
        raise InputTypeError(
            f"{name} must be an array-like (NumPy array, nested lists, DataFrame), a dask array, "
            f"a zarr.Array or the path/URL of a zarr array; got {type(X).__name__}."
        )
    return array


def _is_sparse(X) -> bool:
    module = type(X).__module__
    return module.startswith(("scipy.sparse", "sparse")) or hasattr(X, "tocsr")


def _numeric_object_array(array: np.ndarray, name: str) -> np.ndarray:
    """An object array of numbers as float64 (as scikit-learn converts them); anything else in
    it (strings, None, dicts) is an :class:`InputTypeError` naming the first such value."""
    try:
        return array.astype(np.float64)
    except (TypeError, ValueError) as error:
        first = next((v for v in array.flat if not _is_number(v)), None)
        raise InputTypeError(
            f"{name} has dtype object and holds values that are not numbers (the first: {first!r} of type "
            f"{type(first).__name__}); PCA needs a numeric array (float64, float32 or integers), one number "
            f"per entry. Convert the values first, e.g. X.astype('float64') for numbers stored as text, "
            f"or encode categories as numeric columns. (NumPy's conversion said: {error})"
        ) from error


def _is_number(value) -> bool:
    """Whether ``astype(float64)`` takes ``value`` (numbers, and numbers written as text)."""
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def _check_dtype(dtype, name: str, allow_object: bool = False) -> None:
    if dtype.kind == "c":
        raise InputError(
            f"Complex data not supported: {name} has complex dtype {dtype} and PCA here works "
            "on real data. Pass the real and imaginary parts as separate features "
            "(np.hstack([X.real, X.imag])) or take abs(X)."
        )
    if dtype.kind not in ("biufO" if allow_object else "biuf"):
        raise InputTypeError(
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

    from .store.paths import as_meant, is_netcdf

    path = as_meant(path)
    if is_netcdf(path):
        raise InputError(_netcdf_message(path, name))
    try:
        node = zarr.open(path, mode="r")
    except FileNotFoundError as exc:
        raise FileNotFoundError(
            f"{name}={path!r}: no zarr array or group found there. Check the path, or write the "
            "data first with dask.array.to_zarr / zarr.create_array."
        ) from exc
    if not isinstance(node, zarr.Array):
        names = sorted(node.array_keys())
        raise InputError(
            f"{name}={path!r} is a zarr group, not an array. Pass one of its arrays, e.g. "
            f"{path!r} + '/{names[0] if names else 'NAME'}' (arrays here: {names})."
        )
    return da.from_zarr(node)


def _netcdf_message(path: str, name: str) -> str:
    """What to do with a NetCDF path given where a zarr array is read: open it with the reader the
    command line uses (it names the file's variables when an engine can list them)."""
    try:
        import xarray as xr

        with xr.open_dataset(path, chunks={}) as data:
            names = sorted(str(v) for v in data.data_vars)
            dim = str(data[names[0]].dims[0]) if names and data[names[0]].dims else "time"
        variables, example = f"its variables {names}", names[0] if names else "NAME"
    except Exception as exc:  # noqa: BLE001 — no NetCDF engine here, or not readable: said so
        variables, example, dim = (f"its variables (not listed: {type(exc).__name__}: {str(exc).splitlines()[0]})",
                                   "NAME", "time")
    return (f"{name}={path!r} is a NetCDF file; a path given here is read as a zarr array. Open one of "
            f"{variables} as a lazy DataArray — daskpca.io.open_source({path!r}, var={example!r}) (the reader "
            f"`daskpca fit` uses) or xarray.open_dataset({path!r}, chunks={{}})[{example!r}] — and pass it with "
            f"its sample dims, e.g. pca.fit(data, sample_dims={dim!r}).")


def check_n_features(array, n_features_in: int, name: str = "X", estimator: str = "PCA") -> None:
    """Raise when ``array`` does not have the number of features the model was fitted on
    (scikit-learn's wording: ``X has 1 features, but PCA is expecting 3 features as input``)."""
    if array.shape[1] != n_features_in:
        raise InputError(
            f"{name} has {array.shape[1]} features, but {estimator} is expecting {n_features_in} "
            f"features as input: it was fitted on {n_features_in}. Pass data with the same "
            "columns as at fit time."
        )
