"""Where a job's stores really are: the path as the user meant it, and no output of a job that
is one of its inputs.

:func:`as_meant` turns what the user typed into the path every step acts on — ``~`` expanded,
``file://`` URLs (any case of the scheme, host empty or ``localhost``) as local paths, relative
paths made absolute against the working directory, object-store URLs kept (their scheme
lower-cased). It is applied once where a path enters: the command line's declared paths
(:mod:`daskpca.cli.declarations`), the job file, and every reader and writer of
:mod:`daskpca.io` (so ``save``, ``load`` and input paths too). The overlap check, the claim, the
writer (zarr), the publisher and the completion marker then all see one path: without it zarr
expanded ``~`` for the temporary store while the publisher renamed to a literal ``./~/…``. What
it returns is a :class:`MeantPath`, which the steps it is passed on to take as it is, and which
says whether it is an object-store URL (``.remote``), so that they need not ask again.

The path questions every step asks live here too: whether a path is an object-store URL
(:func:`is_url`), the local path of a ``file://`` one (:func:`local_path`), and whether a local
output's folder can be written (:func:`check_folder`, asked before a claim makes any folder).

Two spellings name the same store when they resolve to the same place: a relative and an
absolute path, a symlink and its target, ``a/../b`` and ``b``, a trailing slash, ``file://``.
:func:`canonical` gives the one spelling; :func:`overlaps` lists every output that is, contains
or lies inside an input or another output of the same job — replacing it would destroy data the
job reads (``fit S.zarr --out S.zarr --overwrite``) or another of its results.
"""

from __future__ import annotations

import os
import posixpath
import re
from pathlib import Path
from urllib.parse import unquote

from ..exceptions import InputError

#: ``scheme://`` at the start of a URL (RFC 3986: a letter, then letters, digits, ``+-.``).
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
#: ``file:/abs/path``: RFC 8089's file URL without an authority (one slash, not two).
_FILE_NO_AUTHORITY = re.compile(r"^file:(?=/(?!/))", re.IGNORECASE)


def is_url(path) -> bool:
    """Whether ``path`` names an object-store location (``s3://…``, any fsspec protocol) rather
    than a local one: a string with a scheme other than ``file://``. A :class:`MeantPath` carries
    the answer (``.remote``): the steps a path is passed on to read it there instead of asking."""
    if isinstance(path, MeantPath):
        return path.remote
    return isinstance(path, str) and "://" in path and not path.startswith("file://")


def local_path(path) -> Path:
    """A local ``path`` (``file://`` prefix dropped) as a :class:`~pathlib.Path`."""
    path = os.fspath(path)
    return Path(path[len("file://"):] if path.startswith("file://") else path)


def check_folder(path) -> None:
    """Raise :class:`PermissionError` when a local ``path`` cannot be created because its folder
    (the nearest one that exists: the writer makes the missing ones) is a file or not writable by
    this user; an object-store URL passes (its permissions show at the first write)."""
    if is_url(path):
        return
    target = local_path(path)
    folder = target.absolute().parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(
            f"cannot write {os.fspath(target)!r}: {os.fspath(folder)!r} is "
            f"{'not a folder' if not folder.is_dir() else 'not writable by this user'}. Choose "
            "another path, or fix the folder's permissions."
        )


class MeantPath(str):
    """A path :func:`as_meant` gave: already the spelling every step of a job uses.

    A plain ``str`` everywhere (zarr, ``os``, JSON, messages); its type only records that the
    path was resolved where it entered (the command line's declared paths, a reader or writer of
    :mod:`daskpca.io`), so the functions it is passed on to do not resolve it again. Anything
    made from it (``path + "/x"``, an f-string) is a plain ``str`` again: resolved anew if given.

    Attributes
    ----------
    remote : bool
        Whether it names an object-store location (:func:`is_url`; then it is a
        :class:`MeantURL`), decided once where the path was put as meant. A plain class
        attribute: the claim, the publisher, the writer and the integrity record read it without
        asking this module again. A local one is an absolute local path without ``file://``, so
        ``Path(path)`` is its :func:`local_path`.
    """

    __slots__ = ()
    remote = False


class MeantURL(MeantPath):
    """A :class:`MeantPath` naming an object-store location (``s3://…``, any fsspec protocol)."""

    __slots__ = ()
    remote = True


def as_meant(path):
    """``path`` as the user meant it: the one spelling every step of a job uses.

    Parameters
    ----------
    path : str, os.PathLike or None
        A local path (``~`` and ``~user`` expanded, relative to the working directory),
        a ``file:`` URL — scheme in any case (RFC 3986), host empty or ``localhost`` or no
        authority at all (``file:/abs``, RFC 8089), percent-encoding decoded (``%20`` is a
        space, as ``Path.as_uri()`` writes it) — or an object-store URL (``s3://…``, any fsspec
        protocol). Anything else (``None``, a zarr store object) is returned as it is.

    Returns
    -------
    MeantPath
        An absolute local path (``..`` and symlinks kept: the OS resolves them as it would for
        the user; :func:`canonical` resolves them to compare), or the URL with its scheme
        lower-cased and nothing else changed (a :class:`MeantURL`, ``remote`` true). Idempotent;
        a :class:`MeantPath` is returned as it is.

    Raises
    ------
    InputError
        A ``file://`` URL naming another host: daskpca reads and writes local files only through
        the local file system (mount the share and give its local path). A ``~user`` path of a
        user this machine does not know: left as it is, it would be a folder literally named
        ``~user`` in the working directory.
    """
    if isinstance(path, MeantPath) or not isinstance(path, (str, os.PathLike)):
        return path
    resolved = _resolved(os.fspath(path))
    return (MeantURL if is_url(resolved) else MeantPath)(resolved)


