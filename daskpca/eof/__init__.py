"""The EOF family: the climate analyses built on the one fit road.

It owns Hilbert (complex) EOFs (:mod:`.hilbert`: :class:`HilbertPCA`, PCA with the solver swapped
for the Hermitian Gram one or block Krylov on it), rotation of fitted loadings (:mod:`.rotation`:
varimax / promax, :class:`Rotator`) and the lazy time-delay embedding of extended EOFs
(:mod:`.lagged`: :func:`lag_embed`). The public names are re-exported by :mod:`daskpca`.

What it may import: the estimator (:mod:`daskpca.pca`), the fit stages, the labeled layer, the
solvers and the store layer (a rotated model's save/load). What must not import it: the solvers,
the stages and the store layer; only :mod:`daskpca` (its public names) and the CLI do.
"""
