"""The saved model: one format and one save / load path for every estimator.

Format ``daskpca-model`` (version 1): one zarr v3 group written by xarray, no pickle. Every
estimator — PCA, HilbertPCA, MCA, CCA, and a rotation of any of them — is written by
:func:`save` and read by :func:`load`, so every one gets the same guarantees: atomic publishing
with a completion marker recording each object's checksum, the replaced model kept in the store's
history (``daskpca.io.history``), a refusal to overwrite a store another process saved since this
model was loaded, the integrity record checked on load, and the fitted invariants checked on load.

The common attributes: ``estimator`` (the class that wrote it, which :func:`load` returns),
``daskpca_format``, ``daskpca_format_version``, ``parameters`` (JSON; array-valued parameters are
not kept, their effect is). The rest is the estimator's: each class provides ``_format_write()``
(its arrays and attributes as an ``xarray.Dataset``), ``_format_read(ds)`` (the model back) and
``_problem()`` (the first fitted invariant a model breaks). A rotation is written as the rotated
model's store plus the attrs ``rotation`` (its parameters, JSON) and the array
``rotation_matrix``: ``daskpca.load`` returns the :class:`~daskpca.Rotator`, the estimator's own
``load`` (e.g. ``PCA.load``) the unrotated model.

:mod:`daskpca.io` writes and reads the bytes (claims, publishing, integrity); this module decides
what the bytes mean. Nothing below the estimator layer imports it.
"""

from __future__ import annotations

import json
import os

import numpy as np

from .. import io, labeled
from .._features import FeatureStage
from ..exceptions import DamagedModelError, IncompleteStoreError, InputError, NewerFormatError

#: Estimator classes by name, so a store records which class wrote it and :func:`load` returns
#: that class; every subclass of :class:`daskpca.models.Estimator` is registered as it is defined.
ESTIMATORS: dict = {}
#: The attrs that mark a rotation of the stored model.
ROTATION = "rotation"


def register(cls) -> None:
    """Record ``cls`` (by name) as a class a store may name (called as each estimator is defined)."""
    if not cls.__name__.startswith("_") and not cls.__dict__.get("_abstract", False):
        ESTIMATORS[cls.__name__] = cls


# ------------------------------------------------------------------------------------ writing


def to_dataset(model):
    """The fitted ``model`` as one ``xarray.Dataset``: its own content (``_format_write``) plus
    the attrs common to every estimator. The estimator has checked that it is fitted
    (:meth:`~daskpca.models.Estimator.to_dataset` and :meth:`~daskpca.models.Estimator.save`,
    the only callers)."""
    ds = model._format_write()
    ds.attrs.setdefault("estimator", type(model).__name__)
    if "parameters" not in ds.attrs:  # a model's own results (PCA.to_xarray) already hold them
        ds.attrs["parameters"] = json.dumps(labeled.results.jsonable_params(model))
    ds.attrs["daskpca_format"] = io.MODEL_FORMAT
    ds.attrs["daskpca_format_version"] = io.FORMAT_VERSION
    return ds


def save(model, store, *, overwrite: bool = False):
    """Write ``model`` at ``store`` (see :meth:`daskpca.models.Estimator.save`): the one save path."""
    ds = to_dataset(model)
    loaded = hasattr(model, "_loaded_from")  # tied to the version it was loaded from (or last saved)
    replaces = None
    if loaded:
        from ..store.paths import as_meant

        store = as_meant(store)  # once: the version check, the writer and the new tie see this path
        origin, version = model._loaded_from
        replaces = version if overwrite and origin == _store_identity(store) else None
    samples = getattr(getattr(model, "model_", model), "n_samples_", None)
    note = f"{ds.attrs['estimator']}{' (rotated)' if ROTATION in ds.attrs else ''}" + (
        f", {samples} samples" if samples is not None else "")
    written = io.write_dataset(ds, store, overwrite=overwrite, marker={"format": io.MODEL_FORMAT, "note": note},
                               keep_history=io.MODEL_HISTORY, replaces_version=replaces)
    if loaded:  # its own save is the version a next save there replaces
        model._loaded_from = (_store_identity(written), io.store_version(written))
    return written


