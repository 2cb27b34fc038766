"""Exact PCA from the covariance matrix, in one pass.

Each row block yields (count, mean, centered scatter) in float64 (:mod:`daskpca.passes._moments`); the
partial results are merged exactly in a tree (Chan–Golub–LeVeque); the d×d eigenproblem of the
covariance is solved locally.

Passes: 1. Flops: n·d² (``syrk``) + d³ locally. Memory per task: one float64 copy of a row
block plus d² float64 (the merge tasks hold ``SPLIT_EVERY + 1`` d×d matrices).
Pick when d is moderate (up to ~10–20k: the d×d matrix must fit in a task) and n is anything.

Device blocks (CuPy): the leaves and merges run on the device (merges 8 at a time, all at once:
:func:`~daskpca.passes._moments.combine_moments_pooled`), and the root task solves the d×d
eigenproblem there too when that is cheaper than solving it on the host
(:func:`~daskpca.passes._device.solve_on_device`, from d ≈ 420 with the rates measured on an H200): the feature stage, the
covariance and cuSOLVER's eigh on the device, then the k leading pairs and the moments (the
model's sufficient statistics, kept for ``update``) move to the host.

Accuracy: the eigenvalues carry absolute error ~ ε·λ_max, so components whose variance is below
~1e-8·λ_max (float64) lose relative accuracy — the price of squaring the condition number;
``solver="tsqr"`` keeps them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

import dask
import numpy as np

from ..passes import (MERGE_SPLIT_EVERY, Moments, Passes, SizedByArrays, backend_of, chunk_moments, combine_moments,
                      combine_moments_pooled, device_fan_in, device_merge_fan_in, eigh_descending,
                      eigh_descending_on_device, map_row_blocks, on_device, solve_on_device, to_host, tree_reduce)
from .._validation import NonFinite, raise_if_nonfinite
from ._base import FLOAT64, ComponentRequest, Cost, DeviceCost, PlanInput, SolverDeclaration, SolverResult
from ._bounds import exact_bound

N_PASSES = 1
#: Exact to round-off: meets any ``tol`` (so a ``tol`` given with this solver is not ignored).
EXACT = True
#: Eigenvalues from X̃ᵀX̃ / X̃X̃ᵀ: the estimator's ill-conditioning check applies.
SQUARES_THE_DATA = True


def moments_graph(X, finish=None):
    """Delayed :class:`~daskpca.passes._moments.Moments` of all rows of ``X`` (one pass when computed).

    Pairwise merges (``MERGE_SPLIT_EVERY``): a merge task holds 3·d² float64, a leaf its block,
    one float64 copy and d² — so d ≈ 10⁴ fits a 6 GiB task (8-way merges needed 9·d²). Device
    blocks: wider merges, all parts at once (:func:`~daskpca.passes._geometry.device_merge_fan_in`).
    ``finish``: run in the root task on the merged moments (see :func:`solved_at_root`).
    """
    backend = on_device(X)
    leaves = map_row_blocks(X, chunk_moments, "covariance-chunk")
    d = X.shape[1]
    if backend.on_host:
        fan_in, combine = MERGE_SPLIT_EVERY, combine_moments
    else:
        fan_in, combine = device_merge_fan_in(backend, MERGE_SPLIT_EVERY, d * d * 8, copies=1), combine_moments_pooled
    return tree_reduce(leaves, combine, "covariance-merge", split_every=fan_in, finish=finish)


@dataclass(frozen=True)
class _SolvedAtRoot(SizedByArrays):
    """The eigenproblem solved where the moments were merged (a device): what the root hands back."""

    moments: Moments  # of the analysed matrix (the feature stage applied), for ``info``
    values: np.ndarray  # (d,) every eigenvalue when the request needs the spectrum, else (k + 1,)
    vectors: np.ndarray  # (d, k)
    total_variance: float
    stage: object = None  # the resolved FeatureStage, with ``features``


def solved_at_root(moments: Moments, request: ComponentRequest, features=None):
    """The root's last step: solve the d×d eigenproblem on the moments' device when that is cheaper
    (:func:`~daskpca.passes._device.solve_on_device`), else hand the moments back as they are.

    On the device: the feature stage resolved from the moments' finite counts and variances (d
    values moved to the host), the analysed covariance formed and solved there (cuSOLVER), and k
    resolved from its eigenvalues; the root then moves the k leading pairs and the moments
    (sufficient statistics the model keeps) to the host. Non-finite input without a feature stage
    is handed back too: the client raises for it.
    """
    backend = backend_of(moments.scatter)
    if not solve_on_device(backend, moments.scatter.shape[0]) or (features is None and moments.nonfinite.count):
        return moments
    xp = backend.xp
    n_samples = moments.count
    ddof_count = max(n_samples - 1, 1)
    scatter = moments.symmetric_scatter()
    stage = None
    if features is not None:
        finite = to_host(moments.finite_counts())
        stage = features.resolve(finite, n_samples, to_host(xp.diagonal(scatter)) / ddof_count)
        request = stage.narrow(request)
        kept = backend.asarray(np.flatnonzero(stage.keep))
        factor = backend.asarray(stage.factor)
        scatter = xp.take(xp.take(scatter, kept, axis=0), kept, axis=1) * xp.outer(factor, factor)
        moments = Moments(n_samples, xp.take(moments.mean, kept) * factor, scatter, NonFinite())
    covariance = scatter / ddof_count
    n_features = covariance.shape[0]
    values, vectors = eigh_descending_on_device(covariance)
    if request.needs_spectrum:
        spectrum = to_host(values[: min(n_samples, n_features)])
        k = request.resolve(spectrum)
        values = values if len(spectrum) == n_features else values[:k]
    else:
        k = request.fixed()
        values = values[: k + 1]  # and λ_{k+1}, as on the host
    return _SolvedAtRoot(moments, values, vectors[:, :k], float(xp.trace(covariance)), stage)


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
        ``info["moments"]`` holds the merged :class:`~daskpca.passes._moments.Moments` (the sufficient
        statistics an exact incremental update needs) of the analysed matrix.
    """
    finish = partial(solved_at_root, request=request, features=features)
    with Passes("covariance", N_PASSES).read():
        (moments,) = dask.compute(moments_graph(X, finish=finish))
    if isinstance(moments, _SolvedAtRoot):  # solved on the device, in the root task
        result = result_from_moments(moments.moments, request, solved=moments)
        return result if moments.stage is None else replace(result, features=moments.stage)
    if features is None:
        return result_from_moments(moments, request)
    n_samples = moments.count
    scatter = moments.symmetric_scatter()
    stage = features.resolve(moments.finite_counts(), n_samples, np.diag(scatter) / max(n_samples - 1, 1))
    kept = np.ix_(stage.keep, stage.keep)
    analysed = Moments(n_samples, moments.mean[stage.keep] * stage.factor,
                       scatter[kept] * np.outer(stage.factor, stage.factor), NonFinite())
    return replace(result_from_moments(analysed, stage.narrow(request)), features=stage)


