"""The feature stage fused into the sketching solvers' first pass (randomized, krylov): the same
answer as the generic road's extra statistics read, one read fewer."""

import types

import dask
import dask.array as da
import numpy as np
import pytest

from daskpca import PCA, _features
from daskpca._features import FeatureSpec
from daskpca.exceptions import NonFiniteInputError
from daskpca.solvers import krylov, randomized
from daskpca.solvers._base import ComponentRequest

from _helpers import align_signs
from test_solver_krylov import hard_spectrum

SOLVERS = {"randomized": (randomized, {"n_power_iter": 2}), "krylov": (krylov, {"tol": 1e-6})}


def _generic(module):
    """The solver without ``fuses_features``: the generic road (an extra statistics read)."""
    return types.SimpleNamespace(__name__=module.__name__, solve=module.solve)


def _data(masked):
    X = hard_spectrum(300, 50, 3, 2.0, seed=3)
    if masked:
        X[:, [2, 11, 12, 40]] = np.nan
    return da.from_array(X, chunks=(70, 50))


def _assert_same_result(fused, generic, rtol):
    np.testing.assert_array_equal(fused.features.keep, generic.features.keep)
    np.testing.assert_array_equal(fused.features.factor, generic.features.factor)
    components, _ = align_signs(fused.components, generic.components)
    np.testing.assert_allclose(components, generic.components, rtol=0, atol=rtol)
    np.testing.assert_allclose(fused.explained_variance, generic.explained_variance, rtol=rtol)
    np.testing.assert_allclose(fused.mean, generic.mean, rtol=1e-13)
    np.testing.assert_allclose(fused.total_variance, generic.total_variance, rtol=1e-13)
    if "error_bound" in generic.info:
        np.testing.assert_allclose(fused.info["error_bound"], generic.info["error_bound"], rtol=rtol, atol=1e-13)  # round-off floor: bounds ~1e-12 differ in the last digits (slabs scaled after the shift)
    assert fused.n_passes == generic.n_passes - 1


@pytest.mark.parametrize("solver", SOLVERS)
def test_weighted_fit_equals_the_generic_road_with_one_read_fewer(solver):
    module, options = SOLVERS[solver]
    X = _data(masked=False)
    spec = FeatureSpec(np.random.default_rng(0).uniform(0.3, 3.0, X.shape[1]))
    request = ComponentRequest(3, *X.shape)
    fused = _features.solve(module, X, request, spec, random_state=5, **options)
    generic = _features.solve(_generic(module), X, request, spec, random_state=5, **options)
    assert "mask_pass" in generic.info and "mask_pass" not in fused.info
    _assert_same_result(fused, generic, rtol=1e-10)


class _Draw:
    """Stands for the seeded generator: ``standard_normal`` returns a given matrix."""

    def __init__(self, omega):
        self.omega = omega

    def standard_normal(self, shape):
        assert shape == self.omega.shape
        return self.omega.copy()


@pytest.mark.parametrize("solver", SOLVERS)
def test_masked_fit_is_the_fit_of_the_kept_features_with_the_kept_rows_of_the_draw(monkeypatch, solver):
    """Ω is drawn over all input features; its rows at masked features multiply zeros, so the
    fused fit is the generic road's fit whose Ω is the kept rows of that draw (Krylov: whose start
    block spans them, its image corrected exactly)."""
    module, options = SOLVERS[solver]
    X = _data(masked=True)
    keep = np.isfinite(X[0].compute())
    spec = FeatureSpec(np.random.default_rng(0).uniform(0.3, 3.0, X.shape[1]))
    request = ComponentRequest(3, *X.shape)
    omega = np.random.default_rng(9).standard_normal((X.shape[1], 13))
    monkeypatch.setattr(module, "as_generator", lambda _: _Draw(omega))
    fused = _features.solve(module, X, request, spec, **options)
    monkeypatch.setattr(module, "as_generator", lambda _: _Draw(omega[keep]))
    generic = _features.solve(_generic(module), X, request, spec, **options)
    assert fused.features.n_kept == 46
    _assert_same_result(fused, generic, rtol=1e-9)


@pytest.mark.parametrize("solver", SOLVERS)
def test_partially_missing_feature_is_the_generic_roads_error(solver):
    module, options = SOLVERS[solver]
    X = _data(masked=True).compute()
    X[[7, 90], 5] = np.inf
    X = da.from_array(X, chunks=(70, 50))
    spec = FeatureSpec(np.ones(X.shape[1]))
    request = ComponentRequest(3, *X.shape)
    messages = []
    for road in (module, _generic(module)):
        with pytest.raises(NonFiniteInputError, match="feature 5, finite in 298 of 300") as caught:
            _features.solve(road, X, request, spec, random_state=0, **options)
        messages.append(str(caught.value))
    assert messages[0] == messages[1]


