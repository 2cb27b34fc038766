"""Where a job's dask work runs: the threaded scheduler in this process for a small input, else a
Dask cluster — the scheduler given (``--scheduler`` or ``$DASK_SCHEDULER_ADDRESS``) or an
embedded local one (``--workers`` / ``--threads`` / ``--memory-limit``) — with a progress line per
pass either way. Imported by :mod:`daskpca.cli.command` only; no math, no data.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager

from .options import MIN_WORKER_MEMORY, UsageError
from .summary import progress, say as _say

#: Seconds to wait for a scheduler given with --scheduler before giving up (exit code 1).
CONNECT_TIMEOUT = float(os.environ.get("DASKPCA_CONNECT_TIMEOUT", 15))
#: Inputs up to this size run on the threaded scheduler unless a cluster is asked for: starting
#: a local cluster takes seconds, longer than the whole job.
SMALL_INPUT_BYTES = 256 * 2**20
#: Defaults of the embedded local cluster.
LOCAL_CLUSTER = {"workers": 2, "threads": 1, "memory_limit": "auto"}


@contextmanager
def dask_client(args):
    """A ``distributed.Client`` for the job: the given scheduler, else an embedded cluster."""
    from distributed import Client, LocalCluster

    address = getattr(args, "scheduler", None) or os.environ.get("DASK_SCHEDULER_ADDRESS")
    if address:
        try:
            client = Client(address, timeout=CONNECT_TIMEOUT)
        except (OSError, TimeoutError) as exc:
            raise ConnectionError(
                f"could not reach the Dask scheduler at {address!r} within {CONNECT_TIMEOUT:g} s "
                f"({type(exc).__name__}). Check the address and that `dask scheduler` is running, "
                "or omit --scheduler to use an embedded local cluster."
            ) from exc
        with client:
            _say(args, f"Dask scheduler: {address}  dashboard: {client.dashboard_link}")
            yield client
        return
    options = {name: getattr(args, name, None) or default for name, default in LOCAL_CLUSTER.items()}
    with LocalCluster(
        n_workers=options["workers"], threads_per_worker=options["threads"], memory_limit=options["memory_limit"],
        dashboard_address=":0", host="127.0.0.1",
        silence_logs=logging.INFO if getattr(args, "verbose", False) else logging.ERROR,
    ) as cluster, Client(cluster) as client:
        _say(args, f"running on a local Dask cluster ({options['workers']} worker(s) × {options['threads']} "
                   f"thread(s)). Dask dashboard: {client.dashboard_link}")
        yield client


def cluster_asked(args) -> bool:
    """Whether the job asks for a cluster (a scheduler address, or a local cluster's size)."""
    return bool(getattr(args, "scheduler", None) or os.environ.get("DASK_SCHEDULER_ADDRESS")
                or any(getattr(args, name, None) is not None for name in LOCAL_CLUSTER))


def check_memory(args, plan) -> None:
    """A --memory-limit too small for the planned task is refused before the cluster starts."""
    from dask.utils import format_bytes

    from .._plan import TASK_MEMORY_FRACTION

    limit = getattr(args, "memory_limit", None)
    if not isinstance(limit, int) or cluster_asked(args) and getattr(args, "scheduler", None):
        return
    threads = getattr(args, "threads", None) or LOCAL_CLUSTER["threads"]
    task = plan.estimate(plan.solver).task_bytes
    needed = int(task * threads / TASK_MEMORY_FRACTION) + MIN_WORKER_MEMORY
    if limit < needed:
        raise UsageError(
            f"--memory-limit {format_bytes(limit)} is too small for this job: solver {plan.solver!r} needs "
            f"≈ {format_bytes(task)} per task × {threads} thread(s), at most {TASK_MEMORY_FRACTION:.0%} of a "
            f"worker's memory, plus {format_bytes(MIN_WORKER_MEMORY)} for the worker itself. Give "
            f"--memory-limit {format_bytes(needed)} or more, or use smaller chunks.")


@contextmanager
def runner(args, nbytes: int, plan=None):
    """Where the job's dask work runs: the threaded scheduler for a small input unless a cluster
    is asked for, else :func:`dask_client`; either way with a progress line per pass. Yields the
    client or None. ``plan``: the job's plan, when it made one (``fit``): first
    :func:`check_memory`, before anything starts."""
    import dask
    from dask.utils import format_bytes

    if plan is not None:
        check_memory(args, plan)
    if not cluster_asked(args) and nbytes <= SMALL_INPUT_BYTES:
        _say(args, f"running on the threaded scheduler in this process (input {format_bytes(nbytes)} ≤ "
                   f"{format_bytes(SMALL_INPUT_BYTES)}; --workers N or --scheduler ADDRESS for a cluster)")
        args.ran_on = "threads"
        with dask.config.set(scheduler="threads"), progress(args):
            yield None
        return
    args.ran_on = "cluster"
    with dask_client(args) as client, progress(args):
        yield client
