"""Kill a writer at every publish step: one real subprocess per step, all run at once."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from daskpca.store.publish import FAULT_ENV


def kill_at_every_step(script: str, argv_by_step: dict) -> None:
    """Run ``script`` once per step with ``argv_by_step[step]``, each told (``$DASKPCA_FAULT``)
    to SIGKILL itself at that step; assert every one died there."""
    processes = {step: subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), *map(str, argv)],
                                        env={**os.environ, FAULT_ENV: step}, stderr=subprocess.PIPE)
                 for step, argv in argv_by_step.items()}
    for step, process in processes.items():
        assert process.wait(timeout=120) == -9, (step, process.stderr.read())
        process.stderr.close()
