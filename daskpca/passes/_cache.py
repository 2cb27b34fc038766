"""The pass cache: the first read of the input keeps its blocks, and later passes read those.

An iterative solver (randomized, Krylov, ALS, probabilistic PCA, Hilbert's and MCA's Krylov
roads), a Gram fit over strips stored as such, or a fit followed by its scores in one command,
reads the same input several times. Each read of an archive store pays the codec (zstd on 2
cores: ~0.3 GB/s) and, on an object store, one request per chunk; a pass over blocks held in
memory pays only its flops, and one over an uncompressed local copy a disk read (~1.3 GB/s cold
here). So the first read keeps what later passes consume, and passes 2+ read that instead:

``"memory"``
    The blocks stay where the first pass computed them: in the workers' memory (futures; when the
    workers near their limits distributed spills to its local directory itself), or in this
    process with the threaded scheduler.
``"disk"``
    An uncompressed zarr array under ``$DASKPCA_SCRATCH`` (or the system's temporary directory),
    one zarr chunk per task block, written by the first pass's own tasks; removed when the job
    ends — success, error, Ctrl-C, SIGTERM — and one left by a killed job removed by the next
    (:mod:`daskpca.store.scratch`). Each write task returns what it wrote (the chunk file's bytes
    and a sampled CRC-32, :func:`._copies.fingerprint`) and every later read checks its file against that:
    a chunk file removed, truncated or changed meanwhile (a temporary-file cleaner, another
    process) is a :class:`~daskpca.exceptions.ScratchDamagedError` naming it, never the fill
    value. A scratch root inside the input (through symlinks too) is refused before any read.
``None``
    One read (nothing to reuse), the input already in memory (NumPy, a persisted dask array,
    blocks already on the cluster: no double caching), ``cache=False``, or no room anywhere.

What is kept: the blocks of the matrix the passes read — decoded, in the task geometry
(:mod:`daskpca.passes._geometry`), in the input's dtype. The feature stage (the mask of
features missing everywhere, the weights, the standard deviations) is applied by every pass to
each slab while it is in cache, as without the cache: so a cached fit is the uncached fit to the
last bit, and a float32 field is kept in float32 (a weighted float64 copy would take twice the
room, a weighted float32 one would round every entry, 6e-8, which the solvers would carry).

How the first pass keeps the blocks without another read: while a fit runs, :class:`PassCache`
is dask's scheduler (``dask.config.set(scheduler=...)``; it hands every graph on to the scheduler
that was active). The first graph that reads every block of the input is computed together with
the blocks themselves (memory) or with one write task per block that takes the block task's
output (disk): one compute, so each block — each storage chunk — is read once and feeds both the
pass's partial result and the cache. Every later graph that reads the input gets those block
tasks replaced by the kept blocks (memory), or by a read of their chunk of the copy (disk).
Graphs that do not read the input pass through untouched.

The choice (:func:`choose`): ``cache="auto"`` (the estimators' default; dask's config key
``daskpca.cache`` overrides it) takes memory when the blocks fit beside the passes' working set
— the workers' memory limits times distributed's spill threshold (``distributed.worker.memory.
target``), less each worker's own footprint and a working task per thread; this machine's
available memory (half of it) on the threaded scheduler — else disk when the scratch folder has
room (and, with workers on other hosts, ``$DASKPCA_SCRATCH`` names a folder they share), else
none. ``"memory"`` and ``"disk"`` force a kind (a one-read fit still keeps nothing); ``False``
never caches. A disk cache that cannot be made (folder missing, read-only, full) falls back to
no cache with one :class:`~daskpca.exceptions.CacheWarning`, never a failed fit.

A fit's cache lives until the fit ends; inside :func:`job` (the CLI's ``fit --scores``) it lives
until the job ends, and :func:`lookup` gives the scores pass the cached matrix.

It lives with the pass kernels because it is one: a solver never sees it, it only changes where
each pass's blocks come from. The estimators make the choice (:func:`choose`, through
:func:`daskpca._plan.with_cache` for PCA's plan) and open it around their solve (:func:`for_fit`).
"""

from __future__ import annotations

import logging
import os
import socket
import warnings
from contextlib import ExitStack, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Iterator

import dask
import numpy as np
from dask._task_spec import convert_legacy_graph

from ..exceptions import CacheWarning, InvalidParameterError, ScratchError
from ._copies import _read_block, _write_block
from ._decode import stored_paths
from ._geometry import WORKER_FOOTPRINT, current_client, what_runs, worker_infos
from ._device import NUMPY, backend_of, on_device
from ._graph import unwrap_scheduler