@pytest.mark.parametrize("solver", SOLVERS)
def test_standardize_keeps_its_documented_extra_read(solver):
    X = _data(masked=True)
    _, options = SOLVERS[solver]
    with dask.config.set(scheduler="sync"):
        pca = PCA(3, solver=solver, standardize=True, random_state=0, **options).fit(X)
    assert "one extra read" in pca.solver_info_["mask_pass"]
    own = len(pca.solver_info_["bound_history"]) if solver == "krylov" else 3
    assert pca.n_passes_ == own + 1


@pytest.mark.parametrize("solver", SOLVERS)
def test_fused_fit_resumes_from_its_checkpoint_with_the_resolved_stage(tmp_path, monkeypatch, solver):
    """A killed masked, weighted fit resumes after its first pass without resolving the stage
    again (the checkpoint keeps the kept features) and ends where the uninterrupted fit ends."""
    module, options = SOLVERS[solver]
    options = {**options, "n_power_iter": 4} if solver == "randomized" else {"tol": 1e-12}
    X = da.from_array(_data(masked=True).compute(), chunks=(70, 50), name="fused-checkpoint-test")
    spec = FeatureSpec(np.random.default_rng(0).uniform(0.3, 3.0, X.shape[1]))
    request, path = ComponentRequest(3, *X.shape), tmp_path / "job.npz"
    full = _features.solve(module, X, request, spec, random_state=0, checkpoint=path, **options)
    assert not path.exists() and full.n_passes >= 4
    calls, run_pass = [], module.run_pass

    def dying_pass(*args, **kwargs):  # the fused first pass is run_first_pass: this is pass 3
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt("killed in pass 3")
        return run_pass(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(module, "run_pass", dying_pass)
        with pytest.raises(KeyboardInterrupt):
            _features.solve(module, X, request, spec, random_state=0, checkpoint=path, **options)
    with np.load(path) as saved:
        assert saved["kept_features"].sum() == 46
    resumed = _features.solve(module, X, request, spec, random_state=0, checkpoint=path, **options)
    assert resumed.info["resumed_from_pass"] == 2 and resumed.n_passes == full.n_passes - 2
    np.testing.assert_array_equal(resumed.features.keep, full.features.keep)
    np.testing.assert_array_equal(resumed.features.factor, full.features.factor)
    np.testing.assert_array_equal(resumed.components, full.components)
    np.testing.assert_array_equal(resumed.mean, full.mean)
    np.testing.assert_allclose(resumed.total_variance, full.total_variance, rtol=1e-14)


def test_the_statistics_pass_takes_a_block_a_few_rows_at_a_time_and_merges_them_exactly(monkeypatch):
    """The feature stage's statistics (also MCA's Krylov path's first read) are taken a few rows of
    a block at a time (``STATS_SLAB_BYTES``) and merged exactly: the counts, means and variances of
    every column — one missing in the first rows only, one missing wholly, one around 1e8 — are
    NumPy's; a ±inf counts as missing, as before, in whichever piece it falls."""
    import dask

    from daskpca.solvers import _iterative

    rng = np.random.default_rng(3)
    X = rng.standard_normal((300, 6)) * [1, 2, 3, 4, 5, 6] + [0, 1, 2, 3, 1e8, 5]
    X[:70, 1] = np.nan  # absent from the first pieces of the first block
    X[:, 2] = np.nan
    X[[5, 140, 299], 3] = np.nan
    monkeypatch.setattr(_iterative, "STATS_SLAB_BYTES", 8 * 6 * 16)  # 16 rows a piece: 10 pieces a block
    (stats,) = dask.compute(_iterative.column_stats_graph(da.from_array(X, chunks=(150, 6))))
    np.testing.assert_array_equal(stats.count, np.sum(~np.isnan(X), axis=0))
    with np.errstate(invalid="ignore"), pytest.warns(RuntimeWarning):
        mean, var = np.nanmean(X, axis=0), np.nanvar(X, axis=0, ddof=1)
    observed = stats.count > 0
    np.testing.assert_allclose(stats.mean[observed], mean[observed], rtol=1e-14, atol=1e-12)
    np.testing.assert_allclose(stats.variance()[observed], var[observed], rtol=1e-12)
    X[213, 4] = np.inf
    (with_inf,) = dask.compute(_iterative.column_stats_graph(da.from_array(X, chunks=(150, 6))))
    assert with_inf.count[4] == 299 and not with_inf.nonfinite.count
    kept = np.delete(X[:, 4], 213)
    np.testing.assert_allclose([with_inf.mean[4], with_inf.variance()[4]], [kept.mean(), kept.var(ddof=1)], rtol=1e-12)
