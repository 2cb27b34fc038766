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
import os
import threading
from contextlib import contextmanager

#: Serialises the emulated conditional writes on filesystems without native conditions.
_EMULATION_LOCK = threading.Lock()
#: Seconds an object-store request may take to connect, and again to answer
#: (``$DASKPCA_OBJECT_TIMEOUT``): a server that stops answering fails the job instead of hanging it.
TIMEOUT = float(os.environ.get("DASKPCA_OBJECT_TIMEOUT", 20))
#: Attempts per request (the first and the retries), each bounded by :data:`TIMEOUT`.
ATTEMPTS = 3


def storage_options(url: str) -> dict:
    """The fsspec options that bound every request to ``url``'s store by :data:`TIMEOUT`
    (S3: botocore's connect and read timeouts; s3fs retries, :func:`bounded`, make the attempts)."""
    if url.split("://", 1)[0] in ("s3", "s3a"):
        # total_max_attempts counts the first try (botocore's max_attempts counts only the
        # retries and would double every attempt s3fs makes)
        return {"config_kwargs": {"connect_timeout": TIMEOUT, "read_timeout": TIMEOUT,
                                  "retries": {"total_max_attempts": 1}}}
    return {}


def bounded(fs):
    """``fs`` with :data:`ATTEMPTS` attempts per request (s3fs keeps the count on the instance)
    and no request that can wait without a timeout.

    botocore sends uploads with ``Expect: 100-continue`` and aiohttp waits for the ``100
    Continue`` with no timeout at all, so a put to a server that stopped answering hung for
    good (the read timeout starts only after the body is sent). Bodies are sent without asking
    first: an upload the server refuses costs its bytes once; a hang costs the job.
    """
    if _is_s3(fs):
        fs.retries = ATTEMPTS
        if not getattr(fs, "asynchronous", False):  # zarr's async instances only read: no bodies
            from botocore.handlers import add_expect_header

            fs.connect()  # the client is made lazily; this builds it (no request is sent)
            fs.s3.meta.events.unregister("before-call.s3", add_expect_header)
    return fs


def filesystem(url: str):
    """``(fs, path)`` for an fsspec URL, the path without a trailing slash; every request made
    through ``fs`` has a timeout and bounded retries (:func:`storage_options`)."""
    import fsspec

    fs, path = fsspec.core.url_to_fs(url, **storage_options(url))
    return bounded(fs), path.rstrip("/")


@contextmanager
def answering(url: str):
    """Turn a request that timed out or could not connect (after its retries) into a
    ``TimeoutError`` naming ``url``."""
    try:
        yield
    except Exception as exc:
        if not _unanswered(exc):
            raise
        raise TimeoutError(
            f"the object store did not answer for {url!r} ({ATTEMPTS} attempt(s) of {TIMEOUT:g} s each; "
            f"{type(exc).__name__}: {exc}). Check that the endpoint is up and reachable, or raise "
            "$DASKPCA_OBJECT_TIMEOUT for a slow one.") from exc


def _unanswered(exc: BaseException) -> bool:
    if isinstance(exc, (TimeoutError, ConnectionError)):
        return True
    try:
        from botocore.exceptions import ConnectionError as BotoConnectionError, HTTPClientError
    except ImportError:
        return False
    return isinstance(exc, (HTTPClientError, BotoConnectionError))


def _url(fs, path: str) -> str:
    return fs.unstrip_protocol(path)


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
    with answering(_url(fs, path)):
        return _read(fs, path)


def _read(fs, path: str) -> tuple[bytes | None, str | None]:
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
    with answering(_url(fs, path)):
        return _create(fs, path, data)


def _create(fs, path: str, data: bytes) -> bool:
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
    with answering(_url(fs, path)):
        return _replace(fs, path, data, tag)


def _replace(fs, path: str, data: bytes, tag: str | None) -> bool:
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
    with answering(_url(fs, path)):
        return _delete(fs, path, recursive=recursive)


def _delete(fs, path: str, *, recursive: bool = False) -> None:
    try:
        fs.rm(path, recursive=recursive)
    except FileNotFoundError:
        pass
    fs.invalidate_cache(path)
