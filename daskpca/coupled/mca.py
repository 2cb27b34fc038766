r"""Maximum covariance analysis (MCA) of two fields larger than memory.

MCA (Bretherton, Smith & Wallace 1992) finds pairs of patterns ``(u_i, v_i)`` of two fields X
(n × dx) and Y (n × dy) sharing their samples that maximise the covariance of their scores: the
singular value decomposition of the cross-covariance

    C = Z̃xᵀ Z̃y / (n − 1) = U Σ Vᵀ,      Z = X[:, keep]·factor, Z̃ = Z − 1·z̄ᵀ,

where each field goes through its own feature stage (:mod:`daskpca._features`: features NaN for
every sample dropped, weights such as ``"coslat"``, standardisation). Outputs follow xeofs's
MCA: the singular vectors as each field's patterns (``components_x_``, ``components_y_``), the
singular values σ_i, the squared covariance fraction σ_i²/‖C‖²_F, the covariance fraction
σ_i/Σσ_j, each field's scores (:meth:`MCA.transform`) and the homogeneous and heterogeneous
correlation patterns (:meth:`MCA.patterns`).

**Paths and passes** (a pass reads both fields once, in the same tasks):

- ``"exact"`` — 1 pass: each row block's cross-scatter centred on its own means, merged exactly
  (the Chan update on the cross term, :mod:`daskpca.solvers.cross_covariance`), the per-feature
  finite counts and variances of both fields in the same pass; the dx×dy SVD on the client.
  Memory per task: a block and three dx×dy float64 matrices. Every singular value is computed,
  so both fractions are exact.
- ``"krylov"`` — when dx×dy does not fit a task: 1 pass for the per-feature statistics (masks,
  weights, means), then block Krylov on v ↦ Z̃xᵀ(Z̃y·v), u ↦ Z̃yᵀ(Z̃x·u), one pass per block, until
  the a posteriori bound on the singular subspaces is ≤ ``tol`` or ``max_passes`` are spent
  (:func:`daskpca.solvers.cross_covariance.krylov_svd` states the bound). ‖C‖_F and the sum of all
  singular values are not known there: both fractions are NaN.

Both paths are declared where they are solved (:data:`daskpca.solvers.cross_covariance.MCA_PATHS`:
solve, cost model, capabilities), and MCA plans through the one planner
(:func:`daskpca._plan.make_plan`, the two fields read together): ``"auto"`` takes the exact path
when its largest task fits the task memory budget, else the Krylov path (n_components given).
:meth:`MCA.plan` says which, and why, reading nothing.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import replace
from functools import partial
from numbers import Integral, Real

import dask
import numpy as np

from .. import _plan, labeled
from .._features import FeatureStage
from ..exceptions import AccuracyWarning, InputError, InvalidParameterError
from ..models import (BOOL, NONE, RANDOM_STATE, WEIGHTS, Estimator, Interval, Options, PerField, Predicate, info_json,
                      read_field, stored_params, write_field)
from ..solvers import cross_covariance as cc
from ..passes import flip_signs, for_fit, releases_slab_buffers, tuned_for_tasks
from ..solvers.krylov import check_accuracy_options
from ..pca import PCA, PRECISION_FLOOR
from .fields import Field, fields, model_field, project_field, resolve

#: Each path's declaration (solve, cost model, the knobs it takes — the others would be ignored
#: there, so they are refused — and whether it is exact), by name.
PATH_DECLARATIONS = cc.MCA_PATHS
PATHS = ("auto", *PATH_DECLARATIONS)
#: Passes the Krylov path makes (its statistics pass included) when neither ``tol`` nor
#: ``max_passes`` is given.
DEFAULT_MAX_PASSES = cc.DEFAULT_MAX_PASSES


def input_precision_bound(solution: cc.CrossSolution, dtype_x, dtype_y) -> dict:
    """How far the rounding of the two fields' stored values can turn the k pairs of singular
    subspaces (sin θ), as :func:`daskpca.pca.input_precision_bound` says for PCA: the fit computes
    the modes of the values *as stored* exactly, but a value of a dtype with machine epsilon ε and
    a mean large against its spread is stored to within u = ε·max|μ| (weighted, as the means
    are), which acts as independent noise of variance v = u²/12. It moves the cross-covariance by
    E = (X̃ᵀΔ_y + Δ_xᵀỸ + Δ_xᵀΔ_y)/(n − 1), of norm about
    √(v_y/(n − 1))·(√T_x + √(d_y·T_x)) + √(v_x/(n − 1))·(√T_y + √(d_x·T_y)) + √(v_xv_y)·(√d_x + √d_y)/√(n − 1)
    (T the fields' total variances, standing for their leading ones too: an overestimate), and
    Wedin: sin θ ≤ ‖E‖/(σ_k − σ_{k+1}) (1 when the gap is not larger). σ_{k+1} is the exact
    path's, or Krylov's estimate (``info["next_singular_value"]``,
    :func:`~daskpca.solvers.cross_covariance.krylov_svd`); unknown, σ_k stands for the
    gap. An estimate of the rounding's reach, not a proof for roundings that conspire. Returns
    ``{"bound", "ulp_x", "ulp_y"}`` (0 where nothing is resolved: integer fields, every mode
    kept, a kept singular value at round-off)."""
    values = np.asarray(solution.singular_values, dtype=np.float64)
    k, n = values.size, solution.n_samples
    dx, dy = np.shape(solution.mean_x)[0], np.shape(solution.mean_y)[0]
    ulps = [float(np.finfo(dtype).eps * np.max(np.abs(mean), initial=0.0)) if np.issubdtype(dtype, np.inexact) else 0.0
            for dtype, mean in ((np.dtype(dtype_x), solution.mean_x), (np.dtype(dtype_y), solution.mean_y))]
    none = {"bound": 0.0, "ulp_x": ulps[0], "ulp_y": ulps[1]}
    if not any(ulps) or k == 0 or k >= min(n - 1, dx, dy) or not values[-1] > _plan.ILL_CONDITIONED_RATIO * values[0]:
        return none
    vx, vy = ulps[0] ** 2 / 12, ulps[1] ** 2 / 12
    tx, ty = (max(float(solution.info.get(f"total_variance_{side}", 0.0)), 0.0) for side in "xy")
    scale = np.sqrt(max(n - 1, 1))
    norm = (np.sqrt(vy) * (np.sqrt(tx) + np.sqrt(dy * tx)) + np.sqrt(vx) * (np.sqrt(ty) + np.sqrt(dx * ty))
            + np.sqrt(vx * vy) * (np.sqrt(dx) + np.sqrt(dy))) / scale
    following = float(solution.info.get("next_singular_value", 0.0))
    gap = float(values[-1] - min(max(following, 0.0), values[-1]))
    if not gap > 0:
        gap = float(values[-1])
    return {**none, "bound": float(min(1.0, norm / gap)) if gap > norm else 1.0}


class MCA(Estimator):
    """Maximum covariance analysis of two fields sharing their samples, on Dask.

    Parameters
    ----------
    n_components : int or None, default=None
        Number of mode pairs k, in [1, min(n_samples − 1, dx, dy)] (the rank the cross-covariance
        can have); ``None`` keeps all of them (exact path only).
    solver : {"auto", "exact", "krylov"}, default="auto"
        The path (see the module docstring); ``"auto"`` is exact when the dx×dy cross-covariance
        fits a task.
    weights : None, "coslat", array, dict, or a pair of these, default=None
        Per-feature weights of each field as for :class:`daskpca.PCA`; a tuple or list of two
        gives X's and Y's, anything else applies to both (pass arrays as NumPy arrays, not lists).
    standardize : bool or pair of bool, default=False
        Divide each field's features by their standard deviation (one flag, or X's and Y's).
    tol : float or None, default=None
        Krylov path: stop once the bound on the sine of the largest principal angle between the
        computed and the exact singular subspaces (of each field) is ≤ ``tol``.
    max_passes : int or None, default=None
        Krylov path: most reads of the fields, the statistics pass included (default 20); when
        spent before ``tol`` is met the fit warns (:class:`~daskpca.exceptions.AccuracyWarning`).
    n_oversamples : int, default=10
        Krylov path: block size ℓ = k + n_oversamples.
    random_state : int, numpy.random.Generator or None
        Krylov path: the Gaussian starting blocks.
    cache : {"auto", "memory", "disk", False}, default="auto"
        The pass cache (:mod:`daskpca.passes._cache`), as for :class:`daskpca.PCA`: on the Krylov path
        the statistics pass keeps both fields' blocks and the Krylov passes read those.
        ``cache_`` says what was kept and where.
    device : {None, "cpu", "cuda"}, default=None
        Where the passes compute, as for :class:`daskpca.PCA`: ``"cuda"`` moves each block of
        both fields to the GPU (CuPy) in the task that reads it; dask arrays of CuPy chunks are
        computed on their GPU either way. Only the dx×dy (or d×ℓ) reductions leave the device;
        fitted attributes are NumPy, ``transform`` of device input returns device chunks.

    Attributes
    ----------
    components_x_, components_y_ : ndarray of shape (k, dx_kept), (k, dy_kept)
        Singular vectors (orthonormal rows) in each field's weighted space, the patterns of
        xeofs's ``components()``; each pair's signs make the largest |entry| of the X pattern
        positive (the pair flips together, so σ stays positive).
    singular_values_ : ndarray of shape (k,)
        Singular values σ of the cross-covariance C (ddof=1), decreasing.
    squared_covariance_fraction_, covariance_fraction_ : ndarray of shape (k,)
        σ_i²/‖C‖²_F and σ_i/Σ_j σ_j over all singular values (NaN on the Krylov path).
    total_squared_covariance_ : float
        ‖C‖²_F (NaN on the Krylov path).
    mean_x_, mean_y_ : ndarray of shape (dx_kept,), (dy_kept,)
        Means of the analysed (weighted) fields.
    feature_stage_x_, feature_stage_y_ : FeatureStage
    layout_x_, layout_y_ : Layout or None
    n_components_, n_samples_, n_features_x_, n_features_y_ : int
    solver_, solver_reason_ : str
    n_passes_ : int
        Reads of the two fields (each pass reads both once).
    error_bound_ : float
        The exact path's round-off over the gap σ_k − σ_{k+1} (1, with a warning, where they are
        equal to round-off); the Krylov path's bound on the subspaces' sin θ. Plus, with an
        AccuracyWarning, the fields' own precision where it exceeds the accuracy asked (float32
        values around a large mean: ``solver_info_["input_precision_bound"]``).
    solver_info_ : dict

    Examples
    --------
    >>> import numpy as np
    >>> from daskpca import MCA
    >>> rng = np.random.default_rng(0)
    >>> s = rng.standard_normal((500, 2))
    >>> X = s @ rng.standard_normal((2, 30)) + 0.1 * rng.standard_normal((500, 30))
    >>> Y = s @ rng.standard_normal((2, 20)) + 0.1 * rng.standard_normal((500, 20))
    >>> mca = MCA(2).fit(X, Y)
    >>> mca.components_x_.shape, mca.components_y_.shape, mca.n_passes_
    ((2, 30), (2, 20), 1)
    """

    _parameter_constraints = {
        "n_components": [NONE, Interval(Integral, 1, None)],
        "solver": [Options(PATHS)],
        "weights": [PerField((WEIGHTS,))],
        "standardize": [PerField((BOOL,))],
        "tol": [NONE, Interval(Real, 0, None)],
        "max_passes": [NONE, Interval(Integral, 1, None)],
        "n_oversamples": [Interval(Integral, 0, None)],
        "random_state": [RANDOM_STATE],
        "cache": [Options(("auto", "memory", "disk")), Predicate(lambda v: v is False, "False")],
        "device": PCA._parameter_constraints["device"],  # one declaration, PCA's
    }
    _solver_knobs = ("tol", "max_passes", "n_oversamples")
    _fitted_attribute = "components_x_"
    _fit_call = "fit(X, Y)"

    def __init__(self, n_components=None, *, solver="auto", weights=None, standardize=False, tol=None,
                 max_passes=None, n_oversamples=10, random_state=None, cache="auto", device=None):
        self.n_components = n_components
        self.solver = solver
        self.weights = weights
        self.standardize = standardize
        self.tol = tol
        self.max_passes = max_passes
        self.n_oversamples = n_oversamples
        self.random_state = random_state
        self.cache = cache
        self.device = device

    # ------------------------------------------------------------------ fitting

    def fit(self, X, Y, *, sample_dims=None, earlier=None):
        """Fit the coupled modes of ``X`` and ``Y``.

        Parameters
        ----------
        X, Y : array of shape (n_samples, dx) and (n_samples, dy), or xarray objects
            NumPy or dask arrays, ``zarr.Array`` s or zarr paths; or two labeled objects with the
            same sample dims, whose samples are aligned by coordinate.
        sample_dims : str or sequence of str, optional
            Labeled input only (and required there), as for :meth:`daskpca.PCA.fit`.
        earlier : MCA, str or os.PathLike, optional
            An earlier fit of the same fields (a fitted MCA, or the path of a saved one: the
            version a scheduled refit replaces), as for :meth:`plan`: a watched fit's progress line
            shows the Krylov passes its bounds give from the first pass, and
            ``solver_info_["planned_passes"]`` is that count (``"planned_from"`` says whose). A
            refit of this MCA itself needs none (its own last fit is used). Only the prediction
            reads it.

        Raises
        ------
        ValueError
            Before any read: parameters out of range, fields of different sample counts or
            sample coordinates (the samples in one field only are named), k too large for
            either field. After the one statistics pass: a field all NaN, or partly missing.
        """
        fields = self._fields(X, Y, sample_dims)
        reference = self._earlier_model(earlier)
        plan = self._plan(fields, reference)
        x, y = fields
        stored = (x.matrix.dtype, y.matrix.dtype)  # the values as stored: their rounding (_add_input_precision)
        declaration = PATH_DECLARATIONS[plan.path]
        options = {option: getattr(self, option) for option in declaration.options}
        learns = declaration.earlier_bounds  # a road that learns its count from its last fit's bounds
        if learns:  # the progress line's count from the first pass, and solver_info_'s planned_passes
            options[learns] = self._earlier_bounds(plan.path, x, y, reference)
        with tuned_for_tasks(), for_fit([x.matrix, y.matrix], plan.cache) as cache:
            x, y = (replace(f, matrix=cache.input(f.matrix)) for f in (x, y))
            solution = declaration.solve(x.matrix, y.matrix, resolve=(partial(resolve, x), partial(resolve, y)),
                                         choose_k=self._narrowed_k, random_state=self.random_state, **options)
        self._set_fitted(solution, (x.layout, y.layout), plan.path, plan.reason)
        self._add_input_precision(solution, *stored)
        if self.tol is not None and solution.error_bound > self.tol:  # the Krylov path's bound, above tol
            self._warn_bound_missed(solution)
        elif declaration.exact and solution.error_bound >= 1.0:  # σ_k = σ_{k+1} to round-off
            warnings.warn(_plan.tied_modes_warning(self.n_components_, "σ", float(self.singular_values_[-1]), None,
                                                   "singular_values_"), AccuracyWarning, stacklevel=2)
        self.cache_ = cache.summary
        self.__dict__.pop("_loaded_from", None)
        return self

    def _add_input_precision(self, solution: cc.CrossSolution, dtype_x, dtype_y) -> None:
        """The fields' own precision (:func:`input_precision_bound`)
        in ``solver_info_``, and added to ``error_bound_`` with an AccuracyWarning where it exceeds
        the accuracy asked (``tol``, else ``DEFAULT_TOL``): a float32 field around |mean| 2·10⁴
        turned the modes of the values before rounding by 2.8e-4 while the bound said 1.4e-13–4e-13. As
        PCA does (:func:`daskpca.pca.info_with_input_precision`)."""
        precision = input_precision_bound(solution, dtype_x, dtype_y)
        asked = float(self.tol) if self.tol is not None else _plan.DEFAULT_TOL
        limits = precision["bound"] > max(asked, PRECISION_FLOOR)
        self.solver_info_.update(input_precision_bound=precision["bound"], input_ulp_x=precision["ulp_x"],
                                 input_ulp_y=precision["ulp_y"], input_precision_limits=bool(limits))
        if not limits:
            return
        self.solver_info_["solver_error_bound"] = self.error_bound_
        self.error_bound_ = min(1.0, self.error_bound_ + precision["bound"])
        warnings.warn(
            f"the fields' own precision limits the modes: their values ({np.dtype(dtype_x).name}, "
            f"{np.dtype(dtype_y).name}) are stored to within ~{precision['ulp_x']:.1g} (X) and ~{precision['ulp_y']:.1g} (Y) "
            f"against σ_{self.n_components_} = {float(self.singular_values_[-1]):.2g}; the modes of the values before "
            f"rounding may differ by sin θ up to {precision['bound']:.1e} (solver_info_['input_precision_bound'], included "
            f"in error_bound_), above the accuracy asked ({asked:g}). The fit itself loses nothing to the large means. To "
            "resolve more, store the fields less their means (anomalies) or in float64, or keep fewer modes.",
            AccuracyWarning, stacklevel=3)

    def _fields(self, X, Y, sample_dims) -> tuple[Field, Field]:
        """Both fields as matrices with their specs, checked as a pair (reads nothing)."""
        self.validate_params()
        x, y = fields(X, Y, sample_dims, self.weights, self.standardize, self.device)
        n, dx, dy = x.matrix.shape[0], x.matrix.shape[1], y.matrix.shape[1]
        if n < 2:
            raise InputError(f"MCA needs at least 2 shared samples to form a cross-covariance; X and Y share {n}. "
                             "Pass more samples (time steps) of both fields.")
        bound = self._rank_bound(n, dx, dy)
        if self.n_components is not None and self.n_components > bound:
            raise InputError(
                f"n_components={self.n_components} is more than the cross-covariance of {n} samples, {dx} X "
                f"features and {dy} Y features can have: at most min(n_samples − 1, dx, dy) = {bound} modes. "
                f"Ask for {bound} or fewer.")
        return x, y

    @staticmethod
    def _rank_bound(n, dx, dy) -> int:
        return max(min(n - 1, dx, dy), 0)

    def _check_params_together(self) -> None:
        check_accuracy_options(self.tol, self.max_passes)
        if self.solver == "krylov" and self.n_components is None:
            raise InvalidParameterError("solver='krylov' computes the leading modes only: give n_components.")

    def plan(self, X, Y, *, sample_dims=None, earlier=None) -> _plan.Plan:
        """What :meth:`fit` would do — path, passes, largest task against the budget — reading nothing.
        Raises what ``fit`` raises before any read (a knob the path ignores, e.g. ``max_passes``
        with ``solver="exact"``: :meth:`~daskpca.models.Estimator.refuse_ignored_knobs`).

        The Krylov path's passes are the planner's model's, or — for a refit of this MCA, or given
        ``earlier``, an earlier fit of the same fields (a fitted MCA or the path of a saved one,
        loaded and verified) that took that path for the same k and block — those its bounds
        give for ``tol`` (:func:`~daskpca.solvers.krylov.passes_from_history`), and the plan says
        "from the earlier fit's bounds"."""
        return self._plan(self._fields(X, Y, sample_dims), self._earlier_model(earlier))

    def _plan(self, fields, earlier=None) -> _plan.Plan:
        """The one planner's plan (:func:`daskpca._plan.make_plan`) of the two fields read together,
        among the paths these parameters allow (the Krylov path finds the leading modes only: it
        needs n_components); the pass cache priced for both fields; the knobs refused. ``earlier``:
        a fitted MCA whose bounds predict the Krylov path's passes (None: this one, if fitted)."""
        x, y = fields
        (n, dx), dy = x.matrix.shape, y.matrix.shape[1]
        itemsize = max(x.matrix.dtype.itemsize, y.matrix.dtype.itemsize)
        available = tuple(name for name, path in PATH_DECLARATIONS.items() if self.n_components is not None or path.exact)
        # A refit of the same fields: a path that learns its count from its last fit's bounds (the
        # Krylov path's) is planned from them.
        learnt = {path.earlier_bounds: bounds for name, path in PATH_DECLARATIONS.items()
                  if path.earlier_bounds and (bounds := self._earlier_bounds(name, x, y, earlier)) is not None}
        plan = _plan.make_plan(
            n, dx + dy, self._rank_bound(n, dx, dy) if self.n_components is None else int(self.n_components),
            (x.matrix.chunks[0], x.matrix.chunks[1] + y.matrix.chunks[1]), itemsize,
            needs_spectrum=self.n_components is None, available=available, n_oversamples=self.n_oversamples,
            tol=self.tol, max_passes=self.max_passes, requested=None if self.solver == "auto" else self.solver,
            declarations=PATH_DECLARATIONS, fields=(dx, dy), options=learnt,
            **_plan.joint_pricing([x.matrix, y.matrix], self.cache))  # both fields' pass cache and storage chunks
        self.refuse_ignored_knobs(plan.path, PATH_DECLARATIONS)
        return plan

    @staticmethod
    def _earlier_model(earlier):
        """``earlier`` (:meth:`plan`) as a fitted MCA: one as it is, a path loaded and verified
        (:meth:`load` refuses a store of another kind by name); anything else refused by name."""
        if earlier is None or isinstance(earlier, MCA):
            if earlier is not None:
                earlier.check_fitted()
            return earlier
        if isinstance(earlier, (str, os.PathLike)):
            return MCA.load(earlier)
        raise InputError(f"earlier={earlier!r}: expected an earlier fit of the same fields — a fitted MCA, or the path "
                         "of a saved one — whose bounds predict the Krylov path's passes; or None.")

    def _earlier_bounds(self, path: str, x: Field, y: Field, earlier=None) -> list | None:
        """The bound after each pass of ``earlier``'s fit (None: this model's last fit) when it
        took ``path`` on fields of the same features as ``x`` and ``y``, for the k and block these
        parameters ask (a refit, e.g. on the next version of the fields), else None: what the plan
        and the progress line predict a refit's passes from
        (:func:`~daskpca.solvers.krylov.passes_from_history`). Other modes or another block
        converge otherwise: their bounds would say nothing of this fit's."""
        model = self if earlier is None else earlier
        if getattr(model, "solver_", None) != path or not hasattr(model, "n_features_x_"):
            return None
        if (model.n_features_x_, model.n_features_y_) != (x.matrix.shape[1], y.matrix.shape[1]):
            return None
        info = getattr(model, "solver_info_", {})
        block = info.get("sketch_size")  # absent from models saved before it was recorded
        k = getattr(model, "n_components_", None)
        if k is None or k != self.n_components or block is not None and block != min(
                k + self.n_oversamples, model.feature_stage_x_.n_kept, model.feature_stage_y_.n_kept):
            return None
        return info.get("bounds")

    def _warn_bound_missed(self, solution) -> None:
        """The Krylov path's bound stayed above ``tol``: say why it stopped and what to change."""
        exact = "or use the exact path (solver='exact'; --solver exact) if dx×dy fits a task"
        if solution.stopped == "invariant":
            why = (f"stopped after {self.n_passes_} reads because its Krylov spaces became invariant: more passes "
                   "cannot lower the bound. What is left is round-off, or kept modes not separated from the next "
                   f"(equal or zero singular values: then they are not unique). Keep fewer modes, loosen tol, {exact}.")
        else:
            why = (f"spent its read budget, max_passes={self.max_passes or DEFAULT_MAX_PASSES} (--max-passes), "
                   f"in {self.n_passes_} reads. Raise max_passes or n_oversamples, {exact}.")
        warnings.warn(f"MCA's Krylov path ended with a bound of {solution.error_bound:.2g} on the subspaces' sin θ, "
                      f"above tol={self.tol}: it {why}", AccuracyWarning, stacklevel=3)

    def _narrowed_k(self, n, stage_x: FeatureStage, stage_y: FeatureStage) -> int:
        bound = self._rank_bound(n, stage_x.n_kept, stage_y.n_kept)
        if self.n_components is not None and self.n_components > bound:
            raise InputError(
                f"n_components={self.n_components} is more than the cross-covariance can have once the features "
                f"missing everywhere are dropped ({stage_x.n_kept} of X, {stage_y.n_kept} of Y are left): at most "
                f"{bound} modes.")
        return bound if self.n_components is None else int(self.n_components)

    def _set_fitted(self, solution: cc.CrossSolution, layouts, solver: str, reason: str) -> None:
        """Fitted attributes from a path's :class:`~daskpca.solvers.cross_covariance.CrossSolution`."""
        values, total_squared, sum_values = solution.singular_values, solution.total_squared, solution.sum_values
        signs = flip_signs(solution.components_x)
        # C order, as a loaded model's: BLAS may round a product differently for another layout,
        # and a reloaded model's scores must be bit-identical.
        self.components_x_ = np.ascontiguousarray(solution.components_x * signs[:, None])
        self.components_y_ = np.ascontiguousarray(solution.components_y * signs[:, None])
        self.singular_values_ = np.asarray(values, dtype=np.float64)
        self.total_squared_covariance_ = float(total_squared)
        self.squared_covariance_fraction_ = self.singular_values_**2 / total_squared if total_squared > 0 else \
            np.full(len(values), np.nan)
        self.covariance_fraction_ = self.singular_values_ / sum_values if sum_values > 0 else \
            np.full(len(values), np.nan)
        self.mean_x_, self.mean_y_ = solution.mean_x, solution.mean_y
        self.n_components_ = len(values)
        self.n_samples_ = int(solution.n_samples)
        stages = solution.stages
        self.feature_stage_x_, self.feature_stage_y_ = stages
        self.n_features_x_, self.n_features_y_ = stages[0].n_input, stages[1].n_input
        self.layout_x_, self.layout_y_ = layouts
        self.solver_, self.solver_reason_ = solver, reason
        self.n_passes_ = int(solution.n_passes)
        self.error_bound_ = float(solution.error_bound)
        self.solver_info_ = dict(solution.info)
    # ------------------------------------------------------------------ projecting

    def transform(self, X, Y, *, nan="raise"):
        """Scores of each field on its patterns: ``((z_x − mean_x_)·Uₓᵀ, (z_y − mean_y_)·U_yᵀ)``.

        As xeofs's ``scores()`` (not normalised). Lazy for dask/zarr input (one pass per field
        when computed), NumPy for NumPy input, DataArrays ``(*sample_dims, "mode")`` for a
        labeled model. Either may be ``None`` to score one field only. ``nan``: as for
        :meth:`daskpca.PCA.transform` (``"raise"`` names the first NaN/±inf inside the task).
        """
        self.check_fitted()
        return tuple(None if data is None else
                     project_field(data, stage, layout, mean, components.T, self.device, name=name, estimator="MCA",
                                   scaling="none", nan=nan)
                     for (name, components, mean, stage, layout), data in zip(self._per_field(), (X, Y)))

    @releases_slab_buffers  # the pass's per-thread slab buffers (cross_covariance._staged_slabs) go when it ends
    def patterns(self, X, Y):
        """Homogeneous and heterogeneous correlation patterns, in one pass reading both fields.

        Homogeneous: the correlation of each feature of a field with that field's scores
        (``corr(X, r_x)``, ``corr(Y, r_y)``); heterogeneous: with the *other* field's scores
        (``corr(X, r_y)``, ``corr(Y, r_x)``) — as xeofs's ``homogeneous_patterns()`` and
        ``heterogeneous_patterns()`` (without the p-values). Correlations are invariant to the
        feature stage's per-feature factor, so they are those of the data.

        Returns
        -------
        dict
            ``{"homogeneous": (H_x, H_y), "heterogeneous": (G_x, G_y)}``, each (k, d_input) NumPy
            arrays (NaN at masked features), or labeled over each field's feature dims with
            ``mode`` for a labeled model.
        """
        self.check_fitted()
        (_, _, _, stage_x, layout_x), (_, _, _, stage_y, layout_y) = self._per_field()
        matrix_x, _ = model_field(X, stage_x, layout_x, self.device, name="X", estimator="MCA")
        matrix_y, _ = model_field(Y, stage_y, layout_y, self.device, name="Y", estimator="MCA")
        if matrix_x.shape[0] != matrix_y.shape[0]:
            raise InputError(f"X has {matrix_x.shape[0]} samples and Y {matrix_y.shape[0]}: pass the same samples.")
        with tuned_for_tasks():
            (sums,) = dask.compute(cc.pattern_sums_graph(matrix_x, matrix_y, stage_x, stage_y, self.mean_x_,
                                                         self.mean_y_, self.components_x_.T, self.components_y_.T))
        corr_x, corr_y = cc.correlations(sums)
        k = self.n_components_
        maps = {"homogeneous": (corr_x[:, :k], corr_y[:, k:]), "heterogeneous": (corr_x[:, k:], corr_y[:, :k])}
        return {kind: tuple(self._pattern_out(stage.restore(m.T), layout, kind)
                            for m, stage, layout in zip(pair, (stage_x, stage_y), (layout_x, layout_y)))
                for kind, pair in maps.items()}

    def _pattern_out(self, rows, layout, kind):
        if layout is None:
            return rows
        k = self.n_components_
        coords = {labeled.MODE: (labeled.MODE, np.arange(1, k + 1))}
        out = layout.unstack_features(rows, leading_dims=(labeled.MODE,), leading_shape=(k,), leading_coords=coords)
        return out.assign_attrs(long_name=f"{kind} correlation pattern")

    # ------------------------------------------------------------------ results

    def to_xarray(self):
        """Fitted results as an ``xarray.DataTree``: at the root the per-mode values
        (``singular_values``, ``squared_covariance_fraction``, ``covariance_fraction``) over
        ``mode`` (from 1); in ``/X`` and ``/Y`` each field's ``components`` (mode × its feature
        dims, NaN at masked features), ``mean`` (data units) and ``feature_scale`` — two groups
        because the fields may have different grids under the same dim names."""
        import xarray as xr

        self.check_fitted()
        k = self.n_components_
        root = xr.Dataset(coords={labeled.MODE: (labeled.MODE, np.arange(1, k + 1))})
        for name, doc in (("singular_values", "σ of the cross-covariance (ddof=1)"),
                          ("squared_covariance_fraction", "σ²/‖C‖²_F"), ("covariance_fraction", "σ/Σσ")):
            root[name] = xr.DataArray(getattr(self, f"{name}_"), dims=(labeled.MODE,), attrs={"long_name": doc})
        root.attrs.update({"estimator": "MCA", "solver": self.solver_, "n_passes": self.n_passes_,
                           "n_samples": self.n_samples_, "error_bound": self.error_bound_,
                           "total_squared_covariance": self.total_squared_covariance_})
        children = {}
        for name, components, mean, stage, layout in self._per_field():
            rows = {"components": stage.restore(components), "mean": stage.restore(mean / stage.factor)[None],
                    "feature_scale": stage.restore(stage.factor)[None]}
            ds = xr.Dataset()
            for key, value in rows.items():
                leading = ((labeled.MODE,), (k,)) if key == "components" else ((), ())
                if layout is None:
                    ds[key] = xr.DataArray(value if key == "components" else value[0],
                                           dims=(*leading[0], "feature"))
                    continue
                array = layout.unstack_features(value, leading_dims=leading[0], leading_shape=leading[1], leading_coords={})
                if layout.is_dataarray:
                    ds[key] = array
                else:
                    for var in array.data_vars:
                        ds[f"{key}_{var}"] = array[var]
            children[name] = xr.DataTree(ds.assign_coords({labeled.MODE: np.arange(1, k + 1)}))
        return xr.DataTree(root, children=children)

    def _per_field(self):
        yield "X", self.components_x_, self.mean_x_, self.feature_stage_x_, self.layout_x_
        yield "Y", self.components_y_, self.mean_y_, self.feature_stage_y_, self.layout_y_

    # ------------------------------------------------------------------ the saved model

    def _format_write(self):
        """The model's content (estimator ``"MCA"``): the fitted arrays exactly
        (``model_components_x`` ...), each field's feature stage and labeled layout
        (:func:`daskpca.models._format.write_field`) and the fitted scalars."""
        import xarray as xr

        ds = xr.Dataset()
        for name in ("singular_values_", "squared_covariance_fraction_", "covariance_fraction_"):
            ds[f"model_{name.rstrip('_')}"] = xr.DataArray(getattr(self, name), dims=("mode",))
        for name, components, mean, stage, layout in self._per_field():
            tag = name.lower()
            ds[f"model_components_{tag}"] = xr.DataArray(components, dims=("mode", f"feature_kept_{tag}"))
            ds[f"model_mean_{tag}"] = xr.DataArray(mean, dims=(f"feature_kept_{tag}",))
            ds = write_field(ds, tag, stage, layout)
        ds.attrs.update({
            "n_samples": self.n_samples_, "solver": self.solver_, "solver_reason": self.solver_reason_,
            "n_passes": self.n_passes_, "error_bound": self.error_bound_,
            "total_squared_covariance": self.total_squared_covariance_,
            # What the path recorded (the Krylov path's bound after each pass: what a refit of the
            # loaded model predicts its passes from), as PCA's models keep theirs.
            "solver_info": info_json(self.solver_info_),
        })
        return ds

    @classmethod
    def _format_missing(cls, ds) -> list:
        return [name for name in ("n_samples", "solver", "n_passes") if name not in ds.attrs]

    @classmethod
    def _format_read(cls, ds):
        model = cls(**stored_params(cls, ds))
        (stage_x, layout_x), (stage_y, layout_y) = (read_field(ds, tag) for tag in ("x", "y"))
        attrs = ds.attrs
        stored = cc.CrossSolution(
            ds["model_components_x"].values, ds["model_components_y"].values, ds["model_singular_values"].values,
            int(attrs["n_samples"]), ds["model_mean_x"].values, ds["model_mean_y"].values, (stage_x, stage_y),
            n_passes=int(attrs["n_passes"]), error_bound=float(attrs["error_bound"]),
            total_squared=float(attrs["total_squared_covariance"]), sum_values=np.nan,
            info=json.loads(attrs.get("solver_info", "{}")))  # stores written before it was kept: none
        model._set_fitted(stored, (layout_x, layout_y), str(attrs["solver"]), str(attrs["solver_reason"]))
        # The fractions are stored, not re-derived: bit-identical to the saved model's.
        model.squared_covariance_fraction_ = ds["model_squared_covariance_fraction"].values
        model.covariance_fraction_ = ds["model_covariance_fraction"].values
        return model

    def _problem(self) -> str | None:
        """The first fitted invariant this model breaks (None when it keeps all)."""
        k = self.n_components_
        for name, components, mean, stage, _ in self._per_field():
            if components.shape != (k, stage.n_kept) or mean.shape != (stage.n_kept,):
                return f"the {name} patterns have shape {components.shape}, expected ({k}, {stage.n_kept})"
            if not (np.all(np.isfinite(components)) and np.all(np.isfinite(mean))):
                return f"the {name} patterns or mean contain NaN or ±inf"
            if not np.allclose(components @ components.T, np.eye(k), atol=1e-8):
                return f"the {name} patterns are not orthonormal"
        values = self.singular_values_
        if not np.all(np.isfinite(values)) or np.any(values < 0) or np.any(np.diff(values) > 1e-9 * max(values[0], 1e-300)):
            return "the singular values are not finite, non-negative and decreasing"
        return None
