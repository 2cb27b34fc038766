r"""Pass kernels of two fields read together: exact cross-moments, the cross operator, patterns.

Two fields X (n × dx) and Y (n × dy) share their rows (samples). Every pass here reads both in
the same row-block tasks: Y's rows are given X's row chunks and the two are concatenated along
the features, so one task sees the rows of both fields and each stored chunk is read once.

**Exact cross-moments** (:func:`cross_moments_graph`, one pass). Each row block yields, in
float64, its count, each field's mean and per-feature sum of squares, its per-feature finite
counts, and its cross-scatter ``Σ (x − x̄_b)(y − ȳ_b)ᵀ`` centred on the block's *own* means. The
partial results are merged exactly by the Chan–Golub–LeVeque update applied to the cross term:
for parts A and B, ``n = n_A + n_B``, ``δx = x̄_B − x̄_A``, ``δy = ȳ_B − ȳ_A``,
``C = C_A + C_B + δx δyᵀ · n_A n_B / n`` — no ``XᵀY/n − x̄ȳᵀ`` cancellation. Memory per task: a
block, its float64 copy and dx·dy float64 (a merge holds three dx×dy matrices: pairwise merges).
Flops: 2·n·dx·dy.

**The cross operator** (:func:`cross_products_graph`, one pass): for given means and blocks
V (dy × ℓ), U (dx × ℓ) it returns ``C·V = X̃ᵀ(Ỹ·V)`` and ``Cᵀ·U = Ỹᵀ(X̃·U)`` together, X̃ and Ỹ
centred on the given means; the block Krylov path of MCA (:func:`krylov_svd`) makes one such
pass per block. A task converts its block to float64 a slab of rows at a time, centred and
scaled in the sketch kernel's way (:func:`daskpca.passes.staged_slabs`). Memory per task: the
block, its kept columns where some are masked, one float64 slab and (dx + dy)·ℓ float64.
Flops: 4·n·(dx + dy)·ℓ.

**Correlation patterns** (:func:`pattern_sums_graph`, one pass): the sums that give the
correlation of every feature of each field with the scores of both fields.

Device blocks (CuPy chunks): every leaf and merge runs in the block's array library
(:mod:`daskpca.passes._device`), the small operands (means, factors, masks, V, U) moved to the
block's device in the task; the merge tree's root hands its dx×dy, d×ℓ or d×2k result to the host.

**MCA's paths, declared** (:data:`MCA_PATHS`: ``"exact"``, :data:`EXACT`; ``"krylov"``,
:data:`KRYLOV`): each a :class:`~daskpca.solvers._base.SolverDeclaration` with its solve
(:func:`solve_exact`, :func:`solve_krylov`: both fields in, a :class:`CrossSolution` out), its
cost model on the two fields read together (``PlanInput.fields = (dx, dy)``) and its
capabilities. :class:`daskpca.MCA` plans through the one planner (:func:`daskpca._plan.make_plan`)
with them: the exact path where its task fits, the Krylov path instead (``fallback="instead"``).
A solve takes the estimator's feature stage as ``resolve = (resolve_x, resolve_y)``, each
``(finite_count, n, variance) -> FeatureStage``, and its choice of k as ``choose_k(n, stage_x,
stage_y) -> int`` (the solvers import no estimator).
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from functools import reduce

import numpy as np
from scipy.linalg import blas, svd

from ._base import Cost, PlanInput, SolverDeclaration
from ..passes import (EARLIER_FIT, MERGE_SPLIT_EVERY, SKETCH_FLOPS_PER_SECOND, Passes, SizedByArrays, backend_of, center_block, format_bytes, like,
                      map_row_blocks, namespace, orthonormal_extension, releases_slab_buffers, staged_slabs, staged_task_bytes,
                      tall_norm2, tree_reduce)
from ._bounds import NEXT_CLUSTER, ROUNDOFF_RESIDUAL, exact_bound, split_wedin, wedin
from .krylov import (FEWEST_PASSES, PREDICTED_BOUND_AT_3, PREDICTED_GAP_RATIO, chebyshev_rate, passes_from_history,
                     predict_by_fall)
from .._validation import NonFinite
from ..exceptions import InputError, InvalidParameterError


def joint_rows(X, Y):
    """``[X | Y]`` lazily, with Y's rows on X's row chunks (each stored chunk still read once)."""
    import dask.array as da

    return da.concatenate([X, Y.rechunk({0: X.chunks[0]})], axis=1)


# ---------------------------------------------------------------------------- exact cross-moments


@dataclass(frozen=True)
class CrossMoments(SizedByArrays):
    """Sufficient statistics of the rows of two fields (float64).

    Attributes
    ----------
    count : int
    mean_x, mean_y : ndarray of shape (dx,), (dy,)
    m2_x, m2_y : ndarray of shape (dx,), (dy,)
        Per-feature ``Σ (x − x̄)²``.
    cross : ndarray of shape (dx, dy)
        ``Σ (x − x̄)(y − ȳ)ᵀ``.
    nonfinite_x, nonfinite_y : NonFinite
    finite_x, finite_y : ndarray of shape (dx,), (dy,), int64
        Per-feature finite entries (non-finite ones were replaced by 0 before the sums).
    """

    count: int
    mean_x: np.ndarray
    mean_y: np.ndarray
    m2_x: np.ndarray
    m2_y: np.ndarray
    cross: np.ndarray
    nonfinite_x: NonFinite
    nonfinite_y: NonFinite
    finite_x: np.ndarray
    finite_y: np.ndarray


def chunk_cross_moments(block: np.ndarray, row_offset: int, n_x: int) -> CrossMoments:
    """:class:`CrossMoments` of one row block of ``[X | Y]`` (X its first ``n_x`` columns), in the
    block's array library."""
    xp = namespace(block)
    x = center_block(block[:, :n_x], row_offset, 0)
    y = center_block(block[:, n_x:], row_offset, 0)
    rows = block.shape[0]

    def finite(part, d):
        return xp.full(d, rows, dtype=xp.int64) if part.finite_count is None else part.finite_count

    return CrossMoments(
        rows, x.mean, y.mean, xp.einsum("ij,ij->j", x.centered, x.centered),
        xp.einsum("ij,ij->j", y.centered, y.centered), x.centered.T @ y.centered,
        x.nonfinite, y.nonfinite, finite(x, n_x), finite(y, block.shape[1] - n_x),
    )


