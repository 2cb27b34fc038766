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
   variance, so scaled) estimates trace C, hence the tail's mass.
3. **Model** of C's spectrum, one of two, decided from the data (:func:`spikes_over_white_noise`):

   - *Spikes over white noise* where the probe's bulk is white noise's: m − 1 ≪ d rows of white
     noise σ² put their sample eigenvalues on the Marchenko–Pastur support σ²(√γ ∓ 1)², γ =
     d/(m − 1) (in covariance units), and a population spike λ = σ² + s at ℓ = λ(1 + γσ²/s) above
     it where s > σ²√γ, inside it otherwise (the BBP transition: Baik, Ben Arous & Péché 2005,
     Ann. Probab. 33; Baik & Silverstein 2006, J. Multivar. Anal. 97; Paul 2007, Stat. Sinica 17).
     The bulk is taken as white where it spans no more than MP's ratio of edges
     (:data:`WHITE_BULK_SPREAD`). The spikes above the edge are inverted (a quadratic), σ² is
     the trace less them over d, and the same theorem maps them forward to what the fit sees
     with all n rows, γ_f = d/(n − 1): spikes at λ(1 + γ_fσ²/s), the noise an MP bulk of ratio
     γ_f whose top σ²(1 + √γ_f)² is the k-th mode's gap (:func:`spiked_spectrum`). This is why
     the sample spectrum itself misleads there: at γ = 168 (20 rows of 3200 features) a spike of
     s = 28σ² sits 4 % above a bulk top at 196σ², where the fit with all 2000 rows sees it 6×
     above the bulk's 5.1σ²; the floor's model below predicted 11–12 passes where the fit made
     5–6. Of the k modes, those the probe cannot resolve (s below σ²√γ, or lost in the bulk's
     finite-m spread: at m = 20 a spike at 3× the edge) are put at :data:`UNRESOLVED_FRACTION`
     of its edge: the probe cannot say where they are below it (measured, see there).
   - *The sample spectrum less its floor* otherwise (fast decay, a coloured continuum, a
     plateau). Where the bulk's effective rank (from its first two moments) is at least the rows'
     m − 1, the rows resolve none of the tail (:func:`unresolved_tail`): the head is taken less
     the bulk's mean, the lift the tail's variance gives every sample value, and the tail is a
     geometric decay with the bulk's two moments (a plateau under λ_k: 10 passes predicted by the
     floor model, 6 by this one and made). Else (fast decay: the rows resolve the tail) the floor
     a few rows put under every sample eigenvalue (their smallest) is taken off
     (:func:`without_floor`), and :func:`~daskpca.solvers.krylov.model_spectrum` keeps the top k
     values and puts the rest of the trace in a tail.

