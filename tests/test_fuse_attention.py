"""passes.fuse_attention: attention written by hand becomes one flash_attention dispatch.

Each pattern the pass documents is written as users write it (inside a function, so the
intermediates are not kept) and checked three ways: the dispatches (one, the attention),
the GPU values against float64 numpy, and ir.interpret before and after every pass. The
graphs the pass must leave alone (an intermediate kept, two masks, log_softmax, a head dim
past the kernel's) keep their matmul and softmax dispatches.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import tracer as tr
from backend_wgpu import get_device
from ir.interpret import interpret
from passes import run_pipeline
from tests.test_attention import check, np_attention, randn
from tests.test_fuzz import host_value
from tracer.graph_builder import build_graph

pytestmark = pytest.mark.gpu


def ops_of(y: tr.Tensor) -> list[str]:
    return [d.op for d in tr.compile(y).dispatches]


def stages_agree(y: tr.Tensor) -> None:
    """ir.interpret gives the same values before and after every pass (the rewrite changes rounding only)."""
    built = build_graph([y._lazy])
    inputs = [host_value(lz) for lz in built.inputs]
    stages = run_pipeline(built.graph, get_device().caps, keep=True).stages
    first = interpret(stages[0][1], inputs)[0]
    for name, g in stages[1:]:
        np.testing.assert_allclose(interpret(g, inputs)[0], first, rtol=1e-5, atol=1e-6, err_msg=name)


def attend(q: tr.Tensor, k: tr.Tensor, v: tr.Tensor, style: str, mask: tr.Tensor | None = None) -> tr.Tensor:
    """Attention written by hand in one of the documented styles."""
    d = q.shape[-1]
    kt = k.swapaxes(-2, -1)
    if style == "mul":
        s = (q @ kt) * (1 / math.sqrt(d))
    elif style == "div":
        s = (q @ kt) / math.sqrt(d)
    elif style == "prescaled":
        s = (q * (1 / math.sqrt(d))) @ kt
    else:  # unscaled
        s = q @ kt
    if mask is not None and mask.dtype is tr.bool:
        s = tr.where(mask, s, float("-inf")) if style != "div" else s.masked_fill(~mask, float("-inf"))
    elif mask is not None:
        s = s + mask
    return s.softmax(-1) @ v


@pytest.mark.parametrize("style", ["mul", "div", "prescaled", "unscaled"])
@pytest.mark.parametrize("mask", [None, "bool", "add"])
def test_hand_written_attention_is_one_dispatch(style: str, mask: str | None, rng: np.random.Generator) -> None:
    q, k, v = randn(rng, 2, 3, 9, 16), randn(rng, 2, 3, 11, 16), randn(rng, 2, 3, 11, 8)
    m = None
    if mask == "bool":
        m = rng.random((2, 1, 1, 11)) > 0.3
        m[..., 0] = True
    elif mask == "add":
        m = rng.standard_normal((2, 3, 9, 11)).astype(np.float32)
        m[m < -1] = -np.inf
        m[..., 0] = 0
    y = attend(*(tr.tensor(a) for a in (q, k, v)), style, None if m is None else tr.tensor(m))
    assert ops_of(y) == ["attention"], tr.compile(y).summary()
    scale = 1.0 if style == "unscaled" else None
    stages_agree(y)
    check(y, np_attention(q, k, v, m, scale=scale), tol=1e-5)


def test_finite_fill_hides_keys_without_nan(rng: np.random.Generator) -> None:
    # masked_fill with -1e9 (as many models write it): a row that sees nothing averages v, no NaN
    q, k, v = randn(rng, 1, 2, 4, 8), randn(rng, 1, 2, 6, 8), randn(rng, 1, 2, 6, 8)
    keep = rng.random((1, 2, 4, 6)) > 0.5
    keep[0, 0, 1] = False
    s = (tr.tensor(q) @ tr.tensor(k).swapaxes(-2, -1)) * 0.35
    y = s.masked_fill(~tr.tensor(keep), -1e9).softmax(-1) @ tr.tensor(v)
    del s
    assert ops_of(y) == ["attention"]
    scores = np.where(keep, q.astype(np.float64) @ np.swapaxes(k, -1, -2) * 0.35, -1e9)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ v
    assert np.allclose(want[0, 0, 1], v[0, 0].mean(0))
    check(y, want, tol=1e-5)


def test_hand_written_grouped_query(rng: np.random.Generator) -> None:
    # q (B, Hkv, G, L, E) against k, v (B, Hkv, 1, S, E): the stride-0 kv dim becomes the group
    q, k, v = randn(rng, 2, 2, 3, 5, 8), randn(rng, 2, 2, 1, 7, 8), randn(rng, 2, 2, 1, 7, 8)
    Q, K, V = (tr.tensor(a) for a in (q, k, v))
    y = ((Q @ K.swapaxes(-2, -1)) * 0.3).softmax(-1) @ V
    assert ops_of(y) == ["attention"]
    (d,) = tr.compile(y).dispatches
    assert dict(d.metadata)["group"] == 3
    want = np_attention(q.reshape(2, 6, 5, 8), k[:, :, 0], v[:, :, 0], scale=0.3).reshape(2, 2, 3, 5, 8)
    stages_agree(y)
    check(y, want, tol=1e-5)


def test_three_d_batch(rng: np.random.Generator) -> None:
    q, k, v = randn(rng, 6, 5, 8), randn(rng, 6, 7, 8), randn(rng, 6, 7, 4)
    y = attend(*(tr.tensor(a) for a in (q, k, v)), "mul")
    assert ops_of(y) == ["attention"]
    check(y, np_attention(q, k, v), tol=1e-5)


# --- graphs the pass leaves alone ------------------------------------------------------------------


def test_kept_scores_are_not_fused(rng: np.random.Generator) -> None:
    q, k, v = (tr.tensor(randn(rng, 1, 2, 5, 8)) for _ in range(3))
    s = (q @ k.swapaxes(-2, -1)) * 0.3
    p = s.softmax(-1)
    y = p @ v
    assert "attention" not in ops_of(y) and "matmul" in ops_of(y)  # p is still held: it must exist
    del p
    assert "attention" not in ops_of(y)  # s is held too
    del s
    assert ops_of(y) == ["attention"]


def test_two_masks_are_not_fused(rng: np.random.Generator) -> None:
    q, k, v = (tr.tensor(randn(rng, 1, 2, 5, 8)) for _ in range(3))
    a = tr.tensor(rng.standard_normal((5, 5)).astype(np.float32))
    b = tr.tensor(rng.standard_normal((5, 5)).astype(np.float32))
    y = ((q @ k.swapaxes(-2, -1)) + a + b).softmax(-1) @ v
    assert "attention" not in ops_of(y)


def test_log_softmax_and_wide_heads_are_not_fused(rng: np.random.Generator) -> None:
    q, k, v = (tr.tensor(randn(rng, 1, 1, 3, 8)) for _ in range(3))
    y = (q @ k.swapaxes(-2, -1)).log_softmax(-1) @ v
    assert "attention" not in ops_of(y)
    wide = tr.tensor(randn(rng, 1, 1, 3, 600))
    y = (wide @ wide.swapaxes(-2, -1)).softmax(-1) @ wide
    assert "attention" not in ops_of(y)


def test_explain_says_why(rng: np.random.Generator) -> None:
    q, k, v = (tr.tensor(randn(rng, 1, 2, 5, 8)) for _ in range(3))
    y = attend(q, k, v, "div", tr.tensor(np.ones((1, 1, 1, 5), bool)))
    text = str(tr.explain(y))
    assert "1 dispatches" in text and "flash_attention" in text and "one dispatch:" in text
