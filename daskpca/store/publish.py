"""Publishing a store: the new version becomes visible whole, and the previous one stays readable
until it does.

**Local folders.** The new store is written to a hidden folder beside the target
(``.NAME.partial-VERSION``) and its completion marker written last. Then the two folders are
swapped with one ``renameat2(RENAME_EXCHANGE)`` (Linux ≥ 3.15; elsewhere two renames, with a
window between them), so a reader — or a job killed at any step — sees either the previous
complete store or the new complete one at ``TARGET``. The previous store is then moved to the
history folder ``.NAME.history/VERSION`` (model stores keep the last ``keep_history``) or deleted;
if a job is killed between the swap and that move, the next writer finds the swapped-out store
beside the target and moves it there (:func:`recover_leftovers`).

**Object stores** (``s3://``, any fsspec URL) have no rename: copying a store object by object is
not atomic. Every publish writes a complete new version under a fresh prefix
``TARGET/versions/VERSION/`` (marker last), then switches the small pointer object
``TARGET/.daskpca-pointer`` with a conditional write (``If-Match`` the pointer read at the start;
``If-None-Match: *`` for a new target; :mod:`daskpca.store.objects`). Until that one PUT succeeds,
readers resolve the pointer to the previous complete version; a writer that finds the pointer
changed under it fails and deletes its own version. The pointer lists the versions kept
(newest first): :func:`history` and :func:`rollback` read and switch it. A version that leaves
the history (with ``keep_history=0``, the one just replaced) stays readable for
:data:`RETIRE_GRACE_SECONDS` — a reader that resolved the pointer before the switch can finish —
and is deleted by the first publish after that; versions in no list (left by killed writers) are
deleted by the next publish.

Why not a transactional store (icechunk)? Measured on moto's S3 server on loopback (a 6-feature
model, a loaded 2-core machine): icechunk wrote + committed in 0.2–1.3 s and read in 0.1–0.3 s;
this protocol 1.2–4.6 s and 1.3–2.1 s (verified), nearly all of it zarr's per-object requests,
not the protocol (record + pointer ≈ 0.2–0.7 s). Icechunk is faster, but its stores are not
zarr stores: every reader (xarray, zarr, other tools) and every worker writing scores would need
icechunk and its session API, local folders would need a second layout, and claims are still
needed to fail a second writer before it computes. A version prefix plus one conditional PUT
keeps every version a plain zarr store, needs only the S3 primitives, and works the same for
``update``'s history.

Every entry point (:func:`start`, :func:`check_replaceable`, :func:`resolve`, :func:`history`,
:func:`rollback`) takes the path as the user meant it (:func:`daskpca.store.paths.as_meant`), so
the temporary folder, the rename and the marker land where the writer (zarr) expands ``~`` to.

Steps, each a fault point for tests (``DASKPCA_FAULT=STEP`` kills the process there with
SIGKILL): ``data-written`` (new data complete, no marker), ``marker-written`` (new version
complete, not yet visible), ``switched`` (new version visible, previous not yet retired),
``retired``. Every writer holds the target's claim (:mod:`daskpca.store.claims`) and checks it is still
its own just before the switch.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import socket
import time
import uuid
from pathlib import Path

from . import integrity, objects
from .paths import MeantPath, MeantURL, as_meant, is_url, local_path
from ..exceptions import IncompleteStoreError, InputError, OutputClaimedError, OutputExistsError

#: Name of the completion marker written last into every store (version).
COMPLETE_MARKER = ".daskpca-complete"
#: The pointer object of a versioned (object-store) target.
POINTER = ".daskpca-pointer"
#: Environment variable naming a publish step at which the process kills itself (tests only).
FAULT_ENV = "DASKPCA_FAULT"
STEPS = ("data-written", "marker-written", "switched", "retired")


def fault_point(step: str) -> None:
    """SIGKILL this process at ``step`` when ``$DASKPCA_FAULT`` names it (kill tests)."""
    if os.environ.get(FAULT_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)


def new_version() -> str:
    """A version id that sorts by time: ``20261124T003814.123Z-1a2b3c``."""
    now = time.time()
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z-{uuid.uuid4().hex[:6]}"


def _stamp(marker: dict) -> dict:
    return {**marker, "version": marker.get("version") or new_version(),
            "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "written_by": f"pid {os.getpid()} on {socket.gethostname()}"}


def start(target, *, overwrite: bool, keep_history: int = 0, claim=None):
    """A publication of ``target``: write the new store at ``.location``, then ``commit(marker)``
    (or ``abort()``). Raises :class:`OutputExistsError` at once when ``target`` exists and
    ``overwrite`` is false; the check is made again at the switch. ``.location`` is a
    :class:`~daskpca.store.paths.MeantPath` (a ``MeantURL`` on an object store): the writer and
    the integrity record read whether it is remote from it."""
    if not isinstance(target, MeantPath):  # a writer's target is one already (daskpca.io)
        target = as_meant(target)
    if target.remote:
        return ObjectPublication(target, overwrite=overwrite, keep_history=keep_history, claim=claim)
    return LocalPublication(Path(target), overwrite=overwrite, keep_history=keep_history, claim=claim)


def _exists_message(target) -> str:
    return (f"{target!r} already exists; pass --overwrite (overwrite=True in Python) to replace it, "
            "or choose another path: daskpca never overwrites an output unless told to.")


def check_replaceable(target) -> None:
    """Raise :class:`OutputExistsError` unless what is at ``target`` is a store daskpca wrote
    (a folder with its completion marker; on an object store, a version pointer or a marker):
    ``overwrite`` replaces daskpca's own results, never a user's files or another tool's store."""
    target = as_meant(target)
    if is_url(target):
        fs, root = objects.filesystem(target)
        ours = any(objects.read(fs, f"{root}/{name}")[0] is not None for name in (POINTER, COMPLETE_MARKER))
    else:
        ours = _local_marker(local_path(target)) is not None
    if not ours:
        raise OutputExistsError(
            f"{target!r} exists and is not a store daskpca wrote (it has no completion marker "
            f"{COMPLETE_MARKER}): --overwrite (overwrite=True) only replaces daskpca's own results, never "
            "other files. Choose another path, or move or delete it yourself if it is not needed.")


