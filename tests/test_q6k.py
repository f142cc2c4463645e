"""q6_k (GGML's Q6_K) kept in its block format: the GPU layout, the quantizer, loading, a decode step (the
kernels themselves: tests/test_kquants.py, for every k-quant).

References that share no code with wgjit's: gguf.quants.dequantize (the package llama.cpp's
Python tools use) reads every block made here, and numpy computes the products from those
values. ir/quant.py is the interpreter's reference, checked against gguf first.
"""

from __future__ import annotations

import numpy as np
import pytest

import tracer as tr
from ir import quant
from ir.dtypes import DType

gguf = pytest.importorskip("gguf", reason="q6_k tests read blocks with the gguf package (pip install 'wgjit[gguf]')")


pytestmark = pytest.mark.gpu

Q6_K = gguf.GGMLQuantizationType.Q6_K


def random_blocks(rng: np.random.Generator, n: int) -> np.ndarray:
    """n valid Q6_K blocks with every byte random but d: a finite f16 of either sign, and zero."""
    raw = rng.integers(0, 256, (n, 210), dtype=np.uint8)
    d = rng.standard_normal((n, 1)).astype(np.float16) * np.float16(0.01)
    d[0] = 0.0  # a block that is all zeros whatever its quants
    raw[:, 208:210] = d.view(np.uint8)
    return raw


