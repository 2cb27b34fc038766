#!/usr/bin/env python3
"""Build the daskpca image and run deploy/compose.yaml's cluster as podman containers, checking
what a user of ``docker compose up`` would otherwise find out first.

Run it through ``deploy/smoke.sh`` (as root), which first makes the Debian base image. Standard
library only: what needs numpy, zarr or daskpca (the data, the reference fits, the comparisons)
runs inside the image itself, in-process, with the very daskpca the cluster runs.

What it does, printing one line per check (``ok`` or ``FAIL`` and a one-line reason):

1. builds the runtime image (and, unless ``--no-notebook``, the notebook image) from
   deploy/docker/Dockerfile on the local Debian base, with the host's package index and CA bundle;
2. writes zarr arrays into ``deploy/data/smoke`` (the compose volume, ``/data/smoke`` inside);
3. starts the compose file's ``scheduler`` and ``worker`` services (2 replicas) as containers: the
   same images, commands, users, volumes, environment, init and resource limits, translated only
   where a host network differs from compose's bridge (below), and waits for the declared
   healthcheck and for both workers;
4. runs the ``fit`` service as the batch job, then the ``update`` service twice on new days (what
   the Kubernetes CronJob does), and checks: exit codes (0; 2 for a missing source, for both
   jobs), the model against an in-process fit (components to 1e-10 up to sign), the updated model
   against an in-process refit on all the data, ``daskpca history``, that every file under /data
   belongs to UID 1000, and the dashboard's ``/health``;
5. ``podman stop``s a worker while a fit runs (SIGTERM through the init process and tini to the
   nanny) and checks that the worker left before podman's kill timeout, the fit finished on the
   other worker, and its model equals the in-process fit;
6. the notebook image: ``jupyter lab --version``, the dask labextension, and
   notebooks/01_quickstart.ipynb executed inside the container against the compose scheduler.

This kind of host (a container without systemd, hybrid cgroups, fixed ulimits) needs podman's
``--cgroup-manager=cgroupfs --runtime runc`` and ``--network=host --ulimit nofile=1024:1024
--ulimit nproc=4096:4096`` (PODMAN and RUN below). With a host network there is no compose
network: the service name ``scheduler`` is mapped to 127.0.0.1 (``--add-host``), a published port
``IP:N:N`` becomes the container's own port N, and a service that listens on ``0.0.0.0`` is told
the published IP instead, so the smoke run, like compose, exposes nothing beyond loopback. When
another process on the host already holds compose's port 8786 or 8787, the run says so and uses
a free port in its place, in every command, variable and healthcheck that names it.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

DEPLOY = Path(__file__).resolve().parent
ROOT = DEPLOY.parent
COMPOSE = DEPLOY / "compose.yaml"
DOCKERFILE = DEPLOY / "docker" / "Dockerfile"
BASE = "localhost/daskpca-base:bookworm"

PODMAN = ["podman", "--cgroup-manager=cgroupfs", "--runtime", "runc"]
RUN = ["--network=host", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"]
PREFIX = "daskpca-smoke"          # every container this run starts; removed at the start and end
LOCK = Path(os.environ.get("DASKPCA_SMOKE_LOCK", "/tmp/daskpca-smoke.lock"))   # one run per host
SMOKE = "smoke"                   # folder under the compose volume that this run owns


class SmokeFailure(Exception):
    pass


def say(status: str, what: str, detail: str = "") -> None:
    print(f"[{status:>4}] {what}" + (f": {detail}" if detail else ""), flush=True)


def check(condition: bool, what: str, detail: str) -> None:
    say("ok" if condition else "FAIL", what, detail)
    if not condition:
        raise SmokeFailure(f"{what}: {detail}")


def podman(*args, check_rc=True, capture=True, timeout=1800) -> subprocess.CompletedProcess:
    done = subprocess.run([*PODMAN, *args], capture_output=capture, text=True, timeout=timeout)
    if check_rc and done.returncode != 0:
        tail = (done.stderr or done.stdout or "").strip().splitlines()[-5:]
        raise SmokeFailure(f"podman {args[0]} exited {done.returncode}: " + " | ".join(tail))
    return done


# ------------------------------------------------------------------ the host's package index

def host_pip_settings() -> tuple[str, str]:
    """The index URL and CA bundle the host's pip uses (environment first, then pip.conf files),
    read at run time so that no machine's paths are written into the repository. Only an http(s)
    index can be reached from a build; an unset index means PyPI."""
    import configparser

    index, cert = os.environ.get("PIP_INDEX_URL", ""), os.environ.get("PIP_CERT", "")
    files = ["/etc/pip.conf", "/etc/xdg/pip/pip.conf",
             os.path.expanduser("~/.pip/pip.conf"), os.path.expanduser("~/.config/pip/pip.conf")]
    if os.environ.get("PIP_CONFIG_FILE"):
        files.append(os.environ["PIP_CONFIG_FILE"])
    config = configparser.ConfigParser()
    config.read(files)                       # later files win, as in pip
    section = config["global"] if config.has_section("global") else {}
    index = index or section.get("index-url", "")
    cert = cert or section.get("cert", "")
    if not re.match(r"https?://", index):
        index = ""
    if cert and not Path(cert).is_file():
        cert = ""
    return index, cert


# ------------------------------------------------------------------ building

def build(target: str, tag: str) -> float:
    index, cert = host_pip_settings()
    args = ["build", "--network=host", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096",
            "--build-arg", f"PYTHON_IMAGE={BASE}", "--build-arg", f"PIP_INDEX_URL={index}",
            "--ignorefile", str(DOCKERFILE.with_name("Dockerfile.dockerignore")),
            "-f", str(DOCKERFILE), "--target", target, "-t", tag]
    if cert:   # the bundle, mounted where the host has it, read-only, and named to pip
        args += ["-v", f"{cert}:{cert}:ro", "--build-arg", f"PIP_CERT={cert}"]
    start = time.monotonic()
    done = podman(*args, str(ROOT), check_rc=False)
    seconds = time.monotonic() - start
    if done.returncode != 0:
        sys.stdout.write(done.stdout[-3000:] + done.stderr[-3000:])
        raise SmokeFailure(f"podman build --target {target} exited {done.returncode}")
    size = int(podman("image", "inspect", "--format", "{{.Size}}", tag).stdout.strip())
    say("ok", f"image {tag} built ({target} target)",
        f"{seconds:.0f} s, {size / 1e6:.0f} MB, index "
        f"{index or 'PyPI'}, CA bundle {cert or 'the image own'}")
    return seconds


# ------------------------------------------------------------------ compose, read and translated

def interpolate(value: str, env: dict) -> str:
    """Compose's ``${VAR}``, ``${VAR:-default}``, ``${VAR-default}``, ``${VAR:?error}`` and ``$$``."""

    def replace(match):
        if match.group(0) == "$$":
            return "$"
        name, sep, default = match.group(1), match.group(2) or "", match.group(3) or ""
        value = env.get(name)
        if sep in (":?", "?") and (value is None or (sep == ":?" and value == "")):
            raise SmokeFailure(f"compose: ${{{name}}} is required: {default}")
        if value is None or (value == "" and sep.startswith(":")):
            return default if sep.endswith("-") else (value or "")
        return value

    return re.sub(r"\$\$|\$\{(\w+)(?:(:?[-?])([^}]*))?\}", replace, value)


