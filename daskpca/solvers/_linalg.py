"""Dense linear algebra done locally on the client, and who gets the BLAS threads when.

Under dask's local threaded scheduler a solve limits BLAS to one thread, because the scheduler
already runs one task per core (:func:`one_blas_thread_per_task`). The local steps between and
after the passes (the d×d eigh, the SVD of R) run alone, so :func:`client_blas_threads` gives
them back the threads the caller had: a d = 4000 eigh is not left on one core.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from contextvars import ContextVar

import dask
import dask.threaded
import numpy as np
from scipy.linalg import eigh
from threadpoolctl import threadpool_info, threadpool_limits

#: BLAS threads the caller had before :func:`one_blas_thread_per_task` limited them to one, or
#: None when no limit is in force.
_caller_blas_threads: ContextVar[int | None] = ContextVar("caller_blas_threads", default=None)


@contextmanager
def one_blas_thread_per_task():
    """Limit BLAS to one thread while dask's local threaded scheduler runs the solve.

    That scheduler already runs one task per core; BLAS's own threads on top oversubscribe the
    cores (measured: a 20000×500 ``syrk`` 3× slower with 2 dask × 2 BLAS threads than with
    2 × 1). Distributed workers need nothing: their nannies start them with one BLAS thread.
    """
    if not _threaded_scheduler():
        yield
        return
    before = max((lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"), default=1)
    token = _caller_blas_threads.set(before)
    try:
        with threadpool_limits(limits=1, user_api="blas"):
            yield
    finally:
        _caller_blas_threads.reset(token)


def _threaded_scheduler() -> bool:
    """Whether a dask array computed now runs on the local threaded scheduler.

    ``dask.base.get_scheduler`` imports distributed to look for a client (~0.5 s on the first
    fit); a client can only exist once distributed is imported, so without it only the
    configuration is consulted.
    """
    if "distributed" in sys.modules:
        from ._graph import unwrap_scheduler

        scheduler = unwrap_scheduler(dask.base.get_scheduler())
        return scheduler is None or scheduler is dask.threaded.get
    from ._graph import unwrap_scheduler

    return unwrap_scheduler(dask.config.get("scheduler", None)) in (None, "threads", "threading", dask.threaded.get)


@contextmanager
def client_blas_threads():
    """Inside a solve, give a local step on the client the BLAS threads the caller had.

    No dask task runs while the client solves a small dense problem, so the one-thread limit
    only slows it down. The limit is back in force when the block exits.
    """
    threads = _caller_blas_threads.get()
    if threads is None or threads <= 1:
        yield
        return
    with threadpool_limits(limits=threads, user_api="blas"):
        yield


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
    with client_blas_threads():
        values, vectors = eigh(matrix, subset_by_index=subset, check_finite=False)
    order = np.argsort(values)[::-1]
    return np.clip(values[order], 0.0, None), vectors[:, order]


def flip_signs(components: np.ndarray) -> np.ndarray:
    """Factors, one per component, that make each component's largest-|·| entry real positive.

    This is scikit-learn's component-based ``svd_flip`` convention: results become
    deterministic whatever solver or chunking produced them. Multiply: ``components * f[:, None]``.

    Parameters
    ----------
    components : ndarray of shape (k, d), real or complex

    Returns
    -------
    factors : ndarray of shape (k,)
        ±1 for real components; for complex ones the unit phase e^{−iφ} that turns the largest
        entry (phase φ) real positive (complex eigenvectors are determined up to such a phase).
    """
    if components.size == 0:
        return np.ones(components.shape[0])
    largest = np.argmax(np.abs(components), axis=1)
    signs = np.sign(components[np.arange(components.shape[0]), largest])  # z/|z| for complex z
    signs[signs == 0] = 1.0
    return np.conj(signs)


def orthonormal_basis(matrix: np.ndarray) -> np.ndarray:
    """Orthonormal basis of the column space of a tall matrix (thin QR, Q factor)."""
    q, _ = np.linalg.qr(matrix)
    return q
