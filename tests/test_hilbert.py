"""Hilbert (complex) EOFs: against a float64 NumPy computation, a travelling wave's phase, labeled
output with masks and weights, two passes, and the saved model."""

from __future__ import annotations

import dask

import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr
from scipy.linalg import subspace_angles
from scipy.signal import hilbert

from daskpca.exceptions import AccuracyWarning, InputError, InvalidParameterError
from daskpca.eof.hilbert import HilbertPCA
from daskpca.solvers.hilbert import analytic_signal

from _helpers import assert_equal_up_to_rounding, write_zarr


@pytest.fixture(autouse=True)
def _no_pass_cache():
    """These tests count each pass's reads: the pass cache (tests/test_pass_cache.py) would serve
    passes 2+ from the first read's blocks."""
    with dask.config.set({"daskpca.cache": False}):
        yield


def _wave(n=240, n_lat=4, n_lon=12, seed=0, noise=0.2):
    """An eastward travelling wave (period 24 samples, one wavelength around the domain) + noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)[:, None, None]
    lon = np.arange(n_lon)[None, None, :]
    lat = np.linspace(-1, 1, n_lat)[None, :, None]
    wave = np.cos(2 * np.pi * (t / 24.0 - lon / n_lon)) * np.exp(-lat**2)
    return wave + noise * rng.standard_normal((n, n_lat, n_lon)) + 7.0


def _reference(X, k):
    """Independent float64 Hilbert EOFs (no padding): analytic signal by FFT, Hermitian eigh."""
    Xc = X - X.mean(axis=0)
    Z = hilbert(Xc, axis=0)
    Z = Z.real + 1j * (Z.imag - Z.imag.mean(axis=0))
    C = Z.conj().T @ Z / (X.shape[0] - 1)
    values, vectors = np.linalg.eigh(C)
    order = np.argsort(values)[::-1][:k]
    return vectors[:, order].T, values[order], np.sum(np.abs(Z) ** 2) / (X.shape[0] - 1), Z


def _complex_sin_theta(A, B):
    return float(np.sin(np.max(subspace_angles(A.T, B.T))))


@pytest.mark.parametrize("chunks", [(240, 12), (240, 48), (80, 48)])  # column strips, one block, row blocks
def test_matches_a_float64_numpy_computation_whatever_the_chunking(chunks):
    X = _wave().reshape(240, -1)
    components, variance, total, Z = _reference(X, 3)
    model = HilbertPCA(3, padding="none", solver="gram").fit(da.from_array(X, chunks=chunks))
    assert model.n_passes_ == 2 and model.solver_ == "hilbert" and np.iscomplexobj(model.components_)
    assert _complex_sin_theta(model.components_, components) < 1e-10
    np.testing.assert_allclose(model.explained_variance_, variance, rtol=1e-10)
    np.testing.assert_allclose(model.explained_variance_ratio_, variance / total, rtol=1e-10)
    scores = model.transform(X)
    for i in range(3):  # scores z·v, up to each mode's phase
        expected = Z @ components[i]
        phase = np.vdot(scores[:, i], expected) / abs(np.vdot(scores[:, i], expected))
        np.testing.assert_allclose(scores[:, i] * phase, expected, atol=1e-9 * np.abs(expected).max())
    # Each mode's largest entry is real positive (the deterministic phase).
    top = model.components_[np.arange(3), np.argmax(np.abs(model.components_), axis=1)]
    np.testing.assert_allclose(top.imag, 0, atol=1e-14)
    assert np.all(top.real > 0)


def test_exp_padding_is_the_analytic_signal_of_the_padded_series():
    X = _wave().reshape(240, -1)
    Z = analytic_signal(X, padding="exp", decay_factor=0.2)
    np.testing.assert_allclose(Z.real, X - X.mean(axis=0), atol=1e-12)  # the real part is the data
    np.testing.assert_allclose(Z.imag.mean(axis=0), 0, atol=1e-12)
    plain = analytic_signal(X, padding="none")
    # Away from the ends, padding changes the transform little; near them it is the point.
    middle = slice(60, 180)
    assert np.abs(Z.imag[middle] - plain.imag[middle]).max() < 0.1 * np.abs(plain.imag).max()


def test_a_travelling_wave_is_one_complex_mode_whose_phase_advances_eastward():
    model = HilbertPCA(1, padding="exp").fit(_wave(noise=0.05).reshape(240, -1))
    assert model.explained_variance_ratio_[0] > 0.9
    phase = np.angle(model.components_[0].reshape(4, 12))
    step = np.angle(np.exp(1j * np.diff(phase, axis=1)))  # wrapped phase step between longitudes
    np.testing.assert_allclose(np.abs(step), 2 * np.pi / 12, atol=0.05)
    assert np.all(np.sign(step) == np.sign(step[0, 0]))  # one direction everywhere


def test_labeled_field_with_mask_and_weights_in_two_passes(tmp_path):
    field = _wave()
    field[:, 0, :3] = np.nan
    array, store = write_zarr(tmp_path / "f.zarr", field, chunks=(240, 4, 6))  # column strips
    X = xr.DataArray(da.from_zarr(array), dims=("time", "lat", "lon"),
                     coords={"time": np.arange(240), "lat": np.linspace(-30, 30, 4), "lon": np.arange(12) * 30.0})
    model = HilbertPCA(2, weights="coslat", solver="gram").fit(X, sample_dims="time")
    assert model.n_passes_ == 2 and set(store.chunk_reads().values()) == {2}
    assert model.solver_info_["n_masked_features"] == 3
    ds = model.to_xarray()
    assert ds["components"].dims == ("mode", "lat", "lon") and np.iscomplexobj(ds["components"].values)
    assert bool(ds["components_phase"].isel(lat=0, lon=slice(0, 3)).isnull().all())
    np.testing.assert_allclose(ds["components_amplitude"].values, np.abs(ds["components"].values))
    scores = model.transform(X)
    assert scores.dims == ("time", "mode") and np.iscomplexobj(scores.values)
    field_back = model.inverse_transform(scores)
    assert field_back.dims == ("time", "lat", "lon") and not np.iscomplexobj(field_back.values)
    assert bool(field_back.isel(lat=0, lon=slice(0, 3)).isnull().all())
    kept = ~np.isnan(field[0])
    error = np.abs(field_back.values - field)[:, kept]
    assert np.median(error) < 0.3  # two modes hold the wave; the noise (σ 0.2) is left out
    # Krylov takes the same road: masks and weights resolved in its first pass, no extra read.
    store.reads.clear()
    krylov = HilbertPCA(2, weights="coslat", solver="krylov", tol=1e-8, random_state=0).fit(X, sample_dims="time")
    assert set(store.chunk_reads().values()) == {krylov.n_passes_} and krylov.solver_info_["n_masked_features"] == 3
    assert _complex_sin_theta(krylov.components_, model.components_) <= krylov.error_bound_ <= 1e-8
    np.testing.assert_allclose(krylov.mean_, model.mean_, rtol=1e-12)


@pytest.mark.parametrize("params, match", [(dict(padding="zeros"), "padding"), (dict(decay_factor=0.0), "decay_factor"),
                                           (dict(solver=None), r"solver=None: expected one of 'auto', 'gram', 'krylov'"), (dict(tol=2.0), "tol"),
                                           (dict(max_passes="3"), "max_passes")])
def test_bad_options_are_refused_before_any_read(params, match):
    with pytest.raises(InvalidParameterError, match=match):
        HilbertPCA(2, **params).fit(np.zeros((10, 3)))


def test_nan_in_transform_input_is_named_and_what_it_does_not_offer_it_does_not_have():
    X = _wave().reshape(240, -1)
    model = HilbertPCA(2).fit(X)
    bad = X.copy()
    bad[17, 5] = np.nan
    with pytest.raises(ValueError, match="row 17, column 5"):
        model.transform(bad)
    assert np.isnan(model.transform(bad, nan="propagate")).all()
    # Probabilistic PCA's likelihood is that of real data, and new samples change the analytic
    # signal of the old ones: HilbertPCA has neither (it does not inherit them only to refuse).
    for name in ("score", "score_samples", "get_covariance", "get_precision", "update"):
        assert not hasattr(model, name), name
    with pytest.raises(InputError, match="HilbertPCA model cannot be updated"):
        model.check_updatable()  # the family's declared capability says why


def test_a_saved_hilbert_model_loads_as_one_and_transforms_identically(tmp_path):
    from daskpca import load

    X = _wave().reshape(240, -1)
    model = HilbertPCA(2, weights=np.linspace(0.5, 1.5, 48)).fit(X)
    model.save(tmp_path / "h.zarr")
    loaded = load(tmp_path / "h.zarr")
    assert isinstance(loaded, HilbertPCA) and loaded.padding == "exp"
    np.testing.assert_array_equal(loaded.components_, model.components_)
    assert_equal_up_to_rounding(loaded.transform(X), model.transform(X))  # loaded: another layout, same arithmetic


def test_strips_are_transformed_a_few_columns_at_a_time_with_the_same_result(monkeypatch):
    # A strip's FFT scratch is bounded by SCRATCH_BYTES whatever its width: a scratch of 8
    # columns (the minimum) gives the same Gram matrix, components and scores as one block.
    from daskpca.solvers import hilbert as solver

    X = _wave().reshape(240, -1)
    whole = HilbertPCA(3).fit(da.from_array(X, chunks=(240, 48)))
    monkeypatch.setattr(solver, "SCRATCH_BYTES", 1)
    assert [c for c, _ in solver.analytic_blocks(X[:, :20], padding="exp", decay_factor=0.2, center=True)] == [
        slice(0, 8), slice(8, 16), slice(16, 20)]
    pieces = HilbertPCA(3).fit(da.from_array(X, chunks=(240, 48)))
    np.testing.assert_allclose(pieces.components_, whole.components_, atol=1e-13)
    np.testing.assert_allclose(pieces.explained_variance_, whole.explained_variance_, rtol=1e-13)
    np.testing.assert_allclose(pieces.transform(X), whole.transform(X), atol=1e-12 * np.abs(whole.transform(X)).max())


@pytest.mark.parametrize("shape, width", [((1_500, 1_200), 400), ((200, 6_000), 3_000)])  # Gram-bound, strip-bound
def test_task_memory_is_the_largest_measured_task(shape, width):
    # Peak traced memory of every task of the real pass-1 graph (strip tasks and pairwise merges,
    # inputs included) against the estimate the planner uses.
    from daskpca.solvers import hilbert as solver

    from _helpers import largest_task_bytes

    X = da.from_array(np.random.default_rng(0).standard_normal(shape).astype(np.float32), chunks=(shape[0], width))
    weights = np.ones(shape[1])
    largest = largest_task_bytes(solver.gram_graph(X, weights, "exp", 0.2), solver._HermitianPart,
                                 solver.gram_graph(X[:40, :8], weights, "exp", 0.2))
    estimate = solver.task_memory(shape[0], width, 4, "exp")
    assert largest / 1.5 <= estimate <= 1.5 * largest, (estimate / 2**20, largest / 2**20)


def test_the_plan_names_the_rechunk_and_a_strip_too_wide_for_the_budget(monkeypatch):
    from daskpca import _plan

    X = da.from_array(_wave().reshape(240, -1), chunks=(80, 48))
    plan = HilbertPCA(2, solver="gram").plan(X)
    assert plan.solver == "hilbert" and plan.estimate("hilbert").passes == 2
    assert any("3 row blocks" in w and "rechunk" in w for w in plan.warnings), plan.warnings
    assert "rechunk" in str(plan)
    assert not HilbertPCA(2).plan(X.rechunk((240, 12))).warnings
    # The one planner chooses by predicted time (the exact road's n×n eigh against block Krylov to
    # the default accuracy) and says so; every road is timed.
    plan = HilbertPCA(2).plan(X.rechunk((240, 12)))
    assert all(e.seconds is not None and e.tasks == 4 for e in plan.estimates), str(plan)
    assert ("exact" in plan.reason if plan.solver == "hilbert" else "block Krylov certified" in plan.reason), plan.reason
    # A budget below the one-strip task (Krylov's too): solver="gram" is refused before any read,
    # by the planner, as HilbertPCA spells it.
    wide = da.from_array(np.random.default_rng(0).standard_normal((64, 4_000)), chunks=(64, 2_000))
    need = HilbertPCA(2, solver="gram").plan(wide).estimate("hilbert").task_bytes
    monkeypatch.setattr(_plan, "task_memory_budget", lambda resources=None: (int(0.8 * need), "test"))
    with pytest.raises(ValueError, match=r"solver='gram' needs about .* more than the budget .* Use smaller chunks"):
        HilbertPCA(2, solver="gram").fit(wide)
    # Where the Gram matrices' merge alone is over the budget, Krylov (n×ℓ blocks, not n×n) is
    # the road "auto" takes, certified to the default accuracy.
    monkeypatch.setattr(_plan, "task_memory_budget", lambda resources=None: (2 * 16 * 240 * 240, "test"))
    narrow = X.rechunk((240, 12))
    plan = HilbertPCA(2).plan(narrow)
    assert plan.solver == "hilbert-krylov" and plan.default_tol == _plan.DEFAULT_TOL, str(plan)
    assert not plan.estimate("hilbert").feasible and plan.estimate("hilbert-krylov").feasible
    model = HilbertPCA(2, random_state=0).fit(narrow)
    assert model.solver_ == "hilbert-krylov" and 0 < model.error_bound_ <= _plan.DEFAULT_TOL
    # The default accuracy missed within the read budget: the warning recommends Hilbert's exact
    # road as its solver= spells it ('gram'), not PCA's solvers ('covariance' does not exist here).
    noise = da.from_array(np.random.default_rng(0).standard_normal((240, 120)), chunks=(240, 12))
    with pytest.warns(AccuracyWarning, match=r"default accuracy .* use an exact solver \(solver='gram'\)\."):
        HilbertPCA(2, max_passes=8, random_state=0).fit(noise)


def _modes_above_noise(n=400, d=360, seed=0, ratios=(1.6, 1.3, 1.15)):
    """Travelling waves whose complex-mode variances sit just above white noise's continuum
    (λ_k ≈ ratio × the noise edge (1 + √(d/n))²·σ²·2 of the analytic signal's Gram operator)."""
    rng = np.random.default_rng(seed)
    t, x = np.arange(n)[:, None], np.arange(d)[None, :]
    edge = (1 + np.sqrt(d / n)) ** 2
    field = rng.standard_normal((n, d))
    for i, ratio in enumerate(ratios):
        period, wavelength = 23.0 + 11 * i, d / (i + 1)
        envelope = np.exp(-((x - d * (i + 1) / (len(ratios) + 1)) / (d / 5)) ** 2)
        amplitude = np.sqrt(2 * ratio * edge * d / np.sum(envelope**2))
        field += amplitude * envelope * np.cos(2 * np.pi * (t / period - x / wavelength) + rng.uniform(0, 2 * np.pi))
    return field


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("tol", [1e-2, 1e-5])
def test_krylov_bound_holds_against_the_exact_solver_just_above_the_noise(seed, tol, tmp_path):
    # The bound on sin θ of the components' span is never below the true angle to the exact
    # (Gram) answer, tol is met, and the passes the model reports are the chunk reads.
    X = _modes_above_noise(seed=seed)
    exact = HilbertPCA(3, solver="gram").fit(X)
    array, store = write_zarr(tmp_path / "x.zarr", X, (X.shape[0], 90))
    model = HilbertPCA(3, solver="krylov", tol=tol, random_state=seed).fit(da.from_zarr(array))
    true = _complex_sin_theta(model.components_, exact.components_)
    assert model.solver_ == "hilbert-krylov" and model.solver_info_["converged"]
    assert true <= model.error_bound_ <= tol, (true, model.error_bound_)
    np.testing.assert_allclose(model.explained_variance_, exact.explained_variance_, rtol=10 * model.error_bound_)
    np.testing.assert_allclose(model.explained_variance_ratio_, exact.explained_variance_ratio_, rtol=10 * model.error_bound_)
    assert set(store.chunk_reads().values()) == {model.n_passes_} and model.n_passes_ == model.n_iter_ + 1
    # Scores through the same transform; the components are orthonormal.
    np.testing.assert_allclose(model.components_.conj() @ model.components_.T, np.eye(3), atol=1e-12)
    top = model.components_[np.arange(3), np.argmax(np.abs(model.components_), axis=1)]
    np.testing.assert_allclose(top.imag, 0, atol=1e-14)


def test_krylov_thick_restarts_keep_the_bound_valid(monkeypatch):
    # A basis capped at two blocks' worth restarts every pass; the bound still holds and is met.
    from daskpca.solvers import hilbert_krylov

    X = _modes_above_noise(seed=3)
    exact = HilbertPCA(3, solver="gram").fit(X)
    monkeypatch.setattr(hilbert_krylov, "BASIS_BYTES", 2 * 16 * X.shape[0] * 2 * 13)
    model = HilbertPCA(3, solver="krylov", tol=1e-6, random_state=0).fit(X)
    assert model.solver_info_["restarts"] >= 1 and model.solver_info_["converged"]
    assert _complex_sin_theta(model.components_, exact.components_) <= model.error_bound_ <= 1e-6


def test_krylov_warns_when_the_read_budget_is_spent_and_is_refused_a_variance_fraction():
    X = _modes_above_noise(ratios=(1.05, 1.02, 1.01))
    with pytest.warns(AccuracyWarning, match="read budget of 3 passes"):
        model = HilbertPCA(3, solver="krylov", tol=1e-12, max_passes=3, random_state=0).fit(X)
    assert model.n_passes_ == 3 and not model.solver_info_["converged"] and model.error_bound_ > 1e-12
    with pytest.raises(ValueError, match="variance fraction.*solver='gram'"):
        HilbertPCA(0.5, solver="krylov").fit(X)
    with pytest.raises(ValueError, match="max_passes=1: .* at least twice"):
        HilbertPCA(3, solver="krylov", max_passes=1).fit(X)
    with pytest.raises(InvalidParameterError, match="solver='covariance': expected one of 'auto', 'gram', 'krylov'"):
        HilbertPCA(2, solver="covariance").fit(X)


# ------------------------------------------------------------- one time step per chunk (re-layout)

N_TIME, N_LAT, N_LON = 600, 30, 60


def _one_step_per_chunk(tmp_path, monkeypatch, name="sst.zarr", chunks=(1, N_LAT, N_LON), counted=True):
    """A reanalysis-shaped field (time × lat × lon, float32) on disk, opened through a
    CountingStore as a labeled array; the strip re-layout's thresholds scaled to it (this 4 MB
    field counts as large; strips of 360 columns), as for PCA's Gram re-layout."""
    monkeypatch.setenv("DASKPCA_SCRATCH", str(tmp_path / "scratch"))
    (tmp_path / "scratch").mkdir(exist_ok=True)
    monkeypatch.setattr("daskpca.passes._geometry.STRIP_BYTES", N_TIME * 4 * 360)
    monkeypatch.setattr("daskpca.passes._geometry.RELAYOUT_BYTES", N_TIME * 4 * 1000)
    field = _wave(n=N_TIME, n_lat=N_LAT, n_lon=N_LON, noise=0.5).astype(np.float32)
    array, store = write_zarr(tmp_path / name, field, chunks=chunks)
    if not counted:  # for worker processes: a store whose counter (and its lock) stays here cannot travel
        array = zarr.open_array(str(tmp_path / name), mode="r")
    lat = np.linspace(-60, 60, N_LAT)
    X = xr.DataArray(da.from_zarr(array), dims=("time", "lat", "lon"),
                     coords={"time": np.arange(N_TIME), "lat": lat, "lon": np.arange(N_LON) * 6.0})
    reference = field.astype(np.float64).reshape(N_TIME, -1) * np.repeat(np.sqrt(np.cos(np.deg2rad(lat))), N_LON)
    return X, store, reference


def _thin_reference(X, k):
    """:func:`_reference`'s components and variances through the SVD of the analytic signal (the
    same float64 NumPy steps; its d×d covariance's eigh is the slow part at d = 1800)."""
    Xc = X - X.mean(axis=0)
    Z = hilbert(Xc, axis=0)
    Z = Z.real + 1j * (Z.imag - Z.imag.mean(axis=0))
    _, s, vh = np.linalg.svd(Z, full_matrices=False)
    return np.conj(vh[:k]), s[:k] ** 2 / (X.shape[0] - 1)


def _aligned(model, components):
    """``model``'s components, each turned by the phase that best aligns it with ``components``."""
    phases = np.sum(model.components_.conj() * components, axis=1)
    return model.components_ * (phases / np.abs(phases))[:, None]


def test_a_field_stored_one_step_per_chunk_is_relaid_into_strips_read_once(tmp_path, monkeypatch):
    # HilbertPCA(4, weights="coslat") on one time step per chunk: a strip would be the whole
    # field; both roads take the re-layout step the Gram road takes (planned, then run): one read
    # of the source into a strip copy, their passes over the copy.
    X, store, reference = _one_step_per_chunk(tmp_path, monkeypatch)
    components, variance = _thin_reference(reference, 4)
    plan = HilbertPCA(4, weights="coslat", padding="none").plan(X, sample_dims="time")
    for estimate in plan.estimates:
        assert estimate.passes == 1 and estimate.copy_passes >= 2 and estimate.tasks == 5, str(plan)
        assert "re-laid out into 5 column strips of 360 columns" in estimate.note
    exact = HilbertPCA(4, weights="coslat", padding="none", solver="gram")
    with dask.config.set(scheduler="threads"):
        exact.fit(X, sample_dims="time")
    assert set(store.chunk_reads().values()) == {1} and len(store.chunk_reads()) == N_TIME
    assert exact.n_passes_ == 1 and "strips of 360 columns" in exact.solver_info_["relayout"]
    assert exact.solver_info_["copy_passes"] == 2 and not list((tmp_path / "scratch").iterdir())
    assert _complex_sin_theta(exact.components_, components) < 1e-10
    np.testing.assert_allclose(exact.explained_variance_, variance, rtol=1e-10)
    np.testing.assert_allclose(_aligned(exact, components), components, atol=1e-9)
    store.reads.clear()
    with dask.config.set(scheduler="threads"):
        auto = HilbertPCA(4, weights="coslat", padding="none", random_state=0).fit(X, sample_dims="time")
    assert auto.solver_ == plan.solver and auto.n_passes_ == 1 and set(store.chunk_reads().values()) == {1}
    assert _complex_sin_theta(auto.components_, components) <= max(auto.error_bound_, 1e-10)
    np.testing.assert_allclose(auto.explained_variance_, variance, rtol=1e-6)
    # The same fit on a copy chunked by features (column strips as stored: no re-layout).
    strips, _, _ = _one_step_per_chunk(tmp_path, monkeypatch, "strips.zarr", chunks=(N_TIME, 10, N_LON))
    by_features = HilbertPCA(4, weights="coslat", padding="none", solver="gram").fit(strips, sample_dims="time")
    assert "relayout" not in by_features.solver_info_ and by_features.n_passes_ == 2
    np.testing.assert_allclose(exact.components_, by_features.components_, atol=1e-10)
    np.testing.assert_allclose(exact.explained_variance_, by_features.explained_variance_, rtol=1e-12)


def test_a_one_step_per_chunk_field_fits_on_small_worker_processes(tmp_path, monkeypatch):
    # Two worker processes of 200 MB (two threads each: 50 MB a task) on loopback: one strip of
    # the whole field does not fit a task, the re-laid-out strips do; the fit (dask's p2p rechunk
    # into strips on the workers) matches the threaded one.
    from distributed import Client, LocalCluster

    X, _, reference = _one_step_per_chunk(tmp_path, monkeypatch, counted=False)
    components, variance = _thin_reference(reference, 4)
    # The limit is what the planner sizes tasks by; a worker process's own ~150 MB (Python, NumPy,
    # SciPy, dask) would leave the nanny's 95 % no room for them, so it does not restart workers.
    quiet = {"distributed.worker.memory.pause": False, "distributed.worker.memory.spill": False,
             "distributed.worker.memory.target": False, "distributed.worker.memory.terminate": False,
             "distributed.logging.distributed": "error"}
    with dask.config.set(quiet), LocalCluster(n_workers=2, threads_per_worker=2, processes=True, host="127.0.0.1",
                                              dashboard_address=None, memory_limit="200MB") as cluster, Client(cluster):
        plan = HilbertPCA(4, weights="coslat", padding="none").plan(X, sample_dims="time")
        assert plan.task_memory_budget == 50_000_000 and all(e.feasible for e in plan.estimates), str(plan)
        with monkeypatch.context() as unpatched:  # stored as it is, one strip would be the whole field
            unpatched.setattr("daskpca.passes._geometry.RELAYOUT_BYTES", 2**40)
            whole = HilbertPCA(4, weights="coslat", padding="none").plan(X, sample_dims="time")
        assert not any(e.feasible for e in whole.estimates), str(whole)
        model = HilbertPCA(4, weights="coslat", padding="none", random_state=0).fit(X, sample_dims="time")
    assert model.n_passes_ == 1 and "p2p rechunk" in model.solver_info_["relayout"]
    assert _complex_sin_theta(model.components_, components) <= max(model.error_bound_, 1e-10)
    np.testing.assert_allclose(model.explained_variance_, variance, rtol=1e-6)


@pytest.mark.parametrize("rate, tol, passes", [(0.5, 1e-4, 3), (0.7, 1e-7, 4)])
def test_krylov_on_fast_decay_certifies_the_augmented_vectors_a_pass_earlier(rate, tol, passes):
    """Issue 41: Hilbert's Krylov now gives certify the trace of G (Σ|z|²), so the augmented
    vectors' bound from the variance the basis has not seen applies, and the components' bound
    takes the power step's contraction σ_{k+1}/σ_k. Measured on these fields: 4 → 3 passes for
    1e-4 (rate 0.5), 5 → 4 for 1e-7 (rate 0.7); never below the true angle to the exact solver."""
    from daskpca.solvers import hilbert as exact_hilbert, hilbert_krylov
    from daskpca.solvers._base import ComponentRequest

    from test_solver_krylov import fast_spectrum

    X = fast_spectrum(400, 120, 4, rate)
    dask_X = da.from_array(X, chunks=(400, 60))
    with dask.config.set(scheduler="sync"):
        exact = exact_hilbert.solve(dask_X, ComponentRequest(4, *X.shape))
        fit = hilbert_krylov.solve(dask_X, ComponentRequest(4, *X.shape), random_state=0, tol=tol)
    assert fit.info["converged"] and fit.n_passes == passes
    assert _complex_sin_theta(fit.components, exact.components[:4]) <= fit.info["error_bound"] <= tol


def test_a_watched_krylov_fit_shows_the_count_its_bounds_fall_predicts():
    """Issue 41 (the other bounded roads): Hilbert's Krylov shows the planner's count (its Krylov
    passes and the components' pass) until its bound is informative, then the count the bounds'
    fall predicts, learnt at that pass: from the second informative bound within one of the passes
    made (10, then 7, 7, 7 for 7 at 0.9ⁱ; the first takes the planner's rate)."""
    from daskpca.passes._progress import listen
    from daskpca.solvers import hilbert_krylov
    from daskpca.solvers._base import ComponentRequest
    from daskpca.solvers.krylov import predicted_passes

    from test_solver_krylov import fast_spectrum

    X = fast_spectrum(400, 120, 4, 0.9)
    starts = []
    with dask.config.set(scheduler="sync"), listen(lambda r: starts.append(r) if r.seconds is None else None):
        fit = hilbert_krylov.solve(da.from_array(X, chunks=(400, 60)), ComponentRequest(4, *X.shape),
                                   random_state=0, tol=1e-8)
    assert fit.info["converged"] and starts[0].predicted == predicted_passes(1e-8) + 1 and starts[0].learnt is None
    learnt = [report for report in starts if report.learnt is not None]
    assert len(learnt) > 2 and all(abs(report.predicted - fit.n_passes) <= 1 for report in learnt[1:]), \
        ([r.predicted for r in starts], fit.n_passes)


def test_a_watched_krylov_refit_shows_its_last_fits_count_from_the_first_pass():
    """Issue 41 (the other bounded roads): Hilbert's Krylov simulates nothing, so before its bound
    is informative it showed the planner's count (10 for 7 at 0.9ⁱ). A fitted HilbertPCA refitted
    on a new draw of the same field shows the count its last fit's bounds give
    (``krylov.passes_from_history``) from the first pass, learnt from that fit."""
    from daskpca import HilbertPCA
    from daskpca.passes._progress import listen
    from daskpca.solvers.krylov import passes_from_history

    from test_solver_krylov import fast_spectrum

    model = HilbertPCA(4, solver="krylov", tol=1e-8, random_state=0).fit(fast_spectrum(400, 120, 4, 0.9, seed=0))
    earlier = model.solver_info_["bound_history"]
    starts = []
    with listen(lambda r: starts.append(r) if r.seconds is None else None):
        model.fit(fast_spectrum(400, 120, 4, 0.9, seed=1))
    assert starts[0].learnt == 0 and starts[0].predicted == passes_from_history(earlier, 1e-8) + 1
    assert starts[0].source == "an earlier fit"
    assert all(abs(report.predicted - model.n_passes_) <= 1 for report in starts), [r.predicted for r in starts]
    # Another tol: the last fit's fall, extrapolated; a field of other features: the planner's count.
    assert passes_from_history([1.0, 0.3, 0.03, 0.003], 1e-6) == 8 and passes_from_history([1.0, 1.0], 1e-6) is None
    assert passes_from_history(["x", 0.1], 1e-6) is None and passes_from_history([np.nan], 1e-6) is None
    starts.clear()
    with listen(lambda r: starts.append(r) if r.seconds is None else None):
        model.fit(fast_spectrum(400, 100, 4, 0.9, seed=1))
    assert starts[0].learnt is None
    # Other modes converge otherwise: a refit for another k does not take the last fit's count.
    starts.clear()
    with listen(lambda r: starts.append(r) if r.seconds is None else None):
        model.set_params(n_components=3).fit(fast_spectrum(400, 100, 4, 0.9, seed=1))
    assert starts[0].learnt is None
