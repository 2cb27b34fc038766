"""The PCA family: the one fit road, projections and results shared by PCA and HilbertPCA, and PCA.

Every fit — plain, weighted, standardized or labeled — takes the same road, in
:meth:`BasePCA._fit`::

    source ─▶ matrix ─▶ feature stage ─▶ plan ─▶ solver passes ─▶ small local solve ─▶ model

``as_dask_matrix`` (or the labeled layer, :mod:`daskpca.labeled`, for xarray input) gives the
matrix and the feature weights; the planner (:mod:`daskpca._plan`) picks the solver;
:func:`daskpca._features.solve` runs it with the feature stage fused into its first pass where it
can; :meth:`BasePCA._set_fitted` turns the small result into fitted attributes, and this is the
only place that warns about the result. Transforms take the same stage and layout back
(:func:`daskpca.models.project`, :func:`daskpca.models.reconstruct`).

:class:`BasePCA` holds what the family shares (scikit-learn's ``_BasePCA``); :class:`PCA` adds
what only real PCA has — exact updates and probabilistic PCA's likelihood — and
:class:`daskpca.HilbertPCA` its own solvers and complex scores. Neither switches anything off.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass, replace
from numbers import Integral, Real

import dask
import numpy as np

from . import _features, _plan, _probe, labeled
from ._features import FeatureSpec, FeatureStage, matrix_weights
from ._probabilistic import ProbabilisticMixin
from ._validation import NonFinite, as_dask_matrix, check_nan_policy
from .exceptions import AccuracyWarning, InputError, InputTypeError, NonFiniteInputError
from .models import (ARRAY, BOOL, NONE, PATH, RANDOM_STATE, WEIGHTS, Estimator, Interval, Options, Predicate, info_json,
                     model_matrix, positions, project_matrix, reconstruct, scores_out, stored_params)
from .solvers import SOLVERS, ComponentRequest, SolverResult, covariance
from .passes import (DEVICE_NAMES, Moments, PassClock, combine_moments, flip_signs, for_fit, local_root,
                     job_facts, regroup, to_device, tuned_for_tasks, watched, zarr_arrays)

#: Score scalings of ``transform`` / ``inverse_transform`` (see :mod:`daskpca.labeled`).
SCALINGS = ("none", "unit", "sqrt_lambda")


# ------------------------------------------------------------ what the input itself allows


def source_name(X) -> str:
    """How error messages name the input: its path, its zarr store, its variable, or "X"."""
    import os

    if isinstance(X, (str, os.PathLike)):
        return repr(os.fspath(X))
    store_path = getattr(X, "store_path", None)
    if store_path is not None:  # a zarr.Array
        return f"the zarr array at {str(store_path)!r}"
    if labeled.is_labeled(X):
        name = getattr(X, "name", None)
        return f"the {type(X).__name__} {name!r}" if name is not None else f"the {type(X).__name__}"
    return "X"


def _zarr_arrays(X) -> list:
    """The ``zarr.Array`` objects ``X`` reads: ``X`` itself (a path, opened, or an array), or those
    in the graph of a dask array or of a labeled object's data (``da.from_zarr``, xarray's lazy
    backend wrappers, :class:`~daskpca.passes._decode.ZarrsRead`). Reads metadata only."""
    import os

    import zarr

    if isinstance(X, (str, os.PathLike)):
        return [zarr.open_array(os.fspath(X), mode="r")]
    if isinstance(X, zarr.Array):
        return [X]
    data = X.data if labeled.is_labeled(X) else X
    if not hasattr(data, "__dask_graph__"):
        return []
    return [array for array in zarr_arrays(data) if isinstance(array, zarr.Array)]


def _earlier_model(earlier) -> tuple:
    """``(model, name)`` for ``plan(X, probe=earlier)``: a fitted estimator as it is, a path loaded
    (verified; its store and version name it); anything else refused by name."""
    if isinstance(earlier, (str, os.PathLike)):
        from .models import load

        model = load(earlier)
        version = getattr(model, "_loaded_from", (None, None))[1]
        return model, f"the model at {os.fspath(earlier)!r}" + (f" (version {version})" if version is not None else "")
    if isinstance(earlier, Estimator) or hasattr(earlier, "explained_variance_"):
        return earlier, ""
    raise InputError(f"probe={earlier!r}: expected True (read ≤ 1 % of the rows), False, or an earlier fit of the same "
                     "model — a fitted PCA or Rotator, or the path of a saved one — whose spectrum predicts the passes.")


def refuse_unwritten_store(X, action: str = "a model fitted on it would describe nothing") -> None:
    """Raise for a zarr array of which no chunk was ever written — given as a path, a
    ``zarr.Array``, or read by a dask array or an xarray object (what ``daskpca.io.open_source``
    and the command line give): every value would read as its fill value, and a model of it, an
    update with it or its scores describe nothing (a deleted or never-produced input). Reads
    metadata and at most two chunk keys' existence per array, or lists the keys when neither is
    there; never a chunk. Anything else (or a path that does not open as an array) is left to
    :func:`~daskpca._validation.as_dask_matrix`. ``action`` ends the message: what would go wrong."""
    import os

    try:
        from zarr.core.sync import sync

        arrays = _zarr_arrays(X)
    except Exception:  # noqa: BLE001 — not a zarr array this can inspect: the reader decides
        return
    for array in arrays:
        try:
            if not array.size:
                continue
            stored = getattr(array, "shards", None) or array.chunks  # a sharded array stores whole shards
            grid = [-(-size // chunk) for size, chunk in zip(array.shape, stored)]
            keys = {tuple(0 for _ in grid), tuple(g - 1 for g in grid)}
            if any(sync((array.store_path / array.metadata.encode_chunk_key(key)).exists()) for key in keys):
                continue
            unwritten = array.nchunks_initialized == 0
        except Exception:  # noqa: BLE001 — a store this cannot list: the read decides
            continue
        if unwritten:
            if isinstance(X, (str, os.PathLike)) or X is array:
                name = source_name(X)
            else:  # read through dask or xarray: the store's folder, as the user gave it to the reader
                root = local_root(array.store)
                name = (f"the zarr array at {os.path.join(root, array.path) if array.path else root!r}"
                        if root is not None else source_name(array))
            fill = array.fill_value.item() if hasattr(array.fill_value, "item") else array.fill_value
            raise InputError(
                f"{name} (shape {'×'.join(map(str, array.shape))}) has no data: no chunk of it has been "
                f"written, so every value would read as its fill value ({fill!r}). Write the data first "
                f"(or point at the array that holds it): {action}.")


def refuse_no_variance(result: SolverResult, X) -> None:
    """Raise for data with no variance (all zero, constant, or a store whose chunks all hold one
    value): every variance would be 0 and every ratio "0.00 %", a model of nothing. Read from the
    fit's own result (its total variance comes with its pass): no extra read."""
    if result.total_variance > 0 or not np.isfinite(result.total_variance):
        return
    mean = np.asarray(result.mean)
    n, d = result.n_samples, mean.shape[0]
    if n < 2:
        what = f"a single sample has no variance (n_samples={n}). Pass at least 2 samples"
    elif mean.size and np.all(mean == mean.flat[0]):
        what = (f"has no variance: every value equals {mean.flat[0]:.6g}. Check that it is the field you meant "
                "(a deleted or never-written input reads as its fill value; a mask or a wrong variable can "
                "leave one value everywhere)")
    else:
        what = (f"has no variance: every feature is constant over the {n} samples (values from "
                f"{mean.min():.6g} to {mean.max():.6g}). Check that it is the field you meant (samples as rows, "
                "features as columns; a repeated time step or a wrong variable gives this)")
    raise InputError(f"{source_name(X)} (shape {n}×{d}) {what}: PCA of it has no components, and no model was made.")


def refuse_one_value_batch(new: Moments, X) -> None:
    """Raise for new samples (two or more) that hold one value everywhere — every feature of
    every sample: a deleted, never-produced or masked batch (its fill value), not observations.
    Folded in, they would pull the mean and variances towards that value. A batch whose features
    are constant but differ (a repeated sample) is left alone: a short batch may be one. Read
    from the update's own moments: no extra read."""
    mean = np.asarray(new.mean)
    if new.count < 2 or not mean.size or np.any(np.asarray(new.scatter).diagonal() != 0) \
            or not np.all(mean == mean.flat[0]):
        return
    raise InputError(
        f"{source_name(X)} (shape {new.count}×{mean.shape[0]}) has no variance: every value equals {mean.flat[0]:.6g}. "
        "Check that it is the batch you meant (a deleted or never-written input reads as its fill value; a mask "
        "or a wrong variable can leave one value everywhere): the model was not updated.")


