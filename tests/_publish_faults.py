"""Kill a writer at every publish step: one real process per step, all run at once."""

from __future__ import annotations

import tempfile

from daskpca.store.publish import FAULT_ENV

from _forked import forked_jobs


def kill_at_every_step(script: str, argv_by_step: dict) -> None:
    """Run ``script`` once per step with ``argv_by_step[step]``, each in its own process told
    (``$DASKPCA_FAULT``) to SIGKILL itself at that step; assert every one died there.

    The processes are forked from one interpreter that did the imports (tests/_forked.py): one
    interpreter start instead of one per step."""
    steps = list(argv_by_step)
    with tempfile.TemporaryDirectory(prefix="daskpca-kill-") as folder:
        jobs = forked_jobs(script, [{"argv": argv_by_step[step], "env": {FAULT_ENV: step}} for step in steps], folder,
                           imports=("numpy", "s3fs", "daskpca", "daskpca.store.publish"))
        for step, (code, _, err) in zip(steps, jobs.wait(timeout=120)):
            assert code == -9, (step, code, err)
