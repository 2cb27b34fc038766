"""Randomized subspace iteration: accuracy with defaults, 2q + 2 passes, parity with scikit-learn."""

import dask
import dask.array as da
import numpy as np
import pytest
from sklearn.utils.extmath import randomized_svd

from daskpca.solvers import randomized
from daskpca.solvers._base import ComponentRequest

from _helpers import low_rank_data, reference_pca, sin_theta, write_zarr

LAYOUTS = [
    ((600, 40), (100, 40)),  # tall, row blocks
    ((600, 40), ((5, 295, 300), (15, 25))),  # tall, irregular rows, column pieces
    ((60, 300), (25, 120)),  # wide: blocks with fewer rows than ℓ
    ((150, 120), (40, 50)),  # square-ish
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape, chunks", LAYOUTS)
def test_default_settings_match_exact_subspace(shape, chunks, dtype):
    # Rank-5 signal (variances 100 … 0.4) over noise 0.05²: a well-separated spectrum.
    X = low_rank_data(*shape, dtype=dtype)
    components, variance, mean = reference_pca(X.astype(np.float64))
    k = 4
    result = randomized.solve(da.from_array(X, chunks=chunks), ComponentRequest(k, *shape), random_state=0)
    q = 7 if k < 0.1 * min(shape) else 4
    assert result.info["n_power_iter"] == q
    assert result.n_passes == 2 * q + 2
    np.testing.assert_allclose(result.components @ result.components.T, np.eye(k), atol=1e-12)
    assert sin_theta(result.components, components[:k]) <= 1e-6  # measured ≈ 2e-15
    np.testing.assert_allclose(result.explained_variance, variance[:k], rtol=1e-8)
    np.testing.assert_allclose(result.mean, mean, rtol=1e-13)
    assert result.total_variance == pytest.approx(variance.sum(), rel=1e-10)
    assert result.spectrum is None


def _slow_decay(n=500, d=80, seed=1):
    """σ_i = i^(-1/2): a hard spectrum where the power iterations matter."""
    rng = np.random.default_rng(seed)
    u, _ = np.linalg.qr(rng.standard_normal((n, d)))
    v, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return (u / np.sqrt(np.arange(1, d + 1))) @ v.T + 3.0


@pytest.mark.parametrize("q", [0, 2, 6])
@pytest.mark.parametrize("seed", [0, 1])
def test_never_worse_than_scikit_learn(q, seed):
    X = _slow_decay()
    centered = X - X.mean(axis=0)
    exact, _, _ = reference_pca(X)
    k = 5
    # The same RandomState draws the same Ω (d×ℓ) in both implementations.
    ours = randomized.solve(
        da.from_array(X, chunks=(90, 50)),
        ComponentRequest(k, *X.shape),
        random_state=np.random.RandomState(seed),
        n_power_iter=q,
    )
    _, _, theirs = randomized_svd(centered, k, n_oversamples=10, n_iter=q, random_state=np.random.RandomState(seed))
    ours_error, their_error = sin_theta(ours.components, exact[:k]), sin_theta(theirs, exact[:k])
    assert ours_error <= their_error * (1 + 1e-6) + 1e-12
    assert ours.n_passes == 2 * q + 2


def test_reproducible_and_options_validated():
    X = da.from_array(low_rank_data(200, 30), chunks=(50, 30))
    request = ComponentRequest(3, 200, 30)
    a = randomized.solve(X, request, random_state=7, n_power_iter=1)
    b = randomized.solve(X, request, random_state=7, n_power_iter=1)
    np.testing.assert_array_equal(a.components, b.components)
    for bad in (-1, 1.5, "often"):
        with pytest.raises(ValueError, match="n_power_iter"):
            randomized.solve(X, request, n_power_iter=bad)
    with pytest.raises(ValueError, match="n_oversamples"):
        randomized.solve(X, request, n_oversamples=-2)
    with pytest.raises(ValueError, match="full spectrum"):
        randomized.solve(X, ComponentRequest(0.9, 200, 30))
    assert randomized.OPTIONS == ("n_oversamples", "n_power_iter", "checkpoint")


def test_sketch_size_is_capped_by_the_shape():
    X = low_rank_data(30, 12, rank=3)
    result = randomized.solve(da.from_array(X, chunks=(7, 5)), ComponentRequest(10, 30, 12), random_state=0)
    assert result.info["sketch_size"] == 12
    components, variance, _ = reference_pca(X)
    assert sin_theta(result.components, components[:10]) <= 1e-10  # ℓ = d: the exact answer
    np.testing.assert_allclose(result.explained_variance, variance[:10], rtol=1e-8)


def test_nonfinite_input_raises_in_the_first_pass():
    X = low_rank_data(100, 10)
    X[3, 9] = np.inf
    with pytest.raises(ValueError, match="row 3, column 9"):
        randomized.solve(da.from_array(X, chunks=(30, 4)), ComponentRequest(2, 100, 10))


@pytest.mark.parametrize("q", [0, 1, 3])
@pytest.mark.parametrize("chunks", [(130, 40), (130, 15)])
def test_reads_each_chunk_2q_plus_2_times(tmp_path, q, chunks):
    X = low_rank_data(1_000, 40, dtype=np.float32)
    array, store = write_zarr(tmp_path / "x.zarr", X, chunks)
    n_chunks = int(np.prod([-(-s // c) for s, c in zip(X.shape, chunks)]))
    with dask.config.set(scheduler="threads"):
        result = randomized.solve(da.from_zarr(array), ComponentRequest(5, *X.shape), random_state=0, n_power_iter=q)
    reads = store.chunk_reads()
    assert len(reads) == n_chunks and set(reads.values()) == {2 * q + 2}
    assert sum(reads.values()) == result.n_passes * n_chunks
