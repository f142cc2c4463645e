"""KernelElement: choose the widest element (vec4, vec2, scalar) each kernel can use.

The dimension a kernel walks contiguously must be divisible by the width, and every
operand read as a vector must start on a multiple of it (ratchet's, ONNX Runtime's and
TVM's 4/2/1 rule). An operand broadcast along that dimension (stride 0) is read as a
scalar and splatted, which never blocks a width.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ir.caps import DeviceCaps
from ir.graph import Graph
from ir.node import Node
from ir.ops import Op
from ir.view import View
from passes.fold_views import view_of_operand

WIDTHS = (4, 2, 1)


def vectorize(graph: Graph, caps: DeviceCaps) -> Graph:
    nodes = []
    for node in graph:
        if node.kernel is None:
            nodes.append(node)
            continue
        width = _widest(graph, node)
        nodes.append(replace(node, kernel=replace(node.kernel, element=width)))
    return graph.with_nodes(nodes)


def vector_readable(view: View, width: int) -> bool:
    """Can `width` consecutive elements along the last axis be loaded as one vector?"""
    if width == 1:
        return True
    if not view.shape or view.shape[-1] % width:
        return False
    if view.strides[-1] == 0:
        return True  # splat
    if view.strides[-1] != 1 or view.offset % width:
        return False
    return all(s % width == 0 for d, s in zip(view.shape[:-1], view.strides[:-1]) if d > 1)


def _widest(graph: Graph, node: Node) -> int:
    name = node.kernel.name
    if node.size == 0:
        return 1
    if name == "elementwise":
        views = [view_of_operand(graph, s)[1] for s in node.srcs]
        for w in WIDTHS:
            if node.shape and node.shape[-1] % w == 0 and all(vector_readable(v, w) for v in views):
                return w
        return 1
    if name in ("softmax", "softmax_regs"):
        view = view_of_operand(graph, node.srcs[0])[1]
        return next(w for w in WIDTHS if node.shape[-1] % w == 0 and _row_vector(view, 1, w))
    if name in ("reduce", "row_reduce") and node.op in (Op.SUM, Op.MAX, Op.MIN) and node.kernel.variant.endswith("_rows"):
        view = view_of_operand(graph, node.srcs[0])[1]
        return next(w for w in WIDTHS if _row_vector(view, node.arg, w))
    if name in ("gemv", "gemv_split"):
        a_view = view_of_operand(graph, node.srcs[0])[1]
        b_view = view_of_operand(graph, node.srcs[1])[1]
        if node.kernel.variant == "k_contig":
            k = a_view.shape[-1]
            return next(w for w in WIDTHS if k % w == 0 and _row_vector(a_view, 1, w) and _k_contig(b_view, w))
        n = node.shape[-1]
        return next(w for w in WIDTHS if n % w == 0 and vector_readable(b_view, w))
    return 1


def _row_vector(view: View, k: int, width: int) -> bool:
    """The last k axes form one contiguous run per row, its length and every row start a multiple of width."""
    if width == 1:
        return True
    shape, strides = view.shape[len(view.shape) - k :], view.strides[len(view.strides) - k :]
    run = math.prod(shape)
    if run % width or view.offset % width:
        return False
    expected = 1
    for d, s in zip(reversed(shape), reversed(strides)):
        if d != 1 and s != expected:
            return False
        expected *= d
    return all(s % width == 0 for d, s in zip(view.shape[: len(view.shape) - k], view.strides) if d > 1)


def _k_contig(b_view: View, width: int) -> bool:
    """B of a k-contiguous GEMV: each column (fixed n) is a contiguous run along k."""
    if b_view.strides[-2] != 1 or b_view.offset % width:
        return False
    return all(s % width == 0 for i, (d, s) in enumerate(zip(b_view.shape, b_view.strides)) if d > 1 and i != len(b_view.shape) - 2)
