"""The ``daskpca`` command line: batch jobs wiring config → cluster → io → estimator → io.

No math lives here. Exit codes: 0 success; 2 the user's input or usage is wrong (one line on stderr
naming the problem and the fix, no traceback); 1 a runtime or internal failure (one line with a
hint; ``--verbose`` prints the traceback). Options and job files: :mod:`daskpca.cli.options`.

Every command that writes claims its outputs (:func:`daskpca.io.claims`) and checks that they can
be written before it opens the source or starts a cluster; a fit's model and scores are published
together, or neither (:func:`daskpca.io.transaction`). Small inputs run on the threaded scheduler in
this process; larger ones (or ``--workers``/``--scheduler``) on a Dask cluster, and the job says
which ran.
"""

from __future__ import annotations

import logging
import sys
import time
from contextlib import nullcontext
from datetime import datetime
from pathlib import Path

import numpy as np

from . import options as cli_options
from .options import UsageError
from .declarations import check_paths
from .errors import cli_warnings, error_json, failure_line
from .demo import demo_data, demo_folder
from .cluster import dask_client, runner
from .summary import (coupled_summary, coupled_table, is_coupled, passes_text, say as _say, summary as job_summary, to_json,
                      variance_table, what_ran)

log = logging.getLogger("daskpca")

def _command_line(args) -> str:
    return " ".join(["daskpca", *(sys.argv[1:] if sys.argv and "daskpca" in sys.argv[0] else [args.command])])[:300]


def _claim_outputs(args, *outputs):
    """Claim the job's outputs before any data is read (:func:`daskpca.io.claims`, which checks
    each output's folder first). That no output is an input was checked before the command
    started (:mod:`.declarations`)."""
    from .. import io

    return io.claims([o for o in outputs if o], break_stale=getattr(args, "break_claim", False),
                     command=_command_line(args))


# ----------------------------------------------------------------------------- sources


def open_source(path: str, var: str | None = None, var_name: str = "var"):
    """Open SOURCE lazily (:func:`daskpca.io.open_source`, the reader the library offers too): a
    zarr array → dask array; a zarr group or NetCDF file → DataArray. Its errors (missing path,
    unknown ``var=``, a group of several variables without one, a non-numeric variable) are
    :class:`~daskpca.exceptions.InputError`; the command line names its flags in them
    (:func:`daskpca.cli.errors.as_cli`: ``var=`` → ``--var``, ``var2=`` → ``--var2``)."""
    from ..io import open_source as read

    if "://" not in path and not Path(path).exists():
        raise UsageError(f"SOURCE {path!r} does not exist; pass the path or URL of a zarr store or NetCDF file.")
    return read(path, var, var_name=var_name)


def _is_labeled(data) -> bool:
    from ..labeled import is_labeled  # one test of "labeled" for the library and the command

    return is_labeled(data)


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


# ----------------------------------------------------------------------------- EOF variants


def _embedded(data, n_lags: int, lag_step: int, sample_dims):
    """The source as extended EOFs see it: N delayed copies along a 'lag' dimension (lazy)."""
    from .. import lag_embed

    if sample_dims is not None and len(sample_dims) != 1:
        raise UsageError(f"--lags embeds along one sample dim (time); got --sample-dims {list(sample_dims)}.")
    try:
        return lag_embed(data, n_lags, lag_step, sample_dim=sample_dims[0] if sample_dims else None)
    except ValueError as exc:
        raise UsageError(f"--lags {n_lags} --lag-step {lag_step}: {exc}") from None


def _load_model(path, *, coupled: bool = False, verify: bool = True):
    """The model at ``path``, with its rotation when it was saved with one (one read, verified);
    ``coupled``: an MCA/CCA store loads as its own class (else PCA's reader refuses it by name).
    Through the one load path (``load_as``): the model is tied to the version it read, so
    ``update``'s save refuses to drop a model another job saved there meanwhile."""
    from ..models import load_as
    from ..pca import BasePCA

    return load_as(path, None if coupled else BasePCA, verify, keep_rotation=True)


#: ``solver_info_`` key of a model fitted with --lags on a bare array: how its input was embedded.
EMBEDDING = "lag_embedding"


