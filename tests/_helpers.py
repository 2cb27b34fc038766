"""Shared test helpers: reference PCA, data with known structure, chunk-read counting."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from collections import Counter
from functools import lru_cache

import numpy as np
import zarr
from scipy.linalg import subspace_angles
from zarr.storage import LocalStore, WrapperStore


def low_rank_data(n, d, *, rank=5, noise=0.05, offset=1e4, dtype=np.float64, seed=0):
    """Low-rank-plus-noise data with a large mean offset (exposes cancellation).

    The rank-``rank`` signal has well-separated variances (10, 5, 2.5, ...) so that the leading
    components are well determined; the noise makes every component non-degenerate.
    """
    rng = np.random.default_rng(seed)
    scales = 10.0 * 0.5 ** np.arange(rank)
    basis, _ = np.linalg.qr(rng.standard_normal((d, rank)))
    scores = rng.standard_normal((n, rank)) * scales
    X = scores @ basis.T + noise * rng.standard_normal((n, d)) + offset * (1 + rng.random(d))
    return X.astype(dtype)


def reference_pca(X):
    """Float64 LAPACK reference: SVD of the centered data.

    Returns components (min(n,d) × d), explained variance (ddof=1) and the mean.
    """
    X = np.asarray(X, dtype=np.float64)
    mean = X.mean(axis=0)
    _, s, vt = np.linalg.svd(X - mean, full_matrices=False)
    return vt, s**2 / (X.shape[0] - 1), mean


def spectral_data(variances, n, d, seed=0):
    """Data whose centered scatter has exactly ``variances`` (times n − 1) as eigenvalues."""
    rng = np.random.default_rng(seed)
    u = np.linalg.qr(rng.standard_normal((n, variances.size)))[0]
    u = np.linalg.qr(u - u.mean(axis=0))[0]
    v = np.linalg.qr(rng.standard_normal((d, variances.size)))[0]
    return (u * np.sqrt(variances * (n - 1))) @ v.T + rng.random(d)


def sin_theta(A, B):
    """Sine of the largest principal angle between the row spaces of A and B (k × d each)."""
    return float(np.sin(np.max(subspace_angles(np.asarray(A).T, np.asarray(B).T))))


def align_signs(components, reference):
    """Flip rows of ``components`` to best match ``reference`` (for element-wise comparison)."""
    signs = np.sign(np.sum(components * reference, axis=1))
    signs[signs == 0] = 1
    return components * signs[:, None], signs


class CountingStore(WrapperStore):
    """A zarr store that counts reads of each chunk key (data keys contain ``/c/``).

    Counting happens in the process that reads, so use it with the threaded or synchronous
    scheduler.
    """

    def __init__(self, store):
        super().__init__(store)
        self.reads = Counter()
        self._lock = threading.Lock()

    async def get(self, key, prototype, byte_range=None):
        if "c/" in key or key.startswith("c"):
            with self._lock:
                self.reads[key] += 1
        return await self._store.get(key, prototype, byte_range)

    def chunk_reads(self) -> Counter:
        return Counter({k: v for k, v in self.reads.items() if "/c/" in "/" + k})


#: Relative tolerance for one number reached by two roads: a saved-and-loaded model against the
#: fitted one (the loaded arrays may differ in memory layout and alignment, and OpenBLAS picks a
#: different kernel — and summation order — for them), or a fixture computed on another machine
#: (another CPU, another OpenBLAS kernel). Each score is a dot product of d ≲ 10⁴ terms, so the
#: two differ by a few ulps times √d at most: ~1e-13 relative to the largest score; 1e-12 leaves
#: room and still catches any change of the arithmetic itself (a different mean, weight or
#: component moves scores by far more).
ROUNDING_RTOL = 1e-12


def assert_equal_up_to_rounding(got, want, rtol: float = ROUNDING_RTOL):
    """``got`` equals ``want`` up to the last bits that the BLAS kernel decides.

    For comparisons of two roads to one number (see :data:`ROUNDING_RTOL`); where the claim is
    "the same arithmetic in the same order in one process", compare exactly instead. NaNs must
    sit in the same places; the tolerance is relative to the largest finite entry of ``want``
    (scores near zero carry the rounding of the large terms they were summed from).
    """
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = want[np.isfinite(want)]
    scale = float(np.max(np.abs(finite))) if finite.size else 0.0
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale, equal_nan=True)


def assert_identical_up_to_rounding(got, want, rtol: float = ROUNDING_RTOL):
    """Two xarray objects with identical dims, coords, names and attrs, and values equal up to
    rounding (:func:`assert_equal_up_to_rounding`)."""
    import xarray as xr

    assert_equal_up_to_rounding(got.values, want.values, rtol)
    xr.testing.assert_identical(got.copy(data=want.values), want)


def write_zarr(path, X, chunks):
    """Write ``X`` to a zarr v3 array on disk; return the array opened read-only via a CountingStore."""
    array = zarr.create_array(store=str(path), shape=X.shape, chunks=chunks, dtype=X.dtype)
    array[...] = X
    store = CountingStore(LocalStore(str(path), read_only=True))
    return zarr.open_array(store=store, mode="r"), store


#: Run in one fresh interpreter: the exit code and stdout of ``daskpca --help`` and of ``daskpca
#: SUBCOMMAND --help`` for every subcommand the top-level help lists, as JSON.
_EVERY_HELP = """
import contextlib, io, json, sys
sys.path.insert(0, sys.argv[1])
from _helpers import subcommand_names
from daskpca.cli.command import main