logger = logging.getLogger("daskpca")

#: dask config key that replaces ``cache="auto"``: ``dask.config.set({"daskpca.cache": "disk"})``.
CONFIG_KEY = "daskpca.cache"
#: What ``cache=`` accepts.
SETTINGS = ("auto", "memory", "disk", False)
#: Threaded scheduler: the fraction of this machine's available memory the cache may take.
LOCAL_MEMORY_FRACTION = 0.5
#: Free scratch space the disk cache leaves beside its own bytes (a fraction of them).
DISK_HEADROOM = 0.1
#: Reading an uncompressed local copy (cold, measured here: 1.3 GB/s on 2 cores); the plan's
#: time of a pass served from disk. A pass served from memory costs its flops and tasks only.
DISK_READ_BYTES_PER_SECOND = 1.3e9
#: What keeping the blocks adds to the first pass. Memory: every kept block is fresh memory the
#: kernel maps and zeroes (page faults; 2.1 GiB took 2.8 s here, and the cached first pass of the
#: reanalysis field ran 3–4 s longer than an uncached one), where an uncached pass reuses the
#: pages of the blocks it freed. Disk: the uncompressed copy's write (2.2 GB/s direct, ~1 GB/s
#: through zarr's chunk writes).
MEMORY_KEEP_BYTES_PER_SECOND = 0.8e9
DISK_WRITE_BYTES_PER_SECOND = 1.0e9


def setting(value) -> str | bool:
    """The effective setting: ``value``, or for ``"auto"`` dask's config key ``daskpca.cache``
    when set. Raises :class:`~daskpca.exceptions.InvalidParameterError` for anything else."""
    if value == "auto" and value is not False:
        value = dask.config.get(CONFIG_KEY, "auto")
        if isinstance(value, str) and value.lower() in ("false", "off", "none", "no"):
            value = False  # from an environment variable / YAML file
        where = f"dask config {CONFIG_KEY!r}"
    else:
        where = "cache"
    if value is not False and value not in ("auto", "memory", "disk"):
        raise InvalidParameterError(f"{where}={value!r:.60}: expected 'auto', 'memory', 'disk' or False.")
    return value


@dataclass(frozen=True)
class CacheChoice:
    """What the pass cache will be for one fit, decided from metadata before any read.

    ``kind`` is ``"memory"``, ``"disk"`` or None; ``nbytes`` the bytes kept (0 for None);
    ``reason`` why; ``reads`` the reads of the input the fit makes without it; ``pass_seconds``
    the predicted time of one later pass served by the cache (None without one),
    ``read_seconds`` that of a pass reading the source, and ``keep_seconds`` what keeping the
    blocks adds to the first pass.
    """

    kind: str | None
    nbytes: int
    reason: str
    reads: int = 1
    pass_seconds: float | None = None
    read_seconds: float | None = None
    sources: tuple = ()  # the matrices to keep (those not in memory already)
    warning: str | None = None  # said once by the fit: a disk cache wanted but the scratch folder unusable
    keep_seconds: float = 0.0
    #: Predicted seconds the cache saves over the job's reads, less what keeping the blocks costs
    #: (0 without one or without the times; negative when keeping costs more). Derived once: the
    #: planner reads it for every solver it weighs.
    saved: float = field(init=False)

    def __post_init__(self):
        saved = 0.0
        if self.kind is not None and self.pass_seconds is not None and self.read_seconds is not None:
            saved = max(self.reads - 1, 0) * max(self.read_seconds - self.pass_seconds, 0.0) - self.keep_seconds
        object.__setattr__(self, "saved", saved)

    def describe(self) -> str:
        """One line for the plan."""
        if self.kind is None:
            return f"none — {self.reason}"
        later = "" if self.pass_seconds is None else (f"; kept in ≈ {self.keep_seconds:.2g} s during the first pass, "
                                                      f"passes 2+ ≈ {self.pass_seconds:.3g} s each (cache read + flops)")
        if self.pass_seconds is not None and self.read_seconds is not None:
            later += f" instead of ≈ {self.read_seconds:.3g} s (source read + flops)"
        return f"{self.kind}, {format_bytes(self.nbytes)} — {self.reason}{later}"



