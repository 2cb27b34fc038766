"""Task geometry: how many storage chunks one task of a pass reads, chosen here, not by the store.

Public archives are chunked for their writers: ERA5-style reanalyses one time step per chunk
(8760 chunks a year), CMIP output by year, satellite products in spatial tiles, newer stores in
zarr v3 shards. Mapping one task over each storage chunk makes a pass cost what the *chunk count*
costs, not what the bytes cost: every task pays the scheduler (~1 ms threaded, more distributed)
and, reading through zarr's synchronous API, one event-loop round trip; every row block of a
sketching pass emits a d×ℓ partial product (15.6 MB at d = 65 160, ℓ = 30) however few rows it
holds. Measured on a 1° hourly year (8760 × 65 160 float32, one step per chunk, 2 vCPU): a read at
the storage chunking takes 12 s, the same bytes read 16–512 chunks per task 4.0–4.3 s.

:func:`regroup` gives every pass the same bytes in fewer, larger tasks:

- **Rows.** Consecutive storage chunks along the sample axis are grouped until a task's row block
  (all features) holds about :func:`task_read_bytes` (but every thread gets at least
  :data:`TASKS_PER_THREAD` tasks) — whole chunks (and whole shards) only, so no
  chunk is split between two tasks and none is read twice in a pass.
- **Features.** The storage chunking of the feature axes is kept (column strips stay strips for
  the Gram and Hilbert solvers) unless one task's piece of a feature chunk would be small
  (< :data:`MIN_READ_BYTES`, e.g. spatial tiles): then each task reads whole rows.
- **How the task reads.** When the array is a plain read of a stored array (``da.from_zarr``,
  ``xr.open_zarr(...)[name].data``: dask's getter over one array-like), it is rebuilt to read each
  task's group as **one selection**, which zarr fetches chunk by chunk concurrently (what matters
  on object stores, where each chunk is a request). Otherwise (data computed by dask) neighbouring
  blocks are concatenated inside the task (a merge-only rechunk: no shuffle, no chunk split).

The geometry chosen for an array is remembered by the array's name (dask names are content
tokens), so the planner reports it (:func:`geometry_of`) without every caller passing it along.

To keep the input's own chunks as the tasks (to study a solver's graph block by block, say), set
dask's config key ``daskpca.regroup`` to False: ``with dask.config.set({"daskpca.regroup": False})``.
"""

from __future__ import annotations

import logging
import math
import os
import sys
from collections import OrderedDict
from dataclasses import dataclass, replace

import dask
import numpy as np

from ._device import device_fan_in, device_memory, meta_of

logger = logging.getLogger("daskpca")

#: Bytes of input one task of a pass reads: large enough that per-task and per-request costs
#: vanish next to the bytes (the read floor is flat from ~4 MiB to ~128 MiB per task here), small
#: enough for a task to hold its block, one float64 slab and its partial results.
TASK_READ_BYTES = 128 * 2**20
#: A task's piece of one feature chunk below this is read as whole rows instead (tiles).
MIN_READ_BYTES = 16 * 2**20
#: Tasks per worker thread a pass should have at least, so every thread has work and stragglers
#: are short: the row groups are made smaller for that (still whole chunks).
TASKS_PER_THREAD = 2
#: A task may use at most this fraction of a worker's memory limit per thread (of a device's memory
#: per thread, for device chunks): the rest is headroom for dask's own buffers and the input blocks
#: in flight.
TASK_MEMORY_FRACTION = 0.5
#: Fraction of a worker thread's memory one task's input block may take: a quarter of the task
#: budget (:data:`TASK_MEMORY_FRACTION` = ½), the rest for its float64 slab and partial results.
BLOCK_MEMORY_FRACTION = 0.125
#: Resident bytes of a worker process before any task runs (interpreter, NumPy, dask, distributed,
#: zarr, daskpca: 150–350 MiB measured across environments). Not available to tasks: on a worker
#: whose limit is a few times this, blocks sized from the limit alone got it restarted mid-pass.
WORKER_FOOTPRINT = 350 * 2**20


