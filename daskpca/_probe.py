"""The plan's probe: block Krylov's passes estimated from a sample of the rows (issue 41).

Before any read the planner cannot tell a halving spectrum (2 passes) from a noise continuum
(8–10): its point estimate is a prior (:func:`daskpca.solvers.krylov.predicted_passes`). The
probe, asked for with ``PCA(...).plan(X, probe=True)`` (``daskpca inspect --probe``), pays a
stated, small read for a better one:

1. **Rows** (:func:`probe_rows`): at most :data:`PROBE_FRACTION` = 1 % of the rows, as whole
   storage chunks spread evenly along the sample axis (a one-step-per-chunk archive of 8760
   steps: every ~100th step, 87 rows). Where one storage row block is larger than 1 % of the
   rows, a slice of rows from each of up to :data:`PROBE_BLOCKS` blocks spread evenly (the
   chunks holding them are decoded whole: say 4 chunks, however large).
2. **Spectrum** (:func:`sample_spectrum`): the m probed rows, centred on their own mean, give
   the m × m Gram G = X̃_s·X̃_sᵀ; its eigenvalues are those of the sample scatter X̃_sᵀX̃_s, scaled by
   (n − 1)/(m − 1) to the scatter C = X̃ᵀX̃ of all n rows; its trace (the probed rows' total
   variance, so scaled) estimates trace C, hence the tail's mass. The floor a few rows put under
   every sample eigenvalue (their smallest) is taken off (:func:`without_floor`).
3. **Passes** (:func:`probe`): the same simulation the fit runs on itself from pass 2
   (:func:`~daskpca.solvers.krylov.model_spectrum` — the top k values and a tail carrying the
   rest of the trace — and :func:`~daskpca.solvers.krylov.simulated_passes`) for the tol asked
   (or the certified default's), whose pass count is the point estimate.

The plan then counts the chosen block Krylov road at that many passes (plus the feature stage's
reads), its time the plan's per-pass time × (passes + the probe's fraction of a pass), and says
so (``"probed: 87 of 8760 rows (1.0 %), point estimate 7 passes from their spectrum"``). A fit
given that plan (``fit(X, plan=plan)``) starts from the probe's simulated bounds: its progress
line shows an ETA from the first pass ("ETA from the probe") until the fit's own simulation from
pass 2 replaces it.

Where the probe cannot say anything (fewer than 100 rows: 1 % is less than one; the probed rows
have no variance; fewer probed rows than k + 2, too few for k values and the one after;
an input that is not a plain stored read, whose sampled rows would compute whole task blocks)
it reads nothing or discards what it read, the prior point estimate stands and the plan says
why.

Memory: the m probed rows in float64 (m·d·8 bytes: 87 × 65 160 is 45 MB) and their m × m Gram,
on the client. Time: m/n of a pass's read, one m·m·d product and the simulation (a few hundred
diagonal entries, one small fit per pass predicted).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from .passes import geometry_of, plain_source
from .solvers import krylov

#: The road the probe predicts (its simulation is block Krylov's own iteration and bound).
ROAD = krylov.DECLARATION
#: Most rows the probe reads, as a fraction of n (the issue's "≤ 1 % of the data").
PROBE_FRACTION = 0.01
#: Where one storage row block holds more than 1 % of the rows: slices from this many blocks.
PROBE_BLOCKS = 4


@dataclass(frozen=True)
class Probe:
    """What the probe read and what it predicts.

    ``rows`` of ``n_samples`` read (``chunks`` storage row blocks); ``passes`` the point estimate
    of block Krylov's passes for ``target`` (None: the prior stands, ``reason`` says why);
    ``history`` the simulated bound after each of those passes (what a fit given this plan starts
    its ETA from); ``seconds`` the probe's own wall time (read, Gram, simulation).
    """

    rows: int
    n_samples: int
    chunks: int
    passes: int | None
    history: tuple = ()
    target: float | None = None
    reason: str = ""
    seconds: float = 0.0
    prior: int = 0  # the planner's point estimate without the probe (krylov.predicted_passes)
    road: str = ROAD.name  # the plan's estimate the point estimate is for

    @property
    def fraction(self) -> float:
        """The probe's read as a fraction of one pass."""
        return self.rows / max(self.n_samples, 1)

    def describe(self) -> str:
        read = f"probed: {self.rows} of {self.n_samples} rows ({100 * self.fraction:.1f} %)"
        if self.passes is None:
            return f"{read}; no point estimate from them ({self.reason}): the prior point estimate stands"
        return (f"{read}, point estimate {self.passes} pass{'es' if self.passes != 1 else ''} from their spectrum "
                f"for sin θ ≤ {self.target:g} (the probe: {self.fraction:.3g} of a pass, {self.seconds:.2g} s)")


