"""Two fields as a coupled fit takes them: matrices, layouts and feature specs, paired by sample.

Reads no data. Labeled fields are aligned by sample coordinate (the same samples in another order
are paired by coordinate; samples present in one field only are refused, named); matrices are
paired by row. Per-field parameters (``weights``, ``standardize``) are one value for both fields
or a pair. :func:`resolve` turns a field's spec into its stage once its statistics are read, with
errors that name the field. The road back into a fitted coupled model (each field's matrix,
its scores) is every estimator's: :func:`daskpca.models.model_matrix`, :func:`daskpca.models.project`,
with each block moved to the estimator's ``device`` in its read task (:func:`model_field`,
:func:`project_field`), as at fit time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import labeled
from .._features import FeatureSpec, FeatureStage, matrix_weights
from .._validation import as_dask_matrix, check_nan_policy
from ..models import model_matrix, positions, project_matrix, scores_out
from ..passes import regroup, to_device
from ..exceptions import InputError, InputTypeError, InvalidParameterError, NonFiniteInputError

FIELDS = ("X", "Y")


@dataclass(frozen=True)
class Field:
    """One field as the fit needs it (nothing read): its matrix, labeled layout and feature spec."""

    name: str
    matrix: object
    kind: str
    layout: object
    spec: FeatureSpec


def pair(value, name: str) -> tuple:
    """A per-field parameter as ``(for X, for Y)``: a tuple or list of two, else the value for both."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise InvalidParameterError(
                f"{name} as a {type(value).__name__} must hold two entries, X's and Y's; got {len(value)}. "
                "For per-feature weights of a plain matrix pass a NumPy array.")
        return tuple(value)
    return value, value


def field(name, data, sample_dims, weights, standardize, device=None) -> Field:
    """One field's matrix, layout and feature spec (reads nothing); with ``device``, each block
    moved there in the task that reads it (:func:`daskpca.passes._device.to_device`)."""
    if labeled.is_labeled(data):
        source = labeled.from_xarray(data, sample_dims, weights)
        return Field(name, to_device(source.matrix, device), source.kind, source.layout,
                     FeatureSpec(source.weights, bool(standardize)))
    matrix, kind = as_dask_matrix(data, name=name)
    matrix = regroup(matrix)  # tasks of whole storage chunks, as PCA's passes read (passes/_geometry.py)
    return Field(name, to_device(matrix, device), kind, None,
                 FeatureSpec(matrix_weights(weights, matrix.shape[1]), bool(standardize)))


def model_field(data, stage, layout, device, *, name: str, estimator: str):
    """``(matrix, kind)`` of one field for a fitted coupled model (:func:`daskpca.models.model_matrix`),
    each block moved to ``device`` in its read task."""
    matrix, kind = model_matrix(data, stage, layout, name=name, estimator=estimator)
    return to_device(matrix, device), kind


def project_field(data, stage, layout, mean, basis, device, *, name: str, estimator: str, scaling: str,
                  nan: str = "raise"):
    """One field's scores ``(z − mean)·basis`` as :func:`daskpca.models.project` gives them, the
    blocks moved to ``device`` in their read task: NumPy for NumPy input, lazy (device chunks for
    device blocks) otherwise, labeled for a labeled model."""
    check_nan_policy(nan)
    matrix, kind = model_field(data, stage, layout, device, name=name, estimator=estimator)
    return scores_out(project_matrix(matrix, stage, mean, basis, nan, positions(stage, layout, data)),
                      kind, data, layout, scaling)


def aligned(X, Y, sample_dims):
    """``Y`` with its samples in X's order; refuses, naming them, samples present in one field only."""
    for dim in sample_dims:
        for data, which in ((X, "X"), (Y, "Y")):
            if dim not in data.dims:
                raise InputError(f"sample dim {dim!r} is not a dimension of {which} (its dims: {list(data.dims)}).")
        if dim not in X.coords or dim not in Y.coords:
            if X.sizes[dim] != Y.sizes[dim]:
                raise InputError(f"X has {X.sizes[dim]} samples along {dim!r} and Y has {Y.sizes[dim]}, and without "
                                 f"a {dim!r} coordinate they cannot be aligned. Select the common samples first.")
            continue
        x_values, y_values = X[dim].values, Y[dim].values
        only_x = [v for v in x_values if v not in set(y_values)]
        only_y = [v for v in y_values if v not in set(x_values)]
        if only_x or only_y:
            raise InputError(
                f"X and Y do not have the same samples along {dim!r}: {_listed(only_x)} only in X, "
                f"{_listed(only_y)} only in Y. Each sample of X is paired with the same sample of Y; select "
                f"the common ones first, e.g. common = numpy.intersect1d(X[{dim!r}], Y[{dim!r}]), then "
                f"X.sel({dim}=common) and Y.sel({dim}=common) (xarray.align would also intersect the "
                "feature grids they share dim names with).")
        if len(set(x_values)) != len(x_values):
            raise InputError(f"X has repeated {dim!r} values; samples must be unique to be paired.")
        if not np.array_equal(x_values, y_values):
            Y = Y.sel({dim: x_values})  # same samples, another order: pair them by coordinate
    return Y


def _listed(values) -> str:
    if not values:
        return "none"
    shown = ", ".join(str(v)[:19] for v in values[:3])
    return f"{len(values)} ({shown}{', …' if len(values) > 3 else ''})"


def resolve(field: Field, finite_count, n, variance) -> FeatureStage:
    """The field's stage from its statistics; errors name the field."""
    try:
        return field.spec.resolve(finite_count, n, variance)
    except NonFiniteInputError as exc:
        raise NonFiniteInputError(f"field {field.name}: {exc}") from None


def fields(X, Y, sample_dims, weights, standardize, device=None) -> tuple[Field, Field]:
    """Both fields as matrices with their specs, paired, their blocks moved to ``device`` in
    their read tasks (reads nothing; the device is checked first)."""
    if labeled.is_labeled(X) != labeled.is_labeled(Y):
        raise InputTypeError(
            f"X is {type(X).__name__} and Y is {type(Y).__name__}: pass two xarray objects (aligned "
            "by sample coordinate) or two matrices (aligned by row), not one of each.")
    if labeled.is_labeled(X):
        Y = aligned(X, Y, labeled.normalize_sample_dims(sample_dims))
    elif sample_dims is not None:
        raise InputTypeError(f"sample_dims={sample_dims!r} applies to xarray input only; matrices have samples as rows.")
    pairs = zip(FIELDS, (X, Y), pair(weights, "weights"), pair(standardize, "standardize"))
    x, y = (field(name, data, sample_dims, w, s, device) for name, data, w, s in pairs)
    if x.matrix.shape[0] != y.matrix.shape[0]:
        raise InputError(f"X has {x.matrix.shape[0]} samples (rows) and Y has {y.matrix.shape[0]}: a coupled "
                         "analysis pairs the samples of two fields, so they must have the same ones. Select the "
                         "common period of both first.")
    return x, y