@dataclass(frozen=True)
class Geometry:
    """How a pass reads the input: storage chunks against tasks.

    ``storage_rows`` is the rows of one storage chunk (or shard) along the sample axis;
    ``task_rows`` the largest number of rows one task reads; ``tasks`` the row tasks of a pass;
    ``storage_chunks`` the stored chunks (or shards) of the whole array and ``read`` how a task
    reads its group: ``"selection"`` (one zarr selection per task), ``"concatenated"``
    (neighbouring dask blocks joined inside the task) or ``"as stored"`` (nothing changed).
    """

    storage_rows: int
    task_rows: int
    tasks: int
    storage_chunks: int
    read: str

    def describe(self) -> str:
        per_task = max(self.storage_chunks // max(self.tasks, 1), 1)
        how = {"selection": "one zarr selection each", "concatenated": "neighbouring blocks joined in the task",
               "as stored": "one storage chunk row each"}[self.read]
        return (f"{self.tasks} task(s) a pass of ≤ {self.task_rows} rows ({how}); storage: "
                f"{self.storage_chunks} chunk(s) of {self.storage_rows} row(s), ~{per_task} per task")


_GEOMETRIES: OrderedDict[str, Geometry] = OrderedDict()
_REMEMBERED = 256
#: A regrouped array's name → (name, chunks, meta) of the array its blocks were joined from: only
#: what rebuilds it from the regrouped array's own graph, which holds its layers (the array itself
#: would keep a user's in-memory data alive after the fit).
_UNGROUPED: OrderedDict[str, tuple] = OrderedDict()


def geometry_of(array) -> Geometry | None:
    """The :class:`Geometry` :func:`regroup` gave ``array`` (or an array derived from it by
    per-block steps that keep its row chunks), or None."""
    return _GEOMETRIES.get(getattr(array, "name", None))


def remember(array, geometry: Geometry, *, joined_from=None):
    """Record ``geometry`` for ``array`` (see :func:`geometry_of`), and how to rebuild
    ``joined_from``, the array whose blocks a merge-only rechunk joined into ``array``'s (see
    :func:`ungrouped`); returns ``array``."""
    joined = None if joined_from is None else (joined_from.name, joined_from.chunks, meta_of(joined_from, ndim=joined_from.ndim))
    for record, value in ((_GEOMETRIES, geometry), (_UNGROUPED, joined)):
        if value is None:
            record.pop(array.name, None)
            continue
        record[array.name] = value
        record.move_to_end(array.name)
        while len(record) > _REMEMBERED:
            record.popitem(last=False)
    return array


def ungrouped(array):
    """The array :func:`regroup` joined ``array``'s row blocks from (the same values in its own,
    smaller blocks: a sample of rows computes only its blocks), rebuilt from ``array``'s graph;
    else ``array`` itself."""
    import dask.array as da

    joined = _UNGROUPED.get(getattr(array, "name", None))
    if joined is None or joined[0] not in getattr(array.dask, "layers", {}):
        return array
    name, chunks, meta = joined
    return da.Array(array.dask, name, chunks, meta=meta)


def current_client():
    """The running ``distributed`` client, or None. Looked up, never imported: importing
    distributed just to ask would cost ~0.5 s on the threaded scheduler."""
    distributed = sys.modules.get("distributed")
    try:
        return distributed.default_client() if distributed is not None else None
    except ValueError:  # imported, but no client
        return None


def worker_infos(client) -> list[dict]:
    try:  # n_workers=-1: every worker, not the first few that recent versions list by default
        return list(client.scheduler_info(n_workers=-1)["workers"].values())
    except TypeError:  # distributed before the n_workers argument lists them all
        return list(client.scheduler_info()["workers"].values())


def worker_resources() -> tuple[int, float | None, str]:
    """``(threads, memory per thread or None, where from)`` of whatever will run the tasks.

    With a ``distributed`` client: all workers' threads and the smallest worker memory limit per
    thread. Otherwise this machine's cores and memory (the threaded scheduler runs one task per
    core).
    """
    client = current_client()
    if client is not None:
        workers = worker_infos(client)
        threads = sum(max(w.get("nthreads", 1), 1) for w in workers) or 1
        per_thread = [w["memory_limit"] / max(w.get("nthreads", 1), 1) for w in workers if w.get("memory_limit")]
        if per_thread:
            return threads, min(per_thread), "from the distributed workers' memory limits"
        return threads, None, "distributed workers without memory limits"
    import psutil

    cores = max(os.cpu_count() or 1, 1)
    return cores, psutil.virtual_memory().total / cores, "from this machine's memory per core"


def what_runs() -> tuple:
    """``(client, resources)``: the running ``distributed`` client (None: the threaded scheduler)
    and :func:`worker_resources` — what runs the tasks, asked once by a planner for all it prices."""
    return current_client(), worker_resources()


def device_threads() -> int:
    """Threads whose tasks share one device's memory: a GPU worker's threads (one worker a device,
    the largest of them), or this machine's cores under the threaded scheduler."""
    client = current_client()
    if client is not None:
        return max((max(w.get("nthreads", 1), 1) for w in worker_infos(client)), default=1)
    return max(worker_resources()[0], 1)


def device_task_bytes(device_memory: int) -> int:
    """Bytes one task may hold on a device of ``device_memory`` bytes: ``TASK_MEMORY_FRACTION`` of
    it shared by :func:`device_threads` (an H200 under 16 threads: 4.4 GiB)."""
    return int(TASK_MEMORY_FRACTION * device_memory / device_threads())


def device_merge_fan_in(backend, host_fan_in: int, part_bytes: int, copies: int = 2) -> int:
    """The fan-in of a merge tree over row blocks on ``backend``'s device
    (:func:`~daskpca.passes._device.on_device` of the matrix; host blocks merge ``host_fan_in``
    at a time): :func:`~daskpca.passes._device.device_fan_in` within one task's share of the
    device's memory (:func:`device_task_bytes`), the figure the planner checked the plan against."""
    memory = device_memory(backend)
    return device_fan_in(None if memory is None else device_task_bytes(memory[1]), host_fan_in, part_bytes, copies)


#: dask config key: False leaves the workers' memory allocator as their nanny set it.
ALLOCATOR_CONFIG_KEY = "daskpca.worker_allocator"
#: The mmap threshold a fit sets on its workers: glibc's own ceiling for its dynamic threshold
#: (DEFAULT_MMAP_THRESHOLD_MAX on 64-bit Linux), what a process without the nanny's setting
#: reaches by itself.
WORKER_MMAP_THRESHOLD = 32 * 2**20


def tune_worker_allocators() -> None:
    """On a ``distributed`` cluster, let the workers' glibc reuse freed blocks below 32 MiB.

    A nanny starts its worker with ``MALLOC_TRIM_THRESHOLD_`` set (memory goes back to the
    system sooner), and setting it also freezes glibc's mmap threshold at 128 KiB: every array
    of 128 KiB or more — each stored chunk a decode makes, each slab's products — is then a fresh
    mapping that the kernel faults in and zeroes page by page. A worker's read of one task's
    88 MB of the reanalysis store took 0.52–0.72 s so, against 0.19–0.40 s in the same worker with
    the threshold at glibc's own ceiling (:data:`WORKER_MMAP_THRESHOLD`, where an unset process
    ends up anyway). The trim threshold stays as the nanny set it, so freed memory still goes back
    to the system; arrays above 32 MiB are mapped and unmapped as before. Done on every worker
    where ``MALLOC_TRIM_THRESHOLD_`` is set and ``MALLOC_MMAP_THRESHOLD_`` is not (the user's own
    choice wins), on glibc only; dask's config key ``daskpca.worker_allocator: False`` skips it.
    """
    client = current_client()
    if client is None or dask.config.get(ALLOCATOR_CONFIG_KEY, True) is False:
        return
    try:
        client.run(_raise_mmap_threshold, WORKER_MMAP_THRESHOLD)
    except Exception as error:  # noqa: BLE001 — a speed-up only: never fail a fit for it
        logger.info("daskpca: the workers' mmap threshold was left as it was (%s)", error)


def _raise_mmap_threshold(nbytes: int) -> bool:
    """In a worker: glibc's M_MMAP_THRESHOLD = ``nbytes`` (see :func:`tune_worker_allocators`)."""
    if not sys.platform.startswith("linux") or "MALLOC_TRIM_THRESHOLD_" not in os.environ \
            or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt to speak of)
        return False
    return bool(mallopt(-3, int(nbytes)))  # -3: M_MMAP_THRESHOLD


