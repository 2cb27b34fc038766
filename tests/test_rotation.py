"""Rotated EOFs (daskpca.eof.rotation): varimax and promax against an independent implementation,
their invariants on the data, labeled output, and passes."""

from __future__ import annotations

import dask
import numpy as np
import pytest
import xarray as xr

from daskpca import PCA
from daskpca.exceptions import InvalidParameterError
from daskpca.eof.rotation import Rotator, promax, varimax

from _helpers import assert_equal_up_to_rounding, write_zarr


def _simple_structure(n=800, d=60, seed=1):
    """Three blocks of features driven by three independent signals of nearly equal variance: the
    leading EOFs (nearly degenerate) mix the blocks; varimax should find them again."""
    rng = np.random.default_rng(seed)
    signals = rng.standard_normal((n, 3)) * [3.0, 2.98, 2.96]
    patterns = np.zeros((3, d))
    block = d // 3
    for i in range(3):
        patterns[i, i * block : (i + 1) * block] = 1.5
    return signals @ patterns + 0.3 * rng.standard_normal((n, d)) + 5.0, patterns


def _reference_varimax(L, eps=1e-15, iterations=20000):
    """R's stats::varimax, written out independently (normalize=TRUE), iterated until the
    rotation stops moving (R's own stop on the criterion leaves it ~√eps off)."""
    sc = np.sqrt(np.sum(L**2, axis=1))
    x = L / sc[:, None]
    p, nc = x.shape
    TT = np.eye(nc)
    d = 0.0
    for _ in range(iterations):
        z = x @ TT
        B = x.T @ (z**3 - z @ np.diag(np.sum(z**2, axis=0)) / p)
        u, s, vt = np.linalg.svd(B)
        TT, previous = u @ vt, TT
        if np.max(np.abs(TT - previous)) < eps:
            break
    return (x @ TT) * sc[:, None], TT


def _criterion(L):
    """The raw varimax criterion Σ_modes Var_features(λ²) of Kaiser-normalised loadings."""
    A = L / np.sqrt(np.sum(L**2, axis=1))[:, None]
    return float(np.sum(np.var(A**2, axis=0)))


@pytest.fixture(scope="module")
def fitted():
    X, patterns = _simple_structure()
    return X, patterns, PCA(6, solver="covariance").fit(X)


def test_varimax_matches_an_independent_implementation_and_is_a_local_optimum(fitted):
    _, _, pca = fitted
    L = pca.components_[:3].T * np.sqrt(pca.explained_variance_[:3])
    rotated, R, converged = varimax(L)
    expected, _ = _reference_varimax(L)
    assert converged
    np.testing.assert_allclose(R.T @ R, np.eye(3), atol=1e-12)
    # Same rotated loadings up to the order and sign of the columns.
    for column in rotated.T:  # the same rotated loadings to 1e-8, up to column order and sign
        distance = min(np.linalg.norm(column - sign * other) for other in expected.T for sign in (1, -1))
        assert distance <= 1e-8 * np.linalg.norm(column)
    rng = np.random.default_rng(0)
    best = _criterion(rotated)
    for _ in range(20):  # small orthogonal perturbations never improve the criterion
        q, _ = np.linalg.qr(np.eye(3) + 1e-2 * rng.standard_normal((3, 3)))
        assert _criterion(rotated @ q) <= best + 1e-12


def test_varimax_recovers_the_blocks_the_plain_eofs_mix(fitted):
    _, patterns, pca = fitted
    rot = Rotator(n_modes=3).fit(pca)
    unit_patterns = patterns / np.linalg.norm(patterns, axis=1)[:, None]
    # Each rotated pattern lies mostly on one block; the plain EOFs do not.
    cosines = np.abs(rot.components_ @ unit_patterns.T)
    assert np.all(cosines.max(axis=1) > 0.97)
    assert np.abs(pca.components_[:3] @ unit_patterns.T).max(axis=1).min() < 0.9


