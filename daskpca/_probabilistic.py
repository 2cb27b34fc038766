"""Probabilistic PCA's likelihood of a fitted model: ``score``, ``score_samples``,
``get_covariance``, ``get_precision`` (a mixin of :class:`daskpca.PCA`).

The fitted model read as Tipping & Bishop's (1999) probabilistic PCA: ``z ~ N(mean_, C)`` with

    C = Aᵀ diag(max(λ − σ², 0)) A + σ² I,    A = components_  (·√λ row-wise when ``whiten=True``)

λ = ``explained_variance_``, σ² = ``noise_variance_`` (the mean discarded eigenvalue). These are
scikit-learn's formulas exactly (``sklearn.decomposition.PCA``, including its √λ scaling of the
components under ``whiten=True``), so ``score`` can choose k by cross-validation as scikit-learn's
does (Minka 2000; Bishop, *PRML* §12.2.1).

``get_covariance`` / ``get_precision`` return the d×d matrices (as scikit-learn does; d² float64
on the client). ``score_samples`` never forms them: the rows of A are orthogonal, so C's
eigenvalues are ``e_i = |a_i|²·max(λ_i − σ², 0) + σ²`` along the components and σ² elsewhere, and

    log p(z) = −½ [ Σ_i p_i² / e_i + |r − Uᵀp|² / σ² + d·log 2π + Σ_i log e_i + (d − k)·log σ² ]

with ``r = z − mean_`` and ``p = U r`` (U = ``components_``): O(d·k) per sample, computed block
by block in projection tasks like ``transform``'s (:func:`project_block`, here too: both check
NaN/±inf inside the task; lazy for lazy input, one pass).

For a weighted / standardized / masked fit the model is of the analysed data
``z = x[keep]·f`` (see :mod:`daskpca._features`): ``get_covariance`` is over the kept features in
that space, and ``score_samples`` is the density of the input ``x`` over the kept features,
``log p(z) + Σ log f`` (the change of variables), so likelihoods compare across weightings.
"""

from __future__ import annotations

import math

import numpy as np

from .passes import like, meta_of, namespace, shared
from ._validation import Positions, check_finite_rows, check_nan_policy
from .exceptions import InputError


