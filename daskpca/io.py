"""Writing results to zarr without ever leaving a half-written store behind; model save/load.

**Atomic writes.** Local stores are written to a hidden temporary folder beside the target and
moved into place with one ``rename`` when complete, so a reader sees either the previous complete
store or the new complete one. Object stores (fsspec URLs: ``s3://``, ``gs://``, ``memory://``)
have no rename: the new store is written completely to a temporary prefix beside the target,
then the target's completion marker is deleted, the old target removed, the new one moved into
place, and its completion marker written *last*. Every store written here carries a completion
marker (the file ``.daskpca-complete``: JSON with the format name and version); readers here
(:func:`load`, :func:`open_xarray`) refuse a store without one, so a writer killed at any point
leaves either the previous complete store or nothing a reader accepts. An existing store is only
replaced when the caller says ``overwrite=True``; the check happens before anything is computed.

**Model format** (``format_version`` 1). One zarr v3 group written by xarray, no pickle:

- ``model_components`` (mode, feature_kept), ``model_mean`` (feature_kept),
  ``model_explained_variance`` / ``model_spectrum`` ...: the estimator's arrays exactly as fitted
  (in the solver's, i.e. weighted, space), so a reloaded model's ``transform`` is bit-identical;
- ``model_keep`` (feature_all, bool) and ``model_factor`` (feature_kept): the NaN mask and the
  per-feature factor ``f`` (weights / std) of the labeled layer;
- ``moments_mean`` (feature_kept), ``moments_scatter`` (feature_kept, feature_kept_2) and attr
  ``moments_count``: the covariance solver's sufficient statistics (of the analysed matrix
  ``Z = X[:, keep]·f``), when present, for exact incremental updates;
- the labeled view of :meth:`daskpca.PCA.to_xarray` (components / mean over the original feature
  dims and coords, variances over ``mode``) when the model was fitted on xarray data;
- attrs: ``daskpca_format``, ``daskpca_format_version``, ``daskpca_version``, ``parameters``
  (JSON; array-valued parameters such as ``init`` or array ``weights`` are not kept, their effect
  is: ``model_factor``), fitted scalars, and the labeled layout (JSON).
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from .exceptions import IncompleteStoreError, NewerFormatError, OutputExistsError  # noqa: F401

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
    from . import __version__

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


# ------------------------------------------------------------------------------ model save/load

_CORE_ARRAYS = ("components_", "explained_variance_", "explained_variance_ratio_", "singular_values_", "mean_")
_CORE_SCALARS = {
    "n_components_": int,
    "n_samples_": int,
    "n_features_in_": int,
    "noise_variance_": float,
    "total_variance_": float,
    "distortion_": float,
    "solver_": str,
    "solver_reason_": str,
    "n_passes_": int,
}


def save_model(pca, path, *, overwrite: bool = False) -> str:
    """Write a fitted :class:`daskpca.PCA` to a zarr group at ``path`` (see module docstring)."""
    import xarray as xr

    from . import xarray as labeled

    ds = labeled.to_xarray(pca)
    dims = {"components_": ("mode", "feature_kept"), "mean_": ("feature_kept",)}
    for name in _CORE_ARRAYS:
        ds[f"model_{name.rstrip('_')}"] = xr.DataArray(np.asarray(getattr(pca, name)), dims=dims.get(name, ("mode",)))
    if getattr(pca, "_spectrum", None) is not None:
        ds["model_spectrum"] = xr.DataArray(np.asarray(pca._spectrum), dims=("spectrum",))
    state = pca._labeled
    if state is not None:
        ds["model_keep"] = xr.DataArray(state.keep, dims=("feature_all",))
        ds["model_factor"] = xr.DataArray(state.factor, dims=("feature_kept",))
    moments = pca.solver_info_.get("moments")
    if moments is not None:
        ds["moments_mean"] = xr.DataArray(moments.mean, dims=("feature_kept",))
        ds["moments_scatter"] = xr.DataArray(moments.symmetric_scatter(), dims=("feature_kept", "feature_kept_2"))
        ds.attrs["moments_count"] = int(moments.count)
    ds.attrs.update({k: conv(getattr(pca, k)) for k, conv in _CORE_SCALARS.items()})
    ds.attrs["solver_info"] = json.dumps({k: v for k, v in pca.solver_info_.items() if _is_json(v)})
    ds.attrs["daskpca_format"] = MODEL_FORMAT
    ds.attrs["daskpca_format_version"] = FORMAT_VERSION
    if state is not None and state.layout is not None:
        ds.attrs["layout"] = json.dumps(_layout_to_json(state.layout))
    for variable in ds.variables.values():
        variable.encoding = {}
    with atomic_store(path, overwrite=overwrite, marker={"format": MODEL_FORMAT}) as temporary:
        ds.to_zarr(temporary, mode="w", zarr_format=3, consolidated=False)
    return os.fspath(path)


def load(path):
    """Load a model written by :meth:`daskpca.PCA.save` (local path or fsspec URL).

    Refuses a store without its completion marker (:class:`IncompleteStoreError`) and one written
    in a newer format (:class:`NewerFormatError`). The returned model's ``transform`` is identical
    to the saved model's.
    """
    import xarray as xr

    from . import xarray as labeled
    from ._moments import Moments
    from ._validation import NonFinite
    from .pca import PCA

    marker = read_marker(path)
    if marker.get("format") != MODEL_FORMAT:
        raise ValueError(f"{os.fspath(path)!r} is a daskpca {marker.get('format')!r} store, not a saved model.")
    with _quiet_marker(), xr.open_zarr(os.fspath(path), consolidated=False) as stored:
        ds = stored.load()
    attrs = ds.attrs
    if int(attrs.get("daskpca_format_version", 0)) > FORMAT_VERSION:
        raise NewerFormatError(
            f"{os.fspath(path)!r} holds model format {attrs['daskpca_format_version']}; this daskpca "
            f"reads format {FORMAT_VERSION} and older. Upgrade daskpca."
        )
    params = json.loads(attrs["parameters"])
    valid = PCA._param_names()
    params = {k: v for k, v in params.items() if k in valid and not (isinstance(v, str) and v.startswith("<not JSON-able"))}
    pca = PCA(**params)
    for name in _CORE_ARRAYS:
        setattr(pca, name, ds[f"model_{name.rstrip('_')}"].values)
    for name, conv in _CORE_SCALARS.items():
        setattr(pca, name, conv(attrs[name]))
    pca._spectrum = ds["model_spectrum"].values if "model_spectrum" in ds else None
    pca.solver_info_ = json.loads(attrs.get("solver_info", "{}"))
    if "moments_mean" in ds:
        pca.solver_info_["moments"] = Moments(
            int(attrs["moments_count"]), ds["moments_mean"].values, ds["moments_scatter"].values, NonFinite()
        )
    pca._labeled = None
    if "model_keep" in ds:
        layout = _layout_from_json(json.loads(attrs["layout"]), ds) if "layout" in attrs else None
        pca._labeled = labeled.LabeledState(layout, ds["model_keep"].values.astype(bool), ds["model_factor"].values)
    return pca


def _is_json(value) -> bool:
    try:
        json.dumps(value)
        return True
    except TypeError:
        return False


def _layout_to_json(layout) -> dict:
    return {
        "sample_dims": [str(d) for d in layout.sample_dims],
        "is_dataarray": layout.is_dataarray,
        "name": layout.name,
        "variables": [{"name": v.name, "dims": list(v.dims), "shape": list(v.shape)} for v in layout.variables],
        "attrs": layout.attrs,
        "coords": sorted(str(k) for k in layout.coords),
    }


def _layout_from_json(info: dict, ds):
    import xarray as xr

    from .xarray import Layout, VariableLayout

    variables, start = [], 0
    for v in info["variables"]:
        layout = VariableLayout(v["name"], tuple(v["dims"]), tuple(v["shape"]), start)
        variables.append(layout)
        start = layout.stop
    coords = xr.Dataset(coords={k: ds.coords[k].variable for k in info["coords"]}).coords
    return Layout(tuple(info["sample_dims"]), variables, info["is_dataarray"], info["name"], coords, info["attrs"])
