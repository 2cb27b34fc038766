r"""The sketch kernel of the randomized and block Krylov solvers: one read gives X̃ᵀ·orth(X̃Ω).

Both solvers (:mod:`daskpca.solvers.randomized`: q power iterations;
:mod:`daskpca.solvers.krylov`: a block Krylov basis with an error bound) are built from the same
pass — a Gaussian or orthonormal block Ω (d×ℓ) in, the count, mean, total sum of squares and
H = X̃ᵀ·orth(X̃Ω) out — and the same first pass fused with the feature stage and checkpoint
state. They live here once (the result they build from the last root, which is the solvers'
contract, is :func:`daskpca.solvers._iterative.sketch_result`).

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
``|μ| ≫ spread``, and no centered copy of X anywhere). The means themselves are never rounded
before the end: a part holds its mean as the shift its slabs were made about (a float64 vector
near the data, so ``rows − shift`` is exact when ``|μ| ≫ spread``) plus an offset, and the merge's
δ_a is formed from exact differences of shifts (see :mod:`daskpca.passes._moments`). A rounded
mean carries ~ε·|μ|, and every δ_a, the merges' only new data, inherited it: sin θ 1e-5 at
μ = 1e10, σ = 1e-2 in float64.

Memory per task: the input row block, one ~16 MiB float64 slab (:data:`SLAB_BYTES`), and
``SPLIT_EVERY`` d×(ℓ+1) partial factors; a merge task holds ``SPLIT_EVERY`` d×(ℓ+1) matrices.

Device blocks (CuPy): a leaf is one slab, the whole block converted to float64 on its device
(the slabs and per-thread scratch buffers are a CPU cache's economy; a GPU's memory bandwidth
needs none), and the merges run there too, through :mod:`daskpca.passes._device`.
"""

from __future__ import annotations

import functools
import threading
import time
from dataclasses import dataclass, replace
from numbers import Integral

import dask
import numpy as np
from scipy.linalg import svd

from ._device import backend_of, like, namespace
from ._graph import SPLIT_EVERY, SizedByArrays, map_row_blocks, tree_reduce
from .._validation import NonFinite, find_nonfinite, raise_if_nonfinite
from ..exceptions import InputError


def check_oversamples(n_oversamples) -> int:
    """p = ``n_oversamples`` checked: an int >= 0 (the sketch has ℓ = k + p columns)."""
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
    scatter), for the total variance. The mean is held unrounded: μ_g = shift·scale + offset,
    ``shift`` in the input's units (the vector the slabs were shifted by), ``scale`` the pass's
    column factor (None: 1), ``offset`` in the analysed units.
    """

    count: int
    shift: np.ndarray  # (d,)
    offset: np.ndarray  # (d,)
    scale: np.ndarray | None  # (d,) or None
    m2: float
    r: np.ndarray  # (m, ℓ)
    ht: np.ndarray  # (m, d)
    nonfinite: NonFinite
    # (d,) int64: non-finite entries per column, zero-filled before the products; counted only in
    # a pass that carries the feature stage (``count_missing``), None when there were none.
    missing: np.ndarray | None = None
    # Seconds the tasks spent computing this sketch (leaves and merges, summed over tasks; not
    # reading or decoding their blocks): what a later pass over blocks kept in memory repeats.
    # CPU time of the task's thread (its BLAS runs on it, one thread a task): wall time would
    # count the first pass's decoding, which contends for the same cores (measured 1.6 s against
    # the later passes' 1.0 s, 8760 × 16 200 float32).
    compute_seconds: float = 0.0

    @property
    def mean(self) -> np.ndarray:
        """μ_g, rounded once (d,)."""
        return self.offset + (self.shift if self.scale is None else self.shift * self.scale)

    def offset_from(self, shift: np.ndarray) -> np.ndarray:
        """μ_g − shift·scale, unrounded: ``shift − self.shift`` is exact for shifts near the data."""
        moved = self.shift - shift
        return self.offset + (moved if self.scale is None else moved * self.scale)

    def finite_counts(self) -> np.ndarray:
        """Finite entries per column (d,)."""
        return np.full(self.offset.shape, self.count, dtype=np.int64) - (0 if self.missing is None else self.missing)

    def restricted(self, columns: np.ndarray) -> "_Sketch":
        """The sketch of the ``columns`` (boolean, d) alone. Exact for columns dropped because they
        were zero-filled throughout: a zero column adds nothing to X̂Ω, to the sum of squares or
        the other columns of H, so this is the pass over ``X[:, columns]`` with ``Ω[columns]``."""
        return replace(self, shift=self.shift[columns], offset=self.offset[columns],
                       scale=None if self.scale is None else self.scale[columns], ht=self.ht[:, columns], missing=None)


def _qr_after_direction(direction: np.ndarray, matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Householder thin QR ``[direction/‖direction‖, matrix] = P·R``.

    P's first column is ±direction/‖direction‖ (R₀₀ = ±1), so P[:, 1:] is orthogonal to
    ``direction`` and P[:, 1:]·R[1:, 1:] = (I − uuᵀ)·matrix with u the unit direction: the part
    of ``matrix`` orthogonal to it, and R[0, 1:] = uᵀ·matrix the part dropped. Used where the
    columns are orthogonal to ``direction`` up to round-off (a merge: a plain thin QR of a matrix
    with no more rows than columns would return a square P that spans the direction too), and
    where they are not and the projection is the point (a slab, see :func:`_sketch_slab`).
    """
    backend = backend_of(matrix)
    xp = backend.xp
    stacked = xp.concatenate([(direction / xp.linalg.norm(direction))[:, None], matrix], axis=1)
    return backend.thin_qr(stacked)


