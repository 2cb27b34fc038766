"""Checkpoints of an iterative solver's small state, so a killed batch job resumes.

A checkpoint is one ``.npz`` file (NumPy arrays and scalars — no pickle) written atomically (a
temporary file, then ``os.replace``) after each pass. It carries a fingerprint of the job (input
shape, chunks, dtype, dask name, parameters): a checkpoint from a different job is ignored, never
resumed (and is overwritten by the new job's first save).

Only *small* state goes in (d×k bases, d-vectors, scalars): never anything n-sized. The solvers
(randomized, krylov, als, ppca) never import this module: they receive a :class:`CheckpointFile`
(the estimator layer opens the path it was given, :func:`daskpca._features.solve`) and open their
job's state through :func:`daskpca.solvers._base.open_checkpoint`, which gives a do-nothing
holder for ``None``, so the solver code has a single path.

What identifies the job is the input's shape, chunks, dtype and dask ``name`` (for NumPy input a
hash of the data) and the parameters. What the input *holds* is fingerprinted too
(:func:`input_fingerprint`): for a zarr array in the dask graph, its metadata and every storage
object's stat (size and ``mtime_ns`` of a local file, ETag and size of an object), so an input
rewritten in place with the same shape, chunks and dtype is noticed without reading it. A
checkpoint whose job or input fingerprint differs is not resumed: the job starts afresh with a
:class:`~daskpca.exceptions.CheckpointWarning` saying why. A zarr store of a kind that cannot be
stat'ed (neither a local folder, an fsspec store nor an in-memory store) is never resumed from.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
import warnings
import zipfile
from pathlib import Path

import numpy as np

from ..exceptions import CheckpointWarning, InputError, InputTypeError


class Checkpoint:
    """Save and restore a solver's state between passes.

    Parameters
    ----------
    path : str or os.PathLike
        The ``.npz`` file (a local path).
    fingerprint : dict
        JSON-able description of the job; a stored checkpoint is used only if it matches.
    source : str or None
        Digest of what the input holds (:func:`input_fingerprint`); a stored checkpoint is used
        only if it matches. ``None``: the job fingerprint identifies the data already.
    """

    def __init__(self, path, fingerprint: dict, source: str | None = None):
        self.path = Path(path)
        self.job = json.dumps(fingerprint, sort_keys=True, default=str)
        self.fingerprint = hashlib.sha256(self.job.encode()).hexdigest()
        self.source = "" if source is None else source
        self.resumed_from: int | None = None

    def load(self) -> dict | None:
        """The saved state, or ``None`` when there is none for this job.

        A missing or unreadable (e.g. truncated by hand) file gives ``None``: the job starts
        over. So does a checkpoint of another job or of an input that changed since it was
        written, with a :class:`~daskpca.exceptions.CheckpointWarning` saying which.
        """
        if not self.path.exists():
            return None
        try:
            with np.load(self.path, allow_pickle=False) as stored:
                job = str(stored["__fingerprint__"]) if "__fingerprint__" in stored.files else None
                described = str(stored["__job__"]) if "__job__" in stored.files else None
                source = str(stored["__input__"]) if "__input__" in stored.files else None
                state = {key: stored[key] for key in stored.files if not key.startswith("__")}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile):
            return None
        if job != self.fingerprint:
            return self._afresh(_what_differs(described, self.job))
        if source != self.source:
            why = ("the input cannot be checked for changes (its zarr store is of a kind whose "
                   "objects cannot be stat'ed)" if "unverifiable" in self.source else
                   "the input changed since it was written (its storage objects' sizes, mtimes or "
                   "ETags, or its metadata, differ: rewritten in place?)")
            return self._afresh(why)
        state = {key: value.item() if value.ndim == 0 else value for key, value in state.items()}
        self.resumed_from = int(state.get("passes", 0))
        return state

    def _afresh(self, why: str) -> None:
        warnings.warn(
            f"checkpoint {os.fspath(self.path)!r} is not resumed: {why}. The job starts afresh and "
            "overwrites it; resuming would have continued from another state than this data's.",
            CheckpointWarning, stacklevel=4)
        return None

    def save(self, state: dict) -> None:
        """Write ``state`` (arrays and scalars) atomically."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex[:8]}.tmp.npz")
        np.savez(temporary, __fingerprint__=np.array(self.fingerprint), __job__=np.array(self.job),
                 __input__=np.array(self.source), **{k: np.asarray(v) for k, v in state.items()})
        os.replace(temporary, self.path)

    def clear(self) -> None:
        """Remove the checkpoint (after the job's result is safely written), and stray temporaries."""
        self.path.unlink(missing_ok=True)
        for stray in self.path.parent.glob(f".{self.path.name}.*.tmp.npz"):
            stray.unlink(missing_ok=True)


def _what_differs(stored: str | None, current: str) -> str:
    """Why a checkpoint's job is not this one, naming what changed: the tasks the same input is
    split into (they follow the cluster: --workers, --threads, --memory-limit), the input, or the
    parameters — not "another job" when it is this job on another cluster."""
    generic = ("it was written by another job (a different input shape, chunks, dtype or dask name, or different "
               "parameters)")
    try:
        before, now = json.loads(stored), json.loads(current)
    except (TypeError, ValueError):
        return generic
    changed = sorted(key for key in set(before) | set(now) if before.get(key) != now.get(key))
    if set(changed) <= {"chunks", "name"} and before.get("shape") == now.get("shape"):
        return ("the same input is now split into other tasks than when it was written (the task size follows the "
                "cluster: did --workers, --threads or --memory-limit change?), and a solver's saved state belongs to "
                "the tasks it read. Resume with the cluster of the first run to continue from it")
    if set(changed) & {"shape", "dtype"}:
        return f"the input differs ({', '.join(changed)} changed since it was written)"
    return f"the job differs: {', '.join(changed)} changed since it was written"