def format_bytes(n: float) -> str:
    """``n`` bytes in KiB, MiB or GiB, for the plan's cache line and reasons."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def in_memory(matrix) -> str | None:
    """Why ``matrix``'s blocks need no cache (they are in memory already), or None.

    Said when every datum its graph starts from is an in-memory array or a future (a NumPy array
    wrapped by dask, a persisted array, blocks on the cluster); None as soon as one is something
    else — a stored source (zarr, an xarray backend, a store on S3), what is worth keeping.
    Looks at the graph only.
    """
    from dask._task_spec import DataNode

    graph = matrix.__dask_graph__()
    kinds = set()
    for node in dict(graph).values():
        value = node.value if isinstance(node, DataNode) else node
        if isinstance(node, DataNode) or not hasattr(node, "dependencies"):
            if type(value).__name__ == "Future":
                kinds.add("blocks already on the cluster")
            elif isinstance(value, np.ndarray) or backend_of(value) is not NUMPY:  # host or device memory
                kinds.add("an in-memory array")
            elif value is None or isinstance(value, (int, float, str, bytes, tuple, slice, np.generic)):
                continue
            else:
                return None  # a stored source (zarr array, lazy backend): worth caching
    return " and ".join(sorted(kinds)) or "data computed by dask from values in its graph"


def what_later_passes_read(matrix) -> tuple[str, float]:
    """``(kind, seconds)``: what the passes after the first read for ``matrix`` — ``"memory"`` (the
    running fit's pass cache kept its blocks, or they were in memory already: a later pass repeats
    the tasks' compute, not the read), ``"disk"`` (the cache's uncompressed copy, read at
    ``DISK_READ_BYTES_PER_SECOND``: ``seconds`` that read takes) or ``"source"`` (every pass reads
    and decodes the input again). Asks the scheduler in place (the :class:`PassCache` while a fit
    runs) and the graph; reads nothing."""
    cache = dask.config.get("scheduler", None)
    if isinstance(cache, PassCache) and cache.kept is not None:
        kind = cache.choice.kind
        return kind, (cache.choice.nbytes / DISK_READ_BYTES_PER_SECOND if kind == "disk" else 0.0)
    return ("memory" if in_memory(matrix) else "source"), 0.0


@dataclass(frozen=True)
class MachineMemory:
    """The memory facts the cache's room is priced from (:func:`machine_memory`): on a
    ``distributed`` cluster each worker's ``(memory limit, threads)`` and the spill ``target``;
    on the threaded scheduler this machine's ``available`` bytes and its ``threads``."""

    workers: tuple | None  # ((memory_limit or None, threads), ...) on a cluster, else None
    target: float = 0.6
    available: float = 0.0
    threads: int = 1


def machine_memory(runner: tuple | None = None) -> MachineMemory:
    """The :class:`MachineMemory` of whatever runs the tasks now (asks the scheduler once;
    ``runner``: :func:`~daskpca.passes._geometry.what_runs` when the caller asked it already)."""
    client, resources = what_runs() if runner is None else runner
    if client is not None:
        target = dask.config.get("distributed.worker.memory.target", 0.6) or 0.6
        return MachineMemory(tuple((w.get("memory_limit"), max(w.get("nthreads", 1), 1)) for w in worker_infos(client)), target)
    import psutil

    return MachineMemory(None, available=psutil.virtual_memory().available, threads=resources[0])


def memory_room(working_bytes: int, machine: MachineMemory | None = None) -> tuple[int, str]:
    """``(bytes the cache may hold in memory, where from)`` beside ``working_bytes`` per thread.

    ``machine``: the memory facts, the same for every solver a plan weighs (gathered once for the
    plan, :func:`gather`); None: asked now (:func:`machine_memory`)."""
    machine = machine or machine_memory()
    if machine.workers is not None:
        target = machine.target
        room = 0
        for limit, nthreads in machine.workers:
            if not limit:
                return 2**62, "distributed workers without memory limits"
            room += limit * target - WORKER_FOOTPRINT - nthreads * working_bytes
        return int(max(room, 0)), (f"the workers' memory limits × {target:g} (distributed's spill threshold), less "
                                   f"their footprint and a task's working set per thread")
    room = LOCAL_MEMORY_FRACTION * machine.available - machine.threads * working_bytes
    return int(max(room, 0)), f"{LOCAL_MEMORY_FRACTION:g} × this machine's available memory, less a task's working set per thread"


#: Device blocks: the fraction of the device's free memory (when the fit is planned) the cache may
#: take, beside each pass's working set (the rest is the device library's pool and the kernels').
DEVICE_MEMORY_FRACTION = 0.5


