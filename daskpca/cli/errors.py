"""How a failed command ends: exit code 2 for the user's input or usage, 1 for a runtime or
internal failure, and the one line printed on stderr (see :mod:`daskpca.cli`)."""

from __future__ import annotations

import os

from .options import UsageError

#: Where a failure that means "this chunk of the input cannot be decoded" is raised: zarr's codec
#: pipeline and numcodecs (a truncated or corrupted chunk file, or a codec this environment lacks).
_DECODING_MODULES = (os.sep + os.path.join("zarr", "codecs") + os.sep, os.sep + "numcodecs" + os.sep)


def _user_error_types() -> tuple:
    from ..exceptions import (DamagedStoreError, DataRangeError, IncompleteStoreError, InvalidParameterError,
                             NewerFormatError, NonFiniteInputError, NotFittedError, OutputClaimedError,
                             OutputExistsError)

    return (UsageError, OutputExistsError, OutputClaimedError, IncompleteStoreError, NewerFormatError,
            DamagedStoreError, InvalidParameterError, NotFittedError, NonFiniteInputError, DataRangeError,
            FileNotFoundError, PermissionError, NotADirectoryError, IsADirectoryError)


def _innermost_file(exc: BaseException) -> str | None:
    tb = exc.__traceback__
    if tb is None:
        return None
    while tb.tb_next is not None:
        tb = tb.tb_next
    return os.path.abspath(tb.tb_frame.f_code.co_filename)


def _raised_by_daskpca(exc: BaseException) -> bool:
    """Whether the innermost frame of ``exc``'s traceback is daskpca's own code: a deliberate
    message about the input (a ValueError from numpy or zarr deep inside is not)."""
    where = _innermost_file(exc)
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # daskpca/, not daskpca/cli/
    return where is not None and where.startswith(package + os.sep)


def undecodable_chunk(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it wraps) was raised while decoding a stored chunk: damaged input,
    not a daskpca failure. Tracebacks of tasks run on ``distributed`` workers keep their frames."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        tb = exc.__traceback__
        while tb is not None:
            if any(part in tb.tb_frame.f_code.co_filename for part in _DECODING_MODULES):
                return True
            tb = tb.tb_next
        exc = exc.__cause__ or exc.__context__
    return False


def exit_code(exc: BaseException) -> int:
    """2 for the user's input or usage, 1 for a runtime or internal failure."""
    if isinstance(exc, ConnectionError):
        return 1
    if isinstance(exc, _user_error_types()) or undecodable_chunk(exc):
        return 2
    if isinstance(exc, (ValueError, TypeError)) and _raised_by_daskpca(exc):
        return 2
    return 1


def failure_line(exc: BaseException, command: str) -> tuple[int, str]:
    """``(exit code, the one line for stderr)`` of a failed ``daskpca COMMAND``."""
    code = exit_code(exc)
    message = str(exc.args[0] if isinstance(exc, KeyError) and exc.args else exc).strip() or type(exc).__name__
    first = message.splitlines()[0]
    if undecodable_chunk(exc):
        first = (f"a chunk of the input could not be decoded ({type(exc).__name__}: {first}): the store is damaged "
                 "(a truncated or corrupted chunk file) or was written with a codec this environment lacks. "
                 "Re-copy or re-write the source; nothing was published.")
    elif code == 1 and not isinstance(exc, ConnectionError):
        first = (f"`daskpca {command}` failed: {type(exc).__name__}: {first} (a runtime or internal "
                 "failure, not a usage error; rerun with --verbose for the traceback)")
    return code, first
