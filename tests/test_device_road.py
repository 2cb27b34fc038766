"""Dask arrays whose chunks live on a device (CuPy), through every road of PCA.

Each test runs on the CPU stand-in (``tests/_device_standin.py``: refuses implicit conversion to
NumPy as CuPy does, so any accidental host copy in a kernel fails here), and on real CuPy where
``import cupy`` works and a CUDA GPU is present. Each device fit is compared with the NumPy fit of
the same data: exact solvers to sin θ ≤ 1e-10, Krylov within its bound, the iterative ones to
their tolerance. Fitted attributes are NumPy; projections of device input stay on the device.
The arrays are small and the iterative solvers' tolerances loose (a device fit runs the same
iterations as the host's, so they agree to round-off whatever the tolerance): the file runs in a
few seconds.
"""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr

from daskpca import PCA, _plan, load
from daskpca.exceptions import InputError, InvalidParameterError
from daskpca.passes import _device, _geometry
from daskpca.solvers import covariance, tsqr

import _device_standin as standin
from _helpers import low_rank_data, sin_theta, write_zarr


def _cupy_backend():
    backend = _device.CupyBackend()
    return None if backend.problem() else _device.register(backend)


BACKENDS = [pytest.param(standin.BACKEND, id="standin"),
            pytest.param("cupy", id="cupy", marks=pytest.mark.skipif(_cupy_backend() is None,
                                                                    reason="needs CuPy and a CUDA GPU"))]


@pytest.fixture(scope="module", params=BACKENDS)
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
ITERATIVE = {"randomized": {"n_power_iter": 2}, "krylov": {"tol": 1e-8}, "als": {"tol": 1e-4},
             "ppca": {"tol": 1e-4, "max_iter": 500}}


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
    np.testing.assert_allclose(pca.explained_variance_, reference.explained_variance_, rtol=1e-9)
    np.testing.assert_allclose(pca.mean_, reference.mean_, rtol=1e-12)
    np.testing.assert_allclose(pca.total_variance_, reference.total_variance_, rtol=1e-10)


def test_float32_chunks_accumulate_in_float64(backend):
    X = _data(dtype=np.float32)
    reference = PCA(3, solver="covariance").fit(da.from_array(X, chunks=(60, 6)))
    pca = PCA(3, solver="covariance").fit(_on(backend, X))
    assert sin_theta(pca.components_, reference.components_) <= 1e-10
    scores = pca.transform(_on(backend, X))
    assert scores.dtype == np.float32 and _is_device_chunked(scores, backend)


@pytest.mark.parametrize("solver", ["covariance", "gram", "randomized", "tsqr"])  # krylov: randomized's first pass
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
    reference = PCA(3, solver="ppca", random_state=0, tol=1e-4).fit(da.from_array(X, chunks=(60, 6)))
    pca = PCA(3, solver="ppca", random_state=0, tol=1e-4).fit(_on(backend, X))
    assert sin_theta(pca.components_, reference.components_) <= 1e-10 and pca.n_passes_ == reference.n_passes_
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


# ---- the device's own floor: the final problem solved where it is cheaper, wider merges ----------


def test_the_cost_rule_puts_large_final_problems_on_the_device():
    """Host eigh/SVD at LAPACK's rate plus the 8·m² transfer, against the device's fixed cost plus
    its rate: small matrices stay on the host, large ones are solved on the device; NumPy blocks
    never; the rates come from dask config."""
    device = standin.BACKEND
    assert not _device.solve_on_device(_device.NUMPY, 10_000)
    for kind in ("eigh", "svd"):
        assert not _device.solve_on_device(device, 200, kind) and _device.solve_on_device(device, 1000, kind)
    with dask.config.set({"daskpca.device.host-eigh-flops": 1e16}):  # a host as fast as the device
        assert not _device.solve_on_device(device, 4000)
    with dask.config.set({"daskpca.device.solve-seconds": 0}):  # no fixed cost: even d = 12 goes up
        assert _device.solve_on_device(device, 12)


@pytest.fixture
def device_solves(backend, monkeypatch):
    """Counts of the eigh/SVD calls the backend's device makes (the root's final problem)."""
    count = {"eigh": 0, "svd": 0}
    for kind in count:
        original = getattr(type(backend), kind)

        def counted(self, matrix, original=original, kind=kind):
            count[kind] += 1
            return original(self, matrix)

        monkeypatch.setattr(type(backend), kind, counted)
    return count


