"""One fit road: plain, weighted, standardized and labeled fits reach the solvers the same way.

And the package's shape that keeps it so: no import cycles between modules (lazy imports
included; the layers between packages are tests/test_layers.py's), a labeled layer that touches
only public estimator state, and a call road short enough to follow.
"""

from __future__ import annotations

import ast
import re
import sys
import types
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import daskpca
from daskpca import PCA, _features
from daskpca.exceptions import IllConditionedWarning
from daskpca.solvers import SOLVERS
from daskpca.solvers._base import SolverResult

from _helpers import reference_pca, sin_theta
from test_layers import _module_name, imports_of

PACKAGE = Path(daskpca.__file__).parent
#: Module hops of a library fit and of a CLI fit (test_a_fit_follows_a_short_road_through_the_modules).
#: 60 → 61 (2026-11-27, seventh session): the BLAS controller is found once and kept (_linalg._blas),
#: one call back into _linalg after the scheduler is asked, where threadpoolctl searched every time.
LIBRARY_HOPS, CLI_HOPS = 61, 120


def _field(n_time=60, n_lat=6, n_lon=8, seed=0, rank_deficient=False):
    """A (time, lat, lon) field with a land mask (NaN for every time step at 5 points)."""
    rng = np.random.default_rng(seed)
    d = n_lat * n_lon
    basis = np.linalg.qr(rng.standard_normal((d, 4)))[0]
    scales = [5.0, 3.0, 2.0, 1e-7 if rank_deficient else 1.0]
    data = (rng.standard_normal((n_time, 4)) * scales) @ basis.T
    if not rank_deficient:
        data += 0.1 * rng.standard_normal((n_time, d))
    data = data.reshape(n_time, n_lat, n_lon) + 10.0
    data[:, 0, :5] = np.nan
    return xr.DataArray(
        data, dims=("time", "lat", "lon"),
        coords={"time": np.arange(n_time), "lat": np.linspace(-50, 50, n_lat), "lon": np.arange(n_lon) * 10.0},
        name="sst",
    )


@pytest.fixture
def spy(monkeypatch):
    """Record every call of the one function that runs a solver."""
    calls = []
    real = _features.solve

    def recording(module, X, request, spec, **kwargs):
        calls.append((getattr(module, "name", None) or module.__name__.rsplit(".", 1)[-1], spec))  # a declaration or a module
        return real(module, X, request, spec, **kwargs)

    monkeypatch.setattr(_features, "solve", recording)
    return calls


@pytest.mark.parametrize("solver", ["covariance", "gram", "randomized"])
def test_plain_weighted_standardized_and_labeled_fits_take_the_same_call(spy, solver):
    field = _field()
    matrix = field.fillna(0.0).values.reshape(field.sizes["time"], -1)
    weights = np.linspace(0.5, 1.5, matrix.shape[1])
    options = dict(n_components=3, solver=solver, random_state=0)
    PCA(**options).fit(matrix)
    PCA(weights=weights, **options).fit(matrix)
    PCA(standardize=True, **options).fit(matrix)
    PCA(weights="coslat", **options).fit(field, sample_dims="time")
    assert [name for name, _ in spy] == [solver] * 4
    specs = [spec for _, spec in spy]
    assert specs[0] is None  # a plain fit has no feature stage
    assert np.allclose(specs[1].weights, weights) and not specs[1].standardize
    assert specs[2].standardize
    assert specs[3].weights.shape == (field.sizes["lat"] * field.sizes["lon"],)


@pytest.mark.parametrize("how", ["weighted", "labeled"])
def test_ill_conditioning_warning_fires_for_weighted_and_labeled_fits(how):
    field = _field(rank_deficient=True)
    with pytest.warns(IllConditionedWarning, match="tsqr"):
        if how == "labeled":
            PCA(4, solver="covariance").fit(field, sample_dims="time")
        else:
            matrix = field.isel(lat=slice(1, None)).values.reshape(field.sizes["time"], -1)
            PCA(4, solver="covariance", weights=np.full(matrix.shape[1], 2.0)).fit(matrix)


def _dummy_solve(X, request, *, random_state=None):
    """A solver that knows nothing of feature stages: LAPACK SVD of the whole (small) matrix."""
    data = np.asarray(X.compute(), dtype=np.float64)
    components, variance, mean = reference_pca(data)
    k = request.fixed()
    return SolverResult(components[:k], variance[:k], mean, data.shape[0], float(variance.sum()), n_passes=1)


