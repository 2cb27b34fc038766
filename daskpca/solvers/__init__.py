"""Solvers: one module per method, each exposing ``solve(X, request, *, random_state, **options)``.

``SOLVERS`` maps the public names accepted by ``PCA(solver=...)`` to the modules. A module may
declare ``OPTIONS``: the names of estimator parameters it takes as keyword arguments (e.g.
``("n_oversamples", "n_power_iter")``); the estimator passes exactly those.

The pass kernels every solver builds on live here too: :mod:`._graph` (one task per row block or
column strip, tree reductions, operands shared as one key), :mod:`._sketch` (the one-read sketch
X̃ᵀ·orth(X̃Ω) the randomized and block Krylov solvers share), :mod:`._moments` (exact mergeable
count / mean / scatter), :mod:`._linalg` (the small local eigen- and singular-value solves, BLAS
threads) and :mod:`._base` (the solver contract). :mod:`.cross_covariance` holds the passes of two
fields read together (exact cross-moments, the cross operator and its block Krylov SVD, correlation
patterns) for the coupled estimators (:mod:`daskpca.coupled`); it is no PCA solver, so it is not in
``SOLVERS``. Nor is :mod:`._resampling`, the moving-block bootstrap's client-side statistics
(block lengths, replicate weights, intervals, and what a resampling must have to vary and fit),
which :mod:`daskpca.significance` builds on.

**Imports.** Solvers import only their kernels, :mod:`daskpca._validation` (NaN/±inf checks) and
:mod:`daskpca.exceptions`; they save resumable state through the checkpoint they receive
(:func:`._base.open_checkpoint`), never by importing the store. The fit stages,
the labeled layer and the estimators import them; a solver never imports an estimator, the
labeled layer or the CLI.
"""

from . import als, covariance, gram, krylov, ppca, randomized, tsqr

SOLVERS = {
    "covariance": covariance,
    "gram": gram,
    "tsqr": tsqr,
    "randomized": randomized,
    "krylov": krylov,
    "als": als,
    "ppca": ppca,
}

__all__ = ["SOLVERS"]
