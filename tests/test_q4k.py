"""q4_k (GGML's Q4_K) kept in its block format: the GPU layout, the quantizer, loading, a decode step (the
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

gguf = pytest.importorskip("gguf", reason="q4_k tests read blocks with the gguf package (pip install 'wgjit[gguf]')")


pytestmark = pytest.mark.gpu

Q4_K = gguf.GGMLQuantizationType.Q4_K


def random_blocks(rng: np.random.Generator, n: int) -> np.ndarray:
    """n valid Q4_K blocks with every byte random but d and dmin: finite f16 of either sign, and zero."""
    raw = rng.integers(0, 256, (n, 144), dtype=np.uint8)
    heads = rng.standard_normal((n, 2)).astype(np.float16) * np.float16(0.05)
    heads[0] = 0.0  # a block that is all zeros whatever its quants
    raw[:, 0:4] = heads.view(np.uint8).reshape(n, 4)
    return raw


def gguf_values(raw: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    return gguf.quants.dequantize(raw, Q4_K).reshape(shape)


# --- step 1: layout, quantizer, loading --------------------------------------------------------


def test_dtype_facts() -> None:
    assert (tr.q4_k.block, tr.q4_k.block_bytes, tr.q4_k.is_quantized) == (256, 144, True)
    assert tr.q4_k.nbytes(256) == 160  # 148 bytes (128 of nibbles, 16 of 6-bit pairs, 4 of d/dmin), padded
    assert tr.q4_k.nbytes(4096 * 4096) == 4096 * 4096 // 256 * 148
    assert DType("q4_k") is tr.q4_k and repr(tr.q4_k) == "tr.q4_k"


def test_layout_unit_is_a_sub_block_in_q4_0_order(rng: np.random.Generator) -> None:
    """Unit j (16 bytes) holds sub-block j: byte i its values i (low nibble) and i + 16 (high), uncentred."""
    raw = random_blocks(rng, 2)
    data = quant.pack(raw, DType.q4_k).view(np.uint8)
    units = data[: 2 * 128].reshape(16, 16)
    q = np.concatenate([units & 15, units >> 4], axis=1).astype(np.float32)  # (16 sub-blocks, 32)
    sm = data[256:288].view("<u2").reshape(16)
    dm = data[288:296].view("<f2").reshape(2, 2).astype(np.float32)  # (d, dmin) per block
    blk = np.arange(16) // 8
    values = dm[blk, 0:1] * (sm & 63)[:, None] * q - dm[blk, 1:2] * (sm >> 8)[:, None]
    np.testing.assert_allclose(values.reshape(2, 256), gguf_values(raw, (2, 256)), rtol=1e-6, atol=1e-7)


def test_blocks_gguf_makes(rng: np.random.Generator) -> None:
    """Blocks from gguf.quants.quantize (llama.cpp's search for scales), where the installed package has it."""
    w = rng.standard_normal((4, 512)).astype(np.float32)
    try:
        raw = gguf.quants.quantize(w, Q4_K)
    except NotImplementedError:
        pytest.skip("the installed gguf package cannot quantize Q4_K (it reads Q4_K only)")
    raw = raw.reshape(-1, 144)
    words = quant.pack(raw, DType.q4_k)
    np.testing.assert_array_equal(quant.unpack(words, DType.q4_k, w.size), raw)
    np.testing.assert_array_equal(quant.dequantize(words, DType.q4_k, w.shape), gguf_values(raw, w.shape))


@pytest.mark.parametrize("shape", [(1, 256), (7, 512), (3, 2, 2048)])
def test_quantize_makes_valid_blocks(shape: tuple[int, ...], rng: np.random.Generator) -> None:
    w = (rng.standard_normal(shape) * rng.uniform(0.01, 3.0, shape[:-1] + (1,))).astype(np.float32)
    w[..., :32] += 1.5  # a sub-block that is all positive: its min is 0
    raw = quant.quantize_q4_k(w)
    assert raw.shape == (w.size // 256, 144)
    values = gguf_values(raw, w.shape)
    q = tr.quantize(w, tr.q4_k)
    assert q.dtype is tr.q4_k and q.shape == shape
    np.testing.assert_array_equal(quant.dequantize(q._lazy.host, DType.q4_k, shape), values)
    # 4 bits over each sub-block's range (plus the 6-bit rounding of its step): a coarse but real bound
    err = np.abs(values - w).reshape(-1, 32)
    spread = (w.reshape(-1, 32).max(axis=1) - np.minimum(w.reshape(-1, 32).min(axis=1), 0))[:, None]
    assert (err <= spread / 15 + 1e-6).all()
    assert np.sqrt((err**2).mean() / (w**2).mean()) < 0.12


def test_quantize_constant_and_zero_rows() -> None:
    w = np.zeros((3, 256), np.float32)
    w[1] = 2.5
    w[2] = -0.75
    values = gguf_values(quant.quantize_q4_k(w), w.shape)
    np.testing.assert_allclose(values, w, atol=2.5 / 63 / 2 + 1e-6)
    assert not values[0].any()


def test_quantize_bad_input() -> None:
    with pytest.raises(tr.DTypeError, match=r"quantize: shape \(4, 128\) cannot be q4_k: .* multiple of 256"):
        tr.quantize(np.ones((4, 128), np.float32), tr.q4_k)
    with pytest.raises(tr.DTypeError, match="cannot be q4_k"):
        tr.quantize(np.ones(()), tr.q4_k)
    w = np.ones((1, 256), np.float32)
    w[0, 3] = np.nan
    with pytest.raises(tr.DTypeError, match="inf or NaN"):
        tr.quantize(w, tr.q4_k)
    with pytest.raises(tr.DTypeError, match=r"reaches \|1e\+12\|, whose q4_k scale overflows"):
        tr.quantize(np.full((1, 256), 1e12, np.float32), tr.q4_k)
    with pytest.raises(tr.DTypeError, match="not a quantized format"):
        tr.quantize(np.ones((1, 256)), "q4_q")


# --- a decode step (the kernels themselves, blocks and files: tests/test_kquants.py) --------------


def test_decode_fragment_with_q4_k_and_q4_0_weights(monkeypatch: pytest.MonkeyPatch, rng: np.random.Generator) -> None:
    """A decoder's norm, SwiGLU and residual down projection (q4_k), and a q4_0 SwiGLU beside it reading the
    same normed row: fused and unfused runs match the interpreter and numpy; the q4_k gate and up are one
    gemv_multi with the norm folded in."""
    from tests.test_decode_fusion import reference, run

    d, ff = 256, 512
    x = rng.standard_normal((1, 1, d)).astype(np.float32)
    wn = (1 + 0.1 * rng.standard_normal(d)).astype(np.float32)
    gate, up, down = (rng.standard_normal(s).astype(np.float32) * 0.1 for s in ((ff, d), (ff, d), (d, ff)))
    g4, u4 = tr.quantize(gate, tr.q4_0), tr.quantize(up, tr.q4_0)
    gk, uk, dk = tr.quantize(gate, tr.q4_k), tr.quantize(up, tr.q4_k), tr.quantize(down, tr.q4_k)

    def build() -> tuple[tr.Tensor, ...]:
        h = tr.nn.rms_norm(tr.tensor(x), tr.tensor(wn), 1e-6)
        k_mlp = tr.nn.linear(h, gk).silu() * tr.nn.linear(h, uk)
        q_mlp = tr.nn.linear(h, g4).silu() * tr.nn.linear(h, u4)
        return (tr.nn.linear(k_mlp, dk) + tr.tensor(x), q_mlp)

    want = reference(build)
    (fused, q_fused), fused_d = run(monkeypatch, build, True)
    (unfused, q_unfused), unfused_d = run(monkeypatch, build, False)
    for got in (fused, unfused):
        np.testing.assert_allclose(got, want[0], rtol=1e-4, atol=1e-4)
    for got in (q_fused, q_unfused):
        np.testing.assert_allclose(got, want[1], rtol=1e-4, atol=1e-4)
    kernels = [k.kernel for k in fused_d]
    assert kernels.count("gemv_multi") == 1 and len(kernels) < len(unfused_d)
    assert [k.kernel for k in unfused_d].count("qgemv") == 5
    # and against numpy on gguf's values of the q4_k blocks
    vals = {n: gguf_values(quant.quantize_q4_k(v), v.shape) for n, v in (("g", gate), ("u", up), ("d", down))}
    hx = x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-6) * wn
    z = hx @ vals["g"].T
    np.testing.assert_allclose(
        fused, (z / (1 + np.exp(-z)) * (hx @ vals["u"].T)) @ vals["d"].T + x, rtol=1e-4, atol=1e-4
    )
