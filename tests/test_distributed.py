"""Fits on a real distributed cluster: a scheduler and two worker processes on loopback."""

import dask
import dask.array as da
import numpy as np
import pytest
from distributed import Client, LocalCluster, get_task_stream

from daskpca import PCA

from _helpers import low_rank_data, reference_pca, sin_theta, write_zarr


@pytest.fixture(scope="module")
def client():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None, memory_limit="1GiB") as cluster, Client(cluster) as client:
        yield client


@pytest.mark.parametrize("shape, chunks, solver", [((4_000, 50), (500, 25), "covariance"), ((40, 4_000), (20, 500), "gram")])
def test_fit_and_transform_on_worker_processes(client, tmp_path, shape, chunks, solver):
    X = low_rank_data(*shape, dtype=np.float32)
    array, _ = write_zarr(tmp_path / "x.zarr", X, chunks)
    with get_task_stream(client) as stream:
        pca = PCA(5).fit(da.from_zarr(str(tmp_path / "x.zarr")))
    components, variance, mean = reference_pca(X)
    assert pca.solver_ == solver
    assert sin_theta(pca.components_, components[:5]) <= 1e-6
    np.testing.assert_allclose(pca.explained_variance_, variance[:5], rtol=1e-6)
    scores = pca.transform(da.from_zarr(str(tmp_path / "x.zarr"))).compute()
    assert scores.shape == (shape[0], 5)
    # The fit's tasks really ran on the worker processes, spread over both of them.
    assert len({task["worker"] for task in stream.data}) == 2


def test_partial_results_report_their_real_size():
    # distributed's memory accounting and transfer costs use dask.sizeof: a d×d scatter must not
    # look like a 56-byte object.
    from dask.sizeof import sizeof

    from daskpca.passes._moments import chunk_moments

    part = chunk_moments(low_rank_data(300, 200))
    assert sizeof(part) >= 200 * 200 * 8


def test_a_test_matrix_travels_once_per_pass_not_once_per_task(tmp_path):
    # Ω (d×ℓ) is one key that every row-block and merge task depends on; as a plain argument it
    # would be copied into each of the 46 tasks, and distributed serialises every task on its
    # own (pickled one by one: 0.10 MB shared, 3.3 MB as plain arguments).
    import cloudpickle
    import dask

    from daskpca.passes._graph import map_row_blocks, tree_reduce
    from daskpca.passes._sketch import _merge_sketches, _sketch_block

    X = low_rank_data(4_000, 300)
    write_zarr(tmp_path / "x.zarr", X, (100, 300))
    omega = np.random.default_rng(0).standard_normal((300, 30))  # 72 kB
    leaves = map_row_blocks(da.from_zarr(str(tmp_path / "x.zarr")), _sketch_block, "pass", omega)
    root = tree_reduce(leaves, _merge_sketches, "merge", omega)
    graph = dict(root.__dask_graph__())
    assert sum(len(cloudpickle.dumps(task)) for task in graph.values()) < 3 * omega.nbytes


def _graph_sizes(recorded) -> list[int]:
    """Sizes of the graphs the client sent, from distributed's large-graph warnings (with the
    threshold at 1 byte, every graph warns with its pickled size)."""
    import re

    from dask.utils import parse_bytes

    sizes = [re.search(r"Sending large graph of size ([\d.]+ \w+)", str(w.message)) for w in recorded]
    return [parse_bytes(match.group(1)) for match in sizes if match]


