"""Estimator parameters: scikit-learn's protocol, and every parameter's type checked in one place.

``get_params`` / ``set_params`` read the constructor's signature, as scikit-learn's
``BaseEstimator`` does, so ``sklearn.base.clone``, grid searches and ``Pipeline`` work (no runtime
dependency on scikit-learn). :func:`check_params` checks every parameter of :class:`daskpca.PCA`
against :data:`RULES` before ``fit`` or ``plan`` reads anything: ``__init__`` only stores them
(scikit-learn's convention), so ``PCA(whiten="no")`` is refused at ``fit``, not silently truthy.
Checks that need the data's shape (``n_components`` ≤ min(n, d), ``weights`` broadcasting,
``init``'s shape) run where the shape is known, still before any read.
"""

from __future__ import annotations

import html
import inspect
import os
from numbers import Integral, Real

import numpy as np

from .exceptions import InputError, InvalidParameterError


class ParamsMixin:
    """``get_params`` / ``set_params`` / ``__repr__`` derived from ``__init__``'s signature."""

    @classmethod
    def _param_names(cls) -> list[str]:
        signature = inspect.signature(cls.__init__)
        return [
            name
            for name, p in signature.parameters.items()
            if name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
        ]

    def get_params(self, deep: bool = True) -> dict:
        """Parameters of this estimator (the values given to ``__init__``)."""
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params):
        """Set parameters by name; unknown names raise with the list of valid ones."""
        valid = self._param_names()
        for name, value in params.items():
            if name not in valid:
                raise InputError(
                    f"Invalid parameter {name!r} for {type(self).__name__}; valid parameters "
                    f"are {sorted(valid)}."
                )
            setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        defaults = {
            name: p.default for name, p in inspect.signature(type(self).__init__).parameters.items()
        }
        changed = []
        for name, value in self.get_params().items():
            default = defaults.get(name, inspect.Parameter.empty)
            if default is inspect.Parameter.empty or value is not default and not _equal(value, default):
                changed.append(f"{name}={value!r}")
        return f"{type(self).__name__}({', '.join(changed)})"

    def _repr_html_(self) -> str:
        """Notebook display: scikit-learn's estimator diagram (as scikit-learn shows any
        estimator; the parameters as ``repr`` gives them when scikit-learn is absent), then for
        a fitted model its summary (:func:`fitted_html`)."""
        try:
            from sklearn.utils import estimator_html_repr

            head = estimator_html_repr(self)
        except ImportError:
            head = f"<pre>{html.escape(repr(self))}</pre>"
        return head + (fitted_html(self) if hasattr(self, "components_") else "")

    def __sklearn_tags__(self):
        # Only called by scikit-learn (so importing it here costs nothing otherwise).
        from sklearn.utils import Tags, TargetTags, TransformerTags

        # Not sparse (refused with scikit-learn's wording), no NaN (refused; see transform's
        # nan=), float32 kept as float32 by transform.
        return Tags(
            estimator_type=None,
            target_tags=TargetTags(required=False),
            transformer_tags=TransformerTags(preserves_dtype=["float64", "float32"]),
        )


def fitted_html(model, n_modes: int = 10) -> str:
    """A fitted model as HTML: the solver and why, passes and iterations, the shape, the leading
    spectrum (variance, ratio and cumulative ratio with a bar per mode) and, when the model was
    fitted in this process, the planner's table."""
    esc = html.escape
    rows = [
        ("solver", f"<code>{esc(model.solver_)}</code> — {esc(model.solver_reason_)}"),
        ("passes over the data", f"{model.n_passes_} (solver iterations: {model.n_iter_})"),
        ("samples × features", f"{model.n_samples_} × {model.n_features_in_}"),
        ("components kept", f"{model.n_components_}"),
        ("total variance", f"{model.total_variance_:.6g} (distortion J: {model.distortion_:.6g}, "
                           f"noise variance: {model.noise_variance_:.6g})"),
    ]
    table = "".join(f"<tr><th style='text-align:left'>{k}</th><td style='text-align:left'>{v}</td></tr>" for k, v in rows)
    cumulative = np.cumsum(model.explained_variance_ratio_)
    modes = "".join(
        f"<tr><td>{i + 1}</td><td>{var:.4g}</td><td>{ratio:.2%}</td><td>{cum:.2%}</td>"
        f"<td style='width:10em'><div style='background:#4c72b0;height:0.8em;width:{100 * ratio:.1f}%'></div></td></tr>"
        for i, (var, ratio, cum) in enumerate(zip(model.explained_variance_[:n_modes],
                                                   model.explained_variance_ratio_[:n_modes], cumulative[:n_modes]))
    )
    more = model.n_components_ - n_modes
    if more > 0:
        modes += f"<tr><td colspan='5'>… {more} more</td></tr>"
    plan = getattr(model, "_fit_plan", None)
    plan_html = f"<details><summary>plan</summary><pre>{esc(str(plan))}</pre></details>" if plan is not None else ""
    return (
        "<div class='daskpca-fitted'><table>" + table + "</table>"
        "<table><tr><th>mode</th><th>variance</th><th>ratio</th><th>cumulative</th><th></th></tr>"
        + modes + "</table>" + plan_html + "</div>"
    )


def _equal(a, b) -> bool:
    try:
        return bool(a == b)
    except Exception:  # arrays and other objects without a scalar ==
        return False


# ---------------------------------------------------------------------------------------- checks


