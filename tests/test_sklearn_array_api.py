"""A real client of the Array API: scikit-learn functions and estimators running on wgjit tensors.

scikit-learn dispatches to the array's namespace (tracer/array_api.py) when `array_api_dispatch`
is on; the results are Tensors, checked against scikit-learn on numpy arrays. Skipped where
scikit-learn is not installed (`pip install -e '.[sklearn]'`; `./dev test` installs it).
StandardScaler is not among them: it asks the namespace for int64 and float64, which wgjit
does not store.
"""

from __future__ import annotations

import os

os.environ.setdefault("SCIPY_ARRAY_API", "1")  # scikit-learn's array API support needs it before scipy loads

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import tracer as tr  # noqa: E402

sklearn = pytest.importorskip("sklearn", reason="scikit-learn is not installed (pip install -e '.[sklearn]')")
from sklearn.metrics.pairwise import cosine_similarity, euclidean_distances  # noqa: E402
from sklearn.preprocessing import MaxAbsScaler, MinMaxScaler, Normalizer  # noqa: E402

pytestmark = pytest.mark.gpu

CLIENTS = {
    "MinMaxScaler": lambda x: MinMaxScaler().fit_transform(x),
    "MinMaxScaler(-1, 1) fit then transform": lambda x: MinMaxScaler((-1, 1)).fit(x[:10]).transform(x),
    "MaxAbsScaler": lambda x: MaxAbsScaler().fit_transform(x),
    "Normalizer": lambda x: Normalizer().fit_transform(x),
    "cosine_similarity": lambda x: cosine_similarity(x),
    "cosine_similarity(x, y)": lambda x: cosine_similarity(x[:7], x[7:]),
    "euclidean_distances": lambda x: euclidean_distances(x[:6], x),
}


@pytest.fixture
def dispatch():
    if os.environ.get("SCIPY_ARRAY_API") != "1":
        pytest.skip("scipy was imported before SCIPY_ARRAY_API=1 could be set")
    with sklearn.config_context(array_api_dispatch=True):
        yield


@pytest.mark.parametrize("name", sorted(CLIENTS))
def test_sklearn_on_wgjit_tensors_matches_numpy(name: str, dispatch) -> None:
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((20, 5)) * [1, 10, 0.1, 3, 50]).astype(np.float32)
    got = CLIENTS[name](tr.tensor(x))
    assert isinstance(got, tr.Tensor), f"{name} returned {type(got).__name__}: it did not run on wgjit's namespace"
    with sklearn.config_context(array_api_dispatch=False):
        want = CLIENTS[name](x)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)
