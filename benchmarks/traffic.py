r"""Bytes each solver moves between workers, measured from the task graphs of real fits.

Every solver builds one dask graph per step and hands it to the scheduler. This script runs real
``daskpca.PCA(...).fit`` calls on small zarr proxies under a *recording* scheduler
(:class:`Recorder`): each ``dask.compute`` / ``dask.persist`` call is one step; its graph
(who depends on whom), the pickled size of every task's output (what a worker would send) and
of every task's spec (what the scheduler sends with the task) are recorded while the graph runs
on the synchronous scheduler. Data the client puts in the graph as keys of their own (the zarr
handle; Ω, the basis, the mean: ``daskpca._graph.shared``) are recorded apart: such a key is sent
to each worker that runs a task needing it, once.

:func:`simulate` then places a recording on W workers the way a balanced ``distributed``
cluster would: input blocks in contiguous ranges (each worker holds 1/W of the array), every
other task on the worker that already holds the most bytes of its dependencies (dask's locality
rule; ties go to the least-loaded worker), and counts every dependency that has to cross to
another worker (each (key, destination) once), the data keys each worker needs (once per
worker), the task specs and what the client gets back.

To reach 10 TB without running anything big, two things are measured and then combined:

- **node sizes** (:func:`size_formulas`): every array in every recorded output and task spec
  has its dimensions matched to the proxy's n, d, k, ℓ, rows per block n_i, columns per strip
  d_j (all given distinct values), so a node's bytes become a polynomial such as
  ``8·d² + 8·d + 306`` (a covariance merge); a proxy of other sizes checks the polynomials.
- **the tree** (:func:`tree_step`): the structure of a pass is rebuilt at any number of blocks
  with the solvers' own :func:`daskpca._graph.tree_reduce`, weighted with the node polynomials
  and placed by the same :func:`simulate`. The ``check`` table compares this formula with the
  simulation of the real recorded graph, pass by pass and per W.

Run ``python benchmarks/traffic.py`` (one to three minutes on one core) for the tables (plus the
per-case check); ``--update docs/scaling.md`` writes them into the doc's marked blocks.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import math
import pickle
import sys
import tempfile
import time
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
from dask.delayed import Delayed
from dask.sizeof import sizeof
from dask.utils import key_split

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

import daskpca  # noqa: E402
from daskpca import _graph, _plan  # noqa: E402

SOLVERS = ("covariance", "gram", "tsqr", "randomized", "als", "ppca")
#: Solvers with passes that repeat per (power, ALS or EM) iteration.
ITERATIVE = ("randomized", "als", "ppca")


# ---- recording ---------------------------------------------------------------------------------


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
            self.order = sorted(self.tasks, key=lambda k: (depth[k], *_sort_key(k)))
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
        pca = daskpca.PCA(n_components, solver=solver, random_state=0, **options).fit(X)
    return Recording(solver, symbols, recorder.steps, pca.n_passes_)


# ---- placement on W workers --------------------------------------------------------------------


@dataclass
class StepTraffic:
    """Bytes of one step on W workers.

    Attributes
    ----------
    between_workers : int
        Results sent from one worker to another.
    crossings : dict
        kind → (number of (key, destination) transfers, bytes).
    client_data : int
        Data keys the client put into the graph (the zarr handle, shared arrays such as Ω),
        each sent once to each worker that runs a task needing it.
    task_specs : int
        Pickled tasks the scheduler sends to the workers (literal arguments included; not the
        data keys they depend on).
    to_client : int
        Results gathered by the client (0 for ``persist``).
    read_per_worker : int
        Largest in-memory size of the input blocks one worker reads (``sizeof``).
    received_max : int
        Most bytes one worker receives: results of other workers and the data keys it needs
        (the network's busiest link).
    largest_task : int
        Largest sum of a task's inputs (data keys included) and result (a lower bound of its
        memory: temporaries such as the float64 copy of a block are not in the graph).
    """

    call: str
    signature: str
    between_workers: int
    crossings: dict
    client_data: int
    task_specs: int
    to_client: int
    read_per_worker: int
    received_max: int
    largest_task: int


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


def _sort_key(key):
    return (key[0], key[1:]) if isinstance(key, tuple) else (key, ())


#: Where the input blocks are read: in contiguous ranges (block i of m on worker ⌊i·W/m⌋, as
#: on a balanced cluster that holds its data) or round-robin (block i on worker i mod W: how
#: ``distributed``'s task queuing hands out reads of data that no worker holds, e.g. zarr on an
#: object store, one free thread at a time in priority order — sibling blocks on different
#: workers).
PLACEMENTS = ("contiguous", "round-robin")


def simulate(steps: list[Step], n_workers: int, placement: str = "contiguous") -> list[StepTraffic]:
    """Place every task of ``steps`` on ``n_workers`` workers and count the bytes that move.

    Input blocks (the step's root tasks, grouped by key name) go to workers as ``placement``
    says (see :data:`PLACEMENTS`). Every other task, in order of depth, goes to the worker
    holding the most bytes of its dependencies (ties: fewest tasks so far, then lowest index).
    Persisted results keep their worker across steps.
    """
    if placement not in PLACEMENTS:
        raise ValueError(f"placement={placement!r}: expected one of {PLACEMENTS}")
    location: dict = {}
    report = []
    for step in steps:
        load = [0] * n_workers
        roots = step.roots()
        root_keys = {t.key for t in roots}
        read = [0] * n_workers
        groups: dict = {}
        for task in roots:
            groups.setdefault(_sort_key(task.key)[0], []).append(task)
        for group in groups.values():
            group.sort(key=lambda t: _sort_key(t.key)[1])
            for i, task in enumerate(group):
                location[task.key] = i * n_workers // len(group) if placement == "contiguous" else i % n_workers
                read[location[task.key]] += task.sizeof_bytes
        size = {key: t.out_bytes for key, t in step.resident.items()}
        size.update({key: t.out_bytes for key, t in step.tasks.items()})
        moved, shipped = set(), set()
        for key in step.placement_order():
            task = step.tasks[key]
            if key in root_keys:
                worker = location[key]
            else:
                held: dict = {}
                for dep in task.deps:
                    if dep not in step.client_data:
                        held[location[dep]] = held.get(location[dep], 0) + size[dep]
                most = max(held.values(), default=0)
                candidates = [w for w, b in held.items() if b == most] or range(n_workers)
                worker = min(candidates, key=lambda w: (load[w], w))
                location[key] = worker
            load[worker] += 1
            for dep in task.deps:
                if dep in step.client_data:
                    shipped.add((dep, worker))
                elif location[dep] != worker:
                    moved.add((dep, worker))
        received = [0] * n_workers
        for dep, worker in moved:
            received[worker] += size[dep]
        for dep, worker in shipped:
            received[worker] += step.client_data[dep]
        crossings: dict = {}
        for dep, _ in moved:
            kind = (step.tasks.get(dep) or step.resident[dep]).kind
            count, total = crossings.get(kind, (0, 0))
            crossings[kind] = (count + 1, total + size[dep])
        report.append(StepTraffic(
            call=step.call,
            signature=step.signature(),
            between_workers=sum(size[dep] for dep, _ in moved),
            crossings=crossings,
            client_data=sum(step.client_data[dep] for dep, _ in shipped),
            task_specs=sum(t.spec_bytes for t in step.tasks.values()),
            to_client=0 if step.call == "persist" else sum(size.get(k, 0) for k in step.outputs),
            read_per_worker=max(read),
            received_max=max(received),
            largest_task=max(t.out_bytes + sum(size.get(dep, step.client_data.get(dep, 0)) for dep in t.deps)
                             for t in step.tasks.values()),
        ))
    return report


# ---- node sizes as formulas --------------------------------------------------------------------


@dataclass(frozen=True)
class SizeFormula:
    """Bytes of a node as a polynomial in the proxy's symbols.

    ``terms`` maps a monomial (a sorted tuple of symbol names; ``"c"`` is the number of input
    blocks under the node) to its coefficient in bytes; ``overhead`` is the pickling overhead
    (headers, small Python objects), the largest one seen.
    """

    terms: tuple
    overhead: int

    def __call__(self, values: dict, coverage: int = 1) -> float:
        values = {**values, "c": coverage}
        return self.overhead + sum(coef * math.prod(values[s] for s in mono) for mono, coef in self.terms)

    def __str__(self) -> str:
        parts = []
        for mono, coef in sorted(self.terms, key=lambda t: (-len(t[0]), t[0])):
            powers = [f"{s}{_SUPERSCRIPT.get(mono.count(s), '')}" for s in dict.fromkeys(mono)]
            parts.append("·".join([str(coef), *powers]))
        return " + ".join([*parts, str(self.overhead)]) if parts else str(self.overhead)


_SUPERSCRIPT = {2: "²", 3: "³"}


def _monomials(arrays, by_value: dict) -> dict:
    """{monomial: bytes per unit} of arrays whose every dimension matches a symbol's value."""
    terms: dict = {}
    for shape, itemsize in arrays:
        if not shape or any(dim not in by_value for dim in shape):
            continue
        mono = tuple(sorted(by_value[dim] for dim in shape))
        terms[mono] = terms.get(mono, 0) + itemsize
    return terms


def _formula(samples: list, by_value: dict) -> SizeFormula:
    """One :class:`SizeFormula` from (wire bytes, arrays, coverage) of the nodes of one kind.

    A monomial whose count grows with the number of blocks under the node (a list of per-strip
    means, say) gets the factor ``c``; everything that matches no symbol stays in the overhead.
    """
    per_node = [(_monomials(arrays, by_value), wire, cover) for wire, arrays, cover in samples]
    terms = {}
    for mono in {m for node, _, _ in per_node for m in node}:
        coefs = [(node.get(mono, 0), cover) for node, _, cover in per_node]
        if len({coef for coef, _ in coefs}) == 1:
            terms[mono] = coefs[0][0]
        elif all(coef % cover == 0 and coef // cover == coefs[0][0] // coefs[0][1] for coef, cover in coefs):
            terms[(*mono, "c")] = coefs[0][0] // coefs[0][1]
        else:  # varies in a way the proxy cannot name: keep the largest (an upper bound)
            terms[mono] = max(coef for coef, _ in coefs)
    formula = SizeFormula(tuple(terms.items()), 0)
    values = {symbol: value for value, symbol in by_value.items()}
    overhead = max(wire - formula(values, cover) for _, wire, cover in per_node)
    return SizeFormula(formula.terms, max(int(overhead), 0))


def _coverage(step: Step) -> dict:
    """Number of input blocks under every task of a step."""
    roots = {t.key for t in step.roots()}
    below: dict = {}

    def visit(key):
        if key not in below:
            task = step.tasks[key]
            below[key] = frozenset([key]) if key in roots else frozenset().union(
                *(visit(dep) for dep in task.deps if dep in step.tasks))
        return below[key]

    return {key: max(len(visit(key)), 1) for key in step.tasks}


def size_formulas(recording: Recording) -> dict:
    """{kind: (output formula, spec formula)} from every task of a recording."""
    by_value = {value: symbol for symbol, value in recording.symbols.items()}
    if len(by_value) != len(recording.symbols):
        raise ValueError(f"proxy symbols need distinct values: {recording.symbols}")
    outputs: dict = {}
    specs: dict = {}
    for step in recording.steps:
        coverage = _coverage(step)
        for key, task in step.tasks.items():
            outputs.setdefault(task.kind, []).append((task.out_bytes, task.out_arrays, coverage[key]))
            specs.setdefault(task.kind, []).append((task.spec_bytes, task.spec_arrays, 1))
        shape = PassShape.of(step) if step.reads_input else None
        if shape is not None and shape.args:  # the pass's shared arrays, as one node
            args = step.args()
            outputs.setdefault(shape.args, []).append((sum(step.client_data[key] for key in args),
                                                       sum((step.client_arrays[key] for key in args), ()), 1))
            specs.setdefault(shape.args, []).append((0, (), 1))
    return {kind: (_formula(outputs[kind], by_value), _formula(specs[kind], by_value)) for kind in outputs}


# ---- the same passes at any size: tree_reduce's own structure, weighted with the formulas ------


def _noop(*args):
    return None


@dataclass(frozen=True)
class PassShape:
    """What a recorded pass is made of: read → leaf kind → (merge kind, a tree) or to the client.

    ``args`` names the data keys the leaves depend on (Ω, the basis, ...: one node, formula
    ``formulas[args]``; the merges depend on them too if ``merge_args``).
    """

    read: str
    leaf: str
    merge: str | None
    source_bytes: int = 0  # the input's handle (a zarr.Array) the client puts in the graph
    args: str | None = None
    merge_args: bool = False
    split_every: int = _graph.SPLIT_EVERY  # the merges' fan-in (TSQR merges pairwise)

    @classmethod
    def of(cls, step: Step) -> "PassShape | None":
        roots = {t.key for t in step.roots()}
        read = {step.tasks[k].kind for k in roots}
        leaf = {t.kind for t in step.tasks.values() if t.key not in roots and set(t.deps) & roots}
        merge = {t.kind for t in step.tasks.values()} - read - leaf
        if len(read) != 1 or len(leaf) != 1 or len(merge) > 1:
            return None
        leaf, merge = leaf.pop(), merge.pop() if merge else None
        source = {dep for k in roots for dep in step.tasks[k].deps}
        merge_args = any(dep in step.client_data for t in step.tasks.values() if t.kind == merge for dep in t.deps)
        fan_in = max((sum(dep in step.tasks for dep in t.deps) for t in step.tasks.values() if t.kind == merge), default=0)
        return cls(read.pop(), leaf, merge, sum(step.client_data[dep] for dep in source),
                   f"{leaf} args" if step.args() else None, merge_args, max(fan_in, 2) if merge else _graph.SPLIT_EVERY)


_SOURCE, _ARGS = ("source",), ("args",)


@functools.lru_cache(maxsize=None)
def _tree_structure(n_blocks: int, merged: bool, split_every: int = _graph.SPLIT_EVERY) -> tuple:
    """(deps, coverage, outputs, order) of one pass at ``n_blocks`` blocks, keys read/leaf/merge.

    Block i is read by ``("read", i)`` and summarised by ``("leaf", i)``; the merges are built
    by :func:`daskpca._graph.tree_reduce`, the helper every solver's pass uses, on placeholder
    leaves (no data), with the fan-in ``split_every`` the recorded pass had. A pass without a
    merge gathers every leaf to the client. Cached: dask takes ~15 s here to build the merges
    of 40 000 blocks.
    """
    deps: dict = {}
    for i in range(n_blocks):
        deps["read", i] = (_SOURCE,)
        deps["leaf", i] = (("read", i),)
    if merged:
        leaves = [Delayed(("leaf", i), {("leaf", i): None}) for i in range(n_blocks)]
        top = _graph.tree_reduce(leaves, _noop, "merge", split_every=split_every)
        for key, node in convert_legacy_graph(dict(top.__dask_graph__())).items():
            if key_split(key) == "merge":
                deps[key] = tuple(node.dependencies)
        outputs = (top.key,)
    else:
        outputs = tuple(("leaf", i) for i in range(n_blocks))
    tasks = {key: TaskRecord(key, key_split(key), dep, 0, (), 0, 0, ()) for key, dep in deps.items()}
    step = Step("compute", tasks, {_SOURCE: 0}, {}, outputs)
    return deps, _coverage(step), outputs, step.placement_order()


def tree_step(shape: PassShape, n_blocks: int, formulas: dict, values: dict) -> Step:
    """A :class:`Step` with the structure of one pass at ``n_blocks`` blocks (see
    :func:`_tree_structure`), its nodes weighted with the node formulas evaluated at ``values``."""
    deps, coverage, outputs, order = _tree_structure(n_blocks, shape.merge is not None, shape.split_every)
    kinds = {"read": shape.read, "leaf": shape.leaf, "merge": shape.merge}
    with_args = {"leaf", "merge"} if shape.merge_args else {"leaf"}
    sizes: dict = {}  # (kind, coverage) → (result bytes, spec bytes): few distinct values
    tasks = {}
    for key, dep in deps.items():
        kind = kinds[key_split(key)]
        if (kind, coverage[key]) not in sizes:
            out, spec = formulas[kind]
            sizes[kind, coverage[key]] = (int(out(values, coverage[key])), int(spec(values)))
        size, spec_size = sizes[kind, coverage[key]]
        if shape.args and key_split(key) in with_args:
            dep = (*dep, _ARGS)
        tasks[key] = TaskRecord(key, kind, dep, size, (), size, spec_size, ())
    client_data = {_SOURCE: shape.source_bytes}
    if shape.args:
        client_data[_ARGS] = int(formulas[shape.args][0](values))
    return Step("compute", tasks, client_data, {}, outputs, order)


# ---- proxies ---------------------------------------------------------------------------------


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


# ---- measured throughputs of this machine ---------------------------------------------------


def _best_time(fn, repeat: int = 7) -> float:
    """Fastest of ``repeat`` runs: on a busy machine, the run least disturbed by other work."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def _peak_bytes(fn) -> int:
    """Peak bytes ``fn`` allocates (NumPy and SciPy report their buffers to tracemalloc)."""
    import tracemalloc

    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def measure_throughputs(folder: Path, side: int = 1_000) -> dict:
    """Single-thread rates of the kernels the solvers spend their time in, measured here.

    Returns
    -------
    dict
        ``read``: bytes/s from zarr to NumPy (decompression included). ``syrk``, ``qr``,
        ``gemm``: flops/s in the planner's units (n·d² for XᵀX, 2·n·d² for a QR, 2·n·d·ℓ for
        a product). ``client``: per exact solver, (seconds / s³, bytes / 8s²) of its step on
        the client, s = d (n for gram), the received matrix included in the bytes: the
        covariance solver's ``result_from_moments`` (k = 20), the full ``eigh`` of the Gram
        matrix, the SVD of TSQR's final R. ``tsqr_merge``: seconds / d³ of one TSQR merge
        (``_merge_r`` of two d×d R factors: TSQR merges pairwise).
    """
    from scipy.linalg import qr, svd
    from threadpoolctl import threadpool_limits

    from daskpca._linalg import eigh_descending
    from daskpca._moments import Moments
    from daskpca._validation import NonFinite
    from daskpca.solvers import covariance, tsqr
    from daskpca.solvers._base import ComponentRequest

    rng = np.random.default_rng(0)
    rates: dict = {}
    with threadpool_limits(1):
        X = proxy_array(folder, 65_536, 256, (4_096, 256))  # 64 MiB float32 in 16 chunks
        rates["read"] = X.nbytes / _best_time(lambda: X.compute(scheduler="sync"))
        block = rng.standard_normal((8_000, 400))
        rates["syrk"] = 8_000 * 400**2 / _best_time(lambda: block.T @ block)
        rates["qr"] = 2 * 8_000 * 400**2 / _best_time(lambda: qr(block, mode="r"))
        omega = rng.standard_normal((400, 30))
        rates["gemm"] = 2 * 8_000 * 400 * 30 / _best_time(lambda: block @ omega)

        a = rng.standard_normal((side, side))
        scatter = a @ a.T
        moments = Moments(10 * side, np.zeros(side), scatter, NonFinite())
        request = ComponentRequest(EXAMPLE_K, 10 * side, side)
        r = np.triu(a)
        steps = {
            "covariance": lambda: covariance.result_from_moments(moments, request),
            "gram": lambda: eigh_descending(scatter),
            "tsqr": lambda: svd(r, full_matrices=False, check_finite=False, lapack_driver="gesdd"),
        }
        matrix = 8 * side**2
        rates["client"] = {
            name: (_best_time(step, 3) / side**3, 1 + _peak_bytes(step) / matrix) for name, step in steps.items()
        }
        m = 400
        parts = [tsqr._RPart(m, rng.standard_normal(m), np.triu(rng.standard_normal((m, m))), NonFinite())
                 for _ in range(tsqr.MERGE_SPLIT_EVERY)]
        rates["tsqr_merge"] = _best_time(lambda: tsqr._merge_r(parts)) / m**3
    return rates


# ---- reports ---------------------------------------------------------------------------------


def _b(n: float) -> str:
    """Bytes with a decimal unit (the doc speaks of a 10 TB array)."""
    for unit in ("B", "kB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000 or unit == "PB":
            break
        n /= 1000
    return f"{n:.0f} B" if unit == "B" else f"{n:.3g} {unit}"


def _t(seconds: float) -> str:
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.2g} s"


def _table(header: list[str], rows: list[list], markdown: bool) -> str:
    cells = [[str(c) for c in row] for row in [header, *rows]]
    if markdown:
        lines = ["| " + " | ".join(row) + " |" for row in cells]
        lines.insert(1, "|" + "|".join("---" for _ in header) + "|")
        return "\n".join(lines)
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells)


@dataclass
class SolverModel:
    """Everything measured about one solver: its recordings, node formulas and pass kinds."""

    solver: str
    fit: Recording
    check: Recording
    formulas: dict
    once: dict = field(default_factory=dict)  # pass signature → passes that do not repeat
    per_iteration: dict = field(default_factory=dict)  # pass signature → passes per iteration

    def shapes(self) -> dict:
        """{signature: PassShape} of the passes (steps that read the input)."""
        return {s.signature(): PassShape.of(s) for s in self.fit.steps if s.reads_input}

    def passes(self, iterations: int) -> dict:
        """{signature: number of passes} for a fit with ``iterations`` iterations, in pass order."""
        order = dict.fromkeys(s.signature() for s in self.fit.steps if s.reads_input)
        return {s: self.once.get(s, 0) + iterations * self.per_iteration.get(s, 0) for s in order}


def build_models(folder: Path, solvers=SOLVERS) -> dict:
    """Record every solver on both proxies and derive its model.

    Iterative solvers are recorded once more with two iterations: a pass kind whose count grows
    by one repeats per iteration, the rest run once.
    """
    models = {}
    for solver in solvers:
        fit = record_solver(solver, folder, PROXIES["fit"])
        check = record_solver(solver, folder, PROXIES["check"])
        model = SolverModel(solver, fit, check, size_formulas(fit))
        one = pass_counts(fit)
        if solver in ITERATIVE:
            two = pass_counts(record_solver(solver, folder, PROXIES["fit"], iterations=2))
            model.per_iteration = {s: two[s] - one.get(s, 0) for s in two}
            model.once = {s: one.get(s, 0) - model.per_iteration[s] for s in two}
        else:
            model.once = one
        models[solver] = model
    return models


class NotATreePass(ValueError):
    """A recorded pass is not read → one leaf per block → one tree_reduce (or → the client)."""


def predicted_step(model: SolverModel, signature: str, n_blocks: int, values: dict, n_workers: int,
                   placement: str = "contiguous") -> StepTraffic:
    """Traffic of one pass at any size from the node formulas and tree_reduce's structure.

    Raises
    ------
    NotATreePass
        When the recorded pass has another structure: its formula cannot be scaled this way.
    """
    shape = model.shapes().get(signature)
    if shape is None:
        raise NotATreePass(f"{model.solver}'s pass {signature!r} is not a tree reduction over the row blocks")
    return simulate([tree_step(shape, n_blocks, model.formulas, values)], n_workers, placement)[0]


def check_rows(models: dict, workers=(1, 4, 16)) -> list[list]:
    """Measured (simulated real graph of the ``check`` proxy) vs formula, per pass, W and placement."""
    rows = []
    for solver, model in models.items():
        recording = model.check
        for n_workers, placement in itertools.product(workers, PLACEMENTS):
            if n_workers == 1 and placement != PLACEMENTS[0]:
                continue  # one worker: nothing to place
            measured = simulate(recording.steps, n_workers, placement)
            for index, (step, traffic) in enumerate(zip(recording.steps, measured)):
                if not step.reads_input:
                    continue
                row = [solver, index + 1, n_workers, placement, traffic.between_workers]
                try:
                    formula = predicted_step(model, step.signature(), PROXIES["check"]["blocks"], recording.symbols,
                                             n_workers, placement)
                except NotATreePass:
                    rows.append([*row, "not a tree pass", "", "", ""])
                    continue
                ratio = formula.between_workers / traffic.between_workers if traffic.between_workers else 1.0 + formula.between_workers
                rows.append([*row, formula.between_workers, f"{ratio:.3f}",
                             traffic.task_specs + traffic.client_data, formula.task_specs + formula.client_data])
    return rows


def check_summary(rows: list[list]) -> list[list]:
    """Per solver: cases checked (pass × W × placement) and the worst formula / measured ratio."""
    summary: dict = {}
    for solver, _, _, _, measured, _, ratio, *_ in rows:
        cases, worst, moved = summary.get(solver, (0, 1.0, 0))
        ratio = float(ratio) if ratio else math.inf
        summary[solver] = (cases + 1, max(worst, ratio, key=lambda r: abs(r - 1)), max(moved, measured))
    return [[solver, cases, f"{worst:.3f}", moved] for solver, (cases, worst, moved) in summary.items()]


def formula_rows(models: dict) -> list[list]:
    """Node formulas per solver and task kind, and what dask.sizeof believes they weigh."""
    rows = []
    for solver, model in models.items():
        tasks = [t for s in model.fit.steps for t in s.tasks.values()]
        for kind, (out, spec) in model.formulas.items():
            of_kind = [t for t in tasks if t.kind == kind]
            if not of_kind:  # a pass's shared arrays: one data key, sent once to each worker
                rows.append([solver, kind, str(out), "— (a key)", "—"])
                continue
            largest = max(of_kind, key=lambda t: t.out_bytes)
            rows.append([solver, kind, str(out), str(spec), f"{largest.sizeof_bytes} / {largest.out_bytes}"])
    return rows


#: The 10 TB float32 arrays of docs/scaling.md: shape, layout, rows (or columns) per block of
#: 250 MB.
EXAMPLES = {
    "tall 2.5e9 × 1e3": dict(n=2_500_000_000, d=1_000, layout="rows", block=62_500),
    "wide 2.5e7 × 1e5": dict(n=25_000_000, d=100_000, layout="rows", block=625),
    "short-fat 2e4 × 1.25e8": dict(n=20_000, d=125_000_000, layout="columns", block=3_125),
}
EXAMPLE_K, EXAMPLE_OVERSAMPLES, EXAMPLE_WORKERS, EXAMPLE_THREADS = 20, 10, 100, 2
#: Power iterations of the example (what n_power_iter="auto" picks for k ≪ min(n, d)) and
#: ALS / PPCA iterations (they depend on the spectrum: an assumption).
EXAMPLE_ITERATIONS = {"randomized": 7, "als": 30, "ppca": 30}
#: Network bandwidth per worker: an assumption (not measurable here), 10 Gbit/s.
NETWORK = 1.25e9


def _example(ex: dict) -> tuple[int, dict, tuple]:
    """(blocks, symbol values, chunks) of an example array."""
    n, d, block = ex["n"], ex["d"], ex["block"]
    values = {"n": n, "d": d, "k": EXAMPLE_K, "ℓ": EXAMPLE_K + EXAMPLE_OVERSAMPLES, "n_i": block, "d_j": block}
    if ex["layout"] == "rows":
        return math.ceil(n / block), values, ((block,), (d,))
    return math.ceil(d / block), values, ((n,), (block,))


def _tree_size(n_blocks: int, split_every: int) -> tuple[int, int]:
    """(levels, merge tasks) of tree_reduce over ``n_blocks`` blocks."""
    merges = [key for key in _tree_structure(n_blocks, True, split_every)[0] if key_split(key) == "merge"]
    return len({key[0] for key in merges}), len(merges)


def _single_node(solver: str, ex: dict, rates: dict, n_blocks: int) -> tuple[float, float, str]:
    """(seconds, bytes, description) of the solver's step on one node, from measured rates.

    For TSQR the merge tree is added: every merge is a QR of two stacked d×d R factors, and the
    levels run one after another, so it takes at least max(levels, merges / threads) QR times.
    """
    if solver not in rates["client"]:
        return 0.0, 0.0, "QR/SVD of a d×ℓ matrix: O(d·ℓ²), under a second"
    side = ex["n"] if solver == "gram" else ex["d"]
    per_cube, per_square = rates["client"][solver]
    seconds, memory = per_cube * side**3, per_square * 8 * side**2
    what = {"covariance": f"eigh of {side:.3g}² (k = {EXAMPLE_K})", "gram": f"eigh of {side:.3g}²",
            "tsqr": f"SVD of R {side:.3g}²"}[solver]
    if solver == "tsqr":
        from daskpca.solvers import tsqr

        levels, merges = _tree_size(n_blocks, tsqr.MERGE_SPLIT_EVERY)
        qr_s = rates["tsqr_merge"] * side**3
        tree = qr_s * max(levels, merges / (EXAMPLE_WORKERS * EXAMPLE_THREADS))
        return seconds + tree, memory, f"{what} {_t(seconds)}; merge tree {_t(tree)} ({merges} QRs of 2d×d, {_t(qr_s)} each, {levels} levels)"
    return seconds, memory, f"{what}: {_t(seconds)}"


def example_rows(models: dict, rates: dict, workers: int = EXAMPLE_WORKERS) -> tuple[list, list]:
    """Per example array: one row per solver pass kind, and one row of totals per solver.

    Byte counts are given for both :data:`PLACEMENTS` as "contiguous / round-robin".
    """
    def both(values):
        return " / ".join(_b(v) for v in values)

    pass_rows, total_rows = [], []
    for name, ex in EXAMPLES.items():
        blocks, values, chunks = _example(ex)
        estimates = {e.name: e for e in _plan.estimate_solvers(ex["n"], ex["d"], EXAMPLE_K, chunks, 4, EXAMPLE_OVERSAMPLES,
                                                               n_power_iter=EXAMPLE_ITERATIONS["randomized"], available=SOLVERS)}
        read_per_worker = ex["n"] * ex["d"] * 4 / workers
        for solver, model in models.items():
            if (solver == "gram") != (ex["layout"] == "columns"):
                continue  # gram reads column strips (n ≪ d); the others row blocks
            passes = model.passes(EXAMPLE_ITERATIONS.get(solver, 0))
            moved, received = [0, 0], [0, 0]
            specs = data = client = task = 0
            for signature, count in passes.items():
                traffic = [predicted_step(model, signature, blocks, values, workers, p) for p in PLACEMENTS]
                pass_rows.append([name, solver, f"{model.shapes()[signature].leaf} × {count}",
                                  both(t.between_workers for t in traffic), both(t.received_max for t in traffic),
                                  _b(traffic[0].task_specs), _b(traffic[0].client_data), _b(traffic[0].to_client),
                                  _b(traffic[0].largest_task)])
                moved = [m + count * t.between_workers for m, t in zip(moved, traffic)]
                received = [r + count * t.received_max for r, t in zip(received, traffic)]
                specs += count * traffic[0].task_specs
                data += count * traffic[0].client_data
                client += count * traffic[0].to_client
                task = max(task, traffic[0].largest_task)
            n_passes = sum(passes.values())
            estimate = estimates[solver]
            iterations = EXAMPLE_ITERATIONS[solver] if solver in ("als", "ppca") else 1  # their flops are per iteration
            flops_per_pass = estimate.flops * iterations / n_passes
            kernel = {"covariance": "syrk", "gram": "syrk", "tsqr": "qr"}.get(solver, "gemm")
            pass_s = max(read_per_worker / (rates["read"] * EXAMPLE_THREADS),
                         flops_per_pass / (rates[kernel] * workers * EXAMPLE_THREADS))
            _, local_bytes, local = _single_node(solver, ex, rates, blocks)
            total_rows.append([
                name, solver, n_passes, _b(n_passes * read_per_worker), both(moved), _b(specs), _b(data), _b(client),
                f"{_b(estimate.task_bytes)} / {_b(task)}",
                f"{_t(n_passes * pass_s)} (+{_t(received[0] / NETWORK)} / {_t(received[1] / NETWORK)})",
                f"{local}; {_b(local_bytes)}" if local_bytes else local,
            ])
    return pass_rows, total_rows


MEMORIES = (8, 32, 128, 512)  # GB of memory per worker thread


def _largest(test) -> int:
    """Largest positive integer for which ``test`` holds, 0 if none (``test`` is monotone)."""
    low, high = 0, 10**12
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if test(mid) else (low, mid)
    return low


def largest_rows(models: dict, rates: dict, block_bytes: float = 250e6) -> list[list]:
    """Largest d (n for gram) whose largest task fits ``TASK_MEMORY_FRACTION`` of a worker
    thread's memory: by the planner's model, and by the recorded graph's lower bound (inputs +
    result of the largest task, from the node formulas on a 64-block tree). 250 MB input blocks,
    k = 20, ℓ = 30; gram with d = 1e9 columns (its second pass's tasks read the whole mean, 8·d).
    "none" when no side fits. Then the largest side of the exact solvers' step on a client of
    that memory.
    """

    def sizes(solver, side):
        if solver == "gram":
            n, d, block = side, 10**9, max(1, int(block_bytes / (4 * side)))
            chunks = ((n,), (block,))
        else:
            n, d, block = 10**10, side, max(1, int(block_bytes / (4 * side)))
            chunks = ((block,), (d,))
        values = {"n": n, "d": d, "k": EXAMPLE_K, "ℓ": EXAMPLE_K + EXAMPLE_OVERSAMPLES, "n_i": block, "d_j": block}
        return n, d, chunks, values

    def planner_fits(solver, side, budget):
        n, d, chunks, _ = sizes(solver, side)
        (estimate,) = _plan.estimate_solvers(n, d, EXAMPLE_K, chunks, 4, EXAMPLE_OVERSAMPLES, budget=budget, available=(solver,))
        return estimate.feasible

    def graph_fits(model, side, budget):
        _, _, _, values = sizes(model.solver, side)
        return all(predicted_step(model, signature, 64, values, 1).largest_task <= budget for signature in model.shapes())

    rows = []
    for solver, model in models.items():
        row = [f"{solver} ({'n' if solver == 'gram' else 'd'})"]
        for memory in MEMORIES:
            budget = _plan.TASK_MEMORY_FRACTION * memory * 1e9
            planner = _largest(lambda side: planner_fits(solver, side, budget))
            graph = _largest(lambda side: graph_fits(model, side, budget))
            row.append(" / ".join(f"{side:.3g}" if side else "none" for side in (planner, graph)))
        rows.append(row)
    for solver, (_, per_square) in rates["client"].items():
        rows.append([f"client: {solver} step ({'n' if solver == 'gram' else 'd'})"] +
                    [f"{math.sqrt(memory * 1e9 / (8 * per_square)):.3g}" for memory in MEMORIES])
    return rows


def crossover_rows(models: dict, rates: dict, total_bytes: float = 1e13, block_bytes: float = 250e6) -> list[list]:
    """For a 10 TB float32 array on the example cluster: the side (d, or n for gram) from which
    the exact solvers' single-node step takes longer than all their distributed passes."""
    cores = EXAMPLE_WORKERS * EXAMPLE_THREADS
    read_s = total_bytes / EXAMPLE_WORKERS / (rates["read"] * EXAMPLE_THREADS)
    blocks = int(total_bytes / block_bytes)
    rows = []
    for solver in ("covariance", "tsqr", "gram"):
        if solver not in models:
            continue

        def distributed(side):
            other = int(total_bytes / 4 / side)
            n, d = (side, other) if solver == "gram" else (other, side)
            chunks = ((n,), (max(1, int(block_bytes / (4 * n))),)) if solver == "gram" else ((max(1, int(block_bytes / (4 * d))),), (d,))
            (estimate,) = _plan.estimate_solvers(n, d, EXAMPLE_K, chunks, 4, EXAMPLE_OVERSAMPLES, available=(solver,))
            kernel = "qr" if solver == "tsqr" else "syrk"
            return estimate.passes * max(read_s, estimate.flops / estimate.passes / (rates[kernel] * cores))

        def single(side):
            ex = {"n": side, "d": side}
            return _single_node(solver, ex, rates, blocks)[0]

        side = _largest(lambda s: single(s) < distributed(s))
        rows.append([solver, f"{side:.3g}", _t(distributed(side)), _b(rates["client"][solver][1] * 8 * side**2)])
    return rows


def tree_rows(blocks=(40_000, 4_000), workers=(10, 100, 1000)) -> list[list]:
    """Crossings of one tree_reduce pass (leaf results + merge results; the busiest worker's
    count in brackets) for several B and W, both placements."""
    unit = (SizeFormula((), 1), SizeFormula((), 0))
    formulas = {"read": unit, "leaf": unit, "merge": unit}
    rows = []
    for n_blocks, placement in itertools.product(blocks, PLACEMENTS):
        step = tree_step(PassShape("read", "leaf", "merge"), n_blocks, formulas, {})
        row = [n_blocks, placement]
        for n_workers in workers:
            (traffic,) = simulate([step], n_workers, placement)
            leaf, merge = (traffic.crossings.get(kind, (0, 0))[0] for kind in ("leaf", "merge"))
            row.append(f"{leaf} + {merge} ({traffic.received_max})")
        rows.append(row)
    return rows


def update_doc(path: Path, blocks: dict) -> None:
    """Replace each ``<!-- traffic.py:NAME -->`` … ``<!-- /traffic.py:NAME -->`` block of ``path``."""
    text = path.read_text()
    for name, body in blocks.items():
        begin, end = f"<!-- traffic.py:{name} -->", f"<!-- /traffic.py:{name} -->"
        if begin not in text or end not in text:
            raise ValueError(f"{path} has no {begin} … {end} block")
        head, rest = text.split(begin, 1)
        text = f"{head}{begin}\n{body}\n{end}{rest.split(end, 1)[1]}"
    path.write_text(text)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--solvers", default=",".join(SOLVERS), help="comma-separated (default: all)")
    parser.add_argument("--markdown", action="store_true", help="print the tables as markdown")
    parser.add_argument("--update", type=Path, metavar="DOC",
                        help="write the markdown tables into DOC's <!-- traffic.py:NAME --> blocks (docs/scaling.md)")
    args = parser.parse_args(argv)
    md = args.markdown or args.update is not None
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        models = build_models(Path(tmp), [s for s in args.solvers.split(",") if s])
        rates = measure_throughputs(Path(tmp))
    checks = check_rows(models)
    pass_rows, total_rows = example_rows(models, rates)
    client = "; ".join(f"{name} {c:.3g} s/s³ and {m:.2f} × 8s² bytes" for name, (c, m) in rates["client"].items())
    blocks = {
        "nodes": _table(["solver", "task kind", "result", "task spec", "dask.sizeof / pickled (largest)"],
                        formula_rows(models), md),
        "check": _table(["solver", "cases", "worst formula / measured", "largest measured B"], check_summary(checks), md),
        "tree": _table(["blocks B", "reads placed", "W = 10", "W = 100", "W = 1000"], tree_rows(), md),
        "rates": (f"Measured on this machine, one thread: read {_b(rates['read'])}/s (zarr → NumPy); syrk "
                  f"{rates['syrk']:.3g}, QR {rates['qr']:.3g}, GEMM {rates['gemm']:.3g} flop/s (planner units); "
                  f"client steps (s = d, or n for gram): {client}; one TSQR merge {rates['tsqr_merge']:.3g}·d³ s."),
        "passes": _table(["array", "solver", "pass × count", "between workers", "busiest worker receives",
                          "task specs", "data keys", "to client", "largest task (graph)"], pass_rows, md),
        "fit": _table(["array", "solver", "passes", "read per worker", "between workers", "task specs", "data keys", "to client",
                       "largest task: planner / graph", "time est. (+ network)", "single-node step (est.)"], total_rows, md),
        "largest": _table(["solver", *[f"{m} GB" for m in MEMORIES]], largest_rows(models, rates), md),
        "crossover": _table(["solver", "d (n for gram)", "distributed passes take", "client memory then"],
                            crossover_rows(models, rates), md),
    }
    if args.update is not None:
        update_doc(args.update, blocks)
        print(f"updated {args.update} in {time.perf_counter() - start:.0f} s")
        return
    if not md:
        print("### Check: bytes between workers, real recorded graph vs formula, per pass, W and placement\n")
        print(_table(["solver", "step", "W", "placement", "measured B", "formula B", "ratio",
                      "specs + client data: measured", "formula"], checks, md), "\n")
    for name, body in blocks.items():
        print(f"### {name}\n\n{body}\n")
    print(f"(recorded and simulated in {time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
