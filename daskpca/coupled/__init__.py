"""Coupled analyses of two fields sharing their samples: maximum covariance (MCA) and canonical
correlation (CCA) analysis.

It owns :class:`~daskpca.coupled.mca.MCA` (:mod:`.mca`): the SVD of the cross-covariance of two
fields — NumPy, dask, zarr or xarray, each with its own mask of wholly-missing features, weights
and standardisation through the one feature stage (:mod:`daskpca._features`) and its own labeled
layout (:mod:`daskpca.labeled`), aligned by sample coordinate (:mod:`.fields`);
:class:`~daskpca.coupled.cca.CCA` (:mod:`.cca`): CCA on each field's leading PCs. The pass kernels (exact
cross-moments, the cross operator of the block Krylov path, correlation patterns) live in
:mod:`daskpca.solvers.cross_covariance`, with MCA's paths declared (solve, cost model,
capabilities); CCA's are declared in :mod:`daskpca.solvers.canonical`. Both estimators plan
through the one planner (:func:`daskpca._plan.make_plan`). The public names are re-exported by :mod:`daskpca`.

What it may import: the PCA family (:mod:`daskpca.pca`: CCA's per-field PCA), the estimator
layer (:mod:`daskpca.models`: the base, constraints, projections, the saved model), the fit
stages, the labeled layer and the solvers (tests/test_layers.py holds the order). What must not
import it: anything below it; only :mod:`daskpca` (its public names) and the CLI do.
"""