#: Below this, the input-precision term is float64 round-off, which every solver's bound already
#: leaves out (exact solvers report 0, "exact to round-off").
PRECISION_FLOOR = 1e-10
#: The input's precision limits the answer when its term exceeds this fraction of the sampling
#: error of the kept subspace (below it, the rounding is noise among the data's own; the
#: default accuracy, ``_plan.DEFAULT_TOL``, is chosen by the same rule).
SAMPLING_FRACTION = 0.01


def input_precision_bound(result: SolverResult, dtype, asked: float | None = None) -> dict:
    """How far the rounding of the input itself can turn the kept subspace (sin θ), and whether
    that limits the answer.

    The fit computes the components of the values *as stored* exactly (each road centres on a
    shift taken from the data, :mod:`daskpca.passes._moments`); what it cannot do is resolve
    structure finer than the values carry. A value of a dtype with machine epsilon ε is stored to
    within half a unit in its last place; where the mean is large against the spread that unit is
    u = ε·max|μ| for every value (the part ε·|x − μ| is a relative change of the spread itself,
    left out). Rounding to nearest acts as independent noise of variance v = u²/12, uncorrelated
    with the data, and moves the centred covariance by E = (X̃ᵀΔ + ΔᵀX̃ + ΔᵀΔ)/(n − 1), whose block
    coupling kept and discarded directions is, to first order,
    ‖E₂₁‖ ≈ √(v/(n − 1))·(√(total variance) + √(d·λ₁)) + v·(1 + √(d/n)). Davis–Kahan:
    sin θ ≤ ‖E₂₁‖ / (λ_k − λ_{k+1}) (1 when the gap is not larger). An estimate of the rounding's
    reach, like Krylov's gap, not a proof for roundings that conspire.

    It *limits* the answer (``material``) when it exceeds both the accuracy asked (``asked``:
    ``tol``, else DEFAULT_TOL) and :data:`SAMPLING_FRACTION` of the subspace's own sampling error
    √(2/(n − 1))·√(λ_kλ_{k+1})/(λ_k − λ_{k+1}) (North et al. 1982): below that the rounding is
    noise among the data's own.

    λ_{k+1}: the spectrum, the covariance solver's ``next_variance``, Krylov's gap estimate, or
    else ≤ the discarded variance (total − kept); when even that leaves no gap, λ_k itself stands
    for it. Returns ``{"bound", "ulp", "material"}``.
    """
    dtype = np.dtype(dtype)
    values = np.asarray(result.explained_variance, dtype=np.float64)
    k, n, d = values.size, result.n_samples, np.shape(result.mean)[0]
    # No term where nothing is to be resolved: integers are exact, every direction kept, or a kept
    # variance at round-off (data of lower rank: the ill-conditioning warning says that).
    if (not np.issubdtype(dtype, np.inexact) or k == 0 or k >= min(n, d)
            or not values[-1] > _plan.ILL_CONDITIONED_RATIO * values[0]):
        return {"bound": 0.0, "ulp": 0.0, "material": False}
    ulp = float(np.finfo(dtype).eps * np.max(np.abs(result.mean), initial=0.0))
    if result.spectrum is not None and len(result.spectrum) > k:
        following = float(result.spectrum[k])
    elif "next_variance" in result.info:
        following = float(result.info["next_variance"])
    elif np.isfinite(result.info.get("gap", np.nan)):
        following = max(float(values[-1] - result.info["gap"]), 0.0)
    else:
        following = min(max(result.total_variance - float(values.sum()), 0.0), float(values[-1]))
    following = max(following, 0.0)
    gap = float(values[-1] - following)
    if not gap > 0:
        gap = float(values[-1])
    v = ulp * ulp / 12
    coupling = (np.sqrt(v / max(n - 1, 1)) * (np.sqrt(max(result.total_variance, 0.0)) + np.sqrt(d * values[0]))
                + v * (1 + np.sqrt(d / n)))
    bound = float(min(1.0, coupling / gap)) if gap > coupling else 1.0
    sampling = np.sqrt(2.0 / max(n - 1, 1)) * np.sqrt(values[-1] * following) / gap
    asked = _plan.DEFAULT_TOL if asked is None else asked
    material = bool(bound > max(asked, SAMPLING_FRACTION * sampling, PRECISION_FLOOR))
    return {"bound": bound, "ulp": ulp, "material": material}


def info_with_input_precision(result: SolverResult, dtype, asked: float | None = None) -> dict:
    """The result's ``info`` with the input's precision (:func:`input_precision_bound`):
    ``input_precision_bound`` always; added to ``error_bound`` where it limits the answer (the
    solver's own bound then stays in ``solver_error_bound``)."""
    precision = input_precision_bound(result, dtype, asked)
    info = {**result.info, "input_precision_bound": precision["bound"], "input_ulp": precision["ulp"],
            "input_precision_limits": precision["material"]}
    if precision["material"]:
        solver_bound = float(result.info.get("error_bound", np.nan))
        info["solver_error_bound"] = solver_bound
        info["error_bound"] = min(1.0, solver_bound + precision["bound"])  # NaN stays NaN: no bound known
    return info


def _asked_accuracy(model) -> float:
    """The accuracy a fit was asked for: its ``tol``, else the default accuracy (DEFAULT_TOL)."""
    tol = getattr(model, "tol", None)
    return float(tol) if isinstance(tol, Real) and tol > 0 else _plan.DEFAULT_TOL


def input_precision_warning(model, dtype) -> str | None:
    """The :class:`~daskpca.exceptions.AccuracyWarning` of a fit whose input's own precision
    limits its components beyond the accuracy asked (``tol``; without one the default accuracy,
    ``daskpca._plan.DEFAULT_TOL``). An AccuracyWarning, not an IllConditionedWarning: no solver
    does better (that warning's cure, ``solver='tsqr'``, would change nothing); it is a bound
    on the answer, reported in ``error_bound_`` as that warning's class promises."""
    info = model.solver_info_
    if not info.get("input_precision_limits"):
        return None
    bound = float(info["input_precision_bound"])
    asked = _asked_accuracy(model)
    dtype = np.dtype(dtype)
    k = model.n_components_
    return (
        f"the input's own precision limits the components: its values are {dtype.name} around |mean| up to "
        f"{float(np.max(np.abs(model.mean_))):.3g}, each stored to within ~{info['input_ulp']:.1g}, against a spread of "
        f"√λ_{k} = {float(np.sqrt(model.explained_variance_[-1])):.2g}; the kept subspace of the values before "
        f"rounding may differ by sin θ up to {bound:.1e} (solver_info_['input_precision_bound'], included in "
        f"error_bound_), above the accuracy asked ({asked:g}) and not small against the sampling error. The fit "
        "itself loses nothing to the large mean. To "
        "resolve more, store the data less its mean (anomalies)" + (" or in float64" if dtype.itemsize < 8 else "")
        + ", or keep fewer components.")


@dataclass(frozen=True)
class PreparedInput:
    """What :meth:`BasePCA.plan` prepared of one input, kept with the plan it made (not a field of
    the plan: never compared, copied or saved with it) so that ``fit(X, plan=plan)`` runs on
    exactly what was planned and checked, preparing nothing twice: the lazy ``matrix``, its
    labeled ``layout``, the feature stage asked for (``spec``) and the component ``request`` —
    for the input object ``X`` with ``sample_dims`` and the parameter values ``params`` of then.
    Holds no data beyond what the lazy matrix's graph already references."""

    X: object
    sample_dims: object
    params: dict
    matrix: object
    layout: object
    spec: object
    request: ComponentRequest

    def made_for(self, estimator, X, sample_dims) -> bool:
        """Whether this is the preparation ``estimator.fit(X, sample_dims=...)`` would make: the same
        input object, sample dims and parameter values (each the very object of then — one set
        since, even to an equal value, prepares again). A path is never the same input: what it
        names may have been replaced since, so it is opened again."""
        return (self.X is X and not isinstance(X, (str, os.PathLike)) and self.sample_dims == sample_dims
                and all(getattr(estimator, name, None) is value for name, value in self.params.items()))