# ----------------------------------------------------------------------------- local folders


class LocalPublication:
    def __init__(self, target: Path, *, overwrite: bool, keep_history: int, claim):
        self.target = target
        self.overwrite, self.keep, self.claim = overwrite, keep_history, claim
        if self.target.exists() or self.target.is_symlink():
            if not overwrite:
                raise OutputExistsError(_exists_message(os.fspath(target)))
            check_replaceable(self.target)
        self.target.parent.mkdir(parents=True, exist_ok=True)
        recover_leftovers(self.target, keep_history)
        self.version = new_version()
        self.temporary = self.target.parent / f".{self.target.name}.partial-{self.version}"
        self.location = MeantPath(self.temporary)  # absolute, beside the (meant) target
        self.done = False

    def commit(self, marker: dict) -> None:
        fault_point("data-written")
        self.temporary.mkdir(parents=True, exist_ok=True)
        if marker is not None:
            (self.temporary / COMPLETE_MARKER).write_bytes(json.dumps(_stamp({**marker, "version": self.version})).encode())
        fault_point("marker-written")
        if self.claim is not None:
            self.claim.check()
        if self.target.exists() or self.target.is_symlink():
            if not self.overwrite:  # appeared while this job ran (a writer that took no claim)
                raise OutputExistsError(_exists_message(os.fspath(self.target)))
            check_replaceable(self.target)
            _exchange(self.temporary, self.target)
            self.done = True
            fault_point("switched")
            retire_local(self.target, self.temporary, self.keep)
        else:
            os.rename(self.temporary, self.target)
            self.done = True
            fault_point("switched")
        fault_point("retired")

    def abort(self) -> None:
        if self.done:
            return
        # After a failed compute, tasks already running on the scheduler's threads may still
        # write a chunk or two (and recreate folders): remove until nothing comes back.
        quiet = 0
        for _ in range(20):
            if self.temporary.exists():
                shutil.rmtree(self.temporary, ignore_errors=True)
                quiet = 0
            else:
                quiet += 1
                if quiet >= 2:
                    return
            time.sleep(0.05)


def recover_leftovers(target: Path, keep: int) -> None:
    """Tidy what killed writers of ``target`` left beside it (called under its claim, so no live
    writer owns them): a ``.partial-V`` folder holding a store of *another* version is the model
    a writer swapped out and was killed before it retired (killed at "switched") — moved to the
    history, as the retire would have; any other partial (unfinished, or complete but never
    switched in) is deleted."""
    prefix = f".{target.name}.partial-"
    for leftover in sorted(target.parent.glob(prefix + "*")):
        marker = _local_marker(leftover)
        if marker is not None and marker.get("version") not in (None, leftover.name[len(prefix):]):
            retire_local(target, leftover, keep)
        else:
            delete_local(leftover)


def history_folder(target: Path) -> Path:
    return target.parent / f".{target.name}.history"


def retire_local(target: Path, old: Path, keep: int) -> None:
    """Move the replaced store ``old`` into the history folder (keeping ``keep``) or delete it."""
    marker = _local_marker(old)
    if keep > 0 and marker is not None:
        folder = history_folder(target)
        folder.mkdir(exist_ok=True)
        name = marker.get("version") or new_version()
        if (folder / name).exists():
            delete_local(old)
        else:
            os.replace(old, folder / name)
        for stale in sorted(p for p in folder.iterdir() if not p.name.startswith("."))[:-keep]:
            delete_local(stale)
    else:
        delete_local(old)


