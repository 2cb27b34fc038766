"""A lazy reader's view of one version of a daskpca store, from its first chunk to its last.

A lazily opened store (:func:`daskpca.io.open_xarray`) is read long after it was opened, while
other jobs may publish new versions (:mod:`daskpca.store.publish`). :class:`OneVersionStore` is
the zarr store such a reader opens; each read comes from the version that was current at open,
or raises :class:`~daskpca.exceptions.StoreReplacedError` naming the change — never a chunk of
another version, never a missing chunk silently read as the fill value:

- **local, in this process**: the version's folder is pinned by a directory descriptor
  (``/proc/self/fd/N``, as :func:`daskpca.io.read_dataset` does) and read through it even after
  a publish moved it away. Only a deleted version (a replaced data store, or a model pushed out of
  its history) cannot be read: publishers delete a version's completion marker first, so a chunk
  found missing is checked against the marker, and a missing marker is the error;
- **local, in another process** (a graph sent to ``distributed`` workers; descriptors do not
  travel): the store's path is read, and after every read the completion marker there must still
  be the file that was there at open (device and inode), else the read may be of another
  version: the error;
- **object stores**: the pointer-resolved version prefix (``TARGET/versions/V``), which no publish
  changes and which stays readable for :data:`~daskpca.store.publish.RETIRE_GRACE_SECONDS` after
  it is replaced; a missing chunk is checked against the version's marker as above.

Memory and reads: one ``stat`` (local) or ``HEAD`` (object store) per chunk found missing, and per
read in the other-process case; nothing else.
"""

from __future__ import annotations

import os
import weakref

from zarr.storage import FsspecStore, LocalStore, WrapperStore

from . import objects
from .paths import is_url
from .publish import COMPLETE_MARKER, resolve
from ..exceptions import StoreReplacedError


def open_version(path) -> "OneVersionStore":
    """The :class:`OneVersionStore` of the current version of the daskpca store ``path``; its
    ``location`` names that version (to check it against its record) and its ``version`` is set
    by the caller from the marker read there."""
    location = resolve(path)
    if is_url(location):
        inner = FsspecStore.from_url(location, storage_options=objects.storage_options(location), read_only=True)
        objects.bounded(inner.fs)
        return OneVersionStore(inner, label=os.fspath(path), location=location)
    fd = os.open(location, os.O_RDONLY | os.O_DIRECTORY)
    pinned = f"/proc/self/fd/{fd}"
    if not os.path.isdir(pinned):  # no /proc: read the path, checking the marker's identity
        os.close(fd)
        return OneVersionStore(LocalStore(location, read_only=True), label=os.fspath(path), location=location,
                               marker_id=_marker_id(location))
    store = OneVersionStore(LocalStore(pinned, read_only=True), label=os.fspath(path), location=pinned,
                            reopen=(location, _marker_id(pinned)))
    weakref.finalize(store, os.close, fd)  # the descriptor lives as long as any lazy array reads through it
    return store


def _marker_id(folder: str) -> tuple[int, int] | None:
    try:
        stat = os.stat(os.path.join(folder, COMPLETE_MARKER))
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


class OneVersionStore(WrapperStore):
    """A read-only zarr store that reads one version of a daskpca store or raises.

    Parameters
    ----------
    store : zarr Store
        The version's location (a pinned folder, a path, or an object-store version prefix).
    label : str
        The path the user opened, for errors.
    location : str
        Where the version is read (a pinned folder, a path or a URL).
    marker_id : (int, int), optional
        ``(st_dev, st_ino)`` of the marker at open: given when ``store`` reads a path that a
        publish may point at another version; every read is then checked against it.
    reopen : (str, marker_id), optional
        How another process reads this version: the local path and the marker's identity.
    """

    def __init__(self, store, *, label: str, location: str, marker_id=None, reopen=None, version=None):
        super().__init__(store)
        self.label, self.location, self.marker_id, self.reopen = label, location, marker_id, reopen
        self.version = version

    def _with_store(self, store):
        return type(self)(store, label=self.label, location=self.location, marker_id=self.marker_id,
                          reopen=self.reopen, version=self.version)

    def __reduce__(self):
        if self.reopen is None:
            return (_rebuild, (self._store, self.label, self.location, self.version, self.marker_id))
        location, marker_id = self.reopen  # a descriptor does not travel: read the path, checked
        return (_rebuild, (LocalStore(location, read_only=True), self.label, location, self.version, marker_id))

    async def _check(self, key: str) -> None:
        if self.marker_id is not None:
            root = str(self._store.root)
            intact = _marker_id(root) == self.marker_id
        else:
            intact = await self._store.exists(COMPLETE_MARKER)
        if not intact:
            raise StoreReplacedError(
                f"{self.label!r} was replaced or deleted while it was read (version {self.version} opened; "
                f"reading {key!r}): stopped rather than mix versions. Open it again to read the current version.")

    async def get(self, key, prototype, byte_range=None):
        value = await self._store.get(key, prototype, byte_range)
        if value is None or self.marker_id is not None:
            await self._check(key)
        return value

    async def get_partial_values(self, prototype, key_ranges):
        key_ranges = list(key_ranges)
        values = await self._store.get_partial_values(prototype, key_ranges)
        if any(v is None for v in values) or self.marker_id is not None:
            await self._check(key_ranges[0][0] if key_ranges else "")
        return values


def _rebuild(store, label, location, version, marker_id):
    return OneVersionStore(store, label=label, location=location, version=version, marker_id=marker_id)
