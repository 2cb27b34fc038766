"""``HilbertPCA``: complex (Hilbert) EOFs of real fields, for propagating signals.

The estimator is the PCA family's road (:class:`daskpca.pca.BasePCA`) with one step swapped: the
solver is :mod:`daskpca.solvers.hilbert` (the analytic signal of every feature's series, then the
Hermitian Gram matrix; two passes over column strips). Everything else is the one fit road — labeled input,
masks, weights, the saved model — and the fitted attributes mean what they mean for PCA, with
complex values where the analysis is complex:

- ``components_`` (k, d_kept) complex: eigenvectors of the Hermitian covariance, each scaled so
  that its largest-|·| entry is real positive (a complex eigenvector is defined up to a phase).
  ``np.abs`` gives the spatial amplitude, ``np.angle`` the spatial phase (radians).
- ``transform(X)`` complex scores ``z·v`` with ``z`` the analytic signal of ``X − mean_``: their
  modulus is the temporal amplitude, their angle the temporal phase. ``scaling`` as in PCA.
- ``inverse_transform(scores)`` the real field ``Re(scores·vᴴ) + mean_`` (un-weighted, NaN at
  masked features; labeled for a labeled model).
- ``explained_variance_`` and ratios are those of the complex signal (real and imaginary parts'
  variances add), as in xeofs's ``HilbertEOF``.

``to_xarray()`` adds ``components_amplitude`` and ``components_phase`` for labeled models.
HilbertPCA derives from the family's base (:class:`daskpca.pca.BasePCA`), not from PCA: it has no
``update`` (the Hilbert transform of a longer series changes the old samples' analytic signal,
and no statistics are kept to fold new ones into) and no ``score`` / ``score_samples`` /
``get_covariance`` / ``get_precision`` (probabilistic PCA's likelihood is that of real data).
"""

from __future__ import annotations

from dataclasses import replace
from numbers import Integral, Real

import numpy as np

from .. import _plan, labeled
from ..models import BOOL, NONE, RANDOM_STATE, WEIGHTS, Interval, Options, Predicate, scores_out
from ..passes import like, map_column_blocks, namespace, on_device, tree_reduce
from .._validation import check_nan_policy, find_nonfinite
from ..exceptions import InvalidParameterError, NonFiniteInputError
from ..pca import PCA, BasePCA
from ..solvers import hilbert as hilbert_solver
from ..solvers import hilbert_krylov

SOLVER, KRYLOV = "hilbert", "hilbert-krylov"
#: ``solver=`` → (the fitted ``solver_`` name, the solver module).
#: ``--solver`` / ``solver=`` → (the solver's name, its declaration: solve, cost model, capabilities).
HILBERT_SOLVERS = {"gram": (SOLVER, hilbert_solver.DECLARATION), "krylov": (KRYLOV, hilbert_krylov.DECLARATION)}


