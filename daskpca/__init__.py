"""daskpca: out-of-core, distributed principal component analysis on Dask.

Public API: :class:`PCA` (the estimator), the EOF family — :class:`HilbertPCA` (complex EOFs),
:class:`Rotator` (varimax / promax of a fitted model), :func:`lag_embed` (extended EOFs) — and
:data:`SOLVERS` (the registered solver names), and :func:`progress` (a line per pass while fits run).
"""

from ._version import __version__

from .exceptions import NotFittedError
from .eof.hilbert import HilbertPCA
from .eof.lagged import lag_embed
from .pca import PCA
from .eof.rotation import Rotator
from .solvers import SOLVERS
from .solvers._progress import progress

#: Load a model written by ``save`` (``daskpca.load(path)`` = ``PCA.load(path)``): a PCA, or the
#: subclass that wrote it (``HilbertPCA``).
load = PCA.load

__all__ = ["HilbertPCA", "PCA", "NotFittedError", "Rotator", "SOLVERS", "lag_embed", "load", "progress", "__version__"]
