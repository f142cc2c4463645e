"""The k-quants (q4_k, q6_k: GGML's Q4_K and Q6_K) read by every quantized kernel, against numpy.

Each test runs for both formats (the `kq` fixture): blocks packed to the GPU layout and back,
tensors and GGUF files of them (loaded, truncated, with rows of no whole blocks), the reference
interpreter, dequant (`.astype`), qgather (`embedding`),
qgemv and qgemm (one row, several rows, every qgemv knob), fused epilogues, float16 activations,
and the gemv_multi groups of a decode step (SwiGLU, q/k/v with rope and cache appends, narrow
rows, float16 rows, the head with its norm), in the blocks and staged layouts. The references
share no code with wgjit's: gguf.quants.dequantize reads the blocks (random valid ones from
tests/test_q4k.py and tests/test_q6k.py, or tr.quantize's), numpy computes the products.
Each format's own layout and quantizer are tested in its own module.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import tracer as tr
from ir import quant
from ir.dtypes import DType
from tests.helpers import kernels_of
from tests.test_quant import forced_thin_product, rows_kernel

gguf = pytest.importorskip("gguf", reason="k-quant tests read blocks with the gguf package (pip install 'wgjit[gguf]')")

from tests import test_q4k, test_q6k  # noqa: E402
from tests.gguf_files import write_gguf  # noqa: E402

pytestmark = pytest.mark.gpu


@dataclass(frozen=True)
class KQuant:
    """What the shared tests need to know of one format."""

    dtype: DType
    ggml: object  # gguf.GGMLQuantizationType
    random_blocks: Callable[[np.random.Generator, int], np.ndarray]  # n valid blocks, block 0 all zeros
    d_bytes: slice  # where block 0's f16 scale(s) live, to make it non-zero
    d_values: tuple[float, ...]
    quantize: Callable[[np.ndarray], np.ndarray]  # floats -> GGML blocks (wgjit's quantizer)
    exact: bool  # .astype(float32) equals gguf's values bit for bit (else within one rounding)
    explain: str  # how explain says a 64x512 weight
    graph: str  # how the graph printer says it
    partner: DType  # the other quantized format a group mixes it with

    @property
    def name(self) -> str:
        return self.dtype.value

    def values(self, raw: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        return gguf.quants.dequantize(raw, self.ggml).reshape(shape)

    def weights(self, rng: np.random.Generator, n: int, k: int) -> tuple[tr.Tensor, np.ndarray]:
        """A (n, k) weight from random valid blocks (values up to ~|45|) and the values gguf reads from them."""
        from tracer.gguf import quantized_tensor

        raw = self.random_blocks(rng, n * k // 256)
        raw[0, self.d_bytes] = np.array(self.d_values, np.float16).view(np.uint8)  # block 0 non-zero again
        return quantized_tensor(raw, self.dtype, (n, k)), self.values(raw, (n, k))

    def quantized(self, rng: np.random.Generator, n: int, k: int) -> tuple[tr.Tensor, np.ndarray]:
        """tr.quantize of Gaussian weights (values near 1) and gguf's values of the blocks it makes."""
        w = rng.standard_normal((n, k)).astype(np.float32)
        return tr.quantize(w, self.dtype), self.values(self.quantize(w), w.shape)


FORMATS = {
    "q4_k": KQuant(
        tr.q4_k, gguf.GGMLQuantizationType.Q4_K, test_q4k.random_blocks, slice(0, 4), (0.05, 0.02),
        quant.quantize_q4_k, False, "q4_k 64x512, 18944 bytes (148 per 256 weights; 144 in GGUF)",
        "18944 bytes, 144-byte blocks of 256", tr.q4_0,
    ),
    "q6_k": KQuant(
        tr.q6_k, gguf.GGMLQuantizationType.Q6_K, test_q6k.random_blocks, slice(208, 210), (0.01,),
        quant.quantize_q6_k, True, "q6_k 64x512, 26880 bytes (210 per 256 weights)",
        "26880 bytes, 210-byte blocks of 256", tr.q4_k,
    ),
}  # fmt: skip


@pytest.fixture(params=list(FORMATS))
def kq(request: pytest.FixtureRequest) -> KQuant:
    return FORMATS[request.param]


