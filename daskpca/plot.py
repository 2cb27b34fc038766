"""Pictures of a fitted PCA: scree, cumulative variance, distortion, component maps, reconstructions
(and an MCA's coupled patterns side by side).

Shared by the notebooks in ``notebooks/`` (and meant for ``daskpca report``). matplotlib is an
optional dependency (``pip install "daskpca[plot]"``); it is imported only when a function here
draws something, so ``import daskpca.plot`` works without it.

Every function takes either a fitted :class:`daskpca.PCA` or plain arrays, draws into the ``ax``
(or ``fig``) it is given — or a new one — and returns that Axes (single-panel plots) or Figure
(grids of images). Axes are labelled, panels titled, lines carry legend entries, and the plotted
numbers are exactly the model's: e.g. the scree line's y-data is ``explained_variance_``.

Conventions: components are numbered from 1 on every axis (component 1 is ``components_[0]``);
the distortion after keeping k components is J(k) = Σ_{i>k} λ_i = total variance − Σ_{i≤k} λ_i
(Bishop, *PRML*, eq. 12.18), with J(0) = total variance.
"""

from __future__ import annotations

import math

import numpy as np

from .exceptions import InputError

__all__ = [
    "scree",
    "cumulative_variance",
    "distortion",
    "component_maps",
    "image_grid",
    "reconstructions",
    "reconstruct",
    "components_for_variance",
    "distortion_curve",
    "map_geometry",
    "coupled_patterns",
]


# ------------------------------------------------------------------ plumbing


def _pyplot():
    """``matplotlib.pyplot``, or an ImportError that says how to get it."""
    try:
        import matplotlib.pyplot as plt
    except ImportError as error:  # pragma: no cover - exercised by a monkeypatched import
        raise ImportError(
            "daskpca.plot needs matplotlib, which is not installed. Install the plot extra: "
            'pip install "daskpca[plot]" (or pip install matplotlib).'
        ) from error
    return plt


def _new_axes(ax, figsize=(6.0, 4.0)):
    if ax is not None:
        return ax
    plt = _pyplot()
    _, ax = plt.subplots(figsize=figsize, layout="constrained")
    return ax


