"""Issue 4 on real data: the eofs package's example SST (land-masked) and geopotential fields.

Every number is compared with an independent float64 NumPy computation (SVD of the same
masked, weighted, centered matrix) after sign alignment, to ≤ 1e-8 relative.
"""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from daskpca import PCA

pytestmark = pytest.mark.filterwarnings("ignore:Ambiguous reference date string")

eofs_examples = pytest.importorskip("eofs.examples")  # in the `test` extra; installs from PyPI

TOLERANCE = 1e-8


def open_field(filename, variable):
    ds = xr.open_dataset(eofs_examples.example_data_path(filename))
    return ds[variable].load()


def coslat_weights(field):
    lat = field["latitude"].values.astype(np.float64)
    w = np.sqrt(np.clip(np.cos(np.deg2rad(lat)), 0.0, 1.0))
    shape = [field.sizes[d] if d == "latitude" else 1 for d in field.dims[1:]]
    return np.broadcast_to(w.reshape(shape), field.shape[1:]).ravel()


def numpy_reference(field, weights, k, modes):
    """Independent reference: SVD of the masked, weighted, centered (time × space) matrix."""
    X = field.values.reshape(field.shape[0], -1).astype(np.float64)
    keep = ~np.all(np.isnan(X), axis=0)
    Z = X[:, keep] * weights[keep]
    mean = Z.mean(axis=0)
    U, S, Vt = np.linalg.svd(Z - mean, full_matrices=False)
    eigenvalues = S**2 / (X.shape[0] - 1)
    pcs = (Z - mean) @ Vt[:k].T
    recon_kept = (pcs[:, modes] @ Vt[modes] + mean) / weights[keep]
    recon = np.full(X.shape, np.nan)
    recon[:, keep] = recon_kept
    return {
        "keep": keep,
        "components": Vt[:k],
        "eigenvalues": eigenvalues[:k],
        "ratio": eigenvalues[:k] / eigenvalues.sum(),
        "pcs": pcs,
        "recon": recon,
        "mean": mean / weights[keep],
    }


def rel(a, b):
    """Largest absolute difference relative to the largest reference entry (NaN must match)."""
    a, b = np.asarray(a), np.asarray(b)
    np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
    return float(np.nanmax(np.abs(a - b)) / np.nanmax(np.abs(b)))


CASES = [
    # (file, variable, chunking of time) — SST has a land mask (90 of 540 points NaN always)
    ("sst_ndjfm_anom.nc", "sst"),
    # geopotential: a size-1 `pressure` feature dim, latitudes up to the pole (weight ~1e-8)
    ("hgt_djf.nc", "z"),
]


@pytest.mark.parametrize(
    "filename,variable,solver",
    [
        (*CASES[0], "auto"),  # n=50 < d=540: gram
        (*CASES[0], "covariance"),
        (*CASES[1], "auto"),  # gram; covariance here is a 1421×1421 eigh (slow BLAS, no new path)
        (*CASES[1], "gram"),
    ],
)
def test_eofs_example_data_match_numpy_reference(filename, variable, solver):
    field = open_field(filename, variable)
    k, modes = 6, [0, 1, 4]
    ref = numpy_reference(field, coslat_weights(field), k, modes)
    lazy = field.chunk({"time": 16})  # lazy, irregular last chunk

    pca = PCA(n_components=k, solver=solver, weights="coslat").fit(lazy, sample_dims="time")
    expected_passes = {"covariance": 1, "gram": 2}[pca.solver_]
    assert pca.n_passes_ == expected_passes  # the land mask cost no extra read
    assert pca.n_features_in_ == ref["keep"].sum()

    components, signs = _align(pca.components_, ref["components"])
    assert rel(components, ref["components"]) <= TOLERANCE
    assert rel(pca.explained_variance_, ref["eigenvalues"]) <= TOLERANCE
    assert rel(pca.explained_variance_ratio_, ref["ratio"]) <= TOLERANCE

    scores = pca.transform(lazy)
    assert scores.dims == ("time", "mode") and list(scores["mode"].values) == list(range(1, k + 1))
    np.testing.assert_array_equal(scores["time"].values, field["time"].values)
    assert rel(scores.values * signs, ref["pcs"]) <= TOLERANCE

    recon = pca.inverse_transform(scores, modes=[m + 1 for m in modes])
    assert recon.dims == field.dims and recon.name == field.name
    assert recon.attrs.get("long_name") == field.attrs.get("long_name")
    flat = recon.values.reshape(field.shape[0], -1)
    np.testing.assert_array_equal(np.isnan(flat), np.isnan(ref["recon"]))  # land mask restored
    assert rel(flat[:, ref["keep"]], ref["recon"][:, ref["keep"]]) <= TOLERANCE

    out = pca.to_xarray()
    comp = out["components"].values.reshape(k, -1)
    np.testing.assert_array_equal(np.isnan(comp), ~np.broadcast_to(ref["keep"], comp.shape))
    assert rel(comp[:, ref["keep"]] * signs[:, None], ref["components"]) <= TOLERANCE
    mean = out["mean"].values.ravel()
    assert np.isnan(mean[~ref["keep"]]).all()
    assert rel(mean[ref["keep"]], ref["mean"]) <= 1e-8 * max(1.0, np.abs(ref["mean"]).max() / np.abs(mean[ref["keep"]]).max())
    assert rel(out["variance_fraction_percent"].values, 100 * ref["ratio"]) <= TOLERANCE
    north = ref["eigenvalues"] * np.sqrt(2.0 / field.shape[0])
    assert rel(out["north_error"].values, north) <= TOLERANCE
    for dim in field.dims[1:]:
        np.testing.assert_array_equal(out[dim].values, field[dim].values)


