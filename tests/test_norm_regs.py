"""norm_regs: norms of contiguous rows held in registers, and the groups they are the core of.

BERT's `layer_norm(x @ W.T + b + residual)` with the product split along k runs as two kernels:
the partial products, then one norm whose prologue sums the chunks and adds bias and residual
(passes.split_k sums few chunks with adds of their views; passes.fuse makes the norm a core).
Values are checked against numpy in float64 and the reference interpreter on the fused graph.
"""

from __future__ import annotations

import numpy as np
import pytest

import tracer as tr
from backend_wgpu import get_device
from ir.interpret import interpret
from ir.ops import Op
from passes import run_pipeline
from passes import select_kernels as sk
from passes.pipeline import default_pipeline
from tests.helpers import assert_close, kernel_kinds
from tracer.graph_builder import build_graph

pytestmark = pytest.mark.gpu


def np_layer_norm(x: np.ndarray, w: np.ndarray | None = None, b: np.ndarray | None = None) -> np.ndarray:
    x = x.astype(np.float64)
    dev = x - x.mean(-1, keepdims=True)
    y = dev / np.sqrt((dev * dev).mean(-1, keepdims=True) + 1e-5)
    return y * (1 if w is None else w) + (0 if b is None else b)


def np_rms_norm(x: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
    x = x.astype(np.float64)
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) * (1 if w is None else w)


def fused_graph_agrees(y: tr.Tensor) -> None:
    """The interpreter on the compiled (fused) graph equals the interpreter on the traced one (y not yet run)."""
    built = build_graph([y._lazy])
    inputs = [tr.Tensor(lz).numpy() for lz in built.inputs]
    fused = run_pipeline(built.graph, get_device().caps, passes=default_pipeline(fusion=True)).graph
    assert any(n.op is Op.FUSED for n in fused)
    assert_close(interpret(fused, inputs)[0], interpret(built.graph, inputs)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [1, 3, 6, 8, 130, 384, 2048, 8192])
@pytest.mark.parametrize("kind", ["layer_norm", "rms_norm"])
def test_row_lengths(rng: np.random.Generator, n: int, kind: str) -> None:
    """Every row length the registers hold: 1..8 elements a thread, scalars, vec2 and vec4."""
    x = (rng.standard_normal((5, n)) * 3 + 2).astype(np.float32)
    w = rng.standard_normal(n).astype(np.float32)
    if kind == "layer_norm":
        y, want = tr.nn.layer_norm(tr.tensor(x), tr.tensor(w), eps=1e-5), np_layer_norm(x, w)
    else:
        y, want = tr.nn.rms_norm(tr.tensor(x), tr.tensor(w), eps=1e-5), np_rms_norm(x, w)
    ((kernel, _, _),) = kernel_kinds(y)
    assert kernel == "norm_regs"
    assert_close(y.numpy(), want.astype(np.float32), rtol=1e-5, atol=3e-5)


def test_rows_too_long_for_registers_stream(rng: np.random.Generator) -> None:
    x = rng.standard_normal((2, 16384)).astype(np.float32)  # 16 vec4 a thread at 256 threads
    y = tr.nn.layer_norm(tr.tensor(x))
    assert kernel_kinds(y) == [("norm", "layer_norm,w0,b0", 4)]
    assert_close(y.numpy(), np_layer_norm(x).astype(np.float32), atol=3e-5)


def test_prologue_and_epilogue_are_one_kernel(rng: np.random.Generator) -> None:
    x, r = rng.standard_normal((2, 3, 96)).astype(np.float32), rng.standard_normal((2, 3, 96)).astype(np.float32)
    w, b = rng.standard_normal(96).astype(np.float32), rng.standard_normal(96).astype(np.float32)
    y = (tr.nn.layer_norm(tr.tensor(x) * 2.0 + tr.tensor(r), tr.tensor(w), tr.tensor(b)) * 3.0).gelu()
    assert [k for k, _, _ in kernel_kinds(y)] == ["norm_regs"]
    h = np_layer_norm(x * 2.0 + r, w, b) * 3
    want = h * 0.5 * (1 + np.vectorize(__import__("math").erf)(h / np.sqrt(2)))
    fused_graph_agrees(y)
    assert_close(y.numpy(), want.astype(np.float32), rtol=1e-5, atol=3e-5)


