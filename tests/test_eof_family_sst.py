"""The EOF family on the SST example shipped with eofs, against xeofs computing the same thing.

xeofs is run with its exact solver (``solver="full"``) on the same float64 field: its ``coslat``
weights are computed at the latitude coordinate's precision, so a float32 coordinate alone
would make the two differ by ~1e-8. Conventions that differ are aligned here and documented in
daskpca's modules: complex modes are compared as subspaces (a complex mode is defined up to a
phase); xeofs stops its varimax iteration on the criterion's relative change, which leaves its
rotation ~√rtol off, so rotations are compared at that precision (daskpca's is checked against
an independent NumPy varimax to 1e-8 in test_rotation.py).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import xarray as xr
from scipy.linalg import subspace_angles

import eofs.examples as eofs_examples
import xeofs as xe

from daskpca import PCA, HilbertPCA, Rotator, lag_embed


@pytest.fixture(scope="module")
def sst():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        field = xr.open_dataset(eofs_examples.example_data_path("sst_ndjfm_anom.nc"))["sst"].load()
    field = field.rename({"latitude": "lat", "longitude": "lon"}).astype("float64")
    return field.assign_coords(lat=field.lat.astype("float64"), lon=field.lon.astype("float64"))


def _rows(components) -> np.ndarray:
    values = components.values.reshape(components.shape[0], -1)
    return values[:, ~np.isnan(values).any(axis=0)]


def _sin_theta(a, b) -> float:
    return float(np.sin(np.max(subspace_angles(a.T, b.T))))


def _xeofs(model, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(*args, **kwargs)
    return model


def test_hilbert_eofs_agree_with_xeofs(sst):
    theirs = _xeofs(xe.single.HilbertEOF(n_modes=3, use_coslat=True, padding="exp", solver="full"), sst, dim="time")
    ours = HilbertPCA(3, weights="coslat").fit(sst, sample_dims="time")
    assert _sin_theta(_rows(theirs.components().transpose("mode", ...)), _rows(ours.to_xarray()["components"])) < 1e-8
    np.testing.assert_allclose(ours.explained_variance_, theirs.explained_variance().values, rtol=1e-8)


def test_extended_eofs_agree_with_xeofs(sst):
    theirs = _xeofs(xe.single.ExtendedEOF(n_modes=3, tau=1, embedding=3, use_coslat=True, solver="full"), sst, dim="time")
    ours = PCA(3, weights="coslat").fit(lag_embed(sst, 3, 1, sample_dim="time"), sample_dims="time")
    expected = _rows(theirs.components().transpose("mode", "embedding", ...))
    assert _sin_theta(expected, _rows(ours.to_xarray()["components"])) < 1e-8
    np.testing.assert_allclose(ours.explained_variance_, theirs.explained_variance().values, rtol=1e-8)


def test_rotated_eofs_agree_with_xeofs_to_its_stopping_precision(sst):
    plain = _xeofs(xe.single.EOF(n_modes=4, use_coslat=True, solver="full"), sst, dim="time")
    theirs = _xeofs(xe.single.EOFRotator(n_modes=4, rtol=1e-13, max_iter=5000), plain)
    ours = Rotator(n_modes=4).fit(PCA(4, weights="coslat").fit(sst, sample_dims="time"))
    expected = _rows(theirs.components().transpose("mode", ...))
    for pattern in _rows(ours.to_xarray()["components"]):
        assert min(np.linalg.norm(pattern - sign * other) for other in expected for sign in (1, -1)) < 1e-5
    np.testing.assert_allclose(ours.explained_variance_, theirs.explained_variance().values, rtol=1e-5)
