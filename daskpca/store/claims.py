"""Claims: one writer per output, decided by an exclusive create before any work starts.

A job that will write ``TARGET`` first creates the claim ``.NAME.daskpca-claim`` beside it — an
exclusive create (a hard link of a complete temporary file, which fails if the name exists;
``If-None-Match: *`` on S3, see :mod:`daskpca.store.objects`). Of any number of jobs started together
exactly one succeeds; the others get :class:`~daskpca.exceptions.OutputClaimedError` naming the
holder (pid, host, command, start time) before they read any data. The holder checks that the
claim is still its own again just before it publishes, and removes it when done (success or
failure), with the folders it had to create for it when they are still empty (a job that fails
before writing leaves nothing behind).

A job killed with SIGKILL cannot remove its claim. The next job reads it. When the holder
provably cannot be running — same host, same boot, same pid namespace, and its pid gone or
reused by a process started later — the claim is cleared with a warning naming the dead job, so
rerunning a killed job just works (and resumes from its checkpoint). Otherwise (another host or
container, whose processes cannot be seen from here; a claim written before these fields
existed) the error names the holder and says that ``--break-claim`` (:func:`break_claim` in
Python) clears it once you know that job is gone: a slow job must never lose its output to an
impatient one. ``--break-claim`` on a claim whose holder is provably dead (its pid now a later
process's) clears it as a plain rerun would; only a holder that may be running is refused.

Claims held by this process are registered (:func:`held`), so the writers in :mod:`daskpca.io`
take a claim only for targets the caller did not claim already.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import threading
import time
import uuid
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from . import objects
from .paths import MeantPath, check_folder, is_url, local_path
from ..exceptions import OutputClaimedError

CLAIM_SUFFIX = ".daskpca-claim"
log = logging.getLogger("daskpca")

#: Claims this process holds, by target key (see :func:`_key`).
_HELD: dict[str, "Claim"] = {}
_HELD_LOCK = threading.Lock()


def _place(target) -> tuple[str, str, bool]:
    """``(key, location, remote)`` of ``target``: its key in :data:`_HELD`, where its claim lives
    and whether that is an object store. Whether a path is a URL is decided here once per claim
    (a :class:`~daskpca.store.paths.MeantPath`, every daskpca writer's target, carries the answer
    and is a local path already); every storage step of the claim is then told."""
    meant = isinstance(target, MeantPath)
    if target.remote if meant else is_url(target):
        parent, _, leaf = target.rstrip("/").rpartition("/")
        return target.rstrip("/"), f"{parent}/.{leaf}{CLAIM_SUFFIX}", True
    local = Path(target) if meant else local_path(target)
    return str(local.absolute()), str(local.parent / f".{local.name}{CLAIM_SUFFIX}"), False


def _key(target) -> str:
    return _place(target)[0]


def claim_location(target) -> str:
    """Where the claim of ``target`` lives: ``.NAME.daskpca-claim`` in the same folder/prefix."""
    return _place(target)[1]


@dataclass
class Claim:
    """A claim this process holds on ``target``."""

    target: str
    location: str
    token: str
    #: Its key in :data:`_HELD` and whether it lives on an object store (:func:`_place`).
    key: str
    remote: bool
    record: dict = field(default_factory=dict)
    #: Local folders the claim had to create (deepest first): removed on release when empty, so
    #: a job that fails before writing leaves no trace.
    folders: tuple = ()

    def is_ours(self) -> bool:
        """Whether the stored claim is still this one (nobody broke it)."""
        other = _read(self.location, self.remote)
        return bool(other) and other.get("token") == self.token

    def check(self) -> None:
        """Raise :class:`OutputClaimedError` unless the claim is still ours (just before publishing)."""
        if not self.is_ours():
            other = _read(self.location, self.remote)
            holder = describe(other) if other else "nobody (the claim was removed)"
            raise OutputClaimedError(
                f"the claim on {self.target!r} was broken while this job ran; it is now held by "
                f"{holder}. Nothing was published; run this job again once the other one is done."
            )

    def release(self) -> None:
        """Remove the claim if it is still ours; forget it either way."""
        with _HELD_LOCK:
            _HELD.pop(self.key, None)
        if self.is_ours():
            _remove(self.location, self.remote)
        for folder in self.folders:
            try:
                os.rmdir(folder)  # only an empty one: the published output, or anyone's file, keeps it
            except OSError:
                break


def held(target) -> Claim | None:
    """The claim this process holds on ``target``, if any."""
    with _HELD_LOCK:
        return _HELD.get(_key(target))


def acquire(target, *, break_stale: bool = False, command: str | None = None) -> Claim:
    """Claim ``target`` for this process, or raise :class:`OutputClaimedError` naming the holder.

    ``break_stale=True`` (``--break-claim``) first removes an existing claim — for one left by a
    killed job; the error for a claim held by a live job on this host still says so.
    """
    target = os.fspath(target)
    place = _place(target)
    check_folder(target)  # before any folder is made for the claim: a PermissionError naming it
    return _acquire(target, place, break_stale=break_stale, command=command)


def _acquire(target: str, place: tuple[str, str, bool], *, break_stale: bool, command: str | None) -> Claim:
    """:func:`acquire` of ``target``, whose :func:`_place` the caller has."""
    key, location, remote = place
    record = {
        "token": uuid.uuid4().hex,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.time(),
        "command": command or " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])[:300],
        "target": target,
        **_process_identity(os.getpid()),
    }
    data = json.dumps(record).encode()
    if break_stale:
        other = _read(location, remote)
        if other is not None and _provably_dead(other):
            _clear_stale(target, location, remote, other)  # as a plain rerun would: its pid merely reused
        elif other is not None and _alive_here(other):
            raise OutputClaimedError(
                f"{target!r} is being written by {describe(other)}, which is still running on this "
                "host: --break-claim only clears claims of jobs that are gone. Wait for it, or stop it."
            )
        else:
            _remove(location, remote)
    folders = () if remote else _missing_folders(Path(location).parent)
    for _attempt in range(3):
        if _create(location, remote, data):
            break
        other = _read(location, remote)
        if other is not None and _provably_dead(other):
            _clear_stale(target, location, remote, other)
        elif other is not None:  # None: its holder released it between our create and read
            raise OutputClaimedError(_conflict_message(target, location, other))
    else:
        raise OutputClaimedError(_conflict_message(target, location, None))
    claim = Claim(target, location, record["token"], key, remote, record, folders)
    with _HELD_LOCK:
        _HELD[key] = claim
    return claim


def _clear_stale(target: str, location: str, remote: bool, other: dict) -> None:
    log.warning("cleared the stale claim on %r of %s: that job is no longer running (killed "
                "before it finished)", target, describe(other))
    _remove(location, remote)


def _missing_folders(folder: Path) -> tuple:
    """``folder`` and its ancestors that do not exist yet, deepest first."""
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(str(folder))
        folder = folder.parent
    return tuple(missing)


@contextmanager
def holding(targets, *, break_stale: bool = False, command: str | None = None):
    """Claim every target (in order) for the duration of the block; release them after.

    Targets this process already holds are left alone. Each other target's folder is checked
    first (:func:`daskpca.store.paths.check_folder`: a :class:`PermissionError` naming it). If one
    claim fails, those taken so far are released before the error propagates: nothing is left
    claimed.
    """
    taken = []
    try:
        for target in targets:
            if target is None:
                continue
            target = os.fspath(target)
            place = _place(target)
            with _HELD_LOCK:
                ours = _HELD.get(place[0])
            if ours is None:
                check_folder(target)  # as acquire does
                taken.append(_acquire(target, place, break_stale=break_stale, command=command))
        yield taken
    finally:
        for claim in reversed(taken):
            claim.release()


def claimed(target):
    """A context manager giving the caller's claim on ``target`` or, when it holds none, a claim
    for this block only. The caller's claim is handed on as it is (a ``nullcontext``): there is
    nothing to release at the end of the block, and no step of this module runs there."""
    existing = held(target)
    if existing is not None:
        return nullcontext(existing)
    return _claimed_for_the_block(target)


@contextmanager
def _claimed_for_the_block(target):
    with holding([target]) as (claim,):
        yield claim


def break_claim(target) -> dict | None:
    """Remove the claim on ``target`` (whoever holds it); return the record that was removed."""
    _, location, remote = _place(os.fspath(target))
    other = _read(location, remote)
    _remove(location, remote)
    return other


def describe(record: dict) -> str:
    """``pid 123 on host 'h' ('daskpca fit …', started 2026-11-24 00:38:14 UTC, 12 s ago)``."""
    started = float(record.get("started", 0) or 0)
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started)) if started else "at an unknown time"
    ago = f", {_age(time.time() - started)} ago" if started else ""
    return (f"pid {record.get('pid', '?')} on host {record.get('host', '?')!r} "
            f"({record.get('command', 'unknown command')!r}, started {when}{ago})")


def _conflict_message(target, location, other) -> str:
    if other is None:
        return (f"{target!r} is claimed by another job, but its claim {location!r} vanished or is "
                "unreadable; run the job again.")
    if other == {}:
        return (f"{target!r} has an unreadable claim {location!r} (its writer was killed while "
                "claiming). Pass --break-claim (daskpca.io.break_claim in Python) to clear it.")
    text = f"{target!r} is being written by another job: {describe(other)}."
    if other.get("host") == socket.gethostname() and not _pid_alive(other.get("pid")):
        return (f"{target!r} has a stale claim: {describe(other)} is no longer running (it was "
                f"killed before it finished). Pass --break-claim (daskpca.io.break_claim in Python) "
                "to clear it and write the output.")
    if other.get("host") != socket.gethostname():
        text += (" If that job is gone (it ran on another host, which daskpca cannot check), pass "
                 "--break-claim to clear its claim.")
    else:
        text += " Wait for it to finish, or write to another path."
    return text


def _age(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


def _pid_alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, TypeError, ValueError):
        return True  # someone else's process, or no pid: do not call it dead
    return True


def _process_identity(pid: int) -> dict:
    """What tells this process apart from a later one with the same pid (Linux; {} elsewhere):
    the boot, the pid namespace and the process's start time in clock ticks since boot."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            boot = handle.read().strip()
        namespace = os.stat("/proc/self/ns/pid").st_ino
        return {"boot": boot, "pid_namespace": namespace, "pid_start": _start_ticks(pid)}
    except (OSError, ValueError, IndexError):
        return {}


