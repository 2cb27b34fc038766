r"""PCA by alternating least squares on ‖CW − X̃‖²_F: one pass per iteration, no extra pass.

With rows as samples, scores Z (n×k, never stored) and a d×k basis C, an iteration is

    Z_i = X̃_i C (CᵀC)⁻¹                   (per row block)
    A   = Σ X̃_iᵀ Z_i        (d×k)          (same pass)
    B   = Σ Z_iᵀ Z_i        (k×k)          (same pass)
    C  ← A B⁻¹                             (on the client, by a symmetric solve)

Writing S = X̃ᵀX̃ for the scatter, A = S C(CᵀC)⁻¹ and B = (CᵀC)⁻¹CᵀSC(CᵀC)⁻¹, so the update is
``C ← S C (CᵀSC)⁻¹ (CᵀC)``: span(C) becomes span(SC). ALS is subspace (power) iteration on the
covariance; it converges linearly at rate λ_{k+1}/λ_k to the principal *subspace*. The basis is
orthonormalised (C = Q, thin QR on the client) before every pass — the same subspace, so the
same iteration, but CᵀC = I and the k×k solves stay well conditioned.

Fusing the mean into the iterations
-----------------------------------
Each block is centered on its own mean μ_i (not on μ, which is only known after a full read)
and contributes n_i, μ_i, G_i = (X_i − 1μ_iᵀ)ᵀ(X_i − 1μ_iᵀ)Q (d×k) and
H_i = P_iᵀP_i with P_i = (X_i − 1μ_iᵀ)Q (k×k). With δ_i = μ_i − μ, the scores on the global
mean are Z_i = X̃_iQ = P_i + 1(Qᵀδ_i)ᵀ, and because every column of a block-centered matrix sums
to zero (1ᵀP_i = 0, (X_i − 1μ_iᵀ)ᵀ1 = 0) the cross terms vanish:

    X̃_iᵀZ_i = G_i + n_i δ_i δ_iᵀ Q,        Z_iᵀZ_i = H_i + n_i (Qᵀδ_i)(Qᵀδ_i)ᵀ.

These are the Chan–Golub–LeVeque scatter merge multiplied by Q, so partial results merge
pairwise exactly (δ = μ_B − μ_A, w = n_A n_B / n: G = G_A + G_B + w δ(δᵀQ), H likewise) and
A = SQ, B = QᵀSQ come out of the tree without μ being known beforehand. Hence the *first*
iteration also yields μ, the total variance (per-column moments) and the NaN/±inf check:

    passes = n_iter  (exactly one read per iteration, no separate pass for the mean)

Finish without an extra pass
----------------------------
The last pass used an orthonormal Q and gave B = QᵀSQ — the projected scatter. Its eigenpairs
(θ_j, w_j) give the Rayleigh–Ritz approximation: components Qw_j (orthonormal) and variances
θ_j/(n − 1), which are *exactly* the sample variances of the data along the returned
components. Their error is O(sin θ) in the axes and O(sin²θ) in the variances, where
sin θ ≲ tol/(1 − λ_{k+1}/λ_k) at convergence.

Convergence: stop when the sine of the largest principal angle between successive bases,
span(Q) and span(A B⁻¹), is ≤ ``tol``. A warm start (``init``: the components of an earlier fit
on similar data) starts close and needs fewer iterations (passes).

Checkpoints (``checkpoint=PATH``)
--------------------------------
After every pass that is followed by another, the small state is written atomically to PATH
(see :mod:`daskpca.store.checkpoint`): the next basis Q (d×k), the iterations done, and the trace
of the scatter from iteration 1 (μ and the NaN/±inf check are re-done by every pass anyway).
A rerun of the same job (same input name/shape/chunks/dtype, k, ``max_iter``, ``tol``,
``init`` and seed) loads it and continues from the next iteration, so every pass is a
resumption point; the result is bit-for-bit that of an uninterrupted run. The file is removed
right before ``solve`` returns (a job killed between that and saving the model starts over).

Flops per iteration: 2·n·d·k (P_i) + 2·n·d·k (G_i) + n·d (centering). Memory per task: one
float64 row block + d·k + k²; the merge tasks hold ``SPLIT_EVERY`` d×k matrices.

References
----------
S. Roweis, "EM algorithms for PCA and SPCA", NIPS 1998.
T. F. Chan, G. H. Golub, R. J. LeVeque, "Updating formulae and a pairwise algorithm for
computing sample variances" (1979).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import dask
import numpy as np
import scipy.linalg

from ..passes import (Passes, SizedByArrays, eigh_descending, like, map_row_blocks, merge_shifted_means,
                      namespace, row_shift, tree_reduce)
from .._validation import NonFinite, find_nonfinite, raise_if_nonfinite
from ._base import FLOAT64, ComponentRequest, Cost, PlanInput, SolverDeclaration, SolverResult
from ..exceptions import ConvergenceWarning
from ._iterative import initial_basis, orthonormal_columns, start_iterations, subspace_sine

OPTIONS = ("max_iter", "tol", "init", "checkpoint")
DEFAULT_MAX_ITER = 200
DEFAULT_TOL = 1e-8


@dataclass(frozen=True)
class _ALSPart(SizedByArrays):
    """Sums of one iteration over some rows, centered on their own mean."""

    count: int
    shift: np.ndarray  # (d,): the mean is shift + offset, unrounded (see daskpca.passes._moments)
    offset: np.ndarray  # (d,)
    g: np.ndarray  # (d, k): scatter · Q
    h: np.ndarray  # (k, k): Qᵀ · scatter · Q, accumulated as a Gram of the scores
    m2: np.ndarray  # (d,): per-column centered sums of squares (diagonal of the scatter)
    nonfinite: NonFinite

    @property
    def mean(self) -> np.ndarray:
        return self.shift + self.offset


def _als_block(block: np.ndarray, row_offset: int, basis: np.ndarray) -> _ALSPart:
    """Leaf, in the block's array library (a device block's sums stay on its device)."""
    nonfinite = find_nonfinite(block, row_offset, 0)
    xp = namespace(block)
    basis = like(basis, block)
    x = block.astype(xp.float64, copy=True)
    if nonfinite.count:
        x[~xp.isfinite(x)] = 0.0  # the fit raises after the first pass; keep the sums finite
    n_rows = x.shape[0]
    if n_rows == 0:
        d, k = basis.shape
        return _ALSPart(0, xp.zeros(d), xp.zeros(d), xp.zeros((d, k)), xp.zeros((k, k)), xp.zeros(d), nonfinite)
    shift = row_shift(x)
    x -= shift  # exact where |μ| ≫ spread, so the mean below is accurate to ε·spread
    offset = x.mean(axis=0)
    x -= offset
    scores = x @ basis  # P_i
    return _ALSPart(n_rows, shift, offset, x.T @ scores, scores.T @ scores, xp.einsum("ij,ij->j", x, x), nonfinite)


def _merge_two(a: _ALSPart, b: _ALSPart, basis: np.ndarray) -> _ALSPart:
    if a.count == 0 or b.count == 0:
        keep = b if a.count == 0 else a
        return _ALSPart(keep.count, keep.shift, keep.offset, keep.g, keep.h, keep.m2, a.nonfinite.merge(b.nonfinite))
    count = a.count + b.count
    delta, offset = merge_shifted_means(a.count, a.shift, a.offset, b.count, b.shift, b.offset)
    weight = a.count * b.count / count
    xp = namespace(delta)
    projected = like(basis, delta).T @ delta  # Qᵀδ
    return _ALSPart(
        count,
        a.shift,
        offset,
        a.g + b.g + xp.outer(delta, projected) * weight,
        a.h + b.h + xp.outer(projected, projected) * weight,
        a.m2 + b.m2 + delta**2 * weight,
        a.nonfinite.merge(b.nonfinite),
    )


def _merge(parts: list[_ALSPart], basis: np.ndarray) -> _ALSPart:
    merged = parts[0]
    for part in parts[1:]:
        merged = _merge_two(merged, part, basis)
    return merged


def iteration_graph(X, basis: np.ndarray):
    """Delayed :class:`_ALSPart` of all rows for the orthonormal basis Q (one pass)."""
    parts = map_row_blocks(X, _als_block, "als-chunk", basis)
    return tree_reduce(parts, _merge, "als-merge", basis)


def _update(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C = A B⁻¹ by a symmetric positive-definite solve (least squares if B is singular)."""
    try:
        return scipy.linalg.solve(b, a.T, assume_a="pos", check_finite=False).T
    except (np.linalg.LinAlgError, scipy.linalg.LinAlgError):
        return scipy.linalg.lstsq(b, a.T, check_finite=False)[0].T


