"""Verified loads: a damaged model (missing chunk, NaN, edited attrs, wrong shapes) is refused by
``load`` with a message naming the damage, and none gives scores. Two layers are checked: the
checksums recorded at write time (a missing or malformed record is damage too), and (for a store
whose record was rewritten to match) the fitted invariants."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import zarr

import daskpca
from daskpca import PCA, cli, io
from daskpca.store.integrity import store_record
from daskpca.exceptions import DamagedModelError, DamagedStoreError

X = np.random.default_rng(7).standard_normal((120, 6)) @ np.diag([4.0, 3.0, 2.0, 1.0, 0.5, 0.2])


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    root = tmp_path_factory.mktemp("integrity")
    PCA(3, solver="covariance").fit(X).save(root / "model.zarr")
    zarr.create_array(str(root / "in.zarr"), shape=X.shape, chunks=(40, 6), dtype="f8")[...] = X
    return root


@pytest.fixture
def model(template, tmp_path):
    shutil.copytree(template / "model.zarr", tmp_path / "model.zarr")
    return tmp_path / "model.zarr"


def _forge_record(path):
    """Rewrite the marker's record to match the store: only the invariants can tell now."""
    marker_path = path / io.COMPLETE_MARKER
    marker = json.loads(marker_path.read_text())
    marker["integrity"] = store_record(str(path))
    marker_path.write_text(json.dumps(marker))


def _edit_attrs(path, **changes):
    meta = json.loads((path / "zarr.json").read_text())
    for key, value in changes.items():
        if value is None:
            meta["attributes"].pop(key)
        else:
            meta["attributes"][key] = value
    (path / "zarr.json").write_text(json.dumps(meta))


def _rewrite(path, name, values):
    group = zarr.open_group(str(path), mode="r+")
    dims = group[name].metadata.dimension_names
    del group[name]
    group.create_array(name, shape=values.shape, dtype=values.dtype, dimension_names=dims)[...] = values


def _set(path, name, index, value):
    array = zarr.open_array(str(path / name), mode="r+")
    values = array[...]
    values[index] = value
    array[...] = values


CHECKSUM_DAMAGE = {
    "missing chunk": (lambda p: (p / "model_components" / "c" / "0" / "0").unlink(),
                      r"'model_components': 1 of 1 chunk file\(s\) missing"),
    "partial copy without an array": (lambda p: shutil.rmtree(p / "model_mean"),
                                      r"metadata file 'model_mean/zarr.json' is missing"),
    "NaN in the components": (lambda p: _set(p, "model_components", (0, 0), np.nan),
                              r"'model_components': chunk contents differ"),
    "edited n_components_": (lambda p: _edit_attrs(p, n_components_=5),
                             r"metadata 'zarr.json' \(shape, dtype or attributes\) was changed"),
    "deleted attribute": (lambda p: _edit_attrs(p, total_variance_=None), r"metadata 'zarr.json'"),
    "extra chunk file": (lambda p: (p / "model_mean" / "c" / "1").write_bytes(b"x"),
                         r"'model_mean': its chunk files are not the ones written"),
}

INVARIANT_DAMAGE = {
    "NaN in the components": (lambda p: _set(p, "model_components", (0, 0), np.nan), r"components_ contains NaN"),
    "edited n_components_": (lambda p: _edit_attrs(p, n_components_=2),
                             r"components_ has shape \(3, 6\) but n_components_=2"),
    "deleted attribute": (lambda p: _edit_attrs(p, n_samples_=None), r"\['n_samples_'\] missing"),
    "wrong-shaped mean": (lambda p: _rewrite(p, "model_mean", np.zeros(7)), r"cannot be read.*'feature_kept'.*7"),
    "scaled components": (lambda p: _set(p, "model_components", (0, slice(None)), 2.0), r"not orthonormal"),
    "unsorted variances": (lambda p: _set(p, "model_explained_variance", 0, 1e-3), r"not sorted in decreasing order"),
    "negative variance": (lambda p: _set(p, "model_explained_variance", 2, -1.0), r"negative entries"),
    "moments of another model": (lambda p: _edit_attrs(p, moments_count=7), r"count 7 samples, n_samples_=120"),
}