def run(*subcommand):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            code = main([*subcommand, "--help"])
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
    return code, out.getvalue()

helps = {"": run()}
for name in sorted(subcommand_names(helps[""][1])):
    helps[name] = run(name)
print(json.dumps(helps))
"""


@lru_cache(maxsize=None)
def _every_help() -> dict:
    """``--help`` of the real CLI and of each of its subcommands, from one interpreter start (one
    per subcommand cost 2-4 s of CPU each)."""
    from pathlib import Path

    done = subprocess.run([sys.executable, "-c", _EVERY_HELP, str(Path(__file__).parent)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return {name: tuple(value) for name, value in json.loads(done.stdout).items()}


@lru_cache(maxsize=None)
def cli_help(*subcommand: str) -> tuple[int, str]:
    """Exit code and stdout of the real ``daskpca [SUBCOMMAND] --help`` (its ``main``, in a fresh
    interpreter; a name the CLI does not list gets its own ``python -m daskpca.cli`` run)."""
    key = " ".join(subcommand)
    if key in _every_help():
        return _every_help()[key]
    done = subprocess.run([sys.executable, "-m", "daskpca.cli", *subcommand, "--help"],
                          capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout


def subcommand_names(text: str) -> set[str]:
    """Subcommand names in argparse's top-level help: ``{a,b}`` or one indented name per line."""
    names = set()
    match = re.search(r"\{([\w,-]+)\}", text)
    if match:
        names |= set(match.group(1).split(","))
    names |= set(re.findall(r"^    ([a-z][\w-]*)(?:\s|$)", text, flags=re.M))
    return names


def cli_subcommands() -> set[str]:
    """Subcommand names in the real CLI's top-level help."""
    return subcommand_names(cli_help()[1])


def largest_task_bytes(graph, result_type, warm_up) -> int:
    """Peak traced memory of the largest task of ``graph`` that returns ``result_type``, inputs
    included (sync scheduler, so one task runs at a time)."""
    import tracemalloc

    import dask
    from dask.callbacks import Callback
    from dask.sizeof import sizeof

    peaks = {}

    class PerTask(Callback):
        def _pretask(self, key, dsk, state):
            inputs = [state["cache"][k] for k in dask.core.get_dependencies(dsk, key) if k in state["cache"]]
            self.start = tracemalloc.get_traced_memory()[0] - sum(sizeof(x) for x in inputs)
            tracemalloc.reset_peak()

        def _posttask(self, key, result, dsk, state, id):
            if isinstance(result, result_type):
                peaks[key] = tracemalloc.get_traced_memory()[1] - self.start

    with dask.config.set(scheduler="sync"):
        dask.compute(warm_up)  # imports and caches are not the solver's
        tracemalloc.start()
        try:
            with PerTask():
                dask.compute(graph)
        finally:
            tracemalloc.stop()
    return max(peaks.values())