def _start_ticks(pid) -> int:
    with open(f"/proc/{int(pid)}/stat") as handle:
        return int(handle.read().rsplit(")", 1)[1].split()[19])


def _provably_dead(record: dict) -> bool:
    """Whether the claim's holder cannot be running: it ran in this host's boot and pid namespace
    (so its pid is visible from here) and that pid is gone or belongs to a later process."""
    if not record or record.get("host") != socket.gethostname() or "pid_start" not in record:
        return False
    here = _process_identity(os.getpid())
    if not here or (record.get("boot"), record.get("pid_namespace")) != (here["boot"], here["pid_namespace"]):
        return False
    try:
        return _start_ticks(record["pid"]) != int(record["pid_start"])
    except FileNotFoundError:
        return True
    except (OSError, ValueError, IndexError, TypeError):
        return False


def _alive_here(record: dict) -> bool:
    return record != {} and record.get("host") == socket.gethostname() and _pid_alive(record.get("pid"))


# ----------------------------------------------------------------------------- storage


# ``remote``: whether ``location`` is on an object store (:func:`_place`).


def _create(location: str, remote: bool, data: bytes) -> bool:
    if remote:
        fs, path = objects.filesystem(location)
        return objects.create(fs, path, data)
    path = Path(location)
    for attempt in range(3):
        path.parent.mkdir(parents=True, exist_ok=True)
        # Write a complete file, then hard-link it into place: the link fails if the claim exists,
        # and a claim that exists is always complete.
        temporary = path.parent / f"{path.name}.{uuid.uuid4().hex[:8]}.tmp"
        try:
            temporary.write_bytes(data)
            os.link(temporary, path)
            return True
        except FileExistsError:
            return False
        except FileNotFoundError:  # another job's failed claim removed the folder it had made
            if attempt == 2:
                raise
        finally:
            temporary.unlink(missing_ok=True)
    return False


def _read(location: str, remote: bool) -> dict | None:
    """The claim record; ``{}`` for an unreadable one; ``None`` when there is no claim."""
    if remote:
        fs, path = objects.filesystem(location)
        raw, _ = objects.read(fs, path)
    else:
        try:
            raw = Path(location).read_bytes()
        except FileNotFoundError:
            raw = None
    if raw is None:
        return None
    try:
        record = json.loads(raw)
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def _remove(location: str, remote: bool) -> None:
    if remote:
        fs, path = objects.filesystem(location)
        objects.delete(fs, path)
    else:
        Path(location).unlink(missing_ok=True)