def device_memory_room(device, working_bytes: int, memory=None) -> tuple[int, str]:
    """``(bytes the cache may hold on the device, where from)`` for blocks on ``device`` (its
    free memory on this process's current device, ``memory`` = ``(free, total)`` when already
    asked; a cluster of GPU workers each has its own, assumed alike)."""
    memory = device.memory() if memory is None else memory
    if memory is None:
        return 0, f"{device.name}: its free memory is unknown"
    free, _ = memory
    room = DEVICE_MEMORY_FRACTION * free - working_bytes
    return int(max(room, 0)), f"{DEVICE_MEMORY_FRACTION:g} × the device's free memory, less a task's working set"


def disk_unshared() -> str | None:
    """Why a disk cache cannot serve the workers (some on another host and no ``$DASKPCA_SCRATCH``
    they would share), or None."""
    from ..store.scratch import SCRATCH_ENV

    client = current_client()
    if client is None or os.environ.get(SCRATCH_ENV):
        return None
    here = {"127.0.0.1", "localhost", "::1", socket.gethostname()}
    try:
        here.add(socket.gethostbyname(socket.gethostname()))
    except OSError:
        pass
    hosts = {w.get("host") for w in worker_infos(client)}
    if hosts <= here:
        return None
    return (f"workers run on other hosts ({', '.join(sorted(map(str, hosts - here)))}) and ${SCRATCH_ENV} is unset: "
            f"set it to a folder every worker and this process share for a disk cache")


@dataclass(frozen=True)
class CacheFacts:
    """What pricing the pass cache reads of the input and of the machine, none of it the
    solver's: gathered once per plan (:func:`gather`), so that pricing the cache for every
    solver's estimate (:func:`choose`) asks the graph, the device and the scheduler nothing again.

    ``value`` is the effective setting (:func:`setting`); ``held`` why each matrix needs no cache
    (:func:`in_memory`, None for a stored one); ``stored`` the matrices worth keeping; ``device``
    the backend of the first stored one's chunks and ``device_memory`` its ``(free, total)``
    bytes (None on the host); ``threads`` those that run the tasks; ``tasks`` the stored blocks;
    ``distributed`` whether a cluster runs them (a cached pass still moves its tasks' results).
    """

    value: str | bool
    held: tuple
    stored: tuple
    device: object = NUMPY
    device_memory: tuple | None = None
    threads: int = 1
    tasks: int = 0
    machine: MachineMemory | None = None  # the memory room's facts (None: nothing stored to keep)
    distributed: bool = False
    job: tuple = (None, 0)  # job_facts(): the client's id and the job's later reads


def gather(matrix, cache="auto", *, device=None, runner: tuple | None = None) -> CacheFacts:
    """The :class:`CacheFacts` of ``matrix`` (one dask array, or a list of them) for ``cache``;
    ``device`` (its chunks' backend) and ``runner`` (:func:`~daskpca.passes._geometry.what_runs`)
    when a planner asked them already. Reads no data; raises
    :class:`~daskpca.exceptions.InvalidParameterError` for a bad ``cache``."""
    value = setting(cache)
    matrices = list(matrix) if isinstance(matrix, (list, tuple)) else [matrix]
    job = job_facts(current_client() if runner is None else runner[0])
    held = tuple([in_memory(m) for m in matrices])
    stored = tuple(m for m, h in zip(matrices, held) if h is None)  # also the planner's: a pass reads a store
    if value is False or not stored:
        return CacheFacts(value, held, stored, job=job)
    runner = what_runs() if runner is None else runner
    device = on_device(stored[0]) if device is None else device
    machine = machine_memory(runner)
    return CacheFacts(value, held, stored, device, None if device is NUMPY else device.memory(), runner[1][0],
                      sum(len(m.chunks[0]) * len(m.chunks[1]) for m in stored), machine, machine.workers is not None, job)