class CheckpointFile:
    """The checkpoint interface the solvers receive (see :func:`daskpca.solvers._base.open_checkpoint`):
    a local ``.npz`` path, opened per job by :meth:`open`.

    Raises
    ------
    TypeError, ValueError
        ``path`` is not a local file path (``str`` or ``os.PathLike``; URLs are not supported).
    """

    def __init__(self, path):
        if not isinstance(path, (str, os.PathLike)):
            raise InputTypeError(f"checkpoint={path!r}: expected a local file path (str or os.PathLike) or None.")
        if "://" in os.fspath(path):
            raise InputError(
                f"checkpoint={os.fspath(path)!r}: checkpoints are written to a local file; pass a local "
                "path (e.g. 'model.checkpoint.npz') or None."
            )
        self.path = path

    def __repr__(self) -> str:
        return f"CheckpointFile({os.fspath(self.path)!r})"

    def open(self, array, **job) -> Checkpoint:
        """The :class:`Checkpoint` of this job: ``job``'s ``random_state`` and arrays are digested
        (:func:`seed_fingerprint`, :func:`array_digest`), the rest kept as given."""
        job = {k: seed_fingerprint(v) if k == "random_state" else array_digest(v) if isinstance(v, np.ndarray) else v
               for k, v in job.items()}
        return Checkpoint(self.path, job_fingerprint(array, **job), input_fingerprint(array))


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


def input_fingerprint(array) -> str | None:
    """A digest of what the dask ``array`` reads, cheap to take: ``None`` when its dask name
    identifies the data already (NumPy and other in-memory input: the name hashes the data).

    For every zarr array the graph reads from (``da.from_zarr``, inlined or not): its metadata
    and a stat of each of its storage objects (chunks, shards, metadata) — size and
    ``mtime_ns`` of a local file, ETag (or mtime) and size of an object in an fsspec store,
    the bytes' hash in an in-memory store. Only a listing is made; no chunk is read from disk
    or object store. A store of any other kind gives a digest marked ``unverifiable``, which
    never matches (its checkpoints are never resumed).
    """
    sources = _zarr_sources(array)
    if not sources:
        return None
    digest, verifiable = hashlib.sha256(), True
    for source in sources:
        entries = _zarr_objects(source)
        verifiable &= entries is not None
        digest.update(json.dumps([source.path, source.metadata.to_dict(), entries],
                                 sort_keys=True, default=str).encode())
    return digest.hexdigest() + ("" if verifiable else f":unverifiable:{uuid.uuid4().hex}")


def _zarr_sources(array) -> list:
    """The zarr arrays in ``array``'s dask graph (from ``da.from_array``/``from_zarr`` layers)."""
    import zarr

    graph = getattr(array, "__dask_graph__", lambda: None)()
    found = []
    for layer in getattr(graph, "layers", {}).values():
        candidates = []
        if getattr(layer, "indices", None) is not None:  # inlined source: a Blockwise argument
            candidates = [value for value, index in layer.indices if index is None]
        elif len(getattr(layer, "mapping", ())) == 1:  # "original-<name>": {key: the source}
            candidates = list(layer.mapping.values())
        for value in candidates:
            value = getattr(value, "value", value)  # a task-spec DataNode wraps it
            if isinstance(value, zarr.Array) and all(value is not seen for seen in found):
                found.append(value)
    return found


def _zarr_objects(array) -> list | None:
    """``[(key, stat…)]`` for every storage object of a zarr ``array``; ``None`` when its store
    cannot be listed with stats."""
    from zarr.storage import FsspecStore, LocalStore, MemoryStore

    store = array.store
    while hasattr(store, "_store") and not isinstance(store, (FsspecStore, LocalStore, MemoryStore)):
        store = store._store  # wrappers (read-only views, counting stores, ...) over the real one
    prefix = array.path.strip("/")
    local = None
    if isinstance(store, LocalStore):
        local = Path(store.root)
    elif isinstance(store, FsspecStore) and set(_protocols(store.fs)) & {"file", "local"}:
        local = Path(store.path)  # a path opened through fsspec: the same files, same stats
    if local is not None:
        root = local / prefix
        entries = []
        for folder, _, files in os.walk(root):
            for name in files:
                stat = os.stat(os.path.join(folder, name))
                entries.append((os.path.relpath(os.path.join(folder, name), root), stat.st_size,
                                stat.st_mtime_ns, stat.st_ino))
        return sorted(entries)
    if isinstance(store, MemoryStore):
        return sorted((key, hashlib.sha256(value.to_bytes()).hexdigest())
                      for key, value in store._store_dict.items() if key.startswith(prefix))
    if isinstance(store, FsspecStore):
        from zarr.core.sync import sync

        root = f"{store.path.rstrip('/')}/{prefix}".rstrip("/")
        if hasattr(store.fs, "_find"):
            found = sync(store.fs._find(root, detail=True))  # the store's own async filesystem and loop
        else:
            found = store.fs.find(root, detail=True)
        return sorted((key[len(root):], info.get("size"), info.get("ETag") or info.get("etag")
                       or str(info.get("mtime") or info.get("LastModified") or ""))
                      for key, info in found.items())
    return None


def _protocols(fs) -> tuple:
    fs = getattr(fs, "sync_fs", fs)  # zarr's async wrapper around a synchronous filesystem
    return fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
