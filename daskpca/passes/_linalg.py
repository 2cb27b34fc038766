"""Dense linear algebra done locally on the client, and who gets the BLAS threads when.

Under dask's local threaded scheduler a solve limits BLAS to one thread, because the scheduler
already runs one task per core (:func:`tuned_for_tasks`). The local steps between and
after the passes (the d×d eigh, the SVD of R) run alone, so :func:`client_blas_threads` gives
them back the threads the caller had: a d = 4000 eigh is not left on one core.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

import dask
import dask.threaded
import numpy as np
from scipy.linalg import cho_factor, eigh, svd
from threadpoolctl import ThreadpoolController

#: ``(len(sys.modules), the BLAS libraries' controller)`` as last found (:func:`_blas`).
_blas_found: tuple[int, ThreadpoolController] | None = None


def _blas() -> ThreadpoolController:
    """The BLAS libraries loaded in this process, behind one threadpoolctl controller.

    Found once, and again only after more modules were imported (a library that loads another
    BLAS comes with an import): threadpoolctl's search walks every loaded shared library, 7 ms
    a call with PyTorch's and CuPy's libraries loaded (H200 machine); two or three calls a fit
    made it 14–21 ms of an exact GPU fit's 0.08 s (400 000 × 1000).
    """
    global _blas_found
    modules = len(sys.modules)
    if _blas_found is None or _blas_found[0] != modules:
        _blas_found = (modules, ThreadpoolController().select(user_api="blas"))
    return _blas_found[1]


#: BLAS threads the caller had before :func:`tuned_for_tasks` limited them to one, or
#: None when no limit is in force.
_caller_blas_threads: ContextVar[int | None] = ContextVar("caller_blas_threads", default=None)


@contextmanager
def tuned_for_tasks():
    """Set up whatever runs a fit's (or a job's) tasks, for as long as they run.

    On dask's local threaded scheduler: BLAS limited to one thread. That scheduler already runs
    one task per core; BLAS's own threads on top oversubscribe the cores (measured: a
    20000×500 ``syrk`` 3× slower with 2 dask × 2 BLAS threads than with 2 × 1). On a
    ``distributed`` cluster, whose nannies start the workers with one BLAS thread: the workers'
    allocator set for chunk-sized arrays (:func:`~daskpca.passes._geometry.tune_worker_allocators`).
    """
    if not _threaded_scheduler():
        from ._geometry import tune_worker_allocators

        tune_worker_allocators()
        yield
        return
    blas = _blas()
    before = max([1] + [library["num_threads"] for library in blas.info()])
    token = _caller_blas_threads.set(before)
    try:
        with blas.limit(limits=1):
            yield
    finally:
        _caller_blas_threads.reset(token)


def _threaded_scheduler() -> bool:
    """Whether a dask array computed now runs on the local threaded scheduler.

    ``dask.base.get_scheduler`` imports distributed to look for a client (~0.5 s on the first
    fit); a client can only exist once distributed is imported, so without it only the
    configuration is consulted.
    """
    if "distributed" in sys.modules:
        from ._graph import unwrap_scheduler

        scheduler = unwrap_scheduler(dask.base.get_scheduler())
        return scheduler is None or scheduler is dask.threaded.get
    from ._graph import unwrap_scheduler

    return unwrap_scheduler(dask.config.get("scheduler", None)) in (None, "threads", "threading", dask.threaded.get)


#: Elements of a client step's largest operand below which :func:`client_blas_threads` keeps one
#: thread: the step is then many small products whose threads only contend — block Krylov's client
#: at d = 2000, m ≈ 180 (4·10⁵): 12.7 s on two threads, 4.4 s on one; at d = 500, m = 200 with the
#: machine busy: 9.7 s, 0.3 s on one — while the reanalysis field's d = 65 160, m ≈ 300 (2·10⁷)
#: gained from the threads.
CLIENT_THREADED_ELEMENTS = 4_000_000


@contextmanager
def client_blas_threads(elements: int | None = None):
    """Inside a solve, give a local step on the client the BLAS threads the caller had.

    No dask task runs while the client solves a small dense problem, so the one-thread limit
    only slows it down. The limit is back in force when the block exits. ``elements``: the size
    of the step's largest operand, where the caller knows it (block Krylov's basis, d × m); below
    ``CLIENT_THREADED_ELEMENTS`` the one-thread limit stays.
    """
    threads = _caller_blas_threads.get()
    if threads is None or threads <= 1 or (elements is not None and elements < CLIENT_THREADED_ELEMENTS):
        yield
        return
    with _blas().limit(limits=threads):
        yield


@contextmanager
def one_blas_thread():
    """One BLAS thread for a client step made of many small products (a few hundred rows): more
    threads add nothing there and contend with anything else running — measured on the shared
    2-core machine, busy: block Krylov's simulated fit took 0.9–2.8 s on two threads, 0.05 s on
    one."""
    with _blas().limit(limits=1):
        yield


def eigh_descending(matrix: np.ndarray, n_top: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Eigenpairs of a symmetric matrix, largest first, eigenvalues clipped at zero.

    Parameters
    ----------
    matrix : ndarray of shape (m, m)
        Symmetric positive semi-definite (a scatter, covariance or Gram matrix).
    n_top : int, optional
        Only the ``n_top`` largest pairs (LAPACK ``syevr`` with an index range: cheaper when
        ``n_top ≪ m``). Default: all of them.

    Returns
    -------
    values : ndarray of shape (n_top,)
        Descending, ≥ 0 (round-off can make the smallest eigenvalues of a PSD matrix slightly
        negative; they are set to 0).
    vectors : ndarray of shape (m, n_top)
        Orthonormal columns.
    """
    m = matrix.shape[0]
    subset = None if n_top is None or n_top >= m else (m - n_top, m - 1)
    with client_blas_threads():
        values, vectors = eigh(matrix, subset_by_index=subset, check_finite=False)
    order = np.argsort(values)[::-1]
    return np.clip(values[order], 0.0, None), vectors[:, order]


