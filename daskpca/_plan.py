"""The planner: which solver to run, why, and what it will cost — before any data is read.

``make_plan`` estimates, for every registered solver, the passes over the data, the flops and the
peak memory of its largest task, from metadata only (shape, chunks, dtype, n_components) and the
memory a task may use (read from the running ``distributed`` client when there is one). Then
ordered rules with named thresholds pick one. ``PCA(...).plan(X)`` returns the report;
``solver="auto"`` runs the choice and logs it on the ``daskpca`` logger.

With an accuracy asked for (``tol``), the choice is by predicted time among the solvers that
guarantee it: the exact ones (covariance / Gram / TSQR, always) and block Krylov (its predicted
passes within the read budget). Time
(:func:`predicted_seconds`) is the bytes read at READ_BYTES_PER_SECOND, the flops at the solver's
rate, TASK_SECONDS per task and, on a ``distributed`` cluster, each task's result moved between
processes at TRANSFER_BYTES_PER_SECOND, spread over the threads a pass can use: a pass of fewer
tasks than threads (one Gram strip holding the whole field) runs on fewer cores. The task geometry — how many
storage chunks one task reads (:mod:`daskpca.passes._geometry`) — is part of the plan and printed
with it.
Without ``tol`` (and with ``solver="auto"``) the planner compares the same two roads for the
default accuracy :data:`DEFAULT_TOL` (sin θ ≤ 1e-6, argued below): an exact solver when it costs
about what the certified road costs — at most :data:`EXACT_PREMIUM` × block Krylov's predicted
time (tall data: the covariance's one pass at the read floor) — else block Krylov run to that
accuracy, which reports its bound (``error_bound_``). The plan and ``solver_reason_`` say which
and why; naming an exact solver (``PCA(solver=...)``) still forces an exact answer.

Why 1e-6. What a PCA of n samples estimates carries a sampling error: North et al. (1982) give
δλ/λ ≈ √(2/n) for the eigenvalues and, for the subspace of the k leading EOFs, an angle of about
√(2/n)·√(λ_kλ_{k+1})/(λ_k − λ_{k+1}) ≥ √(2/n)·(something of order one for the gaps that make
modes worth keeping). At n = 10⁴ samples that is ~1e-2; it only falls below 1e-4 beyond n = 2·10⁸
samples. A numerical error of 1e-6 is thus ≤ 1 % of the statistical one for any n up to ~10¹⁰ —
invisible in every figure a user draws from the EOFs — while exact-to-1e-15 answers cost the n²·d
(or d²·n) flops of a Gram (covariance) matrix, 25× scikit-learn on a reanalysis year. Asking for
``tol`` overrides it either way (``tol=1e-10`` for near-exact, ``tol=1e-3`` for a quick look).

**No solver is named here.** Each solver declares itself once, in its own module
(:class:`daskpca.solvers._base.SolverDeclaration`): its cost model (passes, flops, task memory,
result size, its host flop rate, what a device changes) and the capabilities these rules ask
about — exact, the exact road for a tall or a wide shape (``exact_for``), certifies a ``tol``
within its read budget (``certifies``), tried where no exact solver fits (``fallback``), takes
missing values (``accepts_missing``). The planner loops over the registered declarations
(:data:`daskpca.solvers.SOLVERS`); a solver registered there is priced and chosen like the others.
An estimator with roads of its own passes their declarations (``make_plan(declarations=...)``):
MCA and CCA plan two fields read together (``fields=(dx, dy)``) through the same rules — their
exact road where its task fits, else the one road they have ``instead``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field, replace

import numpy as np

from .solvers import SOLVERS
from .solvers import DENSE_FLOPS_PER_SECOND, PlanInput
from .passes import TASK_MEMORY_FRACTION, Geometry, device_task_bytes, relaid_out, what_runs, worker_resources
from .exceptions import InputError

logger = logging.getLogger("daskpca")

#: The accuracy (bound on sin θ of the kept subspace) that ``solver="auto"`` certifies when no
#: ``tol`` is given and an exact solver would cost more (see the module notes for the argument).
DEFAULT_TOL = 1e-6
#: Without ``tol``, an exact solver is preferred while its predicted time is at most this multiple
#: of block Krylov's for DEFAULT_TOL: exactness is worth a little, not an order of magnitude.
EXACT_PREMIUM = 1.25
FLOAT64 = 8
#: The time model's rates, for the whole machine (both scale with the workers, so only their
#: ratio ranks solvers). Measured on the 2-core development machine (benchmarks/README.md): a
#: floor read of zstd float32 zarr runs at 0.4–0.78 GB/s of raw data (tall 1e6 × 1000: 0.78;
#: the reanalysis field 8760 × 65 160 read regrouped with ``da.from_zarr``: 4.0–4.3 s, 0.55 GB/s —
#: xarray's NaN-skipping ``.sum()`` of the same field takes 6.3–7.4 s, not a read), the fitted
#: flop rate of the solvers' kernels at 56–88 GF/s (each solver's own rate is in its declaration:
#: ``SolverDeclaration.flop_rate``, this one where it names none).
READ_BYTES_PER_SECOND = 0.55e9
FLOPS_PER_SECOND = DENSE_FLOPS_PER_SECOND
#: The strip re-layout's temporary copy is uncompressed (``_geometry.ColumnStrips``): written and
#: read back at what the local disk and page cache give, not at the codec's rate. Local disk
#: here: 2.2 GB/s write, 1.3 GB/s cold read (direct I/O, 4 GiB); zarr's per-chunk overhead on top.
WRITE_BYTES_PER_SECOND = 1.0e9
COPY_READ_BYTES_PER_SECOND = 1.0e9
#: The client's share of an iterative fit between its passes (block Krylov's: the new block's
#: products with V and W and its re-orthogonalisation, 6 thin d×m×ℓ products after pass j, and
#: the Ritz vectors, residuals and left projection, 3 d×m×(k+1); its declaration's
#: ``Cost.client_flops``) — BLAS-3 on the caller's threads between passes. Measured on the reanalysis field (d = 65 160,
#: ℓ = 30, k = 20): 4.7–4.8 s for 8 passes (3.4e10 flops), 6.5 s for 10 (5.2e10), 7–8 GF/s
#: (benchmarks/README.md, archive layouts, 2026-11-26).
CLIENT_FLOPS_PER_SECOND = 7.5e9
#: What one task costs besides its bytes and flops: the scheduler, and one synchronous zarr call
#: (an event-loop round trip). Measured: 8760 one-row tasks read 2.1 GiB in 12.0 s, 18 tasks in 4.0 s.
TASK_SECONDS = 0.9e-3
#: What one pass costs besides its tasks: building its graph, one ``dask.compute`` and the
#: client's bookkeeping around it (measured: 11–13 ms a pass of four tiny in-memory tasks, 14 ms
#: building a sketching pass's graph over a one-step-per-chunk store). Negligible for a large
#: pass; at a few tenths of a second a pass it was a third of the plan's shortfall (issue 41).
PASS_SECONDS = 0.015
#: What a pass pays per storage chunk beyond the tasks (issue 41: a one-step-per-chunk store read
#: through ``da.from_zarr(...).reshape`` was planned at 0.87 s and took 9.2 s, its first pass 7.6):
#: where dask blocks are joined inside a task (``Geometry.read == "concatenated"``) every block is
#: still a task of the graph and, from a store, a synchronous zarr call of its own — serialised in
#: one process (measured, 3000 chunks of 28.8 KB, zstd: 2.7 ms each on 1 thread, 2.5 ms on 2,
#: 1.8 ms uncompressed; the same blocks in memory 0.1 ms). Inside one zarr selection per task
#: (``"selection"``, through the zarrs pipeline where it applies: passes/_decode.py) the chunks are
#: fetched together: first measured (0.47 − 0.25 s) / 2988 more chunks = 7.4e-5 s; measured again
#: on the first pass of a fit (2026-11-27, one row per chunk against 250 and 4000, best of 3):
#: 3.2–3.7e-5 s (3000 chunks of 28.8 KB), 3.8e-5 s (16 000 of 16 KB), 1.8–2.6e-5 s (8760 of
#: 65 KB), so that the plan's first pass over a one-step-per-chunk store was 1.5–1.8× the fit's.
#: Read as stored, each chunk is a task, already counted by TASK_SECONDS.
CHUNK_CALL_SECONDS = 2.4e-3
BLOCK_SECONDS = 1.0e-4
SELECTION_CHUNK_SECONDS = 3.5e-5
#: On a ``distributed`` cluster a task's result leaves its worker's memory: serialised and sent
#: to the worker that merges it (or to the client), in a tree whose merges wait for it. Counted
#: as every task's result moved once per pass at this rate (measured on 2 local workers × 1 GiB,
#: the reanalysis field's Krylov fit, 26 leaves of 16 MB a pass: the plan was 1.35–1.5× short of
#: the 63–68 s fit without it, the transfers and merge waits ~1–1.5 s a pass).
TRANSFER_BYTES_PER_SECOND = 0.35e9


#: Device rates beyond :data:`daskpca.passes._device.RATES`, also overridable through dask config
#: (``daskpca.device.<key>``). TSQR on a device runs cuSOLVER's dense QRs (leaves, stacked merges):
#: the table of issue 40 gives 0.59 s at 400 000 × 1000 for its 2·n·d² = 8e11 flops, ~1.4 TFLOP/s
#: with its final SVD.
DEVICE_QR_FLOPS_PER_SECOND = 1.4e12


@dataclass(frozen=True)
class DevicePricing:
    """What the planner charges when the chunks live on a device (or ``device="cuda"`` moves them).

    Rates from :data:`daskpca.passes._device.RATES` (and the dask config's ``daskpca.device.*``):
    the pass kernels' flops (dense products, QRs, sketches), the final eigenproblem or SVD where
    the cost rule of :func:`~daskpca.passes._device.solve_on_device` puts it, each pass's blocks
    moved up at ``transfer-bytes`` when the input is on the host (``moved``), and the task budget
    from the device's memory.
    """

    name: str
    moved: bool  # host input moved to the device by each pass's read tasks
    memory: int | None  # the device's total memory (bytes), None when unknown

    def rate(self, key: str) -> float:
        from .passes import rate as device_rate

        if key == "qr-flops":
            import dask

            return float(dask.config.get("daskpca.device.qr-flops", DEVICE_QR_FLOPS_PER_SECOND))
        return device_rate(key)

    def local_seconds(self, size: int, kind: str) -> float:
        """The final m×m eigenproblem ("eigh") or SVD ("svd") where the root solves it: on the
        device or moved to the host, whichever the cost rule picks (the cheaper)."""
        from .passes import EIGH_FLOPS, FLOAT64_BYTES, SVD_FLOPS

        flops = (EIGH_FLOPS if kind == "eigh" else SVD_FLOPS) * float(size) ** 3
        host = flops / self.rate(f"host-{kind}-flops") + FLOAT64_BYTES * float(size) ** 2 / self.rate("transfer-bytes")
        return min(host, self.rate("solve-seconds") + flops / self.rate(f"{kind}-flops"))

    @property
    def task_bytes(self) -> int | None:
        """Bytes one task may hold on the device (None: its memory unknown):
        :func:`~daskpca.passes._geometry.device_task_bytes`, the figure the device's merge trees are
        sized to at run time."""
        return None if self.memory is None else device_task_bytes(self.memory)

    def describe(self) -> str:
        memory = f", {format_bytes(self.memory)} of device memory" if self.memory else ""
        moved = f"; each pass moves the blocks up at {self.rate('transfer-bytes') / 1e9:.3g} GB/s" if self.moved else ""
        return (f"{self.name}, priced with the device's rates: products {self.rate('flops') / 1e12:.3g} TFLOP/s, "
                f"QRs {self.rate('qr-flops') / 1e12:.3g}, sketches {self.rate('sketch-flops') / 1e12:.3g}; final "
                f"eigh/SVD on the device where cheaper{moved}{memory}")


def device_pricing(matrix, backend=None) -> DevicePricing | None:
    """The device costs of ``matrix``'s chunks (None for host chunks: the CPU plan), moved up by
    its read tasks when they are host data (``device="cuda"`` on host input); ``backend``: their
    backend (``passes.on_device(matrix)``) when the caller asked it already."""
    from .passes import device_memory, moved_from_host, on_device

    backend = on_device(matrix) if backend is None else backend
    if backend.on_host:
        return None
    memory = device_memory(backend)
    return DevicePricing(backend.name, moved_from_host(matrix), None if memory is None else int(memory[1]))


def device_task_budget(device: DevicePricing) -> tuple[int, str] | None:
    """``(bytes, where from)`` one task may hold on the device: TASK_MEMORY_FRACTION of its memory
    shared by the threads that run tasks on it (:attr:`DevicePricing.task_bytes`)."""
    if device.memory is None:
        return None
    return device.task_bytes, f"from the device's memory ({format_bytes(device.memory)}) per thread"


@dataclass(frozen=True)
class SolverEstimate:
    """Cost of one solver on one input.

    ``passes`` counts full reads of the input, the feature stage's own read included (an int —
    Krylov's predicted count — or a bound such as ``"≤ 201"`` for ALS / PPCA); ``most_passes`` is
    the most reads of a solver that stops on convergence (None: ``passes`` is exact); ``task_bytes`` is
    the estimated peak memory of the largest task; ``feasible`` says whether that fits the
    per-task memory budget.
    """

    name: str
    passes: int | str
    flops: float
    task_bytes: int
    feasible: bool
    exact: bool
    note: str = ""
    seconds: float | None = None
    tasks: int = 1  # tasks of one pass (row blocks, or column strips for gram)
    copy_passes: int = 0  # passes over a temporary re-laid-out copy (written once) besides ``passes``
    most_passes: int | None = None
    client_flops: float = 0.0  # the small dense algebra on the client between and after the passes
    result_bytes: int = 0  # what each task of a pass returns (moved between processes on a cluster)
    uncached_seconds: float | None = None  # ``seconds`` before a pass cache served the later passes
    flop_rate: float | None = None  # the passes' flop rate (None: the host's, from the solver's declaration)
    local_seconds: float = 0.0  # the final eigenproblem / SVD where a device plan puts it
    move_seconds: float = 0.0  # per pass: the blocks moved from the host to the device
    certified: bool = False  # an approximate solver that certifies the plan's tol within its read budget
    #: One pass more of a road that stops on convergence, over the source, without the client's
    #: work (None: a fixed count of passes): what a probe's pass count is priced by (:meth:`Plan.with_probe`).
    pass_seconds: float | None = None

    @property
    def uncached(self) -> float | None:
        """The predicted time reading the source on every pass."""
        return self.seconds if self.uncached_seconds is None else self.uncached_seconds

    def with_reads(self, extra: int) -> "SolverEstimate":
        """This estimate with ``extra`` reads of the feature stage before the solver's own (in its
        passes and its read bound ``most_passes``, None where its passes are a fixed count)."""
        most = None if self.most_passes is None else self.most_passes + extra
        passes = self.passes + extra if isinstance(self.passes, int) else (f"≤ {most}" if most else self.passes)
        note = (self.note + "; " if self.note else "") + f"+{extra} read: the feature stage" if extra else self.note
        return replace(self, passes=passes, most_passes=most, note=note)

    def with_seconds(self, n: int, d: int, itemsize: int, threads: int = 1, distributed: bool = False,
                     registry=None, chunk_seconds: float = 0.0) -> "SolverEstimate":
        timed = lambda e: predicted_seconds(e, n, d, itemsize, threads, distributed, registry, chunk_seconds)  # noqa: E731
        seconds, one_more = timed(self), None
        if self.most_passes is not None and isinstance(self.passes, int) and self.passes > 0:
            # The same road one pass longer (its flops a pass more, the client's the same): the difference.
            one_more = timed(replace(self, passes=self.passes + 1, flops=self.flops * (self.passes + 1) / self.passes)) - seconds
        return replace(self, seconds=seconds, pass_seconds=one_more)


@dataclass(frozen=True)
class Plan:
    """The planner's report (``str(plan)`` is a readable table)."""

    solver: str
    reason: str
    runner_up: str | None
    n_samples: int
    n_features: int
    n_components: int
    task_memory_budget: int
    memory_source: str
    estimates: list[SolverEstimate] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    tol: float | None = None
    geometry: Geometry | None = None  # how a pass's tasks read the storage chunks
    threads: int = 1
    cache: object = None  # the pass cache (daskpca.passes._cache.CacheChoice), set by the estimator
    #: The accuracy the chosen road certifies without a ``tol`` asked (DEFAULT_TOL when
    #: ``solver="auto"`` chose block Krylov for it; ``fit`` passes it to the solver), else None.
    default_tol: float | None = None
    #: The device the chunks live on and its rates (:class:`DevicePricing`), or None (the CPU plan).
    device: DevicePricing | None = None
    #: ``(dx, dy)``: two fields read together (MCA, CCA; ``n_features`` is dx + dy), else None.
    fields: tuple | None = None
    #: The probe of a sample of the rows (:class:`daskpca._probe.Probe`) when the plan was asked
    #: for with ``probe=True`` (:meth:`with_probe`), else None: the plan read nothing.
    probe: object = None
    #: :func:`daskpca.passes.job_facts` when the cache row was priced (None: unknown): a fit under
    #: the same facts runs the plan's row, one under others (a cluster started since, the CLI's
    #: scores read later) prices it again (:func:`with_cache`).
    priced_for: tuple | None = field(default=None, compare=False)

    def with_probe(self, probe) -> "Plan":
        """This plan with the probed road's (``probe.road``: block Krylov) passes the ``probe``'s
        point estimate (plus the feature stage's reads) and the probe stated. Its time changes by
        the passes gained or saved, each at a later pass's time (``pass_seconds``, less what the
        plan's pass cache saves on it: the first pass, which reads the source and keeps its blocks,
        is the same whatever the count), by the client's work for the probe's count
        (``probe.client_flops``: it grows faster than the passes) and by the probe's own read: a
        probed plan of P passes costs what a plan of P passes costs. (Before, the whole time was
        scaled by the count, the first pass's read and keep with it.) The choice of road is kept
        (the probe refines the chosen road's estimate; it does not re-plan: a fit that probes
        unasked, because someone watches it, must take the road an unwatched one takes). A probe
        without an estimate only adds its line."""
        estimates = list(self.estimates)
        cache = self.cache
        saved = 0.0  # what the plan's cache saves on each later pass
        if cache is not None and cache.kind is not None and None not in (cache.read_seconds, cache.pass_seconds):
            saved = max(cache.read_seconds - cache.pass_seconds, 0.0)
        for i, e in enumerate(estimates):
            if e.name != probe.road or probe.passes is None or not isinstance(e.passes, int) or e.passes < 1:
                continue
            prior = probe.prior  # the solver's passes in e.passes, after the feature stage's reads
            passes = e.passes - prior + probe.passes
            client = probe.client_flops if probe.client_flops is not None else e.client_flops
            seconds = e.seconds
            if seconds is not None and e.pass_seconds is not None:  # the road stops on convergence (with_seconds)
                seconds += ((passes - e.passes) * (e.pass_seconds - saved) + (client - e.client_flops) / CLIENT_FLOPS_PER_SECOND
                            + probe.fraction * e.pass_seconds)
            estimates[i] = replace(e, passes=passes, flops=e.flops * probe.passes / max(prior, 1), seconds=seconds,
                                   client_flops=client,
                                   note=f"{e.note}; {probe.passes} solver passes from the probe" if e.note else e.note)
        return replace(self, estimates=estimates, probe=probe)

    @property
    def path(self) -> str:
        """The chosen road (``solver``), by the name the coupled estimators give their roads."""
        return self.solver

    @property
    def n_passes(self) -> str:
        """The chosen road's passes as a text (``"1"``, or how an iterative road counts them)."""
        return str(self.passes)

    @property
    def seconds(self) -> float | None:
        """The predicted wall time of the chosen solver (None when its passes are open-ended),
        passes served by the pass cache at their cached time (:func:`cached`)."""
        return self.estimate(self.solver).seconds

    def estimate(self, name: str) -> SolverEstimate:
        for e in self.estimates:
            if e.name == name:
                return e
        raise InputError(f"the plan has no estimate for solver {name!r} (it has {[e.name for e in self.estimates]}): "
                         "a solver is priced from its declaration's cost model; register it with "
                         "daskpca.solvers.register(SolverDeclaration(..., cost=...)).")

    @property
    def passes(self) -> int | str:
        """Full reads ``fit`` makes with the chosen solver (a bound for one that stops on convergence)."""
        return self.estimate(self.solver).passes

    @property
    def most_passes(self) -> int | str:
        """The most full reads ``fit`` can make with the chosen solver (``passes`` when exact)."""
        chosen = self.estimate(self.solver)
        return chosen.passes if chosen.most_passes is None else chosen.most_passes

    def __str__(self) -> str:
        chosen = self.estimate(self.solver)
        width = max(11, *(len(e.name) for e in self.estimates))
        data = f"X of shape ({self.n_samples}, {self.n_features})" if self.fields is None else \
            f"X ({self.n_samples} × {self.fields[0]}) and Y ({self.n_samples} × {self.fields[1]}), read together"
        lines = [
            f"daskpca plan for {data}, k = {self.n_components}",
            f"  solver: {self.solver!r} — {self.reason}",
            f"  passes over the data: {chosen.passes}"
            + (f" predicted, at most {chosen.most_passes}" if isinstance(chosen.passes, int) and chosen.most_passes else "")
            + f"; flops ≈ {chosen.flops:.3g}; "
            f"peak memory per task ≈ {format_bytes(chosen.task_bytes)} "
            f"(budget {format_bytes(self.task_memory_budget)}, {self.memory_source})",
            f"  tasks: {self.geometry.describe()}" if self.geometry else f"  tasks: {chosen.tasks} a pass",
            f"  predicted time: {self.seconds:.3g} s on {self.threads} thread(s)" if chosen.seconds is not None
            else "  predicted time: open-ended (passes depend on convergence)",
            *([f"  {self.probe.describe()}"] if self.probe is not None else []),
            *([f"  pass cache: {self.cache.describe()}"] if self.cache is not None else []),
            *([f"  device: {self.device.describe()}"] if self.device is not None else []),
            f"  runner-up: {self.runner_up!r}" if self.runner_up else "  runner-up: none",
            f"  accuracy asked: sin θ ≤ {self.tol:g}" if self.tol is not None else
            f"  accuracy: sin θ ≤ {self.default_tol:g}, the default (tol=None; see daskpca._plan)" if self.default_tol
            else "  accuracy asked: none (tol=None)",
            "",
            f"  {'solver':<{width}} {'exact':<6} {'passes':>7} {'flops':>10} {'time':>8} {'task memory':>12}  fits",
        ]
        for e in self.estimates:
            seconds = "—" if e.seconds is None else f"{e.seconds:.3g} s"
            lines.append(
                f"  {e.name:<{width}} {'yes' if e.exact else 'no':<6} {str(e.passes):>7} {e.flops:>10.3g} {seconds:>8} "
                f"{format_bytes(e.task_bytes):>12}  {'yes' if e.feasible else 'NO'}{'  ' + e.note if e.note else ''}"
            )
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)

    def _repr_pretty_(self, printer, cycle):  # IPython / Jupyter show the table
        printer.text(str(self))


