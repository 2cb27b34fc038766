"""Small objects on object stores written with conditions: create-if-absent, replace-if-unchanged.

The claims (:mod:`daskpca.store.claims`) and the version pointer (:mod:`daskpca.store.publish`) need two
primitives that plain fsspec does not offer:

- :func:`create` — write an object only if none exists (S3 ``PutObject`` with
  ``If-None-Match: *``): of several writers racing for one key exactly one wins;
- :func:`replace` — write an object only if it is still the version read earlier (``If-Match:
  <ETag>``): a pointer switch never overwrites a switch made by somebody else in between.

S3 (s3fs) gets the real conditional requests, so they hold across processes and machines. Any
other fsspec filesystem (``memory://``, used in tests) gets the same semantics from a lock in
this process only; add its native condition (GCS ``ifGenerationMatch``, Azure ``If-Match``)
here before running concurrent writers against it.
"""

from __future__ import annotations

import hashlib
import threading

#: Serialises the emulated conditional writes on filesystems without native conditions.
_EMULATION_LOCK = threading.Lock()


def filesystem(url: str):
    """``(fs, path)`` for an fsspec URL, the path without a trailing slash."""
    import fsspec

    fs, path = fsspec.core.url_to_fs(url)
    return fs, path.rstrip("/")


def _is_s3(fs) -> bool:
    return "s3" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,))


def _bucket_key(path: str) -> tuple[str, str]:
    bucket, _, key = path.partition("/")
    return bucket, key


def read(fs, path: str) -> tuple[bytes | None, str | None]:
    """``(content, tag)`` of an object, ``(None, None)`` when there is none.

    The tag is read *before* the content: a :func:`replace` conditioned on it fails if the object
    changed at any time after the tag was read, so content newer than the tag is never written
    over by mistake.
    """
    if _is_s3(fs):
        bucket, key = _bucket_key(path)
        try:
            head = fs.call_s3("head_object", Bucket=bucket, Key=key)
        except FileNotFoundError:
            return None, None
        try:
            return fs.cat_file(path), head["ETag"]
        except FileNotFoundError:
            return None, None
    fs.invalidate_cache(path)
    if not fs.exists(path):
        return None, None
    content = fs.cat_file(path)
    return content, hashlib.sha256(content).hexdigest()


def create(fs, path: str, data: bytes) -> bool:
    """Write ``data`` to ``path`` only if no object is there; True when this call created it."""
    if _is_s3(fs):
        bucket, key = _bucket_key(path)
        try:
            fs.call_s3("put_object", Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
        except FileExistsError:  # s3fs's translation of 412 Precondition Failed
            return False
        fs.invalidate_cache(path)
        return True
    with _EMULATION_LOCK:
        fs.invalidate_cache(path)
        if fs.exists(path):
            return False
        fs.pipe_file(path, data)
        return True


def replace(fs, path: str, data: bytes, tag: str | None) -> bool:
    """Write ``data`` to ``path`` only if the object is still the one tagged ``tag`` (from
    :func:`read`; ``None``: only if there is still no object). True when written."""
    if tag is None:
        return create(fs, path, data)
    if _is_s3(fs):
        bucket, key = _bucket_key(path)
        try:
            fs.call_s3("put_object", Bucket=bucket, Key=key, Body=data, IfMatch=tag)
        except (FileExistsError, FileNotFoundError):  # 412, or the object is gone
            return False
        except OSError as exc:  # s3fs maps a failed If-Match to EINVAL
            if "pre-condition" in str(exc).lower() or "precondition" in str(exc).lower():
                return False
            raise
        fs.invalidate_cache(path)
        return True
    with _EMULATION_LOCK:
        current, current_tag = read(fs, path)
        if current_tag != tag:
            return False
        fs.pipe_file(path, data)
        return True


def delete(fs, path: str, *, recursive: bool = False) -> None:
    """Remove an object (or a prefix); nothing there is fine."""
    try:
        fs.rm(path, recursive=recursive)
    except FileNotFoundError:
        pass
    fs.invalidate_cache(path)
