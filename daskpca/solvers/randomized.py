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

- leaf (one row block X_i, centered on its *own* mean μ_i: C_i = X_i − 1μ_iᵀ)::

      Ŷ_i = C_iΩ = Q_i R_i   (Householder QR with Q_i ⟂ 1),   H_i = C_iᵀQ_i   (d×ℓ)

- merge (parts a, b, … into c, with μ_c their pooled mean and δ_a = μ_a − μ_c): the rows of
  part a, re-centered on μ_c, are C_a + 1δ_aᵀ, and their sketch is Ŷ_a + 1(Ωᵀδ_a)ᵀ
  = [Q_a, 1/√n_a]·[R_a; √n_a(Ωᵀδ_a)ᵀ]. The basis blockdiag([Q_a, 1/√n_a]) is orthonormal
  because Q_a ⟂ 1, so with the thin QR  [R_a; √n_a(Ωᵀδ_a)ᵀ; R_b; …] = P R_c ::

      R_c = R_c,     H_c = [H_a, √n_a δ_a, H_b, √n_b δ_b, …]·P

  (the columns of the first factor are exactly (C_a + 1δ_aᵀ)ᵀ[Q_a, 1/√n_a], …). P is taken
  orthogonal to the all-ones direction of c (see :func:`_qr_orthogonal_to`), which keeps
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
Passes: exactly q + 1. Flops: (q + 1)·4·n·d·ℓ (two products per block per pass) + O(n·ℓ²) for the
leaf QRs + O(d·ℓ²) per merge and on the client. Memory per task: the input row block plus
n_i·ℓ (its sketch and Q_i), d·ℓ (Ω, H_i) and a ~4 MiB float64 slab (a leaf centers its block a
slab of rows at a time); a merge holds ``split_every`` d×(ℓ+1) matrices.

