"""numpy calls on Tensors (tracer/interop.py): lazy on the GPU where wgjit has the op, on the host otherwise."""

from __future__ import annotations

import numpy as np
import pytest

import tracer as tr
from tracer.interop import host_fallbacks

pytestmark = pytest.mark.gpu

A = np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5
B = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)

# expressions in numpy's spelling, evaluated once on arrays and once on Tensors
LAZY = [
    "np.exp(x)",
    "np.sqrt(np.abs(x))",
    "np.negative(x)",
    "np.positive(x)",
    "np.square(x)",
    "np.floor(y * 3)",
    "np.add(x, y)",
    "np.subtract(x, 2)",
    "np.multiply(3, y)",
    "np.divide(x, 4)",
    "np.floor_divide(x, 2)",
    "np.remainder(x, 3)",
    "np.power(np.abs(x), 2)",
    "np.maximum(x, y)",
    "np.minimum(x, 0)",
    "np.less(x, y)",
    "np.equal(x, 0.5)",
    "np.logical_and(x > 0, y < 1)",
    "np.logical_or(x > 4, y < -1)",
    "np.logical_xor(x > 0, y > 0)",
    "np.logical_not(x > 0)",
    "np.matmul(x, y.T)",
    "np.matmul(y, x.T)",
    "np.sum(x)",
    "np.sum(x, axis=0)",
    "np.sum(x, axis=1, keepdims=True)",
    "np.mean(x, axis=0)",
    "np.max(x, axis=1)",
    "np.amin(x)",
    "np.argmax(x, axis=0)",
    "np.argmin(y)",
    "np.add.reduce(x, axis=1)",
    "np.maximum.reduce(x, axis=0)",
    "np.concatenate([x, y])",
    "np.concatenate([x, y], axis=1)",
    "np.concatenate([x, y], axis=None)",
    "np.stack([x, y], axis=1)",
    "np.where(x > 0, x, y)",
    "np.where(x > 0, x, 0.0)",
    "np.clip(x, -1, 2)",
    "np.reshape(x, (4, 3))",
    "np.reshape(x, -1)",
    "np.transpose(x)",
    "np.expand_dims(x, 1)",
    "np.squeeze(np.expand_dims(x, 0))",
    "np.broadcast_to(x[0], (5, 4))",
    "np.ravel(x)",
    "np.take(x, [0, 2], axis=1)",
    "np.take(x, [5, 0])",
    "np.zeros_like(x)",
    "np.ones_like(x, dtype=np.int32)",
    "np.full_like(x, 7)",
    "np.copy(x)",
]


def _eval(expr: str, x, y):
    return eval(expr, {"np": np, "x": x, "y": y})  # noqa: S307


@pytest.mark.parametrize("expr", LAZY)
def test_numpy_call_stays_lazy_and_matches_numpy(expr: str) -> None:
    before = sum(host_fallbacks().values())
    got = _eval(expr, tr.tensor(A), tr.tensor(B))
    want = _eval(expr, A, B)
    assert isinstance(got, tr.Tensor), f"{expr} gave {type(got).__name__}, not a lazy Tensor"
    assert sum(host_fallbacks().values()) == before, f"{expr} fell back to the host"
    got = got.numpy()
    assert got.shape == np.shape(want)
    np.testing.assert_allclose(got, np.asarray(want).astype(got.dtype), rtol=1e-5, atol=1e-5)


def test_array_on_the_left_defers_to_the_tensor() -> None:
    x = tr.tensor(A)
    for got, want in ((B + x, B + A), (B * x, B * A), (B > x, B > A), (B @ x.T, B @ A.T)):
        assert isinstance(got, tr.Tensor)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


@pytest.mark.parametrize(
    "expr",
    [
        "np.arctan2(x, y)",
        "np.median(x)",
        "np.percentile(x, 30)",
        "np.exp(x, where=x > 0, out=np.ones((3, 4), np.float32))",
    ],
)
def test_calls_wgjit_lacks_fall_back_to_numpy_on_the_host(expr: str, monkeypatch: pytest.MonkeyPatch) -> None:
    x, y = tr.tensor(A), tr.tensor(B)
    name = expr.split("(")[0]
    before = host_fallbacks().get(name, 0)
    got = _eval(expr, x, y)
    assert not isinstance(got, tr.Tensor)  # a numpy result: it was computed on the host
    assert host_fallbacks()[name] == before + 1
    np.testing.assert_allclose(got, _eval(expr, A, B), rtol=1e-6)
    monkeypatch.setenv("WGJIT_NUMPY_FALLBACK", "error")
    with pytest.raises(tr.DTypeError, match=f"{name}.*host"):
        _eval(expr, x, y)


def test_out_argument() -> None:
    x = tr.tensor(A)
    out = tr.zeros((3, 4))
    alias = out
    assert np.exp(x, out=out) is out
    np.testing.assert_allclose(alias.numpy(), np.exp(A), rtol=1e-6)
    assert np.sum(x, axis=0, out=tr.zeros(4)).shape == (4,)
    host = np.zeros((3, 4), np.float32)
    assert np.add(x, 1, out=host) is host  # a numpy out receives the values read back
    np.testing.assert_allclose(host, A + 1)
    ints = tr.zeros((3, 4), tr.int32)
    with pytest.raises(tr.DTypeError, match="same_kind"):
        np.multiply(x, 2, out=ints)  # numpy refuses float into int outputs too
    with pytest.raises(tr.DTypeError, match="out="):
        np.add(x, 1, out=[1, 2])


def test_ufunc_at_is_refused_with_the_alternative() -> None:
    with pytest.raises(tr.DTypeError, match=r"x\[idx\]"):
        np.add.at(tr.tensor(A), [0, 0], 1)


def test_dtype_equals_what_numpy_calls_it() -> None:
    x = tr.tensor(A)
    assert x.dtype == np.float32 and x.dtype == "float32" and x.dtype == np.dtype("float32")
    assert np.float32 == x.dtype and np.dtype("float32") == x.dtype
    assert x.dtype != np.float64 and x.dtype != "int32" and x.dtype != tr.int32 and x.dtype != None  # noqa: E711
    assert np.dtype(x.dtype) == np.float32
    assert np.zeros(2, dtype=x.dtype).dtype == np.float32
    for dt in (tr.float32, tr.float16, tr.int32, tr.uint32, tr.bool):
        assert dt == dt.np and dt == dt.value and hash(dt) == hash(dt)
    assert tr.bool == np.bool_ and tr.bool == bool and tr.int32 != int  # noqa: E721
    assert {tr.float32: 1}[tr.float32] == 1


def test_numpy_reads_tensors() -> None:
    x = tr.tensor(A)
    np.testing.assert_array_equal(np.asarray(x), A)
    np.testing.assert_array_equal(np.array([x[0], x[1]]), A[:2])
    assert float(np.float32(x[0, 0])) == A[0, 0]
