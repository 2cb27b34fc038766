"""Extended EOFs: the time-delay embedding, built lazily, then the one fit road as usual.

Extended EOF analysis (Weare & Nasstrom 1982; multichannel SSA, Broomhead & King 1986) is PCA
of the *embedded* field, whose sample t holds the field at t, t + τ, …, t + (L − 1)τ::

    X̂[t, l, features] = X[t + l·τ, features],   t = 0 … n − 1 − (L − 1)τ,   l = 0 … L − 1

:func:`lag_embed` builds X̂ as a lazy view — slices of the same dask array concatenated along a
new ``lag`` dimension — so nothing is materialised and no data is read: a pass over X̂ reads every
stored chunk of X once (the slices share dask's chunk-reading tasks; tested with a chunk-counting
store), and a row block of X̂ needs the row blocks of X that its window covers (a halo of
(L − 1)τ rows, which dask's slicing adds for the blocks at chunk boundaries). Then fit any PCA on
it: ``lag`` is an ordinary feature dimension, so components come back with a ``lag`` dimension,
masks, weights and every solver work unchanged, and the passes are the solver's own.

Conventions (those of xeofs's ``ExtendedEOF``): the sample coordinate of a window is that of its
first time step; ``lag`` counts samples, ``l·τ``; the last (L − 1)τ samples start no window.

References
----------
B. C. Weare & J. S. Nasstrom, "Examples of extended empirical orthogonal function analyses",
Mon. Wea. Rev. 110 (1982) 481–485, doi:10.1175/1520-0493(1982)110<0481:EOEEOF>2.0.CO;2.
"""

from __future__ import annotations

from numbers import Integral

from ..exceptions import InvalidParameterError
from ..labeled import check_time_axis, is_labeled

#: Name of the embedding dimension of labeled output.
LAG = "lag"


def lag_embed(X, n_lags: int, lag_step: int = 1, *, sample_dim=None):
    """Time-delay embedding of ``X`` for extended EOFs (lazy; reads nothing).

    Parameters
    ----------
    X : array of shape (n_samples, n_features), or xarray DataArray / Dataset
        A NumPy or dask matrix (rows are samples), or labeled data with ``sample_dim``.
    n_lags : int
        Embedding dimension L ≥ 1: delayed copies per window (1 returns the data unchanged).
    lag_step : int, default=1
        Delay τ ≥ 1 between copies, in samples.
    sample_dim : str, optional
        Labeled input only (and required there): the dimension to embed along (e.g. ``"time"``);
        its coordinate must increase strictly (a shuffled, repeated or reversed one is refused).

    Returns
    -------
    embedded
        Matrix input: a dask array of shape (n − (L−1)τ, L·n_features), lag-major columns
        (column ``l·n_features + j`` is feature j at lag l). Labeled input: the same type with a
        ``lag`` dimension (coordinate ``l·τ``) after ``sample_dim``, which is cut to the window
        starts. Memory: a view; a task of a pass holds L row blocks of ``X``.
    """
    n_samples = _check(X, n_lags, lag_step, sample_dim)
    span = (n_lags - 1) * lag_step
    n_windows = n_samples - span
    starts = [lag * lag_step for lag in range(n_lags)]
    if is_labeled(X):
        import numpy as np
        import xarray as xr

        window_coord = X[sample_dim].isel({sample_dim: slice(0, n_windows)}) if sample_dim in X.coords else None
        pieces = []
        for start in starts:
            piece = X.isel({sample_dim: slice(start, start + n_windows)}).drop_vars(
                [name for name, coord in X.coords.items() if sample_dim in coord.dims], errors="ignore"
            )
            pieces.append(piece)
        embedded = xr.concat(pieces, dim=LAG, coords="minimal", compat="override")
        embedded = embedded.assign_coords({LAG: (LAG, np.asarray(starts), {"long_name": "delay", "units": "samples"})})
        if window_coord is not None:
            embedded = embedded.assign_coords({sample_dim: window_coord.variable})
        order = [sample_dim, LAG, *(d for d in embedded.dims if d not in (sample_dim, LAG))]
        return embedded.transpose(*order)
    import dask.array as da

    from .._validation import as_dask_matrix

    matrix, _ = as_dask_matrix(X)
    return da.concatenate([matrix[start : start + n_windows] for start in starts], axis=1)


def _check(X, n_lags, lag_step, sample_dim) -> int:
    for name, value in (("n_lags", n_lags), ("lag_step", lag_step)):
        if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
            raise InvalidParameterError(f"{name}={value!r}: expected an int >= 1.")
    if is_labeled(X):
        if sample_dim is None or sample_dim not in X.dims:
            raise InvalidParameterError(
                f"sample_dim={sample_dim!r}: labeled input needs the dimension to embed along, one of "
                f"{list(X.dims)} (e.g. lag_embed(X, n_lags, sample_dim='time'))."
            )
        if LAG in X.dims:
            raise InvalidParameterError(
                f"X already has a {LAG!r} dimension (is it embedded already?), and lag_embed adds one by that name. "
                f"Embed the original data, or rename the dimension first: X.rename({{{LAG!r}: 'delay'}})."
            )
        check_time_axis(X, [sample_dim], "time-delay lags")
        n_samples = int(X.sizes[sample_dim])
    else:
        if sample_dim is not None:
            raise InvalidParameterError("sample_dim applies to xarray input only; a matrix embeds along its rows.")
        shape = getattr(X, "shape", None)
        if shape is None or len(shape) != 2:
            raise InvalidParameterError(f"X must be a 2-D matrix (n_samples, n_features); got shape {shape}.")
        n_samples = int(shape[0])
    span = (n_lags - 1) * lag_step
    if span >= n_samples:
        raise InvalidParameterError(
            f"n_lags={n_lags} with lag_step={lag_step} spans {span + 1} samples, but X has {n_samples}: "
            f"no window fits. Use fewer lags or a smaller step ((n_lags − 1)·lag_step < {n_samples})."
        )
    return n_samples
