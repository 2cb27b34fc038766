"""The EOF family: the climate analyses built on the one fit road.

It owns Hilbert (complex) EOFs (:mod:`.hilbert`: :class:`HilbertPCA`, PCA with the solver swapped
for the Hermitian Gram one or block Krylov on it), rotation of fitted loadings (:mod:`.rotation`:
varimax / promax, :class:`Rotator`) and the lazy time-delay embedding of extended EOFs
(:mod:`.lagged`: :func:`lag_embed`). The public names are re-exported by :mod:`daskpca`.

What it may import: the PCA family (:mod:`daskpca.pca`), the estimator layer
(:mod:`daskpca.models`: a rotation is saved and loaded by the one save path), the fit stages, the
labeled layer and the solvers (tests/test_layers.py holds the order). What must not import it:
anything below it; only :mod:`daskpca` (its public names) and the CLI do.
"""
