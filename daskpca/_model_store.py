"""The fitted model as a store: :meth:`PCA.save`, :meth:`PCA.load`, ``to_dataset`` / ``from_dataset``.

A mixin of the estimator (as ``ParamsMixin`` is): the model owns its format; :mod:`daskpca.io`
only writes and reads complete stores atomically. No pickle: one zarr v3 group written by xarray.
"""

from __future__ import annotations

import json
import os

import numpy as np

from . import io, labeled
from ._features import FeatureStage
from ._moments import Moments
from ._validation import NonFinite
from .exceptions import NewerFormatError


class SavedModelMixin:
    """Saving and loading for :class:`daskpca.PCA` (format ``daskpca-model``, version 1)."""

    def save(self, store, overwrite=False):
        """Write the fitted model to a zarr group (local path or fsspec URL); no pickle.

        Atomic: a completion marker is written last and :meth:`load` checks it; an existing
        store is replaced only with ``overwrite=True``. See :meth:`to_dataset` for the format.
        """
        self._check_fitted()
        return io.write_dataset(self.to_dataset(), store, overwrite=overwrite, marker={"format": io.MODEL_FORMAT})

    @classmethod
    def load(cls, store):
        """Load a model written by :meth:`save` (local path or fsspec URL).

        Refuses a store without its completion marker (:class:`~daskpca.exceptions.IncompleteStoreError`)
        and one written in a newer format (:class:`~daskpca.exceptions.NewerFormatError`). The
        returned model's ``transform`` is identical to the saved model's.
        """
        return cls.from_dataset(io.read_dataset(store, expected_format=io.MODEL_FORMAT), source=os.fspath(store))

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
        - attrs: ``daskpca_format``, ``daskpca_format_version``, ``parameters`` (JSON; array-valued
          parameters such as ``init`` are not kept, their effect is), fitted scalars, the labeled
          layout (JSON).
        """
        import xarray as xr

        self._check_fitted()
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
        ds.attrs["solver_info"] = json.dumps({k: v for k, v in self.solver_info_.items() if _is_json(v)})
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


def _is_json(value) -> bool:
    try:
        json.dumps(value)
        return True
    except TypeError:
        return False