4. **Passes** (:func:`probe`): the same simulation the fit runs on itself from pass 2
   (:func:`~daskpca.solvers.krylov.simulated_passes`) on that spectrum, for the tol asked (or the
   certified default's), whose pass count is the point estimate; the plan says which model
   (``"… from their spectrum (7 spikes over white noise σ² = 1.02 per feature, 3 of the k = 10
   modes below its detection edge …)"``).
   Measured (benchmarks/probe.py): within 0.69–1.5× of the passes made on every case there and in
   tests/test_plan.py at tol 1e-4 and 1e-6 (0.69–1.4× while the simulation collapsed each bin of
   the tail to one value: :data:`~daskpca.solvers.krylov.BIN_PARTS`); the floor's model alone:
   1.25–1.5× on the reanalysis and 2.0–2.2× on the archive cases (this one: 1.12–1.17× and
   1.4–1.5×), but 0.85–1.0× on the continuum (this one: 0.69–0.7×: of its k = 10 modes the probe
   resolves one, the other nine are put at 0.8 of its edge where the tenth is near the noise).
   Where k reaches into the noise (k above the modes there are, or no mode above it) the fit runs
   its budget and both models predict about half of it.

The plan then counts the chosen block Krylov road at that many passes (plus the feature stage's
reads), its time changed by the passes gained or saved at a later pass's time and by the client's
work for that many passes (:meth:`daskpca._plan.Plan.with_probe`), and says
so (``"probed: 87 of 8760 rows (1.0 %), point estimate 7 passes from their spectrum"``). A fit
given that plan (``fit(X, plan=plan)``) starts from the probe's simulated bounds: its progress
line shows an ETA from the first pass ("ETA from the probe") until the fit can simulate itself
(after pass 2, on its own Ritz values: within a pass of the count made from pass 3 on, where
the probe's was off by up to 5 passes on a continuum just below λ_k).

The issue's other probe, "the spectrum of an earlier version of the same model in the store"
(:func:`from_model`, ``plan(X, probe=earlier)`` with a fitted PCA or a saved model's path; ``daskpca
fit --out MODEL --overwrite`` with the model it replaces): the same simulation on what that model
knows of its spectrum (:func:`earlier_spectrum`), reading nothing. A scheduled refit of the same
field on new rows has the spectrum that decides the passes in hand; 1 % of its rows has not.

Rows dask computes (a cube reshaped to rows, ``da.from_zarr(cube).reshape(n, -1)``; several
stacked sample dims) are computed from the blocks they come from where those are few
(:func:`computed_rows`: at most :data:`COMPUTED_SHARE` of the graph's tasks).

Where the probe cannot say anything (fewer than 100 rows: 1 % is less than one; the probed rows
have no variance; fewer probed rows than k + 2, too few for k values and the one after;
an input that is not a plain stored read, whose sampled rows would compute whole task blocks)
it reads nothing or discards what it read, the prior point estimate stands and the plan says
why.

Memory: the m probed rows in float64 (m·d·8 bytes: 87 × 65 160 is 45 MB) and their m × m Gram,
on the client. Time: m/n of a pass's read, one m·m·d product and the simulation (a few hundred
diagonal entries, one small fit per pass predicted; the spiked model's MP quantiles: one
interpolation over min(n − 1, d) values).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from .passes import NUMPY, geometry_of, on_device, plain_source, ungrouped
from .solvers import krylov

#: The road the probe predicts (its simulation is block Krylov's own iteration and bound).
ROAD = krylov.DECLARATION
#: Most rows the probe reads, as a fraction of n (the issue's "≤ 1 % of the data").
PROBE_FRACTION = 0.01
#: Where one storage row block holds more than 1 % of the rows: slices from this many blocks.
PROBE_BLOCKS = 4
#: White noise is recognised where the probe's bulk (its values below the spikes) spans at most
#: this factor of the ratio of Marchenko–Pastur's edges, ((√γ + 1)/(√γ − 1))². Measured on white
#: noise under spikes: 0.85–0.98 of it (finite-m bulks fall inside the edges); coloured tails,
#: whose effective rank is below d: 1.10 (σ_i = 1/i), 1.22–1.28 (a plateau), ≥ 3 (fast decay).
WHITE_BULK_SPREAD = 1.05
#: Fewest bulk values the white-noise test reads (fewer: the spread says nothing).
WHITE_BULK_VALUES = 4
#: A mode the probe cannot resolve (its sample value inside the bulk) is put at this fraction of
#: the probe's detection edge σ²√γ (BBP). It is somewhere below that edge and the probe cannot say
#: where: at the edge the archive- and reanalysis-like fields were predicted within 1.0–1.33× but
#: continua (the k-th mode near the noise) 0.6×; at 0.8 all within 0.69–1.44× (benchmarks/probe.py,
#: tests/test_plan.py and 14 more fields); lower, the fields predict 1.5× and more.
UNRESOLVED_FRACTION = 0.8


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
    model: str = ""  # the spectrum the simulation ran on (SpikedNoise.describe, or the floor's)
    client_flops: float | None = None  # the client's work over those passes (krylov.client_flops; None: no estimate)
    earlier: str = ""  # the earlier model whose spectrum was simulated instead of rows (from_model): nothing read

    @property
    def fraction(self) -> float:
        """The probe's read as a fraction of one pass."""
        return self.rows / max(self.n_samples, 1)

    def describe(self) -> str:
        if self.earlier:
            source = f"probed: the spectrum of {self.earlier} (nothing read)"
            if self.passes is None:
                return f"{source}; no point estimate from it ({self.reason}): the prior point estimate stands"
            return (f"{source}, point estimate {self.passes} pass{'es' if self.passes != 1 else ''} from {self.model} "
                    f"for sin θ ≤ {self.target:g} ({self.seconds:.2g} s)")
        read = f"probed: {self.rows} of {self.n_samples} rows ({100 * self.fraction:.1f} %)"
        if self.passes is None:
            return f"{read}; no point estimate from them ({self.reason}): the prior point estimate stands"
        model = f" ({self.model})" if self.model else ""
        return (f"{read}, point estimate {self.passes} pass{'es' if self.passes != 1 else ''} from their spectrum"
                f"{model} for sin θ ≤ {self.target:g} (the probe: {self.fraction:.3g} of a pass, {self.seconds:.2g} s)")


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


#: A matrix dask computes (``da.from_zarr(cube).reshape(n, -1)``, a cast, a selection) is probed
#: where the graph of its sampled rows, culled from the whole, holds at most this share of the
#: whole graph's tasks: a cube of one step per chunk needs ~1 % (each row its own chunk's tasks);
#: row blocks larger than the sample, or rows a rechunk joins from column strips, need most of it.
COMPUTED_SHARE = 0.05


def computed_rows(matrix, ranges) -> tuple:
    """``(read, why_not)``: ``read()`` computes the rows ``ranges`` of the dask array ``matrix`` in
    one ``dask.compute`` (on the client's cluster where there is one), where their graph, culled from
    ``matrix``'s, holds at most :data:`COMPUTED_SHARE` of its tasks; else ``read`` is None and
    ``why_not`` says why: they would compute far more than 1 % of the input, or the chunks are not
    NumPy's (a device array's rows would have to come back to the host first). Metadata only."""
    import dask
    import dask.array as da

    matrix = ungrouped(matrix)  # rows joined into larger task blocks: sampled from the blocks joined
    if on_device(matrix) is not NUMPY:
        return None, "its chunks are not NumPy arrays"
    sample = da.concatenate([matrix[start:stop] for start, stop in ranges])
    needed = len(sample.dask.cull(set(dask.core.flatten(sample.__dask_keys__()))))
    share = max(needed - 2 * len(ranges) - 1, 0) / max(len(matrix.dask), 1)  # less the slices and the join
    if share > COMPUTED_SHARE:
        return None, (f"its sampled rows would compute {100 * share:.0f} % of its graph's tasks (whole task "
                      "blocks, or every block a rechunk joins)")
    return (lambda: np.asarray(sample.compute())), ""


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
    ranges = probe_rows(n, storage_rows)
    if not ranges or storage_rows > n * PROBE_FRACTION:
        return False
    return rows_of is not None or plain_source(matrix) is not None or computed_rows(matrix, ranges)[0] is not None


def sample_spectrum(rows: np.ndarray, n_samples: int, weights: np.ndarray | None = None,
                    standardize: bool = False) -> tuple[np.ndarray, float, int]:
    """``(values, total, features)``: the eigenvalues (descending, m − 1 of them) of the probed rows'
    scatter and its trace, both scaled by (n − 1)/(m − 1) to estimate those of the scatter C of all
    ``n_samples`` rows (see the module notes), and the features kept (d less those with a NaN).

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
    return values * factor, float(np.sum(X * X)) * factor, X.shape[1]


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
    spectrum the smallest value is near 0 and nothing changes. The probe's model where its bulk is
    not white noise's (where it is: :func:`spikes_over_white_noise`, whose spikes this model leaves
    barely above the tail, 1.5–2.2× the passes made).
    """
    floor = float(values[-1]) if values.size else 0.0
    return np.clip(values - floor, 1e-12 * float(values[0]), None) if values.size else values


def unresolved_tail(values: np.ndarray, total: float, k: int, rank: int) -> tuple | None:
    """``(values, multiplicities, effective rank)`` of C's spectrum where the probe's bulk (its
    sample values after the k-th) is a tail the rows cannot resolve, else None (then
    :func:`without_floor` models it).

    ``values``, ``total``: :func:`sample_spectrum`'s (m − 1 values, scatter units for n rows);
    ``rank``: C's most nonzero eigenvalues (min(n − 1, d)). A
    tail of population eigenvalues Σ_t sampled by m' = m − 1 − k centred rows (the dimensions the
    head leaves) gives a sample covariance S with E tr S = tr Σ_t and, for Gaussian rows (Wishart
    moments), E tr S² = ((tr Σ_t)² + (m' + 1)·tr Σ_t²)/m': so tr Σ_t² = (m'·tr S² − (tr S)²)/(m' + 1)
    from the bulk's values, and the tail's effective rank (tr Σ_t)²/tr Σ_t² is
    (tr S)²·(m' + 1)/(m'·tr S² − (tr S)²), whatever their scale. Where that is at least
    m − 1 the rows resolve none of it: every sample value, the head's too, sits on the tail's
    variance spread over the m − 1 directions (their mean: the bulk's), and the bulk's largest
    values are that spread's top, not a population value after λ_k. So the head is taken less the
    bulk's mean, and the tail (rank − k values, its mass the total less the head) is the geometric
    a·r^j with the same two moments ((1 + r)/(1 − r) is the effective rank), never above the
    head's last value. Measured (16 000 × 2000, 160 rows; tol 1e-4): a plateau of five modes under
    λ_k, then a decaying tail, was predicted 10 passes by the floor model and 6 by this one, the
    passes a simulation on the true spectrum makes (and the fit: 6); σ_i² = 1/i 8 and 6 (true 6).
    Where the effective rank is below m − 1 (fast decay: the rows resolve the tail) None: the
    floor model, which continues the sample's own trailing values, predicted those exactly.
    """
    head, bulk = values[:k], values[k:]
    dof = bulk.size
    if dof < WHITE_BULK_VALUES or not (bulk.sum() > 0 and total > 0):
        return None
    lift = float(bulk.mean())
    head = np.clip(head - lift, 1e-12 * float(values[0]), None)
    mass = float(total) - float(head.sum())  # the tail's, as C's trace less the head
    first, second = float(bulk.sum()), float(np.sum(bulk * bulk))
    if not (mass > 0 and dof * second > first * first):
        return None
    effective = first * first * (dof + 1) / (dof * second - first * first)  # (tr Σ_t)²/tr Σ_t², any common scale
    count = rank - k
    if effective < k + dof or count < 1:  # < m − 1: the rows resolve the tail
        return None
    ratio = min((effective - 1) / (effective + 1), 1.0)
    start = mass * (1 - ratio) / (1 - ratio**count) if ratio < 1 else mass / count
    tail = min(start, float(head[-1])) * ratio ** np.arange(count)
    return (*krylov.binned_spectrum(head, tail, k), effective)


def marchenko_pastur_quantiles(ratio: float, upper: np.ndarray) -> np.ndarray:
    """The values of the Marchenko–Pastur law of ``ratio`` y ≤ 1 (σ² = 1, support (1 ± √y)²) above
    which the fractions ``upper`` of it lie: its upper quantiles, from its density
    √((b − x)(x − a))/(2πyx) integrated on 4097 points packed at the edges (cos spacing)."""
    low, high = (1 - math.sqrt(ratio)) ** 2, (1 + math.sqrt(ratio)) ** 2
    x = low + (high - low) * (1 - np.cos(np.linspace(0.0, np.pi, 4097))) / 2
    density = np.sqrt(np.clip((high - x) * (x - low), 0.0, None)) / (2 * np.pi * ratio * x)
    cdf = np.concatenate([[0.0], np.cumsum((density[1:] + density[:-1]) / 2 * np.diff(x))])
    return np.interp(1.0 - np.asarray(upper, dtype=np.float64), cdf / cdf[-1], x)


@dataclass(frozen=True)
class SpikedNoise:
    """The probe's spectrum as spikes over white noise (see :func:`spikes_over_white_noise`), in
    covariance units (per row): ``noise`` σ² per feature, the population ``strengths`` λ_i − σ² of
    the spikes the probe resolved (descending) and its aspect ``ratio`` γ = d/(m − 1)."""

    noise: float
    strengths: np.ndarray
    ratio: float

    @property
    def edge(self) -> float:
        """The probe's detection edge σ²√γ: a weaker spike's sample value stays in the bulk (BBP)."""
        return self.noise * math.sqrt(self.ratio)

    def describe(self, k: int) -> str:
        hidden = max(k - self.strengths.size, 0)
        below = (f", {hidden} of the k = {k} modes below its detection edge, put at {UNRESOLVED_FRACTION:g} of it"
                 if hidden else "")
        spikes = f"{self.strengths.size} spike{'s' if self.strengths.size != 1 else ''}"
        return f"{spikes} over white noise σ² = {self.noise:.3g} per feature{below}"


def _spike_strength(value: np.ndarray, noise: float, ratio: float) -> np.ndarray:
    """The population strength s = λ − σ² whose sample eigenvalue is ``value`` (above the bulk):
    the larger root of s² − (ℓ − σ²(1 + γ))·s + γσ⁴ = 0, from ℓ = λ·(1 + γσ²/(λ − σ²))."""
    b = value - noise * (1 + ratio)
    return (b + np.sqrt(np.clip(b * b - 4 * ratio * noise * noise, 0.0, None))) / 2


def spikes_over_white_noise(values: np.ndarray, total: float, n: int, m: int, d: int) -> SpikedNoise | None:
    """The spiked covariance model fitted to the probe's spectrum, or None where its bulk is not
    white noise's (then :func:`without_floor` models it).

    ``values``, ``total``: :func:`sample_spectrum`'s (scatter units for n rows) from ``m`` rows of
    ``d`` features. In covariance units (÷ (n − 1)), with γ = d/(m − 1) > 1: white noise σ² puts
    the m − 1 sample eigenvalues on Marchenko–Pastur's support σ²(√γ ∓ 1)², and a population spike
    λ = σ² + s above it at ℓ = λ·(1 + γσ²/s) where s > σ²√γ, inside the bulk otherwise (Baik, Ben
    Arous & Péché 2005; Baik & Silverstein 2006; Paul 2007). σ² solves trace = dσ² + Σ s_i over the
    values above the upper edge σ²(1 + √γ)² by more than the Tracy–Widom scale of the noise's
    largest value, each inverted (:func:`_spike_strength`); a fixed point, a few iterations. The
    bulk (the values below the edge) is white noise's where it spans
    no more than :data:`WHITE_BULK_SPREAD` × MP's ratio of edges (a coloured tail, of effective
    rank below d, spreads wider), with at least :data:`WHITE_BULK_VALUES` values and one spike.
    """
    ratio = d / max(m - 1, 1)
    if not ratio > 1 or not values.size:
        return None
    values, trace = values / (n - 1), total / (n - 1)
    # The largest of m − 1 white-noise values fluctuates about the edge on Johnstone's (2001)
    # Tracy–Widom scale (σ² = 1, covariance units): a spike is a value above edge + that scale.
    scale = (math.sqrt(m - 1) + math.sqrt(d)) * (1 / math.sqrt(m - 1) + 1 / math.sqrt(d)) ** (1 / 3) / (m - 1)
    noise, resolved = trace / d, 0
    for _ in range(100):
        resolved = int(np.sum(values > noise * ((1 + math.sqrt(ratio)) ** 2 + scale)))
        fitted = (trace - float(np.sum(_spike_strength(values[:resolved], noise, ratio)))) / d
        if not fitted > 0:
            return None
        if abs(fitted - noise) <= 1e-12 * noise:
            break
        noise = fitted
    bulk = values[resolved:]
    support = ((math.sqrt(ratio) + 1) / (math.sqrt(ratio) - 1)) ** 2
    white = bulk.size >= WHITE_BULK_VALUES and bulk[-1] > 0 and bulk[0] / bulk[-1] <= WHITE_BULK_SPREAD * support
    if resolved == 0 or not white:
        return None
    return SpikedNoise(noise, _spike_strength(values[:resolved], noise, ratio), ratio)


def spiked_spectrum(spikes: SpikedNoise, n: int, d: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(values, multiplicities)`` of the scatter C of all n rows the spiked model predicts, for
    :func:`~daskpca.solvers.krylov.simulated_passes`.

    The same theorem forward, at C's aspect γ_f = d/(n − 1): each spike at λ(1 + γ_fσ²/s) where
    s > σ²√γ_f, at the bulk's top otherwise; the k − K modes the probe did not resolve at
    :data:`UNRESOLVED_FRACTION` of its detection edge; the noise as MP's bulk of ratio γ_f (its
    quantiles, σ²(1 ± √γ_f)² for γ_f ≤ 1, γ_f·MP(1/γ_f) for the n − 1 nonzero ones above),
    binned (:func:`~daskpca.solvers.krylov.binned_spectrum`); all × (n − 1), scatter units. The
    k-th mode's gap is to that bulk's top, where the probe's own bulk put it barely below its top.
    """
    noise, aspect = spikes.noise, d / (n - 1)
    strengths = np.concatenate([spikes.strengths,
                                np.full(max(k - spikes.strengths.size, 0), UNRESOLVED_FRACTION * spikes.edge)])
    top = noise * (1 + math.sqrt(aspect)) ** 2
    seen = strengths > noise * math.sqrt(aspect)
    modes = np.where(seen, (strengths + noise) * (1 + aspect * noise / np.where(seen, strengths, 1.0)), top)
    modes = np.sort(modes)[::-1]
    rank = min(n - 1, d)
    count = max(rank - modes.size, 0)
    upper = (np.arange(count) + 0.5) / max(count, 1)
    if aspect <= 1:
        bulk = noise * marchenko_pastur_quantiles(aspect, upper)
    else:
        bulk = noise * aspect * marchenko_pastur_quantiles(1 / aspect, upper)
    tail = np.sort(np.concatenate([modes[k:], bulk]))[::-1]
    return krylov.binned_spectrum(modes[:k] * (n - 1), tail * (n - 1), k)


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
    if rows_of is not None:
        read = lambda: np.concatenate([rows_of(start, stop) for start, stop in ranges])  # noqa: E731
    else:  # rows dask computes (a cube reshaped to rows): read where they need little of the graph
        read, why_not = computed_rows(matrix, ranges)
        if read is None:
            return fallback(f"the input is not a plain stored array, and {why_not}")
    try:
        rows = read()
    except Exception as error:  # any store's error (an object store's are not OSError): only the read is inside
        # The probe only predicts: a read it cannot make (a store this process cannot reach while
        # the workers can, a damaged chunk) leaves the prior and says why; the fit's own first
        # pass meets the same store and reports what is wrong with it.
        return fallback(f"the probed rows could not be read here ({type(error).__name__}: {error})")
    values, total, features = sample_spectrum(rows, n, weights, standardize)
    if not (total > 0 and values.size and values[0] > 0):
        return fallback("the probed rows have no variance (constant)", rows.shape[0])
    ell = min(k + n_oversamples, n, features)
    rank = min(n - 1, features)
    spikes = spikes_over_white_noise(values, total, n, rows.shape[0], features) if k < rank else None
    if spikes is not None:
        model = spikes.describe(k)
        history = krylov.simulated_passes(*spiked_spectrum(spikes, n, features, k), k, ell, tol, budget, n)
    else:
        tail = unresolved_tail(values, total, k, rank)
        if tail is not None:
            model = f"the sample spectrum less its floor (its bulk's mean), over a tail of effective rank ≈ {tail[2]:.0f}"
            history = krylov.simulated_passes(*tail[:2], k, ell, tol, budget, n)
        else:
            model = "the sample spectrum less its floor"
            history = krylov.simulated_total(without_floor(values), total, rank, k, ell, tol, budget, n)
    if not history:
        return fallback("their spectrum has nothing to model", rows.shape[0])
    return Probe(rows.shape[0], n, len(ranges), len(history), tuple(float(b) for b in history), tol,
                 seconds=time.perf_counter() - started, prior=prior, model=model,
                 client_flops=krylov.client_flops(d, ell, len(history), k))


# ---- the spectrum of an earlier fit of the same model -------------------------------------------


#: An earlier model's variances predict passes only where its subspace was bounded this tightly
#: (sin θ; its variances then within about its square): exact and certified fits.
EARLIER_BOUND = 0.1


def earlier_spectrum(model, k: int) -> tuple[np.ndarray, np.ndarray | None, bool, str] | str:
    """``(values, residuals, exact, what)``: the most a fitted PCA ``model`` knows of its spectrum
    beyond k (covariance units, descending), or why it knows too little for k.

    - an exact fit's whole spectrum where it kept one (``exact``: its tail is the data's own);
    - a block Krylov fit's leading ℓ Ritz values and its k residual norms
      (``solver_info_["ritz_values"]``, ``["residual_norms"]``): converged far enough at its last
      pass to keep all ℓ (:func:`~daskpca.solvers.krylov.model_spectrum`, ``known``);
    - else its own components' variances (and the next one, which the covariance solver keeps),
      where they are more than k and carry a bound (``error_bound_`` ≤ :data:`EARLIER_BOUND`):
      a randomized fit's, unbounded, put λ_10 of a continuum at 0.88 for 1.0 and predicted 12
      passes for 10.
    """
    spectrum = _recorded(getattr(model, "_spectrum", None))
    if spectrum is not None and spectrum.size > k:
        return spectrum, None, True, f"its exact spectrum ({spectrum.size} values)"
    info = getattr(model, "solver_info_", {}) or {}
    ritz = _recorded(info.get("ritz_values"))
    if ritz is not None and ritz.size > k:
        return (ritz, _recorded(info.get("residual_norms"), descending=False), False,
                f"its block Krylov fit's {ritz.size} leading Ritz values")
    variances = _recorded([*np.ravel(model.explained_variance_), *np.ravel(info.get("next_variance", []))])
    if variances is None:
        return "its recorded variances are not finite non-negative numbers (a damaged or edited model)"
    bound = float(getattr(model, "error_bound_", np.nan))
    if not bound <= EARLIER_BOUND:
        return (f"its variances carry no error bound under {EARLIER_BOUND:g} (solver {model.solver_!r}, error_bound_ "
                f"{bound:.2g}): an exact or block Krylov fit's spectrum predicts the passes")
    if variances.size > k:
        return variances, None, False, f"its {variances.size} leading variances"
    return (f"it knows {variances.size} leading variances (solver {model.solver_!r}); k = {k} and the one after need "
            f"{k + 1}: fit it with more components, or with block Krylov, which keeps its ℓ = k + n_oversamples "
            "leading Ritz values")


def _recorded(values, descending: bool = True) -> np.ndarray | None:
    """A model's recorded values as a float64 vector (sorted descending unless ``descending`` is
    False: residual norms follow their modes; round-off below 0 clipped), or
    None where there are none or they are not finite numbers ≥ 0 (a model's JSON edited by hand,
    a damaged store read with verify=False): a prediction, not worth an error."""
    if values is None:
        return None
    try:
        values = np.asarray(values, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        return None
    if not np.all(np.isfinite(values)) or np.any(values < -1e-12 * max(float(np.max(values, initial=0.0)), 1e-300)):
        return None
    values = np.clip(values, 0.0, None)
    return np.sort(values)[::-1] if descending else values


def _same_features(model, d: int, weights: np.ndarray | None, standardize: bool) -> str:
    """Why ``model`` does not analyse the features this fit would (its spectrum then says nothing
    of this fit's), or ""."""
    if model.n_features_in_ != d:
        return f"it was fitted on {model.n_features_in_} features, this input has {d}: not the same field"
    if bool(getattr(model, "standardize", False)) != bool(standardize):
        return f"it was fitted with standardize={not standardize}, this fit asks standardize={standardize}"
    stage = model.feature_stage_
    if not standardize:
        asked = np.ones(d) if weights is None else np.asarray(weights, dtype=np.float64)
        if not np.allclose(stage.factor, asked[stage.keep], rtol=1e-6):
            return "it weighted its features otherwise than this fit asks (weights=)"
    return ""


def from_model(model, n: int, d: int, k: int, *, tol: float | None, max_passes: int | None, n_oversamples: int = 10,
               weights: np.ndarray | None = None, standardize: bool = False, name: str = "") -> Probe:
    """Block Krylov's passes for an n × d input predicted from an earlier fit of the same model
    (``model``: a fitted :class:`~daskpca.PCA`, or a :class:`~daskpca.Rotator` of one; ``name``
    what the plan calls it, e.g. its store and version): the issue's other probe, "the spectrum
    of an earlier version of the same model in the store". Reads nothing.

    The simulation (:func:`~daskpca.solvers.krylov.simulated_passes`) runs on what the model knows
    (:func:`earlier_spectrum`): its exact spectrum, else its leading values each kept and a tail
    carrying the rest of its total variance from the last of them
    (:func:`~daskpca.solvers.krylov.model_spectrum`). Where the field is the same but the rows are
    new (a next year, a scheduled refit), the spectrum is what decides the passes. Measured
    (8000 × 1000, a second draw of the same spectrum; fits of a block Krylov model): the passes
    made within one of the prediction on a continuum just below λ_k (10 for 10, 12 for 13), a
    plateau (6, 8 for 6, 8), 0.8ⁱ (3 for 3), 1/i (7, 9 for 6, 8) and spikes over white noise (6,
    8 and 5, 6: the same). Where the model cannot tell (another field, other weights, fewer
    values than k + 1) the plan's prior stands and the plan says why.
    """
    started = time.perf_counter()
    budget, prior = krylov.pass_budget(tol, max_passes), krylov.predicted_passes(tol, max_passes)
    model = getattr(model, "model_", model)  # a rotation: the model it rotates
    name = name or f"an earlier {type(model).__name__} fit on {getattr(model, 'n_samples_', '?')} samples"

    def fallback(reason: str) -> Probe:
        return Probe(0, n, 0, None, target=tol, reason=reason, seconds=time.perf_counter() - started, prior=prior,
                     earlier=name)

    if not hasattr(model, "explained_variance_") or not hasattr(model, "total_variance_"):
        return fallback(f"{type(model).__name__} is not a fitted PCA")
    if tol is None:
        return fallback(f"no tol: block Krylov reads its budget of {budget} passes")
    different = _same_features(model, d, weights, standardize)
    if different:
        return fallback(different)
    found = earlier_spectrum(model, k)
    if isinstance(found, str):
        return fallback(found)
    values, residuals, exact, what = found
    kept = model.feature_stage_.n_kept
    rank, ell = min(n - 1, kept), min(k + n_oversamples, n, kept)
    if k >= rank:
        return fallback(f"k = {k} reaches the input's rank {rank}: no gap to predict from")
    spectrum = (krylov.binned_spectrum(values[:k], values[k:rank], k) if exact
                else krylov.model_spectrum(values, float(model.total_variance_), rank, k, residuals, known=values.size))
    if spectrum is None:
        return fallback("it recorded no variance")
    history = krylov.simulated_passes(*spectrum, k, ell, tol, budget, n)
    return Probe(0, n, 0, len(history), tuple(float(b) for b in history), tol, seconds=time.perf_counter() - started,
                 prior=prior, model=what, client_flops=krylov.client_flops(d, ell, len(history), k), earlier=name)