def _resolved(path: str) -> str:
    """:func:`as_meant` of a ``str``."""
    if _FILE_NO_AUTHORITY.match(path):
        return str(Path(unquote(path[len("file:"):])).absolute())
    match = _SCHEME.match(path)
    if match is None:
        expanded = os.path.expanduser(path)
        if path.startswith("~") and expanded == path:
            user = path[1:].split("/", 1)[0]
            raise InputError(
                f"{path!r} starts with ~{user}, the home folder of a user, but there is no user {user!r} on this "
                f"machine (and no $HOME for ~): give the folder's path (e.g. /home/{user or 'me'}/…, or ./~{user}/… "
                "for a folder of that name here).")
        return str(Path(expanded).absolute())
    scheme = match.group(1).lower()
    rest = path[match.end():]
    if scheme != "file":
        return f"{scheme}://{rest}"
    host, slash, local = rest.partition("/")
    if host and host.lower() != "localhost":
        raise InputError(
            f"{path!r} names the host {host!r}: a file:// URL means a file on this machine (host empty or "
            f"'localhost', e.g. file:///{local or 'abs/path.zarr'}). Mount that host's folder here and give its "
            "local path, or use an object-store URL (s3://…).")
    # A URL's path is percent-encoded (RFC 3986 §2.1): %20 is a space, %2E a dot.
    return str(Path("/" + unquote(local)).absolute()) if slash else "/"


def canonical(path) -> str:
    """One spelling per location: the real local path (symlinks, ``..`` and relative parts
    resolved, also for a path that does not exist yet), or ``protocol://`` + the normalised
    object-store path without a trailing slash."""
    path = as_meant(path)
    if is_url(path):
        protocol, rest = path.split("://", 1)
        return f"{protocol.lower()}://{posixpath.normpath('/' + rest).lstrip('/')}"
    return os.path.realpath(local_path(path))


def _relation(output: str, other: str) -> str | None:
    """How ``output`` (canonical) stands to ``other`` (canonical): "is the same store as", "contains" or "lies inside"."""
    if output == other:
        return "is the same store as"
    if other.startswith(output.rstrip("/") + "/"):
        return "contains"
    if output.startswith(other.rstrip("/") + "/"):
        return "lies inside"
    return None


def overlaps(inputs: dict, outputs: dict) -> list[str]:
    """One sentence per output that is, contains or lies inside an input or another output.

    Parameters
    ----------
    inputs, outputs : dict
        ``{label: path}`` (e.g. ``{"SOURCE": "s.zarr"}``, ``{"--out": "m.zarr"}``); ``None``
        paths are skipped.
    """
    named = {label: (os.fspath(path), canonical(path)) for label, path in {**inputs, **outputs}.items()
             if path is not None}
    found = []
    out_labels = [label for label in outputs if label in named]
    for i, label in enumerate(out_labels):
        path, where = named[label]
        others = [o for o in inputs if o in named] + out_labels[i + 1:]
        for other in others:
            other_path, other_where = named[other]
            relation = _relation(where, other_where)
            if relation is not None:
                kind = "input" if other in inputs else "output"
                found.append(
                    f"the output {label} {path!r} {relation} the {kind} {other} {other_path!r}"
                    + (f" (both are {where!r})" if where == other_where and path != other_path else "")
                    + ": writing it would destroy what the job "
                    + ("reads" if kind == "input" else "writes") + ". Give the output a path of its own.")
    return found


#: File name endings read as NetCDF (any file whose first bytes say NetCDF/HDF5 is, too).
NETCDF_SUFFIXES = (".nc", ".nc4", ".netcdf", ".cdf")
_NETCDF_MAGIC = (b"CDF\x01", b"CDF\x02", b"CDF\x05", b"\x89HDF\r\n\x1a\n")


def is_netcdf(path) -> bool:
    """Whether ``path`` names a NetCDF file: by its ending, or a local file's first bytes
    (classic ``CDF``, NetCDF-4's HDF5 signature). Reads at most 8 bytes."""
    if not isinstance(path, (str, os.PathLike)):
        return False
    path = os.fspath(path)
    if path.lower().endswith(NETCDF_SUFFIXES):
        return True
    if is_url(path) or not os.path.isfile(path):
        return False
    try:
        with open(path, "rb") as handle:
            return handle.read(8).startswith(_NETCDF_MAGIC)
    except OSError:
        return False
