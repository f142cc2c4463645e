"""Flash attention's operands and output laid out the way its loads and its reader want them.

The output: a transformer layer merges the heads after attention,
`o.transpose(1, 2).reshape(B, L, H * E)`, and that reshape of a transposed view needs a contiguous
copy: after fold_views it reads

    a = ATTENTION(q, k, v, ...)          (B, H, Lq, Ev)
    t = VIEW(a)                          (B, Lq, H, Ev), a's contiguous strides permuted (0, 2, 1, 3)
    c = COPY(t)                          (B, Lq, H, Ev), contiguous

Where a and t are read only by the next step (and are not graph outputs), the three become one
ATTENTION with AttentionArg.heads_inner that takes c's id and shape: the flash kernel writes each
query row's heads side by side, and the copy (a dispatch and a pass over the output: ~5 us a
layer for MiniLM at 32x128 on the H200) is gone.

q: the flash kernel reads each thread's 4 query rows at one head dim for every block of keys; from
q as (B, H, Lq, E) those are 4 memory lines, from q^T (B, H, E, Lq) one vec4. For attention of at
least Q_TRANSPOSED_MIN_ROWS query rows (a multiple of 4) this pass copies q once into q^T and gives
the attention a transposed view of it (the kernel's `t4` loads). On the H200 a causal 1x32x2048x128
spent a quarter of its time on q's loads (benchmarks/runs/2026-12-02-X/attention_q_loads.txt: 1.234 ms,
0.919 with each warp's q loads made to fall in one line); the copy costs one pass over q.

Attention that the decode kernel runs (one query row) is left alone. The pass runs after
split_attention, which leaves only attention with several query rows as ATTENTION, and before
select_kernels, which sees the transposed q and picks the `t4` loads.
"""

from __future__ import annotations

import dataclasses

from backend_wgpu.element import vector_readable
from ir.caps import DeviceCaps
from ir.graph import Graph
from ir.node import Node
from ir.ops import Q_TRANSPOSED_LABEL, Op
from ir.view import View
from passes.fold_views import view_of_operand
from passes.select_kernels import decode_attention_plan

HEADS_INNER = (0, 2, 1, 3)  # (B, H, Lq, Ev) -> (B, Lq, H, Ev)
TRANSPOSED = (0, 1, 3, 2)  # (B, H, Lq, E) <-> (B, H, E, Lq)
# query rows from which q is copied transposed (H200 run X: causal 2048 rows 1.234 -> ~0.92 ms expected)
Q_TRANSPOSED_MIN_ROWS = 1024


def attention_layout(graph: Graph, caps: DeviceCaps) -> Graph:
    folded = {c.id: a for c in graph if (a := _folded_attention(graph, c, caps)) is not None}
    transpose_q = {n.id for n in graph if _reads_q_transposed(graph, n, caps)}
    if not folded and not transpose_q:
        return graph
    gone = {a.id for a in folded.values()} | {graph[c].srcs[0] for c in folded}
    nodes: list[Node] = []
    next_id = graph.next_id()
    for node in graph:
        if node.id in gone:
            continue
        a = folded.get(node.id)
        if a is not None:  # the copy's place: the attention, storing merged heads
            arg = dataclasses.replace(a.arg, heads_inner=True)
            node = Node(node.id, Op.ATTENTION, a.srcs, node.shape, node.dtype, arg, label=a.label or node.label)
        if node.id in transpose_q or (a is not None and a.id in transpose_q):
            owner, view = view_of_operand(graph, node.srcs[0])
            b, h, lq, e = view.shape
            read = Node(next_id, Op.VIEW, (owner.id,), (b, h, e, lq), owner.dtype, view.permute(TRANSPOSED))
            q_t = Node(next_id + 1, Op.COPY, (read.id,), read.shape, owner.dtype, label=Q_TRANSPOSED_LABEL)
            back = View.contiguous(q_t.shape).permute(TRANSPOSED)
            q = Node(next_id + 2, Op.VIEW, (q_t.id,), view.shape, owner.dtype, back)
            next_id += 3
            nodes += [read, q_t, q]
            node = dataclasses.replace(node, srcs=(q.id, *node.srcs[1:]))
        nodes.append(node)
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


def _reads_q_transposed(graph: Graph, node: Node, caps: DeviceCaps) -> bool:
    """An attention the flash kernel runs with vec4 loads of k and v, over enough query rows (a multiple
    of 4) for one copy of q to pay."""
    if node.op is not Op.ATTENTION or decode_attention_plan(graph, node, caps) is not None:
        return False
    q, k, v = (view_of_operand(graph, s)[1] for s in node.srcs[:3])
    lq = q.shape[2]
    if lq < Q_TRANSPOSED_MIN_ROWS or lq % 4 or q.strides[2] == 1:
        return False
    return all(x.strides[-1] == 1 and vector_readable(x, 4) for x in (k, v))
