"""Recording real fits: the scheduler that records each step's graph and the bytes of its nodes.

Part of :mod:`benchmarks.traffic`. :class:`Recorder` runs every ``dask.compute`` /
``dask.persist`` call of a real ``daskpca.PCA(...).fit`` on the synchronous scheduler and keeps
one :class:`Step` per call: its tasks (:class:`TaskRecord`: dependencies, pickled result and
spec sizes, the arrays inside them), the data keys the client put in the graph and the keys it
returns. :func:`record_solver` does that for one solver on the small zarr proxies of
:data:`PROXIES`.
"""

from __future__ import annotations

import pickle
import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import cloudpickle
import dask
import dask.array as da
import numpy as np
from dask._task_spec import DataNode, convert_legacy_graph
from dask.callbacks import Callback
from dask.core import flatten
from dask.sizeof import sizeof
from dask.utils import key_split

import daskpca

SOLVERS = ("covariance", "gram", "tsqr", "randomized", "als", "ppca")
#: Solvers with passes that repeat per (power, ALS or EM) iteration.
ITERATIVE = ("randomized", "als", "ppca")


class _ArrayCollector(cloudpickle.CloudPickler):
    """Pickles an object, noting every NumPy array it contains.

    Pickling is what ``distributed`` does to a task's result or spec before sending it
    (cloudpickle for what plain pickle cannot handle, such as a local function), so the byte
    count is the wire size; the arrays found on the way give its shape-by-shape make-up.
    """

    def __init__(self, sink):
        super().__init__(sink, protocol=pickle.HIGHEST_PROTOCOL)
        self.arrays: list[tuple[tuple[int, ...], int]] = []

    def reducer_override(self, obj):
        if isinstance(obj, np.ndarray):
            self.arrays.append((obj.shape, obj.dtype.itemsize))
        return super().reducer_override(obj)


class _Counter:
    """A write-only file that only counts bytes (pickling a 100 MB result allocates nothing)."""

    def __init__(self):
        self.n = 0

    def write(self, data):
        self.n += len(data)


def wire_size(obj) -> tuple[int, tuple]:
    """Pickled size of ``obj`` and the (shape, itemsize) of every NumPy array inside it."""
    sink = _Counter()
    pickler = _ArrayCollector(sink)
    pickler.dump(obj)
    return sink.n, tuple(pickler.arrays)


@dataclass
class TaskRecord:
    """One task of a recorded graph.

    Attributes
    ----------
    key : the dask key
    kind : str
        ``dask.utils.key_split`` of the key (``"covariance-merge"``, ``"from-zarr"``, ...).
    deps : tuple
        Keys this task reads.
    out_bytes : int
        Pickled size of its result (what crosses the network when another worker needs it).
    out_arrays : tuple
        (shape, itemsize) of every array in the result.
    sizeof_bytes : int
        What ``dask.sizeof.sizeof`` says the result weighs: the figure ``distributed`` uses to
        place tasks and account for worker memory.
    spec_bytes, spec_arrays :
        The same for the pickled task itself (function, literal arguments such as Ω).
    """

    key: object
    kind: str
    deps: tuple
    out_bytes: int
    out_arrays: tuple
    sizeof_bytes: int
    spec_bytes: int
    spec_arrays: tuple


@dataclass
class Step:
    """One ``compute`` or ``persist`` call: its tasks, the data the client put in the graph,
    the results of earlier ``persist`` calls it uses (``resident``) and the keys it returns."""

    call: str
    tasks: dict
    client_data: dict
    resident: dict
    outputs: tuple
    order: list | None = None  # the keys by depth, when already known (see simulate)
    client_arrays: dict = field(default_factory=dict)  # key → (shape, itemsize) of its arrays

    def placement_order(self) -> list:
        """Keys by depth (longest path from a root), then name and index: dependencies first."""
        if self.order is None:
            depth = _depths(self)
            self.order = sorted(self.tasks, key=lambda k: (depth[k], *sort_key(k)))
        return self.order

    def roots(self) -> list:
        """Tasks that depend on client data only: the reads of the input blocks."""
        return [t for t in self.tasks.values() if all(dep in self.client_data for dep in t.deps)]

    def args(self) -> set:
        """Data keys that tasks other than the reads depend on: arrays shared by a pass's tasks."""
        roots = {t.key for t in self.roots()}
        return {dep for t in self.tasks.values() if t.key not in roots for dep in t.deps if dep in self.client_data}

    @property
    def reads_input(self) -> bool:
        return bool(self.roots())

    def signature(self) -> str:
        """The task kinds of the step, to tell apart passes that do different things."""
        return "+".join(sorted({t.kind for t in self.tasks.values()}))


