"""Scratch folders: temporary copies a job makes on local disk, and their removal.

Two things write temporary copies of the input: the Gram solver's column-strip re-layout
(:class:`daskpca.passes._geometry.ColumnStrips`) and the disk pass cache
(:mod:`daskpca.passes._cache`). Both take their folder from :func:`scratch_folder`, which

- makes it under ``$DASKPCA_SCRATCH`` (or the system's temporary directory), after checking that
  the place exists, is a folder and is writable — a :class:`~daskpca.exceptions.ScratchError`
  names ``$DASKPCA_SCRATCH`` and the fix otherwise, never raw ``errno`` text — and that it is not
  inside an input or output of the job (:func:`check_apart`: the scratch root is one of the job's
  declared paths, compared where it really is, through symlinks);
- gives it its owner record before it has its name: the folder is made under a private name
  (``.daskpca-making-*``), ``owner.json`` written into it (the marker ``"daskpca_scratch": 1``, the
  folder's own name, a random token and the owner's identity: host, pid, the process's start
  time, boot and pid namespace — what :mod:`daskpca.store.claims` records for stale claims), and
  only then renamed to ``daskpca-KIND-*``. So every ``daskpca-*`` folder daskpca made carries its
  record, and one without a valid record is somebody else's;
- removes it when the ``with`` block ends — success, error, Ctrl-C — and, through
  :func:`terminate_as_interrupt`, on SIGTERM (what Slurm, Kubernetes and ``kill`` send): while a
  scratch folder is open in the main thread and nobody has installed a SIGTERM handler, SIGTERM
  raises :class:`Terminated` (a ``KeyboardInterrupt``) so the same clean-up path runs.

A job killed with SIGKILL (or a node lost) cannot remove its folder: the next job that makes one
in the same place does (:func:`remove_dead`), when and only when the folder holds a valid record
(a regular file, not a link; the marker; its own name) whose owner is provably dead
(:func:`daskpca.store.claims._provably_dead`: same host, boot and pid namespace, and the pid gone
or reused by a later process). Nothing is ever removed by name or age: a ``daskpca-*`` folder of
the user's (a git clone, a results folder), one with a foreign or older daskpca's ``owner.json``,
a symlink, a live job's folder, one of another host or boot — all are left as they are. Removal
never follows a link and cannot race another job's: the record is read again just before, the
folder renamed aside (``.NAME.removing``, atomic: a concurrent sweep sees the whole folder or
nothing) and read once more there, then emptied with its record removed last, so a removal cut
short by a kill is finished by the next sweep. A folder still under its private name whose job
died after writing the record is removed the same way; one whose job died before (an empty
``.daskpca-making-*`` folder, a window of one ``write``) has no record and is left.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import signal
import socket
import stat
import tempfile
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from ..exceptions import ScratchError
from .claims import _process_identity, _provably_dead
from .paths import is_url

log = logging.getLogger("daskpca")

#: Environment variable naming the folder for temporary copies.
SCRATCH_ENV = "DASKPCA_SCRATCH"
#: Every scratch folder's name starts with this (the sweep of dead jobs' folders looks only at these).
PREFIX = "daskpca-"
#: The owner record inside each folder.
OWNER_FILE = "owner.json"
#: The record's marker (a key no other program writes) and the version of its schema.
SCHEMA_KEY = "daskpca_scratch"
SCHEMA = 1
#: A folder being made: its record is written under this private name before it gets its own.
MAKING_PREFIX = ".daskpca-making-"
#: A folder being removed is renamed ``.NAME`` + this first.
REMOVING_SUFFIX = ".removing"
#: An owner record is a few hundred bytes: anything larger is not one.
RECORD_MAX_BYTES = 64 * 1024


class Terminated(KeyboardInterrupt):
    """SIGTERM received while a scratch folder was open: the job stops as on Ctrl-C, cleaning up."""


def scratch_root() -> Path:
    """``$DASKPCA_SCRATCH`` as meant (:func:`daskpca.store.paths.as_meant`: ``~``, ``file://``,
    relative to the working directory, as every other path of a job), or the system's temporary
    directory. Raises :class:`ScratchError` for a spelling that names no local folder."""
    from ..exceptions import InputError
    from .paths import as_meant

    try:
        root = as_meant(os.environ.get(SCRATCH_ENV) or tempfile.gettempdir())
    except InputError as error:
        raise ScratchError(f"${SCRATCH_ENV}: {error}") from None
    return Path(root)


def _where() -> str:
    root = os.environ.get(SCRATCH_ENV)
    return f"${SCRATCH_ENV}={root!r}" if root else f"the system's temporary directory {tempfile.gettempdir()!r} (${SCRATCH_ENV} unset)"


def check_root(root: Path | None = None) -> Path:
    """The scratch root, checked: an existing, writable folder. Raises :class:`ScratchError`."""
    root = scratch_root() if root is None else Path(root)
    fix = f"Set ${SCRATCH_ENV} to an existing folder on a local disk with room, writable by this user."
    if not root.exists():
        raise ScratchError(f"the scratch folder {_where()} does not exist. {fix}")
    if not root.is_dir():
        raise ScratchError(f"the scratch folder {_where()} is a file, not a folder. {fix}")
    if not os.access(root, os.W_OK | os.X_OK):
        raise ScratchError(f"the scratch folder {_where()} is not writable by this user. {fix}")
    return root


def check_apart(inputs: dict, outputs: dict | None = None, root: Path | None = None) -> None:
    """Refuse a scratch root that is, or lies inside, an input or output of the job, and an input
    or output that lies inside one of daskpca's scratch folders.

    The first would write the temporary copies into what the job reads or replaces (and a kill
    would leave them there); the second reads or writes what a job removes when it ends. The
    root may contain the job's paths (``$DASKPCA_SCRATCH=/tmp`` with ``/tmp/x.zarr``): each copy
    is a fresh folder of its own there. Paths are compared where they really are (symlinks and
    ``..`` resolved, also in ``$DASKPCA_SCRATCH`` itself); object-store URLs cannot meet a local
    folder and are skipped. Reads no data.

    Parameters
    ----------
    inputs, outputs : dict
        ``{label: path}`` (``{"SOURCE": "x.zarr"}``, ``{"--out": "m.zarr"}``); None paths skipped.
    root : path, optional
        The scratch root (default :func:`scratch_root`).

    Raises
    ------
    ScratchError
        Naming ``$DASKPCA_SCRATCH`` (or the temporary directory), the path it meets and the fix.
    """
    from .paths import canonical

    if root is None:
        try:
            root = scratch_root()
        except ScratchError:  # names no folder: nothing can be written there (check_root says so)
            return
    root = Path(root)
    real_root = canonical(root)
    # Where each local path really is, all found first (object-store URLs cannot meet a folder).
    places = []
    for kind, paths in (("input", inputs), ("output", outputs or {})):
        for label, path in paths.items():
            if path is not None and not is_url(os.fspath(path)):
                places.append((kind, label, path, canonical(path)))
    spelled = "" if real_root == os.path.abspath(root) else f" (really {real_root!r})"
    fix = (f"Set ${SCRATCH_ENV} to a folder outside the job's inputs and outputs (a fresh folder on a "
           "local disk with room), or give the job's paths places of their own.")
    for kind, label, path, real in places:
        if real_root == real or real_root.startswith(real.rstrip("/") + "/"):
            relation = "is" if real_root == real else "lies inside"
            raise ScratchError(f"the scratch folder {_where()}{spelled} {relation} the {kind} {label} "
                               f"{os.fspath(path)!r}: temporary copies would be written into what the job "
                               f"{'reads' if kind == 'input' else 'writes'}. {fix}")
        # Only a path through a folder named like ours (each such name holds PREFIX) can lie
        # inside one: the others' ancestors need no look for a record.
        owner = owning_folder(real) if PREFIX in real else None
        if owner is not None:
            raise ScratchError(f"the {kind} {label} {os.fspath(path)!r} lies inside daskpca's temporary folder "
                               f"{owner!r} (made for a job's pass cache or strip copy under the scratch folder "
                               f"{_where()}), which is removed when that job ends. Copy it outside first; "
                               f"keep the job's paths outside ${SCRATCH_ENV}'s daskpca-* folders.")


def owning_folder(path) -> str | None:
    """The daskpca scratch folder (one with a valid owner record) that ``path`` is or lies
    inside, or None. Looks at ``path``'s ancestors named like scratch folders only."""
    here = Path(os.path.realpath(path))
    for folder in (here, *here.parents):
        if _named_like_ours(folder.name) and _valid(_read_record(folder), folder.name):
            return str(folder)
    return None