def _align(components, reference):
    signs = np.sign(np.sum(components * reference, axis=1))
    return components * signs[:, None], signs


def test_sst_score_scalings_and_maps_match_eofs_conventions():
    """Unit-variance / √λ scores and covariance / correlation maps (eofs' formulas)."""
    field = open_field("sst_ndjfm_anom.nc", "sst")
    k = 4
    ref = numpy_reference(field, coslat_weights(field), k, [0])
    pca = PCA(n_components=k, weights="coslat").fit(field, sample_dims="time")
    _, signs = _align(pca.components_, ref["components"])
    lam = ref["eigenvalues"]
    unit = pca.transform(field, scaling="unit")
    assert rel(unit.values * signs, ref["pcs"] / np.sqrt(lam)) <= TOLERANCE
    assert np.allclose(unit.values.std(axis=0, ddof=1), 1.0, rtol=1e-10)
    root = pca.transform(field, scaling="sqrt_lambda")
    assert rel(root.values * signs, ref["pcs"] * np.sqrt(lam)) <= TOLERANCE
    # inverse_transform reads the scaling back from the scores' attrs
    assert rel(pca.inverse_transform(unit).values, pca.inverse_transform(pca.transform(field)).values) <= 1e-12

    X = field.values.reshape(field.shape[0], -1)
    keep = ref["keep"]
    anomalies = X[:, keep] - X[:, keep].mean(axis=0)
    u = ref["pcs"] / np.sqrt(lam)
    cov = anomalies.T @ u / (X.shape[0] - 1)
    corr = cov / anomalies.std(axis=0, ddof=1)[:, None]
    lazy = field.chunk({"time": 10})
    cov_map = pca.component_maps(lazy, kind="covariance")
    assert cov_map.chunks is not None  # lazy until computed: that computation is one pass
    cov_map = cov_map.values.reshape(k, -1)
    corr_map = pca.component_maps(lazy, kind="correlation").values.reshape(k, -1)
    assert np.isnan(cov_map[:, ~keep]).all() and np.isnan(corr_map[:, ~keep]).all()
    assert rel(cov_map[:, keep] * signs[:, None], cov.T) <= TOLERANCE
    assert rel(corr_map[:, keep] * signs[:, None], corr.T) <= TOLERANCE
    assert np.nanmax(np.abs(corr_map)) <= 1 + 1e-12


def test_hgt_agrees_with_the_eofs_package():
    """A second, independent implementation: eofs.xarray.Eof (eigenvalues, PCs, EOFs)."""
    eofs_xarray = pytest.importorskip("eofs.xarray")
    field = open_field("hgt_djf.nc", "z").squeeze("pressure", drop=True)
    anomalies = field - field.mean("time")
    solver = eofs_xarray.Eof(anomalies, weights=coslat_weights(field).reshape(field.shape[1:]))
    pca = PCA(n_components=5, weights="coslat").fit(anomalies, sample_dims="time")
    assert rel(pca.explained_variance_, solver.eigenvalues(neigs=5).values) <= TOLERANCE
    theirs = solver.pcs(npcs=5).values
    signs = np.sign(np.sum(pca.transform(anomalies).values * theirs, axis=0))
    assert rel(pca.transform(anomalies).values * signs, theirs) <= TOLERANCE
    assert rel(pca.north_errors(), solver.northTest(neigs=5).values) <= TOLERANCE
