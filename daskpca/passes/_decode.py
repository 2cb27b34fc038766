"""How a pass's task decodes stored chunks: through zarrs (Rust) when it can, else zarr-python.

A pass over an archive store is mostly decode: on the one-step-per-chunk reanalysis year
(8760 × 65 160 float32, zstd, 8760 chunks) zarr-python's codec pipeline takes 9.7 s for the
regrouped read on 2 cores, most of it per-chunk Python and event-loop work, not zstd itself;
the same selections through the ``zarrs`` codec pipeline (the Rust ``zarrs`` crate, a drop-in
``codec_pipeline.path`` for zarr-python) take 2.7 s, with the same bytes out. Every solver's
first pass (and every pass without the pass cache) is that read.

:func:`fast_source` wraps the stored array-like a regrouped read takes its selections from
(:func:`daskpca.passes._geometry.plain_source`: a ``zarr.Array``, or xarray's lazy backend
chain over one). Its selections are then read from a twin of the bottom ``zarr.Array`` — the
same metadata and store, opened with the zarrs pipeline — through the same xarray chain (CF
decoding, lazy indexing), so the values are those of the source to the bit. Used only where it
applies:

- ``zarrs`` is installed (a dependency; nothing changes without it) and dask's config key
  ``daskpca.zarrs`` is not False;
- the bottom array is zarr v3's ``zarr.Array`` on a store zarrs reads (a local folder);
- the twin's first read succeeds: a codec, data type or store zarrs does not support raises, and
  the source is then read as before by that process (said once in the log).

The user's own arrays and zarr's global configuration are left as they were: the twin is made
per process on its first read (it is not pickled; workers make their own).
"""

from __future__ import annotations

import copy
import logging
import os
import threading

import dask

logger = logging.getLogger("daskpca")

#: dask config key: False reads through zarr-python's own codec pipeline even with zarrs installed.
CONFIG_KEY = "daskpca.zarrs"
#: zarr-python's ``codec_pipeline.path`` for zarrs.
PIPELINE = "zarrs.ZarrsCodecPipeline"
#: Stores zarrs reads itself (by class name): others would raise on the first read.
STORES = ("LocalStore",)


def _links(source):
    """The chain from ``source`` down to the ``zarr.Array`` it reads: ``[(holder, attribute), …]``
    ending at the array, or None when it is not such a chain (one inner array per level)."""
    chain, node = [], source
    for _ in range(16):
        if type(node).__module__.startswith("zarr.") and type(node).__name__ == "Array":
            return chain
        for attribute in ("_array", "array"):
            inner = getattr(node, attribute, None) if _has(node, attribute) else None
            if inner is not None:
                chain.append((node, attribute))
                node = inner
                break
        else:
            return None
    return None


def _has(node, attribute: str) -> bool:
    """Whether ``node`` holds ``attribute`` itself (an instance attribute or a slot), not through a
    property or ``__getattr__`` (xarray's wrappers forward unknown names to the wrapped array)."""
    try:
        return attribute in vars(node)
    except TypeError:  # __slots__ (xarray's adapters)
        return any(attribute in getattr(cls, "__slots__", ()) for cls in type(node).__mro__)


def _bottom(source):
    """The ``zarr.Array`` at the bottom of ``source``'s chain (``source`` itself when it is one), or None."""
    links = _links(source)
    if links is None:
        return None
    return source if not links else getattr(*links[-1])


def applies(source) -> bool:
    """Whether :func:`fast_source` would read ``source`` through zarrs (reads no data)."""
    if dask.config.get(CONFIG_KEY, True) is False:
        return False
    try:
        import zarrs  # noqa: F401
    except ImportError:
        return False
    array = _bottom(source)
    if array is None or getattr(array.metadata, "zarr_format", None) != 3:
        return False
    return type(array.store).__name__ in STORES


def fast_source(source):
    """``source`` read through zarrs where :func:`applies`, else ``source`` itself."""
    return ZarrsRead(source) if applies(source) else source


