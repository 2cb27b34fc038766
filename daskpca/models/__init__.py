"""The estimator layer: what every daskpca estimator shares, written once.

It owns the base class (:mod:`._base`: :class:`Estimator` — parameters and their declared
constraints checked once before any read, the refusal of solver knobs the running solver would
ignore, ``check_fitted``, the road from data back into a fitted model, projection and
reconstruction through the feature stage and the labeled layout, save / load), the vocabulary of
constraints (:mod:`._constraints`), scikit-learn's parameter protocol (:mod:`._params`:
``get_params`` / ``set_params`` / ``repr``) and the model's format (:mod:`._format`: one format
registry and one save / load path for PCA, HilbertPCA, MCA, CCA and rotations). :func:`load` is
``daskpca.load``.

What it may import: the fit stages (:mod:`daskpca._features`, :mod:`daskpca._plan`,
:mod:`daskpca._probabilistic`), the labeled layer, the solvers and the pass machinery, :mod:`daskpca.io` (which
writes and reads the bytes) and the layers below. What must not import it: nothing below the
estimators; the estimators (:mod:`daskpca.pca`, :mod:`daskpca.eof`, :mod:`daskpca.coupled`), the
public faces and the CLI do.
"""

from ._base import Estimator, model_matrix, positions, project, project_matrix, reconstruct, scores_out
from ._constraints import (ARRAY, BOOL, NONE, PATH, RANDOM_STATE, WEIGHTS, Interval, Options, PerField,
                           Predicate)
from ._format import ESTIMATORS, from_dataset, info_json, load, load_as, read_field, stored_params, write_field

__all__ = [
    # the base class and the road from data back into a fitted model
    "Estimator", "model_matrix", "positions", "project", "project_matrix", "reconstruct", "scores_out",
    # the vocabulary of parameter constraints
    "ARRAY", "BOOL", "NONE", "PATH", "RANDOM_STATE", "WEIGHTS", "Interval", "Options", "PerField", "Predicate",
    # the model's format: the registry, one field's stage and layout, the stored parameters, load
    "ESTIMATORS", "from_dataset", "info_json", "load", "load_as", "read_field", "stored_params",
    "write_field",
]
