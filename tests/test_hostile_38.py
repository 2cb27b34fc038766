"""A second hostile trial of issue 38's fixes: the defects it found, each pinned where it was born.

- ``update`` (library and ``daskpca update``) folded a zarr array of which no chunk was ever
  written into a model as rows of its fill value, and a batch of one value everywhere (a deleted
  or never-produced batch), and published the result; ``transform`` wrote scores of nothing.
- A never-written array opened by the command line (a dask array, or a dataset's variable) was
  refused as "non-finite values … fit with --solver ppca" (NaN fill value) or as "no variance",
  not as the never-written store it is.
- ``file://`` URLs: percent-encoding (``Path.as_uri()`` writes ``%20`` for a space) was kept
  literally, and ``file:/abs`` (RFC 8089's form without an authority) was a relative folder
  named ``file:``; ``~nosuchuser/…`` became a literal folder in the working directory.
- ``$DASKPCA_SCRATCH`` was not read as meant (``~``, ``file://``), unlike every other path.
"""

import os
from pathlib import Path

import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr

from daskpca import PCA, cli, load
from daskpca.exceptions import InputError
from daskpca.store import scratch
from daskpca.store.paths import as_meant

from _helpers import low_rank_data


def _run(capsys, *argv):
    capsys.readouterr()
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _unwritten(path, shape=(40, 6), fill_value=0.0, dtype="f8"):
    """A zarr array's metadata and no chunk: every value reads as ``fill_value``."""
    return zarr.create_array(str(path), shape=shape, chunks=(10, shape[1]), dtype=dtype, fill_value=fill_value)


@pytest.fixture
def fitted(tmp_path, monkeypatch):
    """A covariance model of 80 rows saved at ``work/m.zarr`` (the working directory)."""
    monkeypatch.chdir(tmp_path)
    X = low_rank_data(80, 6)
    PCA(2, solver="covariance").fit(X).save(str(tmp_path / "m.zarr"))
    return tmp_path, X


# ----------------------------------------------------------------------------- never-written inputs


def test_update_refuses_a_batch_never_written_and_keeps_the_model(fitted, capsys):
    work, X = fitted
    _unwritten(work / "new.zarr")
    model = load(str(work / "m.zarr"))
    with pytest.raises(InputError, match=r"new\.zarr' \(shape 40×6\) has no data: no chunk of it has been written"):
        model.update(da.from_zarr(str(work / "new.zarr")))
    assert model.n_samples_ == 80
    code, _, err = _run(capsys, "update", "m.zarr", "new.zarr")
    assert code == 2 and "has no data: no chunk of it has been written" in err
    assert load(str(work / "m.zarr")).n_samples_ == 80  # nothing published


def test_update_refuses_a_batch_of_one_value_everywhere(fitted, capsys):
    work, X = fitted
    model = load(str(work / "m.zarr"))
    with pytest.raises(InputError, match=r"has no variance: every value equals 0\b.*the model was not updated"):
        model.update(np.zeros((30, 6)))
    assert model.n_samples_ == 80
    zarr.create_array(str(work / "zeros.zarr"), shape=(30, 6), chunks=(10, 6), dtype="f8")[...] = 3.0
    code, _, err = _run(capsys, "update", "m.zarr", "zeros.zarr")
    assert code == 2 and "every value equals 3" in err
    assert load(str(work / "m.zarr")).n_samples_ == 80
    # one new sample has no variance of its own and is a valid update
    assert model.update(X[:1]).n_samples_ == 81


def test_transform_refuses_a_source_never_written(fitted, capsys):
    work, _ = fitted
    _unwritten(work / "new.zarr")
    with pytest.raises(InputError, match=r"has no data: no chunk of it has been written"):
        load(str(work / "m.zarr")).transform(da.from_zarr(str(work / "new.zarr")))
    code, _, err = _run(capsys, "transform", "m.zarr", "new.zarr", "--out", "s.zarr")
    assert code == 2 and "has no data" in err and not (work / "s.zarr").exists()


