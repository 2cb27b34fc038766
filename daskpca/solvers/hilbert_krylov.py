r"""Hilbert EOFs of long series: block Krylov on the Hermitian Gram operator, never forming it.

The exact Hilbert solver (:mod:`.hilbert`) forms the n×n Hermitian Gram matrix G = ZZᴴ of the
analytic signal Z (n samples × d features): 16·n² bytes, and a merge holds three. Daily data over
four decades (n ≈ 15 000) needs 3.4 GB per matrix — more than a worker has. This solver applies G
to an n×ℓ block instead, per column strip, in the task that reads the strip:

    G·V = Σ_j Z_j·(Z_jᴴ·V)        (Z_j: the strip's analytic signal, formed a few columns at a time)

so a task holds its strip, the FFT scratch and two n×ℓ complex blocks. Each pass is one such
product; the kept Krylov basis, the Rayleigh–Ritz step and the error bound are those of
:mod:`.krylov` (its ``Basis``, conjugate transposes throughout): U_k, the leading Ritz vectors of
G, approximate its top-k eigenvectors with a Davis–Kahan bound ‖R_k‖/δ̂ on sin θ (δ̂ an estimate
of the gap, see :mod:`.krylov`). One more pass forms the components from the strips:
M = ZᴴU_k (d×k), whose SVD gives orthonormal components and their variances.

Bound on the components: with U_k = U A + U_⊥ B (U the exact top-k eigenvectors, ‖B‖ = sin θ),
ZᴴU_k = V Σ A + V_⊥ Σ_⊥ B, so tan θ(span M, V) ≤ (σ_{k+1}/σ_k)·tan θ(U_k, U) ≤ tan θ(U_k, U): the
reported ``error_bound`` is the Ritz bound b turned into √(λ̂_{k+1}/θ_k)·b/√(1 − b²) (σ_{k+1}/σ_k ≤
that root; the product's round-off added, :func:`._bounds.product_bound`), at most b/√(1 − b²).
The same holds for any orthonormal n×k answer in place of U_k: where the trace of G (Σ|z|², every
pass sums it) certifies the augmented vectors Û of :func:`._bounds.unseen_variance_bound` below
half the Ritz vectors' bound, the components are ZᴴÛ (fast decay: the variance the basis has not
seen is small and Û's error sits far below λ_{k+1}).

Passes: Krylov passes (until the bound meets ``tol``, at most ``max_passes`` − 1) + 1 for the
components. Flops per pass: 16·n·d·ℓ (two complex products per strip) + the FFTs. Memory per task:
the strip as read, its float64 copy, the FFT scratch and 2·n·ℓ complex128; a merge 3·n·ℓ. On the
client: the basis, 2·n·m complex128 (m = ℓ·passes), thick-restarted beyond ``krylov.BASIS_BYTES``
like the real Krylov solver's (no pass lost, the bound stays valid).
"""

from __future__ import annotations

import warnings
from dataclasses import replace

import dask
import numpy as np

from ..exceptions import AccuracyWarning, InputError
from ._base import ComponentRequest, Cost, PlanInput, SolverDeclaration, SolverResult
from ..passes import EARLIER_FIT, MERGE_SPLIT_EVERY, Basis, Passes, orthonormal_extension
from ._iterative import as_generator
from .._validation import raise_if_nonfinite
from .hilbert import COMPLEX128, HILBERT_KRYLOV_FLOPS_PER_SECOND, PADDINGS, analytic_flops, gram_graph, strip_bytes, strip_products
from ._bounds import certify, plain_ritz, product_bound
from .krylov import (BASIS_BYTES, check_accuracy_options, client_flops, pass_budget, passes_from_history, predict_by_fall,
                     predicted_passes, smallest_bound)

OPTIONS = ("padding", "decay_factor", "tol", "max_passes")
#: Block size ℓ = k + N_OVERSAMPLES (as the real Krylov solver's default).
N_OVERSAMPLES = 10
#: Without a tolerance, stop early once the bound is this small.
ROUNDOFF_BOUND = 1e-10


def fuses_features(spec) -> bool:
    """Masks and weights ride in the first pass; standardizing needs the variances before it."""
    return not spec.standardize


def block_task_memory(n_samples: int, strip_columns: int, itemsize: int, n_components: int, padding: str = "exp") -> int:
    """Bytes of the largest task of a pass: a strip task with two n×ℓ complex blocks in place
    of the Gram matrix, or a merge of three n×ℓ blocks."""
    blocks = COMPLEX128 * n_samples * (n_components + N_OVERSAMPLES)
    return max(strip_bytes(n_samples, strip_columns, itemsize, padding) + 2 * blocks, (MERGE_SPLIT_EVERY + 1) * blocks)


