"""Solvers: one module per method, each exposing ``solve(X, request, *, random_state, **options)``.

``SOLVERS`` maps the public names accepted by ``PCA(solver=...)`` to the modules. A module may
declare ``OPTIONS``: the names of estimator parameters it takes as keyword arguments (e.g.
``("n_oversamples", "n_power_iter")``); the estimator passes exactly those.
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
