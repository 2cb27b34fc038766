"""The base every estimator derives from: parameters, their constraints, fitted state, the road
back into a fitted model, projection and reconstruction, and the saved model.

What PCA, HilbertPCA, MCA, CCA and Rotator share lives here once (scikit-learn's ``BaseEstimator``
+ ``_BasePCA``; xeofs's template base): a subclass declares what differs —

- ``_parameter_constraints`` (name → allowed forms, :mod:`._constraints`), checked by
  :meth:`Estimator.validate_params` at ``fit`` / ``plan`` before any read;
- ``_solver_knobs``: the parameters that steer one solver's (or path's) reads or iterations;
  :meth:`Estimator.refuse_ignored_knobs` refuses one given to a solver that would ignore it;
- ``_fitted_attribute``: what ``fit`` sets (:meth:`Estimator.check_fitted`);
- for the saved model (:mod:`._format`, one format for every estimator): ``_format_write``,
  ``_format_read`` and ``_problem`` (the fitted invariants a loaded model must keep).

Data comes back into a fitted model by one road, :func:`model_matrix` (labeled as at fit time, or
a matrix with the fitted number of features), and leaves it by :func:`project` (scores through
the feature stage and the layout, one pass) and :func:`reconstruct` (the field back through the
stage: un-weighted, NaN at masked features).
"""

from __future__ import annotations

import inspect

import dask
import numpy as np

from .. import labeled
from .._probabilistic import project_block
from .._validation import as_dask_matrix, check_n_features, check_nan_policy
from ..exceptions import InputTypeError, InvalidParameterError, NotFittedError
from ..passes import like, lookup, meta_of, namespace, regroup, share, shared, to_host
from . import _format
from ._constraints import check
from ._params import ParamsMixin, _equal

#: Knobs that, under ``solver="auto"``, are the planner's inputs (the accuracy and the read budget
#: it chose by), so they keep their meaning whichever solver it picks.
PLANNER_INPUTS = ("tol", "max_passes")


