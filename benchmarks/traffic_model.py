"""A solver's traffic at any size: node sizes as formulas, passes rebuilt with tree_reduce.

Part of :mod:`benchmarks.traffic`. :func:`size_formulas` turns every recorded node's bytes into a
polynomial in the proxy's symbols (:class:`SizeFormula`); :func:`tree_step` rebuilds a pass
(:class:`PassShape`) at any number of blocks with ``daskpca.passes._graph.tree_reduce`` and weighs it
with the formulas; :func:`build_models` records every solver into a :class:`SolverModel` and
:func:`predicted_step` places a scaled pass with :func:`benchmarks.traffic_place.simulate`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path

from dask._task_spec import convert_legacy_graph
from dask.delayed import Delayed
from dask.utils import key_split

from daskpca.passes import _graph

from .traffic_place import StepTraffic, simulate
from .traffic_record import ITERATIVE, PROXIES, SOLVERS, Recording, Step, TaskRecord, pass_counts, record_solver


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
def tree_structure(n_blocks: int, merged: bool, split_every: int = _graph.SPLIT_EVERY) -> tuple:
    """(deps, coverage, outputs, order) of one pass at ``n_blocks`` blocks, keys read/leaf/merge.

    Block i is read by ``("read", i)`` and summarised by ``("leaf", i)``; the merges are built
    by :func:`daskpca.passes._graph.tree_reduce`, the helper every solver's pass uses, on placeholder
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
    :func:`tree_structure`), its nodes weighted with the node formulas evaluated at ``values``."""
    deps, coverage, outputs, order = tree_structure(n_blocks, shape.merge is not None, shape.split_every)
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
