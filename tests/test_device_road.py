"""Dask arrays whose chunks live on a device (CuPy), through every road of PCA.

Each test runs on the CPU stand-in (``tests/_device_standin.py``: refuses implicit conversion to
NumPy as CuPy does, so any accidental host copy in a kernel fails here), and on real CuPy where
``import cupy`` works and a CUDA GPU is present. Each device fit is compared with the NumPy fit of
the same data: exact solvers to sin θ ≤ 1e-10, Krylov within its bound, the iterative ones to
their tolerance. Fitted attributes are NumPy; projections of device input stay on the device.
"""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr

from daskpca import PCA, load
from daskpca.exceptions import InputError, InvalidParameterError
from daskpca.solvers import _device

import _device_standin as standin
from _helpers import low_rank_data, sin_theta, write_zarr


def _cupy_backend():
    backend = _device.CupyBackend()
    return None if backend.problem() else _device.register(backend)


BACKENDS = [pytest.param(standin.BACKEND, id="standin"),
            pytest.param("cupy", id="cupy", marks=pytest.mark.skipif(_cupy_backend() is None,
                                                                    reason="needs CuPy and a CUDA GPU"))]


@pytest.fixture(params=BACKENDS)
def backend(request):
    return _cupy_backend() if request.param == "cupy" else request.param


def _data(n=240, d=12, *, dtype=np.float64, seed=0):
    return low_rank_data(n, d, rank=6, noise=0.05, offset=1e3, dtype=dtype, seed=seed)


def _on(backend, X, chunks=(60, 6)):
    """``X`` as a dask array of device chunks (column pieces too: a row block is concatenated on the device)."""
    return standin.dask_on_device(da.from_array(X, chunks=chunks), backend)


def _is_device_chunked(array, backend):
    return backend.owns(array._meta) and all(backend.owns(b) for b in dask.compute(*array.to_delayed().ravel()))


def _assert_fitted_on_host(pca):
    for name in ("components_", "explained_variance_", "mean_", "singular_values_", "explained_variance_ratio_"):
        assert type(getattr(pca, name)) is np.ndarray, name


EXACT = ["covariance", "gram", "tsqr"]
ITERATIVE = {"randomized": {"n_power_iter": 4}, "krylov": {"tol": 1e-8}, "als": {"tol": 1e-10},
             "ppca": {"tol": 1e-10, "max_iter": 500}}


@pytest.mark.parametrize("solver", [*EXACT, *ITERATIVE, "auto"])
def test_every_solver_on_device_chunks_matches_the_numpy_fit(backend, solver):
    X = _data()
    options = ITERATIVE.get(solver, {})
    reference = PCA(4, solver=solver, random_state=0, **options).fit(da.from_array(X, chunks=(60, 6)))
    pca = PCA(4, solver=solver, random_state=0, **options).fit(_on(backend, X))
    _assert_fitted_on_host(pca)
    assert pca.solver_ == reference.solver_ and pca.n_passes_ == reference.n_passes_
    tolerance = 1e-10 if pca.error_bound_ == 0 else max(1e-8, 2 * reference.error_bound_ if np.isfinite(reference.error_bound_) else 1e-8)
    assert sin_theta(pca.components_, reference.components_) <= tolerance
    rtol = 1e-9 if solver != "ppca" else 1e-6
    np.testing.assert_allclose(pca.explained_variance_, reference.explained_variance_, rtol=rtol)
    np.testing.assert_allclose(pca.mean_, reference.mean_, rtol=1e-12)
    np.testing.assert_allclose(pca.total_variance_, reference.total_variance_, rtol=1e-10)


def test_float32_chunks_accumulate_in_float64(backend):
    X = _data(dtype=np.float32)
    reference = PCA(3, solver="covariance").fit(da.from_array(X, chunks=(60, 6)))
    pca = PCA(3, solver="covariance").fit(_on(backend, X))
    assert sin_theta(pca.components_, reference.components_) <= 1e-10
    scores = pca.transform(_on(backend, X))
    assert scores.dtype == np.float32 and _is_device_chunked(scores, backend)


@pytest.mark.parametrize("solver", ["covariance", "gram", "randomized", "krylov", "tsqr"])
def test_weights_and_a_wholly_missing_feature(backend, solver):
    X = _data(seed=1)
    X[:, [3, 7]] = np.nan
    weights = np.random.default_rng(0).uniform(0.5, 2.0, X.shape[1])
    options = ITERATIVE.get(solver, {})
    reference = PCA(3, solver=solver, weights=weights, random_state=1, **options).fit(da.from_array(X, chunks=(60, 6)))
    pca = PCA(3, solver=solver, weights=weights, random_state=1, **options).fit(_on(backend, X))
    np.testing.assert_array_equal(pca.feature_stage_.keep, reference.feature_stage_.keep)
    assert pca.n_passes_ == reference.n_passes_
    assert sin_theta(pca.components_, reference.components_) <= (1e-10 if solver in EXACT else 1e-8)
    rows = pca.inverse_transform(pca.transform(_on(backend, X)))
    assert _is_device_chunked(rows, backend)
    host = standin_free(rows.compute(), backend)
    np.testing.assert_allclose(host, reference.inverse_transform(reference.transform(da.from_array(X, chunks=(60, 6)))).compute(),
                               rtol=1e-9, atol=1e-9)
    assert np.isnan(host[:, [3, 7]]).all()


