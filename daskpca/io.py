"""Writing results to zarr without ever leaving a half-written store behind.

Local stores are written to a hidden temporary folder beside the target and moved into place
with one ``rename`` when complete, so a reader sees either the previous complete store or the new
complete one. An existing store is only replaced when the caller says ``overwrite=True``.
"""

from __future__ import annotations

import os
import shutil
import uuid
from contextlib import contextmanager
from pathlib import Path


class OutputExistsError(FileExistsError):
    """Raised instead of overwriting an existing output."""


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
    if target.exists() and not overwrite:
        raise OutputExistsError(
            f"{str(target)!r} already exists; daskpca never overwrites an output unless told to. "
            "Choose another path or pass overwrite=True (--overwrite on the command line)."
        )
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
    with atomic_directory(path, overwrite=overwrite) as temporary:
        array.to_zarr(str(temporary), zarr_format=3, compute=True)
        if name is not None:
            import zarr

            zarr.open_array(str(temporary), mode="r+").attrs["long_name"] = name
    return os.fspath(path)
