"""daskpca.plot: every picture is labelled, and the numbers it draws are the model's numbers."""

from __future__ import annotations

import builtins
import importlib

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from daskpca import PCA  # noqa: E402
from daskpca import plot  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def images():
    """200 noisy 6×5 images made of three fixed patterns (so components have image structure)."""
    rng = np.random.default_rng(0)
    patterns = rng.standard_normal((3, 30))
    weights = rng.standard_normal((200, 3)) * np.array([5.0, 2.0, 1.0])
    return weights @ patterns + 0.1 * rng.standard_normal((200, 30)) + 3.0


@pytest.fixture(scope="module")
def model(images):
    return PCA(n_components=10).fit(images)


def _assert_labelled(ax):
    assert ax.get_xlabel(), "x axis has no label"
    assert ax.get_ylabel(), "y axis has no label"
    assert ax.get_title(), "axes have no title"
    legend = ax.get_legend()
    assert legend is not None and all(t.get_text() for t in legend.get_texts())


def test_scree_plots_the_eigenvalues(model):
    ax = plot.scree(model)
    _assert_labelled(ax)
    x, y = ax.lines[0].get_data()
    np.testing.assert_array_equal(x, np.arange(1, model.n_components_ + 1))
    np.testing.assert_array_equal(y, model.explained_variance_)


def test_scree_ratio_with_errors_and_log_axis(model):
    errors = model.explained_variance_ratio_ * 0.1
    ax = plot.scree(model, ratio=True, errors=errors, log=True, n=5)
    _assert_labelled(ax)
    assert ax.get_yscale() == "log"
    np.testing.assert_array_equal(ax.lines[0].get_ydata(), model.explained_variance_ratio_[:5])
    assert "ratio" in ax.get_ylabel()


def test_scree_accepts_an_array_and_an_existing_axes():
    fig, ax = plt.subplots()
    values = np.array([4.0, 2.0, 1.0])
    assert plot.scree(values, ax=ax) is ax
    np.testing.assert_array_equal(ax.lines[0].get_ydata(), values)


def test_cumulative_variance_marks_the_threshold_and_k(model):
    ax = plot.cumulative_variance(model, threshold=0.95)
    _assert_labelled(ax)
    np.testing.assert_allclose(ax.lines[0].get_ydata(), np.cumsum(model.explained_variance_ratio_))
    threshold_line = ax.lines[1]
    np.testing.assert_array_equal(threshold_line.get_ydata(), [0.95, 0.95])
    k = plot.components_for_variance(model, 0.95)
    cumulative = np.cumsum(model.explained_variance_ratio_)
    assert cumulative[k - 1] >= 0.95 and (k == 1 or cumulative[k - 2] < 0.95)
    np.testing.assert_array_equal(ax.lines[2].get_xdata(), [k, k])
    assert any(f"k = {k}" in t.get_text() for t in ax.get_legend().get_texts())


def test_components_for_variance_on_arrays():
    assert plot.components_for_variance([5.0, 3.0, 2.0], 0.5) == 1
    assert plot.components_for_variance([5.0, 3.0, 2.0], 0.8) == 2
    assert plot.components_for_variance([5.0, 3.0, 2.0], 1.0) == 3
    # Not the whole spectrum: the kept eigenvalues do not reach 90 % of a total of 20.
    assert plot.components_for_variance([5.0, 3.0], 0.9, total_variance=20.0) is None
    with pytest.raises(ValueError, match="threshold"):
        plot.components_for_variance([1.0], 1.5)


def test_distortion_is_total_minus_kept(model):
    ax = plot.distortion(model)
    _assert_labelled(ax)
    k, J = ax.lines[0].get_data()
    np.testing.assert_array_equal(k, np.arange(model.n_components_ + 1))
    assert J[0] == pytest.approx(model.total_variance_)
    assert J[-1] == pytest.approx(model.distortion_)
    np.testing.assert_allclose(J[1:], model.total_variance_ - np.cumsum(model.explained_variance_))


def test_distortion_equals_mean_squared_reconstruction_error(images, model):
    # J(k) is the mean squared error of the rank-k reconstruction, up to the n/(n − 1) factor.
    k, J = plot.distortion_curve(model)
    n = images.shape[0]
    for m in (1, 3, 7):
        residual = images - plot.reconstruct(model, images, m)
        assert np.sum(residual**2) / (n - 1) == pytest.approx(J[m], rel=1e-9)


def test_distortion_log_axis_drops_zero():
    ax = plot.distortion([2.0, 1.0], log=True)
    k, J = ax.lines[0].get_data()
    np.testing.assert_array_equal(k, [0, 1])
    np.testing.assert_array_equal(J, [3.0, 1.0])
    assert ax.get_yscale() == "log"


def test_component_maps_as_images(model):
    fig = plot.component_maps(model, (6, 5), n=3, mean=True)
    image_axes = [ax for ax in fig.axes if ax.images]
    assert len(image_axes) == 4
    assert fig.get_suptitle()
    assert image_axes[0].get_title() == "mean"
    np.testing.assert_allclose(image_axes[0].images[0].get_array(), model.mean_.reshape(6, 5))
    for i, ax in enumerate(image_axes[1:]):
        assert ax.get_title().startswith(f"component {i + 1}")
        np.testing.assert_allclose(ax.images[0].get_array(), model.components_[i].reshape(6, 5))
        low, high = ax.images[0].get_clim()
        assert low == pytest.approx(-high)  # signed patterns: symmetric colours
    assert len(fig.axes) > len(image_axes)  # colour bars


