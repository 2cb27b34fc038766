"""Solvers: one module per method, each declaring itself once (``DECLARATION``).

A solver module defines ``solve(X, request, *, random_state, **options)`` and one
:class:`._base.SolverDeclaration`: that ``solve``, its cost model (passes for an accuracy, flops,
task memory, result size, host and device rates) and its capabilities (exact, accepts missing
values, squares the data, fuses the feature stage, the options it takes). :func:`register` adds
it to ``SOLVERS``, which maps the public names accepted by ``PCA(solver=...)`` to the
declarations; the planner, the estimator's knob refusals and the CLI's help read them from there
and from nowhere else. Registering is one line: ``register(SolverDeclaration(...))``.

The pass machinery every solver builds on — decode, task geometry, graph reductions, moments,
the sketch kernel, the local solves, the pass cache, device dispatch, progress — is
:mod:`daskpca.passes`, one layer below; here are the solvers and their contract: :mod:`._base`
(the declaration, the request, the result), :mod:`._bounds` (the error bounds the iterative solvers report) and
:mod:`._iterative` (what the iterative solvers share, the statistics pass among it).
:mod:`.cross_covariance` holds the passes of two fields read together (exact cross-moments, the
cross operator and its block Krylov SVD, correlation patterns) for the coupled estimators
(:mod:`daskpca.coupled`), and declares MCA's paths (``MCA_PATHS``); :mod:`.canonical` declares
CCA's (``CCA_PATHS``). They are no PCA solvers, so they are not in ``SOLVERS``: each estimator
hands its own to the planner. Nor is :mod:`._resampling`, the moving-block bootstrap's client-side statistics
(block lengths, replicate weights, intervals, and what a resampling must have to vary and fit),
which :mod:`daskpca.significance` builds on.

**Imports.** Solvers import only the pass machinery (:mod:`daskpca.passes`, through its public
names), :mod:`daskpca._validation` (NaN/±inf checks) and :mod:`daskpca.exceptions`; they save
resumable state through the checkpoint they receive (:func:`._base.open_checkpoint`), never by
importing the store. The fit stages,
the labeled layer and the estimators import them; a solver never imports an estimator, the
labeled layer or the CLI.
"""

from . import als, covariance, gram, krylov, ppca, randomized, tsqr
from ._base import DENSE_FLOPS_PER_SECOND, ComponentRequest, PlanInput, SolverDeclaration, SolverResult
from ._iterative import ColumnMoments, column_moments, column_stats_graph, combine_column_moments
# The moving-block bootstrap's client-side statistics, for daskpca.significance (which re-exports
# the public ones).
from ._resampling import (CLIENT_BYTES, INTERVALS, MAX_FLOPS, MIN_BLOCKS, MIN_TAIL, SLAB_BYTES, block_length_cap,
                          block_weights, carlstein_block_length, check_cost, check_resampling, interval_bounds,
                          lag1_autocorrelation, min_replicates, overlapping_blocks_dof)

#: The registered solvers, by public name, in the order the planner lists them.
SOLVERS: dict[str, SolverDeclaration] = {}


def register(declaration: SolverDeclaration) -> SolverDeclaration:
    """Add ``declaration`` to :data:`SOLVERS` (replacing one of the same name); refused, naming
    what is missing, without ``solve`` or a cost model (the planner prices every registered solver)."""
    if not isinstance(declaration, SolverDeclaration):
        from ..exceptions import InputTypeError

        raise InputTypeError(f"register({declaration!r:.60}): expected a daskpca.solvers._base.SolverDeclaration "
                             "(the solver's solve, cost model and capabilities in one object).")
    declaration.check()
    SOLVERS[declaration.name] = declaration
    return declaration


for _module in (covariance, gram, tsqr, randomized, krylov, als, ppca):
    register(_module.DECLARATION)

__all__ = [
    "SOLVERS", "SolverDeclaration", "register",
    # the solver contract: what the planner gives a cost model and what a solve hands back
    "DENSE_FLOPS_PER_SECOND", "ComponentRequest", "PlanInput", "SolverResult",
    # the per-feature moments of the iterative solvers' first pass (the feature stage's too)
    "ColumnMoments", "column_moments", "column_stats_graph", "combine_column_moments",
    # the moving-block bootstrap's statistics
    "CLIENT_BYTES", "INTERVALS", "MAX_FLOPS", "MIN_BLOCKS", "MIN_TAIL", "SLAB_BYTES", "block_length_cap",
    "block_weights", "carlstein_block_length", "check_cost", "check_resampling", "interval_bounds",
    "lag1_autocorrelation", "min_replicates", "overlapping_blocks_dof",
]
