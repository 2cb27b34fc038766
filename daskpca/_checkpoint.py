"""Checkpoints of an iterative solver's small state, so a killed batch job resumes.

A checkpoint is one ``.npz`` file (NumPy arrays and scalars — no pickle) written atomically (a
temporary file, then ``os.replace``) after each pass. It carries a fingerprint of the job (input
shape, chunks, dtype, parameters): a checkpoint from a different job is ignored, never resumed.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path

import numpy as np


class Checkpoint:
    """Save and restore a solver's state between passes.

    Parameters
    ----------
    path : str or os.PathLike
        The ``.npz`` file (a local path).
    fingerprint : dict
        JSON-able description of the job; a stored checkpoint is used only if it matches.
    """

    def __init__(self, path, fingerprint: dict):
        self.path = Path(path)
        self.fingerprint = hashlib.sha256(json.dumps(fingerprint, sort_keys=True, default=str).encode()).hexdigest()
        self.resumed_from: int | None = None

    def load(self) -> dict | None:
        """The saved state, or ``None`` when there is none for this job."""
        if not self.path.exists():
            return None
        with np.load(self.path, allow_pickle=False) as stored:
            if str(stored["__fingerprint__"]) != self.fingerprint:
                return None
            state = {key: stored[key] for key in stored.files if key != "__fingerprint__"}
        state = {key: value.item() if value.ndim == 0 else value for key, value in state.items()}
        self.resumed_from = int(state.get("passes", 0))
        return state

    def save(self, state: dict) -> None:
        """Write ``state`` (arrays and scalars) atomically."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex[:8]}.tmp.npz")
        np.savez(temporary, __fingerprint__=np.array(self.fingerprint), **{k: np.asarray(v) for k, v in state.items()})
        os.replace(temporary, self.path)

    def clear(self) -> None:
        """Remove the checkpoint (after the job's result is safely written)."""
        self.path.unlink(missing_ok=True)


def job_fingerprint(array, **parameters) -> dict:
    """What identifies a job for resuming: the input's shape, chunks, dtype and the parameters."""
    return {
        "shape": list(array.shape),
        "chunks": [list(c) for c in array.chunks],
        "dtype": str(array.dtype),
        "name": getattr(array, "name", None),
        **{k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in parameters.items()},
    }