def test_ppca_reads_nan_as_missing_on_the_device(backend):
    X = _data(seed=2)
    X[np.random.default_rng(1).random(X.shape) < 0.05] = np.nan
    reference = PCA(3, solver="ppca", random_state=0, tol=1e-10).fit(da.from_array(X, chunks=(60, 6)))
    pca = PCA(3, solver="ppca", random_state=0, tol=1e-10).fit(_on(backend, X))
    assert sin_theta(pca.components_, reference.components_) <= 1e-7
    assert pca.solver_info_["n_missing"] == reference.solver_info_["n_missing"] > 0


def standin_free(array, backend):
    """A computed result moved to the host explicitly (as a CuPy user calls ``.get()``)."""
    assert backend.owns(array)
    return backend.to_host(array)


def test_transform_and_inverse_transform_keep_device_chunks(backend):
    X = _data(seed=3)
    reference = PCA(4, whiten=True).fit(da.from_array(X, chunks=(60, 6)))
    pca = PCA(4, whiten=True).fit(_on(backend, X))
    scores = pca.transform(_on(backend, X))
    assert isinstance(scores, da.Array) and _is_device_chunked(scores, backend)
    expected = reference.transform(X)
    got = standin_free(scores.compute(), backend)
    np.testing.assert_allclose(np.abs(got), np.abs(expected), rtol=1e-8, atol=1e-8)
    rows = pca.inverse_transform(scores)
    assert _is_device_chunked(rows, backend)
    np.testing.assert_allclose(standin_free(rows.compute(), backend), reference.inverse_transform(expected),
                               rtol=1e-9)
    # Host input to a device-fitted model: host results, as for any fit.
    np.testing.assert_allclose(np.abs(pca.transform(X)), np.abs(expected), rtol=1e-8, atol=1e-8)
    assert np.all(np.isfinite(pca.score_samples(X)))


def test_update_folds_device_rows_in_exactly(backend):
    X = _data(seed=4)
    pca = PCA(3, solver="covariance").fit(_on(backend, X[:120]))
    pca.update(_on(backend, X[120:]))
    whole = PCA(3, solver="covariance").fit(X)
    assert pca.n_samples_ == 240 and sin_theta(pca.components_, whole.components_) <= 1e-10
    np.testing.assert_allclose(pca.explained_variance_, whole.explained_variance_, rtol=1e-10)
    _assert_fitted_on_host(pca)


def test_save_and_load_a_device_fitted_model(backend, tmp_path):
    X = _data(seed=5)
    pca = PCA(3, solver="covariance").fit(_on(backend, X))
    pca.save(tmp_path / "model.zarr")
    loaded = load(tmp_path / "model.zarr")
    np.testing.assert_array_equal(loaded.components_, pca.components_)
    scores = loaded.transform(_on(backend, X))
    assert _is_device_chunked(scores, backend)
    np.testing.assert_allclose(standin_free(scores.compute(), backend), pca.transform(X), rtol=1e-10, atol=1e-10)


def _field(n=48, nlat=4, nlon=5):
    rng = np.random.default_rng(6)
    d = nlat * nlon
    basis, _ = np.linalg.qr(rng.standard_normal((d, 4)))
    values = (rng.standard_normal((n, 4)) * [5.0, 3.0, 2.0, 1.0]) @ basis.T + 0.1 * rng.standard_normal((n, d)) + 10.0
    values = values.reshape(n, nlat, nlon)
    values[:, 0, :2] = np.nan  # land: NaN for every sample, masked
    return xr.DataArray(values, dims=("time", "lat", "lon"), name="sst",
                        coords={"time": np.arange(n), "lat": np.linspace(-60, 60, nlat), "lon": np.arange(nlon) * 10.0})


@pytest.mark.parametrize("solver", ["covariance", "krylov", "als"])
def test_labeled_road_with_coslat_weights_and_land(backend, solver):
    field = _field()
    host = field.chunk({"time": 12})
    device = host.copy(data=standin.dask_on_device(host.data, backend))
    options = ITERATIVE.get(solver, {})
    reference = PCA(3, solver=solver, weights="coslat", random_state=0, **options).fit(host, sample_dims="time")
    pca = PCA(3, solver=solver, weights="coslat", random_state=0, **options).fit(device, sample_dims="time")
    assert sin_theta(pca.components_, reference.components_) <= (1e-10 if solver == "covariance" else 1e-8)
    scores = pca.transform(device)
    assert isinstance(scores, xr.DataArray) and _is_device_chunked(scores.data, backend)
    ds = pca.to_xarray()
    assert isinstance(ds["components"].values, np.ndarray)
    recon = pca.inverse_transform(scores)
    assert _is_device_chunked(recon.data, backend)
    np.testing.assert_allclose(standin_free(recon.data.compute(), backend),
                               reference.inverse_transform(reference.transform(host)).values, rtol=1e-8, atol=1e-8)