def scratch_error(error: OSError, folder) -> ScratchError:
    """A :class:`ScratchError` for an ``OSError`` met while writing into a scratch folder."""
    fix = f"Free space there or set ${SCRATCH_ENV} to a folder on a local disk with room."
    if getattr(error, "errno", None) in (errno.ENOSPC, errno.EDQUOT):
        return ScratchError(f"the scratch folder {_where()} is full (writing {str(folder)!r}). {fix}")
    if getattr(error, "errno", None) in (errno.EACCES, errno.EPERM, errno.EROFS):
        return ScratchError(f"the scratch folder {_where()} is not writable (writing {str(folder)!r}). {fix}")
    return ScratchError(f"a temporary copy under the scratch folder {_where()} could not be written "
                        f"({type(error).__name__} on {str(folder)!r}). {fix}")


def free_bytes(root: Path | None = None) -> int:
    """Free bytes on the scratch root's file system (0 when it cannot be asked)."""
    try:
        return int(shutil.disk_usage(check_root(root)).free)
    except (OSError, ScratchError):
        return 0


def owner_record(name: str) -> dict:
    """The owner record of the scratch folder ``name`` made by this process."""
    return {SCHEMA_KEY: SCHEMA, "folder": name, "token": uuid.uuid4().hex, "host": socket.gethostname(),
            "pid": os.getpid(), "created": time.time(), **_process_identity(os.getpid())}


