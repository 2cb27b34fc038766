"""CCA on each field's leading PCs: against a float64 LAPACK reference on both paths, its passes
on real zarr stores, and ill-posed problems refused before any read."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest

from daskpca import CCA

from _helpers import write_zarr
from test_mca import coupled_fields


def reference_cca(X, Y, kx, ky, k):
    """Canonical correlations and unit-variance variates of the kx and ky leading PC scores,
    from orthonormal bases of the scores (SVDs of the centred fields; no covariance formed)."""
    n = len(X)
    bases = [np.linalg.svd(F - F.mean(axis=0), full_matrices=False)[0][:, :m] for F, m in ((X, kx), (Y, ky))]
    a, rho, bt = np.linalg.svd(bases[0].T @ bases[1])
    return rho[:k], bases[0] @ a[:, :k] * np.sqrt(n - 1), bases[1] @ bt[:k].T * np.sqrt(n - 1)


@pytest.mark.parametrize("solver, passes", [("exact", 1), ("pca", 3)])  # pca: 1 per field's PCA + 1
def test_both_paths_agree_with_lapack(solver, passes):
    X, Y = coupled_fields(300, 40, 25, seed=4)
    rho, variates_x, variates_y = reference_cca(X, Y, 6, 5, 3)
    cca = CCA(3, n_pca_modes=(6, 5), solver=solver).fit(da.from_array(X, chunks=(70, 40)),
                                                       da.from_array(Y, chunks=(50, 25)))
    np.testing.assert_allclose(cca.canonical_correlations_, rho, rtol=1e-8)
    assert cca.n_passes_ == passes and cca.solver_ == solver
    scores_x, scores_y = cca.transform(X, Y)
    n = len(X)
    # Unit-variance variates equal to the reference's up to one sign per pair, shared by X and Y.
    signs = np.sign(np.sum(scores_x * variates_x, axis=0))
    np.testing.assert_allclose(scores_x * signs, variates_x, atol=1e-7)
    np.testing.assert_allclose(scores_y * signs, variates_y, atol=1e-7)
    np.testing.assert_allclose(np.sum(scores_x * scores_y, axis=0) / (n - 1), rho, rtol=1e-8)


def test_exact_path_reads_each_chunk_once_and_ill_posed_cca_reads_nothing(tmp_path):
    X, Y = coupled_fields(60, 40, 30, seed=5)
    array_x, store_x = write_zarr(tmp_path / "x.zarr", X, (25, 40))
    array_y, store_y = write_zarr(tmp_path / "y.zarr", Y, (16, 30))
    with pytest.raises(ValueError, match=r"30 \+ 29 PCs of 60 samples is ill-posed.*kx \+ ky ≤ n − 2 = 58"):
        CCA(2, n_pca_modes=(30, 29)).fit(array_x, array_y)
    with pytest.raises(ValueError, match=r"n_components=4: expected 1..min\(kx, ky\) = 3"):
        CCA(4, n_pca_modes=(5, 3)).fit(array_x, array_y)
    assert not store_x.chunk_reads() and not store_y.chunk_reads()
    with dask.config.set(scheduler="threads"):
        cca = CCA(2, n_pca_modes=(5, 5)).fit(array_x, array_y)
    assert cca.n_passes_ == 1
    for store, chunks in ((store_x, 3), (store_y, 4)):
        reads = store.chunk_reads()
        assert len(reads) == chunks and set(reads.values()) == {1}