def partner_values(dtype: DType, w: np.ndarray) -> np.ndarray:
    """gguf's values of `w` quantized to the partner format (q4_0 by gguf's quantizer, q4_k by wgjit's)."""
    if dtype is tr.q4_0:
        q40 = gguf.GGMLQuantizationType.Q4_0
        return gguf.quants.dequantize(gguf.quants.quantize(w, q40), q40).reshape(w.shape)
    return FORMATS[dtype.value].values(FORMATS[dtype.value].quantize(w), w.shape)


def assert_product(got: np.ndarray, x: np.ndarray, ref: np.ndarray) -> None:
    """got == x @ ref.T up to float32 rounding of its terms: random blocks make values up to ~|45|,
    whose products cancel, so the tolerance follows the sum of |terms| (|x| @ |ref|.T), not the result."""
    bound = 1e-5 * (np.abs(x.astype(np.float32)) @ np.abs(ref).T) + 1e-6
    assert got.shape == bound.shape
    assert (np.abs(got - x.astype(np.float32) @ ref.T) <= bound).all(), np.abs(got - x @ ref.T).max()


def assert_values(got: np.ndarray, ref: np.ndarray, kq: KQuant) -> None:
    """Dequantized values: gguf's bit for bit where the format's arithmetic is gguf's, else within one rounding
    (q4_k's scale * q - offset may be contracted to an fma)."""
    if kq.exact:
        np.testing.assert_array_equal(got, ref)
    else:
        np.testing.assert_allclose(got, ref, rtol=2e-7, atol=1e-9)


def quant_kernels(y: tr.Tensor) -> list[tuple[str, str]]:
    return [(k, v.split(":")[0]) for k, v, _ in kernels_of(y)]


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


# --- blocks, tensors and GGUF files ---------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 3, 16])
def test_random_blocks_pack_unpack_and_references_agree(n: int, kq: KQuant, rng: np.random.Generator) -> None:
    raw = kq.random_blocks(rng, n)
    words = quant.pack(raw, kq.dtype)
    assert words.dtype == np.uint32 and words.nbytes == kq.dtype.nbytes(n * 256) and words.nbytes % 16 == 0
    np.testing.assert_array_equal(quant.unpack(words, kq.dtype, n * 256), raw)
    ours = quant.dequantize(words, kq.dtype, (n, 256))
    assert_values(ours, kq.values(raw, (n, 256)), kq)
    assert not ours[0].any()


def test_truncated_blocks_name_the_tensor(kq: KQuant, rng: np.random.Generator) -> None:
    from tracer.gguf import quantized_tensor

    raw = kq.random_blocks(rng, 2)
    short = 2 * kq.dtype.block_bytes - 1
    with pytest.raises(tr.FormatError, match=rf"weights: {short} bytes of {kq.name} blocks for shape \(2, 256\)"):
        quantized_tensor(raw.reshape(-1)[:-1], kq.dtype, (2, 256), "weights")
    with pytest.raises(tr.DTypeError, match=rf"weights: shape \(2, 320\) cannot be {kq.name}"):
        quantized_tensor(raw, kq.dtype, (2, 320), "weights")


@pytest.fixture
def kq_file(kq: KQuant, tmp_path: Path, rng: np.random.Generator) -> tuple[Path, np.ndarray]:
    raw = kq.random_blocks(rng, 6)  # a (3, 512) matrix
    w = raw.reshape(3, 2 * kq.dtype.block_bytes)  # GGUFWriter reads the rows (3, 512) from the bytes per row
    return write_gguf(tmp_path / "kq.gguf", {"w": (w, kq.ggml), "b": (np.ones(3, np.float32), None)}), raw


def test_load_gguf_keeps_the_blocks(kq: KQuant, kq_file: tuple[Path, np.ndarray]) -> None:
    path, raw = kq_file
    w = tr.load_gguf(path)["w"]
    assert w.dtype is kq.dtype and w.shape == (3, 512)
    np.testing.assert_array_equal(quant.unpack(w._lazy.host, kq.dtype, w.size), raw)
    assert_values(w.astype(tr.float32).numpy(), kq.values(raw, (3, 512)), kq)
    flat = tr.load_gguf(path, dequantize=True)["w"]
    assert flat.dtype is tr.float32
    np.testing.assert_array_equal(flat.numpy(), kq.values(raw, (3, 512)))


