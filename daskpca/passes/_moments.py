"""Count, mean and centered scatter of row blocks, merged exactly — in the block's own array library.

A reduction is data here (as in flox): :func:`chunk_moments` turns one row block into a
:class:`Moments`, :func:`combine_moments` merges any number of them exactly, and the caller
finalises (covariance = scatter / (count - 1)). Everything is accumulated in float64 whatever the
input dtype, and every block is centered on its *own* mean before its scatter is formed, so no
step ever computes ``XᵀX/n - μμᵀ`` (which cancels catastrophically when ``|μ| ≫ spread``).

Shifted means: a mean is held as ``shift + offset``
--------------------------------------------------
Centering on the block's own mean is not enough when ``|μ| ≫ spread``: a mean computed as
``Σx/n`` carries an error of ~ε·|μ| (2e-6 at |μ| = 1e10), and the merge's ``δ = μ_B − μ_A``, a
difference of two such means of size ~spread/√n, inherits it whole — the scatter's rank-one
corrections, hence the components, were off by ~ε·|μ|/spread (sin θ 1e-4 at μ = 1e10, σ = 1e-2).
So every part holds its mean as a *shift* taken from the data (the block's first row, an exact
float) plus an *offset*, the mean of ``x − shift``: that subtraction is exact when
``|μ| ≫ spread`` (Sterbenz: x and the shift are within a factor 2), so the offset is accurate to
~ε·spread. Merges take ``δ = (shift_B − shift_A) + (offset_B − offset_A)`` — the first difference
is again exact — and keep A's shift (:func:`merge_shifted_means`). Only the final mean is rounded
once, ``shift + offset``. The kernels use plain array operators (``x - shift``, ``x.sum(axis=0)``),
so they port to other array libraries.

The merge is Chan, Golub & LeVeque (1979), "Updating formulae and a pairwise algorithm for
computing sample variances": for partial results A and B,
``n = n_A + n_B``, ``δ = μ_B - μ_A``, ``μ = μ_A + δ n_B / n``,
``M = M_A + M_B + δδᵀ n_A n_B / n``.

Device blocks (CuPy) are reduced on their device, merges included, through the block's namespace
(:mod:`daskpca.passes._device`); the root of the merge tree hands the result to the host.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import reduce

import numpy as np

from ._device import backend_of, namespace
from ._graph import SizedByArrays
from .._validation import NonFinite, find_nonfinite


@dataclass(frozen=True)
class Moments(SizedByArrays):
    """Sufficient statistics of a set of rows.

    Attributes
    ----------
    count : int
        Number of rows.
    mean : ndarray of shape (d,), float64
    scatter : ndarray of shape (d, d), float64
        ``Σ (x - mean)(x - mean)ᵀ`` over the rows.
    nonfinite : NonFinite
        How many NaN/±inf entries the rows held and where the first one is.
    finite_count : ndarray of shape (d,), int64, or None
        Per feature, how many rows held a finite value there; ``None`` means every entry was
        finite (so it equals ``count`` for every feature, and nothing was stored). Accumulated in
        the same pass as the moments, it tells features that are non-finite for *every* sample
        (e.g. land points of an ocean field; their moments are those of zeros, exactly 0) from
        partially missing ones — with no extra read. Non-finite entries are replaced by 0 before
        the moments are formed.
    shift, offset : ndarray of shape (d,), float64, or None
        The mean as ``shift + offset`` before rounding (see the module notes); ``mean`` is their
        rounded sum. ``None`` (moments made from a mean alone, e.g. a saved model's): the shift
        is the mean and the offset 0.
    """

    count: int
    mean: np.ndarray
    scatter: np.ndarray
    nonfinite: NonFinite
    finite_count: np.ndarray | None = field(default=None, compare=False)
    shift: np.ndarray | None = field(default=None, compare=False)
    offset: np.ndarray | None = field(default=None, compare=False)

    def shifted_mean(self) -> tuple[np.ndarray, np.ndarray]:
        """``(shift, offset)`` with mean = shift + offset (see the module notes)."""
        if self.shift is None:
            return self.mean, self.mean * 0.0
        return self.shift, self.offset

    def finite_counts(self) -> np.ndarray:
        """Per-feature number of finite entries (``count`` everywhere when all were finite)."""
        if self.finite_count is None:
            xp = namespace(self.mean)
            return xp.full(self.mean.shape[0], self.count, dtype=xp.int64)
        return self.finite_count

    def symmetric_scatter(self) -> np.ndarray:
        """The scatter matrix made exactly symmetric (BLAS may leave round-off asymmetries)."""
        return (self.scatter + self.scatter.T) / 2


def row_shift(block) -> np.ndarray:
    """The shift of a block (n_i, d): its first row in float64, non-finite entries read as 0.

    A row of the data itself, so ``x − shift`` is exact for every x within a factor 2 of it —
    every value of a column whose mean is large against its spread (Sterbenz's lemma) — and
    otherwise rounded relative to ``|x − shift|``, a spread, never the mean. Plain array methods
    only (no ``np.asarray``): the block may be another library's array.
    """
    xp = namespace(block)
    if block.shape[0] == 0:  # no row to take: nothing to shift
        return block.sum(axis=0, dtype=xp.float64)
    shift = block[0].astype(xp.float64)
    return xp.where(xp.isfinite(shift), shift, 0.0)


def merge_shifted_means(count_a, shift_a, offset_a, count_b, shift_b, offset_b):
    """``(delta, offset)`` of the merge of two parts whose means are ``shift + offset``:
    ``delta = μ_B − μ_A`` formed without rounding either mean (``shift_B − shift_A`` is exact
    when the shifts are data of one column with a large mean), and the pooled mean's offset about
    ``shift_a``, which the merged part keeps. ``count_*`` may be per-column arrays (0 allowed)."""
    delta = (shift_b - shift_a) + (offset_b - offset_a)
    total = count_a + count_b
    return delta, offset_a + delta * (count_b / (total if np.ndim(total) == 0 else np.maximum(total, 1)))


@dataclass(frozen=True)
class CenteredBlock:
    """A block converted to float64 and centered on its own column means (see :func:`center_block`).

    ``mean`` = ``shift + offset`` rounded; ``shift`` (the block's first row) and ``offset`` (the
    mean of ``block − shift``) hold it unrounded, for merges (see the module notes)."""

    centered: np.ndarray
    mean: np.ndarray
    nonfinite: NonFinite
    finite_count: np.ndarray | None
    shift: np.ndarray | None = None
    offset: np.ndarray | None = None


def center_block(block: np.ndarray, row_offset: int = 0, col_offset: int = 0) -> CenteredBlock:
    """Convert a block to float64 and center its columns, checking for NaN/±inf on the way.

    The block is shifted by its first row (:func:`row_shift`) while it is converted — one
    ``subtract`` into a new float64 array, one block-sized buffer — and the column means of
    the shifted block (the offsets, accurate to ε·spread whatever the mean) are subtracted in
    place. A NaN or ±inf anywhere in a column makes its offset non-finite, so the full
    element-wise scan runs only then — the clean path costs nothing extra. Non-finite entries
    are then counted, located (global row, column), counted per feature and replaced by 0 so the
    statistics stay finite (the caller raises, or the labeled layer drops features that are
    non-finite everywhere: their zeros add exactly nothing). Written against the block's
    namespace: a device block stays there.
    """
    xp = namespace(block)
    shift = row_shift(block)
    centered = xp.subtract(block, shift, dtype=xp.float64)
    offset = centered.mean(axis=0)
    nonfinite, finite_count = NonFinite(), None
    if not xp.isfinite(offset).all():
        nonfinite = find_nonfinite(block, row_offset, col_offset)
        if nonfinite.count:
            finite = xp.isfinite(block)
            finite_count = finite.sum(axis=0, dtype=xp.int64)
            centered = xp.where(finite, centered, 0.0 - shift)  # zero-filled entries, shifted
            offset = centered.mean(axis=0)
    centered -= offset
    return CenteredBlock(centered, shift + offset, nonfinite, finite_count, shift, offset)


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
    Memory: one float64 copy of the block plus the d×d scatter. Cost: n_i·d² flops (NumPy
    recognises ``Aᵀ·A`` and calls BLAS ``syrk``, half the work of a general product; measured
    ~10 % faster than SciPy's ``dsyrk`` wrapper here, and it returns the full symmetric matrix).
    """
    n_rows, n_features = block.shape
    if n_rows == 0:
        xp = namespace(block)
        return Moments(0, xp.zeros(n_features), xp.zeros((n_features, n_features)), NonFinite())
    part = center_block(block, row_offset, col_offset)
    scatter = part.centered.T @ part.centered
    return Moments(n_rows, part.mean, scatter, part.nonfinite, part.finite_count, part.shift, part.offset)


def _merge_finite_counts(parts):
    if all(p.finite_count is None for p in parts):
        return None
    return sum(p.finite_counts() for p in parts)


#: Fan-in of the covariance merge tree. A merge task holds its inputs and one output, each d×d:
#: pairwise merges keep that at 3·d² float64 (2.4 GB at d = 10⁴, where 8-way merges needed 9·d²,
#: 7.2 GB). The tree is deeper (log₂ instead of log₈ of the blocks) but does the same n_blocks − 1
#: additions of d×d matrices either way.
MERGE_SPLIT_EVERY = 2


def _parts_to_merge(parts, merge: str):
    """``(counted, nonfinite, finite_count)``: the parts that hold rows (the first part when none
    does), and what every part's non-finite records and finite counts merge to."""
    parts = list(parts)
    if not parts:
        raise ValueError(f"{merge} needs at least one Moments object")  # a bug, not a user error
    nonfinite = reduce(lambda a, b: a.merge(b), (p.nonfinite for p in parts))
    return [p for p in parts if p.count] or parts[:1], nonfinite, _merge_finite_counts(parts)


def combine_moments(parts) -> Moments:
    """Merge a sequence of :class:`Moments` exactly (Chan–Golub–LeVeque).

    The merged scatter is accumulated in one new d×d array (the inputs are never modified — a
    retried task must see them intact): a copy of the first, then each further part's scatter and
    its rank-one mean correction, added in place (BLAS ``dger``, no d×d temporary). Peak memory:
    the inputs plus one d×d matrix. Each step is the two-part formula applied to the pooled
    running result, so the sum equals the pairwise merge to round-off.
    """
    counted, nonfinite, finite_count = _parts_to_merge(parts, "combine_moments")
    first = counted[0]
    if len(counted) == 1:
        return replace(first, nonfinite=nonfinite, finite_count=finite_count)
    count, (shift, offset) = first.count, first.shifted_mean()
    backend = backend_of(first.scatter)
    scatter = backend.float64_copy(first.scatter, order="F")
    for part in counted[1:]:
        total = count + part.count
        delta, offset = merge_shifted_means(count, shift, offset, part.count, *part.shifted_mean())
        scatter += part.scatter
        # scatter += (count·part.count/total)·δδᵀ, in place (NumPy: BLAS dger); δδᵀ is symmetric,
        # so the Fortran order dger updates in place is the same matrix whatever order the inputs had.
        scatter = backend.rank_one_update(scatter, count * part.count / total, delta)
        count = total
    return Moments(count, shift + offset, scatter, nonfinite, finite_count, shift, offset)


def combine_moments_pooled(parts) -> Moments:
    """Merge a sequence of :class:`Moments` exactly, all at once: the device's merge.

    ``M = Σ M_i + Σ n_i (μ_i − μ)(μ_i − μ)ᵀ`` with μ the pooled mean — Chan–Golub–LeVeque's
    two-part formula summed over the parts (the corrections of all the parts are one product
    D·Dᵀ, D = [√n_i (μ_i − μ)], d×parts: one GEMM instead of a d×d rank-one update per part).
    The means are taken about the first part's shift, ``(shift_i − shift) + offset_i`` (the first
    difference exact, see the module notes), so no μ_i − μ carries ~ε·|μ|. Written against the
    parts' namespace (the covariance tree uses it for device partials,
    :func:`daskpca.solvers.covariance.moments_graph`; host partials keep :func:`combine_moments`,
    bit for bit). Memory: the inputs, the d×d sum and d×parts.
    """
    counted, nonfinite, finite_count = _parts_to_merge(parts, "combine_moments_pooled")
    first = counted[0]
    if len(counted) == 1:
        return replace(first, nonfinite=nonfinite, finite_count=finite_count)
    xp = namespace(first.scatter)
    count = sum(p.count for p in counted)
    shift, _ = first.shifted_mean()
    about = [(part_shift - shift) + part_offset for part_shift, part_offset in (p.shifted_mean() for p in counted)]
    offset = sum(mean * (p.count / count) for mean, p in zip(about, counted))
    spread = xp.stack([(mean - offset) * np.sqrt(p.count) for mean, p in zip(about, counted)], axis=1)  # (d, parts)
    scatter = spread @ spread.T
    for part in counted:
        scatter += part.scatter
    return Moments(count, shift + offset, scatter, nonfinite, finite_count, shift, offset)