def task_read_bytes() -> int:
    """Bytes of input one task reads: :data:`TASK_READ_BYTES`, less where the memory a worker
    thread's tasks may use is small (:data:`BLOCK_MEMORY_FRACTION` of it).

    On distributed workers that memory is the limit less the worker's own footprint (the larger
    of its unmanaged memory now and :data:`WORKER_FOOTPRINT`, never more than ⅞ of the limit),
    shared by its threads: a task holds its block, a float64 copy and partial results (~3.5× the
    block), and the nanny restarts a worker at 95 % of its limit.
    """
    client = current_client()
    if client is not None:
        free = []
        for worker in worker_infos(client):
            limit, metrics = worker.get("memory_limit"), worker.get("metrics", {})
            if limit:
                own = max(metrics.get("memory", 0) - metrics.get("managed_bytes", 0), WORKER_FOOTPRINT)
                free.append(max(limit - own, limit / 8) / max(worker.get("nthreads", 1), 1))
        per_thread = min(free) if free else None
    else:
        _, per_thread, _ = worker_resources()
    if per_thread is None:
        return TASK_READ_BYTES
    return max(min(TASK_READ_BYTES, int(BLOCK_MEMORY_FRACTION * per_thread)), 1)


def group_chunks(chunks: tuple[int, ...], target: int, align: int = 1) -> tuple[int, ...]:
    """Consecutive ``chunks`` summed into groups of at most ``target`` (a group holds at least one
    chunk, so a chunk larger than ``target`` is a group of its own), closing a group only where
    its end is a multiple of ``align`` rows (whole shards) — or at the end.

    >>> group_chunks((1,) * 10, 4)
    (4, 4, 2)
    >>> group_chunks((3, 3, 3, 3), 5, align=6)
    (6, 6)
    """
    groups, current, done = [], 0, 0
    for size in chunks:
        if current and current + size > target and (done + current) % align == 0:
            groups.append(current)
            done, current = done + current, 0
        current += size
    if current:
        groups.append(current)
    return tuple(groups)