def format_bytes(n: float) -> str:
    """``n`` bytes as a short readable figure (``1.5 GiB``), for plans and error messages."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def task_memory_budget(resources: tuple | None = None) -> tuple[int, str]:
    """Bytes one task may use, and where that figure came from.

    With a ``distributed`` client: ``TASK_MEMORY_FRACTION`` × the smallest worker memory limit
    divided by that worker's threads. Otherwise the same fraction of this machine's memory
    divided by its cores (the threaded scheduler runs one task per core). ``resources``:
    :func:`~daskpca.passes._geometry.worker_resources` when the planner already asked it.
    """
    _, per_thread, source = worker_resources() if resources is None else resources
    if per_thread is None:  # workers without limits: this machine's figure is the best guess
        import psutil

        per_thread, source = psutil.virtual_memory().total / max(os.cpu_count() or 1, 1), "from this machine's memory per core"
    return int(TASK_MEMORY_FRACTION * per_thread), source


def estimate_solvers(n, d, k, chunks, itemsize, n_oversamples=10, n_power_iter=None, max_iter=None, budget=None, available=(),
                     tol=None, max_passes=None, device: DevicePricing | None = None, declarations=None, options=None,
                     fields=None):
    """Cost estimates of every solver in ``available`` (see :class:`SolverEstimate`), from each
    one's declaration (``SolverDeclaration.cost``; a name without one is skipped) in
    ``declarations`` (None: :data:`daskpca.solvers.SOLVERS`, PCA's; HilbertPCA passes its own),
    ``options`` the further estimator options their cost models read, ``fields`` the two fields'
    widths of a coupled input (:attr:`PlanInput.fields`); priced on the device with ``device``
    (:func:`on_the_device`)."""
    shape = PlanInput(n, d, k, tuple(chunks), itemsize, n_oversamples, n_power_iter, tol, max_passes, dict(options or {}),
                      fields)
    registry = SOLVERS if declarations is None else declarations
    declared = [(name, registry[name]) for name in available if getattr(registry.get(name), "cost", None) is not None]
    # Every cost model first, then the estimates: each model reads the plain ``shape`` and returns
    # its ``Cost``, and the road goes out to the solvers' modules and back once, not once per solver.
    # A road that reads column strips is priced with the shared re-layout step where the input is
    # stored by rows only (its declaration's ``reads_strips``; ``_geometry.relaid_out``).
    # Whether an approximate road certifies ``tol`` within its read budget is asked with its cost.
    costs = [(relaid_out(declaration.cost, shape) if declaration.reads_strips else declaration.cost(shape),
              tol is not None and declaration.certifies is not None and declaration.certifies(tol, max_passes))
             for _, declaration in declared]
    estimates = []
    for (name, declaration), (cost, certified) in zip(declared, costs):
        estimate = SolverEstimate(name, cost.passes, float(cost.flops), int(cost.task_bytes),
                                  budget is None or cost.task_bytes <= budget, declaration.exact, cost.note,
                                  tasks=shape.row_tasks if cost.tasks is None else cost.tasks, copy_passes=cost.copy_passes,
                                  client_flops=cost.client_flops, result_bytes=cost.result_size * FLOAT64,
                                  # a road that re-lays the input out reads it once, whatever its passes over the copy
                                  most_passes=None if cost.copy_passes else cost.most_passes, certified=bool(certified))
        if SOLVERS.get(name) is not declaration:  # another estimator's road: its rate stated in the plan
            estimate = replace(estimate, flop_rate=declaration.flop_rate)
        if device is not None:
            estimate = on_the_device(estimate, declaration, shape, device, budget)
        estimates.append(estimate)
    return estimates


def on_the_device(estimate: SolverEstimate, declaration, shape: PlanInput, device: DevicePricing,
                  budget: int | None) -> SolverEstimate:
    """``estimate`` priced on the device: its passes' flops at the device's rate for its kernels
    (``declaration.device_rate``), what its declaration's ``on_device`` changes (the final
    eigenproblem or SVD where the root solves it, :meth:`DevicePricing.local_seconds`, instead of
    in the host's flops; wider device merges in its memory) and the blocks moved up on every pass
    for host input."""
    flops, local, task = estimate.flops, 0.0, estimate.task_bytes
    if declaration.on_device is not None:
        priced = declaration.on_device(shape, flops, task, device)
        flops, local, task = priced.flops, priced.local_seconds, priced.task_bytes
    move = shape.n * shape.d * shape.itemsize / device.rate("transfer-bytes") if device.moved else 0.0
    return replace(estimate, flops=float(max(flops, 0.0)), flop_rate=device.rate(declaration.device_rate), local_seconds=local,
                   move_seconds=move, task_bytes=int(task), feasible=budget is None or task <= budget)


def predicted_seconds(estimate: SolverEstimate, n: int, d: int, itemsize: int, threads: int = 1,
                      distributed: bool = False, registry=None, chunk_seconds: float = 0.0) -> float | None:
    """The time model: per pass, PASS_SECONDS, the bytes at READ_BYTES_PER_SECOND and TASK_SECONDS per task
    (on a ``distributed`` cluster also each task's result at TRANSFER_BYTES_PER_SECOND); the
    flops at the solver's rate (its declaration's ``flop_rate``); all on the share of the ``threads`` that a
    pass of ``estimate.tasks`` tasks keeps busy; ``chunk_seconds`` per pass over the source for its
    storage chunks (:func:`chunk_seconds`: zarr's per-call overhead is serialised, not shared by
    the threads). None for solvers whose passes depend on convergence."""
    if not isinstance(estimate.passes, int):
        return None
    busy = min(max(estimate.tasks, 1), threads) / threads
    size = n * d * itemsize
    per_pass = size / READ_BYTES_PER_SECOND + estimate.tasks * TASK_SECONDS / threads
    fixed = PASS_SECONDS * (estimate.passes + estimate.copy_passes)  # the client's, not shared by the threads
    if distributed:
        per_pass += estimate.tasks * estimate.result_bytes / TRANSFER_BYTES_PER_SECOND
    per_pass += estimate.move_seconds
    copy = estimate.copy_passes * size / COPY_READ_BYTES_PER_SECOND + size / WRITE_BYTES_PER_SECOND if estimate.copy_passes else 0.0
    flops = estimate.flops / flop_rate(estimate, registry)
    return ((estimate.passes * per_pass + copy + flops) / busy + estimate.passes * chunk_seconds + fixed
            + estimate.client_flops / CLIENT_FLOPS_PER_SECOND + estimate.local_seconds)


def flop_rate(estimate: SolverEstimate, registry=None) -> float:
    """The rate of ``estimate``'s pass flops: the device's when a device plan set it, else the host's
    (its declaration's ``flop_rate`` in ``registry``, None: SOLVERS; FLOPS_PER_SECOND for an
    estimate no declaration made)."""
    registry = SOLVERS if registry is None else registry
    return estimate.flop_rate or getattr(registry.get(estimate.name), "flop_rate", FLOPS_PER_SECOND)


def _roles(available, registry) -> dict:
    """The declarations in ``available`` (of ``registry``) the rules ask for by role: the exact road
    of a tall and of a wide shape (one declared for "any" shape serves both), the approximate
    solver tried first where none fits (one that certifies a ``tol``, else the first fallback),
    the last resort, the road taken instead of the exact one where that does not fit, the one for
    missing values."""
    declared = [registry[name] for name in available if getattr(registry.get(name), "cost", None) is not None]
    first = lambda test: next((s for s in declared if test(s)), None)  # noqa: E731
    return {
        "tall": first(lambda s: s.exact_for in ("tall", "any")), "wide": first(lambda s: s.exact_for in ("wide", "any")),
        "approximate": first(lambda s: s.fallback == "approximate" and s.certifies is not None)
        or first(lambda s: s.fallback == "approximate"),
        "last-resort": first(lambda s: s.fallback == "last-resort"), "instead": first(lambda s: s.fallback == "instead"),
        "missing": first(lambda s: s.accepts_missing),
    }


def _name(declaration) -> str | None:
    return None if declaration is None else declaration.name


def _only_for_missing(name: str, registry=None) -> bool:
    """A solver for missing values (NaN) is no alternative on complete data."""
    return getattr((SOLVERS if registry is None else registry).get(name), "accepts_missing", False)


def make_plan(n, d, k, chunks, itemsize, *, needs_spectrum=False, has_missing=False, available, n_oversamples=10,
              n_power_iter="auto", tol=None, max_passes=None, geometry: Geometry | None = None, requested=None,
              reads=None, cache_for=None, device: DevicePricing | None = None, declarations=None, fields=None,
              names=None, options=None, runner: tuple | None = None, priced_for: tuple | None = None,
              chunk_seconds: float = 0.0) -> Plan:
    """Choose a solver with ordered rules; see the module docstring.

    ``declarations``: the registry the plan chooses from (None: :data:`daskpca.solvers.SOLVERS`,
    PCA's; HilbertPCA passes its two roads through the Hermitian Gram of the analytic signal),
    ``names`` how the estimator spells them in messages (:func:`check_requested`), ``options``
    the further estimator options their cost models read (Hilbert's ``padding``).

    ``tol`` is the accuracy asked for (a bound on the sine of the largest principal angle; None:
    none asked, exact where exact fits) and ``max_passes`` the read budget of approximate solvers.
    ``requested`` is the solver the caller named (None: the rules choose); the plan is then that
    solver's, refused when its task does not fit (:func:`check_requested`). ``reads`` maps a
    solver to the extra reads of the feature stage before it (:func:`daskpca._features.plan_reads`;
    None: a plain fit, none), so that the plan counts what the fit reads
    (:meth:`SolverEstimate.with_reads`); its own read bound comes with its cost (``Cost.most_passes``). ``cache_for`` gives the pass cache each solver's fit
    would keep (``estimates -> {solver: CacheChoice}``, :func:`cache_pricing`): every solver is then timed with
    its later passes served by it, so the choice between an exact road and an iterative one weighs
    what each really costs (the cache makes a Krylov pass its flops, not a decode). ``device``
    (:func:`device_pricing`): the chunks live on a device, and every solver is priced there
    (:func:`on_the_device`; the task budget from the device's memory). ``declarations``: the
    roads the estimator may take, name → declaration (None: :data:`daskpca.solvers.SOLVERS`,
    PCA's); ``fields``: ``(dx, dy)`` for two fields read together (:attr:`PlanInput.fields`);
    ``options``: further estimator options their cost models read. ``runner``: what runs the
    tasks (:func:`~daskpca.passes.what_runs`; None: asked here), as :func:`pricing` gives it, with
    ``priced_for`` (:attr:`Plan.priced_for`) and ``chunk_seconds``, what each pass over the source
    spends on its storage chunks (:func:`chunk_seconds`; 0: nothing beyond its tasks).
    """
    # What runs the tasks is asked once for the whole plan: none of it depends on the solver.
    client, resources = what_runs() if runner is None else runner
    distributed = client is not None
    budget, source = task_memory_budget(resources)
    if device is not None and (device_budget := device_task_budget(device)) is not None:
        budget, source = device_budget
    threads = resources[0]
    reads = dict(reads or {})
    registry = SOLVERS if declarations is None else declarations
    roles = _roles(available, registry)
    # Without a tol, solver="auto" weighs the exact roads against the certified one (block
    # Krylov) run to DEFAULT_TOL — where one of the roads available certifies it.
    certifying = any(getattr(registry.get(name), "certifies", None) is not None for name in available)
    default_road = tol is None and requested is None and not needs_spectrum and not has_missing and certifying
    road_tol = DEFAULT_TOL if default_road else tol
    estimates = [
        e.with_reads(reads.get(e.name, 0)).with_seconds(n, d, itemsize, threads, distributed, registry, chunk_seconds)
        for e in estimate_solvers(n, d, k, chunks, itemsize, n_oversamples, n_power_iter, budget=budget,
                                  available=available, tol=road_tol, max_passes=max_passes, device=device,
                                  declarations=registry, options=options, fields=fields)
    ]
    caches = cache_for(estimates) if cache_for is not None else {}
    estimates = [cached(e, caches.get(e.name)) for e in estimates]
    by_name = {e.name: e for e in estimates}
    fits = lambda name: name in by_name and by_name[name].feasible  # noqa: E731
    exact_small = _name(roles["tall" if d <= n else "wide"])
    approximate = _name(roles["approximate"])
    dims = (n, d) if fields is None else (n, *fields)  # what a declaration's reason is told of the shape
    warnings = []

    default_tol = None
    # 0. The caller's choice is the plan (its memory is checked below).
    if requested is not None:
        solver, reason = requested, "requested by the caller"
    # 1. Missing values can only be handled by probabilistic PCA.
    elif has_missing and roles["missing"] is not None:
        solver = roles["missing"].name
        reason = f"the data has missing values (NaN): {roles['missing'].summary} handles them without imputing"
    # 2. A variance fraction or 'mle' needs every eigenvalue: exact solvers only.
    elif needs_spectrum and fits(exact_small):
        solver, reason = exact_small, "n_components needs the full spectrum; " + _shape_reason(exact_small, dims, registry)
    # 3. An accuracy asked for: the fastest solver (time model) that guarantees it — an exact one,
    #    or one that certifies it (block Krylov) when its predicted passes fit the read budget.
    elif tol is not None and (candidates := _guaranteeing(by_name)):
        best = min(candidates, key=lambda e: e.seconds)
        solver = best.name
        others = ", ".join(f"{e.name} ≈ {e.seconds:.3g} s" for e in candidates if e is not best)
        reason = (f"tol = {tol:g}: the fastest solver that guarantees it, ≈ {best.seconds:.3g} s "
                  f"in {best.passes} pass{'es' if best.passes != 1 else ''}" + (f" (vs {others})" if others else ""))
    # 4. No accuracy asked: an exact road where it costs about what the certified one does (tall
    #    data: the covariance's one pass), else block Krylov certified to DEFAULT_TOL.
    elif default_road and (choice := _default_road(by_name, exact_small, registry)) is not None:
        solver, reason = choice
        # The default road is exact or certifies DEFAULT_TOL (_guaranteeing chose among those).
        default_tol = None if by_name[solver].exact else DEFAULT_TOL
    # 5. The exact one-pass (covariance) or two-pass (Gram) solver, when its matrix fits a task.
    elif fits(exact_small):
        solver, reason = exact_small, _shape_reason(exact_small, dims, registry)
    # 6. Otherwise whatever fits, cheapest first: block Krylov (or randomized), then ALS.
    elif fits(approximate):
        solver, reason = approximate, _no_exact_reason(by_name, exact_small, budget, dims, registry)
    elif fits(last := _name(roles["last-resort"])):
        solver, reason = last, f"only {roles['last-resort'].summary} fits the per-task memory budget"
    # 7. An estimator with one other road (MCA's Krylov, CCA's PCA first) takes it, fitting or not.
    elif (instead := _name(roles["instead"])) is not None:
        solver, reason = instead, _no_exact_reason(by_name, exact_small, budget, dims, registry)
        if not fits(instead):
            warnings.append(f"estimated task memory {format_bytes(by_name[instead].task_bytes)} exceeds the budget "
                            f"{format_bytes(budget)}: use smaller chunks or workers with more memory")
    else:
        solver, reason = exact_small, "nothing fits the per-task memory budget; the exact solver is tried anyway"
        warnings.append(f"estimated task memory {format_bytes(by_name[exact_small].task_bytes)} exceeds the budget {format_bytes(budget)}: "
                        "use smaller chunks or workers with more memory")
    if tol is not None and solver == approximate and not by_name[solver].certified:
        warnings.append(f"tol = {tol:g} may not be reached within the read budget of {by_name[solver].most_passes - reads.get(solver, 0)} passes "
                        "(predicted for λ_k/λ_{ℓ+1} ≈ 2); the fit reports the bound it reaches")
    if tol is None and solver == approximate and default_tol is None:
        warnings.append("no tol given and an approximate solver chosen: the fit reports its error bound "
                        "(solver_info_['error_bound']); pass tol= to ask for an accuracy")
    runner_up = next(
        (e.name for e in sorted(estimates, key=lambda e: (not e.feasible, _pass_count(e), e.flops))
         if e.name != solver and e.feasible and (e.exact or not needs_spectrum) and not _only_for_missing(e.name, registry)),
        None,
    )
    if solver in by_name and by_name[solver].copy_passes:  # the re-layout is part of the road: say so
        reason += f"; {by_name[solver].note}"
    if device is not None and requested is None:
        reason += f" (priced on the device, {device.name})"
    plan = Plan(solver, reason, runner_up, n, d, k, budget, source, estimates, warnings, tol, geometry, threads,
                cache=caches.get(solver), default_tol=default_tol, device=device, fields=fields,
                priced_for=priced_for if cache_for is not None else None)
    if requested is not None:
        check_requested(requested, plan, registry, names)
    logger.info("daskpca: solver=%r (%s)", solver, reason)
    return plan


def _default_road(by_name: dict, exact_small: str, registry) -> tuple[str, str] | None:
    """``(solver, reason)`` without a tol: the exact road for the shape (``exact_small``; else the
    fastest exact one that fits) when it costs at most EXACT_PREMIUM × the certified road's
    (block Krylov's) predicted time for DEFAULT_TOL, else that road; None when neither fits (the
    later rules then decide)."""
    candidates = _guaranteeing(by_name)  # priced for DEFAULT_TOL
    exact = [e for e in candidates if e.exact]
    krylov = next((e for e in candidates if not e.exact), None)
    best = next((e for e in exact if e.name == exact_small), None) or min(exact, key=lambda e: e.seconds, default=None)
    if best is None and krylov is None:
        return None
    if krylov is None:
        return best.name, f"exact: {_shape_reason_of(best, registry)} (≈ {best.seconds:.3g} s); block Krylov does not fit or " \
                          f"cannot certify the default accuracy {DEFAULT_TOL:g} within its read budget"
    if best is not None and best.seconds <= EXACT_PREMIUM * krylov.seconds:
        return best.name, (f"exact at about the cost of a certified answer: {_shape_reason_of(best, registry)}, ≈ {best.seconds:.3g} s "
                           f"against ≈ {krylov.seconds:.3g} s for block Krylov to sin θ ≤ {DEFAULT_TOL:g}")
    against = f" against ≈ {best.seconds:.3g} s for the exact {best.name!r}" if best is not None else ""
    return krylov.name, (f"no tol given: block Krylov certified to the default accuracy sin θ ≤ {DEFAULT_TOL:g} "
                      f"(≈ {krylov.seconds:.3g} s in {krylov.passes} predicted passes{against}; "
                      "error_bound_ reports the bound reached; pass tol= or an exact solver= to change it)")


def _shape_reason_of(estimate: SolverEstimate, registry) -> str:
    return getattr(registry.get(estimate.name), "summary", "") or estimate.name


def _guaranteeing(by_name: dict) -> list[SolverEstimate]:
    """Feasible solvers that meet the plan's accuracy: exact ones, then those that certify it
    within their read budget (block Krylov; ``SolverEstimate.certified``, asked with its cost)."""
    exact = [e for e in by_name.values() if e.exact and e.feasible]
    exact += [e for e in by_name.values() if not e.exact and e.feasible and e.certified]
    return [e for e in exact if e.seconds is not None]


def _pass_count(estimate: SolverEstimate) -> float:
    return estimate.passes if isinstance(estimate.passes, int) else 10.0


def _no_exact_reason(by_name: dict, exact_small: str, budget: int, dims: tuple, registry) -> str:
    """Why no exact solver fits a task, naming the real limit (a strip too wide for this
    chunking is not the n² matrix; the exact road's own words where it declares them,
    ``too_large``)."""
    estimate = by_name[exact_small]
    too_large = getattr(registry.get(exact_small), "too_large", None)
    if too_large is not None:
        return too_large(*dims, estimate.task_bytes)
    if estimate.note:
        return f"no exact solver fits a task: {exact_small} needs {format_bytes(estimate.task_bytes)} " \
               f"(budget {format_bytes(budget)}) because {estimate.note}"
    return f"no exact solver fits a task: {exact_small} needs {format_bytes(estimate.task_bytes)} (budget {format_bytes(budget)})"


def _shape_reason(name: str, dims: tuple, registry) -> str:
    """Why the exact road ``name`` suits this shape (its declaration's ``reason``, told ``dims``:
    ``(n, d)``, or ``(n, dx, dy)`` for two fields)."""
    reason = getattr(registry.get(name), "reason", None)
    return reason(*dims) if reason is not None else f"the exact {name!r} for this shape"


def check_requested(name: str, plan: Plan, registry=None, names=None) -> None:
    """Raise when an explicitly requested solver cannot fit in memory, naming one that does;
    ``names``: how the estimator's ``solver=`` spells each solver of ``registry`` (HilbertPCA names
    its roads by their method), None where it uses their names."""
    if name not in {e.name for e in plan.estimates}:
        return
    estimate = plan.estimate(name)
    if estimate.feasible:
        return
    spelled = (names or {}).get
    alternatives = [spelled(e.name, e.name) for e in plan.estimates if e.feasible and not _only_for_missing(e.name, registry)]
    name = spelled(name, name)
    raise InputError(
        f"solver={name!r} needs about {format_bytes(estimate.task_bytes)} in one task for X of shape "
        f"({plan.n_samples}, {plan.n_features}), more than the budget of "
        f"{format_bytes(plan.task_memory_budget)} ({plan.memory_source}). "
        + (f"Use solver={alternatives[0]!r} (fits), or solver='auto'." if alternatives
           else "Use smaller chunks or workers with more memory.")
    )


def error_bound(info: dict) -> float:
    """The fitted model's ``error_bound_``: the bound on sin θ of the kept subspace each solver
    reports in its info (exact solvers 0, Krylov its a posteriori bound); NaN for approximate
    solvers that compute none (randomized, als, ppca) — and for stores written before solvers
    reported it."""
    return float(info.get("error_bound", float("nan")))


def fit_warnings(model, module, solver: str, *, chosen_by_planner: bool, registry=None, names=None) -> list[tuple[str, type]]:
    """``(message, category)`` of every warning a finished fit owes its caller (the estimator
    emits them): kept components too small for a solver that squares the data, an approximate
    answer nobody asked for (``solver="auto"`` without ``tol`` where no exact solver fit and no
    bound was certified) with the bound it carries, and a default accuracy (DEFAULT_TOL) missed. A ``tol`` missed within ``max_passes`` is the solver's own
    warning (it knows the bound it reached). ``module`` is the solver that ran (its declarations
    say whether it squares the data), ``solver`` its name for the messages; the exact roads a
    message recommends are ``registry``'s (None: PCA's, :data:`daskpca.solvers.SOLVERS`), spelled
    as the estimator's ``solver=`` takes them (``names``, as for :func:`check_requested`)."""
    from .exceptions import AccuracyWarning, IllConditionedWarning

    out = []
    message = None
    if getattr(module, "SQUARES_THE_DATA", False):
        message = ill_conditioning_warning(model.explained_variance_, solver, model.n_samples_)
    if message:
        out.append((message, IllConditionedWarning))
    default = model.solver_info_.get("tol") if chosen_by_planner and model.tol is None else None
    # The solver's own bound: the input's precision, added to error_bound_, has its own warning.
    solver_bound = model.solver_info_.get("solver_error_bound", model.error_bound_)
    if default is not None and not solver_bound <= default:  # the default accuracy was missed
        out.append((
            f"solver='auto' ran block Krylov for the default accuracy sin θ ≤ {default:g} without reaching it: its "
            f"error bound is {model.error_bound_:.1e} (error_bound_). Raise max_passes, or use an exact solver "
            f"({_either((names or {}).get(s.name, s.name) for s in (registry or SOLVERS).values() if s.exact_for)}).",
            AccuracyWarning,
        ))
    exact = getattr(module, "exact", getattr(module, "EXACT", False))
    if exact and solver_bound >= 1.0:  # an exact road on λ_k = λ_{k+1} (to round-off): no k-subspace is the answer
        out.append((tied_modes_warning(model.n_components_, "λ", model.explained_variance_[-1],
                                       model.solver_info_.get("next_variance"), "explained_variance_"), AccuracyWarning))
    elif default is None and chosen_by_planner and model.tol is None and not exact:
        bound = model.error_bound_
        out.append((
            f"no exact solver fits a task for this input, so solver='auto' ran the approximate {solver!r} "
            + (f"solver; its error bound on sin θ of the kept subspace is {bound:.1e} (error_bound_). "
               if np.isfinite(bound) else "solver, which reports no error bound. ")
            + "Pass tol= (e.g. 1e-4) to ask for an accuracy, or give the workers more memory for an exact fit.",
            AccuracyWarning,
        ))
    return out


def tied_modes_warning(k: int, symbol: str, kth: float, after: float | None, attribute: str) -> str:
    """The warning of an exact road whose k-th and (k+1)-th eigenvalues (``symbol`` "λ") or
    singular values ("σ") are equal to round-off (its bound, ``solvers._bounds.exact_bound``, is 1):
    no k-dimensional subspace is the answer. ``attribute`` names where the user reads the spectrum."""
    tied = f"{symbol}_{k} = {kth:.6g} and {symbol}_{k + 1}" + (f" = {after:.6g}" if after is not None else "")
    return (f"{tied} are equal to round-off: the data determine no {k}-dimensional subspace (any rotation within "
            f"the tied modes is as good), so error_bound_ is 1. Keep a number of components at a gap of the "
            f"spectrum ({attribute}).")


def ill_conditioning_warning(explained_variance, solver: str, n_samples: int) -> str | None:
    """A warning when kept eigenvalues are too small for a solver that squares the data (one
    that declares ``SQUARES_THE_DATA``: covariance, Gram, Krylov, which forms X̃ᵀX̃ implicitly).

    Squaring the data (XᵀX or XXᵀ) leaves eigenvalues with an absolute error of about
    ε·λ_max·size; components whose variance is below ``ILL_CONDITIONED_RATIO``·λ_max have lost
    most of their relative accuracy (singular values below ~1e-5·σ_max in float64). Components
    past n − 1 are skipped: centering makes their variance zero by construction.
    """
    variance = np.asarray(explained_variance)[: max(n_samples - 1, 1)]
    if len(variance) == 0 or variance[0] <= 0:
        return None
    ratio = variance[-1] / variance[0]
    if ratio < ILL_CONDITIONED_RATIO:
        return (
            f"component {len(variance)}'s variance is {ratio:.1e} of the first's: below "
            f"{ILL_CONDITIONED_RATIO:g}, solver={solver!r} (which squares the data) cannot resolve it "
            "accurately (it may also be exactly zero: data of lower rank). Refit with "
            f"{_either(s.name for s in SOLVERS.values() if s.exact and not s.squares_the_data)} for small components, "
            "or keep fewer components."
        )
    return None


def _either(names) -> str:
    """``solver='a' or 'b'``: the solvers a message recommends, from their declarations."""
    names = [repr(name) for name in names]
    return "solver=" + " or ".join(names) if names else "another solver"


#: Variance ratio (λ_k / λ_1) below which the squared-data solvers lose relative accuracy:
#: their eigenvalues carry absolute errors ~1e-16·λ_1·size, so at 1e-10 only ~5 digits remain.
ILL_CONDITIONED_RATIO = 1e-10


def cache_choice(chosen: SolverEstimate | None, matrix, cache="auto"):
    """The pass cache (:func:`daskpca.passes._cache.choose`) a fit with the solver of ``chosen``
    would keep (:func:`cache_question`). Reads no data."""
    from .passes import choose, gather, on_device

    runner, device = what_runs(), on_device(matrix)  # each asked once, for the facts and the question
    facts = gather(matrix, cache, device=device, runner=runner)
    return choose(matrix, cache, facts=facts, **cache_question(chosen, facts.job[1], runner[0] is not None))


def cache_question(chosen: SolverEstimate | None, later_reads: int, distributed: bool) -> dict:
    """What pricing the pass cache of a fit with the solver of ``chosen`` asks
    (:func:`daskpca.passes._cache.choose`'s keywords): its reads of the source are its passes
    (the most, for one that stops on convergence; one for a road that re-lays the input out into
    a copy of its own; at least 2 for a solver the planner has no row for) plus the job's
    ``later_reads`` (the CLI's scores), and the time of each pass it serves (on a
    ``distributed`` cluster a cached pass still moves its tasks' results)."""
    most = None if chosen is None else (chosen.passes if chosen.most_passes is None else chosen.most_passes)
    passes = 1 if chosen is not None and chosen.copy_passes else (most if isinstance(most, int) else 2)
    # Whether to cache is decided on the most reads the fit may make; its predicted time (what
    # the cache saves) on the reads the plan predicts — the budget would count passes never run
    # (a Krylov fit planned at 10 passes within a budget of 20 was predicted a negative time).
    predicted = passes
    if chosen is not None and not chosen.copy_passes and isinstance(chosen.passes, int) and chosen.passes:
        predicted = chosen.passes
    flop_seconds, read_seconds, working = 0.0, None, 0
    if chosen is not None:
        flop_seconds = chosen.flops / flop_rate(chosen) / max(predicted, 1)
        if distributed:
            flop_seconds += chosen.tasks * chosen.result_bytes / TRANSFER_BYTES_PER_SECOND
        if chosen.uncached is not None and isinstance(chosen.passes, int) and chosen.passes:
            read_seconds = (chosen.uncached - chosen.client_flops / CLIENT_FLOPS_PER_SECOND - chosen.local_seconds) / chosen.passes
        working = chosen.task_bytes
    return dict(reads=passes + later_reads, working_bytes=working, flop_seconds=flop_seconds, read_seconds=read_seconds,
                fit_reads=predicted)


def cache_pricing(matrix, cache="auto", *, device=None, runner: tuple | None = None, facts=None):
    """``make_plan``'s ``cache_for``: ``estimates -> {solver: CacheChoice}``, each solver's pass
    cache (:func:`cache_question`). The input's and the machine's facts (in memory already? on a
    device? the threads, a cluster, the job's later reads) are gathered here once, as none of
    them is the solver's, and the cache module prices every solver in one visit. ``device`` and
    ``runner``: the chunks' backend and what runs the tasks, or ``facts`` (:func:`~daskpca.passes.gather`'s),
    when the caller asked them already."""
    from .passes import choose_each, gather

    facts = gather(matrix, cache, device=device, runner=runner) if facts is None else facts
    later = facts.job[1]

    def price(estimates) -> dict:
        questions = [cache_question(e, later, facts.distributed) for e in estimates]
        return dict(zip([e.name for e in estimates], choose_each(matrix, cache, questions, facts)))

    return price


def cached(estimate: SolverEstimate, choice) -> SolverEstimate:
    """``estimate`` timed with the passes ``choice`` serves at their cached time (from its
    uncached time: a plan timed once with a cache and again in the job is not discounted twice)."""
    if choice is None or estimate.seconds is None:
        return estimate
    return replace(estimate, seconds=estimate.uncached - choice.saved, uncached_seconds=estimate.uncached)


def pricing(array, cache="auto") -> dict:
    """:func:`make_plan`'s keywords that come from one input's dask ``array`` and from what will
    run it — its ``geometry``, what runs the tasks (``runner``), the ``device`` its chunks live on
    and each solver's pass cache (``cache_for``) — each fact asked once for the whole plan."""
    from .passes import gather, geometry_of, on_device

    geometry, runner, backend = geometry_of(array), what_runs(), on_device(array)
    device = device_pricing(array, backend)
    facts = gather(array, cache, device=backend, runner=runner)
    return dict(geometry=geometry, runner=runner, device=device, priced_for=facts.job,
                cache_for=cache_pricing(array, cache, facts=facts),
                chunk_seconds=chunk_seconds(geometry, bool(facts.stored), reading_processes(runner)))


def reading_processes(runner: tuple) -> int:
    """The processes whose zarr event loops read a pass's storage chunks (:func:`chunk_seconds`):
    the threaded scheduler's one, or a cluster's workers (``runner``: :func:`what_runs`)."""
    from .passes import worker_infos

    return 1 if runner[0] is None else max(len(worker_infos(runner[0])), 1)


def joint_pricing(arrays, cache="auto") -> dict:
    """:func:`make_plan`'s ``cache_for`` and ``chunk_seconds`` for fields read together in every
    pass (MCA's two): the pass cache priced for all of them at once (:func:`cache_pricing`), and
    what a pass over the source spends on each one's storage chunks (:func:`chunk_seconds`, summed:
    every pass reads them all). Reads no data."""
    from .passes import gather, geometry_of

    arrays = list(arrays)
    runner = what_runs()
    facts = gather(arrays, cache, runner=runner)
    processes = reading_processes(runner)
    seconds = sum(chunk_seconds(geometry_of(array), any(array is s for s in facts.stored), processes) for array in arrays)
    return dict(cache_for=cache_pricing(arrays, cache, facts=facts), chunk_seconds=seconds)


def chunk_seconds(geometry: Geometry | None, stored: bool, processes: int = 1) -> float:
    """Seconds one pass over the source spends on its storage chunks beyond its bytes and tasks
    (:data:`CHUNK_CALL_SECONDS`): by how its tasks read them (``geometry``, None: as stored),
    whether they come from a store (``stored``) and the ``processes`` that read (one zarr event
    loop each: the threaded scheduler's one, or a cluster's workers)."""
    if geometry is None or geometry.read == "as stored":
        return 0.0
    if geometry.read == "selection":
        per_chunk = SELECTION_CHUNK_SECONDS
    else:
        per_chunk = BLOCK_SECONDS + (CHUNK_CALL_SECONDS if stored else 0.0)
    return geometry.storage_chunks * per_chunk / max(processes, 1)


def with_cache(plan: Plan, matrix, cache="auto") -> Plan:
    """``plan`` with the pass cache of the solver it runs (:func:`cache_choice`) and that solver
    timed with it: for a plan made earlier and re-costed in the job that runs it (``PCA.fit(X, plan=...)``: the job's cluster and
    later reads decide the cache)."""
    names = {e.name for e in plan.estimates}
    chosen = plan.estimate(plan.solver) if plan.solver in names else None
    choice = cache_choice(chosen, matrix, cache)
    estimates = list(plan.estimates)
    if chosen is not None:
        estimates[estimates.index(chosen)] = cached(chosen, choice)
    return replace(plan, cache=choice, estimates=estimates, priced_for=None)  # priced now, for facts not asked