def eigh_descending_on_device(matrix, n_vectors: int | None = None):
    """:func:`eigh_descending` of a matrix on a device, solved there (every pair: cuSOLVER's
    ``syevd`` has no index range; its cost is what :func:`~daskpca.passes._device.solve_on_device`
    weighs). Returns device arrays, largest first, eigenvalues clipped at zero: every value, and
    the ``n_vectors`` leading vectors (None: all)."""
    from ._device import backend_of

    backend = backend_of(matrix)
    values, vectors = backend.eigh(matrix)
    xp = backend.xp
    return xp.maximum(values[::-1], 0.0), vectors[:, ::-1][:, :n_vectors]


#: Smallest matrix for which :func:`top_eigenpairs` uses Lanczos instead of LAPACK's dense solver.
LANCZOS_MIN_SIZE = 300
#: Largest fraction of the matrix's size whose pairs Lanczos is asked for: beyond it LAPACK wins.
LANCZOS_MAX_FRACTION = 0.2


def top_eigenpairs(matrix: np.ndarray, n_top: int, *, seed: int = 0,
                   with_next: bool = False) -> tuple[np.ndarray, np.ndarray, str]:
    """The ``n_top`` largest eigenpairs of a symmetric PSD matrix held in memory, to round-off.

    A dense eigensolver tridiagonalises the whole m×m matrix (4/3·m³ flops, half of them
    matrix–vector products that stream the matrix from memory: BLAS-2) and, for every vector,
    back-transforms (2·m³ more): at m = 8760 (an hourly year's Gram matrix) LAPACK's subset
    ``eigh`` took > 10 min here. Single-vector Lanczos (ARPACK) needs only products with the
    matrix, but each streams its 614 MB once for one vector: ~300 of them, 17–20 s of a Gram fit
    at m = 8760. Block Lanczos (:func:`_block_lanczos`) multiplies blocks of ``n_top`` + 10
    vectors (BLAS-3: one sweep of the matrix serves the whole block) and keeps every block, as the
    Krylov solver does, until the residuals ‖G·v − θ·v‖ of the ``n_top`` leading Ritz pairs are
    at round-off (≤ m·ε·θ₁, the backward error of LAPACK's solvers, hence the same accuracy of the
    subspace, sin θ ≲ ε·‖G‖/gap). Two checks make that a certificate rather than a hope
    (:func:`_certified_top`): the residuals, and that no eigenvalue was missed — a Krylov space
    could in principle lack an eigenvector the start block lacked. With σ between θ_k and an
    upper estimate of λ_{k+1} (θ_{k+1} plus its residual), the matrix σI − G + V_kΘ_kV_kᵀ has
    eigenvalue σ on the found pairs and σ − λ_j on the rest, so it is positive definite exactly
    when every other eigenvalue is below σ: one Cholesky factorisation (⅓·m³ flops, BLAS-3, a few
    seconds at m = 8760) decides it (Sylvester's law of inertia). A failed check falls back to
    LAPACK, so the answer is never less exact than the dense solver's. Block Lanczos is used from
    :data:`LANCZOS_MIN_SIZE` rows and for ``n_top`` ≤ :data:`LANCZOS_MAX_FRACTION`·m; otherwise
    LAPACK (``syevr`` for a subset).

    ``with_next``: ``values`` also holds an upper estimate of the (n_top + 1)-th eigenvalue (where
    n_top < m) — the gap an exact road's bound rests on (``solvers._bounds.exact_bound``): from
    Lanczos the next Ritz value plus its residual (one more product, m² flops), certified by the
    inertia check; from LAPACK that eigenvalue itself (one more of the subset).

    Returns
    -------
    values : ndarray of shape (n_top,) (n_top + 1 ``with_next``), descending, ≥ 0
    vectors : ndarray of shape (m, n_top)
    how : str
        ``"lanczos"`` or ``"lapack"``: which solver gave them (``info["eigensolver"]``).
    """
    m = matrix.shape[0]
    if m >= LANCZOS_MIN_SIZE and 0 < n_top <= LANCZOS_MAX_FRACTION * m:
        with client_blas_threads():
            found = _block_lanczos(matrix, n_top, seed)
            if found is not None and _certified_top(matrix, *found, n_top):
                values, vectors = found
                kept = values[:n_top]
                if with_next:  # λ_{k+1} ≤ θ_{k+1} + ‖r_{k+1}‖: no eigenvalue was missed (the inertia check)
                    after = vectors[:, n_top]
                    kept = np.append(kept, values[n_top] + np.linalg.norm(matrix @ after - values[n_top] * after))
                return np.clip(kept, 0.0, None), vectors[:, :n_top], "lanczos"
    wanted = min(n_top + 1, m) if with_next else n_top
    values, vectors = eigh_descending(matrix, wanted)
    return values, vectors[:, :n_top], "lapack"


