"""Dead-code elimination: keep only the nodes the outputs need."""

from __future__ import annotations

from ir.caps import DeviceCaps
from ir.graph import Graph


def dce(graph: Graph, caps: DeviceCaps) -> Graph:
    live: set[int] = set(graph.outputs)
    for node in reversed(list(graph)):
        if node.id in live:
            live.update(node.srcs)
    return graph.with_nodes(n for n in graph if n.id in live)
