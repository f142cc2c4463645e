"""Attention: softmax(q k^T * scale + mask) v as one op (its kernel: backend_wgpu/kernels/attention).

srcs q (B, H, Lq, E), k (B, Hkv, S, E), v (B, Hkv, S, Ev), then the operands its
ir.ops.AttentionArg names (a mask broadcast to (B, H, Lq, S), a scale and a fill scalar);
the result is (..., Lq, Ev) with B * H rows of Lq queries. q, k and v share one float dtype
(the tracer casts them); a mask keeps its own (bool, or float for an additive mask).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ir.optable.record import Dtypes, Kind, OpDef

if TYPE_CHECKING:
    from ir.node import Node


def _attention(node: Node, args: list[np.ndarray]) -> np.ndarray:
    """In float64. A query that sees no key (all masked, or causal with Lq > S) gives NaN, as the
    composed softmax does; with no keys at all (S == 0) the result is 0, the empty sum."""
    arg = node.arg
    q, k, v = (a.astype(np.float64) for a in args[:3])
    k, v = np.repeat(k, arg.group, axis=1), np.repeat(v, arg.group, axis=1)  # kv head h // group
    s = (q @ np.swapaxes(k, -1, -2)) * arg.scale
    if arg.scale_by:
        c = np.float64(args[arg.operand("scale")].reshape(-1)[0])
        s = s * c if arg.scale_by == "mul" else s / c
    lq, n = s.shape[-2:]
    if n == 0:
        return np.zeros(q.shape[:-1] + v.shape[-1:])
    if arg.mask == "bool":
        keep = args[3].astype(bool) != arg.hide
        fill = np.float64(args[arg.operand("fill")].reshape(-1)[0]) if arg.fill else -np.inf
        s = np.where(keep, s, fill)
    elif arg.mask == "add":
        s = s + args[3].astype(np.float64)
    if arg.causal:
        s = np.where(np.arange(n)[None, :] <= np.arange(lq)[:, None] + (n - lq), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


ATTENTION = OpDef(
    "attention",
    Kind.OTHER,
    None,
    Dtypes(frozenset({"float"}), hint="attention takes float q, k and v; cast with astype()"),
    "softmax(q k^T * scale + mask) v; arg: AttentionArg",
    evaluate=_attention,
)