def test_load_gguf_bad_rows_name_the_tensor(kq: KQuant, kq_file: tuple[Path, np.ndarray]) -> None:
    path, _ = kq_file
    reader = gguf.GGUFReader(path, "r+")
    entry = next(t for t in reader.tensors if t.name == "w")
    entry.field.parts[3][0] = 384  # rows of one and a half super-blocks
    reader.data.flush()
    del reader
    with pytest.raises(tr.FormatError, match=rf"tensor 'w' .* rows of 384 values, not whole {kq.ggml.name} blocks"):
        tr.load_gguf(path)


def test_load_gguf_truncated(kq: KQuant, tmp_path: Path, rng: np.random.Generator) -> None:
    path = write_gguf(tmp_path / "t.gguf", {"w": (kq.random_blocks(rng, 4), kq.ggml)})
    path.write_bytes(path.read_bytes()[:-50])
    with pytest.raises(tr.FormatError, match=rf"tensor 'w' .* \({kq.ggml.name}, .* reaches past the end of the file"):
        tr.load_gguf(path)


def test_interpreter_reads_the_blocks(kq: KQuant, rng: np.random.Generator) -> None:
    """The reference interpreter evaluates a quantized input from its GPU words (ir/quant.dequantize)."""
    from ir.interpret import interpret
    from tracer.gguf import quantized_tensor

    raw = kq.random_blocks(rng, 8)  # (4, 512)
    w = quantized_tensor(raw, kq.dtype, (4, 512))
    x = rng.standard_normal((2, 512)).astype(np.float32)
    graph = tr.nn.linear(tr.tensor(x), w).graph()
    feed = {n.arg.index: w._lazy.host if n.dtype.is_quantized else x for n in graph if n.op.value == "input"}
    (out,) = interpret(graph, [feed[i] for i in range(len(feed))])
    np.testing.assert_allclose(out, x @ kq.values(raw, (4, 512)).T, rtol=1e-5, atol=1e-4)


# --- dequant, qgather, qgemv, qgemm --------------------------------------------------------------


@pytest.mark.parametrize("out_dtype", [tr.float32, tr.float16])
def test_astype_dequantizes(out_dtype: DType, kq: KQuant, rng: np.random.Generator, device) -> None:
    if out_dtype is tr.float16 and not device.caps.shader_f16:
        pytest.skip("no shader-f16")
    w, ref = kq.weights(rng, 9, 512)
    y = w.astype(out_dtype)
    assert [k for k, _, _ in kernels_of(y)] == ["dequant"]
    got = y.numpy()
    if out_dtype is tr.float32:
        assert_values(got, ref, kq)
    elif kq.exact:
        np.testing.assert_array_equal(got, ref.astype(np.float16))
    else:
        np.testing.assert_allclose(got.astype(np.float32), ref, rtol=1e-3, atol=1e-6)


def test_quantized_values_dequantize_on_the_gpu(kq: KQuant, rng: np.random.Generator) -> None:
    q, ref = kq.quantized(rng, 5, 768)
    assert_values(q.astype(tr.float32).numpy(), ref, kq)
    assert_values(q.T.astype(tr.float32).numpy(), ref.T, kq)


@pytest.mark.parametrize("n,k", [(1, 256), (17, 512), (70, 2048), (5, 2304)])
def test_gemv(n: int, k: int, kq: KQuant, rng: np.random.Generator) -> None:
    """One row of x: qgemv, rows past a workgroup's and units past its threads' tails."""
    w, ref = kq.weights(rng, n, k)
    x = rng.standard_normal(k).astype(np.float32)
    y = tr.nn.linear(tr.tensor(x), w)
    assert quant_kernels(y) == [("qgemv", f"x4.{kq.name}")]
    assert_product(y.numpy(), x, ref)


@pytest.mark.parametrize("wx,wy,rows,unroll", [(16, 1, 1, 1), (64, 2, 3, 3), (32, 8, 8, 2), (128, 1, 2, 1)])
def test_gemv_configurations(wx: int, wy: int, rows: int, unroll: int, kq: KQuant, rng: np.random.Generator) -> None:
    """Every qgemv knob, forced: the values stay right (1280: units past any step; 37 rows: odd)."""
    from backend_wgpu import get_device
    from benchmarks.device.quant import program_for
    from ir.node import KernelChoice

    w, ref = kq.weights(rng, 37, 1280)
    x = rng.standard_normal((1, 1280)).astype(np.float32)
    y = tr.nn.linear(tr.tensor(x), w, tr.tensor(np.ones(37, np.float32))).relu()
    choice = KernelChoice("qgemv", "x4", 1, (wx, wy, 1), (("rows", rows), ("unroll", unroll)))
    program, bufs = program_for(y, choice)
    assert [(d.kernel, d.workgroup_size) for d in program.dispatches] == [("qgemv", (wx, wy, 1))]
    got = np.frombuffer(get_device().read(program.run(bufs)[0]), np.float32).reshape(y.shape)
    bound = 1e-5 * (np.abs(x) @ np.abs(ref).T) + 1e-6
    assert (np.abs(got - np.maximum(x @ ref.T + 1, 0)) <= bound).all()  # relu moves no value further apart


