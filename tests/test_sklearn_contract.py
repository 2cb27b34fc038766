"""scikit-learn's own estimator checks pass, and the same contract holds for dask input."""

import warnings

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.sparse
import xarray as xr
from sklearn.utils.estimator_checks import parametrize_with_checks

from daskpca import PCA

from _helpers import low_rank_data, write_zarr


with warnings.catch_warnings():  # daskpca does not depend on scikit-learn: no BaseEstimator
    warnings.filterwarnings("ignore", "Estimator PCA does not inherit", UserWarning)
    checks = parametrize_with_checks([PCA()])


@checks
def test_sklearn_check_estimator(estimator, check):
    check(estimator)


# ------------------------------------------------------------ the same wording on dask input


@pytest.mark.parametrize(
    "X, error, match",
    [
        (da.zeros(10), ValueError, "Reshape your data"),
        (da.zeros((12, 0)), ValueError, r"0 feature\(s\) \(shape=\(12, 0\)\) while a minimum of 1 is required"),
        (da.zeros((0, 3)), ValueError, r"0 sample\(s\) \(shape=\(0, 3\)\) while a minimum of 1 is required"),
        (da.zeros((5, 3), dtype=complex), ValueError, "Complex data not supported"),
        (scipy.sparse.csr_array(np.eye(4)), TypeError, "Sparse data was passed"),
    ],
)
def test_standard_wording(X, error, match):
    with pytest.raises(error, match=match):
        PCA(1).fit(X)


def test_array_likes_are_accepted():
    X = low_rank_data(30, 6, rank=3, offset=0.0)
    expected = PCA(2).fit(X).transform(X)
    np.testing.assert_allclose(PCA(2).fit(X.tolist()).transform(X.tolist()), expected)
    np.testing.assert_allclose(PCA(2).fit(X.astype(object)).transform(X), expected)


def test_wrong_width_is_refused_before_reading_dask_input():
    pca = PCA(2).fit(da.from_array(low_rank_data(30, 4, rank=2), chunks=10))
    with pytest.raises(ValueError, match="X has 3 features, but PCA is expecting 4 features as input"):
        pca.transform(da.zeros((5, 3)))
    with pytest.raises(ValueError, match="X has 3 features, but PCA is expecting 4"):
        pca.score_samples(da.zeros((5, 3)))


# ------------------------------------------------------------ transform of NaN/±inf (issue 15)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_transform_refuses_nonfinite_numpy(bad):
    X = low_rank_data(50, 6, rank=3)
    pca = PCA(2).fit(X)
    X[17, 4] = bad
    with pytest.raises(ValueError, match=r"1 non-finite value\(s\).*row 17, column 4.*nan='propagate'"):
        pca.transform(X)
    with pytest.raises(ValueError, match=r"row 17, column 4"):
        pca.score_samples(X)
    scores = pca.transform(X, nan="propagate")
    assert np.isnan(scores[17]).all() or not np.isfinite(scores[17]).all()
    assert np.isfinite(np.delete(scores, 17, axis=0)).all()
    with pytest.raises(ValueError, match="nan='sometimes'"):
        pca.transform(X, nan="sometimes")


def test_transform_nan_check_costs_no_extra_pass(tmp_path):
    """Dask input: the check runs inside the projection tasks; every chunk is read once."""
    X = low_rank_data(200, 6, rank=3)
    pca = PCA(2).fit(X)
    X[137, 2] = np.nan
    array, store = write_zarr(tmp_path / "x.zarr", X, (50, 6))
    scores = pca.transform(array)  # lazy: nothing read, nothing raised yet
    assert isinstance(scores, da.Array) and not store.chunk_reads()
    with dask.config.set(scheduler="synchronous"), pytest.raises(ValueError, match=r"rows 100–149; the first is at row 137, column 2"):
        scores.compute()
    store.reads.clear()
    with dask.config.set(scheduler="synchronous"):
        propagated = pca.transform(array, nan="propagate").compute()
    assert set(store.chunk_reads().values()) == {1}
    assert np.isnan(propagated[137]).all() and np.isfinite(np.delete(propagated, 137, axis=0)).all()


def _field(n=24):
    rng = np.random.default_rng(0)
    time = (np.datetime64("2001-01", "M") + np.arange(n)).astype("datetime64[ns]")
    values = rng.standard_normal((n, 3, 4)) + 10.0
    values[:, 0, 0] = np.nan  # land: masked, never an error
    return xr.DataArray(values, dims=("time", "lat", "lon"),
                        coords={"time": time, "lat": [-10.5, 0.0, 10.5], "lon": [100.0, 150.0, 200.0, 250.0]})


def test_labeled_nan_named_by_coordinates_in_fit_and_transform():
    A = _field()
    bad = A.copy()
    bad[2, 2, 2] = np.nan  # time=2001-03-01, lat=10.5, lon=200.0
    with pytest.raises(ValueError, match=r"first such entry is at time=2001-03-01, lat=10.5, lon=200.0"):
        PCA(2).fit(bad, sample_dims="time")
    pca = PCA(2).fit(A, sample_dims="time")
    with pytest.raises(ValueError, match=r"first is at time=2001-03-01, lat=10.5, lon=200.0"):
        pca.transform(bad)
    lazy = bad.chunk({"time": 6})
    scores = pca.transform(lazy)
    with pytest.raises(ValueError, match=r"time=2001-03-01, lat=10.5, lon=200.0"):
        scores.compute()
    assert np.isnan(pca.transform(bad, nan="propagate").sel(time="2001-03-01")).all()
    ll = pca.score_samples(A)
    assert ll.dims == ("time",) and ll.name == "log_likelihood"
