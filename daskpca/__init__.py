"""daskpca: out-of-core, distributed principal component analysis on Dask."""

__version__ = "0.1.0"
