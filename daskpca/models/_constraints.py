"""Declared parameter constraints: what each estimator parameter may be, checked once before a read.

An estimator lists its parameters' allowed forms in ``_parameter_constraints`` (as scikit-learn's
``_parameter_constraints``, validated by ``_fit_context``); :meth:`Estimator.validate_params
<daskpca.models.Estimator.validate_params>` checks every parameter against them at ``fit`` and
``plan``, before any data is read, and raises :class:`~daskpca.exceptions.InvalidParameterError`
naming the parameter, the value given, the forms expected and the fix. ``__init__`` only stores
parameters (scikit-learn's convention), so ``clone`` and ``set_params`` never validate.

A constraint is an object with ``accepts(value) -> bool`` and ``describe() -> str``; a parameter
takes a list of them (any one accepting is enough). Limits that need the data's shape
(``n_components`` ≤ min(n, d), a weight array's length) are checked where the shape is known,
still before any read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np


def _is_bool(value) -> bool:
    return isinstance(value, (bool, np.bool_))


@dataclass(frozen=True)
class Interval:
    """A number of ``kind`` (``Integral`` or ``Real``; bools never count) in a range.

    ``closed`` says which ends belong to it: ``"both"``, ``"left"``, ``"right"`` or ``"neither"``;
    ``None`` for an end means unbounded. Real values must be finite.
    """

    kind: type
    low: float | None
    high: float | None
    closed: str = "both"

    def accepts(self, value) -> bool:
        if _is_bool(value) or not isinstance(value, self.kind):
            return False
        if self.kind is Real and not np.isfinite(value):
            return False
        left = self.low is None or (value >= self.low if self.closed in ("both", "left") else value > self.low)
        right = self.high is None or (value <= self.high if self.closed in ("both", "right") else value < self.high)
        return bool(left and right)

    def describe(self) -> str:
        what = "an int" if self.kind is Integral else "a float"
        if self.low is not None and self.high is not None:
            brackets = {"both": "[]", "left": "[)", "right": "(]", "neither": "()"}[self.closed]
            return f"{what} in {brackets[0]}{self.low}, {self.high}{brackets[1]}"
        if self.low is not None:
            return f"{what} {'>=' if self.closed in ('both', 'left') else '>'} {self.low}"
        if self.high is not None:
            return f"{what} {'<=' if self.closed in ('both', 'right') else '<'} {self.high}"
        return what


@dataclass(frozen=True)
class Options:
    """One of a set of strings (exactly: no case folding): ``also`` and ``values``, which may be a
    live mapping read at each check (e.g. the solvers registered when ``fit`` runs)."""

    values: object
    also: tuple = ()

    def _current(self) -> tuple:
        return (*self.also, *self.values)

    def accepts(self, value) -> bool:
        return isinstance(value, str) and value in self._current()

    def describe(self) -> str:
        return "one of " + ", ".join(repr(v) for v in self._current())


@dataclass(frozen=True)
class Predicate:
    """Anything ``test`` accepts, described as ``text`` (for forms checked fully on the data)."""

    test: object
    text: str

    def accepts(self, value) -> bool:
        return bool(self.test(value))

    def describe(self) -> str:
        return self.text


@dataclass(frozen=True)
class PerField:
    """A coupled estimator's per-field parameter: one value for both fields, or a tuple/list of
    two (X's, Y's), each accepted by ``constraints``."""

    constraints: tuple

    def accepts(self, value) -> bool:
        values = tuple(value) if isinstance(value, (tuple, list)) and len(value) == 2 else (value,)
        return all(any(c.accepts(v) for c in self.constraints) for v in values)

    def describe(self) -> str:
        one = " or ".join(c.describe() for c in self.constraints)
        return f"{one}, or a pair of these (X's, Y's)"


#: ``None`` as an allowed value.
NONE = Predicate(lambda v: v is None, "None")
BOOL = Predicate(_is_bool, "True or False")
RANDOM_STATE = Predicate(
    lambda v: v is None or isinstance(v, (np.random.Generator, np.random.RandomState))
    or (isinstance(v, Integral) and not _is_bool(v) and 0 <= v < 2**32),
    "None, an int in [0, 2**32) or a numpy.random.Generator",
)
PATH = Predicate(lambda v: isinstance(v, (str, os.PathLike)), "a file path (str or os.PathLike)")
#: Weights: checked in full against the data (broadcasting, positivity) before any read.
WEIGHTS = Predicate(
    lambda v: v == "coslat" if isinstance(v, str) else not isinstance(v, (bytes, bool, np.bool_)),
    "None, 'coslat', an array, a DataArray or a dict {variable: weights}",
)
ARRAY = Predicate(lambda v: not isinstance(v, (str, bytes, bool, np.bool_)), "an array")


def check(estimator, constraints: dict, error) -> None:
    """Raise ``error`` for the first parameter of ``estimator`` that none of its constraints
    accepts, naming it, its value, the forms expected and the fix. Reads no data."""
    name_of = type(estimator).__name__
    for name, allowed in constraints.items():
        value = getattr(estimator, name)  # every constrained name is a constructor parameter
        if any(c.accepts(value) for c in allowed):
            continue
        expected = " or ".join(c.describe() for c in allowed)
        raise error(f"{name}={value!r:.80}: expected {expected}. Pass it as {name_of}({name}=...) in that "
                    "form, or leave it out for its default.")
