"""Suite-wide settings and shared fixtures.

**Slow stress variants** (``@pytest.mark.slow``: the out-of-core notebook, a fit losing ten
workers, an input three times the cluster's memory) are skipped in a contributor's default run
and run with ``--run-slow``, or whenever ``DASKPCA_RUN_SLOW=1`` or ``CI`` is set in the
environment (CI sets it), so CI still runs the whole suite.

**Container smoke run** (``@pytest.mark.containers``: deploy/smoke.sh builds the image and runs
the compose cluster under podman, several minutes) is never part of the default run, CI's
included: run it with ``--run-containers`` or ``DASKPCA_RUN_CONTAINERS=1``. Where podman is
absent it skips with that reason.

**Exact float comparisons** state their claim. Exact equality where the claim is the same
arithmetic in the same order in one process (the pass cache against no cache, a resumed fit
against an uninterrupted one, stored arrays read back); ``_helpers.assert_equal_up_to_rounding``
(``ROUNDING_RTOL``) where two roads reach one number — a loaded model's transform (its arrays
have another layout, and OpenBLAS picks its kernel and summation order by layout and alignment)
or a fixture computed on another machine. The suite must pass under every OpenBLAS kernel the
CPU can run; a user's CPU picks its own. To try the others on one machine::

    for kernel in Prescott Haswell Zen SkylakeX; do OPENBLAS_CORETYPE=$kernel python -m pytest -q; done

(``SkylakeX`` needs AVX-512: on a CPU without it, OpenBLAS stops with an illegal instruction
before any test runs; ``OPENBLAS_VERBOSE=2`` prints the kernel chosen.)

No test uses a fixed port: clusters are started with ``dashboard_address=None`` (or ``":0"``)
and workers on ``127.0.0.1`` with ephemeral ports, so parallel runs and a running Jupyter do not
collide ("port 8787 already in use").
"""

from __future__ import annotations

import os

import pytest

# One BLAS thread per process. The suite runs three xdist workers on CI's two cores, each with
# threaded dask tasks, subprocesses, notebook kernels and clusters: OpenBLAS's own threads (one
# per core in every process, spinning while they wait) made BLAS-heavy files 4x slower in CPU
# time (test_accuracy_reporting + test_solver_krylov: 214 s of CPU -> 43 s). Set here, at the
# controller's first conftest import, so the xdist workers and every process a test starts
# inherit it before they import NumPy (distributed does the same for its workers). An explicit
# setting in the environment wins.
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", default=False,
                     help="also run the slow stress variants (@pytest.mark.slow); CI always does")
    parser.addoption("--run-containers", action="store_true", default=False,
                     help="also run the container smoke run (@pytest.mark.containers: podman, minutes)")


def run_slow(config) -> bool:
    """Whether this run includes the slow stress variants."""
    return bool(config.getoption("--run-slow") or os.environ.get("DASKPCA_RUN_SLOW") == "1"
                or os.environ.get("CI", "").lower() not in ("", "0", "false"))


def run_containers(config) -> bool:
    """Whether this run includes the container smoke run (never by default, not in CI)."""
    return bool(config.getoption("--run-containers") or os.environ.get("DASKPCA_RUN_CONTAINERS") == "1")


def pytest_collection_modifyitems(config, items):
    skip_slow = pytest.mark.skip(reason="slow stress variant: run with --run-slow (CI runs it)")
    skip_containers = pytest.mark.skip(
        reason="container smoke run: run with --run-containers (or deploy/smoke.sh); not in the default suite")
    for item in items:
        if "slow" in item.keywords and not run_slow(config):
            item.add_marker(skip_slow)
        if "containers" in item.keywords and not run_containers(config):
            item.add_marker(skip_containers)


def pytest_report_header(config):
    return ["slow stress variants: " + ("run" if run_slow(config) else "skipped (--run-slow to run them)"),
            "container smoke run: " + ("run" if run_containers(config) else "skipped (--run-containers to run it)")]
