"""Moving-block resampling on the client: block lengths, replicate weights, intervals, and the
checks that a resampling can vary and fits — the statistics :mod:`daskpca.significance`'s bootstrap
(and any estimator's, after its own read) stands on.

Everything here is NumPy on small arrays (n per-sample rows at most); nothing reads data. It
imports only NumPy, SciPy's t distribution and :mod:`daskpca.exceptions`; the significance layer
imports it (its public names are re-exported there).

What makes a resampling trustworthy, checked before any read (:func:`check_resampling`,
:func:`check_cost`): at least :data:`MIN_BLOCKS` blocks per replicate (the default block length
is capped by :func:`block_length_cap`, Politis & White 2004), at least :data:`MIN_TAIL`
replicates beyond each end of an interval, and replicates whose memory and flops fit the client.
"""

from __future__ import annotations

import numpy as np

from ..exceptions import InputError

#: Largest client-side array the bootstrap may build (the n×m scores; the replicate patterns of a
#: slab of features): 1 GiB.
CLIENT_BYTES = 2**30
#: Working memory of one step of the replicate loop (a batch of weights, a slab of outer products).
SLAB_BYTES = 64 * 2**20
#: Interval kinds: "log-t" (the default: on the log scale, the estimate less the replicates' bias ±
#: a Student-t multiple of their spread, see :func:`interval_bounds`), "percentile" (quantiles of the
#: replicates) or "basic" (reflected about the estimate: [2θ̂ − q_hi, 2θ̂ − q_lo]).
INTERVALS = ("log-t", "percentile", "basic")
#: Fewest blocks a replicate is made of: with fewer, replicates are near-rotations of the series
#: and cannot vary as new data would (one block of n: every replicate is the data itself).
MIN_BLOCKS = 3
#: Fewest replicates beyond each end of an interval: the ends are quantiles of the replicates, and
#: with fewer they are the extreme replicates themselves (95 %: at least 200 replicates).
MIN_TAIL = 5
#: Most client flops the replicates may take (``n_replicates · (2·n·m² + 10·m³)``): ~10 min at
#: ~50 GFLOP/s of BLAS on one core.
MAX_FLOPS = 3e13


def lag1_autocorrelation(series: np.ndarray) -> np.ndarray:
    """Lag-1 autocorrelation of each column of ``series`` (n × p); 0 for a constant column."""
    centered = series - series.mean(axis=0)
    power = np.sum(centered**2, axis=0)
    lagged = np.sum(centered[1:] * centered[:-1], axis=0)
    return np.divide(lagged, power, out=np.zeros_like(power), where=power > 0)


