"""Scratch folders: temporary copies a job makes on local disk, and their removal.

Two things write temporary copies of the input: the Gram solver's column-strip re-layout
(:class:`daskpca.solvers._geometry.ColumnStrips`) and the disk pass cache
(:mod:`daskpca.solvers._cache`). Both take their folder from :func:`scratch_folder`, which

- makes it under ``$DASKPCA_SCRATCH`` (or the system's temporary directory), after checking that
  the place exists, is a folder and is writable — a :class:`~daskpca.exceptions.ScratchError`
  names ``$DASKPCA_SCRATCH`` and the fix otherwise, never raw ``errno`` text;
- writes the owner's identity into it (``owner.json``: host, pid, the process's start time, boot
  and pid namespace — what :mod:`daskpca.store.claims` records for stale claims), so a folder
  whose job was killed (SIGKILL, a node lost) is recognised as dead and removed by the next job
  that makes a scratch folder there (:func:`remove_dead`). A live job's folder, or one whose owner
  cannot be proven dead (another host, another boot), is never touched;
- removes it when the ``with`` block ends — success, error, Ctrl-C — and, through
  :func:`terminate_as_interrupt`, on SIGTERM (what Slurm, Kubernetes and ``kill`` send): while a
  scratch folder is open in the main thread and nobody has installed a SIGTERM handler, SIGTERM
  raises :class:`Terminated` (a ``KeyboardInterrupt``) so the same clean-up path runs.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ..exceptions import ScratchError
from .claims import _process_identity, _provably_dead

#: Environment variable naming the folder for temporary copies.
SCRATCH_ENV = "DASKPCA_SCRATCH"
#: Every scratch folder's name starts with this (the sweep of dead jobs' folders looks only at these).
PREFIX = "daskpca-"
#: The owner's identity inside each folder.
OWNER_FILE = "owner.json"
#: A folder of this package's name without an owner file (one left by a version that wrote none,
#: or a job killed between making the folder and writing its owner) is removed once this old.
ORPHAN_SECONDS = 24 * 3600


class Terminated(KeyboardInterrupt):
    """SIGTERM received while a scratch folder was open: the job stops as on Ctrl-C, cleaning up."""


def scratch_root() -> Path:
    """``$DASKPCA_SCRATCH``, or the system's temporary directory."""
    return Path(os.environ.get(SCRATCH_ENV) or tempfile.gettempdir())


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


def _owner() -> dict:
    return {"host": socket.gethostname(), "pid": os.getpid(), "created": time.time(), **_process_identity(os.getpid())}


def remove_dead(root: Path | None = None) -> list[str]:
    """Remove the scratch folders under ``root`` whose owner is provably dead (killed jobs); the
    folders removed. Live jobs' folders, and folders of other hosts or boots, are left."""
    root = scratch_root() if root is None else Path(root)
    removed = []
    try:
        entries = list(root.iterdir())
    except OSError:
        return removed
    for folder in entries:
        if not folder.name.startswith(PREFIX) or not folder.is_dir() or folder.is_symlink():
            continue
        try:
            record = json.loads((folder / OWNER_FILE).read_text())
        except FileNotFoundError:
            try:
                stale = time.time() - folder.stat().st_mtime > ORPHAN_SECONDS
            except OSError:
                continue
            if not stale:
                continue
        except (OSError, ValueError):
            continue
        else:
            if not _provably_dead(record):
                continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(str(folder))
    return removed


@contextmanager
def scratch_folder(kind: str) -> Iterator[Path]:
    """A fresh folder ``daskpca-KIND-*`` under the scratch root, removed when the block ends
    (whatever ends it, SIGTERM included: :func:`terminate_as_interrupt`). Dead jobs' folders are
    removed first. Raises :class:`ScratchError` when the root is unusable."""
    root = check_root()
    remove_dead(root)
    try:
        folder = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{kind}-", dir=root))
    except OSError as error:
        raise scratch_error(error, root) from None
    try:
        with terminate_as_interrupt():
            try:
                (folder / OWNER_FILE).write_text(json.dumps(_owner()))
            except OSError as error:
                raise scratch_error(error, folder) from None
            yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


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
