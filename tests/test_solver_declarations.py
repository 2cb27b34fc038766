"""Solver declarations: the plans they make are the plans the planner made before them.

``tests/fixtures/plans_v1.json`` records, from the planner as it stood before the solvers declared
their own costs (issue 39), the plans of a set of inputs — every candidate's passes, flops,
seconds, task bytes and feasibility, the chosen solver and its reason. The planner must
reproduce them (floats to rtol 1e-12). The machine's cores and memory are fixed by the test
(16 threads, 8 GiB each), so the fixture does not depend on where it runs.

Regenerate (only when a plan is meant to change, and say why in the commit):
``DASKPCA_REGENERATE_PLANS=1 python -m pytest tests/test_solver_declarations.py -k frozen``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import os
from pathlib import Path

import dask.array as da
import numpy as np
import pytest

from daskpca import PCA
from daskpca import _plan
from daskpca.passes import _cache, _geometry

import _device_standin as standin

FIXTURE = Path(__file__).parent / "fixtures" / "plans_v1.json"
GiB = 2**30

#: ``name: (shape, chunks, dtype, PCA keywords, worker memory per thread, device)``; device:
#: None (host chunks), "cuda" (host chunks moved up by ``device="cuda"``), "resident" (chunks on
#: the stand-in device).
CASES = {
    "tall": ((1_000_000, 500), (20_000, 500), "f4", dict(n_components=20), 8 * GiB, None),
    "tall-f8-tol": ((1_000_000, 500), (20_000, 500), "f8", dict(n_components=20, tol=1e-4), 8 * GiB, None),
    "wide": ((2_000, 200_000), (2_000, 10_000), "f4", dict(n_components=20), 8 * GiB, None),
    "both-large": ((1_000_000, 100_000), (2_000, 100_000), "f4", dict(n_components=20), 8 * GiB, None),
    "fraction": ((100_000, 4_000), (5_000, 4_000), "f4", dict(n_components=0.95), 8 * GiB, None),
    "tol-loose": ((200_000, 8_000), (12_500, 8_000), "f4", dict(n_components=10, tol=1e-3), 8 * GiB, None),
    "tol-tight": ((200_000, 8_000), (12_500, 8_000), "f4", dict(n_components=10, tol=1e-10, max_passes=30), 8 * GiB, None),
    "tol-budget": ((200_000, 8_000), (12_500, 8_000), "f4", dict(n_components=10, tol=1e-8, max_passes=6), 8 * GiB, None),
    "small-memory": ((1_000_000, 20_000), (200, 20_000), "f4", dict(n_components=10), 1 * GiB, None),
    "nothing-fits": ((100_000, 30_000), (10_000, 30_000), "f4", dict(n_components=10), 8 * 2**20, None),
    "rows-only": ((8_760, 65_160), (100, 65_160), "f4", dict(n_components=20), 8 * GiB, None),
    "requested-randomized": ((10_000, 300), (1_000, 300), "f4", dict(n_components=5, solver="randomized", n_power_iter=3),
                             8 * GiB, None),
    "requested-gram": ((3_000, 50_000), (3_000, 5_000), "f8", dict(n_components=5, solver="gram"), 8 * GiB, None),
    "standardized": ((50_000, 2_000), (5_000, 2_000), "f4", dict(n_components=8, standardize=True), 8 * GiB, None),
    "cached": ((200_000, 8_000), (12_500, 8_000), "f4", dict(n_components=10, cache="memory"), 8 * GiB, None),
    "device-moved": ((200_000, 8_000), (12_500, 8_000), "f4", dict(n_components=10, device="cuda"), 8 * GiB, "cuda"),
    "device-moved-wide": ((2_000, 200_000), (2_000, 10_000), "f4", dict(n_components=20, device="cuda"), 8 * GiB, "cuda"),
    "device-resident": ((200_000, 3_000), (20_000, 3_000), "f4", dict(n_components=10, tol=1e-6), 8 * GiB, "resident"),
    "device-resident-tsqr": ((50_000, 1_000), (10_000, 1_000), "f8", dict(n_components=10, solver="tsqr"), 8 * GiB,
                             "resident"),
}


def make(case, monkeypatch) -> _plan.Plan:
    shape, chunks, dtype, params, per_thread, device = CASES[case]
    monkeypatch.setattr(_plan, "what_runs", lambda: (None, (16, per_thread, "16 threads (the test's)")))
    monkeypatch.setattr(_cache, "memory_room", lambda working, machine=None: (64 * GiB, "the test's 64 GiB"))
    if device is not None:
        standin.use_as_cuda(monkeypatch)
        monkeypatch.setattr(standin.StandInBackend, "memory", lambda self: (140 * GiB, 140 * GiB))
        monkeypatch.setattr(_geometry, "device_threads", lambda: 16)  # the device shared by 16 threads
    params = {"cache": False, **params}
    X = da.zeros(shape, chunks=chunks, dtype=dtype)
    if device == "resident":
        X = standin.dask_on_device(X)
    return PCA(**params).plan(X)


def record(plan: _plan.Plan) -> dict:
    """The plan's figures, JSON-able."""
    def estimate(e):
        row = dataclasses.asdict(e)
        return {key: value for key, value in row.items()}

    return {
        "solver": plan.solver, "reason": plan.reason, "runner_up": plan.runner_up, "warnings": list(plan.warnings),
        "default_tol": plan.default_tol, "task_memory_budget": plan.task_memory_budget, "memory_source": plan.memory_source,
        "seconds": plan.seconds, "passes": plan.passes, "most_passes": plan.most_passes,
        "cache_seconds": None if plan.cache is None else plan.cache.saved,
        "estimates": [estimate(e) for e in plan.estimates],
    }


