"""Matrix → labeled results: scores, reconstructed fields, the results Dataset, component maps.

Everything here reads the fitted model through its public attributes (``components_``,
``explained_variance_``, ``feature_stage_``, ``layout_``, ...) and calls no estimator method: the
estimator does the math on matrices and hands the rows here to be labeled.

**Modes are numbered from 1** (the EOF convention): ``mode=1`` is the leading component, row 0 of
``components_``. Scores carry their scaling in ``attrs["scaling"]`` so that
``inverse_transform`` can read it back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from ..passes import like, map_row_blocks, namespace, to_device, tree_reduce
from .._version import __version__
from .layout import MODE, Layout, as_dataset
from ..exceptions import InputError, InputTypeError


# ---------------------------------------------------------------------------------------- scores


def scores_to_xarray(layout: Layout, scores, source, n_components: int, scaling: str):
    """Scores (n_samples, k) — NumPy or dask — as a DataArray ``(*sample_dims, "mode")``."""
    import xarray as xr

    ds, _, _ = as_dataset(source)
    sample_shape = tuple(ds.sizes[d] for d in layout.sample_dims)
    coords = layout.sample_coords(ds)
    coords[MODE] = np.arange(1, n_components + 1)
    return xr.DataArray(
        scores.reshape(*sample_shape, n_components),
        dims=(*layout.sample_dims, MODE),
        coords=coords,
        name="scores",
        attrs={"long_name": "principal component scores (PCs)", "scaling": scaling},
    )


def per_sample_to_xarray(layout: Layout, values, source, name: str, long_name: str):
    """One value per sample (n_samples,) — NumPy or dask — as a DataArray over the sample dims."""
    import xarray as xr

    ds, _, _ = as_dataset(source)
    sample_shape = tuple(ds.sizes[d] for d in layout.sample_dims)
    return xr.DataArray(values.reshape(sample_shape), dims=layout.sample_dims, coords=layout.sample_coords(ds),
                        name=name, attrs={"long_name": long_name})


@dataclass(frozen=True)
class LabeledScores:
    """Scores given as a DataArray, flattened for the estimator's reconstruction."""

    matrix: object  # dask array (m, len(modes))
    modes: np.ndarray  # 0-based component index of each column
    lazy: bool
    scaling: str | None  # from attrs["scaling"]
    leading_dims: tuple
    leading_shape: tuple
    leading_coords: dict


