"""Start Dask workers as SLURM or PBS jobs (dask-jobqueue), run one daskpca command on them.

    python launch.py --system slurm --jobs 4 -- daskpca fit /scratch/input.zarr --n-components 20 --out /scratch/pca.zarr

The scheduler runs in this process (on the node that runs this script: a login node or, better,
a small batch job: see fit-slurm.sbatch / fit-pbs.pbs). Worker jobs are submitted with the
settings in jobqueue.yaml; the daskpca command gets ``--scheduler ADDRESS`` appended and runs
against them. When it ends (or this script is interrupted) the worker jobs are cancelled. The
exit code is daskpca's: 0 done, 2 bad input, 1 runtime failure.

``--dry-run`` prints the worker job script and the command without submitting anything.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--system", choices=["slurm", "pbs"], required=True)
    parser.add_argument("--jobs", type=int, default=2, help="worker jobs to submit (default: %(default)s)")
    parser.add_argument("--min-workers", type=int, default=None,
                        help="start the command once this many workers joined (default: one job's worth)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds to wait for workers (default: %(default)s)")
    parser.add_argument("--scheduler-host", default=None,
                        help="address the scheduler listens on (default: dask-jobqueue's choice, see 'interface')")
    parser.add_argument("--dry-run", action="store_true", help="print the job script and command, submit nothing")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- daskpca SUBCOMMAND ...")
    return parser


def make_cluster(system: str, host: str | None = None):
    import dask.config
    import yaml

    # jobqueue.yaml beside this script is the default; the user's dask config overrides it.
    defaults = yaml.safe_load((HERE / "jobqueue.yaml").read_text())
    dask.config.update(dask.config.config, defaults, priority="old")
    from dask_jobqueue import PBSCluster, SLURMCluster

    cls = {"slurm": SLURMCluster, "pbs": PBSCluster}[system]
    # local-directory stays literal ($TMPDIR): the worker job's shell expands it on its own node.
    options = {"dashboard_address": ":8787", **({"host": host} if host else {})}
    return cls(scheduler_options=options)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command or command[0] != "daskpca":
        print("launch.py: give the daskpca command after --, e.g. -- daskpca fit SOURCE ...", file=sys.stderr)
        return 2
    cluster = make_cluster(args.system, args.scheduler_host)
    try:
        full = [*command, "--scheduler", cluster.scheduler_address]
        if args.dry_run:
            print(cluster.job_script())
            print(" ".join(full))
            return 0
        cluster.scale(jobs=args.jobs)
        from distributed import Client

        with Client(cluster) as client:
            print(f"dashboard: {client.dashboard_link} (tunnel: ssh -L 8787:{os.uname().nodename}:8787 <login node>)",
                  flush=True)
            import dask.config

            per_job = dask.config.get(f"jobqueue.{args.system}.processes") or 1
            client.wait_for_workers(args.min_workers or per_job, timeout=args.timeout)
        return subprocess.call(full)
    finally:
        cluster.close()


if __name__ == "__main__":
    sys.exit(main())
