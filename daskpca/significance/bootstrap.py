"""The moving-block bootstrap: is a mode real? Confidence intervals for one extra read of the data.

:func:`bootstrap` gives confidence intervals for explained variance, ratios, singular values and
patterns, and the leading modes that stand out, by resampling blocks of consecutive samples — any
number of replicates for one extra read of the data (see its docstring for what is exact and what
is approximated); :func:`bootstrap_scores` is the same from per-sample scores already in memory,
the entry point for other estimators (MCA) after their own read. North's rule of thumb, from the
eigenvalues alone, is :mod:`daskpca.significance.north`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import dask
import numpy as np

from ..exceptions import InputError, InputTypeError
from .._validation import find_nonfinite, raise_if_nonfinite
from ..pca import PCA
from ..passes import eigh_descending, flip_signs, like, map_row_blocks, namespace, to_host, tuned_for_tasks
# The resampling's statistics and limits (block lengths, weights, intervals, what can vary and
# fit) live in solvers/_resampling.py; the public ones are re-exported here.
from ..solvers import (CLIENT_BYTES, INTERVALS, MAX_FLOPS, MIN_BLOCKS, MIN_TAIL, SLAB_BYTES,  # noqa: F401
                       block_length_cap, block_weights, carlstein_block_length, check_cost, check_resampling,
                       interval_bounds, lag1_autocorrelation, min_replicates, overlapping_blocks_dof)
from .north import north_k


# ------------------------------------------------------------------ moving-block bootstrap
#
# The one extra read projects every (centred, feature-staged) sample onto m basis directions and
# keeps its m scores plus its residual sum of squares: n·(m + 1) float64 on the client. Every
# replicate is then a reweighting of those n rows — a replicate draws blocks of consecutive
# samples with replacement, so sample i enters it w_i times — and never touches the data again.
# Device blocks (a model with device=, or CuPy chunks) are projected on their device; only each
# block's n_i×(m + 1) scores and residuals and its d-vector sums come back to the host.

#: Default number of basis directions m (≫ the modes reported) when the model keeps its covariance.
DEFAULT_BASIS = 50


@dataclass(frozen=True)
class BootstrapResult:
    """Moving-block bootstrap intervals of a fitted PCA (see :func:`bootstrap`).

    Every ``*_interval`` array has a leading axis of 2: ``[0]`` the lower, ``[1]`` the upper end.

    Attributes
    ----------
    explained_variance, explained_variance_ratio, singular_values : ndarray of shape (k,)
        The model's estimates (the centre of the intervals), k = ``n_modes``.
    explained_variance_interval, explained_variance_ratio_interval, singular_values_interval : ndarray of shape (2, k)
    components : ndarray of shape (k, n_kept_features)
        The model's patterns (in the analysed, weighted space of ``feature_stage_``).
    components_interval : ndarray of shape (2, k, n_kept_features)
        Per-element percentile intervals of the patterns, each replicate's modes first matched to
        the model's by largest |inner product| and signed to agree with them.
    replicates : ndarray of shape (n_replicates, k)
        The explained variances of every replicate (sorted, largest first).
    separated : ndarray of shape (k,) or (k − 1,), bool
        ``separated[i]``: mode i+1's variance interval lies wholly above mode i+2's (modes from 1;
        the last mode is tested against the next basis direction when the basis has one).
        A mode whose replicates do not vary never stands out.
    n_standout : int
        The leading modes that each stand out from the next (:func:`north_k` on ``separated``).
    varies : ndarray of shape (k,), bool
        Whether each mode's replicate variances vary at all (False: the resampling carries no
        information about that mode, e.g. constant scores).
    confidence, block_length, n_replicates, n_basis : float, int, int, int
    exact : bool
        True when the basis spans every direction of the data (the replicates are the exact
        replicates of a refit); False when they live in the span of the m basis directions.
    interval : str
        How the variance intervals were formed (``INTERVALS``).
    n_passes : int
        Full reads of the data the bootstrap made (1).
    lag1_autocorrelation : float
        Largest lag-1 autocorrelation of the leading scores (what the default block length uses).
    feature_stage, layout : FeatureStage or None, Layout or None
        The model's, so :meth:`to_xarray` puts pattern intervals back on every input feature
        (NaN where masked) and, for a labeled model, on the field's dims and coords.
    """

    explained_variance: np.ndarray
    explained_variance_interval: np.ndarray
    explained_variance_ratio: np.ndarray
    explained_variance_ratio_interval: np.ndarray
    singular_values: np.ndarray
    singular_values_interval: np.ndarray
    components: np.ndarray
    components_interval: np.ndarray
    replicates: np.ndarray
    separated: np.ndarray
    n_standout: int
    varies: np.ndarray
    confidence: float
    block_length: int
    n_replicates: int
    n_basis: int
    exact: bool
    interval: str
    n_passes: int
    lag1_autocorrelation: float
    feature_stage: object = None
    layout: object = None

    def errors(self, ratio: bool = False) -> np.ndarray:
        """Asymmetric error bars ``(2, k)`` (below, above the estimate) for :func:`daskpca.plot.scree`."""
        value = self.explained_variance_ratio if ratio else self.explained_variance
        low, high = self.explained_variance_ratio_interval if ratio else self.explained_variance_interval
        return np.stack([np.maximum(value - low, 0.0), np.maximum(high - value, 0.0)])

    def lines(self) -> list[str]:
        """One Markdown table row per mode: variance, its interval, ratio interval, stands out."""
        rows = []
        for i in range(self.explained_variance.size):
            flag = "—" if i >= self.separated.size else ("yes" if self.separated[i] else "no")
            low, high = self.explained_variance_interval[:, i]
            rlow, rhigh = self.explained_variance_ratio_interval[:, i]
            rows.append(f"| {i + 1} | {self.explained_variance[i]:.6g} | [{low:.4g}, {high:.4g}] | "
                        f"[{rlow:.2%}, {rhigh:.2%}] | {flag} |")
        return rows

    def to_xarray(self):
        """The intervals as an ``xarray.Dataset`` (dims ``mode`` from 1 and ``bound`` = lower/upper);
        the pattern intervals on the field's own dims for a labeled model (NaN at masked features)."""
        import xarray as xr

        k = self.explained_variance.size
        coords = {"mode": ("mode", np.arange(1, k + 1)), "bound": ("bound", ["lower", "upper"])}
        ds = xr.Dataset(coords=coords)
        for name in ("explained_variance", "explained_variance_ratio", "singular_values"):
            ds[name] = ("mode", getattr(self, name))
            ds[f"{name}_interval"] = (("bound", "mode"), getattr(self, f"{name}_interval"))
        ds["separated"] = ("mode", np.pad(self.separated, (0, k - self.separated.size)))
        ds["varies"] = ("mode", self.varies)
        rows = self.components_interval.reshape(2 * k, -1)
        if self.feature_stage is not None:
            rows = self.feature_stage.restore(rows)
        if self.layout is None:
            ds["components_interval"] = (("bound", "mode", "feature"), rows.reshape(2, k, -1))
        else:
            field = self.layout.unstack_features(rows, leading_dims=("bound", "mode"), leading_shape=(2, k),
                                                 leading_coords={})
            for name, variable in (field.data_vars.items() if hasattr(field, "data_vars") else [(None, field)]):
                key = "components_interval" + ("" if name is None else f"_{name}")
                ds[key] = variable.drop_vars([c for c in ("bound", "mode") if c in variable.coords])
        ds.attrs.update(confidence=self.confidence, block_length=self.block_length, n_replicates=self.n_replicates,
                        n_basis=self.n_basis, exact=int(self.exact), interval=self.interval,
                        n_standout=self.n_standout, method="moving-block bootstrap, one read")
        return ds


