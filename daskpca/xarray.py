"""The labeled layer: xarray objects in, labeled results out (EOF analysis).

A thin layer in the style of flox: **dims → matrix → core → coords back**.

1. *Dims → matrix.* ``sample_dims`` (one name or several) become the rows; every other dimension
   of every data variable is a feature dimension. Each variable is transposed to
   ``(*sample_dims, *feature_dims)`` and reshaped lazily to ``(n_samples, d_v)``; the variables
   of a ``Dataset`` are concatenated along the features (one multivariate analysis). Rows are
   ordered as NumPy's C order over ``sample_dims``.
2. *Masks.* Features that are NaN (non-finite) for **every** sample — land points of an ocean
   field — are found in the solver's own first pass (see :func:`fit`), dropped before the
   eigenproblem, and restored as NaN in components, mean and reconstructions. A feature that is
   missing only sometimes is an error that counts them (or, with ``solver="ppca"``, data for the
   missing-value solver).
3. *Weights.* The matrix the solver analyses is ``Z = X[:, kept] · f`` with one positive factor
   per feature, ``f = w / s``: ``w`` from ``PCA(weights=...)`` (``"coslat"`` = √cos(latitude),
   an array broadcast over the feature dims, or a dict per variable), ``s`` the per-feature
   standard deviation (ddof=1) when ``standardize=True`` (correlation-matrix PCA), else 1.
4. *Core.* Any solver of :mod:`daskpca.solvers`; the estimator's fitted attributes
   (``components_``, ``mean_``, ``explained_variance_``, ...) describe ``Z``: ``components_`` are
   the orthonormal EOFs **in the weighted space** (as the ``eofs`` package returns them),
   ``mean_`` is the mean of ``Z``.
5. *Coords back.* Scores get dims ``(*sample_dims, "mode")``; fields get their original dims,
   coords and attrs.

**What is weighted, and what is un-weighted on output.** The solver sees ``Z``, so eigenvalues,
variance fractions, scores and ``components`` (in :meth:`PCA.to_xarray`) are those of the
weighted (standardized) field; the components are *not* divided by ``f`` (dividing would break
orthonormality; ``feature_scale`` in ``to_xarray()`` is ``f``, so ``components / feature_scale``
gives that view when wanted). ``mean`` in ``to_xarray()`` and every reconstruction
(:meth:`PCA.inverse_transform`) are un-weighted: ``X̂ = (scores · components + mean_) / f``, in the
data's units. Covariance and correlation maps (:func:`component_maps`) are in data units too.

**Modes are numbered from 1** (the EOF convention): ``mode=1`` is the leading component,
i.e. row 0 of ``components_``. ``inverse_transform(scores, modes=[1, 2, 5])`` selects by these
numbers.

**Score scaling** (``scaling=`` of ``transform`` / ``inverse_transform``; the ``eofs`` package's
``pcscaling`` 0/1/2): ``"none"`` — projections ``p = (z − z̄)·e``, variance λ (the default unless
``whiten=True``); ``"unit"`` — ``p/√λ``, unit variance (the default with ``whiten=True``);
``"sqrt_lambda"`` — ``p·√λ``. Scores carry their scaling in ``attrs["scaling"]`` and
``inverse_transform`` reads it back.

**Passes** (a pass = one full read of the input). ``solver="covariance"``: 1 — the per-feature
count of finite values, the mask, and (with ``standardize``) the standard deviations all come
from the same one-pass moments (the d×d scatter restricted to kept features is exact because
the all-NaN columns were zero-filled, adding exactly zero). ``solver="gram"``: 2 as usual — the
finite counts come from pass 1 (zero-filled all-NaN columns add exactly zero to the n×n Gram
matrix) and pass 2 reads only kept columns; with ``standardize=True`` the Gram solver needs the
standard deviations *before* its pass 1, so one extra read (a cheap O(n·d) reduction of
per-feature count, mean and variance) is made first. Every other solver (tsqr, randomized, als,
ppca): that same one extra read before the solver's own passes, because those solvers do not
report per-feature finite counts. ``n_passes_`` includes it and ``solver_info_["mask_pass"]``
says why.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Hashable

import numpy as np

from ._graph import map_row_blocks, tree_reduce
from ._moments import Moments
from ._validation import NonFinite, as_dask_matrix
from .solvers._base import ComponentRequest

#: Name of the dimension that indexes components (modes), numbered from 1.
MODE = "mode"
#: Coordinate names searched (case-insensitive) for ``weights="coslat"``.
LATITUDE_NAMES = ("lat", "latitude", "lats", "y", "nav_lat", "rlat", "xlat", "lat_0")
#: Score scalings (see the module docstring).
SCALINGS = ("none", "unit", "sqrt_lambda")
#: Solvers that accept partially missing features (NaN treated as missing values).
MISSING_VALUE_SOLVERS = ("ppca",)
#: Key used for an unnamed DataArray inside the internal Dataset.
_UNNAMED = "__daskpca_unnamed__"


def is_labeled(X) -> bool:
    """Whether ``X`` is an xarray ``DataArray`` or ``Dataset`` (without importing xarray)."""
    return type(X).__module__.startswith("xarray.") and hasattr(X, "dims")


# ---------------------------------------------------------------------------------------- layout


@dataclass(frozen=True)
class VariableLayout:
    """Where one variable's features sit among the matrix columns."""

    name: Hashable
    dims: tuple  # feature dims, in the order they are flattened
    shape: tuple
    start: int

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def stop(self) -> int:
        return self.start + self.size