def choose(matrix, cache="auto", *, reads: int, working_bytes: int = 0, flop_seconds: float = 0.0,
           read_seconds: float | None = None, fit_reads: int | None = None, facts: CacheFacts | None = None) -> CacheChoice:
    """The pass cache for a job that reads ``matrix`` ``reads`` times (see the module notes).

    ``working_bytes``: the largest task of a pass (the plan's estimate); ``flop_seconds`` and
    ``read_seconds``: a pass's predicted flops time and source-read time (the plan's), for the
    predicted time of a pass served by the cache; ``fit_reads``: the reads of the fit itself
    (default ``reads``), whose time the plan predicts; ``facts``: ``matrix``'s and the machine's
    (:func:`gather`, made once by a planner that prices the cache for every solver; None: gathered
    here). Reads no data.
    """
    facts = gather(matrix, cache) if facts is None else facts
    value = facts.value
    choice = CacheChoice(None, 0, "", reads if fit_reads is None else fit_reads, None, read_seconds)
    if value is False:
        return replace(choice, reason="cache=False" if cache is False else f"dask config {CONFIG_KEY!r} is False")
    if reads <= 1:
        return replace(choice, reason="the job reads the input once: nothing to reuse")
    held = facts.held
    if all(h is not None for h in held):
        return replace(choice, reason=f"the input is already in memory ({held[0]}): used as it is")
    stored = list(facts.stored)
    nbytes = int(sum(m.nbytes for m in stored))
    choice = replace(choice, sources=tuple(stored))
    room, where = memory_room(working_bytes, facts.machine)
    device = facts.device
    if device is not NUMPY:  # blocks kept where the passes use them: the device's memory
        room, where = device_memory_room(device, working_bytes, facts.device_memory)
    task_seconds = 0.9e-3 * facts.tasks / max(facts.threads, 1)
    memory = replace(choice, kind="memory", nbytes=nbytes, pass_seconds=flop_seconds + task_seconds,
                     keep_seconds=nbytes / MEMORY_KEEP_BYTES_PER_SECOND)
    if value == "memory":
        return replace(memory, reason="asked for (cache='memory')" + (
            "" if nbytes <= room else f"; {format_bytes(nbytes)} exceeds the room ({format_bytes(room)}): the workers will spill"))
    if value == "auto" and memory.saved < 0:
        return replace(choice, reason=f"keeping {format_bytes(nbytes)} (≈ {memory.keep_seconds:.2g} s) costs more than "
                       f"its {choice.reads - 1} later read(s) save")
    if value == "auto" and nbytes <= room:
        return replace(memory, reason=f"{format_bytes(nbytes)} fits in {format_bytes(room)} ({where})")
    from ..store.scratch import check_apart, check_root, free_bytes, remove_dead, scratch_root

    try:
        check_root()
    except ScratchError as error:  # missing, a file, not writable: no cache, said once
        return replace(choice, reason=f"no disk cache: {error}", warning=f"{error} No pass cache: the fit reads its "
                       "source on every pass.")
    # Not a fall-back but an error: a scratch root inside the input (or the input inside one of
    # daskpca's scratch folders) is a misplaced $DASKPCA_SCRATCH the user must hear about.
    check_apart(stored_paths(stored))
    remove_dead()  # killed jobs' copies first: they may be what fills the disk
    shared = disk_unshared()
    if shared is not None:
        return replace(choice, reason=f"{format_bytes(nbytes)} exceeds the memory room ({format_bytes(room)}) and {shared}")
    free = free_bytes()
    disk = replace(choice, kind="disk", nbytes=nbytes, keep_seconds=nbytes / DISK_WRITE_BYTES_PER_SECOND,
                   pass_seconds=nbytes / DISK_READ_BYTES_PER_SECOND / max(1, min(2, facts.threads)) + flop_seconds + task_seconds)
    if free >= nbytes * (1 + DISK_HEADROOM):
        why = "asked for (cache='disk')" if value == "disk" else \
            f"{format_bytes(nbytes)} exceeds the memory room ({format_bytes(room)}, {where})"
        return replace(disk, reason=f"{why}; an uncompressed copy under {scratch_root()}")
    reason = (f"no room: {format_bytes(nbytes)} exceeds the memory room ({format_bytes(room)}) and the free space of "
              f"the scratch folder {scratch_root()} ({format_bytes(free)}); set $DASKPCA_SCRATCH to a local disk with room")
    return replace(choice, reason=reason, warning=f"{reason}. No pass cache: the fit reads its source on every pass."
                   if value == "disk" else None)


def choose_each(matrix, cache, questions, facts: CacheFacts) -> list[CacheChoice]:
    """:func:`choose` for each of ``questions`` (its keywords, one dict per solver a planner
    weighs) on the same ``matrix`` and ``facts``: one visit for all of them, the memory room
    priced from the machine's facts gathered with them."""
    return [choose(matrix, cache, facts=facts, **question) for question in questions]


# ----------------------------------------------------------------------------------------- running


def _keys(matrix) -> list:
    from dask.core import flatten

    return list(flatten(matrix.__dask_keys__()))