#: Block Lanczos's budget: products with the matrix (one block each) before giving up to LAPACK,
#: and the most basis columns kept before a thick restart on the leading Ritz vectors.
LANCZOS_MAX_BLOCKS = 60
LANCZOS_MAX_BASIS = 1500


def _block_lanczos(matrix: np.ndarray, n_top: int, seed: int):
    """The ``n_top + 1`` leading Ritz pairs of ``matrix`` from a block Krylov space, once the
    ``n_top`` leading residuals are at round-off and θ_k is above θ_{k+1} plus its residual;
    None when the budget runs out (the caller then asks LAPACK)."""
    m = matrix.shape[0]
    size = min(m, n_top + 10)
    tolerance = m * np.finfo(np.float64).eps
    # Certified at m·ε, but iterated on while the residuals still halve a block, down to √m·ε —
    # where W = G·V's own round-off stops them: the subspace then matches LAPACK's to ~1e-14 on the
    # reanalysis Gram instead of the ~1e-11 that stopping at m·ε gave.
    floor, previous = np.sqrt(m) * np.finfo(np.float64).eps, np.inf
    block = tall_qr(np.random.default_rng(seed).standard_normal((m, size)))[0]  # never only the centered Gram's null vector
    basis = Basis.empty(m).extend(block, matrix @ block)
    for _ in range(LANCZOS_MAX_BLOCKS):
        theta, Y = basis.ritz()
        wanted = min(n_top + 1, theta.size)
        vectors = basis.V @ Y[:, :wanted]
        residuals = np.linalg.norm(basis.W @ Y[:, :wanted] - vectors * theta[:wanted], axis=0)
        scale = max(float(theta[0]), 0.0)
        largest = float(residuals[:n_top].max(initial=0.0))
        converged = wanted > n_top and largest <= tolerance * scale
        settled = largest <= floor * scale or largest > previous / 2
        if converged and settled and theta[n_top - 1] - (theta[n_top] + residuals[n_top]) > tolerance * scale:
            return theta[:wanted], vectors
        previous = largest
        size = block.shape[1]
        block = orthonormal_extension(basis.V, basis.W[:, -size:], basis.T[:, -size:])
        if block.shape[1] == 0:  # an invariant subspace: its Ritz pairs are exact
            return (theta[:wanted], vectors) if wanted > n_top else None
        if basis.size + block.shape[1] > LANCZOS_MAX_BASIS:  # thick restart on the leading Ritz vectors
            basis = basis.restart(min(theta.size, 3 * size))
            block = orthonormal_extension(basis.V, block)
            if block.shape[1] == 0:
                continue
        basis = basis.extend(block, matrix @ block)
    return None