def bootstrap(pca, X, *, n_replicates: int = 1000, block_length: int | None = None, confidence: float = 0.95,
              n_modes: int | None = None, n_basis: int | None = None, interval: str = "log-t",
              random_state=None) -> BootstrapResult:
    """Moving-block bootstrap intervals for a fitted PCA, in one read of ``X`` for any number of replicates.

    A replicate is a series of n samples made of blocks of ``block_length`` consecutive samples
    whose starts are drawn uniformly with replacement (the moving-block bootstrap, Künsch 1989, in
    its circular form, Politis & Romano 1992: see :func:`block_weights`), so serial correlation
    up to the block length survives the resampling. Its covariance is the data's covariance with
    sample i counted w_i times; this function never refits: one pass over ``X`` projects each
    centred, feature-staged sample onto m basis directions and keeps the m scores ``s_i`` and the
    residual sum of squares ``r_i``, and every replicate is formed from those n×(m + 1) numbers.

    **Exact** when the basis spans the data (``result.exact``): the model was fitted by the
    covariance solver (which keeps its d×d moments, so all its eigenvectors are known without a
    read) and m = min(d, n − 1). The replicate's covariance is then a rotation of the refitted
    one: same eigenvalues, eigenvectors mapped back by the basis.

    **Approximate** otherwise: the replicate's covariance is taken within the span of the m basis
    directions (the model's own components when it keeps no moments; fit more components than you
    will interpret, m ≫ k). It ignores the rotation of the replicate's leading subspace towards
    the directions outside the basis — the replicate eigenvalues are then, by Cauchy interlacing,
    never above a refit's, so the upper ends lean low when the spectrum beyond the basis is not
    small — and the residuals' replicate mean (their variance counts, their mean shift of O(1/n)
    of it does not). The total variance of each replicate (for ratios) does count the residuals.

    Parameters
    ----------
    pca : fitted PCA
        A real PCA (not Hilbert); plain or labeled; any solver.
    X : array or xarray object
        The data the model was fitted on, as for ``pca.transform`` (read once).
    n_replicates : int, default=1000
        Cost on the client: ``n_replicates · n · m²`` flops for the replicate covariances plus
        ``n_replicates · m³`` for their eigenproblems; memory n·m float64 for the scores.
    block_length : int, optional
        Samples per block, 1 ≤ L ≤ n // 3 (a replicate of fewer than 3 blocks is nearly the series
        itself). L = 1 is the ordinary bootstrap (independent samples). Choose it longer than the
        decorrelation time of the scores. Default: Carlstein's (1986) rule for an AR(1) series,
        ``L = (√6·ρ / (1 − ρ²))^{2/3} · n^{1/3}``, with ρ the largest lag-1 autocorrelation of the
        leading ``n_modes`` scores (computed from the same read), capped at ``min(⌈3√n⌉, ⌊n/3⌋)``
        (:func:`block_length_cap`, Politis & White 2004).
    confidence : float in (0, 1), default=0.95
    n_modes : int, optional
        Modes to report (default: all of the model's components, at most m).
    n_basis : int, optional
        m, basis directions. Covariance-fitted models: default ``min(d, n − 1, max(DEFAULT_BASIS,
        2·n_modes))`` (exact when this reaches min(d, n − 1)). Other solvers: the model's
        ``n_components_`` (the only directions known without another pass).
    interval : {"log-t", "percentile", "basic"}, default="log-t"
        Variance, ratio and singular-value intervals (:func:`_interval`): "log-t" corrects the
        replicates' bias on the log scale and widens by the Student t of the blocks' degrees of
        freedom; "percentile" takes the replicates' quantiles as they are; "basic" reflects them
        about the estimate (``[2λ̂ − q_hi, 2λ̂ − q_lo]``). Measured coverage of 95 % intervals at
        n = 600 (``benchmarks/bootstrap_coverage.py``): log-t 0.96 / 0.94 / 0.88 at AR(1) φ = 0 /
        0.5 / 0.9, percentile 0.96 / 0.93 / 0.82. Pattern intervals are always percentile.
    random_state : int, numpy.random.Generator or None

    Returns
    -------
    BootstrapResult

    Raises
    ------
    NotFittedError, ValueError
        Before any read: an unfitted model, a complex (Hilbert) model, fewer replicates than
        :func:`min_replicates`, ``block_length`` outside [1, n // 3], ``confidence`` outside
        (0, 1), ``n_modes`` / ``n_basis`` out of range, or scores and replicates that would not
        fit ``CLIENT_BYTES`` / ``MAX_FLOPS`` (:func:`check_cost`). After the read: data whose
        mean or total variance is not the model's (not the data it was fitted on).

    References
    ----------
    H. R. Künsch, "The jackknife and the bootstrap for general stationary observations",
    Ann. Statist. 17 (1989) 1217–1241. E. Carlstein, "The use of subseries values for
    estimating the variance of a general statistic from a stationary sequence", Ann. Statist. 14
    (1986) 1171–1179. D. N. Politis & J. P. Romano, "A circular block-resampling procedure for
    stationary data", in *Exploring the Limits of Bootstrap*, Wiley (1992) 263–270. D. N. Politis
    & H. White, "Automatic block-length selection for the dependent bootstrap", Econometric
    Reviews 23 (2004) 53–70. K. W. Meketon & B. Schmeiser, "Overlapping batch means: something
    for nothing?", Proc. Winter Simulation Conference (1984) 227–230. B. Efron & R. J.
    Tibshirani, *An Introduction to the Bootstrap*, Chapman & Hall (1993).
    """
    plan = _check_bootstrap(pca, n_replicates, block_length, confidence, n_modes, n_basis, interval)
    matrix, _ = pca.model_input(X)
    if matrix.shape[0] != pca.n_samples_:
        raise InputError(f"X has {matrix.shape[0]} samples but the model was fitted on {pca.n_samples_}: "
                         "pass the data the model was fitted on.")
    Z = pca.feature_stage_.apply(matrix)
    with tuned_for_tasks():
        parts = dask.compute(*map_row_blocks(Z, _project_block, "bootstrap-project", pca.mean_, plan.basis,
                                             pca.components_.T))
    _check_same_data(pca, *(sum(p[i] for p in parts) for i in range(2, 6)))
    result = bootstrap_scores(
        np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
        basis=plan.basis, reference=pca.components_[: plan.n_modes] @ plan.basis, n_replicates=n_replicates,
        block_length=block_length, confidence=confidence, interval=interval, random_state=random_state,
    )
    return replace(result, n_passes=1, exact=plan.exact, feature_stage=pca.feature_stage_, layout=pca.layout_)


