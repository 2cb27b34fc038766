"""Issue 23 (B), the hostile trial's classes on the estimators and the CLI: nothing misreported.

1. the plan is the fit's plan (solver, passes, counted reads) for every solver and estimator, and a
   knob the solver would ignore is refused before any read;
2. complex results are never silently made real;
3. every model kind × command is correct or refused before any read, by name;
4. exit codes and messages name the real cause;
5. time axes are monotonic; a rotation keeps no live reference to the PCA it rotated.
"""

import json
import re
import shutil
import warnings

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr

from daskpca import PCA, HilbertPCA, Rotator, lag_embed, load
from daskpca.cli import main
from daskpca.cli.errors import as_cli, failure_line
from daskpca.exceptions import (AccuracyWarning, ConvergenceWarning, InputError, InputTypeError, InvalidParameterError,
                                NonFiniteInputError)
from daskpca.io import COMPLETE_MARKER, open_xarray

from _helpers import low_rank_data, write_zarr


def _never_read():
    raise AssertionError("the data was read")


@pytest.fixture
def unreadable():
    """A lazy 200 × 6 array whose every read fails the test."""
    return da.from_delayed(dask.delayed(_never_read)(), shape=(200, 6), dtype=np.float64)


# ----------------------------------------------------------------------------- 1. plan == fit

PLAN_CASES = [
    (PCA, dict(solver="covariance")),
    (PCA, dict(solver="covariance", standardize=True)),  # fused: still one read
    (PCA, dict(solver="gram")),
    (PCA, dict(solver="gram", standardize=True)),  # the stage's own read first
    (PCA, dict(solver="tsqr")),
    (PCA, dict(solver="tsqr", weights=np.linspace(1, 2, 30))),
    (PCA, dict(solver="randomized", n_power_iter=2)),
    (PCA, dict(solver="krylov", tol=1e-4)),
    (PCA, dict(solver="krylov", max_passes=3)),
    (PCA, dict(solver="krylov", tol=1e-6, weights=np.linspace(1, 2, 30))),
    (PCA, dict(solver="als", max_iter=60, tol=1e-6)),
    (PCA, dict(solver="ppca", max_iter=60, tol=1e-6)),
    (PCA, dict(tol=1e-4)),  # the planner's choice under an accuracy
    (HilbertPCA, dict(solver="gram")),
    (HilbertPCA, dict(solver="krylov", tol=1e-6)),
    (HilbertPCA, dict(solver="krylov", standardize=True)),
]


@pytest.mark.parametrize("estimator, params", PLAN_CASES, ids=lambda v: getattr(v, "__name__", None) or
                         ",".join(f"{k}={v if np.isscalar(v) else 'array'}" for k, v in v.items()))
