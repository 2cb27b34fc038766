"""Every solver road on one GPU against the machine's CPU cores and a hand-written CuPy floor, in
one unattended run (issue 40).

Run from the repository root (on the device machine after the wheels: benchmarks/README.md, GPU)::

    python -m benchmarks.gpu --out $OUT              # the full run: ≤ ~5 min on one H200 + 16 cores
    python -m benchmarks.gpu --smoke                 # tiny sizes; NumPy stands in for CuPy if absent
    python -m benchmarks.gpu --cases a,c --roads covariance,gram,krylov --budget-s 120

Cases (float32, k = 20, the planted spectrum of :mod:`benchmarks.cases`: 30 modes with singular
values 20·0.92^i per row over white noise of 0.1, per-feature means U(10, 15); so the top 20 are
separated by λᵢ₊₁/λᵢ ≤ 0.85 and the exact subspace is well defined). Generated on the GPU
(``cupy.random``), the CPU copy by ``.get()``:

- ``a``: 400 000 × 1 000 resident on the GPU, 16 row blocks of 25 000 (1.6 GB);
- ``b``: 200 000 × 8 000 resident, 16 row blocks of 12 500 (6.4 GB; compute-bound: the covariance
  is n·d² = 1.3·10¹³ multiply-adds);
- ``c``: 2 000 × 200 000 resident, 16 column strips of 12 500 (wide: the Gram road);
- ``d``: case a's host copy written to a zarr v3 store on local disk (zstd level 1, 16 chunks of
  25 000 rows), fitted from its path with ``PCA(..., device="cuda")``.

Rows, per case: the floors, then each road — ``covariance`` (tall) or ``gram`` (wide), ``tsqr``
(tall), ``randomized``, ``krylov`` (default tol) and ``krylov tol=1e-4``, ``als``, ``ppca``,
``auto`` — and ``transform`` (of the exact road's model, computed to one array). Columns:

- **GPU s**: ``PCA(20, solver=..., random_state=0).fit(X)`` on the dask array of CuPy blocks (d:
  the store's path with ``device="cuda"``), ``cupy.cuda.Device().synchronize()`` before and after.
  Every road and floor ran once on small arrays first (the warm-up), so CuPy's kernel compiles,
  cuBLAS/cuSOLVER handles and plan caches are not timed. The floors, the exact and ``auto`` GPU
  fits and the GPU transform run ``--repeat`` times (2) and the fastest counts: the first fit of
  a large case also grows CuPy's memory pool (cudaMalloc of every task's float64 block: b's
  covariance took 2.2 s once, 1.2 s as ``auto`` right after); every time is in the JSON;
- **CPU s**: the same fit on the host copy (NumPy blocks; d: the path, no device), dask's threaded
  scheduler with one thread per core (both columns run under it);
- **floor s**: a, b: blockwise float64 XᵀX of the float32 blocks + ``cupy.linalg.eigh`` (the
  floor of any exact one-pass PCA, its mean correction included); c: float64 X̃X̃ᵀ over the
  column strips + ``eigh`` + the second pass X̃ᵀU; d: the host decode floor (the store read at
  its chunking and summed, no PCA: the faster of zarr's and zarrs' codec pipelines). The
  ``transform`` row's floor is the hand-written blockwise (X − μ)·Cᵀ;
- **GPU/floor**, **CPU/GPU**: ratios within this run;
- **sin θ**: the sine of the largest principal angle between the GPU fit's 20-dimensional
  subspace and the reference one, in float64: the CPU fit of the case's exact road (c:
  ``gram``, else ``covariance``; d: its own, else a's — same data), else the GPU floor's float64
  answer (the JSON's ``sin_ref`` names which). The transform row's note gives ‖T_GPU − T_CPU‖/‖T_CPU‖;
- **bound**: the GPU fit's ``error_bound_`` (0 for exact roads, NaN where none is computed);
- **passes**, **note**: ``n_passes_``; ``solver_`` where ``auto`` chose, errors, skips.

Order of work, and the budget. ``--budget-s`` (default 280 s, counted from the start of the
script) bounds the whole run: once spent, every remaining row is skipped, and listed with the
reason. The GPU phase goes first (warm-up; then per case a, c, b, d: data, floors, every road,
transform), then the CPU phase: the reference fits (a's covariance, c's gram), b's covariance
(~140 s on 16 cores), then every other CPU fit, cheapest case first. A CPU fit of b is skipped
when its estimate — the same road's CPU time on a scaled by the work (n·d² for the exact
roads, n·d × the passes the GPU fit made for the others) — is more than the time left: so b's
``tsqr`` (2× the covariance's flops) never starts a fit it cannot finish. A watchdog ends the
process (exit 3) ``--grace-s`` after the budget if a row is still running then, with the JSON
written. Every fit is wrapped: one road's failure is its row's error, and the rest still run.

Output: the table (Markdown) on stdout, progress lines as each row ends, and the JSON of every
figure (rewritten after each row, so a killed run leaves what it measured) to ``--out DIR``
(default ``$OUT`` if set, else ``benchmarks/results``) as ``gpu-<date>.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .tables import markdown_table

#: The planted spectrum of benchmarks.cases (its Case defaults): rank, singular values, noise, means.
RANK, TOP_SINGULAR, DECAY, NOISE, MEAN_LOW = 30, 20.0, 0.92, 0.1, 10.0

#: Every road a case can take: the table's name → PCA parameters (besides n_components and the seed).
ROADS = {
    "covariance": {"solver": "covariance"},
    "gram": {"solver": "gram"},
    "tsqr": {"solver": "tsqr"},
    "randomized": {"solver": "randomized"},
    "krylov": {"solver": "krylov"},
    "krylov tol=1e-4": {"solver": "krylov", "tol": 1e-4},
    "als": {"solver": "als"},
    "ppca": {"solver": "ppca"},
    "auto": {"solver": "auto"},
}
TALL_ROADS = ["covariance", "tsqr", "randomized", "krylov", "krylov tol=1e-4", "als", "ppca", "auto"]
# No covariance (d×d = 320 GB) and no tsqr (its R factors are d wide) for the wide case.
WIDE_ROADS = ["gram", "randomized", "krylov", "krylov tol=1e-4", "als", "ppca", "auto"]
#: Roads whose work is n·d² (exact, one pass) rather than n·d·k per pass: the CPU estimates' scaling.
EXACT_ROADS = {"covariance", "gram", "tsqr"}
#: Roads that iterate to tol = 1e-8 (~100 passes here): run after every other road of both sides.
ITERATIVE_ROADS = {"als", "ppca"}


@dataclass(frozen=True)
class Case:
    """One input: its shape and dask chunks, k, and whether it is fitted from a zarr store."""

    name: str
    title: str
    shape: tuple
    chunks: tuple
    k: int
    store: bool = False  # fitted from a zarr store written from case a's data

    @property
    def wide(self) -> bool:
        return self.shape[0] < self.shape[1]

    @property
    def roads(self) -> list[str]:
        return WIDE_ROADS if self.wide else TALL_ROADS

    @property
    def exact_road(self) -> str:
        return "gram" if self.wide else "covariance"


#: ``--smoke`` and the warm-up: ALS and probabilistic PCA stop after this many iterations (to 1e-8
#: they make ~100 passes, each a dask compute: the smoke run tests the script, not their convergence).
SMOKE_MAX_ITER = 3


def make_cases(smoke: bool) -> dict[str, Case]:
    """The four cases at full size (on one H200), or tiny (``--smoke``: a few seconds on 2 cores)."""
    if smoke:
        a, b, c, k = ((1_000, 30), (500, 30)), ((600, 60), (300, 60)), ((40, 600), (40, 300)), 4
    else:
        a, b, c, k = ((400_000, 1_000), (25_000, 1_000)), ((200_000, 8_000), (12_500, 8_000)), \
            ((2_000, 200_000), (2_000, 12_500)), 20
    return {
        "a": Case("a", "tall, resident", *a, k),
        "b": Case("b", "compute-bound, resident", *b, k),
        "c": Case("c", "wide, resident", *c, k),
        "d": Case("d", "zarr store on disk, device='cuda'", *a, k, store=True),
    }


# ----------------------------------------------------------------------------------------------
# The array module: CuPy, or NumPy standing in for it (--smoke without CuPy)


class Backend:
    """The array module the "GPU" side runs on, with its synchronisation and copy to the host."""

    def __init__(self, smoke: bool):
        try:
            import cupy

            cupy.cuda.runtime.getDeviceCount()
            self.xp, self.name = cupy, "cupy"
        except Exception as error:  # no CuPy, or no device behind it
            if not smoke:
                raise SystemExit(f"CuPy with a GPU is needed for the full run ({type(error).__name__}: {error}); "
                                 "run with --smoke for the NumPy stand-in") from error
            self.xp, self.name = np, "numpy"

    @property
    def gpu(self) -> bool:
        return self.name == "cupy"

    def sync(self) -> None:
        if self.gpu:
            self.xp.cuda.Device().synchronize()

    def to_host(self, array) -> np.ndarray:
        return array.get() if self.gpu and isinstance(array, self.xp.ndarray) else np.asarray(array)

    def describe(self) -> dict:
        if not self.gpu:
            return {"array_module": "numpy (stand-in for cupy)"}
        cp = self.xp
        facts = {"array_module": f"cupy {cp.__version__}"}
        try:  # facts for the record: none of them may stop the run
            free, total = cp.cuda.Device().mem_info
            name = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"]
            facts.update(gpu=name.decode() if isinstance(name, bytes) else str(name),
                         gpu_memory_gib=round(total / 2**30, 1), gpu_free_gib=round(free / 2**30, 1),
                         cuda_runtime=cp.cuda.runtime.runtimeGetVersion(), cuda_driver=cp.cuda.runtime.driverGetVersion())
        except Exception as error:
            facts["gpu_facts_error"] = short(error)
        return facts


# ----------------------------------------------------------------------------------------------
# Data: generated on the device in row blocks (peak: the array + two blocks)


def planted(xp, shape: tuple, seed: int = 12345, step: int = 25_000):
    """X = Z·diag(s)·W + 0.1·E + μ, float32, made on ``xp``'s device block by block.

    Z (n×30), E (n×d) standard normal, W (30×d) standard normal / √d, s_i = 20·0.92^i,
    μ_j ~ U(10, 15): the generator of :mod:`benchmarks.cases` (not its exact numbers: that one
    is keyed per stored block for NumPy). Memory: the array + 2 blocks of ``step`` rows.
    """
    n, d = shape
    rng = xp.random.default_rng(seed)
    weights = rng.standard_normal((RANK, d), dtype=xp.float32)
    weights *= xp.asarray((TOP_SINGULAR * DECAY ** np.arange(RANK) / math.sqrt(d))[:, None], dtype=xp.float32)
    means = MEAN_LOW + 5 * rng.random(d, dtype=xp.float32)
    X = xp.empty((n, d), dtype=xp.float32)
    for start in range(0, n, step):
        stop = min(n, start + step)
        block = rng.standard_normal((stop - start, RANK), dtype=xp.float32) @ weights
        block += NOISE * rng.standard_normal((stop - start, d), dtype=xp.float32)
        block += means
        X[start:stop] = block
    return X


def write_store(host: np.ndarray, path: Path, chunks: tuple) -> Path:
    """``host`` as a zarr v3 array at ``path`` (zstd level 1, ``chunks``), chunks written in parallel."""
    import dask.array as da
    import zarr

    shutil.rmtree(path, ignore_errors=True)
    array = zarr.create_array(store=str(path), shape=host.shape, chunks=chunks, dtype="float32",
                              compressors=zarr.codecs.ZstdCodec(level=1), zarr_format=3)
    da.store(da.from_array(host, chunks=chunks, name=False), array, lock=False)
    return path


# ----------------------------------------------------------------------------------------------
# The hand-written floors


def covariance_floor(xp, X, k: int, step: int):
    """Top-k eigenvectors (k×d) of the covariance of X: blockwise float64 XᵀX of the float32
    blocks (``step`` rows), the mean correction, ``xp.linalg.eigh``. Memory: d×d float64 + a block."""
    n, d = X.shape
    gram, total = xp.zeros((d, d)), xp.zeros(d)
    for start in range(0, n, step):
        block = X[start:start + step].astype(xp.float64)
        gram += block.T @ block
        total += block.sum(axis=0)
    mean = total / n
    values, vectors = xp.linalg.eigh((gram - n * xp.outer(mean, mean)) / (n - 1))
    return vectors[:, ::-1][:, :k].T


def gram_floor(xp, X, k: int, width: int):
    """Top-k principal axes (k×d) of a wide X from the float64 Gram matrix X̃X̃ᵀ over column
    strips of ``width`` (each strip holds every row, so centering it on its own column means is
    exact), ``eigh``, then the second pass X̃ᵀU/√λ. Memory: n×n float64 + a strip."""
    n, d = X.shape
    gram = xp.zeros((n, n))
    for start in range(0, d, width):
        strip = X[:, start:start + width].astype(xp.float64)
        strip -= strip.mean(axis=0)
        gram += strip @ strip.T
    values, vectors = xp.linalg.eigh(gram)
    values, vectors = values[::-1][:k], vectors[:, ::-1][:, :k]
    axes = xp.empty((k, d))
    for start in range(0, d, width):
        strip = X[:, start:start + width].astype(xp.float64)
        strip -= strip.mean(axis=0)
        axes[:, start:start + width] = (vectors.T @ strip) / xp.sqrt(values)[:, None]
    return axes


def transform_floor(xp, X, mean, components, chunks: tuple):
    """Scores (X − μ)·Cᵀ block by block over ``chunks`` (row blocks, column strips summed), in
    float64, returned as float32 like ``PCA.transform`` of float32 input."""
    n, d = X.shape
    mean, components = xp.asarray(mean, dtype=xp.float64), xp.asarray(components, dtype=xp.float64)
    scores = xp.zeros((n, components.shape[0]))
    for r in range(0, n, chunks[0]):
        for c in range(0, d, chunks[1]):
            block = X[r:r + chunks[0], c:c + chunks[1]].astype(xp.float64) - mean[c:c + chunks[1]]
            scores[r:r + chunks[0]] += block @ components[:, c:c + chunks[1]].T
    return scores.astype(xp.float32)


def sin_theta(estimate, reference) -> float:
    """Sine of the largest principal angle between the row spaces of two k×d arrays, float64:
    ‖Q − Q_ref·Q_refᵀQ‖₂ (accurate for small angles, unlike √(1 − cos²))."""
    estimate, reference = np.asarray(estimate, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    if estimate.shape != reference.shape or not np.all(np.isfinite(estimate)):
        return float("nan")
    q, _ = np.linalg.qr(estimate.T)
    q_ref, _ = np.linalg.qr(reference.T)
    return float(np.linalg.norm(q - q_ref @ (q_ref.T @ q), 2))


# ----------------------------------------------------------------------------------------------
# The run's clock, its record and its rows


class Budget:
    """The run's time: what is left of ``seconds``, and a watchdog that writes the record and
    ends the process ``grace`` seconds past the budget if a row is still running then."""

    def __init__(self, seconds: float, grace: float, record: "Record"):
        self.start = time.perf_counter()
        self.seconds, self.grace, self.record = seconds, grace, record
        self.running = "setup"
        self.report = None  # set by main: scores what ended, prints the table (before an overrun's exit too)
        self._stopped = threading.Event()
        threading.Thread(target=self._watch, daemon=True, name="budget-watchdog").start()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def left(self) -> float:
        return self.seconds - self.elapsed()

    def stop(self) -> None:
        """The run ended: the watchdog stands down (a caller in the same process lives on)."""
        self._stopped.set()

    def _watch(self) -> None:
        if self._stopped.wait(max(self.seconds + self.grace, 0)):
            return
        message = (f"budget overrun: {self.seconds:.0f} s + {self.grace:.0f} s grace spent while "
                   f"running '{self.running}'; the record holds every row that ended")
        log(self, message)
        self.record.meta["overrun"] = message
        try:
            if self.report is not None:
                self.report()
        except Exception as error:  # the record is written below whatever happens here
            log(self, f"scoring after the overrun failed: {short(error)}")
        self.record.save()
        os._exit(3)


def log(budget: Budget | None, message: str) -> None:
    stamp = f"[{budget.elapsed():6.1f} s] " if budget else ""
    print(stamp + message, flush=True)


@dataclass
class Row:
    """One line of the table: a road (or floor) of a case, both sides of it, and what it says."""

    case: str
    road: str
    gpu_s: float | None = None
    cpu_s: float | None = None
    floor_s: float | None = None
    sin_theta: float | None = None
    sin_ref: str | None = None
    bound: float | None = None
    passes: int | None = None
    solver: str | None = None
    notes: list = field(default_factory=list)
    gpu_error: str | None = None
    cpu_error: str | None = None
    skipped: list = field(default_factory=list)  # "GPU: reason" / "CPU: reason"
    extra: dict = field(default_factory=dict)  # JSON-only figures

    def json(self) -> dict:
        return finite(dict(self.__dict__))


def finite(value):
    """``value`` with every non-finite float as None (strict JSON), through dicts and lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