def _certified_top(matrix: np.ndarray, values: np.ndarray, vectors: np.ndarray, n_top: int) -> bool:
    """Whether the ``n_top + 1`` pairs hold the ``n_top`` largest to round-off: residuals at
    machine precision and no eigenvalue missed above σ, the midpoint of θ_k and θ_{k+1} plus its
    residual (see :func:`top_eigenpairs`)."""
    m, scale = matrix.shape[0], max(float(values[0]), 0.0)
    tolerance = m * np.finfo(np.float64).eps * scale
    residuals = np.linalg.norm(matrix @ vectors - vectors * values, axis=0)
    if scale <= 0 or not np.all(residuals[:n_top] <= tolerance):
        return False
    upper = values[n_top] + residuals[n_top]  # λ_{k+1} is below it unless one was missed (checked next)
    if not values[n_top - 1] - upper > tolerance:  # not separated at round-off
        return False
    sigma = (values[n_top - 1] + upper) / 2
    found = vectors[:, :n_top]
    shifted = (found * values[:n_top]) @ found.T  # one m×m float64 array, factored in place
    shifted -= matrix
    shifted[np.diag_indices(m)] += sigma
    try:
        cho_factor(shifted, overwrite_a=True, check_finite=False)
    except np.linalg.LinAlgError:
        return False
    return True


def flip_signs(components: np.ndarray) -> np.ndarray:
    """Factors, one per component, that make each component's largest-|·| entry real positive.

    This is scikit-learn's component-based ``svd_flip`` convention: results become
    deterministic whatever solver or chunking produced them. Multiply: ``components * f[:, None]``.

    Parameters
    ----------
    components : ndarray of shape (k, d), real or complex

    Returns
    -------
    factors : ndarray of shape (k,)
        ±1 for real components; for complex ones the unit phase e^{−iφ} that turns the largest
        entry (phase φ) real positive (complex eigenvectors are determined up to such a phase).
    """
    if components.size == 0:
        return np.ones(components.shape[0])
    largest = np.argmax(np.abs(components), axis=1)
    signs = np.sign(components[np.arange(components.shape[0]), largest])  # z/|z| for complex z
    signs[signs == 0] = 1.0
    return np.conj(signs)


def orthonormal_basis(matrix: np.ndarray) -> np.ndarray:
    """Orthonormal basis of the column space of a tall matrix (thin QR, Q factor)."""
    return tall_qr(matrix)[0]


#: Bytes of one row piece of a tall matrix factored by :func:`tall_qr`: a few MiB, so that
#: LAPACK's column-by-column sweeps of a piece run in cache.
TALL_PIECE_BYTES = 2**21