@dataclass
class Layout:
    """How labeled data maps onto the (n_samples, n_features) matrix, and back."""

    sample_dims: tuple
    variables: list
    is_dataarray: bool
    name: Hashable  # the DataArray's name (None when unnamed)
    coords: object  # xarray.Coordinates over feature dims only
    attrs: dict = field(default_factory=dict)  # per variable attrs (JSON-able subset)

    @property
    def n_features(self) -> int:
        return self.variables[-1].stop if self.variables else 0

    # ---- building

    @classmethod
    def from_dataset(cls, ds, sample_dims: tuple, is_dataarray: bool, name) -> "Layout":
        _check_sample_dims(ds, sample_dims, is_dataarray)
        if MODE in ds.dims:
            raise ValueError(
                f"X has a dimension named {MODE!r}, which daskpca uses for the components; "
                f"rename it first, e.g. X.rename({{{MODE!r}: 'mode_in'}})."
            )
        variables, start = [], 0
        for var_name, var in ds.data_vars.items():
            dims = tuple(d for d in var.dims if d not in sample_dims)
            shape = tuple(var.sizes[d] for d in dims)
            layout = VariableLayout(var_name, dims, shape, start)
            variables.append(layout)
            start = layout.stop
        feature_dims = {d for v in variables for d in v.dims}
        coords = ds.coords.to_dataset().drop_vars(
            [k for k, c in ds.coords.items() if set(c.dims) - feature_dims]
        ).coords
        attrs = {str(v.name): _jsonable_attrs(ds[v.name].attrs) for v in variables}
        return cls(tuple(sample_dims), variables, is_dataarray, name, coords, attrs)

    # ---- dims → matrix

    def to_matrix(self, ds, *, check: bool = False):
        """``(dask_matrix, kind)`` of shape (n_samples, n_features); no data is read."""
        import dask.array as da

        _check_sample_dims(ds, self.sample_dims, self.is_dataarray)
        if check:
            self.check_matches(ds)
        n_samples = int(np.prod([ds.sizes[d] for d in self.sample_dims], dtype=np.int64))
        pieces, lazy = [], False
        for v in self.variables:
            data = ds[v.name].transpose(*self.sample_dims, *v.dims).data
            lazy = lazy or isinstance(data, da.Array)
            pieces.append(data.reshape(n_samples, v.size))
        if lazy:
            matrix = da.concatenate([da.asarray(p) for p in pieces], axis=1) if len(pieces) > 1 else da.asarray(pieces[0])
        else:
            matrix = np.concatenate(pieces, axis=1) if len(pieces) > 1 else pieces[0]
        return as_dask_matrix(matrix)

    def check_matches(self, ds) -> None:
        """Raise when ``ds`` does not have the fitted variables, feature dims, sizes and coords."""
        fitted = [v.name for v in self.variables]
        missing = [n for n in fitted if n not in ds.data_vars]
        if missing:
            raise ValueError(
                f"X lacks the variable(s) {missing} the model was fitted on (it has "
                f"{list(ds.data_vars)}). Pass the same variables as at fit time."
            )
        extra = [n for n in ds.data_vars if n not in fitted]
        if extra:
            raise ValueError(
                f"X has variable(s) {extra} the model was not fitted on; select the fitted ones: "
                f"X[{fitted}]."
            )
        for v in self.variables:
            var = ds[v.name]
            dims = tuple(d for d in var.dims if d not in self.sample_dims)
            if set(dims) != set(v.dims):
                raise ValueError(
                    f"variable {_label(v.name)} has feature dims {dims} here but {v.dims} at fit "
                    "time; the feature dimensions must be the same (their order may differ)."
                )
            for dim, size in zip(v.dims, v.shape):
                if var.sizes[dim] != size:
                    raise ValueError(
                        f"dimension {dim!r} of {_label(v.name)} has size {var.sizes[dim]} here but "
                        f"{size} at fit time; transform needs the same feature grid."
                    )
                if dim in self.coords and dim in ds.coords:
                    _check_same_coord(dim, self.coords[dim].values, ds.coords[dim].values)

    # ---- matrix → dims

    def sample_coords(self, source):
        """Coords of ``source`` that live on sample dims only."""
        return {
            k: c.variable for k, c in source.coords.items() if c.dims and set(c.dims) <= set(self.sample_dims)
        }

    def unstack_features(self, rows, *, leading_dims: tuple, leading_shape: tuple, leading_coords: dict, attrs_name: str | None = None):
        """Turn an array (m, n_features) — NumPy or dask — into a DataArray / Dataset."""
        import xarray as xr

        out = {}
        for v in self.variables:
            block = rows[:, v.start : v.stop].reshape(*leading_shape, *v.shape)
            coords = {k: c for k, c in self.coords.items() if set(c.dims) <= set(v.dims)}
            coords.update({k: c for k, c in leading_coords.items()})
            out[v.name] = xr.DataArray(
                block, dims=(*leading_dims, *v.dims), coords=coords, attrs=dict(self.attrs.get(str(v.name), {}))
            )
        if self.is_dataarray:
            (array,) = out.values()
            return array.rename(self.name)
        return xr.Dataset(out)


def _label(name) -> str:
    return "the DataArray" if name == _UNNAMED else f"variable {name!r}"


