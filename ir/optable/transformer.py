"""Transformer ops with kernels of their own: rope, attention, and flash-decoding's two halves.

Their kernels live in backend_wgpu/kernels/rope and backend_wgpu/kernels/attention; here are
their references (float64 for attention, float32 for rope, as the kernels compute).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ir.optable.record import Dtypes, Kind, OpDef

if TYPE_CHECKING:
    from ir.node import Node

_FLOAT = Dtypes(frozenset({"float"}), float_only=True)


# --- rope: srcs x (..., d), cos, sin (x.shape[:-1] + (d/2,)); arg: RopeArg -----------------------


def _rope(node: Node, args: list[np.ndarray]) -> np.ndarray:
    """Each pair (a, b) of x becomes (a cos - b sin, b cos + a sin), in float32."""
    x, cos, sin = (a.astype(np.float32) for a in args)
    half = x.shape[-1] // 2
    a, b = (x[..., 0::2], x[..., 1::2]) if node.arg.interleaved else (x[..., :half], x[..., half:])
    first, second = a * cos - b * sin, b * cos + a * sin
    if node.arg.interleaved:
        return np.stack([first, second], axis=-1).reshape(x.shape)
    return np.concatenate([first, second], axis=-1)


ROPE = OpDef(
    "rope",
    Kind.OTHER,
    3,
    _FLOAT,
    "x's pairs rotated by the angles cos and sin (rotary position embedding)",
    evaluate=_rope,
)


# --- attention: srcs q (B, H, Lq, E), k (B, Hkv, S, E), v (B, Hkv, S, Ev)[, mask]; arg: AttentionArg -----


LOG2E = 1.4426950408889634


def _scores(args: list[np.ndarray], arg: object) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(scores, seen, v with kv heads repeated) in float64: q k^T * scale (then times or divided by a
    scalar operand), the mask (added, or a bool mask hiding keys, or giving them a fill score), and
    which keys count. The products and their scaling are rounded as the flash kernel computes them,
    in float32 (the dot product, times scale * log2(e) and the scalar operand), so scores overflow to
    inf where its do (q = 1e30 against k = 1e30); the rest is float64."""
    q, k, v = (a.astype(np.float64) for a in args[:3])
    if arg.length is not None:  # only the first `length` keys exist
        k, v = k[..., : arg.length, :], v[..., : arg.length, :]
    k, v = np.repeat(k, arg.group, axis=1), np.repeat(v, arg.group, axis=1)  # kv head h // group
    scale2 = np.float32(arg.scale * LOG2E)
    if arg.scale_by:
        c = np.float32(args[arg.operand("scale")].reshape(-1)[0])
        with np.errstate(all="ignore"):
            scale2 = scale2 * c if arg.scale_by == "mul" else scale2 / c
    with np.errstate(all="ignore"):
        s = ((q @ np.swapaxes(k, -1, -2)).astype(np.float32) * scale2).astype(np.float64) / LOG2E
    lq, n = s.shape[-2:]
    seen = np.ones(s.shape, bool)
    if arg.causal:
        seen &= np.arange(n)[None, :] <= np.arange(lq)[:, None] + (n - lq)
    if arg.mask == "bool":
        keep = args[3].astype(bool) != arg.hide
        if arg.fill:  # a hidden key still counts, with the fill operand as its score
            s = np.where(keep, s, np.float64(args[arg.operand("fill")].reshape(-1)[0]))
        else:
            seen &= keep
    elif arg.mask == "add":
        s = s + args[3].astype(np.float64)
    return np.where(seen, s, -np.inf), seen, v


def _attention(node: Node, args: list[np.ndarray]) -> np.ndarray:
    """softmax(q k^T * scale + mask) v; a query that sees no key is NaN, no keys at all (S == 0) give 0."""
    s, _, v = _scores(args, node.arg)
    if s.shape[-1] == 0:
        out = np.zeros(s.shape[:-1] + v.shape[-1:])
    else:
        p = np.exp(s - s.max(-1, keepdims=True))
        out = (p / p.sum(-1, keepdims=True)) @ v
    return np.swapaxes(out, 1, 2) if node.arg.heads_inner else out  # (B, Lq, H, Ev)


# srcs q (B, H, Lq, E), k (B, Hkv, S, E), v (B, Hkv, S, Ev), then the operands AttentionArg names
# (a mask broadcast to (B, H, Lq, S), a scale and a fill scalar); q, k and v share one float dtype
ATTENTION = OpDef(
    "attention",
    Kind.OTHER,
    None,
    Dtypes(frozenset({"float"}), hint="attention takes float q, k and v; cast with astype()"),
    "softmax(q k^T * scale + mask) v; arg: AttentionArg",
    evaluate=_attention,
)


def _attention_splits(node: Node, args: list[np.ndarray]) -> np.ndarray:
    """Per key range of ceil(S / splits): sum(exp(s - m) v), m = the range's max score, sum(exp(s - m)).

    A range with no key, or whose keys are all masked, gives (0, -inf, 0).
    """
    splits = node.arg.splits
    s, _, v = _scores(args, node.arg.attention)
    n, ev = s.shape[-1], v.shape[-1]
    out = np.zeros(s.shape[:-1] + (splits, ev + 2))
    out[..., ev] = -np.inf
    chunk = -(-n // splits)
    for i in range(splits):
        lo, hi = min(i * chunk, n), min((i + 1) * chunk, n)
        if hi == lo:
            continue
        part = s[..., lo:hi]
        m = part.max(-1, keepdims=True)
        p = np.where(m == -np.inf, 0.0, np.exp(part - np.where(m == -np.inf, 0.0, m)))
        out[..., i, :ev] = p @ v[..., lo:hi, :]
        out[..., i, ev] = m[..., 0]
        out[..., i, ev + 1] = p.sum(-1)
    return out


# srcs as ATTENTION; arg: SplitsArg; out float32 (B, H, Lq, splits, Ev + 2)
ATTENTION_SPLITS = OpDef(
    "attention_splits", Kind.OTHER, None, _FLOAT, "attention's key ranges: partial sums and softmax statistics",
    evaluate=_attention_splits,
)  # fmt: skip


def _attention_combine(node: Node, args: list[np.ndarray]) -> np.ndarray:
    """The ranges rescaled to their common max and added; a row that saw no key is NaN (0 / 0)."""
    p = args[0].astype(np.float64)
    ev = p.shape[-1] - 2
    m = p[..., ev]
    top = m.max(-1, keepdims=True)
    w = np.where(m == -np.inf, 0.0, np.exp(m - np.where(top == -np.inf, 0.0, top)))
    total = (w * p[..., ev + 1]).sum(-1)[..., None]
    return (w[..., None] * p[..., :ev]).sum(-2) / total


# srcs: the ATTENTION_SPLITS; out (B, H, Lq, Ev)
ATTENTION_COMBINE = OpDef(
    "attention_combine", Kind.OTHER, 1, _FLOAT, "attention's key ranges added up", evaluate=_attention_combine
)