@pytest.mark.parametrize("solver", ["krylov", "als"])
def test_a_pass_graph_stays_small_whatever_d(client, tmp_path, solver):
    # Bases, means and the feature stage's factor go to the workers ahead of the graph: every
    # graph a fit, transform and score send is a few KB at d = 2 000 and at d = 16 000 (where
    # the basis alone is 16 000 × 15 × 8 = 1.9 MB), and the results are the threaded scheduler's.
    import warnings

    import dask

    largest = {}
    for d in (2_000, 16_000):
        X = low_rank_data(120, d, dtype=np.float32, seed=d)
        write_zarr(tmp_path / f"x{d}.zarr", X, (30, d // 2))
        weights = np.linspace(0.5, 1.0, d)
        make = lambda: PCA(5, solver=solver, weights=weights, random_state=0, **(
            {"max_passes": 3} if solver == "krylov" else {"max_iter": 3}))
        data = da.from_zarr(str(tmp_path / f"x{d}.zarr"))
        with dask.config.set({"distributed.admin.large-graph-warning-threshold": "1B"}), \
                warnings.catch_warnings(record=True) as recorded:
            warnings.simplefilter("always")
            pca = make().fit(data)
            scores = pca.transform(data).compute()
            likelihood = pca.score_samples(data).compute()
        sizes = _graph_sizes(recorded)
        assert len(sizes) >= 4  # the fit's passes, transform, score_samples
        largest[d] = max(sizes)
        with dask.config.set(scheduler="threads"):
            local = make().fit(data)
            np.testing.assert_allclose(scores, local.transform(data).compute(), rtol=1e-5, atol=1e-4)
            np.testing.assert_allclose(likelihood, local.score_samples(data).compute(), rtol=1e-9)
        # The same subspace, not the same bits: workers run BLAS on one thread (distributed pins
        # it) and the threaded scheduler on several, so sums round differently in the last bits,
        # and an unconverged 3-pass Krylov basis carries that into its smallest entries (~1e-6
        # relative on entries of 1e-6, 7e-12 absolute). Subspace and spectrum must agree far
        # below any error the fit reports.
        assert sin_theta(pca.components_, local.components_) <= 1e-8
        np.testing.assert_allclose(pca.explained_variance_, local.explained_variance_, rtol=1e-9)
        np.testing.assert_allclose(pca.components_, local.components_, rtol=0, atol=1e-9)
    assert largest[16_000] < 64 * 2**10, largest
    assert largest[16_000] < 1.5 * largest[2_000], largest


def test_an_operand_shared_twice_while_a_graph_holds_it_is_sent_once(client):
    # A pass's row-block tasks and its merge tree both ask for Ω: one copy on the workers. Once
    # no graph holds it, a new pass sends a new copy (under a new name: no release race).
    import gc

    from daskpca.passes._graph import SCATTER_BYTES, share, shared

    omega = np.random.default_rng(0).standard_normal((SCATTER_BYTES // 8 + 1, 1))
    first = share(omega)
    (again,) = shared((omega.copy(),))
    assert again is first and first.key in client.who_has()
    assert client.who_has()[first.key] and len(client.who_has()[first.key]) == 2  # broadcast to both workers
    np.testing.assert_array_equal(first.result(), omega)
    key = first.key
    del first, again
    gc.collect()
    assert share(omega).key != key
    from dask.delayed import Delayed

    assert isinstance(share(np.ones(3)), Delayed)  # a small array stays in the graph


def test_bootstrap_reads_on_worker_processes_as_locally(client, tmp_path):
    from daskpca.significance import bootstrap

    X = low_rank_data(800, 10)
    write_zarr(tmp_path / "x.zarr", X, (200, 10))
    pca = PCA(3, solver="covariance").fit(X)
    with dask.config.set(scheduler="sync"):
        local = bootstrap(pca, X, n_replicates=200, random_state=3)
    remote = bootstrap(pca, da.from_zarr(str(tmp_path / "x.zarr")), n_replicates=200, random_state=3)
    np.testing.assert_allclose(remote.explained_variance_interval, local.explained_variance_interval, rtol=1e-9)
    np.testing.assert_allclose(remote.components_interval, local.components_interval, rtol=1e-9, atol=1e-12)


# What 30 fresh 1 MiB arrays cost in page faults, each freed while smaller ones stay above it in
# the heap (a decode's chunk buffers among others: trimming the heap's top cannot return them).
# Run in a worker (made by exec under a module name no process can import, so cloudpickle ships
# the function by value).
_PROBE = """
import resource
import numpy as np

def fresh_page_faults():
    kept = []
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(30):
        block = np.ones(2**17)  # 1 MiB: above a frozen 128 KiB mmap threshold, below glibc's 32 MiB ceiling
        kept.append(np.ones(2**13))  # 64 KiB, from the heap either way
        del block
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
"""


def _probe():
    namespace = {"__name__": "daskpca_test_probe"}
    exec(_PROBE, namespace)
    return namespace["fresh_page_faults"]


def test_a_fit_lets_its_workers_reuse_chunk_sized_arrays(client, tmp_path):
    # A nanny sets MALLOC_TRIM_THRESHOLD_, which freezes glibc's mmap threshold at 128 KiB: every
    # 1 MiB array is a fresh mapping, 256 page faults. After a fit the workers reuse such blocks.
    import subprocess
    import sys

    assert all(env == "65536" for env in client.run(lambda: __import__("os").environ.get("MALLOC_TRIM_THRESHOLD_")).values())
    frozen = subprocess.run(
        [sys.executable, "-c", _PROBE + "\nprint(fresh_page_faults())"], env={**__import__("os").environ,
        "MALLOC_TRIM_THRESHOLD_": "65536"}, capture_output=True, text=True, check=True)
    assert int(frozen.stdout) >= 30 * 200  # the baseline this test is about
    array, _ = write_zarr(tmp_path / "x.zarr", low_rank_data(400, 60, dtype=np.float32), (100, 60))
    PCA(3, solver="krylov", max_passes=3).fit(da.from_zarr(str(tmp_path / "x.zarr")))
    # Measured in a task (a worker thread's own arena, away from the event loop's allocations).
    workers = list(client.scheduler_info()["workers"])
    faults = {w: client.submit(_probe(), pure=False, workers=[w], allow_other_workers=False).result() for w in workers}
    assert len(faults) == 2 and all(count < 30 * 100 for count in faults.values()), faults
