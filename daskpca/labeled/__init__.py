"""The labeled layer: an adapter between xarray objects and the estimator's matrices.

A thin layer in the style of flox: **dims → matrix → core → coords back**. It never fits
anything and calls no estimator method; the estimator (:class:`daskpca.PCA`) calls it to turn
labeled input into a matrix and weights, and matrix results back into labeled output.

1. *Dims → matrix* (:mod:`.layout`). ``sample_dims`` (one name or several) become the rows; every
   other dimension of every data variable is a feature dimension; the variables of a ``Dataset``
   are concatenated along the features (one multivariate analysis).
2. *Weights* (:mod:`.weights`): ``"coslat"`` = √cos(latitude), an array broadcast over the
   feature dims, or a dict per variable, as one positive factor per matrix column.
3. *Core* — not here. The estimator's feature stage (:mod:`daskpca._features`) drops features
   that are NaN for **every** sample (land points of an ocean field), multiplies by the weights
   (and divides by the standard deviation with ``standardize=True``), and any solver analyses
   ``Z = X[:, keep]·f``, inside its own first pass where it can. The fitted attributes
   (``components_``, ``mean_``, ``explained_variance_``, ...) describe ``Z``: ``components_`` are
   the orthonormal EOFs **in the weighted space** (as the ``eofs`` package returns them).
4. *Coords back* (:mod:`.results`). Scores get dims ``(*sample_dims, "mode")``; fields get their
   original dims, coords and attrs, NaN at masked features.

**What is weighted, and what is un-weighted on output.** Eigenvalues, variance fractions, scores
and ``components`` (in :meth:`PCA.to_xarray`) are those of the weighted (standardized) field; the
components are *not* divided by ``f`` (dividing would break orthonormality; ``feature_scale`` in
``to_xarray()`` is ``f``, so ``components / feature_scale`` gives that view when wanted). ``mean``
in ``to_xarray()`` and every reconstruction (:meth:`PCA.inverse_transform`) are un-weighted:
``X̂ = (scores · components + mean_) / f``, in the data's units. Covariance and correlation maps
(:func:`component_maps`) are in data units too.

**Modes are numbered from 1** (the EOF convention): ``mode=1`` is the leading component, i.e.
row 0 of ``components_``; ``inverse_transform(scores, modes=[1, 2, 5])`` selects by these numbers.

**Score scaling** (``scaling=`` of ``transform`` / ``inverse_transform``; the ``eofs`` package's
``pcscaling`` 0/1/2): ``"none"`` — projections ``p = (z − z̄)·e``, variance λ (the default unless
``whiten=True``); ``"unit"`` — ``p/√λ``, unit variance (the default with ``whiten=True``);
``"sqrt_lambda"`` — ``p·√λ``. Scores carry their scaling in ``attrs["scaling"]`` and
``inverse_transform`` reads it back.

**Passes** (a pass = one full read of the input), as for any fit with a feature stage:
``solver="covariance"``: 1 — the per-feature finite counts and (with ``standardize``) the standard
deviations come from the same one-pass moments. ``solver="gram"``: 2 — finite counts from pass 1;
with ``standardize=True`` one extra read first. ``"randomized"`` and ``"krylov"``: their own
passes — finite counts from the first sketch pass, which reads the weighted columns; with
``standardize=True`` one extra read first. Every other solver: one extra read (per-feature
count, mean and variance) before its own passes; ``n_passes_`` includes it and
``solver_info_["mask_pass"]`` says why.

**Imports.** It may import the fit stages below it (:mod:`daskpca._validation`,
:mod:`daskpca._features`) and the pass machinery (:mod:`daskpca.passes`); the estimators, the EOF family, the
estimator layer's model format (:mod:`daskpca.models`) and the CLI import it. It never imports an estimator.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._features import locate_nonfinite
from ..exceptions import NonFiniteInputError
from .layout import (MODE, LabeledPositions, Layout, VariableLayout, as_dataset, check_time_axis, is_labeled,
                     normalize_sample_dims, positions_of)
from .results import (
    component_maps,
    field_from_rows,
    per_sample_to_xarray,
    results_dataset,
    scores_from_xarray,
    scores_to_xarray,
)
from .weights import LATITUDE_NAMES, resolve_weights

__all__ = [
    "row_reader",
    "LATITUDE_NAMES",
    "MODE",
    "Layout",
    "LabeledMatrix",
    "LabeledPositions",
    "VariableLayout",
    "check_time_axis",
    "component_maps",
    "field_from_rows",
    "from_xarray",
    "is_labeled",
    "located",
    "per_sample_to_xarray",
    "positions_of",
    "results_dataset",
    "scores_from_xarray",
    "scores_to_xarray",
    "to_matrix",
]


@dataclass(frozen=True)
class LabeledMatrix:
    """Labeled input as the estimator needs it (nothing read yet)."""

    matrix: object  # dask array (n_samples, n_features)
    kind: str  # "numpy" (results computed) or "dask" (results lazy)
    layout: Layout
    weights: np.ndarray  # (n_features,) float64 > 0


def from_xarray(X, sample_dims, weights=None) -> LabeledMatrix:
    """Stack labeled ``X`` into a matrix; resolve ``weights`` on its coords. Reads no data."""
    sample_dims = normalize_sample_dims(sample_dims)
    ds, is_dataarray, name = as_dataset(X)
    layout = Layout.from_dataset(ds, sample_dims, is_dataarray, name)
    matrix, kind = layout.to_matrix(ds)
    return LabeledMatrix(matrix, kind, layout, resolve_weights(weights, ds, layout))


def row_reader(X, layout: Layout):
    """A reader of rows ``start:stop`` of labeled ``X``'s matrix, as :func:`from_xarray` lays them
    out, taken from ``X`` itself — only the storage chunks holding those samples are read (the
    matrix's own tasks would read whole task blocks): ``read(start, stop) -> ndarray (rows, d)``.
    None where the samples are stacked from several dims (a row range is no slice of ``X`` then).
    For the plan's probe (:mod:`daskpca._probe`)."""
    if len(layout.sample_dims) != 1:
        return None
    ds, _, _ = as_dataset(X)
    (dim,) = layout.sample_dims

    def read(start: int, stop: int) -> np.ndarray:
        return np.asarray(layout.to_matrix(ds.isel({dim: slice(start, stop)}))[0])

    return read


def to_matrix(layout: Layout, X):
    """``(matrix, kind)`` of labeled ``X`` laid out as at fit time (checked: variables, dims,
    sizes, coords)."""
    ds, _, _ = as_dataset(X)
    return layout.to_matrix(ds, check=True)


def located(error: ValueError, matrix, layout: Layout, X) -> ValueError:
    """``error`` of a labeled fit that refused NaN/±inf, with the first such entry named by
    coordinates (``time=2001-03-01, lat=10.5, lon=200.0``). Costs one read of ``matrix``, made
    only once the fit has already failed; ``error`` itself when nothing is found."""
    found = locate_nonfinite(matrix)
    if not found.count:
        return error
    where = LabeledPositions.of(layout, X).describe(*found.first)
    return NonFiniteInputError(f"{error} The first such entry is at {where}.")