@pytest.fixture
def moves(monkeypatch):
    """``device="cuda"`` mapped onto the stand-in, counting the blocks moved to its "device"."""
    count = {"blocks": 0}
    move = standin.StandInBackend.asarray

    def counted(self, host, dtype=None):
        # Row blocks of the data (≥ 60 rows here), not the small operands (d×ℓ test matrices, bases).
        count["blocks"] += not isinstance(host, standin.DeviceArray) and np.ndim(host) == 2 and np.shape(host)[0] >= 60
        return move(self, host, dtype)

    monkeypatch.setattr(standin.StandInBackend, "asarray", counted)
    standin.use_as_cuda(monkeypatch)
    return count


def test_device_cuda_moves_each_block_of_a_zarr_store_in_its_read_task(tmp_path, moves):
    X = _data(seed=7)
    write_zarr(tmp_path / "x.zarr", X, chunks=(60, 12))
    pca = PCA(3, solver="krylov", tol=1e-8, device="cuda", random_state=0).fit(str(tmp_path / "x.zarr"))
    reference = PCA(3, solver="krylov", tol=1e-8, random_state=0).fit(str(tmp_path / "x.zarr"))
    assert moves["blocks"] >= 1  # every block of the first read (tasks may group storage chunks)
    assert sin_theta(pca.components_, reference.components_) <= 2 * max(reference.error_bound_, 1e-9)
    _assert_fitted_on_host(pca)
    scores = pca.transform(str(tmp_path / "x.zarr"))
    assert _is_device_chunked(scores, standin.BACKEND)
    assert type(pca.transform(X)) is np.ndarray  # NumPy in, NumPy out, whatever the device


def test_device_cuda_is_checked_before_any_read(tmp_path):
    if _cupy_backend() is not None:
        pytest.skip("CuPy and a GPU are present here")
    X = _data()
    with pytest.raises(InputError, match=r"device='cuda'.*CuPy and a CUDA GPU.*pip install cupy-cuda12x.*device=None"):
        PCA(2, device="cuda").fit(X)
    with pytest.raises(InvalidParameterError, match="device"):
        PCA(2, device="tpu").fit(X)
    assert PCA(2, device="cpu").fit(X).components_.shape == (2, 12)


def test_cli_device_flag(tmp_path, moves):
    from daskpca import cli

    X = _data(seed=8)
    write_zarr(tmp_path / "x.zarr", X, chunks=(60, 12))
    assert cli.main(["fit", str(tmp_path / "x.zarr"), "-k", "3", "--out", str(tmp_path / "m.zarr"), "--device", "cuda",
                     "--quiet"]) == 0
    assert moves["blocks"] >= 1
    model = load(tmp_path / "m.zarr")
    assert model.device == "cuda"
    assert sin_theta(model.components_, PCA(3).fit(X).components_) <= 1e-10


def test_the_pass_cache_keeps_device_blocks(tmp_path, moves):
    """Passes 2+ of a device fit read the kept blocks on the device: from its memory (no block
    moved again), or from the disk copy (written from the host, each block moved up per pass)."""
    X = _data(seed=9)
    write_zarr(tmp_path / "x.zarr", X, chunks=(60, 12))
    reference = PCA(3, solver="randomized", n_power_iter=2, cache=False, random_state=0).fit(X)
    moved = {}
    for cache in ("memory", "disk"):
        moves["blocks"] = 0
        pca = PCA(3, solver="randomized", n_power_iter=2, device="cuda", cache=cache, random_state=0).fit(
            str(tmp_path / "x.zarr"))
        moved[cache] = moves["blocks"]
        assert pca.cache_["kind"] == cache and pca.n_passes_ == 3
        assert sin_theta(pca.components_, reference.components_) <= 1e-10
    assert moved["memory"] > 0 and moved["disk"] == 3 * moved["memory"]


@pytest.mark.skipif(_cupy_backend() is None, reason="needs CuPy and a CUDA GPU")
def test_device_cuda_on_a_gpu(tmp_path):
    """``device="cuda"`` itself (no stand-in): CuPy blocks from a zarr store, NumPy attributes."""
    X = _data(seed=10, dtype=np.float32)
    write_zarr(tmp_path / "x.zarr", X, chunks=(60, 12))
    for solver in ("covariance", "tsqr", "krylov"):
        options = ITERATIVE.get(solver, {})
        pca = PCA(3, solver=solver, device="cuda", random_state=0, **options).fit(str(tmp_path / "x.zarr"))
        reference = PCA(3, solver=solver, random_state=0, **options).fit(str(tmp_path / "x.zarr"))
        _assert_fitted_on_host(pca)
        assert sin_theta(pca.components_, reference.components_) <= max(1e-8, 2 * reference.error_bound_)
    scores = pca.transform(str(tmp_path / "x.zarr"))
    assert _is_device_chunked(scores, _cupy_backend())
