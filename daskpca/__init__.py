"""daskpca: out-of-core, distributed principal component analysis on Dask.

Public API: :class:`PCA` (the estimator), :class:`MCA` and :class:`CCA` (coupled modes of two
fields), the EOF family — :class:`HilbertPCA` (complex EOFs), :class:`Rotator` (varimax / promax
of a fitted model), :func:`lag_embed` (extended EOFs) — :func:`load` (any saved model, as the
class that wrote it), :data:`SOLVERS` (the registered solver names) and :func:`progress` (a line
per pass while fits run). The types users hold come from here too: :class:`Plan` (what
``plan(X)`` returns) and :class:`FeatureStage` (a fitted model's ``feature_stage_``).
"""

from ._version import __version__

from ._features import FeatureStage
from ._plan import Plan
from .coupled.cca import CCA
from .coupled.mca import MCA
from .exceptions import NotFittedError
from .eof.hilbert import HilbertPCA
from .eof.lagged import lag_embed
from .pca import PCA
from .eof.rotation import Rotator
from .solvers import SOLVERS
from .passes import progress
from .models import load

__all__ = ["CCA", "FeatureStage", "HilbertPCA", "MCA", "PCA", "NotFittedError", "Plan", "Rotator", "SOLVERS",
           "lag_embed", "load", "progress", "__version__"]
