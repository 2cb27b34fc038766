"""What a job tells its user: the variance table, the ``--json`` summary and its account of the
run (solver and why, passes and their time against the plan's, the bound against the tol).

Owns the text of the command's output and where it goes (:func:`say`, :func:`progress`); imports
nothing of daskpca but the progress module. Imported by the CLI's modules only.
"""

from __future__ import annotations

import math
import sys

import numpy as np

#: Rows of the variance table printed by default (--all prints every mode).
TABLE_ROWS = 20


def say(args, message: str) -> None:
    """Human-readable output: stdout normally, stderr with --json (stdout is then the summary)."""
    if getattr(args, "quiet", False):
        return
    print(message, file=sys.stderr if getattr(args, "json", False) else sys.stdout, flush=True)


def progress(args):
    """The job's progress line, one per pass (a context manager; silent with --quiet or --json)."""
    from ..passes import ProgressLine

    return ProgressLine(quiet=args.quiet or args.json)


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
    # The fit's own plan's estimate of the solver that ran: the plan a fit makes in its job holds
    # that solver's estimate with the passes served by the pass cache at their cached time
    # (daskpca._plan.with_cache), which is also what plan.seconds reads.
    ran = next((e for e in plan.estimates if e.name == pca.solver_), None) if plan else None
    predicted = None if ran is None else ran.seconds
    probe = getattr(plan, "probe", None)
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
        # The passes the plan predicted for the solver that ran, and the probe that gave them (rows read).
        "predicted_passes": ran.passes if ran is not None and isinstance(ran.passes, int) else None,
        "probed_rows": None if probe is None or probe.passes is None or probe.earlier else int(probe.rows),
        "probed_spectrum_of": probe.earlier if probe is not None and probe.passes is not None and probe.earlier else None,
        "fit_seconds": getattr(pca, "fit_seconds_", None),
        "resumed_from_pass": pca.solver_info_.get("resumed_from_pass"),
        "cache": getattr(pca, "cache_", None),  # the pass cache: kind, bytes, where, reason
        "timings": timings or {},
    }


#: Per-mode values of a coupled model (MCA, CCA) that exist on it: (column title, attribute).
COUPLED_VALUES = (("singular value", "singular_values_"), ("squared cov. fraction", "squared_covariance_fraction_"),
                  ("canonical correlation", "canonical_correlations_"))


def is_coupled(model) -> bool:
    """A model of two fields (MCA, CCA): fitted on pairs, it has a mean per field."""
    return hasattr(model, "mean_x_")


def coupled_table(model) -> str:
    """One row per mode pair: the per-mode values the model has (fractions as percentages)."""
    columns = [(title, getattr(model, name)) for title, name in COUPLED_VALUES if hasattr(model, name)]
    lines = [" mode" + "".join(f" {title:>22}" for title, _ in columns)]
    for i in range(model.n_components_):
        cells = [(f"{values[i]:22.2%}" if "fraction" in title else f"{values[i]:22.4g}") if math.isfinite(values[i])
                 else f"{'—':>22}" for title, values in columns]
        lines.append(f"{i + 1:5d} " + " ".join(cells))
    return "\n".join(lines)


def coupled_summary(fitted, args=None, **extra) -> dict:
    """What a job did with a coupled model, for ``--json`` (non-finite values become null there)."""
    return {**extra, "ran_on": getattr(args, "ran_on", None), "analysis": type(fitted).__name__.lower(),
            "solver": fitted.solver_, "n_components": int(fitted.n_components_), "n_samples": int(fitted.n_samples_),
            "n_features": [int(fitted.feature_stage_x_.n_input), int(fitted.feature_stage_y_.n_input)],
            "n_passes": int(fitted.n_passes_),
            # A road that stops on its bound: the passes planned before the first, and from what.
            **{key: info[name] for key, name in (("predicted_passes", "planned_passes"), ("predicted_from", "planned_from"))
               if name in (info := getattr(fitted, "solver_info_", {}))},
            **{name.rstrip("_"): [float(v) for v in getattr(fitted, name)] for _, name in COUPLED_VALUES
               if hasattr(fitted, name)},
            **({"error_bound": float(fitted.error_bound_)} if hasattr(fitted, "error_bound_") else {}),
            **({"cache": fitted.cache_} if hasattr(fitted, "cache_") else {})}


def what_ran(summary: dict) -> str:
    """The summary's account of the run: solver and why, passes and their time against the
    plan's, the error bound against the tol asked for, and a resume."""
    from ..passes import format_seconds

    lines = [f"solver: {summary['solver']} ({summary['solver_reason']})"]
    passes = passes_text(summary["n_passes"])
    if summary["seconds_per_pass"] is not None:
        passes += f", {format_seconds(summary['seconds_per_pass'])} a pass"
    if summary.get("client_seconds"):
        passes += f" + {format_seconds(sum(summary['client_seconds']))} on the client"
    if summary["fit_seconds"] is not None:
        passes += f"; fit {format_seconds(summary['fit_seconds'])}"
        if summary["predicted_seconds"] is not None:
            passes += f" (the plan predicted ≈ {format_seconds(summary['predicted_seconds'])}"
            if summary.get("predicted_passes") is not None:
                passes += f" in {summary['predicted_passes']} passes"
                if summary.get("probed_rows") is not None:
                    passes += f", from a probe of {summary['probed_rows']} rows"
                elif summary.get("probed_spectrum_of"):
                    passes += f", from the spectrum of {summary['probed_spectrum_of']}"
            passes += ")"
    lines.append(f"passes over the data: {passes}")
    bound, tol = summary["error_bound"], summary["tol"]
    text = "none computed by this solver" if bound is None else f"{bound:.2g} on sin θ" + (" (exact)" if bound == 0 else "")
    default = summary.get("default_tol")
    lines.append(f"error bound: {text}" + (f"; tol asked for {tol:g}" if tol is not None else
                                           f"; the default accuracy {default:g} (no tol given)" if default is not None else ""))
    if summary["resumed_from_pass"] is not None:
        lines.append(f"resumed from a checkpoint after pass {summary['resumed_from_pass']}")
    cache = summary.get("cache")
    if cache:
        lines.append(cache_text(cache))
    return "\n".join(lines)


def cache_text(cache: dict) -> str:
    """``pass cache: memory, 3.8 MiB in the workers' memory`` or ``pass cache: none (why)``."""
    if not cache.get("kind"):
        return f"pass cache: none ({cache.get('reason')})"
    where = cache.get("where") or ""
    where = f" at {where} (removed)" if cache["kind"] == "disk" else f" in {where}"
    return f"pass cache: {cache['kind']}, {cache['bytes'] / 2**20:.1f} MiB{where}"


def to_json(summary: dict) -> str:
    """The ``--json`` text: strict JSON (RFC 8259), which has no NaN or ±Infinity — a value that is
    not a finite number (e.g. a fraction of a total the Krylov path never computes) is ``null``.
    The one place a summary becomes JSON, so that no command can print what ``jq`` refuses."""
    import json

    def strict(value):
        if isinstance(value, dict):
            return {str(key): strict(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [strict(item) for item in value]
        if isinstance(value, np.ndarray):
            return strict(value.tolist())
        if isinstance(value, (np.floating, float)):
            return float(value) if math.isfinite(value) else None
        if isinstance(value, np.integer):
            return int(value)
        if isinstance(value, np.bool_):
            return bool(value)
        return value

    return json.dumps(strict(summary), indent=2, allow_nan=False)
