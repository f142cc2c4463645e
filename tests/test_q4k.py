"""q4_k (GGML's Q4_K) kept in its block format: the GPU layout, the quantizer, loading, and the kernels.

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

gguf = pytest.importorskip("gguf", reason="q4_k tests read blocks with the gguf package (pip install 'wgjit[gguf]')")

from tests.gguf_files import write_gguf  # noqa: E402

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


@pytest.mark.parametrize("n", [1, 3, 16])
def test_random_blocks_pack_unpack_and_references_agree(n: int, rng: np.random.Generator) -> None:
    raw = random_blocks(rng, n)
    words = quant.pack(raw, DType.q4_k)
    assert words.dtype == np.uint32 and words.nbytes == DType.q4_k.nbytes(n * 256) and words.nbytes % 16 == 0
    np.testing.assert_array_equal(quant.unpack(words, DType.q4_k, n * 256), raw)
    ours = quant.dequantize(words, DType.q4_k, (n, 256))
    np.testing.assert_array_equal(ours, gguf_values(raw, (n, 256)))
    assert not ours[0].any()


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


def test_truncated_blocks_name_the_tensor(rng: np.random.Generator) -> None:
    from tracer.gguf import quantized_tensor

    raw = random_blocks(rng, 2)
    with pytest.raises(tr.FormatError, match=r"weights: 287 bytes of q4_k blocks for shape \(2, 256\)"):
        quantized_tensor(raw.reshape(-1)[:-1], DType.q4_k, (2, 256), "weights")
    with pytest.raises(tr.DTypeError, match=r"weights: shape \(2, 320\) cannot be q4_k"):
        quantized_tensor(raw, DType.q4_k, (2, 320), "weights")


@pytest.fixture
def q4k_file(tmp_path: Path, rng: np.random.Generator) -> tuple[Path, np.ndarray]:
    raw = random_blocks(rng, 6)  # a (3, 512) matrix
    w = raw.reshape(3, 2 * 144)  # GGUFWriter reads the rows (3, 512) from the bytes per row
    return write_gguf(tmp_path / "q4k.gguf", {"w": (w, Q4_K), "b": (np.ones(3, np.float32), None)}), raw


def test_load_gguf_keeps_q4_k(q4k_file: tuple[Path, np.ndarray]) -> None:
    path, raw = q4k_file
    got = tr.load_gguf(path)
    w = got["w"]
    assert w.dtype is tr.q4_k and w.shape == (3, 512)
    np.testing.assert_array_equal(quant.unpack(w._lazy.host, DType.q4_k, w.size), raw)
    assert tr.load_gguf(path, dequantize=True)["w"].dtype is tr.float32


def test_load_gguf_q4_k_bad_rows_and_truncation_name_the_tensor(q4k_file: tuple[Path, np.ndarray]) -> None:
    path, _ = q4k_file
    reader = gguf.GGUFReader(path, "r+")
    entry = next(t for t in reader.tensors if t.name == "w")
    entry.field.parts[3][0] = 384  # rows of one and a half super-blocks
    reader.data.flush()
    del reader
    with pytest.raises(tr.FormatError, match=r"tensor 'w' .* rows of 384 values, not whole Q4_K blocks of 256"):
        tr.load_gguf(path)


def test_load_gguf_q4_k_truncated(tmp_path: Path, rng: np.random.Generator) -> None:
    path = write_gguf(tmp_path / "t.gguf", {"w": (random_blocks(rng, 4), Q4_K)})
    path.write_bytes(path.read_bytes()[:-50])
    with pytest.raises(tr.FormatError, match=r"tensor 'w' .* \(Q4_K, .* reaches past the end of the file"):
        tr.load_gguf(path)


def test_interpreter_reads_q4_k(rng: np.random.Generator) -> None:
    """The reference interpreter evaluates a q4_k input from its GPU words (ir/quant.dequantize)."""
    from ir.interpret import interpret

    raw = random_blocks(rng, 8)  # (4, 512)
    w = quantized_tensor_of(raw, (4, 512))
    x = rng.standard_normal((2, 512)).astype(np.float32)
    graph = tr.nn.linear(tr.tensor(x), w).graph()
    feed = {n.arg.index: w._lazy.host if n.dtype.is_quantized else x for n in graph if n.op.value == "input"}
    (out,) = interpret(graph, [feed[i] for i in range(len(feed))])
    np.testing.assert_allclose(out, x @ gguf_values(raw, (4, 512)).T, rtol=1e-5, atol=1e-5)


def quantized_tensor_of(raw: np.ndarray, shape: tuple[int, ...]) -> tr.Tensor:
    from tracer.gguf import quantized_tensor

    return quantized_tensor(raw, DType.q4_k, shape)


# --- step 2: the kernels against numpy on gguf's values ----------------------------------------


def q4k_weights(rng: np.random.Generator, n: int, k: int) -> tuple[tr.Tensor, np.ndarray]:
    """A (n, k) q4_k weight from random valid blocks and the values gguf reads from them."""
    raw = random_blocks(rng, n * k // 256)
    raw[0, 0:4] = np.array([0.05, 0.02], np.float16).view(np.uint8)  # the zero block of random_blocks, undone
    return quantized_tensor_of(raw, (n, k)), gguf_values(raw, (n, k))


def assert_product(got: np.ndarray, x: np.ndarray, ref: np.ndarray) -> None:
    """got == x @ ref.T up to float32 rounding of its terms: random blocks make values up to ~|45|,
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
    w, ref = q4k_weights(rng, 9, 512)
    y = w.astype(out_dtype)
    assert [k for k, _, _ in kernels_of(y)] == ["dequant"]
    got = y.numpy()
    if out_dtype is tr.float32:  # scale * q - offset: one rounding apart at most if the GPU contracts it to an fma
        np.testing.assert_allclose(got, ref, rtol=2e-7, atol=1e-9)
    else:
        np.testing.assert_allclose(got.astype(np.float32), ref, rtol=1e-3, atol=1e-6)