def _check_same_coord(dim, fitted, given) -> None:
    fitted, given = np.asarray(fitted), np.asarray(given)
    if fitted.shape != given.shape:
        raise ValueError(
            f"coordinate {dim!r} has {given.size} values here but {fitted.size} at fit time."
        )
    if fitted.dtype.kind in "fc" and given.dtype.kind in "fc":
        same = np.isclose(fitted, given, rtol=1e-6, atol=0) | (np.isnan(fitted) & np.isnan(given))
    else:
        same = fitted == given
    if not np.all(same):
        i = int(np.argmin(same))
        here, there = given[i].item() if hasattr(given[i], "item") else given[i], fitted[i].item() if hasattr(fitted[i], "item") else fitted[i]
        raise ValueError(
            f"coordinate {dim!r} does not match the one the model was fitted on: at position {i} "
            f"it is {here!r} here but {there!r} at fit time. Select or interpolate the "
            f"data onto the fitted grid (e.g. X.sel({dim}=pca.to_xarray()[{dim!r}])) first."
        )


def _check_sample_dims(ds, sample_dims, is_dataarray) -> None:
    missing = [d for d in sample_dims if d not in ds.dims]
    if missing:
        raise ValueError(
            f"sample_dims {list(missing)} not found in X; X has dims {list(ds.dims)}. "
            "sample_dims names the dimension(s) that index samples (e.g. 'time')."
        )
    if not ds.data_vars:
        raise ValueError("X is a Dataset without data variables: nothing to analyse.")
    lacking = {n: v.dims for n, v in ds.data_vars.items() if not set(sample_dims) <= set(v.dims)}
    if lacking:
        described = ", ".join(f"{n!r} has dims {tuple(d)}" for n, d in lacking.items())
        raise ValueError(
            f"every variable of a Dataset must have all sample dims {list(sample_dims)}, but "
            f"{described}. Select the variables to analyse together, e.g. "
            f"X[{[n for n in ds.data_vars if n not in lacking]}]."
        )


def _normalize_sample_dims(sample_dims) -> tuple:
    if sample_dims is None:
        raise TypeError(
            "labeled input needs sample_dims: the dimension(s) that index samples, e.g. "
            "pca.fit(X, sample_dims='time') or sample_dims=('time', 'member')."
        )
    if isinstance(sample_dims, str) or not isinstance(sample_dims, (list, tuple)):
        sample_dims = (sample_dims,)
    if len(set(sample_dims)) != len(sample_dims) or not sample_dims:
        raise ValueError(f"sample_dims={sample_dims!r} must name one or more distinct dims.")
    return tuple(sample_dims)


def _as_dataset(X):
    """``(dataset, is_dataarray, name)``."""
    import xarray as xr

    if isinstance(X, xr.DataArray):
        name = X.name
        return X.to_dataset(name=_UNNAMED if name is None else name), True, name
    if isinstance(X, xr.Dataset):
        return X, False, None
    raise TypeError(f"expected an xarray DataArray or Dataset, got {type(X).__name__}.")


def _jsonable_attrs(attrs: dict) -> dict:
    out = {}
    for k, v in attrs.items():
        if isinstance(v, np.generic):
            v = v.item()
        elif isinstance(v, np.ndarray):
            v = v.tolist()
        try:
            json.dumps(v)
        except TypeError:
            continue
        out[str(k)] = v
    return out


# ---------------------------------------------------------------------------------------- weights


