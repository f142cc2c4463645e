"""Turns the pending Lazies behind some tensors into an ir.Graph ready for the passes."""

from __future__ import annotations

from dataclasses import dataclass

from ir.graph import Graph
from ir.node import Node
from ir.ops import MOVEMENT, InputArg, Op
from tracer.lazy import Lazy


@dataclass
class BuiltGraph:
    graph: Graph
    inputs: list[Lazy]  # by InputArg.index
    outputs: list[Lazy]  # by position in graph.outputs


def build_graph(targets: list[Lazy]) -> BuiltGraph:
    """Collect every pending Lazy the targets need, in topological order.

    Besides the targets, a pending value becomes an output when something outside this
    graph can still see it (a live user Tensor, or a pending Lazy that is not part of
    this graph): it is computed now, once, and never recomputed later. A visible view
    (reshape, slice...) is not copied out: its base becomes the output instead, and the
    view stays a cheap lazy view of that buffer. What stays visible after the run is
    never donated to an in-place kernel.
    """
    order: list[Lazy] = []
    seen: set[int] = set()
    for t in targets:
        postorder(t, order, seen)
    members = {id(lz) for lz in order}
    target_ids = {id(t) for t in targets}

    outputs: list[Lazy] = list(dict.fromkeys(targets))
    output_ids = {id(lz) for lz in outputs}
    kept_leaves: set[int] = set()
    for lz in order:
        if lz.is_leaf or id(lz) in target_ids or not _visible_outside(lz, members):
            continue
        base = lz
        while base.op in MOVEMENT and not base.is_leaf:
            base = base.srcs[0]
        if base.is_leaf:
            kept_leaves.add(id(base))
        elif id(base) not in output_ids:
            outputs.append(base)
            output_ids.add(id(base))

    ids: dict[int, int] = {}
    nodes: list[Node] = []
    inputs: list[Lazy] = []
    for lz in order:
        nid = len(nodes)
        ids[id(lz)] = nid
        if lz.is_leaf:
            donatable = not lz.pinned and id(lz) not in kept_leaves and not _visible_outside(lz, members)
            arg = InputArg(len(inputs), donatable)
            inputs.append(lz)
            nodes.append(Node(nid, Op.INPUT, (), lz.shape, lz.dtype, arg))
        else:
            nodes.append(Node(nid, lz.op, tuple(ids[id(s)] for s in lz.srcs), lz.shape, lz.dtype, lz.arg))
    graph = Graph({n.id: n for n in nodes}, tuple(ids[id(lz)] for lz in outputs))
    return BuiltGraph(graph, inputs, outputs)


def _visible_outside(lz: Lazy, members: set[int]) -> bool:
    """A user Tensor shows it, or a pending Lazy outside the graph still reads it."""
    return lz.has_live_handle() or any(id(c) not in members for c in lz.live_consumers())


def postorder(root: Lazy, order: list[Lazy], seen: set[int]) -> None:
    """Append every Lazy `root` needs that is not in `seen` to `order`, sources first (leaves are not entered)."""
    # iterative DFS: user graphs can be deeper than Python's recursion limit
    stack: list[tuple[Lazy, bool]] = [(root, False)]
    while stack:
        lz, expanded = stack.pop()
        if id(lz) in seen:
            continue
        if expanded or lz.is_leaf:
            seen.add(id(lz))
            order.append(lz)
            continue
        stack.append((lz, True))
        for s in reversed(lz.srcs):
            if id(s) not in seen:
                stack.append((s, False))
