r"""Randomized PCA: subspace iteration with re-orthonormalisation, one pass per power iteration.

Halko, Martinsson & Tropp (2011), Algorithm 4.4 ("randomized subspace iteration") on the
centered data X̃ = X − 1μᵀ, with ℓ = k + n_oversamples columns and q power iterations::

    Ω₀ = Gaussian d×ℓ
    for j = 0 … q:                    (one pass each: q + 1 passes in all)
        Q_j = orth(X̃Ω_j)              n×ℓ, Householder TSQR over the row blocks
        H_j = X̃ᵀQ_j                   d×ℓ
        Ω_{j+1} = orth(H_j)           on the client (d×ℓ)
    B = H_qᵀ = Q_qᵀX̃ = Û S Vᵀ          (SVD of the ℓ×d matrix on the client)

Every multiply is followed by an orthonormalisation, as the algorithm requires: without it the
power iterates collapse onto the leading singular vector and everything below
~ε^{1/(2q+1)}·σ₁ is lost (the failure of dask's ``svd_compressed`` default and of the randomized
PCA built on it). The subspaces are exactly those of the textbook two-passes-per-iteration
scheme (range of (X̃ᵀX̃)^{q+1}Ω₀ for V) — what changes is that a row block is read *once* per
iteration instead of twice.

One pass per iteration: X̃ᵀ·orth(X̃Ω) without forming Q
-------------------------------------------------------
The textbook scheme needs Q before it can form X̃ᵀQ, hence a second read. Here each row block
makes both products while it is in memory, and Q is never formed:

- leaf (a slab of ~16 MiB of rows X_i, centered on its *own* mean μ_i: C_i = X_i − 1μ_iᵀ)::

      Ŷ_i = C_iΩ = Q_i R_i   (Householder QR with Q_i ⟂ 1),   H_i = C_iᵀQ_i   (d×ℓ)

  A task's row block is split into such slabs and they are merged inside the task (below), so
  each slab is converted to float64 once and both products read it from cache; the slab is
  shifted by a nearby vector rather than its exact mean, and the QR projects the ones direction
  out (see :func:`_sketch_slab`).

- merge (parts a, b, … into c, with μ_c their pooled mean and δ_a = μ_a − μ_c): the rows of
  part a, re-centered on μ_c, are C_a + 1δ_aᵀ, and their sketch is Ŷ_a + 1(Ωᵀδ_a)ᵀ
  = [Q_a, 1/√n_a]·[R_a; √n_a(Ωᵀδ_a)ᵀ]. The basis blockdiag([Q_a, 1/√n_a]) is orthonormal
  because Q_a ⟂ 1, so with the thin QR  [R_a; √n_a(Ωᵀδ_a)ᵀ; R_b; …] = P R_c ::

      R_c = R_c,     H_c = [H_a, √n_a δ_a, H_b, √n_b δ_b, …]·P

  (the columns of the first factor are exactly (C_a + 1δ_aᵀ)ᵀ[Q_a, 1/√n_a], …). P is taken
  orthogonal to the all-ones direction of c (see :func:`_qr_after_direction`), which keeps
  Q_c ⟂ 1 for the next level.

The root holds H = X̃ᵀQ with Q the TSQR factor of X̃Ω — only orthogonal transformations and
Householder QRs, so it is exactly as stable as forming Q first and multiplying, and nothing
n-sized exists between passes (the textbook scheme keeps the n×ℓ Q). The same tree carries the
count, mean and total sum of squares (Chan–Golub–LeVeque), so the mean, the total variance and
the NaN/±inf check come with the first pass, and centering is implicit: each block is centered on
its own mean, the correction rides in the merges (no ``XΩ − 1(μᵀΩ)`` cancellation when
``|μ| ≫ spread``, and no centered copy of X anywhere).

Costs
-----
Passes: exactly q + 1. Flops: (q + 1)·4·n·d·ℓ (two products per slab per pass) + O(n·ℓ²) for the
slab QRs + O(d·ℓ²) per merge (≈ (ℓ + 1)/(2·slab rows) of the products) and on the client.
Memory per task: the input row block, one ~16 MiB float64 slab, and ``SPLIT_EVERY`` d×(ℓ+1)
partial factors; a merge task holds ``SPLIT_EVERY`` d×(ℓ+1) matrices.

Checkpoints (``checkpoint=PATH``): after every pass but the last, the small state — Ω_{j+1}
(d×ℓ), the power iterations and passes done — is written atomically to PATH (see
:mod:`daskpca.store.checkpoint`). A rerun of the same job (same input name/shape/chunks/dtype, k, p, q
and seed) loads it and makes only the remaining passes; the result is bit-for-bit that of an
uninterrupted run. The file is removed right before ``solve`` returns.

Accuracy: the error in the leading subspace decays like (σ_{ℓ+1}/σ_k)^{2q+1}. With the default
q ("auto": 7 if k < 0.1·min(n, d), else 4, as scikit-learn) it matches scikit-learn's
``randomized_svd`` with the same q and oversampling, or does better (scikit-learn normalises the
power iterates with LU, which does not keep them orthonormal).

References
----------
N. Halko, P.-G. Martinsson, J. A. Tropp, "Finding structure with randomness: probabilistic
algorithms for constructing approximate matrix decompositions", SIAM Review 53 (2011) 217–288,
doi:10.1137/090771806.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from numbers import Integral

import dask
import numpy as np
from scipy.linalg import qr, svd

from ..store.checkpoint import open_checkpoint, seed_fingerprint
from ._graph import SPLIT_EVERY, SizedByArrays, map_row_blocks, tree_reduce
from .._validation import NonFinite, find_nonfinite, raise_if_nonfinite
from ._base import ComponentRequest, SolverResult
from ._iterative import as_generator
from ..exceptions import InputError

OPTIONS = ("n_oversamples", "n_power_iter", "checkpoint")


def resolve_power_iter(n_power_iter, n_components: int, n_samples: int, n_features: int) -> int:
    """q from ``n_power_iter``: an int ≥ 0, or "auto" (scikit-learn's rule: 7 for small k, else 4)."""
    if isinstance(n_power_iter, str):
        if n_power_iter != "auto":
            raise InputError(f"n_power_iter={n_power_iter!r}: expected 'auto' or an int >= 0 (e.g. 4).")
        return 7 if n_components < 0.1 * min(n_samples, n_features) else 4
    if isinstance(n_power_iter, bool) or not isinstance(n_power_iter, Integral) or n_power_iter < 0:
        raise InputError(f"n_power_iter={n_power_iter!r}: expected 'auto' or an int >= 0 (e.g. 4).")
    return int(n_power_iter)


def _check_oversamples(n_oversamples) -> int:
    if isinstance(n_oversamples, bool) or not isinstance(n_oversamples, Integral) or n_oversamples < 0:
        raise InputError(f"n_oversamples={n_oversamples!r}: expected an int >= 0 (default 10).")
    return int(n_oversamples)


# ---- the reduction: one pass gives X̃ᵀ·orth(X̃Ω) ----------------------------------------------


@dataclass(frozen=True)
class _Sketch(SizedByArrays):
    """A set of rows, summarised about their own column mean μ_g (X̂_g = X_g − 1μ_gᵀ).

    ``r`` (m×ℓ) and the implicit Q_g (rows×m, orthogonal to the all-ones vector) factor the
    sketch X̂_gΩ = Q_g·r; ``ht`` = Q_gᵀX̂_g (m×d, the transpose of H = X̂_gᵀQ_g, kept row-major
    so merges stack rows, a plain copy). ``m2`` is the total Σ‖x − μ_g‖² (the trace of the
    scatter), for the total variance.
    """

    count: int
    mean: np.ndarray  # (d,)
    m2: float
    r: np.ndarray  # (m, ℓ)
    ht: np.ndarray  # (m, d)
    nonfinite: NonFinite


def _qr_after_direction(direction: np.ndarray, matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Householder thin QR ``[direction/‖direction‖, matrix] = P·R``.

    P's first column is ±direction/‖direction‖ (R₀₀ = ±1), so P[:, 1:] is orthogonal to
    ``direction`` and P[:, 1:]·R[1:, 1:] = (I − uuᵀ)·matrix with u the unit direction: the part
    of ``matrix`` orthogonal to it, and R[0, 1:] = uᵀ·matrix the part dropped. Used where the
    columns are orthogonal to ``direction`` up to round-off (a merge: a plain thin QR of a matrix
    with no more rows than columns would return a square P that spans the direction too), and
    where they are not and the projection is the point (a slab, see :func:`_sketch_slab`).
    """
    stacked = np.concatenate([(direction / np.linalg.norm(direction))[:, None], matrix], axis=1)
    return qr(stacked, mode="economic", overwrite_a=True, check_finite=False)


#: Rows converted to float64 at a time inside a leaf: ~16 MiB, so a slab is converted once and
#: both of its products read it from cache (see :func:`_sketch_block`).
SLAB_BYTES = 16 * 2**20


def _row_slabs(n_rows: int, n_features: int, sketch_size: int):
    """Row slices of ~SLAB_BYTES of float64, and at least 2·(ℓ + 1) rows so that a slab's QR
    factor (ℓ×ℓ) stays small next to the slab itself."""
    step = max(2 * (sketch_size + 1), SLAB_BYTES // (8 * max(n_features, 1)))
    return [slice(start, min(start + step, n_rows)) for start in range(0, n_rows, step)]


#: Rows averaged for a block's shift (see :func:`_sketch_slab`): near the mean is all it needs.
SHIFT_ROWS = 64

_thread_scratch = threading.local()


def _scratch(n_rows: int, n_features: int) -> np.ndarray:
    """A float64 (n_rows, n_features) buffer reused by the leaves that run on this thread.

    A fresh ~16 MiB array per leaf is a fresh mmap: 4096 page faults each time. The buffer is
    kept per thread (leaves run concurrently) and replaced when a larger one is needed; slabs
    larger than 2·SLAB_BYTES (very wide data, where a slab is 2·(ℓ + 1) rows) are not kept, so
    a thread never holds more than that after a fit.
    """
    size = n_rows * n_features
    if 8 * size > 2 * SLAB_BYTES:
        return np.empty((n_rows, n_features))
    buffer = getattr(_thread_scratch, "buffer", None)
    if buffer is None or buffer.size < size:
        buffer = _thread_scratch.buffer = np.empty(size)
    return buffer[:size].reshape(n_rows, n_features)


def _sketch_slab(
    rows: np.ndarray, row_offset: int, omega: np.ndarray, shift: np.ndarray, scratch: np.ndarray, with_m2: bool
) -> _Sketch:
    """The :class:`_Sketch` of a few rows about their own mean, made in the float64 ``scratch``.

    The rows are converted into ``scratch`` and shifted by ``shift`` (d,), C = rows − 1·shiftᵀ,
    and both products then read C while it is in cache. C is not centered on the slab's own mean
    (that would cost two more sweeps over it); the ones direction is projected out instead:

        [1/√m, C·Ω] = P·R  (Householder),   Cᵀ·P = [Cᵀ1/(√m·R₀₀), Cᵀ·Q]

    Q = P[:, 1:] ⟂ 1 and Q·R[1:, 1:] = (I − 11ᵀ/m)·C·Ω is the sketch of the centered rows, so
    R[1:, 1:] is the centered R factor and CᵀQ equals (centered rows)ᵀQ. The first column of
    CᵀP gives the column sums, hence the mean, for free. ``shift`` is any vector near the rows'
    mean (the mean of the block's first SHIFT_ROWS rows); it only keeps the subtraction free of
    cancellation.

    NaN/±inf entries make the column sums non-finite: they are then counted, zeroed and the
    slab is redone (the fit raises after the pass). ``with_m2`` adds the sum of squares about
    the mean (one more sweep), needed from one pass only.
    """
    n_rows = rows.shape[0]
    with np.errstate(invalid="ignore", over="ignore"):  # NaN/±inf input is detected just below
        centered = scratch[:n_rows]
        centered[...] = rows  # convert, then shift in place: ~2× faster than a mixed-dtype subtract
        centered -= shift
        basis, r = _qr_after_direction(np.ones(n_rows), centered @ omega)
        ht = basis.T @ centered  # (Pᵀ·C, row-major) runs ~1.6× faster than Cᵀ·P here
        column_sums = ht[0] * (r[0, 0] * np.sqrt(n_rows))
    nonfinite = NonFinite()
    if not np.isfinite(column_sums).all():
        nonfinite = find_nonfinite(rows, row_offset, 0)
        finite_rows = np.where(np.isfinite(rows), rows, 0)
        part = _sketch_slab(finite_rows, row_offset, omega, np.nan_to_num(shift, posinf=0.0, neginf=0.0), scratch, with_m2)
        return replace(part, nonfinite=nonfinite)
    m2 = float(np.vdot(centered, centered)) - float(column_sums @ column_sums) / n_rows if with_m2 else 0.0
    return _Sketch(n_rows, shift + column_sums / n_rows, m2, r[1:, 1:], ht[1:], nonfinite)


def _sketch_block(block: np.ndarray, row_offset: int, omega: np.ndarray, with_m2: bool = True) -> _Sketch:
    """Leaf: the :class:`_Sketch` of one row block, as a small TSQR over slabs of its rows.

    Each ~SLAB_BYTES slab is sketched about its own mean (:func:`_sketch_slab`) and the slabs
    are combined with :func:`_merge_sketches`, ``SPLIT_EVERY`` at a time — the same merge the
    tree over blocks uses, so the result equals the whole-block factorisation to round-off.
    Why slabs: the float32 block is converted to float64 once, a cache-sized piece at a time,
    and never copied whole; memory traffic, not flops, bounds this leaf. The merges add
    ~(ℓ + 1)/(2·slab rows) to the leaf's flops (≈ 4 % at d = 4000, ℓ = 40).
    Memory: the block, one float64 slab, and at most ``SPLIT_EVERY`` d×(ℓ + 1) partial factors.
    """
    n_rows, n_features = block.shape
    if n_rows == 0:
        empty = np.zeros((0, omega.shape[1]))
        return _Sketch(0, np.zeros(n_features), 0.0, empty, np.zeros((0, n_features)), NonFinite())
    slabs = _row_slabs(n_rows, n_features, omega.shape[1])
    # Any vector within ~the rows' spread of their mean keeps the shift free of cancellation.
    shift = block[:SHIFT_ROWS].mean(axis=0, dtype=np.float64)
    scratch = _scratch(slabs[0].stop - slabs[0].start, n_features)
    pending = []
    for slab in slabs:
        pending.append(_sketch_slab(block[slab], row_offset + slab.start, omega, shift, scratch, with_m2))
        if len(pending) == SPLIT_EVERY:
            pending = [_merge_sketches(pending, omega)]
    return _merge_sketches(pending, omega)


def _merge_sketches(parts: list[_Sketch], omega: np.ndarray) -> _Sketch:
    """Re-center the parts on their pooled mean and combine their factors (see module notes)."""
    parts = [p for p in parts if p.count] or parts[:1]
    if len(parts) == 1:
        return parts[0]
    count = sum(p.count for p in parts)
    mean = sum(p.count * p.mean for p in parts) / count
    r_rows, ht_rows, ones_direction, m2, nonfinite = [], [], [], 0.0, NonFinite()
    for p in parts:
        delta = p.mean - mean
        weight = np.sqrt(p.count)
        r_rows += [p.r, weight * (delta @ omega)[None, :]]
        ht_rows += [p.ht, weight * delta[None, :]]
        ones_direction += [np.zeros(p.r.shape[0]), [weight]]
        m2 += p.m2 + p.count * float(delta @ delta)
        nonfinite = nonfinite.merge(p.nonfinite)
    p, r = _qr_after_direction(np.concatenate(ones_direction), np.concatenate(r_rows, axis=0))
    # r[0, 1:] ≈ 0: every part's sketch is already orthogonal to c's all-ones direction.
    return _Sketch(count, mean, m2, r[1:, 1:], p[:, 1:].T @ np.concatenate(ht_rows, axis=0), nonfinite)


def pass_graph(X, omega: np.ndarray, with_m2: bool = True):
    """Delayed merged :class:`_Sketch` of all rows of X (one pass when computed), whose ``ht``
    is orth(X̃Ω)ᵀ·X̃ (ℓ×d). ``with_m2``: also the total sum of squares; one pass of a fit needs it.
    """
    leaves = map_row_blocks(X, _sketch_block, "randomized-pass", omega, with_m2)
    return tree_reduce(leaves, _merge_sketches, "randomized-merge", omega)


def run_pass(X, omega: np.ndarray, first: bool):
    """Compute one pass (:func:`pass_graph`); the first pass of a fit also gives the total sum of
    squares and raises on NaN/±inf (the other passes read the same data)."""
    (root,) = dask.compute(pass_graph(X, omega, with_m2=first))
    if first:
        raise_if_nonfinite(root.nonfinite)
    return root


def _leading_right_vectors(b: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k singular values and right singular vectors (k×d) of the small m×d matrix ``b``.

    When the centered data has rank < k (fewer rows than k + 1) ``b`` has fewer than k rows; the
    missing components carry zero variance and are completed by an orthonormal complement.
    """
    _, singular_values, vt = svd(b, full_matrices=False, check_finite=False)
    if vt.shape[0] < k:
        complement = np.linalg.qr(np.concatenate([vt.T, np.eye(b.shape[1])], axis=1))[0][:, vt.shape[0]:k]
        vt = np.concatenate([vt, complement.T], axis=0)
        singular_values = np.concatenate([singular_values, np.zeros(k - singular_values.size)])
    return singular_values[:k], vt[:k].copy()


# ---- the solver -------------------------------------------------------------------------------


def solve(
    X, request: ComponentRequest, *, random_state=None, n_oversamples=10, n_power_iter="auto", checkpoint=None
) -> SolverResult:
    """Fit the k leading components by randomized subspace iteration (q + 1 passes).

    Parameters
    ----------
    X : dask.array.Array of shape (n_samples, n_features)
        float32 or float64, any row and column chunking (column pieces of a row block are
        concatenated inside its task, so each stored chunk is read once per pass).
    request : ComponentRequest
        Must fix k (an int or None); fractions and "mle" need the full spectrum.
    random_state : int, numpy.random.Generator, numpy.random.RandomState or None
        Seed of the Gaussian test matrix Ω (d×ℓ).
    n_oversamples : int, default=10
        p: the sketch has ℓ = min(k + p, min(n, d)) columns.
    n_power_iter : int or "auto", default="auto"
        q ≥ 0 power iterations; "auto" is 7 if k < 0.1·min(n, d), else 4.
    checkpoint : str, os.PathLike or None
        Local ``.npz`` file for the state after every pass but the last; a rerun of the same
        job resumes from it (see the module notes). Removed when the solve completes.

    Returns
    -------
    SolverResult
        ``spectrum`` is None (only ℓ singular values are computed). ``n_passes``: reads made
        by *this* call (q + 1 without a resume). ``info`` holds ``n_power_iter`` (the q used),
        ``n_oversamples``, ``sketch_size`` (ℓ), ``n_iter`` (= q), ``resumed_from_pass``
        (passes already done by the run whose checkpoint was loaded, or None) and
        ``total_passes`` (passes across runs that contributed to this result).
    """
    n_samples, n_features = X.shape
    k = request.fixed()
    p = _check_oversamples(n_oversamples)
    q = resolve_power_iter(n_power_iter, k, n_samples, n_features)
    ell = min(k + p, min(n_samples, n_features))
    store = open_checkpoint(
        checkpoint, X, solver="randomized", n_components=k, n_oversamples=p, n_power_iter=q,
        sketch_size=ell, random_state=seed_fingerprint(random_state),
    )
    state = store.load()
    if state is None:
        omega, done = as_generator(random_state).standard_normal((n_features, ell)), 0
    else:  # an earlier process finished `done` power iterations; continue from its Ω
        omega, done = state["omega"], int(state["power_iter_done"])

    n_passes, total_m2 = 0, None
    for iteration in range(done, q + 1):
        root = run_pass(X, omega, first=total_m2 is None)
        n_passes += 1
        if total_m2 is None:
            total_m2 = root.m2
        if iteration == q:
            break
        omega, _ = np.linalg.qr(root.ht.T)  # d×ℓ, orthonormal: the next test matrix
        store.save({"omega": omega, "power_iter_done": iteration + 1, "passes": iteration + 1})

    singular_values, components = _leading_right_vectors(root.ht, k)  # B = QᵀX̃ = Hᵀ
    result = sketch_result(components, singular_values, root, total_m2, n_passes, {
        "n_iter": q,
        "n_power_iter": q,
        "n_oversamples": p,
        "sketch_size": ell,
        "resumed_from_pass": store.resumed_from,
        "total_passes": (store.resumed_from or 0) + n_passes,
    })
    store.clear()
    return result


def sketch_result(components, singular_values, root: _Sketch, total_m2: float, n_passes: int, info: dict) -> SolverResult:
    """The :class:`SolverResult` of a sketching solver: singular values of X̃ become variances
    (ddof = 1), the last pass's root gives the mean, the first pass's total sum of squares the
    total variance."""
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