def check_read_budget(tol, max_passes) -> tuple[float | None, int | None]:
    """``tol`` and ``max_passes`` as :func:`.krylov.check_accuracy_options` checks them, and at
    least 2 passes (one Krylov pass, then the components'); ValueError naming the value otherwise."""
    tol, max_passes = check_accuracy_options(tol, max_passes)
    if max_passes is not None and max_passes < 2:
        raise InputError(f"max_passes={max_passes}: Hilbert EOFs by Krylov read the data at least twice (one Krylov "
                         "pass, then the components' pass); give 2 or more, or None.")
    return tol, max_passes


def solve(X, request: ComponentRequest, *, random_state=None, features=None, padding="exp", decay_factor=0.2,
          tol=None, max_passes=None, earlier_bounds=None) -> SolverResult:
    """Hilbert EOFs of ``X`` (n × d, real; rows are time steps in order) by block Krylov.

    Parameters
    ----------
    X : dask.array.Array of shape (n_samples, n_features)
    request : ComponentRequest
        Must fix k (a variance fraction needs every eigenvalue: the exact solver).
    random_state : seed of the complex Gaussian start block (n×ℓ).
    features : FeatureSpec, optional
        Weights and the mask of wholly-missing features, resolved in the first pass.
    padding, decay_factor : as :func:`daskpca.solvers.hilbert.solve`.
    tol : float in (0, 1) or None
        Stop when the bound on sin θ of the components' span is ≤ ``tol``.
    max_passes : int ≥ 2 or None
        Most reads, the components' pass included (default: :func:`.krylov.pass_budget`).
    earlier_bounds : sequence of float, optional
        The bound after each Krylov pass of an earlier fit of the same field (its
        ``bound_history``; a watched refit of a fitted HilbertPCA gives its own): the count shown
        until this fit's bound is informative (:func:`.krylov.passes_from_history`), instead of
        the planner's prior. Only the progress line and the log read it.

    Returns
    -------
    SolverResult
        ``components`` complex (k, d_kept), ``spectrum`` None; ``info["error_bound"]`` the
        bound, ``bound_history`` its value after each Krylov pass, ``converged``.
    """
    if padding not in PADDINGS:
        raise InputError(f"padding={padding!r}: expected one of {PADDINGS}.")
    if request.needs_spectrum:
        raise InputError("a variance fraction (or 'mle') for n_components needs every eigenvalue: use the exact "
                         "Gram solver (solver='gram'), or give an int.")
    tol, max_passes = check_read_budget(tol, max_passes)
    budget = pass_budget(tol, max_passes)
    target = ROUNDOFF_BOUND if tol is None else tol
    n_samples, n_features = X.shape
    k = request.fixed()
    ell = min(k + N_OVERSAMPLES, n_samples, n_features)
    weights = np.ones(n_features) if features is None else features.weights
    options = (weights, padding, decay_factor)
    rng = as_generator(random_state)
    start = rng.standard_normal((n_samples, ell)) + 1j * rng.standard_normal((n_samples, ell))
    block = np.linalg.qr(start)[0]
    basis, history, stage, first, restarts = Basis.empty(n_samples, np.complex128), [], None, None, 0
    passes = Passes("hilbert-krylov", budget, at_most=True, tol=tol)
    # The Krylov passes the planner expects, and the components' pass after them (as cost() counts).
    prior = None if tol is None else min(predicted_passes(tol, max_passes) + 1, budget)
    learnt = None
    earlier = None if tol is None else passes_from_history(earlier_bounds, target)
    if earlier is not None:  # the Krylov passes an earlier fit of this field needed, and the components' pass
        prior, learnt = min(earlier + 1, budget), 0
    passes.predict(prior, learnt=learnt, source=EARLIER_FIT)
    while True:
        with passes.read():
            (part,) = dask.compute(gram_graph(X, *options, block))
        if first is None:
            first = part
            if features is not None:
                stage = features.resolve(part.in_column_order(part.counts), n_samples)
                request = stage.narrow(request)
                k = request.fixed()
            else:
                raise_if_nonfinite(part.nonfinite)
        basis = basis.extend(block, part.gram)
        theta, Y = basis.ritz()
        ritz, values, norms, ritz_bound, _, gap = plain_ritz(basis, k, theta, Y, n_samples)
        # Sharper where the next Ritz block is a converged cluster (a plateau below λ_k): the same
        # Davis–Kahan argument split at the cluster, ._bounds.split_bounds. The trace of G (Σ|z|²,
        # this pass's) bounds λ_{k+1} too and certifies the augmented vectors Û from the variance
        # the basis has not seen (._bounds.unseen_variance_bound), taken as the krylov solver
        # takes them: where their bound is below AUGMENTED_MARGIN of the Ritz vectors'.
        found = certify(basis, k, theta, Y, n_samples, part.squares)
        ritz_bound = min(ritz_bound, found["bound"])
        low = theta[k - 1] if theta.size >= k else 0.0  # ≤ λ_k
        if found["augmented_vectors"] is not None and smallest_bound(ritz_bound, found["augmented"]) < ritz_bound:
            ritz, ritz_bound, low = found["augmented_vectors"], found["augmented"], found["augmented_values"][-1]
        # The components are one product beyond these vectors: contracted by σ_{k+1}/σ_k.
        bound = product_bound(ritz_bound, found["upper"], low, max(theta[0], 0.0), n_samples)
        history.append(bound)
        passes.bound(bound)
        predict_by_fall(passes, history, target, made=len(history), prior=prior, most=budget, after=1,
                        prior_learnt=learnt)
        if bound <= target or len(history) + 1 >= budget:
            break
        block = orthonormal_extension(basis.V, basis.W[:, -block.shape[1]:])
        if block.shape[1] == 0:  # span V is invariant under G: the Ritz vectors are exact
            break
        if 2 * COMPLEX128 * n_samples * (basis.size + block.shape[1]) > BASIS_BYTES:
            basis, restarts = basis.restart(max(2 * ell, k + 1)), restarts + 1  # thick restart, as .krylov
    if tol is not None and bound > tol:
        warnings.warn(
            f"hilbert-krylov: the read budget of {budget} passes was spent with an error bound of {bound:.2g} on "
            f"sin θ, above tol={tol:g}. Raise max_passes, or use the exact Gram solver where its n×n matrix fits.",
            AccuracyWarning, stacklevel=3,
        )
    keep = np.ones(n_features, dtype=bool) if stage is None else stage.keep
    # ZᴴU_k = P·S·Qᴴ: S² are the Ritz values (U_kᴴGU_k = Θ), P the orthonormal components.
    with passes.read():
        products = strip_products(X, *options, ritz)[keep]
    left, singular, _ = np.linalg.svd(products, full_matrices=False)
    ddof = max(n_samples - 1, 1)
    result = SolverResult(
        components=left.T,
        explained_variance=singular**2 / ddof,
        mean=first.in_column_order(first.means)[keep],
        n_samples=n_samples,
        total_variance=float(first.squares / ddof),
        n_passes=len(history) + 1,
        spectrum=None,
        info={"padding": padding, "decay_factor": float(decay_factor), "error_bound": float(bound),
              "bound_history": [float(b) for b in history], "tol": tol, "converged": bool(bound <= target),
              "residual_norms": norms / ddof, "gap": float(gap / ddof), "sketch_size": ell,
              "max_passes": budget, "restarts": restarts, "n_iter": len(history)},
    )
    return replace(result, features=stage)


