"""Count, mean and centered scatter of row blocks, merged exactly — pure NumPy.

A reduction is data here (as in flox): :func:`chunk_moments` turns one row block into a
:class:`Moments`, :func:`combine_moments` merges any number of them exactly, and the caller
finalises (covariance = scatter / (count - 1)). Everything is accumulated in float64 whatever the
input dtype, and every block is centered on its *own* mean before its scatter is formed, so no
step ever computes ``XᵀX/n - μμᵀ`` (which cancels catastrophically when ``|μ| ≫ spread``).

The merge is Chan, Golub & LeVeque (1979), "Updating formulae and a pairwise algorithm for
computing sample variances": for partial results A and B,
``n = n_A + n_B``, ``δ = μ_B - μ_A``, ``μ = μ_A + δ n_B / n``,
``M = M_A + M_B + δδᵀ n_A n_B / n``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import reduce

import numpy as np
from scipy.linalg.blas import dsyrk

from ._validation import NonFinite, find_nonfinite


@dataclass(frozen=True)
class Moments:
    """Sufficient statistics of a set of rows.

    Attributes
    ----------
    count : int
        Number of rows.
    mean : ndarray of shape (d,), float64
    scatter : ndarray of shape (d, d), float64
        ``Σ (x - mean)(x - mean)ᵀ`` over the rows; only the upper triangle is guaranteed
        (it is produced by ``syrk``) until :meth:`symmetric_scatter` is called.
    nonfinite : NonFinite
        How many NaN/±inf entries the rows held and where the first one is.
    finite_count : ndarray of shape (d,), int64, or None
        Per feature, how many rows held a finite value there; ``None`` means every entry was
        finite (so it equals ``count`` for every feature, and nothing was stored). Accumulated in
        the same pass as the moments, it tells features that are non-finite for *every* sample
        (e.g. land points of an ocean field; their moments are those of zeros, exactly 0) from
        partially missing ones — with no extra read. Non-finite entries are replaced by 0 before
        the moments are formed.
    """

    count: int
    mean: np.ndarray
    scatter: np.ndarray
    nonfinite: NonFinite
    finite_count: np.ndarray | None = field(default=None, compare=False)

    def finite_counts(self) -> np.ndarray:
        """Per-feature number of finite entries (``count`` everywhere when all were finite)."""
        if self.finite_count is None:
            return np.full(self.mean.shape[0], self.count, dtype=np.int64)
        return self.finite_count

    def symmetric_scatter(self) -> np.ndarray:
        """The full symmetric scatter matrix (copies the upper triangle into the lower)."""
        upper = np.triu(self.scatter)
        return upper + np.triu(upper, 1).T


def chunk_moments(block: np.ndarray, row_offset: int = 0, col_offset: int = 0) -> Moments:
    """Moments of one row block, in float64.

    Parameters
    ----------
    block : ndarray of shape (n_i, d)
        Any real dtype; converted to float64 here, one block at a time.
    row_offset, col_offset : int
        Position of ``block[0, 0]`` in the whole array, so a non-finite entry is reported at
        its global index.

    Notes
    -----
    Memory: one float64 copy of the block plus the d×d scatter. Cost: n_i·d² flops (``dsyrk``
    fills only the upper triangle, half the work of a general matrix product).
    """
    nonfinite = find_nonfinite(block, row_offset, col_offset)
    n_rows, n_features = block.shape
    if n_rows == 0:
        return Moments(0, np.zeros(n_features), np.zeros((n_features, n_features)), nonfinite)
    finite_count = None
    if nonfinite.count:
        # The fit will raise unless every non-finite entry sits in a wholly non-finite feature
        # (which the labeled layer drops); keep the statistics finite so the merge stays cheap.
        finite = np.isfinite(block)
        finite_count = finite.sum(axis=0, dtype=np.int64)
        block = np.where(finite, block, 0)
    x = np.asarray(block, dtype=np.float64)
    mean = x.mean(axis=0)
    centered = x - mean
    # centered.T is Fortran-ordered (a view, no copy), so BLAS computes (centered.T)(centered.T)ᵀ.
    scatter = dsyrk(1.0, centered.T, trans=0, lower=0)
    return Moments(n_rows, mean, scatter, nonfinite, finite_count)


def _merge_finite_counts(a: Moments, b: Moments):
    if a.finite_count is None and b.finite_count is None:
        return None
    return a.finite_counts() + b.finite_counts()


def _merge_two(a: Moments, b: Moments) -> Moments:
    finite_count = _merge_finite_counts(a, b)
    if a.count == 0:
        return Moments(b.count, b.mean, b.scatter, a.nonfinite.merge(b.nonfinite), finite_count)
    if b.count == 0:
        return Moments(a.count, a.mean, a.scatter, a.nonfinite.merge(b.nonfinite), finite_count)
    count = a.count + b.count
    delta = b.mean - a.mean
    mean = a.mean + delta * (b.count / count)
    scatter = a.scatter + b.scatter + np.outer(delta, delta) * (a.count * b.count / count)
    return Moments(count, mean, scatter, a.nonfinite.merge(b.nonfinite), finite_count)


def combine_moments(parts) -> Moments:
    """Merge a sequence of :class:`Moments` exactly (Chan–Golub–LeVeque)."""
    parts = list(parts)
    if not parts:
        raise ValueError("combine_moments needs at least one Moments object")
    return reduce(_merge_two, parts)