class ProbabilisticMixin:
    """``score`` / ``score_samples`` / ``get_covariance`` / ``get_precision`` of a fitted PCA."""

    def get_covariance(self) -> np.ndarray:
        """The model covariance ``Aᵀ diag(max(λ − σ², 0)) A + σ² I`` (n_kept × n_kept), with
        ``A = components_`` (scaled by √λ when ``whiten=True``, as scikit-learn does)."""
        self.check_fitted()
        components, diff = self._likelihood_terms()
        cov = (components.T * diff) @ components
        cov.flat[:: cov.shape[0] + 1] += self.noise_variance_
        return cov

    def get_precision(self) -> np.ndarray:
        """Inverse of :meth:`get_covariance`, by the matrix inversion lemma (scikit-learn's
        formula; a plain inverse when ``noise_variance_`` is 0)."""
        self.check_fitted()
        if self.noise_variance_ == 0.0:
            return np.linalg.inv(self.get_covariance())
        components, diff = self._likelihood_terms()
        with np.errstate(divide="ignore"):
            inner = components @ components.T / self.noise_variance_
            inner.flat[:: inner.shape[0] + 1] += 1.0 / diff
        precision = components.T @ np.linalg.inv(inner) @ components
        precision /= -(self.noise_variance_**2)
        precision.flat[:: precision.shape[0] + 1] += 1.0 / self.noise_variance_
        return precision

    def score_samples(self, X, *, nan="raise"):
        """Log-likelihood of each sample under the probabilistic PCA model.

        Parameters
        ----------
        X : array of shape (n_samples, n_features), or xarray object for a labeled model
        nan : {"raise", "propagate"}, default="raise"
            As for :meth:`transform`: NaN/±inf raise (from the projection task, for lazy input
            at compute time), or give NaN for the samples that hold them.

        Returns
        -------
        ll : array of shape (n_samples,)
            NumPy for NumPy input, a lazy dask array otherwise (one pass when computed); a
            DataArray over the sample dims for a labeled model.
        """
        self.check_fitted()
        check_nan_policy(nan)
        matrix, kind = self.model_input(X)
        Z = self.feature_stage_.apply(matrix).rechunk({1: -1})
        e = self._eigenvalues()
        d, k = Z.shape[1], self.n_components_
        sigma2 = float(self.noise_variance_)
        if np.any(e <= 0) or (sigma2 <= 0 and d > k):
            raise InputError(
                "the model's covariance is singular (a kept or discarded variance is 0: "
                f"noise_variance_={sigma2:g}, {d - k} discarded directions), so the likelihood is "
                "undefined. Fit fewer components, on data with more samples than features."
            )
        constant = -0.5 * (d * math.log(2.0 * math.pi) + np.sum(np.log(e)) + (d - k) * (math.log(sigma2) if d > k else 0.0))
        constant += float(np.sum(np.log(self.feature_stage_.factor)))
        mean, components = shared((self.mean_, self.components_))
        ll = Z.map_blocks(
            _log_likelihood_block, mean, components, 1.0 / e, sigma2, constant, nan,
            self._positions(X), dtype=np.float64, drop_axis=1, chunks=(Z.chunks[0],), meta=meta_of(Z, np.float64, 1),
        )
        if kind == "numpy":
            ll = ll.compute()
        if self.layout_ is not None:
            from . import labeled

            return labeled.per_sample_to_xarray(self.layout_, ll, X, "log_likelihood",
                                                "log-likelihood of each sample under the PCA model")
        return ll

    def score(self, X, y=None, *, nan="raise"):
        """Average log-likelihood of the samples (:meth:`score_samples`' mean): a float for NumPy
        input, a lazy 0-d dask array otherwise. Higher is better, so ``GridSearchCV`` over
        ``n_components`` picks k by cross-validated likelihood."""
        ll = self.score_samples(X, nan=nan)
        ll = ll.data if hasattr(ll, "dims") else ll  # a labeled model's DataArray
        return float(np.mean(ll)) if isinstance(ll, np.ndarray) else ll.mean()

    def _likelihood_terms(self):
        """``(A, max(λ − σ², 0))``: scikit-learn's components (√λ-scaled under whiten) and gaps."""
        components = self.components_
        variance = self.explained_variance_
        if self.whiten:
            components = components * np.sqrt(variance[:, None])
        diff = np.where(variance > self.noise_variance_, variance - self.noise_variance_, 0.0)
        return components, diff

    def _eigenvalues(self) -> np.ndarray:
        """C's eigenvalues along the components: ``|a_i|²·max(λ_i − σ², 0) + σ²``."""
        _, diff = self._likelihood_terms()
        scale = self.explained_variance_ if self.whiten else np.ones_like(diff)
        return scale * diff + self.noise_variance_

    def _positions(self, X) -> Positions:
        """How a projection task names a NaN position: coordinates for labeled input, else the
        input row and column (put in the graph once, as one shared object)."""
        import dask

        from . import labeled

        return dask.delayed(labeled.positions_of(self.layout_, X, self.feature_stage_.keep), pure=True)


def project_block(block: np.ndarray, mean: np.ndarray, basis: np.ndarray, nan: str, positions, block_info=None) -> np.ndarray:
    """``transform``'s task: ``(block − mean) @ basis`` in float64 (centering first: no
    cancellation), in the block's dtype; with ``nan="raise"`` a NaN/±inf of the block raises
    here, naming its position. A device block's scores stay on its device."""
    xp = namespace(block)
    with np.errstate(invalid="ignore", over="ignore"):  # NaN/±inf rows: refused or propagated below
        scores = (xp.asarray(block, dtype=xp.float64) - like(mean, block)) @ like(basis, block)
    if nan == "raise":
        check_finite_rows(scores, block, _row_offset(block_info), "transform", positions)
    return scores.astype(block.dtype, copy=False)


def _log_likelihood_block(block, mean, components, inverse_e, sigma2, constant, nan, positions, block_info=None):
    """Per row block: the log-likelihood of each row (see the module notes), in float64."""
    xp = namespace(block)
    mean, components, inverse_e = like(mean, block), like(components, block), like(inverse_e, block)
    with np.errstate(invalid="ignore", over="ignore"):  # NaN/±inf rows: refused or propagated below
        r = xp.asarray(block, dtype=xp.float64) - mean
        p = r @ components.T
        quadratic = (p**2) @ inverse_e
        if sigma2 > 0:
            residual = r - p @ components
            quadratic = quadratic + xp.einsum("ij,ij->i", residual, residual) / sigma2
        ll = constant - 0.5 * quadratic
    if nan == "raise":
        check_finite_rows(ll[:, None], block, _row_offset(block_info), "score_samples", positions)
    return ll


def _row_offset(block_info) -> int:
    """The global index of a ``map_blocks`` task's first row."""
    return int(block_info[0]["array-location"][0][0]) if block_info else 0

