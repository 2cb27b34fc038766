"""Raw chunk files of a temporary copy: written once from a block, checked on every read.

The disk pass cache (:mod:`._cache`) and the Gram road's column-strip copy
(:class:`._geometry.ColumnStrips`) keep blocks in daskpca's own scratch folders as the bytes zarr
stores for an uncompressed little-endian chunk. Each write returns what it wrote — the byte count
and a sampled CRC-32 (:func:`fingerprint`) — and each later read checks both: a file that a
temporary-file cleaner or another process removed, truncated or rewrote raises
:class:`~daskpca.exceptions.ScratchDamagedError` naming it, never a fill value or a silent wrong
answer.
"""

from __future__ import annotations

import os
import zlib

import numpy as np

from ._device import to_host
from ..exceptions import ScratchDamagedError


#: What a chunk file's fingerprint reads: the first bytes of every stride of the file, and its
#: last bytes. A full CRC-32 of a 128 MiB block took 180 ms here, against 40 ms for a plain sum
#: over it — the later pass's own read of the block paid again several times over; the sample
#: (512 bytes in every 64 KiB) took 3 ms. With the size, checked exactly, it tells a removed,
#: truncated, zero-filled or rewritten file from ours; a change confined to unsampled bytes of a
#: file of more than one stride (a single page rewritten in place) can pass.
FINGERPRINT_SAMPLE = 512
FINGERPRINT_STRIDE = 64 * 1024


def fingerprint(data) -> int:
    """CRC-32 of the sampled bytes of ``data`` (any C-contiguous buffer; all of it when it is no
    longer than one stride). See :data:`FINGERPRINT_STRIDE`."""
    view = memoryview(data).cast("B")
    size = len(view)
    if size <= FINGERPRINT_STRIDE:
        return zlib.crc32(view)
    crc = 0
    for start in range(0, size, FINGERPRINT_STRIDE):
        crc = zlib.crc32(view[start:start + FINGERPRINT_SAMPLE], crc)
    return zlib.crc32(view[size - FINGERPRINT_SAMPLE:], crc)


def _write_block(block, path: str, dtype, chunk_shape: tuple) -> tuple[int, int]:
    """A disk cache's write task: ``block`` as the bytes of its chunk file ``path`` — what zarr
    stores for an uncompressed little-endian chunk (an edge block padded with the fill value 0),
    written once from the block, where zarr's own write encodes a copy first (on 2 workers × 1 GiB
    that copy of every 134 MB block is memory the pass does not have). A device block is copied
    to the host first.

    Every block is written, a block of zeros too, so every chunk file of the copy exists. Returns
    ``(bytes, fingerprint)``: what the writer wrote, which every read checks (:func:`_read_block`).
    """
    block = np.asarray(to_host(block), dtype=dtype)
    if block.shape != tuple(chunk_shape):
        padded = np.zeros(chunk_shape, dtype=dtype)
        padded[tuple(slice(0, s) for s in block.shape)] = block
        block = padded
    data = memoryview(np.ascontiguousarray(block)).cast("B")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as file:
        file.write(data)
    return data.nbytes, fingerprint(data)


def _damaged(path: str, problem: str, written: tuple[int, int]) -> ScratchDamagedError:
    from ..store.scratch import SCRATCH_ENV

    nbytes, crc = written
    return ScratchDamagedError(
        f"the temporary copy's chunk file {path!r} {problem}, where {nbytes} bytes were expected (as this job "
        f"wrote them on its first read; sampled CRC-32 {crc:08x}). Something removed or changed it while the job "
        f"ran — most likely a temporary-file cleaner (systemd-tmpfiles, tmpreaper, a cron job) or another process "
        f"using the same folder. Set ${SCRATCH_ENV} to a folder of this job's own that nothing cleans, and run "
        f"it again (or run with --cache memory / cache='memory' or off).")


def _read_block(path: str, dtype, chunk_shape: tuple, shape: tuple, written: tuple[int, int], device=None):
    """A later pass's read of one block from a temporary copy: its chunk file mapped into memory,
    checked against what its writer recorded, and moved to ``device`` (the kept blocks' backend,
    one copy up) where that is not the host.

    The copy is ours — uncompressed zarr v3, one chunk per block, raw little-endian bytes in C
    order (checked when it is made, :meth:`PassCache._disk_writes`) — so the chunk file *is* the
    block: mapping it costs no copy and no fresh memory, where zarr's read makes a bytes object and
    then the array (2.4 GB from the page cache: 0.7 s mapped and converted to float64 by the
    pass, against 4–6 s through zarr-python or zarrs, measured here).

    ``written`` is ``(bytes, fingerprint)`` as :func:`_write_block` returned it. Every block was
    written, so a missing file is not the fill value: a file missing, of another size or with
    other sampled bytes raises :class:`~daskpca.exceptions.ScratchDamagedError` naming it, never
    a silent wrong answer.
    """
    nbytes, crc = written
    try:
        with open(path, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            if size != nbytes:
                raise _damaged(path, f"holds {size} bytes", written)
            if not nbytes:  # an empty block: nothing to map
                return np.empty(shape, dtype=dtype)
            chunk = np.memmap(file, dtype=dtype, mode="r", shape=chunk_shape)
    except FileNotFoundError:
        raise _damaged(path, "is missing", written) from None
    if fingerprint(chunk) != crc:
        raise _damaged(path, "holds other bytes than were written", written)
    block = chunk[tuple(slice(0, s) for s in shape)]
    return block if device is None else device.asarray(block)
