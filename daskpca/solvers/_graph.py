"""Building blocks for the solvers' task graphs: per-block tasks and tree reductions.

A reduction here is data (as in flox): a per-block function that returns a small summary, and a
combine function that merges a list of summaries. :func:`tree_reduce` arranges the combine steps
in a tree of fan-in ``split_every`` so that no single task receives every partial result and the
depth grows like log(n_blocks). Task names carry the solver's name so the Dask dashboard's task
stream says what is running.
"""

from __future__ import annotations

from itertools import accumulate
from typing import Callable

import dask
import numpy as np
from dask.base import tokenize
from dask.sizeof import sizeof

#: Fan-in of the merge tree. 8 partial d×d results per combine task keeps each task's memory at
#: 9·d² float64 while the tree stays shallow (depth 3 for 512 blocks).
SPLIT_EVERY = 8


class SizedByArrays:
    """Mixin for the partial results of a reduction: their size is their arrays' size.

    ``sys.getsizeof`` of a dataclass is ~56 bytes whatever it holds, and ``dask.sizeof`` falls
    back to it, so without this distributed's memory accounting, spilling and transfer-cost
    estimates would see a 2 GB scatter matrix as 56 bytes.
    """

    def __sizeof__(self) -> int:
        return object.__sizeof__(self) + sum(sizeof(value) for value in vars(self).values())


def shared(args: tuple) -> tuple:
    """The arguments with every ndarray made one graph key (``dask.delayed``), to be shared.

    An array passed as a plain argument is copied into every task that uses it, and distributed
    serialises each task on its own: Ω (d×ℓ) in 2000 row-block tasks would travel 2000 times per
    pass. As a key it travels to each worker once.
    """
    return tuple(dask.delayed(a, pure=True) if isinstance(a, np.ndarray) else a for a in args)


def block_offsets(chunks: tuple[int, ...]) -> list[int]:
    """Start index of every block along one axis."""
    return [0, *accumulate(chunks)][:-1]


def map_row_blocks(X, func: Callable, name: str, *args) -> list:
    """One delayed ``func(block, row_offset, *args)`` per row block of ``X``.

    ``X`` is first given a single column block (``X.rechunk({1: -1})``): dask concatenates the
    column pieces of each row block inside one task, so every stored chunk is still read exactly
    once and column chunking costs no extra pass.
    """
    X = X.rechunk({1: -1})
    blocks = X.to_delayed().ravel()
    token = tokenize(X, func, args)
    call = dask.delayed(func, pure=True)
    args = shared(args)
    return [
        call(block, offset, *args, dask_key_name=(f"{name}-{token}", i))
        for i, (block, offset) in enumerate(zip(blocks, block_offsets(X.chunks[0])))
    ]


def map_column_blocks(X, func: Callable, name: str, *args) -> list:
    """One delayed ``func(strip, col_offset, *args)`` per column strip (all rows) of ``X``."""
    X = X.rechunk({0: -1})
    blocks = X.to_delayed().ravel()
    token = tokenize(X, func, args)
    call = dask.delayed(func, pure=True)
    args = shared(args)
    return [
        call(block, offset, *args, dask_key_name=(f"{name}-{token}", j))
        for j, (block, offset) in enumerate(zip(blocks, block_offsets(X.chunks[1])))
    ]


def tree_reduce(parts: list, combine: Callable, name: str, *args, split_every: int = SPLIT_EVERY):
    """Reduce delayed partial results with ``combine(list_of_parts, *args)`` in a tree.

    Array ``args`` (e.g. the test matrix a merge needs) become one shared key (see :func:`shared`).
    """
    if not parts:
        raise ValueError("tree_reduce needs at least one part")  # a bug, not a user error
    token = tokenize(parts, combine, args)
    call = dask.delayed(combine, pure=True)
    args = shared(args)
    level = 0
    while len(parts) > 1:
        parts = [
            call(parts[i : i + split_every], *args, dask_key_name=(f"{name}-{token}-{level}", i))
            for i in range(0, len(parts), split_every)
        ]
        level += 1
    if level == 0:
        # A single block still goes through combine so the result has the finalised form.
        parts = [call(parts, *args, dask_key_name=(f"{name}-{token}-0", 0))]
    return parts[0]