class HilbertPCA(BasePCA):
    """Complex (Hilbert) EOF analysis, out of core: PCA of the analytic signal along the samples.

    Parameters
    ----------
    n_components : int, float or None, default=None
        As for :class:`PCA` (a variance fraction of the complex signal's variance works).
    solver : {"auto", "gram", "krylov"}, default="auto"
        ``"gram"``: exact, through the n×n Hermitian Gram matrix (2 passes; 16·n² bytes per task,
        three in a merge). ``"krylov"``: block Krylov on that matrix applied strip by strip, never
        formed — for long series whose Gram matrix does not fit a task — with an error bound
        (``error_bound_``); passes: as many as ``tol`` needs, + 1. ``"auto"``: the one planner's
        choice (:mod:`daskpca._plan`, as PCA's), by predicted time among the roads that fit a task
        and guarantee ``tol`` — without one, the exact road where it costs about what Krylov
        certified to ``DEFAULT_TOL`` (1e-6) does (its dense n×n ``eigh`` rarely does), else that.
        Input stored by rows only (one time step per chunk) is re-laid out into column strips
        first, on either road (one read of it; see :mod:`daskpca.passes._geometry`).
    tol : float in (0, 1) or None, default=None
        Krylov only: stop when the bound on sin θ of the components' span is ≤ ``tol``.
    max_passes : int or None, default=None
        Krylov only: the read budget (an :class:`~daskpca.exceptions.AccuracyWarning` when it is
        spent before ``tol`` is met).
    padding : {"exp", "none"}, default="exp"
        Exponential padding of each series before the FFT, against edge effects (xeofs's).
    decay_factor : float, default=0.2
        Decay rate of the padding, as a fraction of the series' length (0.05–0.2 usual; smaller
        for more variable data).
    whiten, weights, standardize, random_state
        As for :class:`PCA` (``standardize`` costs one extra read).
    cache : {"auto", "memory", "disk", False}, default="auto"
        The pass cache, as for :class:`PCA`: the Krylov road's passes after the first (and the
        Gram road's second) read the kept blocks instead of the source.
    device : {None, "cpu", "cuda"}, default=None
        Where the passes compute, as for :class:`PCA`: ``"cuda"`` moves each block to the GPU
        (CuPy) in the task that reads it; the analytic signal is then formed by CuPy's FFT on the
        device. A dask array of CuPy chunks is computed on its GPU either way. Fitted attributes
        are NumPy; ``transform`` of device input returns device chunks.

    Notes
    -----
    Rows must be consecutive time steps: the Hilbert transform runs along them. Passes: 2 with the
    Gram solver, Krylov passes + 1 with Krylov (one more with ``standardize``); ``plan(X)`` shows
    both. See :mod:`daskpca.solvers.hilbert` and :mod:`daskpca.solvers.hilbert_krylov` for flops
    and memory.

    Examples
    --------
    >>> hpca = HilbertPCA(2, weights="coslat").fit(sst, sample_dims="time")    # doctest: +SKIP
    >>> np.angle(hpca.to_xarray()["components"])                                # doctest: +SKIP
    """

    _solver_modules = dict(HILBERT_SOLVERS.values())
    _solver_names = {name: spelled for spelled, (name, _) in HILBERT_SOLVERS.items()}
    _parameter_constraints = {
        "solver": [Options(("auto", *HILBERT_SOLVERS))],
        "tol": [NONE, Interval(Real, 0, 1, "neither")],
        "max_passes": [NONE, Interval(Integral, 1, None)],
        "padding": [Options(hilbert_solver.PADDINGS)],
        "decay_factor": [Interval(Real, 0, 1, "right")],
        "whiten": [BOOL],
        "standardize": [BOOL],
        "weights": [WEIGHTS],
        "random_state": [RANDOM_STATE],
        "cache": [Options(("auto", "memory", "disk")), Predicate(lambda v: v is False, "False")],
        "device": PCA._parameter_constraints["device"],  # one declaration, PCA's
    }
    _solver_knobs = ("tol", "max_passes")
    _cannot_update = (
        "a HilbertPCA model cannot be updated: the Hilbert transform runs along each feature's whole series, so "
        "new samples change the analytic signal (and the Gram matrix) of the old ones, and the model keeps no "
        "statistics to fold them into. Refit HilbertPCA on the whole series.")

    def __init__(self, n_components=None, *, solver="auto", tol=None, max_passes=None, padding="exp",
                 decay_factor=0.2, whiten=False, weights=None, standardize=False, random_state=None, cache="auto",
                 device=None):
        self.n_components = n_components
        self.solver = solver
        self.tol = tol
        self.max_passes = max_passes
        self.padding = padding
        self.decay_factor = decay_factor
        self.whiten = whiten
        self.weights = weights
        self.standardize = standardize
        self.random_state = random_state
        self.cache = cache
        self.device = device

    def _fit_input(self, X, sample_dims):
        if labeled.is_labeled(X) and sample_dims is not None:  # rows must be consecutive times
            labeled.check_time_axis(X, labeled.normalize_sample_dims(sample_dims), "Hilbert EOFs")
        return super()._fit_input(X, sample_dims)

    def _runs(self, solver: str) -> bool:
        return solver in self._solver_modules and (self.solver == "auto" or HILBERT_SOLVERS[self.solver][0] == solver)

    def _check_params_together(self) -> None:
        try:  # tol bounds sin θ here (PCA's tol also serves ALS's stopping rule); before any read
            hilbert_krylov.check_read_budget(self.tol, self.max_passes)
        except ValueError as error:
            raise InvalidParameterError(str(error)) from None

    def _requested_solver(self) -> str | None:
        return None if self.solver == "auto" else HILBERT_SOLVERS[self.solver][0]

    def _plan_options(self) -> dict:
        """What the one planner needs of HilbertPCA besides its declarations (``_solver_modules``:
        the exact Gram road and block Krylov on the n×n Hermitian Gram of the analytic signal):
        how ``solver=`` spells them, and the padding their strips' FFTs take."""
        return dict(names=self._solver_names, options={"padding": self.padding})

    def _make_plan(self, array, request, spec) -> _plan.Plan:
        """The one planner's plan (:meth:`BasePCA._make_plan`), and what Hilbert's strips add:
        input stored in a few row blocks (too small to re-lay out) is rechunked into strips."""
        plan = super()._make_plan(array, request, spec)
        row_blocks = len(array.chunks[0])
        if row_blocks > 1 and not plan.estimate(plan.solver).copy_passes:
            warning = (f"X is stored in {row_blocks} row blocks: each column strip (all {array.shape[0]} samples) is "
                       "assembled from them by a rechunk — no extra read, but the strip is held twice while it is "
                       "built. Chunks that span the sample dimension avoid it.")
            plan = replace(plan, warnings=[*plan.warnings, warning])
        return plan

    def transform(self, X, *, scaling=None, nan="raise"):
        """Complex scores of ``X`` (lazy for lazy input; one pass over column strips).

        ``nan="raise"`` (default): a NaN/±inf in ``X`` raises, naming its row and column (checked
        in the strip tasks: no extra pass). ``"propagate"``: the FFT spreads a missing value over
        its feature's whole series, so every score becomes NaN — fill gaps first instead.
        """
        import dask.array as da

        self.check_fitted()
        check_nan_policy(nan)
        matrix, kind = self.model_input(X)
        if self.layout_ is not None:
            labeled.check_time_axis(X, self.layout_.sample_dims, "Hilbert scores")
        scaling, factors = self._score_factors(scaling)
        Z = self.feature_stage_.apply(matrix)
        basis = self.components_.T * factors[None, :]
        parts = map_column_blocks(Z, _strip_scores, "hilbert-scores", self.mean_, basis, self.padding,
                                  self.decay_factor, nan)
        total = tree_reduce(parts, _sum, "hilbert-scores-merge")
        scores = da.from_delayed(total, shape=(Z.shape[0], self.n_components_), dtype=np.complex128,
                                 meta=np.empty((0, 0), dtype=np.complex128))
        device = on_device(Z)
        if not device.on_host and kind != "numpy":
            # The strips' partial scores are summed on the device; the sum, like every reduction's,
            # reaches the host at the merge tree's root, and goes back in one n×k copy so that
            # device input gets device chunks (as PCA's transform gives; NumPy input: NumPy out).
            scores = scores.map_blocks(device.asarray, dtype=np.complex128, meta=device.meta(np.complex128))
        return scores_out(scores, kind, X, self.layout_, scaling)

    def _reconstruction_basis(self) -> np.ndarray:
        """Complex scores reconstruct through vᴴ: the conjugate components."""
        return np.conj(self.components_)

    def _field_values(self, rows):
        """The real field ``Re(scores·vᴴ) + mean_`` (see :meth:`BasePCA.inverse_transform`)."""
        return rows.real

    def to_xarray(self):
        """As :meth:`PCA.to_xarray`, with ``components_amplitude`` and ``components_phase``."""
        ds = super().to_xarray()
        for name in [str(v) for v in ds.data_vars if str(v).startswith("components")]:
            eofs = ds[name]
            ds[name.replace("components", "components_amplitude", 1)] = eofs.copy(
                data=np.abs(eofs.values)).assign_attrs(long_name="spatial amplitude |v|")
            ds[name.replace("components", "components_phase", 1)] = eofs.copy(
                data=np.angle(eofs.values)).assign_attrs(long_name="spatial phase arg(v), radians", units="rad")
        return ds


def _strip_scores(strip, col_offset, mean, basis, padding, decay_factor, nan):
    """(n, k) contribution of one column strip to the complex scores (on the strip's device)."""
    width = strip.shape[1]
    if nan == "raise":
        bad = find_nonfinite(strip, 0, col_offset)
        if bad.count:
            raise NonFiniteInputError(
                f"X contains {bad.count} non-finite value(s) (NaN or ±inf) in this strip; the first is at "
                f"row {bad.first[0]}, column {bad.first[1]}. Hilbert scores need complete series: fill "
                "the gaps first (transform(X, nan='propagate') would make every score NaN)."
            )
    xp = namespace(strip)
    x = xp.asarray(strip, dtype=xp.float64) - like(mean[col_offset : col_offset + width], strip)
    basis = like(basis[col_offset : col_offset + width], strip)
    scores = xp.zeros((x.shape[0], basis.shape[1]), dtype=xp.complex128)
    for columns, z in hilbert_solver.analytic_blocks(x, padding=padding, decay_factor=decay_factor, center=False):
        scores += z @ basis[columns]
    return scores


def _sum(parts):
    total = parts[0].copy()
    for part in parts[1:]:
        total += part
    return total
