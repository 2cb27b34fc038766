"""The methods a benchmark row can run: the floors, daskpca's solvers and the peers.

A method is a name (``floor-read``, ``daskpca-randomized-q2``, ``sklearn-full``, ``xeofs``, …)
that :func:`method_function` turns into ``run(path, case, ctx) -> (components, passes, note)``,
called inside the row's own subprocess (:func:`benchmarks.runner.child_main`) with the clock
running; ``components`` may be ``"skip"`` (with the reason in ``note``) or ``None`` (floors).

**Adding a method is a change here only:**

- a new daskpca solver registered in ``daskpca.solvers.SOLVERS`` needs nothing for
  ``--methods daskpca-<solver>``; to make it one of the default rows, add its name to
  :data:`DASKPCA_SOLVERS` (a variant with fixed options: a name in :data:`DASKPCA_VARIANTS`
  and its parsing in :func:`method_function`);
- a new peer: a ``m_<peer>`` function, its name in :data:`PEERS`, a branch in
  :func:`method_function` and the modules to import before the clock starts in
  :data:`PREIMPORT`.
"""

from __future__ import annotations

import importlib
import inspect

import numpy as np
import psutil

from .cases import GIB, Case

FLOORS = ("floor-read", "floor-gram")
#: Optional rows, by exact name only: floor-read-zarrs (zarr's Rust codec pipeline),
#: daskpca-krylov-t<tol> / daskpca-auto-t<tol> (accuracy asked), daskpca-krylov-p<passes>.
#: daskpca's solvers among the default rows, in table order ("exact": covariance, or gram for n < d).
DASKPCA_SOLVERS = ("exact", "randomized", "tsqr", "als")
#: Fewer power iterations than the accuracy-first default (q = 7 when k < 0.1·min(n, d)); with
#: q = 1 a larger sketch (p = 20) buys accuracy for no extra pass. Default rows when the
#: randomized solver exists.
DASKPCA_VARIANTS = ("daskpca-randomized-q1", "daskpca-randomized-q1-p20", "daskpca-randomized-q2")
PEERS = ("sklearn-covariance_eigh", "sklearn-full", "sklearn-randomized", "dask-ml-full", "dask-ml-randomized", "xeofs")
#: Modules a method needs, by name prefix, imported before the clock starts (imports are not
#: the method's cost).
PREIMPORT = {
    "": ("dask.array", "zarr", "scipy.linalg"),
    "daskpca-": ("daskpca", "daskpca.solvers"),
    "sklearn-": ("sklearn.decomposition",),
    "dask-ml-": ("dask_ml.decomposition",),
    "xeofs": ("xarray", "xeofs"),
}
#: Methods that run on the distributed LocalCluster under --cluster (the others are not dask
#: based, or are peers measured with their default scheduler).
CLUSTER_METHODS = ("floor-read", "floor-gram", "daskpca-*")


def list_methods(case: Case) -> list[str]:
    """Every method applicable to a case, in table order (optional ones checked at runtime)."""
    methods = list(FLOORS)
    try:
        from daskpca.solvers import SOLVERS
    except Exception:  # pragma: no cover - the package is the point of these benchmarks
        SOLVERS = {}
    exact_solver = "gram" if case.wide else "covariance"
    for name in DASKPCA_SOLVERS:
        name = exact_solver if name == "exact" else name
        if name in SOLVERS:
            methods.append(f"daskpca-{name}")
    if "randomized" in SOLVERS:
        methods += DASKPCA_VARIANTS
    methods += PEERS
    return methods


def preimport(method: str) -> None:
    """Import what a method needs before the clock starts (imports are not the method's cost)."""
    for prefix, mods in PREIMPORT.items():
        if method.startswith(prefix):
            for mod in mods:
                try:
                    importlib.import_module(mod)
                except Exception:
                    pass  # the method reports the failure itself


def _open_dask(path: str):
    import dask.array as da

    return da.from_zarr(path)


def _tall_view(X, wide: bool):
    """The matrix whose XᵀX is the small Gram: X itself (n ≥ d) or Xᵀ (n < d)."""
    return X.T if wide else X


def m_floor_read(path, case, ctx):
    X = _open_dask(path)
    X.sum(dtype=np.float64).compute()
    return None, 1, None


def m_floor_read_zarrs(path, case, ctx):
    """floor-read with zarr's codec pipeline replaced by the Rust one of the ``zarrs`` package."""
    import zarr

    try:
        import zarrs  # noqa: F401
    except Exception as exc:
        return "skip", None, f"zarrs unavailable: {type(exc).__name__}"
    with zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"}):
        return m_floor_read(path, case, ctx)


def _gram_block(b):
    b = b.astype(np.float64)
    return (b.T @ b)[None]  # numpy uses syrk for a.T @ a


def m_floor_gram(path, case, ctx):
    X = _tall_view(_open_dask(path), case.wide)
    X = X.rechunk({1: -1})
    p = X.shape[1]
    nb = X.numblocks[0]
    parts = X.map_blocks(_gram_block, new_axis=[2], chunks=((1,) * nb, (p,), (p,)), dtype=np.float64)
    parts.sum(axis=0, split_every=8).compute()
    return None, 1, None


