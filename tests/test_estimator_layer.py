"""One estimator layer: what PCA, HilbertPCA, MCA, CCA and Rotator share behaves the same for all.

The bugs the shared base fixed, each on every kind it applies to: a rotated model's history after
updates, ``plot.reconstruct`` through the feature stage, CCA's saved model; and the declared
parameter constraints and ignored-knob refusals, on the API and on the command line.
"""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr

from _helpers import assert_equal_up_to_rounding

from daskpca import CCA, MCA, PCA, HilbertPCA, Rotator, io, load, plot
from daskpca.cli import main
from daskpca.exceptions import InputError, InvalidParameterError


def _field(n=80, seed=0, start=0):
    """A labeled (time, lat, lon) field with a travelling wave, a land mask and an offset."""
    rng = np.random.default_rng(seed)
    t = np.arange(start, start + n)[:, None, None]
    lon = np.arange(8)[None, None, :]
    values = np.cos(2 * np.pi * (t / 20 - lon / 8)) * [[1.0], [2.0], [0.5]] + 0.3 * rng.standard_normal((n, 3, 8)) + 8.0
    values[:, 0, :2] = np.nan
    return xr.DataArray(values, dims=("time", "lat", "lon"), name="sst",
                        coords={"time": np.arange(start, start + n), "lat": [-30.0, 0.0, 30.0], "lon": np.arange(8) * 45.0})


def _never_read():
    raise AssertionError("the data was read before the parameters were checked")


# ------------------------------------------------------------------------ reconstruct = the road


