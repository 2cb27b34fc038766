"""What a job tells its user: the variance table, the ``--json`` summary and its account of the
run (solver and why, passes and their time against the plan's, the bound against the tol).

Owns the text of the command's output; imports nothing of daskpca but the progress module's time
format. Imported by :mod:`daskpca.cli.command` only.
"""

from __future__ import annotations

import math

import numpy as np

#: Rows of the variance table printed by default (--all prints every mode).
TABLE_ROWS = 20


def passes_text(n: int) -> str:
    return f"{n} pass{'es' if n != 1 else ''}"


def variance_table(pca, show_all: bool = False) -> str:
    lines = [" mode   variance    ratio  cumulative"]
    cumulative = np.cumsum(pca.explained_variance_ratio_)
    rows = list(zip(pca.explained_variance_, pca.explained_variance_ratio_, cumulative))
    shown = rows if show_all else rows[:TABLE_ROWS]
    for i, (var, ratio, cum) in enumerate(shown, 1):
        lines.append(f"{i:5d} {var:10.4g} {ratio:8.2%} {cum:10.2%}")
    if len(shown) < len(rows):
        lines.append(f"  … {len(rows) - len(shown)} more modes (to {cumulative[-1]:.2%}); --all prints every one")
    lines.append(f"distortion J (sum of discarded eigenvalues) = {pca.distortion_:.4g}")
    return "\n".join(lines)


def summary(pca, args=None, *, model, scores=None, timings=None, plan=None) -> dict:
    """What the job did, for ``--json`` (and :func:`what_ran`). Timings of the passes exist for
    a fit made by this process, the plan's prediction when the job planned (``fit``); NaN bounds
    (solvers that compute none) are null."""
    bound = float(getattr(pca, "error_bound_", float("nan")))
    pass_seconds = [float(s) for s in getattr(pca, "pass_seconds_", ())]
    client_seconds = [float(s) for s in getattr(pca, "client_seconds_", ())]
    certified = pca.solver_info_.get("tol") if getattr(pca, "tol", None) is None else None
    predicted = next((e.seconds for e in plan.estimates if e.name == pca.solver_), None) if plan else None
    return {
        "model": model,
        "scores": scores,
        "ran_on": getattr(args, "ran_on", None),
        "solver": pca.solver_,
        "solver_reason": pca.solver_reason_,
        "n_components": int(pca.n_components_),
        "n_samples": int(pca.n_samples_),
        "n_features": int(pca.n_features_in_),
        "n_passes": int(pca.n_passes_),
        "explained_variance": [float(v) for v in pca.explained_variance_],
        "explained_variance_ratio": [float(v) for v in pca.explained_variance_ratio_],
        "distortion": float(pca.distortion_),
        "error_bound": bound if math.isfinite(bound) else None,
        "tol": None if getattr(pca, "tol", None) is None else float(pca.tol),
        "pass_seconds": pass_seconds,
        "seconds_per_pass": sum(pass_seconds) / len(pass_seconds) if pass_seconds else None,
        "client_seconds": client_seconds,
        "default_tol": None if certified is None else float(certified),
        "predicted_seconds": predicted,
        "fit_seconds": getattr(pca, "fit_seconds_", None),
        "resumed_from_pass": pca.solver_info_.get("resumed_from_pass"),
        "timings": timings or {},
    }


def what_ran(summary: dict) -> str:
    """The summary's account of the run: solver and why, passes and their time against the
    plan's, the error bound against the tol asked for, and a resume."""
    from ..solvers._progress import format_seconds

    lines = [f"solver: {summary['solver']} ({summary['solver_reason']})"]
    passes = passes_text(summary["n_passes"])
    if summary["seconds_per_pass"] is not None:
        passes += f", {format_seconds(summary['seconds_per_pass'])} a pass"
    if summary.get("client_seconds"):
        passes += f" + {format_seconds(sum(summary['client_seconds']))} on the client"
    if summary["fit_seconds"] is not None:
        passes += f"; fit {format_seconds(summary['fit_seconds'])}"
        if summary["predicted_seconds"] is not None:
            passes += f" (the plan predicted ≈ {format_seconds(summary['predicted_seconds'])})"
    lines.append(f"passes over the data: {passes}")
    bound, tol = summary["error_bound"], summary["tol"]
    text = "none computed by this solver" if bound is None else f"{bound:.2g} on sin θ" + (" (exact)" if bound == 0 else "")
    default = summary.get("default_tol")
    lines.append(f"error bound: {text}" + (f"; tol asked for {tol:g}" if tol is not None else
                                           f"; the default accuracy {default:g} (no tol given)" if default is not None else ""))
    if summary["resumed_from_pass"] is not None:
        lines.append(f"resumed from a checkpoint after pass {summary['resumed_from_pass']}")
    return "\n".join(lines)