# ---------------------------------------------------------------------------------- declaration


def reaches(tol: float, max_passes) -> bool:
    """Whether the Krylov passes predicted for ``tol`` (:func:`.krylov.predicted_passes`,
    uncapped) and the components' pass fit the read budget: the planner then counts this road
    among those that guarantee ``tol``."""
    return tol > 0 and predicted_passes(tol, 10**9) + 1 <= pass_budget(tol, max_passes)


def cost(shape: PlanInput) -> Cost:
    """Block Krylov's predicted passes for ``tol`` (:func:`.krylov.predicted_passes`) and the
    components' pass, within the read budget; per pass the analytic signals
    (:func:`.hilbert.analytic_flops`) and 16·n·d·ℓ flops (complex n×ℓ blocks through the strips),
    each strip task returning n×ℓ complex; on the client the basis (``Basis``: complex, 4× the
    real solver's :func:`.krylov.client_flops` on n rows). The largest task
    (:func:`block_task_memory`) plus, for input stored in a few row blocks, the rechunk's second
    copy of a strip (stored by rows only: the declaration's re-layout step, ``reads_strips``)."""
    n, d, k, strip, itemsize = shape.n, shape.d, shape.k, shape.col_strip, shape.itemsize
    padding = shape.options.get("padding", "exp")
    passes = min(predicted_passes(shape.tol, shape.max_passes) + 1, pass_budget(shape.tol, shape.max_passes))
    ell = min(k + N_OVERSAMPLES, n, d)
    task = block_task_memory(n, strip, itemsize, k, padding) + (shape.row_tasks > 1) * n * strip * itemsize
    flops = passes * (16.0 * n * d * ell + analytic_flops(n, d, padding))
    return Cost(passes, flops, task, f"ℓ = {ell}; error bound reported", result_size=2 * n * ell,
                tasks=len(shape.chunks[1]), client_flops=4 * client_flops(n, ell, passes - 1, k),
                most_passes=pass_budget(shape.tol, shape.max_passes))


DECLARATION = SolverDeclaration("hilbert-krylov", solve, cost=cost, summary="block Krylov on the complex Gram matrix",
                                flop_rate=HILBERT_KRYLOV_FLOPS_PER_SECOND, options=OPTIONS, certifies=reaches, fallback="approximate", fuses_features=fuses_features,
                                reads_strips=True, earlier_bounds="earlier_bounds")
