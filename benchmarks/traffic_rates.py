"""Single-thread rates of the solvers' kernels on this machine (part of :mod:`benchmarks.traffic`).

They turn the scaled passes' flops and bytes into time estimates in :mod:`benchmarks.traffic_report`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .runner import wall_times
from .traffic_record import proxy_array
from .traffic_report import EXAMPLE_K


def _best_time(fn, repeat: int = 7) -> float:
    """Fastest of ``repeat`` runs: on a busy machine, the run least disturbed by other work."""
    return min(wall_times(fn, repeat))


def _peak_bytes(fn) -> int:
    """Peak bytes ``fn`` allocates (NumPy and SciPy report their buffers to tracemalloc)."""
    import tracemalloc

    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def measure_throughputs(folder: Path, side: int = 1_000) -> dict:
    """Single-thread rates of the kernels the solvers spend their time in, measured here.

    Returns
    -------
    dict
        ``read``: bytes/s from zarr to NumPy (decompression included). ``syrk``, ``qr``,
        ``gemm``: flops/s in the planner's units (n·d² for XᵀX, 2·n·d² for a QR, 2·n·d·ℓ for
        a product). ``client``: per exact solver, (seconds / s³, bytes / 8s²) of its step on
        the client, s = d (n for gram), the received matrix included in the bytes: the
        covariance solver's ``result_from_moments`` (k = 20), the full ``eigh`` of the Gram
        matrix, the SVD of TSQR's final R. ``tsqr_merge``: seconds / d³ of one TSQR merge
        (``_merge_r`` of two d×d R factors: TSQR merges pairwise).
    """
    from scipy.linalg import qr, svd
    from threadpoolctl import threadpool_limits

    from daskpca.passes._linalg import eigh_descending
    from daskpca.passes._moments import Moments
    from daskpca._validation import NonFinite
    from daskpca.solvers import covariance, tsqr
    from daskpca.solvers._base import ComponentRequest

    rng = np.random.default_rng(0)
    rates: dict = {}
    with threadpool_limits(1):
        X = proxy_array(folder, 65_536, 256, (4_096, 256))  # 64 MiB float32 in 16 chunks
        rates["read"] = X.nbytes / _best_time(lambda: X.compute(scheduler="sync"))
        block = rng.standard_normal((8_000, 400))
        rates["syrk"] = 8_000 * 400**2 / _best_time(lambda: block.T @ block)
        rates["qr"] = 2 * 8_000 * 400**2 / _best_time(lambda: qr(block, mode="r"))
        omega = rng.standard_normal((400, 30))
        rates["gemm"] = 2 * 8_000 * 400 * 30 / _best_time(lambda: block @ omega)

        a = rng.standard_normal((side, side))
        scatter = a @ a.T
        moments = Moments(10 * side, np.zeros(side), scatter, NonFinite())
        request = ComponentRequest(EXAMPLE_K, 10 * side, side)
        r = np.triu(a)
        steps = {
            "covariance": lambda: covariance.result_from_moments(moments, request),
            "gram": lambda: eigh_descending(scatter),
            "tsqr": lambda: svd(r, full_matrices=False, check_finite=False, lapack_driver="gesdd"),
        }
        matrix = 8 * side**2
        rates["client"] = {
            name: (_best_time(step, 3) / side**3, 1 + _peak_bytes(step) / matrix) for name, step in steps.items()
        }
        m = 400
        parts = [tsqr._RPart(m, rng.standard_normal(m), np.triu(rng.standard_normal((m, m))), NonFinite())
                 for _ in range(tsqr.MERGE_SPLIT_EVERY)]
        rates["tsqr_merge"] = _best_time(lambda: tsqr._merge_r(parts)) / m**3
    return rates