class Recorder:
    """A dask scheduler (``dask.config.set(scheduler=recorder)``) that records and runs graphs.

    Each call runs the graph with ``dask.local.get_sync`` and appends a :class:`Step`. A
    ``persist`` call is told from a ``compute`` by the calling function's name, because
    ``distributed`` keeps persisted results on the workers while ``compute`` gathers them to
    the client.
    """

    def __init__(self):
        self.steps: list[Step] = []
        self._produced: dict = {}

    def __call__(self, dsk, keys, **kwargs):
        call = "persist" if sys._getframe(1).f_code.co_name == "persist" else "compute"
        graph = convert_legacy_graph(dsk if isinstance(dsk, Mapping) else dsk.__dask_graph__())
        results = {}

        def posttask(key, result, dsk, state, worker_id):
            results[key] = result

        with Callback(posttask=posttask):
            out = dask.local.get_sync(graph, keys, **kwargs)
        tasks, client_data, client_arrays, resident = {}, {}, {}, {}
        for key, node in graph.items():
            if isinstance(node, DataNode):
                if key in self._produced:  # a persisted result of an earlier step
                    resident[key] = self._produced[key]
                else:
                    client_data[key], client_arrays[key] = wire_size(node.value)
                continue
            out_bytes, out_arrays = wire_size(results[key])
            spec_bytes, spec_arrays = wire_size(node)
            tasks[key] = TaskRecord(key, key_split(key), tuple(node.dependencies), out_bytes, out_arrays,
                                    sizeof(results[key]), spec_bytes, spec_arrays)
        self._produced.update(tasks)
        self.steps.append(Step(call, tasks, client_data, resident, tuple(flatten([keys])), None, client_arrays))
        return out


@dataclass
class Recording:
    """The steps of one real fit, with the proxy's sizes (the symbols of the node formulas)."""

    solver: str
    symbols: dict
    steps: list
    n_passes: int


def record_fit(X, solver: str, n_components: int, symbols: dict, **options) -> Recording:
    """Fit ``daskpca.PCA(n_components, solver=solver, **options)`` on ``X`` under a :class:`Recorder`."""
    recorder = Recorder()
    with warnings.catch_warnings(), dask.config.set(scheduler=recorder):
        warnings.simplefilter("ignore")  # iteration caps make ALS/PPCA warn; not the point here
        # The graphs are studied block by block: keep the input's chunks as the tasks.
        with dask.config.set({"daskpca.regroup": False}):
            pca = daskpca.PCA(n_components, solver=solver, random_state=0, **options).fit(X)
    return Recording(solver, symbols, recorder.steps, pca.n_passes_)


def _depths(step: Step) -> dict:
    depth = {}

    def visit(key):
        if key not in depth:
            task = step.tasks[key]
            depth[key] = 1 + max((visit(dep) for dep in task.deps if dep in step.tasks), default=-1)
        return depth[key]

    for key in step.tasks:
        visit(key)
    return depth


def sort_key(key):
    return (key[0], key[1:]) if isinstance(key, tuple) else (key, ())


#: Proxy sizes: every symbol a distinct value so array dimensions name themselves. ``fit`` is
#: where the formulas come from, ``check`` (other sizes, other block counts) tests them.
PROXIES = {
    "fit": dict(n_i=43, blocks=24, d=29, k=3, p=5, n_gram=19, d_j=31),
    "check": dict(n_i=61, blocks=40, d=37, k=4, p=7, n_gram=23, d_j=41),
}


def proxy_array(folder: Path, n_rows: int, n_cols: int, chunks: tuple[int, int], missing: float = 0.0):
    """A float32 zarr array on disk (random normal, a ``missing`` fraction NaN) and its dask view."""
    import zarr

    path = folder / f"x-{n_rows}x{n_cols}-{chunks[0]}x{chunks[1]}-{missing}.zarr"
    if not path.exists():
        rng = np.random.default_rng(0)
        values = rng.standard_normal((n_rows, n_cols)).astype(np.float32)
        values[rng.random(values.shape) < missing] = np.nan
        z = zarr.create_array(store=str(path), shape=(n_rows, n_cols), chunks=chunks, dtype="float32")
        z[:] = values
    return da.from_zarr(str(path))


def record_solver(solver: str, folder: Path, proxy: dict, iterations: int = 1) -> Recording:
    """Record a real fit of ``solver`` on the proxy (``iterations``: power iterations or EM/ALS
    iterations, capped so iterative solvers make a known number of passes).

    Row blocks have more rows than the proxy has columns, so TSQR's R factors are d×d: its
    formulas hold for blocks of at least d rows (with fewer, its leaves are n_i×d and the
    merges grow to d×d after a few levels).
    """
    k, p = proxy["k"], proxy["p"]
    if solver == "gram":  # n ≪ d, stored in column strips (how the solver reads)
        n, d_j = proxy["n_gram"], proxy["d_j"]
        X = proxy_array(folder, n, d_j * proxy["blocks"], (n, d_j))
        symbols = dict(n=n, d=d_j * proxy["blocks"], d_j=d_j, k=k)
    else:
        n_i, d = proxy["n_i"], proxy["d"]
        # PPCA is the solver for missing values: its EM statistics grow to d·k² when a block has
        # any, so its proxy has some (5 %).
        X = proxy_array(folder, n_i * proxy["blocks"], d, (n_i, d), 0.05 if solver == "ppca" else 0.0)
        symbols = dict(n=n_i * proxy["blocks"], d=d, n_i=n_i, k=k)
    options = {}
    if solver == "randomized":
        options = dict(n_oversamples=p, n_power_iter=iterations)
        symbols["ℓ"] = k + p
    elif solver in ("als", "ppca"):
        options = dict(max_iter=iterations, tol=0.0)
    return record_fit(X, solver, k, symbols, **options)


def pass_counts(recording: Recording) -> dict:
    """{signature: number of passes} of a recording (steps that read the input)."""
    counts: dict = {}
    for step in recording.steps:
        if step.reads_input:
            counts[step.signature()] = counts.get(step.signature(), 0) + 1
    return counts
