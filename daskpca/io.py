"""Writing results to zarr without ever leaving a half-written store behind, and reading them back.

**Atomic writes.** Local stores are written to a hidden temporary folder beside the target and
moved into place with one ``rename`` when complete, so a reader sees either the previous complete
store or the new complete one. Object stores (fsspec URLs: ``s3://``, ``gs://``, ``memory://``)
have no rename: the new store is written completely to a temporary prefix beside the target,
then the target's completion marker is deleted, the old target removed, the new one moved into
place, and its completion marker written *last*. Every store written here carries a completion
marker (the file ``.daskpca-complete``: JSON with the format name and version); readers here
(:func:`read_dataset`, :func:`open_xarray`) refuse a store without one, so a writer killed at any point
leaves either the previous complete store or nothing a reader accepts. An existing store is only
replaced when the caller says ``overwrite=True``; the check happens before anything is computed.

**Datasets.** :func:`write_dataset` / :func:`read_dataset` store small in-memory datasets with a
marker naming their format; the saved model's layout is the model's own business
(:meth:`daskpca.PCA.to_dataset`). This module imports nothing else from daskpca but its errors.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from .exceptions import IncompleteStoreError, NewerFormatError, OutputExistsError

#: Name of the completion marker written last into every store.
COMPLETE_MARKER = ".daskpca-complete"
#: Format of model stores this version writes and the newest it reads.
FORMAT_VERSION = 1
MODEL_FORMAT = "daskpca-model"
DATA_FORMAT = "daskpca-data"


def check_writable(path, *, overwrite: bool = False) -> None:
    """Raise :class:`OutputExistsError` when ``path`` (local or fsspec URL) exists and may not
    be replaced — callers check before any heavy work, the writers check again."""
    if _is_url(path):
        import fsspec

        fs, root = fsspec.core.url_to_fs(path)
        exists = fs.exists(root.rstrip("/"))
    else:
        exists = _local(path).exists()
    if exists and not overwrite:
        raise OutputExistsError(
            f"{os.fspath(path)!r} already exists; pass --overwrite (overwrite=True in Python) to "
            "replace it, or choose another path: daskpca never overwrites an output unless told to."
        )


@contextmanager
def atomic_directory(path, *, overwrite: bool = False):
    """Yield a temporary folder that becomes ``path`` only if the block completes.

    Parameters
    ----------
    path : str or os.PathLike
        Final location (a local folder: a zarr store is a folder).
    overwrite : bool
        Replace an existing ``path``. Otherwise an existing ``path`` raises
        :class:`OutputExistsError` before anything is written.
    """
    target = Path(path)
    check_writable(target, overwrite=overwrite)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.parent / f".{target.name}.partial-{uuid.uuid4().hex[:8]}"
    try:
        yield temporary
        if target.exists():
            # Move the old store aside first: the swap is two renames, never a partial tree.
            retired = target.parent / f".{target.name}.old-{uuid.uuid4().hex[:8]}"
            os.replace(target, retired)
            os.replace(temporary, target)
            shutil.rmtree(retired, ignore_errors=True)
        else:
            os.replace(temporary, target)
    finally:
        if temporary.exists():
            shutil.rmtree(temporary, ignore_errors=True)


def write_array(array, path, *, overwrite: bool = False, name: str | None = None) -> str:
    """Write a (lazy) array to a zarr v3 store at ``path``, atomically.

    Parameters
    ----------
    array : dask.array.Array or ndarray
        Computed block by block and streamed to disk; it is never held whole.
    path : str or os.PathLike
    overwrite : bool
    name : str, optional
        Written as the array's ``long_name`` attribute.

    Returns
    -------
    str
        The path written.
    """
    import dask.array as da

    if not isinstance(array, da.Array):
        array = da.from_array(array)
    # zarr needs regular chunks (all equal but the last): regroup irregular ones.
    array = array.rechunk(tuple(max(c) if c else 1 for c in array.chunks))
    with atomic_store(path, overwrite=overwrite, marker={"format": DATA_FORMAT}) as temporary:
        array.to_zarr(temporary, zarr_format=3, compute=True)
        if name is not None:
            import zarr

            zarr.open_array(temporary, mode="r+").attrs["long_name"] = name
    return os.fspath(path)


# ------------------------------------------------------------------------------ store locations


def _is_url(path) -> bool:
    return isinstance(path, str) and "://" in path and not path.startswith("file://")


def _local(path) -> Path:
    path = os.fspath(path)
    return Path(path[len("file://") :] if path.startswith("file://") else path)


def _marker_bytes(marker: dict) -> bytes:
    from ._version import __version__

    body = {"format_version": FORMAT_VERSION, "daskpca_version": __version__, **marker}
    return json.dumps(body).encode()


@contextmanager
def atomic_store(path, *, overwrite: bool = False, marker: dict | None = None):
    """Yield a temporary store location (str) that becomes ``path`` only if the block completes.

    Local paths use :func:`atomic_directory` (one rename); fsspec URLs use the marker-last
    protocol described in the module docstring. The completion marker is written in both cases.
    """
    marker = _marker_bytes(marker or {"format": DATA_FORMAT})
    if not _is_url(path):
        with atomic_directory(_local(path), overwrite=overwrite) as temporary:
            yield str(temporary)
            (temporary / COMPLETE_MARKER).write_bytes(marker)
        return
    import fsspec

    fs, root = fsspec.core.url_to_fs(path)
    root = root.rstrip("/")
    check_writable(path, overwrite=overwrite)
    parent, _, leaf = root.rpartition("/")
    temporary = f"{parent}/.{leaf}.partial-{uuid.uuid4().hex[:8]}" if parent else f".{leaf}.partial-{uuid.uuid4().hex[:8]}"
    protocol = path.split("://", 1)[0]
    try:
        yield f"{protocol}://{temporary}"
        # The new store is complete in `temporary`. Invalidate the old one first (its marker),
        # then swap; the marker is written last, so a crash never leaves a store that looks done.
        if fs.exists(root):
            if fs.exists(f"{root}/{COMPLETE_MARKER}"):
                fs.rm(f"{root}/{COMPLETE_MARKER}")
            fs.rm(root, recursive=True)
        fs.mv(temporary, root, recursive=True)
        fs.pipe(f"{root}/{COMPLETE_MARKER}", marker)
    finally:
        if fs.exists(temporary):
            fs.rm(temporary, recursive=True)


def read_marker(path) -> dict:
    """The completion marker of a store; raise when the store is missing, partial or too new."""
    if _is_url(path):
        import fsspec

        fs, root = fsspec.core.url_to_fs(path)
        root = root.rstrip("/")
        exists = fs.exists(root)
        marker_path = f"{root}/{COMPLETE_MARKER}"
        raw = fs.cat(marker_path) if exists and fs.exists(marker_path) else None
    else:
        local = _local(path)
        exists = local.exists()
        raw = (local / COMPLETE_MARKER).read_bytes() if (local / COMPLETE_MARKER).exists() else None
    if not exists:
        raise FileNotFoundError(f"no store at {os.fspath(path)!r}.")
    if raw is None:
        raise IncompleteStoreError(
            f"{os.fspath(path)!r} has no completion marker ({COMPLETE_MARKER}): it was not written "
            "completely (the writer died or is still running). Refusing to read it; write it again."
        )
    marker = json.loads(raw)
    version = int(marker.get("format_version", 0))
    if version > FORMAT_VERSION:
        raise NewerFormatError(
            f"{os.fspath(path)!r} was written in daskpca store format {version} (by daskpca "
            f"{marker.get('daskpca_version', '?')}); this daskpca reads format {FORMAT_VERSION} "
            "and older. Upgrade daskpca to read it."
        )
    return marker


# ------------------------------------------------------------------------------ labeled data


def write_xarray(obj, path, *, overwrite: bool = False, chunks: dict | None = None) -> str:
    """Write a (lazy) DataArray / Dataset — scores, reconstructions, maps — to zarr, atomically.

    Dask-backed data is computed block by block and streamed to the store (never held whole);
    chunks follow the data's (e.g. the input's rows along the sample dims), made regular for zarr,
    or ``chunks`` (``{dim: size}``) when given. Read it back with :func:`open_xarray`.
    """
    import xarray as xr

    ds = obj.to_dataset(name=obj.name or "data") if isinstance(obj, xr.DataArray) else obj
    ds = ds.copy(deep=False)
    if chunks:
        ds = ds.chunk(chunks)
    regular = {}
    for dim, sizes in (ds.chunksizes or {}).items():
        if len(set(sizes[:-1])) > 1 or (len(sizes) > 1 and sizes[-1] > sizes[0]):
            regular[dim] = max(sizes)
    if regular:
        ds = ds.chunk(regular)
    for variable in ds.variables.values():
        variable.encoding = {}
    with atomic_store(path, overwrite=overwrite, marker={"format": DATA_FORMAT}) as temporary:
        ds.to_zarr(temporary, mode="w", zarr_format=3, consolidated=False, compute=True)
    return os.fspath(path)


def open_xarray(path, **kwargs):
    """Lazily open a store written by :func:`write_xarray` (refuses partial stores)."""
    import xarray as xr

    read_marker(path)
    with _quiet_marker():
        return xr.open_zarr(os.fspath(path), consolidated=False, **kwargs)


@contextmanager
def _quiet_marker():
    """zarr warns about the (non-zarr) completion marker file when it lists a group: expected."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=f".*{COMPLETE_MARKER}.*not recognized")
        yield


# ------------------------------------------------------------------------------ datasets


def write_dataset(ds, path, *, overwrite: bool = False, marker: dict) -> str:
    """Write a small in-memory ``xarray.Dataset`` (e.g. a saved model) to zarr, atomically."""
    ds = ds.copy(deep=False)
    for variable in ds.variables.values():
        variable.encoding = {}
    with atomic_store(path, overwrite=overwrite, marker=marker) as temporary:
        ds.to_zarr(temporary, mode="w", zarr_format=3, consolidated=False)
    return os.fspath(path)


def read_dataset(path, *, expected_format: str):
    """Read a complete store of ``expected_format`` (e.g. a saved model) into memory.

    Raises
    ------
    FileNotFoundError, IncompleteStoreError, NewerFormatError
        See :func:`read_marker`.
    ValueError
        When the store holds another kind of daskpca store.
    """
    import xarray as xr

    marker = read_marker(path)
    if marker.get("format") != expected_format:
        raise ValueError(
            f"{os.fspath(path)!r} is a daskpca {marker.get('format')!r} store, not a {expected_format!r} store."
        )
    with _quiet_marker(), xr.open_zarr(os.fspath(path), consolidated=False) as stored:
        return stored.load()
