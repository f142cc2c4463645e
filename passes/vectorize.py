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
from ir.fusion import FusedArg
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
    if node.size == 0:
        return 1
    if node.op is Op.FUSED:
        return _widest_fused(graph, node)
    return _widest_for(node, [view_of_operand(graph, s)[1] for s in node.srcs])


def _widest_for(node: Node, views: list[View]) -> int:
    """The widest element `node`'s kernel can use when its operands are read through `views`."""
    name = node.kernel.name
    if name == "elementwise":
        for w in WIDTHS:
            if node.shape and node.shape[-1] % w == 0 and all(vector_readable(v, w) for v in views):
                return w
        return 1
    if name in ("softmax", "softmax_regs"):
        return next(w for w in WIDTHS if node.shape[-1] % w == 0 and _row_vector(views[0], 1, w))
    if name == "norm":
        return _norm_width(node, views)
    if name == "gather":
        return _gather_width(node, views)
    if (
        name in ("reduce", "row_reduce")
        and node.op in (Op.SUM, Op.MAX, Op.MIN)
        and node.kernel.variant.endswith("_rows")
    ):
        return next(w for w in WIDTHS if _row_vector(views[0], node.arg, w))
    if name in ("gemv", "gemv_split"):
        a_view, b_view = views
        if node.kernel.variant == "k_contig":
            k = a_view.shape[-1]
            return next(w for w in WIDTHS if k % w == 0 and _row_vector(a_view, 1, w) and _k_contig(b_view, w))
        n = node.shape[-1]
        return next(w for w in WIDTHS if n % w == 0 and vector_readable(b_view, w))
    return 1


# kernels whose fused epilogue is evaluated KernelElement lanes at a time (the others call
# a per-element wg_epilogue, kernels/fused.py)
_VECTOR_OUTPUT = frozenset({("softmax", "")})


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
    core_width = _widest_for(replace(core, kernel=node.kernel), core_views)
    kind = node.kernel.name, "" if node.kernel.name == "softmax" else node.kernel.variant
    vector_out = kind in _VECTOR_OUTPUT
    return next(w for w in WIDTHS if w <= core_width and fits(w, "in") and (not vector_out or fits(w, "out")))


def _norm_width(node: Node, views: list[View]) -> int:
    """Norms walk each row of x and the weight/bias vectors contiguously: all must allow the width."""
    x_view, affine = views[0], views[1:]
    n = node.shape[-1]
    for w in WIDTHS:
        if n % w == 0 and _row_vector(x_view, 1, w) and all(_contiguous_run(v, w) for v in affine):
            return w
    return 1


def _gather_width(node: Node, views: list[View]) -> int:
    """Gathering along an outer axis (embedding rows): one id serves a whole vector of the last axis."""
    if node.arg == len(node.shape) - 1:
        return 1
    x_view, ids_view = views
    if ids_view.strides[-1] != 0:
        return 1
    return next(
        w
        for w in WIDTHS
        if node.shape[-1] % w == 0 and (w == 1 or x_view.strides[-1] == 1) and vector_readable(x_view, w)
    )


def _contiguous_run(view: View, width: int) -> bool:
    """A 1-D operand read as vectors: unit stride, starting on a multiple of the width."""
    return width == 1 or (view.strides[-1] == 1 and view.offset % width == 0 and view.shape[-1] % width == 0)


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
    if width == 1:  # scalar loads follow any strides (n == 1 picks this kernel for every B)
        return True
    if b_view.strides[-2] != 1 or b_view.offset % width:
        return False
    return all(
        s % width == 0
        for i, (d, s) in enumerate(zip(b_view.shape, b_view.strides))
        if d > 1 and i != len(b_view.shape) - 2
    )
