"""Values entering wgjit are stored as themselves or refused, never wrapped (issue 16 item 5).

The rule (NUMERICS.md "Values entering wgjit") is checked at every entry point: tr.tensor with a
dtype, tr.full, item assignment, python scalar operands, arange's bounds; the values come from
tests/strategies.py's `entry_values` generator, aimed at every stored type's edges.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import entry_expected, entry_values

import tracer as tr

pytestmark = pytest.mark.gpu
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _enter(kind: str, data, dtype: str) -> np.ndarray:
    if kind == "tensor":
        return tr.tensor(data, dtype=dtype).numpy()
    if kind == "full":
        return tr.full((2,), data, dtype).numpy()[:1]
    x = tr.zeros((1,), dtype)
    x[0] = data
    return x.numpy()


@SETTINGS
@given(entry_values(), st.sampled_from(["tensor", "full", "setitem"]))
def test_values_enter_as_themselves_or_are_refused(value, kind: str) -> None:
    data, _, dtype = value
    if kind != "tensor":  # the scalar entry points take the first value (a numpy scalar keeps its dtype)
        data = data.reshape(-1)[0] if isinstance(data, np.ndarray) else data[0] if isinstance(data, list) else data
    want = entry_expected(data, dtype)
    if want is None:
        with pytest.raises(tr.DTypeError, match=dtype):
            _enter(kind, data, dtype)
        return
    got = _enter(kind, data, dtype)
    np.testing.assert_array_equal(got.reshape(-1), want.reshape(-1).astype(got.dtype))


@pytest.mark.parametrize(
    "call,words",
    [
        (lambda: tr.full((3,), 2**31), ("full", "2147483648", "int32")),
        (lambda: tr.full((3,), 2**40), ("full", "1099511627776", "int32")),
        (lambda: tr.tensor([-1], dtype=tr.uint32), ("tensor", "-1", "uint32")),
        (lambda: tr.arange(2**31 - 2, 2**31 + 2), ("arange", "2147483649", "int32")),
        (lambda: tr.tensor(np.array([3e9, np.nan]), dtype=tr.int32), ("tensor", "nan", "int32", "astype")),
        (lambda: tr.tensor(np.array([3e9]), dtype=tr.int32), ("tensor", "3000000000", "int32", "astype")),
        (lambda: tr.tensor(np.array([1e5], np.float32), dtype=tr.float16), ("tensor", "100000", "float16")),
        (lambda: tr.ones(3, tr.int32) * 2**33, ("mul", str(2**33), "int32")),
        (lambda: tr.ones(3, tr.uint32) - (-1), ("sub", "-1", "uint32")),
        (lambda: tr.masked_fill(tr.ones(3, tr.int32), tr.ones(3, tr.bool), float("-inf")), ("masked_fill", "inf")),
    ],
)
def test_issue_16_item_5_reproducers_are_refused(call, words) -> None:
    with pytest.raises(tr.DTypeError) as info:
        call()
    for w in words:
        assert w in str(info.value), (w, str(info.value))


@pytest.mark.f16  # uses float16 among other dtypes
def test_values_that_fit_enter_exactly() -> None:
    np.testing.assert_array_equal(tr.full((2,), 2**31 - 1).numpy(), [2**31 - 1] * 2)
    np.testing.assert_array_equal(tr.full((2,), 2**32 - 1, tr.uint32).numpy(), [2**32 - 1] * 2)
    np.testing.assert_array_equal(tr.tensor(np.array([2**31 + 5]), dtype=tr.uint32).numpy(), [2**31 + 5])
    np.testing.assert_array_equal(tr.arange(2**31 - 3, 2**31 - 1).numpy(), [2**31 - 3, 2**31 - 2])
    np.testing.assert_array_equal(tr.tensor([1.9, -1.9], dtype=tr.int32).numpy(), [1, -1])  # truncated, as numpy
    np.testing.assert_array_equal(tr.tensor([np.nan, np.inf], dtype=tr.float16).numpy(), [np.nan, np.inf])
    # the explicit cast saturates and maps NaN to 0 (NUMERICS.md "Casts"), where entry refuses
    got = tr.tensor(np.array([3e9, np.nan, -3e9])).astype(tr.int32).numpy()
    np.testing.assert_array_equal(got, [2**31 - 128, 0, -(2**31)])


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.uint32, np.bool_])
def test_arrays_stored_as_they_are_enter_as_copies(dtype) -> None:
    """tr.tensor of an array whose dtype wgjit stores as it is (tracer.host's shortcut): the same dtype and
    values, for 0-d, strided and Fortran-ordered arrays, and a copy: writing the array afterwards changes nothing."""
    rng = np.random.default_rng(7)
    base = (rng.standard_normal((4, 6)) * 50).astype(dtype)
    for data in (base, base[::2, 1::2], np.asfortranarray(base), base[1:2, 2:3].reshape(())):
        want = np.array(data, copy=True)
        t = tr.tensor(data)
        data[...] = 0 if dtype is not np.bool_ else ~want
        assert t.dtype.np == np.dtype(dtype)
        got = t.numpy()
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)