def _integer_ticks(ax):
    """Component numbers and k are integers: no ticks at 1.25 or 1.5."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _spectrum(model_or_variance, total_variance=None):
    """(eigenvalues, ratios, total) from a fitted PCA or an array of eigenvalues.

    For an array, ``total_variance`` defaults to its sum (i.e. the array is the full spectrum).
    """
    if hasattr(model_or_variance, "explained_variance_"):
        model = model_or_variance
        variance = np.asarray(model.explained_variance_, dtype=np.float64)
        total = float(model.total_variance_ if total_variance is None else total_variance)
    else:
        variance = np.asarray(model_or_variance, dtype=np.float64).ravel()
        if variance.size == 0:
            raise InputError("need at least one eigenvalue to plot; got an empty array.")
        total = float(variance.sum() if total_variance is None else total_variance)
    ratio = variance / total if total > 0 else np.zeros_like(variance)
    return variance, ratio, total


def _components(model_or_components):
    if hasattr(model_or_components, "components_"):
        return np.asarray(model_or_components.components_, dtype=np.float64)
    components = np.asarray(model_or_components, dtype=np.float64)
    if components.ndim == 1:
        components = components[None, :]
    if components.ndim != 2:
        raise InputError(
            f"components must be a 2-D array (n_components, n_features); got shape {components.shape}."
        )
    return components


# ------------------------------------------------------------------ numbers the plots show


def components_for_variance(model_or_variance, threshold=0.95, *, total_variance=None):
    """Smallest k whose cumulative explained-variance ratio reaches ``threshold``.

    Parameters
    ----------
    model_or_variance : fitted PCA or array of eigenvalues
    threshold : float in (0, 1]
    total_variance : float, optional
        For an array of eigenvalues that is not the whole spectrum.

    Returns
    -------
    int or None
        ``None`` when the kept components do not reach the threshold (fit more components).
    """
    if not 0 < threshold <= 1:
        raise InputError(f"threshold must be in (0, 1]; got {threshold!r}.")
    _, ratio, _ = _spectrum(model_or_variance, total_variance)
    cumulative = np.cumsum(ratio)
    # A tolerance so that a threshold of exactly 1.0 is reached despite round-off.
    reached = np.nonzero(cumulative >= threshold - 1e-12)[0]
    return int(reached[0]) + 1 if reached.size else None


def distortion_curve(model_or_variance, *, total_variance=None):
    """J(k) = Σ_{i>k} λ_i for k = 0, 1, ..., K (K = number of eigenvalues known).

    Returns
    -------
    k : ndarray of int, shape (K + 1,)
    J : ndarray of float, shape (K + 1,)
        J[0] is the total variance; clipped at 0 against round-off.
    """
    variance, _, total = _spectrum(model_or_variance, total_variance)
    J = np.maximum(total - np.concatenate([[0.0], np.cumsum(variance)]), 0.0)
    return np.arange(variance.size + 1), J


def reconstruct(model, X, n_components=None):
    """Reconstruct rows of ``X`` from their first ``n_components`` principal components.

    ``x̂ = x̄ + Σ_{i≤M} ((z − z̄)·u_i) u_i`` through the model's own road: ``transform`` then
    ``inverse_transform`` with modes 1..M, so weights, standardisation, masked features (NaN in
    the result) and a labeled layout are those of every other projection — it equals
    ``model.inverse_transform(model.transform(X))`` when M is the model's k.

    Parameters
    ----------
    model : fitted PCA
    X : array-like of shape (n_rows, n_features), or the labeled data of a labeled model
        The few rows a picture shows (NumPy in, NumPy out).
    n_components : int, optional
        M ≤ ``model.n_components_``; default all of them.
    """
    model.check_fitted()
    k_all = model.n_components_
    k = k_all if n_components is None else n_components
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= k <= k_all:
        raise InputError(
            f"n_components={n_components!r} must be an int between 0 and the model's "
            f"n_components_ = {k_all}."
        )
    if not hasattr(X, "dims"):
        X = np.atleast_2d(np.asarray(X, dtype=np.float64))
    scores = model.transform(X)
    if k == 0:  # no mode: the mean, through the same road
        return model.inverse_transform(scores * 0)
    return model.inverse_transform(scores[..., :k] if not hasattr(scores, "dims") else scores, modes=list(range(1, k + 1)))


# ------------------------------------------------------------------ spectra


def scree(model_or_variance, *, ax=None, ratio=False, errors=None, log=False, n=None,
          total_variance=None, label=None, title="Scree plot"):
    """Eigenvalue spectrum: explained variance (or its ratio) against component number.

    Parameters
    ----------
    model_or_variance : fitted PCA or array of eigenvalues
    ax : matplotlib Axes, optional
    ratio : bool, default False
        Plot ``explained_variance_ratio_`` instead of the eigenvalues.
    errors : array-like of shape (k,) or (2, k), optional
        One error bar per component (e.g. North et al.'s rule-of-thumb errors λ·√(2/n)), in the
        same units as the plotted values; or two rows, below and above each value (e.g. a
        bootstrap interval: ``BootstrapResult.errors()``).
    log : bool, default False
        Logarithmic y axis (spectra often span decades).
    n : int, optional
        Plot only the first ``n`` components.
    label, title : str

    Returns
    -------
    matplotlib Axes
        Its first line's y-data is the plotted spectrum.
    """
    variance, ratios, _ = _spectrum(model_or_variance, total_variance)
    values = ratios if ratio else variance
    if n is not None:
        values = values[:n]
    ax = _new_axes(ax)
    k = np.arange(1, values.size + 1)
    default_label = "explained variance ratio" if ratio else "eigenvalue λ (explained variance)"
    ax.plot(k, values, "o-", ms=3, label=label or default_label)
    if errors is not None:
        errors = np.asarray(errors, dtype=np.float64)[..., : values.size]
        ax.errorbar(k, values, yerr=errors, fmt="none", ecolor="0.4", capsize=2,
                    label="interval" if errors.ndim == 2 else "error (±1σ)")
    if log:
        ax.set_yscale("log")
    _integer_ticks(ax)
    ax.set_xlabel("component number")
    ax.set_ylabel("explained variance ratio" if ratio else "explained variance (eigenvalue)")
    ax.set_title(title)
    ax.legend()
    return ax


def cumulative_variance(model_or_variance, *, threshold=0.95, ax=None, n=None,
                        total_variance=None, title="Cumulative explained variance"):
    """Cumulative explained-variance ratio against the number of components kept.

    Draws the threshold as a horizontal line and marks the smallest k that reaches it.

    Returns
    -------
    matplotlib Axes
        Line 0: the cumulative ratio (x = 1..K); line 1: the threshold.
    """
    _, ratios, _ = _spectrum(model_or_variance, total_variance)
    cumulative = np.cumsum(ratios)
    if n is not None:
        cumulative = cumulative[:n]
    ax = _new_axes(ax)
    k = np.arange(1, cumulative.size + 1)
    ax.plot(k, cumulative, "o-", ms=3, label="cumulative explained variance ratio")
    if threshold is not None:
        ax.axhline(threshold, color="tab:red", ls="--", lw=1, label=f"threshold {threshold:.0%}")
        k_min = components_for_variance(model_or_variance, threshold, total_variance=total_variance)
        if k_min is not None and k_min <= cumulative.size:
            ax.axvline(k_min, color="tab:green", ls=":", lw=1, label=f"k = {k_min} reaches {threshold:.0%}")
    ax.set_ylim(0, 1.02)
    _integer_ticks(ax)
    ax.set_xlabel("number of components k")
    ax.set_ylabel("cumulative explained variance ratio")
    ax.set_title(title)
    ax.legend(loc="lower right")
    return ax


def distortion(model_or_variance, *, ax=None, log=False, total_variance=None, n=None,
               title="Distortion J(k): variance left out by k components"):
    """Distortion J(k) = Σ_{i>k} λ_i against k (Bishop's figure 12.4, right).

    J(k) is the mean squared reconstruction error per sample (times n/(n−1)) when k components
    are kept. With a fitted PCA, J(k) is exact for every k up to ``n_components_`` because the
    total variance is known: fit with ``n_components=None`` to see the whole curve.

    Returns
    -------
    matplotlib Axes
        Line 0: (k, J(k)) for k = 0..K.
    """
    k, J = distortion_curve(model_or_variance, total_variance=total_variance)
    if n is not None:
        k, J = k[: n + 1], J[: n + 1]
    ax = _new_axes(ax)
    if log:
        # Zero distortion (every component kept) has no place on a log axis.
        keep = J > 0
        k, J = k[keep], J[keep]
        ax.set_yscale("log")
    ax.plot(k, J, "o-", ms=3, label="J(k) = Σ$_{i>k}$ λ$_i$")
    _integer_ticks(ax)
    ax.set_xlabel("number of components kept k")
    ax.set_ylabel("distortion J (variance not explained)")
    ax.set_title(title)
    ax.legend()
    return ax


# ------------------------------------------------------------------ images and maps


def image_grid(images, shape, *, titles=None, ncols=None, fig=None, cmap="gray", symmetric=False,
               suptitle=None, colorbar=False, extent=None, xlabel=None, ylabel=None,
               panel_size=1.6, origin="upper", vmin=None, vmax=None):
    """Show a stack of flattened images (n_images, prod(shape)) as a grid of panels.

    NaN entries (e.g. land points of an ocean field) are left blank.

    Parameters
    ----------
    images : array-like of shape (n_images, prod(shape))
    shape : tuple of 2 ints
    titles : list of str, optional
    symmetric : bool
        Colour limits ±max|value| per panel (for signed patterns such as components).
    extent, origin, xlabel, ylabel
        Passed to ``imshow`` and the axes (e.g. longitude/latitude for maps).
    vmin, vmax : float, optional
        Shared colour limits (default: per panel).

    Returns
    -------
    matplotlib Figure
        ``fig.axes[i].images[0].get_array()`` holds image i.
    """
    plt = _pyplot()
    images = np.asarray(images, dtype=np.float64)
    if images.ndim == 1:
        images = images[None, :]
    shape = tuple(int(s) for s in shape)
    if len(shape) != 2 or images.shape[1] != math.prod(shape):
        raise InputError(
            f"shape {shape} does not match images with {images.shape[1]} values each; pass the "
            "2-D shape each flattened row came from, e.g. (8, 8) for the digits."
        )
    count = images.shape[0]
    ncols = min(count, ncols or min(count, 5))
    nrows = math.ceil(count / ncols)
    if fig is None:
        aspect = shape[0] / shape[1]
        fig = plt.figure(figsize=(panel_size * ncols * (1.25 if colorbar else 1.0),
                                  panel_size * nrows * aspect + (0.5 if suptitle else 0.2)),
                         layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for i, ax in enumerate(axes.flat):
        if i >= count:
            ax.set_axis_off()
            continue
        image = images[i].reshape(shape)
        low, high = vmin, vmax
        if symmetric and low is None and high is None:
            bound = np.nanmax(np.abs(image)) if np.isfinite(image).any() else 1.0
            low, high = -bound, bound
        cm = plt.get_cmap(cmap).with_extremes(bad="0.85")
        shown = ax.imshow(np.ma.masked_invalid(image), cmap=cm, vmin=low, vmax=high,
                          extent=extent, origin=origin, aspect="auto" if extent else "equal",
                          interpolation="nearest")
        if titles is not None:
            ax.set_title(titles[i], fontsize=9)
        if xlabel or ylabel:
            ax.set_xlabel(xlabel or "")
            ax.set_ylabel(ylabel or "")
        else:
            ax.set_xticks([])
            ax.set_yticks([])
        if colorbar:
            fig.colorbar(shown, ax=ax, shrink=0.8)
    if suptitle:
        fig.suptitle(suptitle)
    return fig


def component_maps(model_or_components, shape=None, *, n=4, ax=None, fig=None, mean=False,
                   cmap="RdBu_r", ncols=None, extent=None, xlabel=None, ylabel=None,
                   origin="upper", colorbar=True, title=None, feature_label="feature index", ratios=None):
    """The leading principal axes drawn in the data's own layout.

    * ``shape=None`` or 1-D: each component is a line against feature index (one Axes, legend).
    * ``shape=(h, w)``: each component is an image (8×8 digits, a lat×lon map from a flattened
      field; NaN entries — e.g. a restored land mask — are left blank).
    * a model fitted on a labeled field with two feature dims (and ``shape=None``): maps over
      the field's coordinates, axes labelled with the coordinate names and units
      (:func:`map_geometry`).

    Parameters
    ----------
    model_or_components : fitted PCA or array of shape (k, n_features)
    shape : tuple, optional
    n : int, default 4
        How many leading components.
    mean : bool, default False
        Also show ``mean_`` first (needs a fitted PCA), as in Bishop's figure 12.3.
    extent, origin, xlabel, ylabel
        Map geometry for images (e.g. ``extent=(lon0, lon1, lat0, lat1)``, ``origin="lower"``).
    ratios : array-like, optional
        Explained-variance ratios written in the panel titles (default: the model's).

    Returns
    -------
    matplotlib Axes (lines) or Figure (images)
    """
    if shape is None and getattr(model_or_components, "layout_", None) is not None:
        results = model_or_components.to_xarray()  # a Dataset's variables have one map each: lines
        geometry = map_geometry(results["components"].isel(mode=slice(0, n))) if "components" in results else None
        if geometry is not None:
            images, shape, geometry_kw = geometry
            return component_maps(images, shape, n=n, ax=ax, fig=fig, cmap=cmap, ncols=ncols,
                                  colorbar=colorbar, title=title, **{**geometry_kw, **_given(extent=extent, xlabel=xlabel, ylabel=ylabel)},
                                  ratios=model_or_components.explained_variance_ratio_)
    components = _components(model_or_components)[:n]
    if ratios is None:
        ratios = getattr(model_or_components, "explained_variance_ratio_", None)
    names = [f"component {i + 1}" + (f" ({ratios[i]:.1%})" if ratios is not None else "")
             for i in range(components.shape[0])]
    if shape is None or len(tuple(np.atleast_1d(shape))) == 1:
        ax = _new_axes(ax, figsize=(7.0, 3.5))
        index = np.arange(components.shape[1])
        if mean:
            ax.plot(index, model_or_components.mean_, color="k", lw=1.5, label="mean")
        for name, component in zip(names, components):
            ax.plot(index, component, lw=1, label=name)
        ax.set_xlabel(feature_label)
        ax.set_ylabel("loading")
        ax.set_title(title or "Principal axes (components)")
        ax.legend(fontsize=8)
        return ax
    images, titles = list(components), names
    if mean:
        images = [np.asarray(model_or_components.mean_, dtype=np.float64)] + images
        titles = ["mean"] + titles
    plt = _pyplot()
    if fig is None:
        count = len(images)
        columns = min(count, ncols or 5)
        rows = math.ceil(count / columns)
        h, w = shape
        size = 3.4 if extent else 1.8
        aspect = (extent[3] - extent[2]) / (extent[1] - extent[0]) if extent else h / w
        fig = plt.figure(figsize=(size * columns * 1.3, size * rows * max(aspect, 0.35) + 0.6),
                         layout="constrained")
    grid = image_grid(np.vstack([np.ravel(i) for i in images]), shape, titles=titles, ncols=ncols,
                      fig=fig, cmap=cmap, symmetric=True, colorbar=colorbar, extent=extent,
                      xlabel=xlabel, ylabel=ylabel, origin=origin,
                      suptitle=title or "Principal axes as images (colour: loading, red +, blue −)")
    if mean:
        # The mean is not a signed pattern: grey scale with its own limits.
        first = grid.axes[0].images[0]
        first.set_cmap("gray")
        first.set_clim(np.nanmin(images[0]), np.nanmax(images[0]))
    return grid


def coupled_patterns(mca, *, n=3, cmap="RdBu_r"):
    """The leading pattern pairs of a fitted :class:`daskpca.MCA` side by side: X's patterns on the
    left, Y's on the right, one per mode, titled with the mode's squared covariance fraction. A
    labeled field with two feature dims is drawn as maps over its coordinates (:func:`map_geometry`),
    anything else as lines against feature index (NaN at masked features). Returns the Figure."""
    plt = _pyplot()
    n = min(n, mca.n_components_)
    fig = plt.figure(figsize=(11.0, 2.4 * n + 0.9), layout="constrained")
    tree = mca.to_xarray()
    fractions = mca.squared_covariance_fraction_
    for sub, name in zip(fig.subfigures(1, 2), ("X", "Y")):
        title = f"{name} patterns (mode: squared covariance fraction)"
        fitted = tree[name].to_dataset()
        geometry = map_geometry(fitted["components"].isel(mode=slice(0, n))) if "components" in fitted else None
        if geometry is not None:
            images, shape, options = geometry
            component_maps(images, shape, n=n, fig=sub, ncols=1, cmap=cmap, ratios=fractions, title=title, **options)
        else:
            stage = mca.feature_stage_x_ if name == "X" else mca.feature_stage_y_
            rows = stage.restore(mca.components_x_ if name == "X" else mca.components_y_)
            component_maps(rows, n=n, ax=sub.add_subplot(), ratios=fractions, title=title)
    return fig


def map_geometry(maps):
    """``(images, shape, options)`` to draw a DataArray ``(mode, y, x)`` on its coordinates.

    ``images`` are the maps flattened (rows flipped so that y increases upwards); ``options``
    holds ``extent`` (coordinate bounds, half a cell beyond the first and last centres),
    ``origin="lower"`` and ``xlabel`` / ``ylabel`` naming each coordinate with its units, e.g.
    ``"lon (degrees_east)"``. Dims without a 1-D numeric coordinate are drawn over their index,
    labelled ``"lat index"``. ``None`` unless the maps have exactly two dims besides ``mode``.
    """
    dims = [d for d in maps.dims if d != "mode"]
    if len(dims) != 2:
        return None
    maps = maps.transpose("mode", *dims)
    values = np.asarray(maps.values, dtype=np.float64)
    bounds, labels = [], []
    for axis, dim in zip((1, 2), dims):
        coord = maps.coords[dim] if dim in maps.coords else None  # (.get() invents a 0..n-1 range)
        if coord is not None and coord.ndim == 1 and coord.dtype.kind in "iuf" and coord.size > 0:
            centres = np.asarray(coord.values, dtype=np.float64)
            if centres.size > 1 and centres[0] > centres[-1]:
                values, centres = np.flip(values, axis=axis), centres[::-1]
            half = (centres[-1] - centres[0]) / (2 * (centres.size - 1)) if centres.size > 1 else 0.5
            bounds.append((centres[0] - half, centres[-1] + half))
            units = coord.attrs.get("units")
            labels.append(f"{coord.attrs.get('long_name', dim)}" + (f" ({units})" if units else ""))
        else:
            bounds.append((-0.5, maps.sizes[dim] - 0.5))
            labels.append(f"{dim} index")
    (y0, y1), (x0, x1) = bounds
    options = {"extent": (x0, x1, y0, y1), "origin": "lower", "xlabel": labels[1], "ylabel": labels[0]}
    return values.reshape(values.shape[0], -1), values.shape[1:], options


def _given(**options) -> dict:
    return {k: v for k, v in options.items() if v is not None}


def reconstructions(model, X, shape, *, n_components=(1, 5, 10, 20, 40), fig=None, cmap="gray",
                    title="Reconstructions from the leading M components", panel_size=1.3,
                    row_labels=None):
    """Grid: one row per sample, the original then its reconstruction with M components each.

    Parameters
    ----------
    model : fitted PCA
        With ``n_components_`` at least ``max(n_components)``.
    X : array-like of shape (n_rows, n_features)
        The few samples to show.
    shape : tuple of 2 ints
    n_components : sequence of int
        The M values, one column each (Bishop's figure 12.5 uses 1, 10, 50, 250).
    row_labels : list of str, optional
        One label per sample, written beside its row (e.g. the class).

    Returns
    -------
    matplotlib Figure
        Panels row by row; panel ``r * (len(n_components) + 1) + c`` shows sample r, column c.
    """
    plt = _pyplot()
    X = np.atleast_2d(np.asarray(X, dtype=np.float64))
    ms = [int(m) for m in n_components]
    columns = [X] + [reconstruct(model, X, m) for m in ms]
    labels = ["original"] + [f"M = {m}" for m in ms]
    n_rows, n_cols = X.shape[0], len(columns)
    stacked = np.vstack([columns[c][r] for r in range(n_rows) for c in range(n_cols)])
    titles = [labels[c] if r == 0 else "" for r in range(n_rows) for c in range(n_cols)]
    if fig is None:
        fig = plt.figure(figsize=(panel_size * n_cols, panel_size * n_rows * shape[0] / shape[1] + 0.6),
                         layout="constrained")
    # One shared grey scale per row would need per-row limits; the data's range is shared instead.
    low, high = float(np.nanmin(X)), float(np.nanmax(X))
    fig = image_grid(stacked, shape, titles=titles, ncols=n_cols, fig=fig, cmap=cmap,
                     suptitle=title, vmin=low, vmax=high)
    if row_labels is not None:
        for r, label in enumerate(row_labels):
            fig.axes[r * n_cols].set_ylabel(str(label))
    return fig