def combine_cross_moments(parts) -> CrossMoments:
    """Merge :class:`CrossMoments` exactly (the Chan update, cross term included).

    The merged cross-scatter is accumulated in one new Fortran-ordered dx×dy array (inputs are
    never modified: a retried task must see them intact); the rank-one correction is BLAS
    ``dger`` in place, no dx×dy temporary (device partials: an outer product added on the device).
    """
    parts = list(parts)
    nonfinite_x = reduce(lambda a, b: a.merge(b), (p.nonfinite_x for p in parts))
    nonfinite_y = reduce(lambda a, b: a.merge(b), (p.nonfinite_y for p in parts))
    finite_x = sum(p.finite_x for p in parts)
    finite_y = sum(p.finite_y for p in parts)
    counted = [p for p in parts if p.count] or parts[:1]
    first = counted[0]
    count, mean_x, mean_y, m2_x, m2_y = first.count, first.mean_x, first.mean_y, first.m2_x, first.m2_y
    backend = backend_of(first.cross)
    cross = backend.float64_copy(first.cross, order="F")
    for part in counted[1:]:
        total = count + part.count
        weight = count * part.count / total
        delta_x, delta_y = part.mean_x - mean_x, part.mean_y - mean_y
        cross += part.cross
        if backend.on_host:
            cross = blas.dger(weight, delta_x, delta_y, a=cross, overwrite_a=True)
        else:
            cross += weight * backend.xp.outer(delta_x, delta_y)
        m2_x = m2_x + part.m2_x + weight * delta_x**2
        m2_y = m2_y + part.m2_y + weight * delta_y**2
        mean_x = mean_x + delta_x * (part.count / total)
        mean_y = mean_y + delta_y * (part.count / total)
        count = total
    return CrossMoments(count, mean_x, mean_y, m2_x, m2_y, cross, nonfinite_x, nonfinite_y, finite_x, finite_y)


def cross_moments_graph(X, Y):
    """Delayed :class:`CrossMoments` of the rows of X and Y (one pass reading both when computed)."""
    leaves = map_row_blocks(joint_rows(X, Y), chunk_cross_moments, "cross-covariance-chunk", X.shape[1])
    return tree_reduce(leaves, combine_cross_moments, "cross-covariance-merge", split_every=MERGE_SPLIT_EVERY)


def exact_task_bytes(n_rows_block: int, dx: int, dy: int, itemsize: int) -> int:
    """Peak memory of the largest task of :func:`cross_moments_graph`: a leaf holds its block,
    a float64 copy and the dx×dy product; a pairwise merge three dx×dy matrices."""
    leaf = n_rows_block * (dx + dy) * (itemsize + 8) + dx * dy * 8
    return max(leaf, 3 * dx * dy * 8)


# ---------------------------------------------------------------------------- the cross operator


@dataclass(frozen=True)
class JointStage:
    """Both fields' feature stages as one operand of ``[X | Y]``'s row blocks (host arrays, shared
    by every task of a pass): the kept columns, the shift and scale of each, and the kept X
    columns' count, so that a block's analysed values are ``(block[:, keep] − shift)·scale``
    (= ``X[:, keep]·factor − mean``: the shift is the raw mean, made before the scale as the
    sketch kernel does)."""

    keep: np.ndarray  # (dx + dy,) bool
    shift: np.ndarray  # (dx_kept + dy_kept,)
    scale: np.ndarray  # (dx_kept + dy_kept,)
    n_x: int  # kept X columns: the first n_x of the staged values
    all_kept: bool


def joint_stage(stage_x, stage_y, mean_x, mean_y) -> JointStage:
    """The :class:`JointStage` of two feature stages and the fields' means (of the analysed,
    weighted values, as :class:`CrossSolution` holds them)."""
    keep = np.concatenate([stage_x.keep, stage_y.keep])
    scale = np.concatenate([stage_x.factor, stage_y.factor]).astype(np.float64)
    mean = np.concatenate([mean_x, mean_y])
    shift = np.divide(mean, scale, out=np.zeros_like(mean), where=scale != 0)  # a weight 0: any shift
    return JointStage(keep, shift, scale, int(stage_x.n_kept), bool(keep.all()))