class Record:
    """Every row and the run's facts, saved as JSON after each row (a killed run keeps its rows)."""

    def __init__(self, path: Path, meta: dict):
        self.path, self.meta, self.rows = path, meta, []
        self.lock = threading.Lock()

    def find(self, case: str, road: str) -> Row | None:
        return next((r for r in self.rows if r.case == case and r.road == road), None)

    def row(self, case: str, road: str) -> Row:
        found = self.find(case, road)
        if found is None:
            found = Row(case, road)
            self.rows.append(found)
        return found

    def ordered(self) -> list[Row]:
        """The rows as the table shows them: by case (a, c, b, d), floors first, roads in
        :data:`ROADS`' order, transform last (they are made in the order of the work)."""
        def key(row):
            road = (0, 0) if row.road.startswith("floor") else (2, 0) if row.road == "transform" else \
                (1, list(ROADS).index(row.road) if row.road in ROADS else len(ROADS))
            return "acbd".find(row.case), road

        return sorted(self.rows, key=key)

    def save(self) -> None:
        with self.lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            partial = self.path.with_suffix(".json.partial")
            document = finite({**self.meta, "rows": [r.json() for r in self.ordered()]})
            partial.write_text(json.dumps(document, indent=1, default=str, allow_nan=False))
            partial.replace(self.path)


