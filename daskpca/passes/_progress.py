"""Progress in passes: what a solver says around each full read of the data, and who listens.

A fit's dask work is a handful of passes, each a full read; a task count says nothing of how far
the fit is (every pass adds its tasks, so a task bar reaches 100 % once per pass). So the solvers
report passes instead: each makes one :class:`Passes` for its solve and wraps every pass's
``dask.compute`` in ``with passes.read():``; an iterative solver also hands over the error bound
it reached after the pass (:meth:`Passes.bound`). Each report is a :class:`PassReport`, sent

- to the ``"daskpca"`` logger (INFO when a pass starts, with the last bound, the passes the solver
  now predicts in all — learnt from the passes so far, :meth:`Passes.predict` — and the time left),
  so a scheduled job's log says which pass it is on once logging is configured;
- to every listener installed with :func:`listen` in this context (a context variable: listeners
  of one thread or task do not see another's fits). :class:`ProgressLine` is one: the CLI's
  progress and ``daskpca.progress()`` (a line on a terminal, in a log or in a notebook); the
  estimator records each pass's wall time with another.
The dashboard keeps showing tasks.

Reporting costs nothing measurable (a few Python calls per pass) and reads no data.
"""

from __future__ import annotations

import logging
import math
import sys
import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Callable, Iterator

logger = logging.getLogger("daskpca")

