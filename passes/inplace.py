"""In-place execution: let a kernel write over one of its operands' buffers.

DESIGN.md's rule. A node may overwrite operand i when: its kernel allows it
(`Kernel.inplace_operands`: elementwise any operand, index_write only the tensor written
into; a kernel with `inplace_exclusive` also needs that no other operand reads that
buffer at all); the operand reads its buffer through the identity view;
that buffer holds the same dtype and size; it is not a graph output, nor an input that
anything outside the graph can still see (`InputArg.donatable`); and no node after this
one reads that buffer, directly or through any view. Chains share one buffer.
"""

from __future__ import annotations

from dataclasses import replace

from backend_wgpu.kernels import kernel_class
from ir.caps import DeviceCaps
from ir.graph import Graph
from ir.node import Node
from ir.ops import Op
from passes.fold_views import view_of_operand


def buffer_owner(graph: Graph, node_id: int, owner_of: dict[int, int]) -> int:
    """The node whose buffer holds node_id's value, following views and in-place chains."""
    node = graph[node_id]
    if node.op is Op.VIEW:
        node_id = node.srcs[0]
    return owner_of.get(node_id, node_id)


def inplace(graph: Graph, caps: DeviceCaps) -> Graph:
    order = list(graph.nodes)
    position = {nid: i for i, nid in enumerate(order)}
    owner_of: dict[int, int] = {}  # node -> the node that owns its buffer (after in-place)
    outputs = set(graph.outputs)

    # last position at which each buffer owner is read (through views too); updated as
    # in-place chains merge buffers
    last_read: dict[int, int] = {}
    for node in graph:
        for s in node.srcs:
            owner = buffer_owner(graph, s, {})
            last_read[owner] = max(last_read.get(owner, -1), position[node.id])

    nodes: list[Node] = []
    for node in graph:
        # a side write of passes.fuse_gemv comes with its operand: its group's kernel writes it in place
        preset = node.inplace
        choice = preset if preset is not None else _pick_operand(graph, node, position, last_read, owner_of, outputs)
        if choice is not None:
            target = buffer_owner(graph, node.srcs[choice], owner_of)
            owner_of[node.id] = target
            node = replace(node, inplace=choice)
            last_read[target] = max(last_read.get(target, -1), last_read.get(node.id, -1))
        nodes.append(node)
    return graph.with_nodes(nodes)


def _pick_operand(
    graph: Graph,
    node: Node,
    position: dict[int, int],
    last_read: dict[int, int],
    owner_of: dict[int, int],
    outputs: set[int],
) -> int | None:
    if node.kernel is None or node.size == 0:
        return None
    kernel = kernel_class(node.kernel.name)
    here = position[node.id]
    for i in kernel.inplace_operands(node):
        s = node.srcs[i]
        base, view = view_of_operand(graph, s)
        if not view.is_identity or base.dtype != node.dtype or base.size != node.size:
            continue
        if base.id in outputs or (base.op is Op.INPUT and not base.arg.donatable):
            continue
        owner = owner_of.get(base.id, base.id)
        if owner in outputs or (graph[owner].op is Op.INPUT and not graph[owner].arg.donatable):
            continue
        if any(last_read.get(o, -1) > here for o in _sharing(owner, owner_of)):
            continue
        # every other operand on the same buffer must read it element for element too
        if any(
            buffer_owner(graph, t, owner_of) == owner
            and (kernel.inplace_exclusive or not view_of_operand(graph, t)[1].is_identity)
            for j, t in enumerate(node.srcs)
            if j != i
        ):
            continue
        return i
    return None


def _sharing(owner: int, owner_of: dict[int, int]) -> list[int]:
    """Every node whose value lives in `owner`'s buffer (the owner and its in-place chain)."""
    return [owner] + [n for n, o in owner_of.items() if o == owner]
