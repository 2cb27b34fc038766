r"""Randomized PCA: subspace iteration with re-orthonormalisation, one pass per power iteration.

Halko, Martinsson & Tropp (2011), Algorithm 4.4 ("randomized subspace iteration") on the
centered data X̃ = X − 1μᵀ, with ℓ = k + n_oversamples columns and q power iterations::

    Ω₀ = Gaussian d×ℓ
    for j = 0 … q:                    (one pass each: q + 1 passes in all)
        Q_j = orth(X̃Ω_j)              n×ℓ, Householder TSQR over the row blocks
        H_j = X̃ᵀQ_j                   d×ℓ
        Ω_{j+1} = orth(H_j)           on the client (d×ℓ)
    B = H_qᵀ = Q_qᵀX̃ = Û S Vᵀ          (SVD of the ℓ×d matrix on the client)

Every multiply is followed by an orthonormalisation, as the algorithm requires: without it the
power iterates collapse onto the leading singular vector and everything below
~ε^{1/(2q+1)}·σ₁ is lost (the failure of dask's ``svd_compressed`` default and of the randomized
PCA built on it). The subspaces are exactly those of the textbook two-passes-per-iteration
scheme (range of (X̃ᵀX̃)^{q+1}Ω₀ for V) — what changes is that a row block is read *once* per
iteration instead of twice.

The pass itself — one read per iteration, X̃ᵀ·orth(X̃Ω) without forming Q, slab by slab, centred
implicitly — is the sketch kernel the block Krylov solver shares, :mod:`daskpca.passes._sketch`.

Costs
-----
Passes: exactly q + 1. Flops: (q + 1)·4·n·d·ℓ (two products per slab per pass) + O(n·ℓ²) for the
slab QRs + O(d·ℓ²) per merge (≈ (ℓ + 1)/(2·slab rows) of the products) and on the client.
Memory per task: the input row block, one ~16 MiB float64 slab, and ``SPLIT_EVERY`` d×(ℓ+1)
partial factors; a merge task holds ``SPLIT_EVERY`` d×(ℓ+1) matrices.

Checkpoints (``checkpoint=PATH``): after every pass but the last, the small state — Ω_{j+1}
(d×ℓ), the power iterations and passes done — is written atomically to PATH (see
:mod:`daskpca.store.checkpoint`). A rerun of the same job (same input name/shape/chunks/dtype, k, p, q
and seed) loads it and makes only the remaining passes; the result is bit-for-bit that of an
uninterrupted run. The file is removed right before ``solve`` returns.

Accuracy: the error in the leading subspace decays like (σ_{ℓ+1}/σ_k)^{2q+1}. With the default
q ("auto": 7 if k < 0.1·min(n, d), else 4, as scikit-learn) it matches scikit-learn's
``randomized_svd`` with the same q and oversampling, or does better (scikit-learn normalises the
power iterates with LU, which does not keep them orthonormal).

References
----------
N. Halko, P.-G. Martinsson, J. A. Tropp, "Finding structure with randomness: probabilistic
algorithms for constructing approximate matrix decompositions", SIAM Review 53 (2011) 217–288,
doi:10.1137/090771806.
"""

from __future__ import annotations

from dataclasses import replace
from numbers import Integral

import numpy as np

from ._base import ComponentRequest, Cost, PlanInput, SolverDeclaration, SolverResult, open_checkpoint
from ._iterative import as_generator, sketch_result
from ..passes import SKETCH_FLOPS_PER_SECOND, Passes, releases_slab_buffers
# The sketch kernel shared with block Krylov (its first pass fuses the feature stage, hence
# ``fuses_features`` here: the solver contract's declaration).
from ..passes import (check_oversamples, feature_fingerprint, fuses_features, leading_right_vectors, pass_input,  # noqa: F401
                      resumed_stage, run_first_pass, run_pass, stage_state)
from ..exceptions import InputError

OPTIONS = ("n_oversamples", "n_power_iter", "checkpoint")


def resolve_power_iter(n_power_iter, n_components: int, n_samples: int, n_features: int) -> int:
    """q from ``n_power_iter``: an int ≥ 0, or "auto" (scikit-learn's rule: 7 for small k, else 4)."""
    if isinstance(n_power_iter, str):
        if n_power_iter != "auto":
            raise InputError(f"n_power_iter={n_power_iter!r}: expected 'auto' or an int >= 0 (e.g. 4).")
        return 7 if n_components < 0.1 * min(n_samples, n_features) else 4
    if isinstance(n_power_iter, bool) or not isinstance(n_power_iter, Integral) or n_power_iter < 0:
        raise InputError(f"n_power_iter={n_power_iter!r}: expected 'auto' or an int >= 0 (e.g. 4).")
    return int(n_power_iter)


