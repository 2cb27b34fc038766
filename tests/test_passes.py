"""How many times fit reads each stored chunk: proven by counting reads on a real zarr store."""

import dask
import numpy as np
import pytest

from daskpca import PCA

from _helpers import low_rank_data, sin_theta, write_zarr


@pytest.fixture(autouse=True)
def _no_pass_cache():
    """These tests count each pass's reads of the source: the pass cache (on by default, see
    tests/test_pass_cache.py) would serve passes 2+ from the first read's blocks."""
    with dask.config.set({"daskpca.cache": False}):
        yield


@pytest.mark.parametrize(
    "solver, shape, chunks, passes",
    [
        ("covariance", (1_000, 40), (130, 40), 1),  # row blocks
        ("covariance", (1_000, 40), (130, 15), 1),  # column pieces are concatenated, not re-read
        ("gram", (50, 600), (50, 64), 2),  # column strips: Gram matrix, then components
        ("gram", (50, 600), (20, 64), 2),  # strips split along rows too
    ],
)
def test_each_chunk_read_once_per_pass(tmp_path, solver, shape, chunks, passes):
    X = low_rank_data(*shape, dtype=np.float32)
    array, store = write_zarr(tmp_path / "x.zarr", X, chunks)
    n_chunks = int(np.prod([-(-s // c) for s, c in zip(shape, chunks)]))
    with dask.config.set(scheduler="threads"):
        pca = PCA(5, solver=solver).fit(array)
    reads = store.chunk_reads()
    assert len(reads) == n_chunks
    assert set(reads.values()) == {passes}
    assert pca.n_passes_ == passes


def test_transform_is_lazy_and_reads_once(tmp_path):
    X = low_rank_data(1_000, 30)
    array, store = write_zarr(tmp_path / "x.zarr", X, (100, 30))
    with dask.config.set(scheduler="threads"):
        pca = PCA(4).fit(array)
        store.reads.clear()
        scores = pca.transform(array)
        assert not store.chunk_reads()  # nothing read until computed
        scores.compute()
    assert set(store.chunk_reads().values()) == {1}


def test_fit_accepts_a_zarr_path(tmp_path):
    X = low_rank_data(800, 20)
    write_zarr(tmp_path / "x.zarr", X, (100, 20))
    pca = PCA(3).fit(str(tmp_path / "x.zarr"))
    np.testing.assert_allclose(pca.mean_, X.mean(axis=0), rtol=1e-12)


@pytest.mark.parametrize("tol, max_passes", [(None, 3), (1e-5, None)])  # a fixed budget; a tol-driven stop
def test_krylov_reads_each_chunk_once_per_pass(tmp_path, tol, max_passes):
    from test_solver_krylov import hard_spectrum

    X = hard_spectrum(800, 60, 4, 2.0, dtype=np.float32)
    array, store = write_zarr(tmp_path / "x.zarr", X, (200, 25))
    with dask.config.set(scheduler="threads"):
        pca = PCA(4, solver="krylov", tol=tol, max_passes=max_passes, random_state=0).fit(array)
    reads = store.chunk_reads()
    assert len(reads) == 12 and set(reads.values()) == {pca.n_passes_}
    assert pca.n_passes_ == (max_passes or len(pca.solver_info_["bound_history"]))
    assert pca.solver_info_["converged"] == (tol is not None)


def _masked_field_store(tmp_path, shape=(240, 6, 10), chunks=(40, 6, 10)):
    """A (time, lat, lon) float32 field with land (NaN at every time step) in a counting zarr
    store, and the same values as a matrix."""
    from test_solver_krylov import hard_spectrum

    n, n_lat, n_lon = shape
    X = hard_spectrum(n, n_lat * n_lon, 3, 30.0, dtype=np.float32)  # a gap that q = 4 resolves
    X[:, [0, 1, 17, 42]] = np.nan  # four land points
    array, store = write_zarr(tmp_path / "field.zarr", X.reshape(shape), chunks)
    return X, array, store


@pytest.mark.parametrize("solver", ["randomized", "krylov"])
@pytest.mark.parametrize("how", ["weighted", "masked", "labeled"])
def test_sketching_solvers_fuse_the_feature_stage_into_their_first_pass(tmp_path, solver, how):
    """Weights and the mask of never-finite features ride in the first sketch pass: every chunk
    is read exactly n_passes_ times, and that is the solver's own passes (the generic road's
    extra statistics read is gone). The result matches the exact covariance solver's."""
    import dask.array as da
    import xarray as xr

    X, array, store = _masked_field_store(tmp_path)
    n, n_lat, n_lon = array.shape
    options = dict(solver=solver, random_state=0, **({"tol": 1e-6} if solver == "krylov" else {"n_power_iter": 4}))
    if how == "labeled":
        lat = np.linspace(-60, 60, n_lat)
        data = xr.DataArray(da.from_zarr(array), dims=("time", "lat", "lon"),
                            coords={"lat": lat, "lon": np.arange(n_lon) * 36.0})
        fit = dict(X=data, sample_dims="time")
        weights = "coslat"
    else:
        matrix = da.from_zarr(array).reshape(n, -1)
        if how == "weighted":  # no masked feature: the weights alone
            matrix = matrix[:, np.isfinite(X[0])]
        fit = dict(X=matrix)
        weights = np.random.default_rng(1).uniform(0.5, 2.0, matrix.shape[1])
    with dask.config.set(scheduler="threads"):
        pca = PCA(3, weights=weights, **options).fit(**fit)
        reads = store.chunk_reads()
        exact = PCA(3, solver="covariance", weights=weights).fit(**fit)
    assert len(reads) == 6 and set(reads.values()) == {pca.n_passes_}
    expected = len(pca.solver_info_["bound_history"]) if solver == "krylov" else 5
    assert pca.n_passes_ == expected and "mask_pass" not in pca.solver_info_
    assert pca.solver_info_["n_masked_features"] == (0 if how == "weighted" else 4)
    np.testing.assert_array_equal(pca.feature_stage_.keep, exact.feature_stage_.keep)
    np.testing.assert_array_equal(pca.feature_stage_.factor, exact.feature_stage_.factor)
    components = np.nan_to_num(np.asarray(pca.components_).reshape(3, -1))
    reference = np.nan_to_num(np.asarray(exact.components_).reshape(3, -1))
    error = sin_theta(components, reference)
    assert error < 1e-5
    if solver == "krylov":
        assert error <= pca.solver_info_["error_bound"] <= 1e-6
    np.testing.assert_allclose(pca.explained_variance_, exact.explained_variance_, rtol=1e-6)
    np.testing.assert_allclose(pca.total_variance_, exact.total_variance_, rtol=1e-10)


def test_the_client_gets_the_callers_blas_threads_only_for_a_large_step():
    """Inside a solve the tasks' one-thread limit holds; a client step gets the caller's threads
    back, unless its largest operand is small (CLIENT_THREADED_ELEMENTS), where more threads only
    contend (block Krylov's client on a busy machine: 9.7 s on two threads, 0.39 s on one)."""
    from threadpoolctl import threadpool_info, threadpool_limits

    from daskpca.passes._linalg import CLIENT_THREADED_ELEMENTS, client_blas_threads, tuned_for_tasks

    def blas_threads():
        return max(lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas")

    with threadpool_limits(limits=2, user_api="blas"), dask.config.set(scheduler="threads"), tuned_for_tasks():
        assert blas_threads() == 1
        with client_blas_threads():
            assert blas_threads() == 2
        with client_blas_threads(CLIENT_THREADED_ELEMENTS):
            assert blas_threads() == 2
        with client_blas_threads(CLIENT_THREADED_ELEMENTS - 1):
            assert blas_threads() == 1
        assert blas_threads() == 1


def test_the_blas_libraries_are_searched_once_per_set_of_modules(monkeypatch):
    """tuned_for_tasks and the client steps ask one kept threadpoolctl controller: its search of
    every loaded library (7 ms a call on a machine with CuPy's and PyTorch's libraries) runs again
    only after more modules were imported."""
    import sys

    import dask.array as da
    import threadpoolctl

    from daskpca.passes import _linalg

    searches = []
    real = threadpoolctl.ThreadpoolController

    def counted():
        searches.append(1)
        return real()

    X = low_rank_data(400, 30)
    with dask.config.set(scheduler="threads"):
        PCA(3, solver="covariance").fit(da.from_array(X, chunks=(100, 30)))  # a first fit's own imports
    monkeypatch.setattr(_linalg, "ThreadpoolController", counted)
    monkeypatch.setattr(_linalg, "_blas_found", None)
    with dask.config.set(scheduler="threads"):
        for _ in range(3):
            PCA(3, solver="covariance").fit(da.from_array(X, chunks=(100, 30)))
    assert len(searches) == 1
    monkeypatch.setitem(sys.modules, "daskpca_test_new_module", object())  # an import happened
    with dask.config.set(scheduler="threads"), _linalg.tuned_for_tasks():
        pass
    assert len(searches) == 2


def test_a_pass_and_its_merge_tree_are_one_graph_layer_each():
    """The block tasks and the merge tree are written as one layer each, not a dask.delayed call
    per task (~2.5 ms each in dask 2026: 0.76 s of graph building for a 512-block pass); shared
    arrays are one key that every task names; the result is the plain reduction's."""
    import dask.array as da

    from daskpca.passes import map_row_blocks, tree_reduce

    X = np.arange(64 * 5 * 3, dtype=float).reshape(64 * 5, 3)
    weights = np.arange(3.0)
    array = da.from_array(X, chunks=(5, 3))
    blocks = map_row_blocks(array, lambda block, offset, w: (block @ w).sum(), "weighted", weights)
    total = tree_reduce(blocks, lambda parts: sum(parts), "weighted-sum", split_every=4)
    graph = total.__dask_graph__()
    block_layers = {name for name in graph.layers if name.startswith("weighted-")
                    and not name.startswith("weighted-sum-")}
    tree_layers = {name for name in graph.layers if name.startswith("weighted-sum-")}
    assert len(block_layers) == 1 and len(tree_layers) == 1
    (block_layer,) = block_layers
    assert len(graph.layers[block_layer]) == 64
    assert len(graph.layers[next(iter(tree_layers))]) == 16 + 4 + 1  # fan-in 4: 64 → 16 → 4 → 1
    shared_keys = {dependency for key in graph.layers[block_layer] for dependency in
                   graph.layers[block_layer][key].dependencies if not isinstance(dependency, tuple)}
    assert len(shared_keys) == 1  # the weights: one key for all 64 tasks
    assert total.compute(scheduler="threads") == pytest.approx(float((X @ weights).sum()))


def test_gram_components_are_row_major():
    """The Gram road joins its components' strips row-major (k×d): a Fortran-ordered k×d made
    every later step read with a stride of k (the sign flip: 24 ms of a 0.23 s fit on a GPU)."""
    import dask.array as da

    X = low_rank_data(40, 600)
    with dask.config.set(scheduler="threads"):
        pca = PCA(5, solver="gram").fit(da.from_array(X, chunks=(40, 100)))
    assert pca.components_.flags.c_contiguous
    assert sin_theta(pca.components_, PCA(5, solver="covariance").fit(X).components_) < 1e-10