class Estimator(ParamsMixin):
    """The base of daskpca's estimators (see the module docstring for what a subclass declares)."""

    #: Parameter name → list of allowed forms (:mod:`daskpca.models._constraints`).
    _parameter_constraints: dict = {}
    #: Parameters that steer one solver's or path's reads or iterations.
    _solver_knobs: tuple = ()
    #: The attribute ``fit`` sets, whose absence means "not fitted".
    _fitted_attribute = "components_"
    #: How to call ``fit`` (for the not-fitted message).
    _fit_call = "fit(X)"

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _format.register(cls)

    # ------------------------------------------------------------------ parameters

    def validate_params(self) -> None:
        """Raise :class:`~daskpca.exceptions.InvalidParameterError` for the first parameter none of
        its declared forms accepts (naming it, the value, the forms and the fix), then for
        parameters that do not go together. Reads no data; ``fit`` and ``plan`` call it first."""
        check(self, self._parameter_constraints, InvalidParameterError)
        self._check_params_together()

    def _check_params_together(self) -> None:
        """Checks that involve several parameters (none by default)."""

    def refuse_ignored_knobs(self, solver: str, solvers: dict) -> None:
        """Refuse a knob (``_solver_knobs``) given a value other than its default when the solver
        that will run, ``solver``, does not take it: it would be ignored without a word.

        ``solvers`` maps every solver (or path) name the estimator has to its declarations, as a
        solver module makes them: ``OPTIONS`` (the parameters it takes) and ``EXACT`` (it meets
        any ``tol``). Under ``solver="auto"``, ``tol`` and ``max_passes`` are the planner's inputs
        (the accuracy and read budget it chose by), so they keep their meaning. A declaration's own
        ``check_options`` then refuses values of its options it cannot honour (MCA's Krylov path:
        fewer than 2 reads). Reads no data.
        """
        running = solvers[solver]
        check = getattr(running, "check_options", None)
        if check is not None:
            check({option: getattr(self, option) for option in getattr(running, "OPTIONS", ()) if hasattr(self, option)})
        takes, exact = getattr(running, "OPTIONS", ()), getattr(running, "EXACT", False)
        defaults = {n: p.default for n, p in inspect.signature(type(self).__init__).parameters.items()}
        auto = getattr(self, "solver", "auto") == "auto"
        for knob in self._solver_knobs:
            value = getattr(self, knob)
            if knob in takes or value is defaults.get(knob) or _equal(value, defaults.get(knob)):
                continue
            if (knob == "tol" and exact) or (knob in PLANNER_INPUTS and auto):
                continue
            steers = sorted(name for name, m in solvers.items() if knob in getattr(m, "OPTIONS", ()))
            chose = "solver='auto' chose" if auto else "you asked for"
            raise InvalidParameterError(
                f"{knob}={value!r:.60} would be ignored: {chose} solver {solver!r}, which does not use it ({knob} "
                f"steers {', '.join(repr(s) for s in steers) or 'no solver here'}). Drop {knob}, or pass "
                f"{type(self).__name__}(solver=...) (--solver on the command line) naming a solver that takes it."
            )

    # ------------------------------------------------------------------ fitted state

    def check_fitted(self) -> None:
        """Raise :class:`~daskpca.exceptions.NotFittedError` unless ``fit`` has run."""
        if not hasattr(self, self._fitted_attribute):
            raise NotFittedError(f"This {type(self).__name__} instance is not fitted yet. Call {self._fit_call} "
                                 "before using it.")

    def _problem(self) -> str | None:
        """The first fitted invariant this model breaks (None when it keeps all); checked on load."""
        return None

    # ------------------------------------------------------------------ the saved model

    def save(self, store, overwrite=False):
        """Write the fitted model to a zarr group (local path or fsspec URL); no pickle.

        Atomic: a completion marker is written last, recording every object's checksum, and
        :meth:`load` checks it; an existing store is replaced only with ``overwrite=True``, and
        the replaced model is kept in the store's history (``daskpca.io.history``, the last
        ``daskpca.io.MODEL_HISTORY``) — for every estimator alike. See
        :mod:`daskpca.models._format` for the format.

        A loaded model saved back where it was loaded from (``load`` → ``update`` → ``save``)
        replaces only the version it was loaded from (or last saved there): if another process
        saved there in between, :class:`~daskpca.exceptions.StoreChangedError` instead of silently
        dropping that update. A model fitted here (``fit`` also ends a loaded model's tie to its
        store) replaces whatever is there when ``overwrite=True``.
        """
        self.check_fitted()
        return _format.save(self, store, overwrite=overwrite)

    @classmethod
    def load(cls, store, *, verify: bool = True):
        """Load a model written by :meth:`save` (local path or fsspec URL).

        Refuses a store without its completion marker (:class:`~daskpca.exceptions.IncompleteStoreError`),
        one written in a newer format (:class:`~daskpca.exceptions.NewerFormatError`), and a
        damaged one (:class:`~daskpca.exceptions.DamagedModelError`): objects missing or changed
        since they were written (checksums), attributes missing, or a model that breaks the
        fitted invariants. The returned model's ``transform`` is identical to the saved model's.
        ``verify=False`` skips the checksums and the integrity record only (with a warning): the
        escape hatch for a store whose record was lost, read at your own risk; the fitted
        invariants are still checked.
        """
        return _format.load_as(store, cls, verify)

    def to_dataset(self):
        """The fitted model as one ``xarray.Dataset`` (see :mod:`daskpca.models._format`)."""
        self.check_fitted()
        return _format.to_dataset(self)

    @classmethod
    def from_dataset(cls, ds, *, source: str = "the dataset"):
        """The model :meth:`to_dataset` wrote (``source`` names it in errors)."""
        return _format.from_dataset(ds, cls, source=source)


# ---------------------------------------------------------------------- into and out of a model


