"""The package's layers, derived from its imports: every import runs down the declared order.

The graph is read from the source (every ``import`` statement, function-level ones included), at
the level of packages (``daskpca.solvers``, ``daskpca.store``, …) and of the top-level modules.
An import of a unit at the same level or above its importer, or any cycle between units, fails
the test, naming the import (module, line, statement) that broke the order. A new package or
top-level module must be placed in :data:`LAYERS` before it can be imported at all.

Packages are entered through their public faces: a private module (``daskpca.solvers._base``,
``daskpca.passes._cache``) is imported only from inside its own package's subtree; the others
import the names its package's ``__init__`` exports. The root's private modules
(``daskpca._plan``, ``daskpca._validation``, …) belong to the root, whose subtree is everything.
Tests are not the package: they may import private modules.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

import daskpca

PACKAGE = Path(daskpca.__file__).parent

#: The declared order, top to bottom: a unit may import only units of the layers below its own.
LAYERS = (
    ("the command line", ("daskpca.cli",)),
    ("the package's public names", ("daskpca",)),
    ("public faces built on estimators", ("daskpca.plot", "daskpca.significance")),
    ("estimators built on the PCA family", ("daskpca.eof", "daskpca.coupled")),
    ("the PCA family", ("daskpca.pca",)),
    ("the estimator layer (base, parameters, the model's format)", ("daskpca.models",)),
    ("probabilistic PCA's likelihood", ("daskpca._probabilistic",)),
    ("the labeled layer", ("daskpca.labeled",)),
    ("the fit stages", ("daskpca._features", "daskpca._plan")),
    ("the plan's probe: a sample of the rows read for block Krylov's passes", ("daskpca._probe",)),
    ("readers and writers", ("daskpca.io",)),
    ("solvers and their contract", ("daskpca.solvers",)),
    ("the pass machinery", ("daskpca.passes",)),
    ("input validation", ("daskpca._validation",)),
    ("bytes: publishing, claims, objects, integrity, checkpoints", ("daskpca.store",)),
    ("errors and the version", ("daskpca.exceptions", "daskpca._version")),
)
RANK = {unit: rank for rank, (_, units) in enumerate(LAYERS) for unit in units}


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line} `{self.text}`"


def _module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unit_of(module: str) -> str:
    """The layer unit of a module: its subpackage (``daskpca.solvers``), or itself at the top."""
    return ".".join(module.split(".")[:2])


def imports_of(path: Path, modules: set[str], root: Path = PACKAGE) -> list[Import]:
    """Every daskpca module ``path`` imports, anywhere in it (``from . import x`` counts as the
    submodule ``x`` when there is one; ``from .. import PCA`` as the package ``daskpca``)."""
    name = _module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    source = path.read_text()
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            base = f"{base}.{node.module}" if node.level and node.module else (base if node.level else node.module)
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        text = ast.unparse(node)
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.append(Import(name, target, node.lineno, text))
    return found


@functools.lru_cache(maxsize=None)
def module_imports(root: Path = PACKAGE) -> list[Import]:
    """Every import between two daskpca modules, within a unit or across."""
    paths = sorted(root.rglob("*.py"))
    modules = {_module_name(p, root) for p in paths}
    return [imp for p in paths for imp in imports_of(p, modules, root)]


def package_imports(root: Path = PACKAGE) -> list[Import]:
    """The imports between units (the layers' edges)."""
    return [imp for imp in module_imports(root) if unit_of(imp.source) != unit_of(imp.target)]


def private_owner(module: str) -> str | None:
    """The package a private module belongs to (``daskpca.solvers`` for ``daskpca.solvers._base``,
    ``daskpca`` for ``daskpca._plan``): its path up to the first part with a leading underscore.
    None for a public module (``__init__`` and ``__main__`` are not private)."""
    parts = module.split(".")
    for index, part in enumerate(parts[1:], start=1):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:index])
    return None


def private_reaches(imports: list[Import]) -> list[str]:
    """One line per import of a private module from outside its package's subtree."""
    problems = []
    for imp in imports:
        owner = private_owner(imp.target)
        if owner is not None and imp.source != owner and not imp.source.startswith(owner + "."):
            problems.append(f"{imp} imports {imp.target}, private to {owner}: import the name from {owner} "
                            f"(the __all__ of {owner.replace('.', '/')}/__init__.py; add it there if missing)")
    return sorted(set(problems))