def m_daskpca(solver, **options):
    """daskpca with ``solver`` and estimator ``options`` (e.g. n_power_iter for randomized-q2)."""

    def run(path, case, ctx):
        import daskpca

        X = _open_dask(path)
        if hasattr(daskpca, "PCA"):
            kwargs = dict(n_components=case.k, solver=solver, **options)
            if "random_state" in inspect.signature(daskpca.PCA).parameters:
                kwargs["random_state"] = 0
            model = daskpca.PCA(**kwargs).fit(X)
            ctx["api"] = "daskpca.PCA"
            ctx["solver_"] = getattr(model, "solver_", solver)
            info = getattr(model, "solver_info_", {})
            note = None
            if "error_bound" in info:  # approximate solvers: the bound they report, next to sin θ
                note = f"{ctx['solver_']}: bound {info['error_bound']:.2g}"
            elif solver == "auto":
                note = ctx["solver_"]
            return np.asarray(model.components_), getattr(model, "n_passes_", None), note
        from daskpca.solvers import SOLVERS
        from daskpca.solvers._base import ComponentRequest

        ctx["api"] = f"daskpca.solvers.{solver}.solve"
        res = SOLVERS[solver].solve(X, ComponentRequest(case.k, case.n, case.d), random_state=0)
        return res.components, res.n_passes, None

    return run


def _load_numpy(path):
    import zarr

    return zarr.open_array(path, mode="r")[...]


def m_sklearn(svd_solver):
    def run(path, case, ctx):
        from sklearn.decomposition import PCA

        total = psutil.virtual_memory().total
        if case.nbytes > total / 3:
            return "skip", None, f"input {case.nbytes / GIB:.1f} GiB > RAM/3"
        X = _load_numpy(path)  # timed: an in-memory method has to load the data
        model = PCA(n_components=case.k, svd_solver=svd_solver, random_state=0).fit(X)
        return model.components_, 1, None

    return run


def m_dask_ml(svd_solver):
    def run(path, case, ctx):
        try:
            from dask_ml.decomposition import PCA
        except Exception as exc:  # not installed / broken with this dask
            return "skip", None, f"dask-ml unavailable: {type(exc).__name__}: {exc}"[:120]
        X = _open_dask(path)
        kwargs = dict(n_components=case.k, svd_solver=svd_solver, random_state=0)
        if svd_solver == "randomized":
            kwargs["iterated_power"] = 3
        if svd_solver == "full":
            # dask-ml's exact path is TSQR, which needs a single column block.
            X = X.rechunk({1: -1})
        model = PCA(**kwargs).fit(X)
        return np.asarray(model.components_), None, None

    return run


def m_xeofs(path, case, ctx):
    try:
        import xarray as xr
        import xeofs
    except Exception as exc:
        return "skip", None, f"xeofs unavailable: {type(exc).__name__}: {exc}"[:120]
    a = _open_dask(path)
    # xeofs needs index coordinates on both dims (it stacks them into a MultiIndex).
    X = xr.DataArray(a, dims=("sample", "feature"), coords={"sample": np.arange(a.shape[0]), "feature": np.arange(a.shape[1])})
    model = xeofs.single.EOF(n_modes=case.k, random_state=0)
    model.fit(X, dim="sample")
    comps = model.components().transpose("mode", "feature").values
    return np.asarray(comps), None, f"xeofs {xeofs.__version__} solver=auto"


def method_function(name: str):
    """The ``run(path, case, ctx)`` function of a method name (see the module docstring)."""
    if name == "floor-read":
        return m_floor_read
    if name == "floor-gram":
        return m_floor_gram
    if name.startswith("daskpca-randomized-q"):  # fixed power iterations q (and oversampling p): -q1, -q1-p20
        q, _, p = name.removeprefix("daskpca-randomized-q").partition("-p")
        return m_daskpca("randomized", n_power_iter=int(q), **({"n_oversamples": int(p)} if p else {}))
    if name.startswith(("daskpca-als-i", "daskpca-ppca-i")):  # exactly N iterations (tol=0): cost per pass
        solver, _, iterations = name.removeprefix("daskpca-").partition("-i")
        return m_daskpca(solver, max_iter=int(iterations), tol=0.0)
    if name.startswith(("daskpca-krylov-t", "daskpca-auto-t")):  # accuracy asked: -t1e-4
        solver, _, tol = name.removeprefix("daskpca-").partition("-t")
        return m_daskpca(solver, tol=float(tol))
    if name.startswith("daskpca-krylov-p"):  # a fixed number of passes, no tol: -p4
        return m_daskpca("krylov", max_passes=int(name.removeprefix("daskpca-krylov-p")))
    if name == "floor-read-zarrs":
        return m_floor_read_zarrs
    if name.startswith("daskpca-"):
        return m_daskpca(name.removeprefix("daskpca-"))
    if name.startswith("sklearn-"):
        return m_sklearn(name.removeprefix("sklearn-"))
    if name.startswith("dask-ml-"):
        return m_dask_ml(name.removeprefix("dask-ml-"))
    if name == "xeofs":
        return m_xeofs
    raise ValueError(f"unknown method {name!r}")