def write_field(ds, tag: str, stage: FeatureStage, layout):
    """One field of a coupled model into ``ds``: its feature stage (``model_keep_<tag>``,
    ``model_factor_<tag>``) and labeled layout (attr ``layout_<tag>``, its feature coords under
    names suffixed ``__<tag>``: the two grids may share dim names). Returns the dataset."""
    import xarray as xr

    ds[f"model_keep_{tag}"] = xr.DataArray(stage.keep, dims=(f"feature_all_{tag}",))
    ds[f"model_factor_{tag}"] = xr.DataArray(stage.factor, dims=(f"feature_kept_{tag}",))
    if layout is not None:
        ds.attrs[f"layout_{tag}"] = json.dumps(layout.to_json())
        coords = layout.coords.to_dataset()
        ds = ds.merge(coords.rename({k: f"{k}__{tag}" for k in (*coords.variables, *coords.dims)}))
    return ds


# ------------------------------------------------------------------------------------ reading


def read_field(ds, tag: str):
    """``(stage, layout)`` of one field of a coupled model, as :func:`write_field` wrote them."""
    import xarray as xr

    stage = FeatureStage(ds[f"model_keep_{tag}"].values.astype(bool), ds[f"model_factor_{tag}"].values)
    if f"layout_{tag}" not in ds.attrs:
        return stage, None
    suffix = f"__{tag}"
    names = [k for k in ds.variables if k.endswith(suffix)]
    coords = ds[names].rename({k: k[: -len(suffix)] for k in names})
    coords = coords.rename_dims({d: d[: -len(suffix)] for d in coords.dims if d.endswith(suffix)})
    return stage, labeled.Layout.from_json(json.loads(ds.attrs[f"layout_{tag}"]), xr.Dataset(coords=coords.variables))


def stored_params(cls, ds) -> dict:
    """The constructor parameters a store recorded that ``cls`` takes (notes for arrays dropped;
    a per-field pair comes back as a list, which every estimator takes as it takes a tuple)."""
    params = json.loads(ds.attrs["parameters"])
    valid = cls._param_names()
    return {k: v for k, v in params.items() if k in valid and not (isinstance(v, str) and v.startswith("<not JSON-able"))}


def writer_of(ds, cls=None, *, source: str = "the dataset", keep_rotation: bool = False):
    """The class that reads ``ds``: the one that wrote it (a rotation's :class:`Rotator` unless
    ``cls`` asks for the rotated model — or whatever ``cls`` with ``keep_rotation``), checked
    against ``cls`` when one is asked for."""
    attrs = ds.attrs
    if int(attrs.get("daskpca_format_version", 0)) > io.FORMAT_VERSION:
        raise NewerFormatError(
            f"{source!r} holds model format {attrs['daskpca_format_version']}; this daskpca reads format "
            f"{io.FORMAT_VERSION} and older. Upgrade daskpca.")
    name = attrs.get("estimator", "PCA")
    written_by = ESTIMATORS.get(name)
    if written_by is None:
        raise DamagedModelError(f"{source!r} was written by {name!r}, which this daskpca does not know (it knows "
                                f"{sorted(ESTIMATORS)}). Upgrade daskpca.")
    rotator = ESTIMATORS["Rotator"]
    if cls is rotator and ROTATION not in attrs:
        raise InputError(f"{source!r} holds {_a(name)} model without a rotation: load it with daskpca.load().")
    if ROTATION in attrs and (keep_rotation or cls in (None, rotator)):
        return rotator
    if cls is not None and not (issubclass(written_by, cls) or issubclass(cls, written_by)):
        wanted = cls.__dict__.get("_model_kind", cls.__name__)
        raise DamagedModelError(f"{source!r} holds {_a(name)} model, not {_a(wanted)}: load it with "
                                f"daskpca.load() (or {name}.load).")
    return written_by if cls is None or issubclass(written_by, cls) else cls  # PCA.load of a HilbertPCA store: HilbertPCA


def from_dataset(ds, cls=None, *, source: str = "the dataset", keep_rotation: bool = False):
    """The model :func:`to_dataset` wrote into ``ds``, as ``cls`` (None: the class that wrote it;
    ``keep_rotation``: see :func:`writer_of`), with its fitted invariants checked (``source`` names
    it in errors)."""
    reader = writer_of(ds, cls, source=source, keep_rotation=keep_rotation)
    missing = [name for name in ("parameters",) if name not in ds.attrs] + reader._format_missing(ds)
    if missing:
        raise DamagedModelError(f"{source!r} is not a complete daskpca {reader.__name__} model: {missing} missing. "
                                "Write it again with `daskpca fit`, or restore a complete copy.")
    try:
        model = reader._format_read(ds)
    except DamagedModelError:
        raise
    except (ValueError, TypeError, KeyError) as exc:
        raise DamagedModelError(f"{source!r} is not a valid daskpca {reader.__name__} model "
                                f"({type(exc).__name__}: {exc}).") from None
    problem = model._problem()
    if problem:
        raise DamagedModelError(f"{source!r} is not a valid daskpca {reader.__name__} model: {problem}. Refusing to "
                                "load it; write it again with `daskpca fit`, or restore a complete copy.")
    return model


