"""Building blocks for the solvers' task graphs: per-block tasks and tree reductions.

A reduction here is data (as in flox): a per-block function that returns a small summary, and a
combine function that merges a list of summaries. :func:`tree_reduce` arranges the combine steps
in a tree of fan-in ``split_every`` so that no single task receives every partial result and the
depth grows like log(n_blocks). Task names carry the solver's name so the Dask dashboard's task
stream says what is running.
"""

from __future__ import annotations

from functools import partial
from itertools import accumulate
from typing import Callable
from weakref import WeakValueDictionary

import dask
import numpy as np
from dask._task_spec import List, Task, TaskRef
from dask.base import get_scheduler, tokenize
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph
from dask.sizeof import sizeof

from ._device import to_host

#: Fan-in of the merge tree. 8 partial d×d results per combine task keeps each task's memory at
#: 9·d² float64 while the tree stays shallow (depth 3 for 512 blocks).
SPLIT_EVERY = 8


def merge_task_bytes(n_features: int, columns: int) -> int:
    """Peak bytes of one merge task of the tree (the planner's cost models): ``SPLIT_EVERY``
    float64 d×columns nodes in, their stack, one out."""
    return (2 * SPLIT_EVERY + 1) * n_features * columns * 8


class SizedByArrays:
    """Mixin for the partial results of a reduction: their size is their arrays' size.

    ``sys.getsizeof`` of a dataclass is ~56 bytes whatever it holds, and ``dask.sizeof`` falls
    back to it, so without this distributed's memory accounting, spilling and transfer-cost
    estimates would see a 2 GB scatter matrix as 56 bytes.
    """

    def __sizeof__(self) -> int:
        return object.__sizeof__(self) + sum(sizeof(value) for value in vars(self).values())


#: Operands at least this large go to the workers ahead of the graph on a distributed cluster
#: (see :func:`shared`); smaller ones (ℓ×ℓ matrices, a few options) ride in the graph, which is
#: cheaper than a round trip.
SCATTER_BYTES = 64 * 2**10


def distributed_client():
    """The ``distributed.Client`` that the next ``dask.compute`` will run on, or None.

    None on the threaded, synchronous and process schedulers, including when a client exists but
    ``dask.config.set(scheduler="threads")`` chose another scheduler for this block.
    """
    client = getattr(unwrap_scheduler(get_scheduler()), "__self__", None)
    if client is None:
        return None
    from distributed import Client  # only reached when a distributed scheduler is active

    return client if isinstance(client, Client) else None


def unwrap_scheduler(scheduler):
    """The scheduler that runs the tasks behind ``scheduler``: a wrapper that rewrites graphs
    before handing them on (the pass cache, :mod:`daskpca.passes._cache`) names it ``__wrapped__``."""
    while hasattr(scheduler, "__wrapped__"):
        scheduler = scheduler.__wrapped__
    return scheduler


def share(a, client=None):
    """One graph key holding ``a`` (an ndarray, or an object sized by its arrays such as the
    feature stage), for every task that uses it.

    On the threaded scheduler the array is the key's value, in the graph (``dask.delayed``). With
    a distributed client, an array of ``SCATTER_BYTES`` or more is scattered to every worker
    first (``broadcast=True``: one copy leaves the client, the workers replicate it among
    themselves) and the graph holds only its future: the graph sent to the scheduler stays a few
    KB whatever the array's size, and no worker fetches it per task. The future lives as long as
    the graph that refers to it; once the pass's result is back, the workers drop it. While it
    lives, sharing an equal array again returns the same future (one copy per pass, though its
    row-block tasks and merge tree ask separately). Once dropped, the array is scattered under a
    new name (``hash=False``): a content-named copy that the previous pass's graph is releasing
    at that moment would be forgotten by the scheduler under the new pass ("lost
    dependencies"). (The feature stage's factor lives in the lazy input the solver holds: sent
    once per fit.)

    Parameters
    ----------
    a : ndarray or object
        Its size is ``a.nbytes`` or ``dask.sizeof(a)`` (see :class:`SizedByArrays`).
    client : distributed.Client, optional
        Default: :func:`distributed_client`.
    """
    client = client if client is not None else distributed_client()
    if client is None or (a.nbytes if isinstance(a, np.ndarray) else sizeof(a)) < SCATTER_BYTES:
        return dask.delayed(a, pure=True)
    name = tokenize(a, client.id)
    future = _on_workers.get(name)
    if future is None:
        future = client.scatter(a, broadcast=True, hash=False)
        _on_workers[name] = future
    return future


#: Scattered operands by content, while a graph being built or computed still holds their future:
#: a pass's row-block tasks and its merge tree that both need Ω get the same copy.
_on_workers: WeakValueDictionary = WeakValueDictionary()