@pytest.mark.parametrize("power", [1, 4])
def test_rotated_scores_have_the_reported_variances_and_correlations(fitted, power):
    X, _, pca = fitted
    rot = Rotator(n_modes=3, power=power).fit(pca)
    scores = rot.transform(X)
    np.testing.assert_allclose(np.var(scores, axis=0, ddof=1), rot.explained_variance_, rtol=1e-10)
    np.testing.assert_allclose(np.corrcoef(scores.T), rot.correlation_, atol=1e-10)
    assert np.all(np.diff(rot.explained_variance_) <= 0)
    if power == 1:
        # Orthogonal: variance is redistributed, not created; correlations vanish.
        np.testing.assert_allclose(rot.explained_variance_.sum(), pca.explained_variance_[:3].sum(), rtol=1e-12)
        np.testing.assert_allclose(rot.correlation_, np.eye(3), atol=1e-12)
    else:
        assert np.abs(rot.correlation_ - np.eye(3)).max() > 1e-3


def test_promax_with_power_one_is_varimax(fitted):
    _, _, pca = fitted
    L = pca.components_[:4].T * np.sqrt(pca.explained_variance_[:4])
    a, Ra, _ = varimax(L)
    b, Rb, phi, _ = promax(L, power=1)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(phi, np.eye(4))


def test_rotation_keeps_the_reconstruction_of_the_rotated_modes(fitted):
    X, _, pca = fitted
    rot = Rotator(n_modes=3).fit(pca)
    loadings = rot.components_.T * np.sqrt(rot.explained_variance_)  # d × m
    unit = rot.transform(X) / np.sqrt(rot.explained_variance_)
    plain = pca.transform(X)[:, :3] @ pca.components_[:3]
    np.testing.assert_allclose(unit @ loadings.T, plain, atol=1e-9)


def test_labeled_rotation_reads_the_data_only_to_score_it(tmp_path):
    X, _ = _simple_structure(n=400, d=48)
    X[:, :4] = np.nan  # masked features
    array, store = write_zarr(tmp_path / "x.zarr", X.reshape(400, 6, 8), chunks=(100, 6, 8))
    field = xr.DataArray(dask.array.from_zarr(array), dims=("time", "lat", "lon"),
                         coords={"time": np.arange(400), "lat": np.linspace(-40, 40, 6), "lon": np.arange(8.0)})
    pca = PCA(5, solver="covariance", weights="coslat").fit(field, sample_dims="time")
    reads = sum(store.chunk_reads().values())
    rot = Rotator(n_modes=3, power=4).fit(pca)
    assert sum(store.chunk_reads().values()) == reads  # fitting the rotation reads nothing
    scores = rot.transform(field)
    assert isinstance(scores.data, dask.array.Array) and scores.dims == ("time", "mode")
    scores = scores.compute()
    assert sum(store.chunk_reads().values()) == reads + 4  # one pass: 4 chunks
    np.testing.assert_allclose(scores.var("time", ddof=1).values, rot.explained_variance_, rtol=1e-8)
    maps = rot.to_xarray()["components"]
    assert maps.dims == ("mode", "lat", "lon") and bool(maps.isel(lat=0, lon=slice(0, 4)).isnull().all())


@pytest.mark.parametrize("params", [dict(n_modes=1), dict(n_modes=9), dict(power=0), dict(rtol=0.0), dict(normalize="yes")])
def test_bad_rotation_parameters_name_the_fix(fitted, params):
    with pytest.raises(InvalidParameterError, match=next(iter(params))):
        Rotator(**params).fit(fitted[2])


def test_a_saved_rotation_loads_with_the_same_scores_and_a_tampered_one_is_refused(fitted, tmp_path):
    import json

    import zarr

    from daskpca import load
    from daskpca.exceptions import DamagedModelError

    X, _, pca = fitted
    rot = Rotator(n_modes=3, power=4).fit(pca)
    rot.save(tmp_path / "rot.zarr")
    back = Rotator.load(tmp_path / "rot.zarr")
    assert_equal_up_to_rounding(back.transform(X), rot.transform(X))  # loaded: another layout, same arithmetic
    # One load path: daskpca.load returns what wrote the store; PCA.load the plain model in it.
    assert type(load(tmp_path / "rot.zarr")) is Rotator and type(PCA.load(tmp_path / "rot.zarr")) is PCA
    pca.save(tmp_path / "plain.zarr")
    with pytest.raises(ValueError, match="without a rotation"):
        Rotator.load(tmp_path / "plain.zarr")
    group = zarr.open_group(str(tmp_path / "rot.zarr"), mode="r+")
    group.attrs["rotation"] = json.dumps({**json.loads(group.attrs["rotation"]), "power": 1})
    with pytest.raises(DamagedModelError):
        Rotator.load(tmp_path / "rot.zarr")