def _is_bool(value) -> bool:
    return isinstance(value, (bool, np.bool_))


def _is_int(value, minimum: int) -> bool:
    return isinstance(value, Integral) and not _is_bool(value) and value >= minimum


def _is_float(value, minimum: float) -> bool:
    return isinstance(value, Real) and not _is_bool(value) and np.isfinite(value) and value >= minimum


def _is_random_state(value) -> bool:
    return (value is None or isinstance(value, (np.random.Generator, np.random.RandomState))
            or (_is_int(value, 0) and value < 2**32))


def _is_weights(value) -> bool:
    if isinstance(value, str):
        return value == "coslat"
    return not isinstance(value, (bytes, bool, np.bool_))  # None, arrays, DataArrays, dicts: checked on the data


#: Parameter → (is it valid?, the form expected). Shape-dependent limits are checked later, and
#: ``n_components`` entirely by :class:`~daskpca.solvers._base.ComponentRequest` (its limit is min(n, d)).
RULES = {
    "whiten": (_is_bool, "True or False"),
    "standardize": (_is_bool, "True or False"),
    "random_state": (_is_random_state, "None, an int in [0, 2**32) or a numpy.random.Generator"),
    "n_oversamples": (lambda v: _is_int(v, 0), "an int >= 0 (default 10)"),
    "n_power_iter": (lambda v: v == "auto" if isinstance(v, str) else _is_int(v, 0), "'auto' or an int >= 0"),
    "max_iter": (lambda v: v is None or _is_int(v, 1), "an int >= 1, or None for the solver's default"),
    "tol": (lambda v: v is None or _is_float(v, 0.0), "a float >= 0 (e.g. 1e-4), or None"),
    "max_passes": (lambda v: v is None or _is_int(v, 1), "an int >= 1, or None for the solver's default"),
    "checkpoint": (lambda v: v is None or isinstance(v, (str, os.PathLike)), "a file path (str or os.PathLike), or None"),
    "weights": (_is_weights, "None, 'coslat', an array, a DataArray or a dict {variable: weights}"),
    "cache": (lambda v: v is False or (isinstance(v, str) and v in ("auto", "memory", "disk")),
              "'auto', 'memory', 'disk' or False (see daskpca.solvers._cache)"),
    "init": (lambda v: v is None or not isinstance(v, (str, bytes, bool, np.bool_)), "an array of shape (k, n_features), or None"),
}


def check_params(estimator, *, solvers) -> None:
    """Raise :class:`~daskpca.exceptions.InvalidParameterError` for the first parameter of the wrong
    type or out of its range, naming it, the value and the form expected. Reads no data.

    ``solvers`` are the names ``solver=`` accepts besides ``"auto"``.
    """
    params = estimator.get_params()
    solver = params.get("solver", "auto")
    if not (isinstance(solver, str) and (solver == "auto" or solver in solvers)):
        raise InvalidParameterError(
            f"solver={solver!r} is not a known solver; choose one of {['auto', *sorted(solvers)]}."
        )
    for name, (is_valid, expected) in RULES.items():
        if name in params and not is_valid(params[name]):
            raise InvalidParameterError(
                f"{name}={params[name]!r:.80}: expected {expected}. "
                f"Pass it as {type(estimator).__name__}({name}=...)."
            )



#: Parameters that steer one solver's reads or iterations. Given (not left at their default) to a
#: solver that does not take them (its module's ``OPTIONS``), they would be ignored without a
#: word, so they are refused: ``tol`` with randomized (no bound), ``max_passes`` with Gram. Two
#: exceptions keep their meaning: an exact solver meets any ``tol``, and under ``solver="auto"``
#: ``tol`` and ``max_passes`` are the planner's inputs (the accuracy and read budget it chose by).
#: ``checkpoint`` is a place, not a knob: a solver with no state between passes has none to save.
SOLVER_KNOBS = ("n_oversamples", "n_power_iter", "max_iter", "tol", "max_passes", "init")
PLANNER_INPUTS = ("tol", "max_passes")


def check_knobs(estimator, module, name: str, *, solvers: dict) -> None:
    """Raise :class:`~daskpca.exceptions.InvalidParameterError` for a solver knob the solver
    ``name`` (``module``, the one ``fit`` runs) would ignore, naming the solvers that take it and
    the fix. Reads no data; ``solvers`` maps the estimator's solver names to their modules."""
    defaults = {n: p.default for n, p in inspect.signature(type(estimator).__init__).parameters.items()}
    taken = getattr(module, "OPTIONS", ())
    for knob, value in estimator.get_params().items():
        if knob not in SOLVER_KNOBS or knob in taken or value is defaults.get(knob) or _equal(value, defaults.get(knob)):
            continue
        if knob == "tol" and getattr(module, "EXACT", False):
            continue
        if knob in PLANNER_INPUTS and estimator.solver == "auto":
            continue
        users = sorted(n for n, m in solvers.items() if knob in getattr(m, "OPTIONS", ()))
        chose = "you asked for" if estimator.solver != "auto" else "solver='auto' chose"
        raise InvalidParameterError(
            f"{knob}={value!r:.60} would be ignored: {chose} solver {name!r}, which does not use it "
            f"({knob} steers {', '.join(repr(u) for u in users) or 'no solver here'}). Drop {knob}, or pass "
            f"{type(estimator).__name__}(solver=...) (--solver on the command line) naming a solver that takes it."
        )
