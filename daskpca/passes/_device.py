"""Where a block lives, and the few calls each array library makes differently.

A dask array's chunks may be NumPy arrays (host memory) or device arrays such as CuPy's (GPU
memory). The pass kernels are written once: they ask this module for the block's
:class:`ArrayBackend` — its array namespace ``xp`` (``numpy``, ``cupy``, or a registered test
stand-in) plus the handful of operations the libraries provide differently (a private float64
copy, an R factor, a thin QR, a rank-one update, the move to and from the host) — and never
branch on a library's name. Blocks never leave the device during a pass; only the reduced
results (d×d, n×n, d×ℓ, k×k) move to the host, once, at the root of the merge tree
(:func:`daskpca.passes._graph.tree_reduce` calls :func:`to_host`), so the merges of large
partials run on the device too. The final d×d eigenproblem (covariance) or SVD of R (TSQR) runs
on the device too, in the root task, where that is cheaper than moving the matrix and solving it
on the host (:func:`solve_on_device`, a cost rule from :data:`RATES`); only its k leading pairs
then move. Partials of device blocks are merged in wider trees
(:func:`~daskpca.passes._geometry.device_merge_fan_in`): a device adds d×d matrices at hundreds
of GB/s, so fewer, wider merges save tasks — as wide as one task's share of the device allows.

The host backend keeps NumPy's fast paths (LAPACK in place on Fortran-ordered copies, BLAS
``dger``, the sketch's cache-sized slabs): for NumPy blocks every result is what it was before
this module existed, to the bit.

**Fitted attributes stay on the host**, as NumPy arrays: they are small, and saving, loading,
``to_xarray`` and scikit-learn interoperation then have one road. ``transform`` of device input
returns device chunks (lazy dask arrays whose ``meta`` is a device array).

Devices by name (``PCA(device="cuda")``): :data:`DEVICES` maps a name to a factory of its
backend, so each block is moved there inside the task that decodes it (:func:`to_device`, a
``map_blocks`` fused after the read). The tests map ``"cuda"`` onto a CPU stand-in
(``tests/_device_standin.py``) by replacing the entry; :func:`require` checks, before any read,
that the backend can run here (CuPy importable, a CUDA device present) and says how to fix it.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import dask
import numpy as np

from ..exceptions import InputError


class ArrayBackend:
    """An array library, as the pass kernels see it (written against ``self.xp``).

    Subclasses set ``name``, ``on_host`` and :meth:`owns`, and override the operations their
    library offers faster or differently. The defaults use only functions that NumPy and CuPy
    both provide with the same signature, so a new device library needs little more than its
    namespace and :meth:`to_host`.
    """

    name = "array"
    #: True when blocks are NumPy arrays in host memory (nothing to move back).
    on_host = False

    def __dask_tokenize__(self):
        return ("daskpca-array-backend", type(self).__qualname__)

    def __reduce__(self):  # one instance per kind in every process (tasks ship it to workers)
        return (type(self), ())

    @property
    def xp(self):
        """The array namespace (module-like: ``zeros``, ``linalg.qr``, ``float64``, ...)."""
        raise NotImplementedError

    def owns(self, array) -> bool:
        """Whether ``array`` is one of this library's arrays."""
        raise NotImplementedError

    def problem(self) -> str | None:
        """Why this backend cannot run here (missing library or device), or None."""
        return None

    # -- moving data
    def to_host(self, array) -> np.ndarray:
        """An explicit copy in host memory (NumPy)."""
        raise NotImplementedError

    def asarray(self, host, dtype=None):
        """A host array (or scalar) as this library's array, on its device."""
        return self.xp.asarray(host, dtype=dtype)

    def meta(self, dtype=np.float64, ndim: int = 2):
        """An empty array of this library: dask's ``meta`` for arrays whose chunks live here."""
        return self.xp.empty((0,) * ndim, dtype=dtype)

    def memory(self) -> tuple[int, int] | None:
        """``(free, total)`` bytes of the device's memory, or None (host memory: the planner's own)."""
        return None

    # -- the operations libraries provide differently
    def float64_copy(self, array, order: str = "C"):
        """A private float64 copy of ``array`` (``order``: "C" or "F", for LAPACK in place)."""
        return self.xp.array(array, dtype=self.xp.float64, order=order, copy=True)

    def r_factor(self, a):
        """R (min(m, d)×d, upper trapezoidal) of the Householder QR of ``a`` (m×d float64);
        ``a`` may be overwritten."""
        m, d = a.shape
        if m == 0:
            return self.xp.zeros((0, d))
        return self.xp.triu(self.xp.linalg.qr(a, mode="r")[: min(m, d)])

    def thin_qr(self, a):
        """``(Q, R)`` of the thin Householder QR of ``a`` (float64); ``a`` may be overwritten."""
        return self.xp.linalg.qr(a, mode="reduced")

    def rank_one_update(self, matrix, alpha: float, vector):
        """``matrix += alpha·vector·vectorᵀ`` in place (a float64 matrix this code owns); returns it."""
        matrix += alpha * self.xp.outer(vector, vector)
        return matrix

    def eigh(self, matrix):
        """``(values ascending, vectors)`` of a symmetric float64 matrix, on its device (cuSOLVER
        ``syevd`` for CuPy: every pair; a device library has no index-range driver)."""
        return self.xp.linalg.eigh(matrix)

    def svd(self, matrix):
        """``(U, s, Vᵀ)`` of the thin SVD of a float64 matrix, on its device (cuSOLVER ``gesvd``)."""
        return self.xp.linalg.svd(matrix, full_matrices=False)