@pytest.mark.parametrize("solver, options", [("covariance", {}), ("covariance", {"n_components": 0.9}),
                                             ("covariance", {"weights": np.linspace(1, 2, 12), "standardize": True}),
                                             ("tsqr", {}), ("tsqr", {"n_components": 0.9}),
                                             ("gram", {}), ("gram", {"n_components": 0.9})])
def test_the_root_solves_the_final_problem_on_the_device(backend, device_solves, solver, options):
    """With the device's fixed cost set to 0 (the rule then sends even a 12×12 problem up), the root
    task solves the covariance's eigenproblem (the feature stage and a variance fraction resolved
    there too), the SVD of R or the n×n Gram's eigenproblem on the device, and hands back its
    pairs; the fit equals the NumPy one. With the default rates this small problem is solved on
    the host."""
    X = _data(seed=11)
    kind = "svd" if solver == "tsqr" else "eigh"
    options = {"n_components": 3, **options}
    reference = PCA(solver=solver, **options).fit(da.from_array(X, chunks=(30, 6)))
    with dask.config.set({"daskpca.device.solve-seconds": 0}):
        pca = PCA(solver=solver, **options).fit(_on(backend, X, chunks=(30, 6)))
    assert device_solves[kind] == 1
    _assert_fitted_on_host(pca)
    assert pca.n_components_ == reference.n_components_
    assert sin_theta(pca.components_, reference.components_) <= 1e-10
    np.testing.assert_allclose(pca.explained_variance_, reference.explained_variance_, rtol=1e-10)
    np.testing.assert_allclose(pca.total_variance_, reference.total_variance_, rtol=1e-12)
    np.testing.assert_allclose(pca.mean_, reference.mean_, rtol=1e-12)
    if solver == "covariance":  # the sufficient statistics the model keeps (update, save) came down too
        moments, expected = pca.solver_info_["moments"], reference.solver_info_["moments"]
        assert type(moments.scatter) is np.ndarray and moments.count == expected.count
        np.testing.assert_allclose(moments.symmetric_scatter(), expected.symmetric_scatter(), rtol=1e-9, atol=1e-9)
    elif solver == "gram":  # every pair of the n×n Gram came from the device's dense solver
        assert pca.solver_info_["eigensolver"] == "device"
    else:  # every singular value came down, the vectors only k
        np.testing.assert_allclose(pca.solver_info_["singular_values"], reference.solver_info_["singular_values"],
                                   rtol=1e-10, atol=1e-12)
    PCA(solver=solver, **options).fit(_on(backend, X, chunks=(30, 6)))
    assert device_solves[kind] == 1  # default rates: the 12×12 problem is the host's


def _merge_tasks(delayed, name):
    return sum(1 for key in dict(delayed.__dask_graph__()) if isinstance(key, tuple) and key[0].startswith(name))


def test_device_partials_merge_eight_at_a_time(backend):
    """16 device row blocks: 3 merge tasks (8 + 8, then the root's 2) instead of 15 pairwise ones,
    all parts at once — the same moments and R factor as the host's pairwise Chan merges, also for
    means 10¹² times the spread (the parts' means are taken about a shift, not rounded)."""
    X = low_rank_data(320, 12, rank=6, noise=0.05, offset=0, seed=12) * 1e-3 + 1e10 * (1 + np.arange(12))
    host, device = da.from_array(X, chunks=(20, 12)), _on(backend, X, chunks=(20, 12))
    assert _merge_tasks(covariance.moments_graph(host), "covariance-merge") == 15
    assert _merge_tasks(covariance.moments_graph(device), "covariance-merge") == 3
    assert _merge_tasks(tsqr.r_graph(device), "tsqr-merge") == 3
    (expected, got) = dask.compute(covariance.moments_graph(host), covariance.moments_graph(device))
    assert got.count == expected.count == 320
    np.testing.assert_allclose(got.mean, expected.mean, rtol=1e-14)
    np.testing.assert_allclose(got.scatter, expected.scatter, rtol=0, atol=1e-13 * np.abs(expected.scatter).max())
    (r_host, r_device) = dask.compute(tsqr.r_graph(host), tsqr.r_graph(device))
    np.testing.assert_allclose(r_device.r.T @ r_device.r, r_host.r.T @ r_host.r, rtol=0,
                               atol=1e-13 * np.abs(expected.scatter).max())