def _staged_slabs(block, stage: JointStage, sketch_size: int):
    """The analysed values of a row block of ``[X | Y]`` as ``(x, y)`` float64 slabs of rows: on the
    host a cache-sized slab at a time in the thread's buffer (:func:`daskpca.passes.staged_slabs`:
    no float64 copy of the whole block, each slab used before the next is made); on a device the
    whole block, the operands moved there. A block of no rows (a dask chunk of length 0) is one
    empty slab: its sums are zeros of the right shapes, not none."""
    kept = block if stage.all_kept else block[:, like(stage.keep, block)]
    if backend_of(block).on_host and kept.shape[0]:
        slabs = staged_slabs(kept, stage.shift, stage.scale, sketch_size)
    else:
        xp = namespace(block)
        slabs = [(xp.asarray(kept, dtype=xp.float64) - like(stage.shift, block)) * like(stage.scale, block)]
    for slab in slabs:
        yield slab[:, :stage.n_x], slab[:, stage.n_x:]


def _cross_products_block(block, row_offset, stage: JointStage, V, U):
    V, U = like(V, block), like(U, block)
    products_v = products_u = 0.0
    for x, y in _staged_slabs(block, stage, V.shape[1]):
        products_v = products_v + x.T @ (y @ V)
        products_u = products_u + y.T @ (x @ U)
    return products_v, products_u


def _sum_pairs(parts):
    return sum(p[0] for p in parts), sum(p[1] for p in parts)


def cross_products_graph(X, Y, stage_x, stage_y, mean_x, mean_y, V, U):
    """Delayed ``(C·V, Cᵀ·U)`` with ``C = Z̃xᵀZ̃y`` (no 1/(n − 1)), ``Z = X[:, keep]·factor``
    centred on the given means: one pass reading both fields. A task converts its block to
    float64 a slab at a time (:func:`_staged_slabs`): the products are ~0.3 of the work, the
    whole block's float64, selected, scaled and centred copies made one after another were the
    rest (2.3 s a pass against a 0.6 s read, 40 000 × (3000 + 2000) float32 held in the page cache)."""
    parts = map_row_blocks(joint_rows(X, Y), _cross_products_block, "mca-krylov-chunk",
                           joint_stage(stage_x, stage_y, mean_x, mean_y), V, U)
    return tree_reduce(parts, _sum_pairs, "mca-krylov-merge")


@dataclass(frozen=True)
class KrylovSVD:
    """The leading singular triplets of C found by :func:`krylov_svd`, with their bound."""

    left: np.ndarray  # (dx, k), orthonormal
    right: np.ndarray  # (dy, k), orthonormal
    singular_values: np.ndarray  # (k,), of C (as given to the operator, i.e. without 1/(n − 1))
    error_bound: float
    n_passes: int
    bounds: list  # the bound after every pass
    stopped: str = "budget"  # why it stopped: "tol" met, "invariant" spans (exact up to round-off), "budget" spent
    next_value: float = np.nan  # σ̂_{k+1} + max(‖r_{k+1}‖, ‖s_{k+1}‖): the estimate of σ_{k+1} Wedin's gap rests on


