"""Coupled analyses of two fields sharing their samples: maximum covariance (MCA) and canonical
correlation (CCA) analysis.

It owns :class:`~daskpca.coupled.mca.MCA` (:mod:`.mca`): the SVD of the cross-covariance of two
fields — NumPy, dask, zarr or xarray, each with its own mask of wholly-missing features, weights
and standardisation through the one feature stage (:mod:`daskpca._features`) and its own labeled
layout (:mod:`daskpca.labeled`), aligned by sample coordinate (:mod:`.fields`);
:class:`~daskpca.coupled.cca.CCA` (:mod:`.cca`): CCA on each field's leading PCs. The pass kernels (exact
cross-moments, the cross operator of the block Krylov path, correlation patterns) live in
:mod:`daskpca.solvers.cross_covariance`. The public names are re-exported by :mod:`daskpca`.

What it may import: the estimator (:mod:`daskpca.pca`: CCA's per-field PCA), the fit stages (:mod:`daskpca._features`, :mod:`daskpca._plan`,
:mod:`daskpca._params`, :mod:`daskpca._validation`), the labeled layer, the solvers and the
store layer (the model's save/load). What must not import it: the solvers, the stages, the
labeled layer and the store layer; only :mod:`daskpca` (its public names) and the CLI do.
"""