def plain_source(array):
    """The stored array-like that ``array`` reads chunk by chunk, or None.

    True when ``array``'s graph is exactly what ``dask.array.from_array`` (which ``from_zarr`` and
    xarray's lazy backends use) builds: one layer holding the source object and one getter layer
    over it. Then re-reading the source with other chunks gives the same values.
    """
    graph = getattr(array, "dask", None)
    layers = getattr(graph, "layers", None)
    if not layers or len(layers) != 2 or array.name not in layers:
        return None
    (source_name,) = [name for name in layers if name != array.name]
    holder = dict(layers[source_name])
    if len(holder) != 1:
        return None
    source = holder.get(source_name)
    source = getattr(source, "value", source)  # a DataNode in dask's task spec
    task = getattr(layers[array.name], "task", None)
    if getattr(getattr(task, "func", None), "__name__", "") not in ("getter", "getter_nofancy", "getter_inline"):
        return None
    if tuple(getattr(source, "shape", ())) != tuple(array.shape) or not hasattr(source, "__getitem__"):
        return None
    return source


def storage_chunk_shape(array, source=None, encoding=None) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """``(chunk shape, shard shape or None)`` of where ``array``'s bytes are stored: a zarr array's
    own metadata, an xarray variable's ``encoding``, else the dask chunks' largest sizes."""
    encoding = encoding or {}
    chunks = getattr(source, "chunks", None) if source is not None and hasattr(source, "read_only") else None
    shards = getattr(source, "shards", None) if chunks is not None else None
    if chunks is None and encoding.get("chunks"):
        chunks, shards = encoding["chunks"], encoding.get("shards")
    if chunks is None or len(chunks) != array.ndim:
        chunks, shards = tuple(max(c) for c in array.chunks), None
    return tuple(int(c) for c in chunks), (tuple(int(s) for s in shards) if shards else None)


