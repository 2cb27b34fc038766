"""Progress in passes: what a solver says around each full read of the data, and who listens.

A fit's dask work is a handful of passes, each a full read; a task count says nothing of how far
the fit is (every pass adds its tasks, so a task bar reaches 100 % once per pass). So the solvers
report passes instead: each makes one :class:`Passes` for its solve and wraps every pass's
``dask.compute`` in ``with passes.read():``; an iterative solver also hands over the error bound
it reached after the pass (:meth:`Passes.bound`). Each report is a :class:`PassReport`, sent

- to the ``"daskpca"`` logger (INFO when a pass starts, with the last bound and the time left),
  so a scheduled job's log says which pass it is on once logging is configured;
- to every listener installed with :func:`listen` in this context (a context variable: listeners
  of one thread or task do not see another's fits). The CLI's reporter and
  :func:`daskpca.progress` (a line on the terminal or in a notebook) are such listeners, and the
  estimator records each pass's wall time with one.

Reporting costs nothing measurable (a few Python calls per pass) and reads no data.
"""

from __future__ import annotations

import logging
import math
import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Callable, Iterator

logger = logging.getLogger("daskpca")

_listeners: ContextVar[tuple[Callable[["PassReport"], None], ...]] = ContextVar("daskpca_pass_listeners", default=())


@dataclass(frozen=True)
class PassReport:
    """One pass of one solve, as it starts (``seconds`` None) or as it ends.

    Attributes
    ----------
    solver : str
        Who reads: a solver's name, or ``"features"`` for the feature stage's own read.
    number : int
        The pass, from 1, counting passes of a run this one resumed from a checkpoint.
    budget : int
        Most passes the solve makes (``at_most``) or exactly that many.
    at_most : bool
        The solve may stop before ``budget`` (an accuracy target met, iterations converged).
    seconds : float or None
        Wall time of this pass, once it ended.
    mean_seconds : float or None
        Mean wall time of the passes this process made so far in this solve.
    bound : float or None
        The error bound (sin θ) the solve had reached before this pass, if it has one.
    tol : float or None
        The accuracy asked for.
    """

    solver: str
    number: int
    budget: int
    at_most: bool = False
    seconds: float | None = None
    mean_seconds: float | None = None
    bound: float | None = None
    tol: float | None = None

    @property
    def seconds_left(self) -> float | None:
        """Upper estimate of the time left when this pass starts: the passes still allowed, this
        one included, at the mean time of the passes so far (None before the first has ended)."""
        if self.mean_seconds is None or self.seconds is not None:
            return None
        return (self.budget - self.number + 1) * self.mean_seconds

    def describe(self) -> str:
        """``"pass 3 of ≤ 8 (krylov, bound 2.1e-03 → tol 1e-04), 41 s a pass, ~3.4 min left"``."""
        at_most = "≤ " if self.at_most else ""
        detail = self.solver
        if self.bound is not None:
            detail += f", bound {self.bound:.1e}" + (f" → tol {self.tol:.0e}" if self.tol is not None else "")
        text = f"pass {self.number} of {at_most}{self.budget} ({detail})"
        if self.seconds is not None:
            return f"{text} took {format_seconds(self.seconds)}"
        if self.mean_seconds is not None:
            text += f", {format_seconds(self.mean_seconds)} a pass, ~{format_seconds(self.seconds_left)} left"
        return text


def format_seconds(seconds: float) -> str:
    """``"0.031 s"``, ``"4.2 s"``, ``"41 s"``, ``"3.4 min"``, ``"2.1 h"``."""
    if seconds < 1:
        return f"{seconds:.2g} s"
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


@contextmanager
def listen(listener: Callable[[PassReport], None]) -> Iterator[None]:
    """Call ``listener(report)`` for every pass start and end of the solves run inside."""
    token = _listeners.set((*_listeners.get(), listener))
    try:
        yield
    finally:
        _listeners.reset(token)


def _send(report: PassReport) -> None:
    for listener in _listeners.get():
        listener(report)


class Passes:
    """The passes of one solve, told to the listeners.

    Parameters
    ----------
    solver : str
    budget : int
        Most passes the solve makes, counted from the first of the whole run (a resumed run's
        passes included).
    at_most : bool, default=False
        True when the solve may stop earlier.
    tol : float, optional
        The accuracy asked for, shown beside the bound.
    done : int, default=0
        Passes made before this process started (resumed from a checkpoint).
    """

    def __init__(self, solver: str, budget: int, *, at_most: bool = False, tol: float | None = None, done: int = 0):
        self.solver, self.budget, self.at_most, self.tol = solver, int(budget), at_most, tol
        self.number = int(done)
        self.seconds: list[float] = []
        self._bound: float | None = None

    def bound(self, value: float) -> None:
        """The error bound reached after the last pass (shown when the next one starts)."""
        self._bound = float(value) if math.isfinite(value) else None

    @contextmanager
    def read(self) -> Iterator[None]:
        """Around one pass's ``dask.compute``: reports its start and, if it succeeds, its end."""
        self.number += 1
        mean = sum(self.seconds) / len(self.seconds) if self.seconds else None
        report = PassReport(self.solver, self.number, max(self.budget, self.number), self.at_most,
                            None, mean, self._bound, self.tol)
        logger.info("%s", report.describe())
        _send(report)
        start = time.perf_counter()
        yield
        self.seconds.append(time.perf_counter() - start)
        _send(replace(report, seconds=self.seconds[-1]))