def _cull(graph: dict, keys) -> dict:
    """The tasks of ``graph`` that ``keys`` need."""
    out, stack = {}, list(keys)
    while stack:
        key = stack.pop()
        if key in out or key not in graph:
            continue
        node = out[key] = graph[key]
        stack.extend(getattr(node, "dependencies", ()))
    return out


def _inline(graph: dict, inlined, keys) -> dict:
    """``graph`` with the tasks ``inlined`` made part of each task that uses them (and dropped
    unless asked for in ``keys``).

    Why, for the disk cache's reads: a separate read task's output (a ~100 MB block) is a result
    the scheduler may move to another worker when it gives the consumer to an idle one (work
    stealing: on 2 workers × 1 GiB it moved ~2 blocks a pass, ~0.7 s each), where mapping the
    chunk file again where the consumer runs costs ~30 ms. Inside the consumer there is nothing
    to move.
    """
    from dask.core import flatten

    inlined = set(inlined)
    wanted = set(flatten(keys)) if isinstance(keys, list) else {keys}
    subs = {key: graph[key] for key in inlined}
    out = {}
    for key, node in graph.items():
        if key in inlined and key not in wanted:
            continue
        uses = getattr(node, "dependencies", frozenset()) & inlined
        out[key] = node.substitute({k: subs[k] for k in uses}) if uses and key not in inlined else node
    return out