def gguf_values(raw: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    return gguf.quants.dequantize(raw, Q6_K).reshape(shape)


# --- step 1: layout, quantizer, loading --------------------------------------------------------


def test_dtype_facts() -> None:
    assert (tr.q6_k.block, tr.q6_k.block_bytes, tr.q6_k.is_quantized) == (256, 210, True)
    assert tr.q6_k.nbytes(256) == 224  # 210 bytes (128 of nibbles, 64 of high bits, 16 scales, 2 of d), padded
    assert tr.q6_k.nbytes(4096 * 4096) == 4096 * 4096 // 256 * 210
    assert DType("q6_k") is tr.q6_k and repr(tr.q6_k) == "tr.q6_k"


def test_layout_as_the_docstring_says(rng: np.random.Generator) -> None:
    """Unit j (16 bytes) holds sub-block j's low nibbles in q4_0's order; its 8 bytes of high bits follow all
    units (word 0: values 0..15, value 4c + b at bits 8b + 2c); then the int8 scales; then d per super-block."""
    raw = random_blocks(rng, 2)
    data = quant.pack(raw, DType.q6_k).view(np.uint8)
    units = data[: 2 * 128].reshape(16, 16)
    lo = np.concatenate([units & 15, units >> 4], axis=1).astype(np.int32)  # (16 sub-blocks, 32)
    words = data[256:384].view("<u4").reshape(16, 2).astype(np.int64)
    v = np.arange(16)
    shift = 8 * (v % 4) + 2 * (v // 4)
    hi = np.concatenate([(words[:, 0:1] >> shift) & 3, (words[:, 1:2] >> shift) & 3], axis=1)
    q = lo | (hi << 4)
    sc = data[384:416].view(np.int8).reshape(2, 16).astype(np.float32)
    d = data[416:420].view("<f2").astype(np.float32)
    scale = (d[:, None] * sc).reshape(32)  # one per 16 values
    values = scale[:, None] * (q.reshape(32, 16) - 32)
    np.testing.assert_array_equal(values.reshape(2, 256), gguf_values(raw, (2, 256)))
    assert not data[420:].any()  # padding to 16 bytes


@pytest.mark.parametrize("shape", [(1, 256), (7, 512), (3, 2, 2048)])
def test_quantize_makes_valid_blocks(shape: tuple[int, ...], rng: np.random.Generator) -> None:
    w = (rng.standard_normal(shape) * rng.uniform(0.01, 3.0, shape[:-1] + (1,))).astype(np.float32)
    w[..., :16] = np.abs(w[..., :16])  # 16 values of one sign
    raw = quant.quantize_q6_k(w)
    assert raw.shape == (w.size // 256, 210)
    values = gguf_values(raw, w.shape)
    q = tr.quantize(w, tr.q6_k)
    assert q.dtype is tr.q6_k and q.shape == shape
    np.testing.assert_array_equal(quant.dequantize(q._lazy.host, DType.q6_k, shape), values)
    # 6 bits over each 16 values' range (plus the 8-bit rounding of their scale): a real bound
    err = np.abs(values - w).reshape(-1, 16)
    amax = np.abs(w.reshape(-1, 16)).max(axis=1, keepdims=True)
    assert (err <= amax / 31 * 0.6 + 1e-6).all(), (err / amax).max()
    assert np.sqrt((err**2).mean() / (w**2).mean()) < 0.03


@pytest.mark.parametrize("scale", [1e-2, 1e-3, 1e-4])
def test_quantize_small_weights_keep_their_precision(scale: float, rng: np.random.Generator) -> None:
    """Weights whose f16 d is subnormal (largest |x| below ~0.24): d rounded up keeps every scale unclipped,
    so the error stays that of 6 bits over each 16 values' range."""
    w = (rng.standard_normal((16, 256)) * scale).astype(np.float32)
    values = gguf_values(quant.quantize_q6_k(w), w.shape)
    err = np.abs(values - w).reshape(-1, 16)
    amax = np.abs(w.reshape(-1, 16)).max(axis=1, keepdims=True)
    assert (err <= amax / 31 * 0.6).all(), (err / amax).max()


def test_quantize_constant_and_zero_rows() -> None:
    w = np.zeros((3, 256), np.float32)
    w[1] = 2.5
    w[2, :128] = -0.75
    values = gguf_values(quant.quantize_q6_k(w), w.shape)
    np.testing.assert_allclose(values, w, rtol=1e-3)
    assert not values[0].any() and not values[2, 128:].any()


def test_quantize_bad_input() -> None:
    with pytest.raises(tr.DTypeError, match=r"quantize: shape \(4, 128\) cannot be q6_k: .* multiple of 256"):
        tr.quantize(np.ones((4, 128), np.float32), tr.q6_k)
    with pytest.raises(tr.DTypeError, match="cannot be q6_k"):
        tr.quantize(np.ones(()), tr.q6_k)
    w = np.ones((1, 256), np.float32)
    w[0, 3] = np.inf
    with pytest.raises(tr.DTypeError, match="inf or NaN, which q6_k blocks cannot hold"):
        tr.quantize(w, tr.q6_k)
    with pytest.raises(tr.DTypeError, match=r"reaches \|1e\+12\|, whose q6_k scale overflows"):
        tr.quantize(np.full((1, 256), 1e12, np.float32), tr.q6_k)


# --- a decode step (the kernels themselves, blocks and files: tests/test_kquants.py) --------------


def test_decode_fragment_with_q4_k_and_q6_k_weights(monkeypatch: pytest.MonkeyPatch, rng: np.random.Generator) -> None:
    """A Q4_K_M-like decoder fragment: norm, a q4_k gate and a q6_k up (one gemv_multi with the norm folded
    in), SwiGLU, a q6_k down projection with the residual, then a q6_k head: fused and unfused runs match
    the interpreter, and numpy on gguf's values of the blocks."""
    from tests.test_decode_fusion import reference, run

    d, ff, vocab = 256, 512, 77
    x = rng.standard_normal((1, 1, d)).astype(np.float32)
    wn = (1 + 0.1 * rng.standard_normal(d)).astype(np.float32)
    gate, up, down, head = (
        rng.standard_normal(s).astype(np.float32) * 0.1 for s in ((ff, d), (ff, d), (d, ff), (vocab, d))
    )
    gk, uk = tr.quantize(gate, tr.q4_k), tr.quantize(up, tr.q6_k)
    dk, hk = tr.quantize(down, tr.q6_k), tr.quantize(head, tr.q6_k)

    def build() -> tuple[tr.Tensor, ...]:
        h = tr.nn.rms_norm(tr.tensor(x), tr.tensor(wn), 1e-6)
        mlp = tr.nn.linear(h, gk).silu() * tr.nn.linear(h, uk)
        out = tr.nn.linear(mlp, dk) + tr.tensor(x)
        return (out, tr.nn.linear(out, hk))

    want = reference(build)
    fused, fused_d = run(monkeypatch, build, True)
    unfused, unfused_d = run(monkeypatch, build, False)
    for got in (fused, unfused):
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
    kernels = [k.kernel for k in fused_d]
    # gate (q4_k) and up (q6_k): one group with the norm; down with its residual and the head: a qgemv each
    assert kernels.count("gemv_multi") == 1 and kernels.count("qgemv") == 2 and len(kernels) < len(unfused_d), kernels
    assert [k.kernel for k in unfused_d].count("qgemv") == 4
    # and against numpy on gguf's values of the blocks
    q4k = gguf.GGMLQuantizationType.Q4_K
    g_v = gguf.quants.dequantize(quant.quantize_q4_k(gate), q4k).reshape(gate.shape)
    u_v, d_v, h_v = (gguf_values(quant.quantize_q6_k(v), v.shape) for v in (up, down, head))
    hx = x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-6) * wn
    z = hx @ g_v.T
    out = (z / (1 + np.exp(-z)) * (hx @ u_v.T)) @ d_v.T + x
    np.testing.assert_allclose(fused[0], out, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(fused[1], out @ h_v.T, rtol=1e-4, atol=1e-4)
