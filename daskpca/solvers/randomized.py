r"""Randomized PCA: subspace iteration with re-orthonormalisation after every multiply.

Halko, Martinsson & Tropp (2011), Algorithm 4.4 ("randomized subspace iteration") on the
centered data X̃ = X − 1μᵀ, with ℓ = k + n_oversamples columns and q power iterations:

    Y = X̃Ω,           Q = qr(Y)          (pass 1)
    repeat q times:
        Z = X̃ᵀQ,      Q_Z = qr(Z)        (one pass; Z is d×ℓ, orthonormalised on the client)
        Y = X̃Q_Z,     Q = qr(Y)          (one pass; Y is n×ℓ, orthonormalised by TSQR)
    B = QᵀX̃,          B = Û S Vᵀ         (last pass; B is ℓ×d, SVD on the client)

Passes: exactly 2q + 2. Without the QR after every multiply the power iterates collapse onto the
leading singular vector and everything below ~ε^{1/(2q+1)}·σ_1 is lost (the failure of dask's
``svd_compressed`` default and of the randomized PCA built on it).

Centering is implicit: no centered copy of X exists. Pass 1 cannot subtract μ before it is
known, so each row block is centered on its *own* mean μ_i and the exact correction is applied
when μ is known, inside the same graph (the block's sketch is small, n_i×ℓ)::

    X̃_iΩ = (X_i − 1μ_iᵀ)Ω + 1·((μ_i − μ)ᵀΩ).

That is the brief's ``XΩ − 1(μᵀΩ)`` rearranged so that nothing cancels when ``|μ| ≫ spread``
(forming X_iΩ and μᵀΩ separately would lose ~|μ|/spread of relative accuracy). Later passes know
μ and center each row block as it is read. The same first pass gives the per-column moments,
hence μ and the total variance (trace of the covariance), and the NaN/±inf check.

The n×ℓ basis Q lives as float64 row blocks aligned with X's row blocks, persisted
(``dask.persist``) from the pass that produces it to the pass that uses it: n·ℓ·8 bytes in
total (1e6 × 30 → 240 MB), spread over the workers (or in the local process with the threaded
scheduler). The *input* is never persisted. Q is orthonormalised with a one-level TSQR inside
the producing pass: Householder QR of each n_i×ℓ block, one QR of the stacked ℓ×ℓ R factors
(number_of_blocks·ℓ² float64 in one task), and Q_i = Q_i'·(its slice of the stacked Q) — as
stable as Householder QR of the whole Y.

Flops: (2q + 2)·2·n·d·ℓ + O(n·ℓ²) for the TSQRs + O(d·ℓ²) locally. Memory per task: one float64
row block plus n_i·ℓ (its block of Q) and d·ℓ (Ω, Q_Z or a partial Z).

Checkpoints (``checkpoint=PATH``): after each Z pass, once Z = X̃ᵀQ is formed and
orthonormalised on the client, the small state — Q_Z (d×ℓ), μ and the trace of the scatter
from pass 1, the power iterations and passes done — is written atomically to PATH (see
:mod:`daskpca._checkpoint`). The n×ℓ basis Q is never saved (it is n-sized): a rerun of the
same job (same input name/shape/chunks/dtype, k, p, q and seed) loads Q_Z and recomputes
Y = X̃Q_Z and its Q (one pass), then continues. So the resumption points are every other pass
(passes 2, 4, …, 2q) and there are none with q = 0. Resuming from the checkpoint written at
pass 2i + 2 makes the remaining 2q − 2i passes (``total_passes`` stays 2q + 2); whatever the
killed run did after its last checkpoint — at most one complete multiply pass and the pass
under way — is redone. The result is bit-for-bit that of an uninterrupted run. The file is
removed right before ``solve`` returns.

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

from numbers import Integral

import dask
import numpy as np
from scipy.linalg import svd

from .._checkpoint import open_checkpoint, seed_fingerprint
from .._graph import block_offsets, map_row_blocks, tree_reduce
from .._validation import raise_if_nonfinite
from ._base import ComponentRequest, SolverResult
from ._iterative import (
    ColumnMoments,
    as_generator,
    column_moments,
    combine_column_moments,
    map_row_blocks_paired,
)

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


# ---- per-block tasks --------------------------------------------------------------------------


def _sketch_block(block: np.ndarray, row_offset: int, omega: np.ndarray):
    """Pass 1: column moments of the block and its block-centered sketch (X_i − 1μ_iᵀ)Ω."""
    moments = column_moments(block, row_offset)
    x = np.asarray(block, dtype=np.float64)
    if moments.nonfinite.count:
        x = np.where(np.isfinite(x), x, 0.0)  # the fit raises after this pass; keep QR finite
    return moments, (x - moments.mean) @ omega


def _correct_sketch(sketch: np.ndarray, block: ColumnMoments, total: ColumnMoments, omega: np.ndarray) -> np.ndarray:
    """X̃_iΩ = (X_i − 1μ_iᵀ)Ω + 1·((μ_i − μ)ᵀΩ): the difference of means is formed first."""
    return sketch + (block.mean - total.mean) @ omega


def _times_block(block: np.ndarray, row_offset: int, mean: np.ndarray, right: np.ndarray) -> np.ndarray:
    """(X_i − 1μᵀ)·right, shape (n_i, ℓ)."""
    return (np.asarray(block, dtype=np.float64) - mean) @ right


def _transpose_times_block(block: np.ndarray, row_offset: int, q_block: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """(X_i − 1μᵀ)ᵀ·Q_i, shape (d, ℓ)."""
    return (np.asarray(block, dtype=np.float64) - mean).T @ q_block


def _sum(parts: list[np.ndarray]) -> np.ndarray:
    total = parts[0].copy()
    for part in parts[1:]:
        total += part
    return total


# ---- TSQR of the n×ℓ block (data already in memory: no input is read) -------------------------


def _block_qr(y: np.ndarray):
    q, r = np.linalg.qr(y)
    return q, r


def _stacked_q(r_factors: list[np.ndarray]) -> np.ndarray:
    q, _ = np.linalg.qr(np.concatenate(r_factors, axis=0))
    return q


def _apply_stacked(q_block: np.ndarray, stacked: np.ndarray, start: int, stop: int) -> np.ndarray:
    return q_block @ stacked[start:stop]


def _tsqr_q(y_blocks: list, row_counts: tuple[int, ...], ell: int, name: str) -> list:
    """Delayed orthonormal Q blocks of the stacked n×ℓ matrix whose row blocks are ``y_blocks``.

    The block R factors are min(n_i, ℓ)×ℓ, so each block's slice of the stacked Q is known
    before anything runs.
    """
    qr_call = dask.delayed(_block_qr, pure=True, nout=2)
    factors = [qr_call(y, dask_key_name=f"{name}-qr-{dask.base.tokenize(y)}") for y in y_blocks]
    heights = [min(n_i, ell) for n_i in row_counts]
    stacked = dask.delayed(_stacked_q, pure=True)([r for _, r in factors], dask_key_name=f"{name}-stack-{dask.base.tokenize(y_blocks)}")
    apply_call = dask.delayed(_apply_stacked, pure=True)
    starts = block_offsets(tuple(heights))
    return [
        apply_call(q, stacked, start, start + h, dask_key_name=f"{name}-q-{dask.base.tokenize(q, start)}")
        for (q, _), start, h in zip(factors, starts, heights)
    ]


# ---- the solver -------------------------------------------------------------------------------


def solve(
    X, request: ComponentRequest, *, random_state=None, n_oversamples=10, n_power_iter="auto", checkpoint=None
) -> SolverResult:
    """Fit the k leading components by randomized subspace iteration (2q + 2 passes).

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
        Local ``.npz`` file for the state after every Z pass; a rerun of the same job resumes
        from it (see the module notes). Removed when the solve completes.

    Returns
    -------
    SolverResult
        ``spectrum`` is None (only ℓ singular values are computed). ``n_passes``: reads made
        by *this* call (2q + 2 without a resume). ``info`` holds ``n_power_iter`` (the q
        used), ``n_oversamples``, ``sketch_size`` (ℓ), ``n_iter`` (= q),
        ``resumed_from_pass`` (passes already done by the run whose checkpoint was loaded, or
        None) and ``total_passes`` (passes across runs that contributed to this result).
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
    row_counts = X.rechunk({1: -1}).chunks[0]
    state = store.load()
    n_passes = 0

    def project(q_blocks, mean):
        """One pass: X̃ᵀQ (d×ℓ) summed over the row blocks."""
        parts = map_row_blocks_paired(X, _transpose_times_block, "randomized-project", q_blocks, mean)
        (z,) = dask.compute(tree_reduce(parts, _sum, "randomized-project-sum"))
        return z

    def multiply(q_features, mean):
        """One pass: Q = tsqr(X̃Q_Z), n×ℓ, persisted as row blocks."""
        y_blocks = map_row_blocks(X, _times_block, "randomized-multiply", mean, q_features)
        return list(dask.persist(*_tsqr_q(y_blocks, row_counts, ell, "randomized-tsqr")))

    if state is None:
        rng = as_generator(random_state)
        omega = rng.standard_normal((n_features, ell))
        # Pass 1: sketch + column moments; μ is known inside the graph, so the sketch is
        # corrected and orthonormalised in the same computation.
        sketches = map_row_blocks(X, _sketch_block, "randomized-sketch", omega)
        block_moments = [s[0] for s in sketches]
        total = tree_reduce(block_moments, combine_column_moments, "randomized-moments")
        correct = dask.delayed(_correct_sketch, pure=True)
        y_blocks = [correct(s[1], m, total, omega) for s, m in zip(sketches, block_moments)]
        *q_blocks, moments = dask.persist(*_tsqr_q(y_blocks, row_counts, ell, "randomized-tsqr"), total)
        n_passes, passes_before, done = 1, 0, 0
        moments = moments.compute()  # already in memory: nothing is read
        raise_if_nonfinite(moments.nonfinite)
        mean, total_m2 = moments.mean, moments.m2.sum()
    else:  # an earlier process formed Q_Z of power iteration `done`; rebuild Q from it
        mean, total_m2 = state["mean"], state["total_m2"]
        done, passes_before = int(state["power_iter_done"]), int(state["passes"])
        q_blocks = multiply(state["q_features"], mean)
        n_passes = 1

    for iteration in range(done, q):
        q_features, _r = np.linalg.qr(project(q_blocks, mean))  # d×ℓ, on the client
        n_passes += 1
        store.save({
            "q_features": q_features, "mean": mean, "total_m2": total_m2,
            "power_iter_done": iteration + 1, "passes": passes_before + n_passes,
        })
        q_blocks = multiply(q_features, mean)
        n_passes += 1

    b = project(q_blocks, mean).T  # ℓ×d: QᵀX̃
    n_passes += 1
    _, singular_values, vt = svd(b, full_matrices=False, check_finite=False)
    ddof_count = max(n_samples - 1, 1)
    result = SolverResult(
        components=vt[:k].copy(),
        explained_variance=singular_values[:k] ** 2 / ddof_count,
        mean=mean,
        n_samples=n_samples,
        total_variance=float(total_m2 / ddof_count),
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