class PassCache:
    """The pass cache of one fit: a scheduler wrapper that keeps the source's blocks on the first
    full read and serves them to every later graph (see the module notes).

    Parameters
    ----------
    matrices : list of dask.array.Array
        The inputs whose blocks are kept (one per field: MCA reads two).
    choice : CacheChoice
        ``kind`` "memory" or "disk" (None: a cache that keeps nothing, for ``cache_``).
    """

    def __init__(self, matrices, choice: CacheChoice):
        self.choice = choice
        self.matrices = [_sealed(m) for m in matrices] if choice.kind is not None else list(matrices)
        self.sources = {key: (i, j) for i, m in enumerate(self.matrices) for j, key in enumerate(_keys(m))}
        self.kept: dict | None = None  # key -> block (memory), future (distributed) or disk task args
        self.where: str | None = None
        self.served = 0  # graphs served from the cache
        self.reason = choice.reason
        self._scratch = ExitStack()
        self._target = self._files = self._written = None
        self.__wrapped__ = None
        self._config = None

    def input(self, matrix):
        """What the fit should read for ``matrix``: the same array with its blocks sealed (see
        :func:`_sealed`) when this cache keeps it, else ``matrix``."""
        for m in self.matrices:
            if m.name == matrix.name and m.chunks == matrix.chunks:
                return m
        return matrix

    # -- lifetime
    def __enter__(self) -> "PassCache":
        if self.choice.kind is not None:
            self.__wrapped__ = unwrap_scheduler(dask.base.get_scheduler()) or dask.threaded.get
            # Low-level fusion would merge an input block into its one consumer (a rechunk's
            # split, say) under a new key: the block could then be neither kept nor served.
            self._config = dask.config.set({"scheduler": self, "optimization.fuse.active": False})
            self._config.__enter__()
        return self

    def __exit__(self, *exc) -> bool:
        self.stop()
        return False

    def stop(self) -> None:
        """Stop serving graphs (the blocks stay for :func:`lookup` until :meth:`release`)."""
        if self._config is not None:
            self._config.__exit__(None, None, None)
            self._config = None

    def release(self) -> None:
        """Drop the kept blocks (futures released, the disk copy removed)."""
        self.stop()
        self.kept = None
        self._target = self._files = self._written = None
        self._scratch.close()

    def describe(self) -> dict:
        """The fitted attribute ``cache_``."""
        kind = self.choice.kind if self.kept is not None else None
        return {"kind": kind, "bytes": int(self.choice.nbytes) if kind else 0, "where": self.where if kind else None,
                "reason": self.reason}

    # -- the scheduler
    def __call__(self, expr, keys, **kwargs):
        graph = dict(expr.__dask_graph__()) if hasattr(expr, "__dask_graph__") else dict(expr)
        present = self.sources.keys() & graph.keys()
        if not present or (self.kept is None and len(present) < len(self.sources)):
            return self.__wrapped__(expr, keys, **kwargs)  # not (a full read of) the input
        # Task objects throughout (a graph layer may hold dask's older tuple tasks, which name
        # their inputs by key without saying so): a kept block replaces its key's task below.
        graph = convert_legacy_graph(graph)
        if self.kept is None:
            return self._first(graph, keys, kwargs)
        self.served += 1
        for key in present:
            graph[key] = self._node(key)
        graph = _cull(graph, keys)
        if self.choice.kind == "disk":
            graph = _inline(graph, present, keys)
        return self.__wrapped__(graph, keys, **kwargs)

    def _client(self):
        client = getattr(self.__wrapped__, "__self__", None)
        return client if type(client).__name__ == "Client" else None

    def _first(self, graph: dict, keys, kwargs):
        """The first full read: the pass's keys and the blocks (or their writes), in one compute."""
        sources = list(self.sources)
        client = self._client()
        if self.choice.kind == "memory":
            if client is not None:
                futures = client.get(graph, [keys, sources], sync=False, **kwargs)
                result = client.gather(futures[0])
                self.kept, self.where = dict(zip(sources, futures[1])), "the workers' memory (spilled by distributed to their local directories if needed)"
                return result
            result, blocks = self.__wrapped__(graph, [keys, sources], **kwargs)
            self.kept, self.where = dict(zip(sources, blocks)), "this process's memory"
            return result
        from ..store.scratch import check_apart

        check_apart(stored_paths(self.matrices))  # a misplaced scratch root is an error, not a fall-back
        try:
            writes = self._disk_writes(graph)
            result, written = self.__wrapped__(graph, [keys, list(writes)], **kwargs)
        except (OSError, ScratchError) as error:
            self._fall_back(error)
            return self.__wrapped__(_cull(graph, keys), keys, **kwargs)
        self._written = [[None] * len(files) for files in self._files]
        for (i, j), record in zip(writes.values(), written):
            self._written[i][j] = tuple(record)  # what every later read checks
        self.kept = {key: None for key in sources}
        return result

    def _disk_writes(self, graph: dict) -> dict:
        """Add one write task per source block to ``graph`` (into a fresh uncompressed zarr array
        under the scratch folder, one chunk per block); ``{write key: (matrix, block)}``."""
        import zarr
        from dask._task_spec import Task, TaskRef

        from ..store.scratch import scratch_error, scratch_folder

        folder = self._scratch.enter_context(scratch_folder("cache"))
        self.where = str(folder)
        shapes = [_block_shapes(m) for m in self.matrices]
        targets = []
        try:
            for i, m in enumerate(self.matrices):
                largest = tuple(max(c) for c in m.chunks)
                targets.append(zarr.create_array(
                    store=str(folder / f"input-{i}.zarr"), shape=(len(shapes[i]), *largest), chunks=(1, *largest),
                    dtype=m.dtype.newbyteorder("<"), compressors=None, fill_value=0))
        except OSError as error:
            raise scratch_error(error, folder) from None
        self._target = targets
        for target in targets:  # what _write_block writes and _read_block maps: raw bytes, one chunk a block
            codecs = target.metadata.codecs
            if len(codecs) != 1 or type(codecs[0]).__name__ != "BytesCodec" or str(getattr(codecs[0], "endian", "")) \
                    not in ("little", "Endian.little") or np.dtype(target.dtype).byteorder == ">":
                raise ScratchError(f"the disk cache's zarr array is not raw little-endian bytes ({codecs!r})")
        self._files = [[str(folder / f"input-{i}.zarr" / target.metadata.encode_chunk_key((j, *(0,) * (target.ndim - 1))))
                        for j in range(len(shapes[i]))] for i, target in enumerate(targets)]
        self._shapes = shapes
        writes = {}
        for key, (i, j) in self.sources.items():
            write = (f"daskpca-cache-write-{self.matrices[i].name}", j)
            graph[write] = Task(write, _write_block, TaskRef(key), self._files[i][j], targets[i].dtype, targets[i].chunks[1:])
            writes[write] = (i, j)
        return writes

    def _node(self, key):
        """What replaces the source task ``key`` in a later graph."""
        from dask._task_spec import DataNode, Task

        if self.choice.kind == "memory":
            value = self.kept[key]
            return value if self._client() is not None else DataNode(key, value)
        i, j = self.sources[key]
        target = self._target[i]
        device = on_device(self.matrices[i])
        return Task(key, _read_block, self._files[i][j], target.dtype, target.chunks[1:], self._shapes[i][j],
                    self._written[i][j], None if device.on_host else device)

    def _fall_back(self, error) -> None:
        """No cache after all: one warning, the folder removed, the source read as before."""
        from ..store.scratch import scratch_error

        message = str(error) if isinstance(error, ScratchError) else str(scratch_error(error, self.where))
        self.reason = f"disk cache not made: {message}"
        self.kept, self._target, self._files, self._written = None, None, None, None
        self._scratch.close()
        self.stop()
        warnings.warn(f"{message} The fit reads its source on every pass instead (no pass cache).", CacheWarning, stacklevel=2)

    # -- the cached matrix
    def matrix(self, index: int = 0):
        """The cached copy of input ``index`` as a dask array (same name, chunks and values), or None."""
        import dask.array as da

        if self.kept is None:
            return None
        m = self.matrices[index]
        graph = {key: self._node(key) for key, (i, _) in self.sources.items() if i == index}
        return da.Array(graph, m.name, m.chunks, meta=m._meta)


