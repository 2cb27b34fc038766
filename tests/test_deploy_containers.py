"""The image built and the compose cluster run for real, in podman containers (deploy/smoke.sh).

The smoke run itself (``@pytest.mark.containers``) takes minutes and needs root, podman, runc and
debootstrap: it runs only with ``--run-containers`` (never in the default suite or CI) and skips
with the reason where podman is absent. The checks around it are fast and always run: the
script refuses with a one-line reason when a tool is missing, and the compose ``update`` service
is the CronJob's command.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
SMOKE = DEPLOY / "smoke.sh"

# Every check deploy/smoke.py prints; a check that silently stops running fails here.
CHECKS = [
    "image daskpca:0.1.0 built (runtime target)",
    "scheduler healthy",
    "dashboard /health answers",
    "workers joined the scheduler",
    "worker runs as UID 1000",
    "fit job exits 0",
    "the job ran on the compose scheduler",
    "model equals an in-process fit",
    "update job on day1 exits 0",
    "update job on day2 exits 0",
    "two updates equal a refit on all the data",
    "history lists the versions",
    "fit on a missing source exits 2",
    "update on a missing day exits 2",
    "a failed job writes no output",
    "files in /data belong to UID 1000",
    "worker stopped mid-fit",
    "SIGTERM reached the nanny (no SIGKILL)",
    "the fit finished on the other worker",
    "the model is unchanged by the lost worker",
    "image daskpca-notebook:0.1.0 built (notebook target)",
    "jupyter lab --version",
    "dask labextension present",
    "notebooks/01_quickstart.ipynb executes in the notebook container",
    "the notebook ran on the compose scheduler",
]


@pytest.mark.containers
def test_smoke_run_builds_the_image_and_runs_the_cluster_in_containers():
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (apt-get install -y podman podman-compose runc debootstrap)")
    if os.geteuid() != 0:
        pytest.skip("the smoke run needs root (debootstrap, rootful podman with --network=host)")
    done = subprocess.run(["bash", str(SMOKE)], capture_output=True, text=True, timeout=3600)
    print(done.stdout, done.stderr)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert not [line for line in lines if line.startswith("[FAIL]")]
    passed = [line for line in lines if line.startswith("[  ok]")]
    for name in CHECKS:
        assert any(line.startswith(f"[  ok] {name}") for line in passed), f"check not run: {name}"
    assert re.search(r"^smoke: all checks passed in \d+ s$", done.stdout, flags=re.M)


def _path_with(tmp_path: Path, present: list[str], fakes: list[str]) -> str:
    """A PATH holding only the named real tools and do-nothing stand-ins for ``fakes``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in present:
        (bin_dir / tool).symlink_to(shutil.which(tool))
    for tool in fakes:
        (bin_dir / tool).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / tool).chmod(0o755)
    return str(bin_dir)


@pytest.mark.parametrize("missing", ["podman", "debootstrap"])
def test_smoke_run_says_in_one_line_which_tool_is_missing(tmp_path, missing):
    tools = ["podman", "runc", "debootstrap"]
    path = _path_with(tmp_path, ["dirname", "python3"], [t for t in tools if t != missing])
    done = subprocess.run([shutil.which("bash"), str(SMOKE)], capture_output=True, text=True, timeout=60,
                          env={"PATH": path})
    assert done.returncode == 3
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and f"{missing} is missing" in done.stderr, done.stderr


def test_smoke_driver_says_in_one_line_that_podman_is_missing(tmp_path):
    done = subprocess.run([sys.executable, str(DEPLOY / "smoke.py"), "--no-notebook"], capture_output=True,
                          text=True, timeout=60, env={"PATH": _path_with(tmp_path, [], []),
                                                      "DASKPCA_SMOKE_LOCK": str(tmp_path / "lock")})
    assert done.returncode == 3
    assert done.stderr.count("\n") == 1 and "podman is missing" in done.stderr, done.stderr


def test_a_second_smoke_run_on_the_same_host_refuses_in_one_line(tmp_path):
    import fcntl

    env = {"PATH": os.environ["PATH"], "DASKPCA_SMOKE_LOCK": str(tmp_path / "daskpca-smoke.lock")}
    with open(tmp_path / "daskpca-smoke.lock", "a") as held:     # a run in progress
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        done = subprocess.run([sys.executable, str(DEPLOY / "smoke.py")], capture_output=True, text=True,
                              timeout=60, env=env)
    assert done.returncode == 3
    assert done.stderr.count("\n") == 1 and "another smoke run" in done.stderr, done.stderr


def test_compose_update_service_is_the_cronjobs_command():
    services = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]
    update = [str(a) for a in services["update"]["command"]]
    assert update[:2] == ["daskpca", "update"]
    assert update[update.index("--scheduler") + 1] == "tcp://scheduler:8786"
    cronjob = yaml.safe_load((DEPLOY / "kubernetes" / "cronjob-update.yaml").read_text())
    container = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    cron_flags = {w for w in " ".join(container["args"]).split() if w.startswith("--")}
    assert cron_flags == {w for w in update if w.startswith("--")}, "compose and the CronJob run different updates"
    # The new data comes from DASKPCA_NEW_DATA; its default is never the fit's input (folding the
    # same rows in again would double them), and the model is the one the fit service writes.
    fit = [str(a) for a in services["fit"]["command"]]
    assert update[3].startswith("${DASKPCA_NEW_DATA") and update[3] != fit[2]
    assert update[2] == fit[fit.index("--out") + 1]
    # (tests/test_deploy_manifests.py checks the CronJob's flags against `daskpca update --help`.)
