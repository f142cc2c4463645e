"""Schedule: the dispatch order, one kernel per node that computes something.

The graph's node order is already a valid topological order that the in-place and memory
passes relied on, so the schedule keeps it; empty outputs dispatch nothing, nor do the
values another node's kernel writes (a `done_by` kernel param: passes.fuse_gemv's side writes).
"""

from __future__ import annotations

from dataclasses import replace

from ir.caps import DeviceCaps
from ir.graph import Graph, Schedule


def schedule(graph: Graph, caps: DeviceCaps) -> Graph:
    dispatches = tuple(n.id for n in graph if n.kernel is not None and n.size > 0 and n.kernel.param("done_by") is None)
    slots = graph.schedule.slots if graph.schedule is not None else ()
    out = graph.with_nodes(graph)
    out.schedule = replace(Schedule(dispatches, slots))
    return out
