"""Schedule: the dispatch order, one kernel per node that computes something.

The graph's node order is already a valid topological order that the in-place and memory
passes relied on, so the schedule keeps it; empty outputs dispatch nothing.
"""

from __future__ import annotations

from dataclasses import replace

from ir.caps import DeviceCaps
from ir.graph import Graph, Schedule


def schedule(graph: Graph, caps: DeviceCaps) -> Graph:
    dispatches = tuple(n.id for n in graph if n.kernel is not None and n.size > 0)
    slots = graph.schedule.slots if graph.schedule is not None else ()
    out = graph.with_nodes(graph)
    out.schedule = replace(Schedule(dispatches, slots))
    return out