def tall_qr(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Thin QR ``matrix = Q·R`` of a tall matrix (d×m, d ≫ m), as a TSQR over row pieces.

    LAPACK's Householder QR of a tall-skinny matrix is level-2 BLAS: each of its m reflections
    sweeps the whole d×m matrix through memory (65 160 × 30: 147 ms on one thread and 303 ms on
    two here, most of a Krylov fit's client time). Factoring row pieces of ~TALL_PIECE_BYTES
    (each sweep in cache), then the stacked m×m R factors, and multiplying each piece's Q by its
    block of the second Q is the same orthogonal factorisation (TSQR, Demmel et al. 2012), as
    stable as Householder: 15 ms there. Real or complex; a matrix with no more than two
    pieces' rows is factored directly.

    Returns
    -------
    q : ndarray of shape (d, min(d, m))
    r : ndarray of shape (min(d, m), m)
    """
    d, m = matrix.shape
    rows = max(8 * m, TALL_PIECE_BYTES // (matrix.itemsize * max(m, 1)))
    if d <= 2 * rows or m == 0:
        return np.linalg.qr(matrix)
    pieces = [np.linalg.qr(matrix[start:start + rows]) for start in range(0, d, rows)]
    inner, r = tall_qr(np.concatenate([piece_r for _, piece_r in pieces], axis=0))
    q = np.empty((d, r.shape[0]), dtype=inner.dtype)
    offset = 0
    for start, (piece_q, piece_r) in zip(range(0, d, rows), pieces):
        q[start:start + piece_q.shape[0]] = piece_q @ inner[offset:offset + piece_r.shape[0]]
        offset += piece_r.shape[0]
    return q, r


def tall_norm2(matrix: np.ndarray) -> float:
    """Spectral norm ‖A‖₂ of a tall (or wide) matrix from the eigenvalues of its small Gram AᴴA.

    ``np.linalg.norm(A, 2)`` takes a full SVD of A, level-2 sweeps of the d×m matrix (40 ms at
    65 160 × 30, 84 ms with two threads); the largest eigenvalue of the m×m Gram is accurate to
    round-off relative to ‖A‖₂² (no cancellation: it is the largest), so its square root is ‖A‖₂
    to ~ε relative — all a norm is used for (scales, residuals, sines of formed differences).
    """
    if matrix.size == 0:
        return 0.0
    small = matrix.conj().T if matrix.shape[0] < matrix.shape[1] else matrix
    gram = small.conj().T @ small
    return float(np.sqrt(max(np.linalg.eigvalsh(gram)[-1], 0.0)))


#: Directions whose size is below this fraction of their block's are numerically dependent.
DEFLATION_RTOL = 1e-12


def _h(a: np.ndarray) -> np.ndarray:
    """Conjugate transpose (the transpose for real arrays, without a copy): the basis code below
    serves real C = X̃ᵀX̃ and the Hermitian Gram operator of Hilbert EOFs alike."""
    return a.conj().T if np.iscomplexobj(a) else a.T


def orthonormal_extension(V: np.ndarray, block: np.ndarray, coefficients: np.ndarray | None = None) -> np.ndarray:
    """Orthonormal columns spanning ``(I − VVᴴ)·block``, without directions already in span V.

    Projected twice (block CGS2), then a rank-revealing factorisation (thin QR, SVD of its ℓ×ℓ
    R) keeps the directions above DEFLATION_RTOL of the block's norm, and one more projection
    removes what the normalisation amplified. ``coefficients``: Vᴴ·block when the caller has it
    already (the Krylov loop does: it is the last block column of T), saving the first of the
    three d×m×ℓ products.
    """
    scale = tall_norm2(block)
    if scale == 0.0:
        return block[:, :0]
    for projection in range(2):
        known = coefficients is not None and projection == 0
        block = block - V @ (coefficients if known else _h(V) @ block)
    q, r = tall_qr(block)
    left, values, _ = svd(r, check_finite=False)
    fresh = q @ left[:, values > DEFLATION_RTOL * scale]
    fresh = fresh - V @ (_h(V) @ fresh)
    return tall_qr(fresh)[0]


@dataclass(frozen=True)
class Basis:
    """The kept Krylov basis V (d×m, orthonormal), its image W = C·V, and the small products
    T = VᵀW and P = WᵀW, updated a block at a time (O(d·m·ℓ) per pass instead of O(d·m²)).

    V and W are column-major views of the first m columns of buffers with room to grow
    (``room``: the buffers and how many of their columns are filled), so a pass appends its
    block in place instead of copying the whole basis (at 65 160 × 300, 2 × 156 MB a pass);
    room doubles when it runs out. Only the newest basis appends in place: extending an older
    one copies.
    """

    V: np.ndarray
    W: np.ndarray
    T: np.ndarray
    P: np.ndarray
    room: list | None = field(default=None, repr=False, compare=False)

    @classmethod
    def empty(cls, n_features: int, dtype=np.float64) -> "Basis":
        return cls(*(np.zeros(shape, dtype=dtype) for shape in ((n_features, 0), (n_features, 0), (0, 0), (0, 0))))

    @property
    def size(self) -> int:
        return self.V.shape[1]

    def extend(self, block: np.ndarray, image: np.ndarray) -> "Basis":
        """Append a block V_j (orthonormal, ⟂ V) and its image W_j = C·V_j."""
        cross_t = _h(self.V) @ image  # (m, b) = VᴴCV_j; its conjugate transpose is V_jᴴ·W (C is Hermitian)
        cross_p = _h(self.W) @ image
        T = np.block([[self.T, cross_t], [_h(cross_t), _h(block) @ image]])
        P = np.block([[self.P, cross_p], [_h(cross_p), _h(image) @ image]])
        m, size = self.size, self.size + block.shape[1]
        room = self.room
        if room is None or room[2] != m or room[0].shape[1] < size:  # not the newest, or full
            dtype = np.result_type(self.V, block)
            buffers = [np.empty((self.V.shape[0], max(2 * size, 1)), dtype=dtype, order="F") for _ in range(2)]
            buffers[0][:, :m], buffers[1][:, :m] = self.V, self.W
            room = [*buffers, m]
        room[0][:, m:size], room[1][:, m:size] = block, image
        room[2] = size
        return Basis(room[0][:, :size], room[1][:, :size], T, P, room)

    def ritz(self) -> tuple[np.ndarray, np.ndarray]:
        """Ritz values (descending) and the eigenvectors Y of the symmetrised T."""
        theta, Y = eigh((self.T + _h(self.T)) / 2, check_finite=False)
        return theta[::-1], Y[:, ::-1]

    def restart(self, keep: int) -> "Basis":
        """Thick restart: the ``keep`` leading Ritz vectors VY and their images WY (known exactly)."""
        _, Y = self.ritz()
        Y = Y[:, :keep]
        return Basis(self.V @ Y, self.W @ Y, _h(Y) @ self.T @ Y, _h(Y) @ self.P @ Y)