def _named_like_ours(name: str) -> bool:
    """Whether a folder of this name may be one daskpca made: ``daskpca-*``, one being made
    (:data:`MAKING_PREFIX`) or one being removed (``.daskpca-*.removing``). Only the record decides."""
    return name.startswith((PREFIX, MAKING_PREFIX)) or (name.startswith("." + PREFIX) and name.endswith(REMOVING_SUFFIX))


def _read_record(folder: Path) -> dict | None:
    """The JSON object in ``folder``'s owner file, or None: ``folder`` must be a real folder (not
    a link) and its owner file a small regular file (not a link). Follows no symlink."""
    try:
        directory = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        handle = os.open(OWNER_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=directory)
    except OSError:
        return None
    finally:
        os.close(directory)
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode) or info.st_size > RECORD_MAX_BYTES:
            return None
        record = json.loads(os.read(handle, RECORD_MAX_BYTES + 1))
    except (OSError, ValueError):
        return None
    finally:
        os.close(handle)
    return record if isinstance(record, dict) else None


def _valid(record: dict | None, name: str) -> bool:
    """Whether ``record`` is daskpca's owner record of the folder called ``name`` now: the marker,
    the schema this version writes, a token, an owner, and the folder's own name — ``name``
    itself, or the name it was being made under or renamed aside to for removal. A copied record
    names another folder; an older daskpca's or another program's has no marker."""
    if not (isinstance(record, dict) and record.get(SCHEMA_KEY) == SCHEMA and isinstance(record.get("token"), str)
            and isinstance(record.get("pid"), int) and isinstance(record.get("host"), str)):
        return False
    own = record.get("folder")
    if not isinstance(own, str) or not own.startswith(PREFIX) or "/" in own:
        return False
    return name in (own, f".{own}{REMOVING_SUFFIX}") or name.startswith(MAKING_PREFIX)


