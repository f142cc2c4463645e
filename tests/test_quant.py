"""Quantized weights (q8_0, q4_0): the block layout, the kernels against numpy, and every wrong use.

Two references that share no code check each other and the GPU: gguf.quants.dequantize (the
package llama.cpp's tools use) and ir/quant.py (written from the format's definition, which
the interpreter uses). Each GPU test asserts the kernel that ran, so a rule change cannot
reroute a case silently.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import tracer as tr
from ir import quant
from ir.dtypes import DType
from tests.helpers import assert_close, kernels_of
from tests.strategies import programs
from tests.test_fuzz import check_program

gguf = pytest.importorskip("gguf", reason="quantizing needs the gguf package (pip install 'wgjit[gguf]')")

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def blocks_layout_at_eight_lanes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The layouts these tests assert (columns per workgroup, workgroup counts) are those of 8 GEMV lanes and
    the `blocks` quantized layout (the staged one, the default, is tested with GEMV_STAGED_ROW set on);
    the default (passes.select_kernels.GEMV_LANES, set by H200 measurement) is checked for values in
    test_quantized_swiglu_values_at_each_lanes_setting and by the decoder tests."""
    from passes import select_kernels as sk

    monkeypatch.setattr(sk, "GEMV_LANES", 8)
    monkeypatch.setattr(sk, "GEMV_STAGED_ROW", 0)


FORMATS = [DType.q8_0, DType.q4_0]


def ggml_type(dt: DType):  # noqa: ANN201
    return gguf.GGMLQuantizationType[dt.value.upper()]


def blocks_of(w: np.ndarray, dt: DType) -> np.ndarray:
    return gguf.quants.quantize(np.ascontiguousarray(w, dtype=np.float32), ggml_type(dt))


def reference(w: np.ndarray, dt: DType) -> np.ndarray:
    """What the quantized w holds, by gguf.quants (llama.cpp's rounding both ways)."""
    return gguf.quants.dequantize(blocks_of(w, dt), ggml_type(dt)).reshape(w.shape)


def quant_kernels(y: tr.Tensor) -> list[tuple[str, str]]:
    """(kernel, variant without its fused-code key) of every dispatch computing y."""
    return [(k, v.split(":")[0]) for k, v, _ in kernels_of(y)]


