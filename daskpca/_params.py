"""Estimator parameter protocol compatible with scikit-learn (no runtime dependency on it).

``get_params`` / ``set_params`` read the constructor's signature, as scikit-learn's
``BaseEstimator`` does, so ``sklearn.base.clone``, grid searches and ``Pipeline`` work.
"""

from __future__ import annotations

import inspect


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
                raise ValueError(
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

    def __sklearn_tags__(self):
        # Only called by scikit-learn (so importing it here costs nothing otherwise).
        from sklearn.utils import Tags, TargetTags, TransformerTags

        return Tags(
            estimator_type=None,
            target_tags=TargetTags(required=False),
            transformer_tags=TransformerTags(),
        )


def _equal(a, b) -> bool:
    try:
        return bool(a == b)
    except Exception:  # arrays and other objects without a scalar ==
        return False