def test_gemv_strided_x(kq: KQuant, rng: np.random.Generator) -> None:
    """x read through strides (x1): a column of a matrix."""
    w, ref = kq.weights(rng, 40, 256)
    big = rng.standard_normal((256, 3)).astype(np.float32)
    y = tr.nn.linear(tr.tensor(big)[:, 1], w)
    assert quant_kernels(y)[-1] == ("qgemv", f"x1.{kq.name}")
    assert_product(y.numpy(), big[:, 1], ref)


@pytest.mark.parametrize("m,n,k", [(2, 3, 256), (65, 71, 512), (7, 64, 2048), (130, 33, 256), (20, 1030, 256)])
def test_gemm(m: int, n: int, k: int, kq: KQuant, rng: np.random.Generator) -> None:
    """Several rows (prefill): qgemm_thin up to its limits, then qgemm; edges in m and n."""
    w, ref = kq.weights(rng, n, k)
    x = rng.standard_normal((m, k)).astype(np.float32)
    y = tr.tensor(x) @ w.T
    kernels = quant_kernels(y)
    if rows_kernel(m, n) == "qgemm_thin":
        assert kernels == [("qgemm_thin", f"x4.{kq.name}")]
    else:  # passes.dequantize_wide: the weight dequantized, then a float GEMM
        assert kernels[0][0] == "dequant" and "qgemm" not in {kn for kn, _ in kernels}
    assert_product(y.numpy(), x, ref)


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("m,n,cols,threads", [(3, 5, 4, 64), (20, 33, 2, 128)])
def test_gemm_thin_settings(
    m: int, n: int, cols: int, threads: int, split: bool, kq: KQuant, rng: np.random.Generator, device
) -> None:
    """qgemm_thin at forced settings, a unit per thread or four threads to a unit (each its word's lanes)."""
    w, ref = kq.weights(rng, n, 512)
    x = rng.standard_normal((m, 512)).astype(np.float32)
    assert_product(forced_thin_product(x, w, cols, threads, device.caps.subgroups, split, device), x, ref)


@pytest.mark.parametrize("m", [1, 5, 130])
def test_fused_epilogue(m: int, kq: KQuant, rng: np.random.Generator) -> None:
    """bias + silu + residual after the matmul: one dispatch (weights from tr.quantize: values near 1)."""
    w, ref = kq.quantized(rng, 48, 256)
    x = rng.standard_normal((m, 256)).astype(np.float32)
    bias, res = rng.standard_normal(48).astype(np.float32), rng.standard_normal((m, 48)).astype(np.float32)
    y = tr.nn.linear(tr.tensor(x), w, tr.tensor(bias)).silu() + tr.tensor(res)
    program = tr.compile(y)
    kernels = [(d.kernel, d.op) for d in program.dispatches]
    if m == 130:  # dequantized, then the float GEMM with the epilogue fused
        assert kernels[0][0] == "dequant" and kernels[-1][1] == "fused" and len(kernels) == 2
    else:
        assert kernels == [(rows_kernel(m, 48), "fused")]
    z = x @ ref.T + bias
    np.testing.assert_allclose(y.numpy(), z / (1 + np.exp(-z)) + res, rtol=1e-4, atol=1e-4)


def test_float16_x(kq: KQuant, rng: np.random.Generator, device) -> None:
    if not device.caps.shader_f16:
        pytest.skip("no shader-f16")
    w, ref = kq.quantized(rng, 21, 256)
    x = rng.standard_normal((3, 256)).astype(np.float16)
    for rows in (x[:1], x):
        y = tr.nn.linear(tr.tensor(rows), w)
        assert y.dtype is tr.float16
        np.testing.assert_allclose(y.numpy().astype(np.float32), rows.astype(np.float32) @ ref.T, rtol=3e-3, atol=3e-3)


