r"""Hilbert (complex) EOFs through the Hermitian n×n Gram matrix, in two passes over column strips.

Hilbert EOF analysis (Rasmusson et al. 1981; Barnett 1983; Horel 1984) is PCA of the *analytic
signal* of every feature's time series, ``z = x̃ + i·H(x̃)`` with ``H`` the Hilbert transform along
the samples (time): a propagating wave, which plain EOFs split into a pair of standing patterns,
becomes one complex mode whose phase shows the propagation.

The transform needs each feature's whole series, so the data is read in column strips (every
sample of a range of features) — the layout of the Gram solver (:mod:`.gram`), whose n ≪ d regime
is also climate data's (a few thousand time steps, many grid points). Per strip, in the task that
reads it:

1. the strip is weighted (the feature stage's weights, :mod:`daskpca._features`), non-finite
   entries counted per feature (wholly missing features are zero-filled: they add exactly 0) and
   each feature centered on its exact mean (the strip holds every sample);
2. optionally padded at both ends with an exponential decay towards the linear trend (xeofs's
   ``padding="exp"``, ``decay_factor``), against the edge effects of the FFT's periodicity;
3. transformed with an FFT (``scipy.signal.hilbert``), cut back, and the imaginary part centered;
4. pass 1 adds ``Z_jZ_jᴴ`` to the n×n Hermitian Gram matrix (BLAS ``zherk``); pass 2 forms the
   strip's rows of the components ``Z_jᴴ·U_k·Λ_k^{-1/2}`` from the leading eigenvectors U_k of G.

Device strips (CuPy chunks) take the same steps in the strip's array library
(:mod:`daskpca.passes._device`): the transform by the library's own FFT (:func:`_fft_hilbert`,
what ``scipy.signal.hilbert`` computes), the Gram matrix by a complex matrix product in place of
BLAS ``zherk`` (a device has no ``herk`` call here: twice the flops, on a GPU), the merges on the
device; only the n×n (or n×b) sum and the d_j×k component rows move to the host.

Steps 2–4 run on a few columns of the strip at a time (:func:`analytic_blocks`, ~16 MiB of padded
complex numbers): the transform of one feature does not involve any other, so this changes
nothing in the result and keeps a task's scratch memory bounded whatever the strip's width.

Eigenvalues of G over (n − 1) are the explained variances (of the complex data: the real and the
imaginary parts' variances add, as in xeofs's ``HilbertEOF``); the components are the
eigenvectors of the Hermitian covariance ``ZᴴZ/(n − 1)``.

Passes: 2 (strips recompute the FFT in pass 2 rather than keeping n·d complex numbers).
Flops: 4·n²·d (complex ``herk``, one triangle) + O(n·d·log n) FFTs + 8·n·d·k. Memory per task
(:func:`task_memory`): the strip as read, one float64 copy, a bounded FFT scratch and the n×n
complex128 Gram matrix; a merge holds three Gram matrices (pairwise, like the covariance tree).
Row-chunked storage is regrouped into column strips by dask's rechunk, which holds the row blocks
a strip needs while it assembles it; input stored by rows only (one time step per chunk), whose
one strip would be the whole field, is first copied into strips — the re-layout step the Gram
road takes (the declaration's ``reads_strips``: one read of the input, both passes over the
copy). The plan (``daskpca inspect``) says which.

References
----------
J. D. Horel, "Complex principal component analysis: theory and examples", J. Climate Appl.
Meteor. 23 (1984) 1660–1673, doi:10.1175/1520-0450(1984)023<1660:CPCATA>2.0.CO;2. T. P. Barnett,
"Interaction of the monsoon and Pacific trade wind system at interannual time scales. Part I",
Mon. Wea. Rev. 111 (1983) 756–773.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import dask
import numpy as np
from scipy.linalg.blas import zherk

from ..passes import (MERGE_SPLIT_EVERY, Passes, SizedByArrays, backend_of, client_blas_threads, like,
                      map_column_blocks, namespace, to_host, tree_reduce)
from .._validation import NonFinite, find_nonfinite, raise_if_nonfinite
from ._base import ComponentRequest, Cost, PlanInput, SolverDeclaration, SolverResult
from ._bounds import gram_bound
from ..exceptions import InputError

OPTIONS = ("padding", "decay_factor")
N_PASSES = 2
#: Exact to round-off: meets any ``tol`` (so a ``tol`` given with this solver is not ignored).
EXACT = True
PADDINGS = ("exp", "none")
#: Padded complex transform formed at a time inside a strip task (see :func:`analytic_blocks`).
SCRATCH_BYTES = 16 * 2**20
#: Peak scratch of one block in units of its padded complex transform (the FFT's output and
#: input buffers and the padded real series), measured with tracemalloc at 3.0 over shapes from
#: 100 × 20000 to 2000 × 400 (tests/test_hilbert.py checks the estimate against a real task).
SCRATCH_COPIES = 3
COMPLEX128 = 16


def fuses_features(spec) -> bool:
    """Masks and weights ride in pass 1; standardizing needs the variances before it (no)."""
    return not spec.standardize


def analytic_signal(strip: np.ndarray, *, padding: str = "exp", decay_factor: float = 0.2, center: bool = True) -> np.ndarray:
    """Analytic signal ``x̃ + i·H(x̃)`` of every column of ``strip`` (n × d_j), complex128.

    ``center=True``: x̃ is each column centered on its own mean (the fit, where the strip holds the
    fitted samples); ``False``: the strip is used as given (``transform``, already centered on the
    fitted mean). The imaginary part is centered either way (the FFT's padding shifts it).
    ``padding="exp"`` extends each series by n samples at both ends, decaying exponentially (rate
    ``1/(n·decay_factor)``) from its end values towards its linear trend, before the FFT;
    ``"none"`` transforms the series as it is (the FFT then treats it as periodic).
    In ``strip``'s array library: a device strip's signal stays on its device.
    """
    xp = namespace(strip)
    x = xp.asarray(strip, dtype=xp.float64)
    if center and x.shape[0]:
        x = x - x.mean(axis=0)
    n = x.shape[0]
    if padding == "exp" and n > 1:
        z = _fft_hilbert(_pad_exp(x, decay_factor))[n : 2 * n]
    else:
        z = _fft_hilbert(x)
    return z.real + 1j * (z.imag - z.imag.mean(axis=0))


def _fft_hilbert(x):
    """The analytic signal of each column of ``x`` (m × p, real) by FFT along the rows.

    NumPy input: ``scipy.signal.hilbert`` itself (imported here: scipy.signal takes ~1 s to
    import, paid by every process that imports daskpca — CLI runs, dask workers, notebook kernels
    — for the Hilbert fits alone). Device input: the same steps with the array library's FFT
    (``cupy.fft``): the spectrum's positive frequencies doubled, the negative ones zeroed, the
    zero frequency (and, for even m, the Nyquist one) kept, then the inverse FFT.
    """
    backend = backend_of(x)
    if backend.on_host:
        from scipy.signal import hilbert

        return hilbert(x, axis=0)
    xp = backend.xp
    m = x.shape[0]
    spectrum = xp.fft.fft(x, axis=0)
    spectrum[1 : (m + 1) // 2] *= 2.0
    spectrum[m // 2 + 1 :] = 0.0
    return xp.fft.ifft(spectrum, axis=0)


def analytic_blocks(x: np.ndarray, *, padding: str, decay_factor: float, center: bool):
    """``(columns, z)`` for consecutive column blocks of ``x`` (n × d_j): each block's analytic signal.

    Blocks hold ~:data:`SCRATCH_BYTES` of padded complex numbers (at least 8 columns): the
    transform is per feature, so a block's ``z`` equals the same columns of
    ``analytic_signal(x)`` and a task's scratch memory does not grow with its strip's width.
    """
    n, width = x.shape
    padded_rows = 3 * n if padding == "exp" else n
    step = max(8, SCRATCH_BYTES // max(COMPLEX128 * padded_rows, 1))
    for start in range(0, width, step):
        columns = slice(start, min(start + step, width))
        yield columns, analytic_signal(x[:, columns], padding=padding, decay_factor=decay_factor, center=center)


def strip_bytes(n_samples: int, strip_columns: int, itemsize: int, padding: str = "exp") -> int:
    """Bytes a strip task holds besides its result: the strip as read, its float64 copy and one
    column block's FFT scratch (:data:`SCRATCH_COPIES` padded complex transforms)."""
    padded_rows = 3 * n_samples if padding == "exp" else n_samples
    block = min(strip_columns, max(8, SCRATCH_BYTES // max(COMPLEX128 * padded_rows, 1)))
    return n_samples * strip_columns * (itemsize + 8) + SCRATCH_COPIES * COMPLEX128 * padded_rows * block


def task_memory(n_samples: int, strip_columns: int, itemsize: int, padding: str = "exp") -> int:
    """Bytes of the largest task of a fit: a strip task (:func:`strip_bytes` and the n×n Gram)
    or a merge (two Gram matrices in, one out)."""
    gram = COMPLEX128 * n_samples * n_samples
    return max(strip_bytes(n_samples, strip_columns, itemsize, padding) + gram, (MERGE_SPLIT_EVERY + 1) * gram)


def _pad_exp(x: np.ndarray, decay_factor: float) -> np.ndarray:
    """Series (n × m) extended to 3n samples: exponential decay from the end values to the trend
    (in ``x``'s array library)."""
    xp = namespace(x)
    n = x.shape[0]
    t = xp.arange(n, dtype=xp.float64)
    slope = ((t - t.mean()) @ (x - x.mean(axis=0))) / xp.sum((t - t.mean()) ** 2)
    intercept = x.mean(axis=0) - slope * t.mean()
    extended = xp.arange(-n, 2 * n, dtype=xp.float64)[:, None]
    trend = intercept + slope * extended
    anomaly = x - trend[n : 2 * n]
    decay = xp.exp(-t / n / decay_factor)[:, None]
    before = anomaly[0] * decay[::-1]
    after = anomaly[-1] * decay
    return xp.concatenate([before, anomaly, after]) + trend


@dataclass(frozen=True)
class _HermitianPart(SizedByArrays):
    """Pass-1 summary of some column strips."""

    gram: np.ndarray  # (n, n) complex128 (or the (n, b) product ZZᴴ·block)
    means: list  # [(col_offset, (d_j,) float64)]: weighted column means
    squares: float  # Σ|z|² (the trace of G)
    counts: list  # [(col_offset, (d_j,) int64)]: finite entries per column
    nonfinite: NonFinite

    def in_column_order(self, items) -> np.ndarray:
        return np.concatenate([v for _, v in sorted(items, key=lambda ov: ov[0])])


def _prepare(strip: np.ndarray, col_offset: int, weights: np.ndarray):
    """Weighted strip with non-finite entries zero-filled; its finite counts and NaN report (in
    the strip's array library)."""
    xp = namespace(strip)
    x = xp.asarray(strip, dtype=xp.float64) * like(weights[col_offset : col_offset + strip.shape[1]], strip)
    nonfinite = find_nonfinite(x, 0, col_offset)
    finite = xp.isfinite(x)
    counts = finite.sum(axis=0).astype(xp.int64)
    if nonfinite.count:
        x = xp.where(finite, x, 0.0)
    return x, counts, nonfinite


def _strip_gram(strip, col_offset, weights, padding, decay_factor, block=None) -> _HermitianPart:
    """One strip's pass-1 summary: ``Z_jZ_jᴴ`` (n×n) — or, given an n×b ``block``, the product
    ``Z_j(Z_jᴴ·block)`` (n×b: the Gram operator applied without forming it, see
    :mod:`.hilbert_krylov`) — with the strip's means, Σ|z|², finite counts and NaN report.
    A device strip's summary stays on its device (the merge tree's root moves it)."""
    x, counts, nonfinite = _prepare(strip, col_offset, weights)
    backend = backend_of(x)
    xp, on_host = backend.xp, backend.on_host
    block = like(block, x)
    n = x.shape[0]
    if block is None:
        # zherk updates one triangle of a Fortran-ordered matrix in place: half of zgemm's flops
        # (measured 3× faster than ``z @ z.conj().T`` at n = 2000); the other is filled once.
        # A device strip takes the plain product (no herk there): the whole matrix at once.
        product = (np.zeros((n, n), dtype=np.complex128, order="F") if on_host
                   else xp.zeros((n, n), dtype=xp.complex128))
    else:
        product = xp.zeros((n, block.shape[1]), dtype=xp.complex128)
    squares = 0.0
    for _, z in analytic_blocks(x, padding=padding, decay_factor=decay_factor, center=True):
        if block is not None:
            product += z @ (z.conj().T @ block)
        elif on_host:
            product = zherk(1.0, np.asfortranarray(z), beta=1.0, c=product, overwrite_c=1)
        else:
            product += z @ z.conj().T
        squares += float(xp.sum(z.real**2 + z.imag**2))
    if block is None and on_host:
        product = _fill_lower(product)
    mean = x.mean(axis=0) if n else xp.zeros(x.shape[1])
    return _HermitianPart(product, [(col_offset, mean)], squares, [(col_offset, counts)], nonfinite)


def _fill_lower(upper: np.ndarray, rows: int = 256) -> np.ndarray:
    """Complete a Hermitian matrix from its upper triangle in place, ``rows`` rows at a time (the
    temporaries stay a thin slice of it, not the three n×n copies ``triu`` + ``conj().T`` take)."""
    n = upper.shape[0]
    for start in range(0, n, rows):
        stop = min(start + rows, n)
        upper[start:stop, :start] = upper[:start, start:stop].conj().T
        block = upper[start:stop, start:stop]
        block[...] = np.triu(block) + np.triu(block, 1).conj().T
    return upper


def _sum_parts(parts: list[_HermitianPart]) -> _HermitianPart:
    """Sum in one new n×n matrix (the inputs stay intact for a retried task)."""
    gram = parts[0].gram.copy()
    nonfinite = parts[0].nonfinite
    for part in parts[1:]:
        gram += part.gram
        nonfinite = nonfinite.merge(part.nonfinite)
    return _HermitianPart(gram, [m for p in parts for m in p.means], sum(p.squares for p in parts),
                          [c for p in parts for c in p.counts], nonfinite)


def _strip_components(strip, col_offset, weights, padding, decay_factor, basis) -> np.ndarray:
    """(d_j, k) rows of Zᴴ·basis for one column strip (pass 2); computed on the strip's device,
    handed to the host (d_j×k: small next to the strip)."""
    x, _, _ = _prepare(strip, col_offset, weights)
    xp = namespace(x)
    basis = like(basis, x)
    rows = xp.empty((x.shape[1], basis.shape[1]), dtype=xp.complex128)
    for columns, z in analytic_blocks(x, padding=padding, decay_factor=decay_factor, center=True):
        rows[columns] = z.conj().T @ basis
    return to_host(rows)


def gram_graph(X, weights: np.ndarray, padding: str, decay_factor: float, block=None):
    """Delayed pass-1 summary (:class:`_HermitianPart`) of all column strips of ``X``: one read.

    Pairwise merges (as the covariance tree): a merge holds three n×n complex matrices, a strip
    task what :func:`task_memory` says. With an n×b ``block``: the summed products ZZᴴ·block
    (n×b) in place of the Gram matrix.
    """
    leaves = map_column_blocks(X, _strip_gram, "hilbert-gram", weights, padding, decay_factor, block)
    return tree_reduce(leaves, _sum_parts, "hilbert-merge", split_every=MERGE_SPLIT_EVERY)


def strip_products(X, weights: np.ndarray, padding: str, decay_factor: float, basis: np.ndarray) -> np.ndarray:
    """``Zᴴ·basis`` (d × b, complex) for an n × b ``basis``, strip by strip: one read of ``X``."""
    pieces = map_column_blocks(X, _strip_components, "hilbert-components", weights, padding, decay_factor, basis)
    return np.concatenate(dask.compute(*pieces), axis=0)


def solve(X, request: ComponentRequest, *, random_state=None, features=None, padding="exp", decay_factor=0.2) -> SolverResult:
    """Hilbert EOFs of ``X`` (n × d, real; rows are time steps in order) in two passes.

    Parameters
    ----------
    X : dask.array.Array of shape (n_samples, n_features)
    request : ComponentRequest
    random_state : ignored
    features : FeatureSpec, optional
        Weights and the mask of wholly-missing features, resolved in pass 1.
    padding : {"exp", "none"}
    decay_factor : float in (0, 1]

    Returns
    -------
    SolverResult
        ``components`` complex (k, d_kept): eigenvectors of the Hermitian covariance;
        ``mean`` the (weighted) real mean; variances of the complex signal.
    """
    if padding not in PADDINGS:
        raise InputError(f"padding={padding!r}: expected one of {PADDINGS}.")
    if not (isinstance(decay_factor, (int, float)) and 0 < decay_factor <= 1):
        raise InputError(f"decay_factor={decay_factor!r}: expected a float in (0, 1] (0.05–0.2 usual).")
    n_samples, n_features = X.shape
    weights = np.ones(n_features) if features is None else features.weights
    options = (weights, padding, decay_factor)
    passes = Passes("hilbert", N_PASSES)
    with passes.read():
        (part,) = dask.compute(gram_graph(X, *options))
    counts = part.in_column_order(part.counts)
    if features is None:
        raise_if_nonfinite(part.nonfinite)
        keep, stage = np.ones(n_features, dtype=bool), None
    else:
        stage = features.resolve(counts, n_samples)
        keep = stage.keep
        request = stage.narrow(request)
    ddof = max(n_samples - 1, 1)
    gram = (part.gram + part.gram.conj().T) / 2
    with client_blas_threads():
        values, vectors = np.linalg.eigh(gram)
    order = np.argsort(values)[::-1]
    values, vectors = np.clip(values[order], 0.0, None), vectors[:, order]
    spectrum = values[: min(n_samples, int(keep.sum()))] / ddof
    k = request.resolve(spectrum) if request.needs_spectrum else request.fixed()
    tolerance = values[0] * max(n_samples, n_features) * np.finfo(np.float64).eps if len(values) else 0.0
    n_defined = int(np.sum(values[:k] > tolerance))
    if n_defined < k:
        raise InputError(
            f"only {n_defined} Hilbert EOFs have non-zero variance, but {k} were asked for: the "
            "data's rank is lower. Ask for fewer components."
        )
    basis = vectors[:, :k] / np.sqrt(values[:k])
    with passes.read():
        components = strip_products(X, *options, basis)[keep].T
    result = SolverResult(
        components=components,
        explained_variance=spectrum[:k].copy(),
        mean=part.in_column_order(part.means)[keep],
        n_samples=n_samples,
        total_variance=float(part.squares / ddof),
        n_passes=N_PASSES,
        spectrum=spectrum,
        info={"padding": padding, "decay_factor": float(decay_factor),
              "error_bound": gram_bound(values, k, n_samples, int(keep.sum()))},
    )
    return replace(result, features=stage)


# ---------------------------------------------------------------------------------- declaration


#: Flops of one complex FFT of N points (and as many for its inverse): the usual 5·N·log₂N.
FFT_FLOPS = 5.0
#: The local step: every eigenpair of the n×n Hermitian Gram (LAPACK ``zheevd``, eigenvectors
#: included) in real flops per n³ at the client's rate (complex tridiagonalisation, divide and
#: conquer, back transformation; memory-bound, so the count grows with n). Measured on the
#: development machine (shared cores): 3.5 s at n = 1000 (26·n³), 39 s at 2000 (37·n³), 183 s
#: at 3000 in a fit (46·n³).
EIGH_FLOPS = 40.0


#: The host's rate for the exact road's pass flops (the machine's, 2 cores): complex ``zherk`` of
#: the analytic signal's strips, with their FFTs. Measured on the development machine, n = 3000,
#: strips of 1200 features: 6.0 s a strip task for its 4.5e10 flops on one core (shared cores).
HILBERT_GRAM_FLOPS_PER_SECOND = 15e9
#: The rate of block Krylov's pass flops on the analytic signal: FFT-bound (the series' transforms
#: dominate its thin products). Measured as above: 1.34 s a strip task for its 2.9e9 flops on one
#: core (0.42 s of it the analytic signal alone).
HILBERT_KRYLOV_FLOPS_PER_SECOND = 5e9


def analytic_flops(n_samples: int, n_features: int, padding: str = "exp") -> float:
    """Flops of one pass's analytic signals (:func:`analytic_blocks`): per feature an FFT of its
    (padded) series and the inverse, and the padding, centering and copies around them (counted
    as one more transform's worth)."""
    padded = 3 * n_samples if padding == "exp" else n_samples
    return 3 * FFT_FLOPS * padded * np.log2(max(padded, 2)) * n_features


def cost(shape: PlanInput) -> Cost:
    """Two passes over column strips (the Gram matrix, then the components): per pass the
    analytic signal of every feature (:func:`analytic_flops`), 4·n²·d flops for the Hermitian n×n
    Gram (``zherk``) and 8·n·d·k for the components; each strip task returns its n×n complex
    Gram; the client's dense ``eigh`` of it (:data:`EIGH_FLOPS`). The largest task
    (:func:`task_memory`) plus, for input stored in a few row blocks, the rechunk's second copy of
    a strip (stored by rows only: the declaration's re-layout step, ``reads_strips``)."""
    n, d, k, strip, itemsize = shape.n, shape.d, shape.k, shape.col_strip, shape.itemsize
    padding = shape.options.get("padding", "exp")
    task = task_memory(n, strip, itemsize, padding) + (shape.row_tasks > 1) * n * strip * itemsize
    flops = 4.0 * n * n * d + 8.0 * n * d * k + N_PASSES * analytic_flops(n, d, padding)
    return Cost(N_PASSES, flops, task, f"column strips of ≤ {strip} features", result_size=2 * n * n,
                tasks=len(shape.chunks[1]), client_flops=EIGH_FLOPS * float(n) ** 3)


def reason(n: int, d: int) -> str:
    """Why the planner takes the exact road (its only one, for any shape)."""
    return (f"complex EOFs of the analytic signal along the {n} samples: a Hermitian {n}×{n} Gram matrix from "
            "column strips (the Hilbert transform needs each feature's whole series)")


DECLARATION = SolverDeclaration("hilbert", solve, cost=cost, summary="the Hermitian n×n Gram matrix of the analytic signal",
                                reason=reason, flop_rate=HILBERT_GRAM_FLOPS_PER_SECOND, options=OPTIONS, exact=EXACT,
                                exact_for="any", fuses_features=fuses_features,
                                reads_strips=True)
