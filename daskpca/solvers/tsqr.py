r"""Exact PCA from a tall-skinny QR (TSQR) of the centered data, in one pass.

Each row block X_i (n_i rows) is centered on its *own* mean μ_i and reduced to the R factor of
its Householder QR, ``X_i − 1μ_iᵀ = Q_i R_i``. The R factors are merged in a tree of QRs
(:func:`daskpca._graph.tree_reduce`); the final R (at most d×d) has the same singular values and
right singular vectors as the centered data X̃, so an SVD of R on the client gives every
eigenvalue of the covariance and the principal axes.

Centering folded into the tree
------------------------------
Merge two row sets A and B (counts n_A, n_B, means μ_A, μ_B, block-centered R factors R_A, R_B).
With n = n_A + n_B, δ = μ_B − μ_A and μ = μ_A + δ·n_B/n, the rows centered on the common mean
are ``X_A − 1μᵀ = (X_A − 1μ_Aᵀ) − (n_B/n)·1δᵀ`` and ``X_B − 1μᵀ = (X_B − 1μ_Bᵀ) + (n_A/n)·1δᵀ``.
Stacked, ``X̃ = P + u δᵀ`` where P holds the block-centered rows and
``u = [−(n_B/n)·1_A ; (n_A/n)·1_B]``. Every column of P sums to zero on each block, and u is
constant on each block, so ``Pᵀu = 0`` and

    X̃ᵀX̃ = PᵀP + (uᵀu)·δδᵀ = R_AᵀR_A + R_BᵀR_B + (n_A n_B / n)·δδᵀ,

because ``uᵀu = n_A n_B² / n² + n_B n_A² / n² = n_A n_B / n``. Hence the R factor of the
stacked matrix

    [ R_A ; R_B ; sqrt(n_A n_B / n) · δᵀ ]

is an R factor of X̃ (the same Gram matrix, so the same singular values and right singular
vectors) — the Chan–Golub–LeVeque scatter update written for square roots. In fact an
orthogonal map takes X̃ to that stack padded with zeros (P's column space and ``u/‖u‖`` are
orthogonal), so every step is an orthogonal transformation plus one rank-one row formed from a
difference of means: the result is as stable as Householder QR of X̃ itself, and no row block is
ever shifted by a large common mean before its QR (which would cancel when ``|μ| ≫ spread``).
A merge of m parts stacks their m R factors and the m − 1 correction rows of the sequential
pairwise merges, and does one QR.

Passes: 1 (R, Σ and V; the scores U = X̃V Σ⁻¹ would be one more pass and are never needed here).
Flops: 2·n·d² for the block QRs + tree QRs of stacks of at most ``SPLIT_EVERY``·d rows + d³ for
the final SVD. Memory per task: one float64 copy of a row block plus its R (≤ d² float64); a
merge task holds ``SPLIT_EVERY`` R factors. Pick when small eigenvalues matter (ill-conditioned
data): the covariance and Gram solvers square the condition number and lose eigenvalues below
~ε·λ_max, TSQR keeps singular values to ~ε·σ_max absolute.

Accuracy: backward stable; singular values carry absolute error ~ε·σ_max (relative error
ε·κ), against ε·κ² for the covariance path.

References
----------
J. Demmel, L. Grigori, M. Hoemmen, J. Langou, "Communication-optimal parallel and sequential QR
and LU factorizations", SIAM J. Sci. Comput. 34 (2012), doi:10.1137/080731992.
A. R. Benson, D. F. Gleich, J. Demmel, "Direct QR factorizations for tall-and-skinny matrices
in MapReduce architectures", IEEE BigData 2013, arXiv:1301.1071.
T. F. Chan, G. H. Golub, R. J. LeVeque, "Updating formulae and a pairwise algorithm for
computing sample variances", Stanford CS report STAN-CS-79-773 (1979).
"""

from __future__ import annotations

from dataclasses import dataclass

import dask
import numpy as np
from scipy.linalg import qr, svd

from .._graph import SizedByArrays, map_row_blocks, tree_reduce
from .._linalg import client_blas_threads
from .._validation import NonFinite, find_nonfinite, raise_if_nonfinite
from ._base import ComponentRequest, SolverResult

N_PASSES = 1
OPTIONS = ()