def test_quantized_values_dequantize_on_the_gpu(rng: np.random.Generator) -> None:
    w = rng.standard_normal((5, 768)).astype(np.float32)
    q = tr.quantize(w, tr.q4_k)
    ref = gguf_values(quant.quantize_q4_k(w), w.shape)
    np.testing.assert_allclose(q.astype(tr.float32).numpy(), ref, rtol=2e-7, atol=1e-9)
    np.testing.assert_allclose(q.T.astype(tr.float32).numpy(), ref.T, rtol=2e-7, atol=1e-9)


@pytest.mark.parametrize("n,k", [(1, 256), (17, 512), (70, 2048), (5, 2304)])
def test_gemv(n: int, k: int, rng: np.random.Generator) -> None:
    """One row of x: qgemv, rows past a workgroup's and units past its threads' tails."""
    w, ref = q4k_weights(rng, n, k)
    x = rng.standard_normal(k).astype(np.float32)
    y = tr.nn.linear(tr.tensor(x), w)
    assert quant_kernels(y) == [("qgemv", "x4.q4_k")]
    assert_product(y.numpy(), x, ref)


@pytest.mark.parametrize("wx,wy,rows,unroll", [(16, 1, 1, 1), (64, 2, 3, 3), (32, 8, 8, 2), (128, 1, 2, 1)])
def test_gemv_configurations(wx: int, wy: int, rows: int, unroll: int, rng: np.random.Generator) -> None:
    """Every qgemv knob, forced: the values stay right (1280: units past any step)."""
    from backend_wgpu import get_device
    from benchmarks.device.quant import program_for
    from ir.node import KernelChoice

    w, ref = q4k_weights(rng, 37, 1280)
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
    w, ref = q4k_weights(rng, 40, 256)
    big = rng.standard_normal((256, 3)).astype(np.float32)
    y = tr.nn.linear(tr.tensor(big)[:, 1], w)
    assert quant_kernels(y)[-1] == ("qgemv", "x1.q4_k")
    assert_product(y.numpy(), big[:, 1], ref)


@pytest.mark.parametrize("m,n,k", [(2, 3, 256), (65, 70, 512), (7, 64, 2048), (130, 33, 256)])
def test_gemm(m: int, n: int, k: int, rng: np.random.Generator) -> None:
    """Several rows (prefill): qgemm, edges in m and n."""
    w, ref = q4k_weights(rng, n, k)
    x = rng.standard_normal((m, k)).astype(np.float32)
    y = tr.tensor(x) @ w.T
    assert quant_kernels(y) == [("qgemm", "x4.q4_k")]
    assert_product(y.numpy(), x, ref)


