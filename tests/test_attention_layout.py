"""passes.attention_layout: attention whose heads are merged right after is stored (B, Lq, H, Ev), no copy."""

from __future__ import annotations

import numpy as np
import pytest

import tracer as tr
from backend_wgpu import get_device
from ir.interpret import interpret
from ir.ops import Op
from passes import run_pipeline
from passes.attention_layout import attention_layout
from passes.fold_views import fold_views
from tests.test_attention import check_arrays, np_attention, randn
from tracer.graph_builder import build_graph

pytestmark = pytest.mark.gpu


def merged_heads(q: tr.Tensor, k: tr.Tensor, v: tr.Tensor, **kw: object) -> tr.Tensor:
    """A transformer layer's attention and head merge: (B, H, L, E) -> (B, L, H * E)."""
    o = tr.nn.scaled_dot_product_attention(q, k, v, **kw)
    b, h, lq, e = o.shape
    return o.transpose(1, 2).reshape(b, lq, h * e)


def np_merged(o: np.ndarray) -> np.ndarray:
    b, h, lq, e = o.shape
    return o.transpose(0, 2, 1, 3).reshape(b, lq, h * e)


@pytest.mark.parametrize(
    "b,h,hkv,lq,s,e,ev,dtype,causal,masked",
    [
        (2, 3, 3, 37, 45, 32, 32, "float32", False, False),  # partial row and key blocks
        (1, 4, 4, 70, 70, 64, 64, "float32", True, False),
        (2, 4, 2, 19, 33, 16, 16, "float32", True, True),  # grouped-query, a padding mask
        (1, 2, 2, 9, 12, 12, 6, "float32", False, False),  # Ev not a multiple of 4: scalar stores
        (2, 2, 2, 24, 24, 32, 32, "float16", True, False),
    ],
)
def test_merged_heads_are_stored_in_place_of_the_copy(
    b: int, h: int, hkv: int, lq: int, s: int, e: int, ev: int, dtype: str, causal: bool, masked: bool,
    rng: np.random.Generator,
) -> None:  # fmt: skip
    q, k, v = (
        randn(rng, b, h, lq, e, dtype=dtype),
        randn(rng, b, hkv, s, e, dtype=dtype),
        randn(rng, b, hkv, s, ev, dtype=dtype),
    )
    keep = None
    if masked:
        keep = np.ones((b, 1, 1, s), bool)
        keep[1, ..., s - s // 3 :] = False
    mask = None if keep is None else tr.tensor(keep)
    y = merged_heads(tr.tensor(q), tr.tensor(k), tr.tensor(v), mask=mask, is_causal=causal)
    dispatches = tr.compile(y).dispatches
    assert [d.kernel for d in dispatches] == ["flash_attention"], dispatches  # no copy after it
    assert dispatches[0].variant.endswith(".bshd"), dispatches[0].variant
    assert "heads inside rows" in str(tr.explain(y))
    want = np_merged(np_attention(q, k, v, keep, causal=causal))
    check_arrays(y.numpy(), want, tol=2e-6 if dtype == "float32" else 2e-3)


def test_the_rewrite_and_the_interpreter(rng: np.random.Generator) -> None:
    """ATTENTION, its transposed VIEW and the COPY become one ATTENTION with the COPY's id and shape; the
    reference interpreter gives the same values before and after the pass."""
    q, k, v = randn(rng, 2, 3, 10, 8), randn(rng, 2, 3, 14, 8), randn(rng, 2, 3, 14, 8)
    y = merged_heads(tr.tensor(q), tr.tensor(k), tr.tensor(v), is_causal=True)
    built = build_graph([y._lazy])
    caps = get_device().caps
    before = fold_views(built.graph, caps)
    after = attention_layout(before, caps)
    copies = [n for n in before if n.op is Op.COPY]
    (copy,) = [n for n in copies if before[before[n.srcs[0]].srcs[0]].op is Op.ATTENTION]
    (a,) = [n for n in after if n.op is Op.ATTENTION]
    assert a.id == copy.id and a.shape == (2, 10, 3, 8) and a.arg.heads_inner
    assert len([n for n in after if n.op is Op.COPY]) == len(copies) - 1 and len(after) == len(before) - 2
    inputs = [lz.host for lz in built.inputs]
    (x,), (z,) = interpret(before, inputs), interpret(after, inputs)
    np.testing.assert_array_equal(x, z)
    np.testing.assert_allclose(z, np_merged(np_attention(q, k, v, causal=True)), rtol=1e-6, atol=1e-6)


def test_attention_read_elsewhere_keeps_its_layout(rng: np.random.Generator) -> None:
    """The attention's own value is wanted too (a second output): it stays (B, H, Lq, Ev) and the copy stays."""
    q, k, v = randn(rng, 1, 2, 12, 8), randn(rng, 1, 2, 12, 8), randn(rng, 1, 2, 12, 8)
    o = tr.nn.scaled_dot_product_attention(tr.tensor(q), tr.tensor(k), tr.tensor(v))
    merged = o.transpose(1, 2).reshape(1, 12, 16)
    kernels = [d.kernel for d in tr.compile(o, merged).dispatches]
    assert kernels == ["flash_attention", "elementwise"], kernels
    tr.realize(o, merged)
    want = np_attention(q, k, v)
    check_arrays(o.numpy(), want)
    check_arrays(merged.numpy(), np_merged(want))


def test_other_transposes_are_not_folded(rng: np.random.Generator) -> None:
    """Only the head merge (0, 2, 1, 3) is stored in place: a copy of another permutation stays a copy."""
    q, k, v = randn(rng, 2, 3, 5, 8), randn(rng, 2, 3, 5, 8), randn(rng, 2, 3, 5, 8)
    o = tr.nn.scaled_dot_product_attention(tr.tensor(q), tr.tensor(k), tr.tensor(v))
    y = o.permute(1, 0, 2, 3).reshape(3, 2 * 5 * 8)
    graph = run_pipeline(build_graph([y._lazy]).graph, get_device().caps).graph
    (a,) = [n for n in graph if n.op is Op.ATTENTION]
    assert not a.arg.heads_inner
    check_arrays(y.numpy(), np_attention(q, k, v).transpose(1, 0, 2, 3).reshape(3, 80))