def _as_fitted(data, model):
    """New data embedded as the model's was: an extended-EOF model has a 'lag' feature dim."""
    from ..eof.lagged import LAG

    fitted = getattr(model, "model_", model)
    layout = fitted.layout_
    embedding = fitted.solver_info_.get(EMBEDDING)
    if layout is None and embedding and not _is_labeled(data):
        return _embedded(data, int(embedding["n_lags"]), int(embedding["lag_step"]), None)
    if layout is None or not any(LAG in v.dims for v in layout.variables) or LAG in getattr(data, "dims", ()):
        return data
    lags = np.asarray(layout.coords[LAG].values)
    step = int(lags[1] - lags[0]) if len(lags) > 1 else 1
    return _embedded(data, len(lags), step, layout.sample_dims)


# ----------------------------------------------------------------------------- commands


def cmd_fit(args) -> dict:
    from .. import HilbertPCA, PCA, Rotator, io
    from .._probe import ROAD as PROBED_ROAD
    from ..passes import job

    cls = HilbertPCA if args.hilbert else PCA
    # The parameters each piece takes, asked of the estimators first: the flags are then checked
    # and mapped onto them by the options module in one go.
    parts = {cls.__name__: cls._param_names(), **({"Rotator": Rotator._param_names()} if args.rotation else {}),
             **({"--lags": ("lag_step",)} if args.lags else {})}
    n_components = cli_options.n_components(args.n_components)
    cli_options.check_coupled_options(args)
    if args.mca:
        return _fit_mca(args, n_components)
    cli_options.check_eof_options(args)
    params = cli_options.estimator_params(args, parts)[cls.__name__]  # an option nothing takes: refused
    if cls is PCA:
        params["checkpoint"] = _checkpoint_path(args.out)
    with _claim_outputs(args, args.out, args.scores):  # usage is checked whole before any claim
        for output in filter(None, [args.out, args.scores]):
            io.check_writable(output, overwrite=args.overwrite)  # before the cluster starts or data is read
        data = open_source(args.source, args.var)
        sample_dims = _sample_dims(args, data)
        if args.lags:
            data = _embedded(data, args.lags, args.lag_step, sample_dims)
        pca = cls(n_components, **params)
        plan = pca.plan(data, sample_dims=sample_dims)  # parameters and shape checked; nothing read
        if plan.solver == PROBED_ROAD.name:  # the one road whose passes a spectrum predicts
            plan = _with_earlier_spectrum(args, pca, plan, data, sample_dims)
        timings = {}
        # The job's pass cache: a fit followed by its scores keeps the first read's blocks for both.
        with runner(args, data.nbytes, plan), job(later_reads=1 if args.scores else 0):
            start = time.perf_counter()
            pca.fit(data, plan=plan, **({} if sample_dims is None else {"sample_dims": sample_dims}))  # planned once
            if args.lags and sample_dims is None:
                # A bare array has no 'lag' dim for the model to keep: record the embedding (saved with
                # the model) so that update and transform embed new data the same way.
                pca.solver_info_[EMBEDDING] = {"n_lags": args.lags, "lag_step": args.lag_step}
            timings["fit_s"] = time.perf_counter() - start
            start = time.perf_counter()
            power = 1 if args.rotation == "varimax" else args.power or cli_options.PROMAX_POWER
            model = Rotator(power=power).fit(pca) if args.rotation else pca
            # The model and the scores are published together, or neither (a transaction); a model
            # alone is published whole by its own save.
            with io.transaction() if args.scores else nullcontext():
                model.save(args.out, overwrite=args.overwrite)
                if args.scores:
                    scores = model.transform(data)
                    (io.write_xarray if _is_labeled(scores) else io.write_array)(scores, args.scores, overwrite=args.overwrite)
            timings["write_s"] = time.perf_counter() - start
    fit_plan = getattr(pca, "_fit_plan", plan)  # made inside the job: its cache row is the one the fit used
    summary = job_summary(pca, args, model=args.out, scores=args.scores, timings=timings, plan=fit_plan)
    _say(args, variance_table(pca, args.all))
    _say(args, what_ran(summary))
    _say(args, f"wrote the model to {args.out}"
               + (f" and the scores ({pca.n_samples_}, {pca.n_components_}) to {args.scores}" if args.scores else ""))
    return summary


