"""Rotated EOFs: varimax and promax rotations of a fitted PCA's leading loadings.

The leading m EOFs of a field often mix physical patterns that happen to share variance;
rotating the loadings ``L = V_m Λ_m^{1/2}`` (d × m) towards "simple structure" (each mode large on
few features) separates them. Nothing here reads the data: the rotation works on the m × d
loadings of an already fitted :class:`daskpca.PCA`, and rotated scores are the model's unit
scores times an m × m matrix — one pass over the data when they are computed, like any
``transform``.

Algorithms
----------
*Varimax* (Kaiser 1958): the orthogonal R (m × m) maximising the variance of the squared loadings
of each mode, by the SVD iteration ``R ← U Wᵀ`` with ``U S Wᵀ = Lᵀ(Λ∘Λ∘Λ − Λ·diag(ΣΛ²)/d)``,
``Λ = L R``, until no entry of R moves by more than ``rtol`` (xeofs stops on the criterion's
relative change instead, which leaves R wrong by ~√rtol). With ``normalize=True`` (Kaiser
normalisation) each feature's loadings are divided by its communality ``h_j = ‖L_j‖`` first and
multiplied back after.

*Promax* (Hendrickson & White 1964): varimax, then an oblique least-squares fit of the loadings to
the target ``P = Λ_v∘|Λ_v|^{power−1}`` (columns max-normalised), the columns of the fit rescaled
so that the rotated modes keep unit-variance scores. ``power=1`` is varimax. Rotated modes are
then correlated: ``correlation_`` (m × m) is their correlation matrix (the identity for varimax).

Conventions (those of xeofs's ``EOFRotator``, which uses the same two algorithms)
-----------------------------------------------------------------------------------
- ``explained_variance_`` of a rotated mode is the squared norm of its rotated loadings; modes
  are sorted by it, largest first. For varimax the sum equals the unrotated modes' sum (an
  orthogonal rotation redistributes variance); promax modes overlap, so theirs does not add up.
- ``components_`` are the rotated loadings divided by √variance (unit-norm rows; orthogonal only
  for varimax), each row's largest-|·| entry positive.
- Rotated scores are ``u R^{-T} diag(√variance)`` with ``u`` the unit-variance PCA scores: their
  variance is the rotated mode's variance (``R^{-T} = R`` for varimax).

References
----------
H. F. Kaiser, "The varimax criterion for analytic rotation in factor analysis", Psychometrika 23
(1958) 187–200, doi:10.1007/BF02289233. A. E. Hendrickson & P. O. White, "Promax: a quick method
for rotation to oblique simple structure", Brit. J. Stat. Psychol. 17 (1964) 65–70,
doi:10.1111/j.2044-8317.1964.tb00244.x. M. B. Richman, "Rotation of principal components",
J. Climatol. 6 (1986) 293–335, doi:10.1002/joc.3370060305.
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np

from ..passes import flip_signs, like, meta_of
from ..models import BOOL, NONE, Estimator, Interval
from ..exceptions import ConvergenceWarning, InputTypeError, InvalidParameterError, NotFittedError
from ..labeled import MODE


def varimax(loadings: np.ndarray, *, normalize: bool = True, max_iter: int = 1000, rtol: float = 1e-12):
    """Orthogonal varimax rotation of ``loadings`` (d × m): ``(rotated, R, converged)``.

    ``rotated = loadings @ R`` with R orthogonal (m × m). Memory: a few d × m float64 arrays.
    """
    L = np.asarray(loadings, dtype=np.float64)
    d, m = L.shape
    h = np.sqrt(np.sum(L**2, axis=1)) if normalize else np.ones(d)
    scale = np.where(h > 0, h, 1.0)[:, None]
    A = L / scale
    R = np.eye(m)
    converged = False
    for _ in range(max_iter):
        B = A @ R
        u, s, wt = np.linalg.svd(A.T @ (B**3 - B * (np.sum(B**2, axis=0) / d)))
        R, previous = u @ wt, R
        # Stop on the rotation itself: the criterion is flat at its optimum, so a relative change
        # of it below 1e-8 leaves R wrong by ~1e-4 (measured); a step of R below rtol does not.
        if np.max(np.abs(R - previous)) <= rtol:
            converged = True
            break
    return (A @ R) * scale, R, converged


def promax(loadings: np.ndarray, *, power: int = 4, normalize: bool = True, max_iter: int = 1000, rtol: float = 1e-12):
    """Oblique promax rotation of ``loadings`` (d × m): ``(rotated, R, correlation, converged)``.

    ``rotated = loadings @ R``; ``correlation`` (m × m) is the rotated modes' correlation matrix.
    ``power=1`` returns the varimax solution (identity correlation).
    """
    rotated, R, converged = varimax(loadings, normalize=normalize, max_iter=max_iter, rtol=rtol)
    m = R.shape[0]
    if power == 1:
        return rotated, R, np.eye(m), converged
    h = np.sqrt(np.sum(rotated**2, axis=1)) if normalize else np.ones(rotated.shape[0])
    scale = np.where(h > 0, h, 1.0)[:, None]
    A = rotated / scale
    peak = np.max(np.abs(A), axis=0)
    target = A / np.where(peak > 0, peak, 1.0)
    target = target * np.abs(target) ** (power - 1)
    T = np.linalg.lstsq(A, target, rcond=None)[0]  # least-squares fit A·T ≈ target (Richman 1986)
    T = T @ np.diag(np.sqrt(np.diag(np.linalg.pinv(T.T @ T))))
    inverse = np.linalg.inv(T)
    return (A @ T) * scale, R @ T, inverse @ inverse.T, converged


class Rotator(Estimator):
    """Varimax / promax rotation of the leading modes of a fitted :class:`daskpca.PCA`.

    Parameters
    ----------
    n_modes : int or None, default=None
        Leading modes to rotate (≥ 2); None: all of the model's components.
    power : int, default=1
        1: varimax (orthogonal); > 1: promax with this power (oblique; 4 is customary).
    normalize : bool, default=True
        Kaiser normalisation (rows of the loadings divided by their communality while rotating).
    max_iter : int, default=1000
    rtol : float, default=1e-12
        Stop the varimax iteration when no entry of the rotation matrix moves by more than this.

    Attributes
    ----------
    components_ : ndarray of shape (n_modes, n_kept_features)
        Rotated patterns (unit-norm rows) in the model's (weighted) feature space.
    explained_variance_ : ndarray of shape (n_modes,)
        Variance of each rotated mode, descending.
    explained_variance_ratio_ : ndarray of shape (n_modes,)
        ``explained_variance_ / model.total_variance_``.
    rotation_matrix_ : ndarray of shape (n_modes, n_modes)
        R with ``rotated loadings = loadings @ R`` (columns in the original mode order).
    correlation_ : ndarray of shape (n_modes, n_modes)
        Correlation of the rotated modes' scores (identity for varimax), in sorted mode order.
    order_ : ndarray of shape (n_modes,)
        Column of R each sorted rotated mode came from.
    converged_ : bool
    model_ : PCA
        The rotated model.

    Examples
    --------
    >>> rot = Rotator(n_modes=4).fit(PCA(10).fit(X))          # doctest: +SKIP
    >>> rot.explained_variance_ratio_, rot.transform(X)        # doctest: +SKIP
    """

    _parameter_constraints = {
        "n_modes": [NONE, Interval(Integral, 2, None)],
        "power": [Interval(Integral, 1, None)],
        "normalize": [BOOL],
        "max_iter": [Interval(Integral, 1, None)],
        "rtol": [Interval(Real, 0, None, "neither")],
    }
    _fit_call = "fit(pca)"

    def __init__(self, n_modes=None, *, power=1, normalize=True, max_iter=1000, rtol=1e-12):
        self.n_modes = n_modes
        self.power = power
        self.normalize = normalize
        self.max_iter = max_iter
        self.rtol = rtol

    def fit(self, model):
        """Rotate ``model``'s leading loadings (reads no data). Returns self.

        The rotation keeps its own copy of ``model`` (``model_``): refitting ``model`` afterwards
        does not change it. Complex modes (:class:`~daskpca.eof.hilbert.HilbertPCA`) are refused:
        varimax and promax here are defined for real loadings, and rotating their real parts
        would silently drop the phase.
        """
        import copy
        import warnings

        self.validate_params()
        if not hasattr(model, "components_"):
            raise NotFittedError("Rotator.fit needs a fitted PCA: call PCA(...).fit(X) first.")
        if np.iscomplexobj(model.components_):
            raise InputTypeError(
                f"Rotator cannot rotate this {type(model).__name__}: its components are complex (Hilbert EOFs), "
                "and varimax/promax here rotate real loadings (rotating the real parts would drop the phase). "
                "Rotate a real PCA's modes, or use the complex modes as they are (their amplitude and phase)."
            )
        m = self._check(model)
        model = copy.deepcopy(model)  # a later refit of the caller's model must not change this rotation
        variance = model.explained_variance_[:m]
        loadings = model.components_[:m].T * np.sqrt(variance)
        rotated, R, correlation, converged = promax(
            loadings, power=self.power, normalize=self.normalize, max_iter=self.max_iter, rtol=self.rtol
        )
        if not converged:
            warnings.warn(
                f"the varimax iteration did not reach rtol={self.rtol:g} in max_iter={self.max_iter} "
                "iterations; raise max_iter or loosen rtol.", ConvergenceWarning, stacklevel=2,
            )
        rotated_variance = np.sum(rotated**2, axis=0)
        order = np.argsort(rotated_variance)[::-1]
        components = (rotated / np.sqrt(np.where(rotated_variance > 0, rotated_variance, 1.0))).T[order]
        signs = flip_signs(components)
        self.components_ = components * signs[:, None]
        self.explained_variance_ = rotated_variance[order]
        total = model.total_variance_
        self.explained_variance_ratio_ = self.explained_variance_ / total if total > 0 else np.zeros(m)
        self.rotation_matrix_ = R
        self.correlation_ = correlation[np.ix_(order, order)] * np.outer(signs, signs)
        self.order_ = order
        self.converged_ = converged
        self.model_ = model
        # Unit-variance PCA scores u → rotated scores u·M (sorted, signed, scaled by √variance).
        inverse_transpose = R if self.power == 1 else np.linalg.inv(R).T
        self._score_matrix = inverse_transpose[:, order] * (np.sqrt(self.explained_variance_) * signs)[None, :]
        return self

    def transform(self, X):
        """Rotated scores of ``X`` (lazy for lazy input; one pass when computed).

        Plain input gives an array (n_samples, n_modes); a labeled model gives a DataArray
        ``(*sample_dims, "mode")`` with modes numbered from 1 in sorted order. Device input
        (CuPy chunks, or the model's ``device``): the scores' chunks stay on the device.
        """
        self.check_fitted()
        m = self.components_.shape[0]
        unit = self.model_.transform(X, scaling="unit")
        if hasattr(unit, "dims"):
            unit = unit.isel({MODE: slice(0, m)})
            return unit.copy(data=_rotated(unit.data, self._score_matrix.astype(unit.dtype))).assign_attrs(
                long_name=f"rotated scores ({'varimax' if self.power == 1 else f'promax, power {self.power}'})",
                scaling="rotated",
            )
        return _rotated(unit[:, :m], self._score_matrix.astype(unit.dtype))

    def to_xarray(self):
        """Rotated patterns over the model's feature dims (NaN at masked features) and variances."""
        import xarray as xr

        self.check_fitted()
        model = self.model_
        m = self.components_.shape[0]
        modes = np.arange(1, m + 1)
        ds = xr.Dataset(coords={MODE: (MODE, modes, {"long_name": "rotated mode (from 1, by variance)"})})
        ds["explained_variance"] = (MODE, self.explained_variance_)
        ds["explained_variance_ratio"] = (MODE, self.explained_variance_ratio_)
        ds["rotation_matrix"] = (("mode_m", "mode_n"), self.rotation_matrix_)
        ds["correlation"] = ((MODE, "mode_2"), self.correlation_)
        if model.layout_ is not None:
            rows = model.feature_stage_.restore(self.components_)
            fields = model.layout_.unstack_features(rows, leading_dims=(MODE,), leading_shape=(m,),
                                                    leading_coords={MODE: (MODE, modes)})
            if model.layout_.is_dataarray:
                ds["components"] = fields
            else:
                for name in fields.data_vars:
                    ds[f"components_{name}"] = fields[name]
        else:
            ds["components"] = ((MODE, "feature"), self.components_)
        ds.attrs.update(method="varimax" if self.power == 1 else "promax", power=int(self.power),
                        normalize=int(bool(self.normalize)), converged=int(self.converged_))
        return ds

    # ------------------------------------------------------------------ the saved model

    def _format_write(self):
        """The rotated model's store (its own format, its class as ``estimator``) plus this
        rotation's parameters (attr ``rotation``) and matrix (``rotation_matrix``): saved by the
        one save path, so history and integrity are the model's. ``daskpca.load`` of it gives the
        rotation back; the model's own ``load`` (e.g. ``PCA.load``) the unrotated model."""
        import json

        import xarray as xr

        ds = self.model_.to_dataset()
        ds["rotation_matrix"] = xr.DataArray(self.rotation_matrix_, dims=("rotation_m", "rotation_n"))
        ds.attrs["rotation"] = json.dumps(self.get_params())
        return ds

    @classmethod
    def _format_missing(cls, ds) -> list:
        return [] if "rotation_matrix" in ds else ["rotation_matrix"]

    @classmethod
    def _format_read(cls, ds):
        """The rotation fitted again on the stored model (reads no data), checked against the
        stored rotation matrix."""
        import json

        from ..exceptions import DamagedModelError
        from ..models import ESTIMATORS, from_dataset

        model = from_dataset(ds, ESTIMATORS[ds.attrs.get("estimator", "PCA")])
        rotator = cls(**json.loads(ds.attrs["rotation"])).fit(model)
        if not np.allclose(rotator.rotation_matrix_, ds["rotation_matrix"].values, rtol=1e-10, atol=1e-12):
            raise DamagedModelError("the stored rotation matrix differs from the rotation of the stored model; the "
                                    "store was changed after it was written")
        return rotator

    def _check(self, model) -> int:
        """The number of modes to rotate (``n_modes`` ≤ the model's k, a limit known only now)."""
        k = model.n_components_
        m = k if self.n_modes is None else self.n_modes
        if not 2 <= m <= k:
            raise InvalidParameterError(
                f"n_modes={self.n_modes!r}: expected an int in [2, {k}] (the model has {k} components; "
                "rotating needs at least 2), or None for all of them."
            )
        return int(m)


def _rotated(scores, matrix: np.ndarray):
    """``scores @ matrix`` (n × m times m × m): NumPy for NumPy scores; for lazy scores one task
    per row block, on the block's device (the m×m matrix moved there, not the scores to the host)."""
    if isinstance(scores, np.ndarray):
        return scores @ matrix
    scores = scores.rechunk({1: -1})
    return scores.map_blocks(_rotated_block, matrix, dtype=scores.dtype, chunks=(scores.chunks[0], (matrix.shape[1],)),
                             meta=meta_of(scores))


def _rotated_block(block, matrix: np.ndarray):
    return block @ like(matrix, block)