def test_the_command_line_names_a_never_written_nan_filled_array_as_such(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _unwritten(tmp_path / "nan.zarr", fill_value=np.nan, dtype="f4")
    code, _, err = _run(capsys, "fit", "nan.zarr", "-k", "2", "--out", "m.zarr")
    assert code == 2 and "nan.zarr' (shape 40×6) has no data: no chunk of it has been written" in err
    assert "ppca" not in err and not (tmp_path / "m.zarr").exists()
    # a dataset's variable written as metadata only (xarray's compute=False) is the same
    xr.Dataset({"t": (("time", "x"), np.zeros((40, 6)))}).chunk({"time": 10}).to_zarr(
        str(tmp_path / "ds.zarr"), mode="w", compute=False, consolidated=False)
    code, _, err = _run(capsys, "fit", "ds.zarr", "--var", "t", "-k", "2", "--out", "m.zarr")
    assert code == 2 and "has no data: no chunk of it has been written" in err


def test_a_dask_array_of_a_written_store_is_not_refused(tmp_path):
    X = low_rank_data(40, 6)
    zarr.create_array(str(tmp_path / "x.zarr"), shape=X.shape, chunks=(10, 6), dtype="f8")[...] = X
    pca = PCA(2, solver="covariance").fit(da.from_zarr(str(tmp_path / "x.zarr")))
    pca.update(da.from_zarr(str(tmp_path / "x.zarr"))[:10])
    assert pca.n_samples_ == 50


# ----------------------------------------------------------------------------- paths as meant


@pytest.mark.parametrize("given, meant", [
    ("file:///tmp/a%20b/x.zarr", "/tmp/a b/x.zarr"),  # what Path('/tmp/a b/x.zarr').as_uri() writes
    ("file://localhost/tmp/x%2Ezarr", "/tmp/x.zarr"),
    ("file:/tmp/x.zarr", "/tmp/x.zarr"),  # RFC 8089: no authority
    ("FILE:/tmp/x.zarr/", "/tmp/x.zarr"),
    ("s3://bucket/a%20b", "s3://bucket/a%20b"),  # object stores untouched
])
def test_file_urls_as_rfc_8089_means_them(given, meant):
    assert as_meant(given) == meant
    assert as_meant(as_meant(given)) == meant


def test_a_percent_encoded_out_that_is_the_input_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    X = low_rank_data(40, 6)
    zarr.create_array(str(tmp_path / "x.zarr"), shape=X.shape, chunks=(10, 6), dtype="f8")[...] = X
    for out in (f"file://{tmp_path}/x%2Ezarr", f"file:{tmp_path}/x.zarr"):
        code, _, err = _run(capsys, "fit", "x.zarr", "-k", "2", "--out", out, "--overwrite")
        assert code == 2 and "is the same store as the input SOURCE" in err, out
    assert sorted(os.listdir(tmp_path)) == ["x.zarr"]


def test_the_home_of_an_unknown_user_is_refused_by_name(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match=r"'~nosuchuser-38/m\.zarr'.*no user 'nosuchuser-38'"):
        as_meant("~nosuchuser-38/m.zarr")
    X = low_rank_data(40, 6)
    zarr.create_array(str(tmp_path / "x.zarr"), shape=X.shape, chunks=(10, 6), dtype="f8")[...] = X
    code, _, err = _run(capsys, "fit", "x.zarr", "-k", "2", "--out", "~nosuchuser-38/m.zarr")
    assert code == 2 and "--out" in err and "no user 'nosuchuser-38'" in err
    assert sorted(os.listdir(tmp_path)) == ["x.zarr"]


def test_the_scratch_root_is_read_as_meant(tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / "scratch").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    for spelled in ("~/scratch", f"file://{home}/scratch", f"FILE://localhost{home}/scratch/"):
        monkeypatch.setenv(scratch.SCRATCH_ENV, spelled)
        assert scratch.check_root() == home / "scratch"
        with scratch.scratch_folder("t") as folder:
            assert folder.parent == home / "scratch"
    monkeypatch.setenv(scratch.SCRATCH_ENV, "~/scratch")
    with pytest.raises(Exception, match=r"scratch folder .*is the input SOURCE"):
        scratch.check_apart({"SOURCE": str(home / "scratch")})
