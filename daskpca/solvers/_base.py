"""The contract every solver fulfils.

A solver is a module with one function::

    solve(X, request, *, random_state=None, **options) -> SolverResult

``X`` is a validated dask array (2-D, float32/float64, known chunks; see
``daskpca._validation.as_dask_matrix``). The solver builds the dask graph of each pass and
computes it once per pass; it never loads the whole input, and it reports how many full reads it
made in ``SolverResult.n_passes``. It checks for NaN/±inf inside its first pass
(``_validation.find_nonfinite`` per block, ``raise_if_nonfinite`` on the merged count).

**The feature stage (optional).** Masks of wholly-missing features, weights and standardisation
(see :mod:`daskpca._features`) need per-feature statistics that only a read of the data gives. A
solver that can take them from its own first pass defines ``fuses_features(spec) -> bool`` and
accepts ``features=spec`` in ``solve``: it resolves the stage (``spec.resolve(finite_count,
n_samples, variance)``), solves on ``Z = X[:, keep]·factor`` and returns the stage in
``SolverResult.features``. A solver that does not is given ``Z`` after one generic extra read
(``daskpca._features.solve``); it needs to do nothing.

**The declaration.** Each solver module ends with one :class:`SolverDeclaration` (``DECLARATION``),
registered in :data:`daskpca.solvers.SOLVERS`: its ``solve``; its cost model (``cost(PlanInput)
-> Cost``: passes for the accuracy planned, flops, task memory, result size; its host flop rate;
what a device changes, ``on_device``); its capabilities — the options it takes (estimator
parameters passed as keyword arguments), exact, the exact road for a tall or wide shape, certifies
a ``tol``, a fallback where no exact solver fits, accepts missing values (NaN is a missing value,
not an error), squares the data (its eigenvalues come from XᵀX or XXᵀ, formed or applied, so they
carry an absolute error of ~ε·λ_max: the estimator warns when kept ones fall below that), fuses
the feature stage, its most passes. The planner, the estimator and the CLI read solvers only
through it.

The estimator (``daskpca.pca.PCA``) turns a ``SolverResult`` into fitted attributes: it fixes the
signs, derives ratios, singular values, noise variance and distortion. ``daskpca._features.solve``
is the only caller of ``solve``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from numbers import Integral, Real
from typing import NamedTuple

import numpy as np

from ..exceptions import InputError, InputTypeError
from ..passes import merge_task_bytes, sketch_task_bytes


@dataclass(frozen=True)
class SolverResult:
    """What a solver hands back to the estimator (all small, all NumPy, all float64).

    Attributes
    ----------
    components : ndarray of shape (k, d)
        Orthonormal rows, ordered by decreasing explained variance. Signs are not normalised
        yet (the estimator does that).
    explained_variance : ndarray of shape (k,)
        Eigenvalues of the sample covariance (``ddof=1``) along each component.
    mean : ndarray of shape (d,)
    n_samples : int
    total_variance : float
        Trace of the sample covariance (``ddof=1``): the sum of *all* eigenvalues, needed for
        ratios even when only k components were computed.
    n_passes : int
        Full reads of the input this fit made.
    spectrum : ndarray of shape (min(n, d),) or None
        Every eigenvalue of the sample covariance, when the solver has them (needed for
        ``n_components="mle"``); ``None`` for solvers that compute only the leading ones.
    info : dict
        Solver diagnostics (iterations, convergence, missing fraction, noise variance, the
        sufficient statistics for exact updates, ...). JSON-able values or NumPy arrays.
    features : FeatureStage or None
        The resolved feature stage (:class:`daskpca._features.FeatureStage`) when the solver was
        given one; components, mean and variances then describe ``Z = X[:, keep]·factor``.
    """

    components: np.ndarray
    explained_variance: np.ndarray
    mean: np.ndarray
    n_samples: int
    total_variance: float
    n_passes: int
    spectrum: np.ndarray | None = None
    info: dict = field(default_factory=dict)
    features: object = None


@dataclass(frozen=True)
class ComponentRequest:
    """The user's ``n_components`` and the shape it applies to.

    Solvers that compute the full spectrum call :meth:`resolve` with it; solvers that compute
    only the leading components call :meth:`fixed` (a fraction or ``"mle"`` cannot be honoured
    without the full spectrum, and that is said clearly).
    """

    value: int | float | str | None
    n_samples: int
    n_features: int

    # Derived once (plain attributes: read all along the road, each a call otherwise).
    upper_bound: int = field(init=False)  # min(n_samples, n_features)
    needs_spectrum: bool = field(init=False)  # choosing k needs every eigenvalue (a fraction or 'mle')
    most_components: int = field(init=False)  # what a fit computes: upper_bound with a spectrum rule, else k

    def __post_init__(self):
        value, bound = self.value, min(self.n_samples, self.n_features)
        spectrum = isinstance(value, str) or (isinstance(value, Real) and not isinstance(value, (Integral, bool, np.bool_)))
        fixed = value if isinstance(value, Integral) and not isinstance(value, (bool, np.bool_)) else bound
        for name, derived in dict(upper_bound=bound, needs_spectrum=spectrum,
                                  most_components=bound if spectrum else int(fixed)).items():
            object.__setattr__(self, name, derived)

    def validate(self) -> None:
        """Raise for a value that no solver can honour on this shape."""
        value, bound = self.value, self.upper_bound
        if value is None:
            return
        if isinstance(value, str):
            if value != "mle":
                raise InputError(
                    f"n_components={value!r} is not understood: use an int in [1, {bound}], "
                    "a float in (0, 1) for a variance fraction, 'mle', or None."
                )
            if self.n_samples < self.n_features:
                raise InputError(
                    f"n_components='mle' needs n_samples >= n_features; got {self.n_samples} "
                    f"samples and {self.n_features} features. Use an int or a variance "
                    "fraction such as 0.95 instead."
                )
            return
        if isinstance(value, (bool, np.bool_)):
            raise InputTypeError(f"n_components={value!r}: expected an int, a float in (0, 1), 'mle' or None.")
        if isinstance(value, Integral):
            if not 1 <= value <= bound:
                raise InputError(
                    f"n_components={value} is out of range: with {self.n_samples} samples and "
                    f"{self.n_features} features it must be between 1 and {bound} "
                    "(min(n_samples, n_features))."
                )
            return
        if isinstance(value, Real):
            if not 0.0 < value < 1.0:
                raise InputError(
                    f"n_components={value!r}: a float is read as the fraction of variance to "
                    "explain and must lie strictly between 0 and 1 (e.g. 0.95); for a number "
                    "of components pass an int."
                )
            return
        raise InputTypeError(
            f"n_components={value!r} has type {type(value).__name__}: expected an int, a "
            "float in (0, 1), 'mle' or None."
        )

    def fixed(self) -> int:
        """k for solvers that compute only the leading components."""
        if self.needs_spectrum:
            raise InputError(
                f"n_components={self.value!r} chooses k from the full spectrum, which this "
                "solver does not compute. Pass an int, or use solver='covariance' (n ≫ d), "
                "'gram' (n ≪ d) or 'tsqr', which compute every eigenvalue."
            )
        return self.upper_bound if self.value is None else int(self.value)

    def resolve(self, spectrum: np.ndarray) -> int:
        """k chosen from all eigenvalues of the sample covariance (descending)."""
        value = self.value
        if value is None:
            return self.upper_bound
        if value == "mle":
            return minka_mle(spectrum, self.n_samples)
        if self.needs_spectrum:
            total = spectrum.sum()
            if total <= 0:
                return 1
            ratio = np.cumsum(spectrum) / total
            # Smallest k whose cumulative ratio reaches the fraction (scikit-learn's rule).
            return int(min(np.searchsorted(ratio, value, side="right") + 1, len(spectrum)))
        return int(value)


def minka_mle(spectrum: np.ndarray, n_samples: int) -> int:
    """Minka's (2000) Laplace-approximation choice of the dimensionality.

    T. P. Minka, "Automatic choice of dimensionality for PCA", NIPS 2000. Same rule as
    scikit-learn's ``n_components='mle'``: the k in [1, len(spectrum)) with the largest
    log-likelihood.
    """
    spectrum = np.asarray(spectrum, dtype=np.float64)
    n_features = len(spectrum)
    best_k, best_ll = 1, -np.inf
    for k in range(1, n_features):
        ll = _minka_log_likelihood(spectrum, k, n_samples)
        if ll > best_ll:
            best_k, best_ll = k, ll
    return best_k


def _minka_log_likelihood(spectrum: np.ndarray, rank: int, n_samples: int) -> float:
    from scipy.special import gammaln

    n_features = len(spectrum)
    if spectrum[rank - 1] < 1e-15:
        return -np.inf
    pu = -rank * math.log(2.0)
    for i in range(1, rank + 1):
        pu += gammaln((n_features - i + 1) / 2.0) - math.log(math.pi) * (n_features - i + 1) / 2.0
    pl = -np.sum(np.log(spectrum[:rank])) * n_samples / 2.0
    v = max(np.sum(spectrum[rank:]) / (n_features - rank), 1e-15)
    pv = -math.log(v) * n_samples * (n_features - rank) / 2.0
    m = n_features * rank - rank * (rank + 1.0) / 2.0
    pp = math.log(2.0 * math.pi) * (m + rank) / 2.0
    spectrum_ = spectrum.copy()
    spectrum_[rank:n_features] = v
    pa = 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        for i in range(rank):
            rest = slice(i + 1, n_features)
            terms = (spectrum[i] - spectrum[rest]) * (1.0 / spectrum_[rest] - 1.0 / spectrum_[i])
            pa += np.sum(np.log(terms)) + math.log(n_samples) * (n_features - i - 1)
    return pu + pl + pv + pp - pa / 2.0 - rank * math.log(n_samples) / 2.0


# ---------------------------------------------------------------------------------- checkpoints


class NoCheckpoint:
    """The state holder when no checkpoint is kept: never loads, never writes."""

    path = None
    resumed_from: int | None = None

    def load(self) -> None:
        return None

    def save(self, state: dict) -> None:
        pass

    def clear(self) -> None:
        pass


def open_checkpoint(checkpoint, X, **job):
    """The solvers' side of the checkpoint interface: the state holder of this job.

    ``checkpoint`` is what the solver received: ``None`` (no state kept: a :class:`NoCheckpoint`)
    or an object whose ``open(X, **job)`` returns one with ``load() -> dict | None``,
    ``save(state)``, ``clear()``, ``path`` and ``resumed_from`` — the estimator layer passes a
    :class:`daskpca.store.checkpoint.CheckpointFile` (:func:`daskpca._features.solve` opens the
    path the estimator was given). ``job`` identifies the job: JSON-able values, plus
    ``random_state`` and arrays (e.g. ``init``, weights), which the opener digests. Solvers
    never import the store: they write their state through this interface.
    """
    if checkpoint is None:
        return NoCheckpoint()
    if not callable(getattr(checkpoint, "open", None)):
        raise InputTypeError(
            f"checkpoint={checkpoint!r:.60}: a solver takes a checkpoint opened by the estimator layer "
            "(daskpca.store.checkpoint.CheckpointFile(path)) or None. Pass the path to the estimator instead, "
            "e.g. PCA(checkpoint='model.checkpoint.npz').")
    return checkpoint.open(X, **job)



# ---------------------------------------------------------------------------------- declarations

#: The host's rate for a solver's pass flops when its declaration names none: dense GEMM/SYRK
#: kernels, measured on the 2-core development machine at 56–88 GF/s (benchmarks/README.md).
DENSE_FLOPS_PER_SECOND = 60e9
FLOAT64 = 8


@dataclass(frozen=True)
class PlanInput:
    """What a cost model sees of one input: metadata only, never data.

    ``chunks`` are the dask chunks ``(row blocks, column strips)``; ``itemsize`` the input's
    bytes per value; the rest are the estimator's knobs that change a solver's cost.
    """

    n: int
    d: int
    k: int
    chunks: tuple
    itemsize: int
    n_oversamples: int = 10
    n_power_iter: object = None
    tol: float | None = None
    max_passes: int | None = None
    options: dict = field(default_factory=dict)  # further estimator options a cost model reads (Hilbert's padding)
    #: ``(dx, dy)`` when the input is two fields read together, ``[X | Y]`` with ``d = dx + dy``
    #: (MCA's cross product, CCA's joint covariance); None for one matrix.
    fields: tuple | None = None

    # Derived once (plain attributes, not properties: the cost models read them many times).
    row_block: int = field(init=False)  # rows of the largest row block (all columns after regrouping)
    col_strip: int = field(init=False)  # columns of the largest column strip (all rows)
    row_tasks: int = field(init=False)  # row blocks: the tasks of a pass by rows
    block_in: int = field(init=False)  # bytes of the largest row block as stored
    block64: int = field(init=False)  # bytes of the largest row block in float64 (the copy a kernel computes on)
    ell: int = field(init=False)  # the sketching solvers' block width: k + oversamples, at most min(n, d)
    # The pass machinery's memory model, asked once per input rather than by every cost model:
    merge_column_bytes: int = field(init=False)  # a merge task of a tree of d-wide partials, per column
    sketch_task_bytes: int = field(init=False)  # the largest task of a sketching pass (ℓ + 1 columns)

    def __post_init__(self):
        derived = dict(row_block=max(self.chunks[0]), col_strip=max(self.chunks[1]), row_tasks=len(self.chunks[0]),
                       ell=min(self.k + self.n_oversamples, self.n, self.d))
        derived.update(block_in=derived["row_block"] * self.d * self.itemsize, block64=derived["row_block"] * self.d * FLOAT64)
        for name, value in derived.items():
            object.__setattr__(self, name, value)
        object.__setattr__(self, "sketch_task_bytes", sketch_task_bytes(self))
        # merge_task_bytes is linear in the partial's columns: a cost model multiplies.
        object.__setattr__(self, "merge_column_bytes", merge_task_bytes(self.d, 1))


class Cost(NamedTuple):
    """A solver's cost on one input (:class:`PlanInput`), predicted before any read: a plain
    record (a named tuple; ``cost._replace(...)`` for a changed copy).

    ``passes`` counts full reads of the input (an int, or a text such as ``"1/iter"`` for a solver
    whose passes are its iterations); ``flops`` those of the passes and of the final local solve;
    ``task_bytes`` the peak memory of its largest task; ``result_size`` the float64 values each
    task of a pass returns (moved between processes on a cluster); ``tasks`` the tasks of one pass
    (None: one per row block); ``copy_passes`` the passes over a temporary re-laid-out copy
    (written once) besides ``passes``; ``client_flops`` the small dense algebra on the client;
    ``most_passes`` the read budget of a solver that stops on convergence, for the plan's ``tol``,
    ``max_passes`` and options (None: ``passes`` is a fixed count) — the cost model states it, so
    the planner asks each solver once.
    """

    passes: int | str
    flops: float
    task_bytes: int
    note: str = ""
    result_size: int = 0
    tasks: int | None = None
    copy_passes: int = 0
    client_flops: float = 0.0
    most_passes: int | None = None


@dataclass(frozen=True)
class DeviceCost:
    """What changes when a solver's chunks live on a device: its pass ``flops`` (the final solve
    taken out where the root solves it there), that solve's ``local_seconds`` and ``task_bytes``
    (the device's wider merges)."""

    flops: float
    local_seconds: float
    task_bytes: int


class MissingDeclaration(InputError):
    """A solver registered without what the planner or the estimator needs of it."""


@dataclass(frozen=True)
class SolverDeclaration:
    """One solver, declared once in its own module: how it solves, what it costs, what it can do.

    The planner (:mod:`daskpca._plan`) loops over the registered declarations
    (:func:`daskpca.solvers.register`); the estimator runs ``solve`` through the feature stage;
    the knob refusals and the CLI's help read ``options``. No other table names a solver.

    Parameters
    ----------
    name : str
        The public name (``PCA(solver=name)``).
    solve : callable
        ``solve(X, request, *, random_state=None, **options) -> SolverResult`` (the module notes);
        a coupled path's takes both fields (:mod:`daskpca.solvers.cross_covariance`,
        :mod:`daskpca.solvers.canonical`).
    cost : callable
        ``cost(PlanInput) -> Cost``: passes, flops, task memory, result size. Required.
    summary : str
        A few words for plans and reasons ("one pass building the d×d covariance").
    reason : callable or None
        ``reason(n, d) -> str``: why the planner takes it for this shape (``exact_for`` solvers);
        ``reason(n, dx, dy)`` for two fields read together (``PlanInput.fields``).
    too_large : callable or None
        ``too_large(n, d, task_bytes) -> str`` (``too_large(n, dx, dy, task_bytes)`` for two
        fields): why the planner passes this exact road over where its task does not fit (None:
        the planner's own sentence, naming the budget).
    flop_rate : float
        The host's rate for its pass flops (flops/s; the time model's).
    device_rate : str
        The key of :func:`daskpca.passes._device.rate` its pass kernels run at on a device.
    on_device : callable or None
        ``on_device(PlanInput, flops, task_bytes, device) -> DeviceCost`` where a device changes
        more than the rate (the final eigenproblem solved at the root, wider merges); ``device``
        is the planner's pricing (``local_seconds(size, kind)``, ``memory``).
    options : tuple of str
        Estimator parameters it takes as keyword arguments (the estimator passes exactly those,
        and refuses the others: :meth:`daskpca.models.Estimator.refuse_ignored_knobs`).
    exact : bool
        Its answer is exact to round-off: it meets any ``tol``.
    exact_for : {"tall", "wide", "any"} or None
        The exact road the planner takes for that shape (tall: n ≥ d; wide: n < d; any: both, for
        a registry with one exact road, HilbertPCA's).
    certifies : callable or None
        ``certifies(tol, max_passes) -> bool``: an approximate solver that guarantees ``tol``
        within the read budget (block Krylov); the planner weighs it against the exact roads.
    fallback : {"approximate", "last-resort", "instead"} or None
        Where no exact solver fits a task: "approximate" ones are tried first (a certifying one
        before the others), then the "last-resort"; "instead": the one other road, taken whether
        its own task fits or not (the coupled estimators' second paths, whose tasks hold a block
        and thin matrices where the exact road holds a dx×dy or d² one).
    accepts_missing : bool
        NaN is a missing value, not an error (the planner's choice for data with NaN).
    squares_the_data : bool
        Its eigenvalues come from XᵀX or XXᵀ (formed or applied): the estimator warns for kept
        ones below ~ε·λ_max.
    check_options : callable or None
        ``check_options(options)``: refuses (raises, naming the value and the fix) values of its
        ``options`` it cannot honour, before any read, for whichever estimator runs it.
    fuses_features : callable or None
        ``fuses_features(spec) -> bool``: it resolves the feature stage in its own first pass.
    reads_strips : bool
        Its passes read column strips (every row of a range of columns). Input stored by rows only
        (one time step per chunk), whose one strip would be the whole field, then takes the shared
        re-layout step: one read of the input into a temporary copy in strips, the passes over the
        copy (:class:`~daskpca.passes._geometry.ColumnStrips`, run around ``solve`` by
        :func:`daskpca._features.solve`; planned by :func:`~daskpca.passes._geometry.relaid_out`).
    earlier_bounds : str or None
        The keyword of ``solve`` that takes an earlier fit's bound after each pass (Hilbert's
        ``solver_info_["bound_history"]``, MCA's ``["bounds"]``) to predict its passes from the
        first, where it simulates nothing of its own (:func:`.krylov.passes_from_history`): a
        watched refit of a fitted estimator of the same field gives its own last fit's.
    """

    name: str
    solve: object
    cost: object
    summary: str = ""
    reason: object = None
    too_large: object = None
    flop_rate: float = DENSE_FLOPS_PER_SECOND
    device_rate: str = "sketch-flops"
    on_device: object = None
    options: tuple = ()
    exact: bool = False
    exact_for: str | None = None
    certifies: object = None
    fallback: str | None = None
    accepts_missing: bool = False
    squares_the_data: bool = False
    fuses_features: object = None
    check_options: object = None
    reads_strips: bool = False
    earlier_bounds: str | None = None

    def __post_init__(self):
        # The declaration protocol the estimators read (shared with Hilbert's solver modules and
        # MCA's paths, which declare the same names as module constants): plain attributes.
        for protocol, value in (("OPTIONS", self.options), ("EXACT", self.exact), ("ACCEPTS_MISSING", self.accepts_missing),
                                ("SQUARES_THE_DATA", self.squares_the_data)):
            object.__setattr__(self, protocol, value)

    def check(self) -> None:
        """Raise :class:`MissingDeclaration` naming what is missing (before it is registered)."""
        missing = [what for what, ok in (("solve", callable(self.solve)), ("a cost model (cost=)", callable(self.cost)))
                   if not ok]
        if not isinstance(self.name, str) or not self.name:
            missing.insert(0, "a name")
        if self.exact_for not in (None, "tall", "wide", "any"):
            raise MissingDeclaration(f"solver {self.name!r}: exact_for={self.exact_for!r}; expected 'tall', 'wide', "
                                     "'any' or None.")
        if self.fallback not in (None, "approximate", "last-resort", "instead"):
            raise MissingDeclaration(f"solver {self.name!r}: fallback={self.fallback!r}; expected 'approximate', "
                                     "'last-resort', 'instead' or None.")
        if missing:
            raise MissingDeclaration(
                f"solver {self.name!r} cannot be registered without {' and '.join(missing)}: the planner prices every "
                "registered solver before any read. Declare it, e.g. SolverDeclaration(name, solve, cost=lambda shape: "
                "Cost(passes=1, flops=..., task_bytes=...)).")
