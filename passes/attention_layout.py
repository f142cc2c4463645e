"""Attention stored the way its reader wants it: (B, Lq, H, Ev) instead of a transpose and a copy.

A transformer layer merges the heads after attention, `o.transpose(1, 2).reshape(B, L, H * E)`,
and that reshape of a transposed view needs a contiguous copy: after fold_views it reads

    a = ATTENTION(q, k, v, ...)          (B, H, Lq, Ev)
    t = VIEW(a)                          (B, Lq, H, Ev), a's contiguous strides permuted (0, 2, 1, 3)
    c = COPY(t)                          (B, Lq, H, Ev), contiguous

Where a and t are read only by the next step (and are not graph outputs), the three become one
ATTENTION with AttentionArg.heads_inner that takes c's id and shape: the flash kernel writes each
query row's heads side by side, and the copy (a dispatch and a pass over the output: ~5 us a
layer for MiniLM at 32x128 on the H200) is gone. Attention that the decode kernel runs (one query
row: its transpose is already contiguous) is left alone. It runs after split_attention, which
leaves only attention with several query rows as ATTENTION, and before select_kernels.
"""

from __future__ import annotations

import dataclasses

from ir.caps import DeviceCaps
from ir.graph import Graph
from ir.node import Node
from ir.ops import Op
from ir.view import View
from passes.select_kernels import decode_attention_plan

HEADS_INNER = (0, 2, 1, 3)  # (B, H, Lq, Ev) -> (B, Lq, H, Ev)


def attention_layout(graph: Graph, caps: DeviceCaps) -> Graph:
    folded = {c.id: a for c in graph if (a := _folded_attention(graph, c, caps)) is not None}
    if not folded:
        return graph
    gone = {a.id for a in folded.values()} | {graph[c].srcs[0] for c in folded}
    nodes: list[Node] = []
    for node in graph:
        if node.id in gone:
            continue
        a = folded.get(node.id)
        if a is None:
            nodes.append(node)
            continue
        arg = dataclasses.replace(a.arg, heads_inner=True)
        nodes.append(Node(node.id, Op.ATTENTION, a.srcs, node.shape, node.dtype, arg, label=a.label or node.label))
    return graph.with_nodes(nodes)


def _folded_attention(graph: Graph, copy: Node, caps: DeviceCaps) -> Node | None:
    """The ATTENTION node whose transposed view `copy` copies, when the three can become one."""
    if copy.op is not Op.COPY:
        return None
    view = graph[copy.srcs[0]]
    if view.op is not Op.VIEW or not view.srcs:
        return None
    a = graph[view.srcs[0]]
    if a.op is not Op.ATTENTION or a.arg.heads_inner or a.dtype is not copy.dtype or len(a.shape) != 4:
        return None
    if view.arg != View.contiguous(a.shape).permute(HEADS_INNER):
        return None
    only_read_here = graph.consumers(a.id) == [view.id] and graph.consumers(view.id) == [copy.id]
    if not only_read_here or {a.id, view.id} & set(graph.outputs):
        return None
    return a if decode_attention_plan(graph, a, caps) is None else None
