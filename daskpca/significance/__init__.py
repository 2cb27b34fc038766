"""Is a mode real? Two answers, one module each.

It owns North's rule of thumb (:mod:`.north`: :func:`north_test`, :func:`north_k` — the sampling
errors of the eigenvalues alone, no read) and the moving-block bootstrap (:mod:`.bootstrap`:
:func:`bootstrap` — confidence intervals and the modes that stand out, for one extra read of the
data; :func:`bootstrap_scores` from scores already in memory, for other estimators such as MCA).
The names users import live here: ``from daskpca.significance import north_test, bootstrap``.

What it may import: the PCA family (:mod:`daskpca.pca`: the bootstrap takes a fitted model), the
estimator layer's constraint vocabulary, the solvers, the pass machinery and the layers below. What must not
import it: anything but the CLI (its report) and :mod:`daskpca` (tests/test_layers.py holds the order).
"""

from .bootstrap import (CLIENT_BYTES, INTERVALS, MAX_FLOPS, MIN_BLOCKS, MIN_TAIL, SLAB_BYTES, BootstrapResult,
                        block_length_cap, block_weights, bootstrap, bootstrap_scores, carlstein_block_length, check_cost,
                        check_resampling, interval_bounds, lag1_autocorrelation, min_replicates, overlapping_blocks_dof)
from .north import NorthTest, north_k, north_test

__all__ = ["CLIENT_BYTES", "INTERVALS", "MAX_FLOPS", "MIN_BLOCKS", "MIN_TAIL", "SLAB_BYTES", "BootstrapResult",
           "NorthTest", "block_length_cap", "block_weights", "bootstrap", "bootstrap_scores", "carlstein_block_length",
           "check_cost", "check_resampling", "interval_bounds", "lag1_autocorrelation", "min_replicates", "north_k",
           "north_test", "overlapping_blocks_dof"]