def _with_earlier_spectrum(args, pca, plan, data, sample_dims):
    """``plan`` with block Krylov's passes predicted from an earlier fit's spectrum
    (:func:`daskpca._probe.from_model`): ``--spectrum-from MODEL``, else the model ``--out
    --overwrite`` replaces (a scheduled refit of the same field). Reads nothing of the data. The
    model --out holds is only a hint: one that cannot be read, or that describes another field,
    leaves the plan as it was (the fit's own probe then runs where it is watched) and says why in
    the log; an asked --spectrum-from that cannot be read is an error."""
    given = args.spectrum_from
    earlier = given or (args.out if args.overwrite and _is_saved_model(args.out) else None)
    if earlier is None:
        return plan
    dims = {} if sample_dims is None else {"sample_dims": sample_dims}
    if given:
        return pca.plan(data, probe=earlier, **dims)
    try:
        probed = pca.plan(data, probe=earlier, **dims)
    except Exception as error:  # noqa: BLE001 — a damaged, foreign or vanished model: a hint lost, not the job's error
        log.info("the model %s replaces gives no spectrum to predict the passes from (%s)", args.out, error)
        return plan
    if probed.probe.passes is None:
        log.info("%s", probed.probe.describe())
        return plan
    return probed


def _fit_mca(args, n_components) -> dict:
    """``fit SOURCE --mca --with SOURCE2``: MCA of two fields, the model saved to --out."""
    from .. import MCA, io

    if n_components is not None and not isinstance(n_components, int):
        raise UsageError(f"--mca keeps a number of mode pairs: give -k an int (or 'all'), not {args.n_components}.")
    mca = MCA(n_components, **cli_options.estimator_params(args, {"MCA": MCA._param_names()})["MCA"])
    with _claim_outputs(args, args.out):
        io.check_writable(args.out, overwrite=args.overwrite)
        fields = [open_source(args.source, args.var), open_source(args.with_source, args.var2, "var2")]
        sample_dims = _sample_dims(args, fields[0])
        dims = {} if sample_dims is None else {"sample_dims": sample_dims}
        mca.plan(*fields, **dims)  # the pair, k and parameters checked; nothing read
        earlier = _replaced_mca(args)
        with runner(args, fields[0].nbytes + fields[1].nbytes):
            start = time.perf_counter()
            mca.fit(*fields, earlier=earlier, **dims)
            fit_s = time.perf_counter() - start
            mca.save(args.out, overwrite=args.overwrite)
    _say(args, coupled_table(mca) + f"\nwrote the MCA model to {args.out} ({passes_text(mca.n_passes_)} over both fields)")
    return coupled_summary(mca, args, model=args.out, timings={"fit_s": fit_s})


def _replaced_mca(args):
    """The MCA model ``--out --overwrite`` replaces (a scheduled refit of the same fields), loaded
    and verified, whose bounds predict the Krylov path's passes (:meth:`daskpca.MCA.fit`'s
    ``earlier``: where it took that path on fields of the same features, for the same k and
    block), reading nothing of the data; else None. Only a hint, as PCA's replaced spectrum
    (:func:`_with_earlier_spectrum`): a model that cannot be read, or of another kind, is said in
    the log and the fit goes on without it."""
    from .. import MCA

    if not (args.overwrite and _is_saved_model(args.out)):
        return None
    try:
        return MCA.load(args.out)
    except Exception as error:  # noqa: BLE001 — a damaged, foreign or vanished model: a hint lost, not the job's error
        log.info("the model %s replaces gives no bounds to predict the passes from (%s)", args.out, error)
        return None