def short(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".replace("\n", " ")
    return text if len(text) <= 160 else text[:157] + "..."


# ----------------------------------------------------------------------------------------------
# The run


class Run:
    """The benchmark's state: backend, cases, data, fitted models, the record and the budget."""

    def __init__(self, args, backend: Backend, record: Record, budget: Budget):
        self.args, self.backend, self.record, self.budget = args, backend, record, budget
        self.cases = make_cases(args.smoke)
        self.selected = [c for c in args.cases.split(",") if c]
        self.roads = None if args.roads in ("", "all") else set(args.roads.split(","))
        self.device_data, self.host_data, self.stores = {}, {}, {}
        self.models = {}  # (case, road, "gpu"|"cpu") → fitted PCA
        self.floors = {}  # case → floor components (host)
        self.gpu_scores = {}  # case → the GPU transform's scores (host)

    # -- plumbing ------------------------------------------------------------------------------

    def timed(self, fn, repeat: int = 1):
        """``fn()`` ``repeat`` times, synchronised: (the last result, the fastest time, every time)."""
        times = []
        for _ in range(repeat):
            self.backend.sync()
            start = time.perf_counter()
            out = fn()
            self.backend.sync()
            times.append(time.perf_counter() - start)
        return out, min(times), times

    def attempt(self, row: Row, side: str, what: str, fn, repeat: int = 1):
        """Run ``fn`` for ``row``'s ``side`` ("GPU", "CPU", "floor") unless the budget is spent,
        ``repeat`` times (the fastest counts; every time goes to the JSON); its error goes to the
        row and the log, never further. Returns (result, seconds) or None."""
        if self.budget.left() <= 0:
            row.skipped.append(f"{side}: budget of {self.args.budget_s:.0f} s spent")
            log(self.budget, f"skip {row.case} {row.road} {side}: budget spent")
            self.record.save()
            return None
        self.budget.running = f"{row.case} {row.road} {side}"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out, seconds, times = self.timed(fn, repeat)
        except Exception as error:  # one road's failure is its row's, the run goes on
            message = short(error)
            if side == "CPU":
                row.cpu_error = message
            else:
                row.gpu_error = message if side == "GPU" else row.gpu_error
                if side == "floor":
                    row.notes.append(f"floor error: {message}")
            row.extra.setdefault("tracebacks", {})[side] = traceback.format_exc(limit=-6)
            log(self.budget, f"{row.case} {row.road} {side} ({what}) FAILED: {message}")
            self.record.save()
            return None
        log(self.budget, f"{row.case} {row.road} {side} ({what}): {seconds:.3f} s"
            + (f" (fastest of {', '.join(f'{t:.3f}' for t in times)})" if repeat > 1 else ""))
        row.extra.setdefault("times", {})[side] = times
        self.record.save()
        return out, seconds

    def pca(self, case: Case, road: str, gpu: bool):
        from daskpca import PCA

        params = dict(ROADS[road], n_components=case.k, random_state=0)
        if (self.args.smoke or case.name == "warm") and road in ITERATIVE_ROADS:
            params["max_iter"] = SMOKE_MAX_ITER  # the warm-up compiles their kernels in 3 iterations
        if case.store and gpu and self.backend.gpu:
            params["device"] = "cuda"  # passed only for CuPy: the NumPy stand-in fits the store on the host
        return PCA(**params)

    def matrix(self, case: Case, gpu: bool):
        """The input of a fit: a dask array over the resident array (CuPy or NumPy blocks), or the store's path."""
        import dask.array as da

        if case.store:
            return str(self.stores[case.name])
        data = (self.device_data if gpu else self.host_data)[case.name]
        # name=False: no hashing of GBs of data (for CuPy it would copy them to the host first)
        return da.from_array(data, chunks=case.chunks, asarray=False, name=False)

    def wanted(self, case: Case) -> list[str]:
        return [r for r in case.roads if self.roads is None or r in self.roads]

    # -- data ----------------------------------------------------------------------------------

    def prepare(self, case: Case) -> bool:
        """The case's data on the device and the host (d: the store, from a's host copy)."""
        source = self.cases["a"] if case.store else case
        try:
            if source.name not in self.host_data:
                self.budget.running = f"{source.name} data"
                (device, host), seconds, _ = self.timed(lambda: self._generate(source))
                self.device_data[source.name], self.host_data[source.name] = device, host
                log(self.budget, f"{source.name}: {source.shape[0]:,} × {source.shape[1]:,} float32 generated on "
                    f"{self.backend.name} and copied to the host in {seconds:.1f} s")
                self.record.meta["setup"][f"{source.name} data s"] = round(seconds, 2)
            if case.store and case.name not in self.stores:
                self.budget.running = f"{case.name} store"
                path = Path(self.args.data_dir) / f"gpu-bench-{case.name}.zarr"
                _, seconds, _ = self.timed(lambda: write_store(self.host_data["a"], path, case.chunks))
                self.stores[case.name] = path
                size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
                log(self.budget, f"{case.name}: store written at {path} in {seconds:.1f} s "
                    f"({size / 2**30:.2f} GiB, ratio {self.host_data['a'].nbytes / size:.2f})")
                self.record.meta["setup"][f"{case.name} store s"] = round(seconds, 2)
                self.record.meta["setup"][f"{case.name} store GiB"] = round(size / 2**30, 3)
        except Exception as error:
            self.record.meta["setup"][f"{case.name} error"] = short(error)
            log(self.budget, f"{case.name}: data FAILED: {short(error)}; its rows are skipped")
            for road in self._all_rows(case):
                self.record.row(case.name, road).skipped.append(f"all: data failed ({short(error)})")
            return False
        return True

    def _generate(self, case: Case):
        device = planted(self.backend.xp, case.shape, step=case.chunks[0] if not case.wide else case.shape[0])
        return device, self.backend.to_host(device)

    # -- the GPU phase -------------------------------------------------------------------------

    def warm_up(self) -> None:
        """Every road, floor and transform once on small arrays (and a small store), untimed in the
        table: CuPy compiles its kernels, cuBLAS and cuSOLVER make their handles on first use."""
        start = time.perf_counter()
        self.budget.running = "warm-up"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the capped ALS / PPCA fits warn that they did not converge
            failures = self._warm_up_fits()
        self.backend.sync()
        seconds = time.perf_counter() - start
        self.record.meta["setup"]["warm-up s"] = round(seconds, 2)
        self.record.meta["warm_up_failures"] = failures
        log(self.budget, f"warm-up: {seconds:.1f} s" + (f", {len(failures)} failed: {failures}" if failures else ""))
        self.record.save()

    def _warm_up_fits(self) -> dict:
        import dask.array as da

        xp = self.backend.xp
        small = {"tall": ((4_000, 64), (1_000, 64)), "wide": ((64, 4_000), (64, 1_000))}
        if self.args.smoke:
            small = {"tall": ((400, 16), (200, 16)), "wide": ((16, 400), (16, 200))}
        failures = {}
        for shape_name, (shape, chunks) in small.items():
            X = planted(xp, shape, seed=1)
            case = Case("warm", shape_name, shape, chunks, 5)
            for road in self.wanted(case):
                try:
                    model = self.pca(case, road, gpu=True).fit(da.from_array(X, chunks=chunks, asarray=False, name=False))
                    if road == case.exact_road:
                        model.transform(da.from_array(X, chunks=chunks, asarray=False, name=False)).compute()
                except Exception as error:
                    failures[f"{shape_name} {road}"] = short(error)
            try:
                axes = gram_floor(xp, X, 5, chunks[1]) if shape_name == "wide" else covariance_floor(xp, X, 5, chunks[0])
                transform_floor(xp, X, X.mean(axis=0), axes, chunks)
            except Exception as error:
                failures[f"{shape_name} floor"] = short(error)
        if "d" in self.selected and self.backend.gpu:
            try:
                shape, chunks = small["tall"]
                path = write_store(self.backend.to_host(planted(xp, shape, seed=2)),
                                   Path(self.args.data_dir) / "gpu-bench-warm.zarr", chunks)
                self.pca(Case("warm", "store", shape, chunks, 5, store=True), "covariance", True).fit(str(path))
            except Exception as error:
                failures["store covariance device='cuda'"] = short(error)
        return failures

    def gpu_case(self, case: Case) -> None:
        xp = self.backend.xp
        if self.budget.left() <= 0:
            for road in self._all_rows(case):
                self.record.row(case.name, road).skipped.append(f"all: budget of {self.args.budget_s:.0f} s spent")
            log(self.budget, f"{case.name}: budget spent, the case is skipped")
            return
        if not self.prepare(case):
            return
        log(self.budget, f"== {case.name} ({case.title}): {case.shape[0]:,} × {case.shape[1]:,}, chunks {case.chunks}, "
            f"k = {case.k}")
        if case.store:
            self._store_floors(case)
        else:
            name = "floor: f64 XXᵀ + eigh + Xᵀu" if case.wide else "floor: f64 XᵀX + eigh"
            row = self.record.row(case.name, name)
            X = self.device_data[case.name]
            done = self.attempt(row, "floor", "hand-written", lambda: self.backend.to_host(
                gram_floor(xp, X, case.k, case.chunks[1]) if case.wide else covariance_floor(xp, X, case.k, case.chunks[0])),
                repeat=self.args.repeat)
            if done:
                self.floors[case.name], row.floor_s = done
        for road in self.wanted(case):
            if road not in ITERATIVE_ROADS:
                self.gpu_fit(case, road)
        self.gpu_transform(case)

    def _all_rows(self, case: Case) -> list[str]:
        """The case's road rows: its roads and, with its exact road (whose model it uses), transform."""
        wanted = self.wanted(case)
        return [*wanted, "transform"] if case.exact_road in wanted else wanted

    def has_data(self, case: Case) -> bool:
        return case.name in self.stores if case.store else case.name in self.device_data

    def _store_floors(self, case: Case) -> None:
        """The host decode floor: the store read at its chunking and summed (zarr's pipeline,
        then zarrs'); then the same read moved to the GPU block by block."""
        import dask.array as da
        import zarr

        path = str(self.stores[case.name])
        row = self.record.row(case.name, "floor: host decode (zarr)")
        done = self.attempt(row, "floor", "read + sum", lambda: da.from_zarr(path).sum().compute(), repeat=self.args.repeat)
        if done:
            row.floor_s = done[1]
        row = self.record.row(case.name, "floor: host decode (zarrs)")

        def zarrs_read():
            with zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"}):
                return da.from_zarr(path).sum().compute()

        done = self.attempt(row, "floor", "read + sum", zarrs_read, repeat=self.args.repeat)
        if done:
            row.floor_s = done[1]
        if self.backend.gpu:
            row = self.record.row(case.name, "floor: decode + to GPU")
            cp = self.backend.xp
            done = self.attempt(row, "floor", "read, cupy.asarray, sum on the GPU",
                                lambda: float(da.from_zarr(path).map_blocks(cp.asarray).sum().compute()),
                                repeat=self.args.repeat)
            if done:
                row.floor_s = done[1]

    def gpu_fit(self, case: Case, road: str) -> None:
        if not self.has_data(case):
            return  # skipped or failed with its data: said in its rows
        row = self.record.row(case.name, road)
        repeat = self.args.repeat if road in EXACT_ROADS or road == "auto" else 1
        done = self.attempt(row, "GPU", "fit", lambda: self.pca(case, road, gpu=True).fit(self.matrix(case, gpu=True)),
                            repeat=repeat)
        if not done:
            return
        model, row.gpu_s = done
        self.models[(case.name, road, "gpu")] = model
        row.passes, row.solver = getattr(model, "n_passes_", None), getattr(model, "solver_", None)
        row.bound = float(getattr(model, "error_bound_", float("nan")))
        if road == "auto":
            row.notes.append(f"chose {row.solver}")
        kind = type(model.components_).__module__.split(".")[0]
        if kind != "numpy":
            row.notes.append(f"components_ is {kind} (NumPy expected)")
        if self.backend.gpu:  # what CuPy's pool holds after the fit: the peak of this run so far
            row.extra["gpu_pool_gib"] = round(self.backend.xp.get_default_memory_pool().total_bytes() / 2**30, 2)
        row.extra["gpu_fit_seconds"] = float(getattr(model, "fit_seconds_", float("nan")))
        row.extra["gpu_pass_seconds"] = [float(s) for s in getattr(model, "pass_seconds_", [])]
        self.record.save()

    def gpu_transform(self, case: Case) -> None:
        if self.roads is not None and case.exact_road not in self.roads:
            return
        row = self.record.row(case.name, "transform")
        model, done = self.transform_with(case, row, gpu=True)
        if model is None:
            return
        if done:
            scores, row.gpu_s = done
            row.extra["gpu_scores_type"] = type(scores).__module__.split(".")[0]
            self.gpu_scores[case.name] = self.backend.to_host(scores)
        if not case.store:
            xp, X = self.backend.xp, self.device_data[case.name]
            done = self.attempt(row, "floor", "blockwise (X − μ)·Cᵀ",
                                lambda: transform_floor(xp, X, model.mean_, model.components_, case.chunks),
                                repeat=self.args.repeat)
            if done:
                row.floor_s = done[1]

    def transform_with(self, case: Case, row, *, gpu: bool):
        """``(model, attempt)``: the case's exact model of that side transforming its data, timed
        into ``row`` (the model None, with the row's error said, when that fit gave none)."""
        side = "GPU" if gpu else "CPU"
        model = self.models.get((case.name, case.exact_road, side.lower()))
        if model is None:
            setattr(row, f"{side.lower()}_error", f"no {side} model of {case.exact_road} to transform with")
            return None, None
        return model, self.attempt(row, side, f"{case.exact_road} model, .compute()",
                                   lambda: model.transform(self.matrix(case, gpu=gpu)).compute(),
                                   repeat=self.args.repeat if gpu else 1)

    # -- the CPU phase -------------------------------------------------------------------------

    def steps(self) -> list[tuple[str, object]]:
        """The run's work in the order of what it teaches, each a (label, callable):

        1. the warm-up; 2. per case (a, c, b, d) its data, floors, the GPU fits of the one-shot
        and few-pass roads and the transform; 3. the CPU reference fits (a's covariance, c's
        gram), then b's covariance; 4. the other CPU fits of a, c and d but ALS and PPCA; 5. the
        GPU fits of ALS and PPCA (~100 passes each to their 1e-8); 6. their CPU fits on a, c, d;
        7. b's other CPU fits, each estimated from a's before it starts, the iterative ones last.
        """
        cases = [self.cases[name] for name in ("a", "c", "b", "d") if name in self.selected]
        steps = [("warm-up", self.warm_up)]
        steps += [(f"{case.name} GPU", lambda case=case: self.gpu_case(case)) for case in cases]
        cpu = [(case, case.exact_road) for case in cases if not case.store and case.exact_road in self.wanted(case)]
        cpu += [(case, road) for case in cases if case.name != "b"
                for road in self._all_rows(case) if road not in ITERATIVE_ROADS and (case, road) not in cpu]
        steps += [(f"{case.name} {road} CPU", lambda case=case, road=road: self.cpu_row(case, road)) for case, road in cpu]
        steps += [(f"{case.name} {road} GPU", lambda case=case, road=road: self.gpu_fit(case, road))
                  for case in cases for road in self.wanted(case) if road in ITERATIVE_ROADS]
        late = [(case, road) for case in cases if case.name != "b" for road in self.wanted(case) if road in ITERATIVE_ROADS]
        late += sorted(((case, road) for case in cases if case.name == "b" for road in self._all_rows(case)
                        if (case, road) not in cpu), key=lambda item: item[1] in ITERATIVE_ROADS)
        steps += [(f"{case.name} {road} CPU", lambda case=case, road=road: self.cpu_row(case, road)) for case, road in late]
        return steps

    def estimate(self, case: Case, road: str) -> tuple[float, str] | None:
        """b's CPU seconds from a's: the same road's CPU time × the work ratio (n·d² for exact
        roads, n·d × the GPU fits' passes for the others). None when there is nothing to scale."""
        if case.name != "b":
            return None
        on_a, on_b = self.record.find("a", road), self.record.find("b", road)
        measured = on_a.cpu_s if on_a else None
        if not measured:
            return None
        (n_a, d_a), (n_b, d_b) = self.cases["a"].shape, case.shape
        solver = (on_b.solver if on_b else None) or road
        if solver in EXACT_ROADS:
            ratio = n_b * d_b**2 / (n_a * d_a**2)
        else:
            passes_a = on_a.passes or 1
            passes_b = (on_b.passes if on_b else None) or passes_a
            ratio = n_b * d_b / (n_a * d_a) * passes_b / passes_a
        return measured * ratio, f"a's {measured:.1f} s × {ratio:.1f}"

    def cpu_row(self, case: Case, road: str) -> None:
        if not self.has_data(case):
            return  # its data never came (skipped or failed: said in its rows)
        row = self.record.row(case.name, road)
        guess = self.estimate(case, road)
        if guess is not None:
            row.extra["cpu_estimate_s"] = round(guess[0], 1)
            if guess[0] > self.budget.left():
                reason = f"CPU: estimated {guess[0]:.0f} s ({guess[1]}) > {max(self.budget.left(), 0):.0f} s left"
                row.skipped.append(reason)
                log(self.budget, f"skip {case.name} {road} {reason}")
                self.record.save()
                return
        if road == "transform":
            _, done = self.transform_with(case, row, gpu=False)
            if done:
                scores, row.cpu_s = done
                gpu_scores = self.gpu_scores.get(case.name)
                if gpu_scores is not None and gpu_scores.shape == scores.shape:
                    difference = np.linalg.norm(gpu_scores - scores) / np.linalg.norm(scores)
                    row.extra["scores_relative_difference"] = float(difference)
                    row.notes.append(f"‖T_GPU − T_CPU‖/‖T_CPU‖ = {difference:.1e}")
            return
        done = self.attempt(row, "CPU", "fit", lambda: self.pca(case, road, gpu=False).fit(self.matrix(case, gpu=False)))
        if done:
            model, row.cpu_s = done
            self.models[(case.name, road, "cpu")] = model
            row.extra["cpu_passes"] = getattr(model, "n_passes_", None)
            row.extra["cpu_solver"] = getattr(model, "solver_", None)

    # -- the answers ---------------------------------------------------------------------------

    def reference(self, case: Case):
        """The subspace a case's fits are scored against, and its name: the CPU fit of the exact
        road, else (d) a's, else the GPU floor's float64 answer (d: a's floor)."""
        for name in ([case.name, "a"] if case.store else [case.name]):
            model = self.models.get((name, self.cases[name].exact_road, "cpu"))
            if model is not None:
                return np.asarray(model.components_), f"CPU {self.cases[name].exact_road} of {name}"
        for name in ([case.name, "a"] if case.store else [case.name]):
            if name in self.floors:
                return self.floors[name], f"GPU floor of {name} (float64 eigh)"
        return None, None

    def score(self) -> None:
        for case in self.cases.values():
            if case.name not in self.selected:
                continue
            reference, name = self.reference(case)
            if reference is None:
                continue
            for row in self.record.rows:
                if row.case != case.name:
                    continue
                if row.road.startswith("floor") and case.name in self.floors and row.floor_s is not None:
                    row.sin_theta, row.sin_ref = sin_theta(self.floors[case.name], reference), name
                gpu = self.models.get((case.name, row.road, "gpu"))
                if gpu is not None:
                    row.sin_theta, row.sin_ref = sin_theta(self.backend.to_host(gpu.components_), reference), name
                cpu = self.models.get((case.name, row.road, "cpu"))
                if cpu is not None:
                    row.extra["cpu_sin_theta"] = sin_theta(cpu.components_, reference)
                    if gpu is not None:
                        row.extra["sin_theta_gpu_vs_cpu_same_road"] = sin_theta(
                            self.backend.to_host(gpu.components_), cpu.components_)
        self.record.save()

    def case_floor(self, case: str) -> float | None:
        """The floor a case's road rows are divided by (d: the faster host decode)."""
        floors = [r.floor_s for r in self.record.rows if r.case == case and r.road.startswith("floor")
                  and r.road != "floor: decode + to GPU" and r.floor_s]
        return min(floors) if floors else None


# ----------------------------------------------------------------------------------------------
# The table


HEADER = ["road", "case", "GPU s", "CPU s", "floor s", "GPU/floor", "CPU/GPU", "sin θ", "bound", "passes", "note"]


def table_rows(run: Run) -> list[list[str]]:
    def num(x, f=".3f"):
        return "" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, f)

    out = []
    for row in run.record.ordered():
        floor = row.floor_s if row.road.startswith("floor") or row.road == "transform" else run.case_floor(row.case)
        notes = list(row.notes)
        if row.gpu_error:
            notes.append(f"GPU error: {row.gpu_error}")
        if row.cpu_error:
            notes.append(f"CPU error: {row.cpu_error}")
        notes += [f"skipped {s}" for s in row.skipped]
        out.append([
            row.road, row.case,
            "error" if row.gpu_error else num(row.gpu_s),
            "error" if row.cpu_error else num(row.cpu_s),
            num(floor),
            num(row.gpu_s / floor, ".2f") if row.gpu_s and floor else "",
            num(row.cpu_s / row.gpu_s, ".1f") if row.cpu_s and row.gpu_s else "",
            "" if row.sin_theta is None else ("nan" if not math.isfinite(row.sin_theta) else f"{row.sin_theta:.1e}"),
            "" if row.bound is None else ("nan" if not math.isfinite(row.bound) else f"{row.bound:.1e}"),
            "" if row.passes is None else str(row.passes),
            "; ".join(notes),
        ])
    return out


