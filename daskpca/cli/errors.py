"""How a failed command ends — exit code 2 for the user's input or usage, 1 for a runtime or
internal failure, the one line printed on stderr and, with ``--json``, the error object on stdout
— and how the library's messages and warnings reach the shell (see :mod:`daskpca.cli`).

The library speaks Python (``PCA(solver='ppca')``, ``transform(X, nan='propagate')``,
``max_iter=200``); the command line speaks flags. :func:`as_cli` is the one translation, from a
table of parameter → flag (the ``fit`` options' own table, :data:`daskpca.cli.options.FIT_PARAMETERS`,
plus the other commands' flags): every error line and every warning the CLI prints goes through
it. A flag the running command does not take is named with the command that does
(``update``: "`daskpca fit --solver ppca`").
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import warnings
from collections import defaultdict
from contextlib import contextmanager

from .options import FIT_PARAMETERS, UsageError, build_parser

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
    elif not isinstance(exc, UsageError):  # the library's message: in the command line's words
        first = as_cli(first, command)
    return code, first


def error_json(exc: BaseException, code: int, message: str) -> str:
    """The ``--json`` text of a failed command: ``{"error": {"type", "message", "exit_code"}}``
    (``message``: the line printed on stderr), so a script reading stdout always gets JSON."""
    return json.dumps({"error": {"type": type(exc).__name__, "message": message, "exit_code": code}}, indent=2)


# ----------------------------------------------------------------------------- the CLI's words

#: Parameters that are no ``fit`` option but a flag of some command: ``parameter: flag``.
_OTHER_FLAGS = {"nan": "--nan", "var": "--var", "var2": "--var2", "n_components": "-k", "sample_dims": "--sample-dims",
                "overwrite": "--overwrite", "n_replicates": "--bootstrap", "block_length": "--block-length",
                "n_maps": "--n-maps", "verify": "--no-verify"}
#: Parameter names translated where they stand alone in a sentence ("Increase max_iter"): only
#: those no English word could be (``solver``, ``cache``, ``weights`` stay as they are).
_BARE = ("max_iter", "max_passes", "random_state", "n_components", "sample_dims", "lag_step", "block_length", "n_replicates",
         "tol")
#: A parameter's value that means something else as a flag: ``(parameter, value): the flag``.
_VALUE_FLAGS = {("cache", "False"): "--cache off", ("n_components", "None"): "-k all", ("verify", "False"): "--no-verify",
                ("verify", "True"): "without --no-verify"}

_QUOTED = re.compile(r"'([^']*)'|\"([^\"]*)\"")
_VALUE = r"(?:'[^']*'(?:(?:,| or|, or) '[^']*')*|\"[^\"]*\"|[^\s,;:()]+)"


def _flags() -> dict:
    """``{parameter: flag}``: the ``fit`` options' table, then the other commands' flags."""
    return {**{parameter: option for option, _, parameter in FIT_PARAMETERS}, **_OTHER_FLAGS}


def _takes(command: str) -> dict:
    """``{flag: the command that takes it}``: ``command`` itself where it does, else ``fit`` or
    the first command that does."""
    parsers = build_parser(defaultdict(lambda: None)).command_parsers  # the flags alone: no command is run
    order = [command, "fit", *parsers]
    owners = {}
    for name in order:
        if name in parsers:
            for action in parsers[name]._actions:
                for flag in action.option_strings:
                    owners.setdefault(flag, name)
    return owners


def _as_flag(parameter: str, value: str | None, flags: dict) -> str:
    """``--flag value`` for one parameter (quotes dropped, ``'a' or 'b'`` → ``a or b``)."""
    flag = flags[parameter]
    if value is None:
        return flag
    value = value.rstrip(".") if not value.endswith("...") else value
    if (parameter, value) in _VALUE_FLAGS:
        return _VALUE_FLAGS[(parameter, value)]
    if value == "True":
        return flag
    if value == "False":
        return f"without {flag}"
    words = re.split(r"((?:,| or|, or) )", value)  # 'covariance' or 'gram': each value as the shell takes it
    return f"{flag} " + "".join(part if i % 2 else _shell_word(part) for i, part in enumerate(words))


def _shell_word(value: str) -> str:
    """A value as typed after a flag: quotes dropped where the shell needs none."""
    match = _QUOTED.fullmatch(value)
    return shlex.quote(match.group(1) if match.group(1) is not None else match.group(2)) if match else value


def as_cli(message: str, command: str) -> str:
    """``message`` (the library's words) in the command line's: parameters as the flags that set
    them, calls as the flags they take (``PCA(solver='ppca')`` → ``--solver ppca``;
    ``call transform(X, nan='propagate')`` → ``pass --nan propagate``), notes for the command
    line dropped (``(--solver on the command line)``, ``(overwrite=True in Python)``). A flag
    ``command`` does not take is named with the command that does: ``daskpca fit --solver ppca``.
    Text with no known parameter is returned unchanged."""
    flags = _flags()
    owners = None

    def spoken(text: str, used: list) -> str:
        nonlocal owners
        if owners is None:
            owners = _takes(command)
        owner = next((owners.get(flags[p]) for p in used if owners.get(flags[p]) != command), None)
        return f"`daskpca {owner} {text}`" if owner else text

    # The library's own notes on the other side: the line says the flag itself.
    text = re.sub(r"\s*\([^()]*\bin Python\)", "", message)
    text = re.sub(r"\s*\(--[\w-]+ on the command line\)|;\s*--[\w-]+ on the command line|\s*\(the CLI's --[\w-]+\)",
                  "", text)

    def call(match):
        arguments = [a.strip() for a in match.group(2).split(",") if a.strip()]
        keywords = [a.split("=", 1) for a in arguments if "=" in a]
        if not keywords or any(k not in flags for k, _ in keywords):
            return match.group(0)
        used = [k for k, _ in keywords]
        said = spoken(" ".join(_as_flag(k, v, flags) for k, v in keywords), used)
        return ("pass " if match.group(1) else "") + said

    text = re.sub(r"(call )?\b[A-Za-z_][\w.]*\(((?:[^()'\"]|'[^']*'|\"[^\"]*\")*)\)", call, text)

    def knob(match):
        parameter, value = match.group(1), match.group(2)  # no value: "pass tol= (e.g. 1e-4)"
        if parameter not in flags:
            return match.group(0)
        trailing = "." if value and value.endswith(".") and not value.endswith("...") else ""
        return spoken(_as_flag(parameter, value, flags), [parameter]) + trailing

    # A name stands alone after a space or bracket, never inside a quoted path ('/data/tol/x.zarr').
    text = re.sub(rf"(?<![^\s(\[])(\w+)=({_VALUE})?", knob, text)
    for parameter in _BARE:
        text = re.sub(rf"(?<![^\s(\[]){parameter}(?![\w=/-])", lambda m: flags[m.group(0)], text)
    # "(--solver exact; --solver exact)": the library named both forms, now the same.
    return re.sub(r"\(([^();]+); \1\)", r"(\1)", text)


# ----------------------------------------------------------------------------- warnings


def _ours(category, filename: str) -> bool:
    """Whether a warning is daskpca's: a category of :mod:`daskpca.exceptions` or raised by its code."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return getattr(category, "__module__", "").startswith("daskpca") or os.path.abspath(filename).startswith(package + os.sep)


@contextmanager
def cli_warnings(command: str):
    """Inside the block, daskpca's warnings print as one line each on stderr,
    ``daskpca: warning: <message in the CLI's words>``, without Python's category and source
    line; other libraries' warnings keep Python's format. Restored on exit."""
    with warnings.catch_warnings():
        shown = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):
            if not _ours(category, filename):
                return shown(message, category, filename, lineno, file, line)
            text = " ".join(str(message).split())
            print(f"daskpca: warning: {as_cli(text, command)}", file=file or sys.stderr, flush=True)

        warnings.showwarning = show
        yield