@pytest.mark.parametrize("how", ["weighted", "masked", "standardized", "labeled"])
def test_plot_reconstruct_equals_inverse_transform_of_transform(how):
    field = _field()
    matrix = field.values.reshape(field.sizes["time"], -1)
    if how == "labeled":
        model, X = PCA(4, weights="coslat", standardize=True).fit(field, sample_dims="time"), field.isel(time=slice(0, 8))
    else:
        rows = matrix if how == "masked" else np.nan_to_num(matrix, nan=1.0)
        options = {"weighted": dict(weights=np.linspace(0.5, 3.0, rows.shape[1])), "standardized": dict(standardize=True),
                   "masked": dict(weights=np.full(rows.shape[1], 2.0))}[how]
        model, X = PCA(4, solver="covariance", **options).fit(rows), rows[:8]
    through_the_road = model.inverse_transform(model.transform(X))
    drawn = plot.reconstruct(model, X)
    if how == "labeled":
        xr.testing.assert_allclose(drawn, through_the_road)
        assert bool(drawn.isel(lat=0, lon=slice(0, 2)).isnull().all())  # masked features stay NaN
    else:
        np.testing.assert_allclose(drawn, through_the_road, rtol=1e-12, atol=1e-12)
        assert np.isnan(drawn[:, :2]).all() == (how == "masked")
        # And it is the reconstruction: with every mode kept, the data back (NaN where masked).
        full = PCA(None, solver="covariance", **options).fit(rows)
        np.testing.assert_allclose(plot.reconstruct(full, X), X, rtol=1e-9, atol=1e-9)
    fewer = plot.reconstruct(model, X, 2)
    two = model.inverse_transform(model.transform(X)[..., :2] if how != "labeled" else model.transform(X), modes=[1, 2])
    np.testing.assert_allclose(np.asarray(fewer), np.asarray(two), rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------------ one save path


def test_a_rotated_model_keeps_the_same_history_as_a_plain_one_after_updates(tmp_path):
    _field(80).to_dataset().chunk({"time": 40}).to_zarr(tmp_path / "field.zarr", consolidated=False)
    for i in range(2):
        _field(20, i + 1, start=80 + 20 * i).to_dataset().to_zarr(tmp_path / f"new{i}.zarr", consolidated=False)
    lengths = {}
    for kind, extra in (("plain", []), ("rotated", ["--rotation", "varimax"])):
        model = tmp_path / f"{kind}.zarr"
        assert main(["fit", str(tmp_path / "field.zarr"), "--sample-dims", "time", "-k", "3", "--weights", "coslat",
                     "--solver", "covariance", "--out", str(model), "--quiet", *extra]) == 0
        for i in range(2):
            assert main(["update", str(model), str(tmp_path / f"new{i}.zarr"), "--quiet"]) == 0
        lengths[kind] = len(io.history(model))
        loaded = load(model)
        assert type(loaded) is (Rotator if kind == "rotated" else PCA)
        assert getattr(loaded, "model_", loaded).n_samples_ == 120
    assert lengths == {"plain": 3, "rotated": 3}


@pytest.mark.parametrize("labeled", [False, True])
def test_cca_saves_and_loads_by_the_one_path(tmp_path, labeled):
    x, y = _field(80, 0), _field(80, 1) * 2.0 + 0.5 * _field(80, 0)
    if labeled:
        cca, args = CCA(2, n_pca_modes=[3, 4], weights="coslat").fit(x, y, sample_dims="time"), (x, y)
    else:
        rows = [np.nan_to_num(f.values.reshape(80, -1), nan=0.0) for f in (x, y)]
        cca, args = CCA(2, n_pca_modes=3, standardize=[True, False]).fit(*rows), rows  # a pair as JSON keeps it
    cca.save(tmp_path / "cca.zarr")
    back = load(tmp_path / "cca.zarr")
    assert type(back) is CCA and back.get_params() == cca.get_params()
    # The stored numbers come back bit for bit; the loaded model's transform is the same
    # arithmetic on arrays of another layout, where the BLAS kernel decides the last bit.
    np.testing.assert_array_equal(back.canonical_correlations_, cca.canonical_correlations_)
    for got, want in zip(back.transform(*args), cca.transform(*args)):
        assert_equal_up_to_rounding(got, want)
    cca.fit(*args, **({"sample_dims": "time"} if labeled else {})).save(tmp_path / "cca.zarr", overwrite=True)
    assert len(io.history(tmp_path / "cca.zarr")) == 2  # the replaced model went to the history, as for PCA
    with pytest.raises(Exception, match="holds a CCA model, not a PCA"):
        PCA.load(tmp_path / "cca.zarr")


# ------------------------------------------------------------------------ declared constraints


@pytest.mark.parametrize("make, name", [
    (lambda: CCA(2.5), "n_components=2.5"),
    (lambda: CCA(n_pca_modes=None), "n_pca_modes=None"),
    (lambda: CCA(n_pca_modes=(3, "4")), "n_pca_modes=(3, '4')"),
    (lambda: CCA(standardize="yes"), "standardize='yes'"),
    (lambda: MCA(random_state="x"), "random_state='x'"),
    (lambda: MCA(2, n_oversamples=-1), "n_oversamples=-1"),
    (lambda: MCA(2.0), "n_components=2.0"),
    (lambda: HilbertPCA(2, decay_factor="0.1"), "decay_factor='0.1'"),
    (lambda: HilbertPCA(2, whiten="no"), "whiten='no'"),
    (lambda: PCA(2, max_passes=True), "max_passes=True"),
])
def test_every_estimator_refuses_a_bad_parameter_by_name_before_any_read(make, name):
    unreadable = da.from_delayed(dask.delayed(_never_read)(), shape=(60, 6), dtype=np.float64)
    estimator = make()
    args = (unreadable, unreadable) if isinstance(estimator, (CCA, MCA)) else (unreadable,)
    with pytest.raises(InvalidParameterError, match="^" + name.replace("(", r"\(").replace(")", r"\)")) as caught:
        estimator.fit(*args)
    message = str(caught.value)
    assert "expected" in message and f"{type(estimator).__name__}(" in message  # the form and the fix


@pytest.mark.parametrize("params", [dict(n_modes=1), dict(power=0), dict(normalize="yes"), dict(rtol=0.0)])
def test_rotator_refuses_a_bad_parameter_by_name(params):
    model = PCA(3).fit(np.random.default_rng(0).standard_normal((50, 6)))
    with pytest.raises(InvalidParameterError, match=f"^{next(iter(params))}="):
        Rotator(**params).fit(model)


@pytest.mark.parametrize("params, knob", [(dict(solver="exact", max_passes=3), "max_passes"),
                                          (dict(solver="exact", n_oversamples=4), "n_oversamples")])
def test_mca_refuses_a_knob_the_path_it_runs_would_ignore(params, knob):
    unreadable = da.from_delayed(dask.delayed(_never_read)(), shape=(60, 6), dtype=np.float64)
    with pytest.raises(InvalidParameterError, match=f"^{knob}=.* would be ignored: you asked for solver 'exact'.*'krylov'"):
        MCA(2, **params).plan(unreadable, unreadable)
    # An exact path meets any tol, and under "auto" tol and max_passes are the planner's inputs.
    rows = np.random.default_rng(0).standard_normal((60, 6))
    assert MCA(2, solver="exact", tol=1e-6).fit(rows, rows[:, ::-1]).n_passes_ == 1
    assert MCA(2, tol=1e-6, max_passes=4).fit(rows, rows[:, ::-1]).solver_ == "exact"


@pytest.mark.parametrize("extra, option", [
    (["--mca", "--with", "{Y}", "--power", "3"], "--power"),
    (["--mca", "--with", "{Y}", "--lag-step", "2"], "--lag-step"),
    (["--mca", "--with", "{Y}", "--whiten"], "--whiten"),
    (["--mca", "--with", "{Y}", "--max-iter", "5"], "--max-iter"),
    (["--lag-step", "2"], "--lag-step"),
    (["--hilbert", "--max-iter", "5"], "--max-iter"),
])
def test_the_command_line_refuses_an_option_nothing_it_builds_takes(tmp_path, capsys, extra, option):
    _field(40).to_dataset().to_zarr(tmp_path / "x.zarr", consolidated=False)
    _field(40, 1).to_dataset().to_zarr(tmp_path / "y.zarr", consolidated=False)
    extra = [e.replace("{Y}", str(tmp_path / "y.zarr")) for e in extra]
    code = main(["fit", str(tmp_path / "x.zarr"), "--sample-dims", "time", "-k", "2", "--out", str(tmp_path / "m.zarr"),
                 "--quiet", *extra])
    err = capsys.readouterr().err
    assert code == 2 and f"{option} would be ignored" in err and f"Drop {option}" in err, err
    assert not (tmp_path / "m.zarr").exists()


def test_mca_on_the_command_line_takes_max_passes(tmp_path):
    # --max-passes maps onto MCA(max_passes=...) like every other option: no longer dropped.
    _field(40).to_dataset().to_zarr(tmp_path / "x.zarr", consolidated=False)
    _field(40, 1).to_dataset().to_zarr(tmp_path / "y.zarr", consolidated=False)
    assert main(["fit", str(tmp_path / "x.zarr"), "--mca", "--with", str(tmp_path / "y.zarr"), "--sample-dims", "time",
                 "-k", "2", "--solver", "krylov", "--max-passes", "3", "--out", str(tmp_path / "m.zarr"), "--quiet"]) == 0
    assert load(tmp_path / "m.zarr").n_passes_ <= 3


def test_an_estimator_without_a_capability_does_not_have_it():
    # HilbertPCA derives from the family's base, not from PCA: nothing to switch off.
    for name in ("update", "score", "score_samples", "get_covariance", "get_precision"):
        assert hasattr(PCA, name) and not hasattr(HilbertPCA, name), name
    with pytest.raises(InputError, match="cannot be updated"):
        HilbertPCA(2).fit(np.random.default_rng(0).standard_normal((64, 5))).check_updatable()


@pytest.mark.parametrize("params, name", [(dict(n_replicates=True), "n_replicates=True"),
                                          (dict(n_replicates=1000, block_length=True), "block_length=True"),
                                          (dict(n_replicates=1000, confidence=float("nan")), "confidence=nan")])
def test_bootstrap_refuses_a_bool_count_or_a_nan_probability_by_name(params, name):
    from daskpca.significance import bootstrap

    X = np.random.default_rng(0).standard_normal((60, 5))
    with pytest.raises(InputError, match=f"^{name}: expected"):
        bootstrap(PCA(2, solver="covariance").fit(X), X, **params)


def test_a_command_line_fit_plans_once_and_fits_that_plan(tmp_path, monkeypatch):
    from daskpca import _plan

    calls = []
    real = _plan.make_plan
    monkeypatch.setattr(_plan, "make_plan", lambda *a, **k: calls.append(1) or real(*a, **k))
    _field(40).to_dataset().to_zarr(tmp_path / "x.zarr", consolidated=False)
    assert main(["fit", str(tmp_path / "x.zarr"), "--sample-dims", "time", "-k", "2", "--out", str(tmp_path / "m.zarr"),
                 "--quiet"]) == 0
    assert len(calls) == 1


def test_fit_refuses_a_plan_made_for_another_fit(monkeypatch):
    from daskpca import _plan

    X = np.random.default_rng(0).standard_normal((60, 6))
    plan = PCA(2, solver="gram").plan(X)
    with pytest.raises(InputError, match="plan= was made for another fit"):
        PCA(3, solver="gram").fit(X, plan=plan)  # another k
    with pytest.raises(InputError, match="plan= was made for another fit"):
        PCA(2, solver="covariance").fit(X, plan=plan)  # another solver
    with pytest.raises(InputError, match="plan= was made for another fit"):
        PCA(2, solver="gram").fit(X[:50], plan=plan)  # another shape
    monkeypatch.setattr(_plan, "make_plan", lambda *a, **k: pytest.fail("fit planned again"))
    fitted = PCA(2, solver="gram").fit(X, plan=plan)  # the plan runs as made (its cache row chosen in the job)
    assert fitted.solver_ == "gram" and fitted._fit_plan.estimates == plan.estimates


def test_a_plan_carries_its_prepared_input_and_fit_prepares_nothing_twice(monkeypatch, tmp_path):
    # plan(X) validated the parameters and prepared the input (matrix, feature stage, request);
    # fit(X, plan=plan) with that very X and unchanged parameters runs on exactly that.
    import zarr

    from daskpca import pca as pca_module

    rng = np.random.default_rng(1)
    X = rng.standard_normal((200, 12)) @ np.diag(np.linspace(3, 0.5, 12))
    store = zarr.create_array(store=str(tmp_path / "x.zarr"), shape=X.shape, chunks=(50, 12), dtype="f8")
    store[:] = X
    references = [PCA(3, solver="covariance", weights=w).fit(X) for w in (np.linspace(0.5, 1.5, 12), np.linspace(1.5, 0.5, 12))]
    estimator = PCA(3, solver="covariance", weights=np.linspace(0.5, 1.5, 12))
    plan = estimator.plan(store)
    prepared = []
    real = pca_module.BasePCA._fit_input
    monkeypatch.setattr(pca_module.BasePCA, "_fit_input", lambda self, *a: prepared.append(1) or real(self, *a))
    estimator.fit(store, plan=plan)
    assert prepared == []  # nothing prepared again
    np.testing.assert_allclose(estimator.explained_variance_, references[0].explained_variance_, rtol=1e-12)

    # A parameter set since (even to a new array) is prepared again, with the new value.
    estimator.set_params(weights=np.linspace(1.5, 0.5, 12))
    estimator.fit(store, plan=plan)
    assert prepared == [1]
    np.testing.assert_allclose(estimator.explained_variance_, references[1].explained_variance_, rtol=1e-12)

    # Another input object of the same shape is prepared (and its plan checked) too.
    copy = zarr.open_array(str(tmp_path / "x.zarr"), mode="r")
    PCA(3, solver="covariance").fit(copy, plan=PCA(3, solver="covariance").plan(store))
    assert prepared == [1, 1, 1]  # the plan's preparation of store, and the fit's of copy

    # A path names what is there when it is opened: a plan made on it prepares again at fit.
    path = str(tmp_path / "x.zarr")
    PCA(3, solver="covariance").fit(path, plan=PCA(3, solver="covariance").plan(path))
    assert prepared == [1, 1, 1, 1, 1]  # the plan's and the fit's

    # The store is asked again at fit: deleted between plan and fit, it is refused, not read as zeros.
    plan = estimator.plan(store)
    import shutil

    shutil.rmtree(tmp_path / "x.zarr" / "c")
    with pytest.raises(InputError, match="never written|no chunk"):
        estimator.fit(store, plan=plan)


def test_a_planned_cache_row_is_kept_in_the_same_job_and_priced_again_in_another(monkeypatch, tmp_path):
    # The cache row a plan priced is the job's: kept where the job's facts (cluster, later reads)
    # are those it was priced for, priced again where they changed (the CLI plans before its job).
    import zarr

    from daskpca import _plan
    from daskpca.passes import job

    store = zarr.create_array(store=str(tmp_path / "x.zarr"), shape=(400, 30), chunks=(100, 30), dtype="f8")
    store[:] = np.random.default_rng(2).standard_normal((400, 30))
    priced = []
    real = _plan.with_cache
    monkeypatch.setattr(_plan, "with_cache", lambda *a, **k: priced.append(1) or real(*a, **k))
    estimator = PCA(3, solver="covariance")
    plan = estimator.plan(store)
    assert plan.priced_for == (None, 0) and "reads the input once" in plan.cache.reason  # one pass, nothing to reuse
    estimator.fit(store, plan=plan)
    assert priced == [] and estimator._fit_plan.cache == plan.cache
    with job(later_reads=1):  # the job reads the input once more after the fit: weighed again
        estimator.fit(store, plan=plan)
    assert priced == [1] and "reads the input once" not in estimator._fit_plan.cache.reason
