"""The feature stage: which input columns the solver sees, and the factor each is scaled by.

Every fit takes one road (see ``docs/architecture.md``)::

    source ─▶ matrix ─▶ feature stage ─▶ plan ─▶ solver passes ─▶ small local solve ─▶ model

The stage turns the input matrix X (n × D) into the matrix the solver analyses,
``Z = X[:, keep] · factor``:

- ``keep`` drops features that are NaN (or ±inf) for *every* sample — land points of an ocean
  field. They are restored as NaN on output. A feature missing only sometimes is an error that
  counts them, unless the solver accepts missing values (``ppca``).
- ``factor = w / s``: ``w`` the user's per-feature weights (``PCA(weights=...)``; √cos(latitude)
  for ``"coslat"``), ``s`` the standard deviation (ddof=1) with ``standardize=True``, else 1.

Before the data is read the stage is a :class:`FeatureSpec` (weights, standardize, whether
missing values are accepted). It becomes a :class:`FeatureStage` (keep, factor) from per-feature
statistics — finite counts and variances — that only a read of the data gives. :func:`solve` is
the one call the estimator makes: a solver that can take those statistics from its own first pass
(its module defines ``fuses_features(spec) -> bool`` and its ``solve`` takes ``features=``) gets
the spec and returns the resolved stage in ``SolverResult.features``; every other solver gets one
generic extra read (per-feature count, mean and variance, :func:`column_stats_graph`) and then
``Z``. No xarray here: the labeled layer only turns dims and coords into a matrix and weights.

Passes: covariance 1 (counts and variances come from its moments), Gram 2 (counts from pass 1;
with ``standardize`` it needs the variances before pass 1, so it takes the extra read),
randomized and Krylov their own passes (counts from the first sketch pass, which reads the
weighted columns; with ``standardize`` the extra read, see
:func:`daskpca.passes._sketch.run_first_pass` for why), every other solver its own passes + 1.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import dask
import numpy as np

from ._validation import NonFinite
from .exceptions import InputError, InputTypeError, NonFiniteInputError
from .passes import Passes, SizedByArrays, like, map_row_blocks, meta_of, namespace, on_column_strips, share, tree_reduce
from .solvers import ComponentRequest, SolverResult, column_stats_graph
from .store.checkpoint import CheckpointFile


@dataclass(frozen=True)
class FeatureStage(SizedByArrays):
    """The resolved stage: ``Z = X[:, keep] · factor``.

    Attributes
    ----------
    keep : ndarray of shape (n_input_features,), bool
        Input features the solver analysed (False: NaN for every sample, restored as NaN).
    factor : ndarray of shape (n_kept,), float64
        Positive per-feature factor f = weight / scale applied after the mask.
    """

    keep: np.ndarray
    factor: np.ndarray

    @classmethod
    def identity(cls, n_features: int) -> "FeatureStage":
        """The stage of a plain fit: every feature, factor 1."""
        return cls(np.ones(n_features, dtype=bool), np.ones(n_features))

    @property
    def n_input(self) -> int:
        """Features of the input matrix (before the mask)."""
        return int(self.keep.size)

    @property
    def n_kept(self) -> int:
        return int(self.keep.sum())

    @property
    def is_identity(self) -> bool:
        return bool(self.keep.all() and np.all(self.factor == 1.0))

    def apply(self, matrix):
        """Lazy ``matrix[:, keep] · factor`` in float64 (the matrix itself for the identity stage).

        float64 whatever the input: a float32 product would round every weighted entry (relative
        6e-8), an error the solvers would then carry (sin θ ~1e-7/gap on float32 fields). The
        solvers convert each block to float64 anyway, so no block is held in both precisions.
        """
        if self.is_identity:
            return matrix
        kept = matrix if self.keep.all() else matrix[:, self.keep]
        # The factor as one shared key, not an array operand: dask would embed it in the graph
        # (8 MB at d = 10⁶), and on a cluster it goes to the workers ahead of the graph.
        return kept.map_blocks(_scale_columns, share(self.factor), dtype=np.float64, meta=meta_of(kept, np.float64))

    def narrow(self, request: ComponentRequest) -> ComponentRequest:
        """The component request on the kept features, validated again (k ≤ n_kept)."""
        narrowed = replace(request, n_features=self.n_kept)
        narrowed.validate()
        return narrowed

    def restore(self, rows: np.ndarray, fill: float = np.nan) -> np.ndarray:
        """Rows over kept features (…, n_kept) put back on all input features, ``fill`` elsewhere
        (in ``rows``' array library: device rows stay on their device)."""
        xp = namespace(rows)
        out = xp.full((*rows.shape[:-1], self.n_input), fill, dtype=np.result_type(rows.dtype, np.float64))
        out[..., like(self.keep, rows)] = rows
        return out


def _scale_columns(block, factor: np.ndarray, block_info=None) -> np.ndarray:
    """``apply``'s task: a block of kept columns in float64 times its slice of the factor (on the
    block's device)."""
    start, stop = block_info[0]["array-location"][1]
    return namespace(block).asarray(block, dtype=np.float64) * like(factor[start:stop], block)


@dataclass(frozen=True)
class FeatureSpec:
    """The stage as asked for, before the data is read.

    Attributes
    ----------
    weights : ndarray of shape (n_input_features,), float64
        Positive per-feature weights (all 1 when none were given).
    standardize : bool
        Divide every kept feature by its standard deviation (ddof=1; features with zero variance
        keep scale 1).
    missing_ok : bool
        Partially missing features are data for the solver (NaN = missing) rather than an error.
    """

    weights: np.ndarray
    standardize: bool = False
    missing_ok: bool = False

    def weigh(self, matrix):
        """Lazy ``matrix · weights`` over every input column, in float64 (see
        :meth:`FeatureStage.apply`), for solvers that mask afterwards."""
        return matrix.map_blocks(_scale_columns, share(np.asarray(self.weights, dtype=np.float64)), dtype=np.float64,
                                 meta=meta_of(matrix, np.float64))

    def with_kept(self, keep: np.ndarray) -> FeatureStage:
        """The stage keeping the features ``keep`` (boolean, D), already resolved (a resumed
        fit's, from its checkpoint); not for ``standardize``, whose factor needs the variances."""
        if self.standardize:
            raise ValueError("standardize needs the per-feature variances")  # a bug, not a user error
        return FeatureStage(keep, np.asarray(self.weights[keep], dtype=np.float64))

    def resolve(self, finite_count: np.ndarray, n_samples: int, variance: np.ndarray | None = None) -> FeatureStage:
        """The stage from per-feature finite counts and (for ``standardize``) variances (D,).

        Raises
        ------
        ValueError
            When every feature is missing everywhere, or (unless ``missing_ok``) some feature is
            missing for some samples but not all.
        """
        keep = kept_features(finite_count, n_samples, missing_ok=self.missing_ok)
        if not self.standardize:
            return self.with_kept(keep)
        if variance is None:
            raise ValueError("standardize needs the per-feature variances")  # a bug, not a user error
        std = np.sqrt(np.clip(np.asarray(variance)[keep], 0.0, None))
        factor = self.weights[keep] / np.where(std > 0, std, 1.0)
        return FeatureStage(keep, np.asarray(factor, dtype=np.float64))


def kept_features(finite_count: np.ndarray, n_samples: int, *, missing_ok: bool) -> np.ndarray:
    """Features finite for some sample; raise for none kept, or partially missing ones."""
    finite_count = np.asarray(finite_count)
    keep = finite_count > 0
    if not keep.any():
        raise NonFiniteInputError(
            f"all {finite_count.size} features are NaN (or ±inf) for every sample: nothing is left "
            "to analyse. Check the variable, the region selected, or the fill value decoding "
            "(xarray's mask_and_scale)."
        )
    partial = keep & (finite_count < n_samples)
    if partial.any() and not missing_ok:
        i = int(np.argmax(partial))
        raise NonFiniteInputError(
            f"{int(partial.sum())} feature(s) are missing (NaN/±inf) for some samples but not all "
            f"({int(np.sum(n_samples - finite_count[partial]))} missing entries; the first is "
            f"feature {i}, finite in {int(finite_count[i])} of {n_samples} samples). Features "
            "missing everywhere are dropped automatically; partially missing ones need filling, "
            "or the missing-value solver: PCA(solver='ppca')."
        )
    return keep


def matrix_weights(weights, n_features: int) -> np.ndarray:
    """``PCA(weights=...)`` for a plain matrix: one positive weight per column, (n_features,)."""
    if weights is None:
        return np.ones(n_features)
    if isinstance(weights, (str, dict)) or hasattr(weights, "dims"):
        raise InputTypeError(
            f"weights={weights!r:.60} needs labeled input (an xarray object with coords); for a "
            f"plain matrix pass an array of shape ({n_features},)."
        )
    array = np.asarray(weights, dtype=np.float64)
    try:
        out = np.broadcast_to(array, (n_features,)).astype(np.float64)
    except ValueError:
        raise InputError(
            f"weights of shape {array.shape} do not broadcast over the {n_features} features."
        ) from None
    if not np.all(np.isfinite(out) & (out > 0)):
        raise InputError("weights must be finite and > 0 for every feature.")
    return out


# ---------------------------------------------------------------------------------------- solving


def extra_reads(module, spec: FeatureSpec | None) -> int:
    """Reads the feature stage adds before solver ``module``'s own: 0 for a plain fit (``spec``
    None) or a solver that fuses ``spec`` into its first pass, else 1 (:func:`solve`'s generic
    statistics read). The planner counts them from here, so plan and fit agree."""
    if spec is None:
        return 0
    fuses = getattr(module, "fuses_features", None)
    return 0 if fuses is not None and fuses(spec) else 1


def plan_reads(modules: dict, spec: FeatureSpec | None) -> dict:
    """``{name: reads the feature stage adds before the solver's own}`` for every solver in
    ``modules`` (:func:`extra_reads`): what the planner counts, from here so plan and fit agree."""
    return {name: extra_reads(module, spec) for name, module in modules.items()}


def solve(module, X, request: ComponentRequest, spec: FeatureSpec | None, *, random_state=None, **options) -> SolverResult:
    """Run solver ``module`` on ``X`` through the feature stage ``spec`` (None: a plain fit).

    The one place a solver is called from. Returns the solver's result with ``features`` set
    (None for a plain fit) and ``n_passes`` counting every read, the generic one included. A
    ``checkpoint`` path is opened here (:class:`daskpca.store.checkpoint.CheckpointFile`, checked
    before any read): solvers write their state through that interface, never importing the store.
    """
    if isinstance(options.get("checkpoint"), (str, os.PathLike)):
        options["checkpoint"] = CheckpointFile(options["checkpoint"])
    if spec is None:
        return _checked(module, X, request, random_state=random_state, **options)
    if not extra_reads(module, spec):
        return _checked(module, X, request, random_state=random_state, features=spec, **options)
    # The generic road: one read for per-feature finite counts (and variances), then the solver
    # on Z. NaN is read as missing here so that wholly-NaN features can be told apart.
    with Passes("features", 1).read():
        (stats,) = dask.compute(column_stats_graph(X))
    stage = spec.resolve(stats.count, X.shape[0], stats.variance())
    result = _checked(module, stage.apply(X), stage.narrow(request), random_state=random_state, **options)
    why = "per-feature finite count" + (", mean and variance" if spec.standardize else "")
    info = {**result.info, "mask_pass": f"one extra read ({why}) before the solver, which takes no feature stage"}
    return replace(result, n_passes=result.n_passes + 1, features=stage, info=info)


#: Below this magnitude a nonzero mean with zero total variance means squares underflowed.
_UNDERFLOW_SCALE = 1e-100


def _checked(module, X, request, **kwargs) -> SolverResult:
    """``module.solve`` with the numerical-range guard: finite input whose float64 squares
    overflow (|x| ≳ 1e154) gives inf/NaN variances, or a failed small SVD, in every solver; squares
    that underflow (|x| ≲ 1e-154) give zero variance. Both become a :class:`DataRangeError` that
    says how to rescale, never 0 components or inf. Checked on the small result after the pass
    (no extra read): the data's own max |x| is not needed to tell."""
    from .exceptions import DataRangeError

    name = getattr(module, "name", None) or module.__name__.rsplit(".", 1)[-1]  # a declaration, or a solver module
    rescale = ("Rescale the data (e.g. divide it by its largest |value|) before fitting: the "
               "components are the same and the variances scale by the factor squared.")
    try:
        if getattr(module, "reads_strips", False):  # input stored by rows only: the shared re-layout step
            result = on_column_strips(module.solve, X, request, **kwargs)
        else:
            result = module.solve(X, request, **kwargs)
    except np.linalg.LinAlgError as exc:
        raise DataRangeError(
            f"solver {name!r} failed in its small linear-algebra step (LinAlgError: {exc}). This happens "
            "when the data has no variance (every feature constant) or values so large (|x| ≳ 1e154) or "
            f"small (|x| ≲ 1e-154) that float64 squares overflow or underflow. Check X's range and "
            f"variance. {rescale}") from None
    arrays = (result.explained_variance, result.components, result.mean, [result.total_variance])
    if not all(map(np.all, map(np.isfinite, arrays))):
        raise DataRangeError(
            f"the data is finite, but its variance overflowed float64 in solver {name!r} (a variance or "
            f"component came out inf or NaN): values with |x| ≳ 1e154 square beyond 1.8e308. {rescale}")
    mean_scale = float(np.max(np.abs(result.mean), initial=0.0))
    if result.total_variance == 0 and 0 < mean_scale < _UNDERFLOW_SCALE:
        raise DataRangeError(
            f"the data's variance underflowed to 0 in solver {name!r}: its values (|mean| ≈ {mean_scale:.1g}) are "
            f"so small that float64 squares round to zero. {rescale}")
    return result


def locate_nonfinite(matrix) -> NonFinite:
    """The first NaN/±inf of ``matrix`` in a column that is not non-finite everywhere (those are
    dropped as masked features). One read: for error messages of a fit that already failed."""
    parts = map_row_blocks(matrix, _column_nonfinite, "locate-nonfinite-chunk")
    finite, first, count = dask.compute(tree_reduce(parts, _merge_column_nonfinite, "locate-nonfinite-merge"))[0]
    partial = (finite > 0) & (first >= 0)
    if not partial.any():
        return NonFinite()
    cols = np.flatnonzero(partial)
    rows = first[cols]
    i = int(np.lexsort((cols, rows))[0])
    return NonFinite(int(count[partial].sum()), (int(rows[i]), int(cols[i])))


def _column_nonfinite(block, row_offset):
    xp = namespace(block)
    bad = ~xp.isfinite(xp.asarray(block, dtype=xp.float64))
    any_bad = bad.any(axis=0)
    first = xp.where(any_bad, xp.argmax(bad, axis=0) + row_offset, -1)
    return (~bad).sum(axis=0), first, bad.sum(axis=0)


def _merge_column_nonfinite(parts):
    xp = namespace(parts[0][1])
    finite = sum(p[0] for p in parts)
    count = sum(p[2] for p in parts)
    firsts = xp.stack([p[1] for p in parts])
    first = xp.where(firsts >= 0, firsts, np.iinfo(np.int64).max).min(axis=0)
    return finite, xp.where(first == np.iinfo(np.int64).max, -1, first), count