def shared(args: tuple) -> tuple:
    """The arguments with every ndarray made one shared key (:func:`share`).

    An array passed as a plain argument is copied into every task that uses it, and distributed
    serialises each task on its own: Ω (d×ℓ) in 2000 row-block tasks would travel 2000 times per
    pass. As a key it travels to each worker once; on a cluster it leaves the graph too.
    """
    client = distributed_client() if any(isinstance(a, np.ndarray) for a in args) else None
    return tuple(share(a, client) if isinstance(a, np.ndarray) else a for a in args)


def block_offsets(chunks: tuple[int, ...]) -> list[int]:
    """Start index of every block along one axis."""
    return [0, *accumulate(chunks)][:-1]


def map_row_blocks(X, func: Callable, name: str, *args) -> list:
    """One delayed ``func(block, row_offset, *args)`` per row block of ``X``.

    ``X`` is first given a single column block (``X.rechunk({1: -1})``): dask concatenates the
    column pieces of each row block inside one task, so every stored chunk is still read exactly
    once and column chunking costs no extra pass.
    """
    return _map_blocks(X.rechunk({1: -1}), 0, func, name, args)


def map_column_blocks(X, func: Callable, name: str, *args) -> list:
    """One delayed ``func(strip, col_offset, *args)`` per column strip (all rows) of ``X``."""
    return _map_blocks(X.rechunk({0: -1}), 1, func, name, args)


def _map_blocks(X, axis: int, func: Callable, name: str, args: tuple) -> list:
    """``func(block, offset along axis, *args)`` per block of ``X`` (one block along the other
    axis), its array arguments shared (:func:`shared`), under keys ``(name-token, i)``: one graph
    layer (as :func:`tree_reduce`'s; through ``dask.delayed``, 0.14 s for 512 blocks, now about
    half that, most of it ``X.to_delayed()``)."""
    blocks = X.to_delayed().ravel()
    token = tokenize(X, func, args)
    args = shared(args)
    references = _references(args)
    layer_name = f"{name}-{token}"
    layer = {}
    for i, (block, offset) in enumerate(zip(blocks, block_offsets(X.chunks[axis]))):
        key = (layer_name, i)
        layer[key] = Task(key, func, TaskRef(block.key), offset, *references)
    graph = HighLevelGraph.from_collections(layer_name, layer, [*blocks, *_delayed(args)])
    return [Delayed(key, graph, layer=layer_name) for key in layer]


def _references(args: tuple) -> tuple:
    """``args`` as a task's arguments: a shared array's key (a Delayed's) named by reference; a
    future (distributed) is itself one; anything else as it is."""
    return tuple(TaskRef(arg.key) if isinstance(arg, Delayed) else arg for arg in args)


def _delayed(args: tuple) -> list:
    """The shared arrays among ``args`` whose graphs a layer that names them depends on."""
    return [arg for arg in args if isinstance(arg, Delayed)]


def tree_reduce(parts: list, combine: Callable, name: str, *args, split_every: int = SPLIT_EVERY,
                finish: Callable | None = None):
    """Reduce delayed partial results with ``combine(list_of_parts, *args)`` in a tree.

    Array ``args`` (e.g. the test matrix a merge needs) become one shared key (see :func:`shared`).
    ``finish(result)``, when given, runs in the root task on the combined result while it is
    still where the merges left it (a device's memory): what it returns moves to the host (a
    solver's final eigenproblem, solved on the device, hands back k pairs instead of a d×d matrix).

    The tree is one graph layer written out here, its tasks referring to the parts' keys: built
    through ``dask.delayed``, each merge task cost ~2.5 ms (an expression made, simplified and
    culled per call), 40 ms for the 15 pairwise merges of 16 strips — more than the device's
    work in a 2000 × 200 000 Gram fit on an H200.
    """
    if not parts:
        raise ValueError("tree_reduce needs at least one part")  # a bug, not a user error
    token = tokenize(parts, combine, args) if finish is None else tokenize(parts, combine, args, finish)
    # The root's combine hands its result back in host memory: partials of device blocks are
    # merged on the device, and only the reduced result moves, once (a no-op for NumPy).
    root = partial(_combined_on_host, combine) if finish is None else partial(_combined_on_host, combine, finish=finish)
    args = shared(args)
    references = _references(args)
    layer, keys, level = {}, [part.key for part in parts], 0
    while True:
        # A single part still goes through the root's combine so the result has the finalised form.
        step = root if len(keys) <= split_every else combine
        merged = []
        for i in range(0, len(keys), split_every):
            key = (f"{name}-{token}-{level}", i)
            layer[key] = Task(key, step, List(*(TaskRef(k) for k in keys[i : i + split_every])), *references)
            merged.append(key)
        keys, level = merged, level + 1
        if step is root:
            break
    layer_name = f"{name}-{token}"
    return Delayed(keys[0], HighLevelGraph.from_collections(layer_name, layer, [*parts, *_delayed(args)]), layer=layer_name)


def _combined_on_host(combine: Callable, parts: list, *args, finish: Callable | None = None):
    """The root of a reduction: ``combine(parts, *args)`` (then ``finish`` of it) with its arrays
    in host memory."""
    result = combine(parts, *args)
    return to_host(result if finish is None else finish(result))