@dataclass(frozen=True)
class _RPart(SizedByArrays):
    """Count, mean and R factor of the rows centered on their own mean."""

    count: int
    mean: np.ndarray  # (d,)
    r: np.ndarray  # (m, d) upper trapezoidal, m ≤ d
    nonfinite: NonFinite


def _r_factor(stack: np.ndarray) -> np.ndarray:
    """R of a thin Householder QR: shape (min(m, d), d). ``stack`` is overwritten."""
    if stack.shape[0] == 0:
        return stack
    (r,) = qr(stack, mode="r", overwrite_a=True, check_finite=False)
    return r[: min(stack.shape)]


def _block_r(block: np.ndarray, row_offset: int) -> _RPart:
    nonfinite = find_nonfinite(block, row_offset, 0)
    x = np.array(block, dtype=np.float64)  # a private float64 copy; QR overwrites it
    if nonfinite.count:
        x[~np.isfinite(x)] = 0.0
    n_rows, n_features = x.shape
    if n_rows == 0:
        return _RPart(0, np.zeros(n_features), np.zeros((0, n_features)), nonfinite)
    mean = x.mean(axis=0)
    x -= mean
    return _RPart(n_rows, mean, _r_factor(x), nonfinite)


def _merge_r(parts: list[_RPart]) -> _RPart:
    """Stack the R factors and the Chan correction rows of the parts; one QR (see module doc)."""
    parts = [p for p in parts if p.count] or parts[:1]
    nonfinite = parts[0].nonfinite
    count, mean = parts[0].count, parts[0].mean
    rows = [parts[0].r]
    for part in parts[1:]:
        nonfinite = nonfinite.merge(part.nonfinite)
        total = count + part.count
        delta = part.mean - mean
        rows.append(part.r)
        rows.append((np.sqrt(count * part.count / total) * delta)[None, :])
        mean = mean + delta * (part.count / total)
        count = total
    stack = np.concatenate(rows, axis=0)
    r = _r_factor(stack) if len(parts) > 1 else stack
    return _RPart(count, mean, r, nonfinite)


def r_graph(X):
    """Delayed merged :class:`_RPart` of all rows of ``X`` (one pass when computed)."""
    return tree_reduce(map_row_blocks(X, _block_r, "tsqr-chunk"), _merge_r, "tsqr-merge")


def solve(X, request: ComponentRequest, *, random_state=None) -> SolverResult:
    """Fit PCA from the TSQR of the centered data (one pass).

    Parameters
    ----------
    X : dask.array.Array of shape (n_samples, n_features)
        float32 or float64, any row and column chunking (irregular included). Column pieces
        of a row block are concatenated inside its task (each chunk is still read once).
    request : ComponentRequest
    random_state : ignored
        Accepted so every solver has the same signature; this solver is deterministic.

    Returns
    -------
    SolverResult
        ``spectrum`` holds all min(n, d) eigenvalues (ddof=1), so fractions and ``"mle"`` work.
        ``info["singular_values"]`` are the singular values of the centered data.

    Notes
    -----
    Memory: the final R is at most d×d float64 (for wide data, min(n + merges, d)×d); the data
    is never held whole and no centered copy of it exists.
    """
    (part,) = dask.compute(r_graph(X))
    raise_if_nonfinite(part.nonfinite)
    n_samples, n_features = X.shape
    bound = min(n_samples, n_features)
    with client_blas_threads():
        _, singular_values, vt = svd(part.r, full_matrices=False, check_finite=False, lapack_driver="gesdd")
    if len(singular_values) < bound:  # only when n is tiny: pad with exact zeros
        singular_values = np.concatenate([singular_values, np.zeros(bound - len(singular_values))])
    singular_values = singular_values[:bound]
    ddof_count = max(n_samples - 1, 1)
    spectrum = singular_values**2 / ddof_count
    k = request.resolve(spectrum) if request.needs_spectrum else request.fixed()
    return SolverResult(
        components=vt[:k].copy(),
        explained_variance=spectrum[:k].copy(),
        mean=part.mean,
        n_samples=n_samples,
        # ‖R‖_F = ‖X̃‖_F (orthogonal invariance): the trace of the scatter, no extra work.
        total_variance=float(np.sum(part.r**2) / ddof_count),
        n_passes=N_PASSES,
        spectrum=spectrum,
        info={"singular_values": singular_values},
    )