def cmd_transform(args) -> dict:
    from .. import io

    with _claim_outputs(args, args.out):
        io.check_writable(args.out, overwrite=args.overwrite)
        model = _load_model(args.model, coupled=True, verify=not args.no_verify)
        if args.field is not None and not is_coupled(model):
            raise UsageError(f"--field {args.field} chooses a field of a coupled (MCA/CCA) model; {args.model!r} holds "
                             f"a {type(model).__name__} of one field: drop --field.")
        data = open_source(args.source, args.var)
        nan = {"nan": args.nan} if args.nan != "raise" else {}
        with runner(args, data.nbytes):
            start = time.perf_counter()
            if is_coupled(model):  # each field has its own patterns: score SOURCE as the field --field names
                pair = (data, None) if (args.field or "X") == "X" else (None, data)
                scores = model.transform(*pair, **nan)[0 if pair[0] is not None else 1]
            else:
                scores = model.transform(_as_fitted(data, model), **nan)
            (io.write_xarray if _is_labeled(scores) else io.write_array)(scores, args.out, overwrite=args.overwrite)
            elapsed = time.perf_counter() - start
    _say(args, f"wrote scores {tuple(scores.shape)} to {args.out}"
               + (f" (field {args.field or 'X'} of the {type(model).__name__})" if is_coupled(model) else ""))
    return {"scores": args.out, "shape": list(scores.shape), "ran_on": args.ran_on, "timings": {"transform_s": elapsed}}


def cmd_update(args) -> dict:
    with _claim_outputs(args, args.model):
        model = _load_model(args.model, verify=not args.no_verify)
        pca = getattr(model, "model_", model)  # a rotation: update the model it rotates, then rotate again
        pca.check_updatable()  # before a cluster starts or any data is read
        data = _as_fitted(open_source(args.source, args.var), model)  # a lagged model lags the new data too
        with runner(args, data.nbytes):
            start = time.perf_counter()
            n_before = pca.n_samples_
            pca.update(data)
            elapsed = time.perf_counter() - start
        if model is not pca:
            model.fit(pca)  # the same rotation of the updated model, still tied to the version it was loaded from
        model.save(args.model, overwrite=True)  # the replaced model goes to the history (for every kind of model)
    _say(args, f"folded {pca.n_samples_ - n_before} new samples into {args.model} "
               f"({pca.n_samples_} in all; {passes_text(pca.n_passes_)} over the new data; the previous "
               "model is in `daskpca history`)")
    _say(args, variance_table(pca, args.all))
    return job_summary(pca, args, model=args.model, timings={"update_s": elapsed})


def _is_saved_model(path) -> bool:
    """Whether ``path`` holds a saved model: by its marker, or by the model's own attributes when
    the marker was edited or lost (loading it then names what is wrong; it is no data source)."""
    import zarr

    from ..io import MODEL_FORMAT, read_marker, resolve

    try:
        if read_marker(path).get("format") == MODEL_FORMAT:
            return True
    except FileNotFoundError:
        return False
    except Exception:  # noqa: BLE001 — no marker or an unreadable one: the attributes tell
        pass
    try:
        return "estimator" in zarr.open_group(resolve(path), mode="r").attrs
    except Exception:  # noqa: BLE001 — not a zarr group: a data source
        return False


