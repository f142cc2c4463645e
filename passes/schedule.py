"""Schedule: the dispatch order, one kernel per node that computes something.

The graph's node order is already a valid topological order that the in-place and memory
passes relied on, so the schedule keeps it; empty outputs dispatch nothing, nor do the
values another node's kernel writes (a `done_by` kernel param: passes.fuse_gemv's side writes),
nor a copy that passes.inplace let write over its operand: in-place needs the operand's identity
view of a buffer of the same dtype and size, so those bytes are the copy already (fold_views copies
every output that is a view: a reshaped output, such as a decoder's (1, vocab) logits, was a
dispatch of its own that copied a buffer onto itself, 3.8 us of the ~1B step on the H200, run Q).
"""

from __future__ import annotations

from dataclasses import replace

from ir.caps import DeviceCaps
from ir.graph import Graph, Schedule
from ir.node import Node
from ir.ops import Op


def schedule(graph: Graph, caps: DeviceCaps) -> Graph:
    dispatches = tuple(n.id for n in graph if _computes(n))
    slots = graph.schedule.slots if graph.schedule is not None else ()
    out = graph.with_nodes(graph)
    out.schedule = replace(Schedule(dispatches, slots))
    return out


def _computes(node: Node) -> bool:
    """Does the node need a dispatch of its own?"""
    if node.kernel is None or node.size == 0 or node.kernel.param("done_by") is not None:
        return False
    return not (node.op is Op.COPY and node.inplace is not None)  # an in-place copy: its bytes are there