#: Rows converted to float64 at a time inside a leaf: ~16 MiB, so a slab is converted once and
#: both of its products read it from cache (see :func:`_sketch_block`).
SLAB_BYTES = 16 * 2**20


#: Wide data: a slab of ~SLAB_BYTES holds few rows (32 at d = 65 160), and every merge of
#: SPLIT_EVERY slabs multiplies its (ℓ + 1)-column factor into the stacked (ℓ + 1)×d partials —
#: about (ℓ + 1)/(2·slab rows) of the slabs' own products (48 % at 32 rows, ℓ = 30). Slabs of
#: MERGE_ROWS·(ℓ + 1) rows bring that to ~6 %, up to WIDE_SLAB_BYTES of float64 (measured at
#: 8760 × 65 160, ℓ = 30: a pass 9.9 s → 7.5 s against a 4.7 s read).
MERGE_ROWS = 8
WIDE_SLAB_BYTES = 128 * 2**20


#: The host's rate for the sketching passes (randomized, Krylov): each float64 slab streams
#: through two thin products and emits a d×(ℓ+1) factor per slab. Measured on the
#: reanalysis-shaped field (8760 × 65 160, ℓ = 30, coslat weights): a Krylov pass over the field
#: held in memory (the pass cache) takes 2.3–2.5 s on a quiet machine and 3.0–3.5 s on a loaded
#: one for its 4·n·d·ℓ = 6.85e10 flops (20–30 GF/s; 2026-11-25/26, benchmarks/README.md). 1.8 s
#: was measured once, on a field persisted by hand (38e9 then: the plan was 1.5–1.8× short of
#: the cached passes).
SKETCH_FLOPS_PER_SECOND = 28e9


def sketch_task_bytes(shape) -> int:
    """The largest task of a sketching pass (``shape``: a :class:`daskpca.solvers._base.PlanInput`):
    a leaf converts its block one slab (:func:`slab_rows` rows) at a time and merges the slabs'
    d×(ℓ + 1) factors SPLIT_EVERY at a time, like a merge task."""
    from ._graph import merge_task_bytes

    return staged_task_bytes(shape, shape.ell) + merge_task_bytes(shape.d, shape.ell + 1)


def staged_task_bytes(shape, sketch_size: int) -> int:
    """A leaf that converts its block a slab at a time (the sketch kernel, :func:`staged_slabs`):
    the block as stored and one float64 slab of :func:`slab_rows` rows (at most the block)."""
    return shape.block_in + min(shape.block64, slab_rows(shape.d, sketch_size) * shape.d * 8)