def bootstrap_scores(scores, residual=None, *, basis=None, reference=None, n_modes: int | None = None,
                     n_replicates: int = 1000, block_length: int | None = None, confidence: float = 0.95,
                     interval: str = "log-t", random_state=None) -> BootstrapResult:
    """The moving-block bootstrap of :func:`bootstrap` from per-sample scores already in memory (no read).

    This is the interface other estimators call after their own one read (e.g. MCA, with the
    replicate weights of :func:`block_weights` applied to a cross term instead).

    Parameters
    ----------
    scores : ndarray of shape (n, m)
        Centred samples in an orthonormal basis: ``(z_i − z̄)·V``. The full centred data (V = I)
        makes the bootstrap exact. A device array (CuPy) is copied to the host first: the
        replicates are small client-side linear algebra.
    residual : ndarray of shape (n,), optional
        ``‖(z_i − z̄) − V Vᵀ(z_i − z̄)‖²``, the part of each sample outside the basis (counts in
        each replicate's total variance); zeros by default.
    basis : ndarray of shape (d, m), optional
        V, to express patterns on the features (default: the identity, patterns in score coordinates).
    reference : ndarray of shape (k, m), optional
        The modes whose intervals are wanted, in basis coordinates (default: the leading
        ``n_modes`` eigenvectors of the scores' covariance, largest entry positive).
    n_modes : int, optional
        k when ``reference`` is not given (default: min(m, 10)).
    n_replicates, block_length, confidence, interval, random_state
        As for :func:`bootstrap`.

    Returns
    -------
    BootstrapResult
        The estimates are those of the scores: the variance of the data along each reference mode,
        over the total (scores and residuals).
    """
    scores = np.asarray(to_host(scores), dtype=np.float64)
    n, m = scores.shape
    k = reference.shape[0] if reference is not None else min(m, n_modes or 10)
    check_resampling(n, n_replicates, block_length, confidence, interval)
    check_cost(n, m, k, n_replicates)
    residual = np.zeros(n) if residual is None else np.asarray(to_host(residual), dtype=np.float64)
    covariance = scores.T @ scores / max(n - 1, 1)
    if reference is None:
        vectors = eigh_descending(covariance, k)[1].T
        reference = vectors * flip_signs(vectors)[:, None]
    estimate = np.einsum("km,mj,kj->k", reference, covariance, reference)
    total = (np.sum(scores**2) + np.sum(residual)) / max(n - 1, 1)
    rho = float(np.max(lag1_autocorrelation(scores @ reference.T)))
    if block_length is None:
        block_length = carlstein_block_length(rho, n)
    rng = np.random.default_rng(random_state)
    values, totals, aligned = _replicate_spectra(scores, residual, rng, n_replicates, block_length, reference)
    alpha = (1.0 - confidence) / 2
    quantiles = (alpha, 1.0 - alpha)
    dof = overlapping_blocks_dof(n, block_length)
    variance_interval = interval_bounds(values[:, :k], estimate, quantiles, interval, dof)
    # A replicate statistic that does not vary (constant scores, too few distinct resamplings) is no
    # evidence of certainty: such a mode never stands out, nor does the mode above it.
    varies = np.ptp(values[:, :k], axis=0) > 1e-12 * np.maximum(np.abs(estimate), np.finfo(float).tiny)
    # Mode i stands out when its interval is clear of the next one's; the last mode's next is the
    # replicates' (k+1)-th eigenvalue, centred on the data's (k+1)-th, when the basis has one.
    upper_next = variance_interval[1, 1:]
    varies_next = varies[1:]
    if m > k:
        beyond = np.linalg.eigvalsh(covariance)[::-1][k : k + 1]
        upper_next = np.append(upper_next, interval_bounds(values[:, k : k + 1], beyond, quantiles, interval, dof)[1])
        varies_next = np.append(varies_next, np.ptp(values[:, k]) > 1e-12 * max(abs(beyond[0]), np.finfo(float).tiny))
    size = upper_next.size
    separated = (variance_interval[0, :size] > upper_next) & varies[:size] & varies_next
    basis = np.eye(m) if basis is None else basis
    n_scale = max(n - 1, 1)
    return BootstrapResult(
        explained_variance=estimate, explained_variance_interval=variance_interval,
        explained_variance_ratio=estimate / total,
        explained_variance_ratio_interval=interval_bounds(values[:, :k] / totals[:, None], estimate / total, quantiles,
                                                    interval, dof),
        singular_values=np.sqrt(estimate * n_scale),
        singular_values_interval=interval_bounds(np.sqrt(values[:, :k] * n_scale), np.sqrt(estimate * n_scale), quantiles,
                                           interval, dof),
        components=reference @ basis.T, components_interval=_pattern_intervals(aligned, basis, quantiles),
        replicates=values[:, :k], separated=separated, n_standout=north_k(separated), varies=varies,
        confidence=float(confidence), block_length=int(block_length), n_replicates=int(n_replicates),
        n_basis=m, exact=bool(m >= min(basis.shape[0], n - 1) and not residual.any()), interval=interval,
        n_passes=0, lag1_autocorrelation=rho,
    )


