"""The probabilistic-PCA likelihood (score, score_samples, get_covariance, get_precision) and
n_iter_ agree with scikit-learn's PCA on the same data; lazy for lazy input."""

import dask.array as da
import numpy as np
import pytest
from sklearn.decomposition import PCA as SklearnPCA
from sklearn.model_selection import GridSearchCV

from daskpca import PCA

from _helpers import low_rank_data


def _data(shape, seed=1):
    # offset=0 and noise well above round-off: scikit-learn's SVD is then itself accurate to ~1e-13.
    return low_rank_data(*shape, rank=4, noise=0.5, offset=0.0, seed=seed)


# k < min(n, d) and k = min(n, d) for tall data; wide data keeps k < n − 1 (its last direction
# is null: the likelihood is singular there, in scikit-learn as here).
CASES = [((300, 12), 3), ((300, 12), 12), ((40, 60), 5), ((40, 60), 30)]


@pytest.mark.parametrize("whiten", [False, True])
@pytest.mark.parametrize("shape, k", CASES)
def test_likelihood_matches_sklearn(shape, k, whiten):
    X = _data(shape)
    test = _data(shape, seed=2)
    ours = PCA(k, whiten=whiten).fit(X)
    theirs = SklearnPCA(k, whiten=whiten, svd_solver="full").fit(X)
    np.testing.assert_allclose(ours.noise_variance_, theirs.noise_variance_, rtol=1e-10, atol=1e-14)
    for name in ("get_covariance", "get_precision"):
        ref = getattr(theirs, name)()
        np.testing.assert_allclose(getattr(ours, name)(), ref, rtol=1e-10, atol=1e-10 * np.abs(ref).max(), err_msg=name)
    np.testing.assert_allclose(ours.score_samples(test), theirs.score_samples(test), rtol=1e-10)
    assert ours.score(test) == pytest.approx(theirs.score(test), rel=1e-10)
    assert isinstance(ours.score(test), float)


def test_lazy_for_dask_input():
    X = _data((300, 12))
    ours = PCA(4).fit(da.from_array(X, chunks=(70, 12)))
    theirs = SklearnPCA(4, svd_solver="full").fit(X)
    lazy = da.from_array(X, chunks=(70, 12))
    samples, score = ours.score_samples(lazy), ours.score(lazy)
    assert isinstance(samples, da.Array) and isinstance(score, da.Array) and score.shape == ()
    np.testing.assert_allclose(samples.compute(), theirs.score_samples(X), rtol=1e-10)
    assert float(score.compute()) == pytest.approx(theirs.score(X), rel=1e-10)


def test_grid_search_picks_k_by_likelihood_like_sklearn():
    X = low_rank_data(240, 15, rank=4, noise=0.3, offset=0.0, seed=5)
    grid = {"n_components": [1, 2, 3, 4, 5, 8, 12]}
    ours = GridSearchCV(PCA(), grid, cv=4).fit(X)
    theirs = GridSearchCV(SklearnPCA(svd_solver="full"), grid, cv=4).fit(X)
    assert ours.best_params_ == theirs.best_params_ == {"n_components": 4}
    np.testing.assert_allclose(ours.cv_results_["mean_test_score"], theirs.cv_results_["mean_test_score"], rtol=1e-9)


def test_weighted_labeled_likelihood_is_of_the_input_units():
    """log p(x) = log p(z) + Σ log f: a weight that only rescales the data leaves the density of
    the standardized problem unchanged up to that Jacobian."""
    X = _data((200, 6))
    plain = PCA(2).fit(X)
    w = np.array([1.0, 2.0, 0.5, 3.0, 1.0, 1.5])
    weighted = PCA(2, weights=w).fit(X)
    # Z = X·w, so p_X(x) = p_Z(x·w)·Π w; the weighted model is a different model of X, but its
    # density integrates over x: compare with a direct Gaussian density of Z.
    cov = weighted.get_covariance()
    z = X * w - weighted.mean_
    _, logdet = np.linalg.slogdet(cov)
    direct = -0.5 * (np.einsum("ij,jk,ik->i", z, np.linalg.inv(cov), z) + 6 * np.log(2 * np.pi) + logdet) + np.log(w).sum()
    np.testing.assert_allclose(weighted.score_samples(X), direct, rtol=1e-10)
    assert plain.score(X) != pytest.approx(weighted.score(X))


def test_singular_model_is_refused_with_a_reason():
    X = _data((10, 30))
    pca = PCA().fit(X)  # k = n = 10 < d: noise variance 0, covariance singular
    with pytest.raises(ValueError, match="covariance is singular"):
        pca.score_samples(X)


@pytest.mark.parametrize(
    "solver, options, expected",
    [
        ("covariance", {}, lambda p: 1),
        ("gram", {}, lambda p: 1),
        ("tsqr", {}, lambda p: 1),
        ("randomized", {"n_power_iter": 3}, lambda p: 3),
        ("krylov", {"tol": 1e-6}, lambda p: p.n_passes_),
        ("als", {"max_iter": 5, "tol": 0.0}, lambda p: 5),
        ("ppca", {"max_iter": 4, "tol": 0.0}, lambda p: 4),
    ],
)
def test_n_iter_for_every_solver(solver, options, expected):
    import warnings

    X = _data((200, 10))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pca = PCA(3, solver=solver, random_state=0, **options).fit(X)
    assert pca.n_iter_ == expected(pca) and isinstance(pca.n_iter_, int)
    assert not hasattr(PCA(), "n_iter_")