def block_length_cap(n: int) -> int:
    """The longest default block: ``min(⌈3√n⌉, ⌊n/3⌋)`` (at least 1).

    Politis & White (2004) bound their automatic block length by ``⌈min(3√n, n/3)⌉``; the floor of
    n/3 keeps at least :data:`MIN_BLOCKS` blocks in a replicate. Without it, a persistent PC (a
    seasonal cycle, a trend: lag-1 autocorrelation near 1) asks for a block as long as the
    series, every replicate is then a rotation of the data, and the intervals collapse to a point.
    """
    return int(max(1, min(np.ceil(3.0 * np.sqrt(n)), n // MIN_BLOCKS)))


def carlstein_block_length(rho: float, n: int) -> int:
    """Carlstein's (1986) block length for an AR(1) series: ``(√6·ρ / (1 − ρ²))^{2/3} · n^{1/3}``,
    capped at :func:`block_length_cap` (Politis & White 2004).

    It is also what Politis & White's (2004) automatic rule for the circular block bootstrap gives
    on an AR(1) autocovariance. Negative ρ is taken as 0 (no block needed: L = 1).
    """
    rho = float(np.clip(rho, 0.0, 0.999))
    length = (np.sqrt(6.0) * rho / (1.0 - rho**2)) ** (2.0 / 3.0) * n ** (1.0 / 3.0)
    return int(np.clip(round(length), 1, block_length_cap(n)))


def block_weights(rng: np.random.Generator, n: int, block_length: int, n_replicates: int) -> np.ndarray:
    """How often each sample enters each replicate: ``(n_replicates, n)`` counts summing to n.

    A replicate is ⌈n / L⌉ blocks of L consecutive samples, the last block cut so the replicate
    has exactly n samples. Block starts are uniform on all n samples and a block running past the
    last sample wraps to the first (the circular block bootstrap of Politis & Romano, 1992): every
    sample is then equally likely to be drawn, so the replicates are centred on the data's own
    mean and variance, which the plain moving blocks (starts on [0, n − L]) are not near the ends.
    Each block adds 1 on its range, written as +1 at its start and −1 after its end and summed
    along the samples.
    """
    n_blocks = -(-n // block_length)
    starts = rng.integers(0, n, size=(n_replicates, n_blocks))
    lengths = np.full(n_blocks, block_length)
    lengths[-1] = n - (n_blocks - 1) * block_length
    ends = starts + lengths
    wrapped = ends > n
    rows = np.arange(n_replicates)[:, None] * (n + 1)
    up = np.concatenate([(rows + starts).ravel(), np.broadcast_to(rows, ends.shape)[wrapped]])
    down = np.concatenate([(rows + np.minimum(ends, n)).ravel(), (rows + ends - n)[wrapped]])
    size = n_replicates * (n + 1)
    steps = (np.bincount(up, minlength=size) - np.bincount(down, minlength=size)).reshape(n_replicates, n + 1)
    return np.cumsum(steps, axis=1)[:, :n].astype(np.float64)


def overlapping_blocks_dof(n: int, block_length: int) -> float:
    """ν = 1.5·(n/L − 1), at least 1: the degrees of freedom of a variance estimated from
    overlapping blocks of L of n samples (overlapping batch means, Meketon & Schmeiser 1984), which
    the moving-block bootstrap's variance of a mean is (Künsch 1989). At L = 1 it is ≈ 1.5·n: the
    t quantile is then the normal one."""
    return max(1.5 * (n / block_length - 1.0), 1.0)


def interval_bounds(replicates, estimate, quantiles, kind, dof=np.inf) -> np.ndarray:
    """``(2, k)`` intervals of a positive statistic (a variance, a ratio, a singular value) from its
    replicates (R × k).

    "log-t" (the default): on the log scale, where the sampling error of a variance is about
    proportional to it (North et al.'s ``δλ = λ·√(2/n)``) and the log-ratio ``log(θ*/θ̂)`` is
    close to pivotal, the interval is ``log θ̂ − b ± t_{ν, 1−α/2}·s`` with b and s the mean and
    standard deviation of the replicates' log-ratios: the bias correction of Efron & Tibshirani
    (1993, §10.6), whose absence makes percentile intervals of eigenvalues lean to the side of
    their bias, and the Student-t quantile of the block bootstrap's ν degrees of freedom
    (:func:`overlapping_blocks_dof`), whose variance estimate rests on ~n/L independent blocks,
    not n samples. A column with a zero estimate or a zero replicate falls back to "percentile".
    """
    low, high = np.quantile(replicates, quantiles, axis=0)
    if kind == "basic":
        low, high = 2 * estimate - high, 2 * estimate - low
    elif kind == "log-t":
        from scipy.stats import t as student

        estimate = np.broadcast_to(np.asarray(estimate, dtype=np.float64), low.shape)
        positive = (estimate > 0) & np.all(replicates > 0, axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios = np.log(replicates[:, positive] / estimate[positive])
        if ratios.size:
            half = student.ppf(quantiles[1], dof) * ratios.std(axis=0, ddof=1) if ratios.shape[0] > 1 else 0.0
            centre = np.log(estimate[positive]) - ratios.mean(axis=0)
            low, high = low.copy(), high.copy()
            low[positive], high[positive] = np.exp(centre - half), np.exp(centre + half)
    return np.maximum(np.stack([low, high]), 0.0)


def check_resampling(n, n_replicates, block_length, confidence, interval) -> None:
    """The resampling parameters of a series of n samples, checked (nothing is read): a
    resampling that cannot vary (too few blocks, too few replicates for the quantile asked) is
    refused, not reported as certainty."""
    if isinstance(n_replicates, (bool, np.bool_)) or not isinstance(n_replicates, (int, np.integer)) or n_replicates < 1:
        raise InputError(f"n_replicates={n_replicates!r}: expected an int >= 1 (e.g. 1000).")
    if isinstance(confidence, (bool, np.bool_)) or not (isinstance(confidence, (float, int)) and 0 < confidence < 1):
        raise InputError(f"confidence={confidence!r}: expected a probability in (0, 1), e.g. 0.95.")
    fewest = min_replicates(confidence)
    if n_replicates < fewest:
        raise InputError(
            f"n_replicates={n_replicates!r} is too few for {confidence:.4g} intervals: their ends are the "
            f"{(1 - confidence) / 2:.3g} and {1 - (1 - confidence) / 2:.3g} quantiles of the replicates, and "
            f"at least {MIN_TAIL} replicates must lie beyond each end (else an end is one extreme replicate). "
            f"Give n_replicates >= {fewest} (e.g. 1000).")
    longest = max(1, n // MIN_BLOCKS)
    if block_length is not None and (isinstance(block_length, (bool, np.bool_)) or not isinstance(block_length, (int, np.integer))
                                     or not 1 <= block_length <= longest):
        raise InputError(f"block_length={block_length!r}: expected an int in [1, n_samples // {MIN_BLOCKS} = {longest}] "
                         f"(consecutive samples per block; a replicate of fewer than {MIN_BLOCKS} blocks is nearly "
                         "the series itself and cannot vary as new data would), or None for the rule from the "
                         "scores' lag-1 autocorrelation.")
    if interval not in INTERVALS:
        raise InputError(f"interval={interval!r}: expected one of {INTERVALS}.")


def min_replicates(confidence: float) -> int:
    """Fewest replicates for ``confidence`` intervals: :data:`MIN_TAIL` beyond each end (200 at 95 %)."""
    return int(np.ceil(MIN_TAIL / ((1.0 - confidence) / 2) - 1e-9))


def check_cost(n: int, m: int, k: int, n_replicates: int) -> None:
    """Refuse, before any read, replicates whose client memory or time cannot fit.

    Memory: each replicate keeps m eigenvalues, its total and k matched m-vectors, and the pattern
    intervals take R·k float64 per feature of a slab: ``R·(m + 1 + 2·m·k)·8`` bytes at most
    :data:`CLIENT_BYTES`. Time: ``R·(2·n·m² + 10·m³)`` flops (the weighted outer products, the
    eigenproblems) at most :data:`MAX_FLOPS`.
    """
    from dask.utils import format_bytes

    memory = float(n_replicates) * (m + 1 + 2 * m * k) * 8
    flops = float(n_replicates) * (2.0 * n * m * m + 10.0 * m**3)
    if memory > CLIENT_BYTES:
        fit = int(CLIENT_BYTES // ((m + 1 + 2 * m * k) * 8))
        raise InputError(
            f"n_replicates={n_replicates}: the replicates would keep ≈ {format_bytes(int(memory))} on the client "
            f"({m} basis directions, {k} modes), more than CLIENT_BYTES = {format_bytes(CLIENT_BYTES)}. Give at "
            f"most {fit} replicates (1000–10000 give stable 95 % intervals), or fewer modes / basis directions.")
    if flops > MAX_FLOPS:
        fit = int(MAX_FLOPS // (2.0 * n * m * m + 10.0 * m**3))
        raise InputError(
            f"n_replicates={n_replicates}: the replicates would take ≈ {flops:.2g} flops on the client ({n} samples, "
            f"{m} basis directions), more than MAX_FLOPS = {MAX_FLOPS:.2g} (≈ 10 minutes). Give at most {fit} "
            "replicates, or fewer basis directions (n_basis).")
