"""The Kubernetes manifests, HPC job files and Dockerfile in deploy/ parse, follow the deployment
rules (pinned base, non-root, requests and limits, secrets by reference) and every ``daskpca``
command in them is accepted by the real CLI's ``--help``.

A command whose subcommand the CLI does not offer yet is skipped with the reason, and checked
automatically once the subcommand lands.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from _helpers import cli_help, cli_subcommands

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
K8S = sorted((DEPLOY / "kubernetes").glob("*.yaml"))
HPC_SCRIPTS = sorted([*(DEPLOY / "hpc").glob("*.sbatch"), *(DEPLOY / "hpc").glob("*.pbs")])
CREDENTIAL = re.compile(r"(?i)(secret|password|token|access_key|credential)")


# ------------------------------------------------------------------ finding daskpca commands

def _k8s_documents():
    for path in K8S:
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                yield path, document


def _containers(node):
    """Every container spec anywhere in a manifest (DaskCluster, DaskJob, CronJob, ...)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                yield from value
            else:
                yield from _containers(value)
    elif isinstance(node, list):
        for item in node:
            yield from _containers(item)


def _commands_in_shell(text: str):
    """``daskpca ...`` invocations in shell text: continuation lines joined, split on ; && || |."""
    text = text.replace("\\\n", " ")
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        if line.startswith("#"):
            continue
        for part in re.split(r"&&|\|\||;|\|", line):
            try:
                words = shlex.split(part)
            except ValueError:
                continue
            while words and words[0] in ("exec", "srun", "mpirun", "time", "--"):
                words = words[1:]
            if words[:1] == ["daskpca"]:
                yield words
            elif "--" in words and words[words.index("--") + 1:][:1] == ["daskpca"]:  # launch.py ... -- daskpca
                yield words[words.index("--") + 1:]


def _container_commands(container):
    argv = [str(a) for a in (container.get("command") or []) + (container.get("args") or [])]
    if argv[:1] == ["daskpca"]:
        yield argv
    elif argv[:1] in (["sh"], ["bash"], ["/bin/sh"], ["/bin/bash"]) and "-c" in argv:
        yield from _commands_in_shell(" ".join(argv[argv.index("-c") + 1:]))


def all_commands():
    found = []
    for path, document in _k8s_documents():
        for container in _containers(document):
            for argv in _container_commands(container):
                found.append((f"{path.name}:{container['name']}", argv))
    for path in HPC_SCRIPTS:
        for argv in _commands_in_shell(path.read_text()):
            # launch.py appends --scheduler ADDRESS to the command it is given.
            found.append((path.name, [*argv, "--scheduler", "tcp://scheduler:8786"]))
    return found


COMMANDS = all_commands()


def test_every_deployment_file_runs_daskpca():
    sources = {source.split(":")[0] for source, _ in COMMANDS}
    assert {"daskjob-fit.yaml", "cronjob-update.yaml", "fit-slurm.sbatch", "fit-pbs.pbs"} <= sources, sources
    subcommands = {argv[1] for _, argv in COMMANDS}
    assert {"fit", "update"} <= subcommands


@pytest.mark.parametrize("source, argv", COMMANDS, ids=[f"{s}:{' '.join(a[:2])}" for s, a in COMMANDS])
def test_command_matches_the_cli(source, argv):
    subcommand = argv[1]
    assert subcommand in cli_subcommands(), f"{source}: `daskpca {subcommand}` is not a daskpca command"
    returncode, text = cli_help(subcommand)
    assert returncode == 0
    for word in argv[2:]:
        if word.startswith("--"):
            flag = word.split("=", 1)[0]
            assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text), (
                f"{source}: `daskpca {subcommand}` has no option {flag}; its --help says:\n{text}")
    positionals = [w for i, w in enumerate(argv[2:], 2) if not w.startswith("-")
                   and not argv[i - 1].startswith("--")]
    assert positionals, f"{source}: `daskpca {subcommand}` is given no positional argument"


# ------------------------------------------------------------------ Kubernetes rules

def test_manifests_have_the_operator_resources_and_a_nightly_update():
    kinds = {document["kind"]: document for _, document in _k8s_documents()}
    assert {"DaskCluster", "DaskJob", "CronJob"} <= set(kinds)
    assert kinds["DaskCluster"]["apiVersion"] == "kubernetes.dask.org/v1"
    assert kinds["DaskJob"]["apiVersion"] == "kubernetes.dask.org/v1"
    assert kinds["CronJob"]["spec"]["concurrencyPolicy"] == "Forbid"
    update = [argv for source, argv in COMMANDS if source.startswith("cronjob")]
    assert update and update[0][1] == "update"
    # The CronJob reaches the long-running DaskCluster's scheduler service.
    cluster = kinds["DaskCluster"]["metadata"]["name"]
    assert f"tcp://{cluster}-scheduler." in " ".join(update[0])


