"""passes.dequantize_wide: quantized weights read by many rows become a float copy and a float GEMM."""

from __future__ import annotations

import numpy as np
import pytest

import tracer as tr
from backend_wgpu import get_device
from ir.ops import Op
from passes.dequantize_wide import dequantize_wide, many_rows
from passes.fold_views import fold_views
from tests.helpers import kernels_of
from tracer.graph_builder import build_graph

gguf = pytest.importorskip("gguf", reason="quantizing needs the gguf package (pip install 'wgjit[gguf]')")
pytestmark = pytest.mark.gpu


def reference(w: np.ndarray, dt: str) -> np.ndarray:
    t = gguf.GGMLQuantizationType[dt.upper()]
    return gguf.quants.dequantize(gguf.quants.quantize(w, t), t).reshape(w.shape)


def test_a_prefill_and_a_decode_row_of_one_weight(rng: np.random.Generator) -> None:
    """200 rows (a float copy and a float GEMM) and one row (qgemv, the blocks themselves) of the same weight,
    with a bias, in one program: both against numpy, and the pass leaves the one-row product alone."""
    assert many_rows(200, 96) and not many_rows(1, 96) and not many_rows(16, 96)
    w = rng.standard_normal((96, 64)).astype(np.float32)
    x, v, bias = (rng.standard_normal(s).astype(np.float32) for s in ((200, 64), (1, 64), (96,)))
    q, b = tr.quantize(w, tr.q4_0), tr.tensor(bias)
    wide, row = tr.nn.linear(tr.tensor(x), q, b), tr.nn.linear(tr.tensor(v), q, b)
    ref = reference(w, "q4_0")
    names = [d.kernel for d in tr.compile(wide, row).dispatches]
    assert "dequant" in names and "qgemv" in names and not {"qgemm", "qgemm_thin"} & set(names)
    assert "a float copy for a product of many rows (passes.dequantize_wide" in str(tr.explain(wide, row))
    tr.realize(wide, row)
    np.testing.assert_allclose(wide.numpy(), x @ ref.T + bias, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(row.numpy(), v @ ref.T + bias, rtol=1e-4, atol=1e-4)


def test_the_rewrite_and_the_interpreter(rng: np.random.Generator) -> None:
    """The matmul reads a CAST of the weight through a view of its own; the reference interpreter gives the
    same values before and after the pass."""
    from ir.interpret import interpret

    w = rng.standard_normal((40, 32)).astype(np.float32)
    x = rng.standard_normal((150, 32)).astype(np.float32)
    y = tr.tensor(x) @ tr.quantize(w, tr.q8_0).T
    built = build_graph([y._lazy])
    caps = get_device().caps
    before = fold_views(built.graph, caps)
    after = dequantize_wide(before, caps)
    (mm,) = [n for n in after if n.op is Op.MATMUL]
    view = after[mm.srcs[1]]
    cast = after[view.srcs[0]]
    assert (
        view.op is Op.VIEW and cast.op is Op.CAST and cast.dtype is tr.float32 and after[cast.srcs[0]].dtype is tr.q8_0
    )
    inputs = [lz.host for lz in built.inputs]
    (a,), (b,) = interpret(before, inputs), interpret(after, inputs)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(b, x @ reference(w, "q8_0").T, rtol=1e-5, atol=1e-5)


def test_a_weight_past_the_limit_keeps_qgemm(rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    import passes.dequantize_wide as pass_module

    monkeypatch.setattr(pass_module, "DEQUANTIZE_MAX_BYTES", 24 * 64 * 4 - 1)  # one byte short of the copy
    w = rng.standard_normal((24, 64)).astype(np.float32)
    x = rng.standard_normal((140, 64)).astype(np.float32)
    y = tr.tensor(x) @ tr.quantize(w, tr.q4_0).T
    assert [k for k, _, _ in kernels_of(y)] == ["qgemm"]
    np.testing.assert_allclose(y.numpy(), x @ reference(w, "q4_0").T, rtol=1e-4, atol=1e-4)