# ----------------------------------------------------------------------------------------------


def machine(backend: Backend, args) -> dict:
    import psutil

    versions = {}
    for module in ["numpy", "scipy", "dask", "distributed", "zarr", "zarrs", "numcodecs", "xarray", "cupy", "daskpca"]:
        try:
            versions[module] = __import__(module).__version__
        except Exception as error:
            versions[module] = f"missing ({type(error).__name__})"
    return {"date": datetime.datetime.now().isoformat(timespec="seconds"), "python": platform.python_version(),
            "platform": platform.platform(), "cpus": os.cpu_count(),
            "ram_gib": round(psutil.virtual_memory().total / 2**30, 1), "versions": versions, **backend.describe(),
            "scheduler": f"dask threads, num_workers={args.threads}", "args": vars(args), "setup": {}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or str(Path(__file__).resolve().parent / "results"),
                    help="folder of the JSON (default: $OUT if set, else benchmarks/results)")
    ap.add_argument("--budget-s", type=float, default=280.0,
                    help="seconds for the whole run; rows left when they are spent are skipped and listed (default 280)")
    ap.add_argument("--grace-s", type=float, default=45.0,
                    help="past the budget, a row still running is abandoned and the process ends (exit 3)")
    ap.add_argument("--cases", default="a,c,b,d", help="comma-separated, in GPU order: a, b, c, d (default a,c,b,d)")
    ap.add_argument("--roads", default="all", help=f"comma-separated subset of: {', '.join(ROADS)} (default all)")
    ap.add_argument("--repeat", type=int, default=2,
                    help="times each floor, exact or auto GPU fit and GPU transform runs; the fastest counts (default 2)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="dask threads (default: one per core)")
    ap.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(), "daskpca-gpu-bench"),
                    help="where the zarr store of case d is written (local disk; never under $OUT)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes; NumPy stands in for CuPy when it is absent")
    args = ap.parse_args(argv)
    roads = args.roads.split(",") if args.roads not in ("", "all") else []
    unknown = [c for c in args.cases.split(",") if c and c not in ("a", "b", "c", "d")] + \
              [r for r in roads if r not in ROADS and r != "transform"]
    if unknown:
        ap.error(f"unknown case or road {unknown}: cases are a, b, c, d; roads are {', '.join(ROADS)}, transform")

    import dask

    backend = Backend(args.smoke)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    record = Record(Path(args.out) / f"gpu-{'smoke-' if args.smoke else ''}{stamp}.json", {})
    record.meta.update(machine(backend, args))
    budget = Budget(args.budget_s, args.grace_s, record)
    run = Run(args, backend, record, budget)
    log(budget, f"# benchmarks.gpu {record.meta['date']}: {backend.describe()}, {record.meta['cpus']} CPUs, "
        f"{record.meta['ram_gib']} GiB; budget {args.budget_s:.0f} s; versions {record.meta['versions']}")
    Path(args.data_dir).mkdir(parents=True, exist_ok=True)
    budget.report = lambda: report(run)
    log(budget, f"budget {args.budget_s:.0f} s (+ {args.grace_s:.0f} s grace for a row still running, then exit 3). "
        "Order: warm-up; per case a, c, b, d its data, floors, GPU fits but ALS/PPCA, transform; CPU references "
        "(a covariance, c gram), b covariance; other CPU fits of a, c, d; GPU ALS/PPCA; their CPU fits; b's other "
        "CPU fits. A CPU fit of b starts only if a's time scaled by the work fits in the time left.")
    with dask.config.set(scheduler="threads", num_workers=args.threads):
        for label, step in run.steps():
            if label == "warm-up" and budget.left() <= 0:
                continue
            step()
    budget.stop()
    report(run)
    log(budget, f"JSON: {record.path}")
    return 0


def report(run: Run) -> None:
    """Score every fit that ended against its case's reference, print the table and the skipped
    rows, save the record (at the end of the run, or by the watchdog before an overrun's exit)."""
    run.budget.running = "scoring"
    run.score()
    rows = table_rows(run)
    print("\n" + (markdown_table(HEADER, rows) if rows else "| road | (no row has ended) |"), flush=True)
    skipped = [f"{r.case} {r.road}: {s}" for r in run.record.ordered() for s in r.skipped]
    if skipped:
        print(f"\nSkipped ({len(skipped)}):\n" + "\n".join(f"- {s}" for s in skipped), flush=True)
    run.record.meta["wall_s"] = round(run.budget.elapsed(), 1)
    run.record.save()


if __name__ == "__main__":
    sys.exit(main())
