"""The PCA estimator: parameters, the one fit road, projections, and the saved model.

Every fit — plain, weighted, standardized or labeled — takes the same road, in
:meth:`PCA._fit`::

    source ─▶ matrix ─▶ feature stage ─▶ plan ─▶ solver passes ─▶ small local solve ─▶ model

``as_dask_matrix`` (or the labeled layer, :mod:`daskpca.labeled`, for xarray input) gives the
matrix and the feature weights; the planner (:mod:`daskpca._plan`) picks the solver;
:func:`daskpca._features.solve` runs it with the feature stage fused into its first pass where it
can; :meth:`PCA._set_fitted` turns the small result into fitted attributes, and this is the only
place that warns about the result. Transforms take the same stage and layout back.
"""

from __future__ import annotations

import warnings
from dataclasses import replace

import dask
import numpy as np

from . import _features, _plan, labeled
from ._features import FeatureSpec, FeatureStage, matrix_weights
from .solvers._graph import share, shared
from .solvers._linalg import flip_signs, one_blas_thread_per_task
from .solvers._progress import PassClock
from .store.model import SavedModelMixin
from .solvers._moments import combine_moments
from ._params import ParamsMixin, check_knobs, check_params
from ._probabilistic import ProbabilisticMixin, project_block
from ._validation import as_dask_matrix, check_n_features, check_nan_policy
from .exceptions import InputError, InputTypeError, NonFiniteInputError, NotFittedError
from .solvers import SOLVERS, _cache, covariance
from .solvers._base import ComponentRequest, SolverResult
from .solvers._geometry import geometry_of, regroup

#: Score scalings of ``transform`` / ``inverse_transform`` (see :mod:`daskpca.labeled`).
SCALINGS = ("none", "unit", "sqrt_lambda")


