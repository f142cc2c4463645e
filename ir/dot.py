"""A graph as Graphviz DOT text: one box per node, data edges, in-place and buffer-reuse edges.

Pure text, no Graphviz needed to produce it. What each node shows: its id and op, dtype and
shape, and once the passes annotated it, the kernel with its variant and KernelElement
width and its buffer slot. Edge styles (the legend the HTML report repeats):

- solid black: a node reads another's value;
- dashed grey: a VIEW reads its base buffer (no kernel runs);
- bold red, labelled "in-place": the consumer overwrites this operand's buffer;
- dotted blue, labelled "reuses slotN": the memory plan gave a later node the same buffer
  slot as an earlier, dead one (no data flows along it).

Nodes can be grouped into clusters (fused groups, for instance) by any key: pass
`clusters` as a mapping node id -> group name or a function of the node. By default a node
joins the cluster named by its KernelChoice's "group" (or "fused_group") parameter.

A FUSED node (passes.fuse) is drawn as the nodes it holds (ir.fusion.FusedArg.terms, with
their original ids and edges) in one cluster named after the kernel; the last of them has
the FUSED node's id and carries its kernel, slot and in-place annotations.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from ir.ops import NO_KERNEL, Op

if TYPE_CHECKING:
    from ir.graph import Graph
    from ir.node import Node

ClusterKey = Mapping[int, str] | Callable[["Node"], str | None] | None

INPLACE_STYLE = 'color="#c0392b", penwidth=2.5, fontcolor="#c0392b", label="in-place"'
VIEW_STYLE = 'style=dashed, color="#7f8c8d"'
REUSE_STYLE = 'style=dotted, color="#2471a3", fontcolor="#2471a3", constraint=false, arrowhead=none'


def default_cluster(node: Node) -> str | None:
    """The fused group a node belongs to, read from its kernel choice's parameters."""
    if node.kernel is None:
        return None
    group = node.kernel.param("group", node.kernel.param("fused_group"))
    return None if group is None else str(group)


def quote(text: str) -> str:
    """A DOT double-quoted string (newlines become centred line breaks)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def shape_text(shape: tuple[int, ...]) -> str:
    return "x".join(str(d) for d in shape) or "scalar"


def node_label(node: Node, extra: str = "") -> str:
    lines = [f"%{node.id} {node.op.value}", f"{node.dtype.value}[{shape_text(node.shape)}]"]
    if node.kernel is not None:
        lines.append(node.kernel.label())
    if node.slot is not None:
        where = f"slot{node.slot}"
        if node.inplace is not None:
            where += f" (in-place on %{node.srcs[node.inplace]})"
        lines.append(where)
    if node.label:
        lines.append(node.label)
    if extra:
        lines.append(extra)
    return "\n".join(lines)


def _node_attrs(node: Node, is_output: bool) -> str:
    if node.op is Op.INPUT:
        style = 'shape=box, style="rounded,filled", fillcolor="#d6eaf8"'
    elif node.op in NO_KERNEL:
        style = 'shape=box, style="rounded,dashed", color="#7f8c8d"'
    elif node.inplace is not None:
        style = 'shape=box, style=filled, fillcolor="#fadbd8"'
    else:
        style = 'shape=box, style=filled, fillcolor="#fdfefe"'
    if is_output:
        style += ", peripheries=2"
    return style


def _reuse_pairs(graph: Graph) -> list[tuple[int, int, int]]:
    """(earlier, later, slot) for consecutive memory owners of one slot not linked in place."""
    last_owner: dict[int, int] = {}
    pairs = []
    for node in graph:
        if node.slot is None or node.op is Op.VIEW:
            continue
        prev = last_owner.get(node.slot)
        if prev is not None and node.inplace is None:
            pairs.append((prev, node.id, node.slot))
        last_owner[node.slot] = node.id
    return pairs


def _drawn(graph: Graph) -> list[tuple[Node, str | None, str]]:
    """(node to draw, its fused cluster or None, an extra label line) with FUSED nodes expanded."""
    out: list[tuple[Node, str | None, str]] = []
    for node in graph:
        if node.op is not Op.FUSED:
            out.append((node, None, ""))
            continue
        terms = node.arg.terms
        cluster = f"fused %{node.id}: {len(terms)} nodes, one {node.kernel.name if node.kernel else ''} kernel"
        for t in terms[:-1]:
            out.append((t, cluster, ""))
        note = f"in-place on %{node.srcs[node.inplace]}" if node.inplace is not None else ""
        root = replace(terms[-1], kernel=node.kernel, slot=node.slot, inplace=None)
        out.append((root, cluster, note))
    return out


def to_dot(
    graph: Graph, title: str = "", clusters: ClusterKey = default_cluster, extra: Mapping[int, str] | None = None
) -> str:
    """The DOT text of a graph; `extra` adds one line of text to some nodes' labels."""
    extra = extra or {}
    outputs = set(graph.outputs)
    key: Callable[[Node], str | None]
    if clusters is None:
        key = lambda n: None  # noqa: E731
    elif isinstance(clusters, Mapping):
        key = lambda n: clusters.get(n.id)  # noqa: E731
    else:
        key = clusters

    lines = [
        "digraph wgjit {",
        "  rankdir=TB;",
        '  node [fontname="Helvetica", fontsize=10];',
        '  edge [fontname="Helvetica", fontsize=9];',
    ]
    if title:
        lines.append(f"  label={quote(title)}; labelloc=t;")
    groups: dict[str, list[tuple[Node, str]]] = {}
    drawn = _drawn(graph)
    for node, fused, note in drawn:
        group = fused if fused is not None else key(node)
        if group is not None:
            groups.setdefault(group, []).append((node, note))
            continue
        lines.append(
            f"  n{node.id} [label={quote(node_label(node, extra.get(node.id, '')))}, {_node_attrs(node, node.id in outputs)}];"
        )
    for i, (group, members) in enumerate(groups.items()):
        lines.append(f"  subgraph cluster_{i} {{")
        lines.append(f'    label={quote(group)}; style="rounded,filled"; fillcolor="#fef9e7"; color="#b7950b";')
        for node, note in members:
            text = "\n".join(t for t in (note, extra.get(node.id, "")) if t)
            lines.append(
                f"    n{node.id} [label={quote(node_label(node, text))}, {_node_attrs(node, node.id in outputs)}];"
            )
        lines.append("  }")
    for node in graph:
        if node.op is Op.FUSED:  # the edges of the nodes it holds, and the buffer it overwrites
            for t in node.arg.terms:
                style = f" [{VIEW_STYLE}]" if t.op is Op.VIEW else ""
                lines.extend(f"  n{s} -> n{t.id}{style};" for s in t.srcs)
            if node.inplace is not None:
                lines.append(f"  n{node.srcs[node.inplace]} -> n{node.id} [{INPLACE_STYLE}];")
            continue
        for i, s in enumerate(node.srcs):
            if node.inplace == i:
                attrs = f" [{INPLACE_STYLE}]"
            elif node.op is Op.VIEW:
                attrs = f" [{VIEW_STYLE}]"
            else:
                attrs = ""
            lines.append(f"  n{s} -> n{node.id}{attrs};")
    for a, b, slot in _reuse_pairs(graph):
        lines.append(f'  n{a} -> n{b} [{REUSE_STYLE}, label="reuses slot{slot}"];')
    lines.append("}")
    return "\n".join(lines) + "\n"
