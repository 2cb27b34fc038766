"""Hostile input on the roads issue 29 found unguarded: two fields, update, latitudes. One fast
test per class, on the API and the CLI."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from daskpca import MCA, PCA, cli
from daskpca.exceptions import InputError


def test_mca_of_a_constant_field_or_one_sample_is_refused_by_name():
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((50, 4)), np.full((50, 3), 7.0)
    for solver in ("exact", "krylov"):
        with pytest.raises(InputError, match="field Y is constant"):
            MCA(2, solver=solver).fit(x, y)
    with pytest.raises(InputError, match="at least 2 shared samples"):
        MCA(1).fit(x[:1], x[:1, :2])


def test_cli_mca_of_a_constant_field_exits_2(tmp_path, capsys):
    import zarr

    rng = np.random.default_rng(1)
    zarr.create_array(str(tmp_path / "x.zarr"), shape=(40, 4), dtype="f8")[...] = rng.standard_normal((40, 4))
    zarr.create_array(str(tmp_path / "y.zarr"), shape=(40, 3), dtype="f8")[...] = 2.0
    code = cli.main(["fit", str(tmp_path / "x.zarr"), "--mca", "--with", str(tmp_path / "y.zarr"), "-k", "1",
                     "--out", str(tmp_path / "m.zarr")])
    assert code == 2 and "field Y is constant" in capsys.readouterr().err
    assert not (tmp_path / "m.zarr").exists()
