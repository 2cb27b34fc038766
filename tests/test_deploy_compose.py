"""deploy/compose.yaml runs as written: its scheduler, worker and job commands, started as real
processes on loopback, fit a model that equals an in-process fit.

No Docker engine runs in CI, so this test plays the part of `docker compose`: it reads the file,
takes each service's ``command`` (and environment, replicas and healthcheck) exactly as declared,
and translates only what a container network provides — the host name ``scheduler`` becomes
127.0.0.1, published ports become free local ports, the ``/data`` volume becomes a temporary
folder. Anything else in the commands that drifts (a renamed flag, a subcommand that no longer
exists, a wrong scheduler address) fails here.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "deploy" / "compose.yaml"
BIN = Path(sys.executable).parent

# Container-only paths that are not volumes, mapped to folders under the test's tmp_path.
CONTAINER_SCRATCH = {"/tmp/dask-scratch": "scratch"}


# ------------------------------------------------------------------ reading the compose file

def load_compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def interpolate(value: str, env: dict) -> str:
    """Compose's ``${VAR}``, ``${VAR:-default}`` and ``${VAR-default}`` interpolation."""

    def replace(match):
        name, sep, default = match.group(1), match.group(2), match.group(3) or ""
        if name in env and (env[name] != "" or sep == "-"):
            return env[name]
        return default

    return re.sub(r"\$\{(\w+)(?:(:?-)([^}]*))?\}", replace, value)


def as_argv(command) -> list[str]:
    return list(command) if isinstance(command, list) else shlex.split(command)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Loopback:
    """Maps the compose network onto this machine: ports, the ``scheduler`` host name, volumes."""

    def __init__(self, compose: dict, tmp_path: Path):
        self.services = compose["services"]
        scheduler = as_argv(self.services["scheduler"]["command"])
        self.comm_port = _option(scheduler, "--port") or "8786"
        dashboard = _option(scheduler, "--dashboard-address") or ":8787"
        self.dashboard_port = dashboard.rsplit(":", 1)[-1]
        self.local_comm, self.local_dashboard = free_port(), free_port()
        self.tmp_path = tmp_path
        self.paths = {}
        for spec in self.services["fit"].get("volumes", []):
            source, target = spec.split(":")[:2]
            self.paths[target] = tmp_path / Path(source).name
        for target, name in CONTAINER_SCRATCH.items():
            self.paths[target] = tmp_path / name
        for local in self.paths.values():
            local.mkdir(parents=True, exist_ok=True)

    @property
    def scheduler_address(self) -> str:
        return f"tcp://127.0.0.1:{self.local_comm}"

    def translate(self, arg: str) -> str:
        arg = interpolate(str(arg), {})
        arg = arg.replace(f"tcp://scheduler:{self.comm_port}", self.scheduler_address)
        arg = arg.replace(f"localhost:{self.dashboard_port}", f"127.0.0.1:{self.local_dashboard}")
        for target, local in sorted(self.paths.items(), key=lambda item: -len(item[0])):
            if arg == target or arg.startswith(target + "/"):
                return str(local) + arg[len(target):]
        return arg

    def argv(self, service: str) -> list[str]:
        argv = [self.translate(a) for a in as_argv(self.services[service]["command"])]
        if service == "scheduler":
            argv = _set_option(argv, "--host", "127.0.0.1")  # loopback only, whatever the container binds
            argv = _set_option(argv, "--port", str(self.local_comm))
            argv = _set_option(argv, "--dashboard-address", f"127.0.0.1:{self.local_dashboard}")
        if argv[:2] == ["dask", "worker"]:
            # Containers listen on every interface of their own network; here: loopback only.
            argv = _set_option(argv, "--host", "127.0.0.1")
            argv = _set_option(argv, "--dashboard-address", "127.0.0.1:0")
        for path in argv:
            assert not (path.startswith("/") and not Path(path).exists() and service != "fit"), (
                f"{service}: container path {path!r} has no local mapping; add it to CONTAINER_SCRATCH"
            )
        return _executable(argv)

    def environment(self, service: str) -> dict:
        env = dict(os.environ)
        declared = self.services[service].get("environment") or {}
        if isinstance(declared, list):
            declared = dict(item.split("=", 1) for item in declared)
        for key, value in declared.items():
            value = self.translate(value if value is not None else "")
            if value != "":
                env[key] = value
        env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
        return env


def _option(argv, name):
    return argv[argv.index(name) + 1] if name in argv else None


def _set_option(argv, name, value):
    argv = list(argv)
    if name in argv:
        argv[argv.index(name) + 1] = value
    else:
        argv += [name, value]
    return argv


def _executable(argv):
    """Run the console scripts of this environment (the image has them on PATH)."""
    program = BIN / argv[0]
    if argv[0] == "python":
        return [sys.executable, *argv[1:]]
    if program.exists():
        return [str(program), *argv[1:]]
    if argv[0] == "daskpca":
        return [sys.executable, "-m", "daskpca.cli", *argv[1:]]
    if argv[0] == "dask":
        return [sys.executable, "-m", "dask", *argv[1:]]
    return argv


# ------------------------------------------------------------------ static checks (always run)