def test_component_maps_as_lines(model):
    ax = plot.component_maps(model, n=2)
    _assert_labelled(ax)
    np.testing.assert_array_equal(ax.lines[1].get_ydata(), model.components_[1])


def test_component_maps_on_a_masked_map_with_coordinates():
    # A lat × lon field flattened to 12 features with NaN where land was restored.
    components = np.arange(24, dtype=float).reshape(2, 12) - 10
    components[:, [0, 5]] = np.nan
    fig = plot.component_maps(components, (3, 4), n=2, extent=(100, 260, -20, 60),
                              xlabel="longitude (°E)", ylabel="latitude (°N)", origin="lower")
    ax = fig.axes[0]
    assert ax.get_xlabel() == "longitude (°E)" and ax.get_ylabel() == "latitude (°N)"
    shown = ax.images[0].get_array()
    assert shown.mask.ravel()[0] and shown.mask.ravel()[5]
    np.testing.assert_array_equal(shown.filled(np.nan).ravel()[1:5], components[0, 1:5])


def test_reconstructions_grid(images, model):
    fig = plot.reconstructions(model, images[:2], (6, 5), n_components=(1, 3, 10),
                               row_labels=["first", "second"])
    axes = [ax for ax in fig.axes if ax.images]
    assert axes[4].get_ylabel() == "second"
    assert len(axes) == 2 * 4
    assert [ax.get_title() for ax in axes[:4]] == ["original", "M = 1", "M = 3", "M = 10"]
    assert fig.get_suptitle()
    np.testing.assert_allclose(axes[0].images[0].get_array(), images[0].reshape(6, 5))
    np.testing.assert_allclose(axes[4 + 2].images[0].get_array(),
                               plot.reconstruct(model, images[1:2], 3).reshape(6, 5))
    # All components of a rank-3 signal: the reconstruction is nearly the image itself.
    np.testing.assert_allclose(plot.reconstruct(model, images[:2], 10), images[:2], atol=0.5)


def test_reconstruct_rejects_too_many_components(model, images):
    with pytest.raises(ValueError, match="n_components_ = 10"):
        plot.reconstruct(model, images[:1], 11)


def test_image_grid_rejects_a_wrong_shape(images):
    with pytest.raises(ValueError, match=r"\(8, 8\)"):
        plot.image_grid(images[:2], (8, 8))


def test_missing_matplotlib_says_how_to_install(monkeypatch):
    real_import = builtins.__import__

    def refuse(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", refuse)
    fresh = importlib.reload(plot)  # importing the module itself must not need matplotlib
    with pytest.raises(ImportError, match=r"daskpca\[plot\]"):
        fresh.scree([1.0, 0.5])


# ------------------------------------------------------------ issue 16: labels and ticks


def _labeled_field():
    import xarray as xr

    rng = np.random.default_rng(0)
    values = rng.standard_normal((40, 4, 6)) + 5.0
    values[:, 0, 0] = np.nan
    return xr.DataArray(values, dims=("time", "lat", "lon"), coords={
        "lat": ("lat", [30.0, 10.0, -10.0, -30.0], {"units": "degrees_north", "long_name": "latitude"}),
        "lon": ("lon", np.arange(6) * 60.0, {"units": "degrees_east"}),
    })


def test_labeled_component_maps_are_drawn_on_coordinates_with_units():
    A = _labeled_field()
    pca = PCA(3).fit(A, sample_dims="time")
    fig = plot.component_maps(pca, n=2)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "lon (degrees_east)" and ax.get_ylabel() == "latitude (degrees_north)"
    image = ax.images[0]
    assert image.get_extent() == pytest.approx([-30.0, 330.0, -40.0, 40.0])
    # latitude decreased in the data: rows were flipped so that north is up; land stays blank
    expected = pca.to_xarray()["components"].isel(mode=0).values[::-1]
    np.testing.assert_array_equal(image.get_array().filled(np.nan), expected)
    assert image.get_array().mask[-1, 0]


def test_maps_without_coordinates_say_index():
    A = _labeled_field().drop_vars(["lat", "lon"])
    fig = plot.component_maps(PCA(2).fit(A, sample_dims="time"), n=1)
    assert fig.axes[0].get_xlabel() == "lon index" and fig.axes[0].get_ylabel() == "lat index"


@pytest.mark.parametrize("draw", [plot.scree, plot.cumulative_variance, plot.distortion])
def test_mode_axes_have_integer_ticks(draw):
    ax = draw(np.array([3.0, 1.0]))  # two modes: matplotlib would put ticks at 1.25, 1.5, ...
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks)


def test_report_after_update_is_consistent(tmp_path):
    from daskpca.cli.report import summary_markdown, write_report

    A = _labeled_field()
    pca = PCA(3, solver="covariance").fit(A.isel(time=slice(0, 25)), sample_dims="time")
    pca.update(A.isel(time=slice(25, None)))
    text = summary_markdown(pca)
    assert "samples: 40" in text and "(25)" not in text and "25 samples" not in text.replace("of 25 (", "")
    assert "15 new samples merged exactly into those of 25 (40 samples in all)" in text
    files = write_report(pca, tmp_path / "report", n_maps=2)
    assert {f.name for f in files} >= {"components.png", "summary.md", "scree.png"}