@dataclass(frozen=True)
class _BootstrapPlan:
    basis: np.ndarray  # (d_kept, m), orthonormal columns, leading directions first
    m: int
    n_modes: int
    exact: bool


def _check_bootstrap(pca, n_replicates, block_length, confidence, n_modes, n_basis, interval) -> _BootstrapPlan:
    """Every parameter checked, and the basis chosen, from the fitted model alone (no read)."""
    if np.iscomplexobj(getattr(pca, "components_", None)):  # HilbertPCA: a PCA-family model, not a PCA
        raise InputError("bootstrap resamples real PCA models; this model has complex (Hilbert) components.")
    if not isinstance(pca, PCA):
        raise InputTypeError(f"bootstrap needs a fitted daskpca PCA, not {type(pca).__name__} (for a rotated "
                        "model, bootstrap the PCA it rotates).")
    pca.check_fitted()
    if np.iscomplexobj(pca.components_):
        raise InputError("bootstrap resamples real PCA models; this model has complex (Hilbert) components.")
    n, k = pca.n_samples_, pca.n_components_
    check_resampling(n, n_replicates, block_length, confidence, interval)
    n_modes = k if n_modes is None else n_modes
    if not isinstance(n_modes, (int, np.integer)) or not 1 <= n_modes <= k:
        raise InputError(f"n_modes={n_modes!r}: expected an int in [1, n_components_={k}].")
    d = pca.components_.shape[1]
    rank = min(d, n - 1)
    moments = pca.solver_info_.get("moments")
    if moments is None:
        if n_basis is not None and n_basis != k:
            raise InputError(
                f"n_basis={n_basis!r}: this model (solver={pca.solver_!r}) keeps no covariance, so only its "
                f"{k} components are known without another read. Fit more components (m ≫ the modes you "
                "interpret), or fit with solver='covariance' to bootstrap on its whole spectrum."
            )
        m, basis = k, pca.components_.T
    else:
        m = min(rank, max(DEFAULT_BASIS, 2 * n_modes)) if n_basis is None else n_basis
        if not isinstance(m, (int, np.integer)) or not n_modes <= m <= rank:
            raise InputError(f"n_basis={n_basis!r}: expected an int in [n_modes={n_modes}, min(d, n − 1)={rank}].")
        covariance = moments.symmetric_scatter() / max(moments.count - 1, 1)
        basis = eigh_descending(covariance, m)[1]
    if n * (m + 1) * 8 > CLIENT_BYTES:
        raise InputError(f"the bootstrap keeps n·(m + 1) = {n}·{m + 1} float64 on the client, more than "
                         f"CLIENT_BYTES = {CLIENT_BYTES} bytes: pass a smaller n_basis.")
    check_cost(n, int(m), int(n_modes), n_replicates)
    return _BootstrapPlan(np.ascontiguousarray(basis), int(m), int(n_modes), bool(m >= rank))


