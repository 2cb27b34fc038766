"""The ``daskpca`` command line's options: the parser, typed job files, and checks made before any
work starts. The commands themselves are in :mod:`daskpca.cli`.

A job file (``--config job.toml``) is read option by option exactly as the same flag would be:
its key must be an option of the command, a switch must be ``true``/``false``, a list option a
list of strings, and any other value goes through the flag's own type and choices. Errors name
the key, the value and the expected form; flags given on the command line override the file.
"""

from __future__ import annotations

import argparse
import os
import tomllib


class UsageError(Exception):
    """A user mistake: reported as one line on stderr with exit code 2."""


#: Options each command requires, from the command line or the job file.
REQUIRED = {"fit": ("n_components", "out"), "transform": ("out",), "report": ("out",), "rollback": ("to",)}
#: Components `inspect` plans for when -k is not given (fewer when the source has fewer).
INSPECT_K = 20
#: promax's exponent when --power is not given.
PROMAX_POWER = 4
#: A worker process needs this much memory besides its tasks (interpreter, dask, buffers).
MIN_WORKER_MEMORY = 256 * 2**20


def positive_int(text: str) -> int:
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer ≥ 1, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer ≥ 0, got {text!r}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def memory_limit(text: str) -> str | int:
    """``auto`` or a size (``4GiB``, ``500MB``, bytes) of at least :data:`MIN_WORKER_MEMORY`."""
    from dask.utils import format_bytes, parse_bytes

    if str(text).strip().lower() == "auto":
        return "auto"
    try:
        value = parse_bytes(str(text))
    except (ValueError, TypeError):
        raise argparse.ArgumentTypeError(f"expected 'auto' or a size such as 4GiB or 500MB, got {text!r}") from None
    if value < MIN_WORKER_MEMORY:
        raise argparse.ArgumentTypeError(
            f"{text!r} is too small for a Dask worker (it needs at least {format_bytes(MIN_WORKER_MEMORY)} "
            "besides its tasks; with less it is restarted over and over); give e.g. 1GiB")
    return value


def n_components(text):
    """``--n-components``: an int (``20``), a fraction (``0.95``), ``mle`` or ``all``."""
    if text is None or text in ("None", "none", "all"):
        return None
    if text == "mle":
        return "mle"
    try:
        return int(text)
    except (TypeError, ValueError):
        pass
    try:
        return float(text)
    except (TypeError, ValueError):
        raise UsageError(f"--n-components {text!r}: expected an int (e.g. 20), a variance fraction in "
                         "(0, 1) (e.g. 0.95), 'mle' or 'all'.") from None


# ----------------------------------------------------------------------------- the parser


def solver_help() -> str:
    """``--solver``'s help, from the solver registries (a solver registered there is listed)."""
    from ..coupled.mca import PATHS
    from ..eof.hilbert import HILBERT_SOLVERS
    from ..solvers import SOLVERS

    def listed(names):
        names = list(names)
        return ", ".join(names[:-1]) + f" or {names[-1]}"

    return (f"PCA: {listed(['auto', *SOLVERS])}; with --hilbert: {listed(['auto', *HILBERT_SOLVERS])}; with --mca: "
            f"{listed(PATHS)} (default: %(default)s)")


