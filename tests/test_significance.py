"""North's rule of thumb (daskpca.significance): error bars, separation flags, the suggested k."""

from __future__ import annotations

import numpy as np
import pytest

from daskpca import PCA
from daskpca.significance import north_k, north_test


def test_errors_flags_and_k_on_a_spectrum_with_a_degenerate_pair():
    # n = 200: δλ = λ·0.1. Modes 3 and 4 overlap (5.0 ± 0.5 against 4.8 ± 0.48).
    test = north_test([20.0, 10.0, 5.0, 4.8, 1.0], 200)
    np.testing.assert_allclose(test.errors, [2.0, 1.0, 0.5, 0.48, 0.1])
    assert test.separated.tolist() == [True, True, False, True]
    assert test.k == 2  # keep 1 and 2; cutting at 3 would split the pair (3, 4)
    assert len(test.lines()) == 5 and test.lines()[2].endswith("| no |")


@pytest.mark.parametrize("flags, k", [([], 0), ([False, True], 0), ([True, True, True], 3), ([True, False], 1)])
def test_k_is_the_leading_run_of_separated_modes(flags, k):
    assert north_k(flags) == k


def test_on_a_fitted_model_separated_signal_modes_and_a_noise_floor():
    rng = np.random.default_rng(0)
    n, d = 2000, 40
    signal = rng.standard_normal((n, 3)) * [5.0, 3.0, 2.0] @ np.linalg.qr(rng.standard_normal((d, 3)))[0].T
    pca = PCA(8, solver="covariance").fit(signal + 0.3 * rng.standard_normal((n, d)))
    test = north_test(pca.explained_variance_, pca.n_samples_)
    assert test.k == 3 and test.separated[:3].all() and not test.separated[3:].all()
    np.testing.assert_allclose(test.errors, pca.north_errors())
