"""Exact PCA from the covariance matrix, in one pass.

Each row block yields (count, mean, centered scatter) in float64 (:mod:`daskpca.solvers._moments`); the
partial results are merged exactly in a tree (Chan–Golub–LeVeque); the d×d eigenproblem of the
covariance is solved locally.

Passes: 1. Flops: n·d² (``syrk``) + d³ locally. Memory per task: one float64 copy of a row
block plus d² float64 (the merge tasks hold ``SPLIT_EVERY + 1`` d×d matrices).
Pick when d is moderate (up to ~10–20k: the d×d matrix must fit in a task) and n is anything.

Accuracy: the eigenvalues carry absolute error ~ ε·λ_max, so components whose variance is below
~1e-8·λ_max (float64) lose relative accuracy — the price of squaring the condition number;
``solver="tsqr"`` keeps them.
"""

from __future__ import annotations

from dataclasses import replace

import dask
import numpy as np

from ._graph import map_row_blocks, tree_reduce
from ._linalg import eigh_descending
from ._moments import MERGE_SPLIT_EVERY, Moments, chunk_moments, combine_moments
from .._validation import NonFinite, raise_if_nonfinite
from ._base import ComponentRequest, SolverResult
from ._progress import Passes

N_PASSES = 1
#: Exact to round-off: meets any ``tol`` (so a ``tol`` given with this solver is not ignored).
EXACT = True
#: Eigenvalues from X̃ᵀX̃ / X̃X̃ᵀ: the estimator's ill-conditioning check applies.
SQUARES_THE_DATA = True


def moments_graph(X):
    """Delayed :class:`~daskpca.solvers._moments.Moments` of all rows of ``X`` (one pass when computed).

    Pairwise merges (``MERGE_SPLIT_EVERY``): a merge task holds 3·d² float64, a leaf its block,
    one float64 copy and d² — so d ≈ 10⁴ fits a 6 GiB task (8-way merges needed 9·d²).
    """
    leaves = map_row_blocks(X, chunk_moments, "covariance-chunk")
    return tree_reduce(leaves, combine_moments, "covariance-merge", split_every=MERGE_SPLIT_EVERY)


def fuses_features(spec) -> bool:
    """Every feature stage is free: finite counts and variances come with the moments."""
    return True


def solve(X, request: ComponentRequest, *, random_state=None, features=None) -> SolverResult:
    """Fit PCA from the exact covariance matrix of ``X``.

    Parameters
    ----------
    X : dask.array.Array of shape (n_samples, n_features)
        float32 or float64, any row and column chunking (irregular included).
    request : ComponentRequest
    random_state : ignored
        Accepted so every solver has the same signature; this solver is deterministic.
    features : FeatureSpec, optional
        A feature stage to resolve in the same pass: the moments of the raw columns carry the
        per-feature finite counts (wholly non-finite columns were zero-filled, so restricting the
        scatter to the kept features is exact) and variances.

    Returns
    -------
    SolverResult
        ``info["moments"]`` holds the merged :class:`~daskpca.solvers._moments.Moments` (the sufficient
        statistics an exact incremental update needs) of the analysed matrix.
    """
    with Passes("covariance", N_PASSES).read():
        (moments,) = dask.compute(moments_graph(X))
    if features is None:
        return result_from_moments(moments, request)
    n_samples = moments.count
    scatter = moments.symmetric_scatter()
    stage = features.resolve(moments.finite_counts(), n_samples, np.diag(scatter) / max(n_samples - 1, 1))
    kept = np.ix_(stage.keep, stage.keep)
    analysed = Moments(n_samples, moments.mean[stage.keep] * stage.factor,
                       scatter[kept] * np.outer(stage.factor, stage.factor), NonFinite())
    return replace(result_from_moments(analysed, stage.narrow(request)), features=stage)


def result_from_moments(moments: Moments, request: ComponentRequest) -> SolverResult:
    """Solve the d×d eigenproblem of merged moments locally (no data is read)."""
    raise_if_nonfinite(moments.nonfinite)
    n_samples = moments.count
    covariance = moments.symmetric_scatter() / max(n_samples - 1, 1)
    n_features = covariance.shape[0]
    if request.needs_spectrum:
        values, vectors = eigh_descending(covariance)
        k = request.resolve(values[: min(n_samples, n_features)])
    else:
        # Only the k leading pairs (and λ_{k+1}, the gap the estimator's input-precision term
        # needs): LAPACK's index-range driver is cheaper when k ≪ d.
        k = request.fixed()
        values, vectors = eigh_descending(covariance, k + 1)
    info = {"moments": moments, "error_bound": 0.0}  # exact: no bound to report but round-off
    if len(values) > k:
        info["next_variance"] = float(values[k])
    return SolverResult(
        components=vectors[:, :k].T.copy(),
        explained_variance=values[:k].copy(),
        mean=moments.mean,
        n_samples=n_samples,
        total_variance=float(np.trace(covariance)),
        n_passes=N_PASSES,
        spectrum=values[: min(n_samples, n_features)] if len(values) == n_features else None,
        info=info,
    )