def _project_block(block, row_offset, mean, basis, components):
    """``(scores, residual, sums, squares, component_sums, component_squares)`` of one row block:
    ``(z − mean)·V`` (n_i × m), ‖(z − mean) − V Vᵀ(z − mean)‖² (n_i,), and what tells whether this
    is the data the model was fitted on: the column sums of ``z − mean`` and of its squares (d,),
    and of its projections on the model's components ``(z − mean)·U`` and their squares (k,).
    Computed on the block's device; the six results (n_i·(m + 1) + 2·(d + k) numbers) handed to
    the host."""
    xp = namespace(block)
    centered = xp.subtract(block, like(mean, block), dtype=xp.float64)
    if not xp.isfinite(centered).all():
        raise_if_nonfinite(find_nonfinite(block, row_offset))
    scores = centered @ like(basis, block)
    squares = xp.einsum("ij,ij->i", centered, centered)
    residual = xp.maximum(squares - xp.einsum("ij,ij->i", scores, scores), 0.0)
    projected = centered @ like(components, block)
    return to_host((scores, residual, centered.sum(axis=0), xp.einsum("ij,ij->j", centered, centered),
                    projected.sum(axis=0), xp.einsum("ij,ij->j", projected, projected)))


#: How far the data's mean and total variance may stand from the model's before the bootstrap
#: says it is other data: relative to each feature's spread (a refit in float32 agrees to ~1e-6).
SAME_DATA_RTOL = 1e-4
#: How far the data's variance along each kept component (uᵀCu) may stand from the model's
#: ``explained_variance_``, relative, for the data it was fitted on: round-off of a refit (a float32
#: copy of the data agrees to ~1e-8). Approximate solvers add their own eigenvalue error (Krylov's
#: bound; a tenth of the sampling error √(2/(n − 1)) for those that report none): other data of
#: the same kind differs by about the sampling error, other fields by far more.
SAME_VARIANCE_RTOL = 1e-6