def slab_rows(n_features: int, sketch_size: int) -> int:
    """Rows of one float64 slab of a leaf: ~SLAB_BYTES (cache-sized) for narrow data, enough rows
    for cheap merges on wide data (see MERGE_ROWS), and at least 2·(ℓ + 1) so that a slab's QR
    factor stays small next to the slab itself."""
    n_features = max(n_features, 1)
    wide = min(MERGE_ROWS * (sketch_size + 1), WIDE_SLAB_BYTES // (8 * n_features))
    return max(2 * (sketch_size + 1), SLAB_BYTES // (8 * n_features), wide)


def _row_slabs(n_rows: int, n_features: int, sketch_size: int):
    """Row slices of :func:`slab_rows` rows."""
    step = slab_rows(n_features, sketch_size)
    return [slice(start, min(start + step, n_rows)) for start in range(0, n_rows, step)]


#: Rows averaged for a block's shift (see :func:`_sketch_slab`): near the mean is all it needs.
SHIFT_ROWS = 64

#: Each thread's float64 slab buffer (see :func:`_scratch`): thread id → buffer.
_slab_buffers: dict[int, np.ndarray] = {}
_slab_buffers_lock = threading.Lock()


def _scratch(n_rows: int, n_features: int) -> np.ndarray:
    """A float64 (n_rows, n_features) buffer reused by the leaves that run on this thread.

    A fresh ~16 MiB array per leaf is a fresh mmap: 4096 page faults each time. The buffer is
    kept per thread (leaves run concurrently) and replaced when a larger one is needed;
    :func:`release_slab_buffers` drops them when a fit ends (in this process). Wide slabs (up to
    WIDE_SLAB_BYTES, for cheap merges) are not kept: against their products the faults did not
    show (a cached pass of the reanalysis field 2.83–2.86 s kept, 2.89–2.91 s fresh), and a kept
    128 MiB buffer per worker thread paused a 1 GiB worker at 83 % of its memory.
    """
    size = n_rows * n_features
    if 8 * size > 2 * SLAB_BYTES:
        return np.empty((n_rows, n_features))
    ident = threading.get_ident()
    buffer = _slab_buffers.get(ident)
    if buffer is None or buffer.size < size:
        buffer = np.empty(size)
        with _slab_buffers_lock:
            _slab_buffers[ident] = buffer
    return buffer[:size].reshape(n_rows, n_features)


def release_slab_buffers() -> None:
    """Drop the slab buffers this process's threads kept (:func:`_scratch`)."""
    with _slab_buffers_lock:
        _slab_buffers.clear()


def releases_slab_buffers(solve):
    """Decorate a solver's ``solve`` that runs the sketch kernel: its end drops this process's slab
    buffers (:func:`release_slab_buffers`) whether it returns or raises. A fit stopped by an error,
    a cancelled pass or Ctrl-C kept up to one ~16 MiB buffer per thread for the process's life
    before, and the next fit's threads added theirs."""

    @functools.wraps(solve)
    def solve_then_release(*args, **kwargs):
        try:
            return solve(*args, **kwargs)
        finally:
            release_slab_buffers()

    return solve_then_release


#: Rows of a slab the elementwise steps (convert, zero-fill, shift, scale, sum of squares) make
#: at a time: ~2 MiB of float64, so each piece stays in the core's cache between the steps
#: instead of one memory sweep of the whole (~128 MiB) slab per step (measured: 0.54–0.7× the
#: time of the whole-slab steps, one thread, 248 × 65 160; ~10 % of a pass).
PIECE_BYTES = 2 * 2**20


def _prepare_slab(rows: np.ndarray, out: np.ndarray, shift: np.ndarray, scale: np.ndarray | None,
                  count_missing: bool, with_m2: bool) -> tuple[np.ndarray | None, float]:
    """``out`` = (rows − 1·shiftᵀ)·diag(scale) in float64, non-finite entries zero-filled first when
    ``count_missing``; returns ``(missing, squares)``: the non-finite entries per column (None when
    there were none or they are not counted) and Σ out² (0.0 without ``with_m2``).

    Made a few rows at a time (:data:`PIECE_BYTES`), each piece going through every step while
    it is in cache; the values are those of the whole-slab steps, bit for bit (the same
    elementwise operations in the same order). Converting, then shifting in place is ~2× faster
    than a mixed-dtype subtract. A device slab (the whole block) goes through each step whole.
    """
    if not backend_of(out).on_host:
        return _prepare_device_slab(rows, out, shift, scale, count_missing, with_m2)
    n_rows, n_features = rows.shape
    step = max(1, PIECE_BYTES // (8 * max(n_features, 1)))
    missing, squares = None, 0.0
    for start in range(0, n_rows, step):
        piece = out[start:start + step]
        piece[...] = rows[start:start + step]
        if count_missing:
            bad = ~np.isfinite(piece)
            if bad.any():
                counts = bad.sum(axis=0)
                missing = counts if missing is None else missing + counts
                piece[bad] = 0.0
        piece -= shift
        if scale is not None:
            piece *= scale
        if with_m2:
            squares += float(np.vdot(piece, piece))
    return missing, squares


def staged_slabs(block: np.ndarray, shift: np.ndarray, scale: np.ndarray | None, sketch_size: int):
    """The rows of a host ``block`` as float64 slabs ``(rows − 1·shiftᵀ)·diag(scale)``, one after
    another in this thread's slab buffer (:func:`_scratch`: each slab is overwritten by the next,
    so use it before asking for the next): the sketch kernel's conversion (:func:`_prepare_slab`,
    a cache-sized piece at a time, no float64 copy of the whole block) for another pass's kernel,
    MCA's cross products. Finite values only (no zero-fill). The solve that runs it drops the
    buffers when it ends (:func:`releases_slab_buffers`)."""
    n_rows, n_features = block.shape
    for rows in _row_slabs(n_rows, n_features, sketch_size):
        out = _scratch(rows.stop - rows.start, n_features)
        _prepare_slab(block[rows], out, shift, scale, count_missing=False, with_m2=False)
        yield out


def _prepare_device_slab(rows, out, shift, scale, count_missing: bool, with_m2: bool):
    """:func:`_prepare_slab` for a slab on a device: the same steps, each over the whole slab."""
    xp = namespace(out)
    out[...] = rows  # converted in the copy: one float64 buffer, not an astype temporary as well
    missing = None
    if count_missing:
        bad = ~xp.isfinite(out)
        if bad.any():
            missing = bad.sum(axis=0)
            out[bad] = 0.0
    out -= shift
    if scale is not None:
        out *= scale
    return missing, float(xp.vdot(out.ravel(), out.ravel())) if with_m2 else 0.0


def _sketch_slab(
    rows: np.ndarray, row_offset: int, omega: np.ndarray, shift: np.ndarray, scratch: np.ndarray, with_m2: bool,
    count_missing: bool = False, scale: np.ndarray | None = None,
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
    slab is redone (the fit raises after the pass). ``count_missing`` (a pass carrying the
    feature stage, where a feature never finite is masked, not an error) instead counts them per
    column and zero-fills them before the products, one ``isfinite`` sweep of the slab in cache
    (``shift`` is then 0 on those columns, so a masked column stays exactly 0). ``with_m2`` adds
    the sum of squares about the mean (one more sweep), needed from one pass only.

    ``scale`` (d,): the slab is the feature stage's Z = rows·diag(scale), scaled here while in
    cache, so a weighted pass makes no weighted float64 copy of its whole block (the copy cost
    ~1.4 s a pass on the 2.1 GiB reanalysis store, 20 % of the read).
    """
    n_rows = rows.shape[0]
    with np.errstate(invalid="ignore", over="ignore"):  # NaN/±inf input is detected just below
        centered = scratch[:n_rows]
        missing, squares = _prepare_slab(rows, centered, shift, scale, count_missing, with_m2)
        basis, r = _qr_after_direction(namespace(centered).ones(n_rows), centered @ omega)
        ht = basis.T @ centered  # (Pᵀ·C, row-major) runs ~1.6× faster than Cᵀ·P here
        column_sums = ht[0] * (r[0, 0] * np.sqrt(n_rows))
    nonfinite = NonFinite()
    if not np.isfinite(column_sums).all():
        nonfinite = find_nonfinite(rows, row_offset, 0)
        xp = namespace(rows)
        finite_rows = xp.where(xp.isfinite(rows), rows, 0)
        part = _sketch_slab(finite_rows, row_offset, omega, xp.nan_to_num(shift, posinf=0.0, neginf=0.0), scratch, with_m2,
                            scale=scale)
        return replace(part, nonfinite=nonfinite)
    m2 = squares - float(column_sums @ column_sums) / n_rows if with_m2 else 0.0
    return _Sketch(n_rows, shift, column_sums / n_rows, scale, m2, r[1:, 1:], ht[1:], nonfinite, missing)


def _sketch_block(block: np.ndarray, row_offset: int, omega: np.ndarray, with_m2: bool = True,
                  count_missing: bool = False, scale: np.ndarray | None = None) -> _Sketch:
    """Leaf: the :class:`_Sketch` of one row block, as a small TSQR over slabs of its rows.

    Each ~SLAB_BYTES slab is sketched about its own mean (:func:`_sketch_slab`) and the slabs
    are combined with :func:`_merge_sketches`, ``SPLIT_EVERY`` at a time — the same merge the
    tree over blocks uses, so the result equals the whole-block factorisation to round-off.
    Why slabs: the float32 block is converted to float64 once, a cache-sized piece at a time,
    and never copied whole; memory traffic, not flops, bounds this leaf. The merges add
    ~(ℓ + 1)/(2·slab rows) to the leaf's flops (≈ 4 % at d = 4000, ℓ = 40).
    Memory: the block, one float64 slab, and at most ``SPLIT_EVERY`` d×(ℓ + 1) partial factors.
    ``count_missing``: count and zero-fill non-finite entries; ``scale``: the columns' factor
    (see :func:`_sketch_slab`).
    """
    started = time.thread_time()
    n_rows, n_features = block.shape
    backend = backend_of(block)
    xp = backend.xp
    omega, scale = like(omega, block), like(scale, block)
    if n_rows == 0:
        empty = xp.zeros((0, omega.shape[1]))
        return _Sketch(0, xp.zeros(n_features), xp.zeros(n_features), scale, 0.0, empty, xp.zeros((0, n_features)),
                       NonFinite())
    # A device block is one slab in a fresh device buffer (see the module notes).
    slabs = _row_slabs(n_rows, n_features, omega.shape[1]) if backend.on_host else [slice(0, n_rows)]
    # Any vector within ~the rows' spread of their mean keeps the shift free of cancellation (and
    # exact where |μ| ≫ spread); it is carried, never rounded into the mean.
    with np.errstate(invalid="ignore", over="ignore"):
        shift = block[:SHIFT_ROWS].mean(axis=0, dtype=xp.float64)
    if count_missing:  # zero-filled entries: a column with a non-finite head is shifted by 0
        shift[~xp.isfinite(shift)] = 0.0
    scratch = (_scratch(slabs[0].stop - slabs[0].start, n_features) if backend.on_host
               else xp.empty((n_rows, n_features), dtype=xp.float64))
    pending = []
    for slab in slabs:
        pending.append(_sketch_slab(block[slab], row_offset + slab.start, omega, shift, scratch, with_m2,
                                    count_missing, scale))
        if len(pending) == SPLIT_EVERY:
            pending = [_merge_sketches(pending, omega)]
    merged = _merge_sketches(pending, omega)
    # On a device the kernels run asynchronously, past the thread's CPU time: none is claimed (the
    # ETA then counts the passes as measured, Passes.computed).
    return replace(merged, compute_seconds=time.thread_time() - started if backend.on_host else 0.0)


def _merge_sketches(parts: list[_Sketch], omega: np.ndarray) -> _Sketch:
    """Re-center the parts on their pooled mean and combine their factors (see module notes)."""
    started = time.thread_time()
    spent = sum(p.compute_seconds for p in parts)
    parts = [p for p in parts if p.count] or parts[:1]
    if len(parts) == 1:
        return replace(parts[0], compute_seconds=spent)
    xp = namespace(parts[0].r)
    omega = like(omega, parts[0].r)
    count = sum(p.count for p in parts)
    # The pooled mean about the first part's shift: each part's mean less shift·scale is formed
    # from an exact difference of shifts, so no mean is rounded (see the module notes).
    shift = parts[0].shift
    offsets = [p.offset_from(shift) for p in parts]
    offset = sum(p.count * o for p, o in zip(parts, offsets)) / count
    r_rows, ht_rows, ones_direction, m2, nonfinite = [], [], [], 0.0, NonFinite()
    counted = [p.missing for p in parts if p.missing is not None]
    for p, part_offset in zip(parts, offsets):
        delta = part_offset - offset
        weight = np.sqrt(p.count)
        r_rows += [p.r, weight * (delta @ omega)[None, :]]
        ht_rows += [p.ht, weight * delta[None, :]]
        ones_direction += [xp.zeros(p.r.shape[0]), xp.full(1, weight)]
        m2 += p.m2 + p.count * float(delta @ delta)
        nonfinite = nonfinite.merge(p.nonfinite)
    p, r = _qr_after_direction(xp.concatenate(ones_direction), xp.concatenate(r_rows, axis=0))
    # r[0, 1:] ≈ 0: every part's sketch is already orthogonal to c's all-ones direction.
    ht = p[:, 1:].T @ xp.concatenate(ht_rows, axis=0)
    own = time.thread_time() - started if backend_of(ht).on_host else 0.0  # as the leaves' (_sketch_block)
    return _Sketch(count, shift, offset, parts[0].scale, m2, r[1:, 1:], ht, nonfinite, sum(counted) if counted else None,
                   spent + own)


def pass_graph(X, omega: np.ndarray, with_m2: bool = True, count_missing: bool = False, scale=None):
    """Delayed merged :class:`_Sketch` of all rows of X (one pass when computed), whose ``ht``
    is orth(X̃Ω)ᵀ·X̃ (ℓ×d). ``with_m2``: also the total sum of squares; one pass of a fit needs it.
    ``count_missing``: non-finite entries are counted per column and read as 0 (feature stage).
    ``scale`` (d,): the pass is over X·diag(scale), each slab scaled in the leaf.
    """
    leaves = map_row_blocks(X, _sketch_block, "randomized-pass", omega, with_m2, count_missing, scale)
    return tree_reduce(leaves, _merge_sketches, "randomized-merge", omega)


def pass_input(X, stage) -> tuple:
    """``(matrix, scale)`` that a pass over the feature stage's ``Z = X[:, keep]·factor`` reads:
    X's kept columns and the factor, which the leaves apply to each slab in cache (``stage.apply``
    would make a float64 copy of every block first). ``(X, None)`` without a stage."""
    if stage is None or stage.is_identity:
        return X, None
    return (X if stage.keep.all() else X[:, stage.keep]), stage.factor


def run_pass(source: tuple, omega: np.ndarray, first: bool):
    """Compute one pass (:func:`pass_graph`) over ``source`` = :func:`pass_input`'s pair; the
    first pass of a fit also gives the total sum of squares and raises on NaN/±inf (the other
    passes read the same data)."""
    X, scale = source
    (root,) = dask.compute(pass_graph(X, omega, with_m2=first, scale=scale))
    if first:
        raise_if_nonfinite(root.nonfinite)
    return root


def fuses_features(spec) -> bool:
    """Masks and weights ride in the first pass; standardizing does not (see :func:`run_first_pass`)."""
    return not (spec.standardize or spec.missing_ok)


def run_first_pass(X, omega: np.ndarray, features=None):
    """Pass 1 of a sketching fit, with the feature stage ``features`` (a ``FeatureSpec``) fused in.

    Returns ``(root, stage)``: the pass's :class:`_Sketch` and the resolved ``FeatureStage``
    (None for a plain fit, which is :func:`run_pass` with ``first=True``).

    With ``features`` the pass reads X·diag(weights) — each input column times its weight,
    the factor the stage applies — with non-finite entries counted per column and read as 0.
    ``features.resolve`` turns the counts into the stage (raising, as the generic road does, for
    a feature missing in some samples but not all), and the root is restricted to the kept
    columns: a column never finite was zeros throughout, so the result is exactly the pass over
    ``Z = stage.apply(X)`` with the test matrix ``omega[stage.keep]``. The later passes read Z.

    Why not ``standardize``: Z = X·D with D = diag(w/s) needs each column's std s, known only
    after a read. The pass over X·diag(w) with Ω *is* the pass over Z with the test matrix
    diag(s)·Ω (same Q and R, H scaled by 1/s), so the read could be reused, but that start is
    Gaussian with covariance diag(s²): features with a small std would be all but absent from
    it, the randomized error bound (Halko et al., Thm 10.5, for an isotropic start) no longer
    holds and Krylov's gap estimate could miss an eigenvector. So it takes the generic road's
    extra read instead (:func:`daskpca._features.solve`).
    """
    if features is None:
        return run_pass((X, None), omega, first=True), None
    weights = np.asarray(features.weights, dtype=np.float64)
    (root,) = dask.compute(pass_graph(X, omega, with_m2=True, count_missing=True, scale=weights))
    # root.nonfinite is not consulted: the counts replace it (non-finite entries were zero-filled).
    stage = features.resolve(root.finite_counts(), root.count)
    return root.restricted(stage.keep), stage


def leading_right_vectors(b: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
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


def feature_fingerprint(features):
    """What identifies a fused feature stage in a checkpoint's job fingerprint (None without):
    its weights (the checkpoint digests them)."""
    return None if features is None or features.weights is None else np.asarray(features.weights)


def stage_state(stage) -> dict:
    """Checkpoint state from which :func:`resumed_stage` rebuilds the resolved stage."""
    return {} if stage is None else {"kept_features": stage.keep}


def resumed_stage(state: dict | None, features):
    """The stage the run whose checkpoint ``state`` was loaded resolved in its first pass (None:
    a plain fit, or no checkpoint). The checkpoint's fingerprint includes the weights."""
    if features is None or state is None:
        return None
    return features.with_kept(np.asarray(state["kept_features"], dtype=bool))

