"""daskpca: out-of-core, distributed principal component analysis on Dask.

Public API: :class:`PCA` (the estimator) and :data:`SOLVERS` (the registered solver names).
"""

__version__ = "0.1.0"

from .pca import PCA, NotFittedError
from .io import load
from .solvers import SOLVERS

__all__ = ["PCA", "NotFittedError", "SOLVERS", "load", "__version__"]