@pytest.mark.parametrize("m", [1, 5])
def test_fused_epilogue(m: int, rng: np.random.Generator) -> None:
    """bias + silu + residual after the q4_k matmul: one dispatch (weights from tr.quantize: values near 1)."""
    f = rng.standard_normal((48, 256)).astype(np.float32)
    w, ref = tr.quantize(f, tr.q4_k), gguf_values(quant.quantize_q4_k(f), f.shape)
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
    f = rng.standard_normal((20, 256)).astype(np.float32)
    w, ref = tr.quantize(f, tr.q4_k), gguf_values(quant.quantize_q4_k(f), f.shape)
    x = rng.standard_normal((3, 256)).astype(np.float16)
    for rows in (x[:1], x):
        y = tr.nn.linear(tr.tensor(rows), w)
        assert y.dtype is tr.float16
        np.testing.assert_allclose(y.numpy().astype(np.float32), rows.astype(np.float32) @ ref.T, rtol=3e-3, atol=3e-3)


def test_embedding_rows(rng: np.random.Generator) -> None:
    table, ref = q4k_weights(rng, 50, 512)
    ids = np.array([[3, 0, 49], [7, 7, 1]])
    y = tr.nn.embedding(ids, table)
    assert y.shape == (2, 3, 512) and y.dtype is tr.float32
    assert kernels_of(y)[0][0] == "qgather"
    np.testing.assert_allclose(y.numpy(), ref[ids], rtol=2e-7, atol=1e-9)
    computed = tr.tensor(np.array([2, 0, 9], np.int32)) * 7 - 5  # 9, -5, 58: computed on the GPU, so clamped
    np.testing.assert_allclose(tr.nn.embedding(computed, table).numpy(), ref[[9, 0, 49]], rtol=2e-7, atol=1e-9)


def test_interpreter_agrees_with_the_gpu(rng: np.random.Generator) -> None:
    from ir.interpret import interpret

    w, ref = q4k_weights(rng, 8, 512)
    x = rng.standard_normal((2, 512)).astype(np.float32)
    y = tr.nn.linear(tr.tensor(x), w).relu()
    graph = y.graph()
    feed = {n.arg.index: w._lazy.host if n.dtype.is_quantized else x for n in graph if n.op.value == "input"}
    (out,) = interpret(graph, [feed[i] for i in range(len(feed))])
    np.testing.assert_allclose(out, y.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out, np.maximum(x @ ref.T, 0), rtol=1e-5, atol=1e-5)


def test_explain_and_text_show_format_and_bytes(rng: np.random.Generator) -> None:
    w, _ = q4k_weights(rng, 64, 512)
    y = tr.nn.linear(tr.randn(1, 512, seed=0), w)
    text = str(tr.explain(y))
    assert "qgemv" in text and "q4_k 64x512, 18944 bytes (148 per 256 weights; 144 in GGUF)" in text
    assert "q4_k[64x512]" in str(y.graph()) and "18944 bytes, 144-byte blocks of 256" in str(y.graph())


def test_other_ops_raise_naming_the_op(rng: np.random.Generator) -> None:
    w, _ = q4k_weights(rng, 4, 256)
    with pytest.raises(tr.DTypeError, match=r"add: the q4_k tensor of shape \(4, 256\) holds quantized weight blocks"):
        _ = w + 1.0


# --- step 3: routing in a decode step ----------------------------------------------------------


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


# --- q4_k in gemv_multi groups (blocks and staged variants) -------------------------------------


def quantized(rng: np.random.Generator, n: int, k: int) -> tuple[tr.Tensor, np.ndarray]:
    """tr.quantize of Gaussian weights (values near 1) and gguf's values of the blocks it makes."""
    w = rng.standard_normal((n, k)).astype(np.float32)
    return tr.quantize(w, tr.q4_k), gguf_values(quant.quantize_q4_k(w), w.shape)