class NumpyBackend(ArrayBackend):
    """Host memory: NumPy, with SciPy's LAPACK/BLAS in place where it saves copies."""

    name = "numpy"
    on_host = True

    @property
    def xp(self):
        return np

    def owns(self, array) -> bool:
        return isinstance(array, (np.ndarray, np.generic))

    def to_host(self, array) -> np.ndarray:
        return array

    def asarray(self, host, dtype=None):
        return host if dtype is None else np.asarray(host, dtype=dtype)

    def r_factor(self, a):
        """LAPACK ``geqrf`` in place on ``a`` (pass it Fortran-ordered float64: anything else is
        first copied by f2py); the R is copied out, so it does not keep the m×d array alive."""
        from scipy.linalg import get_lapack_funcs

        m, d = a.shape
        if m == 0:
            return np.zeros((0, d))
        geqrf, geqrf_lwork = get_lapack_funcs(("geqrf", "geqrf_lwork"), dtype=np.float64)
        work, _ = geqrf_lwork(m, d)
        qr, _, _, info = geqrf(a, lwork=max(int(work), 1), overwrite_a=1)
        if info:  # pragma: no cover - only an illegal argument
            raise RuntimeError(f"LAPACK geqrf failed (info={info})")
        return np.triu(qr[: min(m, d)])

    def thin_qr(self, a):
        from scipy.linalg import qr

        return qr(a, mode="economic", overwrite_a=True, check_finite=False)

    def rank_one_update(self, matrix, alpha: float, vector):
        """BLAS ``dger`` in place (no d×d temporary); ``matrix`` must be Fortran-ordered float64."""
        from scipy.linalg import blas

        return blas.dger(alpha, vector, vector, a=matrix, overwrite_a=True)


class CupyBackend(ArrayBackend):
    """A CUDA GPU through CuPy (imported only when a block or ``device="cuda"`` asks for it)."""

    name = "cupy"

    @property
    def xp(self):
        import cupy

        return cupy

    def owns(self, array) -> bool:
        return type(array).__module__.split(".", 1)[0] == "cupy"

    def problem(self) -> str | None:
        try:
            import cupy
        except ImportError as error:
            return f"CuPy is not installed ({error})"
        try:
            count = cupy.cuda.runtime.getDeviceCount()
        except Exception as error:  # CUDARuntimeError: no driver, no device
            return f"CuPy finds no CUDA GPU ({type(error).__name__}: {error})"
        return None if count else "CuPy finds no CUDA GPU (0 devices)"

    def to_host(self, array) -> np.ndarray:
        return array.get()

    def memory(self) -> tuple[int, int]:
        free, total = self.xp.cuda.Device().mem_info
        return int(free), int(total)


