"""Every fit says how exact it is: error_bound_ (0 exact, the Krylov bound, NaN when unknown),
saved with the model, and a warning when solver='auto' had to answer approximately unasked."""

from __future__ import annotations

import warnings

import dask.array as da
import numpy as np
import pytest

from daskpca import PCA, _plan, load
from daskpca.exceptions import AccuracyWarning

from _helpers import reference_pca, sin_theta


def _noise_continuum(n=1600, d=1500, k=6, seed=0):
    """k modes just above a flat noise continuum (the hard case for approximate solvers)."""
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.standard_normal((d, k)))[0]
    edge = (1 + np.sqrt(d / n)) ** 2
    signal = rng.standard_normal((n, k)) * np.sqrt(edge * np.linspace(3.0, 1.6, k))
    return signal @ basis.T + rng.standard_normal((n, d)) + 50.0


@pytest.fixture
def small_tasks(monkeypatch):
    """30 MB per task: no exact solver's d², n² or R factors fit, a sketching pass does."""
    monkeypatch.setattr(_plan, "task_memory_budget", lambda resources=None: (30 * 2**20, "a test's budget"))


def test_auto_without_tol_certifies_the_default_accuracy_quietly(small_tasks):
    """No exact solver fits: the default road is block Krylov to DEFAULT_TOL, met, no warning."""
    X = _noise_continuum(seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", AccuracyWarning)
        pca = PCA(6, random_state=0).fit(da.from_array(X, chunks=(400, 1500)))
    assert pca.solver_ == "krylov" and "default accuracy" in pca.solver_reason_
    assert pca.solver_info_["tol"] == _plan.DEFAULT_TOL and pca.tol is None
    components, _, _ = reference_pca(X)
    assert sin_theta(pca.components_, components[:6]) <= pca.error_bound_ <= _plan.DEFAULT_TOL


def test_auto_without_tol_warns_with_the_bound_of_its_approximate_answer(small_tasks, tmp_path):
    X = _noise_continuum()
    # 3 reads cannot certify the default accuracy: no road guarantees it, Krylov answers with its bound.
    with pytest.warns(AccuracyWarning, match=r"error bound on sin θ of the kept subspace is \d"):
        pca = PCA(6, random_state=0, max_passes=3).fit(da.from_array(X, chunks=(400, 1500)))
    assert pca.solver_ == "krylov"
    components, _, _ = reference_pca(X)
    true = sin_theta(pca.components_, components[:6])
    assert 0 < true <= pca.error_bound_ < 1
    pca.save(tmp_path / "m.zarr")
    loaded = load(tmp_path / "m.zarr")
    assert loaded.error_bound_ == pca.error_bound_ and len(loaded.solver_info_["residual_norms"]) == 6


def test_auto_with_tol_meets_it_quietly(small_tasks):
    X = _noise_continuum(seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", AccuracyWarning)  # met: nothing to warn about
        pca = PCA(6, tol=1e-4, random_state=0).fit(da.from_array(X, chunks=(400, 1500)))
    components, _, _ = reference_pca(X)
    assert sin_theta(pca.components_, components[:6]) <= pca.error_bound_ <= 1e-4


@pytest.mark.parametrize("solver", ["covariance", "gram", "tsqr", "randomized"])
def test_exact_solvers_report_their_round_off_bound_and_unbounded_ones_nan(solver):
    # An exact road's bound is round-off over the gap λ_k − λ_{k+1} (solvers._bounds.exact_bound):
    # far below any tol here, never below the truth.
    X = _noise_continuum(n=300, d=40)
    pca = PCA(3, solver=solver, random_state=0).fit(X)
    if solver == "randomized":
        assert np.isnan(pca.error_bound_)
    else:
        components = reference_pca(X)[0][:3]
        assert sin_theta(pca.components_, components) <= pca.error_bound_ < 1e-10


@pytest.mark.parametrize("split", [1e-6, 1e-4, 0.0])
@pytest.mark.parametrize("solver", ["covariance", "gram", "tsqr"])
def test_an_exact_road_on_nearly_repeated_eigenvalues_reports_round_off_over_the_gap(solver, split):
    # λ_k/λ_{k+1} = 1 + split: the exact roads' answer moves by round-off over the gap, which a
    # bound of 0 hid (4e-10 against the reference at 1e-6); repeated (0): no subspace is the
    # answer — bound 1 and a warning, as block Krylov says it.
    from test_solver_krylov import clustered_spectrum

    X = clustered_spectrum(300, 60, 4, split)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pca = PCA(4, solver=solver).fit(X)
    true = sin_theta(pca.components_, reference_pca(X)[0][:4])
    said = [w for w in caught if issubclass(w.category, AccuracyWarning) and "equal to round-off" in str(w.message)]
    if split == 0.0:
        assert pca.error_bound_ == 1.0 and said
    else:
        assert true <= pca.error_bound_ < 1e-3 and not said


@pytest.mark.parametrize("ratio", [1.05, 2.0])
def test_default_road_bound_is_never_below_the_truth_on_hard_spectra(monkeypatch, tmp_path, ratio):
    """solver='auto' without tol on a store of one sample per chunk (the archive layout), where no
    exact solver fits: block Krylov for the default accuracy. λ_k just above a flat noise
    continuum (λ_k/λ_{k+1} = 1.05 … 2): the reported bound is never below the true sin θ against a
    float64 LAPACK reference, and either meets DEFAULT_TOL or says so with an AccuracyWarning."""
    from test_solver_krylov import hard_spectrum
    from _helpers import write_zarr

    monkeypatch.setattr(_plan, "task_memory_budget", lambda resources=None: (8 * 2**20, "a test's budget"))  # no n², d², R fits
    X = hard_spectrum(600, 800, 4, ratio, seed=5, dtype=np.float32)
    array, _ = write_zarr(tmp_path / "x.zarr", X, (1, 800))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pca = PCA(4, random_state=0).fit(array)
    assert pca.solver_ == "krylov" and pca.solver_info_["tol"] == _plan.DEFAULT_TOL
    components, _, _ = reference_pca(X.astype(np.float64))
    true = sin_theta(pca.components_, components[:4])
    assert true <= pca.error_bound_
    missed = [w for w in caught if issubclass(w.category, AccuracyWarning)]
    assert bool(missed) == (pca.error_bound_ > _plan.DEFAULT_TOL)
    if ratio >= 2:  # a gap Krylov resolves within its budget: certified
        assert pca.error_bound_ <= _plan.DEFAULT_TOL
