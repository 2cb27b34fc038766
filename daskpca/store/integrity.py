"""What a complete store must contain, recorded at write time and checked at read time.

**Store records.** Just before a store is published, :func:`store_record` lists every object in
it and records, per zarr array (the first path component; ``""`` for a bare-array store): how
many chunk objects it has, a digest of their names and a digest of their bytes; and the digest
of every metadata file (``zarr.json``: shapes, dtypes, attributes). The record goes into the
completion marker. :func:`check_store` compares a store with its record: ``full=False`` lists
names only (a partial copy that kept its marker, a deleted chunk), ``full=True`` also re-reads
and hashes every object (edited values, edited attributes). Models are small and always checked
in full; data stores are checked by listing on open and in full by ``daskpca.io.verify``.

A record that is missing or malformed is refused as damage (:func:`check_store`): editing the
marker never turns checking off. What the bytes must mean — a model's fitted invariants — is the
estimator layer's (``_problem`` of each estimator, checked by :mod:`daskpca.models._format`): a
model whose record was rewritten to match is still refused when it is not a valid model.
"""

from __future__ import annotations

import hashlib


from . import objects
from .paths import MeantPath, is_url
from ..exceptions import DamagedStoreError

#: Files in a store that are not zarr's (the completion marker); never part of the record.
_IGNORED = (".daskpca-complete",)


def _filesystem(location: str):
    # A publication's location (the record is made of it) says whether it is remote itself.
    if location.remote if isinstance(location, MeantPath) else is_url(location):
        return objects.filesystem(location)
    import fsspec

    return fsspec.filesystem("file"), str(location).rstrip("/")


def _objects_of(location: str) -> tuple:
    """``(fs, root, relative names)`` of every object in the store (sorted)."""
    fs, root = _filesystem(location)
    fs.invalidate_cache(root)
    root_path = fs._strip_protocol(root).rstrip("/")
    names = sorted(path[len(root_path) + 1:] for path in fs.find(root_path)
                   if path.rsplit("/", 1)[-1] not in _IGNORED)
    return fs, root_path, names


def _group(name: str) -> str:
    """The array a chunk object belongs to: ``model_mean/c/0`` → ``model_mean``; ``c/0/0`` → ``""``."""
    parts = name.split("/")
    return "/".join(parts[: parts.index("c")]) if "c" in parts else parts[0]


def _digest(parts) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part if isinstance(part, bytes) else part.encode())
        h.update(b"\0")
    return h.hexdigest()


def store_record(location: str) -> dict:
    """The record of a complete store at ``location`` (see the module docstring)."""
    fs, root, names = _objects_of(location)
    hashes = _hashes(fs, root, names)
    metadata = {n: hashes[n] for n in names if n.endswith("zarr.json")}
    arrays: dict[str, dict] = {}
    for name in names:
        if name in metadata:
            continue
        arrays.setdefault(_group(name), []).append(name)
    return {
        "metadata": metadata,
        "arrays": {array: {"objects": len(members), "names": _digest(members),
                           "bytes": _digest(hashes[n] for n in members)}
                   for array, members in arrays.items()},
    }


def _record_problem(record) -> str | None:
    """What is wrong with the form of an integrity ``record`` (``None``: nothing)."""
    if record is None:
        return "is missing"
    if not isinstance(record, dict):
        return f"is a {type(record).__name__} ({str(record)[:40]!r})"
    if not isinstance(record.get("metadata"), dict) or not isinstance(record.get("arrays"), dict):
        return f"lacks 'metadata' or 'arrays' objects (keys: {sorted(map(str, record))})"
    if not record["metadata"] or not all(isinstance(v, str) for v in record["metadata"].values()):
        return "has no metadata checksums, or ones that are not strings"
    for array, entry in record["arrays"].items():
        if (not isinstance(entry, dict) or type(entry.get("objects")) is not int
                or not isinstance(entry.get("names"), str) or not isinstance(entry.get("bytes"), str)):
            return f"has a malformed entry for array {array!r} ({str(entry)[:40]!r})"
    return None


#: Objects read per request batch while hashing (bounded memory for large results stores).
_BATCH = 64


def _hashes(fs, root: str, names: list) -> dict:
    """SHA-256 (hex) of every object, read in batches so memory stays bounded."""
    out = {}
    for start in range(0, len(names), _BATCH):
        batch = names[start:start + _BATCH]
        paths = [f"{root}/{n}" for n in batch]
        found = fs.cat(paths, on_error="omit") if len(paths) > 1 else {paths[0]: fs.cat_file(paths[0])}
        out.update({n: hashlib.sha256(found.get(p, b"")).hexdigest() for n, p in zip(batch, paths)})
    return out


def check_store(location: str, record, *, full: bool, label: str, error=DamagedStoreError) -> None:
    """Raise ``error`` naming what differs between the store at ``location`` and its ``record``.

    A ``record`` that is missing (``None``) or not of the form :func:`store_record` writes is
    damage too: verification cannot be switched off by editing the marker.
    """
    problem = _record_problem(record)
    if problem:
        raise error(
            f"{label} cannot be verified: the integrity record in its completion marker "
            f"({_IGNORED[0]}) {problem}, expected an object with 'metadata' and 'arrays' as daskpca "
            "writes it. The marker was edited, or the store was written by a daskpca older than "
            "its records; refusing to read it unverified. Restore a verified version (`daskpca "
            "history` / `daskpca rollback`) or write it again (re-fit and save); to read it anyway, "
            "at your own risk, load it with verify=False (the CLI's --no-verify)."
        )
    fs, root, names = _objects_of(location)
    problems = []
    present_metadata = {n for n in names if n.endswith("zarr.json")}
    for name in sorted(set(record.get("metadata", {})) - present_metadata):
        problems.append(f"metadata file {name!r} is missing")
    groups: dict[str, list] = {}
    for name in names:
        if name not in present_metadata:
            groups.setdefault(_group(name), []).append(name)
    hashes = _hashes(fs, root, names) if full else {}
    for name in sorted(present_metadata & set(record.get("metadata", {}))):
        if full and hashes[name] != record["metadata"][name]:
            problems.append(f"metadata {name!r} (shape, dtype or attributes) was changed after it was written")
    for array, expected in sorted(record.get("arrays", {}).items()):
        members = groups.get(array, [])
        shown = repr(array) if array else "the array"
        if len(members) < expected["objects"]:
            problems.append(f"{shown}: {expected['objects'] - len(members)} of {expected['objects']} chunk file(s) missing")
        elif len(members) > expected["objects"] or _digest(members) != expected["names"]:
            problems.append(f"{shown}: its chunk files are not the ones written")
        elif full and _digest(hashes[n] for n in members) != expected["bytes"]:
            problems.append(f"{shown}: chunk contents differ from what was written (checksum mismatch)")
    for array in sorted(set(groups) - set(record.get("arrays", {}))):
        problems.append(f"{array!r}: chunk files that were never written")
    if problems:
        raise error(
            f"{label} is damaged: {'; '.join(problems[:4])}{' …' if len(problems) > 4 else ''}. It was "
            "changed after daskpca wrote it (a partial copy, deleted or edited files); refusing to read "
            "it. Restore it from a complete copy (or `daskpca history` / `daskpca rollback`), or write it again."
        )
