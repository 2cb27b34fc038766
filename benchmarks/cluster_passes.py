"""What a Krylov pass sends on a distributed cluster, against the threaded scheduler (issue 25).

One store (``n × d`` float32 zarr, row-chunked, d ≈ 10⁶ by default), three fits of the same
Krylov passes (``max_passes`` of them, fixed seed):

- ``threads``: the threaded scheduler in this process (2 threads);
- ``cluster``: a separately started ``dask scheduler`` and two ``dask worker`` processes (one
  thread each) on loopback, with the basis scattered to the workers ahead of each pass (today's
  :func:`daskpca.passes._graph.share`);
- ``cluster-embedded``: the same cluster with the basis embedded in each pass's graph, as before
  issue 25 (``SCATTER_BYTES`` set above any array's size), for comparison.

For each: wall time per pass (``pass_seconds_``), the largest graph the client sent (distributed's
own pickled size, read from its large-graph warning with the threshold at 1 byte) and the
scheduler process's peak resident memory (``VmHWM``; it is measured after each fit, in the order
above, so a later fit's peak only shows when it exceeds the earlier ones). The scheduler runs in
its own process so its memory is not the client's.

Run (≈ 3–5 min on 2 busy cores, 0.8 GB of disk at the defaults)::

    PYTHONPATH=. python -m benchmarks.cluster_passes --dir /tmp/cluster-passes
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import zarr
from distributed import Client
from dask.utils import parse_bytes


def write_store(path: Path, n: int, d: int, chunk_rows: int) -> None:
    """``n × d`` float32 of a low-rank signal plus noise, one zarr chunk per ``chunk_rows`` rows."""
    if path.exists():
        return
    rng = np.random.default_rng(0)
    rank = 10
    loadings = rng.standard_normal((rank, d)).astype(np.float32)
    array = zarr.create_array(str(path), shape=(n, d), chunks=(chunk_rows, d), dtype="float32")
    for start in range(0, n, chunk_rows):
        rows = min(chunk_rows, n - start)
        block = rng.standard_normal((rows, rank)).astype(np.float32) @ loadings
        block += 0.1 * rng.standard_normal((rows, d), dtype=np.float32)
        array[start:start + rows] = block


def peak_rss(pid: int) -> int:
    """Peak resident memory (bytes) of a process, from /proc (Linux)."""
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", text).group(1)) * 1024


def fit(store: Path, k: int, passes: int) -> dict:
    """One Krylov fit; its pass times and the sizes of the graphs the client sent."""
    from daskpca import PCA

    with dask.config.set({"distributed.admin.large-graph-warning-threshold": "1B"}), \
            warnings.catch_warnings(record=True) as recorded:
        warnings.simplefilter("always")
        start = time.perf_counter()
        pca = PCA(k, solver="krylov", max_passes=passes, random_state=0).fit(da.from_zarr(str(store)))
        seconds = time.perf_counter() - start
    sizes = [parse_bytes(m.group(1)) for w in recorded
             if (m := re.search(r"Sending large graph of size ([\d.]+ \w+)", str(w.message)))]
    return {"fit_seconds": round(seconds, 2), "pass_seconds": [round(s, 2) for s in pca.pass_seconds_],
            "largest_graph_bytes": max(sizes, default=0), "graphs": len(sizes),
            "components": pca.components_}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--d", type=int, default=1_000_000)
    parser.add_argument("--chunk-rows", type=int, default=25)
    parser.add_argument("-k", type=int, default=5)
    parser.add_argument("--passes", type=int, default=3)
    args = parser.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    store = args.dir / f"x-{args.n}x{args.d}.zarr"
    start = time.perf_counter()
    write_store(store, args.n, args.d, args.chunk_rows)
    print(f"store {store}: {args.n} × {args.d} float32, {args.chunk_rows} rows a chunk "
          f"(written in {time.perf_counter() - start:.0f} s); load average {os.getloadavg()[0]:.1f}")

    results = {}
    with dask.config.set(scheduler="threads"):
        results["threads"] = fit(store, args.k, args.passes)


    from daskpca.passes import _graph

    scheduler_file = args.dir / "scheduler.json"
    scheduler_file.unlink(missing_ok=True)
    dask_cli = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
    scheduler = subprocess.Popen([*dask_cli, "--scheduler-file", str(scheduler_file), "--host", "127.0.0.1",
                                  "--no-dashboard"], stderr=subprocess.DEVNULL)
    workers = []
    try:
        while not scheduler_file.exists():
            time.sleep(0.2)
        time.sleep(0.5)
        address = json.loads(scheduler_file.read_text())["address"]
        workers = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1",
                                     "--memory-limit", "6GiB", "--no-dashboard", "--no-nanny"],
                                    stderr=subprocess.DEVNULL) for _ in range(2)]
        with Client(address) as client:
            client.wait_for_workers(2)
            # Workers import daskpca on their first task: not a pass's cost.
            client.run(lambda: __import__("daskpca.solvers.randomized"))
            baseline = peak_rss(scheduler.pid)
            results["cluster"] = fit(store, args.k, args.passes)
            results["cluster"]["scheduler_peak_rss"] = peak_rss(scheduler.pid)
            scatter_bytes, _graph.SCATTER_BYTES = _graph.SCATTER_BYTES, 2**62  # the old road: embedded
            try:
                results["cluster-embedded"] = fit(store, args.k, args.passes)
            finally:
                _graph.SCATTER_BYTES = scatter_bytes
            results["cluster-embedded"]["scheduler_peak_rss"] = peak_rss(scheduler.pid)
    finally:
        for process in [*workers, scheduler]:
            process.terminate()
            process.wait(timeout=30)

    reference = results["threads"].pop("components")
    print(f"scheduler peak RSS before any fit: {baseline / 2**20:.0f} MiB")
    for name, result in results.items():
        components = result.pop("components", reference)
        result["max_abs_difference_to_threads"] = float(np.max(np.abs(components - reference)))
        if "scheduler_peak_rss" in result:
            result["scheduler_peak_rss_mib"] = round(result.pop("scheduler_peak_rss") / 2**20)
        print(f"{name:>17}: {json.dumps(result)}")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