def probe_rows(n: int, storage_rows: int, fraction: float = PROBE_FRACTION) -> list[tuple[int, int]]:
    """The row ranges ``[start, stop)`` the probe reads: at most ``fraction``·n rows (floor).

    Whole storage row blocks of ``storage_rows`` rows, spread evenly along the sample axis (the
    middle of each of ``count`` equal stretches); where one block is larger than the budget, a
    slice of budget / :data:`PROBE_BLOCKS` rows from the start of each of up to that many blocks
    spread evenly. Empty where the budget is less than 2 rows (n < 200 at 1 %): nothing to
    centre.
    """
    budget = int(math.floor(n * fraction))
    if budget < 2:
        return []
    storage_rows = max(int(storage_rows), 1)
    blocks = math.ceil(n / storage_rows)
    if storage_rows <= budget:
        count, length = min(blocks, budget // storage_rows), storage_rows
    else:
        count = min(blocks, PROBE_BLOCKS, budget // 2)
        length = budget // count
    picks = ((np.arange(count) + 0.5) * blocks / count).astype(np.int64)
    return [(int(b) * storage_rows, min(int(b) * storage_rows + length, n)) for b in picks]


def affordable(matrix, rows_of=None) -> bool:
    """Whether a fit may probe ``matrix`` unasked (someone watches its passes, so the ETA from the
    first pass is worth a read): its rows come from a plain stored array, memory, or ``rows_of``
    (a labeled input's reader, :func:`daskpca.labeled.row_reader`), in storage row blocks no larger
    than the probe's budget, so the probe decodes whole chunks of ≤ 1 % of the rows and nothing
    beyond them. A store of larger row blocks (a year a chunk) would decode whole blocks for a
    slice of each: asked for with ``plan(X, probe=True)`` only."""
    n = matrix.shape[0]
    geometry = geometry_of(matrix)
    storage_rows = geometry.storage_rows if geometry is not None else matrix.chunks[0][0]
    readable = rows_of is not None or plain_source(matrix) is not None
    return bool(probe_rows(n, storage_rows)) and storage_rows <= n * PROBE_FRACTION and readable


def sample_spectrum(rows: np.ndarray, n_samples: int, weights: np.ndarray | None = None,
                    standardize: bool = False) -> tuple[np.ndarray, float]:
    """``(values, total)``: the eigenvalues (descending, m − 1 of them) of the probed rows' scatter
    and its trace, both scaled by (n − 1)/(m − 1) to estimate those of the scatter C of all
    ``n_samples`` rows (see the module notes).

    ``rows``: (m, d). Features with a NaN in the sample are left out (a land mask: the fit drops
    them too); ``weights`` (d,) multiply the features and ``standardize`` divides each by its
    sample deviation, as the fit's feature stage would. Cost: one m·m·d product (float64).
    """
    X = np.asarray(rows, dtype=np.float64)
    keep = ~np.isnan(X).any(axis=0)
    X = X[:, keep]
    if weights is not None:
        X = X * np.asarray(weights, dtype=np.float64)[keep]
    X = X - X.mean(axis=0)
    if standardize:
        scale = X.std(axis=0, ddof=1)
        X = X / np.where(scale > 0, scale, 1.0)
    m = X.shape[0]
    values = np.clip(np.linalg.eigvalsh(X @ X.T)[::-1][:m - 1], 0.0, None)  # centring leaves m − 1
    factor = (n_samples - 1) / (m - 1)
    return values * factor, float(np.sum(X * X)) * factor


def without_floor(values: np.ndarray) -> np.ndarray:
    """The sample's eigenvalues less their smallest: the floor every one of them carries.

    With m ≪ d rows a noise continuum of total variance V lifts *every* sample eigenvalue by
    about V/m (the few rows spread it over all m − 1 directions; Marchenko–Pastur), the top ones
    included. Kept as they are, the top k sit on that floor, the values after them look like a
    fast-decaying tail starting there, and the simulated fit converged far too soon: 4–5 passes
    predicted where a continuum took 8–10, 3 where a reanalysis-like field took 5–6 (24 of 2400
    rows). Less their smallest value, the head is the signal and the tail's mass (the trace less
    the head, unchanged) goes to a flat continuum (:func:`~daskpca.solvers.krylov.model_spectrum`):
    within 1.5× of the passes made on every test spectrum (tests/test_plan.py). On a fast-decaying
    spectrum the smallest value is near 0 and nothing changes.
    """
    floor = float(values[-1]) if values.size else 0.0
    return np.clip(values - floor, 1e-12 * float(values[0]), None) if values.size else values


def probe(matrix, k: int, *, tol: float | None, max_passes: int | None, n_oversamples: int = 10,
          weights: np.ndarray | None = None, standardize: bool = False, in_memory=None, rows_of=None) -> Probe:
    """Read the probe's rows of ``matrix`` (n × d, as the fit reads it) and predict block Krylov's
    passes for ``tol`` (see the module notes). ``tol`` None: block Krylov runs its read budget,
    nothing to estimate (nothing read). Reads ≤ 1 % of the rows, once: from the stored array
    ``matrix`` reads (:func:`~daskpca.passes.plain_source`), ``in_memory`` (the NumPy array
    ``matrix`` was made from) or ``rows_of(start, stop)`` (a labeled input's rows, read from the
    input itself: :func:`daskpca.labeled.row_reader`)."""
    started = time.perf_counter()
    n, d = matrix.shape
    budget, prior = krylov.pass_budget(tol, max_passes), krylov.predicted_passes(tol, max_passes)
    geometry = geometry_of(matrix)
    storage_rows = geometry.storage_rows if geometry is not None else matrix.chunks[0][0]
    ranges = probe_rows(n, storage_rows)
    wanted = sum(stop - start for start, stop in ranges)

    def fallback(reason: str, rows: int = 0) -> Probe:
        return Probe(rows, n, len(ranges) if rows else 0, None, target=tol, reason=reason,
                     seconds=time.perf_counter() - started, prior=prior)

    if tol is None:
        return fallback(f"no tol: block Krylov reads its budget of {budget} passes")
    if not ranges:
        return fallback(f"n = {n} samples: 1 % of them is less than 2 rows")
    if wanted < k + 2:
        return fallback(f"{wanted} rows give at most {wanted - 1} eigenvalues; k = {k} and the one after need "
                        f"{k + 2} rows, 1 % of n ≥ {100 * (k + 2)}")
    source = plain_source(matrix) if in_memory is None else in_memory
    if rows_of is None and source is not None:
        rows_of = lambda start, stop: np.asarray(source[start:stop])  # noqa: E731
    if rows_of is None:
        # A matrix computed by dask (a field stacked from several sample dims, a weighted input):
        # slicing it would compute the whole task blocks holding the rows, far more than 1 %.
        return fallback("the input is not a plain stored array: its sampled rows would compute whole task blocks")
    rows = np.concatenate([rows_of(start, stop) for start, stop in ranges])
    values, total = sample_spectrum(rows, n, weights, standardize)
    if not (total > 0 and values.size and values[0] > 0):
        return fallback("the probed rows have no variance (constant)", rows.shape[0])
    ell = min(k + n_oversamples, n, d)
    rank = min(n - 1, d)
    history = krylov.simulated_total(without_floor(values), total, rank, k, ell, tol, budget, n)
    if not history:
        return fallback("their spectrum has nothing to model", rows.shape[0])
    return Probe(rows.shape[0], n, len(ranges), len(history), tuple(float(b) for b in history), tol,
                 seconds=time.perf_counter() - started, prior=prior)