def test_plan_names_the_solver_and_the_reads_fit_makes(tmp_path, estimator, params):
    X = low_rank_data(240, 30, rank=4, noise=0.1)
    array, store = write_zarr(tmp_path / "x.zarr", X, (60, 30))
    model = estimator(3, random_state=0, **params)
    plan = model.plan(array)
    assert not store.chunk_reads()  # planning reads nothing
    with dask.config.set(scheduler="threads"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence / accuracy warnings are not the point here
        model.fit(array)
    reads = store.chunk_reads()
    assert plan.solver == model.solver_
    # every chunk read once a pass, or once in all when the pass cache served the later passes
    assert len(reads) == 4 and set(reads.values()) == ({1} if model.cache_["kind"] else {model.n_passes_})
    assert (model.cache_["kind"] is not None) == (plan.cache.kind is not None)  # the plan said so
    if plan.estimate(plan.solver).most_passes is not None:  # stops on convergence: the plan states the bound
        assert model.n_passes_ <= plan.most_passes
        stated = str(plan).splitlines()[2]
        assert stated.startswith(f"  passes over the data: {plan.passes}") and f"{plan.most_passes};" in stated
    else:
        assert plan.passes == plan.most_passes == model.n_passes_


def test_ppca_plan_states_its_passes_as_a_bound():
    plan = PCA(3, solver="ppca", max_iter=50).plan(np.zeros((100, 8)))
    assert plan.solver == "ppca" and plan.passes == "≤ 51" and plan.most_passes == 51


@pytest.mark.parametrize("estimator, params, knob", [
    (PCA, dict(solver="randomized", tol=1e-4), "tol"),  # randomized computes no bound
    (PCA, dict(solver="randomized", max_passes=2), "max_passes"),
    (PCA, dict(solver="gram", max_passes=1), "max_passes"),
    (PCA, dict(solver="covariance", max_passes=3), "max_passes"),
    (PCA, dict(solver="covariance", n_power_iter=3), "n_power_iter"),
    (PCA, dict(solver="krylov", max_iter=10), "max_iter"),
    (PCA, dict(solver="tsqr", n_oversamples=4), "n_oversamples"),
    (PCA, dict(max_iter=10), "max_iter"),  # solver='auto' chose covariance, which has no iterations
    (HilbertPCA, dict(solver="gram", max_passes=4), "max_passes"),
])
@pytest.mark.parametrize("method", ["plan", "fit"])
def test_a_knob_the_solver_ignores_is_refused_before_any_read(unreadable, estimator, params, knob, method):
    with pytest.raises(InvalidParameterError, match=rf"^{knob}=.* would be ignored: .*solver '") as caught:
        getattr(estimator(3, **params), method)(unreadable)
    assert "Drop " + knob in str(caught.value)


@pytest.mark.parametrize("estimator, params", [
    (PCA, dict(solver="covariance", tol=1e-4)),  # an exact solver meets any tol
    (PCA, dict(tol=1e-4, max_passes=5)),  # the planner's inputs under solver='auto'
    (PCA, dict(solver="randomized", n_oversamples=5, n_power_iter=2)),
    (HilbertPCA, dict(solver="gram", tol=1e-4)),
])
def test_knobs_the_solver_uses_are_accepted(unreadable, estimator, params):
    assert estimator(3, **params).plan(unreadable).solver


# ----------------------------------------------------------------------------- 2. complex stays complex


@pytest.fixture(scope="module")
def wave():
    """A propagating wave plus noise on a 120-step, 12-feature grid (complex EOFs see it)."""
    rng = np.random.default_rng(1)
    t, x = np.arange(120)[:, None], np.arange(12)[None, :]
    return np.cos(2 * np.pi * (t / 20 - x / 12)) + 0.2 * rng.standard_normal((120, 12))


def test_rotating_complex_modes_is_refused_by_name(wave):
    hilbert = HilbertPCA(3).fit(wave)
    with pytest.raises(InputTypeError, match="components are complex .*Hilbert EOFs"):
        Rotator().fit(hilbert)


def test_a_rotation_keeps_no_live_reference_to_the_model_it_rotated(wave):
    pca = PCA(4).fit(wave)
    rotation = Rotator().fit(pca)
    components, scores = rotation.components_.copy(), rotation.transform(wave)
    pca.fit(wave[:, ::-1] * 3.0)  # refit the caller's model on other data
    np.testing.assert_array_equal(rotation.components_, components)
    np.testing.assert_allclose(rotation.transform(wave), scores, rtol=0, atol=1e-12)
    assert not np.allclose(np.abs(rotation.model_.components_), np.abs(pca.components_))


# ----------------------------------------------------------------------------- 3. kinds × commands

KINDS = {"plain": ["--solver", "covariance"], "rotated": ["--rotation", "varimax"], "lagged": ["--lags", "3"],
         "hilbert": ["--hilbert"]}


def _field(n, seed, start=0):
    rng = np.random.default_rng(seed)
    t = np.arange(start, start + n)[:, None, None]
    lon = np.arange(8)[None, None, :]
    values = np.cos(2 * np.pi * (t / 24 - lon / 8)) + 0.3 * rng.standard_normal((n, 3, 8)) + 5.0
    return xr.DataArray(values, dims=("time", "lat", "lon"), name="sst",
                        coords={"time": np.arange(start, start + n), "lat": [-20.0, 0.0, 20.0],
                                "lon": np.arange(8) * 45.0})


@pytest.fixture(scope="module")
def kinds(tmp_path_factory):
    """The field, new data for updates, and one model of every kind fitted by the CLI."""
    root = tmp_path_factory.mktemp("kinds")
    _field(96, 0).to_dataset().chunk({"time": 48}).to_zarr(root / "field.zarr", consolidated=False)
    _field(40, 1, start=96).to_dataset().chunk({"time": 40}).to_zarr(root / "new.zarr", consolidated=False)
    for kind, extra in KINDS.items():
        assert main(["fit", str(root / "field.zarr"), "--sample-dims", "time", "-k", "3", "--weights", "coslat",
                     "--out", str(root / f"{kind}.zarr"), "--quiet", *extra]) == 0
    return root


def _model(kinds, tmp_path, kind):
    """A private copy of the fitted model of ``kind`` (commands may replace it)."""
    path = tmp_path / f"{kind}.zarr"
    shutil.copytree(kinds / f"{kind}.zarr", path)
    return path


def _loaded(path):
    """The model at ``path`` as the API reads it: the rotation when it holds one."""
    return load(path)  # one load path: a rotated store gives the Rotator


@pytest.mark.parametrize("kind", list(KINDS))
def test_transform_of_every_kind_gives_the_models_own_scores(kinds, tmp_path, kind):
    model = _model(kinds, tmp_path, kind)
    assert main(["transform", str(model), str(kinds / "field.zarr"), "--out", str(tmp_path / "s.zarr"), "--quiet"]) == 0
    fitted, field = _loaded(model), _field(96, 0)
    expected = fitted.transform(lag_embed(field, 3, sample_dim="time") if kind == "lagged" else field)
    np.testing.assert_allclose(open_xarray(tmp_path / "s.zarr").scores.values, expected.values, rtol=1e-10, atol=1e-10)


def test_update_keeps_a_rotated_model_rotated(kinds, tmp_path):
    model = _model(kinds, tmp_path, "rotated")
    assert main(["update", str(model), str(kinds / "new.zarr"), "--quiet"]) == 0
    updated = Rotator.load(model)  # still a rotation, of the updated model
    assert updated.model_.n_samples_ == 136
    again = Rotator(**updated.get_params()).fit(PCA.load(model))
    np.testing.assert_allclose(updated.components_, again.components_, rtol=0, atol=1e-12)
    both = xr.concat([_field(96, 0), _field(40, 1, start=96)], "time")
    reference = Rotator().fit(PCA(3, weights="coslat").fit(both, sample_dims="time"))
    np.testing.assert_allclose(updated.explained_variance_, reference.explained_variance_, rtol=1e-9)


@pytest.mark.parametrize("kind, n_samples", [("plain", 96 + 40), ("lagged", 94 + 38)])  # lagged: new data lagged too
def test_update_equals_a_fit_on_old_and_new_data(kinds, tmp_path, kind, n_samples):
    model = _model(kinds, tmp_path, kind)
    assert main(["update", str(model), str(kinds / "new.zarr"), "--quiet"]) == 0
    updated = load(model)
    old, new = _field(96, 0), _field(40, 1, start=96)
    if kind == "lagged":
        old, new = lag_embed(old, 3, sample_dim="time"), lag_embed(new, 3, sample_dim="time")
    reference = PCA(3, weights="coslat").fit(xr.concat([old, new], "time"), sample_dims="time")
    assert updated.n_samples_ == reference.n_samples_ == n_samples
    np.testing.assert_allclose(updated.explained_variance_, reference.explained_variance_, rtol=1e-9)
    np.testing.assert_allclose(np.abs(updated.components_ @ reference.components_.T), np.eye(3), atol=1e-8)


def test_update_of_a_hilbert_model_is_refused_before_any_read(kinds, tmp_path, capsys):
    model = _model(kinds, tmp_path, "hilbert")
    before = sorted(p.name for p in tmp_path.iterdir())
    # A source that does not exist: the refusal must come before the source is even opened.
    assert main(["update", str(model), str(tmp_path / "nowhere.zarr"), "--quiet"]) == 2
    assert "HilbertPCA model cannot be updated" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == before and load(model).n_samples_ == 96


@pytest.mark.parametrize("kind, pictures", [
    ("plain", {"components.png"}), ("lagged", {"components.png"}),
    ("hilbert", {"components_amplitude.png", "components_phase.png"}),  # never the real parts
])
def test_report_of_every_kind_draws_what_the_model_is(kinds, tmp_path, kind, pictures):
    model = _model(kinds, tmp_path, kind)
    assert main(["report", str(model), "--out", str(tmp_path / "r"), "--quiet"]) == 0
    drawn = {p.name for p in (tmp_path / "r").iterdir()}
    assert pictures <= drawn and not ({"components.png", "components_amplitude.png"} - pictures) & drawn


def test_report_of_a_rotated_model_is_refused_by_name(kinds, tmp_path, capsys):
    model = _model(kinds, tmp_path, "rotated")
    assert main(["report", str(model), "--out", str(tmp_path / "r"), "--quiet"]) == 2
    assert "holds a rotated model (varimax)" in capsys.readouterr().err and not (tmp_path / "r").exists()


@pytest.mark.parametrize("kind", list(KINDS))
def test_rollback_of_every_kind_brings_back_that_kind(kinds, tmp_path, capsys, kind):
    model = _model(kinds, tmp_path, kind)
    assert main(["fit", str(kinds / "field.zarr"), "--sample-dims", "time", "-k", "2", "--out", str(model),
                 "--overwrite", "--quiet"]) == 0  # a plain 2-mode model replaces it
    capsys.readouterr()
    assert main(["history", str(model), "--json"]) == 0
    older = json.loads(capsys.readouterr().out)["versions"][1]["version"]
    assert main(["rollback", str(model), "--to", older, "--quiet"]) == 0
    back = _loaded(model)
    assert type(back).__name__ == {"rotated": "Rotator", "hilbert": "HilbertPCA"}.get(kind, "PCA")
    assert getattr(back, "model_", back).n_components_ == 3


@pytest.mark.parametrize("kind, says", [("plain", "solver 'covariance'"), ("rotated", "rotated: varimax of the leading 3"),
                                        ("lagged", "features"), ("hilbert", "solver 'hilbert'")])
def test_inspect_of_every_kind_says_what_it_is(kinds, capsys, kind, says):
    assert main(["inspect", str(kinds / f"{kind}.zarr")]) == 0
    assert says in capsys.readouterr().out


def test_rollback_to_a_damaged_version_is_refused_and_the_current_model_kept(kinds, tmp_path, capsys):
    model = _model(kinds, tmp_path, "plain")
    assert main(["fit", str(kinds / "field.zarr"), "--sample-dims", "time", "-k", "2", "--out", str(model),
                 "--overwrite", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["history", str(model), "--json"]) == 0
    older = json.loads(capsys.readouterr().out)["versions"][1]["version"]
    kept = tmp_path / f".{model.name}.history" / older
    chunk = next(p for p in (kept / "components").rglob("*") if p.is_file() and "c" in p.parts[len(kept.parts) + 1:])
    chunk.write_bytes(chunk.read_bytes()[:-3] + b"xyz")  # edited in the history
    assert main(["rollback", str(model), "--to", older, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"version {older!r}" in err and "damaged" in err and "current version is unchanged" in err
    assert load(model).n_components_ == 2  # the current model still loads


def test_rollback_of_a_data_store_says_it_is_no_daskpca_store(kinds, capsys):
    assert main(["rollback", str(kinds / "field.zarr"), "--to", "x", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "not a store daskpca published" in err and "[]" not in err


# ----------------------------------------------------------------------------- 4. exit codes and messages


def test_only_daskpca_checks_are_usage_errors():
    try:
        np.zeros(5).reshape(2, 2)  # NumPy's own ValueError: not a message daskpca wrote for the user
    except ValueError as error:
        code, line = failure_line(error, "report")
    assert code == 1 and "--verbose" in line and "not a usage error" in line
    with pytest.raises(InputError) as caught:
        PCA(3, solver="randomized", tol=1e-3).plan(np.zeros((20, 4)))
    assert failure_line(caught.value, "fit") == (2, as_cli(str(caught.value), "fit"))  # in the CLI's words


def test_every_check_raises_daskpcas_own_error_type():
    """Exit code 2 is decided by type: a check that raised a bare ValueError or TypeError would be
    reported as an internal failure (exit 1). Only invariants that a bug would break may."""
    from pathlib import Path

    import daskpca

    bare = [f"{path.name}:{number}" for path in Path(daskpca.__file__).parent.rglob("*.py")
            for number, line in enumerate(path.read_text().splitlines(), 1)
            if re.search(r"raise (ValueError|TypeError)\(", line) and "# a bug, not a user error" not in line]
    assert not bare, f"raise InputError / InputTypeError (daskpca.exceptions) instead: {bare}"


def test_report_n_maps_0_names_the_option(kinds, tmp_path, capsys):
    assert main(["report", str(kinds / "plain.zarr"), "--out", str(tmp_path / "r"), "--n-maps", "0"]) == 2
    assert "--n-maps: expected an integer ≥ 1, got '0'" in capsys.readouterr().err


def test_power_without_promax_is_refused_even_at_its_default_value(kinds, tmp_path, capsys):
    assert main(["fit", str(kinds / "field.zarr"), "-k", "3", "--out", str(tmp_path / "m.zarr"), "--power", "4"]) == 2
    assert "--power is promax's exponent" in capsys.readouterr().err and not (tmp_path / "m.zarr").exists()


def test_update_on_another_grid_does_not_blame_transform(kinds, tmp_path, capsys):
    model = _model(kinds, tmp_path, "plain")
    _field(30, 2, start=96).isel(lon=slice(0, 6)).to_dataset().to_zarr(tmp_path / "narrow.zarr", consolidated=False)
    assert main(["update", str(model), str(tmp_path / "narrow.zarr"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "has size 6 here but 8 at fit time; the model takes data on the feature grid it was fitted on" in err
    assert "transform" not in err


@pytest.mark.parametrize("lat", [[-100.0, 0.0, 20.0], [np.nan, 0.0, 20.0]])
def test_coslat_on_impossible_latitudes_names_the_coordinate(lat):
    field = xr.DataArray(da.zeros((10, 3), chunks=5), dims=("time", "lat"), coords={"lat": lat})
    with pytest.raises(InputError, match=rf"latitude coordinate 'lat' holds {lat[0]}, which is no latitude in degrees"):
        PCA(2, weights="coslat").plan(field, sample_dims="time")
    assert PCA(2, weights="coslat").plan(field.assign_coords(lat=[-90.0, 0.0, 90.0]), sample_dims="time")  # poles are latitudes


def test_ppca_names_sigma2_when_it_is_what_did_not_settle():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 3)) @ rng.standard_normal((3, 12))  # rank 3 = k: σ² falls towards 0
    with pytest.warns(ConvergenceWarning) as caught:
        PCA(3, solver="ppca", max_iter=8, random_state=0).fit(X)
    message = str(caught[0].message)
    assert "relative change of σ² or the model variances" in message and "subspace change" not in message
    assert "(9 reads)" in message


def test_ppca_on_infinite_values_says_inf_is_not_missing():
    X = np.random.default_rng(0).standard_normal((50, 4))
    X[3, 2], X[7, 1] = np.inf, np.nan
    with pytest.raises(NonFiniteInputError, match=r"1 infinite value\(s\) \(±inf\); the first is at row 3, column 2") as caught:
        PCA(2, solver="ppca").fit(X)
    assert "solver='ppca'" not in str(caught.value) and "replace it with NaN" in str(caught.value)


def test_krylov_says_why_it_stopped_above_tol():
    rank_one = np.outer(np.random.default_rng(1).standard_normal(200), np.arange(1.0, 11.0))
    with pytest.warns(AccuracyWarning) as caught:  # rank-one data: the space is invariant after one pass
        PCA(2, solver="krylov", tol=1e-6, random_state=0).fit(rank_one)
    message = str(caught[0].message)
    assert "stopped after 1 pass" in message and "became invariant" in message and "budget" not in message
    rng = np.random.default_rng(0)
    with pytest.warns(AccuracyWarning) as caught:
        PCA(3, solver="krylov", tol=1e-12, max_passes=2, random_state=0).fit(rng.standard_normal((300, 40)))
    message = str(caught[0].message)
    assert "read budget of 2 passes was spent" in message and "--max-passes on the command line" in message


def test_the_cli_has_the_flag_the_advice_names(kinds, tmp_path, capsys):
    capsys.readouterr()
    assert main(["fit", str(kinds / "field.zarr"), "-k", "3", "--solver", "krylov", "--tol", "1e-15",
                 "--max-passes", "2", "--out", str(tmp_path / "m.zarr"), "--quiet"]) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if line.startswith("daskpca: warning: ")]
    assert warned and "--max-passes" in warned[0]  # the AccuracyWarning, in the CLI's words
    assert load(tmp_path / "m.zarr").n_passes_ == 2  # the feature stage (labeled input) is read in the first pass


@pytest.mark.parametrize("edit", [lambda m: {**m, "format": "daskpca-data"}, None])
def test_inspect_of_a_model_with_an_edited_marker_names_the_marker(kinds, tmp_path, capsys, edit):
    model = _model(kinds, tmp_path, "plain")
    marker = model / COMPLETE_MARKER
    marker.write_text(json.dumps(edit(json.loads(marker.read_text()))) if edit else "{not json")
    assert main(["inspect", str(model)]) == 2
    err = capsys.readouterr().err
    assert "--var" not in err and ("not a 'daskpca-model' store" in err or "unreadable completion marker" in err)


# ----------------------------------------------------------------------------- 5. time axes


@pytest.mark.parametrize("order, says", [(np.r_[0:20, 40:60, 20:40], "goes from 59 to 20 at position 40: the axis is shuffled"),
                                         (np.arange(60)[::-1], "runs backwards (from 59 down to 0)")])
@pytest.mark.parametrize("analysis", ["hilbert", "lags"])
def test_a_time_axis_out_of_order_is_refused_with_the_fix(order, says, analysis):
    field = xr.DataArray(da.zeros((60, 4), chunks=(60, 4)), dims=("time", "x"), coords={"time": order})
    with pytest.raises(InputError, match=re.escape(says)) as caught:
        if analysis == "hilbert":
            HilbertPCA(2).plan(field, sample_dims="time")
        else:
            lag_embed(field, 3, sample_dim="time")
    assert "X.sortby('time')" in str(caught.value)


def test_lag_embed_of_embedded_data_says_so():
    field = xr.DataArray(np.zeros((30, 4)), dims=("time", "x"), coords={"time": np.arange(30)})
    with pytest.raises(InvalidParameterError, match="X already has a 'lag' dimension .*embedded already"):
        lag_embed(lag_embed(field, 3, sample_dim="time"), 2, sample_dim="time")


def test_hilbert_scores_of_a_shuffled_axis_are_refused(wave):
    field = xr.DataArray(wave, dims=("time", "x"), coords={"time": np.arange(120)})
    model = HilbertPCA(2).fit(field, sample_dims="time")
    with pytest.raises(InputError, match="Hilbert scores need 'time'"):
        model.transform(field.isel(time=np.r_[60:120, 0:60]))
