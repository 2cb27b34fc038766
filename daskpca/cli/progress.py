"""Progress of a batch job in passes: a line redrawn on a terminal, one line per pass in logs.

A fit is a handful of passes over the data (full reads); how many tasks dask ran says nothing of
how far the fit is, since every pass adds its own tasks (the dashboard keeps showing tasks). The
solvers report each pass (:mod:`daskpca.solvers._progress`); this reporter listens and writes
``pass 3 of ≤ 8 (krylov, bound 2.1e-03 → tol 1e-04), 41 s a pass, ~3.4 min left``. It never
shows a percentage, so nothing reads "100 %" before the fit has ended: the last line is written
when the job's work is done.
"""

from __future__ import annotations

import sys
import threading
import time

from ..solvers._progress import PassReport, format_seconds, listen


class ProgressReporter:
    """Report the passes of the fits run inside (a context manager).

    Parameters
    ----------
    stream : file, default sys.stderr
    quiet : bool
        Report nothing.
    interval : float, optional
        Terminal only: seconds between redraws of the current pass's line with its elapsed time
        (default 0.5). In logs (not a terminal) a line is written when each pass starts.
    """

    def __init__(self, *, stream=None, quiet: bool = False, interval: float = 0.5):
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.interval = interval
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
        if self.tty:
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
            return
        self._current = (report.describe(), time.monotonic())
        self._write(self._current[0])

    def _redraw(self) -> None:
        while not self._stop.wait(self.interval):
            current = self._current
            if current is not None:
                self._write(f"{current[0]} · {format_seconds(time.monotonic() - current[1])} in")

    def _write(self, text: str, final: bool = False) -> None:
        with self._lock:
            if self.tty:
                self.stream.write(f"\r\033[K{text}" + ("\n" if final else ""))
            else:
                self.stream.write(f"progress: {text}\n")
            self.stream.flush()
