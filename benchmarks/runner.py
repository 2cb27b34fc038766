"""Running one benchmark row: a method in a fresh subprocess, with its memory, reads and CPU.

Why one subprocess per method: the peak memory of a row is then that method's alone (the RSS of a
Python process never shrinks back after a big allocation), and no method inherits another's warm
caches (imported modules, dask's tokenize cache, zarr's metadata). What the subprocesses *do*
share is the OS page cache: :func:`prepare_page_cache` reads the array once before the first
row, so every row runs with the input in the page cache (cold-cache numbers need root to drop
caches; they would add the disk's read time to every row equally).

The parent (:func:`run_method`) starts ``python -m benchmarks.run --child SPEC`` (so run from the
repository root, or with it on ``PYTHONPATH``), samples the child's process tree's RSS and CPU
(:class:`TreeRSSSampler`) and reads back the JSON row the child (:func:`child_main`) wrote;
:func:`run_scored` adds the row's sin θ against the exact answer.
"""

from __future__ import annotations

import datetime
import fnmatch
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psutil

from .cases import GIB, Case, sin_theta
from .methods import CLUSTER_METHODS, method_function, preimport

#: What the parent runs, followed by the JSON spec, for each row.
CHILD_COMMAND = ("-m", f"{__package__}.run", "--child")


def prepare_page_cache(path: Path, stored: int) -> str:
    """Warm the page cache with the input unless it cannot stay cached; say which (for the header).

    An input larger than half the RAM would be evicted while it is read: every row (floors
    included) then reads it from disk.
    """
    if stored < 0.5 * psutil.virtual_memory().total:
        return f"page cache warmed in {warm_page_cache(path):.1f} s"
    return "larger than half the RAM: not cached, every row reads from disk"


def warm_page_cache(path: Path) -> float:
    t0 = time.perf_counter()
    for f in sorted(path.rglob("*")):
        if f.is_file():
            with open(f, "rb") as fh:
                while fh.read(16 * 2**20):
                    pass
    return time.perf_counter() - t0


def _tree_read_chars() -> int:
    total = 0
    me = psutil.Process()
    for p in [me, *me.children(recursive=True)]:
        try:
            total += p.io_counters().read_chars
        except (psutil.Error, AttributeError):
            pass
    return total


def child_main(spec: dict) -> None:
    """Run one method and write its result (JSON + components .npy) where the parent said."""
    case = Case(**{**spec["case"], "chunks": tuple(spec["case"]["chunks"])})
    method = spec["method"]
    result = {"method": method, "scheduler": "threads"}
    ctx: dict = {}
    import dask

    if spec.get("blas_threads"):
        from threadpoolctl import threadpool_limits

        threadpool_limits(int(spec["blas_threads"]))
    client = cluster = None
    if spec.get("cluster") and any(fnmatch.fnmatch(method, pat) for pat in CLUSTER_METHODS):
        from distributed import Client, LocalCluster

        t0 = time.perf_counter()
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
        client = Client(cluster)
        result["scheduler"] = "LocalCluster 2×1"
        result["cluster_start_s"] = time.perf_counter() - t0
    else:
        dask.config.set(scheduler="threads")
    func = method_function(method)
    preimport(method)
    reads0 = _tree_read_chars()
    t0 = time.perf_counter()
    comps, passes, note = func(spec["path"], case, ctx)
    wall = time.perf_counter() - t0
    reads1 = _tree_read_chars()
    if isinstance(comps, str) and comps == "skip":
        result.update(status="skip", note=note)
    else:
        result.update(status="ok", wall=wall, passes=passes, note=note, read_bytes=reads1 - reads0, **ctx)
        if comps is not None:
            np.save(spec["components_out"], np.asarray(comps, dtype=np.float64))
    if client is not None:
        client.close()
        cluster.close()
    with open(spec["result_out"], "w") as fh:
        json.dump(result, fh)


class TreeRSSSampler(threading.Thread):
    """Peak of Σ RSS over a process and all its descendants, sampled every ``interval`` s."""

    def __init__(self, pid: int, interval: float = 0.02):
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.peak = 0
        self.cpu = {}  # pid -> last seen user+system seconds (the tree's own CPU use)
        self._halt = threading.Event()

    def run(self):
        try:
            root = psutil.Process(self.pid)
        except psutil.Error:
            return
        while not self._halt.is_set():
            total = 0
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                break
            for p in procs:
                try:
                    total += p.memory_info().rss
                    t = p.cpu_times()
                    self.cpu[p.pid] = t.user + t.system
                except psutil.Error:
                    pass
            self.peak = max(self.peak, total)
            self._halt.wait(self.interval)

    def stop(self):
        self._halt.set()
        self.join()


def _busy_cpu_seconds() -> float:
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + getattr(t, "irq", 0) + getattr(t, "softirq", 0) + getattr(t, "steal", 0)