def test_a_new_solver_works_on_labeled_input_without_touching_the_labeled_layer(monkeypatch):
    dummy = types.ModuleType("daskpca.solvers.dummy")
    dummy.solve = _dummy_solve
    monkeypatch.setitem(SOLVERS, "dummy", dummy)
    field = _field()
    pca = PCA(3, solver="dummy", weights="coslat").fit(field, sample_dims="time")
    exact = PCA(3, solver="covariance", weights="coslat").fit(field, sample_dims="time")
    # The generic road: one read for the mask and weights, then the solver's own pass.
    assert pca.n_passes_ == 2 and "mask_pass" in pca.solver_info_
    assert pca.solver_info_["n_masked_features"] == 5
    assert sin_theta(pca.components_, exact.components_) < 1e-10
    np.testing.assert_allclose(pca.explained_variance_, exact.explained_variance_, rtol=1e-10)
    maps = pca.to_xarray()["components"]
    assert maps.dims == ("mode", "lat", "lon") and bool(maps.isel(lat=0, lon=slice(0, 5)).isnull().all())
    scores, exact_scores = pca.transform(field), exact.transform(field)
    np.testing.assert_allclose(np.abs(scores.values), np.abs(exact_scores.values), rtol=1e-8, atol=1e-10)


# ---------------------------------------------------------------------------------------- shape


def _imports(path: Path, modules: set[str]) -> set[str]:
    """daskpca modules imported anywhere in ``path`` (function-level imports included; read by
    test_layers.imports_of). Importing a module of a subpackage also runs that subpackage's
    ``__init__`` (the root package's is not counted: Python lets submodules import siblings while
    it is initialising)."""
    name = _module_name(path)
    found = set()
    for target in {found_import.target for found_import in imports_of(path, modules)}:
        found.add(target)
        parent = target.rpartition(".")[0]
        if parent and parent != "daskpca" and parent != name and not name.startswith(parent + "."):
            found.add(parent)
    return found