def _variance_tolerance(pca) -> np.ndarray:
    """Per kept component, the relative difference between uᵀCu on the fitted data and
    ``explained_variance_`` that round-off and the solver's approximation allow (see
    :data:`SAME_VARIANCE_RTOL`)."""
    values = np.asarray(pca.explained_variance_, dtype=np.float64)
    n, d = pca.n_samples_, pca.components_.shape[1]
    with np.errstate(divide="ignore", invalid="ignore"):
        roundoff = np.where(values > 0, d * np.finfo(np.float64).eps * values[0] / values, np.inf)
    tolerance = SAME_VARIANCE_RTOL + roundoff
    bounds = pca.solver_info_.get("eigenvalue_error_bounds")
    if bounds is not None and np.shape(bounds) == values.shape:
        tolerance = tolerance + np.asarray(bounds, dtype=np.float64)
    elif not np.isfinite(getattr(pca, "error_bound_", 0.0)):  # an approximate solver with no bound
        tolerance = tolerance + 0.1 * np.sqrt(2.0 / max(n - 1, 1))
    return tolerance


def _check_same_data(pca, sums, squares, component_sums=None, component_squares=None) -> None:
    """Refuse data whose mean, total variance or variance along the model's components is not the
    model's: its intervals would be those of other data, and the model's estimates could fall
    outside them (the field ×10 + 100; another z-scored field of the same shape, whose mean and
    total variance match exactly; the same field with its features in another order)."""
    n = pca.n_samples_
    shift = sums / n  # the data's mean less the model's, per analysed feature
    variance = np.maximum(squares / n - shift**2, 0.0)  # per feature, about the data's own mean
    spread = np.sqrt(variance) + 1e-12 * (np.abs(pca.mean_) + 1.0)
    worst = int(np.argmax(np.abs(shift) / spread))
    if abs(shift[worst]) > SAME_DATA_RTOL * spread[worst]:
        raise InputError(
            f"this is not the data the model was fitted on: its mean differs from the model's mean_ by "
            f"{abs(shift[worst]):.4g} at analysed feature {worst} ({abs(shift[worst]) / spread[worst]:.3g} of that "
            "feature's standard deviation). The bootstrap resamples the fitted data; pass that data (same "
            "samples, same order of features), or refit the model on this data.")
    total = float(np.sum(variance)) * n / max(n - 1, 1)
    fitted = getattr(pca, "total_variance_", None)
    if fitted is not None and np.isfinite(fitted) and abs(total - fitted) > SAME_DATA_RTOL * max(fitted, 1e-300):
        raise InputError(
            f"this is not the data the model was fitted on: its total variance is {total:.6g}, the model's "
            f"{fitted:.6g}. The bootstrap resamples the fitted data; pass that data, or refit the model on it.")
    if component_sums is None:
        return
    # What the model explains, on this data: uᵀCu per kept component, about the data's own mean.
    explained = (component_squares - component_sums**2 / n) / max(n - 1, 1)
    values = np.asarray(pca.explained_variance_, dtype=np.float64)
    tolerance = _variance_tolerance(pca)
    with np.errstate(divide="ignore", invalid="ignore"):
        relative = np.abs(explained - values) / np.maximum(values, np.finfo(np.float64).tiny)
    worst = int(np.argmax(relative - tolerance))
    if relative[worst] > tolerance[worst]:
        raise InputError(
            f"this is not the data the model was fitted on: along component {worst + 1} its variance is "
            f"{explained[worst]:.6g}, the model's explained_variance_[{worst}] is {values[worst]:.6g} (relative "
            f"difference {relative[worst]:.2g}, more than the {tolerance[worst]:.1g} round-off and the solver allow). "
            "Its mean and total variance may match (as for any z-scored field, or the same field with its "
            "features in another order), but the model does not explain it as it explained its own data. The "
            "bootstrap resamples the fitted data; pass that data (same samples, same order of features), or "
            "refit the model on this data.")


