"""Choosing a solver: ordered, commented rules with named thresholds.

``choose_solver`` is what ``solver="auto"`` runs. The rules are read top to bottom; the first that
applies wins, and its reason is logged and kept with the fitted model.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

logger = logging.getLogger("daskpca")

#: Largest d for the covariance solver: its d×d float64 matrix (and the merge tree's SPLIT_EVERY
#: + 1 copies of it) must fit comfortably in one task's memory; 20k features = 3.2 GB each.
COVARIANCE_MAX_FEATURES = 20_000
#: Largest n for the Gram solver: its n×n float64 matrix has the same constraint.
GRAM_MAX_SAMPLES = 20_000


@dataclass(frozen=True)
class SolverChoice:
    """The solver ``auto`` picked and why (kept as ``PCA.solver_reason_``)."""

    name: str
    reason: str


def choose_solver(n_samples: int, n_features: int) -> SolverChoice:
    """Pick an exact solver from the shape alone."""
    # 1. Tall or square, moderate d: one pass and n·d² flops, the cheapest exact method.
    if n_samples >= n_features and n_features <= COVARIANCE_MAX_FEATURES:
        choice = SolverChoice(
            "covariance",
            f"n_samples ({n_samples}) >= n_features ({n_features}) and n_features <= "
            f"{COVARIANCE_MAX_FEATURES}: one pass building the {n_features}×{n_features} covariance",
        )
    # 2. Wide, moderate n: the N < D trick works on the n×n Gram matrix (two passes).
    elif n_samples < n_features and n_samples <= GRAM_MAX_SAMPLES:
        choice = SolverChoice(
            "gram",
            f"n_samples ({n_samples}) < n_features ({n_features}) and n_samples <= "
            f"{GRAM_MAX_SAMPLES}: two passes through the {n_samples}×{n_samples} Gram matrix",
        )
    # 3. Both sides large: fall back to whichever small side is smaller (still exact).
    elif n_features <= n_samples:
        choice = SolverChoice("covariance", f"both sides large; d = {n_features} is the smaller side")
    else:
        choice = SolverChoice("gram", f"both sides large; n = {n_samples} is the smaller side")
    logger.info("daskpca: solver=%r (%s)", choice.name, choice.reason)
    return choice
