"""daskpca: out-of-core, distributed principal component analysis on Dask.

Public API: :class:`PCA` (the estimator) and :data:`SOLVERS` (the registered solver names).
"""

from ._version import __version__

from .exceptions import NotFittedError
from .pca import PCA
from .solvers import SOLVERS

#: Load a model written by :meth:`PCA.save` (``daskpca.load(path)`` = ``PCA.load(path)``).
load = PCA.load

__all__ = ["PCA", "NotFittedError", "SOLVERS", "load", "__version__"]
