"""North's rule of thumb: which eigenvalues are separated, and a k that splits no multiplet.

North, Bell, Cahalan & Moeng (1982): the sampling error of an eigenvalue from n independent
samples is about ``δλ = λ·√(2/n)``. Two neighbouring modes whose eigenvalues are closer than
their errors are "effectively degenerate": their patterns are not determined separately (any
rotation within their span is as good) and a truncation between them cuts a pattern in two.

:func:`north_test` flags, for each mode i, whether its error bar ``[λ_i − δλ_i, λ_i + δλ_i]`` is
clear of the next mode's. :func:`north_k` turns the flags into a rule for k: the largest k such
that every mode up to k is separated from the next one — keeping the leading modes that stand
out individually, and never truncating inside a degenerate pair (k = 0: modes 1 and 2 are
already degenerate). Time series are autocorrelated
in practice; pass the effective number of independent samples as ``n_samples`` when known (it
is smaller than the length, which widens the error bars).

Reference: G. R. North, T. L. Bell, R. F. Cahalan & F. J. Moeng, "Sampling errors in the
estimation of empirical orthogonal functions", Mon. Wea. Rev. 110 (1982) 699–706,
doi:10.1175/1520-0493(1982)110<0699:SEITEO>2.0.CO;2.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..exceptions import InputError


@dataclass(frozen=True)
class NorthTest:
    """Eigenvalues, their North et al. errors and which are separated from the next mode.

    Attributes
    ----------
    explained_variance : ndarray of shape (k,)
    errors : ndarray of shape (k,)
        ``λ·√(2/n)``.
    separated : ndarray of shape (k − 1,), bool
        ``separated[i]``: mode i+1's error bar is clear of mode i+2's (modes numbered from 1).
    k : int
        The suggested number of modes (:func:`north_k`); 0 when not even modes 1 and 2 are
        separated.
    """

    explained_variance: np.ndarray
    errors: np.ndarray
    separated: np.ndarray
    k: int

    def lines(self) -> list[str]:
        """One Markdown table row per mode: variance, error, separated from the next."""
        rows = []
        for i, (value, error) in enumerate(zip(self.explained_variance, self.errors)):
            flag = "—" if i == len(self.separated) else ("yes" if self.separated[i] else "no")
            rows.append(f"| {i + 1} | {value:.6g} | {error:.3g} | {flag} |")
        return rows


def north_test(explained_variance, n_samples: int) -> NorthTest:
    """North et al. (1982) errors and separation flags of descending eigenvalues."""
    values = np.asarray(explained_variance, dtype=np.float64)
    if n_samples < 1:
        raise InputError(f"n_samples={n_samples!r}: expected the number of (independent) samples, >= 1.")
    errors = values * np.sqrt(2.0 / n_samples)
    separated = (values[:-1] - errors[:-1]) > (values[1:] + errors[1:])
    return NorthTest(values, errors, separated, north_k(separated))


def north_k(separated) -> int:
    """The largest k with every mode 1..k separated from its successor.

    0 when modes 1 and 2 are not separated (no single mode stands apart). The last computed mode
    has no successor to be tested against, so k is at most the number of modes minus one.
    """
    separated = np.asarray(separated, dtype=bool)
    unresolved = np.flatnonzero(~separated)
    return int(unresolved[0]) if unresolved.size else int(separated.size)
