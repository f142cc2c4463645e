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