class PCA(ProbabilisticMixin, SavedModelMixin, ParamsMixin):
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
        the sine between successive subspaces is ≤ ``tol`` (``None``: 1e-8). ``None``: "auto" is
        exact where that costs about a certified answer, else Krylov to sin θ ≤ 1e-6 (why: the README).
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
        Pass cache (:mod:`daskpca.solvers._cache`; dask config ``daskpca.cache`` overrides "auto").

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
        exact one: 0 for exact solvers, the Krylov solver's a posteriori bound (see
        :mod:`daskpca.solvers.krylov`), NaN for approximate solvers that compute none.
    pass_seconds_, client_seconds_, fit_seconds_ : ndarray of shape (n_reads,), ..., float
        Wall time of each read this ``fit`` made (the feature stage's own first, if any), of the
        client's work after each, and of the whole solve. Not saved with the model.
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

    #: The solvers ``solver=`` names, name → module.
    _solver_modules = SOLVERS

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
    # ------------------------------------------------------------------ fitting

    def fit(self, X, y=None, *, sample_dims=None):
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

        Returns
        -------
        self
        """
        self._fit(X, sample_dims)
        return self

    def fit_transform(self, X, y=None, *, sample_dims=None, scaling=None):
        """Fit, then return the scores of ``X`` (lazy for dask/zarr input; one more pass)."""
        return self.fit(X, sample_dims=sample_dims).transform(X, scaling=scaling)

    def _fit(self, X, sample_dims) -> None:
        """The one fit road: matrix → feature stage → plan → solver → fitted attributes."""
        check_params(self, solvers=SOLVERS)
        self.__dict__.pop("_loaded_from", None)  # a new fit replaces, it does not modify, a loaded model
        matrix, layout, spec = self._fit_input(X, sample_dims)
        request = self._request(matrix)
        plan = self._fit_plan = self._make_plan(matrix, request, spec)  # shown by _repr_html_
        name, reason, module = plan.solver, plan.reason, self._solver_modules[plan.solver]
        if spec is not None:
            spec = replace(spec, missing_ok=getattr(module, "ACCEPTS_MISSING", False))
        options = {o: plan.default_tol if o == "tol" and plan.default_tol else getattr(self, o) for o in getattr(module, "OPTIONS", ())}
        try:
            with one_blas_thread_per_task(), PassClock() as clock, _cache.for_fit([matrix], plan.cache) as cache:
                result = _features.solve(module, cache.input(matrix), request, spec, random_state=self.random_state, **options)
        except NonFiniteInputError as error:
            if layout is None:
                raise
            raise labeled.located(error, matrix, layout, X) from error
        self._set_fitted(result, name, reason, layout)
        self.pass_seconds_, self.client_seconds_, self.fit_seconds_ = np.array(clock.passes), np.array(clock.client), clock.seconds
        self.cache_ = cache.summary
        if spec is not None:
            self.solver_info_["n_masked_features"] = int(np.sum(~self.feature_stage_.keep))
        unasked = self.solver == "auto" and not getattr(module, "ACCEPTS_MISSING", False)  # ppca: NaN chose it
        for message, category in _plan.fit_warnings(self, module, name, chosen_by_planner=unasked):
            warnings.warn(message, category, stacklevel=3)

    def _fit_input(self, X, sample_dims):
        """``(matrix, layout, spec)``: the input as a lazy matrix, its labeled layout (or None)
        and the feature stage asked for (None for a plain fit). Reads no data."""
        if labeled.is_labeled(X):
            source = labeled.from_xarray(X, sample_dims, self.weights)
            return source.matrix, source.layout, FeatureSpec(source.weights, bool(self.standardize))
        if sample_dims is not None:
            raise InputTypeError(f"sample_dims={sample_dims!r} applies to xarray input only; a plain matrix "
                                 "already has samples as rows.")
        matrix = regroup(as_dask_matrix(X)[0])
        if self.weights is None and not self.standardize:
            return matrix, None, None
        return matrix, None, FeatureSpec(matrix_weights(self.weights, matrix.shape[1]), bool(self.standardize))

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
        matrix, _ = self.model_input(X)
        with one_blas_thread_per_task():
            (new,) = dask.compute(covariance.moments_graph(self.feature_stage_.apply(matrix)))
        merged = combine_moments([self.solver_info_["moments"], new])
        request = ComponentRequest(self.n_components, merged.count, self.n_features_in_)
        request.validate()
        result = covariance.result_from_moments(merged, request)
        n_before = self.n_samples_
        info = {k: v for k, v in self.solver_info_.items() if k != "moments"}
        # The fit's reason quoted the old sample count; say what this model now is instead.
        reason = (f"update: the covariance statistics of {merged.count - n_before} new samples merged "
                  f"exactly into those of {n_before} ({merged.count} samples in all)")
        self._set_fitted(replace(result, features=self.feature_stage_), "covariance", reason, layout)
        self.solver_info_ = {**info, **self.solver_info_, "updated_with": merged.count - n_before}
        return self

    def check_updatable(self, X=None):
        """Raise unless :meth:`update` can fold ``X`` in exactly (reads nothing); the layout it keeps."""
        self.check_fitted()
        if self.solver_info_.get("moments") is None:
            raise InputError(
                f"this model was fitted with solver={self.solver_!r}, which keeps no sufficient "
                "statistics, so it cannot be updated exactly. Refit on all the data, with "
                "solver='covariance' if it should be updatable later."
            )
        if self.standardize:
            raise InputError("a standardized model cannot be updated exactly: each feature's scale would change "
                             "with the new data. Refit on all the data.")
        return self.layout_ and (self.layout_ if X is None else self.layout_.with_new_samples(X))

    def plan(self, X, *, sample_dims=None) -> _plan.Plan:
        """What ``fit(X)`` would do, without reading any data (``X``, ``sample_dims``: as for :meth:`fit`).

        Returns
        -------
        Plan
            The solver ``fit`` would run and why (the one asked for, or the planner's choice), its
            passes (``plan.passes``, the feature stage's read included; ``plan.most_passes`` the
            most reads of one that stops on convergence), flops, peak memory per task against the
            budget (the ``distributed`` workers' limits when a client runs), the runner-up, and
            every solver's estimate. ``print(plan)`` shows a table. Raises what ``fit`` raises
            before any read (a knob the solver ignores: :func:`~daskpca._params.check_knobs`).
        """
        check_params(self, solvers=SOLVERS)
        matrix, _, spec = self._fit_input(X, sample_dims)
        return self._make_plan(matrix, self._request(matrix), spec)

    def _request(self, array) -> ComponentRequest:
        request = ComponentRequest(self.n_components, *array.shape)
        request.validate()
        return request

    def _reads(self, module, spec) -> tuple[int, int | None]:
        """``(the feature stage's reads before module's own, its most reads or None)`` for the plan."""
        most = getattr(module, "most_passes", None)
        options = {option: getattr(self, option) for option in getattr(module, "OPTIONS", ())}
        return _features.extra_reads(module, spec), None if most is None else most(options)

    def _make_plan(self, array, request: ComponentRequest, spec) -> _plan.Plan:
        """The plan ``fit`` runs: the solver asked for (or the planner's choice) with every read
        counted; its knobs checked (:func:`~daskpca._params.check_knobs`). Reads no data."""
        k = request.upper_bound if request.needs_spectrum else request.fixed()
        plan = _plan.make_plan(
            *array.shape, k, array.chunks, array.dtype.itemsize,
            needs_spectrum=request.needs_spectrum, available=tuple(SOLVERS),
            n_oversamples=self.n_oversamples, n_power_iter=self.n_power_iter, tol=self.tol, max_passes=self.max_passes,
            geometry=geometry_of(array),
            requested=None if self.solver == "auto" else self.solver,
            reads={name: self._reads(module, spec) for name, module in SOLVERS.items()},
            cache_for=lambda estimate: _plan.cache_choice(estimate, array, self.cache),
        )
        check_knobs(self, SOLVERS[plan.solver], plan.solver, solvers=SOLVERS)
        return plan

    def _set_fitted(self, result: SolverResult, solver: str, reason: str, layout) -> None:
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
        self.solver_info_ = dict(result.info)
        self.error_bound_ = _plan.error_bound(self.solver_info_)
        self.feature_stage_ = result.features if result.features is not None else FeatureStage.identity(n_features)
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
            :mod:`daskpca.solvers._geometry`), one pass when computed. Input's floating dtype.
        """
        self.check_fitted()
        check_nan_policy(nan)
        matrix, kind = self.model_input(X)
        scaling, factors = self._score_factors(scaling)
        Z = self.feature_stage_.apply(matrix)
        scores = Z.rechunk({1: -1}).map_blocks(  # mean and basis: one shared key each
            project_block, *shared((self.mean_, self.components_.T * factors[None, :])), nan, self._positions(X),
            dtype=Z.dtype, chunks=(Z.chunks[0], (self.n_components_,)),
        ).astype(matrix.dtype, copy=False)  # the input's precision (the stage computes in float64)
        return self._scores_out(scores, kind, X, scaling)

    def _scores_out(self, scores, kind: str, X, scaling: str):
        """Scores as ``transform`` returns them: computed for NumPy input, labeled for a labeled model."""
        if kind == "numpy":
            scores = scores.compute()
        if self.layout_ is not None:
            return labeled.scores_to_xarray(self.layout_, scores, X, self.n_components_, scaling)
        return scores

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
                raise InputTypeError("this PCA was fitted on a plain matrix; pass the scores matrix, not an xarray object.")
            matrix, kind = as_dask_matrix(X, name="scores")
            matrix, index = self._select_modes(matrix, modes)
            lazy = kind != "numpy"
        _, factors = self._score_factors(scaling)
        with np.errstate(divide="ignore"):
            unscale = np.where(factors[index] != 0, 1.0 / factors[index], 0.0)
        stage = self.feature_stage_
        rows = matrix.rechunk({1: -1}).map_blocks(
            _reconstruct_block, *shared((self.components_[index] * unscale[:, None], self.mean_)), share(stage),
            dtype=np.result_type(matrix.dtype, np.float32), chunks=(matrix.chunks[0], (stage.n_input,)),
        )
        if not lazy:
            rows = rows.compute()
        return labeled.field_from_rows(self.layout_, rows, given) if self.layout_ is not None else rows

    def model_input(self, X):
        """``(matrix, kind)`` of data for a fitted model (lazy, regrouped; the feature stage not
        applied): labeled as at fit time, or a matrix with the input's number of features. The
        one road back into the model, for transforms here and readers such as the bootstrap."""
        if self.layout_ is not None:
            if not labeled.is_labeled(X):
                raise InputTypeError(f"this PCA was fitted on labeled data (sample_dims {list(self.layout_.sample_dims)}); "
                                     f"pass an xarray object, not {type(X).__name__}.")
            return _cache.lookup(*labeled.to_matrix(self.layout_, X))  # the job's pass cache, if it kept X
        if labeled.is_labeled(X):
            raise InputTypeError("this PCA was fitted on a plain matrix; pass a matrix (e.g. X.data), not an xarray object.")
        matrix, kind = as_dask_matrix(X)
        check_n_features(matrix, self.feature_stage_.n_input)
        return _cache.lookup(regroup(matrix), kind)

    def _select_modes(self, scores, modes):
        """``(scores, index)``: the columns for ``modes`` (numbered from 1) and their 0-based index."""
        k = self.n_components_
        if modes is None:
            if scores.shape[1] != k:
                raise InputError(f"scores have {scores.shape[1]} columns, but this PCA has {k} components. "
                                 "Pass the output of transform().")
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

    def check_fitted(self) -> None:
        """Raise :class:`~daskpca.exceptions.NotFittedError` unless ``fit`` has run."""
        if not hasattr(self, "components_"):
            raise NotFittedError(f"This {type(self).__name__} instance is not fitted yet. Call fit(X) before "
                                 "transform or inverse_transform.")


def _reconstruct_block(scores: np.ndarray, basis: np.ndarray, mean: np.ndarray, stage: FeatureStage) -> np.ndarray:
    """``scores @ basis + mean`` in float64, un-weighted and put back on every input feature
    (NaN at masked ones), returned in the scores' floating dtype."""
    z = np.asarray(scores, dtype=np.result_type(scores.dtype, np.float64)) @ basis + mean  # complex stays complex
    if not stage.is_identity:
        z = stage.restore(z / stage.factor)
    return z.astype(np.result_type(scores.dtype, np.float32), copy=False)
