r"""Exact PCA from a tall-skinny QR (TSQR) of the centered data, in one pass.

Each row block X_i (n_i rows) is centered on its *own* mean μ_i and reduced to the R factor of
its Householder QR, ``X_i − 1μ_iᵀ = Q_i R_i``. The R factors are merged in a tree of QRs
(:func:`daskpca.passes._graph.tree_reduce`); the final R (at most d×d) has the same singular values and
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
The means are held as ``shift + offset`` (a data row plus the mean of the rows less it) and δ
formed from the exact difference of the shifts (:func:`~daskpca.passes._moments.merge_shifted_means`):
a rounded mean would carry ~ε·|μ| into every δ, the correction row's only error.

The merge tree
--------------
Merges are pairwise (``MERGE_SPLIT_EVERY`` = 2): a merge task QRs ``[R_A; correction; R_B]``
with LAPACK's ``tpqrt``, the Householder QR of a triangle stacked on a pentagonal block, which
skips the known zeros (~⅔·d³ flops instead of ~3⅓·d³ for a dense QR of the 2d+1 rows) and
works in place on private copies, so no stack of R factors is ever concatenated. It used to be
one dense QR of 8 stacked R factors: at 4e4 × 2000 float32 in 20 row blocks such a merge peaked
at 33·d² float64 (its 8 inputs, the concatenated stack, f2py's Fortran copy of it and
``qr(mode="r")``'s ``triu`` of the whole stack, whose first d rows it kept alive as its result),
two of them ran at once and the fit peaked at 71·d² RSS; now 4·d² and 15·d².

Passes: 1 (R, Σ and V; the scores U = X̃V Σ⁻¹ would be one more pass and are never needed here).
Flops: 2·n·d² for the block QRs + (n_blocks − 1)·⅔·d³ for the merges + d³ for the final SVD.
Memory per task, float64: a leaf holds its block, one copy of it (factored in place) and its
min(n_i, d)×d R; a merge holds its two R factors, the d×d triangle that becomes its result and
the block stacked under it, ≤ 4·d². Between tasks, finished R factors wait for their sibling:
on the threaded scheduler at most log2(n_blocks) + 2 of them at once (measured: 5 at 8 blocks,
7 at 20, 12 at 1024; with a fan-in of 8 it was 9, 11 and 24). Any log-depth tree run depth-first
keeps one finished subtree per level; a constant count would need a chain, whose merges run one
after another. Pick this solver when small eigenvalues matter (ill-conditioned data): the
covariance and Gram solvers square the condition number and lose eigenvalues below
~ε·λ_max, TSQR keeps singular values to ~ε·σ_max absolute.

Accuracy: backward stable; singular values carry absolute error ~ε·σ_max (relative error
ε·κ), against ε·κ² for the covariance path.

Device blocks (CuPy): a device has no ``tpqrt``, so a merge is one dense QR of its parts' R
factors stacked with their correction rows, and it takes 8 parts at a time (all at once: the
rows ``√n_i·(μ_i − μ)ᵀ`` against the pooled mean μ, the formula above summed over the parts,
each mean taken about the first part's shift so that no difference carries ~ε·|μ|;
~(2·parts − ⅔)·d³ flops where pairwise merges of as many parts cost ~3⅓·d³ each). The root task
takes the SVD of the final R on the device when that is cheaper than moving R and taking it on
the host (:func:`~daskpca.passes._device.solve_on_device`); the k leading right singular
vectors and every singular value then move.

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
from scipy.linalg import get_lapack_funcs, svd

from functools import partial

from ..passes import (NUMPY, Passes, SizedByArrays, backend_of, client_blas_threads, device_fan_in,
                      device_merge_fan_in, map_row_blocks, merge_shifted_means, on_device, row_shift, solve_on_device,
                      tree_reduce)
from .._validation import NonFinite, find_nonfinite, raise_if_nonfinite
from ._base import FLOAT64, ComponentRequest, Cost, DeviceCost, PlanInput, SolverDeclaration, SolverResult
from ._bounds import exact_bound

N_PASSES = 1
#: Exact to round-off: meets any ``tol`` (so a ``tol`` given with this solver is not ignored).
EXACT = True
OPTIONS = ()


#: Fan-in of TSQR's merge tree: pairwise, not ``_graph.SPLIT_EVERY``. A merge task then holds
#: two d×d inputs instead of 8, and a finished R waits for one sibling instead of seven, so
#: merges run as soon as two neighbouring leaves are done (measured at 4e4 × 2000 in 20 blocks:
#: at most 7 R factors alive at once, 15 with fan-in 8).
MERGE_SPLIT_EVERY = 2
#: Block size of the structured QR (LAPACK ``tpqrt``): its T workspace is this many rows × d.
_TPQRT_BLOCK = 32

_tpqrt = get_lapack_funcs(("tpqrt",), dtype=np.float64)[0]


@dataclass(frozen=True)
class _RPart(SizedByArrays):
    """Count, mean and R factor of the rows centered on their own mean."""

    count: int
    shift: np.ndarray  # (d,): the mean is shift + offset (see _moments' module notes)
    offset: np.ndarray  # (d,)
    r: np.ndarray  # (m, d) upper trapezoidal, m ≤ d, zeros below the diagonal; owns its memory
    nonfinite: NonFinite

    @property
    def mean(self) -> np.ndarray:
        return self.shift + self.offset


def _r_factor(a: np.ndarray) -> np.ndarray:
    """R of the Householder QR of ``a`` (m×d): a new (min(m, d), d) array.

    ``a`` is overwritten. Pass a NumPy array Fortran-ordered float64: LAPACK then factors it in
    place (anything else is first copied by f2py). The R is copied out rather than returned as a
    view, which would keep the whole m×d array alive as long as the R. A device array is
    factored on its device (:meth:`~daskpca.passes._device.ArrayBackend.r_factor`).
    """
    return backend_of(a).r_factor(a)


def _stacked_r(r_a: np.ndarray, r_b: np.ndarray, correction: np.ndarray) -> np.ndarray:
    """R factor of the stack ``[r_a; correction; r_b]``; the inputs are left untouched.

    Parameters
    ----------
    r_a, r_b : ndarray of shape (m_a, d), (m_b, d)
        Upper trapezoidal R factors (m ≤ d, zeros below the diagonal).
    correction : ndarray of shape (d,)
        The Chan correction row (see the module docstring).

    Returns
    -------
    ndarray of shape (min(m_a + m_b + 1, d), d), upper trapezoidal.

    Notes
    -----
    When the result has d rows this is LAPACK's ``tpqrt``: the Householder QR of a d×d upper
    triangle stacked on a pentagonal block (a dense row, then an upper trapezoid), computing
    only the entries that are not known zeros — the same reflections as a dense QR of the
    stack, in ~⅔·d³ flops instead of ~3⅓·d³, with no (2d+1)×d stack formed. The taller factor
    becomes the triangle, zero-padded to d×d if it has fewer rows (zero rows change no
    reflection). Memory: the inputs plus the d×d result and the (m_b + 1)×d block, ≤ 4·d²
    float64 in all. Row order does not change RᵀR, so the rows may be arranged this way.
    """
    if r_a.shape[0] < r_b.shape[0]:
        r_a, r_b = r_b, r_a
    (m_a, d), m_b = r_a.shape, r_b.shape[0]
    backend = backend_of(r_a)
    if backend is not NUMPY:  # a device has no tpqrt: one dense QR of the stack, on the device
        xp = backend.xp
        return _r_factor(xp.concatenate([r_a, correction[None, :], r_b], axis=0))
    if m_a + m_b + 1 < d:  # wide data: a stack shorter than d rows, one dense QR of it
        stack = np.empty((m_a + m_b + 1, d), order="F")
        stack[:m_a], stack[m_a], stack[m_a + 1 :] = r_a, correction, r_b
        return _r_factor(stack)
    triangle = np.zeros((d, d), order="F")  # private copies: the inputs are dask's results
    triangle[:m_a] = r_a
    pentagon = np.empty((m_b + 1, d), order="F")
    pentagon[0], pentagon[1:] = correction, r_b
    r, _, _, info = _tpqrt(m_b, min(_TPQRT_BLOCK, d), triangle, pentagon, overwrite_a=1, overwrite_b=1)
    if info:  # pragma: no cover - only an illegal argument
        raise RuntimeError(f"LAPACK tpqrt failed (info={info})")
    return r


def _block_r(block: np.ndarray, row_offset: int) -> _RPart:
    """Leaf: count, mean and R of one row block (n_i×d) centered on its own mean.

    Memory: the block, one float64 copy of it (factored in place) and the min(n_i, d)×d R.
    """
    nonfinite = find_nonfinite(block, row_offset, 0)
    backend = backend_of(block)
    xp = backend.xp
    # A private float64 copy in LAPACK's (Fortran) order, so that geqrf overwrites it in place
    # instead of f2py making a second copy.
    x = backend.float64_copy(block, order="F")
    if nonfinite.count:
        x[~xp.isfinite(x)] = 0.0
    n_rows, n_features = x.shape
    if n_rows == 0:
        return _RPart(0, xp.zeros(n_features), xp.zeros(n_features), xp.zeros((0, n_features)), nonfinite)
    shift = row_shift(x)
    x -= shift  # exact where |μ| ≫ spread: the offset below is accurate to ε·spread
    offset = x.mean(axis=0)
    x -= offset
    return _RPart(n_rows, shift, offset, _r_factor(x), nonfinite)


def _merge_r(parts: list[_RPart]) -> _RPart:
    """Fold the parts into one, a pair at a time: R of ``[R_acc; correction; R_part]`` each step.

    Parameters
    ----------
    parts : list of _RPart
        Any number (the tree passes ``MERGE_SPLIT_EVERY``); empty parts are skipped.

    Returns
    -------
    _RPart
        R of at most min(rows + corrections, d)×d. One part is returned as it is (its arrays
        shared, not copied).

    Notes
    -----
    Each step is :func:`_stacked_r`: at most the two current R factors plus ~2·d² of workspace
    are alive, on top of the parts passed in.
    """
    parts = [p for p in parts if p.count] or parts[:1]
    nonfinite = parts[0].nonfinite
    count, shift, offset, r = parts[0].count, parts[0].shift, parts[0].offset, parts[0].r
    for part in parts[1:]:
        nonfinite = nonfinite.merge(part.nonfinite)
        total = count + part.count
        delta, offset = merge_shifted_means(count, shift, offset, part.count, part.shift, part.offset)
        r = _stacked_r(r, part.r, np.sqrt(count * part.count / total) * delta)
        count = total
    return _RPart(count, shift, offset, r, nonfinite)


def _merge_r_stacked(parts: list[_RPart]) -> _RPart:
    """Merge the parts in one dense QR of their R factors and correction rows against the pooled
    mean (the device's merge, see the module notes); one part is returned as it is."""
    parts = [p for p in parts if p.count] or parts[:1]
    nonfinite = parts[0].nonfinite
    for part in parts[1:]:
        nonfinite = nonfinite.merge(part.nonfinite)
    if len(parts) == 1:
        return _RPart(parts[0].count, parts[0].shift, parts[0].offset, parts[0].r, nonfinite)
    xp = backend_of(parts[0].r).xp
    count = sum(p.count for p in parts)
    shift = parts[0].shift  # each mean about it: (shift_i − shift) exact, plus the offset
    about = [(p.shift - shift) + p.offset for p in parts]
    offset = sum(mean * (p.count / count) for mean, p in zip(about, parts))
    corrections = xp.stack([(mean - offset) * np.sqrt(p.count) for mean, p in zip(about, parts)], axis=0)
    return _RPart(count, shift, offset, _r_factor(xp.concatenate([corrections, *(p.r for p in parts)], axis=0)), nonfinite)


def r_graph(X, finish=None):
    """Delayed merged :class:`_RPart` of all rows of ``X`` (one pass when computed).

    One leaf per row block, then a binary tree of pairwise merges (``MERGE_SPLIT_EVERY``);
    device blocks: wider merges, one QR each (:func:`_merge_r_stacked`). ``finish``: run in the
    root task on the final R (:func:`svd_at_root`).
    """
    leaves = map_row_blocks(X, _block_r, "tsqr-chunk")
    d = X.shape[1]
    backend = on_device(X)
    if backend.on_host:
        fan_in, merge = MERGE_SPLIT_EVERY, _merge_r
    else:
        part = min(X.shape[0], d) * d * 8  # one R factor
        fan_in, merge = device_merge_fan_in(backend, MERGE_SPLIT_EVERY, part, copies=3), _merge_r_stacked
    return tree_reduce(leaves, merge, "tsqr-merge", split_every=fan_in, finish=finish)


@dataclass(frozen=True)
class _SvdAtRoot(SizedByArrays):
    """The final R's SVD taken on its device in the root task: what the root hands back."""

    count: int
    mean: np.ndarray  # (d,)
    singular_values: np.ndarray  # every one of R's
    vt: np.ndarray  # (k, d): the leading right singular vectors
    sum_of_squares: float  # ‖R‖_F² = ‖X̃‖_F²
    nonfinite: NonFinite


def svd_at_root(part: _RPart, request: ComponentRequest, n_samples: int):
    """The root's last step: the SVD of the final R on its device when that is cheaper
    (:func:`~daskpca.passes._device.solve_on_device`), k resolved from its singular values
    (moved to the host) and only the k leading right singular vectors kept; else ``part`` as it
    is (as for non-finite input: the client raises)."""
    backend = backend_of(part.r)
    n_features = part.r.shape[1]
    if part.nonfinite.count or not solve_on_device(backend, n_features, "svd"):
        return part
    _, singular_values, vt = backend.svd(part.r)
    singular_values = backend.to_host(singular_values)
    k = _spectrum(singular_values, n_samples, n_features, request)[2]
    return _SvdAtRoot(part.count, part.mean, singular_values, vt[:k], float(backend.xp.sum(part.r**2)), part.nonfinite)


def _spectrum(singular_values: np.ndarray, n_samples: int, n_features: int, request: ComponentRequest):
    """``(singular values, spectrum, k)``: R's singular values padded or cut to min(n, d), the
    covariance's eigenvalues (ddof=1) and the k the request resolves to."""
    bound = min(n_samples, n_features)
    if len(singular_values) < bound:  # only when n is tiny: pad with exact zeros
        singular_values = np.concatenate([singular_values, np.zeros(bound - len(singular_values))])
    singular_values = singular_values[:bound]
    spectrum = singular_values**2 / max(n_samples - 1, 1)
    k = request.resolve(spectrum) if request.needs_spectrum else request.fixed()
    return singular_values, spectrum, k


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
    Memory: tasks as in the module docstring (≤ 4·d² float64 for a merge); the final R is at
    most min(n + n_blocks − 1, d)×d float64 (a correction row per merge), and its SVD on the
    client holds ~7·d² more (gesdd's copy, U, Vᵀ and workspace). The data is never held whole
    and no centered copy of it exists.
    """
    n_samples, n_features = X.shape
    with Passes("tsqr", N_PASSES).read():
        (part,) = dask.compute(r_graph(X, finish=partial(svd_at_root, request=request, n_samples=n_samples)))
    raise_if_nonfinite(part.nonfinite)
    if isinstance(part, _SvdAtRoot):  # taken on the device, in the root task
        singular_values, vt, sum_of_squares = part.singular_values, part.vt, part.sum_of_squares
    else:
        with client_blas_threads():
            _, singular_values, vt = svd(part.r, full_matrices=False, check_finite=False, lapack_driver="gesdd")
        sum_of_squares = np.sum(part.r**2)
    singular_values, spectrum, k = _spectrum(singular_values, n_samples, n_features, request)
    ddof_count = max(n_samples - 1, 1)
    return SolverResult(
        components=vt[:k].copy(),
        explained_variance=spectrum[:k].copy(),
        mean=part.mean,
        n_samples=n_samples,
        # ‖R‖_F = ‖X̃‖_F (orthogonal invariance): the trace of the scatter, no extra work.
        total_variance=float(sum_of_squares / ddof_count),
        n_passes=N_PASSES,
        spectrum=spectrum,
        # Exact: round-off over the gap, in singular values (Wedin: the data are not squared).
        info={"singular_values": singular_values, "error_bound": exact_bound(singular_values, k, n_samples, n_features)},
    )


# ---------------------------------------------------------------------------------- declaration


def cost(shape: PlanInput) -> Cost:
    """One pass: a leaf's QR (2·n_i·d·min(n_i, d)) and the pairwise merge tree
    (MERGE_SPLIT_EVERY = 2): n_blocks − 1 structured QRs (LAPACK tpqrt) of a d×d triangle stacked
    on an R factor of r rows, ~⅔·d·r² flops each — exact for blocks of ≥ d rows (r = d), where it
    is a third of a leaf's 2·n_i·d². Each task returns an R factor (≤ min(n, d)×d).

    The largest task. A leaf: its block, one float64 copy factored in place, its R (and
    np.triu's one-byte mask of it). A merge: its two R factors (≤ min(n, d)×d), the private d×d
    triangle that becomes its result and the (m + 1)×d block stacked under it, 4·d² float64
    (measured at 4e4 × 2000 in 20 blocks: leaf 2.64·d², merge 4.03·d²; plan 2.63·d², 4·d²)."""
    n, d = shape.n, shape.d
    r_rows = min(shape.row_block, d)
    tree_flops = (shape.row_tasks - 1) * 2 / 3 * d * r_rows * r_rows
    leaf = shape.block_in + shape.block64 + r_rows * d * (FLOAT64 + 1)
    merge = 4 * min(n, d) * d * FLOAT64
    return Cost(N_PASSES, 2 * n * d * min(n, d) + tree_flops, max(leaf, merge), result_size=min(n, d) * d)


def device_cost(shape: PlanInput, flops: float, task: int, device) -> DeviceCost:
    """On a device the SVD of R is solved where the cost rule puts it; the device's merges are
    wider (three partials a merge)."""
    size = min(shape.n, shape.d)
    fan_in = device_fan_in(device.task_bytes, MERGE_SPLIT_EVERY, size * shape.d * FLOAT64, copies=3)
    return DeviceCost(flops, device.local_seconds(size, "svd"), max(task, (3 * fan_in + 1) * size * shape.d * FLOAT64))


DECLARATION = SolverDeclaration(
    "tsqr", solve, cost=cost, summary="one pass of TSQR", device_rate="qr-flops", on_device=device_cost,
    options=OPTIONS, exact=EXACT,
)