def most_passes(options: dict) -> int:
    """Most reads :func:`solve` makes with these estimator options: one per iteration (the mean rides in the first)."""
    return options.get("max_iter") or DEFAULT_MAX_ITER


def solve(X, request: ComponentRequest, *, random_state=None, max_iter=None, tol=None, init=None, checkpoint=None) -> SolverResult:
    """Fit the k leading components by alternating least squares (one pass per iteration).

    Parameters
    ----------
    X : dask.array.Array of shape (n_samples, n_features)
        float32 or float64, any row and column chunking.
    request : ComponentRequest
        Must fix k (an int or None).
    random_state : int, numpy.random.Generator, numpy.random.RandomState or None
        Seed of the Gaussian starting basis (ignored with ``init``).
    max_iter : int, default=200
        Most iterations (= passes).
    tol : float, default=1e-8
        Stop when the sine of the largest principal angle between successive bases is ≤ tol.
    init : array of shape (k, n_features) or None
        Starting components (a warm start, e.g. ``components_`` of an earlier fit).
    checkpoint : str, os.PathLike or None
        Local ``.npz`` file for the state after every pass; a rerun of the same job resumes
        from it (see the module notes). Removed when the solve completes.

    Returns
    -------
    SolverResult
        ``n_passes``: reads made by *this* call (fewer than ``n_iter`` after a resume).
        ``info``: ``n_iter`` (iterations in all, = ``total_passes``), ``converged``,
        ``subspace_change`` (the last sine), ``resumed_from_pass`` (passes already done by the
        run whose checkpoint was loaded, or None) and ``total_passes`` (across runs).
        ``spectrum`` is None.

    Warns
    -----
    ConvergenceWarning
        When ``max_iter`` iterations did not reach ``tol``.
    """
    n_samples, n_features = X.shape
    k, max_iter, tol, store = start_iterations(
        "als", X, request, max_iter=max_iter, tol=tol, init=init, random_state=random_state,
        checkpoint=checkpoint, default_max_iter=DEFAULT_MAX_ITER, default_tol=DEFAULT_TOL,
    )
    state = store.load()
    if state is None:
        basis = initial_basis(init, k, n_features, random_state)
        total_m2, done = None, 0
    else:  # iterations 1..done ran in an earlier process; the NaN/±inf check passed there
        basis, total_m2, done = state["basis"], state["total_m2"], int(state["n_iter"])
    converged, change = False, np.inf
    passes = Passes("als", max_iter, at_most=True, done=done)
    for n_iter in range(done + 1, max_iter + 1):
        with passes.read():
            (part,) = dask.compute(iteration_graph(X, basis))
        if total_m2 is None:
            raise_if_nonfinite(part.nonfinite)
            total_m2 = part.m2.sum()
        new_basis = orthonormal_columns(_update(part.g, part.h))
        change = subspace_sine(basis, new_basis)
        if change <= tol:
            converged = True
            break
        if n_iter < max_iter:
            basis = new_basis
            store.save({"basis": basis, "total_m2": total_m2, "n_iter": n_iter, "passes": n_iter})
    if not converged:
        warnings.warn(
            f"ALS stopped after max_iter={max_iter} iterations with a subspace change of "
            f"{change:.2e} > tol={tol:g}. Increase max_iter, loosen tol, start from an earlier "
            "fit (init=...), or use solver='randomized' when λ_k and λ_{k+1} are close.",
            ConvergenceWarning,
            stacklevel=2,
        )
    # Rayleigh–Ritz in span(Q) of the last pass: B = QᵀSQ is already at hand (see module doc).
    values, vectors = eigh_descending((part.h + part.h.T) / 2)
    ddof_count = max(n_samples - 1, 1)
    result = SolverResult(
        components=(basis @ vectors).T.copy(),
        explained_variance=values / ddof_count,
        mean=part.mean,
        n_samples=n_samples,
        total_variance=float(total_m2 / ddof_count),
        n_passes=n_iter - done,
        spectrum=None,
        info={
            "n_iter": n_iter,
            "converged": converged,
            "subspace_change": float(change),
            "resumed_from_pass": store.resumed_from,
            "total_passes": n_iter,
        },
    )
    store.clear()
    return result


# ---------------------------------------------------------------------------------- declaration


def cost(shape: PlanInput) -> Cost:
    """One pass per iteration, 4·n·d·k flops each. A leaf holds its block, one float64 copy and
    its n_i×k and d×k products; a merge SPLIT_EVERY d×(k + 2) statistics, what each task returns."""
    n, d, k, most = shape.n, shape.d, shape.k, most_passes(shape.options)
    task = max(shape.block_in + shape.block64 + (2 * shape.row_block + d) * k * FLOAT64, shape.merge_column_bytes * (k + 2))
    return Cost("1/iter", 4 * n * d * k, task, "iterative; passes = iterations (the mean is fused into the first)",
                result_size=(k + 2) * d, most_passes=most)


DECLARATION = SolverDeclaration(
    "als", solve, cost=cost, summary="ALS's d×k state", options=OPTIONS, fallback="last-resort",
)
