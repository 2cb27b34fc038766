"""Every PCA parameter is checked against its declared constraints (PCA._parameter_constraints,
daskpca.models.Estimator.validate_params) before any read; tests/test_estimator_layer.py does
the same for every other estimator."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest

from daskpca import PCA
from daskpca.exceptions import InvalidParameterError


def _never_read():
    raise AssertionError("the data was read before the parameters were checked")


@pytest.fixture
def unreadable():
    """A lazy 200 × 6 array whose every read fails the test."""
    return da.from_delayed(dask.delayed(_never_read)(), shape=(200, 6), dtype=np.float64)


@pytest.mark.parametrize(
    "name, value",
    [
        ("whiten", "no"),  # a TOML/CLI string must not be silently truthy
        ("whiten", 1),
        ("standardize", "yes"),
        ("solver", "fastest"),
        ("random_state", -1),
        ("random_state", "seed"),
        ("n_oversamples", -3),
        ("n_oversamples", 2.5),
        ("n_power_iter", "many"),
        ("max_iter", 0),
        ("tol", -1e-3),
        ("tol", float("nan")),
        ("tol", "1e-4"),
        ("max_passes", 0),
        ("max_passes", True),
        ("checkpoint", 42),
        ("weights", "cos(lat)"),
        ("init", "previous"),
    ],
)
@pytest.mark.parametrize("method", ["fit", "plan"])
def test_a_bad_parameter_is_refused_by_name_before_any_read(unreadable, name, value, method):
    estimator = PCA(3, **{name: value})
    with pytest.raises(InvalidParameterError, match=rf"^{name}=") as caught:
        getattr(estimator, method)(unreadable)
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, TypeError)
    assert "expected" in str(caught.value) or "choose one of" in str(caught.value)


@pytest.mark.parametrize(
    "params",
    [dict(whiten=np.bool_(True)), dict(random_state=np.random.default_rng(0)), dict(n_power_iter="auto"),
     dict(tol=1e-4, max_passes=np.int64(5), solver="krylov"), dict(checkpoint=None), dict(weights=np.ones(6))],
)
def test_good_parameters_of_every_accepted_form_pass(params):
    X = np.random.default_rng(0).standard_normal((200, 6))
    assert PCA(2, **{"solver": "covariance", **params}).fit(X).n_components_ == 2


def test_notebook_display_unfitted_and_fitted():
    pca = PCA(3, whiten=True)
    unfitted = pca._repr_html_()
    assert "PCA(n_components=3, whiten=True)" in unfitted and "daskpca-fitted" not in unfitted
    rng = np.random.default_rng(0)
    pca.fit(rng.standard_normal((200, 12)) * np.arange(1, 13))
    fitted = pca._repr_html_()
    assert "daskpca-fitted" in fitted and "<code>covariance</code>" in fitted
    assert "200 × 12" in fitted and "passes over the data</th><td style='text-align:left'>1" in fitted
    assert f"{pca.explained_variance_ratio_[0]:.2%}" in fitted and "<summary>plan</summary>" in fitted
