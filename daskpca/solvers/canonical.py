r"""CCA's paths, declared: the exact joint covariance, or each field's PCA first.

Canonical correlation analysis (:class:`daskpca.CCA`) solves its canonical problem on the PC
scores of two fields X (n × dx) and Y (n × dy); what a path hands back is what that problem needs:
each field's leading EOFs Eₓ (dx × kx), Eᵧ (dy × ky), its mean, its feature stage, and the
covariances of the PC scores (Cₚₓ, Cₚᵧ, Cₚₓᵧ). Two paths, each a
:class:`~daskpca.solvers._base.SolverDeclaration` (:data:`CCA_PATHS`):

- ``"exact"`` (:data:`EXACT`, :func:`solve_exact`) — 1 pass: the exact moments (Chan merge) of
  the joined matrix [X | Y] (:func:`daskpca.solvers.covariance.moments_graph`), which give both
  fields' covariances, their cross-covariance and the per-feature statistics of both feature
  stages at once; the eigenproblems on the client. Needs the (dx + dy)² covariance in a task.
- ``"pca"`` (:data:`PCA_FIRST`, :func:`solve_pca`) — taken instead where that does not fit: each
  field's PCA (its own planner and passes, each reading its own field; the estimator hands the
  solve its per-field PCA as ``fit_pca``: the solvers import no estimator), then 1 pass reading
  both for the covariances of the PC scores.

A solve takes the estimator's feature stage as ``resolve = (resolve_x, resolve_y)``, each
``(finite_count, n, variance) -> FeatureStage``, and the PCs kept as ``modes = (kx, ky)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._base import Cost, PlanInput, SolverDeclaration
from ..passes import eigh_descending
from .covariance import moments_graph
from .cross_covariance import joint_rows


@dataclass(frozen=True)
class ReducedFields:
    """Both fields reduced to their leading PCs: what the canonical problem is solved on.

    ``eofs`` ((dx_kept × kx), (dy_kept × ky)), ``means`` ((dx_kept,), (dy_kept,)), ``covariances``
    (Cₚₓ (kx × kx), Cₚᵧ (ky × ky), Cₚₓᵧ (kx × ky)) of the PC scores, ``stages`` each field's
    :class:`~daskpca._features.FeatureStage`, ``n_samples`` and ``n_passes`` (reads of the fields).
    """

    eofs: tuple
    means: tuple
    covariances: tuple
    stages: tuple
    n_samples: int
    n_passes: int


def solve_exact(X, Y, *, resolve, modes, fit_pca=None) -> ReducedFields:
    """The exact path: one pass (the joined matrix's moments), both feature stages from it, each
    field's leading EOFs and the cross-covariance of their scores on the client."""
    import dask

    (moments,) = dask.compute(moments_graph(joint_rows(X, Y)))
    n, dx = moments.count, X.shape[1]
    scatter = moments.symmetric_scatter() / max(n - 1, 1)
    parts = (slice(0, dx), slice(dx, None))
    stages = tuple(field_stage(moments.finite_counts()[p], n, np.diag(scatter)[p]) for field_stage, p in zip(resolve, parts))
    index = [np.flatnonzero(stage.keep) + p.start for stage, p in zip(stages, parts)]
    blocks = [[scatter[np.ix_(i, j)] * np.outer(si.factor, sj.factor) for j, sj in zip(index, stages)]
              for i, si in zip(index, stages)]
    eofs, variances = zip(*(_leading(blocks[i][i], m) for i, m in enumerate(modes)))
    cross = eofs[0].T @ blocks[0][1] @ eofs[1]
    means = tuple(moments.mean[i] * s.factor for i, s in zip(index, stages))
    return ReducedFields(eofs, means, (np.diag(variances[0]), np.diag(variances[1]), cross), stages, n, 1)


def solve_pca(X, Y, *, resolve=None, modes, fit_pca) -> ReducedFields:
    """The PCA-first path: ``fit_pca(field, matrix, m)`` (0 for X, 1 for Y) fits each field's
    leading ``m`` PCs through its feature stage (a fitted :class:`daskpca.PCA`), then one pass
    reading both for the covariances of the PC scores."""
    import dask

    models = [fit_pca(i, matrix, m) for i, (matrix, m) in enumerate(zip((X, Y), modes))]
    scores = [model.transform(matrix) for model, matrix in zip(models, (X, Y))]
    (moments,) = dask.compute(moments_graph(joint_rows(*scores)))
    kx, n = modes[0], moments.count
    cov = moments.symmetric_scatter() / max(n - 1, 1)
    covariances = (cov[:kx, :kx], cov[kx:, kx:], cov[:kx, kx:])
    passes = sum(model.n_passes_ for model in models) + 1
    return ReducedFields(tuple(m.components_.T for m in models), tuple(m.mean_ for m in models), covariances,
                         tuple(m.feature_stage_ for m in models), n, passes)


def _leading(covariance: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``m`` leading eigenvectors (d × m) and eigenvalues of a covariance."""
    values, vectors = eigh_descending(covariance, m)
    return vectors[:, :m], values[:m]


def exact_cost(shape: PlanInput) -> Cost:
    """One pass of the joined matrix's moments, d = dx + dy: a leaf holds its block in float64
    (and its centred copy: 16 bytes a value) and the d×d scatter, a merge three d×d matrices.
    Flops: the scatter's n·d² and each field's eigenproblem (4/3·dx³, 4/3·dy³). Each task
    returns its d×d scatter and per-feature statistics."""
    rows, d = shape.row_block, shape.d
    dx, dy = shape.fields
    task = max(rows * d * 16 + d * d * 8, 3 * d * d * 8)
    return Cost(1, shape.n * d * d + 4 / 3 * (dx**3 + dy**3), task, result_size=d * d + 3 * d)


def pca_cost(shape: PlanInput) -> Cost:
    """Each field's PCA (priced by its own plan when it runs), then the pass over both fields'
    PC scores: a task holds its block of both fields in float64 and its centred copy (16 bytes a
    value); flops 2·n·(dx·kx + dy·ky) for the scores and n·(kx + ky)² for their moments."""
    rows, d = shape.row_block, shape.d
    (dx, dy), (kx, ky) = shape.fields, shape.options.get("n_pca_modes", (shape.k, shape.k))
    return Cost("each field's PCA passes (its own field), then 1 reading both", 2 * shape.n * (dx * kx + dy * ky)
                + shape.n * (kx + ky) ** 2, rows * d * 16, result_size=(kx + ky) ** 2 + 3 * (kx + ky))


#: The exact joint covariance: one pass.
EXACT = SolverDeclaration(
    "exact", solve_exact, cost=exact_cost, summary="one pass building the (dx + dy)² joint covariance",
    reason=lambda n, dx, dy: f"the ({dx + dy})² joint covariance fits a task",
    too_large=lambda n, dx, dy, task: f"the ({dx + dy})² joint covariance does not fit a task",
    exact=True, exact_for="any",
)
#: Each field's PCA first, then the canonical problem on the PC scores.
PCA_FIRST = SolverDeclaration(
    "pca", solve_pca, cost=pca_cost, summary="each field's PCA, then one pass over both fields' PC scores",
    fallback="instead",
)
#: CCA's paths by name (``CCA(solver=...)``), in the order plans list them.
CCA_PATHS = {declaration.name: declaration for declaration in (EXACT, PCA_FIRST)}
