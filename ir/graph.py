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

from ir.dtypes import DType
from ir.node import Node
from ir.ops import Op


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
    # the runtime integers (ir.symbolic.Sym slots) the graph was traced with: ir.interpret's default.
    # Not part of the structure: a program runs with the values of each call.
    ints: tuple[int, ...] = ()

    # --- construction -------------------------------------------------------------
    def with_nodes(self, nodes: Iterable[Node], outputs: tuple[int, ...] | None = None) -> Graph:
        """A new graph with these nodes (topologically ordered) and the same or new outputs."""
        return Graph(
            {n.id: n for n in nodes}, self.outputs if outputs is None else outputs, self.schedule, ints=self.ints
        )

    def replace(self, node: Node) -> Graph:
        """A new graph where the node with `node.id` is replaced (annotation by replacement)."""
        nodes = dict(self.nodes)
        nodes[node.id] = node
        return Graph(nodes, self.outputs, self.schedule, ints=self.ints)

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
        return sorted((n for n in self if n.op is Op.INPUT), key=lambda n: n.arg.index)

    def structure(self) -> tuple:
        """Everything that decides the compiled program, but not buffer contents, as one hashable value.

        Equal for two graphs exactly when they compile to the same program; the program cache
        is keyed by it. tracer.graph_builder.walk computes the same value from the Lazies
        without building a Graph.
        """
        pos = {nid: i for i, nid in enumerate(self.nodes)}
        nodes = tuple(node_key(n.op, tuple([pos[s] for s in n.srcs]), n.shape, n.dtype, n.arg) for n in self)
        return (nodes, tuple([pos[o] for o in self.outputs]))

    def structural_key(self) -> str:
        """A short hash of structure(), for messages and tools."""
        return structure_hash(self.structure())

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


def node_key(op: Op, srcs: tuple[int, ...], shape: tuple[int, ...], dtype: DType, arg: Any) -> tuple:
    """One node of a structure (Graph.structure): sources by position; an INPUT by index and donatability.

    Ops and dtypes appear as their value strings (an Enum member hashes in Python, a str in
    C, once). Args are compared as values, except ARANGE's (start, step), compared by repr
    so that 0 and 0.0, or 0.0 and -0.0, stay apart: the uniform of a cached program holds them.
    """
    if op is Op.INPUT:
        return input_key(arg.index, arg.donatable, shape, dtype)
    return (op._value_, srcs, shape, dtype._value_, repr(arg) if op is Op.ARANGE else arg)


def input_key(index: int, donatable: bool, shape: tuple[int, ...], dtype: DType) -> tuple:
    """node_key of an INPUT node (InputArg(index, donatable)), without making the InputArg."""
    return ("input", index, donatable, shape, dtype._value_)


def structure_hash(structure: tuple) -> str:
    """A short stable text for a structure (the same on every run of the process)."""
    return hashlib.sha256(repr(structure).encode()).hexdigest()[:24]
