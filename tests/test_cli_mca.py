"""daskpca fit --mca --with and the coupled report, in-process, on two labeled zarr fields."""

from __future__ import annotations

import json

import numpy as np
import pytest

from daskpca import MCA, load
from daskpca.cli import main

from test_mca import labeled_pair


@pytest.fixture(scope="module")
def fields(tmp_path_factory):
    root = tmp_path_factory.mktemp("mca")
    x, y = labeled_pair()
    x.to_dataset().chunk({"time": 40}).to_zarr(root / "x.zarr", zarr_format=3, consolidated=False)
    y.to_dataset().chunk({"time": 50}).to_zarr(root / "y.zarr", zarr_format=3, consolidated=False)
    return root, x, y


def test_fit_mca_saves_the_model_the_api_fits_and_reports_it_side_by_side(fields, tmp_path, capsys):
    root, x, y = fields
    out = tmp_path / "mca.zarr"
    code = main(["fit", str(root / "x.zarr"), "--var", "sst", "--mca", "--with", str(root / "y.zarr"),
                 "--var2", "slp", "-k", "3", "--weights", "coslat", "--out", str(out), "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    reference = MCA(3, weights="coslat").fit(x, y, sample_dims="time")
    assert summary["analysis"] == "mca" and summary["n_passes"] == 1 and summary["solver"] == "exact"
    np.testing.assert_allclose(summary["singular_values"], reference.singular_values_, rtol=1e-10)
    model = load(out)
    assert isinstance(model, MCA)
    np.testing.assert_allclose(np.abs(model.components_y_), np.abs(reference.components_y_), atol=1e-10)

    assert main(["report", str(out), "--out", str(tmp_path / "report"), "--quiet"]) == 0
    written = sorted(p.name for p in (tmp_path / "report").iterdir() if not p.name.startswith("."))  # not the marker
    assert written == ["fractions.png", "patterns.png", "summary.md"]
    text = (tmp_path / "report" / "summary.md").read_text()
    assert "passes over both fields: 1" in text and f"{reference.squared_covariance_fraction_[0]:.2%}" in text


@pytest.mark.parametrize("extra, message", [
    (["--mca"], "--mca needs --with SOURCE2"),
    (["--with", "Y"], "--mca needs --with SOURCE2"),
    (["--mca", "--with", "Y", "--hilbert"], "--hilbert apply to one field's PCA, not to --mca"),
    (["--mca", "--with", "Y", "--solver", "tsqr"], "--mca takes --solver auto, exact (one pass) or krylov"),
    (["--mca", "--with", "Y", "-k", "0.9"], "give -k an int"),
])
def test_bad_coupled_options_exit_2_before_reading(fields, tmp_path, capsys, extra, message):
    root, _, _ = fields
    args = ["fit", str(root / "x.zarr"), "--var", "sst", "--out", str(tmp_path / "m.zarr"), *extra]
    if "-k" not in extra:
        args += ["-k", "2"]
    args = [str(root / "y.zarr") if a == "Y" else a for a in args]
    assert main(args) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "m.zarr").exists()


def test_krylov_mca_honours_max_passes_and_prints_strict_json(fields, tmp_path, capsys):
    # --max-passes was dropped on the way to MCA (20 reads instead of 2); its fraction of a total it
    # never computes printed NaN, which no strict JSON parser accepts.
    root, _, _ = fields
    argv = ["fit", str(root / "x.zarr"), "--var", "sst", "--mca", "--with", str(root / "y.zarr"), "--var2", "slp",
            "-k", "2", "--solver", "krylov", "--json"]
    assert main([*argv, "--max-passes", "2", "--out", str(tmp_path / "a.zarr")]) == 0
    out = capsys.readouterr().out
    summary = json.loads(out, parse_constant=lambda name: pytest.fail(f"{name} in --json output"))
    assert summary["n_passes"] == 2 and summary["squared_covariance_fraction"] == [None, None]
    assert main([*argv, "--max-passes", "1", "--out", str(tmp_path / "b.zarr")]) == 2
    assert "--max-passes >= 2" in capsys.readouterr().err and not (tmp_path / "b.zarr").exists()


def test_inspect_and_transform_accept_the_mca_models_fit_writes(fields, tmp_path, capsys):
    import xarray as xr

    root, x, y = fields
    out = tmp_path / "mca.zarr"
    assert main(["fit", str(root / "x.zarr"), "--var", "sst", "--mca", "--with", str(root / "y.zarr"), "--var2", "slp",
                 "-k", "2", "--out", str(out), "--quiet"]) == 0
    assert main(["inspect", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    model = load(out)
    assert summary["analysis"] == "mca" and summary["n_components"] == 2
    np.testing.assert_allclose(summary["singular_values"], model.singular_values_, rtol=1e-12)
    assert main(["inspect", str(out)]) == 0
    assert "MCA model" in capsys.readouterr().out
    expected = model.transform(x, y)
    for field, source, var, want in (("X", "x.zarr", "sst", expected[0]), ("Y", "y.zarr", "slp", expected[1])):
        scores = tmp_path / f"scores_{field}.zarr"
        assert main(["transform", str(out), str(root / source), "--var", var, "--field", field, "--out", str(scores),
                     "--quiet"]) == 0
        got = xr.open_zarr(scores, consolidated=False)
        got = got[list(got.data_vars)[0]]
        np.testing.assert_allclose(got.values, want.values, rtol=1e-10, atol=1e-12)
    # --field belongs to coupled models; the wrong field's source is refused by its shape.
    from daskpca import PCA

    PCA(2).fit(np.random.default_rng(0).standard_normal((30, 4))).save(tmp_path / "pca.zarr")
    assert main(["transform", str(tmp_path / "pca.zarr"), str(root / "x.zarr"), "--field", "Y",
                 "--out", str(tmp_path / "s.zarr")]) == 2
    assert "drop --field" in capsys.readouterr().err
    assert main(["transform", str(out), str(root / "x.zarr"), "--var", "sst", "--field", "Y",
                 "--out", str(tmp_path / "bad.zarr")]) == 2
    capsys.readouterr()


def test_a_krylov_refit_over_its_own_model_plans_its_passes_from_that_models_bounds(fields, tmp_path, capsys):
    """`fit --mca --out MODEL --overwrite` (a scheduled refit of the same fields) takes the Krylov
    path's count from the bounds of the model it replaces, reading nothing more, and says so; a
    first fit says the planner's model. A damaged model there is only a hint gone: the refit runs
    and replaces it."""
    from daskpca.solvers.krylov import passes_from_history

    root, _, _ = fields
    model = tmp_path / "mca.zarr"
    argv = ["fit", str(root / "x.zarr"), "--var", "sst", "--mca", "--with", str(root / "y.zarr"), "--var2", "slp",
            "-k", "2", "--solver", "krylov", "--tol", "1e-6", "--random-state", "0", "--out", str(model), "--json"]
    assert main(argv) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["predicted_from"] == "the planner's model" and first["predicted_passes"] == 12
    bounds = load(model).solver_info_["bounds"]
    assert main([*argv, "--overwrite"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["predicted_from"] == "an earlier fit's bounds"
    assert second["predicted_passes"] == 1 + passes_from_history(bounds, 1e-6) == second["n_passes"]

    (model / "model_components_x" / "c" / "0" / "0").write_bytes(b"damaged")
    assert main([*argv, "--overwrite"]) == 0
    assert json.loads(capsys.readouterr().out)["predicted_from"] == "the planner's model"
    assert load(model).n_passes_ == second["n_passes"]  # replaced whole
