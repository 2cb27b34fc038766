"""Several real processes for the price of one interpreter start.

A fresh ``python`` that imports dask, distributed and daskpca costs 2–4 s of CPU on CI's two
cores; the tests that race jobs or kill writers need several processes that all do the same
imports. :func:`forked_jobs` starts *one* interpreter (a clean one, never the test process with
its threads), lets it do the imports, then forks one child per job. Each child is a real process
with its own pid, start time, claims and signals; it runs the job's script as ``python -c SCRIPT
ARGV...`` would (``sys.argv``, ``__main__``, environment, working folder, stdout and stderr of its
own), and exits the way that interpreter would (atexit handlers, exit code, or the signal that
killed it). Nothing in the parent is started before the forks but the imports, so no thread is
duplicated half-way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

_DRIVER = r"""
import json, os, sys, traceback
spec = json.loads(sys.argv[1])
for module in spec["imports"]:  # what every job imports anyway (an absent optional one: the job's import says so)
    try:
        __import__(module)
    except ImportError:
        pass
sys.stdout.flush()
sys.stderr.flush()
pids = []
for job in spec["jobs"]:
    pid = os.fork()
    if pid == 0:  # the job: becomes `python -c SCRIPT ARGV...` and never returns to the loop
        for fd, name in ((1, "stdout"), (2, "stderr")):
            os.dup2(os.open(job[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
        os.environ.update(job["env"])
        if job["cwd"]:
            os.chdir(job["cwd"])
        sys.argv = ["-c", *job["argv"]]
        if job["go"]:  # released together with the others
            import time
            while not os.path.exists(job["go"]):
                time.sleep(0.002)
        namespace = {"__name__": "__main__", "__builtins__": __builtins__}
        try:
            exec(compile(spec["script"], "<string>", "exec"), namespace)
        except SystemExit:
            raise
        except BaseException:
            traceback.print_exc()
            sys.exit(1)
        sys.exit(0)
    pids.append(pid)
print("ready", flush=True)
codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
with open(spec["codes"], "w") as handle:
    json.dump(codes, handle)
"""


class ForkedJobs:
    """The running driver; :meth:`wait` returns (exit code, stdout, stderr) per job."""

    def __init__(self, driver: subprocess.Popen, outputs: list[tuple[Path, Path]], go: Path | None, codes: Path,
                 log: Path):
        self.driver, self.outputs, self.go, self.codes, self.log = driver, outputs, go, codes, log

    def release(self):
        """Let the jobs that wait for the go signal start, all at once."""
        self.go.touch()

    def wait(self, timeout=120) -> list[tuple[int, str, str]]:
        self.driver.wait(timeout=timeout)
        self.driver.stdout.close()
        assert self.driver.returncode == 0, (self.driver.returncode, self.log.read_text())
        codes = json.loads(self.codes.read_text())
        return [(code, o.read_text(), e.read_text()) for code, (o, e) in zip(codes, self.outputs)]


def forked_jobs(script: str, jobs: list[dict], folder: Path, *,
                imports=("numpy", "dask.array", "distributed", "zarr", "xarray", "daskpca", "daskpca.cli"),
                wait_for_go=False) -> ForkedJobs:
    """Start one child process per job, each running ``script`` as ``python -c``.

    ``jobs``: dicts with ``argv`` (list) and optionally ``env`` (added to this environment) and
    ``cwd``. ``folder`` keeps each job's stdout and stderr. With ``wait_for_go`` the children wait
    (imports done) until :meth:`ForkedJobs.release`. Returns once every child exists.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tag = f"{os.getpid()}-{os.urandom(4).hex()}"
    go = folder / f"go-{tag}" if wait_for_go else None
    outputs, specs = [], []
    for i, job in enumerate(jobs):
        out, err = folder / f"job-{tag}-{i}.out", folder / f"job-{tag}-{i}.err"
        outputs.append((out, err))
        specs.append({"argv": [str(a) for a in job["argv"]], "env": {k: str(v) for k, v in job.get("env", {}).items()},
                      "cwd": str(job["cwd"]) if job.get("cwd") else None, "stdout": str(out), "stderr": str(err),
                      "go": str(go) if go else None})
    codes, log = folder / f"codes-{tag}.json", folder / f"driver-{tag}.log"
    spec = json.dumps({"imports": list(imports), "jobs": specs, "script": textwrap.dedent(script), "codes": str(codes)})
    with open(log, "w") as handle:
        driver = subprocess.Popen([sys.executable, "-c", _DRIVER, spec], stdout=subprocess.PIPE, stderr=handle, text=True)
    if driver.stdout.readline() != "ready\n":
        driver.wait(timeout=60)
        raise AssertionError(f"the driver failed before forking its jobs: {log.read_text()}")
    return ForkedJobs(driver, outputs, go, codes, log)