def result_from_moments(moments: Moments, request: ComponentRequest, solved: _SolvedAtRoot | None = None) -> SolverResult:
    """Solve the d×d eigenproblem of merged moments locally (no data is read), or take the
    eigenpairs the root task ``solved`` on the device (:func:`solved_at_root`)."""
    if moments.nonfinite.count:  # the pass found NaN/±inf: the library's standard error
        raise_if_nonfinite(moments.nonfinite)
    n_samples = moments.count
    n_features = moments.mean.shape[0]
    if solved is not None:
        values, vectors, total_variance = solved.values, solved.vectors, solved.total_variance
        k = vectors.shape[1]
    else:
        covariance = moments.symmetric_scatter() / max(n_samples - 1, 1)
        total_variance = float(np.trace(covariance))
        if request.needs_spectrum:
            values, vectors = eigh_descending(covariance)
            k = request.resolve(values[: min(n_samples, n_features)])
        else:
            # Only the k leading pairs (and λ_{k+1}, the gap the estimator's input-precision term
            # needs): LAPACK's index-range driver is cheaper when k ≪ d.
            k = request.most_components
            values, vectors = eigh_descending(covariance, k + 1)
    # Exact: its bound is round-off over the gap (1 where λ_k = λ_{k+1} to round-off).
    info = {"moments": moments, "error_bound": exact_bound(values, k, n_samples, n_features)}
    if len(values) > k:
        info["next_variance"] = float(values[k])
    return SolverResult(
        components=vectors[:, :k].T.copy(),
        explained_variance=values[:k].copy(),
        mean=moments.mean,
        n_samples=n_samples,
        total_variance=total_variance,
        n_passes=N_PASSES,
        spectrum=values[: min(n_samples, n_features)] if len(values) == n_features else None,
        info=info,
    )


# ---------------------------------------------------------------------------------- declaration


def cost(shape: PlanInput) -> Cost:
    """One pass. A leaf holds its block, one float64 copy and its d×d scatter; a merge its
    MERGE_SPLIT_EVERY inputs and one output (the sum is accumulated in place). The eigh
    tridiagonalises the d×d matrix whatever k: 4/3·d³. Each task returns a d×d scatter."""
    n, d = shape.n, shape.d
    task = max(shape.block_in + shape.block64 + d * d * FLOAT64, (MERGE_SPLIT_EVERY + 1) * d * d * FLOAT64)
    return Cost(N_PASSES, n * d * d + 4 / 3 * d**3, task, result_size=d * d)


def device_cost(shape: PlanInput, flops: float, task: int, device) -> DeviceCost:
    """On a device the d×d eigh is solved where the cost rule puts it (``device.local_seconds``),
    not in the host's flops; the device's merges are wider (``device_fan_in``)."""
    d = shape.d
    flops, local = flops - 4 / 3 * d**3, device.local_seconds(d, "eigh")
    fan_in = device_fan_in(device.task_bytes, MERGE_SPLIT_EVERY, d * d * FLOAT64, copies=1)
    return DeviceCost(flops, local, max(task, (fan_in + 1) * d * d * FLOAT64 + fan_in * d * FLOAT64))


DECLARATION = SolverDeclaration(
    "covariance", solve, cost=cost, summary="one pass building the d×d covariance",
    reason=lambda n, d: f"n_samples ({n}) ≥ n_features ({d}): one pass building the {d}×{d} covariance",
    device_rate="flops", on_device=device_cost, exact=EXACT, exact_for="tall", squares_the_data=SQUARES_THE_DATA,
    fuses_features=fuses_features,
)
