"""Pieces shared by the iterative solvers (randomized, als, ppca).

- :class:`ColumnMoments`: per-feature count, mean and centered sum of squares of row blocks,
  merged exactly (the diagonal of the Chan–Golub–LeVeque scatter merge, with per-column counts
  so that NaN can mean "missing"). It gives the mean and the total variance in the first pass
  for d floats per task instead of the covariance solver's d².
- :func:`subspace_sine`, :func:`orthonormal_columns`, :func:`as_generator`: small local helpers.
- :func:`sketch_result`: the randomized and block Krylov solvers' result from the sketch kernel's
  last root (:mod:`daskpca.passes._sketch`; the pass machinery sits below the solvers' contract,
  so the :class:`SolverResult` is built here).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce

import numpy as np

from ._base import SolverResult, open_checkpoint
from ..passes import (SizedByArrays, backend_of, map_row_blocks, merge_shifted_means, namespace, row_shift,
                      tall_norm2, tall_qr, tree_reduce)
from .._validation import NonFinite, find_nonfinite
from ..exceptions import InputError


@dataclass(frozen=True)
class ColumnMoments(SizedByArrays):
    """Per-feature sufficient statistics of a set of rows.

    Attributes
    ----------
    count : ndarray of shape (d,), int64
        Entries seen in each column (all rows unless NaN is read as missing).
    mean : ndarray of shape (d,), float64
        Mean of each column over its observed entries (0 where none was observed).
    m2 : ndarray of shape (d,), float64
        ``Σ (x - mean)²`` of each column over its observed entries.
    nonfinite : NonFinite
        NaN/±inf entries (with ``missing=True``: ±inf only, NaN being a missing value).
    shift, offset : ndarray of shape (d,), float64, or None
        The mean unrounded, ``shift + offset`` (see :mod:`daskpca.passes._moments`): a value of
        the column plus the mean of the values less it. ``None``: the shift is the mean.
    """

    count: np.ndarray
    mean: np.ndarray
    m2: np.ndarray
    nonfinite: NonFinite
    shift: np.ndarray | None = None
    offset: np.ndarray | None = None

    def shifted_mean(self) -> tuple[np.ndarray, np.ndarray]:
        """``(shift, offset)`` with mean = shift + offset."""
        if self.shift is None:
            return self.mean, self.mean * 0.0
        return self.shift, self.offset

    def variance(self) -> np.ndarray:
        """Per-column sample variance (ddof=1; 0 for columns with fewer than two entries)."""
        return np.where(self.count > 1, self.m2 / np.maximum(self.count - 1, 1), 0.0)


def column_moments(block: np.ndarray, row_offset: int = 0, col_offset: int = 0, *, missing: bool = False) -> ColumnMoments:
    """:class:`ColumnMoments` of one block (float64 whatever the input dtype).

    With ``missing=True`` NaN entries are skipped (counted per column) and only ±inf is reported
    as non-finite; otherwise every NaN/±inf is reported and replaced by 0 so the merge stays
    finite (the fit raises afterwards). Each column is shifted by a value of its own (the first
    observed one) before its mean is taken, so the mean is accurate to ε·spread however large
    (see :mod:`daskpca.passes._moments`). In the block's array library (a device block stays there).
    """
    xp = namespace(block)
    x = xp.asarray(block, dtype=xp.float64)
    if missing:
        observed = ~xp.isnan(x)
        nonfinite = find_nonfinite(xp.where(observed, x, 0.0), row_offset, col_offset)
        if nonfinite.count:
            observed &= xp.isfinite(x)
        count = observed.sum(axis=0).astype(xp.int64)
        x = xp.where(observed, x, 0.0)
        # The first observed value of each column (0 where none is): a value of the data.
        shift = x[observed.argmax(axis=0), xp.arange(x.shape[1])] if x.shape[0] else xp.zeros(x.shape[1])
        shifted = xp.where(observed, x - shift, 0.0)
        offset = shifted.sum(axis=0) / xp.maximum(count, 1)
        m2 = (xp.where(observed, shifted - offset, 0.0) ** 2).sum(axis=0)
    else:
        nonfinite = find_nonfinite(block, row_offset, col_offset)
        if nonfinite.count:
            x = xp.where(xp.isfinite(x), x, 0.0)
        count = xp.full(x.shape[1], x.shape[0], dtype=xp.int64)
        if not x.shape[0]:
            return ColumnMoments(count, xp.zeros(x.shape[1]), xp.zeros(x.shape[1]), nonfinite)
        shift = row_shift(x)
        shifted = x - shift
        offset = shifted.mean(axis=0)
        m2 = ((shifted - offset) ** 2).sum(axis=0)
    return ColumnMoments(count, shift + offset, m2, nonfinite, shift, offset)


def _merge_columns(a: ColumnMoments, b: ColumnMoments) -> ColumnMoments:
    count = a.count + b.count
    xp = namespace(count)
    safe = xp.maximum(count, 1)
    shift_a, offset_a = a.shifted_mean()
    shift_b, offset_b = b.shifted_mean()
    # A column seen by no row of a part has no shift there: take the other part's.
    shift_a = xp.where(a.count > 0, shift_a, shift_b)
    offset_a = xp.where(a.count > 0, offset_a, 0.0)
    shift_b, offset_b = xp.where(b.count > 0, shift_b, shift_a), xp.where(b.count > 0, offset_b, 0.0)
    delta, offset = merge_shifted_means(a.count, shift_a, offset_a, b.count, shift_b, offset_b)
    m2 = a.m2 + b.m2 + delta**2 * (a.count * b.count / safe)
    return ColumnMoments(count, shift_a + offset, m2, a.nonfinite.merge(b.nonfinite), shift_a, offset)


def combine_column_moments(parts) -> ColumnMoments:
    """Merge :class:`ColumnMoments` exactly (Chan–Golub–LeVeque, column by column)."""
    return reduce(_merge_columns, list(parts))


def column_stats_graph(X):
    """Delayed :class:`ColumnMoments` of ``X``, NaN/±inf as missing: the feature stage's statistics
    pass (:mod:`daskpca._features`), also MCA's Krylov path's first read (:mod:`.cross_covariance`)."""
    parts = map_row_blocks(X, _column_stats_block, "feature-stats-chunk")
    return tree_reduce(parts, combine_column_moments, "feature-stats-merge")


#: Rows of a host block whose statistics are taken at a time (:func:`_column_stats_block`): ~4 MiB
#: of float64, so the elementwise steps (convert, mask, shift, square: ten or so) run on
#: cache-sized temporaries instead of as many whole-block float64 copies, the pieces merged
#: exactly (Chan). Measured on 40 000 × 5000 float32 in 2000-row blocks (MCA's statistics' pass):
#: 5.3 s a pass against a 0.6 s read before.
STATS_SLAB_BYTES = 4 * 2**20


def _column_stats_block(block: np.ndarray, row_offset: int) -> ColumnMoments:
    n_rows, n_features = block.shape
    step = max(1, STATS_SLAB_BYTES // (8 * max(n_features, 1)))
    if n_rows > step and backend_of(block).on_host:  # a device block: whole (its kernels are its own)
        return combine_column_moments(_column_stats_rows(block[start:start + step], row_offset + start)
                                      for start in range(0, n_rows, step))
    return _column_stats_rows(block, row_offset)


def _column_stats_rows(rows: np.ndarray, row_offset: int) -> ColumnMoments:
    xp = namespace(rows)
    x = xp.asarray(rows, dtype=xp.float64)
    if bool(xp.isfinite(x).all()):  # nothing missing (the common case): the same moments in fewer steps
        return column_moments(x, row_offset)
    # ±inf counts as missing too: such a feature is dropped if it is never finite.
    return column_moments(xp.where(xp.isfinite(x), x, xp.nan), row_offset, missing=True)


def orthonormal_columns(matrix: np.ndarray) -> np.ndarray:
    """Orthonormal basis (thin Householder QR, by row pieces) of the columns of a tall matrix."""
    return tall_qr(matrix)[0]


def subspace_sine(basis_a: np.ndarray, basis_b: np.ndarray) -> float:
    """Sine of the largest principal angle between two column spaces with orthonormal bases.

    Computed as ``‖B − A(AᵀB)‖₂`` rather than ``sqrt(1 − cos²)``, which cannot resolve angles
    below ~1e-8 in float64.
    """
    residual = basis_b - basis_a @ (basis_a.T @ basis_b)
    return tall_norm2(residual)


def as_generator(random_state):
    """A NumPy random generator from ``None``, an int, a ``Generator`` or a ``RandomState``."""
    if isinstance(random_state, (np.random.Generator, np.random.RandomState)):
        return random_state
    return np.random.default_rng(random_state)


def resolve_iteration_options(max_iter, tol, *, default_max_iter: int, default_tol: float) -> tuple[int, float]:
    """Validate ``max_iter`` (int ≥ 1) and ``tol`` (float ≥ 0); ``None`` selects the default."""
    max_iter = default_max_iter if max_iter is None else max_iter
    tol = default_tol if tol is None else tol
    if isinstance(max_iter, bool) or not isinstance(max_iter, (int, np.integer)) or max_iter < 1:
        raise InputError(f"max_iter={max_iter!r}: expected an int >= 1 (e.g. 200).")
    if isinstance(tol, bool) or not isinstance(tol, (int, float, np.floating, np.integer)) or not tol >= 0:
        raise InputError(f"tol={tol!r}: expected a float >= 0 (e.g. 1e-8).")
    return int(max_iter), float(tol)


def initial_basis(init, n_components: int, n_features: int, random_state, *, name: str = "init") -> np.ndarray:
    """Starting d×k orthonormal basis: ``init`` (k × d rows, a warm start) or Gaussian."""
    if init is None:
        start = as_generator(random_state).standard_normal((n_features, n_components))
    else:
        start = np.asarray(init, dtype=np.float64)
        if start.shape != (n_components, n_features):
            raise InputError(
                f"{name} has shape {start.shape}; expected (n_components, n_features) = "
                f"({n_components}, {n_features}), e.g. the components_ of an earlier fit."
            )
        if not np.all(np.isfinite(start)):
            raise InputError(f"{name} contains NaN or ±inf; pass finite starting components.")
        start = start.T
    return orthonormal_columns(start)


def start_iterations(solver: str, X, request, *, max_iter, tol, init, random_state, checkpoint,
                     default_max_iter: int, default_tol: float):
    """What every iterative solver resolves first: ``(k, max_iter, tol, checkpoint_store)``.

    The checkpoint's fingerprint covers the input, the solver, k, the iteration limits, the
    starting components and the seed, so a stored state is resumed only by the same job.
    """
    k = request.fixed()
    max_iter, tol = resolve_iteration_options(max_iter, tol, default_max_iter=default_max_iter, default_tol=default_tol)
    store = open_checkpoint(
        checkpoint, X, solver=solver, n_components=k, max_iter=max_iter, tol=tol,
        init=None if init is None else np.asarray(init), random_state=random_state,
    )
    return k, max_iter, tol, store


def sketch_result(components, singular_values, root, total_m2: float, n_passes: int, info: dict) -> SolverResult:
    """The :class:`SolverResult` of a sketching solver: singular values of X̃ become variances
    (ddof = 1), the last pass's root gives the mean, the first pass's total sum of squares the
    total variance (``root``: the last pass's merged sketch, its count and mean)."""
    ddof_count = max(root.count - 1, 1)
    return SolverResult(
        components=components,
        explained_variance=singular_values**2 / ddof_count,
        mean=root.mean,
        n_samples=root.count,
        total_variance=float(total_m2 / ddof_count),
        n_passes=n_passes,
        spectrum=None,
        info=info,
    )