def test_the_package_has_no_import_cycles():
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {_module_name(p) for p in paths}
    graph = {_module_name(p): _imports(p, modules) - {"daskpca"} for p in paths}
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                cycle = stack[stack.index(nxt):] + [nxt]
                pytest.fail("import cycle: " + " → ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module)
    # The walk sees the edges that matter (guards against a walker that finds nothing).
    assert "daskpca.labeled" in graph["daskpca.pca"] and "daskpca._features" in graph["daskpca.pca"]


def test_the_labeled_layer_uses_only_public_estimator_state():
    private = re.compile(r"\b(pca|estimator|model|self\.estimator)\._[a-z]")
    for path in sorted((PACKAGE / "labeled").glob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            assert not private.search(line), f"{path.name}:{number} reaches into the estimator: {line.strip()}"


def test_weights_are_applied_in_float64_so_a_float32_field_loses_nothing_to_them():
    # float32 data, weights that are not representable in float32: the weighted fit must equal a
    # float64 reference on the float64-weighted data to round-off, not to float32's 6e-8.
    rng = np.random.default_rng(3)
    n, d = 400, 60
    signal = (rng.standard_normal((n, 3)) * [3.0, 2.0, 1.5]) @ np.linalg.qr(rng.standard_normal((d, 3)))[0].T
    X = (signal + 0.3 * rng.standard_normal((n, d)) + 20.0).astype(np.float32)
    weights = np.sqrt(np.cos(np.deg2rad(np.linspace(-70, 70, d))))
    components, variance, _ = reference_pca(X.astype(np.float64) * weights)
    for solver in ("covariance", "gram", "tsqr"):
        pca = PCA(3, solver=solver, weights=weights).fit(X)
        assert sin_theta(pca.components_, components[:3]) < 1e-11, solver
        np.testing.assert_allclose(pca.explained_variance_, variance[:3], rtol=1e-11)
        assert pca.transform(X).dtype == np.float32


def test_the_public_api_is_where_users_import_it():
    # The layout moved modules into subpackages (store/, cli/, eof/, solvers' kernels); none of
    # these user-facing paths moved with them.
    import importlib
    import importlib.metadata

    from daskpca import MCA, PCA, HilbertPCA, Rotator, lag_embed, load  # noqa: F401
    from daskpca.cli import main
    from daskpca.io import open_xarray, write_array, read_marker  # noqa: F401
    from daskpca.significance import north_test  # noqa: F401

    # daskpca.load returns the class that wrote the store (PCA, HilbertPCA, MCA, CCA, Rotator): one reader.
    from daskpca.models import load as load_model

    assert callable(main) and load is load_model
    assert callable(importlib.import_module("daskpca.plot").scree)
    entry = importlib.metadata.entry_points(group="console_scripts", name="daskpca")
    assert [e.value for e in entry] == ["daskpca.cli:main"]


def test_the_top_of_the_package_holds_only_public_faces_and_fit_stages():
    top = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert len(top) <= 12, f"the top of daskpca/ holds {len(top)} modules: {top}; put each in its subpackage"


def _module_hops(fit) -> tuple[int, Counter]:
    """Changes of daskpca module between calls in a trace of ``fit()`` (run once before, so that
    imports and caches are warm), and how often each module was entered."""
    fit()
    hops, entered, last = 0, Counter(), [None]

    def trace(frame, event, arg):
        nonlocal hops
        module = frame.f_globals.get("__name__", "")
        if event == "call" and module.startswith("daskpca") and module != last[0]:
            hops += 1
            entered[module] += 1
            last[0] = module

    sys.setprofile(trace)
    try:
        fit()
    finally:
        sys.setprofile(None)
    return hops, entered


def test_a_fit_follows_a_short_road_through_the_modules(tmp_path):
    # A call trace of PCA(20).fit(X) on a small zarr array, counting changes of daskpca module
    # between calls: 62 hops, pca.py entered 13 times, before the estimator layer (2026-11-25;
    # the planner asked pca.py for every solver's reads one by one); 54 and 6 after; with the pass cache's own
    # calls (2026-11-26) 108 and 6, where main had 124 and 13; 146 and 7 before the solvers
    # declared their own costs, 167 and 7 after (2026-11-27: the planner calls each registered
    # solver's cost model in its own module, seven of them, ~3 hops each); LIBRARY_HOPS after the
    # cache's facts were gathered once per plan and the cost models all run before the estimates
    # are made (2026-11-27; the CLI's fit, CLI_HOPS, had 304 before); the CLI's fit 245 → CLI_HOPS
    # after its paths were put as meant once (MeantPath), the URL test moved to store/paths and
    # asked once per claim, the folder checked once when the claim is taken, and a model's
    # parameters serialised once (2026-11-27; issue 39); 101/207 → LIBRARY_HOPS/CLI_HOPS after the
    # planner asked the scheduler and the device once each and each solver's read budget came
    # with its cost (Cost.most_passes) instead of a second hook; the CLI's 196 → CLI_HOPS after a
    # MeantPath carried whether it is a URL to the claim, the publisher, the writer and the
    # integrity record, a model saved alone was published by its own save, and the command's
    # checks were made in runs of one module (2026-11-27; issue 39); the library's 90 → LIBRARY_HOPS
    # and the CLI's 176 → CLI_HOPS after the cost models read the pass machinery's memory figures
    # from their input, the planner asked each fact of the job once, a plan carried the input it
    # prepared (the CLI's fit prepared it twice) and the cache row the job's facts priced, and a
    # model's info went to JSON in one step (2026-11-27, third session; issue 39). The bound on the estimator
    # is the point (a road that bounces back into it for every solver fails); the totals bound
    # the planner's and the solvers' own calls, which grow with them.
    import zarr

    from daskpca.cli import main

    store = zarr.create_array(store=str(tmp_path / "x.zarr"), shape=(400, 60), chunks=(100, 60), dtype="f8")
    store[:] = np.random.default_rng(0).standard_normal((400, 60))
    hops, entered = _module_hops(lambda: PCA(20).fit(store))
    assert entered["daskpca.pca"] <= 8 and hops <= LIBRARY_HOPS, (hops, entered.most_common(5))
    outputs = iter(range(2))
    hops, entered = _module_hops(lambda: main(["fit", str(tmp_path / "x.zarr"), "-k", "20", "--quiet",
                                               "--out", str(tmp_path / f"model{next(outputs)}.zarr")]))
    assert hops <= CLI_HOPS, (hops, entered.most_common(5))