def weights(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    return rng.standard_normal((n, k)).astype(np.float32)


# --- the layout and the two references ---------------------------------------------------------


@pytest.mark.parametrize("dt", FORMATS)
def test_pack_unpack_roundtrip_and_references_agree(dt: DType, rng: np.random.Generator) -> None:
    w = weights(rng, 7, 96)
    w[0] = 0.0  # a zero block: scale 0
    w[1, :32] = 1e4  # one large block
    raw = blocks_of(w, dt)
    words = quant.pack(raw, dt)
    assert words.dtype == np.uint32 and words.nbytes == dt.nbytes(w.size) and words.nbytes % 16 == 0
    np.testing.assert_array_equal(quant.unpack(words, dt, w.size), raw.reshape(-1, dt.block_bytes))
    ours = quant.dequantize(words, dt, w.shape)
    np.testing.assert_array_equal(ours, gguf.quants.dequantize(raw, ggml_type(dt)).reshape(w.shape))
    assert np.abs(ours - w)[2:].max() < (0.02 if dt is DType.q8_0 else 0.35) * np.abs(w[2:]).max()


def test_dtype_facts() -> None:
    assert (tr.q8_0.block, tr.q8_0.block_bytes, tr.q4_0.block, tr.q4_0.block_bytes) == (32, 34, 32, 18)
    assert tr.q8_0.is_quantized and not tr.float32.is_quantized
    assert tr.q8_0.nbytes(4096 * 4096) == 4096 * 4096 // 32 * 34
    assert tr.q4_0.nbytes(32) == 32  # one 18-byte block, padded to 16 bytes
    with pytest.raises(tr.DTypeError, match="nbytes"):
        _ = tr.q8_0.itemsize


# --- kernels against numpy ---------------------------------------------------------------------


@pytest.mark.parametrize("dt", FORMATS)
@pytest.mark.parametrize("out_dtype", [tr.float32, tr.float16])
def test_astype_dequantizes(dt: DType, out_dtype: DType, rng: np.random.Generator, device) -> None:
    if out_dtype is tr.float16 and not device.caps.shader_f16:
        pytest.skip("no shader-f16")
    w = weights(rng, 33, 64)
    y = tr.quantize(w, dt).astype(out_dtype)
    assert [k for k, _, _ in kernels_of(y)] == ["dequant"]
    np.testing.assert_array_equal(y.numpy(), reference(w, dt).astype(out_dtype.np))


@pytest.mark.parametrize("dt", FORMATS)
@pytest.mark.parametrize("n,k", [(1, 32), (17, 96), (70, 544), (5, 2080)])
def test_gemv(dt: DType, n: int, k: int, rng: np.random.Generator) -> None:
    """One row of x: qgemv, rows past a workgroup's and units past its threads' tails."""
    w, x = weights(rng, n, k), rng.standard_normal(k).astype(np.float32)
    y = tr.nn.linear(tr.tensor(x), tr.quantize(w, dt))
    assert quant_kernels(y) == [("qgemv", f"x4.{dt.value}")]
    assert_close(y.numpy(), reference(w, dt) @ x, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dt", FORMATS)
@pytest.mark.parametrize("wx,wy,rows,unroll", [(16, 1, 1, 1), (64, 2, 3, 3), (32, 8, 8, 2), (128, 1, 2, 1)])
def test_gemv_configurations(dt: DType, wx: int, wy: int, rows: int, unroll: int, rng: np.random.Generator) -> None:
    """Every knob the H200 sweep turns (benchmarks/device/quant.py), forced: the values stay right."""
    from benchmarks.device.quant import program_for
    from ir.node import KernelChoice

    w, x = weights(rng, 37, 1056), rng.standard_normal((1, 1056)).astype(np.float32)  # 1056: units past any step
    y = tr.nn.linear(tr.tensor(x), tr.quantize(w, dt), tr.tensor(np.ones(37, np.float32))).relu()
    choice = KernelChoice("qgemv", "x4", 1, (wx, wy, 1), (("rows", rows), ("unroll", unroll)))
    program, bufs = program_for(y, choice)
    assert [(d.kernel, d.workgroup_size) for d in program.dispatches] == [("qgemv", (wx, wy, 1))]
    from backend_wgpu import get_device

    got = np.frombuffer(get_device().read(program.run(bufs)[0]), np.float32).reshape(y.shape)
    assert_close(got, np.maximum(x @ reference(w, dt).T + 1, 0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dt", FORMATS)
def test_gemv_strided_x(dt: DType, rng: np.random.Generator) -> None:
    """x read through strides (x1): a column of a matrix."""
    w, big = weights(rng, 40, 128), rng.standard_normal((128, 3)).astype(np.float32)
    x = tr.tensor(big)[:, 1]
    y = tr.nn.linear(x, tr.quantize(w, dt))
    assert quant_kernels(y)[-1] == ("qgemv", f"x1.{dt.value}")
    assert_close(y.numpy(), reference(w, dt) @ big[:, 1], rtol=1e-4, atol=1e-4)


def rows_kernel(m: int, n: int) -> str:
    """The kernel the rules give a quantized product of m rows of x and n weight rows (past qgemm_thin's rows,
    passes.dequantize_wide makes it a float product: `dequant` is the first dispatch)."""
    from passes.dequantize_wide import many_rows

    return "qgemv" if m == 1 else "dequant" if many_rows(m, n) else "qgemm_thin"


@pytest.mark.parametrize("dt", FORMATS)
@pytest.mark.parametrize("m,n,k", [(2, 3, 32), (65, 70, 96), (100, 70, 64), (130, 64, 256), (200, 4096, 64)])
def test_gemm(dt: DType, m: int, n: int, k: int, rng: np.random.Generator) -> None:
    """Several rows (prefill): qgemm_thin up to its limits, then the weight dequantized and a float GEMM;
    edges in m and n."""
    w, x = weights(rng, n, k), rng.standard_normal((m, k)).astype(np.float32)
    y = tr.tensor(x) @ tr.quantize(w, dt).T
    kernels = quant_kernels(y)
    if rows_kernel(m, n) == "qgemm_thin":
        assert kernels == [("qgemm_thin", f"x4.{dt.value}")]
    else:
        assert kernels[0][0] == "dequant" and len(kernels) >= 2 and "qgemm" not in {kn for kn, _ in kernels}
    assert_close(y.numpy(), x @ reference(w, dt).T, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dt", FORMATS)
def test_gemm_of_a_weight_kept_quantized(dt: DType, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past qgemm_thin's rows with dequantize_wide off (a float copy over its limit): qgemm, edges in m and n."""
    from passes import dequantize_wide

    monkeypatch.setattr(dequantize_wide, "DEQUANTIZE_MAX_BYTES", 0)
    w, x = weights(rng, 71, 96), rng.standard_normal((131, 96)).astype(np.float32)
    y = tr.tensor(x) @ tr.quantize(w, dt).T
    assert quant_kernels(y) == [("qgemm", f"x4.{dt.value}")]
    assert_close(y.numpy(), x @ reference(w, dt).T, rtol=1e-4, atol=1e-4)


def forced_thin_product(
    x: np.ndarray, wq: tr.Tensor, cols: int, threads: int, subgroups: bool, split: bool, device
) -> np.ndarray:
    """x @ wq.T run by qgemm_thin at the given settings (its rows: x's in blocks of at most 16)."""
    import dataclasses

    from backend_wgpu import Program
    from ir.node import KernelChoice
    from passes import run_pipeline
    from tracer.graph_builder import build_graph

    m, n = x.shape[0], wq.shape[0]
    y = tr.tensor(x).realize() @ wq.realize().T
    built = build_graph([y._lazy])
    graph = run_pipeline(built.graph, device.caps).graph
    rows = -(-m // -(-m // 16))
    params = (("rows", rows), ("cols", cols), ("subgroups", subgroups), ("split", split))
    forced = KernelChoice("qgemm_thin", "x4", workgroup=(threads, 1, 1), params=params)
    graph = graph.with_nodes(
        dataclasses.replace(nd, kernel=dataclasses.replace(forced, variant=nd.kernel.variant))
        if nd.kernel is not None and nd.kernel.name == "qgemm_thin"
        else nd
        for nd in graph
    )
    program = Program(graph, device)
    assert [d.kernel for d in program.dispatches] == ["qgemm_thin"]
    out = program.run([lz.buffer for lz in built.inputs])[0]
    return np.frombuffer(device.read(out), np.float32)[: m * n].reshape(m, n)


@pytest.mark.parametrize("dt", FORMATS)
@pytest.mark.parametrize(
    "m,n,k,cols,threads",
    [(2, 3, 32, 1, 32), (16, 40, 96, 4, 32), (17, 33, 256, 4, 64), (37, 130, 512, 2, 128), (64, 9, 64, 4, 32)],
)
@pytest.mark.parametrize("subgroups", [False, True])
@pytest.mark.parametrize("split", [False, True])
def test_gemm_thin_settings(
    dt: DType,
    m: int,
    n: int,
    k: int,
    cols: int,
    threads: int,
    subgroups: bool,
    split: bool,
    rng: np.random.Generator,
    device,
) -> None:
    """qgemm_thin at forced settings: blocks of rows of x past m (17 = 9 + 8, 37 = 3 x 13), weight rows past n
    (a last block of 1 to 3), more threads than a row's units, with and without subgroup sums, a unit per
    thread or split four threads to a unit."""
    if subgroups and not device.caps.subgroups:
        pytest.skip("no subgroups on this adapter")
    w, x = weights(rng, n, k), rng.standard_normal((m, k)).astype(np.float32)
    got = forced_thin_product(x, tr.quantize(w, dt), cols, threads, subgroups, split, device)
    assert_close(got, x @ reference(w, dt).T, rtol=1e-4, atol=1e-4)


def test_gemm_strided_x(rng: np.random.Generator) -> None:
    """Rows of x 70 apart from offset 1 (x1), and a permuted x (copied first: x4), leading dims kept."""
    w = weights(rng, 24, 64)
    q, ref = tr.quantize(w, tr.q8_0), reference(w, DType.q8_0)
    big = rng.standard_normal((9, 70)).astype(np.float32)
    y = tr.nn.linear(tr.tensor(big)[:, 1:65], q)
    assert quant_kernels(y) == [("qgemm_thin", "x1.q8_0")]
    assert_close(y.numpy(), big[:, 1:65] @ ref.T, rtol=1e-4, atol=1e-4)
    xt = rng.standard_normal((64, 3, 2)).astype(np.float32)
    y = tr.nn.linear(tr.tensor(xt).permute(2, 1, 0), q)
    assert y.shape == (2, 3, 24) and quant_kernels(y)[-1] == ("qgemm_thin", "x4.q8_0")
    assert_close(y.numpy(), xt.transpose(2, 1, 0) @ ref.T, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dt", FORMATS)
@pytest.mark.parametrize("m", [1, 5, 130])
def test_fused_epilogue(dt: DType, m: int, rng: np.random.Generator) -> None:
    """bias + silu + residual after the quant matmul: one dispatch, as after the float GEMVs."""
    w, x = weights(rng, 48, 64), rng.standard_normal((m, 64)).astype(np.float32)
    bias, res = rng.standard_normal(48).astype(np.float32), rng.standard_normal((m, 48)).astype(np.float32)
    y = tr.nn.linear(tr.tensor(x), tr.quantize(w, dt), tr.tensor(bias)).silu() + tr.tensor(res)
    program = tr.compile(y)
    kernels = [(d.kernel, d.op) for d in program.dispatches]
    if m == 130:  # dequantized, then the float GEMM with the epilogue fused
        assert kernels[0][0] == "dequant" and kernels[-1][1] == "fused" and len(kernels) == 2
    else:
        assert kernels == [(rows_kernel(m, 48), "fused")]
    z = x @ reference(w, dt).T + bias
    assert_close(y.numpy(), z / (1 + np.exp(-z)) + res, rtol=1e-4, atol=1e-4)


def test_float16_x(rng: np.random.Generator, device) -> None:
    if not device.caps.shader_f16:
        pytest.skip("no shader-f16")
    w, x = weights(rng, 20, 64), rng.standard_normal((3, 64)).astype(np.float16)
    for rows in (x[:1], x):
        y = tr.nn.linear(tr.tensor(rows), tr.quantize(w, tr.q4_0))
        assert y.dtype is tr.float16
        want = rows.astype(np.float32) @ reference(w, DType.q4_0).T
        assert_close(y.numpy().astype(np.float32), want, rtol=3e-3, atol=3e-3)


@pytest.mark.parametrize("dt", FORMATS)
def test_embedding_rows(dt: DType, rng: np.random.Generator) -> None:
    table = weights(rng, 50, 96)
    ids = np.array([[3, 0, 49], [7, 7, 1]])
    y = tr.nn.embedding(ids, tr.quantize(table, dt))
    assert y.shape == (2, 3, 96) and y.dtype is tr.float32
    assert kernels_of(y)[0][0] == "qgather"  # (then a copy out of the (6, 96) result into its (2, 3, 96) view)
    np.testing.assert_array_equal(y.numpy(), reference(table, dt)[ids])


def test_embedding_ids_from_the_gpu_are_clamped(rng: np.random.Generator) -> None:
    table = weights(rng, 10, 32)
    ids = tr.tensor(np.array([2, 0, 9], np.int32)) * 7 - 5  # 9, -5, 58: computed, so clamped
    y = tr.nn.embedding(ids, tr.quantize(table, tr.q8_0))
    np.testing.assert_array_equal(y.numpy(), reference(table, DType.q8_0)[[9, 0, 9]])


def test_views_and_one_dim_x(rng: np.random.Generator) -> None:
    w, x = weights(rng, 12, 64), rng.standard_normal(64).astype(np.float32)
    q = tr.quantize(w, tr.q8_0)
    ref = reference(w, DType.q8_0)
    np.testing.assert_array_equal(q.T.astype(tr.float32).numpy(), ref.T)
    assert_close((tr.tensor(x) @ q.T).numpy(), ref @ x, rtol=1e-4, atol=1e-4)
    assert_close(tr.matmul(x, q.T).numpy(), ref @ x, rtol=1e-4, atol=1e-4)
    q.T.realize()  # uploads q; nothing to compute
    assert q.is_realized


def test_quantize_a_tensor_and_jit_replays(rng: np.random.Generator) -> None:
    w = weights(rng, 16, 64)
    q = tr.quantize(tr.tensor(w), tr.q4_0)  # from a Tensor: read back, quantized on the host
    ref = reference(w, DType.q4_0)

    @tr.jit
    def f(x: tr.Tensor) -> tr.Tensor:
        return tr.nn.linear(x, q).relu()

    for _ in range(3):
        x = rng.standard_normal((1, 64)).astype(np.float32)
        assert_close(f(tr.tensor(x)).numpy(), np.maximum(x @ ref.T, 0), rtol=1e-4, atol=1e-4)


def test_interpreter_agrees(rng: np.random.Generator) -> None:
    """The reference interpreter evaluates a graph holding a quantized input from its words."""
    from ir.interpret import interpret

    w, x = weights(rng, 8, 64), rng.standard_normal((2, 64)).astype(np.float32)
    y = tr.nn.linear(tr.tensor(x), tr.quantize(w, tr.q8_0)).relu()
    graph = y.graph()
    words = quant.pack(blocks_of(w, DType.q8_0), DType.q8_0)
    feed = {n.arg.index: words if n.dtype.is_quantized else x for n in graph if n.op.value == "input"}
    (out,) = interpret(graph, [feed[i] for i in range(len(feed))])
    assert_close(out, y.numpy(), rtol=1e-5, atol=1e-5)
    assert_close(out, np.maximum(x @ reference(w, DType.q8_0).T, 0), rtol=1e-5, atol=1e-5)


# --- differential fuzzing (tests/strategies.py's quantized section) ----------------------------

QUANT_PROGRAM_OPS = ("qlinear", "qlinear", "qtable", "add", "mul", "silu", "relu", "reshape", "sum", "cast", "matmul")


@settings(max_examples=40, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(programs(max_steps=5, f16=False, ops=QUANT_PROGRAM_OPS))
def test_quantized_programs(program) -> None:  # noqa: ANN001
    """Random programs around quantized linear and tables: GPU, numpy (both dequantizers), interpreter."""
    check_program(program)


@pytest.fixture
def dequantize_from_two_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """passes.dequantize_wide for every quantized product of two rows or more (the fuzzer's x has a few rows,
    the rule's threshold is 96), with a program cache of its own (the same graphs compile differently)."""
    from collections import OrderedDict

    from passes import dequantize_wide

    monkeypatch.setattr(dequantize_wide, "DEQUANTIZE_MIN_ROWS", 2)
    monkeypatch.setattr(sys.modules["tracer.realize"], "_PROGRAMS", OrderedDict())


@settings(max_examples=25, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(programs(max_steps=5, f16=False, ops=QUANT_PROGRAM_OPS))
def test_quantized_programs_dequantized(dequantize_from_two_rows, program) -> None:  # noqa: ANN001
    """The same random programs with their quantized products of several rows dequantized to float copies
    first (passes.dequantize_wide), the interpreter checked before and after that pass as after every other."""
    check_program(program)


def test_kernels_need_no_float16_feature(rng: np.random.Generator) -> None:
    """With float32 x and output the WGSL must not `enable f16` (adapters without shader-f16 refuse it)."""
    q = tr.quantize(weights(rng, 8, 64), tr.q4_0)
    x = tr.randn(3, 64, seed=0)
    for y in (tr.nn.linear(x[:1], q), tr.nn.linear(x, q), tr.nn.embedding([1, 2], q), q.astype(tr.float32)):
        sources = tr.compile(y).sources
        assert sources and not any("enable f16" in code for code in sources.values())


# --- inspection ------------------------------------------------------------------------------


def test_explain_and_text_show_format_and_bytes(rng: np.random.Generator) -> None:
    q = tr.quantize(weights(rng, 64, 128), tr.q4_0)
    y = tr.nn.linear(tr.randn(1, 128, seed=0), q)
    text = str(tr.explain(y))
    assert "qgemv" in text and "q4_0 64x128, 4608 bytes (18 per 32 weights)" in text
    assert "q4_0[64x128]" in str(y.graph()) and "4608 bytes, 18-byte blocks of 32" in str(y.graph())


# --- wrong uses ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "use,op",
    [
        (lambda q: q + 1, "add"),
        (lambda q: q * q, "mul"),
        (lambda q: q.sum(), "sum"),
        (lambda q: q.exp(), "exp"),
        (lambda q: q.reshape(-1), "reshape"),
        (lambda q: q[1:], "slice"),
        (lambda q: q.T + 1, "add"),
        (lambda q: tr.concat([q, q]), "concat"),
        (lambda q: q.softmax(), "softmax"),
        (lambda q: tr.nn.rms_norm(q), "rms_norm"),
        (lambda q: tr.nn.gather(q, tr.zeros((2, 64), dtype=tr.int32), 0), "gather"),
        (lambda q: tr.nn.embedding([0], q.T), "gather"),
    ],
)
def test_other_ops_raise_naming_the_op(use, op: str, rng: np.random.Generator) -> None:  # noqa: ANN001
    q = tr.quantize(weights(rng, 32, 64), tr.q8_0)
    with pytest.raises(tr.DTypeError, match=rf"^{op}: .*(q8_0|quantized).*astype"):
        use(q)


def test_matmul_orientation_and_reads(rng: np.random.Generator) -> None:
    q = tr.quantize(weights(rng, 32, 64), tr.q8_0)
    x = tr.randn(1, 64, seed=1)
    with pytest.raises(tr.DTypeError, match="x @ w.T"):
        _ = q @ x.T
    with pytest.raises(tr.DTypeError, match="x @ w.T"):
        _ = tr.randn(2, 32, seed=0) @ q  # the weight untransposed
    with pytest.raises(tr.ShapeError, match="last dim of x must be 64"):
        _ = tr.randn(2, 32, seed=0) @ q.T
    with pytest.raises(tr.ShapeError, match="does not fit weight shape"):
        tr.nn.linear(tr.randn(2, 32, seed=0), q)
    with pytest.raises(tr.DTypeError, match="numpy: .*astype"):
        q.numpy()
    with pytest.raises(tr.DTypeError, match="to float32 or float16"):
        q.astype(tr.int32)
    with pytest.raises(tr.DTypeError, match="tr.quantize"):
        x.astype(tr.q8_0)
    with pytest.raises(tr.DTypeError, match="tr.quantize"):
        tr.tensor(np.zeros((2, 32), np.float32), dtype=tr.q8_0)
    with pytest.raises(tr.DTypeError, match="multiple of 32"):
        tr.quantize(np.zeros((4, 48), np.float32), tr.q4_0)
    with pytest.raises(tr.DTypeError, match="not a quantized format"):
        tr.quantize(np.zeros((4, 64), np.float32), tr.float16)
    # nothing above broke the tensor
    assert_close(tr.nn.linear(x, q).numpy(), x.numpy() @ q.astype(tr.float32).numpy().T, rtol=1e-4, atol=1e-4)


# --- GEMV groups (passes.fuse_gemv): gemv_multi reading quantized blocks ---------------------


def rms(x: np.ndarray, w: np.ndarray | None, eps: float = 1e-5) -> np.ndarray:
    x = x.astype(np.float64)
    h = x / np.sqrt((x**2).mean(-1, keepdims=True) + eps)
    return h * w if w is not None else h


def group_kernels(*ys: tr.Tensor) -> list[tuple[str, str, int]]:
    return [(d.kernel, d.variant.split(":", 1)[-1], d.element) for d in tr.compile(*ys).dispatches]


@pytest.mark.parametrize("lanes", [2, 4, 8, 16])
def test_quantized_swiglu_values_at_each_lanes_setting(lanes: int, rng: np.random.Generator, monkeypatch) -> None:
    """norm, gate (q8_0), up (q4_0), SwiGLU at every GEMV_LANES the H200 sweep tries: one dispatch, right values."""
    from passes import select_kernels as sk

    monkeypatch.setattr(sk, "GEMV_LANES", lanes)
    k = 544
    w1, w2, norm = weights(rng, 23, k), weights(rng, 23, k), rng.standard_normal(k).astype(np.float32)
    x = rng.standard_normal((1, k)).astype(np.float32)

    def swiglu() -> tr.Tensor:  # h dies with the call: a live tensor would be stored as an output
        h = tr.nn.rms_norm(tr.tensor(x), tr.tensor(norm), 1e-5)
        return tr.nn.linear(h, tr.quantize(w1, tr.q8_0)).silu() * tr.nn.linear(h, tr.quantize(w2, tr.q4_0))

    y = swiglu()
    assert [kernel for kernel, _, _ in group_kernels(y)] == ["gemv_multi"]
    a, b = rms(x, norm) @ reference(w1, DType.q8_0).T, rms(x, norm) @ reference(w2, DType.q4_0).T
    assert_close(y.numpy(), a / (1 + np.exp(-a)) * b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("subgroups", [True, False], ids=["subgroups", "tree"])
@pytest.mark.parametrize("k", [64, 544, 2080])  # 2, 17 and 65 blocks: threads past the row's blocks
def test_quantized_swiglu_is_one_gemv_multi(k: int, subgroups: bool, rng: np.random.Generator, device) -> None:
    """norm, gate (q8_0) and up (q4_0) of one row, SwiGLU: one dispatch, four columns a workgroup (23:
    the last workgroup's fourth past the end), against gguf's dequantization."""
    from tests.test_kernels_perf_variants import run_with_caps

    if subgroups and not device.caps.subgroups:
        pytest.skip("no subgroups on this adapter")
    w1, w2, norm = weights(rng, 23, k), weights(rng, 23, k), rng.standard_normal(k).astype(np.float32)
    x = rng.standard_normal((1, k)).astype(np.float32)

    def swiglu() -> tr.Tensor:  # h dies with the call: a live tensor would be stored as an output
        h = tr.nn.rms_norm(tr.tensor(x), tr.tensor(norm), 1e-5)
        return tr.nn.linear(h, tr.quantize(w1, tr.q8_0)).silu() * tr.nn.linear(h, tr.quantize(w2, tr.q4_0))

    got, program = run_with_caps(swiglu(), subgroups=subgroups)
    assert [(d.kernel, d.variant.endswith(":n:blocksx4")) for d in program.dispatches] == [("gemv_multi", True)]
    assert program.dispatches[0].workgroup_count == (6, 1, 1)
    a, b = rms(x, norm) @ reference(w1, DType.q8_0).T, rms(x, norm) @ reference(w2, DType.q4_0).T
    assert_close(got, a / (1 + np.exp(-a)) * b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dt", FORMATS)
def test_quantized_qkv_rope_and_cache_writes_are_one_dispatch(dt: DType, rng: np.random.Generator) -> None:
    """q and k quantized, v float32 (a mixed group), rope on q and k, k and v appended to caches."""

    def weight(n: int, d: int) -> tuple[tr.Tensor, np.ndarray]:
        w = weights(rng, n, d)
        return tr.quantize(w, dt), reference(w, dt)

    def one_group(q: tr.Tensor, t_ck: tr.Tensor, t_cv: tr.Tensor) -> None:
        assert [k for k, _, _ in group_kernels(q, t_ck, t_cv)] == ["gemv_multi"]

    check_qkv_group(rng, 64, 4, 2, weight, one_group)


def check_qkv_group(
    rng: np.random.Generator,
    d: int,
    heads: int,
    kv_heads: int,
    weight: Callable[[int, int], tuple[tr.Tensor, np.ndarray]],
    check_dispatches: Callable[[tr.Tensor, tr.Tensor, tr.Tensor], None],
) -> None:
    """A decode step's q/k/v group: q and k from `weight(rows, d)` (a tensor and the values numpy uses), v
    float32, rope on q and k, k and v appended to caches; `check_dispatches(q, k_cache, v_cache)` sees
    what it compiles to, then q and both caches are checked against numpy."""
    hd, ctx, pos = 16, 6, 3
    (wq, q_ref), (wk, k_ref) = weight(heads * hd, d), weight(kv_heads * hd, d)
    wv = weights(rng, kv_heads * hd, d)
    norm, x = rng.standard_normal(d).astype(np.float32), rng.standard_normal((1, 1, d)).astype(np.float32)
    ang = np.arange(hd // 2) * 0.3
    cos, sin = np.cos(ang).astype(np.float32)[None], np.sin(ang).astype(np.float32)[None]
    ck, cv = (rng.standard_normal((1, kv_heads, ctx, hd)).astype(np.float32) for _ in range(2))
    t_ck, t_cv = tr.tensor(ck), tr.tensor(cv)

    def heads_of(y: tr.Tensor, n: int) -> tr.Tensor:
        return y.reshape(1, 1, n, hd).permute(0, 2, 1, 3)

    h = tr.nn.rms_norm(tr.tensor(x), tr.tensor(norm), 1e-5)
    q = tr.nn.rope(heads_of(tr.nn.linear(h, wq), heads), tr.tensor(cos), tr.tensor(sin))
    k = tr.nn.rope(heads_of(tr.nn.linear(h, wk), kv_heads), tr.tensor(cos), tr.tensor(sin))
    t_ck.index_write(k, (0, 0, pos, 0))
    t_cv.index_write(heads_of(tr.nn.linear(h, tr.tensor(wv)), kv_heads), (0, 0, pos, 0))
    del h, k
    check_dispatches(q, t_ck, t_cv)

    def rope_np(y: np.ndarray) -> np.ndarray:  # (n, hd), halves rotated
        a, b = y[:, : hd // 2], y[:, hd // 2 :]
        return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=1)

    hn = rms(x[0], norm)
    assert_close(q.numpy()[0, :, 0], rope_np((hn @ q_ref.T).reshape(heads, hd)), rtol=1e-4, atol=1e-4)
    ck[0, :, pos] = rope_np((hn @ k_ref.T).reshape(kv_heads, hd))
    cv[0, :, pos] = (hn @ wv.T).reshape(kv_heads, hd)
    assert_close(t_ck.numpy(), ck, rtol=1e-4, atol=1e-4)
    assert_close(t_cv.numpy(), cv, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("offset,element", [(2, 2), (1, 1)])
def test_quantized_group_of_a_row_read_narrow(offset: int, element: int, rng: np.random.Generator) -> None:
    """The row starts at an offset that allows only vec2 (or scalar) loads: the blocks still read 32
    values a step, composed of narrower loads; a float B of the group likewise."""
    k = 96
    big = rng.standard_normal((1, k + 4)).astype(np.float32)
    w1, w2, w3 = weights(rng, 12, k), weights(rng, 12, k), weights(rng, 12, k)
    row = tr.tensor(big)[:, offset : offset + k]
    y = tr.nn.linear(row, tr.quantize(w1, tr.q4_0)) * tr.nn.linear(row, tr.quantize(w2, tr.q8_0))
    y = y + tr.nn.linear(row, tr.tensor(w3))
    assert group_kernels(y) == [("gemv_multi", "3::blocksx2", element)]  # 8 lanes: 2 columns of 3 matmuls
    x = big[:, offset : offset + k]
    want = (x @ reference(w1, DType.q4_0).T) * (x @ reference(w2, DType.q8_0).T) + x @ w3.T
    assert_close(y.numpy(), want, rtol=1e-4, atol=1e-4)


def test_quantized_group_of_a_float16_row(rng: np.random.Generator, device) -> None:
    """A float16 row and norm: the normed row rounded to float16 before the products, as stored unfused."""
    if not device.caps.shader_f16:
        pytest.skip("no shader-f16")
    k = 128
    w1, w2 = weights(rng, 16, k), weights(rng, 16, k)
    x, norm = rng.standard_normal((1, k)).astype(np.float16), (1 + 0.1 * rng.standard_normal(k)).astype(np.float16)

    def project() -> tr.Tensor:
        h = tr.nn.rms_norm(tr.tensor(x), tr.tensor(norm), 1e-5)
        return tr.nn.linear(h, tr.quantize(w1, tr.q4_0)) + tr.nn.linear(h, tr.quantize(w2, tr.q8_0))

    y = project()
    assert [(k, v) for k, v, _ in group_kernels(y)] == [("gemv_multi", "2:nr:blocksx4")]
    hn = rms(x.astype(np.float32), norm.astype(np.float32)).astype(np.float16).astype(np.float64)  # as stored
    want = hn @ reference(w1, DType.q4_0).T + hn @ reference(w2, DType.q8_0).T
    assert y.dtype is tr.float16
    assert_close(y.numpy().astype(np.float32), want, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("copy", [False, True])
def test_quantized_group_mixing_column_blocks_and_side_writes(copy: bool, rng: np.random.Generator) -> None:
    """The root part (a plain q4_0 projection: 8 columns a workgroup) beside a side write (a q8_0
    projection appended to a cache in place: 8 columns a workgroup too, each unit's thread writing
    its own), with or without a copy of the old cache also read: every workgroup of both parts
    lands right (2 + 3 workgroups, the last ones part-empty)."""
    k, n, m, ctx, pos = 64, 10, 20, 5, 3
    w1, w2, norm = weights(rng, n, k), weights(rng, m, k), rng.standard_normal(k).astype(np.float32)
    x, cache = rng.standard_normal((1, k)).astype(np.float32), rng.standard_normal((ctx, m)).astype(np.float32)
    t_cache = tr.tensor(cache)

    def step() -> tuple[tr.Tensor, ...]:
        old = t_cache[1:3].copy() if copy else None
        h = tr.nn.rms_norm(tr.tensor(x), tr.tensor(norm), 1e-5)
        y = tr.nn.linear(h, tr.quantize(w1, tr.q4_0))
        t_cache.index_write(tr.nn.linear(h, tr.quantize(w2, tr.q8_0)), (pos, 0))
        return (y,) if old is None else (y, old * 2.0)

    outs = step()
    group = [d for d in tr.compile(*outs, t_cache).dispatches if d.kernel != "elementwise"]
    assert [(d.kernel, d.variant.endswith(":blocksx8"), d.workgroup_count) for d in group] == [
        ("gemv_multi", True, (5, 1, 1))
    ]
    hn = rms(x, norm)
    assert_close(outs[0].numpy(), hn @ reference(w1, DType.q4_0).T, rtol=1e-4, atol=1e-4)
    want = cache.copy()
    want[pos] = (hn @ reference(w2, DType.q8_0).T)[0]
    assert_close(t_cache.numpy(), want, rtol=1e-4, atol=1e-4)
    if copy:
        assert_close(outs[1].numpy(), cache[1:3] * 2.0, rtol=0, atol=0)


@pytest.mark.parametrize("dt", FORMATS)
def test_quantized_head_with_its_norm(dt: DType, rng: np.random.Generator) -> None:
    """The final norm and a quantized vocabulary projection (50 columns: 7 workgroups of eight, six
    past the end), a bias and a float16-free row: one dispatch."""
    k, n = 96, 50
    w, norm, bias = weights(rng, n, k), rng.standard_normal(k).astype(np.float32), weights(rng, 1, n)[0]
    x = rng.standard_normal((1, 1, k)).astype(np.float32)

    def head() -> tr.Tensor:
        h = tr.nn.rms_norm(tr.tensor(x), tr.tensor(norm), 1e-6)
        return tr.nn.linear(h, tr.quantize(w, dt), tr.tensor(bias)).reshape(1, n)

    y = head()
    program = tr.compile(y)
    assert [(d.kernel, d.workgroup_count) for d in program.dispatches] == [("gemv_multi", (7, 1, 1))]
    assert_close(y.numpy(), rms(x[0], norm, 1e-6) @ reference(w, dt).T + bias, rtol=1e-4, atol=1e-4)


def test_explain_names_the_quantized_weights_of_a_group(rng: np.random.Generator) -> None:
    q1, q2 = tr.quantize(weights(rng, 8, 64), tr.q8_0), tr.quantize(weights(rng, 8, 64), tr.q4_0)
    h = tr.nn.rms_norm(tr.randn(1, 64, seed=0), tr.randn(64, seed=1), 1e-5)
    y = tr.nn.linear(h, q1) * tr.nn.linear(h, q2)
    del h
    text = str(tr.explain(y))
    assert (
        "gemv_multi" in text
        and "blocks of 32 along k (several columns a workgroup but in rope or side-write parts)" in text
    )
    assert "q8_0 8x64, 544 bytes (34 per 32 weights)" in text
    assert "q4_0 8x64, 288 bytes (18 per 32 weights) dequantized in registers" in text


# --- the staged variant (passes.select_kernels.GEMV_STAGED_ROW): the row in workgroup memory ---------

# (threads, threads a unit, blocks a step): the default; a group small enough for subgroup shuffles; a
# step of 3 blocks that the row's blocks do not fill (the last step's blocks clamped); groups of 32
STAGED = [(256, 16, 4), (64, 4, 1), (32, 8, 3), (128, 32, 2)]
STAGED_IDS = [f"t{t}g{g}u{u}" for t, g, u in STAGED]


def staged_on(monkeypatch: pytest.MonkeyPatch, threads: int = 256, group: int = 16, unroll: int = 4) -> int:
    """GEMV_STAGED_ROW on with this sizing, and a program cache of the test's own (programs are cached by
    graph structure, not by these rules: another test's program of the same shapes must not be found, nor
    a staged one left for later tests); returns the units a workgroup takes."""
    from collections import OrderedDict

    from passes import select_kernels as sk

    realize_mod = sys.modules["tracer.realize"]  # the package exports a function of that name

    monkeypatch.setattr(realize_mod, "_PROGRAMS", OrderedDict())
    monkeypatch.setattr(sk, "GEMV_STAGED_ROW", 1)
    monkeypatch.setattr(sk, "GEMV_STAGED_THREADS", threads)
    monkeypatch.setattr(sk, "GEMV_STAGED_GROUP", group)
    monkeypatch.setattr(sk, "GEMV_STAGED_UNROLL", unroll)
    return threads // group


@pytest.mark.parametrize("subgroups", [True, False], ids=["subgroups", "tree"])
@pytest.mark.parametrize("sizing", STAGED, ids=STAGED_IDS)
@pytest.mark.parametrize("k", [64, 544, 2080])  # 2, 17 and 65 blocks
def test_staged_swiglu(
    k: int, sizing: tuple[int, int, int], subgroups: bool, rng: np.random.Generator, device, monkeypatch
) -> None:
    """norm, gate (q8_0), up (q4_0), SwiGLU with the row staged: one dispatch, 23 columns over
    ceil(23 / units a workgroup) workgroups, against gguf's dequantization; sums by shuffles where the
    group fits the subgroup, else through workgroup memory."""
    from tests.test_kernels_perf_variants import run_with_caps

    if subgroups and not device.caps.subgroups:
        pytest.skip("no subgroups on this adapter")
    units = staged_on(monkeypatch, *sizing)
    w1, w2, norm = weights(rng, 23, k), weights(rng, 23, k), rng.standard_normal(k).astype(np.float32)
    x = rng.standard_normal((1, k)).astype(np.float32)

    def swiglu() -> tr.Tensor:
        h = tr.nn.rms_norm(tr.tensor(x), tr.tensor(norm), 1e-5)
        return tr.nn.linear(h, tr.quantize(w1, tr.q8_0)).silu() * tr.nn.linear(h, tr.quantize(w2, tr.q4_0))

    got, program = run_with_caps(swiglu(), subgroups=subgroups)
    (d,) = program.dispatches
    shuffle = subgroups and sizing[1] <= device.caps.subgroup_size
    assert (d.kernel, d.variant.split(":", 2)[-1]) == (
        "gemv_multi",
        f"n:staged{sizing[1]}u{sizing[2]}{'s' if shuffle else ''}x{units}",
    )
    assert d.workgroup_count == (-(-23 // units), 1, 1)
    a, b = rms(x, norm) @ reference(w1, DType.q8_0).T, rms(x, norm) @ reference(w2, DType.q4_0).T
    assert_close(got, a / (1 + np.exp(-a)) * b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("interleaved", [False, True], ids=["half", "interleaved"])
@pytest.mark.parametrize("sizing", STAGED[:2], ids=STAGED_IDS[:2])
@pytest.mark.parametrize("dt", FORMATS)
def test_staged_qkv_rope_and_cache_writes(
    dt: DType, sizing: tuple[int, int, int], interleaved: bool, rng: np.random.Generator, monkeypatch
) -> None:
    """q and k quantized, v float32 (a float B read a block a step), rope pairs on q and k (both of a
    pair in one unit), k and v appended to caches by the units' threads: one staged dispatch."""
    staged_on(monkeypatch, *sizing)
    d, heads, kv_heads, hd, ctx, pos = 96, 5, 3, 16, 6, 3  # 3 blocks: odd columns and pairs
    wq, wk, wv = weights(rng, heads * hd, d), weights(rng, kv_heads * hd, d), weights(rng, kv_heads * hd, d)
    norm, x = rng.standard_normal(d).astype(np.float32), rng.standard_normal((1, 1, d)).astype(np.float32)
    ang = np.arange(hd // 2) * 0.3
    cos, sin = np.cos(ang).astype(np.float32)[None], np.sin(ang).astype(np.float32)[None]
    ck, cv = (rng.standard_normal((1, kv_heads, ctx, hd)).astype(np.float32) for _ in range(2))
    t_ck, t_cv = tr.tensor(ck), tr.tensor(cv)

    def heads_of(y: tr.Tensor, n: int) -> tr.Tensor:
        return y.reshape(1, 1, n, hd).permute(0, 2, 1, 3)

    def rot(y: tr.Tensor) -> tr.Tensor:
        return tr.nn.rope(y, tr.tensor(cos), tr.tensor(sin), interleaved=interleaved)

    def step() -> tr.Tensor:
        h = tr.nn.rms_norm(tr.tensor(x), tr.tensor(norm), 1e-5)
        q = rot(heads_of(tr.nn.linear(h, tr.quantize(wq, dt)), heads))
        k = rot(heads_of(tr.nn.linear(h, tr.quantize(wk, dt)), kv_heads))
        t_ck.index_write(k, (0, 0, pos, 0))
        t_cv.index_write(heads_of(tr.nn.linear(h, tr.tensor(wv)), kv_heads), (0, 0, pos, 0))
        return q

    q = step()
    assert [(k, ":staged" in v) for k, v, _ in group_kernels(q, t_ck, t_cv)] == [("gemv_multi", True)]

    def rope_np(y: np.ndarray) -> np.ndarray:  # (n, hd)
        if interleaved:
            a, b = y[:, 0::2], y[:, 1::2]
            out = np.empty_like(y)
            out[:, 0::2], out[:, 1::2] = a * cos - b * sin, b * cos + a * sin
            return out
        a, b = y[:, : hd // 2], y[:, hd // 2 :]
        return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=1)

    hn = rms(x[0], norm)
    assert_close(q.numpy()[0, :, 0], rope_np((hn @ reference(wq, dt).T).reshape(heads, hd)), rtol=1e-4, atol=1e-4)
    ck[0, :, pos] = rope_np((hn @ reference(wk, dt).T).reshape(kv_heads, hd))
    cv[0, :, pos] = (hn @ wv.T).reshape(kv_heads, hd)
    assert_close(t_ck.numpy(), ck, rtol=1e-4, atol=1e-4)
    assert_close(t_cv.numpy(), cv, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("offset,element", [(2, 2), (1, 1), (0, 4)])
def test_staged_group_without_a_norm_of_a_row_read_narrow(
    offset: int, element: int, rng: np.random.Generator, monkeypatch
) -> None:
    """No norm (the row staged as it is), read as vec4, vec2 or scalars, three matmuls (one float) a unit."""
    staged_on(monkeypatch, 64, 8, 3)
    k = 96
    big = rng.standard_normal((1, k + 4)).astype(np.float32)
    w1, w2, w3 = weights(rng, 13, k), weights(rng, 13, k), weights(rng, 13, k)
    row = tr.tensor(big)[:, offset : offset + k]
    y = tr.nn.linear(row, tr.quantize(w1, tr.q4_0)) * tr.nn.linear(row, tr.quantize(w2, tr.q8_0))
    y = y + tr.nn.linear(row, tr.tensor(w3))
    ((kernel, variant, el),) = group_kernels(y)
    assert (kernel, variant.split(":")[-1].startswith("staged8u3"), el) == ("gemv_multi", True, element)
    x = big[:, offset : offset + k]
    want = (x @ reference(w1, DType.q4_0).T) * (x @ reference(w2, DType.q8_0).T) + x @ w3.T
    assert_close(y.numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("sizing", STAGED[:3], ids=STAGED_IDS[:3])
def test_staged_group_of_a_float16_row(
    sizing: tuple[int, int, int], rng: np.random.Generator, device, monkeypatch
) -> None:
    """A float16 row and norm ("nr"): the staged row scaled by 1 / rms and rounded to float16 in place."""
    if not device.caps.shader_f16:
        pytest.skip("no shader-f16")
    staged_on(monkeypatch, *sizing)
    k = 160
    w1, w2 = weights(rng, 19, k), weights(rng, 19, k)
    x, norm = rng.standard_normal((1, k)).astype(np.float16), (1 + 0.1 * rng.standard_normal(k)).astype(np.float16)

    def project() -> tr.Tensor:
        h = tr.nn.rms_norm(tr.tensor(x), tr.tensor(norm), 1e-5)
        return tr.nn.linear(h, tr.quantize(w1, tr.q4_0)) + tr.nn.linear(h, tr.quantize(w2, tr.q8_0))

    y = project()
    ((kernel, variant, _),) = group_kernels(y)
    assert (kernel, variant.split(":")[-2:][0], variant.split(":")[-1].startswith("staged")) == (
        "gemv_multi",
        "nr",
        True,
    )
    hn = rms(x.astype(np.float32), norm.astype(np.float32)).astype(np.float16).astype(np.float64)  # as stored
    want = hn @ reference(w1, DType.q4_0).T + hn @ reference(w2, DType.q8_0).T
    assert y.dtype is tr.float16
    assert_close(y.numpy().astype(np.float32), want, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("copy", [False, True])
def test_staged_group_mixing_parts_and_side_writes(copy: bool, rng: np.random.Generator, monkeypatch) -> None:
    """The root part beside a side write, with or without a copy of the old cache: 8 units a workgroup
    in both parts (2 + 1 workgroups), every element lands right."""
    staged_on(monkeypatch, 64, 8, 1)
    k, n, m, ctx, pos = 64, 10, 8, 5, 3
    w1, w2, norm = weights(rng, n, k), weights(rng, m, k), rng.standard_normal(k).astype(np.float32)
    x, cache = rng.standard_normal((1, k)).astype(np.float32), rng.standard_normal((ctx, m)).astype(np.float32)
    t_cache = tr.tensor(cache)

    def step() -> tuple[tr.Tensor, ...]:
        old = t_cache[1:3].copy() if copy else None
        h = tr.nn.rms_norm(tr.tensor(x), tr.tensor(norm), 1e-5)
        y = tr.nn.linear(h, tr.quantize(w1, tr.q4_0))
        t_cache.index_write(tr.nn.linear(h, tr.quantize(w2, tr.q8_0)), (pos, 0))
        return (y,) if old is None else (y, old * 2.0)

    outs = step()
    group = [d for d in tr.compile(*outs, t_cache).dispatches if d.kernel != "elementwise"]
    assert [(d.kernel, ":staged8u1" in d.variant, d.workgroup_count) for d in group] == [
        ("gemv_multi", True, (3, 1, 1))
    ]
    hn = rms(x, norm)
    assert_close(outs[0].numpy(), hn @ reference(w1, DType.q4_0).T, rtol=1e-4, atol=1e-4)
    want = cache.copy()
    want[pos] = (hn @ reference(w2, DType.q8_0).T)[0]
    assert_close(t_cache.numpy(), want, rtol=1e-4, atol=1e-4)
    if copy:
        assert_close(outs[1].numpy(), cache[1:3] * 2.0, rtol=0, atol=0)


@pytest.mark.parametrize("dt", FORMATS)
def test_staged_head_with_its_norm_and_bias(dt: DType, rng: np.random.Generator, monkeypatch) -> None:
    """The final norm, a quantized projection of 50 columns and a bias: 4 workgroups of 16 units."""
    staged_on(monkeypatch)
    k, n = 96, 50
    w, norm, bias = weights(rng, n, k), rng.standard_normal(k).astype(np.float32), weights(rng, 1, n)[0]
    x = rng.standard_normal((1, 1, k)).astype(np.float32)

    def head() -> tr.Tensor:
        h = tr.nn.rms_norm(tr.tensor(x), tr.tensor(norm), 1e-6)
        return tr.nn.linear(h, tr.quantize(w, dt), tr.tensor(bias)).reshape(1, n)

    y = head()
    program = tr.compile(y)
    assert [(d.kernel, ":staged" in d.variant, d.workgroup_count) for d in program.dispatches] == [
        ("gemv_multi", True, (4, 1, 1))
    ]
    assert "the row staged in workgroup memory" in str(tr.explain(y))
    assert_close(y.numpy(), rms(x[0], norm, 1e-6) @ reference(w, dt).T + bias, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("least,group,count", [(2, 4, 2), (3, 8, 3), (6, 16, 6), (100, 64, 23)])
def test_staged_groups_widen_to_fill_the_gpu(
    least: int, group: int, count: int, rng: np.random.Generator, monkeypatch
) -> None:
    """GEMV_STAGED_MIN_WORKGROUPS: 23 units at 16 a workgroup (64 threads, groups of 4) make 2 workgroups;
    asking for more doubles the groups (8 units a workgroup: 3, 4 units: 6, ... one unit of 64 threads)."""
    from passes import select_kernels as sk

    staged_on(monkeypatch, 64, 4, 2)
    monkeypatch.setattr(sk, "GEMV_STAGED_MIN_WORKGROUPS", least)
    k = 544
    w1, w2, norm = weights(rng, 23, k), weights(rng, 23, k), rng.standard_normal(k).astype(np.float32)
    x = rng.standard_normal((1, k)).astype(np.float32)

    def swiglu() -> tr.Tensor:
        h = tr.nn.rms_norm(tr.tensor(x), tr.tensor(norm), 1e-5)
        return tr.nn.linear(h, tr.quantize(w1, tr.q8_0)).silu() * tr.nn.linear(h, tr.quantize(w2, tr.q4_0))

    y = swiglu()
    (d,) = tr.compile(y).dispatches
    assert (f":staged{group}u2" in d.variant, d.workgroup_count) == (True, (count, 1, 1))
    a, b = rms(x, norm) @ reference(w1, DType.q8_0).T, rms(x, norm) @ reference(w2, DType.q4_0).T
    assert_close(y.numpy(), a / (1 + np.exp(-a)) * b, rtol=1e-4, atol=1e-4)


def test_staged_falls_back_past_workgroup_memory(rng: np.random.Generator, monkeypatch) -> None:
    """A row longer than workgroup memory holds: today's blocks layout, same values."""
    from tests.test_kernels_perf_variants import run_with_caps

    staged_on(monkeypatch)
    k = 1024
    w1, w2, x = weights(rng, 9, k), weights(rng, 9, k), rng.standard_normal((1, k)).astype(np.float32)
    norm = rng.standard_normal(k).astype(np.float32)

    def pair() -> tr.Tensor:
        h = tr.nn.rms_norm(tr.tensor(x), tr.tensor(norm), 1e-5)
        return tr.nn.linear(h, tr.quantize(w1, tr.q4_0)) * tr.nn.linear(h, tr.quantize(w2, tr.q8_0))

    got, program = run_with_caps(pair(), max_workgroup_storage=4096)
    assert [(d.kernel, ":blocks" in d.variant) for d in program.dispatches] == [("gemv_multi", True)]
    want = (rms(x, norm) @ reference(w1, DType.q4_0).T) * (rms(x, norm) @ reference(w2, DType.q8_0).T)
    assert_close(got, want, rtol=1e-4, atol=1e-4)
