"""Exact PCA through the n×n Gram matrix, for fewer samples than features (the N < D trick).

With X̃ the centered data (n×d), the centered Gram matrix G = X̃X̃ᵀ (n×n) has the same non-zero
eigenvalues as the scatter X̃ᵀX̃ (d×d). For an eigenpair (λ_i, v_i) of G, the principal axis is
u_i = X̃ᵀv_i / √λ_i, the sample-covariance eigenvalue is λ_i / (n − 1) — the source material's
u_i = X̃ᵀv_i / √(Nλ_i) with its λ_i = λ_i(G)/N.

Pass 1 reads the array in column strips (every row of a range of features): each strip is
shifted by its first row, then centered on the column means of the shifted values (accurate to
ε·spread whatever the mean: :func:`~daskpca.passes._moments.center_block`), before its Gram
block is formed, so nothing cancels
(forming XXᵀ and then applying H·(XXᵀ)·H with H = I − 11ᵀ/n would equal it in exact arithmetic
but loses ~|μ|²/spread² of relative accuracy in floating point). The n×n blocks are summed in a
tree; means and the total variance come from the same pass.

Pass 2 reads the strips again for the components X̃ᵀV_k Λ_k^{-1/2} (a d×k product, kept on the
client: k·d float64).

Passes: 2. Flops: n²·d (``syrk``) + 2·n·d·k, and locally the k leading eigenpairs of the n×n
matrix: block Lanczos (BLAS-3 products) checked by one Cholesky factorisation (⅓·n³,
:func:`~daskpca.passes._linalg.top_eigenpairs`) for a fixed k — a dense ``eigh`` (~4·n³, half of
it memory-bound) took most of a Gram fit at n = 8760 — and the dense ``eigh`` when every
eigenvalue is needed (a variance fraction, "mle"). Memory per task: a leaf its column
strip as read, one float64 copy and n² float64; a pairwise merge 3·n² float64. Pick when n is up
to ~20k and d is large. Column strips need every row of a range of columns: data stored in
row-only chunks (n_i × d: one time step per chunk) is first copied into strips
(:class:`~daskpca.passes._geometry.ColumnStrips`: one read of the input and one write; both
passes then read the copy, ``info["relayout"]`` says so and ``n_passes`` counts the one read of
the input) — the shared step of every road that reads strips (the declaration's
``reads_strips``; :func:`daskpca._features.solve` runs it around ``solve``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import partial

import dask
import numpy as np

from ..passes import (LANCZOS_MAX_FRACTION, LANCZOS_MIN_SIZE, MERGE_SPLIT_EVERY, Passes, SizedByArrays, backend_of,
                      center_block, eigh_descending, eigh_descending_on_device, like, map_column_blocks, namespace,
                      on_device, solve_on_device, to_host, top_eigenpairs, tree_reduce)
from .._validation import NonFinite, raise_if_nonfinite
from ._base import FLOAT64, ComponentRequest, Cost, DeviceCost, PlanInput, SolverDeclaration, SolverResult
from ._bounds import gram_bound

N_PASSES = 2
#: Exact to round-off: meets any ``tol`` (so a ``tol`` given with this solver is not ignored).
EXACT = True
#: Eigenvalues from X̃ᵀX̃ / X̃X̃ᵀ: the estimator's ill-conditioning check applies.
SQUARES_THE_DATA = True


@dataclass(frozen=True)
class _GramPart(SizedByArrays):
    """Centered Gram contribution of some column strips, with their column means."""

    gram: np.ndarray | None  # (n, n), upper triangle valid; None once solved at the root (_GramSolved)
    # [(col_offset, shift (d_j,), offset (d_j,)), ...]: each strip's column means as shift + offset
    # (its first row plus the mean of the rows less it; see _moments' module notes)
    means: list
    nonfinite: NonFinite
    # [(col_offset, ndarray (d_j,) int64)]: finite entries per column, counted in the same pass
    # (lets the labeled layer drop wholly-NaN features without another read). Empty when every
    # strip was finite.
    finite_counts: list = field(default_factory=list)

    def column_means(self) -> np.ndarray:
        """Means of all columns, in column order."""
        shift, offset = self.column_shifts()
        return shift + offset

    def column_shifts(self) -> tuple[np.ndarray, np.ndarray]:
        """``(shift, offset)`` of all columns, in column order: their means unrounded."""
        ordered = sorted(self.means, key=lambda means: means[0])
        return np.concatenate([m[1] for m in ordered]), np.concatenate([m[2] for m in ordered])

    def column_finite_counts(self, n_samples: int) -> np.ndarray:
        """Finite entries per column (``n_samples`` for columns of strips that were all finite)."""
        counts = np.full(sum(len(m[1]) for m in self.means), n_samples, dtype=np.int64)
        for offset, c in self.finite_counts:
            counts[offset : offset + len(c)] = c
        return counts


def _strip_gram(strip: np.ndarray, col_offset: int) -> _GramPart:
    # A column that is non-finite everywhere becomes zeros: it adds exactly 0 to the Gram.
    part = center_block(strip, 0, col_offset)
    finite_counts = [] if part.finite_count is None else [(col_offset, part.finite_count)]
    # NumPy recognises A·Aᵀ and calls BLAS syrk (measured 2× faster than SciPy's dsyrk here).
    gram = part.centered @ part.centered.T
    return _GramPart(gram, [(col_offset, part.shift, part.offset)], part.nonfinite, finite_counts)


def _sum_parts(parts: list[_GramPart]) -> _GramPart:
    gram = parts[0].gram.copy()
    for part in parts[1:]:
        gram += part.gram
    nonfinite = parts[0].nonfinite
    for part in parts[1:]:
        nonfinite = nonfinite.merge(part.nonfinite)
    return _GramPart(
        gram,
        [m for part in parts for m in part.means],
        nonfinite,
        [c for part in parts for c in part.finite_counts],
    )


def _strip_components(strip: np.ndarray, col_offset: int, shift: np.ndarray, offset: np.ndarray,
                      basis: np.ndarray) -> np.ndarray:
    """(k, d_j) columns of basisᵀ·X̃ for one column strip, centered as in pass 1 (shift, then
    offset: a rounded mean would leave each column off by ~ε·|μ|); on the strip's device, small,
    to the host. Row-major k×d_j, so the joined components are too: the transpose of d_j×k pieces
    left a Fortran-ordered k×d that every later step read with a stride of k (the sign flip's
    argmax took 24 ms of a 0.23 s fit at k = 20, d = 200 000 on an H200's host; 4 ms row-major)."""
    xp = namespace(strip)
    columns = slice(col_offset, col_offset + strip.shape[1])
    centered = xp.subtract(strip, like(shift[columns], strip), dtype=xp.float64)
    centered -= like(offset[columns], strip)
    return to_host(like(basis, strip).T @ centered)


def fuses_features(spec) -> bool:
    """Masks and weights ride in pass 1; standardizing needs the variances before it (no)."""
    return not spec.standardize


def solve(X, request: ComponentRequest, *, random_state=None, features=None) -> SolverResult:
    """Fit PCA through the centered Gram matrix of ``X`` (two passes).

    Parameters
    ----------
    X : dask.array.Array of shape (n_samples, n_features)
        float32 or float64; best stored in column strips (chunks spanning all rows).
    request : ComponentRequest
    random_state : int, optional
        Only used to complete the basis when more components are asked for than the data's
        rank (directions of zero variance are then arbitrary).
    features : FeatureSpec, optional
        Weights and the mask of wholly-missing features (not ``standardize``): pass 1 reads the
        weighted columns, whose all-NaN ones are zero-filled and add exactly 0 to the Gram
        matrix, and counts finite entries per column; pass 2 reads the kept columns only.

    Returns
    -------
    SolverResult
    """
    if features is not None:
        X = features.weigh(X)
    passes = Passes("gram", N_PASSES)
    with passes.read():
        (part,) = dask.compute(gram_graph(X, None if request.needs_spectrum else request.fixed()))
    solved = part if isinstance(part, _GramSolved) else None
    part = part.part if solved is not None else part
    if features is None:
        raise_if_nonfinite(part.nonfinite)
        return result_from_part(X, part, request, passes, random_state=random_state, solved=solved)
    n_samples = X.shape[0]
    stage = features.resolve(part.column_finite_counts(n_samples), n_samples)
    # Dropped columns were zero-filled in pass 1: the Gram, hence its eigenpairs, are the same.
    result = result_from_part(X, part, stage.narrow(request), passes, random_state=random_state, columns=stage.keep,
                              solved=solved)
    return replace(result, features=stage)


def gram_graph(X, keep: int | None = None):
    """Delayed ``_GramPart`` of ``X``: pass 1 (centered Gram, column means, finite counts).

    Pairwise merges (as the covariance tree): a merge task holds three n×n float64 matrices
    where an 8-way one held nine — the Gram is what limits n on small workers. Device strips:
    the root also solves the n×n eigenproblem there where that is cheaper (:func:`_solved_at_root`),
    and hands back the ``keep`` leading eigenvectors (None: every one, where k is chosen from
    the spectrum).
    """
    leaves = map_column_blocks(X, _strip_gram, "gram-chunk")
    finish = None if on_device(X).on_host else partial(_solved_at_root, keep=keep)
    return tree_reduce(leaves, _sum_parts, "gram-merge", split_every=MERGE_SPLIT_EVERY, finish=finish)


@dataclass(frozen=True)
class _GramSolved(SizedByArrays):
    """Pass 1 with its n×n eigenproblem solved where the Gram was summed (a device)."""

    part: _GramPart  # its gram left where it was summed: only its trace moves
    trace: float  # of the Gram: the model's total variance
    values: np.ndarray  # (n,) every eigenvalue, descending, ≥ 0
    vectors: np.ndarray  # (n, kept), the leading eigenvectors as columns


def _solved_at_root(part: _GramPart, keep: int | None = None):
    """The root's last step on a device: every eigenpair of the symmetrised n×n Gram by the
    device's dense solver (cuSOLVER ``syevd``) where :func:`~daskpca.passes._device.solve_on_device`
    says that is cheaper than the host's (Lanczos or LAPACK) — else the part as it is. A dense
    solver is exact to round-off, as the host's certified Lanczos is. Only the ``keep`` leading
    eigenvectors (None: all), every eigenvalue and the Gram's trace move to the host: not the two
    n×n matrices (64 MB at n = 2000)."""
    backend = backend_of(part.gram)
    if part.nonfinite.count or not solve_on_device(backend, part.gram.shape[0]):
        return part
    values, vectors = eigh_descending_on_device((part.gram + part.gram.T) / 2, keep)
    return _GramSolved(replace(part, gram=None), float(backend.xp.trace(part.gram)), values, vectors)


def result_from_part(X, part: _GramPart, request: ComponentRequest, passes: Passes, *, random_state=None,
                     columns=None, solved: _GramSolved | None = None) -> SolverResult:
    """Pass 2 from a computed pass-1 result: eigenproblem of the Gram matrix, then components
    (reported to ``passes``, the solve's pass reporter).

    ``columns`` (boolean, one per column of ``X``) keeps only those features. Dropping a column
    that was non-finite for every sample is exact: it was zero-filled in pass 1, so it added
    nothing to the centered Gram matrix. The caller checks non-finite entries beforehand.
    """
    shift, offset = part.column_shifts()
    if columns is not None:
        columns = np.asarray(columns, dtype=bool)
        X = X[:, columns]
        shift, offset = shift[columns], offset[columns]
    mean = shift + offset
    n_samples, n_features = X.shape
    ddof_count = max(n_samples - 1, 1)

    gram = None if solved is not None else (part.gram + part.gram.T) / 2  # exactly symmetric for the eigensolver
    trace = solved.trace if solved is not None else float(np.trace(gram))
    if solved is not None:  # every pair, solved on the device at the root (see _solved_at_root)
        values, vectors, eigensolver = solved.values, solved.vectors, "device"
        spectrum = values[: min(n_samples, n_features)] / ddof_count if request.needs_spectrum else None
        k = request.resolve(spectrum) if request.needs_spectrum else request.fixed()
    elif request.needs_spectrum:  # a variance fraction or "mle": every eigenvalue, dense LAPACK
        values, vectors = eigh_descending(gram)
        spectrum, eigensolver = values[: min(n_samples, n_features)] / ddof_count, "lapack"
        k = request.resolve(spectrum)
    else:  # k pairs only: Lanczos, checked to LAPACK's accuracy (see top_eigenpairs)
        k = request.fixed()
        values, vectors, eigensolver = top_eigenpairs(gram, min(k, n_samples), with_next=True)  # and λ̂_{k+1}
        spectrum = None

    # Directions with (numerically) zero variance have no X̃ᵀv/√λ: complete them afterwards.
    tolerance = values[0] * max(n_samples, n_features) * np.finfo(np.float64).eps if len(values) else 0.0
    n_defined = int(np.sum(values[:k] > tolerance))
    basis = vectors[:, :n_defined] / np.sqrt(values[:n_defined])
    pieces = map_column_blocks(X, _strip_components, "gram-components", shift, offset, basis)
    if n_defined:
        with passes.read():
            components = np.concatenate(dask.compute(*pieces), axis=1)
    else:
        components = np.zeros((0, n_features))
    if n_defined < k:
        components = _complete_orthonormal(components, k, random_state)
    return SolverResult(
        components=components,
        explained_variance=np.concatenate([values[:k], np.zeros(k - min(k, len(values)))]) / ddof_count,
        mean=mean,
        n_samples=n_samples,
        total_variance=trace / ddof_count,
        n_passes=N_PASSES if n_defined else 1,
        spectrum=spectrum,
        info={"error_bound": gram_bound(values, k, n_samples, n_features), "eigensolver": eigensolver,
              # λ_{k+1} (an upper estimate from Lanczos): the gap the input-precision term needs, as the
              # covariance road gives it (without it that term fell back on the discarded variance).
              **({"next_variance": float(values[k]) / ddof_count} if len(values) > k else {})},
    )


def _complete_orthonormal(rows: np.ndarray, k: int, random_state) -> np.ndarray:
    """Extend orthonormal rows (m, d) to k orthonormal rows with arbitrary extra directions."""
    m, d = rows.shape
    rng = np.random.default_rng(random_state)
    extra = rng.standard_normal((k - m, d))
    extra -= (extra @ rows.T) @ rows
    q, _ = np.linalg.qr(extra.T)
    return np.vstack([rows, q.T])


# ---------------------------------------------------------------------------------- declaration

#: The host's rate for the Gram road's leaves: float64 ``syrk`` on column strips. SciPy's
#: ``dsyrk`` did the 8760² × 65 160 product (5·10¹² multiply-adds) in 67 s on the development
#: machine, NumPy's X·Xᵀ in 51 s.
GRAM_FLOPS_PER_SECOND = 75e9
#: The local step: block Lanczos for the k leading pairs of the n×n matrix (≈ this many vector
#: products with it, in blocks of k + 10, 2·n² flops each) and the Cholesky check (⅓·n³), see
#: ``_linalg.top_eigenpairs``. (ARPACK's single-vector Lanczos made 236 products at n = 3000,
#: k = 20, each a memory-bound sweep: 17–20 s at n = 8760, 4× this model.)
LANCZOS_PRODUCTS = 300


def local_flops(n: int, k: int) -> float:
    """Flops of the local eigensolve: Lanczos and its Cholesky check for a fixed k (see
    LANCZOS_PRODUCTS), a dense eigh (~4·n³) when Lanczos does not apply."""
    if n >= LANCZOS_MIN_SIZE and k <= LANCZOS_MAX_FRACTION * n:
        return LANCZOS_PRODUCTS * 2.0 * n * n + n**3 / 3
    return 4.0 * n**3


def cost(shape: PlanInput) -> Cost:
    """Two passes. A leaf holds its strip, one float64 copy and its n×n product; a merge its
    MERGE_SPLIT_EVERY inputs and one output; each task returns an n×n Gram. One task per column
    strip (input stored by rows only is re-laid out into strips first: the declaration's
    ``reads_strips``, priced by :func:`~daskpca.passes._geometry.relaid_out`)."""
    n, d, k, itemsize = shape.n, shape.d, shape.k, shape.itemsize
    flops = n * n * d + 2 * n * d * k + local_flops(n, k)
    merge = (MERGE_SPLIT_EVERY + 1) * n * n * FLOAT64
    return Cost(N_PASSES, flops, max(n * shape.col_strip * (itemsize + FLOAT64) + n * n * FLOAT64, merge),
                result_size=n * n, tasks=len(shape.chunks[1]))


def device_cost(shape: PlanInput, flops: float, task: int, device) -> DeviceCost:
    """On a device the n×n eigenproblem is the device's dense solver or the host's block Lanczos,
    whichever is cheaper."""
    local = local_flops(shape.n, shape.k)
    return DeviceCost(flops - local, min(local / GRAM_FLOPS_PER_SECOND, device.local_seconds(shape.n, "eigh")), task)


DECLARATION = SolverDeclaration(
    "gram", solve, cost=cost, summary="the n×n Gram matrix (the N < D trick)",
    reason=lambda n, d: f"n_samples ({n}) < n_features ({d}): two passes through the {n}×{n} Gram matrix (the N < D trick)",
    flop_rate=GRAM_FLOPS_PER_SECOND, device_rate="flops", on_device=device_cost, exact=EXACT, exact_for="wide",
    squares_the_data=SQUARES_THE_DATA, fuses_features=fuses_features, reads_strips=True,
)
