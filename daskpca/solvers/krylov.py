r"""Block Krylov PCA with an a posteriori error bound: accuracy as the knob, one pass per block.

Randomized block Krylov iteration (Musco & Musco 2015) on C = X̃ᵀX̃, X̃ = X − 1μᵀ the centered
data, with blocks of ℓ = k + n_oversamples columns. Each pass multiplies one block by C and the
whole Krylov space is kept::

    V₀ = orth(Ω),  Ω Gaussian d×ℓ
    for j = 0, 1, …                       (one pass each)
        W_j = C·V_j                        the randomized solver's fused pass: X̃V_j = Q_jR_j,
                                           H_j = X̃ᵀQ_j, so C·V_j = H_jR_j (no other read)
        bound on sin θ from (V₀…V_j, W₀…W_j), see below; stop when ≤ tol
        V_{j+1} = orth((I − VVᵀ)·W_j)      V = [V₀ … V_j]; projected twice, rank-revealed

After p passes V spans the block Krylov space K_p = span(Ω, CΩ, …, C^{p−1}Ω), and because every
W_j was kept, C is known on all of it: T = VᵀW = VᵀCV and the residuals C·x − θx of any Ritz
vector x ∈ span(V) cost only small products with V and W on the client. Subspace iteration
(:mod:`daskpca.solvers.randomized`) computes the same products and keeps only the last block; its
error falls like (λ_{ℓ+1}/λ_k)^{p−½}, block Krylov's like 1/T_{p−1}(1 + 2γ) (T the Chebyshev
polynomial, γ = λ_k/λ_{ℓ+1} − 1): a square root of the gap instead of the gap, which is what
decides on spectra with a few modes just above a flat noise continuum.

Orthogonality: each new block is projected against all earlier ones twice (block classical
Gram–Schmidt "twice is enough", Giraud et al. 2005), then its orthonormal basis is taken from an
SVD that drops directions below ``DEFLATION_RTOL``·‖W_j‖ (numerically already in span V), and
projected once more. V stays orthonormal to ~1e-15 at κ(X) = 1e10 (tested). A block whose every
direction is dropped means span V is invariant: the answer is then exact and iteration stops.

Rayleigh–Ritz and the reported components
-----------------------------------------
Two projections of the same passes are used:

- *Plain Rayleigh–Ritz* on span V: T = VᵀW = Y Θ Yᵀ, Ritz vectors x_i = V·y_i, residuals
  r_i = W·y_i − θ_i·x_i, exact (up to round-off) because W = CV is known. The bound is computed
  for these.
- *Left Rayleigh–Ritz* (Musco & Musco's Algorithm 2: the SVD of Q_KᵀX̃ with Q_K = orth(X̃V)):
  Q_KᵀX̃ = G^{-½}·Wᵀ in the eigenbasis of G = VᵀCV = VᵀW, so its top-k right singular vectors
  and values come from the small m×d matrix — half a power step more than the plain
  projection (the randomized solver's answer is this projection of its last block alone, so the
  Krylov answer is never worse at equal passes; tested against it and scikit-learn). Directions
  of G below ``DEFLATION_RTOL``·‖G‖ are left out (X̃V is numerically rank-deficient there). These
  are the components returned, from an SVD of that m×d matrix made once at the end; between
  passes (to decide whether to stop) the eigenproblem of its m×m Gram, kept up to date with
  P = WᵀW, stands in for it. Their eigenvalue accuracy is that of the covariance solver
  (absolute ~ε·λ₁; C is formed implicitly), not of TSQR.

The error bound (``info["error_bound"]``)
-----------------------------------------
Davis–Kahan's sin θ theorem (1970): with R_k = C·X_k − X_k·Θ_k the residual of the k kept plain
Ritz vectors and δ = θ_k − λ_{k+1} > 0, sin θ(X_k, U_k) ≤ ‖R_k‖₂/δ, U_k the exact top-k
eigenvectors. λ_{k+1} is unknown; it is estimated from above by θ_{k+1} + ‖r_{k+1}‖ (the next Ritz
value, which is ≤ λ_{k+1} by Cauchy interlacing, plus its residual, which is large while that
value has not converged): δ̂ = θ_k − θ_{k+1} − ‖r_{k+1}‖. This is an *estimate*, not a proof: a
Krylov space can miss eigenvalues above θ_{k+1} + ‖r_{k+1}‖ while θ_{k+1} sits unresolved inside
a continuum, or where it has converged on C's null space (wide data) before the continuum above
it. So the estimate is floored by the mean of the variance the top k cannot hold
(:func:`._bounds.next_eigenvalue`), and the bounds split at later Ritz values only where those are
resolved (:func:`._bounds.resolved_cuts`). On random spectra (continua, plateaus, fast and slow
decay; tall and wide; every pass) the returned bound had been below the truth at 15 of the first
300 fits' passes (up to 9×: continua and a plateau); with these, at none of 1000 above round-off
(benchmarks/README.md). It is shown conservative — reported bound ≥ true sin θ
against a float64 LAPACK reference — on every test spectrum and seed (``tests/test_solver_krylov.py``:
noise continua with λ_k/λ_{k+1} from 1.1 to 3, tall, wide and square, 6 seeds each, every pass;
σ_i = i^{-1/2}; κ = 1e10). Measured bound / true sin θ: 2.4–2.7 at λ_k/λ_{k+1} = 1.1–1.2, ≤ 11 at
3.0, ≤ 5 square, and up to 39 on wide shapes and on σ_i = i^{-1/2} (up to 90 there), where the
returned components run far ahead of the certified plain Ritz vectors. The bound for the returned (left Rayleigh–Ritz) components adds their
distance to X_k, by the triangle inequality for ‖P − P'‖₂ = sin θ:
``error_bound = ‖(I − X_kX_kᵀ)U‖₂ + ‖R_k‖₂/δ̂``, capped at 1 (1 also when δ̂ ≤ 0: the k-th and
(k+1)-th eigenvalues are not yet separated, or equal and the subspace is not determined).
That sum is about twice the plain vectors' own bound, which is tight (measured 1.3× their true
error on the 4e4 × 1e4 benchmark). So with a ``tol``, the fit stops at the first pass where
*either* answer is certified: the left projection's components when their bound meets ``tol``,
else the plain Ritz vectors X_k with ‖R_k‖₂/δ̂ (``info["projection"]`` says which: "left" or
"plain"); the latter are typically ~4× less accurate than the left ones but carry the proof,
and save a pass (7 instead of 8 reads for 1e-4 on that benchmark). Without ``tol`` the left
projection is returned (the accuracy-first answer at a fixed read count).
*The refined answer (issue 41).* The sum above is ~9× the left components' true error on the
hard spectra, a pass lost at every tol. Each pass also knows C·X_k = W·Y_k exactly, and
span(C·X_k) is certified by a power step's contraction: with X_k = U_k·A + U_⊥·B,
tan θ(C·X_k, U_k) = ‖Λ_⊥·B·A⁻¹·Λ_k⁻¹‖ ≤ (λ_{k+1}/λ_k)·tan θ(X_k, U_k) ≤ (λ̂_{k+1}/θ_k)·tan(‖R_k‖/δ̂)
(sin = tan/√(1 + tan²); W's round-off added). Its truth is within 1–1.25× of the left
components' (up to 8× behind them only on wide data at early passes, where the left projection
cannot be certified tightly anyway), its bound 1.0–2.3× its truth once ≤ 1e-2 (every suite
spectrum, 6 seeds). λ̂_{k+1} is the smaller of θ_{k+1} + ‖r_{k+1}‖ and the trace bound
trace C − Σ_{i≤m, i≠k+1} θ_i (λ_i ≥ θ_i by interlacing, all λ_i ≥ 0: a proof, tight when the
basis holds nearly all of the variance), :func:`next_eigenvalue`. The left components' bound also
takes the triangle through the refined answer. The fit returns whichever of the three answers
has the smallest bound (``info["projection"]``: "left", "refined" or "plain") and stops on it;
on the 8000 × 2000 scaled twin of the benchmark's hard field 1e-4 now takes 7 passes (bound
2.0e-5) and 1e-6 takes 9.
*A plateau below λ_k (issue 41, second round).* With equal eigenvalues just under λ_k the gap to
λ_{k+1} is the plateau's, but the plateau's own Ritz block Z = [x_{k+1} … x_{k+s}] converges
with the kept one, and R_k ⟂ Z: the error X_k can hold on the plateau is ≤ sin θ(U_p, Z)·‖R_k‖/δ̂
(a product of two small numbers), the rest's gap and contraction are to λ̂_{k+s+1}, below the
plateau (:func:`._bounds.split_bounds`, the best over s ≤ ``NEXT_CLUSTER``; s = 0 is the bound
above). Benchmark plateau (λ_k/λ_{k+1} = 1.5, five equal modes): bound/true 8.8× → 2.2×, a pass
fewer. Deep in a fast-decaying tail it stays loose (≤ 15× below 1e-6 on the test plateaus; 93× at
pass 2 on a halving spectrum): the refined answer's error sits on eigenvalues far below λ_{k+1},
and the worst-case contraction λ̂/θ_k cannot see where.
*Fast decay (issue 41, third round).* The variance the basis has not seen, τ = trace C − trace T,
is known exactly and bounds ‖C_⊥‖, the only part of C the fit does not hold in span[V, R_k]. A
fourth answer, the augmented Û (Rayleigh–Ritz of C on span[V, R_k] with the unknown block taken
as 0), has a residual ≤ τ‖z_q‖ + … outside span V (:func:`._bounds.unseen_variance_bound`); on a
halving spectrum at pass 2 its bound is 2.8× its truth (the refined one's was 93×), and
1.3–11× on the tests' fast spectra (rate 0.5–0.7). It is returned (``info["projection"]`` =
"augmented") and stopped on only where its bound is below ``AUGMENTED_MARGIN`` = ½ of the
others' (deep in a plateau's tail it is about equal to the refined one's and looser against its own,
smaller, truth). On continua τ is the continuum's variance and it stays 1.
*The left projection certified directly (issue 41, fourth round).* Its components are the top
eigenvectors of the Nyström approximation M = C·V·T⁺·VᵀC ⪯ C, and E = C − M = X̃ᵀ(I − Π)X̃ is
positive semi-definite, vanishes on span V and has a known trace τ_N = trace C − trace(T⁺·P)
(≤ τ): the components' residual under C is ‖M·U − U·Σ²‖ (round-off) plus ≤ τ_N·‖(I − VVᵀ)U‖, a
product of two small numbers, and Davis–Kahan with the gap σ_k² − λ̂_{k+1} (split at the next Ritz
block as above) certifies them (:func:`._bounds.nystrom_bound`). Fast decay at rate 0.7, pass 2:
4.7e-5 where the best other bound was 3.3e-3; the halving spectrum meets 1e-7 in 2 passes (3
before). The components run further ahead still (9.6e-7 true there: 48×), so — as the augmented
answer's — this bound is taken only where it is below ``AUGMENTED_MARGIN`` of the others'. With a
``tol`` every pass now makes the left projection (an m×m eigenproblem and three d×m×k products
more) so that the stopping rule sees this bound.
Eigenvalues: θ_i ≤ λ̂_i ≤ λ_i for the returned λ̂_i (interlacing; the left projection's values
majorise the plain ones), and λ_i − θ_i ≤ min(‖R_k‖₂, ‖R_k‖₂²/δ̂) (the quadratic residual bound,
Kato–Temple for one vector), so ``eigenvalue_error_bounds`` = that over λ̂_i, relative. ‖R_k‖₂
includes a round-off term 4ε·√n·θ₁ (``ROUNDOFF_RESIDUAL``) for the error of W = CV itself, which
no residual shows: the bound then also holds at the round-off floor (~1e-13).

Costs
-----
Passes: ``max_passes`` at most, fewer when ``tol`` is met (the bound is checked after every
pass). Flops per pass: 4·n·d·ℓ for the fused pass (as randomized) + O(d·m·ℓ + m³) on the client
(m = ℓ·passes: extending T = VᵀW and P = WᵀW by one block, the next block's two projections, the
m×m eigenproblems, the d×(k + 1 + NEXT_CLUSTER) residuals, the next Ritz block included), and one O(d·m²) SVD at the end. These client
steps run with the one BLAS thread a solve leaves (unlike the covariance solver's d×d eigh, they
do not get the caller's threads back): on the shared 2-core machine, two BLAS threads made a
6-pass fit at 2e4 × 2000 take 12.7 s instead of 4.4 s (small products, threads contending with
the load). The tall client products (V·(VᵀB), W·Y, the final answer from a QR of the
d×m' matrix W·G^{-½} and an SVD of its m'×m' R, see :func:`_left_ritz`) are BLAS-3 and stay
float64 even for float32 data: the bound is made of the Ritz residuals ‖W·y − θ·V·y‖, and
float32's rounding (6e-8 relative) in V and W would leave a residual floor near 6e-8·‖C‖, i.e.
a certified sin θ no better than ~6e-8·λ₁/(λ_k − λ_{k+1}) — above the default accuracy 1e-6
once the gap is below ~6 % of λ₁, which real EOF spectra reach by the 10th mode. The client's
time after each pass is reported in ``client_seconds_``. Memory per task: that of a randomized pass. On the client: the
kept basis V and W = CV, 2·d·m float64 (16·d·ℓ·passes bytes: 34 MB at d = 1e4, ℓ = 30,
7 passes). It is capped at ``BASIS_BYTES``: beyond it the basis is thick-restarted — V, W are
replaced by the leading Ritz vectors X and C·X = W·Y, known exactly, so no pass is lost and the
bound stays valid (it only ever uses the current basis). The cap (1 GiB: d·m ≤ 6.7·10⁷) is never
reached below d ≈ 10⁶ with the default budgets (d = 10⁵, ℓ = 30, 20 passes: 0.8 GB), so the basis
is kept in NumPy on the client rather than as a distributed array; beyond it, restarts keep the
client within the cap at the price of a slower (restarted) convergence.

Predicted passes. Before any read (:func:`predicted_pass_range`, the planner): a range, 2 (data
of rank ≤ ℓ is exact after the second pass) to the budget, and a point estimate
(:func:`predicted_passes`): the bound taken as ``PREDICTED_BOUND_AT_3`` = 0.1 after pass 3 and to
fall by the Chebyshev rate ρ = x + √(x² − 1), x = 2·r − 1, for r = λ_k/λ_{ℓ+1} =
``PREDICTED_GAP_RATIO`` = 4.5 (ρ ≈ 16): 4, 5 and 7 passes for 1e-2, 1e-4 and 1e-6 — metadata
cannot tell a halving spectrum (2 passes) from a noise continuum (8–10). The fit can: from pass
``SIMULATED_FROM_PASS`` = 2 on (the basis then holds span[Ω, CΩ]; one random block's Ritz values
predicted 2 passes on continua that took 8) it *simulates itself* (:func:`simulated_total`): a
model spectrum — the top k Ritz values, and a tail carrying the variance they leave, trace C −
Σ_{i≤k} θ_i, known exactly (:func:`model_spectrum`) — on a diagonal matrix of a few hundred to a
few thousand entries (tail values binned, each bin kept as a few distinct values:
:func:`binned_spectrum`; equal values exactly in law: :func:`simulated_passes`), run through this
module's iteration and :func:`certify` until the simulated bound meets ``tol``. It is rerun only
once the fit's bound is ``SIMULATION_DRIFT`` = 10× off the simulated one at the same pass, and
only where someone sees its figure (a listener or the log at INFO: :meth:`Passes.heard`). Measured
(1000 × 200 and 2400 × 600, the tests): the passes made ±1 on rate-0.8 decay, a continuum 0.9·λ_k
below the signal, a plateau and 20 modes above white noise, from the start of pass 3 (the
continuum at 1e-6: 10 predicted, 10 made; at 16 000 × 2000, 11 and 14–15 for 10 and 14, the
plateau 7 and 9 for 6 and 8). Two parts of the model made that so: the head at the Ritz values'
upper ends θ_i + ‖r_i‖ and a few distinct values kept a bin (:func:`model_spectrum`,
:data:`BIN_PARTS`); before, 14–20 passes were predicted there for 10–14. Before pass 2 ends (and
where nothing can be modelled) :func:`passes_left` extrapolates the bound's fall once it is below ``INFORMATIVE_BOUND``, else the prior stands. The
progress line and the log show the passes predicted, the time left for them and the pass whose
results gave them ("ETA from pass 2"). A fit given a probed plan (``PCA.plan(X, probe=True)``,
:mod:`daskpca._probe`: the same simulation on the spectrum of ≤ 1 % of the rows) starts from the
probe's simulated bounds (``probed=``) and shows an ETA from its first pass, until its own
simulation replaces them after pass 2 — or, where the probe was an earlier fit of the same model
(``probed_converged``), while the fit keeps to that course.
Once its last three bounds are informative, their measured fall decides (:func:`passes_left`) and
no simulation is run for it: the measured fall was exact from pass 5 at 16 000 × 2000 on
continua, plateaus and a reanalysis-like field, and costs nothing (a simulation there:
0.1–0.7 s of client time). No count passes the pass at which the basis spans
min(n − 1, d) vectors, where the fit is exact. The fit itself stops on the bound, whatever was
predicted.

Checkpoints (``checkpoint=PATH``): after every pass, V, W, the next block and the passes done are
written atomically; a rerun of the same job resumes and makes only the remaining passes, with the
same result as an uninterrupted run.

References
----------
C. Musco, C. Musco, "Randomized block Krylov methods for stronger and faster approximate singular
value decomposition", NeurIPS 2015, arXiv:1504.05477.
C. Davis, W. M. Kahan, "The rotation of eigenvectors by a perturbation. III", SIAM J. Numer.
Anal. 7 (1970) 1–46, doi:10.1137/0707001.
Y. Saad, *Numerical Methods for Large Eigenvalue Problems*, 2nd ed., SIAM 2011, ch. 4 and 6,
doi:10.1137/1.9781611970739.
L. Giraud, J. Langou, M. Rozložník, J. van den Eshof, "Rounding error analysis of the classical
Gram–Schmidt orthogonalization process", Numer. Math. 101 (2005) 87–100,
doi:10.1007/s00211-005-0615-4.
N. Halko, P.-G. Martinsson, J. A. Tropp, SIAM Review 53 (2011) 217–288, doi:10.1137/090771806.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, replace
from numbers import Integral, Real

import numpy as np
from scipy.linalg import eigh, svd

from ..exceptions import AccuracyWarning, InputError
from ._base import ComponentRequest, Cost, PlanInput, SolverDeclaration, SolverResult, open_checkpoint
# The bounds (Davis–Kahan on the plain Ritz vectors, λ_{k+1} by the trace, the refined span) live
# with the other solvers' in ._bounds, under one contract.
from ._bounds import ROUNDOFF_RESIDUAL, TRACE_RTOL, certify, next_eigenvalue  # noqa: F401 (the notes name them)
from ._iterative import as_generator, sketch_result, subspace_sine
# The kept basis and its orthogonalisation live in the pass machinery (daskpca.passes), shared
# with the Gram road's in-memory eigensolver, Hilbert's Krylov road and MCA's.
from ..passes import DEFLATION_RTOL, Basis, client_blas_threads, one_blas_thread, orthonormal_extension, tall_qr
from ..passes import EARLIER_FIT, SKETCH_FLOPS_PER_SECOND, Passes, releases_slab_buffers
# The sketch kernel shared with the randomized solver: its first pass (fused with the feature
# stage, hence ``fuses_features`` here too) and every later pass are this solver's.
from ..passes import (check_oversamples, feature_fingerprint, fuses_features, leading_right_vectors, pass_input,  # noqa: F401
                      resumed_stage, run_first_pass, run_pass, stage_state)

OPTIONS = ("n_oversamples", "tol", "max_passes", "checkpoint")


#: Eigenvalues from X̃ᵀX̃ / X̃X̃ᵀ: the estimator's ill-conditioning check applies.
SQUARES_THE_DATA = True

#: Read budget without a tolerance: the randomized solver's default (q = 7: 8 reads), which block
#: Krylov turns into a far smaller error; the bound reached is reported.
DEFAULT_PASSES = 8
#: Read budget with a tolerance and no ``max_passes``.
DEFAULT_MAX_PASSES = 20
#: Without a tolerance, stop early once the bound is this small (float64 round-off territory).
ROUNDOFF_BOUND = 1e-10
#: Most bytes of the kept basis (V and W, float64) on the client before a thick restart.
BASIS_BYTES = 2**30


def check_accuracy_options(tol, max_passes) -> tuple[float | None, int | None]:
    """Validate ``tol`` (None or a float in (0, 1)) and ``max_passes`` (None or an int ≥ 1)."""
    if tol is not None and (isinstance(tol, bool) or not isinstance(tol, Real) or not 0 < tol < 1):
        raise InputError(
            f"tol={tol!r}: expected None or a bound on the sine of the largest principal angle, "
            "a float in (0, 1) such as 1e-4."
        )
    if max_passes is not None and (isinstance(max_passes, bool) or not isinstance(max_passes, Integral) or max_passes < 1):
        raise InputError(f"max_passes={max_passes!r}: expected None or an int >= 1 (e.g. 10).")
    return (None if tol is None else float(tol)), (None if max_passes is None else int(max_passes))


#: The planner's model of the bound before any read (see the module notes, "Predicted passes"):
#: its value after 3 passes and the ratio λ_k/λ_{ℓ+1} whose Chebyshev rate it falls by after.
PREDICTED_BOUND_AT_3 = 0.1
PREDICTED_GAP_RATIO = 4.5
#: The fewest passes any spectrum needs for a bound below 1: the first block's image completes a
#: basis of the range only in the second (data of rank ≤ ℓ: exact after 2).
FEWEST_PASSES = 2
#: A bound below this is informative: how it falls from pass to pass is the convergence rate.
INFORMATIVE_BOUND = 0.5


def chebyshev_rate(gap_ratio: float) -> float:
    """ρ = x + √(x² − 1), x = 2·gap_ratio − 1: the fall of block Krylov's error per pass for
    λ_k/λ_{ℓ+1} = ``gap_ratio`` (T_p(x) ≈ ρ^p/2, Musco & Musco 2015)."""
    x = max(2.0 * gap_ratio - 1.0, 1.0)
    return float(x + np.sqrt(x * x - 1.0))


def predicted_passes(tol, max_passes=None) -> int:
    """Passes the planner expects for ``tol`` (without one: the budget), capped by the budget: the
    point estimate of :func:`predicted_pass_range`."""
    budget = pass_budget(tol, max_passes)
    if tol is None or not tol > 0:  # none asked; or 0 (other solvers' "never stop"): the budget
        return budget
    extra = max(0.0, np.log(PREDICTED_BOUND_AT_3 / tol) / np.log(chebyshev_rate(PREDICTED_GAP_RATIO)))
    return int(min(budget, 3 + np.round(extra)))


def predicted_pass_range(tol, max_passes=None) -> tuple[int, int, int]:
    """``(fewest, point, most)`` passes before any read: the fewest any spectrum needs
    (:data:`FEWEST_PASSES`), the planner's point estimate (:func:`predicted_passes`) and the
    budget. Without a tol all three are the budget (the fit runs it, stopping early only at
    round-off)."""
    budget = pass_budget(tol, max_passes)
    if tol is None or not tol > 0:
        return budget, budget, budget
    return min(FEWEST_PASSES, budget), predicted_passes(tol, max_passes), budget


def passes_left(history: list[float], target: float, gap_ratio: float | None = None) -> int | None:
    """Passes still needed after those whose bounds are ``history`` for the bound to reach
    ``target``, learnt from the fit itself; None while nothing is learnt yet.

    Once the bound is informative (< :data:`INFORMATIVE_BOUND`) it falls geometrically: by the
    rate measured over the last passes (the geometric mean of the last two falls), or — at the
    first informative pass — by the Chebyshev rate of the gap ratio θ_k/λ̂_{k+1} the bound itself
    uses (``gap_ratio``), at least the planner's (λ̂_{k+1} still overestimates λ_{k+1} there:
    measured 1.6–2.4 where the truth was 2–2.4). Before (the first passes, the gap not yet
    resolved) the caller keeps the planner's prior.
    """
    bound = history[-1]
    if bound <= target:
        return 0
    if not bound < INFORMATIVE_BOUND:
        return None
    informative = [b for b in history[-3:] if b < INFORMATIVE_BOUND]
    if len(informative) >= 2:
        rate = (informative[0] / bound) ** (1.0 / (len(informative) - 1))
    else:  # the first informative pass: λ̂_{k+1} is still high there, so its gap ratio is low
        rate = max(chebyshev_rate(gap_ratio or 1.0), chebyshev_rate(PREDICTED_GAP_RATIO))
    if not rate > 1.05:  # not falling (round-off, or a stalled gap): nothing to extrapolate
        return None
    return int(np.ceil(np.log(bound / target) / np.log(rate) - 1e-9))


def predict_by_fall(passes, history: list[float], target: float, *, made: int, prior: int | None, most: int,
                    gap_ratio: float | None = None, after: int = 0, prior_learnt: int | None = None) -> None:
    """Show on ``passes`` (:class:`~daskpca.passes._progress.Passes`) the count a bounded Krylov
    road without a simulation of its own expects (Hilbert's, MCA's): the ``made`` passes, those
    :func:`passes_left` extrapolates from the bounds ``history`` (learnt at pass ``made``) and the
    ``after`` passes the road reads once the bound is met (Hilbert's components), at most
    ``most``; before the bound is informative, ``prior`` (None: no count shown; ``prior_learnt``
    0 where an earlier fit gave it, :func:`passes_from_history`: it stands until two bounds are
    informative, since the first extrapolates by the planner's rate — Hilbert's at 0.9ⁱ showed 10
    there, where the earlier fit's count, 7, was the passes made)."""
    left = passes_left(history, target, gap_ratio)
    if left is not None and prior_learnt is not None and sum(b < INFORMATIVE_BOUND for b in history[-2:]) < 2:
        left = None if history[-1] > target else left
    if left is not None:
        passes.predict(min(most, made + left + after), learnt=made)
    else:
        passes.predict(None if prior is None else max(prior, made + 1 + after), learnt=prior_learnt, source=EARLIER_FIT)


def passes_from_history(history, target: float) -> int | None:
    """The Krylov passes an earlier fit of the same field whose bound after each pass was
    ``history`` predicts for ``target``: the pass at which its bound met ``target``, else its
    passes and those its measured fall (:func:`passes_left`) adds; None where it says nothing (no
    informative bound). A road that simulates nothing (Hilbert's) learns so from its last fit."""
    try:  # a model's record read back (edited by hand, verify=False): a prediction, never an error
        history = [float(b) for b in history or ()]
    except (TypeError, ValueError):
        return None
    if not history or not all(np.isfinite(history)):
        return None
    met = next((i + 1 for i, bound in enumerate(history) if bound <= target), None)
    if met is not None:
        return met
    left = passes_left(history, target)
    return None if left is None else len(history) + left


#: The simulated spectrum (:func:`model_spectrum`): the tail beyond the kept Ritz values is binned
#: after its first 2k values into bins growing by this factor, so the simulated diagonal stays a
#: few hundred to a few thousand entries (up to 5·ℓ a bin: ~4000 at d = 10⁶ and ℓ = 60) whatever
#: d is. Twice 1.5, the factor used while a bin was one value: with :data:`BIN_PARTS` the same
#: counts on continua, plateaus and spikes over an MP bulk (d = 2000 and 2·10⁴), and 28 s against
#: 40 s for a 20-pass simulation at d = 10⁶, ℓ = 60 (one value a bin at 1.5: 9 s).
TAIL_BIN_GROWTH = 2.0
#: Each bin keeps up to this many distinct values (equal-count parts, each at its mean). A bin
#: collapsed to one value of multiplicity μ is an exact eigenspace, which the block's spare
#: columns deflate at once, where μ distinct values are not: on a continuum 0.9·λ_k below the
#: signal (16 000 × 2000, ℓ = 20) one value a bin predicted 8 and 10 passes for tol 1e-4 and 1e-6,
#: the unbinned spectrum 10 and 14 (the fit: 10 and 14); five parts 10 and 13, at d = 2·10⁴ 11 and
#: 14 (unbinned 11 and 15), for 2–3× the one-value cost (0.4–0.7 s a simulation at d = 2·10⁵).
#: Fast decay, plateaus and spikes over an MP bulk: the same counts either way.
BIN_PARTS = 5
#: The simulation needs the basis to hold an image block (span[Ω, CΩ]): after the first pass the
#: Ritz values are those of a random subspace, and the model predicted 2 passes on continua that
#: took 8 (measured, benchmarks/tightness.py); the planner's prior stands until then.
SIMULATED_FROM_PASS = 2


def model_spectrum(theta: np.ndarray, total: float, rank: int, k: int,
                   residuals: np.ndarray | None = None, known: int | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """A spectrum of C consistent with what the fit knows: ``(values, multiplicities)``, descending.

    ``theta``: the Ritz values of the basis (descending, scatter units); ``total`` = trace C (from
    the first pass); ``rank``: most nonzero eigenvalues (min(n − 1, d)); ``residuals``: the top k
    Ritz vectors' residual norms ‖C·x_i − θ_i·x_i‖, if known. The top k are kept (they converge
    first), each at θ_i + ‖r_i‖: a Ritz value is a lower estimate of its eigenvalue (Cauchy
    interlacing), θ_i + ‖r_i‖ the upper end of the interval that holds an eigenvalue
    (Krylov–Weinstein), and the value a Ritz value rises to as it converges. Taken at θ_i the gap
    the passes had not yet opened was read as the spectrum's: from pass 2 at 16 000 × 2000, 14
    and 20 passes predicted on a continuum that took 10 and 14, 11 and 14 on a plateau that took 6
    and 8; at θ_i + ‖r_i‖ 11 and 14–15, 7 and 9 (a reanalysis-like field 6 and 7 for 6 and 8; 1/i
    8 and 9 for 6 and 8; 0.8ⁱ 3 for 3). Everything beyond — the slowly converging Ritz values
    k+1 … m, which underestimate, and the d − m the basis has not seen — is replaced by a tail of
    rank − k eigenvalues carrying the variance left, total less the head (exact where the head
    is), shaped as a geometric decay from θ_{k+1} (the continuation of the trailing values, the
    ratio fixed by the mass), flat at that mass's mean where even a flat tail from θ_{k+1} cannot
    carry it (a noise continuum the Ritz values underestimate), never above the head's last
    value. Measured: keeping the Ritz values k+1 … m instead predicted 2–5 passes on continua
    that took 7–10. None where there is nothing to model (no variance).

    ``known`` (default k): how many leading values of ``theta`` are kept as they are. A finished
    fit's leading ℓ Ritz values (what a model keeps, :func:`daskpca._probe.from_model`) are
    converged far enough to keep all: its tail then starts at θ_ℓ. Kept to k there, a plateau
    below λ_k that took 6 and 8 passes was predicted 8 and 10, 1/i 8 for 6; all ℓ kept: 6 and 8,
    7 for 6 (8000 × 1000, a second draw of the same spectrum; continua, 0.8ⁱ and spikes over
    white noise within a pass either way).
    """
    theta = np.clip(np.asarray(theta, dtype=np.float64), 0.0, None)
    if not (np.isfinite(total) and total > 0 and theta.size and theta[0] > 0):
        return None
    head = theta[:min(k if known is None else max(known, k), theta.size)].copy()
    if residuals is not None:
        upper = np.asarray(residuals, dtype=np.float64)[:head.size]
        head[:upper.size] += upper
        head = np.sort(head)[::-1]
    left = max(float(total) - float(head.sum()), 0.0)
    count = int(rank) - head.size
    if count <= 0 or left <= TRACE_RTOL * total:
        return head, np.ones(head.size)
    # The tail continues from the first value not kept (the last kept where there is none).
    start = min(float(theta[head.size]) if theta.size > head.size else float(head[-1]), float(head[-1]))
    steps = np.arange(count, dtype=np.float64)
    if not start > 0 or start * count <= left:
        tail = np.full(count, min(left / count, float(head[-1])))
    else:  # start·Σ_j r^j = left, increasing in r: bisection (60 halvings: r to 1e-18)
        low, high = 0.0, 1.0
        for _ in range(60):
            ratio = (low + high) / 2
            low, high = (ratio, high) if start * np.sum(ratio ** steps) <= left else (low, ratio)
        tail = start * low ** steps
    return binned_spectrum(head, tail, k)


def binned_spectrum(head: np.ndarray, tail: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(values, multiplicities)`` for :func:`simulated_passes`: the ``head`` values each alone, then
    the descending ``tail``'s first 2k values alone (they decide the gap) and the rest in bins
    growing by :data:`TAIL_BIN_GROWTH`, each kept as up to :data:`BIN_PARTS` equal-count parts at
    their means (the bin's spread kept, its mass exact). A few hundred to a few thousand entries
    whatever the tail's length (rank − k, up to d)."""
    values, sizes, i, size = [float(v) for v in head], [1] * len(head), 0, 1
    while i < tail.size:
        size = 1 if i < 2 * k else max(size + 1, int(size * TAIL_BIN_GROWTH))
        segment = tail[i:i + size]
        for part in np.array_split(segment, min(segment.size, BIN_PARTS)):
            values.append(float(part.mean()))
            sizes.append(part.size)
        i += segment.size
    return np.array(values), np.array(sizes, dtype=np.int64)


def simulated_passes(values: np.ndarray, multiplicities: np.ndarray, k: int, ell: int, target: float, budget: int,
                     n_samples: int = 1, seed: int = 0) -> list[float]:
    """The bounds after each pass block Krylov makes on a matrix with this spectrum until its bound
    reaches ``target`` (at most ``budget`` passes; their count is the prediction): the same iteration and the same
    bound as :func:`solve` stops on (:func:`estimate`, the left projection's Nyström bound included: without it the
    simulation predicted a pass more than fits made on fast decay, 4 for 3 at 0.8ⁱ and tol 1e-6), on a diagonal
    matrix, from a Gaussian start.

    A value of multiplicity μ is exact in a smaller space: block Krylov on a diagonal C sees the
    start block's rows E (μ×ℓ) on that eigenspace only through EᵀE (C is λ·I there), and the
    upper-triangular Bartlett factor F (min(μ, ℓ)×ℓ: χ²_{μ−i} diagonal, Gaussian above, FᵀF ~
    Wishart(μ) like EᵀE) has the same law. So the simulated diagonal has Σ min(μ, ℓ) entries and
    trace C is Σ λ·μ. Cost: that of :func:`solve`'s client steps at d = Σ min(μ, ℓ) (a few hundred)
    for each simulated pass; no read. Deterministic (``seed``).
    """
    rng = np.random.default_rng(seed)
    diagonal, rows = [], []
    for value, count in zip(values, multiplicities):
        size = int(min(count, ell))
        factor = np.triu(rng.standard_normal((size, ell)), 1)
        factor[np.arange(size), np.arange(size)] = np.sqrt(rng.chisquare(int(count) - np.arange(size)))
        diagonal.append(np.full(size, value))
        rows.append(factor)
    diagonal, total = np.concatenate(diagonal), float(np.dot(values, multiplicities))
    ell = min(ell, diagonal.size)
    block = tall_qr(np.vstack(rows)[:, :ell])[0]
    basis, history = Basis.empty(diagonal.size), []
    with one_blas_thread():  # a few hundred diagonal entries: more threads only contend
        for _ in range(budget):
            basis = basis.extend(block, diagonal[:, None] * block)
            # The diagonal holds Σ min(μ, ℓ) of the model's Σ μ dimensions: its rank is the model's.
            found = estimate(basis, k, n_samples=n_samples, total=total, rank=int(multiplicities.sum()))
            history.append(found.certified())
            if history[-1] <= target:
                break
            block = orthonormal_extension(basis.V, basis.W[:, -block.shape[1]:], basis.T[:, -block.shape[1]:])
            if block.shape[1] == 0:  # invariant: the fit would stop here too
                break
    return history


#: The simulated fit is rerun on the newest Ritz values once the fit's bound is this factor off the
#: simulated bound at the same pass (either way).
SIMULATION_DRIFT = 10.0


def _on_course(simulated: list[float], made: int, bound: float) -> bool:
    """Whether the fit's bound after pass ``made`` is within :data:`SIMULATION_DRIFT` of the simulated one."""
    if made > len(simulated):
        return False
    expected = simulated[made - 1]
    return expected / SIMULATION_DRIFT <= bound <= expected * SIMULATION_DRIFT


def simulated_total(theta: np.ndarray, total: float | None, rank: int, k: int, ell: int, target: float, budget: int,
                    n_samples: int = 1, residuals: np.ndarray | None = None) -> list[float] | None:
    """The bounds a fit whose basis has Ritz values ``theta`` (the top k's residual norms
    ``residuals``) is predicted to reach pass by pass (their count: the passes predicted in all):
    :func:`simulated_passes` on :func:`model_spectrum`; None where there is no spectrum to model."""
    if total is None or k >= rank:
        return None
    model = model_spectrum(theta, total, rank, k, residuals)
    if model is None:
        return None
    return simulated_passes(*model, k, ell, target, budget, n_samples)


def _missed_tol(tol: float, bound: float, budget: int, passes: int, invariant_size: int | None) -> str:
    """The AccuracyWarning of a fit that stopped above ``tol``, naming why it stopped: the read
    budget spent, or a Krylov space that became invariant (more passes would add nothing)."""
    exact = "or use an exact solver (solver='covariance' or 'gram'; --solver on the command line) where its matrix fits"
    if invariant_size is None:
        return (f"krylov: the read budget of {budget} passes was spent with an error bound of {bound:.2g} on sin θ, "
                f"above tol={tol:g}. Raise max_passes (--max-passes on the command line), {exact}.")
    return (f"krylov: stopped after {passes} pass{'es' if passes != 1 else ''} with an error bound of {bound:.2g} on "
            f"sin θ, above tol={tol:g}, because its Krylov space became invariant (dimension {invariant_size}): the data "
            "has no variance outside it (constant data has none at all), so more passes cannot lower the bound. What "
            "is left is round-off, or kept components not separated from the next ones (equal or zero variances: "
            f"then they are not unique). Keep fewer components (n_components), loosen tol, {exact}.")


def pass_budget(tol, max_passes) -> int:
    """Reads the solver may make: ``max_passes``, else the default for with / without ``tol``."""
    if max_passes is not None:
        return max_passes
    return DEFAULT_PASSES if tol is None else DEFAULT_MAX_PASSES


# ---- the basis: orthonormal blocks and their images under C -------------------------------------


@dataclass(frozen=True)
class Estimate:
    """The answers and their bounds from the blocks so far (all local, no pass).

    Four answers are certified (see the module notes): the left Rayleigh–Ritz components
    (``components``, bound ``error_bound``: through the nearer Ritz answer, or directly by
    :func:`._bounds.nystrom_bound`), the refined Ritz vectors span(C·X_k) (``refined_*``,
    ``refined_bound``), the plain Ritz vectors X_k (``ritz_*``, ``ritz_bound``) and the augmented
    vectors (``augmented_*``).
    :meth:`best` picks the one with the smallest bound.
    """

    components: np.ndarray  # (k, d), left Rayleigh–Ritz
    singular_values: np.ndarray  # (k,), of X̃
    error_bound: float  # on sin θ of the components' span
    ritz_bound: float  # Davis–Kahan bound of the plain Ritz vectors
    residual_norms: np.ndarray  # (k,), ‖C x_i − θ_i x_i‖ (scatter units)
    eigenvalue_error_bounds: np.ndarray  # (k,), relative
    gap: float  # δ̂ = θ_k − λ̂_{k+1} (scatter units; ≤ 0: not separated)
    ritz_components: np.ndarray  # (k, d), the plain Ritz vectors X_kᵀ the bound certifies
    ritz_values: np.ndarray  # (k,), their Rayleigh quotients θ_i (scatter units)
    refined_components: np.ndarray | None = None  # (k, d), an orthonormal basis of span(C·X_k)
    refined_singular_values: np.ndarray | None = None  # (k,)
    refined_bound: float = 1.0  # on sin θ of span(C·X_k)
    next_eigenvalue: float = np.inf  # λ̂_{k+1}, the upper estimate of λ_{k+1} the bounds use
    augmented_components: np.ndarray | None = None  # (k, d), Û of ._bounds.unseen_variance_bound
    augmented_singular_values: np.ndarray | None = None  # (k,), √μ_i, lower bounds of σ_i
    augmented_bound: float = 1.0  # on sin θ of span Û

    def certified(self, tol: float | None = None) -> float:
        """The smallest bound any of the answers carries (what the fit stops on), the augmented
        answer's only where it is the one returned (:func:`smallest_bound`)."""
        return smallest_bound(min(self.error_bound, self.refined_bound, self.ritz_bound), self.augmented_bound)

    def best(self) -> tuple["Estimate", str]:
        """The answer with the smallest bound and its name (``info["projection"]``): "left",
        "refined" or "plain"; ties go to the left projection, then the refined vectors (the
        more accurate answers at equal bounds, e.g. all 1 before the gap is resolved)."""
        others = min(self.error_bound, self.refined_bound, self.ritz_bound)
        if self.augmented_components is not None and smallest_bound(others, self.augmented_bound) < others:
            return replace(self, components=self.augmented_components, singular_values=self.augmented_singular_values,
                           error_bound=self.augmented_bound), "augmented"
        if self.error_bound <= min(self.refined_bound, self.ritz_bound):
            return self, "left"
        if self.refined_components is not None and self.refined_bound <= self.ritz_bound:
            return replace(self, components=self.refined_components, singular_values=self.refined_singular_values,
                           error_bound=self.refined_bound), "refined"
        return self.plain(), "plain"

    def plain(self) -> "Estimate":
        """The same estimate answering with the plain Ritz vectors (bound ``ritz_bound``)."""
        return replace(self, components=self.ritz_components, singular_values=np.sqrt(np.clip(self.ritz_values, 0, None)),
                       error_bound=self.ritz_bound)


#: The augmented answer Û (:func:`._bounds.unseen_variance_bound`) is returned — and stopped on —
#: only where its bound is below this fraction of the other answers' best: where the two are
#: close, Û is typically the more accurate one (deep in a plateau's tail: 7.9e-9 against the refined
#: answer's 1.1e-8, bounds 1.5e-7 and 1.6e-7), so answering with it would report a bound 19× its
#: truth where the refined answer's is 14×; where it decides (fast decay) it is 30× below.
AUGMENTED_MARGIN = 0.5


def smallest_bound(others: float, augmented: float) -> float:
    """The bound a fit stops on and reports: ``others`` (the smallest of the left, refined and plain
    answers'), or the augmented answer's where it is below AUGMENTED_MARGIN of that."""
    return augmented if augmented < AUGMENTED_MARGIN * others else others


#: The returned answer comes from the Gram route of :func:`_left_ritz` (an m×m eigenproblem)
#: when its smallest kept value is at least this fraction of its largest: squaring then costs at
#: most ~m·ε/GRAM_RANGE ≈ 1e-11 relative on the k-th variance and a factor σ₁/(2σ_k) ≤ 50 on the
#: vectors' round-off, far below any bound the fit reports; wider ranges (κ(X) = 1e10 is tested)
#: take the QR route.
GRAM_RANGE = 1e-4


def _left_ritz(basis: Basis, k: int, g: np.ndarray, Z: np.ndarray, *, stable: bool) -> tuple[np.ndarray, np.ndarray]:
    """Top-k singular values and right vectors (k×d) of Q_KᵀX̃ = G^{-½}·Wᵀ, G = VᵀW = T = Z g Zᵀ
    (the Ritz decomposition: G is the Rayleigh quotient matrix).

    The Gram route: the eigenproblem of that m×d matrix's m×m Gram g^{-½}Zᵀ·P·Z·g^{-½} (P = WᵀW,
    kept up to date), which squares it once more — cheap enough for every pass, and accurate
    enough for the returned answer when the kept values span less than GRAM_RANGE (whatever
    route, the bound measures the returned vectors' distance to the certified ones).
    ``stable`` and a wider range: an SVD of the m×d matrix itself (O(d·m²), once).
    """
    keep = g > DEFLATION_RTOL * max(g.max(initial=0.0), 0.0)
    scaled = Z[:, keep] / np.sqrt(g[keep])  # (m, m'): Q_K = X̃·V·scaled
    gram = _gram_route(basis, k, scaled)
    if stable and not _gram_route_suffices(gram[0], k):
        if scaled.shape[1] < k:
            return leading_right_vectors((basis.W @ scaled).T, k)
        # B = (W·scaled)ᵀ is m'×d with d ≫ m': its SVD from a QR of the tall d×m' matrix,
        # W·scaled = Q·R, and the SVD of the small Rᵀ = U·S·V̂ᵀ (B = U·S·(Q·V̂)ᵀ): LAPACK's SVD
        # of the wide matrix itself is just as stable but ran 3.5× slower (65 160 × 270: 20 s
        # against 5.7 s, one thread).
        q, r = tall_qr(basis.W @ scaled)
        _, values, small = svd(r.T, check_finite=False)
        return values[:k], small[:k] @ q.T
    return gram


def _gram_route(basis: Basis, k: int, scaled: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_left_ritz` by the m×m eigenproblem (see there)."""
    values, Y = eigh(scaled.T @ basis.P @ scaled, check_finite=False)
    values, Y = np.clip(values[::-1][:k], 0.0, None), Y[:, ::-1][:, :k]
    vectors = basis.W @ (scaled @ Y)
    positive = values > DEFLATION_RTOL * max(values.max(initial=0.0), 0.0)
    vectors[:, positive] /= np.sqrt(values[positive])
    if not positive.all() or vectors.shape[1] < k:  # rank < k: any orthonormal completion
        vectors = tall_qr(np.hstack([vectors[:, positive], basis.V]))[0][:, :k]
        values = np.concatenate([values[positive], np.zeros(k - positive.sum())])
    else:
        orthonormal = tall_qr(vectors)[0]  # re-orthonormalised, same directions and signs
        vectors = orthonormal * np.sign(np.sum(orthonormal * vectors, axis=0))
    return np.sqrt(values), vectors.T


def _gram_route_suffices(singular_values: np.ndarray, k: int) -> bool:
    """Whether the Gram route's answer (its k values, descending) can be the returned one."""
    return singular_values.size >= k > 0 and singular_values[k - 1] ** 2 >= GRAM_RANGE * singular_values[0] ** 2


def _refined_answer(image: np.ndarray, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Singular values and right vectors (k×d) of Q_kᵀX̃ with Q_k = X̃·X_k·Θ_k^{-½} orthonormal:
    the left projection restricted to the k plain Ritz vectors, whose right vectors span C·X_k
    (``image``). Its values are lower bounds of σ_i(X̃) (Q_k orthonormal), as θ_i are of σ_i²; the
    larger of the two is kept. None when θ_k is not positive (C·X_k then loses rank)."""
    if theta.size == 0 or not theta[-1] > DEFLATION_RTOL * max(theta[0], 0.0):
        return None
    q, r = tall_qr(image / np.sqrt(theta))
    _, values, small = svd(r.T, check_finite=False)
    values = np.sqrt(np.maximum(values**2, theta))  # both descending lower bounds of λ_i
    return values, small @ q.T


def _gap_ratio(theta: np.ndarray, upper: float) -> float | None:
    """θ_k/λ̂_{k+1}, the gap ratio the bound resolves (None when λ̂_{k+1} is 0 or unknown)."""
    return float(theta[-1] / upper) if theta.size and upper > 0 and np.isfinite(upper) else None


def estimate(basis: Basis, k: int, *, n_samples: int = 1, stable: bool = False, total: float | None = None,
             rank: int | None = None) -> Estimate:
    """The four answers and their bounds from the kept basis (see module notes); ``total`` is
    the total scatter trace C (from the first pass), used to bound λ_{k+1} (:func:`next_eigenvalue`),
    and ``rank`` at least C's rank (None: min(n, d)), its floor."""
    ritz_values, ritz_vectors = basis.ritz()
    found = certify(basis, k, ritz_values, ritz_vectors, n_samples, total, rank)
    X, theta, ritz_bound, eig_error = found["X"], found["theta"], found["bound"], found["eig_error"]
    singular_values, components = _left_ritz(basis, k, ritz_values, ritz_vectors, stable=stable)
    refined = _refined_answer(found["image"], theta) if X.shape[1] == k else None
    refined_bound = found["refined"] if refined is not None else 1.0
    # The left components' bound, by the triangle inequality for ‖P − P'‖₂ = sin θ, from the nearer
    # of the two certified answers.
    error_bound = min(1.0, subspace_sine(X, components.T) + ritz_bound) if X.shape[1] == k else 1.0
    if refined is not None:
        error_bound = min(error_bound, subspace_sine(refined[1].T, components.T) + refined_bound)
    # Or directly, from the variance the Nyström approximation C·V·T⁺·VᵀC leaves out (module notes),
    # taken where it is below AUGMENTED_MARGIN of the others as the augmented answer's is: where
    # they are close the left components are the more accurate ones and would report a looser
    # ratio to their truth for no pass saved (deep in a plateau's tail: 21× against the refined 11×).
    direct = found["left_bound"](components.T, singular_values)
    if direct < AUGMENTED_MARGIN * min(error_bound, refined_bound, ritz_bound):
        error_bound = direct
    values = np.maximum(singular_values**2, theta)  # both lower bounds of λ_i; keep the closer
    with np.errstate(divide="ignore", invalid="ignore"):
        relative = np.where(values > 0, eig_error / values, np.inf)
    return Estimate(components, singular_values, error_bound, ritz_bound, found["norms"], relative, found["gap"], X.T,
                    theta, refined_components=None if refined is None else refined[1],
                    refined_singular_values=None if refined is None else refined[0], refined_bound=refined_bound,
                    next_eigenvalue=found["upper"], augmented_bound=found["augmented"],
                    augmented_components=None if found["augmented_vectors"] is None else found["augmented_vectors"].T,
                    augmented_singular_values=None if found["augmented_values"] is None
                    else np.sqrt(found["augmented_values"]))


# ---- the solver -------------------------------------------------------------------------------


@releases_slab_buffers  # the kernel's per-thread slab buffers go when the fit ends, also by an error
def solve(X, request: ComponentRequest, *, random_state=None, n_oversamples=10, tol=None, max_passes=None,
          checkpoint=None, features=None, probed=None, probed_converged=False) -> SolverResult:
    """Fit the k leading components by block Krylov iteration until the error bound meets ``tol``.

    Parameters
    ----------
    X : dask.array.Array of shape (n_samples, n_features)
        float32 or float64, any chunking (as the randomized solver).
    request : ComponentRequest
        Must fix k (an int or None).
    random_state : int, numpy.random.Generator, numpy.random.RandomState or None
        Seed of the Gaussian start Ω (d×ℓ; the same draw as the randomized solver's).
    n_oversamples : int, default=10
        Block size ℓ = min(k + n_oversamples, min(n, d)).
    tol : float in (0, 1) or None, default=None
        Stop as soon as the bound on the sine of the largest principal angle between the
        returned and the exact k-dimensional subspace is ≤ ``tol``. None: run the default budget
        (``DEFAULT_PASSES`` reads, or ``max_passes``), stopping early only at round-off.
    max_passes : int or None, default=None
        Most full reads (None: ``DEFAULT_MAX_PASSES`` with a ``tol``, ``DEFAULT_PASSES``
        without). When it is spent before ``tol`` is met an :class:`AccuracyWarning` states the
        bound reached.
    checkpoint : str, os.PathLike or None
        Local ``.npz`` file for the state after every pass (see the module notes).
    features : FeatureSpec, optional
        Weights and the mask of wholly-missing features (not ``standardize``), resolved in the
        first pass (:func:`~daskpca.passes._sketch.run_first_pass`): no extra read. The
        start block is drawn over all input features; with masked ones its kept rows are
        re-orthonormalised and their image corrected exactly (:func:`_kept_start`).
    probed : sequence of float, optional
        The bounds the plan's probe simulated pass by pass (:class:`daskpca._probe.Probe`,
        ``history``; given by ``fit(X, plan=PCA(...).plan(X, probe=True))``): the passes
        predicted from the start, until the fit's own simulation (after pass
        ``SIMULATED_FROM_PASS``), and from three informative bounds their measured fall,
        replaces them. Only the progress line and the log read it;
        the fit stops on its bound whatever was predicted.
    probed_converged : bool, default=False
        ``probed`` was simulated on a finished fit's spectrum (an earlier model of the same field,
        :func:`daskpca._probe.from_model`), which knows the k-th gap better than this fit's own
        Ritz values after pass 2: it stands while the fit keeps to its course
        (``SIMULATION_DRIFT``), as the fit's own simulation would, and no simulation's client time
        is spent (0.3–0.7 s at 16 000 × 2000, ~28 s at d = 10⁶ and ℓ = 60).

    Returns
    -------
    SolverResult
        ``spectrum`` is None. ``features``: the resolved stage (with ``features``). ``info``: ``error_bound`` (bound on sin θ of the returned
        subspace), ``eigenvalue_error_bounds`` (k, relative), ``residual_norms`` (k, of the Ritz
        vectors for the covariance, i.e. ‖Σx − θx‖ with Σ = C/(n − 1)), ``gap`` (δ̂, covariance
        units), ``tol``, ``converged`` (the bound met ``tol``; without ``tol``: it reached
        ``ROUNDOFF_BOUND``), ``bound_history`` (the bound after each pass of this run),
        ``sketch_size`` (ℓ), ``basis_size`` (columns of V at the end), ``max_passes`` (the
        budget), ``restarts``, ``resumed_from_pass``, ``total_passes``, ``ritz_values`` (the
        basis's leading ℓ Ritz values at the end, covariance units: what a later fit of the same
        model predicts its passes from, :func:`daskpca._probe.from_model`).
    """
    n_samples, n_features = X.shape
    k = request.fixed()
    p = check_oversamples(n_oversamples)
    tol, max_passes = check_accuracy_options(tol, max_passes)
    budget = pass_budget(tol, max_passes)
    target = ROUNDOFF_BOUND if tol is None else tol
    ell = min(k + p, min(n_samples, n_features))
    store = open_checkpoint(
        checkpoint, X, solver="krylov", n_components=k, n_oversamples=p, tol=tol, max_passes=budget,
        sketch_size=ell, random_state=random_state, features=feature_fingerprint(features),
    )
    state = store.load()
    if state is None:
        block = tall_qr(as_generator(random_state).standard_normal((n_features, ell)))[0]
        basis = Basis.empty(n_features)
        done, total_m2, restarts = 0, None, 0
    else:
        basis = Basis(state["V"], state["W"], state["T"], state["P"])
        block, done = state["block"], int(state["passes"])
        total_m2, restarts = float(state["m2"]), int(state["restarts"])
    stage = resumed_stage(state, features)
    Z = pass_input(X, stage)  # what every pass but a fused first one reads

    n_passes, history, invariant, simulated = 0, [], False, None
    from_probe = bool(probed) and not done
    passes = Passes("krylov", budget, at_most=True, tol=tol, done=done)
    # The client's work after pass j grows with the basis (client_flops' increments): the ETA scales by it.
    passes.client_grows(lambda j: client_flops(n_features, ell, j, k) - client_flops(n_features, ell, j - 1, k))
    prior = predicted_passes(tol, max_passes)  # the planner's, until the passes say more
    if probed and not done:  # the plan's probe simulated this fit on a sample's spectrum
        simulated = list(probed)
        passes.predict(min(budget, len(simulated)), learnt=0, source=EARLIER_FIT if probed_converged else None)
    else:
        passes.predict(max(prior, done + 1))
    while True:
        fused = features is not None and stage is None  # this pass resolves the feature stage
        with passes.read():
            if fused:
                root, stage = run_first_pass(X, block, features)
            else:
                root = run_pass(Z, block, first=total_m2 is None)
        if fused:
            Z, basis = pass_input(X, stage), Basis.empty(stage.n_kept)
            stage.narrow(request)  # k ≤ the kept features, validated as on the generic road
            block, image = _kept_start(block, root.ht.T @ root.r, stage.keep)
        else:
            image = root.ht.T @ root.r  # W_j = H_jR_j = C·V_j
        n_passes += 1
        if n_passes == 1:  # what a later pass costs: this one's compute, without its read (Passes.computed)
            passes.computed(root.compute_seconds, Z[0])
        # The client's share (the basis, Ritz values, bound, next block): BLAS-3 on d × m blocks
        # while no task runs, so with the caller's BLAS threads, not the one-per-task limit the
        # passes run under (measured on the reanalysis field: 9 s of client time in a 10-pass fit),
        # where the basis is large enough for them to help (CLIENT_THREADED_ELEMENTS).
        with client_blas_threads(block.shape[0] * (basis.size + block.shape[1])):
            if total_m2 is None:
                total_m2 = root.m2
            basis = basis.extend(block, image)
            # Every answer's bound, the left projection's included: on fast decay its own
            # (Nyström) bound is the smallest by far and saves passes (module notes).
            result = estimate(basis, k, n_samples=n_samples, total=total_m2)
            history.append(result.certified())
            gap_ratio = _gap_ratio(result.ritz_values, result.next_eigenvalue)
            passes.bound(history[-1])
            made = done + n_passes
            # The simulation costs client time (a small fit on the model spectrum): only where a
            # progress line or the log shows its figure, and again only where the fit's bound has
            # left the simulated one's course (SIMULATION_DRIFT).
            # The probe's simulation stands until the fit's own can run (pass 2): its Ritz values
            # then know the k-th gap that 1 % of the rows could not resolve (16 000 × 2000: the
            # probe 7 and 9 passes for a continuum's 10 and 14, an archive-like field's 5 and 7; the
            # fit's own from pass 3 11 and 14–15, 5 and 6).
            left = passes_left(history, target, gap_ratio)
            # Three informative bounds in a row: their fall is the fit's own rate, and it decides
            # (exact from pass 5 at 16 000 × 2000 on continua, plateaus and a reanalysis-like
            # field, where the simulation is within a pass), and no simulation's client time is spent.
            measured = left is not None and len(history) >= 3 and all(b < INFORMATIVE_BOUND for b in history[-3:])
            if measured or (from_probe and made >= SIMULATED_FROM_PASS and not probed_converged) or (
                    simulated is not None and not _on_course(simulated, made, history[-1])):
                simulated, from_probe = None, False
            if (simulated is None and not measured and passes.heard() and made >= SIMULATED_FROM_PASS
                    and history[-1] > target):
                started = time.perf_counter()
                simulated = simulated_total(basis.ritz()[0],
                                            total_m2, min(n_samples - 1, basis.V.shape[0]), k, ell, target, budget,
                                            n_samples, residuals=result.residual_norms)
                passes.spent(time.perf_counter() - started)
            # The basis spans C's range once it holds min(n − 1, d) vectors: the fit is exact then,
            # whatever a rate says (2400 × 200, ℓ = 20: 10 passes made, 11–12 extrapolated).
            spans = -(-(min(n_samples - 1, basis.V.shape[0]) - basis.size) // ell)  # passes until it does
            most = budget if restarts else min(budget, made + max(1, spans))
            if simulated is not None:
                passes.predict(min(most, max(len(simulated), made + 1)), learnt=0 if from_probe else made,
                               source=EARLIER_FIT if probed_converged else None)
            else:
                passes.predict(min(most, made + left) if left is not None else max(prior, made + 1),
                               learnt=made if left is not None else None)
            if history[-1] <= target or done + n_passes >= budget:
                break
            block = orthonormal_extension(basis.V, basis.W[:, -block.shape[1]:], basis.T[:, -block.shape[1]:])
            if block.shape[1] == 0:  # span V is invariant under C: the projection is exact
                invariant = True
                break
            if 16 * basis.V.shape[0] * (basis.size + block.shape[1]) > BASIS_BYTES:
                basis = basis.restart(max(2 * ell, k + 1))
                restarts += 1
            store.save({"V": basis.V, "W": basis.W, "T": basis.T, "P": basis.P, "block": block,
                        "passes": done + n_passes, "m2": total_m2, "restarts": restarts, **stage_state(stage)})
    if result is None or not _gram_route_suffices(result.singular_values, k):  # else the last pass's is the answer
        with client_blas_threads(basis.V.size):
            result = estimate(basis, k, n_samples=n_samples, stable=True, total=total_m2)
    result, projection = result.best()  # the answer with the smallest bound
    history[-1] = result.error_bound

    ddof_count = max(n_samples - 1, 1)
    # The basis's leading Ritz values, kept with the model: what a later fit of the same model
    # predicts its passes from (its spectrum, daskpca._probe.earlier_spectrum), reading nothing.
    seen = np.linalg.eigvalsh((basis.T + basis.T.conj().T) / 2)[::-1][:ell] / ddof_count  # values only: no vectors
    converged = bool(result.error_bound <= target)
    if tol is not None and not converged:
        warnings.warn(_missed_tol(tol, result.error_bound, budget, done + n_passes, basis.size if invariant else None),
                      AccuracyWarning, stacklevel=3)
    out = sketch_result(
        result.components, result.singular_values, root, total_m2, n_passes,
        {
            "error_bound": float(result.error_bound),
            "eigenvalue_error_bounds": result.eigenvalue_error_bounds,
            "residual_norms": result.residual_norms / ddof_count,
            "gap": float(result.gap / ddof_count),
            "tol": tol,
            "converged": converged,
            "bound_history": [float(b) for b in history],
            "ritz_values": [float(v) for v in seen],
            "projection": projection,
            "n_oversamples": p,
            "sketch_size": ell,
            "basis_size": basis.size,
            "max_passes": budget,
            "restarts": restarts,
            "resumed_from_pass": store.resumed_from,
            "total_passes": done + n_passes,
            "n_iter": done + n_passes,  # blocks in the Krylov basis: one per pass
        },
    )
    store.clear()
    return replace(out, features=stage)


def _kept_start(block: np.ndarray, image: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The start block V₀ on the kept features and its image C·V₀, from a fused first pass.

    That pass multiplied the block B (orthonormal over all D input features) by the scatter of
    the zero-filled weighted input, whose rows and columns at masked features are 0, so its
    root restricted to the kept features gives ``image`` = C·B[keep] with C the scatter of Z.
    B[keep] is no longer orthonormal; its thin SVD B[keep] = U·S·Pᵀ gives V₀ = U and
    C·V₀ = image·P·S⁻¹ exactly (directions
    with S below ``DEFLATION_RTOL``·S₀, possible only when few features are kept, are
    dropped). V₀ spans B[keep], i.e. an orthonormalised Gaussian draw over the kept features,
    which is what the start of a fit on Z is. Nothing masked: B and its image as they are.
    """
    if keep.all():
        return block, image
    left, values, right = svd(block[keep], full_matrices=False, check_finite=False)
    kept = values > DEFLATION_RTOL * values[0]
    return left[:, kept], image @ (right[kept].T / values[kept])


# ---------------------------------------------------------------------------------- declaration


def client_flops(d: int, ell: int, passes: int, k: int) -> float:
    """The client's flops: after pass j (m = j·ℓ basis columns) six thin d×m×ℓ products (the new
    block's T and P columns, two projections and the one after normalising, less the one T
    already holds) and thirteen d×m×(k + 1) (Ritz vectors and residuals with the next Ritz block,
    the left projection, the refined, augmented and Nyström answers' products), 2 flops per
    multiply-add; and four m×m eigenproblems (the Ritz values, the left projection's Gram, the
    augmented block, P − TᵀT), ~9·m³ each. The returned answer reuses the last pass's.
    Measured on one thread, d = 1000 / 4000 / 16 000, ℓ = 20, k = 10, 12 passes: 0.33 / 0.56 /
    2.05 s, this at CLIENT_FLOPS_PER_SECOND 0.34 / 0.67 / 1.98 s (the d-part alone, as counted
    before issue 41's answers, said 0.06 / 0.25 / 1.0 s)."""
    triangle = passes * (passes + 1) / 2  # Σ_j j
    return 2.0 * d * (6 * ell + 13 * (k + 1)) * ell * triangle + 36.0 * ell**3 * triangle**2  # Σ_j j³ = triangle²


def reaches(tol: float, max_passes) -> bool:
    """Whether the predicted passes for ``tol`` (uncapped) fit the read budget: the planner then
    counts block Krylov among the solvers that guarantee ``tol``."""
    return tol > 0 and predicted_passes(tol, 10**9) <= pass_budget(tol, max_passes)


def cost(shape: PlanInput) -> Cost:
    """The sketching pass (:func:`daskpca.passes._sketch.sketch_task_bytes`, d×(ℓ + 1) factors
    returned by each task), as many as :func:`predicted_passes` for the ``tol`` the plan is made
    for (the budget without one), 4·n·d·ℓ flops each, and the client's share between them
    (:func:`client_flops`)."""
    n, d, k, ell, tol = shape.n, shape.d, shape.k, shape.ell, shape.tol
    passes = predicted_passes(tol, shape.max_passes)
    if tol is not None:
        # The range before any read: the fit learns its own from its first informative bound
        # and shows it on the progress line.
        fewest, _, most = predicted_pass_range(tol, shape.max_passes)
        note = (f"ℓ = {ell}; passes predicted for tol = {tol:g} ({fewest}–{most} possible, the spectrum decides; "
                "the fit predicts its own once its bound falls)")
    else:
        note = f"ℓ = {ell}; budget {passes} passes, error bound reported"
    client = client_flops(d, ell, passes, k)
    return Cost(passes, passes * 4 * n * d * ell, shape.sketch_task_bytes, note, result_size=(ell + 1) * d,
                client_flops=client, most_passes=pass_budget(tol, shape.max_passes))


DECLARATION = SolverDeclaration(
    "krylov", solve, cost=cost, summary="block Krylov", flop_rate=SKETCH_FLOPS_PER_SECOND, options=OPTIONS,
    certifies=reaches, fallback="approximate", squares_the_data=SQUARES_THE_DATA, fuses_features=fuses_features,
)
