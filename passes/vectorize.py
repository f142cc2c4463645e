"""KernelElement: choose the widest element (vec4, vec2, scalar) each kernel can use.

Each kernel states its own rule (`Kernel.widest_element` over its operands' views, built
from the predicates in backend_wgpu/element.py); this pass asks it through the kernel
registry. A fused group gets one width: its core's rule, and every term and leaf of the
prologue (and of the epilogue, where the core evaluates it lanes at a time) read at it.
"""

from __future__ import annotations

from dataclasses import replace

from backend_wgpu.element import WIDTHS, vector_readable
from backend_wgpu.kernels import kernel_class
from ir.caps import DeviceCaps
from ir.fusion import FusedArg
from ir.graph import Graph
from ir.node import Node
from ir.ops import Op
from ir.view import View
from passes.fold_views import view_of_operand


def vectorize(graph: Graph, caps: DeviceCaps) -> Graph:
    nodes = []
    for node in graph:
        if node.kernel is None:
            nodes.append(node)
            continue
        width = _widest(graph, node)
        nodes.append(replace(node, kernel=replace(node.kernel, element=width)))
    return graph.with_nodes(nodes)


def _widest(graph: Graph, node: Node) -> int:
    if node.size == 0:
        return 1
    if node.op is Op.FUSED:
        views = [view_of_operand(graph, s)[1] for s in node.srcs]
        own = kernel_class(node.kernel.name).widest_group(node, views)
        return own if own is not None else _widest_fused(graph, node)
    return kernel_class(node.kernel.name).widest_element(node, [view_of_operand(graph, s)[1] for s in node.srcs])


def _widest_fused(graph: Graph, node: Node) -> int:
    """One width for a whole group: its core's rule, and every term and leaf read at that width."""
    arg: FusedArg = node.arg
    leaf_views = [view_of_operand(graph, s)[1] for s in node.srcs]

    def fits(w: int, site: str) -> bool:
        terms = arg.site_terms(site)
        if any(w > 1 and (not t.shape or t.shape[-1] % w) for t in terms):
            return False
        return all(vector_readable(leaf_views[i], w) for i in arg.site_leaves(site))

    core = arg.core
    if core is None:
        return next(w for w in WIDTHS if fits(w, "out"))
    core_views = [
        leaf_views[arg.leaf_index(s)] if not arg.is_term(s) else View.contiguous(arg.term(s).shape) for s in core.srcs
    ]
    kernel = kernel_class(node.kernel.name)
    core_width = kernel.widest_element(replace(core, kernel=node.kernel), core_views)
    return next(
        w for w in WIDTHS if w <= core_width and fits(w, "in") and (not kernel.vector_epilogue or fits(w, "out"))
    )
