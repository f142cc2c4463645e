"""The graph: nodes by id in topological order, outputs, and a networkx view of the edges.

Operand order lives on the nodes (`Node.srcs`); the networkx DiGraph only records who
feeds whom, for ordering, reachability and drawing. Passes never mutate a Graph in place:
`with_nodes` returns a new one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from ir.node import Node


@dataclass(frozen=True)
class Schedule:
    """The order of dispatches and the buffers they use, from passes.schedule."""

    dispatches: tuple[int, ...]  # node ids that run a kernel, in order
    slots: tuple[SlotInfo, ...]  # buffer slots; Node.slot indexes this


@dataclass(frozen=True)
class SlotInfo:
    kind: str  # "input" | "output" | "temp"
    nbytes: int
    index: int  # input index, output index, or temp pool index
    offset: int | None = None  # a temp in the program's arena buffer: its byte offset there (passes.plan_memory)


@dataclass
class Graph:
    nodes: dict[int, Node]  # insertion order is a topological order
    outputs: tuple[int, ...]
    schedule: Schedule | None = None
    _nx: nx.DiGraph | None = field(default=None, repr=False)

    # --- construction -------------------------------------------------------------
    def with_nodes(self, nodes: Iterable[Node], outputs: tuple[int, ...] | None = None) -> Graph:
        """A new graph with these nodes (topologically ordered) and the same or new outputs."""
        return Graph({n.id: n for n in nodes}, self.outputs if outputs is None else outputs, self.schedule)

    def replace(self, node: Node) -> Graph:
        """A new graph where the node with `node.id` is replaced (annotation by replacement)."""
        nodes = dict(self.nodes)
        nodes[node.id] = node
        return Graph(nodes, self.outputs, self.schedule)

    def next_id(self) -> int:
        return max(self.nodes, default=-1) + 1

    # --- queries ------------------------------------------------------------------
    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes.values())

    def __len__(self) -> int:
        return len(self.nodes)

    def __getitem__(self, node_id: int) -> Node:
        return self.nodes[node_id]

    @property
    def nx(self) -> nx.DiGraph:
        """Edges src -> consumer (one edge however many times a source is used)."""
        if self._nx is None:
            g = nx.DiGraph()
            for n in self.nodes.values():
                g.add_node(n.id)
                for s in n.srcs:
                    g.add_edge(s, n.id)
            self._nx = g
        return self._nx

    def consumers(self, node_id: int) -> list[int]:
        return sorted(self.nx.successors(node_id))

    def inputs(self) -> list[Node]:
        from ir.ops import Op

        return sorted((n for n in self if n.op is Op.INPUT), key=lambda n: n.arg.index)

    def structural_key(self) -> str:
        """A hash of everything that decides the compiled program, but not buffer contents."""
        pos = {nid: i for i, nid in enumerate(self.nodes)}
        h = hashlib.sha256()
        for n in self.nodes.values():
            h.update(
                repr((n.op.value, tuple(pos[s] for s in n.srcs), n.shape, n.dtype.value, _arg_key(n.arg))).encode()
            )
        h.update(repr(tuple(pos[o] for o in self.outputs)).encode())
        return h.hexdigest()[:24]

    def __repr__(self) -> str:
        return f"<Graph {len(self.nodes)} nodes, outputs {', '.join(f'%{o}' for o in self.outputs)}>"

    def __str__(self) -> str:
        from ir.printer import format_graph

        return format_graph(self)

    # --- notebook display (ir.display runs Graphviz when installed, else shows text) --
    def to_dot(self, title: str = "") -> str:
        from ir.dot import to_dot

        return to_dot(self, title=title)

    def _repr_html_(self) -> str:
        from ir.display import graph_html

        return graph_html(self)

    def _repr_svg_(self) -> str | None:
        from ir.display import inline_svg, render_svg

        svg = render_svg(self.to_dot())
        return None if svg is None else inline_svg(svg)


def _arg_key(arg: Any) -> Any:
    return arg if not hasattr(arg, "__dataclass_fields__") else repr(arg)