#: The host backend (NumPy).
NUMPY = NumpyBackend()

#: Backends that blocks are recognised by (:func:`backend_of`), NumPy first. A test stand-in
#: registers itself here (:func:`register`).
BACKENDS: list[ArrayBackend] = [NUMPY, CupyBackend()]

#: ``device=`` names → the factory of their backend. ``None`` and ``"cpu"`` keep the blocks where
#: they are read (host memory); tests replace the ``"cuda"`` entry by a CPU stand-in's backend.
DEVICES: dict[str, Callable[[], ArrayBackend]] = {"cuda": CupyBackend}

#: What ``device=`` accepts.
DEVICE_NAMES = ("cpu", "cuda")


# -- what the device costs: the planner's rates and the root's cost rule

#: The device's rates, each overridable through dask config (``daskpca.device.<key>``, e.g.
#: ``dask.config.set({"daskpca.device.flops": 50e12})``). Measured on one H200 (CuPy 14.2) with
#: float32 blocks resident on the GPU, k = 10 (issue 40); the host's on that machine's 16 cores.
RATES = {
    # Float64-accumulated products of float32 blocks (each block converted to float64 once, then
    # cuBLAS dgemm): ~25 TFLOP/s measured (float64 GEMM is ~50 TFLOP/s nominal on an H200).
    "flops": 25e12,
    # The sketch passes (randomized, Krylov): thin products and n×ℓ QRs, far from peak. The table
    # of issue 40: randomized, 8 passes of 4·n·d·ℓ (ℓ = 20) in 0.30 s at 400 000 × 1000 and 0.34 s
    # at 200 000 × 4000, 0.85–1.5 TFLOP/s, per-pass latencies included.
    "sketch-flops": 1.5e12,
    # cuSOLVER syevd, counted as EIGH_FLOPS·m³. Measured on an H200 (CuPy 14.2, 2026-11-27), every
    # pair of an m×m float64 matrix: 4.7 ms at m = 500, 11 ms at 1000, 26 ms at 2000, 57 ms at 3000
    # — ~4.5e12 "flops"/s past a fixed cost of a few ms.
    "eigh-flops": 4.5e12,
    # cuSOLVER gesvd (Σ and V), counted as SVD_FLOPS·m³: 0.12 s at m = 1000, 0.38 s at 2000,
    # 0.85 s at 3000 (same run) — ~4e11 past its larger fixed cost, which the rule leaves out (the
    # host's SVD is 2–4× slower than the device's at every measured size).
    "svd-flops": 4e11,
    # What starting a dense solve on the device costs whatever its size (launches, workspace,
    # the synchronisation that brings its eigenvalues back): syevd's at m = 500, less its flops.
    "solve-seconds": 0.004,
    # LAPACK on the host (NumPy's OpenBLAS, 16 cores of the same machine), the same counts: eigh
    # 22 ms at m = 500, 80 ms at 1000, 0.41 s at 2000, 1.17 s at 3000 (1.1–2.1e11 "flops"/s).
    "host-eigh-flops": 1.5e11,
    # LAPACK gesdd on the host (Σ and V): 0.26 s at m = 1000, 1.4 s at 2000, 3.6 s at 3000.
    "host-svd-flops": 7e10,
    # Host ↔ device copies (PCIe 5, pageable host memory): ~20 GB/s.
    "transfer-bytes": 20e9,
}