Checkpoints (``checkpoint=PATH``): after every pass but the last, the small state — Ω_{j+1}
(d×ℓ), the power iterations and passes done — is written atomically to PATH (see
:mod:`daskpca._checkpoint`). A rerun of the same job (same input name/shape/chunks/dtype, k, p, q
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

from dataclasses import dataclass
from numbers import Integral

import dask
import numpy as np
from scipy.linalg import qr, svd

from .._checkpoint import open_checkpoint, seed_fingerprint
from .._graph import SizedByArrays, map_row_blocks, tree_reduce
from .._moments import center_block
from .._validation import NonFinite, raise_if_nonfinite
from ._base import ComponentRequest, SolverResult
from ._iterative import as_generator

OPTIONS = ("n_oversamples", "n_power_iter", "checkpoint")


def resolve_power_iter(n_power_iter, n_components: int, n_samples: int, n_features: int) -> int:
    """q from ``n_power_iter``: an int ≥ 0, or "auto" (scikit-learn's rule: 7 for small k, else 4)."""
    if isinstance(n_power_iter, str):
        if n_power_iter != "auto":
            raise ValueError(f"n_power_iter={n_power_iter!r}: expected 'auto' or an int >= 0 (e.g. 4).")
        return 7 if n_components < 0.1 * min(n_samples, n_features) else 4
    if isinstance(n_power_iter, bool) or not isinstance(n_power_iter, Integral) or n_power_iter < 0:
        raise ValueError(f"n_power_iter={n_power_iter!r}: expected 'auto' or an int >= 0 (e.g. 4).")
    return int(n_power_iter)


def _check_oversamples(n_oversamples) -> int:
    if isinstance(n_oversamples, bool) or not isinstance(n_oversamples, Integral) or n_oversamples < 0:
        raise ValueError(f"n_oversamples={n_oversamples!r}: expected an int >= 0 (default 10).")
    return int(n_oversamples)


# ---- the reduction: one pass gives X̃ᵀ·orth(X̃Ω) ----------------------------------------------


@dataclass(frozen=True)
class _Sketch(SizedByArrays):
    """A set of rows, summarised about their own column mean μ_g (X̂_g = X_g − 1μ_gᵀ).

    ``r`` (m×ℓ) and the implicit Q_g (rows×m, orthogonal to the all-ones vector) factor the
    sketch X̂_gΩ = Q_g·r; ``h`` = X̂_gᵀQ_g (d×m). ``m2`` is the total Σ‖x − μ_g‖² (the trace
    of the scatter), for the total variance.
    """

    count: int
    mean: np.ndarray  # (d,)
    m2: float
    r: np.ndarray  # (m, ℓ)
    h: np.ndarray  # (d, m)
    nonfinite: NonFinite


def _qr_orthogonal_to(direction: np.ndarray, matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Thin QR ``matrix ≈ P·R`` with P's columns orthogonal to ``direction``.

    ``matrix``'s columns are (up to round-off) orthogonal to ``direction`` already, but when it
    has no more rows than columns a plain thin QR returns a square P that spans ``direction``
    too. QR of ``[direction/‖direction‖, matrix]`` puts that direction in P's first column; the
    rest is the factorisation wanted (the dropped row of R is ``directionᵀ·matrix`` ≈ 0).
    """
    stacked = np.concatenate([(direction / np.linalg.norm(direction))[:, None], matrix], axis=1)
    p, r = qr(stacked, mode="economic", overwrite_a=True, check_finite=False)
    return p[:, 1:], r[1:, 1:]


#: Rows converted to float64 at a time inside a leaf: ~4 MiB, so the centered slab stays in cache.
SLAB_BYTES = 4 * 2**20


def _row_slabs(n_rows: int, n_features: int):
    step = max(16, SLAB_BYTES // (8 * max(n_features, 1)))
    return [slice(start, min(start + step, n_rows)) for start in range(0, n_rows, step)]


def _sketch_block(block: np.ndarray, row_offset: int, omega: np.ndarray) -> _Sketch:
    """Leaf: center the block on its own mean, sketch it, and project it on the sketch's basis.

    The block is converted to float64 and centered one cache-sized slab of rows at a time, twice
    (once for the sketch C·Ω and the sum of squares, once for Cᵀ·Q after the sketch's QR): two
    reads of the float32 block instead of writing and re-reading a float64 copy twice its size —
    memory traffic, not flops, bounds this leaf.
    """
    n_rows, n_features = block.shape
    if n_rows == 0:
        empty = np.zeros((0, omega.shape[1]))
        return _Sketch(0, np.zeros(n_features), 0.0, empty, np.zeros((n_features, 0)), NonFinite())
    mean = block.mean(axis=0, dtype=np.float64)
    rows, shift, nonfinite = block, mean, NonFinite()
    if not np.isfinite(mean).all():  # NaN/±inf somewhere: found, counted and zeroed here
        part = center_block(block, row_offset)  # (the fit raises after this pass)
        rows, shift, mean, nonfinite = part.centered, np.zeros(n_features), part.mean, part.nonfinite
    slabs = _row_slabs(n_rows, n_features)
    sketch, m2 = np.empty((n_rows, omega.shape[1])), 0.0
    for slab in slabs:
        centered = np.subtract(rows[slab], shift, dtype=np.float64)
        sketch[slab] = centered @ omega
        m2 += float(np.vdot(centered, centered))
    q_block, r = _qr_orthogonal_to(np.ones(n_rows), sketch)
    h = np.zeros((n_features, q_block.shape[1]))
    for slab in slabs:
        h += np.subtract(rows[slab], shift, dtype=np.float64).T @ q_block[slab]
    return _Sketch(n_rows, mean, m2, r, h, nonfinite)


def _merge_sketches(parts: list[_Sketch], omega: np.ndarray) -> _Sketch:
    """Re-center the parts on their pooled mean and combine their factors (see module notes)."""
    parts = [p for p in parts if p.count] or parts[:1]
    if len(parts) == 1:
        return parts[0]
    count = sum(p.count for p in parts)
    mean = sum(p.count * p.mean for p in parts) / count
    r_rows, h_columns, ones_direction, m2, nonfinite = [], [], [], 0.0, NonFinite()
    for p in parts:
        delta = p.mean - mean
        weight = np.sqrt(p.count)
        r_rows += [p.r, weight * (delta @ omega)[None, :]]
        h_columns += [p.h, weight * delta[:, None]]
        ones_direction += [np.zeros(p.r.shape[0]), [weight]]
        m2 += p.m2 + p.count * float(delta @ delta)
        nonfinite = nonfinite.merge(p.nonfinite)
    basis, r = _qr_orthogonal_to(np.concatenate(ones_direction), np.concatenate(r_rows, axis=0))
    return _Sketch(count, mean, m2, r, np.concatenate(h_columns, axis=1) @ basis, nonfinite)


def _power_pass(X, omega: np.ndarray) -> _Sketch:
    """One pass over X: the merged :class:`_Sketch` whose ``h`` is X̃ᵀ·orth(X̃Ω)."""
    leaves = map_row_blocks(X, _sketch_block, "randomized-pass", omega)
    (root,) = dask.compute(tree_reduce(leaves, _merge_sketches, "randomized-merge", omega))
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

    n_passes = 0
    for iteration in range(done, q + 1):
        root = _power_pass(X, omega)
        n_passes += 1
        if n_passes == 1:
            raise_if_nonfinite(root.nonfinite)
        if iteration == q:
            break
        omega, _ = np.linalg.qr(root.h)  # d×ℓ, orthonormal: the next test matrix
        store.save({"omega": omega, "power_iter_done": iteration + 1, "passes": iteration + 1})

    singular_values, components = _leading_right_vectors(root.h.T, k)  # B = QᵀX̃ = Hᵀ
    ddof_count = max(n_samples - 1, 1)
    result = SolverResult(
        components=components,
        explained_variance=singular_values**2 / ddof_count,
        mean=root.mean,
        n_samples=n_samples,
        total_variance=float(root.m2 / ddof_count),
        n_passes=n_passes,
        spectrum=None,
        info={
            "n_iter": q,
            "n_power_iter": q,
            "n_oversamples": p,
            "sketch_size": ell,
            "resumed_from_pass": store.resumed_from,
            "total_passes": (store.resumed_from or 0) + n_passes,
        },
    )
    store.clear()
    return result