def prepared_for(plan, estimator, X, sample_dims) -> PreparedInput | None:
    """The :class:`PreparedInput` ``plan`` carries when it is ``estimator.fit(X, ...)``'s, else None."""
    prepared = getattr(plan, "prepared_input", None)
    return prepared if prepared is not None and prepared.made_for(estimator, X, sample_dims) else None


class BasePCA(Estimator):
    """What the PCA family shares: the fit road, ``plan``, projection and reconstruction through
    the feature stage and the layout, the labeled results and the saved model. Not used alone: a
    member declares its parameters, its solvers (``_solver_modules``) and its plan (``_make_plan``).
    """

    _abstract = True
    _model_kind = "PCA (nor a HilbertPCA)"  # what a reader asking for the family wants, in errors
    #: ``update`` is optional in the family: a member that has none says here why (PCA has one).
    _cannot_update: str | None = None
    #: The solvers ``solver=`` names, name → module.
    _solver_modules = SOLVERS
    #: How ``solver=`` spells each of them where that is not its declared name (messages; None: as declared).
    _solver_names: dict | None = None

    # ------------------------------------------------------------------ fitting

    def fit(self, X, y=None, *, sample_dims=None, plan=None):
        """Fit the model to ``X``.

        Parameters
        ----------
        X : array of shape (n_samples, n_features), or xarray DataArray / Dataset
            NumPy or dask array, ``zarr.Array``, or the path/URL of a zarr array; or a labeled
            xarray object (lazy or not), see :mod:`daskpca.labeled`.
        y : ignored
            For scikit-learn's ``Pipeline``.
        sample_dims : str or sequence of str, optional
            Labeled input only (and required there): the dimension(s) indexing samples, e.g.
            ``"time"`` or ``("time", "member")``; every other dimension is a feature dimension.
            Features that are NaN for every sample are dropped and restored as NaN on output.
        plan : Plan, optional
            What :meth:`plan` returned for this ``X`` and these parameters: the fit runs it
            instead of planning again (a batch job plans before its cluster starts, checks the
            plan against its memory, then fits exactly what it checked). Refused, before any
            read, when it was made for another shape or k, or names a solver these parameters
            would not run. A plan made with ``probe=True`` gives block Krylov's progress line its
            ETA from the first pass on (the probe's prediction, until the fit's own from pass 2).

        Returns
        -------
        self
        """
        self._fit(X, sample_dims, plan)
        return self

    def fit_transform(self, X, y=None, *, sample_dims=None, scaling=None):
        """Fit, then return the scores of ``X`` (lazy for dask/zarr input; one more pass)."""
        return self.fit(X, sample_dims=sample_dims).transform(X, scaling=scaling)

    def _fit(self, X, sample_dims, plan=None) -> None:
        """The one fit road: matrix → feature stage → plan → solver → fitted attributes."""
        prepared = None if plan is None else prepared_for(plan, self, X, sample_dims)
        if prepared is None:  # else validated when the plan was made, and unchanged since
            self.validate_params()
        self.__dict__.pop("_loaded_from", None)  # a new fit replaces, it does not modify, a loaded model
        refuse_unwritten_store(X)  # asked again: a store can be deleted between plan and fit
        if prepared is None:
            matrix, layout, spec = self._fit_input(X, sample_dims)
            request = self._request(matrix)
        else:  # planned from this very input: prepared once
            matrix, layout, spec, request = prepared.matrix, prepared.layout, prepared.spec, prepared.request
        if plan is None:
            plan = self._make_plan(matrix, request, spec)
        else:  # planned once; its cache row is the job's (its cluster, later reads): priced again where they changed
            if prepared is None:
                self._check_given_plan(plan, matrix, request)
            if prepared is None or plan.priced_for is None or plan.priced_for != job_facts():
                plan = _plan.with_cache(plan, matrix, self.cache)
        # An ETA from the first pass where someone watches (only block Krylov's passes are
        # predicted): a refit from its own last fit's spectrum (reading nothing: a loaded model
        # refitted on the next version of its field), else — also where an earlier model could not
        # tell — from a probe of its rows.
        if plan.solver == _probe.ROAD.name and self._predicts_unasked(plan):
            if plan.probe is None and hasattr(self, "explained_variance_"):
                plan = self._probed(plan, matrix, spec, X, layout, earlier=self,
                                    name=f"its own last fit (on {self.n_samples_} samples)")
            if (plan.probe is None or plan.probe.earlier and plan.probe.passes is None) and self._rows_affordable(
                    matrix, X, layout):
                plan = self._probed(plan, matrix, spec, X, layout)
        self._fit_plan = plan  # shown by _repr_html_
        name, reason, module = plan.solver, plan.reason, self._solver_modules[plan.solver]
        if spec is not None:
            spec = replace(spec, missing_ok=getattr(module, "ACCEPTS_MISSING", False))
        options = {}
        for option in getattr(module, "OPTIONS", ()):
            options[option] = getattr(self, option)
        if plan.default_tol is not None and "tol" in options:  # auto's certified road (see _plan.DEFAULT_TOL)
            options["tol"] = plan.default_tol
        if getattr(plan, "probe", None) is not None and plan.probe.history and name == plan.probe.road:
            options["probed"] = plan.probe.history  # the ETA from the start (plan(X, probe=True))
            options["probed_converged"] = bool(plan.probe.earlier)  # a finished fit's spectrum: it stands on course
        learns = getattr(module, "earlier_bounds", None)  # a road that learns its count from its last fit's bounds
        if learns and getattr(self, "solver_", None) == name and self.n_features_in_ == matrix.shape[1] and (
                self.n_components_ == request.most_components) and watched():  # other modes converge otherwise
            options[learns] = self.solver_info_.get("bound_history")  # a refit of the same field: its own last fit's
        try:
            with tuned_for_tasks(), PassClock() as clock, for_fit([matrix], plan.cache) as cache:
                result = _features.solve(module, cache.input(matrix), request, spec, random_state=self.random_state, **options)
        except NonFiniteInputError as error:
            if layout is None:
                raise
            raise labeled.located(error, matrix, layout, X) from error
        refuse_no_variance(result, X)
        self._set_fitted(result, name, reason, layout, input_dtype=matrix.dtype)
        self.pass_seconds_, self.fit_seconds_, self.cache_ = np.array(clock.passes), clock.seconds, cache.summary
        self.client_seconds_ = np.array(clock.client)
        if spec is not None:
            self.solver_info_["n_masked_features"] = int(np.sum(~self.feature_stage_.keep))
        unasked = self.solver == "auto" and not getattr(module, "ACCEPTS_MISSING", False)  # ppca: NaN chose it
        for message, category in _plan.fit_warnings(self, module, name, chosen_by_planner=unasked,
                                                    registry=self._solver_modules, names=self._solver_names):
            warnings.warn(message, category, stacklevel=3)
        message = input_precision_warning(self, matrix.dtype)
        if message:
            warnings.warn(message, AccuracyWarning, stacklevel=3)

    def _fit_input(self, X, sample_dims):
        """``(matrix, layout, spec)``: the input as a lazy matrix, its labeled layout (or None)
        and the feature stage asked for (None for a plain fit). Reads no data."""
        device = getattr(self, "device", None)  # a family member without the parameter reads on the host
        if labeled.is_labeled(X):
            source = labeled.from_xarray(X, sample_dims, self.weights)
            matrix = to_device(source.matrix, device)
            return matrix, source.layout, FeatureSpec(source.weights, bool(self.standardize))
        if sample_dims is not None:
            raise InputTypeError(
                f"sample_dims={sample_dims!r} applies to xarray input only; a plain matrix already has "
                "samples as rows."
            )
        matrix = to_device(regroup(as_dask_matrix(X)[0]), device)
        if self.weights is None and not self.standardize:
            return matrix, None, None
        return matrix, None, FeatureSpec(matrix_weights(self.weights, matrix.shape[1]), bool(self.standardize))

    def plan(self, X, *, sample_dims=None, probe=False) -> _plan.Plan:
        """What ``fit(X)`` would do, without reading any data (``X``, ``sample_dims``: as for :meth:`fit`),
        or — with ``probe=True`` — after reading a stated sample of ≤ 1 % of the rows.

        Parameters
        ----------
        probe : bool, fitted PCA, str or os.PathLike, default=False
            True: read ≤ 1 % of the rows (whole storage chunks spread along the sample axis) and
            predict block Krylov's passes for the tol asked (or the certified default's) from their
            spectrum (:mod:`daskpca._probe`): the plan's point estimate of passes and time then
            rests on the data, not on a prior, and says so (``plan.probe``, a line of
            ``print(plan)``). An earlier fit of the same model instead — a fitted PCA (or a
            Rotator of one) or the path of a saved one, e.g. last month's version of this job's
            model: the same prediction from its spectrum (:func:`daskpca._probe.from_model`),
            reading nothing; within a pass of the passes made where the field's spectrum is the
            same (a continuum just below λ_k, where 1 % of the rows is off by 3–5). A watched
            refit of a fitted or loaded estimator does so with its own last fit unasked. ``fit(X,
            plan=plan)`` with that plan starts its ETA from the probe's prediction. Where the probe
            cannot tell (n < 200, constant rows, a computed input; a model of other features or
            weights, or of fewer than k + 1 known variances), the prior stands and the plan says
            why. The road chosen is the same as without the probe.

        Returns
        -------
        Plan
            The solver ``fit`` would run and why (the one asked for, or the planner's choice), its
            passes (``plan.passes``, the feature stage's read included; ``plan.most_passes`` the
            most reads of one that stops on convergence), flops, peak memory per task against the
            budget (the ``distributed`` workers' limits when a client runs), the runner-up, and
            every solver's estimate. ``print(plan)`` shows a table. It carries the input it
            prepared (``plan.prepared_input``, :class:`PreparedInput`): ``fit(X, plan=plan)`` with
            this very ``X`` and unchanged parameters prepares nothing again. Raises what ``fit`` raises
            before any read (a knob the solver ignores: :meth:`~daskpca.models.Estimator.refuse_ignored_knobs`).
        """
        self.validate_params()
        params = self.get_params()  # the values planned with (PreparedInput.made_for)
        matrix, layout, spec = self._fit_input(X, sample_dims)
        request = self._request(matrix)
        prepared = PreparedInput(X, sample_dims, params, matrix, layout, spec, request)
        plan = self._make_plan(matrix, request, spec)
        if probe is not False and probe is not None:
            plan = self._probed(plan, matrix, spec, X, layout, earlier=probe)
        object.__setattr__(plan, "prepared_input", prepared)  # an attribute, not a field of the frozen plan
        return plan

    def _probed(self, plan, matrix, spec, X, layout=None, earlier=True, name="") -> _plan.Plan:
        """``plan`` with the probe's prediction (:mod:`daskpca._probe`; see :meth:`plan`):
        ``earlier`` True probes ≤ 1 % of the rows, else it is the earlier model (or its path;
        ``name``: what the plan calls it, else its path or "an earlier … fit")."""
        if self._solver_modules.get(_probe.ROAD.name) is not _probe.ROAD:
            raise InputError(f"probe={earlier!r}: the probe predicts PCA's block Krylov road; {type(self).__name__} "
                             "has no such road. Plan without probe=.")
        if earlier is not True:
            earlier, named = _earlier_model(earlier)
            name = name or named
            fitted = getattr(earlier, "model_", earlier)  # a rotation: the model it rotates
            if type(fitted) is not type(self):
                raise InputError(f"probe={name or earlier!r} is a {type(fitted).__name__} model; this plan is a "
                                 f"{type(self).__name__}'s. Give an earlier fit of the same {type(self).__name__} "
                                 "(or probe=True to read ≤ 1 % of the rows).")
        # Without a tol, solver="auto" prices block Krylov certified to DEFAULT_TOL (_plan.make_plan).
        target = plan.tol if plan.tol is not None else plan.default_tol or (_plan.DEFAULT_TOL if self.solver == "auto" else None)
        common = dict(tol=target, max_passes=self.max_passes, n_oversamples=getattr(self, "n_oversamples", 10),
                      weights=None if spec is None else spec.weights, standardize=spec is not None and spec.standardize)
        if earlier is not True:
            return plan.with_probe(_probe.from_model(earlier, *matrix.shape, plan.n_components, name=name, **common))
        found = _probe.probe(matrix, plan.n_components, **common,
                             in_memory=X if isinstance(X, np.ndarray) and X.ndim == 2 else None,
                             rows_of=None if layout is None else labeled.row_reader(X, layout))
        return plan.with_probe(found)

    def _predicts_unasked(self, plan) -> bool:
        """Whether a fit whose passes someone watches (a progress line, the log at INFO) predicts
        them without being asked (also with a ``plan`` made without the probe: the probe changes
        no road, only the passes predicted): block Krylov chosen with a tol (asked, or the
        certified default's). Its progress line then has an ETA from the first pass, and the plan
        (``_fit_plan``) says what it rests on."""
        if plan.solver != _probe.ROAD.name or self._solver_modules.get(plan.solver) is not _probe.ROAD:
            return False
        return (plan.tol is not None or plan.default_tol is not None) and watched()

    def _rows_affordable(self, matrix, X, layout=None) -> bool:
        """Whether an unasked probe of the rows reads whole storage chunks within 1 % of them
        (:func:`daskpca._probe.affordable`; in-memory rows always do)."""
        rows_of = None if layout is None else labeled.row_reader(X, layout)
        return (isinstance(X, np.ndarray) and X.ndim == 2) or _probe.affordable(matrix, rows_of)

    def _make_plan(self, array, request: ComponentRequest, spec) -> _plan.Plan:
        """The plan ``fit`` runs: the solver asked for (or the one planner's choice among this
        estimator's declarations, ``_solver_modules``) with every read counted and the pass cache
        priced; refused before any read when an asked solver's task does not fit
        (:func:`~daskpca._plan.check_requested`) or a knob would be ignored
        (:meth:`~daskpca.models.Estimator.refuse_ignored_knobs`). Reads no data."""
        # The member's own answers first: asked between the other modules' calls, each would be a
        # hop back into this one (tests/test_one_road.py counts them).
        requested, options, declarations = self._requested_solver(), self._plan_options(), self._solver_modules
        k = request.most_components
        plan = _plan.make_plan(
            *array.shape, k, array.chunks, array.dtype.itemsize,
            needs_spectrum=request.needs_spectrum, available=tuple(declarations), tol=self.tol, max_passes=self.max_passes,
            requested=requested, reads=None if spec is None else _features.plan_reads(declarations, spec),  # a plain fit adds none
            declarations=None if declarations is SOLVERS else declarations, **_plan.pricing(array, self.cache), **options,
        )
        self.refuse_ignored_knobs(plan.solver, declarations)
        return plan

    def _requested_solver(self) -> str | None:
        """The declaration ``solver=`` names (None: ``"auto"``, the planner chooses)."""
        return None if self.solver == "auto" else self.solver

    def _plan_options(self) -> dict:
        """Further ``make_plan`` keywords of this member (the knobs its cost models read)."""
        return {}

    def _check_given_plan(self, plan, matrix, request: ComponentRequest) -> None:
        """Refuse a plan ``fit`` was given that is not this fit's (reads nothing)."""
        k = request.most_components
        made_for = (plan.n_samples, plan.n_features, plan.n_components)
        if not isinstance(plan, _plan.Plan) or made_for != (*matrix.shape, k) or not self._runs(plan.solver):
            raise InputError(
                f"plan= was made for another fit ({getattr(plan, 'solver', plan)!r:.60} on "
                f"{'×'.join(map(str, made_for)) if isinstance(plan, _plan.Plan) else '?'} samples × features × k); "
                f"this {type(self).__name__} fits {matrix.shape[0]}×{matrix.shape[1]}×{k} with solver={self.solver!r}. "
                "Pass what plan(X) returned for this X and these parameters, or no plan.")
        self.refuse_ignored_knobs(plan.solver, self._solver_modules)

    def _runs(self, solver: str) -> bool:
        """Whether these parameters would run ``solver`` (a planned solver's name)."""
        return solver in self._solver_modules and self.solver in ("auto", solver)

    def _request(self, array) -> ComponentRequest:
        request = ComponentRequest(self.n_components, *array.shape)
        request.validate()
        return request

    def _set_fitted(self, result: SolverResult, solver: str, reason: str, layout, *, input_dtype=None) -> None:
        """Fitted attributes from the solver's result; ``input_dtype`` (the analysed matrix's
        before conversion) adds the input's own precision to ``error_bound_``
        (:func:`input_precision_bound`)."""
        info = result.info if input_dtype is None else info_with_input_precision(result, input_dtype, _asked_accuracy(self))
        signs = flip_signs(result.components)
        k = len(result.explained_variance)
        n_samples, n_features = result.n_samples, result.mean.shape[0]
        kept = float(np.sum(result.explained_variance))
        n_discarded = min(n_samples, n_features) - k
        self.components_ = result.components * signs[:, None]
        self.explained_variance_ = result.explained_variance
        total = result.total_variance
        self.explained_variance_ratio_ = result.explained_variance / total if total > 0 else np.zeros(k)
        self.singular_values_ = np.sqrt(result.explained_variance * max(n_samples - 1, 1))
        self.mean_ = result.mean
        self.n_components_, self.n_samples_, self.n_features_in_ = k, n_samples, n_features
        self.total_variance_ = total
        self.distortion_ = max(total - kept, 0.0)
        self.noise_variance_ = (float(result.info["noise_variance"]) if "noise_variance" in result.info
                                else self.distortion_ / n_discarded if n_discarded > 0 else 0.0)
        self.solver_, self.solver_reason_ = solver, reason
        self.n_passes_ = result.n_passes
        self.solver_info_ = dict(info)
        self.feature_stage_ = result.features if result.features is not None else FeatureStage.identity(n_features)
        self.error_bound_ = _plan.error_bound(self.solver_info_)  # last: the fit's warnings are the planner's too
        self.layout_ = layout
        self._spectrum = result.spectrum

    # ------------------------------------------------------------------ projecting

    def transform(self, X, *, scaling=None, nan="raise"):
        """Scores of ``X``: ``(z − mean_) @ components_.T`` with ``z`` the input through the
        feature stage (divided by √λ when whitening).

        Parameters
        ----------
        X : array of shape (n_samples, n_features), or xarray object for a labeled model
            A labeled model returns a DataArray ``(*sample_dims, "mode")``, modes from 1.
        scaling : {"none", "unit", "sqrt_lambda"}, optional
            Scores as projections (variance λ), divided by √λ (unit variance), or multiplied by
            √λ. Default ``"unit"`` if ``whiten`` else ``"none"``.
        nan : {"raise", "propagate"}, default="raise"
            ``"raise"``: NaN/±inf in ``X`` raise a ``ValueError`` naming the first one (row and
            column, or coordinates for a labeled model). The check runs inside the projection
            tasks — no extra pass: a lazy result raises when it is computed. ``"propagate"``:
            the samples holding them get NaN scores. (Features masked at fit time, NaN
            everywhere, are dropped before and never count.)

        Returns
        -------
        scores : array of shape (n_samples, n_components_)
            NumPy for NumPy input; otherwise a lazy dask array in row blocks of whole chunks of
            ``X`` (the pass's tasks: tiny storage chunks are grouped, see
            :mod:`daskpca.passes._geometry`), one pass when computed. Input's floating dtype.
        """
        self.check_fitted()
        check_nan_policy(nan)
        refuse_unwritten_store(X, "its scores would describe nothing")
        matrix, kind = self.model_input(X)
        scaling, factors = self._score_factors(scaling)
        stage, layout = self.feature_stage_, self.layout_
        scores = project_matrix(matrix, stage, self.mean_, self.components_.T * factors[None, :], nan,
                                positions(stage, layout, X))
        return scores_out(scores, kind, X, layout, scaling)

    def inverse_transform(self, X, *, modes=None, scaling=None):
        """Reconstruction ``scores @ components_ + mean_`` in the original feature space.

        Parameters
        ----------
        X : array of shape (n_samples, n_components_)
            Scores as returned by ``transform`` (whitened if ``whiten=True``); for a labeled
            model the DataArray ``transform`` returned (its ``attrs["scaling"]`` is read back).
        modes : sequence of int, optional
            Components to use, numbered from 1 (e.g. ``[1, 2, 5]``); the scores hold either
            every component or one column per selected mode.
        scaling : {"none", "unit", "sqrt_lambda"}, optional
            How the scores were scaled (see :meth:`transform`).

        Returns
        -------
        X_original : array of shape (n_samples, n_features)
            NumPy for NumPy input, else lazy dask array; un-weighted (divided by the feature
            stage's factor), NaN at masked features. A labeled model returns the field with its
            original dims and coords.
        """
        self.check_fitted()
        if self.layout_ is not None:
            given = labeled.scores_from_xarray(X, modes, self.n_components_)
            matrix, index, lazy = given.matrix, given.modes, given.lazy
            scaling = scaling or given.scaling
        else:
            if labeled.is_labeled(X):
                raise InputTypeError(f"this {type(self).__name__} was fitted on a plain matrix; pass the scores matrix, not an xarray object.")
            matrix, kind = as_dask_matrix(X, name="scores")
            matrix, index = self._select_modes(matrix, modes)
            lazy = kind != "numpy"
        _, factors = self._score_factors(scaling)
        with np.errstate(divide="ignore"):
            unscale = np.where(factors[index] != 0, 1.0 / factors[index], 0.0)
        basis = self._reconstruction_basis()[index] * unscale[:, None]
        rows = self._field_values(reconstruct(matrix, basis, self.mean_, self.feature_stage_, lazy=lazy))
        return labeled.field_from_rows(self.layout_, rows, given) if self.layout_ is not None else rows

    def check_updatable(self, X=None):
        """Raise unless ``update`` can fold new data (``X``) into this model exactly (reads
        nothing): the family declares the capability, a member without ``update`` says why not."""
        self.check_fitted()
        if self._cannot_update is not None:
            raise InputError(self._cannot_update)

    def _reconstruction_basis(self) -> np.ndarray:
        """The (k, d_kept) basis scores are multiplied by to reconstruct: the components."""
        return self.components_

    def _field_values(self, rows):
        """The reconstructed rows as the family member returns them (PCA: as they are)."""
        return rows

    def model_input(self, X):
        """``(matrix, kind)`` of data for a fitted model (lazy, regrouped; the feature stage not
        applied): labeled as at fit time, or a matrix with the input's number of features. The
        one road back into the model, for transforms here and readers such as the bootstrap. With
        ``device`` set, each block moves to the device in the task that reads it (as at fit time)."""
        matrix, kind = model_matrix(X, self.feature_stage_, self.layout_, estimator=type(self).__name__)
        return to_device(matrix, getattr(self, "device", None)), kind

    def _select_modes(self, scores, modes):
        """``(scores, index)``: the columns for ``modes`` (numbered from 1) and their 0-based index."""
        k = self.n_components_
        if modes is None:
            if scores.shape[1] != k:
                raise InputError(
                    f"scores have {scores.shape[1]} columns, but this {type(self).__name__} has {k} components. "
                    "Pass the output of transform()."
                )
            return scores, np.arange(k)
        index = np.atleast_1d(np.asarray(modes, dtype=int)) - 1
        if scores.shape[1] == k:
            scores = scores[:, index]
        if scores.shape[1] != len(index) or index.min() < 0 or index.max() >= k:
            raise InputError(
                f"scores have {scores.shape[1]} columns; expected {k} (all modes) or one "
                f"per selected mode (modes are numbered 1..{k})."
            )
        return scores, index

    def _score_factors(self, scaling: str | None) -> tuple[str, np.ndarray]:
        """``(scaling, factors)``: the per-mode factor turning projections into the scores asked
        for (a zero-variance component scores 0 under "unit", not ∞)."""
        if scaling is None:
            scaling = "unit" if self.whiten else "none"
        if scaling not in SCALINGS:
            raise InputError(f"scaling={scaling!r} is not one of {SCALINGS}.")
        root = np.sqrt(self.explained_variance_)
        if scaling == "none":
            return scaling, np.ones_like(root)
        if scaling == "unit":
            with np.errstate(divide="ignore"):
                return scaling, np.where(root > 0, 1.0 / root, 0.0)
        return scaling, root

    # ------------------------------------------------------------------ EOF conventions

    def to_xarray(self):
        """Fitted results as an ``xarray.Dataset`` (modes numbered from 1).

        ``components`` (mode × feature dims, NaN at masked features), ``mean`` and
        ``feature_scale`` (feature dims) for labeled fits; ``explained_variance``,
        ``explained_variance_ratio``, ``variance_fraction_percent``, ``singular_values``,
        ``north_error`` (λ·√(2/n)), ``north_error_percent`` (mode); attrs with parameters (JSON),
        solver, passes and library version. See :mod:`daskpca.labeled`.
        """
        self.check_fitted()
        return labeled.results_dataset(self)

    def component_maps(self, X, *, kind="correlation", modes=None):
        """Covariance or correlation of each PC with the field ``X`` (lazy; one pass over ``X``).

        See :func:`daskpca.labeled.component_maps` for the formulas.
        """
        self.check_fitted()
        return labeled.component_maps(self, X, kind=kind, modes=modes)

    def north_errors(self) -> np.ndarray:
        """North et al. (1982) typical eigenvalue errors ``explained_variance_ · √(2 / n_samples_)``."""
        self.check_fitted()
        return self.explained_variance_ * np.sqrt(2.0 / self.n_samples_)

    @property
    def n_iter_(self) -> int:
        """Iterations the solver made (see the class docstring for each solver's meaning)."""
        self.check_fitted()
        # Each iterative solver reports its own count (no branching on solver names here).
        return int(self.solver_info_.get("n_iter", 1))
    # ------------------------------------------------------------------ the saved model

    #: Fitted arrays and scalars a saved model holds (with the type each scalar is read back as).
    _MODEL_ARRAYS = ("components_", "explained_variance_", "explained_variance_ratio_", "singular_values_", "mean_")
    _MODEL_SCALARS = {"n_components_": int, "n_samples_": int, "n_features_in_": int, "noise_variance_": float,
                      "total_variance_": float, "distortion_": float, "solver_": str, "solver_reason_": str,
                      "n_passes_": int}

    def _format_write(self):
        """The model's content in format 1 (see :mod:`daskpca.models._format` for the common part).

        - ``model_components`` (mode, feature_kept), ``model_mean`` (feature_kept),
          ``model_explained_variance`` / ``model_spectrum`` ...: the fitted arrays exactly (in the
          solver's, i.e. weighted, space), so a reloaded model's ``transform`` is bit-identical;
        - ``model_keep`` (feature_all, bool) and ``model_factor`` (feature_kept): the feature
          stage, unless it is the identity;
        - ``moments_mean``, ``moments_scatter`` and attr ``moments_count``: the covariance solver's
          sufficient statistics of ``Z``, when present, for exact incremental updates;
        - the labeled view of :meth:`to_xarray` (components / mean over the original feature dims
          and coords, variances over ``mode``);
        - attrs: fitted scalars, ``solver_info`` (JSON), the labeled layout (JSON).
        """
        import xarray as xr

        ds = self.to_xarray()
        dims = {"components_": ("mode", "feature_kept"), "mean_": ("feature_kept",)}
        for name in self._MODEL_ARRAYS:
            ds[f"model_{name.rstrip('_')}"] = xr.DataArray(np.asarray(getattr(self, name)), dims=dims.get(name, ("mode",)))
        if self._spectrum is not None:
            ds["model_spectrum"] = xr.DataArray(np.asarray(self._spectrum), dims=("spectrum",))
        if not self.feature_stage_.is_identity:
            ds["model_keep"] = xr.DataArray(self.feature_stage_.keep, dims=("feature_all",))
            ds["model_factor"] = xr.DataArray(self.feature_stage_.factor, dims=("feature_kept",))
        moments = self.solver_info_.get("moments")
        if moments is not None:
            ds["moments_mean"] = xr.DataArray(moments.mean, dims=("feature_kept",))
            ds["moments_scatter"] = xr.DataArray(moments.symmetric_scatter(), dims=("feature_kept", "feature_kept_2"))
            ds.attrs["moments_count"] = int(moments.count)
        ds.attrs.update({name: convert(getattr(self, name)) for name, convert in self._MODEL_SCALARS.items()})
        ds.attrs["solver_info"] = info_json(self.solver_info_)
        if self.layout_ is not None:
            ds.attrs["layout"] = json.dumps(self.layout_.to_json())
        return ds

    @classmethod
    def _format_missing(cls, ds) -> list:
        return ([name for name in cls._MODEL_SCALARS if name not in ds.attrs]
                + [f"model_{n.rstrip('_')}" for n in cls._MODEL_ARRAYS if f"model_{n.rstrip('_')}" not in ds])

    @classmethod
    def _format_read(cls, ds):
        attrs = ds.attrs
        pca = cls(**stored_params(cls, ds))
        for name in cls._MODEL_ARRAYS:
            setattr(pca, name, ds[f"model_{name.rstrip('_')}"].values)
        for name, convert in cls._MODEL_SCALARS.items():
            setattr(pca, name, convert(attrs[name]))
        pca._spectrum = ds["model_spectrum"].values if "model_spectrum" in ds else None
        pca.solver_info_ = json.loads(attrs.get("solver_info", "{}"))
        pca.error_bound_ = _plan.error_bound(pca.solver_info_)
        if "moments_mean" in ds:
            pca.solver_info_["moments"] = Moments(
                int(attrs["moments_count"]), ds["moments_mean"].values, ds["moments_scatter"].values, NonFinite()
            )
        if "model_keep" in ds:
            pca.feature_stage_ = FeatureStage(ds["model_keep"].values.astype(bool), ds["model_factor"].values)
        else:
            pca.feature_stage_ = FeatureStage.identity(pca.n_features_in_)
        pca.layout_ = labeled.Layout.from_json(json.loads(attrs["layout"]), ds) if "layout" in attrs else None
        return pca

    def _problem(self) -> str | None:
        """The first fitted invariant this model breaks: one k everywhere, shapes that agree with
        the feature stage, finite values, sorted non-negative variances, orthonormal components."""
        k = self.n_components_
        components = np.asarray(self.components_)
        stage = self.feature_stage_
        if components.ndim != 2:
            return f"components_ has shape {components.shape}, not (k, n_features)"
        shapes = {
            "components_": (components.shape, (k, stage.n_kept)),
            "explained_variance_": (np.shape(self.explained_variance_), (k,)),
            "explained_variance_ratio_": (np.shape(self.explained_variance_ratio_), (k,)),
            "singular_values_": (np.shape(self.singular_values_), (k,)),
            "mean_": (np.shape(self.mean_), (stage.n_kept,)),
            "feature_stage_.factor": (np.shape(stage.factor), (stage.n_kept,)),
        }
        for name, (shape, expected) in shapes.items():
            if tuple(shape) != expected:
                return (f"{name} has shape {tuple(shape)} but n_components_={k} and {stage.n_kept} analysed "
                        f"features need {expected}")
        if stage.n_kept != self.n_features_in_:
            return f"the feature mask keeps {stage.n_kept} features but n_features_in_={self.n_features_in_}"
        if not 1 <= k <= max(min(self.n_samples_, stage.n_kept), 1):
            return f"n_components_={k} is impossible for {self.n_samples_} samples of {stage.n_kept} features"
        for name in ("components_", "explained_variance_", "explained_variance_ratio_", "singular_values_", "mean_"):
            if not np.all(np.isfinite(getattr(self, name))):
                return f"{name} contains NaN or ±inf"
        for name in ("noise_variance_", "total_variance_", "distortion_"):
            if not np.isfinite(getattr(self, name)):
                return f"{name}={getattr(self, name)} is not finite"
        variance = np.asarray(self.explained_variance_)
        scale = max(float(np.max(np.abs(variance), initial=0.0)), np.finfo(float).tiny)
        if np.any(variance < -1e-9 * scale):
            return "explained_variance_ has negative entries"
        if np.any(np.diff(variance) > 1e-9 * scale):
            return "explained_variance_ is not sorted in decreasing order"
        gram = components @ components.conj().T  # Cᴴ: Hilbert EOFs are complex
        error = float(np.max(np.abs(gram - np.eye(k)), initial=0.0))
        if error > 1e-6:
            return f"the rows of components_ are not orthonormal (|C·Cᴴ − I| = {error:.2g})"
        moments = self.solver_info_.get("moments")
        if moments is not None:
            if np.shape(moments.mean) != (stage.n_kept,) or np.shape(moments.scatter) != (stage.n_kept, stage.n_kept):
                return "the stored sufficient statistics do not match the analysed features"
            if int(moments.count) != int(self.n_samples_):
                return f"the stored sufficient statistics count {moments.count} samples, n_samples_={self.n_samples_}"
        return None