#: Flops of a dense symmetric eigensolver with every vector (tridiagonalisation, divide and
#: conquer, back-transformation), per m³ of an m×m matrix.
EIGH_FLOPS = 9
#: Flops of the SVD of an m×m matrix for Σ and V (Golub–Van Loan's count for R-SVD without U).
SVD_FLOPS = 12


def rate(key: str) -> float:
    """``RATES[key]``, or the dask config's ``daskpca.device.<key>`` when set."""
    return float(dask.config.get(f"daskpca.device.{key}", RATES[key]))


def solve_on_device(backend: ArrayBackend, size: int, kind: str = "eigh") -> bool:
    """Whether an m×m (``size``) ``kind`` problem ("eigh" or "svd") whose matrix lives on
    ``backend``'s device is cheaper solved there than moved to the host and solved by LAPACK.

    The rule: on the host, ``EIGH_FLOPS·m³`` (``SVD_FLOPS``) at ``host-eigh-flops``
    (``host-svd-flops``) plus 8·m² bytes at ``transfer-bytes``; on the device, ``solve-seconds``
    plus the flops at ``eigh-flops`` (``svd-flops``). With :data:`RATES` (measured on an H200) the
    device wins from m ≈ 420 for eigh and m ≈ 300 for the SVD. Host blocks: always False.
    """
    if backend.on_host:
        return False
    flops = (EIGH_FLOPS if kind == "eigh" else SVD_FLOPS) * float(size) ** 3
    host = flops / rate(f"host-{kind}-flops") + FLOAT64_BYTES * float(size) ** 2 / rate("transfer-bytes")
    device = rate("solve-seconds") + flops / rate(f"{kind}-flops")
    return device < host


FLOAT64_BYTES = 8

#: Fan-in of the merge trees whose partials live on a device (covariance, TSQR): adding d×d
#: matrices there costs microseconds, so fewer, wider merges (8 at a time: a 16-block fit has 3
#: merge tasks instead of 15) save the per-task costs (scheduling, a synchronisation each).
DEVICE_SPLIT_EVERY = 8


def device_memory(backend: ArrayBackend) -> tuple[int, int] | None:
    """``backend.memory()``, or None where it cannot be read here (a client process without the
    workers' GPU builds the graph)."""
    try:
        return backend.memory()
    except Exception:  # CUDARuntimeError and the like: no device in this process
        return None


def device_fan_in(task_bytes: int | None, host_fan_in: int, part_bytes: int, copies: int = 2) -> int:
    """:data:`DEVICE_SPLIT_EVERY`, halved (to ``host_fan_in`` at least) while a merge's
    ``copies``·fan-in + 1 partials of ``part_bytes`` exceed ``task_bytes`` (one task's share of
    the device, :func:`~daskpca.passes._geometry.device_task_bytes`; None: unknown, no limit).
    Sized from the task budget, not the whole device: merges run side by side, one a thread
    (TSQR's 8000-wide R factors merged 8 at a time need 12 GiB a task, more than an H200's
    4.4 GiB a thread; 2 at a time, 3.5 GiB)."""
    room = task_bytes if task_bytes else float("inf")
    fan_in = DEVICE_SPLIT_EVERY
    while fan_in > host_fan_in and (copies * fan_in + 1) * part_bytes > room:
        fan_in //= 2
    return max(fan_in, host_fan_in)


def register(backend: ArrayBackend) -> ArrayBackend:
    """Recognise ``backend``'s arrays in every kernel (once; returns it)."""
    if all(type(b) is not type(backend) for b in BACKENDS):
        BACKENDS.append(backend)
    return backend


def backend_of(array) -> ArrayBackend:
    """The backend whose array ``array`` is (NumPy for Python scalars and anything unknown)."""
    if isinstance(array, (np.ndarray, np.generic)):
        return NUMPY
    for backend in BACKENDS[1:]:
        if backend.owns(array):
            return backend
    return NUMPY


def namespace(array):
    """``array``'s array namespace (``numpy``, ``cupy``, ...)."""
    return backend_of(array).xp