def add_row_options(ap, timeout: float) -> None:
    """The command-line options :func:`run_method` reads from ``args`` (``timeout``: the default, s)."""
    ap.add_argument("--cluster", action="store_true", help="run floors and daskpca rows on a 2-worker distributed LocalCluster")
    ap.add_argument("--timeout", type=float, default=timeout, help=f"seconds before a method is killed (default {timeout:.0f})")
    ap.add_argument("--repeat", type=int, default=1, help="run each method N times, report the fastest (default 1)")
    ap.add_argument("--blas-threads", type=int, default=None, help="limit BLAS threads in every method (threadpoolctl); default: leave as is")
    ap.add_argument("--verbose", action="store_true", help="show each method's own output")


def wall_times(fn, repeat: int) -> list[float]:
    """Wall seconds of ``repeat`` calls of ``fn`` (in this process: for kernels, not rows)."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def components_file(tmp: Path, case: Case, method: str) -> Path:
    """Where a row's child saves its components (float64 .npy) for the parent to score."""
    return tmp / f"{case.name}.{method}.npy"


def run_scored(method: str, case: Case, path: Path, exact: np.ndarray, args, tmp: Path) -> dict:
    """:func:`run_method_best`, plus the row's ``sin_theta`` against ``exact`` when it ran."""
    row = run_method_best(method, case, path, args, tmp)
    comp_file = components_file(tmp, case, method)
    if row.get("status") == "ok" and comp_file.exists():
        row["sin_theta"] = sin_theta(np.load(comp_file), exact)
        comp_file.unlink()
    return row


def run_method_best(method: str, case: Case, path: Path, args, tmp: Path) -> dict:
    """Run a method ``--repeat`` times; keep the fastest run's row and the largest peak."""
    rows = [run_method(method, case, path, args, tmp) for _ in range(max(1, args.repeat))]
    ok = [r for r in rows if r.get("status") == "ok"]
    if not ok:
        return rows[-1]
    best = dict(min(ok, key=lambda r: r["wall"]))
    best["peak_rss"] = max(r["peak_rss"] for r in ok)
    best["walls"] = [r["wall"] for r in ok]
    return best


def run_method(method: str, case: Case, path: Path, args, tmp: Path) -> dict:
    spec = {
        "case": case.params(),
        "method": method,
        "path": str(path),
        "cluster": args.cluster,
        "blas_threads": args.blas_threads,
        "components_out": str(components_file(tmp, case, method)),
        "result_out": str(tmp / f"{case.name}.{method}.json"),
    }
    cmd = [sys.executable, *CHILD_COMMAND, json.dumps(spec)]
    t0 = time.perf_counter()
    busy0 = _busy_cpu_seconds()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    sampler = TreeRSSSampler(proc.pid)
    sampler.start()
    try:
        output, _ = proc.communicate(timeout=args.timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the child's own session: it and its workers only
        output, _ = proc.communicate()
        timed_out = True
    sampler.stop()
    elapsed = time.perf_counter() - t0
    # CPU time other processes used while this row ran: a shared machine makes rows slower.
    foreign = max(0.0, _busy_cpu_seconds() - busy0 - sum(sampler.cpu.values()))
    row = {
        "case": case.name, "method": method, "peak_rss": sampler.peak, "elapsed_total": elapsed,
        "other_cpu_pct": 100.0 * foreign / (elapsed * (os.cpu_count() or 1)),
    }
    if timed_out:
        row.update(status="timeout", note=f"killed after {args.timeout:.0f} s")
        return row
    try:
        with open(spec["result_out"]) as fh:
            row.update(json.load(fh))
    except FileNotFoundError:
        tail = " | ".join(line for line in output.strip().splitlines()[-3:])
        row.update(status="error", note=tail[-300:])
        return row
    if args.verbose and output.strip():
        print(output, flush=True)
    return row


def machine_info() -> dict:
    info = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "ram_gib": round(psutil.virtual_memory().total / GIB, 1),
        "env": {k: v for k, v in os.environ.items() if k.startswith(("OPENBLAS", "OMP_", "MKL_", "DASK_"))},
    }
    versions = {}
    for mod in ["numpy", "scipy", "dask", "distributed", "zarr", "sklearn", "daskpca", "dask_ml", "xeofs"]:
        try:
            versions[mod] = __import__(mod).__version__
        except Exception:
            versions[mod] = None
    info["versions"] = versions
    try:
        import scipy.linalg  # noqa: F401  (loads scipy's BLAS so it is listed)
        from threadpoolctl import threadpool_info

        info["blas"] = [
            f"{i['internal_api']} {i.get('version')} {i.get('architecture', '')} threads={i['num_threads']}".replace("  ", " ")
            for i in threadpool_info()
        ]
    except Exception:
        pass
    return info
