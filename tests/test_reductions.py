"""Reductions, softmax and log-softmax against numpy, on each kernel variant."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracer as tr
from tests.helpers import assert_close, kernels_of

AXES = [None, 0, 1, -1, (0, 2), (1, 2), (0, 1, 2)]


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("op", ["sum", "mean", "max", "min"])
def test_reduce_axes(op: str, axis, keepdims: bool, rng: np.random.Generator) -> None:
    x = rng.standard_normal((3, 5, 7)).astype(np.float32)
    got = getattr(tr.tensor(x), op)(axis=axis, keepdims=keepdims).numpy()
    assert_close(got, getattr(np, op)(x, axis=axis, keepdims=keepdims), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_arg_reduce(op: str, axis, rng: np.random.Generator) -> None:
    x = rng.standard_normal((6, 9)).astype(np.float32)
    x[2, 3] = x[2, 5] = 10.0  # ties: the first index wins, as in numpy
    x[4, 1] = x[4, 7] = -10.0
    got = getattr(tr.tensor(x), op)(axis=axis).numpy()
    np.testing.assert_array_equal(got, getattr(np, op)(x, axis=axis))


@pytest.mark.parametrize(
    "shape,variant,width",
    [((4, 37), "sum_serial", 1), ((4, 1001), "sum_rows", 1), ((4, 1002), "sum_rows", 2), ((4, 1000), "sum_rows", 4)],
)
def test_each_reduce_variant_and_width(shape, variant: str, width: int, rng: np.random.Generator) -> None:
    x = rng.standard_normal(shape).astype(np.float32)
    y = tr.tensor(x).sum(axis=-1)
    # contiguous float rows go to row_reduce (kernels/reduce/row_reduce.py), whose variant key adds its knobs
    (name, var, w), *_ = kernels_of(y)
    assert len(kernels_of(y)) == 1 and (var.split(":")[0], w) == (variant, width)
    assert name == ("reduce" if variant.endswith("_serial") else "row_reduce")
    assert_close(y.numpy(), x.sum(-1), rtol=1e-5, atol=1e-4)


def test_reduce_of_strided_view(rng: np.random.Generator) -> None:
    x = rng.standard_normal((8, 12, 10)).astype(np.float32)
    t = tr.tensor(x)
    assert_close(t[:, ::2, 1:].max(axis=(0, 2)).numpy(), x[:, ::2, 1:].max(axis=(0, 2)))
    assert_close(t.permute(2, 0, 1).sum(axis=-1).numpy(), x.transpose(2, 0, 1).sum(-1), atol=1e-4)


def test_int_and_bool_reductions(rng: np.random.Generator) -> None:
    i = rng.integers(-100, 100, size=(5, 6)).astype(np.int32)
    np.testing.assert_array_equal(tr.tensor(i).sum(axis=1).numpy(), i.sum(1))
    np.testing.assert_array_equal(tr.tensor(i).max(axis=0).numpy(), i.max(0))
    b = i > 0
    assert tr.tensor(b).sum().item() == b.sum()
    np.testing.assert_array_equal(tr.tensor(b).max(axis=1).numpy(), b.max(1))
    assert tr.tensor(i).mean().dtype == tr.float32


def test_empty_reductions() -> None:
    e = tr.zeros((0, 3))
    assert_close(e.sum(axis=0).numpy(), np.zeros(3, np.float32))
    assert e.sum().item() == 0.0
    with pytest.raises(tr.ShapeError, match="max: zero-size"):
        e.max(axis=0)
    with pytest.raises(tr.ShapeError, match="argmax"):
        e.argmax()


@pytest.mark.parametrize("op", ["argmax", "argmin", "prod"])
def test_few_long_rows_use_the_widest_workgroup_with_loads_in_flight(op: str, rng: np.random.Generator) -> None:
    """argmax over a vocabulary (1 row of 32000): the rule that made it 190 us -> a wide, unrolled walk."""
    a = rng.standard_normal((2, 32003)).astype(np.float32)
    if op == "prod":
        a = (1 + a / 1000).astype(np.float32)
    a[0, [7, 31000]] = a.max() + 1  # a tie: the first index wins
    a[1, [20000, 9]] = np.nan  # the first NaN wins
    y = getattr(tr.tensor(a), op)(-1)
    (d,) = tr.compile(y).dispatches
    assert (d.kernel, d.variant) == ("reduce", f"{op}_rows") and d.workgroup_size[0] >= 256
    assert " unroll=4 " in d.key, d.key
    want = getattr(a, op)(-1)
    if op == "prod":
        assert_close(y.numpy(), want, rtol=1e-4)
    else:
        np.testing.assert_array_equal(y.numpy(), want)


def test_nan_propagates_through_max_and_argmax() -> None:
    x = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, -1.0]], dtype=np.float32)
    t = tr.tensor(x)
    assert_close(t.max(axis=1).numpy(), np.max(x, axis=1))
    np.testing.assert_array_equal(t.argmax(axis=1).numpy(), np.argmax(x, axis=1))
    big = np.ones((2, 2000), dtype=np.float32)
    big[1, 1500] = np.nan
    assert_close(tr.tensor(big).max(axis=1).numpy(), big.max(1))


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("n,width", [(7, 1), (30, 2), (64, 4), (1000, 4)])
def test_softmax_widths(n: int, width: int, rng: np.random.Generator) -> None:
    x = (rng.standard_normal((5, n)) * 10).astype(np.float32)
    y = tr.tensor(x).softmax()
    (name, var, w), *_ = kernels_of(y)  # rows that fit in registers: softmax_regs (kernels/softmax/softmax_regs.py)
    assert len(kernels_of(y)) == 1 and (name, var.split(":")[0], w) == ("softmax_regs", "softmax", width)
    assert_close(y.numpy(), _softmax(x, -1), rtol=1e-5, atol=1e-6)
    ls = tr.tensor(x).log_softmax().numpy()
    assert_close(ls, np.log(_softmax(x, -1).astype(np.float64)), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("n", [4, 300, 40000])  # registers (two widths), and the streaming kernel
@pytest.mark.parametrize("scale", [1e4, 1e7, 1e8])
def test_log_softmax_keeps_its_precision_at_large_logits(n: int, scale: float, rng: np.random.Generator) -> None:
    """(x - max) - log(sum): m + log(s) first would round the answer away (a row of 1e8 gave 0)."""
    x = np.full((3, n), scale, np.float32)
    x[1] += rng.standard_normal(n).astype(np.float32)  # distinct values: still representable at 1e4
    x[2, ::3] -= 2.0
    x64 = x.astype(np.float64)
    want = (x64 - x64.max(-1, keepdims=True)) - np.log(np.exp(x64 - x64.max(-1, keepdims=True)).sum(-1, keepdims=True))
    for y in (tr.tensor(x).log_softmax(), tr.tensor(x.T.copy()).T.log_softmax()):  # contiguous and strided rows
        assert_close(y.numpy(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_any_axis(axis: int, rng: np.random.Generator) -> None:
    x = rng.standard_normal((4, 6, 5)).astype(np.float32)
    assert_close(tr.softmax(tr.tensor(x), axis=axis).numpy(), _softmax(x, axis), atol=1e-6)


def test_softmax_with_masked_entries() -> None:
    x = np.array([[0.0, -np.inf, 1.0], [2.0, 2.0, -np.inf]], dtype=np.float32)
    assert_close(tr.tensor(x).softmax().numpy(), _softmax(x, -1))


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.integers(1, 7), min_size=1, max_size=4),
    st.data(),
)
def test_reduce_hypothesis(shape: list[int], data: st.DataObject) -> None:
    ndim = len(shape)
    axes = data.draw(st.lists(st.integers(0, ndim - 1), unique=True, max_size=ndim))
    keep = data.draw(st.booleans())
    op = data.draw(st.sampled_from(["sum", "max", "min", "mean"]))
    x = np.random.default_rng(ndim).standard_normal(shape).astype(np.float32)
    axis = tuple(axes) if axes else None
    got = getattr(tr.tensor(x), op)(axis=axis, keepdims=keep).numpy()
    assert_close(got, getattr(np, op)(x, axis=axis, keepdims=keep), rtol=1e-5, atol=1e-5)
