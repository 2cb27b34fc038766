"""Checkpoints of an iterative solver's small state, so a killed batch job resumes.

A checkpoint is one ``.npz`` file (NumPy arrays and scalars — no pickle) written atomically (a
temporary file, then ``os.replace``) after each pass. It carries a fingerprint of the job (input
shape, chunks, dtype, dask name, parameters): a checkpoint from a different job is ignored, never
resumed (and is overwritten by the new job's first save).

Only *small* state goes in (d×k bases, d-vectors, scalars): never anything n-sized. The solvers
(randomized, als, ppca) open one with :func:`open_checkpoint`; ``path=None`` gives a
:class:`NullCheckpoint` that does nothing, so the solver code has a single path.

What identifies the input is its dask ``name``: for NumPy input a hash of the data, for a zarr
store opened by path a hash of the store's location and metadata (so rewriting the *contents*
of the same store in place, with the same shape, chunks and dtype, is not detected — clear the
checkpoint by hand then). A zarr array over a store dask cannot hash gets a random name, so its
jobs never resume; give the dask array a fixed ``name=`` (``da.from_zarr(z, name=...)``) then.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
import zipfile
from pathlib import Path

import numpy as np

from ..exceptions import InputError, InputTypeError


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
        """The saved state, or ``None`` when there is none for this job.

        A missing, unreadable (e.g. truncated by hand) or foreign (other fingerprint) file gives
        ``None``: the job starts over.
        """
        if not self.path.exists():
            return None
        try:
            with np.load(self.path, allow_pickle=False) as stored:
                if "__fingerprint__" not in stored.files or str(stored["__fingerprint__"]) != self.fingerprint:
                    return None
                state = {key: stored[key] for key in stored.files if key != "__fingerprint__"}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile):
            return None
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
        """Remove the checkpoint (after the job's result is safely written), and stray temporaries."""
        self.path.unlink(missing_ok=True)
        for stray in self.path.parent.glob(f".{self.path.name}.*.tmp.npz"):
            stray.unlink(missing_ok=True)


class NullCheckpoint:
    """Stands in for :class:`Checkpoint` when no path is given: never loads, never writes."""

    path = None
    resumed_from: int | None = None

    def load(self) -> None:
        return None

    def save(self, state: dict) -> None:
        pass

    def clear(self) -> None:
        pass


def open_checkpoint(path, array, **parameters) -> Checkpoint | NullCheckpoint:
    """A :class:`Checkpoint` at ``path`` for this job, or a :class:`NullCheckpoint` for ``None``.

    Raises
    ------
    TypeError, ValueError
        ``path`` is not a local file path (``str`` or ``os.PathLike``; URLs are not supported).
    """
    if path is None:
        return NullCheckpoint()
    if not isinstance(path, (str, os.PathLike)):
        raise InputTypeError(f"checkpoint={path!r}: expected a local file path (str or os.PathLike) or None.")
    if "://" in os.fspath(path):
        raise InputError(
            f"checkpoint={os.fspath(path)!r}: checkpoints are written to a local file; pass a local "
            "path (e.g. 'model.checkpoint.npz') or None."
        )
    return Checkpoint(path, job_fingerprint(array, **parameters))


def seed_fingerprint(random_state):
    """JSON-able identity of ``random_state`` *before* it is used (int, None, or a state hash)."""
    if random_state is None or isinstance(random_state, (int, np.integer)):
        return None if random_state is None else int(random_state)
    if isinstance(random_state, np.random.Generator):
        state = json.dumps(random_state.bit_generator.state, sort_keys=True, default=str)
        return "generator:" + hashlib.sha256(state.encode()).hexdigest()
    if isinstance(random_state, np.random.RandomState):
        digest = hashlib.sha256()
        for part in random_state.get_state():
            digest.update(np.asarray(part).tobytes())
        return "randomstate:" + digest.hexdigest()
    return repr(random_state)


def array_digest(value):
    """A hash of an optional array parameter (e.g. ``init``), or ``None``."""
    if value is None:
        return None
    array = np.ascontiguousarray(np.asarray(value, dtype=np.float64))
    return f"{array.shape}:" + hashlib.sha256(array.tobytes()).hexdigest()


def job_fingerprint(array, **parameters) -> dict:
    """What identifies a job for resuming: the input's shape, chunks, dtype and the parameters."""
    return {
        "shape": list(array.shape),
        "chunks": [list(c) for c in array.chunks],
        "dtype": str(array.dtype),
        "name": getattr(array, "name", None),
        **{k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in parameters.items()},
    }
