"""The fitted model as a store: :meth:`PCA.save`, :meth:`PCA.load`, ``to_dataset`` / ``from_dataset``.

A mixin of the estimator (as ``ParamsMixin`` is): the model owns its format; :mod:`daskpca.io`
only writes and reads complete stores atomically. No pickle: one zarr v3 group written by xarray.
"""

from __future__ import annotations

import json
import os

import numpy as np

from .. import _plan, io, labeled
from . import integrity
from .._features import FeatureStage
from ..solvers._moments import Moments
from .._validation import NonFinite
from ..exceptions import DamagedModelError, IncompleteStoreError, NewerFormatError


#: Estimator classes by name, so a store records which class wrote it and ``daskpca.load``
#: returns that class (e.g. ``HilbertPCA``); filled as subclasses are defined.
ESTIMATORS: dict = {}


class SavedModelMixin:
    """Saving and loading for :class:`daskpca.PCA` (format ``daskpca-model``, version 1)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        ESTIMATORS[cls.__name__] = cls

    def save(self, store, overwrite=False):
        """Write the fitted model to a zarr group (local path or fsspec URL); no pickle.

        Atomic: a completion marker is written last, recording every object's checksum, and
        :meth:`load` checks it; an existing store is replaced only with ``overwrite=True``, and
        the replaced model is kept in the store's history (``daskpca.io.history``, the last
        ``daskpca.io.MODEL_HISTORY``). See :meth:`to_dataset` for the format.

        A loaded model saved back where it was loaded from (``load`` → ``update`` → ``save``)
        replaces only the version it was loaded from (or last saved there): if another process
        saved there in between, :class:`~daskpca.exceptions.StoreChangedError` instead of silently
        dropping that update. A model fitted here (``fit`` also ends a loaded model's tie to its
        store) replaces whatever is there when ``overwrite=True``.
        """
        self.check_fitted()
        origin, version = getattr(self, "_loaded_from", (None, None))
        replaces = version if overwrite and origin == _store_identity(store) else None
        written = io.write_dataset(self.to_dataset(), store, overwrite=overwrite,
                                   marker={"format": io.MODEL_FORMAT, "note": f"{self.n_samples_} samples"},
                                   keep_history=io.MODEL_HISTORY, replaces_version=replaces)
        if hasattr(self, "_loaded_from"):  # its own save is the version a next save replaces
            self._loaded_from = (_store_identity(store), io.store_version(store))
        return written

    @classmethod
    def load(cls, store, *, verify: bool = True):
        """Load a model written by :meth:`save` (local path or fsspec URL).

        Refuses a store without its completion marker (:class:`~daskpca.exceptions.IncompleteStoreError`),
        one written in a newer format (:class:`~daskpca.exceptions.NewerFormatError`), and a
        damaged one (:class:`~daskpca.exceptions.DamagedModelError`): objects missing or changed
        since they were written (checksums), attributes missing, or a model that breaks the
        fitted invariants (one k everywhere, finite values, orthonormal components, sorted
        non-negative variances). The returned model's ``transform`` is identical to the saved
        model's. ``verify=False`` skips the checksums and the integrity record only (with a
        warning): the escape hatch for a store whose record was lost, to be read at your own risk;
        the fitted invariants are still checked.
        """
        return _load(store, cls, verify)

    def to_dataset(self):
        """The fitted model as one ``xarray.Dataset`` (format ``daskpca-model`` version 1).

        - ``model_components`` (mode, feature_kept), ``model_mean`` (feature_kept),
          ``model_explained_variance`` / ``model_spectrum`` ...: the fitted arrays exactly (in the
          solver's, i.e. weighted, space), so a reloaded model's ``transform`` is bit-identical;
        - ``model_keep`` (feature_all, bool) and ``model_factor`` (feature_kept): the feature
          stage, unless it is the identity;
        - ``moments_mean``, ``moments_scatter`` and attr ``moments_count``: the covariance solver's
          sufficient statistics of ``Z``, when present, for exact incremental updates;
        - the labeled view of :meth:`to_xarray` (components / mean over the original feature dims
          and coords, variances over ``mode``);
        - attrs: ``estimator`` (the class, e.g. ``"HilbertPCA"``, which ``load`` returns),
          ``daskpca_format``, ``daskpca_format_version``, ``parameters`` (JSON; array-valued
          parameters such as ``init`` are not kept, their effect is), fitted scalars, the labeled
          layout (JSON).
        """
        import xarray as xr

        self.check_fitted()
        ds = self.to_xarray()
        dims = {"components_": ("mode", "feature_kept"), "mean_": ("feature_kept",)}
        for name in _MODEL_ARRAYS:
            ds[f"model_{name.rstrip('_')}"] = xr.DataArray(np.asarray(getattr(self, name)), dims=dims.get(name, ("mode",)))
        if self._spectrum is not None:
            ds["model_spectrum"] = xr.DataArray(np.asarray(self._spectrum), dims=("spectrum",))
        if not self.feature_stage_.is_identity:
            ds["model_keep"] = xr.DataArray(self.feature_stage_.keep, dims=("feature_all",))
            ds["model_factor"] = xr.DataArray(self.feature_stage_.factor, dims=("feature_kept",))
        moments = self.solver_info_.get("moments")
        if moments is not None:
            ds["moments_mean"] = xr.DataArray(moments.mean, dims=("feature_kept",))
            ds["moments_scatter"] = xr.DataArray(moments.symmetric_scatter(), dims=("feature_kept", "feature_kept_2"))
            ds.attrs["moments_count"] = int(moments.count)
        ds.attrs.update({name: convert(getattr(self, name)) for name, convert in _MODEL_SCALARS.items()})
        ds.attrs["solver_info"] = json.dumps({k: v for k, v in _listed(self.solver_info_).items() if _is_json(v)})
        ds.attrs["estimator"] = type(self).__name__
        ds.attrs["daskpca_format"] = io.MODEL_FORMAT
        ds.attrs["daskpca_format_version"] = io.FORMAT_VERSION
        if self.layout_ is not None:
            ds.attrs["layout"] = json.dumps(self.layout_.to_json())
        return ds

    @classmethod
    def from_dataset(cls, ds, *, source: str = "the dataset"):
        """The model :meth:`to_dataset` wrote (``source`` names it in errors)."""
        attrs = ds.attrs
        if int(attrs.get("daskpca_format_version", 0)) > io.FORMAT_VERSION:
            raise NewerFormatError(
                f"{source!r} holds model format {attrs['daskpca_format_version']}; this daskpca "
                f"reads format {io.FORMAT_VERSION} and older. Upgrade daskpca."
            )
        other = ESTIMATORS.get(attrs.get("estimator"))
        if other is not None and not (issubclass(other, cls) or issubclass(cls, other)):
            raise DamagedModelError(f"{source!r} holds a {other.__name__} model, not a {cls.__name__}: load it with "
                                    f"daskpca.load() (or {other.__name__}.load).")
        missing = [name for name in ("parameters", *_MODEL_SCALARS) if name not in attrs]
        missing += [f"model_{name.rstrip('_')}" for name in _MODEL_ARRAYS if f"model_{name.rstrip('_')}" not in ds]
        if missing:
            raise DamagedModelError(f"{source!r} is not a complete daskpca model: {missing} missing. Write it again "
                                    "with `daskpca fit`, or restore a complete copy.")
        written_by = ESTIMATORS.get(attrs.get("estimator", cls.__name__))
        if written_by is None:
            raise DamagedModelError(f"{source!r} was written by {attrs['estimator']!r}, which this daskpca does "
                                    f"not know (it knows {sorted(ESTIMATORS)}). Upgrade daskpca.")
        if issubclass(written_by, cls):
            cls = written_by  # PCA.load of a HilbertPCA store returns a HilbertPCA
        try:
            pca = cls._from_dataset(ds, attrs)
        except (ValueError, TypeError, KeyError) as exc:
            raise DamagedModelError(f"{source!r} is not a valid daskpca model ({type(exc).__name__}: {exc}).") from None
        integrity.check_model(pca, repr(source))
        return pca

    @classmethod
    def _from_dataset(cls, ds, attrs):
        params = json.loads(attrs["parameters"])
        valid = cls._param_names()
        pca = cls(**{k: v for k, v in params.items()
                     if k in valid and not (isinstance(v, str) and v.startswith("<not JSON-able"))})
        for name in _MODEL_ARRAYS:
            setattr(pca, name, ds[f"model_{name.rstrip('_')}"].values)
        for name, convert in _MODEL_SCALARS.items():
            setattr(pca, name, convert(attrs[name]))
        pca._spectrum = ds["model_spectrum"].values if "model_spectrum" in ds else None
        pca.solver_info_ = json.loads(attrs.get("solver_info", "{}"))
        pca.error_bound_ = _plan.error_bound(pca.solver_info_)
        if "moments_mean" in ds:
            pca.solver_info_["moments"] = Moments(
                int(attrs["moments_count"]), ds["moments_mean"].values, ds["moments_scatter"].values, NonFinite()
            )
        if "model_keep" in ds:
            pca.feature_stage_ = FeatureStage(ds["model_keep"].values.astype(bool), ds["model_factor"].values)
        else:
            pca.feature_stage_ = FeatureStage.identity(pca.n_features_in_)
        pca.layout_ = labeled.Layout.from_json(json.loads(attrs["layout"]), ds) if "layout" in attrs else None
        return pca


#: Fitted arrays and scalars a saved model holds (with the type each scalar is read back as).
_MODEL_ARRAYS = ("components_", "explained_variance_", "explained_variance_ratio_", "singular_values_", "mean_")
_MODEL_SCALARS = {
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


def _listed(info: dict) -> dict:
    """Small NumPy arrays (per-component residuals, bounds) as lists, so JSON keeps them."""
    return {k: (v.tolist() if isinstance(v, np.ndarray) and v.size <= 10_000 else v) for k, v in info.items()}


def _is_json(value) -> bool:
    try:
        json.dumps(value)
        return True
    except TypeError:
        return False


def load(store, *, verify: bool = True):
    """``daskpca.load``: the model :meth:`SavedModelMixin.save` wrote at ``store``, as the class
    that wrote it (the store's ``estimator`` attr: ``PCA``, ``HilbertPCA``, ``MCA``), verified as
    :meth:`SavedModelMixin.load` says (``verify`` as there)."""
    return _load(store, None, verify)


def _load(store, cls, verify: bool = True):
    """Read, verify and rebuild the model at ``store`` with ``cls`` (None: the class that wrote it)."""
    source = os.fspath(store)
    # The version is read first: if the store is replaced while it is read, the recorded
    # version is the older one, and a later save there is refused (the safe direction).
    version = io.store_version(store)
    ds = read_model_dataset(store, verify=verify)
    if cls is None:  # an unknown name falls to PCA's reader, whose error names it
        cls = ESTIMATORS.get(ds.attrs.get("estimator"), ESTIMATORS["PCA"])
    model = cls.from_dataset(ds, source=source)
    model._loaded_from = (_store_identity(store), version)
    return model


def read_model_dataset(store, *, verify: bool = True):
    """The model store at ``store`` read into memory and verified, with the errors
    :meth:`SavedModelMixin.load` documents (also for :meth:`daskpca.Rotator.load` and the CLI);
    ``verify=False``: without its checksums and integrity record, with a warning."""
    if not verify:
        import warnings

        warnings.warn(f"{os.fspath(store)!r} is read without verifying its checksums (verify=False): a "
                      "changed or damaged store goes unnoticed.", UserWarning, stacklevel=3)
    try:
        return io.read_dataset(store, expected_format=io.MODEL_FORMAT, error=DamagedModelError,
                               verify_integrity=verify)
    except IncompleteStoreError as exc:
        raise IncompleteStoreError(_not_a_model(os.fspath(store)) or str(exc)) from None


def _store_identity(store) -> str:
    """One spelling per store: the resolved local path, or the URL without a trailing slash."""
    path = os.fspath(store)
    return path.rstrip("/") if "://" in path else os.path.realpath(path)
