"""Small dense linear algebra done locally on the client: sorted spectra, sign conventions."""

from __future__ import annotations

import numpy as np
from scipy.linalg import eigh


def eigh_descending(matrix: np.ndarray, n_top: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Eigenpairs of a symmetric matrix, largest first, eigenvalues clipped at zero.

    Parameters
    ----------
    matrix : ndarray of shape (m, m)
        Symmetric positive semi-definite (a scatter, covariance or Gram matrix).
    n_top : int, optional
        Only the ``n_top`` largest pairs (LAPACK ``syevr`` with an index range: cheaper when
        ``n_top ≪ m``). Default: all of them.

    Returns
    -------
    values : ndarray of shape (n_top,)
        Descending, ≥ 0 (round-off can make the smallest eigenvalues of a PSD matrix slightly
        negative; they are set to 0).
    vectors : ndarray of shape (m, n_top)
        Orthonormal columns.
    """
    m = matrix.shape[0]
    subset = None if n_top is None or n_top >= m else (m - n_top, m - 1)
    values, vectors = eigh(matrix, subset_by_index=subset, check_finite=False)
    order = np.argsort(values)[::-1]
    return np.clip(values[order], 0.0, None), vectors[:, order]


def flip_signs(components: np.ndarray) -> np.ndarray:
    """Signs, one per component, that make each component's largest-|·| entry positive.

    This is scikit-learn's component-based ``svd_flip`` convention: results become
    deterministic whatever solver or chunking produced them.

    Parameters
    ----------
    components : ndarray of shape (k, d)

    Returns
    -------
    signs : ndarray of shape (k,) with entries ±1
    """
    if components.size == 0:
        return np.ones(components.shape[0])
    largest = np.argmax(np.abs(components), axis=1)
    signs = np.sign(components[np.arange(components.shape[0]), largest])
    signs[signs == 0] = 1.0
    return signs


def orthonormal_basis(matrix: np.ndarray) -> np.ndarray:
    """Orthonormal basis of the column space of a tall matrix (thin QR, Q factor)."""
    q, _ = np.linalg.qr(matrix)
    return q
