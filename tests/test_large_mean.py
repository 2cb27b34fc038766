"""A mean large against the spread costs nothing (issue 38, part C): every road centres on a shift
taken from the data, so the same values shifted by their mean give the same components; and where
the input's own precision limits the answer, error_bound_ says so and the fit warns.

Truth: the same float numbers shifted by one of their rows — exact in float64 (Sterbenz: every
value lies within a factor 2 of the row), and exact for float32 values converted to float64 —
then an SVD of the (now small, full-precision) centred values.
"""

from __future__ import annotations

import warnings

import dask.array as da
import numpy as np
import pytest

from daskpca import PCA
from daskpca.exceptions import AccuracyWarning

from _helpers import sin_theta

SOLVERS = [
    ("covariance", {}),
    ("tsqr", {}),
    ("gram", {}),
    ("krylov", {"tol": 1e-6}),
    ("randomized", {}),
    ("als", {}),
    ("ppca", {}),
]
K = 5


def _spread(n=2000, d=150, seed=0):
    """Rank-5 structure (std 1e-2 down to 1.6e-3) over noise of std 1e-4: a clear gap after λ_5."""
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.standard_normal((d, K)))[0]
    scores = rng.standard_normal((n, K)) * (1e-2 * 0.63 ** np.arange(K))
    return scores @ basis.T + 1e-4 * rng.standard_normal((n, d))


def _truth(X):
    """Leading K right singular vectors of the stored values, computed without cancellation."""
    shifted = X.astype(np.float64) - X[0].astype(np.float64)  # exact (see the module notes)
    _, _, vt = np.linalg.svd(shifted - shifted.mean(axis=0), full_matrices=False)
    return vt[:K]


def _fit(X, solver, options, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pca = PCA(K, solver=solver, random_state=0, **options, **kw).fit(da.from_array(X, chunks=(500, 150)))
    return pca, [w for w in caught if issubclass(w.category, AccuracyWarning)]


@pytest.mark.parametrize("solver, options", SOLVERS, ids=[s for s, _ in SOLVERS])
def test_the_same_values_shifted_by_their_mean_give_the_same_components(solver, options):
    spread = _spread()
    large = 1e10 + spread  # float64 around 1e10: ulp 1.9e-6 against a spread of 1e-2
    small = large - large[0]  # the very same values, shifted exactly by one of them
    fitted_large, _ = _fit(large, solver, options)
    fitted_small, _ = _fit(small, solver, options)
    assert sin_theta(fitted_large.components_, fitted_small.components_) <= 1e-12
    np.testing.assert_allclose(fitted_large.explained_variance_, fitted_small.explained_variance_, rtol=1e-10)
    np.testing.assert_allclose(fitted_large.mean_ - large[0], fitted_small.mean_, atol=4e-6)  # ε·1e10: the rounding of mean_


CASES = [  # (mean, dtype, whether the input's precision limits the answer): the three cases
    (1e10, np.float64, True),  # ulp 1.9e-6 against λ_5 = 1.6e-5 and its gap
    (1e8, np.float64, False),  # ulp 1.5e-8: a term of ~1e-5, small against the sampling error
    (1e4, np.float32, True),  # ulp 9.8e-4 against a spread of 1e-2
]


@pytest.mark.parametrize("mean, dtype, limits", CASES, ids=["f64-1e10", "f64-1e8", "f32-1e4"])
@pytest.mark.parametrize("solver, options", SOLVERS, ids=[s for s, _ in SOLVERS])
def test_the_bound_is_never_below_the_truth_and_the_precision_limit_is_said(solver, options, mean, dtype, limits):
    X = (mean + _spread()).astype(dtype)
    truth = _truth(X)
    pca, warned = _fit(X, solver, options)
    true = sin_theta(pca.components_, truth)
    info = pca.solver_info_
    if solver in ("covariance", "tsqr", "gram"):
        assert true <= 1e-10  # the large mean cost nothing: exact to round-off, as error_bound_ 0 says
    if solver == "krylov":
        assert true <= info.get("solver_error_bound", pca.error_bound_) <= 1e-6  # its certificate holds as at mean 0
    if np.isfinite(pca.error_bound_):
        assert true <= max(pca.error_bound_, 1e-10)  # never below the truth
    assert info["input_precision_bound"] > 1e-6  # the input's ulp at the mean, against λ_5's gap, is reported …
    said = [w for w in warned if "input's own precision limits the components" in str(w.message)]
    assert info["input_precision_limits"] == limits and bool(said) == limits  # … and said where it limits the answer
    if limits:
        assert np.isnan(pca.error_bound_) or pca.error_bound_ >= info["input_precision_bound"]


def test_the_precision_term_is_absent_where_the_mean_is_small():
    spread = _spread()
    pca, warned = _fit(spread + 50.0, "covariance", {})
    assert pca.error_bound_ < 1e-10 and not warned  # the exact road's round-off bound alone
    assert pca.solver_info_["input_precision_bound"] < 1e-10


def test_a_tol_looser_than_the_precision_term_is_not_warned_about():
    X = 1e10 + _spread()  # precision term ~8e-4 against λ_5's gap
    pca, warned = _fit(X, "covariance", {"tol": 0.5})
    assert 1e-4 < pca.solver_info_["input_precision_bound"] < 0.5
    assert pca.error_bound_ < 1e-10 and not pca.solver_info_["input_precision_limits"] and not warned


def test_every_exact_road_states_the_same_input_precision_term():
    # The term rests on the gap λ_k − λ_{k+1}: the Gram road now gives λ_{k+1} as the covariance
    # road does. It fell back on the discarded variance: 2.3× more than the covariance road here,
    # 1000× less on a clustered float64 field with a mean 1e6× its spread — 4.9e-10 there, where
    # the rounding moved the subspace by 1.6e-8.
    X = 1e6 * np.linspace(1, 2, 150) * 1e-2 + _spread()
    terms = {solver: _fit(X, solver, {})[0].solver_info_["input_precision_bound"] for solver in ("covariance", "gram", "tsqr")}
    assert terms["gram"] == pytest.approx(terms["covariance"], rel=1e-3)
    assert terms["tsqr"] == pytest.approx(terms["covariance"], rel=1e-3)