def cmd_inspect(args) -> dict:
    from .. import PCA

    if _is_saved_model(args.path):
        model = _load_model(args.path, coupled=True, verify=not args.no_verify)  # verified: a damaged store or marker is refused by name
        if is_coupled(model):
            _say(args, f"daskpca {type(model).__name__} model {args.path}: {model.n_components_} mode pairs of "
                       f"{model.feature_stage_x_.n_input} (X: SOURCE) and {model.feature_stage_y_.n_input} (Y: --with) "
                       f"features, fitted on {model.n_samples_} shared samples with solver {model.solver_!r} "
                       f"({passes_text(model.n_passes_)} over both fields)")
            _say(args, coupled_table(model))
            return coupled_summary(model, args, model=args.path)
        pca = getattr(model, "model_", model)
        _say(args, f"daskpca model {args.path}: {pca.n_components_} components of {pca.n_features_in_} "
                   f"features, fitted on {pca.n_samples_} samples with solver {pca.solver_!r} "
                   f"({passes_text(pca.n_passes_)})")
        _say(args, variance_table(pca, args.all))
        summary = job_summary(pca, args, model=args.path)
        if model is not pca:
            method = "varimax" if model.power == 1 else f"promax (power {model.power})"
            _say(args, f"rotated: {method} of the leading {len(model.explained_variance_)} modes; their variances "
                       + ", ".join(f"{v:.4g}" for v in model.explained_variance_)
                       + " (transform gives rotated scores)")
            summary["rotation"] = {"method": method, "explained_variance": [float(v) for v in model.explained_variance_]}
        return summary
    data = open_source(args.path, args.var)
    sample_dims = _sample_dims(args, data)
    # The public planner on the lazily opened source: its real chunks, nothing read.
    k = cli_options.n_components(args.n_components)
    if args.n_components is None:  # the default, at most what the source can give (3 columns: 3)
        shape = PCA(1).plan(data, sample_dims=sample_dims)
        k = min(cli_options.INSPECT_K, shape.n_samples, shape.n_features)
    if args.probe and args.spectrum_from:
        raise UsageError("--probe reads ≤ 1% of the rows, --spectrum-from reads an earlier model's spectrum: give one.")
    plan = PCA(k, solver="auto").plan(data, sample_dims=sample_dims, probe=args.spectrum_from or args.probe)
    matrix_shape = (plan.n_samples, plan.n_features)
    _say(args, f"source {args.path}: {type(data).__name__} shape {tuple(data.shape)} dtype {data.dtype}"
               + (f" dims {list(data.dims)}" if _is_labeled(data) else "")
               + f"; as a matrix {matrix_shape}")
    _say(args, str(plan))
    return {"source": args.path, "shape": list(data.shape), "dtype": str(data.dtype),
            "matrix_shape": list(matrix_shape), "plan": {"solver": plan.solver, "reason": plan.reason,
                                                         "runner_up": plan.runner_up,
                                                         **({"probe": plan.probe.describe()} if plan.probe else {})}}


def cmd_report(args) -> dict:
    from .. import MCA, io

    cli_options.check_report_options(args)
    with _claim_outputs(args, args.out):
        io.check_writable(args.out, overwrite=args.overwrite)
        pca = _load_model(args.model, coupled=True, verify=not args.no_verify)
        if hasattr(pca, "model_"):
            raise UsageError(f"{args.model!r} holds a rotated model ({'varimax' if pca.power == 1 else 'promax'}); "
                             "`daskpca report` draws a PCA's own modes, spectrum and North errors, so it would show "
                             "the unrotated ones. Report the model fitted without --rotation, or draw the rotated "
                             "modes from daskpca.Rotator.load(MODEL).to_xarray().")
        try:
            import matplotlib  # noqa: F401
        except ImportError as exc:
            raise UsageError(f"daskpca report needs matplotlib: pip install 'daskpca[plot]' ({exc}).") from exc
        from .report import write_coupled_report, write_report

        if isinstance(pca, MCA):
            if args.bootstrap:
                raise UsageError("--bootstrap works on PCA models; this is an MCA model (bootstrap intervals for "
                                 "coupled modes are not drawn by the report yet): drop --bootstrap.")
            written = write_coupled_report(pca, args.out, overwrite=args.overwrite, n_maps=args.n_maps)
        else:
            data = _as_fitted(open_source(args.data, args.var), pca) if args.bootstrap else None
            written = write_report(pca, args.out, overwrite=args.overwrite, n_maps=args.n_maps, data=data,
                                   n_replicates=args.bootstrap, block_length=args.block_length)
    _say(args, f"wrote the report to {args.out}: {', '.join(Path(p).name for p in written)}")
    return {"report": args.out, "files": [str(p) for p in written]}


def cmd_history(args) -> dict:
    from .. import io

    io.read_marker(args.model)  # a missing or partial store is an error, not an empty history
    entries = io.history(args.model)
    lines = [f"{'':2}{'version':<30} {'written':<21} note"]
    lines += [f"{'*' if e['current'] else ' ':2}{e['version']:<30} {e['written']:<21} {e.get('note', '')}" for e in entries]
    _say(args, "\n".join(lines) + "\n(* current; `daskpca rollback MODEL --to VERSION` makes another one current)")
    return {"model": args.model, "versions": entries}


def cmd_rollback(args) -> dict:
    from .. import io

    with _claim_outputs(args, args.model):
        io.rollback(args.model, args.to, claim=io.held_claim(args.model))
    _say(args, f"{args.model} is now version {args.to}; the version it replaced is kept (`daskpca history`)")
    return {"model": args.model, "current": args.to}