def order_problems(imports: list[Import], rank: dict = RANK) -> list[str]:
    """One line per import against the declared order (or of a unit the order does not place)."""
    problems = []
    for imp in imports:
        source, target = unit_of(imp.source), unit_of(imp.target)
        if source == "daskpca" and imp.source != "daskpca":
            source = imp.source
        for unit in (source, target):
            if unit not in rank:
                problems.append(f"{unit} is in no layer: place it in tests/test_layers.py LAYERS (imported by {imp})")
        if source in rank and target in rank and rank[target] <= rank[source]:
            where = "beside" if rank[target] == rank[source] else "above"
            problems.append(f"{imp} imports {target}, which sits {where} {source} "
                            f"({LAYERS[rank[target]][0]!r} vs {LAYERS[rank[source]][0]!r}): imports run down the layers")
    return sorted(set(problems))


def package_cycle(imports: list[Import]) -> list[Import] | None:
    """A cycle between units, as the imports that close it (None when there is none)."""
    edges: dict[str, dict[str, Import]] = {}
    for imp in imports:
        edges.setdefault(unit_of(imp.source), {}).setdefault(unit_of(imp.target), imp)
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(edges.get(node, {})):
            if state.get(nxt) == "open":
                loop = stack[stack.index(nxt):] + [nxt]
                return [edges[a][b] for a, b in zip(loop, loop[1:])]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None


# -------------------------------------------------------------------------------------- tests


def test_every_import_runs_down_the_declared_layers():
    imports = package_imports()
    problems = order_problems(imports)
    assert not problems, "imports against the layers:\n" + "\n".join(problems)
    # The walk sees the imports that matter (a walker that finds nothing would pass).
    seen = {(unit_of(i.source), unit_of(i.target)) for i in imports}
    assert {("daskpca.pca", "daskpca.models"), ("daskpca.models", "daskpca.io"), ("daskpca.io", "daskpca.store"),
            ("daskpca.eof", "daskpca.pca"), ("daskpca.cli", "daskpca.io")} <= seen


def test_no_cycle_between_packages():
    cycle = package_cycle(package_imports())
    assert cycle is None, "import cycle between packages: " + " → ".join(str(i) for i in cycle)


def test_no_module_reaches_into_another_packages_private_modules():
    imports = module_imports()
    problems = private_reaches(imports)
    assert not problems, "imports of another package's private modules:\n" + "\n".join(problems)
    # The walk sees private modules imported where they may be (a walker that finds none would pass).
    allowed = {(i.source, i.target) for i in imports if private_owner(i.target)}
    assert {("daskpca.passes", "daskpca.passes._cache"), ("daskpca.solvers.krylov", "daskpca.solvers._base"),
            ("daskpca.pca", "daskpca._features")} <= allowed


def test_the_store_imports_nothing_above_the_bytes():
    # The issue this layering came from: the store imported the estimators' pieces it
    # serialised, and the solvers imported the store for their checkpoints.
    for imp in package_imports():
        if unit_of(imp.source) == "daskpca.store":
            assert unit_of(imp.target) == "daskpca.exceptions", f"the store holds bytes only: {imp}"
        if unit_of(imp.source) == "daskpca.solvers":
            assert imp.target != "daskpca.store.checkpoint", f"solvers receive their checkpoint: {imp}"


def test_a_wrong_import_is_named_with_its_line(tmp_path):
    # The checks themselves, on a package with one import up the layers and one cycle.
    root = tmp_path / "daskpca"
    (root / "store").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "io.py").write_text("from .store import claims\n")
    (root / "store" / "__init__.py").write_text("")
    (root / "store" / "claims.py").write_text("import os\n\n\ndef f():\n    from .. import io\n")
    imports = package_imports(root)
    problems = order_problems(imports)
    assert problems == ["daskpca.store.claims:5 `from .. import io` imports daskpca.io, which sits above daskpca.store "
                        "('readers and writers' vs 'bytes: publishing, claims, objects, integrity, checkpoints'): "
                        "imports run down the layers"]
    cycle = package_cycle(imports)
    assert [str(i) for i in cycle] == ["daskpca.io:1 `from .store import claims`",
                                       "daskpca.store.claims:5 `from .. import io`"]
    assert order_problems(imports, {"daskpca.io": 0}) == [
        "daskpca.store is in no layer: place it in tests/test_layers.py LAYERS (imported by daskpca.io:1 "
        "`from .store import claims`)",
        "daskpca.store is in no layer: place it in tests/test_layers.py LAYERS (imported by daskpca.store.claims:5 "
        "`from .. import io`)"]


