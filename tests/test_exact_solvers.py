"""The exact solvers (covariance, gram) against a float64 LAPACK reference.

Data: low rank plus noise with a mean offset of 1e4 (a method that forms XᵀX/n − μμᵀ loses ~8
digits to cancellation here). Float32 input is compared with the SVD of the *same float32 values*
in float64, so only the solver's own error is measured.
"""

import dask.array as da
import numpy as np
import pytest

from daskpca import PCA

from _helpers import align_signs, low_rank_data, reference_pca, sin_theta

K = 5

CASES = [
    # (solver, shape, chunks) — one comment per row on what it exercises
    ("covariance", (2_000, 40), (500, 40)),  # regular row blocks
    ("covariance", (2_000, 40), ((700, 300, 1, 999), (40,))),  # irregular rows, a 1-row block
    ("covariance", (2_000, 40), (333, 7)),  # chunked along both axes (column pieces concatenated)
    ("covariance", (2_000, 40), (2_000, 40)),  # one block: the merge tree has a single leaf
    ("gram", (60, 3_000), (60, 500)),  # wide data stored in column strips
    ("gram", (60, 3_000), ((13, 47), (1000, 1, 1999))),  # irregular in both directions
    ("gram", (60, 3_000), (7, 3_000)),  # row-chunked wide data: dask regroups into strips
    ("auto", (2_000, 40), (256, 40)),  # auto picks covariance for tall data
    ("auto", (60, 3_000), (60, 1_000)),  # auto picks gram for wide data
]


@pytest.mark.parametrize("dtype, angle_tol", [(np.float64, 1e-10), (np.float32, 1e-6)])
@pytest.mark.parametrize("solver, shape, chunks", CASES)
def test_matches_float64_reference(solver, shape, chunks, dtype, angle_tol):
    X = low_rank_data(*shape, dtype=dtype)
    components, variance, mean = reference_pca(X)
    pca = PCA(n_components=K, solver=solver).fit(da.from_array(X, chunks=chunks))

    assert sin_theta(pca.components_, components[:K]) <= angle_tol
    aligned, _ = align_signs(pca.components_, components[:K])
    np.testing.assert_allclose(aligned, components[:K], atol=angle_tol * 10)
    rtol = 1e-10 if dtype == np.float64 else 1e-6
    np.testing.assert_allclose(pca.explained_variance_, variance[:K], rtol=rtol)
    np.testing.assert_allclose(pca.total_variance_, variance.sum(), rtol=rtol)
    np.testing.assert_allclose(pca.explained_variance_ratio_, variance[:K] / variance.sum(), rtol=rtol)
    np.testing.assert_allclose(pca.distortion_, variance[K:].sum(), rtol=1e-6)
    np.testing.assert_allclose(pca.mean_, mean, rtol=1e-12)
    expected_solver = {"auto": "covariance" if shape[0] >= shape[1] else "gram"}.get(solver, solver)
    assert pca.solver_ == expected_solver
    assert pca.n_passes_ == {"covariance": 1, "gram": 2}[expected_solver]


@pytest.mark.parametrize("shape, chunks", [((3_000, 30), (512, 30)), ((40, 2_000), (40, 256))])
def test_scores_and_reconstruction_match_reference(shape, chunks):
    X = low_rank_data(*shape)
    components, variance, mean = reference_pca(X)
    pca = PCA(n_components=K).fit(da.from_array(X, chunks=chunks))
    _, signs = align_signs(pca.components_, components[:K])

    scores = pca.transform(da.from_array(X, chunks=chunks))
    assert isinstance(scores, da.Array) and scores.chunks[0] == da.from_array(X, chunks=chunks).chunks[0]
    expected_scores = (X - mean) @ components[:K].T
    np.testing.assert_allclose(scores.compute() * signs, expected_scores, atol=1e-8 * np.abs(expected_scores).max())

    reconstruction = pca.inverse_transform(scores).compute()
    expected = expected_scores @ components[:K] + mean
    np.testing.assert_allclose(reconstruction, expected, rtol=1e-12)
    # Minimum reconstruction error view: the mean squared residual per sample is the distortion
    # times (n − 1)/n (the eigenvalues are ddof=1 variances).
    residual = np.sum((X - reconstruction) ** 2) / shape[0]
    np.testing.assert_allclose(residual, pca.distortion_ * (shape[0] - 1) / shape[0], rtol=1e-6)


def test_numpy_in_numpy_out_and_dtype_kept():
    X = low_rank_data(500, 20, dtype=np.float32)
    pca = PCA(3)
    scores = pca.fit_transform(X)
    assert isinstance(scores, np.ndarray) and scores.dtype == np.float32 and scores.shape == (500, 3)
    assert pca.components_.dtype == np.float64
    back = pca.inverse_transform(scores)
    assert isinstance(back, np.ndarray) and back.dtype == np.float32 and back.shape == (500, 20)


def test_whitening_gives_unit_variance_scores():
    X = low_rank_data(4_000, 25)
    scores = PCA(6, whiten=True).fit_transform(da.from_array(X, chunks=1000)).compute()
    np.testing.assert_allclose(np.cov(scores, rowvar=False), np.eye(6), atol=1e-10)
    pca = PCA(6, whiten=True).fit(X)
    np.testing.assert_allclose(pca.inverse_transform(pca.transform(X)), PCA(6).fit(X).inverse_transform(PCA(6).fit(X).transform(X)), rtol=1e-10)