def test_every_container_sets_requests_and_limits_and_runs_as_non_root():
    for path, document in _k8s_documents():
        for container in _containers(document):
            resources = container.get("resources", {})
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(resources.get(kind, {})), f"{path.name}:{container['name']} {kind}"
    for path, document in _k8s_documents():
        text = yaml.safe_dump(document)
        if "containers" in text:
            assert "runAsNonRoot: true" in text, path.name


def test_worker_memory_limit_fits_inside_the_pod_limit():
    from dask.utils import parse_bytes

    for path, document in _k8s_documents():
        for container in _containers(document):
            args = [str(a) for a in container.get("args", [])]
            if args[:2] == ["dask", "worker"] and "--memory-limit" in args:
                dask_limit = parse_bytes(args[args.index("--memory-limit") + 1])
                pod_limit = parse_bytes(container["resources"]["limits"]["memory"].replace("i", "iB").replace("iBB", "iB"))
                assert dask_limit < pod_limit, f"{path.name}: Dask's limit must sit below the pod's"


def test_credentials_come_from_secrets_never_inline():
    for path, document in _k8s_documents():
        for container in _containers(document):
            for variable in container.get("env", []):
                if CREDENTIAL.search(variable["name"]) or variable["name"].startswith("AWS_"):
                    assert "value" not in variable, f"{path.name}: {variable['name']} is inlined"
                    assert "secretKeyRef" in variable.get("valueFrom", {}), f"{path.name}: {variable['name']}"
        assert document.get("kind") != "Secret", f"{path.name}: a Secret manifest would put credentials in git"


# ------------------------------------------------------------------ Docker and HPC

def test_dockerfile_pins_its_base_and_runs_as_non_root():
    text = (DEPLOY / "docker" / "Dockerfile").read_text()
    image = re.search(r"ARG PYTHON_IMAGE=(\S+)", text).group(1)
    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim(-\w+)?(@sha256:[0-9a-f]{64})?", image), image
    users = re.findall(r"^USER\s+(\S+)", text, flags=re.M)
    assert users and users[-1] not in ("root", "0", "0:0")
    assert re.search(r"pip install \"\.\[cluster\]\"", text)


def test_dockerfile_extras_are_declared_by_the_package():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"].get("optional-dependencies", {})
    assert "cluster" in extras, "pyproject.toml has no `cluster` extra (bokeh, fsspec, s3fs): the image would lack them"
    names = " ".join(extras["cluster"]).lower()
    for package in ("bokeh", "fsspec", "s3fs"):
        assert package in names


def test_hpc_scripts_declare_their_resources():
    slurm = (DEPLOY / "hpc" / "fit-slurm.sbatch").read_text()
    assert re.search(r"^#SBATCH --mem=", slurm, flags=re.M) and re.search(r"^#SBATCH --time=", slurm, flags=re.M)
    pbs = (DEPLOY / "hpc" / "fit-pbs.pbs").read_text()
    assert re.search(r"^#PBS -l select=.*mem=", pbs, flags=re.M) and re.search(r"^#PBS -l walltime=", pbs, flags=re.M)
    config = yaml.safe_load((DEPLOY / "hpc" / "jobqueue.yaml").read_text())["jobqueue"]
    assert {"slurm", "pbs"} <= set(config)


@pytest.mark.parametrize("system", ["slurm", "pbs"])
def test_hpc_launcher_renders_worker_jobs(system):
    pytest.importorskip("dask_jobqueue")
    done = subprocess.run([sys.executable, str(DEPLOY / "hpc" / "launch.py"), "--system", system, "--jobs", "2",
                           "--scheduler-host", "127.0.0.1", "--dry-run", "--",
                           "daskpca", "fit", "in.zarr", "--n-components", "3", "--out", "m.zarr"],
                          capture_output=True, text=True, timeout=120, cwd=DEPLOY / "hpc")
    assert done.returncode == 0, done.stderr
    config = yaml.safe_load((DEPLOY / "hpc" / "jobqueue.yaml").read_text())["jobqueue"][system]
    from dask.utils import parse_bytes

    per_worker = parse_bytes(config["memory"]) / config["processes"]
    limit = re.search(r"--memory-limit (\S+)", done.stdout).group(1)
    assert abs(parse_bytes(limit) - per_worker) < 0.01 * per_worker
    assert f"--nworkers {config['processes']}" in done.stdout
    assert re.search(r"daskpca fit in\.zarr .* --scheduler tcp://127\.0\.0\.1:\d+", done.stdout)