def _sealed(matrix):
    """``matrix`` with the same name, chunks and tasks, its graph materialised as a plain mapping.

    Why: dask fuses a chain of blockwise layers (the stored read, the feature stage's
    ``map_blocks``) into single tasks under new keys before any scheduler sees the graph, and a
    later pass whose graph no longer names the input's blocks could not be served from the cache
    (it would read the source again). A plain mapping is not blockwise: the input's block keys
    survive in every graph built on it. The tasks are the same; only that fusion is given up.
    """
    import dask.array as da

    return da.Array(dict(matrix.__dask_graph__()), matrix.name, matrix.chunks, meta=matrix._meta)


def _block_shapes(matrix) -> list[tuple]:
    """The shape of every block of ``matrix``, in the order of its flattened keys."""
    import itertools

    return [tuple(int(s) for s in shape) for shape in itertools.product(*matrix.chunks)]


_job: ContextVar[list | None] = ContextVar("daskpca_cache_job", default=None)
_job_reads: ContextVar[int] = ContextVar("daskpca_cache_job_reads", default=0)


@contextmanager
def job(later_reads: int = 1) -> Iterator[None]:
    """Keep the caches of the fits run inside until the block ends, for ``later_reads`` more reads
    of the same input by the job (the CLI's scores pass: :func:`lookup`)."""
    caches: list[PassCache] = []
    token, reads = _job.set(caches), _job_reads.set(later_reads)
    try:
        yield
    finally:
        _job.reset(token)
        _job_reads.reset(reads)
        for cache in caches:
            cache.release()


def later_reads() -> int:
    """Reads of the input the job makes after the fit (0 outside :func:`job`)."""
    return _job_reads.get()


def job_facts(client=False) -> tuple:
    """``(the distributed client's id or None, later_reads())``: what a pass cache is priced for
    besides its input — a plan priced under the same facts keeps its cache row in the fit.
    ``client``: the running client (or None) when the caller asked it already."""
    later = later_reads()
    client = current_client() if client is False else client
    return None if client is None else client.id, later


@contextmanager
def for_fit(matrices, choice: CacheChoice) -> Iterator[PassCache]:
    """The pass cache of one fit (``choice`` from :func:`choose`; it names the matrices to keep,
    else ``matrices``): serves the fit's graphs; kept for the job inside :func:`job`, released
    when the fit ends otherwise."""
    if choice is None:  # an estimator whose plan states no cache
        choice = CacheChoice(None, 0, "no pass cache for this estimator")
    if choice.warning:
        warnings.warn(choice.warning, CacheWarning, stacklevel=4)
    cache = PassCache(choice.sources or matrices, choice)
    kept = _job.get()
    try:
        with cache:
            yield cache
    except BaseException:
        cache.release()
        raise
    if choice.kind is not None and cache.kept is None and cache.reason == choice.reason:
        cache.reason = f"{choice.reason}; but no pass read the whole input, so nothing was kept"
    cache.summary = cache.describe()
    if choice.kind is not None:
        logger.info("daskpca: pass cache %s (%d graph(s) served from it)", cache.summary, cache.served)
    if kept is not None and cache.kept is not None:
        kept.append(cache)
    else:
        cache.release()


def lookup(matrix, kind: str):
    """``(matrix, kind)`` with ``matrix`` replaced by its cached copy when a fit of this job kept it
    (``kind``, the input's kind, passes through: it decides what the caller returns)."""
    for cache in _job.get() or ():
        for index, m in enumerate(cache.matrices):
            if m.name == matrix.name and m.chunks == matrix.chunks and cache.kept is not None:
                return cache.matrix(index), kind
    return matrix, kind