def scores_from_xarray(scores, modes, n_components: int) -> LabeledScores:
    """Check and flatten a DataArray of scores (as ``transform`` returns) for reconstruction."""
    import dask.array as da
    import xarray as xr

    if not isinstance(scores, xr.DataArray) or MODE not in scores.dims:
        raise InputTypeError(
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
            raise InputError(f"modes {unknown} are not in the scores (modes there: {available}; numbered from 1).")
        scores = scores.sel({MODE: modes})
    index = scores[MODE].values.astype(int) - 1
    if index.min() < 0 or index.max() >= n_components:
        raise InputError(f"modes must lie in 1..{n_components}; got {list(index + 1)}.")
    leading_dims = tuple(d for d in scores.dims if d != MODE)
    leading_shape = tuple(scores.sizes[d] for d in leading_dims)
    data = scores.transpose(*leading_dims, MODE).data
    lazy = isinstance(data, da.Array)
    m = int(np.prod(leading_shape, dtype=np.int64))
    matrix = (data if lazy else da.from_array(np.asarray(data))).reshape(m, len(index))
    coords = {k: c.variable for k, c in scores.coords.items() if k != MODE and set(c.dims) <= set(leading_dims)}
    return LabeledScores(matrix, index, lazy, scores.attrs.get("scaling"), leading_dims, leading_shape, coords)


def field_from_rows(layout: Layout, rows, scores: LabeledScores):
    """Reconstructed rows (m, n_input_features) back on the field's dims and coords."""
    return layout.unstack_features(
        rows, leading_dims=scores.leading_dims, leading_shape=scores.leading_shape, leading_coords=scores.leading_coords
    )


# ---------------------------------------------------------------------------------------- results


def results_dataset(pca):
    """Labeled results of a fitted model (see :meth:`daskpca.PCA.to_xarray`)."""
    import xarray as xr

    k = pca.n_components_
    # North et al.'s λ·√(2/n), as PCA.north_errors gives it, from the public fitted state: the
    # caller (PCA.to_xarray) has checked that the model is fitted, so the estimator is not asked again.
    north = pca.explained_variance_ * np.sqrt(2.0 / pca.n_samples_)
    mode_vars = {
        "explained_variance": (pca.explained_variance_, "eigenvalues λ of the (weighted) covariance, ddof=1"),
        "explained_variance_ratio": (pca.explained_variance_ratio_, "λ / total variance"),
        "variance_fraction_percent": (100.0 * pca.explained_variance_ratio_, "100 · λ / total variance"),
        "singular_values": (pca.singular_values_, "√(λ·(n−1))"),
        "north_error": (north, "North et al. (1982) typical error λ·√(2/n)"),
        "north_error_percent": (
            100.0 * north / pca.total_variance_ if pca.total_variance_ > 0 else np.zeros(k),
            "North et al. error as percent of total variance",
        ),
    }
    ds = xr.Dataset(coords={MODE: (MODE, np.arange(1, k + 1), {"long_name": "mode (EOF number, from 1)"})})
    for name, (values, doc) in mode_vars.items():
        ds[name] = xr.DataArray(values, dims=(MODE,), attrs={"long_name": doc})
    layout, stage = pca.layout_, pca.feature_stage_
    if layout is not None:
        for kind, rows, leading, doc in (
            ("components", stage.restore(pca.components_), ((MODE,), (k,)),
             "EOFs: orthonormal eigenvectors in the weighted space (not un-weighted)"),
            ("mean", stage.restore(pca.mean_ / stage.factor)[None], ((), ()), "mean of the data, in data units"),
            ("feature_scale", stage.restore(stage.factor)[None], ((), ()),
             "f = weight / std (if standardize): the solver saw X·f"),
        ):
            labeled = layout.unstack_features(rows, leading_dims=leading[0], leading_shape=leading[1], leading_coords={})
            for var_name, array in _iter_variables(labeled, layout):
                key = kind if layout.is_dataarray else f"{kind}_{var_name}"
                ds[key] = array.assign_attrs(long_name=doc, variable=str(var_name))
        ds.attrs["sample_dims"] = json.dumps([str(d) for d in layout.sample_dims])
    ds.attrs.update(
        {
            "daskpca_version": __version__,
            "parameters": json.dumps(jsonable_params(pca)),
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


def _iter_variables(labeled, layout: Layout):
    if layout.is_dataarray:
        yield layout.name, labeled
    else:
        for v in layout.variables:
            yield v.name, labeled[v.name]


def jsonable_params(estimator) -> dict:
    """``get_params()`` with values JSON cannot hold replaced by a note (arrays, generators)."""
    out = {}
    for name, value in estimator.get_params().items():
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
    for lazy input, else computed. Device blocks (the model's ``device``, or CuPy chunks) are
    reduced on their device; the k×d maps are NumPy.
    """
    import dask
    import dask.array as da

    if kind not in ("correlation", "covariance"):
        raise InputError(f"kind={kind!r}: use 'correlation' or 'covariance'.")
    layout, stage = pca.layout_, pca.feature_stage_
    if layout is None:
        raise InputTypeError("component_maps needs a model fitted on labeled (xarray) data.")
    ds, _, _ = as_dataset(X)
    matrix, input_kind = layout.to_matrix(ds, check=True)
    Z = stage.apply(to_device(matrix, getattr(pca, "device", None)))
    index = np.arange(pca.n_components_) if modes is None else np.asarray(modes, dtype=int) - 1
    if index.min() < 0 or index.max() >= pca.n_components_:
        raise InputError(f"modes must lie in 1..{pca.n_components_}.")
    root = np.sqrt(pca.explained_variance_[index])
    basis = pca.components_[index].T / np.where(root > 0, root, 1.0)
    parts = map_row_blocks(Z, _chunk_maps, "component-maps-chunk", pca.mean_, basis, stage.factor)
    total = tree_reduce(parts, _sum_maps, "component-maps-merge")
    n = Z.shape[0]
    result = dask.delayed(_finish_maps, pure=True)(total, n, kind, stage.keep)
    array = da.from_delayed(result, shape=(len(index), stage.n_input), dtype=np.float64)
    if input_kind == "numpy":
        array = array.compute()
    coords = {MODE: (MODE, index + 1)}
    out = layout.unstack_features(array, leading_dims=(MODE,), leading_shape=(len(index),), leading_coords=coords)
    return out.assign_attrs(long_name=f"{kind} between each PC and the field", kind=kind)


def _chunk_maps(block, row_offset, mean, basis, factor):
    xp = namespace(block)  # a device block's partial sums stay on its device
    z = xp.asarray(block, dtype=xp.float64) - like(mean, block)  # weighted anomalies z̃ = x̃·f
    u = z @ like(basis, block)  # unit-variance PCs of this block
    anomalies = z / like(factor, block)  # x̃ in data units
    return anomalies.T @ u, xp.sum(anomalies**2, axis=0)


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