def like(host, block):
    """``host`` (a NumPy array, or None) on the device ``block`` lives on: itself for a host block
    (no copy), else one transfer (a d×ℓ test matrix, a d-vector: small next to the block)."""
    if host is None:
        return None
    backend = backend_of(block)
    return host if backend.on_host else backend.asarray(host)


def to_host(value):
    """``value`` with every device array in it copied to host memory.

    Walks the containers the passes return: arrays, dataclasses (the partial results of a
    reduction), tuples, lists and dicts. Host values are returned as they are (the same objects:
    a NumPy fit is untouched), so it is free where nothing lives on a device.
    """
    if isinstance(value, (np.ndarray, np.generic, int, float, str, bool, type(None))):
        return value
    backend = backend_of(value)
    if backend is not NUMPY:
        return backend.to_host(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for f in dataclasses.fields(value):
            old = getattr(value, f.name)
            new = to_host(old)
            if new is not old and f.init:
                changes[f.name] = new
        return dataclasses.replace(value, **changes) if changes else value
    if isinstance(value, (tuple, list)):
        items = [to_host(v) for v in value]
        if all(a is b for a, b in zip(items, value)):
            return value
        return type(value)(items) if not hasattr(value, "_fields") else type(value)(*items)
    if isinstance(value, dict):
        items = {k: to_host(v) for k, v in value.items()}
        return value if all(items[k] is value[k] for k in value) else items
    return value


def on_device(matrix) -> ArrayBackend:
    """The backend of a dask array's chunks (from its ``meta``: reads nothing)."""
    return backend_of(getattr(matrix, "_meta", None))


def meta_of(matrix, dtype=None, ndim: int = 2):
    """dask's ``meta`` for a result computed from ``matrix``'s chunks: an empty array of the same
    library (``dtype`` default: ``matrix``'s)."""
    return on_device(matrix).meta(matrix.dtype if dtype is None else dtype, ndim)


def require(device) -> ArrayBackend | None:
    """The backend ``device=`` names, checked before any read (None for the host: ``None``/"cpu").

    Raises
    ------
    InputError
        For a name that is not a device, or a device that cannot run here (CuPy or the GPU
        missing), naming the value and the fix.
    """
    if device is None or device == "cpu":
        return None
    factory = DEVICES.get(device) if isinstance(device, str) else None
    if factory is None:
        raise InputError(f"device={device!r:.60}: expected None, 'cpu' or 'cuda'.")
    backend = factory()
    problem = backend.problem()
    if problem is not None:
        raise InputError(
            f"device={device!r} moves every block to a CUDA GPU and needs CuPy and a CUDA GPU, but "
            f"{problem}. Install CuPy for your CUDA version (e.g. pip install cupy-cuda12x) on a "
            "machine (and dask workers) with a GPU, or fit on the CPU with device=None.")
    return register(backend)


def _moved(block, backend: ArrayBackend):
    """One block moved to ``backend``'s device (a device block is kept as it is)."""
    return block if backend.owns(block) else backend.asarray(block)


def moved_from_host(matrix) -> bool:
    """Whether ``matrix`` is host data that :func:`to_device` moves up in its read tasks (its last
    layer is that move), rather than chunks that live on the device already."""
    return any(matrix.name.startswith(f"to-{name}-") for name in DEVICES)


def to_device(matrix, device):
    """``matrix`` with each block moved to ``device`` inside the task that reads it.

    A ``map_blocks`` after the read: dask fuses it into the read's task, so each block is
    decoded on the host and copied to the device at once (a zarr store larger than the GPU's
    memory streams through it). ``device`` None or "cpu", or a matrix already on that device:
    ``matrix`` itself. Checks the device first (:func:`require`).
    """
    backend = require(device)
    if backend is None or backend.owns(matrix._meta):
        return matrix
    return matrix.map_blocks(_moved, backend, dtype=matrix.dtype, meta=backend.meta(matrix.dtype, matrix.ndim),
                             token=f"to-{device}")
