"""``daskpca report``: a folder of pictures and a Markdown summary of a saved model.

Files: ``scree.png`` (eigenvalues, with North et al. errors — or, with ``--bootstrap N``, the
moving-block bootstrap intervals of :func:`daskpca.significance.bootstrap`, one extra read of the
data), ``cumulative.png`` (cumulative
explained variance with the 95 % line), ``distortion.png`` (J(k)), ``components.png`` (the leading
component maps: images over the two feature dims of a labeled 2-D field, lines otherwise; for
complex (Hilbert) modes ``components_amplitude.png`` and ``components_phase.png`` instead, never
their real parts) and ``summary.md``. The folder is written to a temporary location and moved into place complete.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

#: The variance fraction marked on the cumulative plot and reported in the summary.
REPORT_THRESHOLD = 0.95


def write_report(pca, out, *, overwrite: bool = False, n_maps: int = 4, data=None, n_replicates: int = 0,
                 block_length: int | None = None, random_state=0) -> list[Path]:
    """Write the report of a fitted model into the folder ``out``; return the files written.

    Parameters
    ----------
    pca : fitted daskpca.PCA
    out : str or os.PathLike
        A local folder; it must not exist unless ``overwrite=True``.
    n_maps : int
        Leading components drawn in ``components.png``.
    data : array or xarray object, optional
        The data the model was fitted on; with ``n_replicates`` ≥ 1 it is read once (before the
        folder is written) for bootstrap intervals on the scree plot and in the summary.
    n_replicates, block_length, random_state
        Passed to :func:`daskpca.significance.bootstrap` (0 replicates: no bootstrap, no read).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .. import plot
    from ..io import atomic_directory
    from ..significance import bootstrap

    # Every check and the one read come before anything is written.
    intervals = (bootstrap(pca, data, n_replicates=n_replicates, block_length=block_length, random_state=random_state)
                 if n_replicates else None)
    names = []
    with atomic_directory(out, overwrite=overwrite) as folder:
        folder.mkdir(parents=True)
        errors = pca.north_errors() if intervals is None else intervals.errors()
        for name, draw in (
            ("scree.png", lambda: plot.scree(pca, errors=errors, log=True, n=None if intervals is None
                                             else intervals.explained_variance.size)),
            ("cumulative.png", lambda: plot.cumulative_variance(pca, threshold=REPORT_THRESHOLD)),
            ("distortion.png", lambda: plot.distortion(pca)),
            *_component_pictures(pca, n_maps),
        ):
            drawn = draw()
            figure = drawn if hasattr(drawn, "savefig") else drawn.figure
            figure.savefig(folder / name, dpi=110)
            plt.close(figure)
            names.append(name)
        (folder / "summary.md").write_text(summary_markdown(pca, names, intervals))
        names.append("summary.md")
    return [Path(out) / name for name in names]