@pytest.mark.parametrize("damage", CHECKSUM_DAMAGE)
def test_checksums_name_the_damage(model, damage):
    tamper, message = CHECKSUM_DAMAGE[damage]
    tamper(model)
    with pytest.raises(DamagedModelError, match=message):
        daskpca.load(model)


@pytest.mark.parametrize("damage", INVARIANT_DAMAGE)
def test_invariants_catch_damage_behind_a_rewritten_record(model, damage):
    tamper, message = INVARIANT_DAMAGE[damage]
    tamper(model)
    _forge_record(model)
    with pytest.raises(DamagedModelError, match=message):
        daskpca.load(model)


GARBAGE_RECORDS = {
    "missing": None,  # deleted from the marker (or a store from before records)
    "string": "ok",
    "list": [],
    "number": 0,
    "empty object": {},
    "wrong types": {"metadata": {"zarr.json": 1}, "arrays": {"model_mean": {"objects": "1", "names": 2, "bytes": None}}},
}


@pytest.mark.parametrize("record", GARBAGE_RECORDS.values(), ids=GARBAGE_RECORDS)
def test_verification_cannot_be_switched_off_by_editing_the_marker(model, template, tmp_path, capsys, record):
    # Issue 23: a marker without its record (or with garbage there) loaded unverified, or failed
    # with an AttributeError. It is damage: refused by load and by the CLI as bad input (exit 2).
    marker = json.loads((model / io.COMPLETE_MARKER).read_text())
    marker.pop("integrity")
    if record is not None:
        marker["integrity"] = record
    (model / io.COMPLETE_MARKER).write_text(json.dumps(marker))
    with pytest.raises(DamagedModelError, match=r"model.zarr' cannot be verified: the integrity record .*re-fit"):
        daskpca.load(model)
    for command in (["inspect", str(model)],
                    ["transform", str(model), str(template / "in.zarr"), "--out", str(tmp_path / "s.zarr")]):
        code = cli.main(command)
        err = capsys.readouterr().err
        assert code == 2 and "cannot be verified" in err and "Traceback" not in err, (command, err)
        assert "load it with --no-verify." in err and "verify=False" not in err  # the CLI's flag, not the API's
    assert not (tmp_path / "s.zarr").exists()
    # The escape hatch the message names: explicit, warned about, the fitted invariants still checked.
    with pytest.warns(UserWarning, match="without verifying its checksums"):
        loaded = daskpca.load(model, verify=False)
    assert loaded.n_components_ > 0
    assert cli.main(["transform", str(model), str(template / "in.zarr"), "--out", str(tmp_path / "s.zarr"),
                     "--no-verify", "--quiet"]) == 0
    assert "daskpca: warning: " in capsys.readouterr().err  # the CLI prints the warning as its own line
    assert (tmp_path / "s.zarr").exists()


def test_cli_refuses_a_damaged_model_and_writes_no_scores(model, template, tmp_path, capsys):
    (model / "model_mean" / "c" / "0").unlink()
    code = cli.main(["transform", str(model), str(template / "in.zarr"), "--out", str(tmp_path / "s.zarr")])
    err = capsys.readouterr().err
    assert code == 2 and "is damaged: 'model_mean': 1 of 1 chunk file(s) missing" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "s.zarr").exists()


def test_results_stores_carry_the_same_record(tmp_path):
    path = tmp_path / "scores.zarr"
    io.write_array(np.arange(60.0).reshape(20, 3), path)
    stored = zarr.open_array(str(path), mode="r")
    assert stored.shape == (20, 3)
    io.verify(path)
    _set(tmp_path, "scores.zarr", (0, 0), -1.0)
    io.verify(path, full=False)  # names only: the same chunk files are there
    with pytest.raises(DamagedStoreError, match="the array: chunk contents differ"):
        io.verify(path)