def regroup(array, row_axis: int = 0, whole_axes: tuple[int, ...] = (), *, encoding=None):
    """``array`` chunked for passes: rows grouped into tasks of about :func:`task_read_bytes`.

    Parameters
    ----------
    array : dask.array.Array
        Any dimensionality; ``row_axis`` indexes samples (its chunks are grouped).
    row_axis : int
        The axis whose consecutive chunks are grouped into one task.
    whole_axes : tuple of int
        Axes that must be one chunk for the rows to be formed chunk for chunk (other sample axes
        of a labeled field); they are read whole.
    encoding : dict, optional
        An xarray variable's ``encoding`` (storage ``chunks`` and ``shards``), when ``array``
        reads a stored variable.

    Returns
    -------
    dask.array.Array
        The same values; row chunks made of whole storage chunks (and shards). Remembered with its
        :class:`Geometry` (:func:`geometry_of`). Reads nothing.
    """
    import dask
    import dask.array as da
    from dask.base import tokenize

    source = plain_source(array)
    storage, shards = storage_chunk_shape(array, source, encoding)
    stored = shards or storage
    threads = worker_resources()[0]
    storage_count = math.prod(math.ceil(s / c) for s, c in zip(array.shape, stored))
    geometry = Geometry(storage_rows=stored[row_axis], task_rows=max(array.chunks[row_axis]),
                        tasks=len(array.chunks[row_axis]), storage_chunks=storage_count, read="as stored")
    if len(array.chunks[row_axis]) <= TASKS_PER_THREAD * threads or not dask.config.get("daskpca.regroup", True):
        return remember(array, geometry)  # few tasks already: their overhead is nothing next to the bytes
    itemsize = array.dtype.itemsize
    row_bytes = itemsize * math.prod(s for i, s in enumerate(array.shape) if i != row_axis)
    target_rows = max(1, task_read_bytes() // max(row_bytes, 1))
    # Enough tasks for every thread, whatever the target says (still whole chunks).
    target_rows = min(target_rows, math.ceil(array.shape[row_axis] / (TASKS_PER_THREAD * threads)))
    # Group boundaries on whole shards (a shard is one object: read whole, by one task) when the
    # blocks line up with them.
    align = stored[row_axis] if all(c % stored[row_axis] == 0 for c in array.chunks[row_axis][:-1]) else 1
    rows = group_chunks(array.chunks[row_axis], target_rows, align=align)
    chunks = list(array.chunks)
    chunks[row_axis] = rows
    for axis in whole_axes:
        chunks[axis] = (array.shape[axis],)
    # Feature chunks: kept (strips stay strips) unless a task's piece of one is small.
    piece = max(rows) * itemsize * math.prod(
        max(c) for i, c in enumerate(chunks) if i != row_axis and i not in whole_axes)
    if piece < MIN_READ_BYTES:
        chunks = [c if i == row_axis else (array.shape[i],) for i, c in enumerate(chunks)]
    chunks = tuple(tuple(c) for c in chunks)
    geometry = replace(geometry, task_rows=max(rows), tasks=len(rows))
    if chunks == array.chunks:
        return remember(array, geometry)
    if source is not None:
        from ._decode import fast_source

        regrouped = da.from_array(fast_source(source), chunks=chunks, lock=False, asarray=True, meta=np.empty((0,) * array.ndim, array.dtype),
                                  name=f"read-{tokenize(array.name, chunks)}")
        return remember(regrouped, replace(geometry, read="selection"))
    return remember(array.rechunk(chunks), replace(geometry, read="concatenated"), joined_from=array)




#: Bytes of one column strip a re-laid-out copy is cut into (all rows of a range of columns).
STRIP_BYTES = 128 * 2**20


#: A field stored by rows only is re-laid out into strips when one strip (then the whole field)
#: would hold more input than this: below it, one task reading everything costs less than a copy.
RELAYOUT_BYTES = 4 * STRIP_BYTES


def needs_column_strips(chunks: tuple, itemsize: int) -> bool:
    """Whether the column strips of an array with these chunks must be made by a copy: stored by
    rows only (more than one row block, one column block), so a strip would be the whole array,
    and that is more than :data:`RELAYOUT_BYTES`."""
    n, d = sum(chunks[0]), sum(chunks[1])
    return len(chunks[1]) == 1 and len(chunks[0]) > 1 and d > 1 and n * d * itemsize > RELAYOUT_BYTES


def strip_columns(n_rows: int, n_features: int, itemsize: int) -> int:
    """Columns of one strip of a re-laid-out copy: ~STRIP_BYTES of input bytes."""
    return int(min(n_features, max(1, STRIP_BYTES // max(n_rows * itemsize, 1))))


def relaid_out(cost_of, shape):
    """The cost of a road that reads column strips (a declaration's ``reads_strips``): its cost
    model ``cost_of(PlanInput) -> Cost`` on ``shape`` as stored, or — stored by rows only
    (:func:`needs_column_strips`) — on the strips of the copy :class:`ColumnStrips` makes, with
    that step added: one read of the input (``passes``), the road's own passes over the copy
    (``copy_passes``, at the copy's rates), its tasks and task memory those of the strips, not of
    one strip holding the whole field. The one planning of the step, for every road that takes it."""
    if not needs_column_strips(shape.chunks, shape.itemsize):
        return cost_of(shape)
    n, d = shape.n, shape.d
    width = strip_columns(n, d, shape.itemsize)
    strips = (width,) * (d // width) + ((d % width,) if d % width else ())
    cost = cost_of(replace(shape, chunks=((n,), strips)))
    note = (f"stored by rows only: re-laid out into {len(strips)} column strips of {width} columns first "
            f"(one read and one write of a temporary copy, then {cost.passes} passes over it)")
    return cost._replace(passes=1, copy_passes=cost.passes, note=note + (f"; {cost.note}" if cost.note else ""))


def on_column_strips(solve, X, *args, **kwargs):
    """``solve(X, *args, **kwargs)`` (a solver that reads column strips) on ``X`` as stored, or on
    its strip copy (:class:`ColumnStrips`) when ``X`` is stored by rows only: the result then
    counts the one read of ``X`` (``n_passes``) and says what was done (``info["relayout"]``, the
    passes over the copy ``info["copy_passes"]``)."""
    with ColumnStrips(X) as strips:
        result = solve(strips.array, *args, **kwargs)
    if strips.how is None:
        return result
    return replace(result, n_passes=1, info={**result.info, "relayout": strips.how, "copy_passes": result.n_passes})


class ColumnStrips:
    """``X`` re-laid out in column strips for the solvers that read strips (Gram), when it is
    stored by rows only (one time step per chunk): a strip would otherwise be the whole field.

    On the threaded scheduler the copy is a temporary uncompressed zarr store of tiles (one
    task's row block × one strip): each row-block task writes its tiles whole (one read of the
    input, one write, no chunk rewritten; raw chunk files as :func:`._copies._write_block` writes
    them, each tile's size and fingerprint recorded), and each strip task then maps its column of
    tiles, checked against those records (:func:`._copies._read_block`: a tile removed or changed
    meanwhile is a :class:`~daskpca.exceptions.ScratchDamagedError`, never the fill value). The
    folder is made under ``$DASKPCA_SCRATCH`` (or the system's temporary directory) by
    :func:`daskpca.store.scratch.scratch_folder` — refused inside the input — and removed when the
    context ends, whatever ended it (SIGTERM included); one left by a killed job is removed by the
    next. With a ``distributed`` client, dask's p2p rechunk does the same through the workers'
    disks (no folder every worker must share).

    Use as a context manager; ``array`` is the strip-chunked copy (or ``X`` itself when it needs
    none). Costs one read of ``X`` and one write, made when the context is entered.
    """

    def __init__(self, X):
        self.X, self.array, self.folder, self.how = X, X, None, None

    def __enter__(self):
        X = self.X
        if not needs_column_strips(X.chunks, X.dtype.itemsize):
            return self
        width = strip_columns(X.shape[0], X.shape[1], X.dtype.itemsize)
        if current_client() is not None:
            self.array = X.rechunk({0: -1, 1: width}, method="p2p").persist()
            self.how = f"p2p rechunk into strips of {width} columns"
            return self
        from contextlib import ExitStack

        from ..store.scratch import scratch_error, scratch_folder
        from ._decode import stored_paths
        from ._device import on_device

        device = on_device(X)
        self._scratch = ExitStack()
        # Removed on exit, SIGTERM too; refused where $DASKPCA_SCRATCH lies inside the input.
        self.folder = self._scratch.enter_context(scratch_folder("strips", inputs=stored_paths([X])))
        try:
            tiles = X.rechunk({1: width})  # splits each row block: no shuffle, no merge
            rows = X.chunks[0]
            if len(set(rows[:-1])) > 1 or rows[-1] > rows[0]:  # ragged row blocks: tiles of the largest, regular
                tiles = tiles.rechunk({0: max(rows)})
            self.array = self._copy(tiles, width)
            if not device.on_host:  # device blocks: the copy is written from the host, read back to the device
                self.array = self.array.map_blocks(device.asarray, dtype=X.dtype, meta=device.meta(X.dtype))
            self.how = f"a temporary copy in strips of {width} columns"
        except OSError as error:
            self._scratch.close()
            raise scratch_error(error, self.folder) from None
        except BaseException:
            self._scratch.close()
            raise
        return self

    def _copy(self, tiles, width: int):
        """Write ``tiles`` into the copy (one compute); the strip-chunked array that reads it."""
        import dask.array as da
        import zarr
        from dask._task_spec import Task
        from dask.base import tokenize

        X = self.X
        # Uncompressed: the copy is read twice right away and then deleted, so a codec would
        # only add its encode and two decodes (measured at 3000 × 65 160 float32: a strip read
        # of the zstd copy took 3× the floor read of the source; raw, the local disk or page
        # cache delivers it several times faster than zstd decodes).
        dtype = X.dtype.newbyteorder("<")
        chunk = (max(tiles.chunks[0]), width)
        target = zarr.create_array(store=str(self.folder / "strips.zarr"), shape=X.shape, dtype=dtype,
                                   chunks=chunk, compressors=None, fill_value=0)
        codecs = target.metadata.codecs
        if len(codecs) != 1 or type(codecs[0]).__name__ != "BytesCodec":
            raise TypeError(f"the strip copy's zarr array is not raw bytes ({codecs!r})")  # a bug, not a user error
        files = [[str(self.folder / "strips.zarr" / target.metadata.encode_chunk_key((i, j)))
                  for j in range(len(tiles.chunks[1]))] for i in range(len(tiles.chunks[0]))]
        written = tiles.map_blocks(_write_tile, files, dtype, chunk, dtype=object, chunks=(1, 1),
                                   meta=np.empty((0, 0), dtype=object)).compute()
        name = f"strips-{tokenize(X.name, str(self.folder), width)}"
        graph = {(name, 0, j): Task((name, 0, j), _read_strip, [row[j] for row in files], dtype, chunk,
                                    [(rows, columns) for rows in tiles.chunks[0]],
                                    [tuple(written[i, j]) for i in range(len(tiles.chunks[0]))])
                 for j, columns in enumerate(tiles.chunks[1])}
        return da.Array(graph, name, ((X.shape[0],), tiles.chunks[1]), meta=np.empty((0, 0), dtype=X.dtype))

    def __exit__(self, *exc):
        if self.folder is not None:
            self._scratch.close()
        return False


def _write_tile(block, files, dtype, chunk: tuple, block_id=None):
    """A strip copy's write task: tile ``block_id`` into its chunk file; ``(bytes, fingerprint)``
    in a 1 × 1 object block."""
    from ._copies import _write_block

    out = np.empty((1, 1), dtype=object)
    out[0, 0] = _write_block(block, files[block_id[0]][block_id[1]], dtype, chunk)
    return out


def _read_strip(files, dtype, chunk: tuple, shapes, written):
    """One column strip of the copy: its tiles mapped, checked against what their writers
    recorded (:func:`._copies._read_block`), and stacked — (n_samples, strip width)."""
    from ._copies import _read_block

    return np.concatenate([_read_block(file, dtype, chunk, shape, record)
                           for file, shape, record in zip(files, shapes, written)], axis=0)