def test_the_plan_prices_the_device(monkeypatch):
    """``device="cuda"`` (the stand-in, priced as a GPU): the planner charges the device's rates —
    products at 25 TFLOP/s, the final eigh on the device, each pass's blocks moved up at 20 GB/s,
    the task budget from the device's memory — and says so; the exact covariance, ~200× the
    host's flop rate, then costs less than block Krylov's ten reads, which the CPU plan of the
    same input chooses."""
    standin.use_as_cuda(monkeypatch)
    monkeypatch.setattr(standin.StandInBackend, "memory", lambda self: (140 * 2**30, 140 * 2**30))  # an H200
    monkeypatch.setattr(_plan, "what_runs", lambda: (None, (16, 8 * 2**30, "16 cores, 8 GiB each (the test's)")))
    X = da.zeros((200_000, 8000), chunks=(12_500, 8000), dtype=np.float32)
    cpu, gpu = PCA(10).plan(X), PCA(10, device="cuda").plan(X)
    assert cpu.solver == "krylov" and cpu.device is None and "device" not in str(cpu)
    assert gpu.solver == "covariance" and gpu.device.moved and gpu.device.memory == 140 * 2**30
    assert "priced on the device" in gpu.reason and "device: standin, priced with the device's rates" in str(gpu)
    assert "from the device's memory (140.0 GiB) per thread" in str(gpu)
    chosen = gpu.estimate("covariance")
    assert chosen.flop_rate == 25e12 and chosen.move_seconds == pytest.approx(200_000 * 8000 * 4 / 20e9)
    assert chosen.local_seconds < cpu.estimate("covariance").flops / 60e9 / 10
    with dask.config.set({"daskpca.device.flops": 60e9}):  # a "device" no faster than the host
        assert PCA(10, device="cuda").plan(X).solver == "krylov"


def test_device_merges_are_sized_to_the_task_budget_the_plan_checks(monkeypatch):
    """TSQR's 8000-wide R factors merged 8 at a time would hold 12 GiB in one task, more than an
    H200's share per thread under 16 threads (4.4 GiB): the plan narrows the merges to what a task
    may hold, so it is feasible rather than refused, and the graph's merge trees use the same
    fan-in (one rule, :func:`~daskpca.passes._geometry.device_task_bytes`)."""
    standin.use_as_cuda(monkeypatch)
    h200 = 141 * 10**9
    monkeypatch.setattr(standin.StandInBackend, "memory", lambda self: (h200, h200))
    monkeypatch.setattr(_plan, "what_runs", lambda: (None, (16, 8 * 2**30, "16 cores, 8 GiB each (the test's)")))
    monkeypatch.setattr(_geometry, "device_threads", lambda: 16)
    X = da.zeros((200_000, 8000), chunks=(12_500, 8000), dtype=np.float32)
    plan = PCA(10, solver="tsqr", device="cuda").plan(X)
    budget = plan.task_memory_budget
    assert budget == int(0.5 * h200 / 16) and plan.estimate("tsqr").feasible
    part = 8000 * 8000 * 8  # one R factor, float64
    on_device = X.map_blocks(standin.to_standin)
    fan_in = _geometry.device_merge_fan_in(_device.on_device(on_device), 2, part, copies=3)
    assert fan_in == 2 and (3 * fan_in + 1) * part <= budget < (3 * 4 + 1) * part
    # A small d keeps the device's wide merges.
    narrow = _device.on_device(on_device[:, :1000])
    assert _geometry.device_merge_fan_in(narrow, 2, 1000 * 1000 * 8, copies=3) == _device.DEVICE_SPLIT_EVERY


def test_a_device_pass_claims_no_compute_time_for_the_eta(backend):
    """A sketch's compute seconds (what Passes.computed counts a later pass at) are the tasks' CPU
    time on the host; a device's kernels run asynchronously past it, so a device pass claims none
    and the ETA counts its passes as measured."""
    from daskpca.passes import _sketch

    X = _data(2_000, 40)
    omega = np.linalg.qr(np.random.default_rng(0).standard_normal((40, 8)))[0]
    host = _sketch.run_pass((da.from_array(X, chunks=(500, 40)), None), omega, first=True)
    device = _sketch.run_pass((_on(backend, X, chunks=(500, 40)), None), omega, first=True)
    assert host.compute_seconds > 0 and device.compute_seconds == 0.0
