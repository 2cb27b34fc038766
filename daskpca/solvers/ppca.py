r"""Probabilistic PCA by EM, with NaN read as *missing* (never imputed): one pass per iteration.

Model (Tipping & Bishop 1999): x = Wz + μ + ε with z ~ N(0, I_k), ε ~ N(0, σ²I_d); W is d×k.
A row x_n observes the features o_n; the rest are missing at random and simply left out of its
likelihood (Roweis 1998; Ilin & Raiko 2010, §3.2).

E-step, per row on its observed entries (a k×k solve per row, batched per block)::

    M_n      = σ²I + W_oᵀW_o
    E[z_n]   = M_n⁻¹ W_oᵀ (x_o − μ_o)
    E[z zᵀ]_n = σ² M_n⁻¹ + E[z_n]E[z_n]ᵀ

M-step, per feature j over the rows that observe it (accumulated in the same pass)::

    a_j = Σ_n (x_nj − μ_j) E[z_n]        (d×k in all)
    B_j = Σ_n E[z zᵀ]_n                  (d×k×k; one shared k×k when nothing is missing)
    W_j = B_j⁻¹ a_j
    σ²  = (Σ_obs (x_nj − μ_j)² − Σ_j W_jᵀ a_j) / N_obs

The σ² update is the expected residual Σ_obs [(x − μ − W_jᵀE z)² + W_jᵀ Cov(z) W_j] expanded
with B_j W_j = a_j, so the new W needs no second look at the data; Σ_obs (x_nj − μ_j)² is the
per-feature centered sum of squares from the first pass.

Passes: 1 (per-feature observed count, mean and variance; ±inf check; missing count) +
1 per EM iteration. The mean is the per-feature mean over observed entries and stays fixed
(the E-step cannot start before μ is known, so unlike ALS the first pass is not fused).

Finish: W = U S Rᵀ (thin SVD, on the client); the components are Uᵀ (orthonormal) and the
model covariance WWᵀ + σ²I has variance s_j² + σ² along u_j. EM's maximum-likelihood estimates
are on the 1/n scale; they are multiplied by n/(n − 1) to match the ddof=1 convention of the
other solvers (for complete data the fixed point is then exactly the sample covariance's
leading eigenpairs, and σ² the mean of its remaining eigenvalues).

Parameter expansion (PX-EM; Liu, Rubin & Wu 1998): plain EM fixes the subspace quickly but
moves the *scale* of W along each axis by only a factor ~(1 − 2σ²/λ_j) per iteration —
thousands of passes when the noise is small (measured: λ₁ = 103, σ² = 0.25, still 17% off
after 300 iterations). The expanded model lets z have a covariance Γ, estimated in the M-step as
Γ = Σ_n E[z zᵀ]_n / n (accumulated in the same pass), and maps back with W ← W·chol(Γ), which
leaves the likelihood unchanged; the same example then converges in ~15 iterations.

Convergence: stop when the sine of the largest principal angle between successive span(W), the
relative change of the model variances along the axes and that of σ² are all ≤ ``tol``. EM
converges linearly, slowly when σ² is close to λ_k or much data is missing.

Checkpoints (``checkpoint=PATH``): after pass 1 and after every EM iteration that is followed
by another, the small state is written atomically to PATH (see :mod:`daskpca.store.checkpoint`):
the pass-1 per-feature moments (observed count, mean, centered sum of squares: three
d-vectors), W (d×k), σ², the basis and model variances used by the convergence test, and the
iterations and passes done. A rerun of the same job (same input name/shape/chunks/dtype, k,
``max_iter``, ``tol``, ``init`` and seed) loads it and continues with the next EM iteration, so
every pass is a resumption point; the result is bit-for-bit that of an uninterrupted run. The
file is removed right before ``solve`` returns.

Flops per iteration: with no missing value in a block 4·n_i·d·k; with missing values
O(n_i·d·k²) (each row's M_n, and the per-feature B_j). Memory per task: one float64 row block,
n_i·k² for the per-row M_n⁻¹, and d·k² for the per-feature B_j when values are missing.

References
----------
M. E. Tipping, C. M. Bishop, "Probabilistic principal component analysis", J. R. Statist. Soc.
B 61 (1999) 611–622, doi:10.1111/1467-9868.00196.
S. Roweis, "EM algorithms for PCA and SPCA", NIPS 1998.
C. Liu, D. B. Rubin, Y. N. Wu, "Parameter expansion to accelerate EM: the PX-EM algorithm",
Biometrika 85 (1998) 755–770, doi:10.1093/biomet/85.4.755.
A. Ilin, T. Raiko, "Practical approaches to principal component analysis in the presence of
missing values", JMLR 11 (2010) 1957–2000.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import dask
import numpy as np

from ..passes import Passes, SizedByArrays, like, map_row_blocks, namespace, tree_reduce
from .._validation import NonFinite, raise_if_nonfinite
from ..exceptions import ConvergenceWarning, InputError
from ._base import FLOAT64, ComponentRequest, Cost, PlanInput, SolverDeclaration, SolverResult
from ._iterative import (
    ColumnMoments,
    column_moments,
    combine_column_moments,
    initial_basis,
    orthonormal_columns,
    start_iterations,
    subspace_sine,
)

OPTIONS = ("max_iter", "tol", "init", "checkpoint")
#: NaN is a missing value here, not an error (the feature stage keeps partially missing features).
ACCEPTS_MISSING = True
DEFAULT_MAX_ITER = 200
DEFAULT_TOL = 1e-8


@dataclass(frozen=True)
class _EStats(SizedByArrays):
    """EM sufficient statistics of some rows."""

    a: np.ndarray  # (d, k): Σ (x − μ) E[z]ᵀ over observed entries
    b_all: np.ndarray  # (k, k): Σ E[zzᵀ] over rows with no missing entry (shared by all j)
    b_observed: np.ndarray | None  # (d, k, k): Σ E[zzᵀ] per feature over rows with missing entries
    ezz: np.ndarray  # (k, k): Σ E[zzᵀ] over all rows (PX-EM's prior covariance estimate)


def _missing_moments(block: np.ndarray, row_offset: int) -> ColumnMoments:
    return column_moments(block, row_offset, missing=True)


def _e_step(block: np.ndarray, row_offset: int, shift: np.ndarray, offset: np.ndarray, w: np.ndarray,
            sigma2: float) -> _EStats:
    """Leaf, in the block's array library (a device block's sums stay on its device).

    x − μ as (x − shift) − offset: exact then accurate where |μ| ≫ spread; x − round(μ) would
    leave every column off by ~ε·|μ| (see daskpca.passes._moments)."""
    xp = namespace(block)
    shift, offset, w = like(shift, block), like(offset, block), like(w, block)
    x = xp.subtract(block, shift, dtype=xp.float64)
    x -= offset
    observed = ~xp.isnan(x)
    d, k = w.shape
    if observed.all():
        # Every row sees every feature: one shared M, a plain matrix product.
        m_inv = xp.linalg.inv(sigma2 * xp.eye(k) + w.T @ w)
        ez = x @ w @ m_inv  # M is symmetric
        b = x.shape[0] * sigma2 * m_inv + ez.T @ ez
        return _EStats(x.T @ ez, b, None, b)
    x = xp.where(observed, x, 0.0)
    mask = observed.astype(xp.float64)
    outer = (w[:, :, None] * w[:, None, :]).reshape(d, k * k)  # rows W_j W_jᵀ
    m = (mask @ outer).reshape(-1, k, k) + sigma2 * xp.eye(k)  # σ²I + W_oᵀW_o per row
    m_inv = xp.linalg.inv(m)  # batched k×k; the covariance σ²M⁻¹ needs the inverse itself
    ez = xp.einsum("nij,nj->ni", m_inv, x @ w)  # x is 0 on missing entries: W_oᵀ(x_o − μ_o)
    ezz = sigma2 * m_inv + ez[:, :, None] * ez[:, None, :]
    b_observed = (mask.T @ ezz.reshape(-1, k * k)).reshape(d, k, k)
    return _EStats(x.T @ ez, xp.zeros((k, k)), b_observed, ezz.sum(axis=0))


def _sum_stats(parts: list[_EStats]) -> _EStats:
    a = sum(p.a for p in parts[1:]) + parts[0].a
    b_all = sum(p.b_all for p in parts[1:]) + parts[0].b_all
    observed = [p.b_observed for p in parts if p.b_observed is not None]
    b_observed = sum(observed[1:]) + observed[0] if observed else None
    ezz = sum(p.ezz for p in parts[1:]) + parts[0].ezz
    return _EStats(a, b_all, b_observed, ezz)


def _m_step(stats: _EStats, moments: ColumnMoments, n_samples: int, n_observed: int, sigma2_floor: float):
    """W and σ² of the M-step, then PX-EM's reduction W ← W·chol(Σ E[zzᵀ] / n)."""
    d, k = stats.a.shape
    b = np.broadcast_to(stats.b_all, (d, k, k)).copy()
    if stats.b_observed is not None:
        b += stats.b_observed
    unseen = moments.count == 0
    b[unseen] = np.eye(k)  # a feature never observed has a_j = 0: W_j = 0
    w = np.linalg.solve(b, stats.a[:, :, None])[:, :, 0]
    sigma2 = (moments.m2.sum() - np.einsum("jk,jk->", w, stats.a)) / max(n_observed, 1)
    try:
        w = w @ np.linalg.cholesky(stats.ezz / n_samples)
    except np.linalg.LinAlgError:  # Σ E[zzᵀ] is positive definite unless σ² underflowed: plain EM
        pass
    return w, max(float(sigma2), sigma2_floor)