class PCA(ProbabilisticMixin, BasePCA):
    """Principal component analysis of arrays larger than memory, on Dask.

    Finds the k orthonormal directions of maximum variance of the centered data — equivalently
    the rank-k linear reconstruction with least squared error — and projects onto them. Exact
    solvers read the input once (covariance) or twice (Gram); nothing is held in memory but a
    block at a time and small d×d / n×n matrices.

    Parameters
    ----------
    n_components : int, float, "mle" or None, default=None
        Number of components k. An int in [1, min(n_samples, n_features)]; a float in (0, 1) picks
        the smallest k whose cumulative explained-variance ratio reaches it (e.g. 0.95);
        ``"mle"`` uses Minka's (2000) Bayesian model selection; ``None`` keeps
        min(n_samples, n_features).
    solver : {"auto", "covariance", "gram", ...}, default="auto"
        ``"covariance"``: one pass, d×d covariance, n·d² flops — for n ≫ d.
        ``"gram"``: two passes, n×n Gram matrix (the N < D trick) — for n ≪ d.
        ``"auto"`` picks from the shape; the choice is stored in ``solver_`` and logged on the
        ``"daskpca"`` logger. Further solvers are listed in ``daskpca.solvers.SOLVERS``.
    whiten : bool, default=False
        Scale scores to unit variance: ``transform`` returns ``Λ^{-1/2} Uᵀ (x − x̄)``.
    random_state : int, numpy.random.Generator or None, default=None
        Seed for the randomized and iterative solvers.
    n_oversamples : int, default=10
        Randomized solver: extra sample vectors ℓ − k.
    n_power_iter : int or "auto", default="auto"
        Randomized solver: power (subspace) iterations q; ``"auto"`` chooses 7 when
        k < 0.1·min(n, d) and 4 otherwise (scikit-learn's rule).
    max_iter : int or None, default=None
        Iterative solvers (ALS, probabilistic PCA): most iterations to make (``None``: 200).
    tol : float or None, default=None
        The accuracy asked for. Approximate solvers (``"krylov"``) stop as soon as their error
        bound on the sine of the largest principal angle between the kept subspace and the exact
        one is ≤ ``tol``; with ``solver="auto"`` a ``tol`` lets the planner pick the cheapest
        solver that guarantees it (exact solvers always do). ALS and probabilistic PCA stop when
        the sine between successive subspaces is ≤ ``tol`` (``None``: 1e-8). ``None``:
        ``solver="auto"`` runs an exact solver where it costs about what a certified answer
        does, else block Krylov certified to sin θ ≤ 1e-6 (``daskpca._plan.DEFAULT_TOL``, ≤ 1 %
        of the sampling error √(2/n) of EOFs for any n up to ~10¹⁰; see the README's Solvers).
    max_passes : int or None, default=None
        Approximate solvers: most full reads of the data to make while reaching ``tol``; when the
        budget is spent first, the fit warns (:class:`~daskpca.exceptions.AccuracyWarning`) with
        the bound it reached. ``None``: the solver's default budget.
    init : array of shape (k, n_features) or None, default=None
        Iterative solvers: starting components (a warm start, e.g. yesterday's ``components_``).
    checkpoint : str, os.PathLike or None, default=None
        Iterative solvers (randomized, als, ppca): file where the solver's small state is saved
        after every pass; a rerun of the same job (same input shape/chunks/dtype and parameters)
        resumes from it; removed when the fit completes. A local ``.npz`` path; the state is
        small (d×k bases, d-vectors), never n-sized. Exact solvers ignore it. After a resume
        ``n_passes_`` counts the reads of this process only; ``solver_info_`` has
        ``resumed_from_pass`` and ``total_passes``. See :mod:`daskpca.store.checkpoint`.
    weights : None, "coslat", array, DataArray or dict, default=None
        Per-feature weights w > 0 applied to the data before the solve (the solver analyses
        ``X·w``): ``"coslat"`` = √cos(latitude) from a coordinate named like ``lat`` /
        ``latitude`` (labeled input); an array broadcast over the feature dims (an array of
        shape (n_features,) for a plain matrix); a dict ``{variable: weights}`` for a Dataset.
        Eigenvalues, ratios, scores and ``components_`` are those of the weighted data;
        reconstructions and the labeled ``mean`` are un-weighted (see :mod:`daskpca.labeled`).
    standardize : bool, default=False
        Divide every feature by its standard deviation (ddof=1) as well: correlation-matrix PCA.
        Free with the covariance solver; one extra read with the others (weights and the mask of
        features missing everywhere are free with covariance, gram, randomized and krylov).
    cache : {"auto", "memory", "disk", False}, default="auto"
        Pass cache (:mod:`daskpca.passes._cache`; dask config ``daskpca.cache`` overrides "auto").
    device : {None, "cpu", "cuda"}, default=None
        Where the passes compute. ``"cuda"``: each block is moved to the GPU (CuPy) inside the
        task that reads it, so a zarr store or URL larger than the GPU's memory streams through
        it; needs CuPy and a CUDA GPU (``pip install cupy-cuda12x``), checked before any read.
        ``None`` / ``"cpu"``: blocks stay where they are read — a dask array of CuPy chunks
        (``X.map_blocks(cupy.asarray)``) is computed on its GPU either way. Device or not,
        **fitted attributes are NumPy arrays in host memory** (they are small; saving, loading,
        ``to_xarray`` and scikit-learn take them as they are), only the reduced statistics (d×d,
        n×n, d×ℓ, k×k) leave the device, and ``transform`` / ``inverse_transform`` of device
        input return lazy dask arrays whose chunks stay on the device (NumPy input: NumPy out).

    Attributes
    ----------
    components_ : ndarray of shape (n_components_, n_features)
        Principal axes, orthonormal rows, by decreasing explained variance; each row's
        largest-magnitude entry is positive.
    explained_variance_ : ndarray of shape (n_components_,)
        Variance along each component: eigenvalues of the sample covariance (``ddof=1``).
    explained_variance_ratio_ : ndarray of shape (n_components_,)
        ``explained_variance_ / total_variance_``.
    singular_values_ : ndarray of shape (n_components_,)
        Singular values of the centered data, ``sqrt(explained_variance_ * (n_samples_ - 1))``.
    mean_ : ndarray of shape (n_features,)
    n_components_ : int
    n_samples_ : int
    n_features_in_ : int
    noise_variance_ : float
        Mean of the discarded eigenvalues (the probabilistic-PCA noise estimate, Tipping &
        Bishop 1999); 0 when every component is kept.
    total_variance_ : float
        Trace of the sample covariance (sum of all eigenvalues).
    distortion_ : float
        J = sum of the discarded eigenvalues = ``total_variance_ - explained_variance_.sum()``:
        the mean squared reconstruction error per sample, times n/(n − 1).
    solver_ : str
        The solver that ran (``solver`` itself when it is not ``"auto"``).
    solver_reason_ : str
        Why that solver was used.
    cache_ : dict
        ``{"kind": "memory"|"disk"|None, "bytes", "where", "reason"}`` of the pass cache.
    n_passes_ : int
        Full reads of the input that ``fit`` made (in this process: fewer when it resumed from
        a ``checkpoint``).
    error_bound_ : float
        Bound on the sine of the largest principal angle between ``components_``' span and the
        exact one: for exact solvers round-off over the gap λ_k − λ_{k+1} (1, with an
        :class:`~daskpca.exceptions.AccuracyWarning`, where they are equal to round-off:
        :func:`daskpca.solvers._bounds.exact_bound`), the Krylov solver's a posteriori bound (see
        :mod:`daskpca.solvers.krylov`), NaN for approximate solvers that compute none. Where the
        input's own precision limits the answer (values stored to an ulp that is not small
        against the kept spread: a large mean in float32, or a huge one in float64) that term
        is added, and the fit warns (:class:`~daskpca.exceptions.AccuracyWarning`); see
        :func:`input_precision_bound` and ``solver_info_["input_precision_bound"]``.
    pass_seconds_, fit_seconds_ : ndarray of shape (n_reads,), float
        Wall time of each read this ``fit`` made (the feature stage's own first, if any), and of
        the whole solve. Not saved with the model.
    client_seconds_ : ndarray of shape (n_reads,)
        Wall time of the client's own work after each read (from its end to the next read's
        start, or to the end of the solve): the small local solves — Ritz problems and
        orthogonalisation (Krylov), the d×d or n×n eigensolve (exact solvers) — and building the
        next pass's graph. Not saved with the model.
    n_iter_ : int
        Iterations of the solver, by solver: ``als`` / ``ppca`` — ALS or EM iterations;
        ``randomized`` — power iterations q; ``krylov`` — blocks in the Krylov basis (one per
        pass); ``covariance`` / ``gram`` / ``tsqr`` — 1 (one direct solve, no iteration).
    solver_info_ : dict
        Solver diagnostics (iterations, convergence, sufficient statistics, ...).
    feature_stage_ : FeatureStage
        What the solver analysed: ``Z = X[:, feature_stage_.keep] · feature_stage_.factor``
        (features NaN for every sample dropped; weights / standard deviations applied; see
        :mod:`daskpca._features`). The identity (every feature, factor 1) for a plain fit.
        ``components_``, ``mean_`` and the variances describe ``Z``.
    layout_ : Layout or None
        How labeled (xarray) input maps onto the matrix and back (:mod:`daskpca.labeled`);
        ``None`` for a model fitted on a plain matrix.

    Notes
    -----
    Input in float32 is read as float32 and converted to float64 block by block: every
    accumulation is float64. ``transform`` and ``inverse_transform`` return the input's
    floating dtype (float64 for integer input), computed in float64.

    References
    ----------
    .. [1] I. T. Jolliffe, *Principal Component Analysis*, 2nd ed., Springer, 2002.
    .. [2] C. M. Bishop, *Pattern Recognition and Machine Learning*, ch. 12, Springer, 2006.
    .. [3] T. F. Chan, G. H. Golub, R. J. LeVeque, "Updating formulae and a pairwise algorithm
       for computing sample variances", 1979.
    .. [4] T. P. Minka, "Automatic choice of dimensionality for PCA", NIPS 2000.

    Examples
    --------
    >>> import numpy as np, dask.array as da
    >>> from daskpca import PCA
    >>> rng = np.random.default_rng(0)
    >>> X = da.from_array(rng.standard_normal((10_000, 50)), chunks=(2_000, 50))
    >>> pca = PCA(n_components=5).fit(X)
    >>> pca.components_.shape, pca.solver_, pca.n_passes_
    ((5, 50), 'covariance', 1)
    >>> pca.transform(X).shape
    (10000, 5)
    """

    #: Each parameter's allowed forms, checked before any read (shape-dependent limits later, and
    #: ``n_components`` entirely by :class:`~daskpca.solvers._base.ComponentRequest`: its limit is min(n, d)).
    _parameter_constraints = {
        "solver": [Options(SOLVERS, also=("auto",))],  # SOLVERS read when checked: solvers may be registered later
        "whiten": [BOOL],
        "standardize": [BOOL],
        "random_state": [RANDOM_STATE],
        "n_oversamples": [Interval(Integral, 0, None)],
        "n_power_iter": [Options(("auto",)), Interval(Integral, 0, None)],
        "max_iter": [NONE, Interval(Integral, 1, None)],
        "tol": [NONE, Interval(Real, 0, None)],
        "max_passes": [NONE, Interval(Integral, 1, None)],
        "checkpoint": [NONE, PATH],
        "weights": [WEIGHTS],
        "init": [NONE, ARRAY],
        "cache": [Options(("auto", "memory", "disk")), Predicate(lambda v: v is False, "False")],
        "device": [NONE, Options(DEVICE_NAMES)],
    }
    #: Parameters that steer one solver's reads or iterations: given (not left at their default)
    #: to a solver that does not take them (its module's ``OPTIONS``), they are refused.
    #: ``checkpoint`` is a place, not a knob: a solver with no state between passes has none to save.
    _solver_knobs = ("n_oversamples", "n_power_iter", "max_iter", "tol", "max_passes", "init")

    def __init__(
        self,
        n_components=None,
        *,
        solver="auto",
        whiten=False,
        random_state=None,
        n_oversamples=10,
        n_power_iter="auto",
        max_iter=None,
        tol=None,
        max_passes=None,
        init=None,
        checkpoint=None,
        weights=None,
        standardize=False,
        cache="auto",
        device=None,
    ):
        self.n_components = n_components
        self.solver = solver
        self.whiten = whiten
        self.random_state = random_state
        self.n_oversamples = n_oversamples
        self.n_power_iter = n_power_iter
        self.max_iter = max_iter
        self.tol = tol
        self.max_passes = max_passes
        self.init = init
        self.checkpoint = checkpoint
        self.weights = weights
        self.standardize = standardize
        self.cache = cache
        self.device = device

    def update(self, X):
        """Fold new samples into the fitted model exactly, reading only the new data (one pass).

        The covariance solver keeps its sufficient statistics (count, mean, scatter; d² float64)
        in ``solver_info_["moments"]``; the new rows' statistics are merged with them
        (Chan–Golub–LeVeque) and the d×d eigenproblem is solved again, so the result equals a
        fit on the old and new samples together, to float64 round-off. ``n_components`` is
        applied again (a variance fraction may now keep a different k). The feature stage (mask,
        weights) and the labeled layout stay those of the first fit.

        Parameters
        ----------
        X : array of shape (n_new_samples, n_features), or labeled data like at fit time

        Returns
        -------
        self

        Raises
        ------
        ValueError
            When the model keeps no sufficient statistics (solvers other than covariance), was
            standardized (its scale would change), or holds samples of the same stamps (labeled).
        """
        layout = self.check_updatable(X)
        refuse_unwritten_store(X, "the model would take its fill value for new samples, and was not updated")
        matrix, _ = self.model_input(X)
        with tuned_for_tasks():
            (new,) = dask.compute(covariance.moments_graph(self.feature_stage_.apply(matrix)))
        refuse_one_value_batch(new, X)
        merged = combine_moments([self.solver_info_["moments"], new])
        request = ComponentRequest(self.n_components, merged.count, self.n_features_in_)
        request.validate()
        result = covariance.result_from_moments(merged, request)
        n_before = self.n_samples_
        info = {k: v for k, v in self.solver_info_.items() if k != "moments"}
        # The fit's reason quoted the old sample count; say what this model now is instead.
        reason = (f"update: the covariance statistics of {merged.count - n_before} new samples merged "
                  f"exactly into those of {n_before} ({merged.count} samples in all)")
        self._set_fitted(replace(result, features=self.feature_stage_), "covariance", reason, layout,
                         input_dtype=matrix.dtype)
        self.solver_info_ = {**info, **self.solver_info_, "updated_with": merged.count - n_before}
        return self

    def check_updatable(self, X=None):
        """Raise unless :meth:`update` can fold ``X`` in exactly (reads nothing); the layout it keeps."""
        super().check_updatable(X)
        if self.solver_info_.get("moments") is None:
            raise InputError(
                f"this model was fitted with solver={self.solver_!r}, which keeps no sufficient "
                "statistics, so it cannot be updated exactly. Refit on all the data, with "
                "solver='covariance' if it should be updatable later."
            )
        if self.standardize:
            raise InputError(
                "a standardized model cannot be updated exactly: each feature's scale would change "
                "with the new data. Refit on all the data."
            )
        return self.layout_ and (self.layout_ if X is None else self.layout_.with_new_samples(X))

    def _plan_options(self) -> dict:
        """PCA's knobs the planner's cost models read (:meth:`BasePCA._make_plan`)."""
        return dict(n_oversamples=self.n_oversamples, n_power_iter=self.n_power_iter, options={"max_iter": self.max_iter})

