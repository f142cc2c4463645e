"""tracer.array_api against numpy, for the bugs the data-apis array-api-tests suite found
(tests/array_api_tests_run.py runs that suite)."""

from __future__ import annotations

import numpy as np
import pytest

import tracer as tr
import tracer.array_api as xp

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("shape", [(2, 3), (1, 1), (4, 2, 3), (2, 0, 5)])
def test_matrix_transpose_swaps_the_last_two_axes(shape: tuple[int, ...]) -> None:
    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    np.testing.assert_array_equal(xp.matrix_transpose(tr.tensor(a)).numpy(), np.swapaxes(a, -1, -2))
    np.testing.assert_array_equal(tr.tensor(a).mT.numpy(), np.swapaxes(a, -1, -2))


@pytest.mark.parametrize("lazy", [False, True])
def test_take_counts_negative_indices_from_the_end(lazy: bool) -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    ids = np.array([-1, 0, -4, 2], dtype=np.int32)
    t_ids = tr.tensor(ids) + 0 if lazy else tr.tensor(ids)  # + 0: values unknown until it runs
    np.testing.assert_array_equal(xp.take(tr.tensor(a), t_ids, axis=1).numpy(), np.take(a, ids, axis=1))
    along = np.array([[-1], [0], [-2]], dtype=np.int32)
    t_along = tr.tensor(along) + 0 if lazy else tr.tensor(along)
    expected = np.take_along_axis(a, along, axis=1)
    np.testing.assert_array_equal(xp.take_along_axis(tr.tensor(a), t_along, axis=1).numpy(), expected)


def test_take_still_refuses_an_index_known_out_of_range() -> None:
    with pytest.raises(tr.WgjitError, match="out of range"):
        xp.take(tr.tensor(np.arange(3, dtype=np.float32)), tr.tensor(np.array([-4], dtype=np.int32)))


def test_expand_dims_out_of_range_raises_index_error() -> None:
    x = tr.tensor(np.zeros((2, 3), dtype=np.float32))
    assert xp.expand_dims(x, axis=2).shape == np.expand_dims(np.zeros((2, 3)), 2).shape
    assert xp.expand_dims(x, axis=-3).shape == np.expand_dims(np.zeros((2, 3)), -3).shape
    for axis in (3, -4):
        with pytest.raises(IndexError, match="expand_dims"):
            xp.expand_dims(x, axis=axis)


def test_vecdot_matches_numpy_and_refuses_a_broadcast_summed_axis() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 3, 4), dtype=np.float32), rng.standard_normal((3, 4), dtype=np.float32)
    np.testing.assert_allclose(xp.vecdot(tr.tensor(a), tr.tensor(b)).numpy(), np.sum(a * b, axis=-1), rtol=1e-5)
    np.testing.assert_allclose(
        xp.vecdot(tr.tensor(a), tr.tensor(b), axis=-2).numpy(), np.sum(a * b, axis=-2), rtol=1e-5, atol=1e-6
    )
    with pytest.raises(tr.ShapeError, match="vecdot"):
        xp.vecdot(tr.tensor(a), tr.tensor(b[:, :1]))
