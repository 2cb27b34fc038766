"""How many times fit reads each stored chunk: proven by counting reads on a real zarr store."""

import dask
import numpy as np
import pytest

from daskpca import PCA

from _helpers import low_rank_data, write_zarr


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
