r"""Canonical correlation analysis (CCA) of two fields through PCA pre-truncation.

CCA finds weight vectors ``a_i``, ``b_i`` whose canonical variates ``Z̃x·a_i`` and ``Z̃y·b_i``
(unit variance) are most correlated, each pair uncorrelated with the earlier ones. On gridded
fields the sample cross-covariances are far from full rank, so — as xeofs and Barnett & Preisendorfer
(1987) do — each field is first reduced to its leading principal components (``n_pca_modes``:
kx and ky), and the canonical problem is solved on the PC scores:

    K = Cₚₓ^{-½} · Cₚₓᵧ · Cₚᵧ^{-½} = A ρ Bᵀ,      a = Eₓ Cₚₓ^{-½} A,   b = Eᵧ Cₚᵧ^{-½} B,

with Eₓ (dx × kx) the leading EOFs of the analysed field Z = X[:, keep]·factor (each field
through its own feature stage) and Cₚ the covariances of the PC scores. ``canonical_correlations_``
are ρ (≤ 1).

**When it is ill-posed.** With n samples the centred scores live in an (n − 1)-dimensional space;
once kx + ky ≥ n − 1 the two score spaces intersect (or nearly so) and the leading canonical
correlations are 1 whatever the data — an artefact, not a coupling. CCA is refused, before any
read, unless kx + ky ≤ n − 2 (keep kx + ky well below n in practice: the sampling bias of ρ grows
like (kx + ky)/n). Also kx ≤ min(n − 1, dx) and ky ≤ min(n − 1, dy), and k ≤ min(kx, ky).

**Paths and passes** (a pass here reads both fields, unless said):

- ``"exact"`` — 1 pass: the exact moments (Chan merge) of the joined matrix [X | Y], which give
  both fields' covariances, their cross-covariance and the per-feature statistics of both feature
  stages at once; everything else on the client. Needs the (dx + dy)² covariance in a task.
- ``"pca"`` — otherwise: each field's PCA by :class:`daskpca.PCA` (its planner and passes, each
  reading its own field), then 1 pass reading both for the covariances of the PC scores.

Both paths are declared where they are solved (:data:`daskpca.solvers.canonical.CCA_PATHS`), and
CCA plans through the one planner (:func:`daskpca._plan.make_plan`, the two fields read together):
``"auto"`` takes the exact path where its task fits, else the PCA-first one.
"""

from __future__ import annotations

from functools import partial
from numbers import Integral

import numpy as np
from scipy.linalg import svd

from .. import _plan
from ..exceptions import InputError
from ..models import BOOL, WEIGHTS, Estimator, Interval, Options, PerField, read_field, stored_params, write_field
from ..pca import PCA
from ..passes import flip_signs, tuned_for_tasks
from ..solvers.canonical import CCA_PATHS
from .fields import Field, fields, pair, project_field, resolve


