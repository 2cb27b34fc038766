"""MCA's Krylov bound against the truth on drawn cross operators (issue 41): never below it,
and how tight, split at the next resolved Ritz triplets or not.

Run from the repository root (about 100 s per 300 operators on the 2-core machine)::

    python -m benchmarks.mca_bound                       # seed 0, 120 operators
    python -m benchmarks.mca_bound --seed 1 --operators 300

Each operator C = L·diag(σ)·Rᵀ (dx × dy, orthonormal L and R of its rank r; or spikes over a
random bulk, G·diag(√σ)·G', whose singular vectors are not L and R) has a spectrum of one of six
kinds, in turn: a continuum just below σ_k, a plateau of 2–11 equal values just below σ_k,
geometric decay, a power law, a near-tie σ_{k+1} = σ_k·(1 − 10⁻⁸…10⁻²), spikes over a random
bulk. Shapes tall, wide and square; rank full or drawn below it; k from 2 to 8; the block k + 1 to
k + 11. :func:`daskpca.solvers.cross_covariance.krylov_svd` runs to tol 1e-13 (at most 25 passes)
and every pass's bound is checked against the larger of the two sides' true sin θ (LAPACK),
where that is above round-off (1e-10): the split bound (what the solver returns) and Wedin's
unsplit one (:func:`daskpca.solvers._bounds.wedin`). The table gives, by kind, the passes
checked, those whose bound was below the truth, and the median and largest bound/true over the
passes whose bound is at most 0.1 (the range a tol asks for).
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy.linalg import subspace_angles

from daskpca.passes import tall_norm2
from daskpca.solvers import cross_covariance
from daskpca.solvers._bounds import ROUNDOFF_RESIDUAL, wedin

from .tables import markdown_table

KINDS = ("continuum", "plateau", "decay", "power", "near-tie", "bulk")
SHAPES = ((200, 160), (60, 300), (300, 40), (120, 120), (400, 90))


def singular_values(kind: str, rank: int, k: int, rng) -> np.ndarray:
    """A descending spectrum of ``kind`` (see the module notes)."""
    if kind == "continuum":
        return np.concatenate([np.geomspace(10, 5, k), np.linspace(5 / rng.uniform(1.02, 1.5), 0.3, rank - k)])
    if kind == "plateau":
        width = int(rng.integers(2, 12))
        level = 6 / rng.uniform(1.05, 2)
        return np.concatenate([np.geomspace(20, 6, k), np.full(width, level), np.geomspace(2, 1e-3, rank - k - width)])
    if kind == "decay":
        return 100 * rng.uniform(0.3, 0.95) ** np.arange(rank)
    if kind == "power":
        return 100 / (1.0 + np.arange(rank)) ** rng.uniform(0.5, 2)
    if kind == "near-tie":
        values = 100 * 0.8 ** np.arange(rank)
        values[k] = values[k - 1] * (1 - 10 ** rng.uniform(-8, -2))
        return np.sort(values)[::-1]
    return np.concatenate([np.geomspace(10, 3, k), np.sort(rng.uniform(0, 2.5, rank - k))[::-1]])


def operator(kind: str, dx: int, dy: int, values: np.ndarray, rng) -> np.ndarray:
    """A dx × dy operator with singular values ``values`` (L·diag(σ)·Rᵀ), or for ``bulk`` spikes over
    a random bulk with that profile (G·diag(√σ)·G', Gaussian G and G')."""
    rank = values.size
    if kind == "bulk":
        return (rng.standard_normal((dx, rank)) * np.sqrt(values)) @ rng.standard_normal((rank, dy))
    left = np.linalg.qr(rng.standard_normal((dx, rank)))[0]
    right = np.linalg.qr(rng.standard_normal((dy, rank)))[0]
    return (left * values) @ right.T


def every_pass(C: np.ndarray, k: int, block: int, seed: int) -> list[tuple[float, float, float]]:
    """``(true sin θ, split bound, unsplit bound)`` after every pass of ``krylov_svd`` on C."""
    u, _, vt = np.linalg.svd(C, full_matrices=False)
    seen, ritz = [], cross_covariance._ritz

    def recorded(basis_u, basis_v, images_v, images_u, k, n_samples):
        left, right, values, bound = ritz(basis_u, basis_v, images_v, images_u, k, n_samples)
        true = max(np.sin(subspace_angles(left, u[:, :k])).max(), np.sin(subspace_angles(right, vt[:k].T)).max())
        seen.append((true, bound, _unsplit(basis_u, basis_v, images_v, images_u, k, n_samples)))
        return left, right, values, bound

    cross_covariance._ritz = recorded  # the solver's own Rayleigh–Ritz, each pass's answer recorded
    try:
        cross_covariance.krylov_svd(lambda V, U: (C @ V, C.T @ U), *C.shape, k, block=block, tol=1e-13,
                                    max_passes=25, n_samples=1000, rng=np.random.default_rng(seed))
    finally:
        cross_covariance._ritz = ritz
    return seen


def _unsplit(basis_u, basis_v, images_v, images_u, k, n_samples) -> float:
    """Wedin's spectral bound alone, as the solver computed it before the split."""
    G, sigma, Ht = np.linalg.svd(basis_u.T @ images_v, full_matrices=False)
    m = min(k + 1, sigma.size)
    left, right = basis_u @ G[:, :m], basis_v @ Ht[:m].T
    R, S = images_v @ Ht[:m].T - left * sigma[:m], images_u @ G[:, :m] - right * sigma[:m]
    roundoff = ROUNDOFF_RESIDUAL * np.sqrt(n_samples) * sigma[0]
    full = k >= min(basis_u.shape[0], basis_v.shape[0])
    spectral = max(tall_norm2(R[:, :k]), tall_norm2(S[:, :k])) + roundoff if m >= k else None
    return wedin(sigma, np.linalg.norm(R, axis=0) + roundoff, np.linalg.norm(S, axis=0) + roundoff, k, full, spectral)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--operators", type=int, default=120)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    checked = {kind: [] for kind in KINDS}
    for trial in range(args.operators):
        kind = KINDS[trial % len(KINDS)]
        dx, dy = SHAPES[rng.integers(len(SHAPES))]
        rank = min(dx, dy) if rng.random() < 0.6 else int(rng.integers(30, min(dx, dy) + 1))
        k = min(int(rng.integers(2, 9)), rank - 14)
        C = operator(kind, dx, dy, singular_values(kind, rank, k, rng), rng)
        exact = np.linalg.svd(C, compute_uv=False)
        if exact[k - 1] - exact[k] <= 1e-12 * exact[0]:
            continue  # σ_k = σ_{k+1}: no k-dimensional answer to measure against
        block = k + int(rng.integers(1, 12))
        checked[kind] += [pass_ for pass_ in every_pass(C, k, block, trial) if pass_[0] > 1e-10]
    rows = []
    for kind, passes in checked.items():
        within = np.array([(split / true, unsplit / true) for true, split, unsplit in passes if split <= 0.1])
        below = sum(split < true for true, split, _ in passes)
        rows.append([kind, str(len(passes)), str(below), *(f"{np.median(within[:, i]):.2f} / {within[:, i].max():.2f}"
                                                  if within.size else "—" for i in (0, 1))])
    print(markdown_table(["kind", "passes checked", "bound below the truth", "split: median / max bound÷true",
                          "unsplit: median / max"], rows))


if __name__ == "__main__":
    main()