def krylov_svd(apply, dx: int, dy: int, k: int, *, block: int, tol, max_passes: int, n_samples: int, rng,
               passes=None, prior: int | None = None, prior_learnt: int | None = None) -> KrylovSVD:
    r"""Leading k singular triplets of a dx×dy operator C known only through ``apply(V, U)``.

    ``apply(V, U)`` returns ``(C·V, Cᵀ·U)`` and costs one pass over the data. The left and right
    bases grow together, one block each per pass (two interleaved block Golub–Kahan chains,
    started from Gaussian blocks on both sides)::

        U₀ = orth(Ωx), V₀ = orth(Ωy)
        pass j:  P_j = C·V_j,  Q_j = Cᵀ·U_j         (one read of both fields)
                 Rayleigh–Ritz on B = UᵀCV = Uᵀ[P₀ … P_j]: B = G Σ Hᵀ,
                 X_k = U·G_k, W_k = V·H_k; residuals from the kept images
                 R = C·W_k − X_kΣ_k = P·H_k − X_kΣ_k,   S = Cᵀ·X_k − W_kΣ_k = Q·G_k − W_kΣ_k
                 stop when the bound ≤ tol
                 U_{j+1} = orth((I − UUᵀ)·P_j),  V_{j+1} = orth((I − VVᵀ)·Q_j)

    Every image is kept, so C is known on the whole of span V and Cᵀ on span U and the
    residuals need no pass. span U contains span(Ωx, CΩy, CCᵀΩx, …), the block Krylov spaces of
    CCᵀ; each degree of CCᵀ costs two passes (no single read gives CCᵀ·v).

    The bound (``error_bound``) is Wedin's sin θ theorem (1972): if the singular values of C
    outside the computed triplets are ≤ α and σ̂_k ≥ α + δ, δ > 0, then
    ``√(‖sin Θ_left‖²_F + ‖sin Θ_right‖²_F) ≤ √(‖R‖²_F + ‖S‖²_F) / δ``, and in the spectral norm
    ``max(‖sin Θ_left‖₂, ‖sin Θ_right‖₂) ≤ max(‖R‖₂, ‖S‖₂) / δ`` (up to √(2k) smaller; the smaller
    is taken, :func:`._bounds.wedin`); it bounds the sine of the largest principal angle between
    span X_k and the exact left singular subspace, and between span W_k and the right one. σ_{k+1} is unknown; as in :mod:`daskpca.solvers.krylov`
    it is estimated from above by σ̂_{k+1} + max(‖r_{k+1}‖, ‖s_{k+1}‖) (the next Ritz value,
    ≤ σ_{k+1} by interlacing, plus its residual), so δ̂ = σ̂_k − σ̂_{k+1} − max(‖r_{k+1}‖,
    ‖s_{k+1}‖) — an estimate resting on span U, V not missing σ_{k+1}'s vectors (probability zero
    from Gaussian starts), shown conservative against LAPACK in the tests. The residual norms
    include a round-off term ``ROUNDOFF_RESIDUAL``·√n·σ̂₁ for the error of the products
    themselves; the bound is capped at 1 (also when δ̂ ≤ 0: modes k and k + 1 not yet apart).
    Where the next Ritz triplets have converged (a plateau under σ_k, a decaying tail), the gap is
    taken below them instead, their own small sines weighing what lies between
    (:func:`._bounds.split_wedin`): on plateaus and fast decay 1.1–2.3× the truth, against 2–6×.

    ``passes`` (:class:`~daskpca.passes._progress.Passes`, optional): each ``apply`` is reported as
    a pass, with the bound after it and the passes its fall predicts
    (:func:`.krylov.predict_by_fall`); before the fall is informative, ``prior`` (``passes``'
    count in all: the plan's, :func:`planned_krylov_passes`; None: no count shown), with
    ``prior_learnt`` 0 where an earlier fit's bounds gave it (None: the planner's model).

    Memory on the client: U, V and their images, 2·(dx + dy)·ℓ·passes float64.
    """
    reading = (lambda: passes.read()) if passes is not None else nullcontext
    size = block
    U = orthonormal_extension(np.zeros((dx, 0)), rng.standard_normal((dx, size)))
    V = orthonormal_extension(np.zeros((dy, 0)), rng.standard_normal((dy, size)))
    basis_u, basis_v = np.zeros((dx, 0)), np.zeros((dy, 0))
    images_v, images_u = np.zeros((dx, 0)), np.zeros((dy, 0))  # C·basis_v, Cᵀ·basis_u
    bounds, answer, stopped = [], None, "budget"
    for n_pass in range(1, max_passes + 1):
        with reading():
            P, Q = apply(V, U)
        basis_u, basis_v = np.hstack([basis_u, U]), np.hstack([basis_v, V])
        images_v, images_u = np.hstack([images_v, P]), np.hstack([images_u, Q])
        answer = _ritz(basis_u, basis_v, images_v, images_u, k, n_samples)
        bounds.append(answer[3])
        if passes is not None:
            passes.bound(answer[3])
            if tol is not None:  # without one the budget is read, as the line's "of ≤" says
                predict_by_fall(passes, bounds, tol, made=passes.number, prior=prior, most=passes.budget,
                                prior_learnt=prior_learnt)
        if tol is not None and answer[3] <= tol:
            stopped = "tol"
            break
        if n_pass == max_passes:
            break
        U = orthonormal_extension(basis_u, P)
        V = orthonormal_extension(basis_v, Q)
        if U.shape[1] == 0 and V.shape[1] == 0:
            stopped = "invariant"  # both spans are invariant: more passes add nothing
            break
    left, right, values, bound = answer
    return KrylovSVD(left, right, values, bound, n_pass, bounds, stopped,
                     _next_value(basis_u, basis_v, images_v, images_u, k, n_samples))


def _next_value(basis_u, basis_v, images_v, images_u, k, n_samples) -> float:
    """σ̂_{k+1} + max(‖r_{k+1}‖, ‖s_{k+1}‖) of the final bases, as :func:`._bounds.wedin` estimates
    σ_{k+1} (NaN where the bases hold no (k+1)-th triplet): for the input's precision term."""
    G, sigma, Ht = svd(basis_u.T @ images_v, full_matrices=False, check_finite=False)
    if len(sigma) <= k:
        return np.nan
    left, right = basis_u @ G[:, k], basis_v @ Ht[k]
    residual = max(np.linalg.norm(images_v @ Ht[k] - left * sigma[k]), np.linalg.norm(images_u @ G[:, k] - right * sigma[k]))
    return float(sigma[k] + residual + ROUNDOFF_RESIDUAL * np.sqrt(n_samples) * sigma[0])