def test_embedding_rows(kq: KQuant, rng: np.random.Generator) -> None:
    """A quantized table (a tied embedding's head): rows at ids, and ids computed on the GPU, clamped."""
    table, ref = kq.weights(rng, 51, 512)
    ids = np.array([[3, 0, 50], [7, 7, 1]])
    y = tr.nn.embedding(ids, table)
    assert y.shape == (2, 3, 512) and y.dtype is tr.float32
    assert kernels_of(y)[0][0] == "qgather"
    assert_values(y.numpy(), ref[ids], kq)
    computed = tr.tensor(np.array([2, 0, 9], np.int32)) * 7 - 5  # 9, -5, 58: computed on the GPU, so clamped
    assert_values(tr.nn.embedding(computed, table).numpy(), ref[[9, 0, 50]], kq)


def test_interpreter_agrees_with_the_gpu(kq: KQuant, rng: np.random.Generator) -> None:
    from ir.interpret import interpret

    w, ref = kq.weights(rng, 8, 512)
    x = rng.standard_normal((2, 512)).astype(np.float32)
    y = tr.nn.linear(tr.tensor(x), w).relu()
    graph = y.graph()
    feed = {n.arg.index: w._lazy.host if n.dtype.is_quantized else x for n in graph if n.op.value == "input"}
    (out,) = interpret(graph, [feed[i] for i in range(len(feed))])
    np.testing.assert_allclose(out, y.numpy(), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(out, np.maximum(x @ ref.T, 0), rtol=1e-5, atol=1e-4)


def test_explain_and_text_show_format_and_bytes(kq: KQuant, rng: np.random.Generator) -> None:
    w, _ = kq.weights(rng, 64, 512)
    y = tr.nn.linear(tr.randn(1, 512, seed=0), w)
    text = str(tr.explain(y))
    assert "qgemv" in text and kq.explain in text
    assert f"{kq.name}[64x512]" in str(y.graph()) and kq.graph in str(y.graph())


def test_other_ops_raise_naming_the_op(kq: KQuant, rng: np.random.Generator) -> None:
    w, _ = kq.weights(rng, 4, 256)
    with pytest.raises(tr.DTypeError, match=rf"add: the {kq.name} tensor of shape \(4, 256\) holds quantized weight"):
        _ = w + 1.0


@pytest.mark.parametrize("fmt,nbytes", [("q4_0", 18432), ("q4_k", 18944), ("q6_k", 26880)])
def test_dump_shows_format_and_bytes(fmt: str, nbytes: int, tmp_path: Path) -> None:
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
    assert f"{fmt} 64x512, {nbytes} bytes" in (out / "index.html").read_text()
    assert f"{nbytes} bytes, " in (out / "program_000" / "00_traced.txt").read_text()


# --- in gemv_multi groups (blocks and staged variants) ---------------------------------------------


@pytest.mark.parametrize("layout", ["blocks", "staged", "staged_t32g8u3"])
@pytest.mark.parametrize("subgroups", [True, False], ids=["subgroups", "tree"])
@pytest.mark.parametrize("k", [256, 512, 2304])  # 8, 16 and 72 sub-blocks
def test_group_swiglu(
    k: int, subgroups: bool, layout: str, kq: KQuant, rng: np.random.Generator, device, monkeypatch
) -> None:
    """norm, gate (the k-quant), up (another format), SwiGLU: one gemv_multi, in the blocks layout and the
    staged one (a step of 3 blocks that the row's blocks do not fill), against numpy on gguf's values; 23
    rows: odd."""
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
    (g, g_ref), norm = kq.quantized(rng, 23, k), rng.standard_normal(k).astype(np.float32)
    up = rng.standard_normal((23, k)).astype(np.float32)
    up_ref = partner_values(kq.partner, up)
    x = rng.standard_normal((1, k)).astype(np.float32)

    def swiglu() -> tr.Tensor:
        h = tr.nn.rms_norm(tr.tensor(x), tr.tensor(norm), 1e-5)
        return tr.nn.linear(h, g).silu() * tr.nn.linear(h, tr.quantize(up, kq.partner))

    got, program = run_with_caps(swiglu(), subgroups=subgroups)
    (d,) = program.dispatches
    assert d.kernel == "gemv_multi" and (("staged" in d.variant) == (layout != "blocks")), d.variant
    a, b = rms(x, norm) @ g_ref.T, rms(x, norm) @ up_ref.T
    np.testing.assert_allclose(got, a / (1 + np.exp(-a)) * b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("staged", [False, True], ids=["blocks", "staged"])
def test_group_qkv_rope_and_cache_writes(staged: bool, kq: KQuant, rng: np.random.Generator, monkeypatch) -> None:
    """q and k quantized, v float32 (a mixed group), rope on q and k, k and v appended to caches: one dispatch."""
    from tests.test_quant import check_qkv_group

    group_layout(monkeypatch, staged)

    def one_group(q: tr.Tensor, t_ck: tr.Tensor, t_cv: tr.Tensor) -> None:
        (disp,) = tr.compile(q, t_ck, t_cv).dispatches
        assert disp.kernel == "gemv_multi" and ("staged" in disp.variant) == staged

    check_qkv_group(rng, 512, 5, 3, lambda n, d: kq.quantized(rng, n, d), one_group)


@pytest.mark.parametrize("staged", [False, True], ids=["blocks", "staged"])
@pytest.mark.parametrize("offset", [2, 1])
def test_group_of_a_row_read_narrow(
    offset: int, staged: bool, kq: KQuant, rng: np.random.Generator, monkeypatch
) -> None:
    """A row starting at an offset that allows only vec2 (or scalar) loads, no norm: the k-quant, q4_0 and a
    float B."""
    group_layout(monkeypatch, staged)
    k = 512
    big = rng.standard_normal((1, k + 4)).astype(np.float32)
    (w1, ref1), w2, w3 = kq.quantized(rng, 12, k), *(rng.standard_normal((12, k)).astype(np.float32) for _ in range(2))
    row = tr.tensor(big)[:, offset : offset + k]
    y = tr.nn.linear(row, w1) * tr.nn.linear(row, tr.quantize(w2, tr.q4_0)) + tr.nn.linear(row, tr.tensor(w3))
    assert [d.kernel for d in tr.compile(y).dispatches] == ["gemv_multi"]
    x = big[:, offset : offset + k]
    np.testing.assert_allclose(
        y.numpy(), (x @ ref1.T) * (x @ partner_values(tr.q4_0, w2).T) + x @ w3.T, rtol=1e-4, atol=1e-4
    )


@pytest.mark.parametrize("staged", [False, True], ids=["blocks", "staged"])
def test_group_of_a_float16_row(staged: bool, kq: KQuant, rng: np.random.Generator, device, monkeypatch) -> None:
    """A float16 row and norm: the normed row rounded to float16 before the products, as stored unfused."""
    if not device.caps.shader_f16:
        pytest.skip("no shader-f16")
    group_layout(monkeypatch, staged)
    k = 256
    (w1, ref1), (w2, ref2) = kq.quantized(rng, 16, k), kq.quantized(rng, 16, k)
    x, norm = rng.standard_normal((1, k)).astype(np.float16), (1 + 0.1 * rng.standard_normal(k)).astype(np.float16)
    h = tr.nn.rms_norm(tr.tensor(x), tr.tensor(norm), 1e-5)
    y = tr.nn.linear(h, w1) + tr.nn.linear(h, w2)
    del h
    assert [d.kernel for d in tr.compile(y).dispatches] == ["gemv_multi"]
    hn = rms(x.astype(np.float32), norm.astype(np.float32)).astype(np.float16).astype(np.float64)  # as stored
    assert y.dtype is tr.float16
    np.testing.assert_allclose(y.numpy().astype(np.float32), hn @ ref1.T + hn @ ref2.T, rtol=2e-3, atol=2e-3)


def test_group_head_with_its_norm_and_bias(kq: KQuant, rng: np.random.Generator) -> None:
    """The final norm and a quantized vocabulary projection (51 rows) with a bias: one dispatch."""
    k, n = 512, 51
    (w, ref), norm = kq.quantized(rng, n, k), rng.standard_normal(k).astype(np.float32)
    bias, x = rng.standard_normal(n).astype(np.float32), rng.standard_normal((1, 1, k)).astype(np.float32)
    h = tr.nn.rms_norm(tr.tensor(x), tr.tensor(norm), 1e-6)
    y = tr.nn.linear(h, w, tr.tensor(bias)).reshape(1, n)
    del h
    assert [d.kernel for d in tr.compile(y).dispatches] == ["gemv_multi"]
    np.testing.assert_allclose(y.numpy(), rms(x[0], norm, 1e-6) @ ref.T + bias, rtol=1e-4, atol=1e-4)