#: What a pass line names as the source of a count known before the first pass, where an earlier
#: fit of the same model gave it (its spectrum, or its bounds): "(ETA from an earlier fit)".
EARLIER_FIT = "an earlier fit"

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
    predicted : int or None
        The passes the solve is predicted to make in all (this one included), learnt from the
        passes so far (:func:`daskpca.solvers.krylov.passes_left`); None when it does not predict.
    cycle_seconds : float or None
        Mean time from one pass's start to the next's (the pass and the client's work after it),
        from the second pass on once there is one, less one-off client work (:meth:`Passes.spent`).
    learnt : int or None
        The pass after which ``predicted`` was learnt from the fit's own passes (block Krylov:
        a simulated fit on the spectrum they show); 0 when it came from before the first pass
        (``source``); None while it is the planner's prior.
    source : str or None
        Where a count learnt before the first pass (``learnt`` 0) came from, as the line names it:
        :data:`EARLIER_FIT` (an earlier fit of the same model: its spectrum, or its bounds), else
        None, the plan's probe of a sample of the rows (:mod:`daskpca._probe`).
    """

    solver: str
    number: int
    budget: int
    at_most: bool = False
    seconds: float | None = None
    mean_seconds: float | None = None
    bound: float | None = None
    tol: float | None = None
    predicted: int | None = None
    cycle_seconds: float | None = None
    learnt: int | None = None
    source: str | None = None

    @property
    def seconds_left(self) -> float | None:
        """Estimate of the time left when this pass starts: the passes predicted to remain (else
        the passes still allowed, an upper estimate), this one included, at the mean time from one
        pass's start to the next's so far (None before the first has ended)."""
        if self.mean_seconds is None or self.seconds is not None:
            return None
        left = self.budget if self.predicted is None else min(self.predicted, self.budget)
        return (left - self.number + 1) * (self.cycle_seconds or self.mean_seconds)

    def describe(self) -> str:
        """``"pass 3 of ≤ 8, 6 predicted (krylov, bound 2.1e-03 → tol 1e-04), 41 s a pass, ~2.1 min left (ETA
        from pass 2)"``: the ETA's source is named once the passes predicted were learnt from the fit;
        "a pass" is the cycle the time left counts in (``cycle_seconds``), else the mean pass."""
        at_most = "≤ " if self.at_most else ""
        detail = self.solver
        if self.bound is not None:
            detail += f", bound {self.bound:.1e}" + (f" → tol {self.tol:.0e}" if self.tol is not None else "")
        predicted = f", {min(self.predicted, self.budget)} predicted" if self.predicted is not None and self.at_most else ""
        text = f"pass {self.number} of {at_most}{self.budget}{predicted} ({detail})"
        if self.seconds is not None:
            return f"{text} took {format_seconds(self.seconds)}"
        if self.mean_seconds is not None:
            # The time a pass to come is counted at (the cycle, its client's work included), so that
            # "a pass" and the time left agree: after pass 1 a later pass is not the first's time.
            text += f", {format_seconds(self.cycle_seconds or self.mean_seconds)} a pass, ~{format_seconds(self.seconds_left)} left"
            if self.learnt is not None and self.predicted is not None and self.at_most:
                # Which passes the time left rests on: the fit's own, not the planner's guess
                # (0: what was known before the first pass, the probe's rows or an earlier fit).
                text += f" (ETA from pass {self.learnt})" if self.learnt else f" (ETA from {self.source or 'the probe'})"
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
def listen(listener: Callable[[PassReport], None], *, shows_predictions: bool = True) -> Iterator[None]:
    """Call ``listener(report)`` for every pass start and end of the solves run inside.
    ``shows_predictions=False``: the listener only times the passes (:class:`PassClock`), so a
    solver need not compute the costly prediction of the passes left for it (:meth:`Passes.heard`)."""
    token = _listeners.set((*_listeners.get(), (listener, shows_predictions)))
    try:
        yield
    finally:
        _listeners.reset(token)


def watched() -> bool:
    """Whether anyone sees the passes' predictions (a listener that shows them, such as the
    progress line, or the log at INFO): a solver computes a costly prediction only then — not for
    the fit's own clock (measured: a block Krylov fit at d = 1000 to 1e-6 spent two thirds of its
    client time simulating a pass count nobody was shown) — and a fit probes its input for an ETA
    from the first pass only then (:mod:`daskpca._probe`)."""
    return any(shows for _, shows in _listeners.get()) or logger.isEnabledFor(logging.INFO)


def _send(report: PassReport) -> None:
    for listener, _ in _listeners.get():
        listener(report)


class PassClock:
    """Wall time of the passes reported inside ``with PassClock() as clock:`` (``clock.passes``,
    in order), of the client's work after each pass (``clock.client``: from a pass's end to the
    next pass's start or the block's end — the small solves, orthogonalisation and the next
    pass's graph, while no task runs) and of the whole block (``clock.seconds``)."""

    def __enter__(self) -> "PassClock":
        self.passes: list[float] = []
        self.client: list[float] = []
        self._ended: float | None = None
        self._listening = listen(self._hear, shows_predictions=False)
        self._listening.__enter__()
        self._start = time.perf_counter()
        return self

    def _hear(self, report: PassReport) -> None:
        now = time.perf_counter()
        if report.seconds is None:  # a pass starts: the client's work since the last one ends
            if self._ended is not None:
                self.client.append(now - self._ended)
            self._ended = None
        else:
            self.passes.append(report.seconds)
            self._ended = now

    def __exit__(self, *exc_info) -> bool:
        end = time.perf_counter()
        self.seconds = end - self._start
        if self._ended is not None:
            self.client.append(end - self._ended)
        self._listening.__exit__(*exc_info)
        return False


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
        self._predicted: int | None = None
        self._learnt: int | None = None
        self._source: str | None = None
        self._spent = 0.0
        self._spent_since_end = 0.0  # one-off client seconds since the last pass ended
        self._starts: list[float] = []
        self._ends: list[float] = []
        self._first: tuple | None = None  # the first pass's compute seconds and matrix (:meth:`computed`)
        self._client_cost: Callable[[int], float] | None = None  # the client's work after pass j, relative (:meth:`client_grows`)

    def bound(self, value: float) -> None:
        """The error bound reached after the last pass (shown when the next one starts)."""
        self._bound = float(value) if math.isfinite(value) else None

    def predict(self, total: int | None, learnt: int | None = None, source: str | None = None) -> None:
        """The passes the solve now expects to make in all (shown, and timing the time left);
        ``learnt``: the pass whose results gave that figure (None: a prior, not learnt; 0: known
        before the first pass, from ``source``, see :class:`PassReport`)."""
        self._predicted = None if total is None else max(int(total), self.number + 1)
        self._learnt = None if total is None or learnt is None else int(learnt)
        self._source = source if self._learnt == 0 else None

    def spent(self, seconds: float) -> None:
        """Client seconds since the last pass's start that no later pass repeats (a prediction's
        simulation): left out of the time a pass's cycle takes."""
        if len(self._starts) > 1:  # before, the cycle is counted from the second pass's start
            self._spent += float(seconds)
        self._spent_since_end += float(seconds)

    def client_grows(self, cost: Callable[[int], float]) -> None:
        """The client's work after pass j grows as ``cost(j)`` (any unit: a solver's model of its
        flops, block Krylov's growing with its basis): the time left then counts each pass still
        to come with the client's last measured time scaled by it, not the mean so far. Block
        Krylov at d = 1000 spends ~15× longer on the client after its 10th pass than after its
        first."""
        self._client_cost = cost

    def computed(self, seconds: float, matrix) -> None:
        """What the first pass tells of the later ones, called after it: its tasks spent
        ``seconds`` computing (summed over the tasks, their reads and decoding left out:
        ``_Sketch.compute_seconds``) on ``matrix``, what every pass reads.

        Until a later pass has been timed, the cycle the time left is counted in is then a later
        pass's — that compute on the threads that share the pass's tasks, plus a disk cache's read
        (:func:`~daskpca.passes.what_later_passes_read`), plus the client's work after the first
        pass — not the first pass's, which also read and decoded the source and kept its blocks: on
        a one-step-per-chunk store (8760 × 16 200 float32) 4.8 s against 0.6–1.0 s for each later
        pass over the kept blocks, so the ETA after pass 1 was 2.5× the time then left. Where the
        later passes read the source again, the first cycle stands. Worked out when the second
        pass starts, and only where someone is shown the time left (:func:`watched`)."""
        self._first = (float(seconds), matrix)

    def _later_pass(self) -> float | None:
        """A later pass's expected seconds from the first pass's compute (:meth:`computed`), or None
        where the later passes read the source again (or nothing was said)."""
        from ._cache import what_later_passes_read
        from ._geometry import worker_resources

        if self._first is None:
            return None
        seconds, matrix = self._first
        kind, read_seconds = what_later_passes_read(matrix)
        if kind == "source" or not seconds > 0:
            return None
        return seconds / max(min(matrix.numblocks[0], worker_resources()[0]), 1) + read_seconds

    def heard(self) -> bool:
        """Whether anyone sees these reports' predictions (:func:`watched`)."""
        return watched()

    @contextmanager
    def read(self) -> Iterator[None]:
        """Around one pass's ``dask.compute``: reports its start and, if it succeeds, its end."""
        self.number += 1
        mean = sum(self.seconds) / len(self.seconds) if self.seconds else None
        now = time.perf_counter()
        # The cycle from the second pass's start on where there is one: the first pass also finds
        # the column statistics and builds the first graph (measured on one-step-per-chunk zarr: an
        # ETA 2× the time left when it was counted); one-off client work (a solver's prediction,
        # :meth:`spent`) is not a pass's either.
        first = 1 if len(self._starts) > 1 else 0
        cycle = ((now - self._starts[first] - self._spent) / (len(self._starts) - first)
                 if self._starts else None)
        predicted = None if self._predicted is None else max(self._predicted, self.number)
        if self._starts and watched():  # the time left is shown: the passes to come, as modelled
            cycle = self._coming_cycle(now, predicted or self.budget, cycle)
        report = PassReport(self.solver, self.number, max(self.budget, self.number), self.at_most,
                            None, mean, self._bound, self.tol, predicted, cycle, self._learnt, self._source)
        logger.info("%s", report.describe())
        _send(report)
        self._starts.append(now)
        start = time.perf_counter()
        yield
        self.seconds.append(time.perf_counter() - start)
        self._ends.append(time.perf_counter())
        self._spent_since_end = 0.0
        _send(replace(report, seconds=self.seconds[-1]))

    def _coming_cycle(self, now: float, last: int, measured: float) -> float:
        """The mean cycle (a pass and the client's work after it) of passes ``number`` … ``last``,
        from what the passes so far measured (``measured``: their mean cycle, from the second pass
        on).

        - The pass: after the first, a later pass's expected time where it differs from the first
          (:meth:`computed`); after more, the mean of the passes from the second on.
        - The client's work: with a model of its growth (:meth:`client_grows`), the last
          measured, one-off work left out, scaled pass by pass by the model; else as measured.
        """
        later = self._later_pass() if len(self._starts) == 1 else None
        if later is None and self._client_cost is None:
            return measured
        passes = later if later is not None else (sum(self.seconds[1:]) / len(self.seconds[1:]) if len(self.seconds) > 1
                                                  else self.seconds[0])
        client = max(now - self._ends[-1] - self._spent_since_end, 0.0)  # after pass number − 1
        if self._client_cost is not None and self._client_cost(self.number - 1) > 0:
            coming = range(self.number, max(last, self.number) + 1)
            client *= sum(self._client_cost(j) for j in coming) / (len(coming) * self._client_cost(self.number - 1))
        return passes + client