def _identity(path: Path) -> tuple[int, int] | None:
    """``(device, inode)`` of the folder at ``path`` itself (a link is not a folder), or None."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino) if stat.S_ISDIR(info.st_mode) else None


def _remove_owned(folder: Path, ours: Callable[[dict], bool], made: tuple[int, int] | None = None) -> bool:
    """Remove the scratch folder ``folder`` if its record is valid and ``ours(record)`` holds, read
    again right before — or, for the folder this process made (``made``: its device and inode,
    from :func:`_make_owned`), if it is still that very folder, record or not (a cleaner may have
    taken the record); True when it was removed.

    Never follows a link: ``folder`` itself must be a real folder, and its content goes through
    ``shutil.rmtree``, which removes links without following them. The folder is first renamed
    aside (``.NAME.removing``: one atomic step, so another job sees all of it or nothing, and a
    second remover finds nothing to rename) and its record read again there (what was renamed is
    what was checked); the record goes last, so a removal cut short leaves a folder the next
    sweep still recognises.
    """
    record = _read_record(folder)
    if made is not None and _identity(folder) == made:
        record = record if _valid(record, folder.name) else None
    elif not _named_like_ours(folder.name) or not _valid(record, folder.name) or not ours(record):
        return False
    aside = folder.with_name(f".{record['folder'] if record else folder.name}{REMOVING_SUFFIX}")
    if folder != aside:
        try:
            os.rename(folder, aside)
        except OSError:  # gone already (another sweep), or not ours to rename
            return False
        again = _read_record(aside)
        if made is not None and _identity(aside) == made:
            pass  # the very folder this process made
        elif record is None or not _valid(again, aside.name) or again.get("token") != record.get("token"):
            try:  # not what was checked (swapped in between): put it back untouched
                os.rename(aside, folder)
            except OSError:
                log.warning("daskpca: %r changed while it was being removed; left as %r", str(folder), str(aside))
            return False
    try:
        entries = list(os.scandir(aside))
    except OSError:
        return False
    for entry in entries:
        if entry.name == OWNER_FILE:
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
        except OSError:
            pass
    try:
        if len(os.listdir(aside)) > 1:  # something could not be removed: keep the record for the next sweep
            raise OSError(errno.ENOTEMPTY, "not empty", str(aside))
        (aside / OWNER_FILE).unlink(missing_ok=True)
        os.rmdir(aside)
    except OSError:
        log.warning("daskpca: the scratch folder %r could not be emptied; a later job removes it once this "
                    "one has ended", str(aside))
        return False
    return True


def remove_dead(root: Path | None = None) -> list[str]:
    """Remove the scratch folders under ``root`` that daskpca made for jobs now provably dead
    (killed: SIGKILL, a node lost), and removals such a job left half done; the folders removed.

    Only folders holding a valid owner record (see the module notes) are considered; everything
    else named ``daskpca-*`` is someone else's and left alone, as are live jobs' folders and those
    of other hosts or boots. Nothing is removed by name or age.
    """
    root = scratch_root() if root is None else Path(root)
    removed = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return removed
    for entry in entries:
        try:
            if not _named_like_ours(entry.name) or not entry.is_dir(follow_symlinks=False):
                continue  # not named like ours, a file or a link: never looked into
        except OSError:
            continue
        folder = Path(entry.path)
        record = _read_record(folder)
        if not _valid(record, entry.name):
            log.debug("daskpca: %r has no daskpca owner record: not ours, left alone", entry.path)
            continue
        if _provably_dead(record) and _remove_owned(folder, lambda now: now.get("token") == record["token"]
                                                    and _provably_dead(now)):
            removed.append(entry.path)
    return removed


def _make_owned(root: Path, kind: str) -> tuple[Path, str, tuple[int, int] | None]:
    """``(folder, token, identity)``: a fresh folder ``root/daskpca-KIND-*`` holding its owner
    record from the moment it has that name (made and recorded under a private name, then
    renamed), the record's token and the folder's device and inode (:func:`_identity`)."""
    name = f"{PREFIX}{kind}-{uuid.uuid4().hex[:16]}"
    record = owner_record(name)
    making = None
    try:
        making = Path(tempfile.mkdtemp(prefix=MAKING_PREFIX, dir=root))
        with open(making / OWNER_FILE, "x") as handle:
            handle.write(json.dumps(record))
        folder = root / name
        if os.path.lexists(folder):  # rename would replace an empty folder of that name: never
            raise FileExistsError(errno.EEXIST, "exists", str(folder))
        made = _identity(making)
        os.rename(making, folder)
        return folder, record["token"], made
    except OSError as error:
        if making is not None:
            shutil.rmtree(making, ignore_errors=True)  # our own private folder, made just above
        raise scratch_error(error, root) from None


@contextmanager
def scratch_folder(kind: str, *, inputs: dict | None = None, outputs: dict | None = None) -> Iterator[Path]:
    """A fresh folder ``daskpca-KIND-*`` under the scratch root, removed when the block ends
    (whatever ends it, SIGTERM included: :func:`terminate_as_interrupt`). Dead jobs' folders are
    removed first.

    ``inputs`` and ``outputs`` (``{label: path}``) are the job's paths the root must stay apart
    from (:func:`check_apart`). Raises :class:`ScratchError` when the root is unusable or meets
    one of them.
    """
    root = check_root()
    check_apart(inputs or {}, outputs, root)
    root = Path(os.path.realpath(root))  # where it is now: a link swapped later cannot move the copy
    remove_dead(root)
    folder, token, made = _make_owned(root, kind)
    try:
        with terminate_as_interrupt():
            yield folder
    finally:
        _remove_owned(folder, lambda record: record.get("token") == token, made)


_depth = 0
_depth_lock = threading.Lock()


def _raise_terminated(signum, frame):
    raise Terminated(f"received signal {signum} (SIGTERM): stopped, temporary copies removed")


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """While the block runs, SIGTERM raises :class:`Terminated` (a ``KeyboardInterrupt``) in the
    main thread, so ``finally`` clauses and context managers clean up as on Ctrl-C.

    Only in the main thread (signal handlers can only be set there) and only when SIGTERM has the
    default disposition: a handler the user (or a framework) installed is left alone. Nested
    blocks share one installation; the previous disposition comes back when the outermost ends.
    """
    global _depth
    counted = False
    if threading.current_thread() is threading.main_thread():
        with _depth_lock:
            if _depth == 0 and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
                signal.signal(signal.SIGTERM, _raise_terminated)
            if signal.getsignal(signal.SIGTERM) is _raise_terminated:
                _depth, counted = _depth + 1, True
    try:
        yield
    finally:
        if counted:
            with _depth_lock:
                _depth -= 1
                if _depth == 0 and signal.getsignal(signal.SIGTERM) is _raise_terminated:
                    signal.signal(signal.SIGTERM, signal.SIG_DFL)