def _ritz(basis_u, basis_v, images_v, images_u, k, n_samples):
    """``(X_k, W_k, σ̂, bound)`` of the current bases (see :func:`krylov_svd`)."""
    small = basis_u.T @ images_v  # B = UᵀCV
    G, sigma, Ht = svd(small, full_matrices=False, check_finite=False)
    # The residuals of the k kept triplets and of up to NEXT_CLUSTER beyond, which sharpen the
    # bound where they have converged (split_wedin): (dx + dy)·m per triplet, no pass.
    m = min(k + NEXT_CLUSTER + 1, len(sigma))
    G, H = G[:, :m], Ht[:m].T
    left, right = basis_u @ G, basis_v @ H
    R = images_v @ H - left * sigma[:m]
    S = images_u @ G - right * sigma[:m]
    roundoff = ROUNDOFF_RESIDUAL * np.sqrt(n_samples) * (sigma[0] if len(sigma) else 0.0)
    r_norms = np.linalg.norm(R, axis=0) + roundoff
    s_norms = np.linalg.norm(S, axis=0) + roundoff
    # k = min(dx, dy): C has no singular value beyond the k-th (α = 0 in Wedin's theorem).
    full = k >= min(basis_u.shape[0], basis_v.shape[0])
    spectral = max(tall_norm2(R[:, :k]), tall_norm2(S[:, :k])) + roundoff if m >= k else None  # Wedin's ‖·‖₂ form
    bound = wedin(sigma, r_norms, s_norms, k, full, spectral)
    if not full and m > k:
        bound = min(bound, split_wedin(sigma, r_norms, s_norms, R.T @ R + S.T @ S, k, spectral, roundoff))
    return left[:, :k], right[:, :k], sigma[:k], bound


# ---------------------------------------------------------------------------- correlation patterns


def _pattern_block(block, row_offset, stage: JointStage, U_x, U_y):
    xp = namespace(block)
    U_x, U_y = like(U_x, block), like(U_y, block)
    sums = None
    for x, y in _staged_slabs(block, stage, 2 * U_x.shape[1]):
        s_x, s_y = x @ U_x, y @ U_y
        scores = xp.hstack([s_x, s_y])  # (rows, 2k)
        part = (len(x), x.sum(axis=0), y.sum(axis=0), scores.sum(axis=0), xp.einsum("ij,ij->j", x, x),
                xp.einsum("ij,ij->j", y, y), xp.einsum("ij,ij->j", scores, scores), x.T @ scores, y.T @ scores)
        sums = part if sums is None else tuple(a + b for a, b in zip(sums, part))
    return sums


def _sum_pattern_parts(parts):
    return tuple(sum(p[i] for p in parts) for i in range(len(parts[0])))


def pattern_sums_graph(X, Y, stage_x, stage_y, mean_x, mean_y, U_x, U_y):
    """Delayed sums for the correlations of each field with the scores ``[Z̃x·U_x | Z̃y·U_y]``
    (one pass reading both fields): ``(n, Σz_x, Σz_y, Σs, Σz_x², Σz_y², Σs², Z̃xᵀS, Z̃yᵀS)``;
    :func:`correlations` finishes them."""
    parts = map_row_blocks(joint_rows(X, Y), _pattern_block, "mca-patterns-chunk",
                           joint_stage(stage_x, stage_y, mean_x, mean_y), U_x, U_y)
    return tree_reduce(parts, _sum_pattern_parts, "mca-patterns-merge")


def correlations(sums) -> tuple[np.ndarray, np.ndarray]:
    """Pearson correlations ``(R_x, R_y)`` of shape (dx, 2k), (dy, 2k) from the pattern sums:
    each feature of a field against each column of ``[scores_x | scores_y]``. The fields were
    centred on the fitted means, so the centring corrections below are small (no cancellation)."""
    n, sum_x, sum_y, sum_s, sq_x, sq_y, sq_s, cross_x, cross_y = sums
    var_s = sq_s - sum_s**2 / n

    def corr(sums_z, squares_z, cross):
        cov = cross - np.outer(sums_z, sum_s) / n
        var_z = squares_z - sums_z**2 / n
        scale = np.sqrt(np.outer(var_z, var_s))
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(scale > 0, cov / scale, np.nan)

    return corr(sum_x, sq_x, cross_x), corr(sum_y, sq_y, cross_y)



# ---------------------------------------------------------------------------- MCA's paths: solves


#: Reads the Krylov path makes (its statistics pass included) when neither ``tol`` nor
#: ``max_passes`` is given.
DEFAULT_MAX_PASSES = 20


def krylov_budget(max_passes) -> int:
    """The Krylov passes the read budget leaves after the statistics' pass (at least 1)."""
    return max((max_passes or DEFAULT_MAX_PASSES) - 1, 1)


