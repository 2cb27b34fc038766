"""Progress of dask work for batch jobs: a bar on a terminal, one line at a time in logs.

A scheduler plugin counts tasks as they are scheduled and as they finish (it runs inside the
scheduler, so it sees work from every ``dask.compute`` the solvers make, on any cluster); the job
polls those counts from the client. Recomputed tasks (after a lost worker) count again on both
sides, so the fraction stays honest.
"""

from __future__ import annotations

import sys
import threading
import time

from distributed.diagnostics.plugin import SchedulerPlugin

PLUGIN_NAME = "daskpca-progress"


class TaskCounter(SchedulerPlugin):
    """Counts tasks entering the scheduler's graph and tasks finished (in memory)."""

    name = PLUGIN_NAME

    def __init__(self):
        self.added = 0
        self.done = 0

    def transition(self, key, start, finish, *args, **kwargs):
        if start == "released" and finish == "waiting":
            self.added += 1
        elif finish == "memory" and start in ("processing", "waiting"):
            self.done += 1


def _counts(dask_scheduler):
    plugin = dask_scheduler.plugins.get(PLUGIN_NAME)
    return (plugin.done, plugin.added) if plugin else (0, 0)


class ProgressReporter:
    """Report progress while a job runs (use as a context manager).

    Parameters
    ----------
    client : distributed.Client
    stream : file, default sys.stderr
    quiet : bool
        Report nothing.
    interval : float, optional
        Seconds between reports: 0.5 on a terminal (a bar redrawn in place), 10 otherwise (one
        plain line per report, for the logs of scheduled jobs).
    """

    def __init__(self, client, *, stream=None, quiet: bool = False, interval: float | None = None):
        self.client = client
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.interval = interval if interval is not None else (0.5 if self.tty else 10.0)
        self._stop = threading.Event()
        self._thread = None
        self._start = None

    def __enter__(self):
        if self.quiet:
            return self
        self.client.register_plugin(TaskCounter(), name=PLUGIN_NAME)
        self._start = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="daskpca-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type, exc, traceback):
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
            if exc_type is None:  # a failed job ends with its error, not a progress line
                self._report(final=True)
        return False

    def _run(self):
        while not self._stop.wait(self.interval):
            self._report()

    def _report(self, final: bool = False):
        try:
            done, added = self.client.run_on_scheduler(_counts)
        except Exception:  # the cluster is going away; progress is best effort
            return
        if not added:
            return
        elapsed = time.monotonic() - self._start
        fraction = done / added if added else 0.0
        if self.tty:
            width = 30
            bar = "#" * int(width * fraction)
            end = "\n" if final else ""
            self.stream.write(f"\r[{bar:<{width}}] {fraction:6.1%}  {done}/{added} tasks  {elapsed:6.1f} s{end}")
        else:
            self.stream.write(f"progress: {done}/{added} tasks ({fraction:.0%}), {elapsed:.0f} s elapsed\n")
        self.stream.flush()
