"""The transformer inference ops (tracer/nn.py) against numpy, on shapes that run each kernel variant.

Every numpy reference here is written in this file, independent of ir/interpret.py; a
separate test checks that the reference interpreter agrees with the GPU on each new op.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest

import tracer as tr
from ir.interpret import interpret
from tests.helpers import assert_close, kernel_kinds, kernels_of
from tracer.graph_builder import build_graph
from tracer.tensor import Tensor

_erf = np.vectorize(math.erf, otypes=[np.float64])

# normalised / contiguous dim odd, 2 mod 4, 0 mod 4 -> KernelElement 1, 2, 4
WIDTHS = [(7, 1), (6, 2), (8, 4), (384, 4)]


def np_layer_norm(x: np.ndarray, w: np.ndarray | None, b: np.ndarray | None, eps: float) -> np.ndarray:
    x = x.astype(np.float64)
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps)
    return y * (1 if w is None else w) + (0 if b is None else b)


def np_rms_norm(x: np.ndarray, w: np.ndarray | None, eps: float) -> np.ndarray:
    x = x.astype(np.float64)
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * (1 if w is None else w)


def on_interpreter(y: Tensor) -> np.ndarray:
    """Evaluate the graph behind y with ir.interpret (inputs read from their host copies or buffers)."""
    built = build_graph([y._lazy])
    inputs = [Tensor(lz).numpy() for lz in built.inputs]
    return interpret(built.graph, inputs)[0]


# --- norms ---------------------------------------------------------------------------


@pytest.mark.parametrize("n,width", WIDTHS, ids=["odd", "2mod4", "0mod4", "384"])
@pytest.mark.parametrize("affine", ["none", "weight", "both"])
def test_layer_norm(n: int, width: int, affine: str, rng: np.random.Generator) -> None:
    # an offset mean: a one-pass E[x^2] - E[x]^2 variance would lose digits
    x = (rng.standard_normal((5, n)) * 3 + 10).astype(np.float32)
    w = rng.standard_normal(n).astype(np.float32) if affine != "none" else None
    b = rng.standard_normal(n).astype(np.float32) if affine == "both" else None
    y = tr.nn.layer_norm(
        tr.tensor(x), None if w is None else tr.tensor(w), None if b is None else tr.tensor(b), eps=1e-5
    )
    # contiguous rows: held in registers (norm_regs)
    assert kernel_kinds(y) == [("norm_regs", f"layer_norm,w{int(w is not None)},b{int(b is not None)}", width)]
    assert_close(y.numpy(), np_layer_norm(x, w, b, 1e-5).astype(np.float32), rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("n,width", WIDTHS, ids=["odd", "2mod4", "0mod4", "384"])
def test_rms_norm(n: int, width: int, rng: np.random.Generator) -> None:
    x = rng.standard_normal((4, 3, n)).astype(np.float32)
    w = rng.standard_normal(n).astype(np.float32)
    y = tr.nn.rms_norm(tr.tensor(x), tr.tensor(w), eps=1e-6)
    assert kernel_kinds(y) == [("norm_regs", "rms_norm,w1,b0", width)]
    assert_close(y.numpy(), np_rms_norm(x, w, 1e-6).astype(np.float32), rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("n,threads", [(384, 32), (768, 64), (2048, 128), (8192, 256), (1001, 256)])
def test_norm_workgroups_fit_the_row(n: int, threads: int, rng: np.random.Generator) -> None:
    """About four vec4 steps per thread (passes.select_kernels.NORM_STEPS_PER_THREAD), 32..256 threads."""
    x = (rng.standard_normal((3, n)) * 3 + 10).astype(np.float32)
    w, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    y = tr.nn.layer_norm(tr.tensor(x), tr.tensor(w), tr.tensor(b), eps=1e-5)
    (dispatch,) = tr.compile(y).dispatches
    assert dispatch.workgroup_size[0] == threads
    assert_close(y.numpy(), np_layer_norm(x, w, b, 1e-5).astype(np.float32), rtol=1e-5, atol=2e-5)


def test_norm_of_strided_views_reads_through_strides(rng: np.random.Generator) -> None:
    x = rng.standard_normal((8, 6)).astype(np.float32)
    y = tr.nn.layer_norm(tr.tensor(x).T)  # rows are columns of x: stride 6 along the normalised dim
    assert kernels_of(y) == [("norm", "layer_norm,w0,b0", 1)]
    assert_close(y.numpy(), np_layer_norm(x.T, None, None, 1e-5).astype(np.float32), atol=2e-5)
    z = tr.nn.rms_norm(tr.tensor(x)[1::2, 2:])  # row stride 12, offset 8: vec4 loads stay aligned
    assert kernels_of(z) == [("norm", "rms_norm,w0,b0", 4)]
    assert_close(z.numpy(), np_rms_norm(x[1::2, 2:], None, 1e-6).astype(np.float32), atol=2e-5)
    u = tr.nn.rms_norm(tr.tensor(x)[:, 1:5])  # offset 1: a multiple-of-4 row that cannot be read as vectors
    assert kernels_of(u) == [("norm", "rms_norm,w0,b0", 1)]
    assert_close(u.numpy(), np_rms_norm(x[:, 1:5], None, 1e-6).astype(np.float32), atol=2e-5)


def test_group_norm(rng: np.random.Generator) -> None:
    x = rng.standard_normal((2, 6, 5)).astype(np.float32)
    w, b = rng.standard_normal(6).astype(np.float32), rng.standard_normal(6).astype(np.float32)
    y = tr.nn.group_norm(tr.tensor(x), 3, tr.tensor(w), tr.tensor(b), eps=1e-5)
    assert ("norm_regs", "layer_norm,w0,b0", 2) in kernel_kinds(y)  # composed: one norm kernel over 10-long rows
    g = x.reshape(2, 3, 10).astype(np.float64)
    want = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)).reshape(2, 6, 5)
    want = want * w[:, None] + b[:, None]
    assert_close(y.numpy(), want.astype(np.float32), atol=2e-5)


def test_norm_errors_name_the_op_and_shapes() -> None:
    x = tr.zeros((4, 8))
    with pytest.raises(
        tr.ShapeError, match=r"layer_norm: weight has shape \(7,\), expected \(8,\) for x of shape \(4, 8\)"
    ):
        tr.nn.layer_norm(x, tr.ones(7))
    with pytest.raises(tr.ShapeError, match=r"rms_norm: x must have at least one dimension"):
        tr.nn.rms_norm(tr.tensor(1.0))
    with pytest.raises(
        tr.ShapeError, match=r"group_norm: 8 channels of x shape \(2, 8, 3\) do not split into 3 groups"
    ):
        tr.nn.group_norm(tr.zeros((2, 8, 3)), 3)


# --- gathers ------------------------------------------------------------------------


@pytest.mark.parametrize("dim,width", [(7, 1), (6, 2), (384, 4)], ids=["odd", "2mod4", "0mod4"])
def test_embedding_rows_are_copied_as_vectors(dim: int, width: int, rng: np.random.Generator) -> None:
    table = rng.standard_normal((50, dim)).astype(np.float32)
    ids = rng.integers(0, 50, size=(3, 5))
    y = tr.nn.embedding(ids, tr.tensor(table))
    assert y.shape == (3, 5, dim)
    assert kernels_of(y)[0] == ("gather", "axis0", width)
    np.testing.assert_array_equal(y.numpy(), table[ids])


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_index_select_any_axis_and_nd_ids(axis: int, rng: np.random.Generator) -> None:
    x = rng.standard_normal((4, 5, 6)).astype(np.float32)
    ids = rng.integers(0, x.shape[axis], size=(2, 3)).astype(np.int32)
    y = tr.index_select(tr.tensor(x), tr.tensor(ids), axis=axis)
    np.testing.assert_array_equal(y.numpy(), np.take(x, ids, axis=axis))


def test_index_select_ints_and_bools() -> None:
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    np.testing.assert_array_equal(tr.index_select(tr.tensor(x), [2, 0, 2], 0).numpy(), x[[2, 0, 2]])
    m = x % 3 == 0
    np.testing.assert_array_equal(tr.index_select(tr.tensor(m), [3, 1], 1).numpy(), m[:, [3, 1]])


def test_gather_is_take_along_axis_with_broadcasting(rng: np.random.Generator) -> None:
    x = rng.standard_normal((4, 6)).astype(np.float32)
    ids = rng.integers(0, 6, size=(4, 3))
    np.testing.assert_array_equal(tr.gather(tr.tensor(x), ids, 1).numpy(), np.take_along_axis(x, ids, 1))
    ids0 = rng.integers(0, 4, size=(2, 1))  # broadcasts along axis 1
    np.testing.assert_array_equal(tr.gather(tr.tensor(x), ids0, 0).numpy(), np.take_along_axis(x, ids0, 0))
    top = tr.tensor(x).argmax(axis=1, keepdims=True)  # ids computed on the GPU
    np.testing.assert_array_equal(tr.gather(tr.tensor(x), top, 1).numpy(), x.max(axis=1, keepdims=True))


def test_out_of_range_ids_known_on_the_host_raise() -> None:
    table = tr.zeros((10, 4))
    with pytest.raises(tr.IndexOutOfRangeError, match=r"embedding: id 10 is out of range for axis 0 with size 10"):
        tr.nn.embedding([1, 10], table)
    with pytest.raises(tr.IndexOutOfRangeError, match=r"id -1 is out of range"):
        tr.index_select(table, tr.tensor([-1, 2]), 0)  # a tensor whose data is still on the host
    with pytest.raises(tr.IndexOutOfRangeError, match=r"gather: id 4 is out of range for axis 1 with size 4"):
        tr.gather(table, np.full((10, 1), 4), 1)
    with pytest.raises(IndexError):  # also an IndexError, as numpy raises
        tr.nn.embedding([99], table)


def test_out_of_range_ids_on_the_gpu_are_clamped() -> None:
    x = np.arange(20, dtype=np.float32).reshape(5, 4)
    ids = tr.tensor(np.array([-3, 0, 4, 5, 100], np.int32)).realize()  # uploaded: not checkable at trace time
    y = tr.index_select(tr.tensor(x), ids, 0)
    np.testing.assert_array_equal(y.numpy(), x[[0, 0, 4, 4, 4]])
    assert_close(on_interpreter(tr.index_select(tr.tensor(x), ids, 0)), x[[0, 0, 4, 4, 4]])


def test_gather_errors() -> None:
    x = tr.zeros((3, 4))
    with pytest.raises(tr.DTypeError, match=r"index_select: ids must be int32, got float32"):
        tr.index_select(x, tr.tensor([0.0, 1.0]), 0)
    with pytest.raises(tr.DTypeError, match="ids must be integers"):
        tr.nn.embedding([0.5], x)
    with pytest.raises(tr.ShapeError, match=r"gather: ids shape \(3,\) must have as many dims as x shape \(3, 4\)"):
        tr.gather(x, [0, 1, 2], 1)
    with pytest.raises(tr.ShapeError, match=r"embedding: table must be \(vocab, dim\)"):
        tr.nn.embedding([0], tr.zeros(4))
    with pytest.raises(tr.ShapeError, match="axis 2 is out of range"):
        tr.index_select(x, [0], 2)


# --- elementwise additions ------------------------------------------------------------


@pytest.mark.parametrize("shape,width", [((3, 7), 1), ((5, 6), 2), ((4, 8), 4)], ids=["odd", "2mod4", "0mod4"])
def test_erf(shape: tuple[int, int], width: int, rng: np.random.Generator) -> None:
    x = rng.uniform(-4, 4, size=shape).astype(np.float32)
    y = tr.erf(tr.tensor(x))
    assert kernels_of(y) == [("elementwise", "erf:contig", width)]
    assert_close(y.numpy(), _erf(x).astype(np.float32), rtol=0, atol=5e-7)  # A&S 7.1.26: |error| < 1.5e-7
    assert tr.erf(tr.tensor([0, 1])).dtype == tr.float32  # ints become float32, as other float-only ops


def test_clamp(rng: np.random.Generator) -> None:
    x = rng.uniform(-3, 3, size=(4, 6)).astype(np.float32)
    x[0, 0] = np.nan
    t = tr.tensor(x)
    assert_close(tr.clamp(t, -1.0, 2.0).numpy(), np.clip(x, -1, 2))
    assert_close(t.clamp(min=0.5).numpy(), np.maximum(x, 0.5))
    assert_close(t.clamp(max=0.5).numpy(), np.minimum(x, 0.5))
    lo = rng.uniform(-2, 0, size=(6,)).astype(np.float32)
    assert_close(tr.clamp(t, tr.tensor(lo), 1.0).numpy(), np.clip(x, lo, 1.0))  # tensor bounds broadcast
    i = np.arange(-5, 5, dtype=np.int32)
    got = tr.clamp(tr.tensor(i), -2, 3)
    assert got.dtype == tr.int32
    np.testing.assert_array_equal(got.numpy(), np.clip(i, -2, 3))
    with pytest.raises(ValueError, match="clamp: give min, max or both"):
        tr.clamp(t)


def test_softmax_of_rows_with_several_minus_inf() -> None:
    # regression: merging two running maxima of -inf gave exp(-inf - -inf) = NaN for the whole row
    for n in (4, 5, 300):
        x = np.full((2, n), -np.inf, np.float32)
        x[:, 1] = 0.5
        x[1, -1] = 2.0
        e = np.exp(x - x.max(-1, keepdims=True))
        assert_close(tr.tensor(x).softmax(-1).numpy(), e / e.sum(-1, keepdims=True))
    assert np.isnan(tr.tensor(np.full((1, 4), -np.inf, np.float32)).softmax(-1).numpy()).all()  # as numpy and torch


def test_masked_fill(rng: np.random.Generator) -> None:
    x = rng.standard_normal((2, 3, 5)).astype(np.float32)
    mask = rng.random((3, 1)) > 0.5
    y = tr.masked_fill(tr.tensor(x), tr.tensor(mask), float("-inf"))
    assert_close(y.numpy(), np.where(mask, -np.inf, x))
    i = np.arange(6, dtype=np.int32)
    got = tr.tensor(i).masked_fill(tr.tensor(i > 2), 7)
    assert got.dtype == tr.int32
    np.testing.assert_array_equal(got.numpy(), np.where(i > 2, 7, i))
    with pytest.raises(tr.DTypeError, match="masked_fill: mask must be bool, got float32"):
        tr.masked_fill(tr.tensor(x), tr.tensor(x), 0.0)
    with pytest.raises(tr.ShapeError, match=r"mask shape \(4, 3, 5\) does not broadcast to x shape \(2, 3, 5\)"):
        tr.masked_fill(tr.tensor(x), tr.zeros((4, 3, 5), tr.bool), 0.0)


def test_pow_with_tensor_exponents(rng: np.random.Generator) -> None:
    base = rng.uniform(0.1, 3, size=(3, 6)).astype(np.float32)
    exp = rng.uniform(-2, 2, size=(3, 6)).astype(np.float32)
    assert_close((tr.tensor(base) ** tr.tensor(exp)).numpy(), np.power(base, exp), rtol=2e-6)
    assert_close(tr.pow(tr.tensor(base), tr.tensor(exp[0])).numpy(), np.power(base, exp[0]), rtol=2e-6)  # broadcast
    assert_close((2.0 ** tr.tensor(exp)).numpy(), np.power(np.float32(2), exp), rtol=2e-6)  # scalar base
    neg = np.array([-2.0, -2.0, -3.0], np.float32)
    ints = np.array([3.0, 2.0, -1.0], np.float32)
    assert_close(tr.pow(tr.tensor(neg), tr.tensor(ints)).numpy(), np.power(neg, ints))  # odd/even integer exponents


# --- rope and attention -------------------------------------------------------------------


def np_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, interleaved: bool) -> np.ndarray:
    out = np.empty_like(x)
    half = x.shape[-1] // 2
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        out[..., 0::2], out[..., 1::2] = a * cos - b * sin, b * cos + a * sin
    else:
        a, b = x[..., :half], x[..., half:]
        out[..., :half], out[..., half:] = a * cos - b * sin, b * cos + a * sin
    return out


@pytest.mark.parametrize("interleaved", [False, True], ids=["half", "interleaved"])
def test_rope(interleaved: bool, rng: np.random.Generator) -> None:
    b, h, t, d = 2, 3, 5, 8
    x = rng.standard_normal((b, h, t, d)).astype(np.float32)
    inv = 1.0 / 10000 ** (np.arange(0, d, 2) / d)
    ang = np.arange(t)[:, None] * inv[None, :]  # (t, d/2)
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    y = tr.nn.rope(tr.tensor(x), tr.tensor(cos), tr.tensor(sin), interleaved=interleaved)
    want = np_rope(x, cos, sin, interleaved)
    assert_close(y.numpy(), want, atol=2e-6)
    # the duplicated (t, d) tables that Hugging Face models build give the same result
    dup = (lambda a: np.concatenate([a, a], -1)) if not interleaved else (lambda a: np.repeat(a, 2, -1))
    y2 = tr.nn.rope(tr.tensor(x), tr.tensor(dup(cos)), tr.tensor(dup(sin)), interleaved=interleaved)
    assert_close(y2.numpy(), want, atol=2e-6)
    with pytest.raises(tr.ShapeError, match=r"rope: the last axis of x must have an even size"):
        tr.nn.rope(tr.zeros((2, 5)), tr.zeros(2), tr.zeros(2))
    with pytest.raises(tr.ShapeError, match=r"rope: cos shape \(3,\) must end in 4"):
        tr.nn.rope(tr.tensor(x), tr.zeros(3), tr.zeros(4))


def np_sdpa(q, k, v, mask=None, causal=False, scale=None) -> np.ndarray:  # noqa: ANN001
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    if q.ndim >= 3 and q.shape[-3] != k.shape[-3]:
        h, hkv = q.shape[-3], k.shape[-3]  # grouped-query: repeat each kv head for its group of query heads
        k, v = np.repeat(k, h // hkv, axis=-3), np.repeat(v, h // hkv, axis=-3)
    s = q @ np.swapaxes(k, -1, -2) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    lq, lk = s.shape[-2:]
    if causal:
        s = np.where(np.arange(lk)[None, :] <= np.arange(lq)[:, None] + (lk - lq), s, -np.inf)
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


SDPA_CASES = {
    "mha": dict(q=(2, 4, 6, 8), kv=(2, 4, 6, 8)),
    "gqa": dict(q=(2, 6, 5, 8), kv=(2, 2, 7, 8)),
    "mqa_causal_decode": dict(q=(1, 4, 1, 16), kv=(1, 1, 9, 16), causal=True),
    "causal_prefill": dict(q=(2, 3, 7, 4), kv=(2, 3, 7, 4), causal=True),
    "gqa_causal": dict(q=(1, 4, 3, 8), kv=(1, 2, 5, 8), causal=True),
    "bool_mask": dict(q=(2, 2, 4, 8), kv=(2, 2, 6, 8), mask="bool"),
    "float_mask_scale": dict(q=(2, 2, 4, 8), kv=(2, 2, 6, 8), mask="float", scale=0.3),
    "gqa_bool_mask": dict(q=(2, 4, 3, 8), kv=(2, 2, 6, 8), mask="bool"),
    "unbatched_2d": dict(q=(5, 8), kv=(6, 8)),
}


@pytest.mark.parametrize("case", list(SDPA_CASES))
def test_scaled_dot_product_attention(case: str, rng: np.random.Generator) -> None:
    c = SDPA_CASES[case]
    q = rng.standard_normal(c["q"]).astype(np.float32)
    k = rng.standard_normal(c["kv"]).astype(np.float32)
    v = rng.standard_normal(c["kv"]).astype(np.float32)
    mask = None
    batch, lq, lk = c["q"][:-3], c["q"][-2], c["kv"][-2]
    if c.get("mask") == "bool":
        mask = rng.random(batch + (1, lq, lk)) > 0.3
        mask[..., 0] = True  # every query sees at least one key
    elif c.get("mask") == "float":
        mask = rng.standard_normal(batch + (1, 1, lk)).astype(np.float32)
    y = tr.nn.scaled_dot_product_attention(
        tr.tensor(q), tr.tensor(k), tr.tensor(v), mask=None if mask is None else tr.tensor(mask),
        is_causal=c.get("causal", False), scale=c.get("scale"),
    )  # fmt: skip
    assert y.shape == q.shape[:-1] + (v.shape[-1],)
    # one dispatch: flash attention, or attention_decode for one query row over the keys
    # (tests/test_attention.py and tests/test_decode_attention.py cover the kernels)
    want = "attention_decode" if q.shape[-2] == 1 else "flash_attention"
    assert [name for name, _, _ in kernels_of(y)] == [want]
    assert_close(
        y.numpy(), np_sdpa(q, k, v, mask, c.get("causal", False), c.get("scale")).astype(np.float32), atol=2e-6
    )


def test_gqa_kv_heads_are_broadcast_not_copied(rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    q = tr.tensor(rng.standard_normal((1, 8, 4, 16)).astype(np.float32))
    k = tr.tensor(rng.standard_normal((1, 2, 4, 16)).astype(np.float32))
    y = tr.nn.scaled_dot_product_attention(q, k, k)
    # fused: one dispatch that reads kv head h // 4 (no repeat of k or v)
    assert [d.op for d in tr.compile(y).dispatches] == ["attention"]
    # composed (head dims past the flash kernel's): the matmuls read the 2 kv heads through
    # stride-0 views; no copy is dispatched (the output's own runs in place over the dead product)
    q = tr.tensor(rng.standard_normal((1, 8, 4, 520)).astype(np.float32))
    k = tr.tensor(rng.standard_normal((1, 2, 4, 520)).astype(np.float32))
    y = tr.nn.scaled_dot_product_attention(q, k, k)
    assert [d.op for d in tr.compile(y).dispatches] == ["mul", "matmul", "softmax", "fused"]
    monkeypatch.setenv("WGJIT_FUSION", "0")
    dispatches = tr.compile(y).dispatches
    assert [d.op for d in dispatches] == ["mul", "matmul", "softmax", "matmul"]
    assert_close(y.numpy(), np_sdpa(q.numpy(), k.numpy(), k.numpy()).astype(np.float32), atol=1e-5)


def test_sdpa_errors() -> None:
    q, k = tr.zeros((2, 4, 5, 8)), tr.zeros((2, 3, 5, 8))
    with pytest.raises(tr.ShapeError, match=r"4 query heads \(q \(2, 4, 5, 8\)\) cannot share 3 kv heads"):
        tr.nn.scaled_dot_product_attention(q, k, k)
    with pytest.raises(tr.ShapeError, match="need q and k to share the last axis"):
        tr.nn.scaled_dot_product_attention(q, tr.zeros((2, 4, 5, 7)), tr.zeros((2, 4, 5, 7)))
    with pytest.raises(tr.ShapeError, match=r"mask shape \(3, 5\) does not broadcast"):
        tr.nn.scaled_dot_product_attention(q, q, q, mask=tr.zeros((3, 5), tr.bool))
    with pytest.raises(tr.DTypeError, match="k must be float, got int32"):
        tr.nn.scaled_dot_product_attention(q, tr.zeros((2, 4, 5, 8), tr.int32), q)


# --- conv1d --------------------------------------------------------------------------------


def np_conv1d(x: np.ndarray, w: np.ndarray, stride: int, padding: int, dilation: int, groups: int) -> np.ndarray:
    n, cin, length = x.shape
    cout, cin_g, taps = w.shape
    lout = (length + 2 * padding - dilation * (taps - 1) - 1) // stride + 1
    out = np.zeros((n, cout, lout))
    for co in range(cout):
        g = co // (cout // groups)
        for lo in range(lout):
            for ci in range(cin_g):
                for kk in range(taps):
                    pos = lo * stride - padding + kk * dilation
                    if 0 <= pos < length:
                        out[:, co, lo] += x[:, g * cin_g + ci, pos] * w[co, ci, kk]
    return out


CONV_CASES = {
    "plain": dict(x=(2, 3, 10), w=(4, 3, 3)),
    "whisper_stem": dict(x=(1, 8, 12), w=(6, 8, 3), padding=1),
    "whisper_stride2": dict(x=(1, 6, 12), w=(6, 6, 3), stride=2, padding=1),
    "dilated_groups": dict(x=(2, 4, 15), w=(6, 2, 3), dilation=2, groups=2, padding=2),
    "depthwise": dict(x=(1, 4, 9), w=(4, 1, 5), groups=4, padding=2),
}


@pytest.mark.parametrize("case", list(CONV_CASES))
def test_conv1d(case: str, rng: np.random.Generator) -> None:
    c = dict(CONV_CASES[case])
    x = rng.standard_normal(c.pop("x")).astype(np.float32)
    w = rng.standard_normal(c.pop("w")).astype(np.float32)
    bias = rng.standard_normal(w.shape[0]).astype(np.float32)
    args = dict(stride=1, padding=0, dilation=1, groups=1) | c
    y = tr.nn.conv1d(tr.tensor(x), tr.tensor(w), tr.tensor(bias), **args)
    want = np_conv1d(x, w, **args) + bias[:, None]
    assert kernels_of(y)[0][0] == "conv1d"
    assert_close(y.numpy(), want.astype(np.float32), rtol=1e-5, atol=1e-5)


def test_conv1d_unbatched_strided_input_and_errors(rng: np.random.Generator) -> None:
    x = rng.standard_normal((9, 3)).astype(np.float32)  # (L, C): its transpose is a strided (C, L) view
    w = rng.standard_normal((2, 3, 2)).astype(np.float32)
    y = tr.nn.conv1d(tr.tensor(x).T, tr.tensor(w))
    assert y.shape == (2, 8)
    assert_close(y.numpy(), np_conv1d(x.T[None], w, 1, 0, 1, 1)[0].astype(np.float32), atol=1e-5)
    with pytest.raises(
        tr.ShapeError, match=r"conv1d: x shape \(1, 4, 9\) and weight shape \(6, 3, 3\) do not fit 1 groups"
    ):
        tr.nn.conv1d(tr.zeros((1, 4, 9)), tr.zeros((6, 3, 3)))
    with pytest.raises(tr.ShapeError, match="input length 2 with padding 0 is shorter than the kernel's reach 3"):
        tr.nn.conv1d(tr.zeros((1, 1, 2)), tr.zeros((1, 1, 3)))
    with pytest.raises(ValueError, match="conv1d: stride must be an int >= 1"):
        tr.nn.conv1d(tr.zeros((1, 1, 5)), tr.zeros((1, 1, 3)), stride=0)


# --- concat fan-in ------------------------------------------------------------------------


def test_concat_of_many_inputs_is_one_kernel_where_the_device_allows(device) -> None:  # noqa: ANN001
    parts = [np.full((2, i + 1), i, np.float32) for i in range(20)]
    y = tr.concat([tr.tensor(p) for p in parts], axis=1)
    concats = [k for k in kernels_of(y) if k[0] == "concat"]
    fan_in = device.caps.max_storage_buffers_per_stage - 1
    assert len(concats) == (1 if fan_in >= 20 else math.ceil(20 / fan_in) + 1)
    np.testing.assert_array_equal(y.numpy(), np.concatenate(parts, axis=1))
    small = tr.concat([tr.tensor(p) for p in parts[:5]], axis=1)
    assert [k[0] for k in kernels_of(small)] == ["concat"]


# --- index_write (KV cache) ---------------------------------------------------------------


def test_index_write_in_place_touches_only_src() -> None:
    cache = tr.zeros((2, 3, 16, 8)).realize()
    buffer = cache._lazy.buffer
    new = np.arange(2 * 3 * 1 * 8, dtype=np.float32).reshape(2, 3, 1, 8)
    assert cache.index_write(tr.tensor(new), (0, 0, 5, 0)) is cache
    (d,) = tr.compile(cache).dispatches
    assert (d.kernel, d.variant, d.inplace) == ("index_write", "inplace", True)
    assert d.workgroup_count == (1, 1, 1)  # 48 elements of src, not 768 of the cache
    want = np.zeros((2, 3, 16, 8), np.float32)
    want[:, :, 5:6] = new
    np.testing.assert_array_equal(cache.numpy(), want)
    assert cache._lazy.buffer is buffer  # the same GPU buffer, updated in place


def test_index_write_keeps_pending_reads_of_the_old_value() -> None:
    x = tr.tensor(np.zeros((4, 4), np.float32)).realize()
    doubled = x + 1  # pending: reads the old value
    row = x[1].copy()  # a lazy copy of the old value
    view = x[1]  # a view: it sees the write, as in numpy
    x.index_write(tr.ones((2, 2)), (1, 1))
    (d,) = tr.compile(x).dispatches
    assert (d.variant, d.inplace) == ("copy", False)  # the old buffer is still needed: copy
    want = np.zeros((4, 4), np.float32)
    want[1:3, 1:3] = 1
    np.testing.assert_array_equal(x.numpy(), want)
    np.testing.assert_array_equal(doubled.numpy(), np.ones((4, 4)))
    np.testing.assert_array_equal(row.numpy(), np.zeros(4))
    np.testing.assert_array_equal(view.numpy(), want[1])


def test_kv_cache_decode_loop_matches_numpy(rng: np.random.Generator) -> None:
    heads, steps, d = 2, 6, 8
    k_cache = tr.zeros((1, heads, steps, d)).realize()
    ref_cache = np.zeros((1, heads, steps, d), np.float32)
    for pos in range(steps):
        k_new = rng.standard_normal((1, heads, 1, d)).astype(np.float32)
        q = rng.standard_normal((1, heads, 1, d)).astype(np.float32)
        k_cache.index_write(tr.tensor(k_new), (0, 0, pos, 0))
        ref_cache[:, :, pos : pos + 1] = k_new
        seen = k_cache[:, :, : pos + 1]
        out = tr.nn.scaled_dot_product_attention(tr.tensor(q), seen, seen)
        assert ("index_write", "inplace", 1) in kernels_of(out, k_cache)
        tr.realize(out, k_cache)
        assert_close(
            out.numpy(),
            np_sdpa(q, ref_cache[:, :, : pos + 1], ref_cache[:, :, : pos + 1]).astype(np.float32),
            atol=2e-6,
        )
    np.testing.assert_array_equal(k_cache.numpy(), ref_cache)


def test_index_write_of_a_pending_tensor_and_chained_writes() -> None:
    x = tr.zeros((3, 5)) + 2  # pending
    x.index_write(tr.ones((1, 5)), (0, 0)).index_write(tr.full((3, 1), 7.0), (0, 4))
    want = np.full((3, 5), 2, np.float32)
    want[0] = 1
    want[:, 4] = 7
    np.testing.assert_array_equal(x.numpy(), want)


def test_index_write_from_its_own_buffer() -> None:
    base = np.arange(20, dtype=np.float32).reshape(5, 4)
    x = tr.tensor(base).realize()
    x.index_write(x[0:3], (2, 0))  # src reads the buffer being written: in place would race
    assert tr.compile(x).dispatches[0].variant == "copy"
    want = base.copy()
    want[2:5] = base[0:3]
    np.testing.assert_array_equal(x.numpy(), want)
    x.index_write(x[:2] + 100, (3, 0))  # src computed from x first, then written into it in place
    assert tr.compile(x).dispatches[-1].variant == "inplace"
    want[3:5] = want[:2] + 100
    np.testing.assert_array_equal(x.numpy(), want)


def test_index_write_errors() -> None:
    x = tr.zeros((4, 4))
    with pytest.raises(
        tr.IndexOutOfRangeError,
        match=r"index_write: src shape \(2, 2\) at offsets \(3, 0\) reaches outside x shape \(4, 4\)",
    ):
        x.index_write(tr.ones((2, 2)), (3, 0))
    with pytest.raises(tr.ShapeError, match="must have one entry per axis"):
        x.index_write(tr.ones(4), (0,))
    with pytest.raises(tr.DTypeError, match="cannot write float32 into int32"):
        tr.zeros((4,), tr.int32).index_write(tr.ones(2), (0,))
    i = tr.zeros((4,), tr.int32)
    i.index_write(np.array([5, 6], np.int32), (1,))
    np.testing.assert_array_equal(i.numpy(), [0, 5, 6, 0])


# --- the reference interpreter agrees on each new op -----------------------------------------


def _new_op_cases(rng: np.random.Generator) -> dict[str, Tensor]:
    x = tr.tensor(rng.standard_normal((3, 8)).astype(np.float32))
    w = tr.tensor(rng.standard_normal(8).astype(np.float32))
    return {
        "layer_norm": tr.nn.layer_norm(x, w, w, 1e-5),
        "rms_norm": tr.nn.rms_norm(x, w),
        "gather": tr.gather(x, rng.integers(0, 8, (3, 2)), 1),
        "embedding": tr.nn.embedding([[2, 0]], x),
        "erf": tr.erf(x),
        "conv1d": tr.nn.conv1d(
            x.reshape(1, 3, 8), tr.tensor(rng.standard_normal((2, 3, 3)).astype(np.float32)), padding=1, stride=2
        ),
        "index_write": tr.tensor(np.zeros((3, 8), np.float32)).index_write(x[:2, :3], (1, 4)),
    }


@pytest.mark.parametrize("name", ["layer_norm", "rms_norm", "gather", "embedding", "erf", "conv1d", "index_write"])
def test_reference_interpreter_agrees(name: str, rng: np.random.Generator) -> None:
    y = _new_op_cases(rng)[name]
    assert_close(on_interpreter(y), y.numpy(), rtol=1e-5, atol=1e-5)


# --- safetensors ----------------------------------------------------------------------------


def test_load_safetensors_f32_f16_bf16_int(tmp_path, caplog) -> None:  # noqa: ANN001
    safetensors = pytest.importorskip("safetensors")
    from safetensors.numpy import save_file

    rng = np.random.default_rng(1)
    a32 = rng.standard_normal((3, 4)).astype(np.float32)
    a16 = rng.standard_normal(5).astype(np.float16)
    ids = np.arange(6, dtype=np.int64).reshape(2, 3)
    save_file({"w32": a32, "w16": a16, "ids": ids}, str(tmp_path / "plain.safetensors"))
    weights = tr.load_safetensors(tmp_path / "plain.safetensors")
    assert set(weights) == {"w32", "w16", "ids"}
    assert all(w._lazy.host is not None for w in weights.values())  # not uploaded until used
    assert (weights["w32"].dtype, weights["w16"].dtype, weights["ids"].dtype) == (tr.float32, tr.float16, tr.int32)
    np.testing.assert_array_equal(weights["w32"].numpy(), a32)
    np.testing.assert_array_equal(weights["w16"].numpy(), a16)
    np.testing.assert_array_equal(weights["ids"].numpy(), ids)

    exact = np.array([[1.5, -2.25], [3.0, 1e-3]], np.float32)
    bf16 = np.ascontiguousarray((exact.view(np.uint32) >> 16).astype(np.uint16))  # truncation: what bf16 holds
    spec = safetensors.TensorSpec(dtype="bfloat16", shape=[2, 2], data_ptr=bf16.ctypes.data, data_len=bf16.nbytes)
    safetensors.serialize_file({"b": spec, "f": _spec(safetensors, a32)}, str(tmp_path / "bf16.safetensors"))
    with caplog.at_level(logging.INFO, logger="wgjit"):
        loaded = tr.load_safetensors(tmp_path / "bf16.safetensors")
    assert loaded["b"].dtype == tr.float32
    np.testing.assert_array_equal(loaded["b"].numpy(), (bf16.astype(np.uint32) << 16).view(np.float32))
    np.testing.assert_array_equal(loaded["f"].numpy(), a32)
    assert "bfloat16" in caplog.text and "float32" in caplog.text


def _spec(safetensors, a: np.ndarray):  # noqa: ANN001, ANN202
    return safetensors.TensorSpec(dtype="float32", shape=list(a.shape), data_ptr=a.ctypes.data, data_len=a.nbytes)


def test_profile_counts_the_new_kernels_work() -> None:
    from backend_wgpu.profile import dispatch_flops

    x, w = tr.zeros((2, 4, 10)), tr.zeros((6, 2, 3))
    program = tr.compile(tr.nn.conv1d(x, w, groups=2), tr.nn.layer_norm(tr.ones((3, 8))))
    flops = {d.op: dispatch_flops(program.graph, d.node) for d in program.dispatches}
    assert flops["conv1d"] == 2 * (2 * 6 * 8) * 2 * 3  # 2 * outputs * (Cin/groups) * taps
    assert flops["layer_norm"] > 0


def test_profile_counts_the_matmuls_inside_a_fused_kernel() -> None:
    from backend_wgpu.profile import dispatch_flops

    a, b, bias = tr.randn(8, 5, seed=0), tr.randn(5, 12, seed=1), tr.randn(12, seed=2)
    program = tr.compile((a @ b + bias).relu())
    fused = [d for d in program.dispatches if d.op == "fused"]
    assert fused, program.summary()  # the epilogue folds into the matmul's kernel
    assert sum(dispatch_flops(program.graph, d.node) for d in program.dispatches) == 2 * 8 * 12 * 5


def test_why_names_k_for_a_row_times_a_matrix() -> None:
    """gemv reads the row and B along k four at a time: explain's width reason names k, not the output's
    last dim (6 here, which no vec4 divides)."""
    from tracer.graph_builder import build_graph
    from tracer.inspect.why import why
    from tracer.realize import program_for

    x, w = np.arange(12, dtype=np.float32).reshape(1, 12), np.ones((6, 12), np.float32)
    y = tr.nn.linear(tr.tensor(x), tr.tensor(w))
    np.testing.assert_allclose(y.numpy(), x @ w.T)
    graph = program_for(build_graph([tr.nn.linear(tr.tensor(x), tr.tensor(w))._lazy]).graph).graph
    (node,) = [n for n in graph if n.kernel is not None and n.kernel.name in ("gemv", "gemv_multi")]
    assert node.kernel.element == 4 and "vec4: k 12 divisible by 4" in why(graph, node)