def test_compose_declares_the_cluster_the_issue_asks_for():
    services = load_compose()["services"]
    scheduler = as_argv(services["scheduler"]["command"])
    assert scheduler[:2] == ["dask", "scheduler"]
    worker = as_argv(services["worker"]["command"])
    assert worker[:3] == ["dask", "worker", "tcp://scheduler:8786"], "workers must join the scheduler service"
    assert "--memory-limit" in worker
    assert services["worker"].get("deploy", {}).get("replicas", 1) >= 2
    # The container's memory limit leaves room above Dask's own limit (nanny + interpreter).
    limit = services["worker"]["deploy"]["resources"]["limits"]["memory"]
    assert _bytes(limit) > _bytes(_option(worker, "--memory-limit"))
    assert any("8787" in str(port) for port in services["scheduler"]["ports"]), "dashboard must be published"
    jupyter = services["jupyter"]
    assert as_argv(jupyter["command"])[:2] == ["jupyter", "lab"]
    assert jupyter["environment"]["DASK_SCHEDULER_ADDRESS"] == "tcp://scheduler:8786"
    fit = as_argv(services["fit"]["command"])
    assert fit[:2] == ["daskpca", "fit"] and _option(fit, "--scheduler") == "tcp://scheduler:8786"
    # Credentials never appear as literal values in the file.
    text = COMPOSE.read_text()
    assert not re.search(r"(?i)(secret|password|token)[\w]*:\s*['\"]?[A-Za-z0-9/+]{8,}", text)


def _bytes(text) -> float:
    from dask.utils import parse_bytes

    text = str(text)
    return parse_bytes(text + "B" if text[-1] in "KMGkmg" else text)


def test_interpolation_follows_compose_rules():
    assert interpolate("${A:-x}", {}) == "x"
    assert interpolate("${A:-x}", {"A": ""}) == "x"
    assert interpolate("${A-x}", {"A": ""}) == ""
    assert interpolate("a/${B}/c", {"B": "b"}) == "a/b/c"


# ------------------------------------------------------------------ the cluster, for real

def _wait_healthy(loopback: Loopback, processes, timeout=60):
    """Run the scheduler's declared healthcheck until it passes (as compose does)."""
    check = loopback.services["scheduler"]["healthcheck"]["test"]
    argv = [loopback.translate(a) for a in (check[1:] if check[0] in ("CMD", "CMD-SHELL") else check)]
    argv = _executable(argv)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name, proc in processes:
            assert proc.poll() is None, f"{name} exited early with {proc.returncode}"
        if subprocess.run(argv, capture_output=True, timeout=30).returncode == 0:
            return
        time.sleep(0.5)
    raise AssertionError("the scheduler's healthcheck never passed")


def _wait_workers(address, n, timeout=60):
    from distributed import Client

    with Client(address, timeout=timeout) as client:
        client.wait_for_workers(n, timeout=timeout)
        return {w: info["memory_limit"] for w, info in client.scheduler_info(n_workers=-1)["workers"].items()}


def test_compose_services_fit_a_model_on_loopback(tmp_path):
    import dask.array as da
    import zarr

    import daskpca

    compose = load_compose()
    loopback = Loopback(compose, tmp_path)
    services = compose["services"]

    # The job's input: a zarr array at the path the fit service reads (/data/input.zarr).
    fit_argv = loopback.argv("fit")
    source = Path(fit_argv[fit_argv.index("fit") + 1])
    k = int(_option(fit_argv, "--n-components"))
    rng = np.random.default_rng(6)
    X = (rng.standard_normal((6_000, 3 * k)) @ rng.standard_normal((3 * k, 3 * k)) + 50).astype(np.float32)
    zarr.create_array(store=str(source), shape=X.shape, chunks=(500, X.shape[1]), dtype=X.dtype)[...] = X

    processes = []
    logs = tmp_path / "logs"
    logs.mkdir()
    try:
        def start(name, service):
            log = open(logs / f"{name}.log", "w")
            proc = subprocess.Popen(loopback.argv(service), env=loopback.environment(service),
                                    stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
            processes.append((name, proc))

        start("scheduler", "scheduler")
        _wait_healthy(loopback, processes)
        replicas = services["worker"].get("deploy", {}).get("replicas", 1)
        for i in range(replicas):
            start(f"worker-{i}", "worker")
        limits = _wait_workers(loopback.scheduler_address, replicas)
        declared = _bytes(_option(as_argv(services["worker"]["command"]), "--memory-limit"))
        assert all(limit == declared for limit in limits.values()), limits

        job = subprocess.run(fit_argv, env=loopback.environment("fit"), capture_output=True, text=True,
                             timeout=300, cwd=tmp_path)
        assert job.returncode == 0, f"fit job failed:\n{job.stdout}\n{job.stderr}"
        # The job ran on this cluster, not on an embedded one: the scheduler saw its tasks.
        from distributed import Client

        with Client(loopback.scheduler_address) as client:
            log = client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.transition_log))
        assert log > 0, "the scheduler never ran a task: did the job start its own cluster?"
    finally:
        for _, proc in reversed(processes):
            proc.terminate()
        for name, proc in processes:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    out = Path(fit_argv[fit_argv.index("--out") + 1])
    assert out.exists(), f"the job exited 0 but wrote no model at {out}"
    assert not list(out.parent.glob(f".{out.name}.partial-*")), "a temporary store was left behind"
    reference = daskpca.PCA(n_components=k, solver=_option(fit_argv, "--solver") or "auto").fit(
        da.from_zarr(str(source)))
    if hasattr(daskpca, "load"):
        model = daskpca.load(str(out))
        for name in ("components_", "explained_variance_", "mean_"):
            got, want = np.asarray(getattr(model, name)), getattr(reference, name)
            assert np.max(np.abs(got - want)) <= 1e-10 * np.max(np.abs(want)), name
    else:  # before daskpca.load exists: the store is at least a readable zarr hierarchy
        zarr.open(str(out), mode="r")
