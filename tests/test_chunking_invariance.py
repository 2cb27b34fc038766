"""Property: the fitted model does not depend on how the input is chunked."""

import dask.array as da
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daskpca import PCA

from _helpers import low_rank_data

TALL = low_rank_data(300, 12, rank=4)
WIDE = low_rank_data(16, 300, rank=4)


def splits(total):
    """Chunk sizes along one axis: any composition of ``total`` into 1–6 positive parts."""
    return st.lists(st.integers(1, total), min_size=0, max_size=5, unique=True).map(
        lambda cuts: tuple(np.diff([0, *sorted(c for c in cuts if c < total), total]).tolist())
    )


def _fit(X, chunks, solver):
    return PCA(4, solver=solver).fit(da.from_array(X, chunks=chunks))


REFERENCE = {"covariance": _fit(TALL, TALL.shape, "covariance"), "gram": _fit(WIDE, WIDE.shape, "gram")}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), solver=st.sampled_from(["covariance", "gram"]))
def test_same_model_whatever_the_chunking(data, solver):
    X = TALL if solver == "covariance" else WIDE
    chunks = (data.draw(splits(X.shape[0])), data.draw(splits(X.shape[1])))
    pca, reference = _fit(X, chunks, solver), REFERENCE[solver]
    # Only the summation order changes with the chunking: agreement to float64 round-off.
    np.testing.assert_allclose(pca.components_, reference.components_, atol=1e-11)
    np.testing.assert_allclose(pca.explained_variance_, reference.explained_variance_, rtol=1e-11)
    np.testing.assert_allclose(pca.mean_, reference.mean_, rtol=1e-13)
    np.testing.assert_allclose(pca.transform(X), reference.transform(X), atol=1e-8)
