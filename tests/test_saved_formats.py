"""Models saved by an older daskpca still load, as the class that wrote them, and compute what
they computed then (fixtures written by ``tests/fixtures/make_saved_models.py`` on 2026-11-25,
format ``daskpca-model`` version 1, before the format moved from ``store/`` to ``models/``)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import daskpca
from daskpca import MCA, PCA, HilbertPCA, Rotator

FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES))
from make_saved_models import field  # noqa: E402  (the same deterministic inputs)
from _helpers import assert_equal_up_to_rounding  # noqa: E402

# The expected scores were computed on the machine that wrote the fixtures: another CPU's BLAS
# kernel decides their last bits, so they are compared up to rounding, not to the bit.


@pytest.fixture(scope="module")
def expected():
    return np.load(FIXTURES / "saved_v1_expected.npz")


@pytest.fixture
def copy_of(tmp_path):
    """A copy of a fixture (a load records its origin; nothing may write into the repository)."""
    def copy(name):
        shutil.copytree(FIXTURES / name, tmp_path / name)
        return tmp_path / name
    return copy


@pytest.mark.parametrize("name, cls, key", [("pca_v1.zarr", PCA, "pca"), ("hilbert_v1.zarr", HilbertPCA, "hilbert")])
def test_a_saved_pca_family_model_of_format_1_loads_and_scores_as_it_did(copy_of, expected, name, cls, key):
    model = daskpca.load(copy_of(name))
    assert type(model) is cls
    sst = field() if key == "pca" else field().fillna(0.0)
    assert_equal_up_to_rounding(model.transform(sst).values, expected[key])


def test_a_saved_mca_of_format_1_loads_and_scores_as_it_did(copy_of, expected):
    model = daskpca.load(copy_of("mca_v1.zarr"))
    assert type(model) is MCA
    x, y = field().values.reshape(40, -1)[:, 2:], field(1).values.reshape(40, -1)[:, 2:]
    scores = model.transform(x, y)
    assert_equal_up_to_rounding(scores[0], expected["mca_x"])
    assert_equal_up_to_rounding(scores[1], expected["mca_y"])


def test_a_saved_rotation_of_format_1_loads_and_scores_as_it_did(copy_of, expected):
    store = copy_of("rotated_v1.zarr")
    rotator = Rotator.load(store)
    np.testing.assert_allclose(rotator.transform(field()).values, expected["rotated"], rtol=1e-12, atol=1e-12)
    # One load path: daskpca.load returns what wrote the store (the rotation); the rotated
    # model's own class reads the unrotated model, as format 1's daskpca.load did.
    assert type(daskpca.load(store)) is Rotator and type(PCA.load(store)) is PCA