def predicted_krylov_passes(tol, max_passes=None) -> int:
    """The Krylov passes the planner expects for ``tol`` before any read (without one: the
    budget, which the path then runs), capped by the budget.

    PCA's block Krylov model (:func:`.krylov.predicted_passes`: the bound at
    ``PREDICTED_BOUND_AT_3`` after 3 passes, then falling at the Chebyshev rate of
    λ_k/λ_{ℓ+1} = ``PREDICTED_GAP_RATIO``) at the square root of that rate: a pass here applies C
    once, so the degree in CCᵀ of the two chains grows by one every two passes (on singular values
    σ = √λ the Chebyshev growth per application of C is the square root of PCA's per pass). For
    tol 1e-3 / 1e-4 / 1e-6 / 1e-7 that is 6 / 8 / 11 / 13 Krylov passes, where drawn operators of
    2000 × 1200 and 900 × 2400 took (geometric means over six kinds, six draws each:
    ``benchmarks/mca_bound.py``'s fast decay, power law, near-tie, plateau, continuum, spikes over
    a bulk) 7.2 / 8 / 9.5 / 10.6, single fits from 2 (fast decay) to 31 (the bulk): only the
    fit's own bounds (or an earlier fit's, :func:`.krylov.passes_from_history`) tell which."""
    budget = krylov_budget(max_passes)
    if tol is None or not tol > 0:
        return budget
    extra = max(0.0, np.log(PREDICTED_BOUND_AT_3 / tol) / np.log(np.sqrt(chebyshev_rate(PREDICTED_GAP_RATIO))))
    return int(min(budget, 3 + np.round(extra)))


def planned_krylov_passes(tol, max_passes=None, earlier_bounds=None) -> tuple[int, bool]:
    """``(passes, learnt)``: the Krylov path's reads in all (the statistics' pass included) the plan
    and the progress line expect before the first — an earlier fit's count where its bounds after
    each pass (``earlier_bounds``) give one for ``tol`` (``learnt`` True), else the planner's
    (:func:`predicted_krylov_passes`)."""
    budget = krylov_budget(max_passes)
    earlier = None if tol is None else passes_from_history(earlier_bounds, tol)
    if earlier is not None:
        return 1 + min(earlier, budget), True
    return 1 + predicted_krylov_passes(tol, max_passes), False


@dataclass(frozen=True)
class CrossSolution:
    """What a path of MCA hands back to the estimator (all NumPy, float64).

    ``components_x``, ``components_y`` (k × dx_kept, k × dy_kept): the singular vectors as rows,
    signs not fixed yet; ``singular_values`` (k,): of the cross-covariance (ddof=1);
    ``total_squared`` (‖C‖²_F) and ``sum_values`` (Σσ) NaN where not known (Krylov);
    ``stopped``: why the Krylov path stopped (None on the exact path).
    """

    components_x: np.ndarray
    components_y: np.ndarray
    singular_values: np.ndarray
    n_samples: int
    mean_x: np.ndarray
    mean_y: np.ndarray
    stages: tuple
    n_passes: int
    error_bound: float
    total_squared: float
    sum_values: float
    info: dict
    stopped: str | None = None


def check_varies(variance_x, variance_y) -> None:
    """A field constant over the samples has no covariance with anything: refuse it by name (its
    singular values would be 0 and their fractions 0/0), after the statistics pass that shows it."""
    for name, variance in (("X", variance_x), ("Y", variance_y)):
        if not np.any(np.asarray(variance) > 0):
            raise InputError(f"field {name} is constant over the samples (every analysed feature has zero variance): "
                             "it covaries with nothing, so MCA has no modes. Pass a field that varies.")


def solve_exact(X, Y, *, resolve, choose_k, random_state=None) -> CrossSolution:
    """The exact path: one pass (:func:`cross_moments_graph`), the feature stages from its
    statistics, the dx×dy SVD of the weighted cross-covariance on the client. Every singular
    value is computed, so ‖C‖²_F and Σσ are exact."""
    import dask

    (moments,) = dask.compute(cross_moments_graph(X, Y))
    n = moments.count
    stage_x = resolve[0](moments.finite_x, n, moments.m2_x / max(n - 1, 1))
    stage_y = resolve[1](moments.finite_y, n, moments.m2_y / max(n - 1, 1))
    check_varies(moments.m2_x[stage_x.keep] * stage_x.factor**2, moments.m2_y[stage_y.keep] * stage_y.factor**2)
    k = choose_k(n, stage_x, stage_y)
    cross = moments.cross[np.ix_(stage_x.keep, stage_y.keep)] * np.outer(stage_x.factor, stage_y.factor)
    cross /= max(n - 1, 1)
    left, values, right_t = svd(cross, full_matrices=False, check_finite=False)
    total = float(np.sum(values**2))
    return CrossSolution(
        left[:, :k].T, right_t[:k], values[:k], n,
        moments.mean_x[stage_x.keep] * stage_x.factor, moments.mean_y[stage_y.keep] * stage_y.factor,
        # Exact: round-off over the gap σ_k − σ_{k+1} (Wedin; 1 where they are equal to round-off).
        (stage_x, stage_y), n_passes=1, error_bound=exact_bound(values, k, n, len(values)), total_squared=total,
        sum_values=float(np.sum(values)),
        info={"total_variance_x": float(np.sum(moments.m2_x[stage_x.keep] * stage_x.factor**2)) / max(n - 1, 1),
              "total_variance_y": float(np.sum(moments.m2_y[stage_y.keep] * stage_y.factor**2)) / max(n - 1, 1),
              **({"next_singular_value": float(values[k])} if len(values) > k else {})},
    )


