"""Attention written by hand becomes one Op.ATTENTION node (the flash kernel: one dispatch).

The pattern, after fold_views (every operand a VIEW of a buffer owner, or the owner):

    scores = q @ kT                      MATMUL; kT a view of k with its last two axes swapped
    [scores = scores * c | scores / c]   MUL or DIV by a scalar c (a view of one element), or
                                         q pre-scaled: q = x * c feeding the MATMUL
    [scores = scores + mask]             ADD of a float mask, or
    [scores = where(keep, scores, f)]    WHERE with a bool condition and a scalar fill f,
    [scores = where(hide, f, scores)]    either way round (masked_fill's sense; a NOT read only
                                         here is absorbed: where(~keep, f, scores))
    p = softmax(scores)                  SOFTMAX over the last axis
    out = p @ v                          MATMUL, p read directly (not through a view)

It is rewritten when all of these hold (otherwise the graph is left as it was):
  - every intermediate (the scores at each step, the probabilities, a pre-scaled q) is read
    only by the next step and is not a graph output, so nothing else needs it in memory;
  - q, k and v have one float dtype, and both head dims are at most ATTENTION_MAX_HEAD_DIM;
  - there are at most max_fused_keys(head dim) keys (the flash kernel's walk stays within the
    loop budget some adapters impose, backend_wgpu.kernel.LOOP_BUDGET);
  - the batch dims (B, H) can be read as 4-D views of q, k, v and the mask: leading batch
    dims merge into B (View.reshape), or a last batch dim that k and v broadcast (stride 0)
    merges into the heads as grouped-query attention (kv head h // group);
  - at most one mask step (two masks, e.g. causal and padding, leave the graph alone).
The attention node takes the second MATMUL's id, so its readers are unchanged; the scale
and fill scalars become operands (AttentionArg.scale_by, fill), read by the kernel at run time.
What changes is rounding only: the scores and probabilities stay in f32 registers instead
of being stored in the graph's dtype (closer to the exact value for float16 graphs), and a
pre-scaled q is scaled after the product ((q . k) c for (q c) . k).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from backend_wgpu.kernels.attention.flash import max_fused_keys
from ir.caps import DeviceCaps
from ir.graph import Graph
from ir.node import Node
from ir.ops import ATTENTION_MAX_HEAD_DIM, AttentionArg, Op
from ir.view import View
from passes.dce import dce
from passes.fold_views import view_of_operand


@dataclass(frozen=True)
class _Match:
    """The pieces of one attention pattern: node ids of its operands and what the steps did."""

    q: int
    k_t: int
    v: int
    mask: int | None = None
    mask_read: tuple[int, View] | None = None  # the mask read as (owner, view) instead (a NOT absorbed)
    mask_kind: str = "none"
    hide: bool = False
    fill: int | None = None
    scale: int | None = None
    scale_by: str = ""


def fuse_attention(graph: Graph, caps: DeviceCaps) -> Graph:
    readers: dict[int, int] = {}
    for node in graph:
        for s in node.srcs:
            readers[s] = readers.get(s, 0) + 1
    for o in graph.outputs:
        readers[o] = readers.get(o, 0) + 2  # an output is needed in memory whatever reads it

    def only_step(node_id: int) -> bool:
        return readers.get(node_id, 0) == 1

    nodes: list[Node] = []
    next_id = graph.next_id()
    changed = False
    for node in graph:
        match = _match(graph, node, only_step) if node.op is Op.MATMUL else None
        built = _attention_node(graph, node, match, next_id) if match else None
        if built is None:
            nodes.append(node)
            continue
        views, attention = built
        nodes.extend(views)
        nodes.append(attention)
        next_id += len(views)
        changed = True
    return dce(graph.with_nodes(nodes), caps) if changed else graph


def _match(graph: Graph, out: Node, only_step: Callable[[int], bool]) -> _Match | None:
    """The attention pattern ending in `out` (p @ v), or None."""
    p = graph[out.srcs[0]]
    if p.op is not Op.SOFTMAX or not only_step(p.id):
        return None
    x = graph[p.srcs[0]]
    scores, mask = _scores(graph, x.id, only_step), {}
    if scores is None and x.op is Op.ADD and only_step(x.id):
        for chain, m in ((x.srcs[0], x.srcs[1]), (x.srcs[1], x.srcs[0])):
            scores = _scores(graph, chain, only_step)
            if scores is not None and graph[m].dtype.is_float:
                mask = {"mask": m, "mask_kind": "add"}
                break
            scores = None
    elif scores is None and x.op is Op.WHERE and only_step(x.id):
        cond, a, b = x.srcs
        for chain, fill, hide in ((a, b, False), (b, a, True)):
            scores = _scores(graph, chain, only_step)
            if scores is not None and _scalar(graph, fill):
                mask = {"mask": cond, "mask_kind": "bool", "hide": hide, "fill": fill}
                keep = _negated(graph, cond, only_step)  # where(~keep, f, s): read keep itself
                if keep is not None:
                    mask.update(mask_read=keep, hide=not hide)
                break
            scores = None
    if scores is None:
        return None
    product, c, scale_by = scores
    q, k_t = graph[product].srcs
    pre = graph[q]
    if c is None and pre.op is Op.MUL and only_step(pre.id):  # (q * c) @ kT
        for operand, scalar in ((pre.srcs[0], pre.srcs[1]), (pre.srcs[1], pre.srcs[0])):
            if _scalar(graph, scalar) and not _scalar(graph, operand):
                q, c, scale_by = operand, scalar, "mul"
                break
    return _Match(q, k_t, out.srcs[1], scale=c, scale_by=scale_by, **mask)


def _scores(graph: Graph, node_id: int, only_step: Callable[[int], bool]) -> tuple[int, int | None, str] | None:
    """(the q @ kT MATMUL, the scalar that scales it, "mul"/"div"/"") when `node_id` is that
    product, maybe times or divided by a scalar, and each is read only by the next step."""
    node = graph[node_id]
    if not only_step(node_id):
        return None
    if node.op is Op.MATMUL:
        return node_id, None, ""
    if node.op not in (Op.MUL, Op.DIV):
        return None
    a, b = node.srcs
    pairs = ((a, b), (b, a)) if node.op is Op.MUL else ((a, b),)  # x / c only, never c / x
    for product, c in pairs:
        if graph[product].op is Op.MATMUL and only_step(product) and _scalar(graph, c):
            return product, c, "mul" if node.op is Op.MUL else "div"
    return None


def _negated(graph: Graph, cond: int, only_step: Callable[[int], bool]) -> tuple[int, View] | None:
    """(owner, view) that reads x where `cond` is NOT(x), maybe through a view, read only here."""
    node, view = graph[cond], None
    if node.op is Op.VIEW and only_step(cond):
        node, view = graph[node.srcs[0]], node.arg
    if node.op is not Op.NOT or not only_step(node.id):
        return None
    owner, inner = view_of_operand(graph, node.srcs[0])
    if view is None:
        return owner.id, inner
    # NOT wrote a contiguous copy of its operand; `view` reads that copy, so it reads the
    # operand's owner the same way only when the operand was the owner's plain layout
    return (owner.id, view) if inner.is_identity else None


def _scalar(graph: Graph, node_id: int) -> bool:
    """A view that reads one element everywhere (a broadcast python scalar)."""
    node = graph[node_id]
    if node.op is Op.VIEW:
        return all(s == 0 for s in node.arg.strides)
    return node.size == 1


def _attention_node(graph: Graph, out: Node, m: _Match, next_id: int) -> tuple[list[Node], Node] | None:
    """The VIEW nodes of the 4-D operands and the ATTENTION node (out's id), or None when illegal."""
    q_owner, q = view_of_operand(graph, m.q)
    k_owner, k_t = view_of_operand(graph, m.k_t)
    v_owner, v = view_of_operand(graph, m.v)
    k = k_t.permute(tuple(range(len(k_t.shape) - 2)) + (len(k_t.shape) - 1, len(k_t.shape) - 2))
    dtypes = {graph[s].dtype for s in (m.q, m.k_t, m.v)}
    if len(dtypes) != 1 or not out.dtype.is_float or out.dtype not in dtypes:
        return None
    if max(q.shape[-1], v.shape[-1]) > ATTENTION_MAX_HEAD_DIM:
        return None
    if k.shape[-2] > max_fused_keys(q.shape[-1]):  # the flash kernel's walk would pass the loop budget
        return None
    operands: list[tuple[Node, View]] = []
    mask_view = None
    if m.mask_read is not None:
        mask_view = graph[m.mask_read[0]], m.mask_read[1]
    elif m.mask is not None:
        mask_view = view_of_operand(graph, m.mask)
    four = _as_4d(q, k, v, mask_view[1] if mask_view else None)
    if four is None:
        return None
    (q4, k4, v4, mask4), group = four
    operands += [(q_owner, q4), (k_owner, k4), (v_owner, v4)]
    if mask_view is not None:
        operands.append((mask_view[0], mask4))
    for scalar in (m.scale, m.fill):
        if scalar is not None:
            owner, view = view_of_operand(graph, scalar)
            operands.append((owner, View((), (), view.offset)))
    views = [
        Node(next_id + i, Op.VIEW, (owner.id,), view.shape, owner.dtype, view)
        for i, (owner, view) in enumerate(operands)
    ]
    arg = AttentionArg(1.0, False, m.mask_kind, group, m.hide, m.fill is not None, m.scale_by)
    attention = Node(out.id, Op.ATTENTION, tuple(v.id for v in views), out.shape, out.dtype, arg, label=out.label)
    return views, attention


def _as_4d(q: View, k: View, v: View, mask: View | None) -> tuple[tuple[View, View, View, View | None], int] | None:
    """q, k, v and the mask as (B, H, rows, cols) views, and the group of query heads per kv head."""
    batch = q.shape[:-2]
    group = 1
    if len(batch) >= 2 and batch[-1] > 1 and k.strides[-3] == 0 and v.strides[-3] == 0:
        # k and v broadcast over the last batch dim: grouped-query attention, that dim joins the heads
        group = batch[-1]
        k, v = (View(x.shape[:-3] + x.shape[-2:], x.strides[:-3] + x.strides[-2:], x.offset) for x in (k, v))
        b, kv_heads = batch[:-2], batch[-2]
        heads = kv_heads * group
    else:
        b, kv_heads = batch[:-1], batch[-1] if batch else 1
        heads = kv_heads
    lead = 1
    for d in b:
        lead *= d

    def shaped(x: View | None, h: int) -> View | None:
        return None if x is None else x.reshape((lead, h) + x.shape[-2:])

    out = (shaped(q, heads), shaped(k, kv_heads), shaped(v, kv_heads), shaped(mask, heads))
    if any(x is None for x in out[:3]) or (mask is not None and out[3] is None):
        return None
    return out, group