def rms(x: np.ndarray, w: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    x = x.astype(np.float64)
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * w


@pytest.mark.parametrize("layout", ["blocks", "staged", "staged_t32g8u3"])
@pytest.mark.parametrize("subgroups", [True, False], ids=["subgroups", "tree"])
@pytest.mark.parametrize("k", [256, 512, 2304])  # 8, 16 and 72 sub-blocks
def test_group_swiglu(k: int, subgroups: bool, layout: str, rng: np.random.Generator, device, monkeypatch) -> None:
    """norm, gate (q4_k), up (q4_0), SwiGLU: one gemv_multi, in the blocks layout and the staged one
    (a step of 3 blocks that the row's blocks do not fill), against numpy on gguf's values."""
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
    q40 = gguf.GGMLQuantizationType.Q4_0
    up_ref = gguf.quants.dequantize(gguf.quants.quantize(up, q40), q40)
    x = rng.standard_normal((1, k)).astype(np.float32)

    def swiglu() -> tr.Tensor:
        h = tr.nn.rms_norm(tr.tensor(x), tr.tensor(norm), 1e-5)
        return tr.nn.linear(h, g).silu() * tr.nn.linear(h, tr.quantize(up, tr.q4_0))

    got, program = run_with_caps(swiglu(), subgroups=subgroups)
    (d,) = program.dispatches
    assert d.kernel == "gemv_multi" and (("staged" in d.variant) == (layout != "blocks")), d.variant
    a, b = rms(x, norm) @ g_ref.T, rms(x, norm) @ up_ref.reshape(23, k).T
    np.testing.assert_allclose(got, a / (1 + np.exp(-a)) * b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("staged", [False, True], ids=["blocks", "staged"])
def test_group_qkv_rope_and_cache_writes(staged: bool, rng: np.random.Generator, monkeypatch) -> None:
    """q and k q4_k, v float32 (a mixed group), rope on q and k, k and v appended to caches: one dispatch."""
    from tests.test_quant import check_qkv_group

    group_layout(monkeypatch, staged)

    def one_group(q: tr.Tensor, t_ck: tr.Tensor, t_cv: tr.Tensor) -> None:
        (disp,) = tr.compile(q, t_ck, t_cv).dispatches
        assert disp.kernel == "gemv_multi" and ("staged" in disp.variant) == staged

    check_qkv_group(rng, 512, 5, 3, lambda n, d: quantized(rng, n, d), one_group)


@pytest.mark.parametrize("staged", [False, True], ids=["blocks", "staged"])
@pytest.mark.parametrize("offset", [2, 1])
def test_group_of_a_row_read_narrow(offset: int, staged: bool, rng: np.random.Generator, monkeypatch) -> None:
    """A row starting at an offset that allows only vec2 (or scalar) loads, no norm: q4_k, q4_0 and a float B."""

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
    """A float16 row and norm: the normed row rounded to float16 before the q4_k products, as stored unfused."""

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
    """The final norm and a q4_k vocabulary projection with a bias: one dispatch."""
    k, n = 512, 50
    (w, ref), norm = quantized(rng, n, k), rng.standard_normal(k).astype(np.float32)
    bias, x = rng.standard_normal(n).astype(np.float32), rng.standard_normal((1, 1, k)).astype(np.float32)
    h = tr.nn.rms_norm(tr.tensor(x), tr.tensor(norm), 1e-6)
    y = tr.nn.linear(h, w, tr.tensor(bias)).reshape(1, n)
    del h
    assert [d.kernel for d in tr.compile(y).dispatches] == ["gemv_multi"]
    np.testing.assert_allclose(y.numpy(), rms(x[0], norm, 1e-6) @ ref.T + bias, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fmt", ["q4_k", "q4_0"])
def test_dump_shows_format_and_bytes(fmt: str, tmp_path: Path) -> None:
    """`wgjit dump` of a script reading a quantized w through its view w.T (its HTML used to ask the
    view's itemsize, which a block format has not)."""
    from tracer.cli import main

    script = tmp_path / "q.py"
    script.write_text(
        "import numpy as np\nimport tracer as tr\n"
        f"w = tr.quantize(np.random.default_rng(0).standard_normal((64, 512)).astype(np.float32), tr.{fmt})\n"
        "(tr.randn(1, 512, seed=0) @ w.T).numpy()\n"
    )
    out = tmp_path / "out"
    assert main(["dump", str(script), "-o", str(out)]) == 0
    nbytes = {"q4_k": 18944, "q4_0": 18432}[fmt]
    assert f"{fmt} 64x512, {nbytes} bytes" in (out / "index.html").read_text()
    assert f"{nbytes} bytes, " in (out / "program_000" / "00_traced.txt").read_text()


def group_layout(monkeypatch: pytest.MonkeyPatch, staged: bool) -> None:
    """GEMV groups in the staged layout (a small sizing) or the blocks one, with a program cache of the test's own."""
    from passes import select_kernels as sk
    from tests.test_quant import staged_on

    if staged:
        staged_on(monkeypatch, 64, 4, 1)
    else:
        monkeypatch.setattr(sk, "GEMV_STAGED_ROW", 0)
        monkeypatch.setattr(sys.modules["tracer.realize"], "_PROGRAMS", OrderedDict())
