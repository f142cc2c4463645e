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
