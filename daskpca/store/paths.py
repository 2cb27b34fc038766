"""Where a job's stores really are, so that no output of a job can be one of its inputs.

Two spellings name the same store when they resolve to the same place: a relative and an
absolute path, a symlink and its target, ``a/../b`` and ``b``, a trailing slash, ``file://``.
:func:`canonical` gives the one spelling; :func:`overlaps` lists every output that is, contains
or lies inside an input or another output of the same job — replacing it would destroy data the
job reads (``fit S.zarr --out S.zarr --overwrite``) or another of its results.
"""

from __future__ import annotations

import os
import posixpath

from .claims import is_url, local_path


def canonical(path) -> str:
    """One spelling per location: the real local path (symlinks, ``..`` and relative parts
    resolved, also for a path that does not exist yet), or ``protocol://`` + the normalised
    object-store path without a trailing slash."""
    path = os.fspath(path)
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
