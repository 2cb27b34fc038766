"""Same answers and the same estimator protocol as scikit-learn's PCA."""

import dask.array as da
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.decomposition import PCA as SklearnPCA
from sklearn.model_selection import GridSearchCV
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline

from daskpca import PCA

from _helpers import low_rank_data


@pytest.mark.parametrize("shape", [(1_500, 40), (50, 800)])
@pytest.mark.parametrize("whiten", [False, True])
@pytest.mark.parametrize("n_components", [4, 0.95, None])
def test_same_attributes_and_transforms(shape, whiten, n_components):
    # offset=0: scikit-learn's own solvers are then accurate enough to compare at 1e-8.
    X = low_rank_data(*shape, offset=0.0, seed=3)
    ours = PCA(n_components, whiten=whiten).fit(da.from_array(X, chunks=(shape[0] // 3, shape[1])))
    theirs = SklearnPCA(n_components, whiten=whiten, svd_solver="full").fit(X)

    assert ours.n_components_ == theirs.n_components_
    k = min(ours.n_components_, min(shape) - 1)  # the last direction of wide data is null
    np.testing.assert_allclose(ours.components_[:k], theirs.components_[:k], atol=1e-8)
    for name in ["explained_variance_", "explained_variance_ratio_", "singular_values_"]:
        np.testing.assert_allclose(getattr(ours, name)[:k], getattr(theirs, name)[:k], rtol=1e-9, err_msg=name)
    np.testing.assert_allclose(ours.mean_, theirs.mean_, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ours.noise_variance_, theirs.noise_variance_, rtol=1e-7, atol=1e-12)
    assert ours.n_samples_ == theirs.n_samples_ and ours.n_features_in_ == theirs.n_features_in_

    np.testing.assert_allclose(ours.transform(X)[:, :k], theirs.transform(X)[:, :k], rtol=1e-7, atol=1e-7)
    scores = theirs.transform(X)
    np.testing.assert_allclose(ours.inverse_transform(scores), theirs.inverse_transform(scores), rtol=1e-7, atol=1e-7)


def test_estimator_protocol():
    pca = PCA(3, solver="covariance", whiten=True)
    assert pca.get_params()["n_components"] == 3
    copy = clone(pca)
    assert copy.get_params() == pca.get_params() and copy is not pca
    assert pca.set_params(n_components=5) is pca and pca.n_components == 5
    assert repr(pca) == "PCA(n_components=5, solver='covariance', whiten=True)"
    with pytest.raises(ValueError, match="Invalid parameter 'n_component'.*valid parameters"):
        pca.set_params(n_component=2)


def test_pipeline_and_grid_search():
    from sklearn.datasets import load_digits

    digits = load_digits()
    pipe = make_pipeline(PCA(), KNeighborsClassifier(1))
    search = GridSearchCV(pipe, {"pca__n_components": [5, 20]}, cv=3).fit(digits.data, digits.target)
    assert search.best_params_["pca__n_components"] == 20
    assert search.best_score_ > 0.9