def _replicate_spectra(scores, residual, rng, n_replicates, block_length, reference):
    """Each replicate's eigenvalues (R × m, descending), total variance (R,) and the eigenvectors
    matched to the ``reference`` modes (R × m × k, see :func:`_align`).

    A replicate's raw second moments ``Σ_i w_i s_i s_iᵀ`` for all replicates at once are one
    matrix product ``W · P`` of the weights (R × n) with the per-sample outer products (n × m²),
    taken a slab of samples at a time so a slab of P stays within ``SLAB_BYTES``; replicates are
    drawn in batches whose weights stay within it too, and only each batch's k matched
    eigenvectors are kept (R·m·k float64, not R·m²).
    """
    n, m = scores.shape
    squares = np.einsum("ij,ij->i", scores, scores) + residual
    batch = max(1, min(n_replicates, SLAB_BYTES // (8 * max(n, m * m))))
    slab = max(1, SLAB_BYTES // (8 * m * m))
    values, totals, aligned = [], [], []
    for start in range(0, n_replicates, batch):
        weights = block_weights(rng, n, block_length, min(batch, n_replicates - start))
        raw = np.zeros((weights.shape[0], m * m))
        for lo in range(0, n, slab):
            part = scores[lo : lo + slab]
            raw += weights[:, lo : lo + slab] @ (part[:, :, None] * part[:, None, :]).reshape(-1, m * m)
        mean = weights @ scores / n
        covariance = (raw.reshape(-1, m, m) - n * mean[:, :, None] * mean[:, None, :]) / max(n - 1, 1)
        value, vector = np.linalg.eigh(covariance)
        values.append(np.maximum(value[:, ::-1], 0.0))
        aligned.append(_align(vector[:, :, ::-1], reference))
        totals.append((weights @ squares - n * np.einsum("ij,ij->i", mean, mean)) / max(n - 1, 1))
    return np.concatenate(values), np.concatenate(totals), np.concatenate(aligned)


def _align(vectors: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Each replicate's modes matched to the reference modes (k × m) by largest |inner product|,
    in the reference's order and sign: ``(R, m, k)``. Greedy from the leading reference mode;
    a replicate mode is used once."""
    n_replicates, m, _ = vectors.shape
    inner = np.einsum("km,rmj->rkj", reference, vectors)
    used = np.zeros((n_replicates, vectors.shape[2]), dtype=bool)
    replicates = np.arange(n_replicates)
    aligned = np.empty((n_replicates, m, reference.shape[0]))
    for j in range(reference.shape[0]):
        match = np.argmax(np.where(used, -1.0, np.abs(inner[:, j, :])), axis=1)
        used[replicates, match] = True
        sign = np.where(inner[replicates, j, match] < 0, -1.0, 1.0)
        aligned[:, :, j] = vectors[replicates, :, match] * sign[:, None]
    return aligned


def _pattern_intervals(aligned, basis, quantiles) -> np.ndarray:
    """Percentile intervals ``(2, k, d)`` of the aligned replicate patterns ``basis · aligned[r]``,
    formed a slab of features at a time so R·k·slab float64 stays within ``CLIENT_BYTES / 8``."""
    n_replicates, _, k = aligned.shape
    d = basis.shape[0]
    slab = max(1, CLIENT_BYTES // 8 // (8 * n_replicates * k))
    out = np.empty((2, k, d))
    for start in range(0, d, slab):
        patterns = np.einsum("dm,rmk->rkd", basis[start:start + slab], aligned)
        out[:, :, start:start + slab] = np.quantile(patterns, quantiles, axis=0)
    return out