@releases_slab_buffers  # the kernel's per-thread slab buffers go when the fit ends, also by an error
def solve(
    X, request: ComponentRequest, *, random_state=None, n_oversamples=10, n_power_iter="auto", checkpoint=None,
    features=None,
) -> SolverResult:
    """Fit the k leading components by randomized subspace iteration (q + 1 passes).

    Parameters
    ----------
    X : dask.array.Array of shape (n_samples, n_features)
        float32 or float64, any row and column chunking (column pieces of a row block are
        concatenated inside its task, so each stored chunk is read once per pass).
    request : ComponentRequest
        Must fix k (an int or None); fractions and "mle" need the full spectrum.
    random_state : int, numpy.random.Generator, numpy.random.RandomState or None
        Seed of the Gaussian test matrix Ω (d×ℓ).
    n_oversamples : int, default=10
        p: the sketch has ℓ = min(k + p, min(n, d)) columns.
    n_power_iter : int or "auto", default="auto"
        q ≥ 0 power iterations; "auto" is 7 if k < 0.1·min(n, d), else 4.
    checkpoint : str, os.PathLike or None
        Local ``.npz`` file for the state after every pass but the last; a rerun of the same
        job resumes from it (see the module notes). Removed when the solve completes.
    features : FeatureSpec, optional
        Weights and the mask of wholly-missing features (not ``standardize``), resolved in the
        first pass (:func:`run_first_pass`): no extra read. Ω is drawn over all input features
        (its rows at masked ones multiply zeros), so ℓ and the draw are those of the input's
        shape; the later passes read the kept, weighted features.

    Returns
    -------
    SolverResult
        ``spectrum`` is None (only ℓ singular values are computed). ``features``: the resolved
        stage (with ``features``). ``n_passes``: reads made
        by *this* call (q + 1 without a resume). ``info`` holds ``n_power_iter`` (the q used),
        ``n_oversamples``, ``sketch_size`` (ℓ), ``n_iter`` (= q), ``resumed_from_pass``
        (passes already done by the run whose checkpoint was loaded, or None) and
        ``total_passes`` (passes across runs that contributed to this result).
    """
    n_samples, n_features = X.shape
    k = request.fixed()
    p = check_oversamples(n_oversamples)
    q = resolve_power_iter(n_power_iter, k, n_samples, n_features)
    ell = min(k + p, min(n_samples, n_features))
    store = open_checkpoint(
        checkpoint, X, solver="randomized", n_components=k, n_oversamples=p, n_power_iter=q,
        sketch_size=ell, random_state=random_state, features=feature_fingerprint(features),
    )
    state = store.load()
    if state is None:
        omega, done = as_generator(random_state).standard_normal((n_features, ell)), 0
    else:  # an earlier process finished `done` power iterations; continue from its Ω
        omega, done = state["omega"], int(state["power_iter_done"])
    stage = resumed_stage(state, features)
    Z = pass_input(X, stage)  # what every pass but a fused first one reads

    n_passes, total_m2 = 0, None
    passes = Passes("randomized", q + 1, done=done)
    for iteration in range(done, q + 1):
        with passes.read():
            if features is not None and stage is None:
                root, stage = run_first_pass(X, omega, features)
                Z = pass_input(X, stage)
            else:
                root = run_pass(Z, omega, first=total_m2 is None)
        n_passes += 1
        if n_passes == 1:  # a later pass's time: this one's compute, without its read
            passes.computed(root.compute_seconds, Z[0])
        if total_m2 is None:
            total_m2 = root.m2
        if iteration == q:
            break
        omega, _ = np.linalg.qr(root.ht.T)  # d×ℓ, orthonormal: the next test matrix
        store.save({"omega": omega, "power_iter_done": iteration + 1, "passes": iteration + 1,
                    **stage_state(stage)})

    if stage is not None:
        stage.narrow(request)  # k ≤ the kept features, validated as on the generic road
    singular_values, components = leading_right_vectors(root.ht, k)  # B = QᵀX̃ = Hᵀ
    result = sketch_result(components, singular_values, root, total_m2, n_passes, {
        "n_iter": q,
        "n_power_iter": q,
        "n_oversamples": p,
        "sketch_size": ell,
        "resumed_from_pass": store.resumed_from,
        "total_passes": (store.resumed_from or 0) + n_passes,
    })
    store.clear()
    return replace(result, features=stage)


# ---------------------------------------------------------------------------------- declaration

#: k "much smaller" than min(n, d): below this fraction the planner counts the q = 7 power
#: iterations of scikit-learn's "auto" rule, else 4 (:func:`resolve_power_iter`).
SMALL_K_FRACTION = 0.1


def cost(shape: PlanInput) -> Cost:
    """q + 1 sketching passes (q power iterations), 4·n·d·ℓ flops each; the sketch pass's task
    (:func:`daskpca.passes._sketch.sketch_task_bytes`); each task returns d×(ℓ + 1) factors."""
    n, d, k, ell = shape.n, shape.d, shape.k, shape.ell
    q = shape.n_power_iter if isinstance(shape.n_power_iter, int) else (7 if k < SMALL_K_FRACTION * min(n, d) else 4)
    return Cost(q + 1, (q + 1) * 4 * n * d * ell, shape.sketch_task_bytes, f"q = {q}, ℓ = {ell}", result_size=(ell + 1) * d)


DECLARATION = SolverDeclaration(
    "randomized", solve, cost=cost, summary="the randomized SVD", flop_rate=SKETCH_FLOPS_PER_SECOND,
    options=OPTIONS, fallback="approximate", fuses_features=fuses_features,
)
