"""The ``daskpca`` command line: batch jobs wiring config → cluster → io → estimator → io.

No math lives here. Exit codes: 0 success; 2 bad usage or bad input (one line on stderr naming
the problem and the fix, no traceback); 1 a runtime failure (the traceback goes to the log).

Options may come from a TOML job file (``--config job.toml``: keys are the long option names,
``n-components`` or ``n_components``); flags on the command line override it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import tomllib
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import numpy as np

log = logging.getLogger("daskpca")

#: Seconds to wait for a scheduler given with --scheduler before giving up (exit code 1).
CONNECT_TIMEOUT = 15


class UsageError(Exception):
    """A user mistake: reported as one line on stderr with exit code 2."""


# ----------------------------------------------------------------------------- where it runs


@contextmanager
def dask_client(args):
    """A ``distributed.Client`` for the job: the given scheduler, else an embedded cluster."""
    from distributed import Client, LocalCluster

    address = getattr(args, "scheduler", None) or os.environ.get("DASK_SCHEDULER_ADDRESS")
    if address:
        try:
            client = Client(address, timeout=CONNECT_TIMEOUT)
        except (OSError, TimeoutError) as exc:
            raise ConnectionError(
                f"could not reach the Dask scheduler at {address!r} within {CONNECT_TIMEOUT} s "
                f"({type(exc).__name__}). Check the address and that `dask scheduler` is running, "
                "or omit --scheduler to use an embedded local cluster."
            ) from exc
        with client:
            _say(args, f"Dask scheduler: {address}  dashboard: {client.dashboard_link}")
            yield client
        return
    with LocalCluster(
        n_workers=args.workers, threads_per_worker=args.threads, memory_limit=args.memory_limit,
        dashboard_address=":0", host="127.0.0.1", silence_logs=logging.WARNING,
    ) as cluster, Client(cluster) as client:
        _say(args, f"Dask dashboard: {client.dashboard_link}")
        yield client


def _say(args, message: str) -> None:
    """Human-readable output: stdout normally, stderr with --json (stdout is then the summary)."""
    if getattr(args, "quiet", False):
        return
    print(message, file=sys.stderr if getattr(args, "json", False) else sys.stdout, flush=True)


@contextmanager
def _progress(client, args):
    from ._progress import ProgressReporter

    with ProgressReporter(client, quiet=args.quiet or args.json):
        yield


# ----------------------------------------------------------------------------- sources


def open_source(path: str, var: str | None = None):
    """Open SOURCE lazily: a zarr array → dask array; a zarr group or NetCDF file → DataArray.

    Raises
    ------
    UsageError
        Missing path, unknown ``--var`` (listing the variables), a group without ``--var`` that
        holds several variables, or a non-numeric variable.
    """
    import dask.array as da
    import xarray as xr
    import zarr

    is_url = "://" in path
    if not is_url and not Path(path).exists():
        raise UsageError(f"SOURCE {path!r} does not exist; pass the path or URL of a zarr store or NetCDF file.")
    if path.endswith((".nc", ".nc4", ".netcdf")):
        try:
            data = xr.open_dataset(path, chunks={})
        except Exception as exc:  # the engine's own message says what is missing
            raise UsageError(f"cannot open {path!r} as NetCDF: {exc}") from exc
        return _select_variable(data, var, path)
    try:
        node = zarr.open(path, mode="r")
    except Exception as exc:
        raise UsageError(f"{path!r} is not a zarr store ({type(exc).__name__}: {exc}).") from exc
    if isinstance(node, zarr.Array):
        if var:
            raise UsageError(f"{path!r} is a single zarr array; --var {var!r} applies to datasets only: drop it.")
        return _numeric(da.from_zarr(node), path)
    # Consolidated metadata is not part of zarr v3: do not look for it there (xarray warns).
    consolidated = False if node.metadata.zarr_format == 3 else None
    data = xr.open_zarr(path, consolidated=consolidated, chunks={})
    return _select_variable(data, var, path)


def _select_variable(data, var, path):
    names = sorted(str(name) for name in data.data_vars)
    if var is None:
        if len(names) != 1:
            raise UsageError(f"{path!r} holds variables {names}; choose one with --var NAME.")
        var = names[0]
    if var not in data.data_vars:
        raise UsageError(f"--var {var!r} is not in {path!r}; its variables are {names}.")
    return _numeric(data[var], f"{path}:{var}")


def _numeric(array, label):
    if np.dtype(array.dtype).kind not in "biuf":
        raise UsageError(f"{label} has dtype {array.dtype}; PCA needs numbers. Choose a numeric variable with --var.")
    return array


def _is_labeled(data) -> bool:
    return hasattr(data, "dims")


def _sample_dims(args, data):
    """--sample-dims for labeled data (default: the first dimension)."""
    if not _is_labeled(data):
        if args.sample_dims:
            raise UsageError("--sample-dims applies to labeled (xarray) sources only; this source is a bare array.")
        return None
    dims = tuple(args.sample_dims or data.dims[:1])
    unknown = [d for d in dims if d not in data.dims]
    if unknown:
        raise UsageError(f"--sample-dims {unknown} not found; {data.name!r} has dims {list(data.dims)}.")
    return dims


# ----------------------------------------------------------------------------- commands


def cmd_fit(args) -> dict:
    from . import PCA
    from .io import check_writable, write_array, write_xarray

    for output in filter(None, [args.out, args.scores]):
        check_writable(output, overwrite=args.overwrite)  # before the cluster starts or data is read
    data = open_source(args.source, args.var)
    sample_dims = _sample_dims(args, data)
    n_components = _parse_n_components(args.n_components)
    pca = PCA(n_components=n_components, solver=args.solver, whiten=args.whiten,
              random_state=args.random_state, weights=args.weights,
              **{name: value for name, value in (("max_iter", args.max_iter), ("tol", args.tol)) if value is not None},
              checkpoint=_checkpoint_path(args.out))
    timings = {}
    with dask_client(args) as client, _progress(client, args):
        start = time.perf_counter()
        if sample_dims is None:
            pca.fit(data)
        else:
            pca.fit(data, sample_dims=sample_dims)
        timings["fit_s"] = time.perf_counter() - start
        start = time.perf_counter()
        pca.save(args.out, overwrite=args.overwrite)
        if args.scores:
            scores = pca.transform(data)
            (write_xarray if _is_labeled(scores) else write_array)(scores, args.scores, overwrite=args.overwrite)
        timings["write_s"] = time.perf_counter() - start
    _say(args, _variance_table(pca))
    return _summary(pca, model=args.out, scores=args.scores, timings=timings)


def cmd_transform(args) -> dict:
    from . import load
    from .io import write_array, write_xarray

    pca = load(args.model)
    data = open_source(args.source, args.var)
    with dask_client(args) as client, _progress(client, args):
        start = time.perf_counter()
        scores = pca.transform(data)
        (write_xarray if _is_labeled(scores) else write_array)(scores, args.out, overwrite=args.overwrite)
        elapsed = time.perf_counter() - start
    _say(args, f"wrote scores {tuple(scores.shape)} to {args.out}")
    return {"scores": args.out, "shape": list(scores.shape), "timings": {"transform_s": elapsed}}


def cmd_update(args) -> dict:
    from . import load

    pca = load(args.model)
    pca.check_updatable()  # before a cluster starts or any data is read
    data = open_source(args.source, args.var)
    with dask_client(args) as client, _progress(client, args):
        start = time.perf_counter()
        n_before = pca.n_samples_
        pca.update(data)
        elapsed = time.perf_counter() - start
        pca.save(args.model, overwrite=True)
    _say(args, f"folded {pca.n_samples_ - n_before} new samples into {args.model} "
               f"({pca.n_samples_} in all; {pca.n_passes_} pass over the new data)")
    _say(args, _variance_table(pca))
    return _summary(pca, model=args.model, timings={"update_s": elapsed})


def cmd_inspect(args) -> dict:
    from . import PCA, load
    from .io import read_marker

    try:
        marker = read_marker(args.path)
    except Exception:
        marker = {}
    if marker.get("format") == "daskpca-model":
        pca = load(args.path)
        _say(args, f"daskpca model {args.path}: {pca.n_components_} components of {pca.n_features_in_} "
                   f"features, fitted on {pca.n_samples_} samples with solver {pca.solver_!r} "
                   f"({pca.n_passes_} passes)")
        _say(args, _variance_table(pca))
        return _summary(pca, model=args.path)
    data = open_source(args.path, args.var)
    sample_dims = _sample_dims(args, data)
    # The public planner on the lazily opened source: its real chunks, nothing read.
    plan = PCA(_parse_n_components(args.n_components), solver="auto").plan(data, sample_dims=sample_dims)
    matrix_shape = (plan.n_samples, plan.n_features)
    _say(args, f"source {args.path}: {type(data).__name__} shape {tuple(data.shape)} dtype {data.dtype}"
               + (f" dims {list(data.dims)}" if _is_labeled(data) else "")
               + f"; as a matrix {matrix_shape}")
    _say(args, str(plan))
    return {"source": args.path, "shape": list(data.shape), "dtype": str(data.dtype),
            "matrix_shape": list(matrix_shape), "plan": {"solver": plan.solver, "reason": plan.reason,
                                                         "runner_up": plan.runner_up}}


def cmd_report(args) -> dict:
    from . import load

    pca = load(args.model)
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise UsageError(f"daskpca report needs matplotlib: pip install 'daskpca[plot]' ({exc}).") from exc
    from .report import write_report

    written = write_report(pca, args.out, overwrite=args.overwrite, n_maps=args.n_maps)
    _say(args, f"wrote the report to {args.out}: {', '.join(Path(p).name for p in written)}")
    return {"report": args.out, "files": [str(p) for p in written]}


def _demo_data(path: Path, n_samples: int, n_features: int, rank: int, chunk_rows: int, seed: int):
    """Write (or reuse) a low-rank-plus-noise float32 zarr array; returns it opened lazily."""
    import dask.array as da
    import zarr

    from .io import write_array

    if path.exists():
        existing = zarr.open_array(str(path), mode="r")
        if existing.shape == (n_samples, n_features):
            print(f"reusing the sample array {path} {existing.shape} {existing.dtype}")
            return da.from_zarr(existing)
        raise UsageError(f"{path} holds an array of shape {existing.shape}, not ({n_samples}, {n_features}); pass another --dir or remove it.")
    rng = da.random.default_rng(seed)
    basis = np.linalg.qr(np.random.default_rng(seed).standard_normal((n_features, rank)))[0]
    scales = 10.0 * 0.7 ** np.arange(rank)
    scores = rng.standard_normal((n_samples, rank), chunks=(chunk_rows, rank)) * scales
    noise = rng.standard_normal((n_samples, n_features), chunks=(chunk_rows, n_features))
    X = (scores @ basis.T + 0.5 * noise + 100.0).astype(np.float32)
    write_array(X, path)
    print(f"wrote the sample array {path} {X.shape} float32 ({X.nbytes / 2**20:.0f} MiB)")
    return da.from_zarr(str(path))


def cmd_demo(args) -> dict:
    from . import PCA
    from .io import write_array

    root = Path(args.dir)
    with dask_client(args):
        X = _demo_data(root / "input.zarr", args.n_samples, args.n_features, 10, args.chunk_rows, seed=0)
        start = time.perf_counter()
        pca = PCA(n_components=args.n_components).fit(X)
        elapsed = time.perf_counter() - start
        print(f"fitted {pca.solver_!r} PCA on {X.shape} in {elapsed:.1f} s "
              f"({pca.n_passes_} pass{'es' if pca.n_passes_ > 1 else ''} over the data; {pca.solver_reason_})")
        print(_variance_table(pca))
        out = root / f"results-{datetime.now():%Y%m%d-%H%M%S-%f}"
        write_array(pca.components_, out / "components.zarr", name="principal axes (mode × feature)")
        write_array(pca.transform(X), out / "scores.zarr", name="scores (sample × mode)")
        print(f"wrote {out / 'components.zarr'} {pca.components_.shape} and {out / 'scores.zarr'} "
              f"({X.shape[0]}, {pca.n_components_})")
    return _summary(pca, model=None, timings={"fit_s": elapsed})


# ----------------------------------------------------------------------------- output


def _variance_table(pca) -> str:
    lines = [" mode   variance    ratio  cumulative"]
    cumulative = np.cumsum(pca.explained_variance_ratio_)
    for i, (var, ratio, cum) in enumerate(zip(pca.explained_variance_, pca.explained_variance_ratio_, cumulative), 1):
        lines.append(f"{i:5d} {var:10.4g} {ratio:8.2%} {cum:10.2%}")
    lines.append(f"distortion J (sum of discarded eigenvalues) = {pca.distortion_:.4g}")
    return "\n".join(lines)


def _summary(pca, *, model, scores=None, timings=None) -> dict:
    return {
        "model": model,
        "scores": scores,
        "solver": pca.solver_,
        "n_components": int(pca.n_components_),
        "n_samples": int(pca.n_samples_),
        "n_features": int(pca.n_features_in_),
        "n_passes": int(pca.n_passes_),
        "explained_variance": [float(v) for v in pca.explained_variance_],
        "explained_variance_ratio": [float(v) for v in pca.explained_variance_ratio_],
        "distortion": float(pca.distortion_),
        "timings": timings or {},
    }


def _parse_n_components(value):
    if value is None or value in ("None", "none", "all"):
        return None
    if value == "mle":
        return "mle"
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"--n-components {value!r}: expected an int (e.g. 20), a variance fraction in (0, 1) (e.g. 0.95) or 'mle'.") from None
    return int(number) if float(number).is_integer() and number >= 1 else number


def _checkpoint_path(out):
    """Where iterative solvers keep their state: beside a local model (object stores: none)."""
    return f"{out}.checkpoint.npz" if out and "://" not in out else None


# ----------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="daskpca", description="Out-of-core, distributed PCA on Dask.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    #: Each command's parser by name (parse_args gives a job file's keys to it as defaults).
    parser.command_parsers = {}

    def command(name, func, help, description):
        sub = commands.add_parser(name, help=help, description=description)
        parser.command_parsers[name] = sub
        sub.set_defaults(run=func)
        sub.add_argument("--config", metavar="TOML", help="job file whose keys are these options; flags override it")
        sub.add_argument("--quiet", action="store_true", help="print nothing but errors")
        sub.add_argument("--json", action="store_true", help="print a machine-readable JSON summary on stdout")
        return sub

    def cluster_options(sub):
        group = sub.add_argument_group("where it runs")
        group.add_argument("--scheduler", metavar="ADDRESS", help="address of a running Dask scheduler "
                           "(default: $DASK_SCHEDULER_ADDRESS, else an embedded local cluster)")
        group.add_argument("--workers", type=int, default=2, help="local cluster: worker processes (default: %(default)s)")
        group.add_argument("--threads", type=int, default=1, help="local cluster: threads per worker (default: %(default)s)")
        group.add_argument("--memory-limit", default="auto", help="local cluster: memory per worker, e.g. 4GiB (default: %(default)s)")

    def source_options(sub):
        sub.add_argument("--var", metavar="NAME", help="variable of a dataset source")

    fit = command("fit", cmd_fit, "fit PCA on a zarr/NetCDF source and save the model",
                  "Fit PCA on SOURCE (a zarr array, a zarr/NetCDF dataset with --var) and save the model to MODEL.")
    fit.add_argument("source", metavar="SOURCE", help="zarr store path/URL, or a NetCDF file")
    fit.add_argument("--n-components", required=False, metavar="K", help="int, variance fraction in (0, 1), 'mle' or 'all'")
    fit.add_argument("--out", required=False, metavar="MODEL", help="where to save the model (a zarr store)")
    source_options(fit)
    fit.add_argument("--sample-dims", nargs="+", metavar="DIM", help="labeled sources: dims that index samples (default: the first)")
    fit.add_argument("--solver", default="auto", help="auto, covariance, gram, tsqr, randomized, als or ppca (default: %(default)s)")
    fit.add_argument("--weights", choices=["coslat"], help="coslat: weight by √cos(latitude)")
    fit.add_argument("--whiten", action="store_true", help="save a whitening model (unit-variance scores)")
    fit.add_argument("--random-state", type=int, help="seed for randomized and iterative solvers")
    fit.add_argument("--max-iter", type=int, help="iterative solvers (als, ppca): most passes (default: 200)")
    fit.add_argument("--tol", type=float, help="accuracy asked for: bound on sin θ of the kept subspace (approximate solvers; als/ppca: convergence tolerance, default 1e-8)")
    fit.add_argument("--scores", metavar="SCORES", help="also write the scores to this zarr store")
    fit.add_argument("--overwrite", action="store_true", help="replace existing outputs")
    cluster_options(fit)

    transform = command("transform", cmd_transform, "write the scores of a source under a saved model",
                        "Project SOURCE onto a saved model's components; stream the scores to a chunked zarr store.")
    transform.add_argument("model", metavar="MODEL")
    transform.add_argument("source", metavar="SOURCE")
    transform.add_argument("--out", required=False, metavar="SCORES")
    source_options(transform)
    transform.add_argument("--overwrite", action="store_true", help="replace an existing output")
    cluster_options(transform)

    update = command("update", cmd_update, "fold new samples into a saved model exactly",
                     "Read only the new SOURCE and fold it into MODEL's sufficient statistics (covariance "
                     "models); the result equals a refit on old + new data.")
    update.add_argument("model", metavar="MODEL")
    update.add_argument("source", metavar="SOURCE")
    source_options(update)
    cluster_options(update)

    inspect = command("inspect", cmd_inspect, "what a model or a source holds, and the plan for fitting it",
                      "Describe a saved model, or a source and the solver plan for fitting it.")
    inspect.add_argument("path", metavar="PATH")
    source_options(inspect)
    inspect.add_argument("--sample-dims", nargs="+", metavar="DIM")
    inspect.add_argument("--n-components", default="20", metavar="K", help="for the plan (default: %(default)s)")

    report = command("report", cmd_report, "plots and a summary of a saved model",
                     "Write scree and cumulative-variance plots, the leading component maps (PNG) and a Markdown summary.")
    report.add_argument("model", metavar="MODEL")
    report.add_argument("--out", required=False, metavar="DIR")
    report.add_argument("--n-maps", type=int, default=4, help="component maps to draw (default: %(default)s)")
    report.add_argument("--overwrite", action="store_true")

    demo = command("demo", cmd_demo, "write a sample zarr array, fit PCA on an embedded Dask cluster, write results",
                   "Writes a sample float32 zarr array (reused on later runs), starts a local Dask cluster "
                   "(dashboard link printed), fits PCA, prints the explained-variance table and writes "
                   "components and scores to a new results folder.")
    demo.add_argument("--dir", default="daskpca-demo", help="folder for the sample data and results (default: %(default)s)")
    demo.add_argument("--n-samples", type=int, default=200_000, help="rows of the sample array (default: %(default)s)")
    demo.add_argument("--n-features", type=int, default=200, help="columns of the sample array (default: %(default)s)")
    demo.add_argument("--chunk-rows", type=int, default=20_000, help="rows per chunk (default: %(default)s)")
    demo.add_argument("--n-components", type=int, default=10, help="components to keep (default: %(default)s)")
    cluster_options(demo)
    demo.set_defaults(memory_limit="2GiB")
    return parser


#: Options each command requires, from the command line or the job file.
REQUIRED = {"fit": ("n_components", "out"), "transform": ("out",), "report": ("out",)}


def parse_args(argv):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.config:
        try:
            with open(args.config, "rb") as handle:
                config = {key.replace("-", "_"): value for key, value in tomllib.load(handle).items()}
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise UsageError(f"--config {args.config!r}: {exc}") from exc
        sub = parser.command_parsers[args.command]
        known = set(vars(args)) - {"command", "run", "config"}  # the command's own options
        unknown = sorted(set(config) - known)
        if unknown:
            raise UsageError(f"--config {args.config!r}: unknown keys {unknown} for `daskpca {args.command}`.")
        sub.set_defaults(**config)
        args = parser.parse_args(argv)  # flags given on the command line override the job file
    for name in REQUIRED.get(args.command, ()):
        if getattr(args, name, None) is None:
            raise UsageError(f"`daskpca {args.command}` needs --{name.replace('_', '-')} (on the command line or in --config).")
    return args


def _user_errors():
    from .exceptions import IncompleteStoreError, NewerFormatError, OutputExistsError

    return (UsageError, OutputExistsError, IncompleteStoreError, NewerFormatError, ValueError, TypeError, FileNotFoundError, KeyError)


def main(argv=None) -> int:
    """Run one command; return the exit code (see the module docstring)."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # The cluster's own INFO chatter (workers starting, comms closing) is not the job's output.
    # Importing distributed first: its import configures the "distributed" logger at INFO.
    import distributed  # noqa: F401

    logging.getLogger("distributed").setLevel(logging.WARNING)
    try:
        args = parse_args(argv)
    except UsageError as exc:
        print(f"daskpca: error: {exc}", file=sys.stderr)
        return 2
    try:
        summary = args.run(args)
    except ConnectionError as exc:
        print(f"daskpca: error: {exc}", file=sys.stderr)
        return 1
    except _user_errors() as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"daskpca: error: {message}".splitlines()[0], file=sys.stderr)
        return 2
    except Exception:
        log.exception("daskpca %s failed", args.command)
        return 1
    if args.json:
        print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
