"""Lower movement ops (reshape, permute, expand, slice) to strided VIEWs of a real buffer.

After this pass every VIEW reads a node that owns memory (an input or a kernel's
output), chains of movement ops are composed into one View, a reshape that no stride
pattern can express first copies its source, and no output is a view (outputs are
always fresh, contiguous buffers).
"""

from __future__ import annotations

from ir.caps import DeviceCaps
from ir.graph import Graph
from ir.node import Node
from ir.ops import MOVEMENT, Op
from ir.view import View


def fold_views(graph: Graph, caps: DeviceCaps) -> Graph:
    out: dict[int, Node] = {}
    next_id = graph.next_id()
    views: dict[int, tuple[int, View]] = {}  # view node id -> (base id, view)

    def base_view(src_id: int) -> tuple[int, View]:
        if src_id in views:
            return views[src_id]
        return src_id, View.contiguous(out[src_id].shape)

    for node in graph:
        if node.op not in MOVEMENT and node.op is not Op.VIEW:
            out[node.id] = node
            continue
        base, view = base_view(node.srcs[0])
        if node.op is Op.VIEW:
            new = _compose(view, node.arg)
        elif node.op is Op.RESHAPE:
            new = view.reshape(node.shape)
            if new is None:  # not expressible as strides: materialize the source first
                copy = Node(next_id, Op.COPY, (node.srcs[0],), out[node.srcs[0]].shape, node.dtype)
                out[copy.id] = copy
                next_id += 1
                base, new = copy.id, View.contiguous(node.shape)
        elif node.op is Op.PERMUTE:
            new = view.permute(node.arg)
        elif node.op is Op.EXPAND:
            new = view.expand(node.shape)
        else:  # SLICE
            new = view.slice(node.arg)
        views[node.id] = (base, new)
        out[node.id] = Node(node.id, Op.VIEW, (base,), node.shape, node.dtype, new, label=node.label)

    outputs = []
    for o in graph.outputs:
        if out[o].op is Op.VIEW:
            copy = Node(next_id, Op.COPY, (o,), out[o].shape, out[o].dtype)
            out[copy.id] = copy
            next_id += 1
            outputs.append(copy.id)
        else:
            outputs.append(o)
    # drop views nobody reads any more (their consumers now read the composed view)
    g = Graph(_toposort(out), tuple(outputs), ints=graph.ints)
    return _drop_unread_views(g)


def _compose(outer: View, inner: View) -> View:
    """A VIEW arg is relative to its source's own contiguous layout; rebase onto `outer`."""
    if outer.is_identity:
        return inner
    # element k of the source buffer, in outer's logical order, lives at outer's address of k
    # This only happens when a pass re-runs on an already folded graph: the sources of VIEWs
    # are then owners, so outer is the identity. Anything else is a bug.
    raise AssertionError(f"fold_views: cannot compose a view onto non-identity view {outer}")


def _toposort(nodes: dict[int, Node]) -> dict[int, Node]:
    # Inserted copies got ids above the rest; order by dependencies, stable in id order.
    ordered: dict[int, Node] = {}
    pending = sorted(nodes.values(), key=lambda n: n.id)
    placed: set[int] = set()

    def place(n: Node) -> None:
        stack = [n]
        while stack:
            cur = stack[-1]
            missing = [s for s in cur.srcs if s not in placed]
            if missing:
                stack.extend(nodes[m] for m in missing)
                continue
            stack.pop()
            if cur.id not in placed:
                placed.add(cur.id)
                ordered[cur.id] = cur

    for n in pending:
        place(n)
    return ordered


def _drop_unread_views(graph: Graph) -> Graph:
    read: set[int] = set(graph.outputs)
    for n in graph:
        read.update(n.srcs)
    return graph.with_nodes(n for n in graph if n.op is not Op.VIEW or n.id in read)


def view_of_operand(graph: Graph, src_id: int) -> tuple[Node, View]:
    """The buffer-owning node an operand reads and the view through which it reads it."""
    src = graph[src_id]
    if src.op is Op.VIEW:
        return graph[src.srcs[0]], src.arg
    return src, View.contiguous(src.shape)