@releases_slab_buffers  # the cross products' per-thread slab buffers go when the fit ends, also by an error
def solve_krylov(X, Y, *, resolve, choose_k, random_state=None, tol=None, max_passes=None, n_oversamples=10,
                 earlier_bounds=None) -> CrossSolution:
    """The Krylov path: one pass for both fields' per-feature statistics (masks, weights, means),
    then :func:`krylov_svd` on the cross operator (:func:`cross_products_graph`), one pass per
    block, until its bound is ≤ ``tol`` or ``max_passes`` reads (the statistics pass included;
    default :data:`DEFAULT_MAX_PASSES`) are spent. ‖C‖_F and Σσ are not known: NaN.
    ``earlier_bounds``: an earlier fit's bound after each Krylov pass (its ``solver_info_["bounds"]``;
    a watched refit of a fitted MCA gives its own), whose count
    (:func:`.krylov.passes_from_history`) is shown from the first pass instead of none."""
    import dask

    from ._iterative import column_stats_graph

    budget = krylov_budget(max_passes)
    # The statistics' pass and the Krylov passes, reported as block Krylov's are: the count the
    # plan gives (an earlier fit's where its bounds tell, learnt before the first pass) until the
    # bounds' fall is informative.
    passes = Passes("mca-krylov", 1 + budget, at_most=True, tol=tol)
    prior, from_earlier = planned_krylov_passes(tol, max_passes, earlier_bounds)
    prior_learnt = 0 if from_earlier else None
    passes.predict(prior, learnt=prior_learnt, source=EARLIER_FIT)
    with passes.read():
        (stats,) = dask.compute(column_stats_graph(joint_rows(X, Y)))
    n, dx = X.shape[0], X.shape[1]
    part_x = slice(0, dx)
    part_y = slice(dx, None)
    variance = stats.variance()
    stage_x = resolve[0](stats.count[part_x], n, variance[part_x])
    stage_y = resolve[1](stats.count[part_y], n, variance[part_y])
    check_varies(variance[part_x][stage_x.keep] * stage_x.factor**2, variance[part_y][stage_y.keep] * stage_y.factor**2)
    k = choose_k(n, stage_x, stage_y)
    mean_x = stats.mean[part_x][stage_x.keep] * stage_x.factor
    mean_y = stats.mean[part_y][stage_y.keep] * stage_y.factor

    def apply(V, U):
        (products,) = dask.compute(cross_products_graph(X, Y, stage_x, stage_y, mean_x, mean_y, V, U))
        return products

    rng = np.random.default_rng(random_state)
    block = min(k + n_oversamples, stage_x.n_kept, stage_y.n_kept)
    found = krylov_svd(apply, stage_x.n_kept, stage_y.n_kept, k, block=block, tol=tol,
                       max_passes=budget, n_samples=n, rng=rng, passes=passes, prior=prior, prior_learnt=prior_learnt)
    scale = max(n - 1, 1)
    return CrossSolution(
        found.left.T, found.right.T, found.singular_values / scale, n, mean_x, mean_y, (stage_x, stage_y),
        n_passes=1 + found.n_passes, error_bound=found.error_bound, total_squared=np.nan, sum_values=np.nan,
        info={"bounds": found.bounds, "sketch_size": block, "planned_passes": prior,
              "planned_from": EARLIER_FIT + "'s bounds" if from_earlier else "the planner's model", "stats_pass": "one read of both fields for the per-feature "
              "finite counts, means and variances before the Krylov passes",
              "total_variance_x": float(np.sum(variance[part_x][stage_x.keep] * stage_x.factor**2)),
              "total_variance_y": float(np.sum(variance[part_y][stage_y.keep] * stage_y.factor**2)),
              **({"next_singular_value": found.next_value / scale} if np.isfinite(found.next_value) else {})},
        stopped=found.stopped,
    )


def check_read_budget(max_passes) -> None:
    """The Krylov path reads both fields once for their statistics, then at least once more:
    refuse a smaller read budget before any read."""
    most = max_passes or DEFAULT_MAX_PASSES
    if most < 2:
        raise InvalidParameterError(
            f"max_passes={most}: MCA's Krylov path reads both fields once for their statistics, then at "
            "least once more for the cross products: give max_passes >= 2 (--max-passes 2), or the exact "
            "path (solver='exact') when dx×dy fits a task.")


# ---------------------------------------------------------------------------- MCA's paths: costs


def exact_cost(shape: PlanInput) -> Cost:
    """One pass reading both fields. Its largest task (:func:`exact_task_bytes`): a leaf holds its
    block, a float64 copy and the dx×dy product; a pairwise merge three dx×dy matrices. Flops: the
    cross-scatter's 2·n·dx·dy and the dx×dy SVD on the client (≈ 4·m·s² + 22·s³ for s = min(dx,
    dy), m = max: Golub & Van Loan's R-SVD with both sets of vectors). Each task returns its
    dx×dy cross-scatter and its per-feature means, sums of squares and finite counts."""
    dx, dy = shape.fields
    small, large = min(dx, dy), max(dx, dy)
    task = exact_task_bytes(shape.row_block, dx, dy, shape.itemsize)
    return Cost(1, 2 * shape.n * dx * dy + 4 * large * small**2 + 22 * small**3, task,
                result_size=dx * dy + 3 * (dx + dy))