def delete_local(folder: Path) -> None:
    """Delete a store folder, its completion marker first: a lazy reader pinned to it that finds
    a chunk missing then also finds the marker gone and fails, instead of reading the fill value
    (:mod:`daskpca.store.snapshot`)."""
    (folder / COMPLETE_MARKER).unlink(missing_ok=True)
    shutil.rmtree(folder, ignore_errors=True)


def _local_marker(folder: Path) -> dict | None:
    try:
        return json.loads((folder / COMPLETE_MARKER).read_bytes())
    except (OSError, ValueError):
        return None


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> None:
    """Swap two folders atomically (``renameat2(RENAME_EXCHANGE)``); two renames where missing."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        renameat2 = None
    if renameat2 is not None:
        if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
            return
        errno = ctypes.get_errno()
        if errno not in (22, 38, 95):  # EINVAL/ENOSYS/EOPNOTSUPP: the filesystem cannot exchange
            raise OSError(errno, f"cannot swap {a} and {b}: {os.strerror(errno)}")
    aside = b.parent / f"{b.name}.aside-{uuid.uuid4().hex[:6]}"
    os.replace(b, aside)
    os.replace(a, b)
    os.replace(aside, a)


# ----------------------------------------------------------------------------- object stores


def _protocol(url: str) -> str:
    return url.split("://", 1)[0]


def read_pointer(url: str) -> tuple[dict | None, str | None]:
    """``(pointer, tag)`` of a versioned target (``(None, None)``: not versioned)."""
    fs, root = objects.filesystem(url)
    raw, tag = objects.read(fs, f"{root}/{POINTER}")
    if raw is None:
        return None, None
    try:
        pointer = json.loads(raw)
    except ValueError:
        raise IncompleteStoreError(f"{url!r} has an unreadable version pointer {POINTER}; restore it "
                                   "from `daskpca history` or write the store again.") from None
    return pointer, tag


def resolve(path) -> str:
    """The location readers open for ``path``: the current version of a versioned target."""
    path = as_meant(path)
    if not is_url(path):
        return path
    pointer, _ = read_pointer(path)
    if pointer is None:
        return path
    return f"{path.rstrip('/')}/versions/{pointer['current']}"


#: Seconds a version dropped from an object store's history stays readable before a later
#: publish deletes it (``$DASKPCA_RETIRE_GRACE_SECONDS``): readers that resolved the pointer just
#: before the switch finish reading it.
RETIRE_GRACE_SECONDS = float(os.environ.get("DASKPCA_RETIRE_GRACE_SECONDS", 3600))


class ObjectPublication:
    def __init__(self, target: str, *, overwrite: bool, keep_history: int, claim):
        self.url = target.rstrip("/")
        self.fs, self.root = objects.filesystem(self.url)
        self.overwrite, self.keep, self.claim = overwrite, keep_history, claim
        self.pointer, self.tag = read_pointer(self.url)
        self.fs.invalidate_cache(self.root)
        if self.pointer is not None or self.fs.exists(self.root):
            if not overwrite:
                raise OutputExistsError(_exists_message(target))
            check_replaceable(self.url)
        self.version = new_version()
        self.location = MeantURL(f"{self.url}/versions/{self.version}")
        self.done = False

    def commit(self, marker: dict) -> None:
        fault_point("data-written")
        stamped = _stamp({**marker, "version": self.version})
        with objects.answering(self.url):
            self.fs.pipe_file(f"{self.root}/versions/{self.version}/{COMPLETE_MARKER}", json.dumps(stamped).encode())
        fault_point("marker-written")
        if self.claim is not None:
            self.claim.check()
        entry = {key: stamped[key] for key in ("version", "written", "written_by")}
        entry["note"] = marker.get("note", "")
        previous = list(self.pointer["history"]) if self.pointer else []
        kept = [entry, *previous][: self.keep + 1]
        # Versions leaving the history stay readable for RETIRE_GRACE_SECONDS: a reader that
        # resolved the pointer a moment ago may still be reading one (history 0: the replaced one).
        now = time.time()
        leaving = [e["version"] for e in previous if e["version"] not in {k["version"] for k in kept}]
        retired = [*(self.pointer or {}).get("retired", []), *({"version": v, "since": now} for v in leaving)]
        retired = [r for r in retired if now - r["since"] < RETIRE_GRACE_SECONDS]
        pointer = {"format": "daskpca-pointer", "current": self.version, "history": kept, "retired": retired}
        if not objects.replace(self.fs, f"{self.root}/{POINTER}", json.dumps(pointer).encode(), self.tag):
            raise OutputClaimedError(
                f"{self.url!r} was published by another job while this one ran (its version pointer "
                "changed); this job's version was discarded. Run it again to replace that one."
            )
        self.done = True
        fault_point("switched")
        _collect_garbage(self.fs, self.root, {e["version"] for e in [*kept, *retired]})
        fault_point("retired")

    def abort(self) -> None:
        if not self.done:
            objects.delete(self.fs, self.location.split("://", 1)[1], recursive=True)


def _collect_garbage(fs, root: str, keep: set) -> None:
    """Delete versions not listed in the pointer and objects of the old unversioned layout."""
    fs.invalidate_cache(root)
    for entry in fs.ls(root, detail=False):
        name = entry.rstrip("/").rsplit("/", 1)[-1]
        if name == POINTER:
            continue
        if name == "versions":
            fs.invalidate_cache(entry)
            for version in fs.ls(entry, detail=False):
                if version.rstrip("/").rsplit("/", 1)[-1] not in keep:
                    # The marker first: a lazy reader of this version that finds a chunk missing
                    # then finds the marker gone and fails (daskpca.store.snapshot).
                    objects.delete(fs, f"{version.rstrip('/')}/{COMPLETE_MARKER}")
                    objects.delete(fs, version, recursive=True)
        else:
            objects.delete(fs, entry, recursive=True)


# ----------------------------------------------------------------------------- history


def history(path) -> list[dict]:
    """The versions of ``path`` a rollback can go to, newest first; ``current`` marks the live one."""
    path = as_meant(path)
    if is_url(path):
        pointer, _ = read_pointer(path)
        if pointer is None:
            return []
        return [{**entry, "current": entry["version"] == pointer["current"]} for entry in pointer["history"]]
    target = local_path(path)
    entries = []
    current = _local_marker(target)
    if current is not None:
        entries.append({**_entry(current), "current": True})
    folder = history_folder(target)
    if folder.exists():
        for old in sorted(folder.iterdir(), reverse=True):
            marker = _local_marker(old)
            if marker is not None:
                entries.append({**_entry(marker), "current": False})
    return entries


def _check_version(path: str, version: str) -> None:
    """Raise :class:`~daskpca.exceptions.DamagedStoreError` when the kept ``version`` of ``path``
    no longer matches the integrity record in its marker (edited, truncated or partly deleted in
    the history), before a rollback would make it current. Reads the version in full (models
    are small)."""
    if is_url(path):
        location = f"{path.rstrip('/')}/versions/{version}"
        fs, root = objects.filesystem(location)
        raw, _ = objects.read(fs, f"{root}/{COMPLETE_MARKER}")
        marker = json.loads(raw) if raw is not None else None
    else:
        location = os.fspath(history_folder(local_path(path)) / version)
        marker = _local_marker(Path(location))
    if marker is not None and "integrity" in marker:
        integrity.check_store(location, marker["integrity"], full=True,
                              label=f"version {version!r} of {path!r} (not rolled back: the current version is unchanged)")


def _entry(marker: dict) -> dict:
    return {"version": marker.get("version", "?"), "written": marker.get("written", "?"),
            "written_by": marker.get("written_by", "?"), "note": marker.get("note", "")}


def rollback(path, version: str, *, claim=None) -> None:
    """Make ``version`` (from :func:`history`) the current one again; the current one is kept."""
    path = as_meant(path)
    entries = history(path)
    known = [e["version"] for e in entries]
    if not known:
        raise InputError(f"{path!r} has no versions to roll back to: it is not a store daskpca published (no "
                         "completion marker or version pointer). Rollback switches between the versions of a "
                         "daskpca model or results store; see `daskpca history MODEL`.")
    if version not in known:
        raise InputError(f"{path!r} has no version {version!r}; its versions are {known} (`daskpca history`).")
    if not any(e["current"] for e in entries if e["version"] == version):
        _check_version(path, version)
    if claim is not None:
        claim.check()
    if is_url(path):
        pointer, tag = read_pointer(path)
        fs, root = objects.filesystem(path)
        chosen = [e for e in pointer["history"] if e["version"] == version]
        pointer = {**pointer, "current": version,
                   "history": chosen + [e for e in pointer["history"] if e["version"] != version]}
        if not objects.replace(fs, f"{root}/{POINTER}", json.dumps(pointer).encode(), tag):
            raise OutputClaimedError(f"{path!r} changed while rolling back; run `daskpca history` and try again.")
        return
    target = local_path(path)
    old = history_folder(target) / version
    if _local_marker(target) and _local_marker(target).get("version") == version:
        return
    _exchange(old, target)
    displaced = _local_marker(old) or {}
    os.replace(old, history_folder(target) / (displaced.get("version") or new_version()))