def test_signs_are_deterministic():
    X = low_rank_data(1_000, 30)
    pca = PCA(8).fit(X)
    largest = pca.components_[np.arange(8), np.argmax(np.abs(pca.components_), axis=1)]
    assert np.all(largest > 0)


@pytest.mark.parametrize("n_components", [0.5, 0.9, 0.99, "mle", None])
def test_choosing_k(n_components):
    X = low_rank_data(2_000, 30, rank=6, noise=0.1)
    pca = PCA(n_components).fit(X)
    _, variance, _ = reference_pca(X)
    ratio = np.cumsum(variance) / variance.sum()
    if isinstance(n_components, float):
        # Smallest k with cumulative explained-variance ratio >= the fraction.
        assert pca.n_components_ == int(np.argmax(ratio >= n_components)) + 1
        assert np.sum(pca.explained_variance_ratio_) >= n_components
    elif n_components is None:
        assert pca.n_components_ == 30
        assert pca.noise_variance_ == 0.0 and pca.distortion_ < 1e-9 * pca.total_variance_
    else:
        assert pca.n_components_ == 6  # the signal's rank, found by Minka's MLE


def test_gram_more_components_than_rank_stays_orthonormal():
    # Centered wide data has rank n − 1: the n-th direction has zero variance.
    X = low_rank_data(20, 500)
    pca = PCA(solver="gram").fit(X)
    assert pca.components_.shape == (20, 500)
    np.testing.assert_allclose(pca.components_ @ pca.components_.T, np.eye(20), atol=1e-10)
    assert pca.explained_variance_[-1] < 1e-10 * pca.explained_variance_[0]


def test_tasks_get_one_blas_thread_and_the_local_eigh_gets_the_callers(monkeypatch):
    # Under the threaded scheduler every task is limited to one BLAS thread (the scheduler runs a
    # task per core already); the d×d eigh on the client runs alone and gets the caller's threads.
    import dask
    from threadpoolctl import threadpool_info, threadpool_limits

    from daskpca.passes import _linalg
    from daskpca.passes._moments import chunk_moments

    def blas_threads():
        return max(lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas")

    seen = {"task": set(), "eigh": []}
    real_eigh = _linalg.eigh

    def eigh_spy(*args, **kwargs):
        seen["eigh"].append(blas_threads())
        return real_eigh(*args, **kwargs)

    def moments_spy(block, *args):
        seen["task"].add(blas_threads())
        return chunk_moments(block, *args)

    monkeypatch.setattr(_linalg, "eigh", eigh_spy)
    monkeypatch.setattr("daskpca.solvers.covariance.chunk_moments", moments_spy)
    X = da.from_array(low_rank_data(400, 30), chunks=(100, 30))
    with threadpool_limits(limits=2, user_api="blas"), dask.config.set(scheduler="threads"):
        callers = blas_threads()
        PCA(3, solver="covariance").fit(X)
        assert blas_threads() == callers  # restored after the fit
    assert seen["task"] == {1}
    assert seen["eigh"] == [callers]


# ---- the Gram road's local eigensolve: Lanczos, certified, on hard spectra ---------------------


@pytest.mark.parametrize("ratio", [1.05, 2.0])
def test_gram_lanczos_matches_lapack_on_hard_spectra(ratio):
    """n ≥ LANCZOS_MIN_SIZE: the Gram road's k pairs come from certified Lanczos, to LAPACK's
    accuracy even when λ_k sits just above a flat noise continuum."""
    from test_solver_krylov import hard_spectrum
    from daskpca.passes._linalg import LANCZOS_MIN_SIZE

    n, d = LANCZOS_MIN_SIZE + 50, 800
    X = hard_spectrum(n, d, K, ratio, seed=2)
    components, variance, _ = reference_pca(X)
    pca = PCA(n_components=K, solver="gram").fit(da.from_array(X, chunks=(n, 200)))
    true = sin_theta(pca.components_, components[:K])
    # Exact to round-off, and its bound says how far round-off over the gap can move it.
    assert pca.solver_info_["eigensolver"] == "lanczos" and true <= pca.error_bound_ < 1e-9
    assert true <= 1e-10
    np.testing.assert_allclose(pca.explained_variance_, variance[:K], rtol=1e-10)


def test_lanczos_check_catches_a_missed_eigenvalue():
    """Pairs that skip the largest eigenvalue (what a Lanczos start lacking its eigenvector would
    return) fail the Cholesky check, so the solve falls back to LAPACK."""
    from daskpca.passes._linalg import _certified_top

    rng = np.random.default_rng(0)
    q, _ = np.linalg.qr(rng.standard_normal((400, 400)))
    values = np.concatenate([[50.0, 40.0, 30.0, 20.0], np.linspace(1.0, 0.5, 396)])
    G = (q * values) @ q.T
    assert _certified_top(G, values[:4], q[:, :4], 3)
    assert not _certified_top(G, values[1:5], q[:, 1:5], 3)  # the 50 is missing