def resolve_weights(weights, ds, layout: Layout) -> np.ndarray:
    """One float64 weight per matrix column (n_features,), checked positive and finite.

    ``weights`` may be ``None`` (all 1), ``"coslat"`` (√cos(latitude), clipped at 0, from the
    first coordinate named like a latitude: ``lat``, ``latitude``, ``y``, ... or with
    ``standard_name="latitude"``), a scalar, an array or DataArray broadcastable over the feature
    dims (a NumPy array aligns with the *trailing* feature dims, as NumPy broadcasting does;
    a DataArray aligns by dim name), or a dict ``{variable: any of these}`` for a Dataset
    (variables left out get 1).
    """
    out = np.ones(layout.n_features)
    if weights is None:
        return out
    for v in layout.variables:
        spec = weights.get(v.name, None) if isinstance(weights, dict) else weights
        if spec is None:
            continue
        out[v.start : v.stop] = _variable_weights(spec, ds, v, layout).ravel()
    bad = ~np.isfinite(out) | (out <= 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(
            f"weights must be finite and > 0 for every feature; {int(bad.sum())} are not (the "
            f"first, feature {i}, is {out[i]!r}). To leave features out, set the data to NaN "
            "there (masked features are dropped) or select a region."
        )
    return out


def _variable_weights(spec, ds, v: VariableLayout, layout: Layout) -> np.ndarray:
    import xarray as xr

    if isinstance(spec, str):
        if spec != "coslat":
            raise ValueError(f"weights={spec!r} is not understood; use 'coslat', an array or a dict.")
        lat = _find_latitude(ds, v)
        w = np.sqrt(np.clip(np.cos(np.deg2rad(lat.astype(np.float64))), 0.0, 1.0))
        spec = w
    if isinstance(spec, xr.DataArray):
        extra = [d for d in spec.dims if d not in v.dims]
        if extra:
            raise ValueError(
                f"weights have dims {list(spec.dims)}, but {_label(v.name)} has feature dims "
                f"{list(v.dims)}: {extra} are not feature dims, so they do not broadcast."
            )
        for d in spec.dims:
            if spec.sizes[d] != dict(zip(v.dims, v.shape))[d]:
                raise ValueError(
                    f"weights have size {spec.sizes[d]} along {d!r} but {_label(v.name)} has "
                    f"{dict(zip(v.dims, v.shape))[d]}; they do not broadcast."
                )
        template = xr.DataArray(np.ones(v.shape), dims=v.dims)
        return (template * spec.transpose(*[d for d in v.dims if d in spec.dims])).transpose(*v.dims).values
    array = np.asarray(spec, dtype=np.float64)
    try:
        return np.broadcast_to(array, v.shape).astype(np.float64)
    except ValueError:
        raise ValueError(
            f"weights of shape {array.shape} do not broadcast over the feature dims "
            f"{list(v.dims)} of shape {v.shape} of {_label(v.name)} (NumPy aligns trailing axes). "
            "Pass a DataArray with named dims, or an array of shape "
            f"{v.shape}."
        ) from None


def _find_latitude(ds, v: VariableLayout) -> np.ndarray:
    import xarray as xr

    candidates = []
    for name, coord in ds.coords.items():
        named = str(name).lower() in LATITUDE_NAMES
        standard = coord.attrs.get("standard_name") == "latitude" or coord.attrs.get("units") in (
            "degrees_north",
            "degree_north",
            "degrees_N",
        )
        if (named or standard) and set(coord.dims) <= set(v.dims) and coord.dims:
            candidates.append((not standard, name, coord))
    if not candidates:
        raise ValueError(
            f"weights='coslat' needs a latitude coordinate over the feature dims of "
            f"{_label(v.name)} (looked for names {list(LATITUDE_NAMES)} or "
            f"standard_name='latitude'); coords present: {list(ds.coords)}. Pass weights as an "
            "array instead."
        )
    _, _, coord = sorted(candidates, key=lambda c: c[:2])[0]
    template = xr.DataArray(np.ones(v.shape), dims=v.dims)
    return (template * coord.variable).transpose(*v.dims).values


# ---------------------------------------------------------------------------------------- fit


@dataclass
class LabeledState:
    """What the labeled layer keeps on a fitted estimator (``pca._labeled``)."""

    layout: Layout | None  # None for a plain matrix fitted with weights/standardize
    keep: np.ndarray  # (n_features_total,) bool: features analysed (False = all-NaN, restored as NaN)
    factor: np.ndarray  # (n_kept,) f = w / s: the solver saw Z = X[:, keep] * f


def fit(pca, X, sample_dims=None):
    """Fit ``pca`` on labeled ``X``; return the (lazy) matrix Z the solver saw and its kind."""
    sample_dims = _normalize_sample_dims(sample_dims)
    ds, is_dataarray, name = _as_dataset(X)
    layout = Layout.from_dataset(ds, sample_dims, is_dataarray, name)
    matrix, kind = layout.to_matrix(ds)
    weights = resolve_weights(pca.weights, ds, layout)
    Z = fit_matrix(pca, matrix, weights)
    pca._labeled.layout = layout
    return Z, kind


def fit_matrix(pca, matrix, weights: np.ndarray):
    """Mask, weight and solve a (n, D) dask matrix; set ``pca``'s fitted attributes.

    Returns the lazy matrix ``Z = matrix[:, keep] · f`` the solver analysed.
    """
    from .solvers import covariance, gram

    n_samples, n_total = matrix.shape
    module, name, reason = pca._choose_solver(matrix, pca._request(matrix))
    missing_ok = name in MISSING_VALUE_SOLVERS
    info = {}
    if name == "covariance":
        # One pass: moments of the raw columns, finite counts alongside (all-NaN → zeros).
        (moments,) = _compute(covariance.moments_graph(matrix))
        keep = _mask_from_counts(moments.finite_counts(), n_samples, missing_ok=False)
        scatter = moments.symmetric_scatter()[np.ix_(keep, keep)]
        factor = weights[keep] / _scale(np.diag(scatter) / max(n_samples - 1, 1), pca.standardize)
        z_moments = Moments(n_samples, moments.mean[keep] * factor, scatter * np.outer(factor, factor), NonFinite())
        request = _request(pca, n_samples, int(keep.sum()))
        result = covariance.result_from_moments(z_moments, request)
        extra = 0
    elif name == "gram" and not pca.standardize:
        # Pass 1 on the weighted columns (all-NaN columns zero-filled add exactly 0 to the Gram);
        # pass 2 reads the kept columns only.
        Zfull = matrix * weights.astype(matrix.dtype)
        (part,) = _compute(gram.gram_graph(Zfull))
        keep = _mask_from_counts(part.column_finite_counts(n_samples), n_samples, missing_ok=False)
        factor = weights[keep]
        request = _request(pca, n_samples, int(keep.sum()))
        result = gram.result_from_part(Zfull, part, request, random_state=pca.random_state, columns=keep)
        extra = 0
    else:
        # Other solvers do not report per-feature finite counts: one cheap extra read.
        (count, _, variance) = _compute(column_stats_graph(matrix))[0]
        keep = _mask_from_counts(count, n_samples, missing_ok=missing_ok)
        factor = weights[keep] / _scale(variance[keep], pca.standardize)
        request = _request(pca, n_samples, int(keep.sum()))
        Z = matrix[:, keep] * factor.astype(matrix.dtype)
        options = {option: getattr(pca, option) for option in getattr(module, "OPTIONS", ())}
        result = module.solve(Z, request, random_state=pca.random_state, **options)
        extra = 1
        info["mask_pass"] = (
            f"one extra read (per-feature finite count{', mean and variance' if pca.standardize else ''}) "
            f"before the {name!r} solver, which does not report per-feature finite counts"
        )
    pca._set_fitted(result, name, reason, int(keep.sum()))
    pca.n_passes_ = result.n_passes + extra
    pca.solver_info_.update(info)
    pca.solver_info_["n_masked_features"] = int((~keep).sum())
    pca._labeled = LabeledState(None, keep, factor)
    return matrix[:, keep] * factor.astype(matrix.dtype) if not keep.all() else matrix * factor.astype(matrix.dtype)


def _compute(*graphs):
    import dask

    return dask.compute(*graphs)


def _request(pca, n_samples, n_kept) -> ComponentRequest:
    request = ComponentRequest(pca.n_components, n_samples, n_kept)
    request.validate()
    return request


def _scale(variance: np.ndarray, standardize: bool) -> np.ndarray:
    """Per-feature divisor s: the standard deviation when standardizing (1 where it is 0), else 1."""
    if not standardize:
        return np.ones_like(variance)
    std = np.sqrt(np.clip(variance, 0.0, None))
    return np.where(std > 0, std, 1.0)


def _mask_from_counts(finite_count: np.ndarray, n_samples: int, *, missing_ok: bool) -> np.ndarray:
    """Kept features (finite somewhere); raise for partially missing ones or none kept."""
    finite_count = np.asarray(finite_count)
    keep = finite_count > 0
    if not keep.any():
        raise ValueError(
            f"all {finite_count.size} features are NaN (or ±inf) for every sample: nothing is left "
            "to analyse. Check the variable, the region selected, or the fill value decoding "
            "(xarray's mask_and_scale)."
        )
    partial = keep & (finite_count < n_samples)
    if partial.any() and not missing_ok:
        i = int(np.argmax(partial))
        raise ValueError(
            f"{int(partial.sum())} feature(s) are missing (NaN/±inf) for some samples but not all "
            f"({int(np.sum(n_samples - finite_count[partial]))} missing entries; the first is "
            f"feature {i}, finite in {int(finite_count[i])} of {n_samples} samples). Features "
            "missing everywhere are dropped automatically; partially missing ones need filling, "
            "or the missing-value solver: PCA(solver='ppca')."
        )
    return keep


# Per-feature count / mean / M2 over finite entries (the extra read of non-covariance solvers).


def _chunk_column_stats(block, row_offset=0):
    x = np.asarray(block, dtype=np.float64)
    finite = np.isfinite(x)
    count = finite.sum(axis=0, dtype=np.int64)
    x = np.where(finite, x, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(count > 0, x.sum(axis=0) / np.maximum(count, 1), 0.0)
    m2 = np.sum(np.where(finite, (x - mean) ** 2, 0.0), axis=0)
    return count, mean, m2


def _combine_column_stats(parts):
    count, mean, m2 = parts[0]
    for c, m, s in parts[1:]:
        total = count + c
        safe = np.maximum(total, 1)
        delta = m - mean
        mean = mean + delta * (c / safe)
        m2 = m2 + s + delta**2 * (count * c / safe)
        count = total
    return count, mean, m2


def _finalize_column_stats(parts):
    count, mean, m2 = _combine_column_stats(parts)
    return count, mean, m2 / np.maximum(count - 1, 1)


def column_stats_graph(matrix):
    """Delayed ``(finite_count, mean, variance)`` per column over finite entries (one pass)."""
    import dask

    merged = tree_reduce(map_row_blocks(matrix, _chunk_column_stats, "column-stats-chunk"), _combine_column_stats, "column-stats-merge")
    return dask.delayed(_finalize_column_stats, pure=True)([merged])


# ---------------------------------------------------------------------------------------- transform


def to_solver_matrix(pca, X):
    """``(Z, kind, ds)``: the labeled ``X`` as the matrix the solver saw (checked against the fit)."""
    state = pca._labeled
    ds, _, _ = _as_dataset(X)
    matrix, kind = state.layout.to_matrix(ds, check=True)
    Z = (matrix[:, state.keep] if not state.keep.all() else matrix) * state.factor.astype(matrix.dtype)
    return Z, kind, ds


def _scaling_factors(pca, scaling: str | None) -> tuple[str, np.ndarray]:
    """(scaling, per-mode factor turning projections p into the requested scores)."""
    if scaling is None:
        scaling = "unit" if pca.whiten else "none"
    if scaling not in SCALINGS:
        raise ValueError(f"scaling={scaling!r} is not one of {SCALINGS}.")
    root = np.sqrt(pca.explained_variance_)
    if scaling == "none":
        return scaling, np.ones_like(root)
    if scaling == "unit":
        with np.errstate(divide="ignore"):
            return scaling, np.where(root > 0, 1.0 / root, 0.0)
    return scaling, root


def transform(pca, X, *, scaling=None, _Z=None, _kind=None):
    """Labeled scores of ``X``: dims ``(*sample_dims, "mode")``, lazy for lazy input."""
    import xarray as xr

    if _Z is None:
        Z, kind, ds = to_solver_matrix(pca, X)
    else:
        (ds, _, _), Z, kind = _as_dataset(X), _Z, _kind
    layout = pca._labeled.layout
    scaling, factors = _scaling_factors(pca, scaling)
    # The estimator's projection divides by √λ when whiten=True: undo that first.
    base = np.sqrt(pca.explained_variance_) if pca.whiten else np.ones(pca.n_components_)
    scores = pca._project(Z, "dask") * (base * factors).astype(Z.dtype)
    sample_shape = tuple(ds.sizes[d] for d in layout.sample_dims)
    scores = scores.reshape(*sample_shape, pca.n_components_)
    if kind == "numpy":
        scores = scores.compute()
    coords = layout.sample_coords(ds)
    coords[MODE] = np.arange(1, pca.n_components_ + 1)
    return xr.DataArray(
        scores,
        dims=(*layout.sample_dims, MODE),
        coords=coords,
        name="scores",
        attrs={"long_name": "principal component scores (PCs)", "scaling": scaling},
    )


def inverse_transform(pca, scores, *, modes=None, scaling=None):
    """Field reconstructed from labeled scores (optionally from chosen modes, numbered from 1).

    ``X̂ = (Σ_{m in modes} p_m · e_m + mean_) / f`` in the data's units, NaN at masked features,
    with the original dims and coords. ``scaling`` defaults to ``scores.attrs["scaling"]``.
    """
    import dask.array as da
    import xarray as xr

    state = pca._labeled
    layout = state.layout
    if not isinstance(scores, xr.DataArray) or MODE not in scores.dims:
        raise TypeError(
            f"inverse_transform of a labeled model needs the DataArray of scores with a {MODE!r} "
            "dimension, as transform returns."
        )
    if MODE not in scores.coords:
        scores = scores.assign_coords({MODE: np.arange(1, scores.sizes[MODE] + 1)})
    if modes is not None:
        modes = [int(m) for m in np.atleast_1d(modes)]
        available = [int(m) for m in scores[MODE].values]
        unknown = [m for m in modes if m not in available]
        if unknown:
            raise ValueError(f"modes {unknown} are not in the scores (modes there: {available}; numbered from 1).")
        scores = scores.sel({MODE: modes})
    index = scores[MODE].values.astype(int) - 1
    if index.min() < 0 or index.max() >= pca.n_components_:
        raise ValueError(f"modes must lie in 1..{pca.n_components_}; got {list(index + 1)}.")
    scaling, factors = _scaling_factors(pca, scaling or scores.attrs.get("scaling"))
    with np.errstate(divide="ignore"):
        unscale = np.where(factors[index] != 0, 1.0 / factors[index], 0.0)
    leading_dims = tuple(d for d in scores.dims if d != MODE)
    leading_shape = tuple(scores.sizes[d] for d in leading_dims)
    data = scores.transpose(*leading_dims, MODE).data
    lazy = isinstance(data, da.Array)
    m = int(np.prod(leading_shape, dtype=np.int64))
    matrix = (data if lazy else da.from_array(np.asarray(data))).reshape(m, len(index))
    basis = pca.components_[index] * unscale[:, None]
    n_total = state.keep.size
    out_dtype = np.result_type(matrix.dtype, np.float32)
    rows = matrix.rechunk({1: -1}).map_blocks(
        _reconstruct_full,
        basis,
        pca.mean_,
        state.factor,
        state.keep,
        dtype=out_dtype,
        chunks=(matrix.chunks[0], (n_total,)),
    )
    if not lazy:
        rows = rows.compute()
    coords = {k: c.variable for k, c in scores.coords.items() if k != MODE and set(c.dims) <= set(leading_dims)}
    return layout.unstack_features(rows, leading_dims=leading_dims, leading_shape=leading_shape, leading_coords=coords)


def _reconstruct_full(block, basis, mean, factor, keep):
    z = np.asarray(block, dtype=np.float64) @ basis + mean
    out = np.full((block.shape[0], keep.size), np.nan)
    out[:, keep] = z / factor
    return out.astype(np.result_type(block.dtype, np.float32), copy=False)


# ---------------------------------------------------------------------------------------- results


def feature_arrays(pca, matrix_rows: np.ndarray) -> np.ndarray:
    """Put rows over kept features (…, n_kept) back on all features, NaN where masked."""
    keep = pca._labeled.keep
    out = np.full((*matrix_rows.shape[:-1], keep.size), np.nan)
    out[..., keep] = matrix_rows
    return out


def north_errors(pca) -> np.ndarray:
    """North et al. (1982) typical errors of the eigenvalues: ``δλ = λ·√(2/n)``."""
    return pca.explained_variance_ * math.sqrt(2.0 / pca.n_samples_)


def to_xarray(pca):
    """Labeled results of a fitted model (see :meth:`daskpca.PCA.to_xarray`)."""
    import xarray as xr

    from . import __version__

    k = pca.n_components_
    modes = np.arange(1, k + 1)
    mode_vars = {
        "explained_variance": (pca.explained_variance_, "eigenvalues λ of the (weighted) covariance, ddof=1"),
        "explained_variance_ratio": (pca.explained_variance_ratio_, "λ / total variance"),
        "variance_fraction_percent": (100.0 * pca.explained_variance_ratio_, "100 · λ / total variance"),
        "singular_values": (pca.singular_values_, "√(λ·(n−1))"),
        "north_error": (north_errors(pca), "North et al. (1982) typical error λ·√(2/n)"),
        "north_error_percent": (
            100.0 * north_errors(pca) / pca.total_variance_ if pca.total_variance_ > 0 else np.zeros(k),
            "North et al. error as percent of total variance",
        ),
    }
    ds = xr.Dataset(coords={MODE: (MODE, modes, {"long_name": "mode (EOF number, from 1)"})})
    for name, (values, doc) in mode_vars.items():
        ds[name] = xr.DataArray(values, dims=(MODE,), attrs={"long_name": doc})
    state = getattr(pca, "_labeled", None)
    if state is not None and state.layout is not None:
        layout = state.layout
        components = feature_arrays(pca, pca.components_)
        mean = feature_arrays(pca, pca.mean_ / state.factor)
        scale = feature_arrays(pca, state.factor)
        for kind, rows, leading, doc in (
            ("components", components, ((MODE,), (k,)), "EOFs: orthonormal eigenvectors in the weighted space (not un-weighted)"),
            ("mean", mean[None], ((), ()), "mean of the data, in data units"),
            ("feature_scale", scale[None], ((), ()), "f = weight / std (if standardize): the solver saw X·f"),
        ):
            labeled = layout.unstack_features(
                rows.reshape(-1, rows.shape[-1]), leading_dims=leading[0], leading_shape=leading[1], leading_coords={}
            )
            for var_name, array in _iter_variables(labeled, layout):
                key = kind if layout.is_dataarray else f"{kind}_{var_name}"
                ds[key] = array.assign_attrs(long_name=doc, variable=str(var_name))
        ds.attrs["sample_dims"] = json.dumps([str(d) for d in layout.sample_dims])
    ds.attrs.update(
        {
            "daskpca_version": __version__,
            "parameters": json.dumps(_jsonable_params(pca)),
            "solver": pca.solver_,
            "solver_reason": pca.solver_reason_,
            "n_passes": int(pca.n_passes_),
            "n_samples": int(pca.n_samples_),
            "n_features_in": int(pca.n_features_in_),
            "total_variance": float(pca.total_variance_),
            "noise_variance": float(pca.noise_variance_),
            "distortion": float(pca.distortion_),
            "mode_numbering": "modes are numbered from 1 (EOF convention)",
        }
    )
    return ds


def _iter_variables(labeled, layout):
    if layout.is_dataarray:
        yield layout.name, labeled
    else:
        for v in layout.variables:
            yield v.name, labeled[v.name]


def _jsonable_params(pca) -> dict:
    out = {}
    for name, value in pca.get_params().items():
        try:
            json.dumps(value)
            out[name] = value
        except TypeError:
            out[name] = None if value is None else f"<not JSON-able: {type(value).__name__}>"
    return out


# ---------------------------------------------------------------------------------------- maps


def component_maps(pca, X, *, kind="correlation", modes=None):
    """Covariance or correlation between each PC and the input field, lazily (one pass).

    With unit-variance PCs ``u_m = p_m / √λ_m`` of ``X`` (the data the model was fitted on),
    for every feature j, in the data's units (un-weighted):

    - ``kind="covariance"``: ``C_mj = Σ_t (x_tj − x̄_j)·u_tm / (n − 1)`` (eofs'
      ``eofsAsCovariance(pcscaling=1)``);
    - ``kind="correlation"``: ``R_mj = C_mj / σ_j`` with ``σ_j² = Σ_t (x_tj − x̄_j)² / (n − 1)``
      (eofs' ``eofsAsCorrelation``), since ``u`` has unit variance.

    ``x̄`` is the fitted mean, so the maps are exact for the fitting data. Each row block
    produces its scores and its partial sums in the same task: computing the result reads ``X``
    once. NaN at masked features. Returns a lazy DataArray/Dataset (``mode`` × feature dims)
    for lazy input, else computed.
    """
    import dask
    import dask.array as da

    if kind not in ("correlation", "covariance"):
        raise ValueError(f"kind={kind!r}: use 'correlation' or 'covariance'.")
    state = pca._labeled
    Z, input_kind, ds = to_solver_matrix(pca, X)
    index = np.arange(pca.n_components_) if modes is None else np.asarray(modes, dtype=int) - 1
    if index.min() < 0 or index.max() >= pca.n_components_:
        raise ValueError(f"modes must lie in 1..{pca.n_components_}.")
    root = np.sqrt(pca.explained_variance_[index])
    basis = pca.components_[index].T / np.where(root > 0, root, 1.0)
    parts = map_row_blocks(Z, _chunk_maps, "component-maps-chunk", pca.mean_, basis, state.factor)
    total = tree_reduce(parts, _sum_maps, "component-maps-merge")
    n = Z.shape[0]
    result = dask.delayed(_finish_maps, pure=True)(total, n, kind, state.keep)
    array = da.from_delayed(result, shape=(len(index), state.keep.size), dtype=np.float64)
    if input_kind == "numpy":
        array = array.compute()
    coords = {MODE: (MODE, index + 1)}
    out = state.layout.unstack_features(array, leading_dims=(MODE,), leading_shape=(len(index),), leading_coords=coords)
    return out.assign_attrs(long_name=f"{kind} between each PC and the field", kind=kind)


def _chunk_maps(block, row_offset, mean, basis, factor):
    z = np.asarray(block, dtype=np.float64) - mean  # weighted anomalies z̃ = x̃·f
    u = z @ basis  # unit-variance PCs of this block
    anomalies = z / factor  # x̃ in data units
    return anomalies.T @ u, np.sum(anomalies**2, axis=0)


def _sum_maps(parts):
    cross = sum(p[0] for p in parts)
    squares = sum(p[1] for p in parts)
    return cross, squares


def _finish_maps(total, n, kind, keep):
    cross, squares = total
    covariance = cross.T / max(n - 1, 1)  # (modes, n_kept)
    if kind == "correlation":
        sigma = np.sqrt(squares / max(n - 1, 1))
        covariance = covariance / np.where(sigma > 0, sigma, np.nan)
    out = np.full((covariance.shape[0], keep.size), np.nan)
    out[:, keep] = covariance
    return out


# ---------------------------------------------------------------------------------------- dispatch
# The estimator's fit / transform / inverse_transform forward here for labeled input, for
# weighted / standardized plain matrices, and for the EOF options (scaling=, modes=).


def fit_any(pca, X, sample_dims):
    """Fit labeled ``X``, or a plain matrix with weights / standardize. Returns ``(Z, kind)``."""
    if is_labeled(X):
        return fit(pca, X, sample_dims)
    if sample_dims is not None:
        raise TypeError(
            f"sample_dims={sample_dims!r} applies to xarray input only; a plain matrix already has "
            "samples as rows."
        )
    matrix, kind = as_dask_matrix(X)
    weights = _matrix_weights(pca.weights, matrix.shape[1])
    return fit_matrix(pca, matrix, weights), kind


def _matrix_weights(weights, n_features: int) -> np.ndarray:
    if weights is None:
        return np.ones(n_features)
    if isinstance(weights, (str, dict)) or is_labeled(weights):
        raise TypeError(
            f"weights={weights!r:.60} needs labeled input (an xarray object with coords); for a "
            f"plain matrix pass an array of shape ({n_features},)."
        )
    array = np.asarray(weights, dtype=np.float64)
    try:
        out = np.broadcast_to(array, (n_features,)).astype(np.float64)
    except ValueError:
        raise ValueError(
            f"weights of shape {array.shape} do not broadcast over the {n_features} features."
        ) from None
    if not np.all(np.isfinite(out) & (out > 0)):
        raise ValueError("weights must be finite and > 0 for every feature.")
    return out


def _check_kind(pca, X):
    layout = pca._labeled.layout if pca._labeled is not None else None
    if layout is not None and not is_labeled(X):
        raise TypeError(
            f"this PCA was fitted on labeled data (sample_dims {list(layout.sample_dims)}); pass an "
            f"xarray object, not {type(X).__name__}."
        )
    if layout is None and is_labeled(X):
        raise TypeError("this PCA was fitted on a plain matrix; pass a matrix (e.g. X.data), not an xarray object.")


def transform_any(pca, X, *, scaling=None, _fitted=None):
    """Scores for labeled or weighted models (and the ``scaling`` option for plain ones)."""
    if pca._labeled is None:  # a plain model asked for a scaling
        from ._validation import check_n_features

        array, kind = as_dask_matrix(X)
        check_n_features(array, pca.n_features_in_)
        _, factors = _scaling_factors(pca, scaling)
        base = np.sqrt(pca.explained_variance_) if pca.whiten else np.ones(pca.n_components_)
        return _scale_columns(pca._project(array, "dask"), base * factors, kind)
    _check_kind(pca, X)
    if pca._labeled.layout is not None:
        if _fitted is not None:
            return transform(pca, X, scaling=scaling, _Z=_fitted[0], _kind=_fitted[1])
        return transform(pca, X, scaling=scaling)
    if _fitted is not None:
        Z, kind = _fitted
    else:
        matrix, kind = as_dask_matrix(X)
        state = pca._labeled
        if matrix.shape[1] != state.keep.size:
            raise ValueError(f"X has {matrix.shape[1]} features, but this PCA was fitted on {state.keep.size}.")
        Z = (matrix[:, state.keep] if not state.keep.all() else matrix) * state.factor.astype(matrix.dtype)
    _, factors = _scaling_factors(pca, scaling)
    base = np.sqrt(pca.explained_variance_) if pca.whiten else np.ones(pca.n_components_)
    return _scale_columns(pca._project(Z, "dask"), base * factors, kind)


def _scale_columns(scores, factors, kind):
    out = scores * factors.astype(scores.dtype)
    return out.compute() if kind == "numpy" else out


def inverse_transform_any(pca, scores, *, modes=None, scaling=None):
    """Reconstruction for labeled / weighted models, or with chosen ``modes`` (from 1)."""

    state = pca._labeled
    if state is not None and state.layout is not None:
        return inverse_transform(pca, scores, modes=modes, scaling=scaling)
    if is_labeled(scores):
        raise TypeError("this PCA was fitted on a plain matrix; pass the scores matrix, not an xarray object.")
    matrix, kind = as_dask_matrix(scores, name="scores")
    index = np.arange(pca.n_components_) if modes is None else np.asarray(modes, dtype=int) - 1
    if matrix.shape[1] == pca.n_components_ and modes is not None:
        matrix = matrix[:, index]
    if matrix.shape[1] != len(index) or index.min() < 0 or index.max() >= pca.n_components_:
        raise ValueError(
            f"scores have {matrix.shape[1]} columns; expected {pca.n_components_} (all modes) or one "
            f"per selected mode (modes are numbered 1..{pca.n_components_})."
        )
    if scaling is None and pca.whiten:
        scaling = "unit"
    _, factors = _scaling_factors(pca, scaling)
    with np.errstate(divide="ignore"):
        unscale = np.where(factors[index] != 0, 1.0 / factors[index], 0.0)
    keep = state.keep if state is not None else np.ones(pca.n_features_in_, dtype=bool)
    factor = state.factor if state is not None else np.ones(pca.n_features_in_)
    out = matrix.rechunk({1: -1}).map_blocks(
        _reconstruct_full,
        pca.components_[index] * unscale[:, None],
        pca.mean_,
        factor,
        keep,
        dtype=np.result_type(matrix.dtype, np.float32),
        chunks=(matrix.chunks[0], (keep.size,)),
    )
    return out.compute() if kind == "numpy" else out