def load(store, *, verify: bool = True):
    """``daskpca.load``: the model :func:`save` wrote at ``store``, as the class that wrote it
    (the store's ``estimator``; :class:`~daskpca.Rotator` for a rotated model), verified as
    :meth:`daskpca.models.Estimator.load` says (``verify`` as there)."""
    return load_as(store, None, verify)


def load_as(store, cls, verify: bool = True, *, keep_rotation: bool = False):
    """The model at ``store`` read as ``cls`` (None: the class that wrote it; ``keep_rotation``: a
    rotated model as its :class:`Rotator` whatever ``cls``, as the CLI's commands take either);
    see :func:`load`. The one load path: the model is tied to the version it read, so its save
    there refuses to drop a model written meanwhile (:func:`save`)."""
    from ..store.paths import as_meant

    source = os.fspath(store)  # errors name the store as it was given
    store = as_meant(store)  # once, where the path enters: the version, the read and the tie see it
    # The version is read first: if the store is replaced while it is read, the recorded
    # version is the older one, and a later save there is refused (the safe direction).
    version = io.store_version(store)
    model = from_dataset(read_model_dataset(store, verify=verify), cls, source=source, keep_rotation=keep_rotation)
    model._loaded_from = (_store_identity(store), version)
    return model


def read_model_dataset(store, *, verify: bool = True):
    """The model store at ``store`` read into memory and verified, with the errors
    :meth:`daskpca.models.Estimator.load` documents; ``verify=False``: without its checksums and
    integrity record, with a warning."""
    if not verify:
        import warnings

        warnings.warn(f"{os.fspath(store)!r} is read without verifying its checksums (verify=False): a "
                      "changed or damaged store goes unnoticed.", UserWarning, stacklevel=4)
    try:
        return io.read_dataset(store, expected_format=io.MODEL_FORMAT, error=DamagedModelError,
                               verify_integrity=verify)
    except IncompleteStoreError as exc:
        raise IncompleteStoreError(_not_a_model(os.fspath(store)) or str(exc)) from None


def _not_a_model(source: str) -> str | None:
    """The error for a zarr store daskpca did not write as a model (an input passed as MODEL)."""
    try:
        import zarr

        node = zarr.open(io.resolve(source), mode="r")
    except Exception:
        return None
    if "daskpca_format" in node.attrs:
        return None  # a model whose writer died: the marker's own message says so
    kind = "a zarr array" if isinstance(node, zarr.Array) else "a zarr group"
    return (f"{source!r} is {kind} that daskpca did not write as a model (it has no completion "
            "marker nor model attributes) — a data store? MODEL must be the store written by "
            "`daskpca fit --out` (PCA.save).")


def info_json(info: dict) -> str:
    """A fitted ``solver_info_`` as JSON: small NumPy arrays (per-component residuals, bounds) as
    lists, and what JSON cannot hold (the covariance moments, saved as arrays of their own) left out."""
    kept = {}
    for key, value in info.items():
        value = value.tolist() if isinstance(value, np.ndarray) and value.size <= 10_000 else value
        try:
            json.dumps(value)
        except TypeError:
            continue
        kept[key] = value
    return json.dumps(kept)


def _a(name: str) -> str:
    """``name`` with its article, as it is read aloud ("an MCA", "a PCA", "a HilbertPCA")."""
    return f"{'an' if name[:1] in 'AEFILMNORSX' else 'a'} {name}"


def _store_identity(store) -> str:
    """One spelling per store (:func:`daskpca.store.paths.canonical`: ``~``, ``file://``, symlinks and
    ``..`` resolved; a URL without its trailing slash), so a model loaded through one spelling and
    saved back through another is still checked against the version it was loaded from."""
    from ..store.paths import canonical

    return canonical(store)
