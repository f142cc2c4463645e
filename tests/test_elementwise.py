"""Every elementwise op against numpy, on shapes that run each KernelElement path."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracer as tr
from tests.helpers import assert_close, kernels_of

_erf = np.vectorize(math.erf)


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + _erf(x / np.sqrt(2)))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


# op name -> (wgjit function, numpy reference, input domain (low, high), rtol, atol)
UNARY = {
    "neg": (lambda x: -x, np.negative, (-5, 5), 0, 0),
    "abs": (tr.abs, np.abs, (-5, 5), 0, 0),
    "sign": (tr.sign, np.sign, (-5, 5), 0, 0),
    "exp": (tr.exp, np.exp, (-10, 10), 2e-6, 1e-6),
    "expm1": (tr.expm1, np.expm1, (-10, 10), 2e-6, 1e-6),
    "log": (tr.log, np.log, (0.01, 100), 2e-6, 2e-6),
    "log1p": (tr.log1p, np.log1p, (-0.99, 10), 2e-6, 1e-6),
    "sqrt": (tr.sqrt, np.sqrt, (0, 100), 2e-6, 1e-6),
    "rsqrt": (tr.rsqrt, lambda x: 1 / np.sqrt(x), (0.01, 100), 2e-6, 1e-6),
    "reciprocal": (tr.reciprocal, lambda x: 1 / x, (0.1, 10), 2e-6, 1e-6),
    "square": (tr.square, np.square, (-5, 5), 1e-6, 0),
    "sin": (tr.sin, np.sin, (-6, 6), 1e-5, 2e-6),
    "cos": (tr.cos, np.cos, (-6, 6), 1e-5, 2e-6),
    "tanh": (tr.tanh, np.tanh, (-30, 30), 1e-5, 2e-6),
    "sigmoid": (tr.sigmoid, lambda x: 1 / (1 + np.exp(-x)), (-30, 30), 1e-5, 1e-6),
    "relu": (tr.relu, lambda x: np.maximum(x, 0), (-5, 5), 0, 0),
    "gelu": (tr.gelu, _gelu, (-6, 6), 1e-5, 1e-6),
    "gelu_tanh": (lambda x: x.gelu(approximate="tanh"), _gelu_tanh, (-6, 6), 1e-5, 1e-6),
    "silu": (tr.silu, lambda x: x / (1 + np.exp(-x)), (-20, 20), 1e-5, 1e-6),
    "floor": (tr.floor, np.floor, (-5, 5), 0, 0),
    "ceil": (tr.ceil, np.ceil, (-5, 5), 0, 0),
    "round": (tr.round, np.round, (-5, 5), 0, 0),
    "trunc": (tr.trunc, np.trunc, (-5, 5), 0, 0),
}

BINARY = {
    "add": (lambda a, b: a + b, np.add),
    "sub": (lambda a, b: a - b, np.subtract),
    "mul": (lambda a, b: a * b, np.multiply),
    "div": (lambda a, b: a / b, np.divide),
    "floordiv": (lambda a, b: a // b, np.floor_divide),
    "mod": (lambda a, b: a % b, np.mod),
    "hypot": (tr.hypot, np.hypot),
    "logaddexp": (tr.logaddexp, np.logaddexp),
    "pow": (lambda a, b: a**b, np.power),
    "maximum": (tr.maximum, np.maximum),
    "minimum": (tr.minimum, np.minimum),
    "lt": (lambda a, b: a < b, np.less),
    "le": (lambda a, b: a <= b, np.less_equal),
    "gt": (lambda a, b: a > b, np.greater),
    "ge": (lambda a, b: a >= b, np.greater_equal),
    "eq": (lambda a, b: a == b, np.equal),
    "ne": (lambda a, b: a != b, np.not_equal),
}

# contiguous dim odd, 2 mod 4, 0 mod 4 -> KernelElement 1, 2, 4
SHAPES = [((3, 7), 1), ((5, 6), 2), ((4, 8), 4)]


@pytest.mark.parametrize("shape,width", SHAPES, ids=["odd", "2mod4", "0mod4"])
@pytest.mark.parametrize("name", list(UNARY))
def test_unary(name: str, shape: tuple[int, ...], width: int, rng: np.random.Generator) -> None:
    fn, ref, (lo, hi), rtol, atol = UNARY[name]
    x = rng.uniform(lo, hi, size=shape).astype(np.float32)
    y = fn(tr.tensor(x))
    assert kernels_of(y)[-1][2] == width
    assert_close(y.numpy(), ref(x).astype(np.float32), rtol=rtol, atol=atol)


@pytest.mark.parametrize("shape,width", SHAPES, ids=["odd", "2mod4", "0mod4"])
@pytest.mark.parametrize("name", list(BINARY))
def test_binary_float(name: str, shape: tuple[int, ...], width: int, rng: np.random.Generator) -> None:
    fn, ref = BINARY[name]
    a = rng.uniform(-4, 4, size=shape).astype(np.float32)
    b = rng.uniform(0.5, 3, size=shape).astype(np.float32) * rng.choice([-1, 1], size=shape).astype(np.float32)
    if name == "pow":
        a = np.abs(a) + 0.1
    if name in ("eq", "ne"):
        b[0] = a[0]
    y = fn(tr.tensor(a), tr.tensor(b))
    assert kernels_of(y)[-1][2] == width
    with np.errstate(all="ignore"):
        want = ref(a, b)
    assert_close(y.numpy(), want, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("name", ["add", "sub", "mul", "floordiv", "mod", "maximum", "minimum", "lt", "eq"])
def test_binary_int(name: str, rng: np.random.Generator) -> None:
    fn, ref = BINARY[name]
    a = rng.integers(-50, 50, size=(4, 6)).astype(np.int32)
    b = rng.integers(-7, 7, size=(4, 6)).astype(np.int32)
    b[b == 0] = 3
    y = fn(tr.tensor(a), tr.tensor(b))
    assert y.dtype == (tr.bool if name in ("lt", "eq") else tr.int32)
    np.testing.assert_array_equal(y.numpy(), ref(a, b))


def test_integer_division_and_modulo_by_zero_give_zero() -> None:
    a = np.array([7, -7, 0, 5], dtype=np.int32)
    b = np.array([0, 0, 0, 2], dtype=np.int32)
    np.testing.assert_array_equal((tr.tensor(a) // tr.tensor(b)).numpy(), [0, 0, 0, 2])
    np.testing.assert_array_equal((tr.tensor(a) % tr.tensor(b)).numpy(), [0, 0, 0, 1])


def test_int_pow_and_negative_base_float_pow() -> None:
    a = np.array([-3, -2, 2, 5], dtype=np.int32)
    np.testing.assert_array_equal((tr.tensor(a) ** 3).numpy(), a**3)
    f = np.array([-2.0, -2.0, 4.0], dtype=np.float32)
    e = np.array([3.0, 0.5, 0.5], dtype=np.float32)
    with np.errstate(invalid="ignore"):
        assert_close((tr.tensor(f) ** tr.tensor(e)).numpy(), np.power(f, e))


@pytest.mark.f16  # uses float16 among other dtypes
def test_scalars_on_either_side_and_weak_promotion() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = tr.tensor(x)
    assert_close((2 - t).numpy(), 2 - x)
    assert_close((1 / (t + 1)).numpy(), 1 / (x + 1))
    assert_close((t**2).numpy(), x**2)
    assert (t * 2).dtype == tr.float32
    i = tr.tensor(np.arange(4, dtype=np.int32))
    assert (i * 2).dtype == tr.int32
    assert (i * 2.5).dtype == tr.float32
    assert (i / 2).dtype == tr.float32
    assert_close((i * 2.5).numpy(), np.arange(4) * np.float32(2.5))
    h = tr.tensor(np.ones(3, dtype=np.float16))
    assert (h * 2.0).dtype == tr.float16
    assert (h + tr.ones(3)).dtype == tr.float32


def test_numpy_array_on_the_left_defers_to_tensor() -> None:
    x = np.arange(4, dtype=np.float32)
    y = x + tr.tensor(x)
    assert isinstance(y, tr.Tensor)
    assert_close(y.numpy(), 2 * x)


def test_where_comparisons_logic_and_casts(rng: np.random.Generator) -> None:
    a = rng.standard_normal((3, 5)).astype(np.float32)
    b = rng.standard_normal((3, 5)).astype(np.float32)
    ta, tb = tr.tensor(a), tr.tensor(b)
    assert_close(tr.where(ta > tb, ta, tb).numpy(), np.where(a > b, a, b))
    assert_close(tr.where(ta > 0, ta, 0.0).numpy(), np.where(a > 0, a, 0))
    m = (ta > 0) & (tb < 0) | ~(ta > 1)
    np.testing.assert_array_equal(m.numpy(), (a > 0) & (b < 0) | ~(a > 1))
    np.testing.assert_array_equal(ta.astype(tr.int32).numpy(), a.astype(np.int32))
    np.testing.assert_array_equal((ta > 0).astype(tr.float32).numpy(), (a > 0).astype(np.float32))
    np.testing.assert_array_equal(ta.astype(tr.bool).numpy(), a.astype(bool))
    u = tr.tensor(np.array([1, 2, 3], dtype=np.uint32))
    np.testing.assert_array_equal((u * 3).numpy(), np.array([3, 6, 9], dtype=np.uint32))


def test_nan_and_inf_propagate_like_numpy() -> None:
    x = np.array([np.nan, np.inf, -np.inf, 1.0, -2.0, 0.0], dtype=np.float32)
    t = tr.tensor(x)
    with np.errstate(all="ignore"):
        assert_close(tr.maximum(t, 0.5).numpy(), np.maximum(x, 0.5))
        assert_close(tr.minimum(t, 0.5).numpy(), np.minimum(x, 0.5))
        assert_close(t.relu().numpy(), np.where(np.isnan(x), np.nan, np.maximum(x, 0)))
        assert_close(t.exp().numpy(), np.exp(x))
        assert_close(t.tanh().numpy(), np.tanh(x))
        assert_close((t * 0).numpy(), x * 0)


def test_float_to_int_cast_saturates_and_nan_is_zero() -> None:
    x = np.array([3e9, -3e9, np.nan, 2.7, -2.7], dtype=np.float32)
    np.testing.assert_array_equal(tr.tensor(x).astype(tr.int32).numpy(), [2147483520, -2147483648, 0, 2, -2])


@st.composite
def broadcast_pair(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...]]:
    shape = draw(st.lists(st.integers(0, 6), min_size=0, max_size=4))
    a = [d if draw(st.booleans()) else 1 for d in shape]
    b = [d if draw(st.booleans()) else 1 for d in shape]
    a = a[draw(st.integers(0, len(a))) :]
    return tuple(a), tuple(b)


@settings(max_examples=40, deadline=None)
@given(broadcast_pair(), st.sampled_from(["add", "mul", "sub", "maximum", "gt"]))
def test_broadcasting_matches_numpy(shapes: tuple, name: str) -> None:
    sa, sb = shapes
    rng = np.random.default_rng(len(sa) * 7 + len(sb))
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)
    fn, ref = BINARY[name]
    y = fn(tr.tensor(a), tr.tensor(b))
    assert_close(y.numpy(), ref(a, b))


def test_zero_d_and_empty() -> None:
    s = tr.tensor(3.0)
    assert s.shape == () and (s * 2).item() == 6.0
    e = tr.zeros((0, 4))
    assert (e + 1).numpy().shape == (0, 4)
    assert (e.exp() * 2).numpy().size == 0


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(0, 9), min_size=0, max_size=4).map(tuple),
    st.sampled_from(["exp", "tanh", "sigmoid", "relu", "abs", "floor", "neg", "silu"]),
)
def test_unary_any_shape(shape: tuple[int, ...], name: str) -> None:
    fn, ref, (lo, hi), rtol, atol = UNARY[name]
    x = np.random.default_rng(len(shape)).uniform(lo, hi, size=shape).astype(np.float32)
    assert_close(fn(tr.tensor(x)).numpy(), ref(x).astype(np.float32), rtol=max(rtol, 1e-6), atol=max(atol, 1e-6))
