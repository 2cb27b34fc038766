"""Issue 23 (B), the hostile trial's classes on the estimators and the CLI: nothing misreported.

1. the plan is the fit's plan (solver, passes, counted reads) for every solver and estimator, and a
   knob the solver would ignore is refused before any read;
2. complex results are never silently made real;
3. every model kind × command is correct or refused before any read, by name;
4. exit codes and messages name the real cause;
5. time axes are monotonic; a rotation keeps no live reference to the PCA it rotated.
"""

import warnings

import dask
import dask.array as da
import numpy as np
import pytest

from daskpca import PCA, HilbertPCA
from daskpca.exceptions import InvalidParameterError
from daskpca.solvers import SOLVERS

from _helpers import low_rank_data, write_zarr


def _never_read():
    raise AssertionError("the data was read")


@pytest.fixture
def unreadable():
    """A lazy 200 × 6 array whose every read fails the test."""
    return da.from_delayed(dask.delayed(_never_read)(), shape=(200, 6), dtype=np.float64)


# ----------------------------------------------------------------------------- 1. plan == fit

PLAN_CASES = [
    (PCA, dict(solver="covariance")),
    (PCA, dict(solver="covariance", standardize=True)),  # fused: still one read
    (PCA, dict(solver="gram")),
    (PCA, dict(solver="gram", standardize=True)),  # the stage's own read first
    (PCA, dict(solver="tsqr")),
    (PCA, dict(solver="tsqr", weights=np.linspace(1, 2, 30))),
    (PCA, dict(solver="randomized", n_power_iter=2)),
    (PCA, dict(solver="krylov", tol=1e-4)),
    (PCA, dict(solver="krylov", max_passes=3)),
    (PCA, dict(solver="krylov", tol=1e-6, weights=np.linspace(1, 2, 30))),
    (PCA, dict(solver="als", max_iter=60, tol=1e-6)),
    (PCA, dict(solver="ppca", max_iter=60, tol=1e-6)),
    (PCA, dict(tol=1e-4)),  # the planner's choice under an accuracy
    (HilbertPCA, dict(solver="gram")),
    (HilbertPCA, dict(solver="krylov", tol=1e-6)),
    (HilbertPCA, dict(solver="krylov", standardize=True)),
]


@pytest.mark.parametrize("estimator, params", PLAN_CASES, ids=lambda v: getattr(v, "__name__", None) or
                         ",".join(f"{k}={v if np.isscalar(v) else 'array'}" for k, v in v.items()))
def test_plan_names_the_solver_and_the_reads_fit_makes(tmp_path, estimator, params):
    X = low_rank_data(240, 30, rank=4, noise=0.1)
    array, store = write_zarr(tmp_path / "x.zarr", X, (60, 30))
    model = estimator(3, random_state=0, **params)
    plan = model.plan(array)
    assert not store.chunk_reads()  # planning reads nothing
    with dask.config.set(scheduler="threads"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence / accuracy warnings are not the point here
        model.fit(array)
    reads = store.chunk_reads()
    assert plan.solver == model.solver_
    assert len(reads) == 4 and set(reads.values()) == {model.n_passes_}  # every chunk read once a pass
    module = model._solver_modules[plan.solver]
    if hasattr(module, "most_passes"):  # stops on convergence: the plan states the bound
        assert model.n_passes_ <= plan.most_passes
        assert f"at most {plan.most_passes}" in str(plan)
    else:
        assert plan.passes == plan.most_passes == model.n_passes_


def test_ppca_plan_states_its_passes_as_a_bound():
    plan = PCA(3, solver="ppca", max_iter=50).plan(np.zeros((100, 8)))
    assert plan.solver == "ppca" and plan.passes == "≤ 51" and plan.most_passes == 51


@pytest.mark.parametrize("estimator, params, knob", [
    (PCA, dict(solver="randomized", tol=1e-4), "tol"),  # randomized computes no bound
    (PCA, dict(solver="randomized", max_passes=2), "max_passes"),
    (PCA, dict(solver="gram", max_passes=1), "max_passes"),
    (PCA, dict(solver="covariance", max_passes=3), "max_passes"),
    (PCA, dict(solver="covariance", n_power_iter=3), "n_power_iter"),
    (PCA, dict(solver="krylov", max_iter=10), "max_iter"),
    (PCA, dict(solver="tsqr", n_oversamples=4), "n_oversamples"),
    (PCA, dict(max_iter=10), "max_iter"),  # solver='auto' chose covariance, which has no iterations
    (HilbertPCA, dict(solver="gram", max_passes=4), "max_passes"),
])
@pytest.mark.parametrize("method", ["plan", "fit"])
def test_a_knob_the_solver_ignores_is_refused_before_any_read(unreadable, estimator, params, knob, method):
    with pytest.raises(InvalidParameterError, match=rf"^{knob}=.* would be ignored: .*solver '") as caught:
        getattr(estimator(3, **params), method)(unreadable)
    assert "Drop " + knob in str(caught.value)


@pytest.mark.parametrize("estimator, params", [
    (PCA, dict(solver="covariance", tol=1e-4)),  # an exact solver meets any tol
    (PCA, dict(tol=1e-4, max_passes=5)),  # the planner's inputs under solver='auto'
    (PCA, dict(solver="randomized", n_oversamples=5, n_power_iter=2)),
    (HilbertPCA, dict(solver="gram", tol=1e-4)),
])
def test_knobs_the_solver_uses_are_accepted(unreadable, estimator, params):
    assert estimator(3, **params).plan(unreadable).solver