def model_matrix(data, stage, layout, *, name: str = "X", estimator: str = "PCA"):
    """``(matrix, kind)`` of data for a fitted model (lazy, regrouped into the tasks a pass reads;
    the feature stage not applied): labeled as at fit time (variables, dims, coords checked), or
    a matrix with the fitted number of features. The one road back into every fitted model."""
    if layout is not None:
        if not labeled.is_labeled(data):
            raise InputTypeError(
                f"this {estimator} was fitted on labeled data (sample_dims {list(layout.sample_dims)}); pass "
                f"{name} as an xarray object, not {type(data).__name__}.")
        return lookup(*labeled.to_matrix(layout, data))  # the job's pass cache, if it kept the data
    if labeled.is_labeled(data):
        raise InputTypeError(f"this {estimator} was fitted on a plain matrix; pass {name} as a matrix (e.g. "
                             f"{name}.data), not an xarray object.")
    matrix, kind = as_dask_matrix(data, name=name)
    check_n_features(matrix, stage.n_input, name=name, estimator=estimator)
    return lookup(regroup(matrix), kind)


def positions(stage, layout, data):
    """How a projection task names a NaN position (:func:`daskpca.labeled.positions_of`), put in
    the graph once, as one shared object."""
    return dask.delayed(labeled.positions_of(layout, data, stage.keep), pure=True)


def project(data, stage, layout, mean, basis, *, name: str = "X", estimator: str = "PCA", scaling: str,
            nan: str = "raise"):
    """Scores ``(z − mean)·basis`` of ``data`` (``z`` its matrix through the feature stage;
    ``basis``: d_kept × k), computed in float64 and given in the input's floating dtype: NumPy
    for NumPy input, lazy (one pass when computed) otherwise, a DataArray
    ``(*sample_dims, "mode")`` for a labeled model.

    ``nan="raise"``: a NaN/±inf raises inside the projection task (no extra pass), naming its
    position — coordinates for labeled input; ``"propagate"``: NaN scores there.
    """
    check_nan_policy(nan)
    matrix, kind = model_matrix(data, stage, layout, name=name, estimator=estimator)
    return scores_out(project_matrix(matrix, stage, mean, basis, nan, positions(stage, layout, data)),
                      kind, data, layout, scaling)


def project_matrix(matrix, stage, mean, basis, nan: str, where):
    """The lazy scores of ``matrix`` (not yet through the stage): one task per row block."""
    Z = stage.apply(matrix).rechunk({1: -1})
    return Z.map_blocks(  # mean and basis: one shared key each
        project_block, *shared((np.asarray(mean), np.asarray(basis))), nan, where,
        dtype=Z.dtype, chunks=(Z.chunks[0], (basis.shape[1],)), meta=meta_of(Z),
    ).astype(matrix.dtype, copy=False)  # the input's precision (the stage computes in float64)


def scores_out(scores, kind: str, data, layout, scaling: str):
    """Scores as a transform returns them: computed for NumPy input (in host memory, whatever the
    device the model computes on), labeled for a labeled model."""
    if kind == "numpy":
        scores = to_host(scores.compute())
    if layout is not None:
        return labeled.scores_to_xarray(layout, scores, data, scores.shape[1], scaling)
    return scores


def reconstruct(scores, basis, mean, stage, *, lazy: bool):
    """The field ``scores @ basis + mean`` back through the feature stage (un-weighted, NaN at
    masked features), one task per row block of the scores; computed unless ``lazy``."""
    dtype = np.result_type(scores.dtype, np.float32)
    rows = scores.rechunk({1: -1}).map_blocks(
        _reconstruct_block, *shared((np.asarray(basis), np.asarray(mean))), share(stage),
        dtype=dtype, chunks=(scores.chunks[0], (stage.n_input,)), meta=meta_of(scores, dtype),
    )
    return rows if lazy else to_host(rows.compute())


def _reconstruct_block(scores: np.ndarray, basis: np.ndarray, mean: np.ndarray, stage) -> np.ndarray:
    """``scores @ basis + mean`` in float64, un-weighted and put back on every input feature
    (NaN at masked ones), returned in the scores' floating dtype (on the scores' device)."""
    xp = namespace(scores)
    z = xp.asarray(scores, dtype=np.result_type(scores.dtype, np.float64)) @ like(basis, scores) + like(mean, scores)  # complex stays complex
    if not stage.is_identity:
        z = stage.restore(z / like(stage.factor, scores))
    return z.astype(np.result_type(scores.dtype, np.float32), copy=False)
