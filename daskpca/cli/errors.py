"""How a failed command ends: exit code 2 for the user's input or usage, 1 for a runtime or
internal failure, and the one line printed on stderr (see :mod:`daskpca.cli`)."""

from __future__ import annotations

import os

from .options import UsageError

#: Where a failure that means "this chunk of the input cannot be decoded" is raised: zarr's codec
#: pipeline and numcodecs (a truncated or corrupted chunk file, or a codec this environment lacks).
_DECODING_MODULES = (os.sep + os.path.join("zarr", "codecs") + os.sep, os.sep + "numcodecs" + os.sep)


def _user_error_types() -> tuple:
    """Exceptions that mean the user's input or usage is wrong: the CLI's own, daskpca's checks
    (:class:`~daskpca.exceptions.InputError` and its subclasses), outputs that exist or are
    claimed, incomplete stores, and paths the OS refuses. Nothing else is: a ``ValueError``
    from NumPy, zarr or dask is a runtime or internal failure, whatever frame raised it."""
    from ..exceptions import IncompleteStoreError, InputError, OutputClaimedError, OutputExistsError

    return (UsageError, InputError, OutputExistsError, OutputClaimedError, IncompleteStoreError,
            FileNotFoundError, PermissionError, NotADirectoryError, IsADirectoryError)


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
