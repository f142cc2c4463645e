"""q6_k (GGML's Q6_K) kept in its block format: the GPU layout, the quantizer, loading, and the kernels.

References that share no code with wgjit's: gguf.quants.dequantize (the package llama.cpp's
Python tools use) reads every block made here, and numpy computes the products from those
values. ir/quant.py is the interpreter's reference, checked against gguf first.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest

import tracer as tr
from ir import quant
from ir.dtypes import DType
from tests.helpers import kernels_of

gguf = pytest.importorskip("gguf", reason="q6_k tests read blocks with the gguf package (pip install 'wgjit[gguf]')")

from tests.gguf_files import write_gguf  # noqa: E402

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


@pytest.mark.parametrize("n", [1, 3, 16])
def test_random_blocks_pack_unpack_and_references_agree(n: int, rng: np.random.Generator) -> None:
    raw = random_blocks(rng, n)
    words = quant.pack(raw, DType.q6_k)
    assert words.dtype == np.uint32 and words.nbytes == DType.q6_k.nbytes(n * 256) and words.nbytes % 16 == 0
    np.testing.assert_array_equal(quant.unpack(words, DType.q6_k, n * 256), raw)
    ours = quant.dequantize(words, DType.q6_k, (n, 256))
    np.testing.assert_array_equal(ours, gguf_values(raw, (n, 256)))
    assert not ours[0].any()


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


def test_truncated_blocks_name_the_tensor(rng: np.random.Generator) -> None:
    from tracer.gguf import quantized_tensor

    raw = random_blocks(rng, 2)
    with pytest.raises(tr.FormatError, match=r"weights: 419 bytes of q6_k blocks for shape \(2, 256\)"):
        quantized_tensor(raw.reshape(-1)[:-1], DType.q6_k, (2, 256), "weights")
    with pytest.raises(tr.DTypeError, match=r"weights: shape \(2, 320\) cannot be q6_k"):
        quantized_tensor(raw, DType.q6_k, (2, 320), "weights")


@pytest.fixture
def q6k_file(tmp_path: Path, rng: np.random.Generator) -> tuple[Path, np.ndarray]:
    raw = random_blocks(rng, 6)  # a (3, 512) matrix
    w = raw.reshape(3, 2 * 210)  # GGUFWriter reads the rows (3, 512) from the bytes per row
    return write_gguf(tmp_path / "q6k.gguf", {"w": (w, Q6_K), "b": (np.ones(3, np.float32), None)}), raw


def test_load_gguf_keeps_q6_k(q6k_file: tuple[Path, np.ndarray]) -> None:
    path, raw = q6k_file
    got = tr.load_gguf(path)
    w = got["w"]
    assert w.dtype is tr.q6_k and w.shape == (3, 512)
    np.testing.assert_array_equal(quant.unpack(w._lazy.host, DType.q6_k, w.size), raw)
    np.testing.assert_array_equal(w.astype(tr.float32).numpy(), gguf_values(raw, (3, 512)))
    flat = tr.load_gguf(path, dequantize=True)["w"]
    assert flat.dtype is tr.float32
    np.testing.assert_array_equal(flat.numpy(), gguf_values(raw, (3, 512)))


def test_load_gguf_q6_k_bad_rows_name_the_tensor(q6k_file: tuple[Path, np.ndarray]) -> None:
    path, _ = q6k_file
    reader = gguf.GGUFReader(path, "r+")
    entry = next(t for t in reader.tensors if t.name == "w")
    entry.field.parts[3][0] = 384  # rows of one and a half super-blocks
    reader.data.flush()
    del reader
    with pytest.raises(tr.FormatError, match=r"tensor 'w' .* rows of 384 values, not whole Q6_K blocks of 256"):
        tr.load_gguf(path)


def test_load_gguf_q6_k_truncated(tmp_path: Path, rng: np.random.Generator) -> None:
    path = write_gguf(tmp_path / "t.gguf", {"w": (random_blocks(rng, 4), Q6_K)})
    path.write_bytes(path.read_bytes()[:-50])
    with pytest.raises(tr.FormatError, match=r"tensor 'w' .* \(Q6_K, .* reaches past the end of the file"):
        tr.load_gguf(path)


def quantized_tensor_of(raw: np.ndarray, shape: tuple[int, ...]) -> tr.Tensor:
    from tracer.gguf import quantized_tensor

    return quantized_tensor(raw, DType.q6_k, shape)


def test_interpreter_reads_q6_k(rng: np.random.Generator) -> None:
    """The reference interpreter evaluates a q6_k input from its GPU words (ir/quant.dequantize)."""
    from ir.interpret import interpret

    raw = random_blocks(rng, 8)  # (4, 512)
    w = quantized_tensor_of(raw, (4, 512))
    x = rng.standard_normal((2, 512)).astype(np.float32)
    graph = tr.nn.linear(tr.tensor(x), w).graph()
    feed = {n.arg.index: w._lazy.host if n.dtype.is_quantized else x for n in graph if n.op.value == "input"}
    (out,) = interpret(graph, [feed[i] for i in range(len(feed))])
    np.testing.assert_allclose(out, x @ gguf_values(raw, (4, 512)).T, rtol=1e-5, atol=1e-4)


# --- step 2: the kernels against numpy on gguf's values ----------------------------------------


def q6k_weights(rng: np.random.Generator, n: int, k: int) -> tuple[tr.Tensor, np.ndarray]:
    """A (n, k) q6_k weight from random valid blocks and the values gguf reads from them."""
    raw = random_blocks(rng, n * k // 256)
    raw[0, 208:210] = np.array([0.01], np.float16).view(np.uint8)  # the zero block of random_blocks, undone
    return quantized_tensor_of(raw, (n, k)), gguf_values(raw, (n, k))


def assert_product(got: np.ndarray, x: np.ndarray, ref: np.ndarray) -> None:
    """got == x @ ref.T up to float32 rounding of its terms: random blocks make values up to ~|41|,
    whose products cancel, so the tolerance follows the sum of |terms| (|x| @ |ref|.T), not the result."""
    bound = 1e-5 * (np.abs(x.astype(np.float32)) @ np.abs(ref).T) + 1e-6
    assert got.shape == bound.shape
    assert (np.abs(got - x.astype(np.float32) @ ref.T) <= bound).all(), np.abs(got - x @ ref.T).max()


def quant_kernels(y: tr.Tensor) -> list[tuple[str, str]]:
    return [(k, v.split(":")[0]) for k, v, _ in kernels_of(y)]


@pytest.mark.parametrize("out_dtype", [tr.float32, tr.float16])
def test_astype_dequantizes(out_dtype: DType, rng: np.random.Generator, device) -> None:
    if out_dtype is tr.float16 and not device.caps.shader_f16:
        pytest.skip("no shader-f16")
    w, ref = q6k_weights(rng, 9, 512)
    y = w.astype(out_dtype)
    assert [k for k, _, _ in kernels_of(y)] == ["dequant"]
    got = y.numpy()
    if out_dtype is tr.float32:  # (d * scale) * (q - 32): the same two roundings as gguf's
        np.testing.assert_array_equal(got, ref)
    else:
        np.testing.assert_array_equal(got, ref.astype(np.float16))


def test_quantized_values_dequantize_on_the_gpu(rng: np.random.Generator) -> None:
    w = rng.standard_normal((5, 768)).astype(np.float32)
    q = tr.quantize(w, tr.q6_k)
    ref = gguf_values(quant.quantize_q6_k(w), w.shape)
    np.testing.assert_array_equal(q.astype(tr.float32).numpy(), ref)
    np.testing.assert_array_equal(q.T.astype(tr.float32).numpy(), ref.T)


@pytest.mark.parametrize("n,k", [(1, 256), (17, 512), (70, 2048), (5, 2304)])
def test_gemv(n: int, k: int, rng: np.random.Generator) -> None:
    """One row of x: qgemv, rows past a workgroup's and units past its threads' tails."""
    w, ref = q6k_weights(rng, n, k)
    x = rng.standard_normal(k).astype(np.float32)
    y = tr.nn.linear(tr.tensor(x), w)
    assert quant_kernels(y) == [("qgemv", "x4.q6_k")]
    assert_product(y.numpy(), x, ref)


@pytest.mark.parametrize("wx,wy,rows,unroll", [(16, 1, 1, 1), (64, 2, 3, 3), (32, 8, 8, 2), (128, 1, 2, 1)])
def test_gemv_configurations(wx: int, wy: int, rows: int, unroll: int, rng: np.random.Generator) -> None:
    """Every qgemv knob, forced: the values stay right (1280: units past any step; 37 rows: odd)."""
    from backend_wgpu import get_device
    from benchmarks.device.quant import program_for
    from ir.node import KernelChoice

    w, ref = q6k_weights(rng, 37, 1280)
    x = rng.standard_normal((1, 1280)).astype(np.float32)
    y = tr.nn.linear(tr.tensor(x), w, tr.tensor(np.ones(37, np.float32))).relu()
    choice = KernelChoice("qgemv", "x4", 1, (wx, wy, 1), (("rows", rows), ("unroll", unroll)))
    program, bufs = program_for(y, choice)
    assert [(d.kernel, d.workgroup_size) for d in program.dispatches] == [("qgemv", (wx, wy, 1))]
    got = np.frombuffer(get_device().read(program.run(bufs)[0]), np.float32).reshape(y.shape)
    bound = 1e-5 * (np.abs(x) @ np.abs(ref).T) + 1e-6
    assert (np.abs(got - np.maximum(x @ ref.T + 1, 0)) <= bound).all()  # relu moves no value further apart


def test_gemv_strided_x(rng: np.random.Generator) -> None:
    """x read through strides (x1): a column of a matrix."""
    w, ref = q6k_weights(rng, 40, 256)
    big = rng.standard_normal((256, 3)).astype(np.float32)
    y = tr.nn.linear(tr.tensor(big)[:, 1], w)
    assert quant_kernels(y)[-1] == ("qgemv", "x1.q6_k")
    assert_product(y.numpy(), big[:, 1], ref)


@pytest.mark.parametrize("m,n,k", [(2, 3, 256), (65, 71, 512), (7, 64, 2048), (130, 33, 256)])
def test_gemm(m: int, n: int, k: int, rng: np.random.Generator) -> None:
    """Several rows (prefill): qgemm, edges in m and n."""
    w, ref = q6k_weights(rng, n, k)
    x = rng.standard_normal((m, k)).astype(np.float32)
    y = tr.tensor(x) @ w.T
    assert quant_kernels(y) == [("qgemm", "x4.q6_k")]
    assert_product(y.numpy(), x, ref)


@pytest.mark.parametrize("m", [1, 5])
def test_fused_epilogue(m: int, rng: np.random.Generator) -> None:
    """bias + silu + residual after the q6_k matmul: one dispatch (weights from tr.quantize: values near 1)."""
    f = rng.standard_normal((48, 256)).astype(np.float32)
    w, ref = tr.quantize(f, tr.q6_k), gguf_values(quant.quantize_q6_k(f), f.shape)
    x = rng.standard_normal((m, 256)).astype(np.float32)
    bias, res = rng.standard_normal(48).astype(np.float32), rng.standard_normal((m, 48)).astype(np.float32)
    y = tr.nn.linear(tr.tensor(x), w, tr.tensor(bias)).silu() + tr.tensor(res)
    program = tr.compile(y)
    assert [(d.kernel, d.op) for d in program.dispatches] == [("qgemv" if m == 1 else "qgemm", "fused")]
    z = x @ ref.T + bias
    np.testing.assert_allclose(y.numpy(), z / (1 + np.exp(-z)) + res, rtol=1e-4, atol=1e-4)


def test_float16_x(rng: np.random.Generator, device) -> None:
    if not device.caps.shader_f16:
        pytest.skip("no shader-f16")
    f = rng.standard_normal((21, 256)).astype(np.float32)
    w, ref = tr.quantize(f, tr.q6_k), gguf_values(quant.quantize_q6_k(f), f.shape)
    x = rng.standard_normal((3, 256)).astype(np.float16)
    for rows in (x[:1], x):
        y = tr.nn.linear(tr.tensor(rows), w)
        assert y.dtype is tr.float16
        np.testing.assert_allclose(y.numpy().astype(np.float32), rows.astype(np.float32) @ ref.T, rtol=3e-3, atol=3e-3)


def test_embedding_rows(rng: np.random.Generator) -> None:
    """A q6_k table (a tied embedding's head): rows at ids, and ids computed on the GPU, clamped."""
    table, ref = q6k_weights(rng, 51, 512)
    ids = np.array([[3, 0, 50], [7, 7, 1]])
    y = tr.nn.embedding(ids, table)
    assert y.shape == (2, 3, 512) and y.dtype is tr.float32
    assert kernels_of(y)[0][0] == "qgather"
    np.testing.assert_array_equal(y.numpy(), ref[ids])
    computed = tr.tensor(np.array([2, 0, 9], np.int32)) * 7 - 5  # 9, -5, 58: computed on the GPU, so clamped
    np.testing.assert_array_equal(tr.nn.embedding(computed, table).numpy(), ref[[9, 0, 50]])


def test_interpreter_agrees_with_the_gpu(rng: np.random.Generator) -> None:
    from ir.interpret import interpret

    w, ref = q6k_weights(rng, 8, 512)
    x = rng.standard_normal((2, 512)).astype(np.float32)
    y = tr.nn.linear(tr.tensor(x), w).relu()
    graph = y.graph()
    feed = {n.arg.index: w._lazy.host if n.dtype.is_quantized else x for n in graph if n.op.value == "input"}
    (out,) = interpret(graph, [feed[i] for i in range(len(feed))])
    np.testing.assert_allclose(out, y.numpy(), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(out, np.maximum(x @ ref.T, 0), rtol=1e-5, atol=1e-4)


def test_explain_and_text_show_format_and_bytes(rng: np.random.Generator) -> None:
    w, _ = q6k_weights(rng, 64, 512)
    y = tr.nn.linear(tr.randn(1, 512, seed=0), w)
    text = str(tr.explain(y))
    assert "qgemv" in text and "q6_k 64x512, 26880 bytes (210 per 256 weights)" in text
    assert "q6_k[64x512]" in str(y.graph()) and "26880 bytes, 210-byte blocks of 256" in str(y.graph())


def test_other_ops_raise_naming_the_op(rng: np.random.Generator) -> None:
    w, _ = q6k_weights(rng, 4, 256)
    with pytest.raises(tr.DTypeError, match=r"add: the q6_k tensor of shape \(4, 256\) holds quantized weight blocks"):
        _ = w + 1.0


# --- step 3: routing in a decode step ----------------------------------------------------------


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


# --- q6_k in gemv_multi groups (blocks and staged variants) -------------------------------------


def quantized(rng: np.random.Generator, n: int, k: int) -> tuple[tr.Tensor, np.ndarray]:
    """tr.quantize of Gaussian weights (values near 1) and gguf's values of the blocks it makes."""
    w = rng.standard_normal((n, k)).astype(np.float32)
    return tr.quantize(w, tr.q6_k), gguf_values(quant.quantize_q6_k(w), w.shape)


def rms(x: np.ndarray, w: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    x = x.astype(np.float64)
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * w


def group_layout(monkeypatch: pytest.MonkeyPatch, staged: bool) -> None:
    """GEMV groups in the staged layout (a small sizing) or the blocks one, with a program cache of the test's own."""
    from passes import select_kernels as sk
    from tests.test_quant import staged_on

    if staged:
        staged_on(monkeypatch, 64, 4, 1)
    else:
        monkeypatch.setattr(sk, "GEMV_STAGED_ROW", 0)
        monkeypatch.setattr(sys.modules["tracer.realize"], "_PROGRAMS", OrderedDict())


@pytest.mark.parametrize("layout", ["blocks", "staged", "staged_t32g8u3"])
@pytest.mark.parametrize("subgroups", [True, False], ids=["subgroups", "tree"])
@pytest.mark.parametrize("k", [256, 512, 2304])  # 8, 16 and 72 sub-blocks
def test_group_swiglu(k: int, subgroups: bool, layout: str, rng: np.random.Generator, device, monkeypatch) -> None:
    """norm, gate (q6_k), up (q4_k), SwiGLU: one gemv_multi, in the blocks layout and the staged one
    (a step of 3 blocks that the row's blocks do not fill), against numpy on gguf's values; 23 rows: odd."""
    from passes import select_kernels as sk
    from tests.test_kernels_perf_variants import run_with_caps
    from tests.test_quant import staged_on

    if subgroups and not device.caps.subgroups:
        pytest.skip("no subgroups on this adapter")
    if layout == "blocks":
        monkeypatch.setattr(sk, "GEMV_STAGED_ROW", 0)
        monkeypatch.setattr(sys.modules["tracer.realize"], "_PROGRAMS", OrderedDict())
    else:
        staged_on(monkeypatch, *((256, 16, 4) if layout == "staged" else (32, 8, 3)))
    (g, g_ref), norm = quantized(rng, 23, k), rng.standard_normal(k).astype(np.float32)
    up = rng.standard_normal((23, k)).astype(np.float32)
    q4k = gguf.GGMLQuantizationType.Q4_K
    up_ref = gguf.quants.dequantize(quant.quantize_q4_k(up), q4k).reshape(up.shape)
    x = rng.standard_normal((1, k)).astype(np.float32)

    def swiglu() -> tr.Tensor:
        h = tr.nn.rms_norm(tr.tensor(x), tr.tensor(norm), 1e-5)
        return tr.nn.linear(h, g).silu() * tr.nn.linear(h, tr.quantize(up, tr.q4_k))

    got, program = run_with_caps(swiglu(), subgroups=subgroups)
    (d,) = program.dispatches
    assert d.kernel == "gemv_multi" and (("staged" in d.variant) == (layout != "blocks")), d.variant
    a, b = rms(x, norm) @ g_ref.T, rms(x, norm) @ up_ref.T
    np.testing.assert_allclose(got, a / (1 + np.exp(-a)) * b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("staged", [False, True], ids=["blocks", "staged"])
def test_group_qkv_rope_and_cache_writes(staged: bool, rng: np.random.Generator, monkeypatch) -> None:
    """q and k q6_k, v float32 (a mixed group), rope on q and k, k and v appended to caches: one dispatch."""
    from tests.test_quant import check_qkv_group

    group_layout(monkeypatch, staged)

    def one_group(q: tr.Tensor, t_ck: tr.Tensor, t_cv: tr.Tensor) -> None:
        (disp,) = tr.compile(q, t_ck, t_cv).dispatches
        assert disp.kernel == "gemv_multi" and ("staged" in disp.variant) == staged

    check_qkv_group(rng, 512, 5, 3, lambda n, d: quantized(rng, n, d), one_group)


@pytest.mark.parametrize("staged", [False, True], ids=["blocks", "staged"])
@pytest.mark.parametrize("offset", [2, 1])
def test_group_of_a_row_read_narrow(offset: int, staged: bool, rng: np.random.Generator, monkeypatch) -> None:
    """A row starting at an offset that allows only vec2 (or scalar) loads, no norm: q6_k, q4_0 and a float B."""
    group_layout(monkeypatch, staged)
    k = 512
    big = rng.standard_normal((1, k + 4)).astype(np.float32)
    (w1, ref1), w2, w3 = quantized(rng, 12, k), *(rng.standard_normal((12, k)).astype(np.float32) for _ in range(2))
    row = tr.tensor(big)[:, offset : offset + k]
    y = tr.nn.linear(row, w1) * tr.nn.linear(row, tr.quantize(w2, tr.q4_0)) + tr.nn.linear(row, tr.tensor(w3))
    assert [d.kernel for d in tr.compile(y).dispatches] == ["gemv_multi"]
    x = big[:, offset : offset + k]
    q40 = gguf.GGMLQuantizationType.Q4_0
    ref2 = gguf.quants.dequantize(gguf.quants.quantize(w2, q40), q40).reshape(w2.shape)
    np.testing.assert_allclose(y.numpy(), (x @ ref1.T) * (x @ ref2.T) + x @ w3.T, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("staged", [False, True], ids=["blocks", "staged"])
def test_group_of_a_float16_row(staged: bool, rng: np.random.Generator, device, monkeypatch) -> None:
    """A float16 row and norm: the normed row rounded to float16 before the q6_k products, as stored unfused."""
    if not device.caps.shader_f16:
        pytest.skip("no shader-f16")
    group_layout(monkeypatch, staged)
    k = 256
    (w1, ref1), (w2, ref2) = quantized(rng, 16, k), quantized(rng, 16, k)
    x, norm = rng.standard_normal((1, k)).astype(np.float16), (1 + 0.1 * rng.standard_normal(k)).astype(np.float16)
    h = tr.nn.rms_norm(tr.tensor(x), tr.tensor(norm), 1e-5)
    y = tr.nn.linear(h, w1) + tr.nn.linear(h, w2)
    del h
    assert [d.kernel for d in tr.compile(y).dispatches] == ["gemv_multi"]
    hn = rms(x.astype(np.float32), norm.astype(np.float32)).astype(np.float16).astype(np.float64)  # as stored
    assert y.dtype is tr.float16
    np.testing.assert_allclose(y.numpy().astype(np.float32), hn @ ref1.T + hn @ ref2.T, rtol=2e-3, atol=2e-3)


def test_group_head_with_its_norm_and_bias(rng: np.random.Generator) -> None:
    """The final norm and a q6_k vocabulary projection (51 rows) with a bias: one dispatch."""
    k, n = 512, 51
    (w, ref), norm = quantized(rng, n, k), rng.standard_normal(k).astype(np.float32)
    bias, x = rng.standard_normal(n).astype(np.float32), rng.standard_normal((1, 1, k)).astype(np.float32)
    h = tr.nn.rms_norm(tr.tensor(x), tr.tensor(norm), 1e-6)
    y = tr.nn.linear(h, w, tr.tensor(bias)).reshape(1, n)
    del h
    assert [d.kernel for d in tr.compile(y).dispatches] == ["gemv_multi"]
    np.testing.assert_allclose(y.numpy(), rms(x[0], norm, 1e-6) @ ref.T + bias, rtol=1e-4, atol=1e-4)


def test_dump_shows_format_and_bytes(tmp_path: Path) -> None:
    """`wgjit dump` of a script reading a q6_k w through its view w.T."""
    from tracer.cli import main

    script = tmp_path / "q.py"
    script.write_text(
        "import numpy as np\nimport tracer as tr\n"
        "w = tr.quantize(np.random.default_rng(0).standard_normal((64, 512)).astype(np.float32), tr.q6_k)\n"
        "(tr.randn(1, 512, seed=0) @ w.T).numpy()\n"
    )
    out = tmp_path / "out"
    assert main(["dump", str(script), "-o", str(out)]) == 0
    assert "q6_k 64x512, 26880 bytes" in (out / "index.html").read_text()
    assert "26880 bytes, " in (out / "program_000" / "00_traced.txt").read_text()
