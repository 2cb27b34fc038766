"""What each command reads and writes, declared once, and the one check that no output is an input.

Every path a command takes is declared here as an input (a store or file it reads: SOURCE, MODEL,
``--data``, ``--with``, the ``--config`` job file) or an output (a store or folder it writes or
replaces). :func:`check_paths` runs for every command in :func:`daskpca.cli.main` after parsing
and before the command starts — before any claim, read, cluster or compute — and refuses, with
exit code 2, any output that is, contains or lies inside an input or another output
(:func:`daskpca.store.paths.overlaps`: through symlinks, ``..``, trailing slashes, ``file://``, and
``s3://``-style URLs). A new command or a new path option needs only its line in :data:`PATHS`;
``tests/test_declared_paths.py`` walks the parser and fails on a path option left undeclared.
Paths given in a job file reach ``args`` as the flags' values, so they are checked the same way.

The scratch folder is one of the job's paths too, for the commands that fit (a disk pass cache or
the Gram road's strip copy may be written there): ``$DASKPCA_SCRATCH`` (or the system's temporary
directory) that is or lies inside an input or output, through symlinks or not, and an input or
output inside one of daskpca's scratch folders, are refused the same way
(:func:`daskpca.store.scratch.check_apart`). A scratch root that merely contains the job's paths
(``DASKPCA_SCRATCH=/tmp`` with ``/tmp/x.zarr``) is fine: each copy is a fresh folder of its own.

The same check first puts every declared path as the user meant it
(:func:`daskpca.store.paths.as_meant`: ``~`` expanded, ``file://`` and ``FILE://localhost/`` URLs
as local paths, relative paths absolute), in ``args`` itself: the overlap check, the claims, the
writers, the publisher and the messages then all see the path the job acts on.
"""

from __future__ import annotations

from dataclasses import dataclass

from .options import UsageError


@dataclass(frozen=True)
class Paths:
    """A command's inputs and outputs: ``(label, args attribute)`` pairs; ``scratch``: whether it
    may write temporary copies under the scratch folder (it fits)."""

    inputs: tuple = ()
    outputs: tuple = ()
    scratch: bool = False


#: Every command's path arguments. The job file (``--config``) is an input of every command.
PATHS = {
    # --spectrum-from is read for a prediction before the fit; the model --out replaces is read the
    # same way, unasked, and is no input of its own (it is the output, checked by the publisher).
    "fit": Paths(inputs=(("SOURCE", "source"), ("--with", "with_source"), ("--spectrum-from", "spectrum_from")),
                 outputs=(("--out", "out"), ("--scores", "scores")), scratch=True),
    "transform": Paths(inputs=(("MODEL", "model"), ("SOURCE", "source")), outputs=(("--out", "out"),)),
    # update replaces MODEL by the updated model (the old one goes to its history): an output.
    "update": Paths(inputs=(("SOURCE", "source"),), outputs=(("MODEL", "model"),), scratch=True),
    "inspect": Paths(inputs=(("PATH", "path"), ("--spectrum-from", "spectrum_from"))),
    "report": Paths(inputs=(("MODEL", "model"), ("--data", "data")), outputs=(("--out", "out"),), scratch=True),
    "history": Paths(inputs=(("MODEL", "model"),)),
    "rollback": Paths(outputs=(("MODEL", "model"),)),
    # demo writes only files it names itself inside --dir (input.zarr, results-*/), never --dir.
    "demo": Paths(),
}
#: Inputs every command has.
COMMON_INPUTS = (("--config", "config"),)


def declared(command: str) -> tuple[dict, dict]:
    """``({label: attribute}, {label: attribute})``: the inputs and outputs of ``command``."""
    paths = PATHS[command]
    return dict(COMMON_INPUTS + paths.inputs), dict(paths.outputs)


def meant_paths(args) -> tuple[dict, dict]:
    """Replace every declared path of ``args`` by the path the user meant (see the module notes);
    return the command's inputs and outputs as ``{label: path}`` (None for an option not given).

    Raises
    ------
    UsageError
        A path that names no place here (a ``file://`` URL of another host), naming its option.
    """
    from ..exceptions import InputError
    from ..store.paths import as_meant

    meant = ({}, {})
    for paths, names in zip(meant, declared(args.command)):
        for label, name in names.items():
            try:
                paths[label] = as_meant(getattr(args, name, None))
            except InputError as exc:
                raise UsageError(f"{label} {exc}") from None
            setattr(args, name, paths[label])
    return meant


def check_paths(args) -> None:
    """Put the declared paths as meant (:func:`meant_paths`), then refuse a job whose output is,
    contains or lies inside one of its inputs or other outputs, and a job that fits whose scratch
    folder is or lies inside one of its paths (or whose paths lie inside a daskpca scratch folder).

    Raises
    ------
    UsageError
        Naming both options (or ``$DASKPCA_SCRATCH``), both paths (and where they resolve when
        spelled differently) and the fix; raised before anything is claimed, read or written.
    """
    from ..exceptions import ScratchError
    from ..store.paths import overlaps
    from ..store.scratch import check_apart

    inputs, outputs = meant_paths(args)
    problems = overlaps(inputs, outputs)
    if problems:
        raise UsageError(problems[0])
    if PATHS[args.command].scratch:
        try:
            check_apart(inputs, outputs)
        except ScratchError as error:
            raise UsageError(str(error)) from None