def most_passes(options: dict) -> int:
    """Most reads :func:`solve` makes with these estimator options: the moments' read, then one per EM iteration."""
    return 1 + (options.get("max_iter") or DEFAULT_MAX_ITER)


def solve(X, request: ComponentRequest, *, random_state=None, max_iter=None, tol=None, init=None, checkpoint=None) -> SolverResult:
    """Fit probabilistic PCA by EM, treating NaN as missing (1 + n_iter passes).

    Parameters
    ----------
    X : dask.array.Array of shape (n_samples, n_features)
        float32 or float64, any row and column chunking; NaN marks a missing entry, ±inf is an
        error.
    request : ComponentRequest
        Must fix k (an int or None).
    random_state : int, numpy.random.Generator, numpy.random.RandomState or None
        Seed of the random starting W (ignored with ``init``).
    max_iter : int, default=200
        Most EM iterations (each one pass).
    tol : float, default=1e-8
        Stop when the subspace change (sine of the largest principal angle between successive
        span(W)) and the relative change of σ² are both ≤ tol.
    init : array of shape (k, n_features) or None
        Starting components (a warm start).
    checkpoint : str, os.PathLike or None
        Local ``.npz`` file for the state after every pass; a rerun of the same job resumes
        from it (see the module notes). Removed when the solve completes.

    Returns
    -------
    SolverResult
        ``explained_variance``: the model's variances s_j² + σ² along the components (ddof=1
        scale). ``total_variance``: sum over features of the variance of their observed
        entries (ddof=1). ``n_passes``: reads made by *this* call (1 + ``n_iter`` without a
        resume). ``info``: ``noise_variance`` (σ², ddof=1 scale), ``n_missing``,
        ``missing_fraction``, ``n_iter`` (EM iterations in all), ``converged``,
        ``subspace_change``, ``resumed_from_pass`` (passes already done by the run whose
        checkpoint was loaded, or None) and ``total_passes`` (across runs).

    Warns
    -----
    ConvergenceWarning
        When ``max_iter`` iterations did not reach ``tol``.
    """
    n_samples, n_features = X.shape
    k, max_iter, tol, store = start_iterations(
        "ppca", X, request, max_iter=max_iter, tol=tol, init=init, random_state=random_state,
        checkpoint=checkpoint, default_max_iter=DEFAULT_MAX_ITER, default_tol=DEFAULT_TOL,
    )
    state = store.load()
    passes = Passes("ppca", 1 + max_iter, at_most=True, done=0 if state is None else int(state["passes"]))
    if state is None:
        # Pass 1: observed counts, means and sums of squares per feature.
        with passes.read():
            (moments,) = dask.compute(tree_reduce(map_row_blocks(X, _missing_moments, "ppca-moments"), combine_column_moments, "ppca-moments-merge"))
        raise_if_nonfinite(moments.nonfinite, nan_is_missing=True)
        n_passes, passes_before = 1, 0
    else:  # pass 1 (and its ±inf check) and iterations 1..n_iter ran in an earlier process
        shift, offset = (state["shift"], state["offset"]) if "shift" in state else (state["mean"], 0.0 * state["mean"])
        moments = ColumnMoments(state["count"], state["mean"], state["m2"], NonFinite(), shift, offset)
        n_passes, passes_before = 0, int(state["passes"])
    n_observed = int(moments.count.sum())
    n_missing = n_samples * n_features - n_observed
    if n_observed == 0:
        raise InputError("X has no observed (non-NaN) entry; PPCA needs data to fit.")
    mean = moments.mean
    shift, offset = moments.shifted_mean()
    mean_variance = max(float(moments.m2.sum()) / n_observed, np.finfo(np.float64).tiny)
    sigma2_floor = mean_variance * 1e-12  # keeps M_n invertible when the data has rank ≤ k

    def save(n_iter):
        store.save({
            "count": moments.count, "mean": mean, "shift": shift, "offset": offset, "m2": moments.m2, "w": w, "sigma2": sigma2,
            "basis": basis, "variances": variances, "n_iter": n_iter, "passes": passes_before + n_passes,
        })

    if state is None:
        # Start: a random or given orthonormal basis scaled to the average variance per entry.
        w = initial_basis(init, k, n_features, random_state) * np.sqrt(mean_variance)
        sigma2 = mean_variance
        basis = orthonormal_columns(w)
        variances = np.linalg.svd(w, compute_uv=False) ** 2 + sigma2
        done = 0
        save(done)
    else:
        w, sigma2, basis, variances = state["w"], float(state["sigma2"]), state["basis"], state["variances"]
        done = int(state["n_iter"])
    converged, change, model_change = False, np.inf, np.inf
    n_iter = done
    for n_iter in range(done + 1, max_iter + 1):
        parts = map_row_blocks(X, _e_step, "ppca-estep", shift, offset, w, sigma2)
        with passes.read():
            (stats,) = dask.compute(tree_reduce(parts, _sum_stats, "ppca-estep-sum"))
        n_passes += 1
        w, new_sigma2 = _m_step(stats, moments, n_samples, n_observed, sigma2_floor)
        new_basis = orthonormal_columns(w)
        new_variances = np.linalg.svd(w, compute_uv=False) ** 2 + new_sigma2
        change = subspace_sine(basis, new_basis)
        # The model variances along the axes and σ² must settle too, not just the subspace.
        model_change = max(
            abs(new_sigma2 - sigma2) / sigma2,
            float(np.max(np.abs(new_variances - variances) / variances)),
        )
        basis, sigma2, variances = new_basis, new_sigma2, new_variances
        if change <= tol and model_change <= tol:
            converged = True
            break
        if n_iter < max_iter:
            save(n_iter)
    if not converged:
        unsettled = [f"{what} of {value:.2e}" for what, value in (
            ("a subspace change (sine)", change), ("a relative change of σ² or the model variances", model_change))
            if value > tol]
        warnings.warn(
            f"PPCA's EM stopped after max_iter={max_iter} iterations ({passes_before + n_passes} reads) with "
            f"{' and '.join(unsettled)} in its last iteration, > tol={tol:g}. Increase max_iter, loosen tol, "
            "or start from an earlier fit (init=...).",
            ConvergenceWarning,
            stacklevel=2,
        )
    # Principal axes of the model covariance WWᵀ + σ²I, then the ddof=1 scale.
    u, s, _ = np.linalg.svd(w, full_matrices=False)
    scale = n_samples / max(n_samples - 1, 1)
    result = SolverResult(
        components=u.T.copy(),
        explained_variance=(s**2 + sigma2) * scale,
        mean=mean,
        n_samples=n_samples,
        total_variance=float(moments.variance().sum()),
        n_passes=n_passes,
        spectrum=None,
        info={
            "noise_variance": sigma2 * scale,
            "n_missing": int(n_missing),
            "missing_fraction": n_missing / (n_samples * n_features),
            "n_iter": n_iter,
            "converged": converged,
            "subspace_change": float(change),
            "resumed_from_pass": store.resumed_from,
            "total_passes": passes_before + n_passes,
        },
    )
    store.clear()
    return result


# ---------------------------------------------------------------------------------- declaration


def cost(shape: PlanInput) -> Cost:
    """One pass per EM iteration (after the first), 4·n·d·k flops each, and with missing values
    each E-step node also holds one k×k matrix per feature (d·k²): the tasks return d×(k² + k)."""
    n, d, k, most = shape.n, shape.d, shape.k, most_passes(shape.options)
    task = max(shape.block_in + shape.block64 + (2 * shape.row_block + d) * k * FLOAT64, shape.merge_column_bytes * (k * k + k))
    return Cost("1/iter", 4 * n * d * k + n * d * k * k, task, "missing values; passes = 1 + iterations",
                result_size=(k * k + k) * d, most_passes=most)


DECLARATION = SolverDeclaration(
    "ppca", solve, cost=cost, summary="EM for probabilistic PCA", options=OPTIONS, accepts_missing=ACCEPTS_MISSING,
)