def test_float16_prologue(rng: np.random.Generator) -> None:
    x = (rng.standard_normal((4, 64)) * 4 + 10).astype(np.float16)
    r = rng.standard_normal((4, 64)).astype(np.float16)
    y = tr.nn.rms_norm(tr.tensor(x) + tr.tensor(r))
    assert [k for k, _, _ in kernel_kinds(y)] == ["norm_regs"]
    # the add is rounded to float16 as its node is (numpy's float16 add), the norm computed in float32
    assert_close(y.numpy().astype(np.float64), np_rms_norm(x + r), rtol=2e-3, atol=2e-3)


def test_split_k_sum_bias_and_residual_fold_into_the_norm(monkeypatch: pytest.MonkeyPatch) -> None:
    """MiniLM's down projection and its layer norm: a k split in two (the rule's thresholds lowered to a
    small shape), bias, residual, then layer_norm: the partial products, and one norm_regs for the rest."""
    monkeypatch.setattr(sk, "THIN_TILES", 4)
    monkeypatch.setattr(sk, "THIN_MIN_FLOPS", 1)
    monkeypatch.setattr(sk, "MID_ROWS", 64)
    monkeypatch.setattr(sk, "MID_K", 256)
    monkeypatch.setenv("WGJIT_AUTOTUNE", "0")
    rng = np.random.default_rng(5)
    x, wt = rng.standard_normal((256, 512)).astype(np.float32), (rng.standard_normal((96, 512)) / 20).astype(np.float32)
    bias, res = rng.standard_normal(96).astype(np.float32), rng.standard_normal((256, 96)).astype(np.float32)
    g, beta = rng.standard_normal(96).astype(np.float32), rng.standard_normal(96).astype(np.float32)
    # the sum is written inline: a Tensor still held (h = ...) would be a graph output, stored
    y = tr.nn.layer_norm(
        tr.nn.linear(tr.tensor(x), tr.tensor(wt), tr.tensor(bias)) + tr.tensor(res), tr.tensor(g), tr.tensor(beta)
    )
    program = tr.compile(y)
    assert [d.kernel for d in program.dispatches] == ["gemm_blocked", "norm_regs"], program.summary()
    norm = program.dispatches[-1]
    assert "add.add.add.layer_norm" in norm.variant, program.summary()
    want = np_layer_norm(x.astype(np.float64) @ wt.T + bias + res, g, beta)
    fused_graph_agrees(y)
    assert_close(y.numpy(), want.astype(np.float32), rtol=1e-4, atol=1e-4)


def test_a_computed_weight_is_read_by_the_core_not_the_prologue(rng: np.random.Generator) -> None:
    """The prologue computes x only: a weight made by an elementwise op is stored and read whole."""
    x, w = rng.standard_normal((3, 40)).astype(np.float32), rng.standard_normal(40).astype(np.float32)
    y = tr.nn.layer_norm(tr.tensor(x) + 1.0, tr.tensor(w) * 2.0)
    kinds = [k for k, _, _ in kernel_kinds(y)]
    assert kinds == ["elementwise", "norm_regs"]
    fused_graph_agrees(y)
    assert_close(y.numpy(), np_layer_norm(x + 1.0, w * 2.0).astype(np.float32), rtol=1e-5, atol=3e-5)


def test_the_same_value_as_x_and_weight(rng: np.random.Generator) -> None:
    """x's prologue and the weight read one leaf: it is not fused then, and the values stay right."""
    v = rng.standard_normal(24).astype(np.float32)
    t = tr.tensor(v)
    y = tr.nn.rms_norm((t * 3.0).reshape(1, 24), t)
    assert_close(y.numpy(), np_rms_norm((v * 3.0).reshape(1, 24), v).astype(np.float32), rtol=1e-5, atol=3e-5)