class Compose:
    """deploy/compose.yaml turned into ``podman run`` arguments for a host network."""

    def __init__(self, image: str, env: dict):
        # The YAML is parsed by the image's Python (PyYAML comes with dask): the host needs none.
        text = podman("run", "--rm", *RUN, "-v", f"{COMPOSE}:/compose.yaml:ro", image,
                      "python", "-c", "import json, sys, yaml; json.dump(yaml.safe_load(open('/compose.yaml')), sys.stdout)").stdout
        self.services = json.loads(text)["services"]
        self.env = env
        # Where the scheduler listens (its command's --port and --dashboard-address): with a
        # host network, the host reaches it there on loopback.
        command = self.services["scheduler"]["command"]
        option = lambda name, default: command[command.index(name) + 1] if name in command else default
        self.comm_port = int(option("--port", "8786"))
        self.dashboard_port = int(option("--dashboard-address", ":8787").rsplit(":", 1)[-1])
        self.moved: dict[int, int] = {}

    @property
    def dashboard(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def move_busy_ports(self) -> None:
        """On a shared host another Dask process may hold 8786 or 8787 (a LocalCluster's default
        dashboard is :8787). A host network cannot remap a port, so the commands are given a free
        one instead: every mention of the port in commands, environment and healthcheck."""
        for declared in (self.comm_port, self.dashboard_port):
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", declared)) != 0:
                    continue
            with socket.socket() as free:
                free.bind(("127.0.0.1", 0))
                self.moved[declared] = free.getsockname()[1]
            say("note", f"port {declared} is in use on this host", f"the smoke run uses {self.moved[declared]} instead")
        self.comm_port = self.moved.get(self.comm_port, self.comm_port)
        self.dashboard_port = self.moved.get(self.dashboard_port, self.dashboard_port)

    def remap(self, text: str) -> str:
        for declared, port in self.moved.items():
            text = re.sub(rf"(?<!\d){declared}(?!\d)", str(port), text)
        return text

    def argv(self, service: str, name: str, env: dict | None = None, detach=True) -> list[str]:
        spec = self.services[service]
        env = {**self.env, **(env or {})}
        args = ["run", "--name", name, "--label", f"{PREFIX}=1", *RUN, "--add-host", "scheduler:127.0.0.1"]
        args += ["-d"] if detach else []
        if spec.get("init"):
            args.append("--init")
        if spec.get("user"):
            args += ["--user", str(spec["user"])]
        if spec.get("working_dir"):
            args += ["--workdir", spec["working_dir"]]
        for volume in spec.get("volumes", []):
            source, target, *mode = str(volume).split(":")
            if source.startswith("."):
                source = str((COMPOSE.parent / source).resolve())
            args += ["-v", ":".join([source, target, *mode])]
        for env_file in spec.get("env_file", []):
            path, required = (env_file, True) if isinstance(env_file, str) else (env_file["path"], env_file.get("required", True))
            path = (COMPOSE.parent / path).resolve()
            if path.exists() or required:
                args += ["--env-file", str(path)]
        declared = spec.get("environment") or {}
        if isinstance(declared, list):
            declared = dict(item.split("=", 1) for item in declared)
        for key, value in declared.items():
            args += ["-e", f"{key}={self.remap(interpolate(str(value), env))}"]
        limits = spec.get("deploy", {}).get("resources", {}).get("limits", {})
        if "cpus" in limits:
            args += ["--cpus", str(limits["cpus"])]
        if "memory" in limits:
            args += ["--memory", str(limits["memory"]).lower()]
        if spec.get("restart") and detach:
            args += ["--restart", spec["restart"]]
        command = spec["command"]
        command = [self.remap(interpolate(str(a), env)) for a in (command if isinstance(command, list) else shlex.split(command))]
        published = set()
        for port in spec.get("ports", []):
            ip, host, container = (str(port).split(":") + ["", ""])[:3] if str(port).count(":") == 2 else ("0.0.0.0", *str(port).split(":"))
            if host != container:
                raise SmokeFailure(f"{service}: port {port} remaps a port, which a host network cannot")
            published.add(ip)
        if published:
            (ip,) = published
            command = [a.replace("0.0.0.0", ip) for a in command]
        return [*args, spec["image"], *command]

    def replicas(self, service: str) -> int:
        return int(self.services[service].get("deploy", {}).get("replicas", 1))

    def healthcheck(self, service: str) -> list[str]:
        test = [self.remap(str(a)) for a in self.services[service]["healthcheck"]["test"]]
        if test[0] == "CMD-SHELL":
            return ["sh", "-c", test[1]]
        return test[1:] if test[0] == "CMD" else test


# ------------------------------------------------------------------ code that runs in the image

# Writes the smoke run's arrays: a low-rank signal above a noise floor, rows split into days.
MAKE_DATA = r"""
import sys, numpy as np, zarr
root, rows, big_rows, d = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(32)
basis = np.linalg.qr(rng.standard_normal((d, d)))[0]
scale = np.r_[10.0 * 0.8 ** np.arange(d // 2), np.full(d - d // 2, 0.3)]
def sample(n, shift):
    return (rng.standard_normal((n, d)) * scale) @ basis.T + 5.0 + shift
def write(name, X, chunk):
    zarr.create_array(store=f"{root}/{name}", shape=X.shape, chunks=(chunk, d), dtype=X.dtype)[...] = X
write("input.zarr", sample(rows, 0.0), 500)
write("day1.zarr", sample(rows // 4, 0.5), 500)
write("day2.zarr", sample(rows // 4, -0.3), 500)
write("big.zarr", sample(big_rows, 0.0), 500)
"""

# Compares a model the cluster wrote with an in-process fit (threaded scheduler, no cluster) of
# the named stores stacked; prints the errors as JSON.
COMPARE = r"""
import json, sys, dask, numpy as np, dask.array as da, daskpca
model_path, k, solver, sources = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
X = da.concatenate([da.from_zarr(s) for s in sources])
with dask.config.set(scheduler="threads"):
    ref = daskpca.PCA(n_components=k, solver=solver).fit(X)
got = daskpca.load(model_path)
A, B = np.asarray(got.components_, dtype=float), np.asarray(ref.components_, dtype=float)
signs = np.sign(np.sum(A * B, axis=1))[:, None]
ev_got, ev_ref = np.asarray(got.explained_variance_), np.asarray(ref.explained_variance_)
print(json.dumps({
    "rows": int(X.shape[0]), "k": k,
    "components": float(np.max(np.abs(A * signs - B))),
    "variance": float(np.max(np.abs(ev_got - ev_ref)) / np.max(np.abs(ev_ref))),
    "mean": float(np.max(np.abs(np.asarray(got.mean_) - ref.mean_)) / np.max(np.abs(ref.mean_))),
}))
"""

# Rewrites notebooks/01_quickstart.ipynb for a running cluster: Client() instead of a
# LocalCluster (it reads DASK_SCHEDULER_ADDRESS), and every store path made absolute under the
# shared volume: the workers write the chunks, each in its own container, so a relative path
# would put the metadata in the notebook's folder and the chunks in each worker's home (the
# notebook then reads an array of fill values).
ADAPT_NOTEBOOK = r"""
import json, re, sys
nb = json.load(open(sys.argv[1]))
out = sys.argv[3]
for cell in nb["cells"]:
    src = "".join(cell["source"])
    src = src.replace('cluster = LocalCluster(n_workers=2, threads_per_worker=1, memory_limit="1GiB", dashboard_address=":0")\nclient = Client(cluster)',
                      'client = Client()  # DASK_SCHEDULER_ADDRESS: the compose scheduler\nprint("scheduler:", client.scheduler.address, "workers:", len(client.scheduler_info()["workers"]))')
    src = src.replace("cluster.close()", "")
    src = re.sub(r'"([\w.-]+\.zarr)"', lambda m: '"' + out + "/" + m.group(1) + '"', src)
    cell["source"] = src
json.dump(nb, open(sys.argv[2], "w"))
"""


# ------------------------------------------------------------------ the run

def http_json(url: str, timeout=3):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        body = response.read().decode()
    try:
        return json.loads(body)
    except ValueError:
        return body


def wait_for(what: str, probe, timeout: float, interval=0.5):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            result = probe()
            if result:
                return result
        except Exception as error:  # noqa: BLE001  (not up yet: keep polling)
            last = error
        time.sleep(interval)
    raise SmokeFailure(f"{what} not reached in {timeout:.0f} s" + (f" ({last})" if last else ""))


def remove_containers() -> None:
    names = podman("ps", "-a", "--filter", f"label={PREFIX}=1", "--format", "{{.Names}}").stdout.split()
    if names:
        podman("rm", "-f", "-t", "5", *names, check_rc=False)


def transitions(scheduler: str, port: int) -> int:
    """How many task transitions the scheduler has made so far (a client in its container)."""
    code = ("from distributed import Client\n"
            f"with Client('tcp://127.0.0.1:{port}', timeout=30) as c:\n"
            "    print(c.run_on_scheduler(lambda dask_scheduler: dask_scheduler.transition_counter))")
    return int(podman("exec", scheduler, "python", "-c", code).stdout.split()[-1])


def owners(path: Path) -> set[int]:
    return {p.stat().st_uid for p in [path, *path.rglob("*")]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-notebook", action="store_true", help="skip the notebook image and its checks")
    parser.add_argument("--keep", action="store_true", help="leave the containers running at the end")
    parser.add_argument("--rows", type=int, default=4000, help="rows of the fit's input (default 4000)")
    parser.add_argument("--big-rows", type=int, default=800_000,
                        help="rows of the input fitted while a worker is stopped (default 800000)")
    args = parser.parse_args(argv)
    # One smoke run per host: they share the host network's fixed ports (a second run's workers
    # would join the first one's scheduler) and the container label.
    lock = open(LOCK, "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"smoke: another smoke run holds {LOCK} on this host; wait for it to finish", file=sys.stderr)
        return 3
    for tool in ("podman", "runc"):
        if shutil.which(tool) is None:
            print(f"smoke: {tool} is missing: apt-get install -y podman podman-compose runc debootstrap", file=sys.stderr)
            return 3
    if subprocess.run([*PODMAN, "image", "exists", BASE]).returncode != 0:
        print(f"smoke: no base image {BASE}: run deploy/make-base.sh (or deploy/smoke.sh)", file=sys.stderr)
        return 3
    started = time.monotonic()
    try:
        run(args)
    except SmokeFailure as failure:
        say("FAIL", "smoke run stopped", str(failure))
        print(f"smoke: FAILED after {time.monotonic() - started:.0f} s: {failure}")
        return 1
    finally:
        if not args.keep:
            remove_containers()
    print(f"smoke: all checks passed in {time.monotonic() - started:.0f} s")
    return 0


def run(args) -> None:
    remove_containers()
    build("runtime", "daskpca:0.1.0")
    compose = Compose("daskpca:0.1.0", env=dict(os.environ))
    image = compose.services["fit"]["image"]
    fit_spec = compose.services["fit"]["command"]
    k = int(interpolate(str(fit_spec[fit_spec.index("--n-components") + 1]), compose.env))
    solver = interpolate(str(fit_spec[fit_spec.index("--solver") + 1]), compose.env)

    # The compose volume ./data is /data inside; this run owns ./data/smoke and hands it to the
    # image's user (UID 1000), as a user of the compose file must for ./data.
    data = COMPOSE.parent / "data"
    smoke = data / SMOKE
    shutil.rmtree(smoke, ignore_errors=True)
    smoke.mkdir(parents=True)
    os.chown(smoke, 1000, 1000)
    inside = f"/data/{SMOKE}"
    helper = ["run", "--rm", "--label", f"{PREFIX}=1", *RUN, "--user", "1000:1000", "-v", f"{data}:/data", image]
    start = time.monotonic()
    podman(*helper, "python", "-c", MAKE_DATA, inside, str(args.rows), str(args.big_rows), str(3 * k))
    say("ok", "data written", f"{inside}/input.zarr ({args.rows} x {3 * k}), day1/day2.zarr ({args.rows // 4} rows each), "
        f"big.zarr ({args.big_rows} rows) in {time.monotonic() - start:.0f} s")

    # ---- the cluster
    scheduler = f"{PREFIX}-scheduler"
    compose.move_busy_ports()
    podman(*compose.argv("scheduler", scheduler))
    health = compose.healthcheck("scheduler")
    start = time.monotonic()
    wait_for("the scheduler's healthcheck", lambda: podman("exec", scheduler, *health, check_rc=False).returncode == 0, 60)
    say("ok", "scheduler healthy", f"its compose healthcheck passed {time.monotonic() - start:.1f} s after start")
    body = http_json(f"{compose.dashboard}/health")
    check(body == "ok", "dashboard /health answers", f"{compose.dashboard}/health -> {body!r}")
    workers = [f"{PREFIX}-worker-{i + 1}" for i in range(compose.replicas("worker"))]
    for name in workers:
        podman(*compose.argv("worker", name))
    counts = wait_for(f"{len(workers)} workers", lambda: (c := http_json(f"{compose.dashboard}/json/counts.json"))["workers"] >= len(workers) and c, 90)
    check(counts["workers"] == len(workers), "workers joined the scheduler", f"{counts['workers']} workers, {counts['cores']} threads")
    uids = podman("exec", workers[0], "sh", "-c", "id -u; ps -o user= -C dask 2>/dev/null || true").stdout.split()
    check(uids[0] == "1000", "worker runs as UID 1000", f"id -u -> {uids[0]}")

    def job(service: str, name: str, **env) -> tuple[int, str, float]:
        start = time.monotonic()
        done = podman(*compose.argv(service, name, env=env, detach=False), check_rc=False, timeout=900)
        podman("rm", "-f", name, check_rc=False)
        return done.returncode, (done.stdout + done.stderr).strip(), time.monotonic() - start

    def compare(model: str, *sources: str) -> dict:
        out = podman(*helper, "python", "-c", COMPARE, model, str(k), solver, *sources).stdout
        return json.loads(out.strip().splitlines()[-1])

    def close(errors: dict) -> bool:
        return errors["components"] <= 1e-10 and errors["variance"] <= 1e-10 and errors["mean"] <= 1e-10

    def describe(errors: dict) -> str:
        return (f"{errors['rows']} rows, k={errors['k']}: max |Δcomponent| {errors['components']:.1e} (up to sign), "
                f"variance rel. {errors['variance']:.1e}, mean rel. {errors['mean']:.1e}")

    # ---- the batch job: compose's fit service, as `docker compose run --rm fit`
    model = f"{inside}/model.zarr"
    before = transitions(scheduler, compose.comm_port)
    rc, out, seconds = job("fit", f"{PREFIX}-fit", DASKPCA_SOURCE=f"{inside}/input.zarr", DASKPCA_MODEL=model)
    check(rc == 0, "fit job exits 0", f"{seconds:.1f} s" + ("" if rc == 0 else f", exit {rc}: {out[-500:]}"))
    after = transitions(scheduler, compose.comm_port)
    check(after > before, "the job ran on the compose scheduler (not an embedded cluster)",
          f"the scheduler made {after - before} task transitions during the job")
    errors = compare(model, f"{inside}/input.zarr")
    check(close(errors), "model equals an in-process fit", describe(errors))

    # ---- the nightly update, twice, on new days
    for day in ("day1", "day2"):
        rc, out, seconds = job("update", f"{PREFIX}-update", DASKPCA_MODEL=model, DASKPCA_NEW_DATA=f"{inside}/{day}.zarr")
        check(rc == 0, f"update job on {day} exits 0", f"{seconds:.1f} s" + ("" if rc == 0 else f", exit {rc}: {out[-500:]}"))
    errors = compare(model, f"{inside}/input.zarr", f"{inside}/day1.zarr", f"{inside}/day2.zarr")
    check(close(errors), "two updates equal a refit on all the data", describe(errors))
    history = podman(*helper, "daskpca", "history", model, "--json").stdout
    versions = json.loads(history)
    listed = versions.get("versions", versions) if isinstance(versions, dict) else versions
    check(isinstance(listed, list) and len(listed) >= 3, "history lists the versions",
          f"{len(listed)} entries: " + "; ".join(json.dumps(v, sort_keys=True)[:90] for v in listed))

    # ---- daskpca's exit codes survive the container (tini/init pass them through)
    rc, out, _ = job("fit", f"{PREFIX}-fit-missing", DASKPCA_SOURCE=f"{inside}/missing.zarr", DASKPCA_MODEL=f"{inside}/never.zarr")
    check(rc == 2, "fit on a missing source exits 2", (out.splitlines() or ["(no output)"])[-1][:160])
    rc, out, _ = job("update", f"{PREFIX}-update-missing", DASKPCA_MODEL=model, DASKPCA_NEW_DATA=f"{inside}/day9.zarr")
    check(rc == 2, "update on a missing day exits 2 (the CronJob fails at once)", (out.splitlines() or ["(no output)"])[-1][:160])
    check(not (smoke / "never.zarr").exists(), "a failed job writes no output", f"{inside}/never.zarr absent")

    # ---- ownership of everything the containers wrote
    found = owners(smoke)
    check(found == {1000}, "files in /data belong to UID 1000", f"owners of {sum(1 for _ in smoke.rglob('*'))} paths: {sorted(found)}")

    # ---- a worker stopped mid-fit
    worker_stop(args, compose, workers, inside, compare, close, describe)

    if not args.no_notebook:
        notebook(compose, data, inside)


def worker_stop(args, compose, workers, inside, compare, close, describe) -> None:
    name = f"{PREFIX}-fit-stop"
    model = f"{inside}/model-stop.zarr"
    podman(*compose.argv("fit", name, env={"DASKPCA_SOURCE": f"{inside}/big.zarr", "DASKPCA_MODEL": model}))
    # Mid-fit: the job's tasks are on the scheduler and some have already run.
    counts = wait_for("tasks of the fit running", lambda: (c := http_json(f"{compose.dashboard}/json/counts.json"))["processing"] > 0 and c["memory"] > 0 and c, 120, 0.1)
    victim = workers[-1]
    start = time.monotonic()
    podman("stop", "-t", "30", victim)
    stop_seconds = time.monotonic() - start
    state = json.loads(podman("inspect", victim).stdout)[0]["State"]
    logs = podman("logs", victim).stderr + podman("logs", victim).stdout
    said = [line.split(" - ")[-1].strip() for line in logs.splitlines() if re.search(r"(?i)(received signal|closing nanny|stopping worker|nanny asking worker)", line)]
    check(stop_seconds < 25 and state["ExitCode"] in (0, 143), "SIGTERM reached the nanny (no SIGKILL)",
          f"stopped in {stop_seconds:.1f} s (kill timeout 30 s), exit code {state['ExitCode']}; its log: " + " | ".join(said[:3]))
    rc = int(podman("wait", name, timeout=900).stdout.strip().splitlines()[-1])
    out = (podman("logs", name).stdout + podman("logs", name).stderr).strip()
    ended = {c: int(podman("inspect", "--format", "{{.State.FinishedAt.UnixNano}}", c).stdout) for c in (victim, name)}
    podman("rm", "-f", name, check_rc=False)
    lead = (ended[name] - ended[victim]) / 1e9
    check(lead > 0, "worker stopped mid-fit",
          f"`podman stop {victim}` with {counts['processing']} tasks processing, {counts['memory']} in memory, "
          f"{counts['waiting']} waiting; the job ended {lead:.1f} s after the worker")
    counts = http_json(f"{compose.dashboard}/json/counts.json")
    check(rc == 0, "the fit finished on the other worker", f"exit {rc}, {counts['workers']} worker(s) left" + ("" if rc == 0 else f": {out[-500:]}"))
    errors = compare(model, f"{inside}/big.zarr")
    check(close(errors), "the model is unchanged by the lost worker", describe(errors))
    podman("start", victim)
    wait_for("the stopped worker back", lambda: http_json(f"{compose.dashboard}/json/counts.json")["workers"] == len(workers), 90)
    say("ok", "worker restarted", f"`podman start {victim}`: {len(workers)} workers again")


def notebook(compose, data, inside) -> None:
    build("notebook", "daskpca-notebook:0.1.0")
    image = "daskpca-notebook:0.1.0"
    spec = compose.services["jupyter"]
    check(spec["image"] == image, "compose's jupyter service uses this image", spec["image"])
    version = podman("run", "--rm", *RUN, image, "jupyter", "lab", "--version").stdout.strip()
    check(bool(re.fullmatch(r"4\.\d+\.\d+", version)), "jupyter lab --version", version)
    extensions = podman("run", "--rm", *RUN, image, "jupyter", "labextension", "list")
    listing = re.sub(r"\x1b\[[0-9;]*m", "", extensions.stdout + extensions.stderr)   # without its colours
    line = [ln.strip() for ln in listing.splitlines() if "dask-labextension" in ln]
    check(bool(line) and "enabled" in line[0], "dask labextension present", line[0] if line else "not listed")
    # The notebook runs in compose's jupyter service (its environment: DASK_SCHEDULER_ADDRESS),
    # with `jupyter nbconvert --execute` in place of the lab server.
    (data / SMOKE / "nb").mkdir()
    os.chown(data / SMOKE / "nb", 1000, 1000)
    shutil.copy(ROOT / "notebooks" / "01_quickstart.ipynb", data / SMOKE / "nb" / "original.ipynb")
    nb = f"{inside}/nb"
    argv = compose.argv("jupyter", f"{PREFIX}-notebook", detach=False)
    argv = argv[: argv.index(image) + 1]
    script = (f"python -c {shlex.quote(ADAPT_NOTEBOOK)} {nb}/original.ipynb {nb}/cluster.ipynb {nb} && "
              f"cd {nb} && MPLBACKEND=agg jupyter nbconvert --to notebook --execute --ExecutePreprocessor.timeout=600 "
              f"--output executed.ipynb cluster.ipynb")
    start = time.monotonic()
    done = podman(*argv, "sh", "-c", script, check_rc=False, timeout=1200)
    podman("rm", "-f", f"{PREFIX}-notebook", check_rc=False)
    seconds = time.monotonic() - start
    check(done.returncode == 0, "notebooks/01_quickstart.ipynb executes in the notebook container",
          f"{seconds:.0f} s" + ("" if done.returncode == 0 else
                                f", exit {done.returncode}: {re.sub(chr(27) + r'[[][0-9;]*m', '', done.stderr)[-800:]}"))
    executed = json.loads((data / SMOKE / "nb" / "executed.ipynb").read_text())
    text = "".join("".join(o.get("text", "")) for c in executed["cells"] if c["cell_type"] == "code" for o in c.get("outputs", []))
    first = re.search(r"scheduler: (\S+) workers: (\d+)", text)
    check(bool(first) and first.group(1) == compose.remap(spec["environment"]["DASK_SCHEDULER_ADDRESS"]), "the notebook ran on the compose scheduler",
          first.group(0) if first else "no scheduler line in its output")


if __name__ == "__main__":
    sys.exit(main())
