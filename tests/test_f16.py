"""float16 against numpy, with the tolerances written down, and the error without shader-f16.

The reference is computed in float64 from the very same float16 inputs, so the table
below is the error of wgjit's float16 result alone. One f16 ulp is 2**-10 relative
(9.8e-4); an exact rounding is within half of it (4.9e-4).

  TOLERANCES (rtol, atol)                          why
  exact       neg abs relu floor ceil maximum       no rounding at all
              minimum floordiv, comparisons, where,
              casts, gather, max/min/argmax
  rounded     add sub mul div sqrt reciprocal       one correctly rounded f16 operation:
              square                                half an ulp (4.9e-4), 6e-8 for subnormals
  math        exp log rsqrt sin cos tanh sigmoid    evaluated in f32, rounded once to f16
              silu erf pow gelu gelu_tanh           (expr.F32_FOR_F16): one ulp, 1e-6 abs
  mod         mod                                   x - y*trunc(x/y) in f16: one ulp of the
                                                    operands (2e-3 abs near 0)
  accumulate  matmul sum mean norms softmax conv1d  f32 accumulation, one rounding at the end:
              scaled_dot_product_attention          one ulp of the result, 1e-4 abs (attention:
                                                    one flash kernel, scores and probabilities
                                                    in f32 registers)
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import tracer as tr
from tests.helpers import assert_close, kernel_kinds, kernels_of

_erf = np.vectorize(math.erf, otypes=[np.float64])

TOL = {
    "exact": (0.0, 0.0),
    "rounded": (4.9e-4, 6e-8),
    "math": (9.8e-4, 1e-6),
    "mod": (9.8e-4, 2e-3),
    "accumulate": (9.8e-4, 1e-4),
}

# name -> (wgjit op, float64 reference, input range, tolerance class)
UNARY = {
    "neg": (lambda x: -x, np.negative, (-5, 5), "exact"),
    "abs": (tr.abs, np.abs, (-5, 5), "exact"),
    "relu": (tr.relu, lambda x: np.maximum(x, 0), (-5, 5), "exact"),
    "floor": (tr.floor, np.floor, (-5, 5), "exact"),
    "ceil": (tr.ceil, np.ceil, (-5, 5), "exact"),
    "sqrt": (tr.sqrt, np.sqrt, (0, 100), "rounded"),
    "reciprocal": (tr.reciprocal, lambda x: 1 / x, (0.1, 10), "rounded"),
    "square": (tr.square, np.square, (-5, 5), "rounded"),
    "exp": (tr.exp, np.exp, (-8, 8), "math"),
    "log": (tr.log, np.log, (0.01, 100), "math"),
    "rsqrt": (tr.rsqrt, lambda x: 1 / np.sqrt(x), (0.01, 100), "math"),
    "sin": (tr.sin, np.sin, (-6, 6), "math"),
    "cos": (tr.cos, np.cos, (-6, 6), "math"),
    "tanh": (tr.tanh, np.tanh, (-6, 6), "math"),
    "sigmoid": (tr.sigmoid, lambda x: 1 / (1 + np.exp(-x)), (-10, 10), "math"),
    "silu": (tr.silu, lambda x: x / (1 + np.exp(-x)), (-10, 10), "math"),
    "erf": (tr.erf, _erf, (-3, 3), "math"),
    "gelu": (tr.gelu, lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2))), (-5, 5), "math"),
    "gelu_tanh": (
        lambda x: x.gelu(approximate="tanh"),
        lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))),
        (-5, 5),
        "math",
    ),
}

BINARY = {
    "add": (lambda a, b: a + b, np.add, "rounded"),
    "sub": (lambda a, b: a - b, np.subtract, "rounded"),
    "mul": (lambda a, b: a * b, np.multiply, "rounded"),
    "div": (lambda a, b: a / b, np.divide, "rounded"),
    "pow": (lambda a, b: a**b, np.power, "math"),
    "maximum": (tr.maximum, np.maximum, "exact"),
    "minimum": (tr.minimum, np.minimum, "exact"),
    "floordiv": (lambda a, b: a // b, np.floor_divide, "exact"),
    "mod": (lambda a, b: a % b, np.mod, "mod"),
    "lt": (lambda a, b: a < b, np.less, "exact"),
    "eq": (lambda a, b: a == b, np.equal, "exact"),
}

# contiguous dim odd, 2 mod 4, 0 mod 4 -> KernelElement 1, 2, 4
SHAPES = [((9, 7), 1), ((9, 6), 2), ((8, 8), 4)]
SHAPE_IDS = ["odd", "2mod4", "0mod4"]


def f16(rng: np.random.Generator, shape: tuple[int, ...], lo: float = -3, hi: float = 3) -> np.ndarray:
    return rng.uniform(lo, hi, size=shape).astype(np.float16)


def check(got: tr.Tensor, want: np.ndarray, tol: str) -> None:
    out = got.numpy()
    assert out.dtype == (np.bool_ if want.dtype == bool else np.float16)
    rtol, atol = TOL[tol]
    if tol == "exact":
        np.testing.assert_array_equal(out.astype(np.float64), want.astype(np.float64))
    else:
        assert_close(out, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("shape,width", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("name", list(UNARY))
def test_unary_f16(name: str, shape: tuple[int, int], width: int, rng: np.random.Generator) -> None:
    fn, ref, (lo, hi), tol = UNARY[name]
    x = f16(rng, shape, lo, hi)
    y = fn(tr.tensor(x))
    assert y.dtype == tr.float16
    assert kernels_of(y)[-1][2] == width
    check(y, ref(x.astype(np.float64)), tol)


@pytest.mark.parametrize("shape,width", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("name", list(BINARY))
def test_binary_f16(name: str, shape: tuple[int, int], width: int, rng: np.random.Generator) -> None:
    fn, ref, tol = BINARY[name]
    a = f16(rng, shape, -4, 4)
    b = (rng.uniform(0.5, 3, size=shape) * rng.choice([-1, 1], size=shape)).astype(np.float16)
    if name == "pow":
        a = np.abs(a) + np.float16(0.1)
    if name == "eq":
        b[0] = a[0]
    y = fn(tr.tensor(a), tr.tensor(b))
    assert kernels_of(y)[-1][2] == width
    check(y, ref(a.astype(np.float64), b.astype(np.float64)), tol)


def test_where_and_casts_f16(rng: np.random.Generator) -> None:
    a, b = f16(rng, (5, 6)), f16(rng, (5, 6))
    ta, tb = tr.tensor(a), tr.tensor(b)
    check(tr.where(ta > tb, ta, tb), np.where(a > b, a, b), "exact")
    x32 = rng.uniform(-70000, 70000, size=(4, 8)).astype(np.float32)  # beyond f16's range too: inf, as numpy
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(tr.tensor(x32).astype(tr.float16).numpy(), x32.astype(np.float16))
    np.testing.assert_array_equal(ta.astype(tr.float32).numpy(), a.astype(np.float32))
    np.testing.assert_array_equal(ta.astype(tr.int32).numpy(), a.astype(np.int32))
    np.testing.assert_array_equal(
        tr.tensor(np.arange(-3, 5, dtype=np.int32)).astype(tr.float16).numpy(), np.arange(-3, 5).astype(np.float16)
    )
    assert (ta + 1.0).dtype == tr.float16 and (ta + tr.ones(6)).dtype == tr.float32  # numpy's promotion


@pytest.mark.parametrize("m,k,n", [(33, 64, 17), (1, 64, 24), (16, 40, 8)], ids=["gemm", "gemv", "tiles"])
def test_matmul_f16_accumulates_in_f32(m: int, k: int, n: int, rng: np.random.Generator) -> None:
    a, b = f16(rng, (m, k), -1, 1), f16(rng, (k, n), -1, 1)
    y = tr.tensor(a) @ tr.tensor(b)
    assert y.dtype == tr.float16
    check(y, a.astype(np.float64) @ b.astype(np.float64), "accumulate")
    # a 4096-long dot product of ones is exact only with an f32 accumulator (f16 stops at 2048)
    ones = tr.ones((1, 4096), tr.float16) @ tr.ones((4096, 2), tr.float16)
    np.testing.assert_array_equal(ones.numpy(), np.full((1, 2), 4096, np.float16))


@pytest.mark.parametrize("n,width", [(7, 1), (6, 2), (384, 4)], ids=SHAPE_IDS)
def test_norms_f16(n: int, width: int, rng: np.random.Generator) -> None:
    x = (rng.standard_normal((6, n)) * 4 + 20).astype(np.float16)  # a large mean: f16 sums would drift
    w = f16(rng, (n,), 0.5, 1.5)
    b = f16(rng, (n,), -1, 1)
    y = tr.nn.layer_norm(tr.tensor(x), tr.tensor(w), tr.tensor(b), eps=1e-5)
    assert kernel_kinds(y) == [("norm_regs", "layer_norm,w1,b1", width)]
    x64 = x.astype(np.float64)
    mean = x64.mean(-1, keepdims=True)
    want = (x64 - mean) / np.sqrt(((x64 - mean) ** 2).mean(-1, keepdims=True) + 1e-5) * w + b
    check(y, want, "accumulate")
    r = tr.nn.rms_norm(tr.tensor(x), tr.tensor(w))
    check(r, x64 / np.sqrt((x64**2).mean(-1, keepdims=True) + 1e-6) * w, "accumulate")


@pytest.mark.parametrize("n", [7, 6, 300])
def test_softmax_and_reductions_f16(n: int, rng: np.random.Generator) -> None:
    x = f16(rng, (5, n), -6, 6)
    x64 = x.astype(np.float64)
    t = tr.tensor(x)
    e = np.exp(x64 - x64.max(-1, keepdims=True))
    check(t.softmax(-1), e / e.sum(-1, keepdims=True), "accumulate")
    check(t.log_softmax(-1), x64 - x64.max(-1, keepdims=True) - np.log(e.sum(-1, keepdims=True)), "accumulate")
    check(t.sum(-1), x64.sum(-1), "accumulate")
    check(t.mean(-1), x64.mean(-1), "accumulate")
    check(t.max(-1), x64.max(-1), "exact")
    check(t.min(0), x64.min(0), "exact")
    np.testing.assert_array_equal(t.argmax(-1).numpy(), x.argmax(-1))


@pytest.mark.parametrize("n", [100, 4097])
def test_f16_mean_sums_in_f32(n: int, rng: np.random.Generator) -> None:
    """A float16 total of 100 x 1000 is inf; the mean is not (issue 16.4)."""
    x = np.full((3, n), 1000, np.float16)
    x[1] = rng.uniform(60000, 65000, n).astype(np.float16)
    y = tr.tensor(x).mean(-1)
    assert y.dtype is tr.float16
    check(y, x.astype(np.float64).mean(-1), "accumulate")
    check(tr.tensor(x).mean(), x.astype(np.float64).mean(), "accumulate")
    assert float(tr.tensor(np.full(100, 1000, np.float16)).mean()) == 1000.0


def test_gather_conv_and_index_write_f16(rng: np.random.Generator) -> None:
    table = f16(rng, (20, 8))
    ids = rng.integers(0, 20, size=(2, 3))
    check(tr.nn.embedding(ids, tr.tensor(table)), table[ids], "exact")
    x, w = f16(rng, (1, 4, 11), -1, 1), f16(rng, (3, 4, 3), -1, 1)
    got = tr.nn.conv1d(tr.tensor(x), tr.tensor(w), padding=1)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    xp = np.pad(x64, ((0, 0), (0, 0), (1, 1)))
    want = np.stack([np.einsum("ck,ock->o", xp[0, :, i : i + 3], w64) for i in range(11)], -1)[None]
    check(got, want, "accumulate")
    cache = tr.tensor(np.zeros((4, 8), np.float16)).realize()
    cache.index_write(tr.tensor(table[:2]), (1, 0))
    check(cache, np.concatenate([np.zeros((1, 8)), table[:2], np.zeros((1, 8))]).astype(np.float16), "exact")


def test_attention_f16(rng: np.random.Generator) -> None:
    q, k, v = f16(rng, (2, 4, 5, 16), -1, 1), f16(rng, (2, 2, 7, 16), -1, 1), f16(rng, (2, 2, 7, 16), -1, 1)
    y = tr.nn.scaled_dot_product_attention(tr.tensor(q), tr.tensor(k), tr.tensor(v), is_causal=True)
    assert y.dtype == tr.float16
    q64 = q.astype(np.float64)
    k64, v64 = (np.repeat(a.astype(np.float64), 2, axis=1) for a in (k, v))  # kv head h serves query heads 2h, 2h+1
    s = q64 @ np.swapaxes(k64, -1, -2) / 4.0
    s = np.where(np.arange(7)[None, :] <= np.arange(5)[:, None] + 2, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    check(y, (p / p.sum(-1, keepdims=True)) @ v64, "accumulate")


def test_f16_without_shader_f16_raises_a_clear_dtype_error(device, monkeypatch) -> None:  # noqa: ANN001
    from dataclasses import replace

    from tracer.realize import clear_program_cache

    clear_program_cache()
    monkeypatch.setattr(device, "caps", replace(device.caps, shader_f16=False))
    with pytest.raises(  # raised where float16 enters the graph, not later at realize
        tr.DTypeError,
        match="float16 tensor of shape .* needs the adapter feature shader-f16, which .* lacks; use float32",
    ):
        tr.tensor(np.ones((3, 5), np.float32)).astype(tr.float16) * 3
    np.testing.assert_array_equal((tr.ones((2, 2)) * 3).numpy(), np.full((2, 2), 3, np.float32))  # float32 still runs