def assert_same(got, want, where="plan"):
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), f"{where}: keys {sorted(got)} != {sorted(want)}"
        for key in want:
            assert_same(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: {got!r} != {want!r}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{where}[{i}]")
    elif isinstance(want, float) and not isinstance(got, bool) and isinstance(got, (int, float)):
        assert math.isclose(got, want, rel_tol=1e-12, abs_tol=0.0) or got == want, f"{where}: {got!r} != {want!r}"
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


def test_frozen_plans_are_reproduced(monkeypatch):
    got = {}
    for case in CASES:
        with monkeypatch.context() as patch:
            got[case] = json.loads(json.dumps(record(make(case, patch))))
    if os.environ.get("DASKPCA_REGENERATE_PLANS"):
        FIXTURE.write_text(json.dumps(got, indent=1, ensure_ascii=False, sort_keys=True) + "\n")
    want = json.loads(FIXTURE.read_text())
    assert set(got) == set(want)
    for case in CASES:
        assert_same(got[case], want[case], case)


#: The planners still inline in their estimators (issue 39: Hilbert's, MCA's, CCA's), frozen the
#: same way in ``plans_estimators_v1.json`` so that moving them behind declarations is checked too:
#: ``name: (estimator, keywords, X shape and chunks, Y shape and chunks or None, worker memory per thread)``.
ESTIMATOR_CASES = {
    "hilbert-exact": ("HilbertPCA", dict(n_components=5), ((2_000, 300), (2_000, 50)), None, 8 * GiB),
    "hilbert-row-blocks": ("HilbertPCA", dict(n_components=5), ((2_000, 300), (500, 50)), None, 8 * GiB),
    "hilbert-krylov-auto": ("HilbertPCA", dict(n_components=5), ((20_000, 300), (20_000, 50)), None, 512 * 2**20),
    "hilbert-krylov-tol": ("HilbertPCA", dict(n_components=5, solver="krylov", tol=1e-4), ((2_000, 300), (2_000, 50)), None,
                           8 * GiB),
    # Since Hilbert plans through the one planner (by predicted time: the exact road's n×n eigh
    # against Krylov to the default accuracy), its exact road is chosen where every eigenvalue is.
    "hilbert-fraction": ("HilbertPCA", dict(n_components=0.9), ((2_000, 300), (2_000, 50)), None, 8 * GiB),
    "hilbert-one-step-per-chunk": ("HilbertPCA", dict(n_components=4), ((8_760, 65_160), (1, 65_160)), None, 8 * GiB),
    "mca-exact": ("MCA", dict(n_components=3), ((2_000, 300), (2_000, 50)), ((2_000, 120), (500, 120)), 8 * GiB),
    "mca-krylov-auto": ("MCA", dict(n_components=3), ((20_000, 3_000), (1_000, 3_000)), ((20_000, 2_000), (1_000, 2_000)),
                        16 * 2**20),
    "mca-krylov-tol": ("MCA", dict(n_components=3, solver="krylov", tol=1e-5), ((2_000, 300), (2_000, 50)),
                       ((2_000, 120), (500, 120)), 8 * GiB),
    "cca-exact": ("CCA", dict(n_components=3), ((2_000, 300), (2_000, 50)), ((2_000, 120), (500, 120)), 8 * GiB),
    "cca-pca-auto": ("CCA", dict(n_components=3), ((20_000, 3_000), (1_000, 3_000)), ((20_000, 2_000), (1_000, 2_000)),
                     16 * 2**20),
}
ESTIMATOR_FIXTURE = Path(__file__).parent / "fixtures" / "plans_estimators_v1.json"


def make_estimator_plan(case, monkeypatch) -> dict:
    import daskpca

    estimator, params, x, y, per_thread = ESTIMATOR_CASES[case]
    monkeypatch.setattr(_plan, "what_runs", lambda: (None, (16, per_thread, "16 threads (the test's)")))
    monkeypatch.setattr(_cache, "memory_room", lambda working, machine=None: (64 * GiB, "the test's 64 GiB"))
    arrays = [da.zeros(shape, chunks=chunks, dtype="f4") for shape, chunks in ((x,) if y is None else (x, y))]
    if estimator != "CCA":  # CCA keeps no pass cache
        params = {"cache": False, **params}
    plan = getattr(daskpca, estimator)(**params).plan(*arrays)
    if estimator in ("MCA", "CCA"):  # the one planner's plan, read for the figures frozen before it was
        return coupled_record(estimator, plan)
    if isinstance(plan, _plan.Plan):
        return record(plan)
    row = dataclasses.asdict(plan)
    cache = row.pop("cache", None)
    row["cache_kind"] = None if cache is None else cache.get("kind")
    return row


def coupled_record(estimator: str, plan: _plan.Plan) -> dict:
    """MCA's and CCA's plans as their own planners recorded them (path, reason, passes, the chosen
    path's largest task against the budget), read from the one planner's :class:`~daskpca._plan.Plan`."""
    assert isinstance(plan, _plan.Plan) and plan.fields is not None
    row = {"path": plan.path, "reason": plan.reason, "n_passes": plan.n_passes,
           "task_bytes": plan.estimate(plan.solver).task_bytes, "budget": plan.task_memory_budget,
           "cache_kind": None if plan.cache is None else plan.cache.kind}
    if estimator == "MCA":
        row.update(budget_source=plan.memory_source, shape=[plan.n_samples, *plan.fields])
    return row


def test_frozen_estimator_plans_are_reproduced(monkeypatch):
    got = {}
    for case in ESTIMATOR_CASES:
        with monkeypatch.context() as patch:
            got[case] = json.loads(json.dumps(make_estimator_plan(case, patch)))
    if os.environ.get("DASKPCA_REGENERATE_PLANS"):
        ESTIMATOR_FIXTURE.write_text(json.dumps(got, indent=1, ensure_ascii=False, sort_keys=True) + "\n")
    want = json.loads(ESTIMATOR_FIXTURE.read_text())
    assert set(got) == set(want)
    for case in ESTIMATOR_CASES:
        assert_same(got[case], want[case], case)
    chosen = {case: plan.get("solver", plan.get("path")) for case, plan in want.items()}
    assert {"hilbert", "hilbert-krylov", "exact", "krylov", "pca"} <= set(chosen.values()), chosen


def test_the_frozen_plans_cover_every_choice():
    """The fixture is worth its name: it holds every solver chosen by some rule, infeasible
    candidates, device prices and the re-laid-out Gram road."""
    want = json.loads(FIXTURE.read_text())
    chosen = {plan["solver"] for plan in want.values()}
    assert {"covariance", "gram", "krylov", "randomized", "tsqr"} <= chosen
    assert any(not e["feasible"] for plan in want.values() for e in plan["estimates"])
    assert any(e["flop_rate"] for plan in want.values() for e in plan["estimates"])
    assert any(e["copy_passes"] for plan in want.values() for e in plan["estimates"])
    assert np.isfinite([plan["seconds"] for plan in want.values() if plan["seconds"] is not None]).all()


# ------------------------------------------------------------------------------- declarations


def test_the_planner_names_no_solver():
    """Every solver's costs and capabilities are in its declaration: the planner's source names none
    (no quoted name, no import of a solver module) — nor the coupled estimators' paths."""
    import re

    from daskpca.solvers import SOLVERS
    from daskpca.solvers.canonical import CCA_PATHS
    from daskpca.solvers.cross_covariance import MCA_PATHS

    source = Path(_plan.__file__).read_text()
    coupled = {*MCA_PATHS, *CCA_PATHS} - {"exact"}  # 'exact' is also the plan table's column
    for name in [*SOLVERS, *sorted(coupled), "canonical", "cross_covariance"]:
        assert not re.search(rf"""['"]{name}['"]|solvers\\.{name}\\b|import .*\\b{name}\\b""", source), name


def test_every_registered_solver_declares_itself_in_its_own_module():
    from daskpca.solvers import SOLVERS
    from daskpca.solvers._base import SolverDeclaration

    for name, declaration in SOLVERS.items():
        assert isinstance(declaration, SolverDeclaration) and declaration.name == name
        module = declaration.solve.__module__
        assert module == f"daskpca.solvers.{name}" and declaration.cost.__module__ == module, name
        assert declaration.OPTIONS == declaration.options and declaration.EXACT == declaration.exact


def test_registration_refuses_a_declaration_without_a_cost_model():
    from daskpca.solvers import SOLVERS, register
    from daskpca.solvers._base import SolverDeclaration

    with pytest.raises(ValueError, match=r"solver 'nocost' cannot be registered without a cost model \(cost=\)"):
        register(SolverDeclaration("nocost", lambda X, request, random_state=None: None, cost=None))
    with pytest.raises(TypeError, match=r"expected a daskpca.solvers._base.SolverDeclaration"):
        register(object())
    assert "nocost" not in SOLVERS


# -------------------------------------------------------------------- a solver declared in a test


def _dense_solve(X, request, *, random_state=None):
    """A toy exact solver: the whole (small) matrix read once, its covariance and NumPy's eigh."""
    from daskpca.solvers._base import SolverResult

    data = np.asarray(X.compute(), dtype=np.float64)
    mean = data.mean(axis=0)
    centered = data - mean
    values, vectors = np.linalg.eigh(centered.T @ centered / (data.shape[0] - 1))
    values, vectors = values[::-1], vectors[:, ::-1]
    spectrum = np.clip(values[: min(data.shape)], 0.0, None)
    k = request.resolve(spectrum)
    return SolverResult(np.ascontiguousarray(vectors[:, :k].T), values[:k].copy(), mean, data.shape[0],
                        float(np.trace(centered.T @ centered) / (data.shape[0] - 1)), n_passes=1, spectrum=spectrum,
                        info={"error_bound": 0.0})


def _dense_cost(shape):
    """One read; the n×d matrix and its d×d covariance held in one task (the client's)."""
    from daskpca.solvers._base import Cost

    return Cost(1, shape.n * shape.d * shape.d + 4 / 3 * shape.d**3, (shape.n + shape.d) * shape.d * 8, "dense NumPy",
                tasks=1)


@pytest.fixture
def dense():
    from daskpca.solvers import SOLVERS, register
    from daskpca.solvers._base import SolverDeclaration

    declaration = register(SolverDeclaration("dense", _dense_solve, cost=_dense_cost, summary="dense NumPy", exact=True))
    yield declaration
    SOLVERS.pop("dense")


def test_a_solver_declared_in_one_place_is_planned_fitted_listed_and_refused_like_the_others(dense, tmp_path, capsys):
    from _helpers import low_rank_data, sin_theta, write_zarr

    from daskpca import cli
    from daskpca.cli.options import solver_help
    from daskpca.exceptions import InvalidParameterError

    X = low_rank_data(600, 12, dtype=np.float64)
    lazy = da.from_array(X, chunks=(150, 12))
    # plan(): priced from its cost model, exact, its passes stated (no bare StopIteration).
    plan = PCA(3, solver="dense").plan(lazy)
    assert plan.solver == "dense" and plan.passes == plan.most_passes == 1
    estimate = plan.estimate("dense")
    assert estimate.exact and estimate.feasible and estimate.flops == 600 * 12 * 12 + 4 / 3 * 12**3
    assert estimate.seconds is not None and "dense NumPy" in str(plan)
    assert "dense" in {e.name for e in PCA(3).plan(lazy).estimates}  # solver="auto" weighs it too
    # fit: the one road (the feature stage's generic read before a solver that does not fuse it).
    fitted = PCA(3, solver="dense").fit(lazy)
    exact = PCA(3, solver="covariance").fit(lazy)
    assert fitted.solver_ == "dense" and fitted.n_passes_ == 1 and fitted.error_bound_ == 0.0
    assert sin_theta(fitted.components_, exact.components_) < 1e-10
    np.testing.assert_allclose(fitted.explained_variance_, exact.explained_variance_, rtol=1e-10)
    weighted = PCA(3, solver="dense", weights=np.linspace(0.5, 1.5, 12)).fit(lazy)
    assert weighted.n_passes_ == 2  # no fuses_features: the generic statistics read first
    # The knob refusals read its options: it takes none, and tol is met (exact).
    PCA(3, solver="dense", tol=1e-3).plan(lazy)
    with pytest.raises(InvalidParameterError, match=r"n_power_iter=3 would be ignored: you asked for solver 'dense'"):
        PCA(3, solver="dense", n_power_iter=3).plan(lazy)
    # The CLI: --solver's help lists it, inspect's plan prices it.
    assert re.search(r"\bdense\b", solver_help())
    write_zarr(tmp_path / "matrix.zarr", X, (150, 12))
    capsys.readouterr()
    assert cli.main(["inspect", str(tmp_path / "matrix.zarr"), "--n-components", "3"]) == 0
    table = capsys.readouterr().out
    assert re.search(r"^\s+dense\s+yes\s+1\s", table, re.MULTILINE), table


# ------------------------------------------------------------------------------------ the bounds


def test_the_error_bounds_live_behind_one_module_that_the_solvers_call():
    """Plain Ritz, the refined span, Wedin's and Hilbert's tangent: one module (``_bounds``), one
    contract; no solver reaches into another's private bound."""
    import daskpca.solvers as solvers
    from daskpca.solvers import _bounds

    root = Path(solvers.__file__).parent
    for module in ("krylov", "hilbert_krylov", "cross_covariance"):
        source = (root / f"{module}.py").read_text()
        assert "from ._bounds import" in source, module
        assert "_plain_ritz" not in source and "def _tangent" not in source, module
    # The contract at its edges: modes not apart → 1 (nothing certified), never negative or infinite.
    sigma = np.array([3.0, 2.0, 1.999])
    assert _bounds.wedin(sigma, np.full(3, 0.1), np.full(3, 0.1), 2, full=False) == 1.0
    assert _bounds.wedin(sigma, np.full(3, 1e-9), np.full(3, 1e-9), 1, full=False) == pytest.approx(np.sqrt(2) * 1e-9 / 0.999999999)
    assert _bounds.wedin(sigma[:2], np.full(2, 1e-12), np.full(2, 1e-12), 2, full=True) < 1e-11
    assert _bounds.tangent_bound(1.0) == 1.0 and _bounds.tangent_bound(0.6) == pytest.approx(0.75)


# ------------------------------------------------------------- MCA and CCA: the one planner too


def _toy_cross_cost(shape):
    """One read of both fields, a row block of both in float64 per task."""
    from daskpca.solvers._base import Cost

    dx, dy = shape.fields
    return Cost(1, 2 * shape.n * dx * dy, shape.row_block * (dx + dy) * 8, "dense NumPy cross product")


def _toy_cross_solve(X, Y, *, resolve, choose_k, random_state=None):
    """A toy path: both fields in memory, NumPy's SVD of their cross-covariance (no missing values)."""
    from daskpca.solvers.cross_covariance import CrossSolution

    x, y = (np.asarray(M.compute(), dtype=np.float64) for M in (X, Y))
    n = x.shape[0]
    stages = (resolve[0](np.full(x.shape[1], n), n, x.var(axis=0, ddof=1)),
              resolve[1](np.full(y.shape[1], n), n, y.var(axis=0, ddof=1)))
    k = choose_k(n, *stages)
    left, values, right_t = np.linalg.svd((x - x.mean(0)).T @ (y - y.mean(0)) / (n - 1), full_matrices=False)
    return CrossSolution(left[:, :k].T, right_t[:k], values[:k], n, x.mean(0), y.mean(0), stages, n_passes=1,
                         error_bound=0.0, total_squared=float(np.sum(values**2)), sum_values=float(np.sum(values)), info={})


def test_mca_and_cca_plan_through_the_one_planner_with_the_paths_they_are_given(monkeypatch):
    """A path declared for MCA (or CCA) is priced from its cost model by the one planner, chosen by
    its rules (here: the road taken instead of an exact one that does not fit, with that road's own
    words) and run through its declaration; the planner is not told which estimator asks."""
    import daskpca
    from daskpca.solvers import canonical, cross_covariance
    from daskpca.solvers._base import SolverDeclaration

    toy = SolverDeclaration("toy", _toy_cross_solve, cost=_toy_cross_cost, summary="dense NumPy", fallback="instead")
    rng = np.random.default_rng(2)
    signals = rng.standard_normal((300, 3)) * [3.0, 2.0, 1.0]
    X = signals @ rng.standard_normal((3, 12)) + 0.4 * rng.standard_normal((300, 12))
    Y = signals @ rng.standard_normal((3, 8)) + 0.4 * rng.standard_normal((300, 8))
    x, y = da.from_array(X, chunks=(100, 12)), da.from_array(Y, chunks=(60, 8))
    for estimator, paths, params in (("MCA", cross_covariance.MCA_PATHS, {}),
                                     ("CCA", canonical.CCA_PATHS, dict(n_pca_modes=(4, 4)))):
        with monkeypatch.context() as patch:
            patch.setitem(paths, "toy", toy)
            plan = getattr(daskpca, estimator)(3, **params).plan(x, y)
            estimate = plan.estimate("toy")
            assert plan.fields == (12, 8) and plan.path == "exact" and isinstance(plan, _plan.Plan)
            assert estimate.passes == 1 and estimate.flops == 2 * 300 * 12 * 8 and estimate.seconds is not None
            assert estimate.task_bytes == 100 * 20 * 8 and "toy" in str(plan)
    # MCA with the toy as its only other road and a budget the exact path does not fit: the toy
    # is chosen for the exact path's reason, and the fit runs it.
    monkeypatch.setitem(cross_covariance.MCA_PATHS, "toy", toy)
    monkeypatch.delitem(cross_covariance.MCA_PATHS, "krylov")
    exact_bytes = daskpca.MCA(3).plan(x, y).estimate("exact").task_bytes
    reference = daskpca.MCA(3).fit(x, y)
    monkeypatch.setattr(_plan, "task_memory_budget", lambda resources=None: (exact_bytes - 1, "a test's budget"))
    plan = daskpca.MCA(3).plan(x, y)
    assert plan.path == "toy" and plan.reason.startswith("the 12×8 cross-covariance needs") and not plan.warnings
    fitted = daskpca.MCA(3).fit(x, y)
    assert reference.solver_ == "exact" and fitted.solver_ == "toy" and fitted.n_passes_ == 1
    np.testing.assert_allclose(fitted.singular_values_, reference.singular_values_, rtol=1e-10)


def test_the_coupled_estimators_hold_no_cost_formula_of_their_own():
    """MCA's and CCA's costs are in their paths' declarations: the estimators ask no budget, price
    no cache, count no bytes."""
    import daskpca.coupled

    for path in Path(daskpca.coupled.__file__).parent.glob("*.py"):
        source = path.read_text()
        for pattern in (r"task_memory_budget", r"_cache\.choose", r"_task_bytes", r"format_bytes", r"\*\s*(8|16)\b"):
            assert not re.search(pattern, source), (path.name, pattern)
