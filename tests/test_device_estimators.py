"""Dask arrays whose chunks live on a device (CuPy), through the estimators beyond PCA.

HilbertPCA (Gram and Krylov), MCA (exact and Krylov), CCA (exact and PCA), the bootstrap,
``component_maps``, ``lag_embed`` and ``Rotator.transform``, each on the CPU stand-in
(``tests/_device_standin.py``: refuses implicit conversion to NumPy as CuPy does, so an
accidental host copy in a kernel fails here) and on real CuPy where it imports and a CUDA GPU is
present (the backends of tests/test_device_road.py). Every device fit is compared with the NumPy
fit of the same data: exact roads to sin θ ≤ 1e-10 (or rtol 1e-10), Krylov within its bound.
Fitted attributes are NumPy; transforms of device input are dask arrays of device chunks.
"""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import xarray as xr
from scipy.linalg import subspace_angles

from daskpca import CCA, MCA, PCA, HilbertPCA, Rotator, lag_embed
from daskpca.exceptions import InputError, InvalidParameterError
from daskpca.significance import bootstrap, bootstrap_scores
from daskpca.passes import _device
from daskpca.solvers.hilbert import analytic_signal

import _device_standin as standin
from _helpers import low_rank_data, sin_theta
from test_device_road import BACKENDS, _cupy_backend, _is_device_chunked, _on, standin_free
from test_mca import coupled_fields


@pytest.fixture(params=BACKENDS)
def backend(request):
    return _cupy_backend() if request.param == "cupy" else request.param


def _cuda_is(backend, monkeypatch):
    """``device="cuda"`` names ``backend`` for this test (the stand-in, or CuPy itself)."""
    if backend is standin.BACKEND:
        standin.use_as_cuda(monkeypatch)


def _complex_sin_theta(A, B):
    return float(np.sin(np.max(subspace_angles(A.T, B.T))))


def _wave(n=96, n_space=24, seed=0):
    """An eastward travelling wave (period 24 samples) + noise, as a (n, n_space) matrix."""
    rng = np.random.default_rng(seed)
    t, x = np.arange(n)[:, None], np.arange(n_space)[None, :]
    return np.cos(2 * np.pi * (t / 24.0 - x / n_space)) + 0.3 * rng.standard_normal((n, n_space)) + 7.0


# ---------------------------------------------------------------------------- HilbertPCA