def _twin_chain(source):
    """A copy of ``source``'s chain whose bottom ``zarr.Array`` reads through zarrs."""
    import zarr
    from zarr.core.array import AsyncArray

    links, array = _links(source), _bottom(source)
    with zarr.config.set({"codec_pipeline.path": PIPELINE}):
        inner = array._async_array
        twin = zarr.Array(AsyncArray(inner.metadata, inner.store_path, inner.config))
    if not links:
        return twin
    copies = [copy.copy(holder) for holder, _ in links]
    for (_, attribute), clone, below in zip(links, copies, copies[1:] + [twin]):
        object.__setattr__(clone, attribute, below)  # past any __setattr__ guard: the copy is ours
    return copies[0]


class ZarrsRead:
    """An array-like over ``source`` whose selections are decoded by zarrs (see the module notes).

    Pickles as ``source`` alone: each process makes its twin on its first read, and falls back to
    ``source`` for good if that read raises.
    """

    def __init__(self, source):
        self.source = source
        self.shape, self.dtype, self.ndim = source.shape, source.dtype, len(source.shape)
        self._twin = None
        self._failed = False
        self._lock = threading.Lock()

    def __getstate__(self):
        return {"source": self.source}

    def __setstate__(self, state):
        self.__init__(state["source"])

    def __getitem__(self, key):
        twin = self._reader()
        if twin is None:
            return self.source[key]
        try:
            return twin[key]
        except Exception as error:  # unsupported by zarrs: read as before, from now on
            self._failed = True
            logger.info("daskpca: zarrs cannot read this store (%s); reading through zarr-python", error)
            return self.source[key]

    def _reader(self):
        if self._failed:
            return None
        with self._lock:
            if self._twin is None:
                try:
                    self._twin = _twin_chain(self.source)
                except Exception as error:
                    self._failed = True
                    logger.info("daskpca: zarrs cannot open this store (%s); reading through zarr-python", error)
                    return None
        return self._twin

    def __repr__(self) -> str:
        return f"ZarrsRead({self.source!r})"


def zarr_arrays(matrix) -> list:
    r"""The ``zarr.Array``\ s that the graph of ``matrix`` (a dask array) reads, each once: found in
    the graph's data, also under xarray's lazy backend wrappers or :class:`ZarrsRead`. Reads no
    data."""
    from dask._task_spec import DataNode, GraphNode

    found = []
    for node in dict(matrix.__dask_graph__()).values():
        if isinstance(node, GraphNode) and not isinstance(node, DataNode):
            continue
        value = node.value if isinstance(node, DataNode) else node
        if type(value).__name__ == "ZarrsRead":
            value = value.source
        array = _bottom(value)
        if array is not None and hasattr(array, "store") and all(array is not other for other in found):
            found.append(array)
    return found


def stored_paths(matrices) -> dict:
    """``{label: path}`` of the local zarr stores that ``matrices`` read (:func:`zarr_arrays`) —
    the job's inputs as far as the library knows them — for
    :func:`daskpca.store.scratch.check_apart`. Labelled ``X`` (and ``Y`` for a second matrix).
    Other sources (NumPy, object stores, data computed by dask) add nothing. Reads no data.
    """
    found = {}
    for index, matrix in enumerate(matrices):
        label = "XY"[index] if index < 2 else f"#{index + 1}"
        for array in zarr_arrays(matrix):
            root = local_root(array.store)
            if root is None:
                continue
            path = os.path.join(root, array.path) if array.path else root
            if path not in found.values():
                found[label if label not in found else f"{label} (store {len(found) + 1})"] = path
    return found


def local_root(store) -> str | None:
    """The local folder of a zarr store: a ``LocalStore``'s root, or the path of an
    ``FsspecStore`` on the local file system (what ``da.from_zarr(path)`` opens); else None."""
    root = getattr(store, "root", None)
    if root is not None:
        return os.fspath(root)
    protocol = getattr(getattr(store, "fs", None), "protocol", None)
    protocols = {protocol} if isinstance(protocol, str) else set(protocol or ())
    path = getattr(store, "path", None)
    return path if protocols & {"file", "local"} and isinstance(path, str) else None