class _Parser(argparse.ArgumentParser):
    """Errors as :class:`UsageError` (one line, exit 2, from :func:`daskpca.cli.main`)."""

    def error(self, message):
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def build_parser(commands_table: dict) -> argparse.ArgumentParser:
    """The parser; ``commands_table`` maps command names to the functions that run them."""
    parser = _Parser(prog="daskpca", description="Out-of-core, distributed PCA on Dask.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    #: Each command's parser by name (parse_args gives a job file's keys to it as defaults).
    parser.command_parsers = {}

    def command(name, help, description):
        sub = commands.add_parser(name, help=help, description=description)
        parser.command_parsers[name] = sub
        sub.set_defaults(run=commands_table[name])
        sub.add_argument("--config", metavar="TOML", help="job file whose keys are these options; flags override it")
        sub.add_argument("--quiet", action="store_true", help="print nothing but errors")
        sub.add_argument("--json", action="store_true", help="print a machine-readable JSON summary on stdout")
        sub.add_argument("--verbose", action="store_true", help="on a failure, print the full traceback and the cluster's logs")
        return sub

    def required(sub):
        return sub.add_argument_group("required (on the command line or in --config)")

    def cluster_options(sub):
        group = sub.add_argument_group("where it runs (default: the threaded scheduler for small inputs, "
                                       "else an embedded local cluster)")
        group.add_argument("--scheduler", metavar="ADDRESS", help="address of a running Dask scheduler "
                           "(default: $DASK_SCHEDULER_ADDRESS)")
        group.add_argument("--workers", type=positive_int, help="local cluster: worker processes (default: 2)")
        group.add_argument("--threads", type=positive_int, help="local cluster: threads per worker (default: 1)")
        group.add_argument("--memory-limit", type=memory_limit, help="local cluster: memory per worker, e.g. 4GiB (default: auto)")

    def output_options(sub, what="existing outputs"):
        sub.add_argument("--overwrite", action="store_true", help=f"replace {what}")
        sub.add_argument("--break-claim", action="store_true",
                         help="clear the claim a killed job left on an output (never one of a job still running here)")

    def no_verify(sub):
        sub.add_argument("--no-verify", action="store_true",
                         help="read the model without checking its checksums and integrity record (a store whose "
                              "record was lost; at your own risk)")

    def source_options(sub):
        sub.add_argument("--var", metavar="NAME", help="variable of a dataset source")

    def sample_dims(sub, help="labeled sources: dims that index samples (default: the first)"):
        sub.add_argument("--sample-dims", nargs="+", metavar="DIM", help=help)

    fit = command("fit", "fit PCA on a zarr/NetCDF source and save the model",
                  "Fit PCA on SOURCE (a zarr array, a zarr/NetCDF dataset with --var) and save the model to MODEL.")
    fit.add_argument("source", metavar="SOURCE", nargs="?", help="zarr store path/URL, or a NetCDF file")
    need = required(fit)
    need.add_argument("-k", "--n-components", metavar="K", help="int, variance fraction in (0, 1), 'mle' or 'all'")
    need.add_argument("--out", metavar="MODEL", help="where to save the model (a zarr store)")
    source_options(fit)
    sample_dims(fit)
    fit.add_argument("--solver", default="auto", help=solver_help())
    fit.add_argument("--weights", choices=["coslat"], help="coslat: weight by √cos(latitude)")
    fit.add_argument("--whiten", action="store_true", help="save a whitening model (unit-variance scores)")
    fit.add_argument("--random-state", type=int, help="seed for randomized and iterative solvers")
    fit.add_argument("--max-iter", type=positive_int, help="iterative solvers (als, ppca): most passes (default: 200)")
    fit.add_argument("--max-passes", type=positive_int, help="krylov: most reads of the data while reaching --tol (default: 8, or 20 with --tol)")
    fit.add_argument("--tol", type=float, help="accuracy asked for: bound on sin θ of the kept subspace (approximate solvers; als/ppca: convergence tolerance, default 1e-8)")
    fit.add_argument("--scores", metavar="SCORES", help="also write the scores to this zarr store")
    fit.add_argument("--spectrum-from", metavar="MODEL",
                     help="block Krylov: predict the passes (the progress line's ETA from pass 1) from MODEL's spectrum, "
                          "an earlier fit of the same field, reading nothing (default: the model --out --overwrite "
                          "replaces, where it is one; else a probe of ≤ 1%% of the rows where the fit is watched)")
    fit.add_argument("--device", choices=["cpu", "cuda"], help="cuda: compute the passes on a GPU, each block moved "
                     "there as it is read (needs CuPy: pip install cupy-cuda12x)")
    fit.add_argument("--cache", choices=["auto", "memory", "disk", "off"], default="auto",
                     help="pass cache: keep the first read's blocks in memory or in an uncompressed copy under "
                          "$DASKPCA_SCRATCH for the later passes and --scores (default: %(default)s: memory if "
                          "it fits, else disk, else none)")
    eof = fit.add_argument_group("EOF variants")
    eof.add_argument("--hilbert", action="store_true",
                     help="Hilbert (complex) EOFs: the analytic signal along the sample dim (rows in time order)")
    eof.add_argument("--rotation", choices=["varimax", "promax"],
                     help="rotate the kept modes; the model store keeps the rotation and --scores are rotated")
    eof.add_argument("--power", type=positive_int, help=f"promax power, with --rotation promax (default: {PROMAX_POWER})")
    eof.add_argument("--lags", type=positive_int, metavar="N",
                     help="extended EOFs: embed N copies of the field delayed by --lag-step samples (a 'lag' dim)")
    eof.add_argument("--lag-step", type=positive_int, default=1, metavar="STEP",
                     help="delay between the copies, in samples (default: %(default)s)")
    coupled = fit.add_argument_group("coupled analysis of two fields")
    coupled.add_argument("--mca", action="store_true",
                         help="maximum covariance analysis of SOURCE and the --with source (their shared samples)")
    coupled.add_argument("--with", dest="with_source", metavar="SOURCE2",
                         help="the second field of --mca: a zarr store or NetCDF file with the same samples")
    coupled.add_argument("--var2", metavar="NAME", help="variable of the --with dataset")
    fit.add_argument("--all", action="store_true", help="print every mode of the variance table (default: the first 20)")
    output_options(fit)
    cluster_options(fit)

    transform = command("transform", "write the scores of a source under a saved model",
                        "Project SOURCE onto a saved model's components; stream the scores to a chunked zarr store.")
    transform.add_argument("model", metavar="MODEL")
    transform.add_argument("source", metavar="SOURCE")
    no_verify(transform)
    required(transform).add_argument("--out", metavar="SCORES", help="where to write the scores (a zarr store)")
    source_options(transform)
    transform.add_argument("--field", choices=["X", "Y"],
                           help="coupled (MCA/CCA) models: score SOURCE as field X (fitted as SOURCE, the default) or "
                                "Y (fitted as --with); each field has its own patterns")
    transform.add_argument("--nan", choices=["raise", "propagate"], default="raise",
                           help="NaN/±inf in SOURCE: raise an error naming the first one, or give NaN scores "
                                "for the samples holding them (default: %(default)s)")
    output_options(transform, "an existing output")
    cluster_options(transform)

    update = command("update", "fold new samples into a saved model exactly",
                     "Read only the new SOURCE and fold it into MODEL's sufficient statistics (covariance "
                     "models); the result equals a refit on old + new data. The previous model is kept "
                     "in MODEL's history (`daskpca history`, `daskpca rollback`).")
    update.add_argument("model", metavar="MODEL")
    update.add_argument("source", metavar="SOURCE")
    no_verify(update)
    source_options(update)
    update.add_argument("--all", action="store_true", help="print every mode of the variance table")
    update.add_argument("--break-claim", action="store_true", help="clear the claim a killed job left on MODEL")
    cluster_options(update)

    inspect = command("inspect", "what a model or a source holds, and the plan for fitting it",
                      "Describe a saved model, or a source and the solver plan for fitting it.")
    inspect.add_argument("path", metavar="PATH", nargs="?")
    no_verify(inspect)
    source_options(inspect)
    sample_dims(inspect, "labeled sources: dims that index samples (default: the first)")
    inspect.add_argument("-k", "--n-components", metavar="K",
                         help=f"for the plan (default: {INSPECT_K}, at most the source's min(n_samples, n_features))")
    inspect.add_argument("--all", action="store_true", help="print every mode of a model's variance table")
    inspect.add_argument("--probe", action="store_true",
                         help="sources: read ≤ 1%% of the rows (whole storage chunks) and predict block Krylov's passes "
                              "from their spectrum instead of the prior (the plan says what was read)")
    inspect.add_argument("--spectrum-from", metavar="MODEL",
                         help="sources: predict block Krylov's passes from MODEL's spectrum (an earlier fit of the same "
                              "field) instead of the prior, reading nothing")

    report = command("report", "plots and a summary of a saved model",
                     "Write scree and cumulative-variance plots, the leading component maps (PNG) and a Markdown summary.")
    report.add_argument("model", metavar="MODEL")
    no_verify(report)
    required(report).add_argument("--out", metavar="DIR", help="folder to write (must not exist unless --overwrite)")
    report.add_argument("--n-maps", type=positive_int, default=4, help="component maps to draw (default: %(default)s)")
    report.add_argument("--bootstrap", type=non_negative_int, default=0, metavar="N",
                        help="moving-block bootstrap intervals from N replicates on the scree plot and in the summary "
                             "(one extra read of --data; default: none)")
    report.add_argument("--block-length", type=positive_int, metavar="L",
                        help="bootstrap block length in samples (default: a rule from the scores' lag-1 autocorrelation)")
    report.add_argument("--data", metavar="SOURCE", help="the source the model was fitted on (needed by --bootstrap)")
    source_options(report)
    output_options(report, "an existing report folder")

    history = command("history", "the versions of a model a rollback can go to",
                      "List MODEL's versions (newest first): each `update` or `fit --overwrite` keeps the one it replaced.")
    history.add_argument("model", metavar="MODEL")

    rollback = command("rollback", "make an earlier version of a model current again",
                       "Make version --to of MODEL (from `daskpca history`) the current one; the current one is kept in the history.")
    rollback.add_argument("model", metavar="MODEL")
    required(rollback).add_argument("--to", metavar="VERSION", help="a version listed by `daskpca history MODEL`")
    rollback.add_argument("--break-claim", action="store_true", help="clear the claim a killed job left on MODEL")

    demo = command("demo", "write a sample zarr array, fit PCA on an embedded Dask cluster, write results",
                   "Writes a sample float32 zarr array (reused on later runs), starts a local Dask cluster "
                   "(dashboard link printed), fits PCA, prints the explained-variance table and writes "
                   "components and scores to the folder's results-latest/ (replaced on each run).")
    demo.add_argument("--dir", help="folder for the sample data and results (default: $DASKPCA_DEMO_DIR, else "
                                    "~/.cache/daskpca/demo; the path is printed)")
    demo.add_argument("--new-results", action="store_true", help="write a new results-TIMESTAMP/ folder instead of "
                                                                  "replacing results-latest/")
    demo.add_argument("--n-samples", type=positive_int, default=200_000, help="rows of the sample array (default: %(default)s)")
    demo.add_argument("--n-features", type=positive_int, default=200, help="columns of the sample array (default: %(default)s)")
    demo.add_argument("--chunk-rows", type=positive_int, default=20_000, help="rows per chunk (default: %(default)s)")
    demo.add_argument("-k", "--n-components", type=positive_int, default=10, help="components to keep (default: %(default)s)")
    demo.add_argument("--all", action="store_true", help="print every mode of the variance table")
    cluster_options(demo)
    demo.set_defaults(memory_limit=2 * 2**30)
    return parser


# ----------------------------------------------------------------------------- job files


def _config_values(sub, config: dict, path: str) -> dict:
    """The job file's values typed and checked exactly as the same flags would be."""
    actions = {action.dest: action for action in sub._actions if action.option_strings}
    out = {}
    for key, value in config.items():
        dest = key.replace("-", "_")
        action = actions.get(dest)
        if action is None or dest in ("config", "help"):
            known = sorted(a.option_strings[-1][2:] for a in actions.values() if a.dest not in ("config", "help"))
            raise UsageError(f"--config {path!r}: unknown key {key!r} for `daskpca {sub.prog.split()[-1]}`; "
                             f"its keys are {known}.")
        flag = action.option_strings[-1]
        where = f"--config {path!r}: key {key!r} ({flag})"
        if action.nargs == 0:  # a switch
            if not isinstance(value, bool):
                raise UsageError(f"{where} is a switch: expected true or false, got {value!r}.")
            out[dest] = value
            continue
        if action.nargs in ("+", "*"):
            if not (isinstance(value, list) and value and all(isinstance(v, str) and v for v in value)):
                example = f'{key} = ["{value}"]' if isinstance(value, str) else f'{key} = ["time"]'
                raise UsageError(f"{where} expects a list of names, got {value!r}; write e.g. {example}.")
            out[dest] = list(value)
            continue
        if isinstance(value, (bool, list, dict)) or value is None:
            raise UsageError(f"{where} expects one {_expected(action)}, got {value!r} ({type(value).__name__}).")
        text = str(value)
        try:
            typed = action.type(text) if action.type else text
        except (argparse.ArgumentTypeError, ValueError, TypeError) as exc:
            raise UsageError(f"{where}: {exc}.") from None
        if action.choices is not None and typed not in action.choices:
            raise UsageError(f"{where}: {value!r} is not one of {list(action.choices)}.")
        out[dest] = typed
    return out


def _expected(action) -> str:
    if action.type in (int, positive_int):
        return "integer"
    if action.type is float:
        return "number"
    return "value (a string or a number)"


def parse_args(argv, commands_table: dict):
    parser = build_parser(commands_table)
    args = parser.parse_args(argv)
    if args.config:
        from ..exceptions import InputError
        from ..store.paths import as_meant

        try:
            with open(as_meant(args.config), "rb") as handle:
                config = tomllib.load(handle)
        except (OSError, tomllib.TOMLDecodeError, InputError) as exc:
            raise UsageError(f"--config {args.config!r}: {exc}") from exc
        sub = parser.command_parsers[args.command]
        sub.set_defaults(**_config_values(sub, config, args.config))
        args = parser.parse_args(argv)  # flags given on the command line override the job file
    _repair_positionals(args, argv)
    for name in REQUIRED.get(args.command, ()):
        if getattr(args, name, None) is None:
            raise UsageError(f"`daskpca {args.command}` needs --{name.replace('_', '-')} (on the command line or in --config).")
    return args


def _repair_positionals(args, argv) -> None:
    """``fit --sample-dims time field.zarr``: the list option swallowed SOURCE. Take it back when
    its last value is an existing path or a URL; otherwise say what happened."""
    for positional in ("source", "path"):
        if not hasattr(args, positional) or getattr(args, positional) is not None:
            continue
        dims = getattr(args, "sample_dims", None) or []
        if len(dims) > 1 and ("://" in dims[-1] or os.path.exists(os.path.expanduser(dims[-1]))):
            setattr(args, positional, dims[-1])
            args.sample_dims = dims[:-1]
        elif dims:
            raise UsageError(f"`daskpca {args.command}` needs {positional.upper()}; --sample-dims took "
                             f"{dims} (a list option takes every word after it). Put {positional.upper()} "
                             f"first: daskpca {args.command} {positional.upper()} --sample-dims {' '.join(dims)}.")
        else:
            raise UsageError(f"`daskpca {args.command}` needs {positional.upper()} (a zarr store path or URL, "
                             "or a NetCDF file).")


def check_eof_options(args) -> None:
    """Combinations of --hilbert / --rotation / --lags that cannot work, refused before any read."""
    if args.hilbert and args.rotation:
        raise UsageError("--rotation rotates real EOFs; Hilbert EOFs are complex. Drop one of --hilbert and --rotation.")
    from ..eof.hilbert import HILBERT_SOLVERS

    if args.hilbert and args.solver not in ("auto", *HILBERT_SOLVERS):
        raise UsageError(f"--hilbert takes --solver auto, gram (exact) or krylov (long series, with an error bound); "
                         f"not {args.solver}.")
    if args.rotation == "varimax" and args.power is not None:  # a Rotator takes power, varimax fixes it to 1
        raise UsageError("--power is promax's exponent: add --rotation promax, or drop --power.")
    if args.hilbert and args.spectrum_from:
        raise UsageError("--spectrum-from predicts PCA's block Krylov passes; Hilbert EOFs have no such prediction. "
                         "Drop --spectrum-from.")


def check_coupled_options(args) -> None:
    """--mca with its second source, and nothing that applies to one field only; before any read."""
    if args.mca != bool(args.with_source):
        raise UsageError("--mca needs --with SOURCE2, the second field; --with applies to --mca only.")
    if args.var2 and not args.with_source:
        raise UsageError("--var2 names a variable of the --with source: add --mca --with SOURCE2.")
    # Options that set a parameter MCA does not take are refused by estimator_params; these
    # choose what is built (another analysis, a second output).
    single = [flag for flag, given in (("--hilbert", args.hilbert), ("--rotation", args.rotation), ("--lags", args.lags),
                                       ("--scores", args.scores), ("--spectrum-from", args.spectrum_from))
              if given]
    if args.mca and single:
        raise UsageError(f"{', '.join(single)} apply to one field's PCA, not to --mca: drop them.")
    from ..coupled.mca import PATHS

    if args.mca and args.solver not in PATHS:
        raise UsageError(f"--mca takes --solver auto, exact (one pass) or krylov (with --tol); not {args.solver}.")


def cache_setting(value: str):
    """``--cache`` as the estimators' ``cache=``: ``off`` is False."""
    return False if value == "off" else value


def check_report_options(args) -> None:
    """--data, --var and --block-length go with --bootstrap N; refused alone rather than ignored."""
    if args.bootstrap:
        if not args.data:
            raise UsageError("--bootstrap N resamples the data the model was fitted on: name it with --data SOURCE.")
        return
    alone = [flag for flag, given in (("--data", args.data), ("--var", args.var), ("--block-length", args.block_length))
             if given is not None]
    if alone:
        raise UsageError(f"{', '.join(alone)} appl{'y' if len(alone) > 1 else 'ies'} to the bootstrap only: add "
                         "--bootstrap N (e.g. 1000), or drop " + ("them." if len(alone) > 1 else "it."))


#: What each ``fit`` option sets: ``(option, args attribute, the parameter it becomes)``. The
#: command builds its estimators from this table (:func:`estimator_params`), so an option that
#: none of the pieces it builds takes is refused by name, never silently ignored (``--power``
#: with ``--mca``, ``--lag-step`` without ``--lags``, ``--max-iter`` with ``--hilbert`` …).
FIT_PARAMETERS = (
    ("--solver", "solver", "solver"),
    ("--tol", "tol", "tol"),
    ("--max-passes", "max_passes", "max_passes"),
    ("--max-iter", "max_iter", "max_iter"),
    ("--whiten", "whiten", "whiten"),
    ("--weights", "weights", "weights"),
    ("--random-state", "random_state", "random_state"),
    ("--power", "power", "power"),
    ("--lag-step", "lag_step", "lag_step"),
    ("--cache", "cache", "cache"),
    ("--device", "device", "device"),
)
#: Values an option has when it is not given (argparse's defaults of the ``fit`` parser).
_NOT_GIVEN = {"solver": "auto", "lag_step": 1, "whiten": False, "cache": "auto"}
#: Options whose text becomes another value as a parameter.
_AS_PARAMETER = {"cache": lambda value: False if value == "off" else value}  # --cache off: cache=False


def estimator_params(args, parts: dict) -> dict:
    """``{piece: {parameter: value}}``: the ``fit`` options given, mapped onto the parameters of
    the pieces the command builds (``parts``: piece name → the parameter names it takes, e.g.
    ``{"MCA": MCA._param_names()}``). An option given that no piece takes raises
    :class:`UsageError` naming it, what it sets and what was built — before any read."""
    params = {piece: {} for piece in parts}
    for option, attribute, parameter in FIT_PARAMETERS:
        value = getattr(args, attribute, None)
        if value is None or value == _NOT_GIVEN.get(attribute, None):
            continue
        takers = [piece for piece, names in parts.items() if parameter in names]
        if not takers:
            built = " and ".join(parts)
            raise UsageError(f"{option} would be ignored: it sets {parameter}, which this fit ({built}) does not "
                             f"take. Drop {option}" + _HINTS.get(option, "."))
        for piece in takers:
            params[piece][parameter] = _AS_PARAMETER.get(attribute, lambda v: v)(value)
    return params


_HINTS = {
    "--power": " (--power is promax's exponent: add --rotation promax, on a single field's PCA).",
    "--lag-step": " (it spaces the delayed copies of extended EOFs: it needs --lags N).",
    "--max-iter": " (it limits ALS and probabilistic PCA: --solver als or ppca on a single field).",
    "--whiten": " (it scales a single field's PCA scores).",
}