@pytest.mark.parametrize("n", [96, 95])  # the FFT's even and odd lengths
@pytest.mark.parametrize("padding", ["exp", "none"])
def test_analytic_signal_on_the_device_is_scipys(backend, n, padding):
    X = _wave(n)
    expected = analytic_signal(X, padding=padding, decay_factor=0.2)
    got = analytic_signal(backend.asarray(X), padding=padding, decay_factor=0.2)
    np.testing.assert_allclose(standin_free(got, backend), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("solver, chunks", [("gram", (96, 8)), ("gram", (48, 8)), ("krylov", (96, 8))])
def test_hilbert_pca_on_device_chunks_matches_the_numpy_fit(backend, solver, chunks):
    X = _wave()
    options = {"tol": 1e-9, "random_state": 0} if solver == "krylov" else {}
    reference = HilbertPCA(3, solver=solver, **options).fit(da.from_array(X, chunks=chunks))
    model = HilbertPCA(3, solver=solver, **options).fit(_on(backend, X, chunks))
    assert type(model.components_) is np.ndarray and np.iscomplexobj(model.components_)
    assert model.n_passes_ == reference.n_passes_
    bound = 1e-10 if solver == "gram" else max(2 * reference.error_bound_, 1e-9)
    assert _complex_sin_theta(model.components_, reference.components_) <= bound
    np.testing.assert_allclose(model.explained_variance_, reference.explained_variance_, rtol=1e-10)
    np.testing.assert_allclose(model.mean_, reference.mean_, rtol=1e-12)
    scores = model.transform(_on(backend, X, chunks))
    assert isinstance(scores, da.Array) and _is_device_chunked(scores, backend) and scores.dtype == np.complex128
    np.testing.assert_allclose(standin_free(scores.compute(), backend), model.transform(X), rtol=1e-10, atol=1e-10)


def test_hilbert_pca_labeled_with_weights_and_land_and_device_cuda(backend, monkeypatch):
    field = xr.DataArray(_wave(96, 20).reshape(96, 4, 5), dims=("time", "lat", "lon"),
                         coords={"time": np.arange(96), "lat": np.linspace(-60, 60, 4), "lon": np.arange(5) * 10.0})
    field[:, 0, :2] = np.nan
    host = field.chunk({"time": -1, "lat": 2})
    reference = HilbertPCA(2, weights="coslat").fit(host, sample_dims="time")
    device = host.copy(data=standin.dask_on_device(host.data, backend))
    model = HilbertPCA(2, weights="coslat").fit(device, sample_dims="time")
    assert _complex_sin_theta(model.components_, reference.components_) <= 1e-10
    assert model.solver_info_["n_masked_features"] == 2
    scores = model.transform(device)
    assert _is_device_chunked(scores.data, backend)
    field_back = model.inverse_transform(scores)  # Re(scores·vᴴ) + mean, on the device
    assert _is_device_chunked(field_back.data, backend) and not np.iscomplexobj(field_back.data)
    np.testing.assert_allclose(standin_free(field_back.data.compute(), backend),
                               model.inverse_transform(model.transform(field)).values, rtol=1e-10, equal_nan=True)
    # device="cuda": host blocks moved to the device in their read task.
    _cuda_is(backend, monkeypatch)
    moved = HilbertPCA(2, weights="coslat", device="cuda").fit(host, sample_dims="time")
    assert _complex_sin_theta(moved.components_, reference.components_) <= 1e-10
    assert _is_device_chunked(moved.transform(host).data, backend)
    assert type(moved.transform(field).values) is np.ndarray  # NumPy in, NumPy out


# ---------------------------------------------------------------------------- MCA and CCA


def _pair(n=120, dx=20, dy=14):
    X, Y = coupled_fields(n, dx, dy, seed=2)
    X[:, 3] = np.nan  # a feature missing everywhere: masked by each field's stage
    return X, Y


@pytest.mark.parametrize("solver", ["exact", "krylov"])
def test_mca_on_device_chunks_matches_the_numpy_fit(backend, solver):
    X, Y = _pair()
    weights = (np.linspace(0.5, 2.0, X.shape[1]), None)
    options = {"tol": 1e-9, "random_state": 0, "max_passes": 30} if solver == "krylov" else {}
    host = (da.from_array(X, chunks=(40, 10)), da.from_array(Y, chunks=(30, 14)))
    reference = MCA(3, solver=solver, weights=weights, **options).fit(*host)
    mca = MCA(3, solver=solver, weights=weights, **options).fit(_on(backend, X, (40, 10)), _on(backend, Y, (30, 14)))
    assert mca.n_passes_ == reference.n_passes_ and type(mca.components_x_) is np.ndarray
    bound = 1e-10 if solver == "exact" else max(2 * reference.error_bound_, 1e-9)
    assert sin_theta(mca.components_x_, reference.components_x_) <= bound
    assert sin_theta(mca.components_y_, reference.components_y_) <= bound
    np.testing.assert_allclose(mca.singular_values_, reference.singular_values_, rtol=1e-10)
    np.testing.assert_array_equal(mca.feature_stage_x_.keep, reference.feature_stage_x_.keep)
    scores_x, scores_y = mca.transform(_on(backend, X, (40, 10)), _on(backend, Y, (30, 14)))
    assert _is_device_chunked(scores_x, backend) and _is_device_chunked(scores_y, backend)
    expected_x, expected_y = mca.transform(X, Y)
    np.testing.assert_allclose(standin_free(scores_x.compute(), backend), expected_x, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(standin_free(scores_y.compute(), backend), expected_y, rtol=1e-10, atol=1e-10)
    maps = mca.patterns(_on(backend, X, (40, 10)), _on(backend, Y, (30, 14)))
    for kind, (got_x, got_y) in maps.items():
        want_x, want_y = mca.patterns(X, Y)[kind]
        assert type(got_x) is np.ndarray
        np.testing.assert_allclose(got_x, want_x, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(got_y, want_y, rtol=1e-10, atol=1e-12)


def test_device_cuda_moves_host_blocks_for_mca_cca_and_the_bootstrap(backend, monkeypatch):
    _cuda_is(backend, monkeypatch)
    X, Y = _pair()
    host = (da.from_array(X, chunks=(40, 10)), da.from_array(Y, chunks=(30, 14)))
    reference = MCA(2).fit(*host)
    mca = MCA(2, device="cuda").fit(*host)
    assert sin_theta(mca.components_x_, reference.components_x_) <= 1e-10
    assert all(_is_device_chunked(s, backend) for s in mca.transform(*host))
    assert all(type(s) is np.ndarray for s in mca.transform(X, Y))  # NumPy in, NumPy out
    cca = CCA(2, n_pca_modes=4, device="cuda").fit(*host)
    np.testing.assert_allclose(cca.canonical_correlations_, CCA(2, n_pca_modes=4).fit(*host).canonical_correlations_,
                               rtol=1e-10)
    assert all(_is_device_chunked(s, backend) for s in cca.transform(*host))
    # The bootstrap reads through the model's road: a device="cuda" PCA projects on the device.
    Z = np.nan_to_num(X[:, :12])
    on_host = PCA(3, solver="covariance").fit(Z)
    pca = PCA(3, solver="covariance", device="cuda").fit(Z)
    np.testing.assert_allclose(bootstrap(pca, Z, n_replicates=200, random_state=0).explained_variance_interval,
                               bootstrap(on_host, Z, n_replicates=200, random_state=0).explained_variance_interval,
                               rtol=1e-10)


@pytest.mark.parametrize("solver", ["exact", "pca"])
def test_cca_on_device_chunks_matches_the_numpy_fit(backend, solver):
    X, Y = _pair()
    host = (da.from_array(X, chunks=(40, 10)), da.from_array(Y, chunks=(30, 14)))
    reference = CCA(2, n_pca_modes=(5, 4), solver=solver).fit(*host)
    cca = CCA(2, n_pca_modes=(5, 4), solver=solver).fit(_on(backend, X, (40, 10)), _on(backend, Y, (30, 14)))
    assert cca.n_passes_ == reference.n_passes_ and type(cca.weights_x_) is np.ndarray
    np.testing.assert_allclose(cca.canonical_correlations_, reference.canonical_correlations_, rtol=1e-9)
    assert sin_theta(cca.weights_x_, reference.weights_x_) <= 1e-8
    variates = cca.transform(_on(backend, X, (40, 10)), _on(backend, Y, (30, 14)))
    for got, want in zip(variates, cca.transform(X, Y)):
        assert _is_device_chunked(got, backend)
        np.testing.assert_allclose(standin_free(got.compute(), backend), want, rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------------------- the bootstrap


@pytest.mark.parametrize("solver", ["covariance", "krylov"])  # exact replicates; the model's own basis
def test_bootstrap_of_device_chunks_is_the_numpy_bootstrap(backend, solver):
    X = low_rank_data(240, 12, rank=6, noise=0.05, offset=1e3, seed=3)
    options = {"tol": 1e-10, "random_state": 0} if solver == "krylov" else {}
    pca = PCA(4, solver=solver, **options).fit(da.from_array(X, chunks=(60, 6)))
    reference = bootstrap(pca, da.from_array(X, chunks=(60, 6)), n_replicates=200, random_state=1)
    result = bootstrap(pca, _on(backend, X), n_replicates=200, random_state=1)
    assert result.exact == reference.exact == (solver == "covariance")
    for name in ("explained_variance", "explained_variance_interval", "explained_variance_ratio_interval",
                 "components_interval", "replicates"):
        assert type(getattr(result, name)) is np.ndarray
        np.testing.assert_allclose(getattr(result, name), getattr(reference, name), rtol=1e-10, atol=1e-12)
    # Scores handed in on the device: moved to the host explicitly, the same replicates.
    scores = pca.transform(X)
    direct = bootstrap_scores(backend.asarray(scores), n_replicates=200, random_state=2)
    np.testing.assert_allclose(direct.replicates, bootstrap_scores(scores, n_replicates=200, random_state=2).replicates,
                               rtol=1e-12)


# ---------------------------------------------------------------------------- maps, lags, rotations


def _field(n=48):
    values = low_rank_data(n, 20, rank=4, noise=0.1, offset=10.0, seed=6).reshape(n, 4, 5)
    values[:, 0, :2] = np.nan
    return xr.DataArray(values, dims=("time", "lat", "lon"), name="sst",
                        coords={"time": np.arange(n), "lat": np.linspace(-60, 60, 4), "lon": np.arange(5) * 10.0})


@pytest.mark.parametrize("kind", ["correlation", "covariance"])
def test_component_maps_of_device_chunks(backend, kind):
    host = _field().chunk({"time": 12})
    device = host.copy(data=standin.dask_on_device(host.data, backend))
    pca = PCA(3, solver="covariance", weights="coslat").fit(device, sample_dims="time")
    maps = pca.component_maps(device, kind=kind)
    expected = pca.component_maps(host, kind=kind).values
    got = maps.data.compute()
    assert type(got) is np.ndarray  # k × d maps: a reduced result, on the host
    np.testing.assert_allclose(got, expected, rtol=1e-10, equal_nan=True)
    assert np.isnan(got[:, 0, :2]).all() and maps.dims == ("mode", "lat", "lon")


def test_lag_embed_keeps_device_chunks_and_fits_as_on_the_host(backend):
    X = low_rank_data(120, 8, rank=4, noise=0.1, offset=5.0, seed=8)
    embedded = lag_embed(_on(backend, X, (40, 8)), 3, 2)
    assert _is_device_chunked(embedded, backend)
    reference = PCA(3, solver="covariance").fit(lag_embed(da.from_array(X, chunks=(40, 8)), 3, 2))
    pca = PCA(3, solver="covariance").fit(embedded)
    assert sin_theta(pca.components_, reference.components_) <= 1e-10
    np.testing.assert_allclose(standin_free(embedded.compute(), backend), lag_embed(X, 3, 2).compute())


@pytest.mark.parametrize("power", [1, 4])  # varimax, promax
def test_rotated_scores_of_device_chunks_stay_on_the_device(backend, power):
    X = low_rank_data(120, 10, rank=5, noise=0.1, offset=5.0, seed=9)
    pca = PCA(4, solver="covariance").fit(_on(backend, X, (40, 10)))
    rotator = Rotator(n_modes=3, power=power).fit(pca)
    scores = rotator.transform(_on(backend, X, (40, 10)))
    assert _is_device_chunked(scores, backend)
    np.testing.assert_allclose(standin_free(scores.compute(), backend), rotator.transform(X), rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------------------- the device parameter


@pytest.mark.parametrize("estimator", [HilbertPCA, MCA, CCA])
def test_device_is_declared_once_for_every_estimator(estimator):
    assert estimator._parameter_constraints["device"] is PCA._parameter_constraints["device"]
    X, Y = _pair()
    fit = (lambda e: e.fit(X)) if estimator is HilbertPCA else (lambda e: e.fit(np.nan_to_num(X), Y))
    with pytest.raises(InvalidParameterError, match=r"device='tpu': expected None or one of 'cpu', 'cuda'"):
        fit(estimator(2, device="tpu"))
    if _cupy_backend() is None:  # no GPU here: refused before any read, naming the fix
        with pytest.raises(InputError, match=r"device='cuda'.*pip install cupy-cuda12x"):
            fit(estimator(2, device="cuda"))
    assert estimator(2, device="cpu").get_params()["device"] == "cpu"
    assert _device.DEVICE_NAMES == ("cpu", "cuda")