class CCA(Estimator):
    """Canonical correlation analysis of two fields on their leading PCs, on Dask.

    Parameters
    ----------
    n_components : int, default=2
        Canonical pairs k ≤ min(kx, ky).
    n_pca_modes : int or pair of int, default=10
        Leading PCs kept of each field (kx, ky); see the module docstring for the bound on
        kx + ky that makes the problem well posed.
    weights, standardize
        Per-field feature stage, as for :class:`daskpca.MCA`.
    solver : {"auto", "exact", "pca"}, default="auto"
    device : {None, "cpu", "cuda"}, default=None
        Where the passes compute, as for :class:`daskpca.PCA` (both fields' blocks moved to the
        GPU in their read tasks; dask arrays of CuPy chunks computed there either way). Fitted
        attributes are NumPy; ``transform`` of device input returns device chunks.

    Attributes
    ----------
    canonical_correlations_ : ndarray of shape (k,)
    weights_x_, weights_y_ : ndarray of shape (k, dx_kept), (k, dy_kept)
        Canonical weight vectors in each field's analysed (weighted) space: the canonical
        variates ``(z − mean)·weightsᵀ`` have unit variance on the fitting data.
    mean_x_, mean_y_, feature_stage_x_, feature_stage_y_, layout_x_, layout_y_
    n_components_, n_samples_, n_passes_, solver_, solver_reason_
    """

    _parameter_constraints = {
        "n_components": [Interval(Integral, 1, None)],
        "n_pca_modes": [PerField((Interval(Integral, 1, None),))],
        "weights": [PerField((WEIGHTS,))],
        "standardize": [PerField((BOOL,))],
        "solver": [Options(("auto", *CCA_PATHS))],
        "device": PCA._parameter_constraints["device"],  # one declaration, PCA's
    }
    _fitted_attribute = "weights_x_"
    _fit_call = "fit(X, Y)"

    def __init__(self, n_components=2, *, n_pca_modes=10, weights=None, standardize=False, solver="auto", device=None):
        self.n_components = n_components
        self.n_pca_modes = n_pca_modes
        self.weights = weights
        self.standardize = standardize
        self.solver = solver
        self.device = device

    def fit(self, X, Y, *, sample_dims=None):
        """Fit the canonical pairs of ``X`` and ``Y`` (inputs as for :meth:`daskpca.MCA.fit`).

        Raises
        ------
        ValueError
            Before any read: the pair as :meth:`daskpca.MCA.fit` refuses it, and an ill-posed
            problem (kx + ky > n − 2, or a k or kx, ky larger than the data allow).
        """
        x, y = self._fields(X, Y, sample_dims)
        plan = self._plan(x, y)
        with tuned_for_tasks():
            reduced = CCA_PATHS[plan.path].solve(x.matrix, y.matrix, resolve=(partial(resolve, x), partial(resolve, y)),
                                                 modes=self._modes, fit_pca=partial(self._field_pca, (x, y)))
        eofs, means, stages = reduced.eofs, reduced.means, reduced.stages
        n, passes = reduced.n_samples, reduced.n_passes
        rho, a, b = canonical(*reduced.covariances, self.n_components)
        self.canonical_correlations_ = rho
        weights_x, weights_y = (eofs[0] @ a).T, (eofs[1] @ b).T
        signs = flip_signs(weights_x)  # a pair flips together: ρ stays positive
        self.weights_x_, self.weights_y_ = weights_x * signs[:, None], weights_y * signs[:, None]
        self.mean_x_, self.mean_y_ = means
        self.feature_stage_x_, self.feature_stage_y_ = stages
        self.layout_x_, self.layout_y_ = x.layout, y.layout
        self.n_components_, self.n_samples_, self.n_passes_ = len(rho), n, passes
        self.solver_, self.solver_reason_ = plan.path, plan.reason
        self.__dict__.pop("_loaded_from", None)  # a new fit replaces, it does not modify, a loaded model
        return self

    def _fields(self, X, Y, sample_dims) -> tuple[Field, Field]:
        self.validate_params()
        x, y = fields(X, Y, sample_dims, self.weights, self.standardize, self.device)
        n = x.matrix.shape[0]
        kx, ky = (int(m) for m in pair(self.n_pca_modes, "n_pca_modes"))
        for name, m, d in (("X", kx, x.matrix.shape[1]), ("Y", ky, y.matrix.shape[1])):
            if not 1 <= m <= min(n - 1, d):
                raise InputError(f"n_pca_modes={m} for {name}: expected 1..min(n_samples − 1, features) = "
                                 f"{min(n - 1, d)}.")
        if kx + ky > n - 2:
            raise InputError(
                f"CCA on {kx} + {ky} PCs of {n} samples is ill-posed: with kx + ky ≥ n − 1 the two score spaces "
                f"meet and the canonical correlations are 1 whatever the data. Keep kx + ky ≤ n − 2 = {n - 2} "
                "(well below n in practice), e.g. n_pca_modes=(5, 5).")
        if not 1 <= self.n_components <= min(kx, ky):
            raise InputError(f"n_components={self.n_components}: expected 1..min(kx, ky) = {min(kx, ky)} "
                             "(the canonical pairs cannot outnumber either field's PCs).")
        self._modes = (kx, ky)
        return x, y

    def plan(self, X, Y, *, sample_dims=None) -> _plan.Plan:
        """The path, passes and largest task of :meth:`fit`, reading nothing."""
        return self._plan(*self._fields(X, Y, sample_dims))

    def _plan(self, x: Field, y: Field) -> _plan.Plan:
        """The one planner's plan (:func:`daskpca._plan.make_plan`) of the two fields read together,
        among CCA's paths (no pass cache: the PCA-first path's per-field fits keep their own)."""
        (n, dx), dy = x.matrix.shape, y.matrix.shape[1]
        itemsize = max(x.matrix.dtype.itemsize, y.matrix.dtype.itemsize)
        plan = _plan.make_plan(
            n, dx + dy, self.n_components, (x.matrix.chunks[0], x.matrix.chunks[1] + y.matrix.chunks[1]), itemsize,
            available=tuple(CCA_PATHS), requested=None if self.solver == "auto" else self.solver,
            declarations=CCA_PATHS, fields=(dx, dy), options={"n_pca_modes": self._modes},
            chunk_seconds=_plan.joint_pricing([x.matrix, y.matrix], False)["chunk_seconds"])  # both fields' storage chunks
        self.refuse_ignored_knobs(plan.path, CCA_PATHS)
        return plan

    def _field_pca(self, fields_, which: int, matrix, m: int):
        """The PCA-first path's per-field fit: field ``which``'s ``m`` leading PCs through its own
        feature stage (its planner and passes)."""
        spec = fields_[which].spec
        return PCA(m, weights=spec.weights, standardize=spec.standardize).fit(matrix)

    def transform(self, X, Y, *, nan="raise"):
        """Canonical variates of each field: ``(z − mean)·weightsᵀ`` (unit variance on the fitting
        data); NumPy for NumPy input, lazy otherwise, labeled ``(*sample_dims, "mode")`` for a
        labeled model. ``nan``: as for :meth:`daskpca.PCA.transform`."""
        self.check_fitted()
        return tuple(project_field(data, stage, layout, mean, w.T, self.device, name=name, estimator="CCA",
                                   scaling="unit", nan=nan)
                     for name, data, layout, stage, mean, w in self._per_field(X, Y))

    def _per_field(self, X=None, Y=None):
        yield "X", X, self.layout_x_, self.feature_stage_x_, self.mean_x_, self.weights_x_
        yield "Y", Y, self.layout_y_, self.feature_stage_y_, self.mean_y_, self.weights_y_

    # ------------------------------------------------------------------ the saved model

    def _format_write(self):
        """The model's content (estimator ``"CCA"``): ``model_canonical_correlations`` (mode),
        each field's canonical weights and mean exactly (``model_weights_x``, ``model_mean_x`` ...)
        with its feature stage and labeled layout (:func:`daskpca.models._format.write_field`),
        and the fitted scalars."""
        import xarray as xr

        ds = xr.Dataset({"model_canonical_correlations": xr.DataArray(self.canonical_correlations_, dims=("mode",))})
        for name, _, layout, stage, mean, weights in self._per_field():
            tag = name.lower()
            ds[f"model_weights_{tag}"] = xr.DataArray(weights, dims=("mode", f"feature_kept_{tag}"))
            ds[f"model_mean_{tag}"] = xr.DataArray(mean, dims=(f"feature_kept_{tag}",))
            ds = write_field(ds, tag, stage, layout)
        ds.attrs.update({"n_samples": self.n_samples_, "n_passes": self.n_passes_, "solver": self.solver_,
                         "solver_reason": self.solver_reason_})
        return ds

    @classmethod
    def _format_missing(cls, ds) -> list:
        return [name for name in ("n_samples", "n_passes", "solver", "solver_reason") if name not in ds.attrs]

    @classmethod
    def _format_read(cls, ds):
        model = cls(**stored_params(cls, ds))
        model.canonical_correlations_ = ds["model_canonical_correlations"].values
        for tag in ("x", "y"):
            stage, layout = read_field(ds, tag)
            setattr(model, f"feature_stage_{tag}_", stage)
            setattr(model, f"layout_{tag}_", layout)
            setattr(model, f"weights_{tag}_", ds[f"model_weights_{tag}"].values)
            setattr(model, f"mean_{tag}_", ds[f"model_mean_{tag}"].values)
        model.n_components_ = len(model.canonical_correlations_)
        model.n_samples_, model.n_passes_ = int(ds.attrs["n_samples"]), int(ds.attrs["n_passes"])
        model.solver_, model.solver_reason_ = str(ds.attrs["solver"]), str(ds.attrs["solver_reason"])
        return model

    def _problem(self) -> str | None:
        """The first fitted invariant this model breaks (None when it keeps all)."""
        k = self.n_components_
        for name, _, _, stage, mean, weights in self._per_field():
            if weights.shape != (k, stage.n_kept) or mean.shape != (stage.n_kept,):
                return f"the {name} weights have shape {weights.shape}, expected ({k}, {stage.n_kept})"
            if not (np.all(np.isfinite(weights)) and np.all(np.isfinite(mean))):
                return f"the {name} weights or mean contain NaN or ±inf"
        rho = self.canonical_correlations_
        if not np.all(np.isfinite(rho)) or np.any(rho < 0) or np.any(rho > 1) or np.any(np.diff(rho) > 1e-12):
            return "the canonical correlations are not in [0, 1] and decreasing"
        return None


def canonical(cov_x: np.ndarray, cov_y: np.ndarray, cross: np.ndarray, k: int):
    """``(ρ, A, B)``: the k leading canonical pairs of scores with covariances ``cov_x`` (kx²),
    ``cov_y`` (ky²) and cross-covariance ``cross`` (kx × ky); the weights on the scores are
    ``Cₓ^{-½}A`` and ``Cᵧ^{-½}B`` (returned already multiplied), unit variance."""
    root_x, root_y = _inverse_root(cov_x), _inverse_root(cov_y)
    left, rho, right_t = svd(root_x @ cross @ root_y, full_matrices=False, check_finite=False)
    return np.clip(rho[:k], 0.0, 1.0), root_x @ left[:, :k], root_y @ right_t[:k].T


def _inverse_root(covariance: np.ndarray) -> np.ndarray:
    values, vectors = np.linalg.eigh((covariance + covariance.T) / 2)
    if values.min() <= 1e-12 * values.max():
        raise InputError("the PC scores are (numerically) linearly dependent: keep fewer PCs (n_pca_modes).")
    return (vectors / np.sqrt(values)) @ vectors.T