def client_flops(dx: int, dy: int, k: int, ell: int, passes: int) -> float:
    """The client's flops over ``passes`` Krylov passes of :func:`krylov_svd`, 2 a multiply-add:
    after pass j each side's basis holds m = j·ℓ columns; B = UᵀCV (2·dx·m²) and its SVD
    (≈ 22·m³); the Ritz vectors and residuals of t = min(k + NEXT_CLUSTER + 1, m) triplets
    (4·(dx + dy)·m·t) and their Gram (2·(dx + dy)·t²); the next blocks orthonormalised against
    the bases, two projections a side (8·(dx + dy)·m·ℓ)."""
    total = 0.0
    for j in range(1, passes + 1):
        m = j * ell
        t = min(k + NEXT_CLUSTER + 1, m)
        total += 2.0 * dx * m * m + 22.0 * m**3 + (dx + dy) * (4.0 * m * t + 2.0 * t * t + 8.0 * m * ell)
    return total


def krylov_cost(shape: PlanInput) -> Cost:
    """The statistics' pass, then one pass per block: with ``tol`` the passes
    :func:`planned_krylov_passes` expects (an earlier fit's count where ``options["earlier_bounds"]``,
    its bound after each pass, gives one; else the planner's model), at most the read budget; without
    it the whole budget (``max_passes``, default :data:`DEFAULT_MAX_PASSES`); ℓ = k + n_oversamples.
    A task holds its block of both fields as stored, a copy of its kept columns
    (counted: which are masked is known after the statistics' pass), one float64 slab
    (:func:`daskpca.passes.staged_task_bytes`) and the d×ℓ operands V, U with its result.
    Flops: 4·n·(dx + dy)·ℓ a Krylov pass; on the client
    :func:`client_flops`. Each task returns C·V and Cᵀ·U: (dx + dy)·ℓ."""
    dx, dy = shape.fields
    most = 1 + krylov_budget(shape.max_passes)
    ell = min(shape.k + shape.n_oversamples, dx, dy)
    # The block, one float64 slab, a copy of the kept columns where some are masked (not known
    # before the statistics' pass: counted), and V, U with the task's result.
    task = staged_task_bytes(shape, ell) + shape.block_in + 2 * (dx + dy) * ell * 8
    passes, learnt = planned_krylov_passes(shape.tol, shape.max_passes, shape.options.get("earlier_bounds"))
    if shape.tol is None:
        note = f"ℓ = {ell}; 1 pass for statistics, then the budget's {most - 1} Krylov passes; error bound reported"
    elif learnt:
        note = f"ℓ = {ell}; passes for tol = {shape.tol:g} from the earlier fit's bounds"
    else:
        # The fewest: the first pass's blocks span both fields' features (ℓ ≥ dx, dy), else
        # FEWEST_PASSES as for PCA's Krylov (the first blocks' images complete the bases).
        fewest = 1 + min(1 if ell >= max(dx, dy) else FEWEST_PASSES, most - 1)
        note = (f"ℓ = {ell}; passes predicted for tol = {shape.tol:g} ({fewest}–{most} possible, "
                "the spectrum decides; the fit predicts its own once its bound falls)")
    return Cost(passes, 4 * shape.n * (dx + dy) * ell * (passes - 1), task, note, result_size=(dx + dy) * ell,
                client_flops=client_flops(dx, dy, shape.k, ell, passes - 1), most_passes=most)


#: The exact path: one pass, the dx×dy cross-covariance's SVD.
EXACT = SolverDeclaration(
    "exact", solve_exact, cost=exact_cost, summary="one pass building the dx×dy cross-covariance",
    reason=lambda n, dx, dy: f"the {dx}×{dy} cross-covariance fits a task",
    too_large=lambda n, dx, dy, task: f"the {dx}×{dy} cross-covariance needs {format_bytes(task)} per task, more than "
                                      "the budget",
    exact=True, exact_for="any",
)
#: The block Krylov path on the cross products, with Wedin's bound; taken where the exact one
#: does not fit (and n_components is given: it finds the leading modes only).
KRYLOV = SolverDeclaration(
    "krylov", solve_krylov, cost=krylov_cost, summary="block Krylov on the cross products (Wedin's bound)",
    # Thin products of float64 slabs with ℓ columns, as the sketch kernel's: a pass over 40 000 ×
    # (3000 + 2000) held in memory took 0.58–0.9 s for its 1.28e10 flops (14–22 GF/s; the dense
    # rate's 0.19 s was 3× short, which priced the pass cache's gain 3× too high).
    flop_rate=SKETCH_FLOPS_PER_SECOND,
    options=("tol", "max_passes", "n_oversamples"), fallback="instead",
    check_options=lambda options: check_read_budget(options.get("max_passes")), earlier_bounds="earlier_bounds",
)
#: MCA's paths by name (``MCA(solver=...)``), in the order plans list them.
MCA_PATHS = {declaration.name: declaration for declaration in (EXACT, KRYLOV)}