def test_a_reach_into_a_private_module_is_named_with_its_line(tmp_path):
    # The check itself, on a package with every form of import of a private module.
    root = tmp_path / "daskpca"
    for package in ("", "solvers", "passes", "cli"):
        (root / package).mkdir(parents=True, exist_ok=True)
        (root / package / "__init__.py").write_text("")
    (root / "_plan.py").write_text("")
    (root / "solvers" / "_base.py").write_text("")
    (root / "solvers" / "krylov.py").write_text("from ._base import PlanInput\nfrom .._plan import make_plan\n")
    (root / "passes" / "__init__.py").write_text("from ._cache import choose\n")
    (root / "passes" / "_cache.py").write_text("from .. import _plan\n")
    (root / "pca.py").write_text("from .solvers._base import PlanInput\nfrom .solvers import SOLVERS, _base\n"
                                 "from .passes import choose\nimport daskpca.passes._cache\n")
    (root / "cli" / "command.py").write_text("def fit():\n    from ..passes import _cache\n")
    assert private_reaches(module_imports(root)) == [
        "daskpca.cli.command:2 `from ..passes import _cache` imports daskpca.passes._cache, private to daskpca.passes: "
        "import the name from daskpca.passes (the __all__ of daskpca/passes/__init__.py; add it there if missing)",
        "daskpca.pca:1 `from .solvers._base import PlanInput` imports daskpca.solvers._base, private to daskpca.solvers: "
        "import the name from daskpca.solvers (the __all__ of daskpca/solvers/__init__.py; add it there if missing)",
        "daskpca.pca:2 `from .solvers import SOLVERS, _base` imports daskpca.solvers._base, private to daskpca.solvers: "
        "import the name from daskpca.solvers (the __all__ of daskpca/solvers/__init__.py; add it there if missing)",
        "daskpca.pca:4 `import daskpca.passes._cache` imports daskpca.passes._cache, private to daskpca.passes: "
        "import the name from daskpca.passes (the __all__ of daskpca/passes/__init__.py; add it there if missing)"]


def test_the_architecture_doc_states_the_same_order():
    # docs/architecture.md draws the layers; a reviewer reading it must see the order this test
    # enforces, not an older one.
    doc = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    line = next((l for l in doc.splitlines() if l.startswith("Layers, top to bottom:")), None)
    assert line is not None, "docs/architecture.md must state the layers ('Layers, top to bottom: …')"
    stated = re.findall(r"`([\w.]+)`", line)
    expected = [unit for _, units in LAYERS for unit in units]
    assert stated == expected, f"docs/architecture.md states {stated}; tests/test_layers.py enforces {expected}"


def test_no_two_functions_are_copies():
    # "What several estimators share lives once": a function body written twice (docstrings
    # aside, four statements or more) is a copy that will drift.
    bodies: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            body = node.body[1:] if isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant) \
                else node.body
            if sum(isinstance(n, ast.stmt) for b in body for n in ast.walk(b)) < 4:
                continue
            key = ast.dump(ast.Module(body=body, type_ignores=[]))
            bodies.setdefault(key, []).append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}")
    copies = [places for places in bodies.values() if len(places) > 1]
    assert not copies, f"the same function body twice: {copies}; keep one and call it"


@pytest.mark.parametrize("name", ["CCA", "HilbertPCA", "MCA", "PCA", "NotFittedError", "Rotator", "SOLVERS",
                                  "lag_embed", "load", "progress", "__version__"])
def test_every_public_name_of_the_package_still_imports(name):
    import importlib

    assert getattr(importlib.import_module("daskpca"), name) is not None
    assert name in daskpca.__all__


def test_the_types_users_hold_come_from_the_public_package():
    # plan() returns a Plan and a fitted model holds a FeatureStage: both importable from daskpca.
    import numpy as np

    from daskpca import PCA, FeatureStage, Plan

    X = np.random.default_rng(0).standard_normal((50, 4))
    pca = PCA(2, weights=np.ones(4)).fit(X)
    assert isinstance(pca.plan(X), Plan) and isinstance(pca.feature_stage_, FeatureStage)