class ProgressLine:
    """Report the passes of the fits run inside (a context manager; :func:`daskpca.progress`).

    A terminal gets one line redrawn in place; anything else (a log, a notebook's output) one
    line per pass, prefixed ``progress:``. No percentage is ever shown: nothing reads "100 %"
    before the fit ends, and the last line (``done: N passes in T``) is written when the work
    inside has ended without an error.

    Parameters
    ----------
    stream : file, default sys.stderr
    quiet : bool
        Report nothing.
    interval : float, optional
        Terminal only: seconds between redraws of the current pass's line with its elapsed time
        (default 0.5).
    log_after : float, optional
        Logs only (not a terminal): a pass's line is written once it has run this long (default
        2 s). Passes shorter than that appear only in the last line, so a job that fails within
        seconds prints its one error line and nothing else.
    """

    def __init__(self, *, stream=None, quiet: bool = False, interval: float = 0.5, log_after: float = 2.0):
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.interval = interval
        self.log_after = log_after
        self._logged = None  # the pass (its start) whose line the log already has
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._current: tuple[str, float] | None = None  # the running pass's line and its start
        self._passes = 0
        self._thread = None
        self._listening = None
        self._start = None

    def __enter__(self):
        if self.quiet:
            return self
        self._start = time.monotonic()
        self._listening = listen(self._on_pass)
        self._listening.__enter__()
        self._thread = threading.Thread(target=self._redraw, name="daskpca-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type, exc, traceback):
        if self._listening is None:
            return False
        self._listening.__exit__(exc_type, exc, traceback)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if exc_type is None and self._passes:  # a failed job ends with its error, not a progress line
            elapsed = format_seconds(time.monotonic() - self._start)
            self._write(f"done: {self._passes} pass{'es' if self._passes != 1 else ''} in {elapsed}", final=True)
        return False

    def _on_pass(self, report: PassReport) -> None:
        if report.seconds is not None:  # a pass ended; the next start (or the end) says more
            self._passes += 1
            self._current = None
            return
        self._current = (report.describe(), time.monotonic())
        if self.tty or self.log_after <= 0:
            self._logged = self._current
            self._write(self._current[0])

    def _redraw(self) -> None:
        while not self._stop.wait(self.interval if self.tty else max(min(self.interval, self.log_after), 0.05)):
            current = self._current
            if current is None:
                continue
            elapsed = time.monotonic() - current[1]
            if self.tty:
                self._write(f"{current[0]} · {format_seconds(elapsed)} in")
            elif elapsed >= self.log_after and self._logged is not current:
                self._logged = current
                self._write(current[0])

    def _write(self, text: str, final: bool = False) -> None:
        with self._lock:
            if self.tty:
                self.stream.write(f"\r\033[K{text}" + ("\n" if final else ""))
            else:
                self.stream.write(f"progress: {text}\n")
            self.stream.flush()


def progress(stream=None, *, quiet: bool = False, log_after: float = 2.0) -> ProgressLine:
    """Show the passes of the fits run inside, as the ``daskpca`` command does::

        with daskpca.progress():
            pca.fit(X)      # progress: pass 4 of ≤ 20, 7 predicted (krylov, bound 3.1e-02 → tol 1e-04), 41 s a pass, ~2.7 min left

    ``stream`` (default ``sys.stderr``) gets the lines; ``quiet=True`` shows nothing (for code
    that decides at run time). Not on a terminal, a pass's line is written once it has run
    ``log_after`` seconds (0: at its start). Logs can have the same lines without this: configure
    the ``"daskpca"`` logger at INFO.
    """
    return ProgressLine(stream=stream, quiet=quiet, log_after=log_after)