def write_coupled_report(mca, out, *, overwrite: bool = False, n_maps: int = 3) -> list[Path]:
    """Write the report of a fitted :class:`daskpca.MCA` into the folder ``out``; return the files:
    ``patterns.png`` (X's and Y's leading patterns side by side), ``fractions.png`` and ``summary.md``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .. import plot
    from ..io import atomic_directory

    names = []
    with atomic_directory(out, overwrite=overwrite) as folder:
        folder.mkdir(parents=True)
        for name, draw in (("patterns.png", lambda: plot.coupled_patterns(mca, n=max(n_maps, 1))),
                           ("fractions.png", lambda: plot.scree(mca.squared_covariance_fraction_, title="MCA modes",
                                                                label="squared covariance fraction σ²/‖C‖²_F"))):
            drawn = draw()
            figure = drawn if hasattr(drawn, "savefig") else drawn.figure
            figure.savefig(folder / name, dpi=110)
            plt.close(figure)
            names.append(name)
        bound = mca.error_bound_
        lines = [
            "# daskpca MCA report",
            "",
            f"- samples: {mca.n_samples_}; features: X {mca.n_features_x_}, Y {mca.n_features_y_}; "
            f"mode pairs kept: {mca.n_components_}",
            f"- path: `{mca.solver_}` ({mca.solver_reason_}); passes over both fields: {mca.n_passes_}",
            "- accuracy: " + ("exact (to round-off)" if bound == 0 else
                              f"sin θ of each field's singular subspace ≤ {bound:.2g} (the Krylov bound)"),
            "",
            "| mode | singular value | squared covariance fraction | covariance fraction |",
            "|---:|---:|---:|---:|",
        ]
        lines += [f"| {i} | {s:.6g} | {f:.2%} | {c:.2%} |" for i, (s, f, c) in enumerate(
            zip(mca.singular_values_, mca.squared_covariance_fraction_, mca.covariance_fraction_), 1)]
        lines += ["", *[f"![{Path(p).stem}]({p})" for p in names]]
        (folder / "summary.md").write_text("\n".join(lines) + "\n")
        names.append("summary.md")
    return [Path(out) / name for name in names]


def _component_pictures(pca, n_maps):
    """``(file name, draw)`` of the component maps: over the coordinates of a labeled 2-D field
    (axes named with units), else lines against feature index (see
    :func:`daskpca.plot.component_maps`). Complex modes are drawn as their spatial amplitude |v|
    and phase arg v (a cyclic colour map), each a real model view of the same components."""
    import copy

    from .. import plot

    n = min(n_maps, pca.n_components_)
    if not np.iscomplexobj(pca.components_):
        return [("components.png", lambda: plot.component_maps(pca, n=n))]
    pictures = []
    for part, values, cmap, title in (("amplitude", np.abs, "viridis", "Spatial amplitude |v|"),
                                      ("phase", np.angle, "twilight", "Spatial phase arg(v), radians")):
        view = copy.copy(pca)
        view.components_ = values(pca.components_)
        pictures.append((f"components_{part}.png",
                         lambda view=view, cmap=cmap, title=title: plot.component_maps(view, n=n, cmap=cmap, title=title)))
    return pictures


def summary_markdown(pca, pictures=(), intervals=None) -> str:
    """A short Markdown summary: the fit, its accuracy, a variance table with North et al.'s
    separation test, the bootstrap intervals when given (a :class:`~daskpca.significance.BootstrapResult`),
    and links to the pictures."""
    from ..significance import north_test

    cumulative = np.cumsum(pca.explained_variance_ratio_)
    reached = np.nonzero(cumulative >= REPORT_THRESHOLD)[0]
    north = north_test(pca.explained_variance_, pca.n_samples_)
    bound = getattr(pca, "error_bound_", 0.0)
    lines = [
        "# daskpca model report",
        "",
        f"- samples: {pca.n_samples_}, features: {pca.n_features_in_}, components kept: {pca.n_components_}",
        f"- solver: `{pca.solver_}` ({pca.solver_reason_}); passes over the data: {pca.n_passes_}",
        "- accuracy: " + ("exact (to round-off)" if bound == 0 else
                          f"sin θ of the kept subspace ≤ {bound:.2g} (the solver's error bound)" if np.isfinite(bound)
                          else "approximate; this solver computes no error bound"),
        f"- total variance: {pca.total_variance_:.6g}; distortion J (discarded): {pca.distortion_:.6g}; "
        f"noise variance: {pca.noise_variance_:.6g}",
        f"- components for {REPORT_THRESHOLD:.0%} of the variance: "
        + (f"{reached[0] + 1}" if reached.size else f"more than the {pca.n_components_} kept"),
        "- North et al. (1982): "
        + (f"the leading {north.k} mode(s) each stand apart from the next (error bars λ·√(2/n) clear "
           "of each other); truncating inside an unseparated pair splits a pattern" if north.k else
           "modes 1 and 2 are not separated (their error bars λ·√(2/n) overlap): keep both or neither"),
        "",
        "| mode | variance | North error | separated from next | ratio | cumulative |",
        "|---:|---:|---:|:---:|---:|---:|",
    ]
    for row, ratio, cum in zip(north.lines(), pca.explained_variance_ratio_, cumulative):
        lines.append(f"{row} {ratio:.2%} | {cum:.2%} |")
    lines.append("")
    if intervals is not None:
        lines += [
            f"## Moving-block bootstrap ({intervals.n_replicates} replicates, blocks of {intervals.block_length} "
            f"samples, {intervals.confidence:.0%} {intervals.interval} intervals, "
            + ("exact replicates" if intervals.exact else f"replicates within the leading {intervals.n_basis} directions")
            + "; one extra read of the data)",
            "",
            f"The leading {intervals.n_standout} mode(s) each stand out: their variance intervals lie wholly "
            "above the next mode's." if intervals.n_standout else
            "Mode 1's variance interval overlaps mode 2's: no single mode stands out.",
            "",
            "| mode | variance | interval | ratio interval | stands out from next |",
            "|---:|---:|:---:|:---:|:---:|",
            *intervals.lines(),
            "",
        ]
    lines += [f"![{Path(p).stem}]({p})" for p in pictures]
    return "\n".join(lines) + "\n"