def cmd_demo(args) -> dict:
    from .. import PCA
    from ..io import write_array

    from ..store.paths import as_meant

    root = Path(as_meant(args.dir)) if args.dir else demo_folder()  # `dir = "~/demo"` in a job file too
    print(f"demo folder: {root} (--dir to change; the sample array is reused, the results replaced)")
    with dask_client(args):
        X = demo_data(root / "input.zarr", args.n_samples, args.n_features, min(10, args.n_features), args.chunk_rows, seed=0)
        start = time.perf_counter()
        pca = PCA(n_components=args.n_components).fit(X)
        elapsed = time.perf_counter() - start
        print(f"fitted {pca.solver_!r} PCA on {X.shape} in {elapsed:.1f} s "
              f"({passes_text(pca.n_passes_)} over the data; {pca.solver_reason_})")
        print(variance_table(pca, args.all))
        out = root / (f"results-{datetime.now():%Y%m%d-%H%M%S-%f}" if args.new_results else "results-latest")
        write_array(pca.components_, out / "components.zarr", name="principal axes (mode × feature)", overwrite=True)
        write_array(pca.transform(X), out / "scores.zarr", name="scores (sample × mode)", overwrite=True)
        print(f"wrote {out / 'components.zarr'} {pca.components_.shape} and {out / 'scores.zarr'} "
              f"({X.shape[0]}, {pca.n_components_})")
    return job_summary(pca, args, model=None, timings={"fit_s": elapsed})


def _checkpoint_path(out):
    """Where iterative solvers keep their state: beside a local model (object stores: none)."""
    return f"{out}.checkpoint.npz" if out and "://" not in out else None


# ----------------------------------------------------------------------------- running a command

COMMANDS = {"fit": cmd_fit, "transform": cmd_transform, "update": cmd_update, "inspect": cmd_inspect,
            "report": cmd_report, "history": cmd_history, "rollback": cmd_rollback, "demo": cmd_demo}


def build_parser():
    return cli_options.build_parser(COMMANDS)


def parse_args(argv):
    return cli_options.parse_args(argv, COMMANDS)


def main(argv=None) -> int:
    """Run one command; return the exit code (see the module docstring)."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # The cluster's own chatter (workers starting, comms closing, a failed task's traceback on
    # the worker) is not the job's output; --verbose shows it. Importing distributed first: its
    # import configures the "distributed" logger.
    import distributed  # noqa: F401

    logging.getLogger("distributed").setLevel(logging.ERROR)
    try:
        args = parse_args(argv)
    except UsageError as exc:
        return _failed(exc, 2, str(exc), "--json" in (sys.argv[1:] if argv is None else argv))
    if args.verbose:
        logging.getLogger("distributed").setLevel(logging.WARNING)
    try:
        with cli_warnings(args.command):  # daskpca's warnings as `daskpca: warning: …` lines, in flags
            check_paths(args)  # every command: paths as meant; no output is, contains or lies inside an input
            summary = args.run(args)
    except KeyboardInterrupt as exc:
        from ..store.scratch import Terminated  # SIGTERM while a temporary copy was open: cleaned up

        terminated = isinstance(exc, Terminated)
        message = f"{'terminated (SIGTERM)' if terminated else 'interrupted'}; nothing was published"
        return _failed(exc, 143 if terminated else 130, message, args.json, prefix="daskpca: ")
    except Exception as exc:  # noqa: BLE001 — every failure ends as one line and an exit code
        code, first = failure_line(exc, args.command)
        if args.verbose:
            log.error("daskpca %s failed", args.command, exc_info=exc)
        return _failed(exc, code, first, args.json)
    if args.json:
        print(to_json(summary))
    return 0


def _failed(exc: BaseException, code: int, message: str, json: bool, prefix: str = "daskpca: error: ") -> int:
    """The one way a command fails: its line on stderr and, with --json, the error object on stdout."""
    print(f"{prefix}{message}", file=sys.stderr)
    if json:
        print(error_json(exc, code, message), flush=True)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
