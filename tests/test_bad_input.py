"""Bad input gets a clear error that names the value and the fix, before heavy work."""

import dask
import dask.array as da
import numpy as np
import pytest

from daskpca import PCA, NotFittedError

from _helpers import low_rank_data, write_zarr


@pytest.mark.parametrize(
    "X, error, match",
    [
        (np.zeros(10), ValueError, r"must be 2-D.*got 1-D.*reshape"),
        (np.zeros((4, 3, 2)), ValueError, r"must be 2-D.*got 3-D.*X.reshape\(X.shape\[0\], -1\)"),
        (np.zeros((5, 3), dtype=complex), ValueError, r"Complex data not supported.*X.real, X.imag"),
        (np.array([["a", "b"], ["c", "d"]]), TypeError, r"dtype <U1.*astype"),
        (np.zeros((0, 3)), ValueError, r"shape \(0, 3\).*at least one sample"),
        (np.zeros((3, 0)), ValueError, r"shape \(3, 0\).*at least one sample"),
        ([[[1.0, 2.0]]], ValueError, r"must be 2-D.*got 3-D"),  # array-likes are taken as NumPy takes them
    ],
)
def test_shape_and_dtype_errors(X, error, match):
    with pytest.raises(error, match=match):
        PCA(1).fit(X)


@pytest.mark.parametrize(
    "n_components, error, match",
    [
        (0, ValueError, r"n_components=0 is out of range.*between 1 and 10"),
        (11, ValueError, r"n_components=11 is out of range.*between 1 and 10"),
        (1.0, ValueError, r"strictly between 0 and 1"),
        (-0.5, ValueError, r"strictly between 0 and 1"),
        ("many", ValueError, r"n_components='many' is not understood"),
        (True, TypeError, r"n_components=True"),
        ([3], TypeError, r"has type list"),
    ],
)
def test_n_components_out_of_range(n_components, error, match):
    with pytest.raises(error, match=match):
        PCA(n_components).fit(np.random.default_rng(0).standard_normal((50, 10)))


def test_mle_needs_more_samples_than_features():
    with pytest.raises(ValueError, match="'mle' needs n_samples >= n_features"):
        PCA("mle").fit(np.random.default_rng(0).standard_normal((5, 10)))


def test_unknown_solver_lists_the_known_ones():
    from daskpca import SOLVERS

    with pytest.raises(ValueError, match=r"^solver='fast': expected one of 'auto', ") as caught:
        PCA(2, solver="fast").fit(np.ones((10, 3)))
    assert all(f"'{name}'" in str(caught.value) for name in SOLVERS)


@pytest.mark.parametrize("solver", ["covariance", "gram"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_values_counted_and_located_in_the_same_pass(tmp_path, solver, bad):
    X = low_rank_data(200, 30)
    X[137, 11] = bad
    X[150, 2] = bad
    array, store = write_zarr(tmp_path / "x.zarr", X, (50, 10))
    with dask.config.set(scheduler="threads"), pytest.raises(
        ValueError, match=r"2 non-finite value\(s\).*first is at row 137, column 11.*solver='ppca'"
    ):
        PCA(3, solver=solver).fit(array)
    assert set(store.chunk_reads().values()) == {1}  # detected inside the first pass


def test_unknown_chunk_sizes():
    X = da.from_array(np.ones((20, 3)), chunks=5)
    X = X[X[:, 0] > 0]
    with pytest.raises(ValueError, match=r"unknown chunk sizes.*compute_chunk_sizes"):
        PCA(2).fit(X)


def test_transform_before_fit_and_wrong_width():
    with pytest.raises(NotFittedError, match="not fitted yet. Call fit"):
        PCA(2).transform(np.ones((3, 4)))
    pca = PCA(2).fit(np.random.default_rng(0).standard_normal((20, 4)))
    with pytest.raises(ValueError, match="has 5 features.*fitted on 4"):
        pca.transform(np.ones((3, 5)))
    with pytest.raises(ValueError, match="scores have 3 columns.*2 components"):
        pca.inverse_transform(np.ones((3, 3)))


def test_missing_zarr_path_and_group(tmp_path):
    with pytest.raises(FileNotFoundError, match="no zarr array or group found"):
        PCA(2).fit(str(tmp_path / "nothing.zarr"))
    import zarr

    group = zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    group.create_array("field", shape=(10, 3), dtype="f8")
    with pytest.raises(ValueError, match=r"is a zarr group, not an array.*arrays here: \['field'\]"):
        PCA(2).fit(str(tmp_path / "g.zarr"))


def test_integer_input_becomes_float64():
    X = np.random.default_rng(0).integers(0, 10, size=(100, 5))
    pca = PCA(2).fit(X)
    assert pca.transform(X).dtype == np.float64


@pytest.mark.parametrize("solver", ["covariance", "tsqr", "gram", "krylov", "randomized", "als"])
def test_a_field_with_no_variance_is_refused_by_name(solver):
    from daskpca.exceptions import InputError

    with pytest.raises(InputError, match=r"X \(shape 40×6\) has no variance: every value equals 0\b.*no model was made"):
        PCA(2, solver=solver, random_state=0).fit(np.zeros((40, 6)))
    constant = np.tile(np.arange(6.0), (40, 1))
    with pytest.raises(InputError, match=r"every feature is constant over the 40 samples \(values from 0 to 5\)"):
        PCA(2, solver=solver, random_state=0).fit(da.from_array(constant, chunks=(10, 6)))


def test_a_zarr_array_never_written_is_refused_before_any_read(tmp_path):
    import zarr

    from daskpca import cli
    from daskpca.exceptions import InputError

    path = tmp_path / "deleted.zarr"
    zarr.create_array(str(path), shape=(50, 8), chunks=(10, 8), dtype="f4")  # metadata only: no chunk
    with dask.config.set(scheduler=_no_compute):
        with pytest.raises(InputError, match=r"'.*deleted\.zarr' \(shape 50×8\) has no data: no chunk of it has been written"):
            PCA(2).fit(str(path))
        with pytest.raises(InputError, match=r"the zarr array at '.*deleted\.zarr' \(shape 50×8\) has no data"):
            PCA(2).fit(zarr.open_array(str(path), mode="r"))
    code = cli.main(["fit", str(path), "-k", "2", "--out", str(tmp_path / "m.zarr")])
    assert code == 2 and not (tmp_path / "m.zarr").exists()
    zarr.open_array(str(path), mode="r+")[...] = 7.0  # written, but constant: refused after the pass
    with pytest.raises(InputError, match=r"has no variance: every value equals 7\b"):
        PCA(2).fit(str(path))


def _no_compute(*args, **kwargs):
    raise AssertionError("the refusal must come before any compute")
