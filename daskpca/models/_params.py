"""Estimator parameters: scikit-learn's protocol, and a fitted model's notebook display.

``get_params`` / ``set_params`` read the constructor's signature, as scikit-learn's
``BaseEstimator`` does, so ``sklearn.base.clone``, grid searches and ``Pipeline`` work (no runtime
dependency on scikit-learn). What values a parameter may take is declared per estimator and
checked once before any read (:mod:`._constraints`, :meth:`daskpca.models.Estimator.validate_params`).
"""

from __future__ import annotations

import html
import inspect

import numpy as np

from ..exceptions import InputError


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
        return head + (fitted_html(self) if hasattr(self, "components_") and hasattr(self, "n_passes_") else "")  # a fitted PCA-family model

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
