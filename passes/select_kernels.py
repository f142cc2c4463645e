"""Kernel selection: the GPUOperation step. Picks one of the kernels that can run each op.

Several kernels may serve one op (matmul: tiled GEMM, GEMV over rows, GEMV over columns;
reductions: a workgroup per row or a thread per row). The choice is a KernelChoice record;
KernelElement width is decided later by passes.vectorize.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ir.caps import DeviceCaps
from ir.graph import Graph
from ir.node import KernelChoice, Node
from ir.ops import ELEMENTWISE, NO_KERNEL, NORM, REDUCE, ROW, Op
from passes.fold_views import view_of_operand


def select_kernels(graph: Graph, caps: DeviceCaps) -> Graph:
    nodes = []
    for node in graph:
        if node.op in NO_KERNEL:
            nodes.append(node)
        else:
            nodes.append(replace(node, kernel=select_kernel(graph, node, caps)))
    return graph.with_nodes(nodes)


def select_kernel(graph: Graph, node: Node, caps: DeviceCaps) -> KernelChoice:
    if node.op in ELEMENTWISE:
        return KernelChoice("elementwise", node.op.value, workgroup=(256, 1, 1))
    if node.op in REDUCE:
        return _select_reduce(graph, node, caps)
    if node.op in ROW:
        n = node.shape[-1] if node.shape else 1
        return KernelChoice("softmax", node.op.value, workgroup=(_row_workgroup(n, caps), 1, 1))
    if node.op is Op.MATMUL:
        return _select_matmul(graph, node, caps)
    if node.op is Op.CONCAT:
        return KernelChoice("concat", f"n{len(node.srcs)}", workgroup=(256, 1, 1))
    if node.op is Op.ARANGE:
        return KernelChoice("arange", workgroup=(256, 1, 1))
    if node.op in NORM:
        n = node.shape[-1] if node.shape else 1
        return KernelChoice("norm", node.op.value, workgroup=(_row_workgroup(n, caps), 1, 1))
    if node.op is Op.GATHER:
        return KernelChoice("gather", workgroup=(256, 1, 1))
    if node.op is Op.CONV1D:
        return KernelChoice("conv1d", workgroup=(64, 1, 1))
    if node.op is Op.INDEX_WRITE:
        return KernelChoice("index_write", workgroup=(256, 1, 1))
    raise NotImplementedError(f"select_kernels: no kernel for op {node.op.value}")


def _row_workgroup(n: int, caps: DeviceCaps) -> int:
    """Threads per row: enough to cover the row in a few steps, a power of two in 32..256."""
    return max(32, min(256, caps.max_invocations, 1 << max(0, math.ceil(math.log2(max(n, 1))))))


def _select_reduce(graph: Graph, node: Node, caps: DeviceCaps) -> KernelChoice:
    src = graph[node.srcs[0]]
    k = node.arg
    r = math.prod(src.shape[len(src.shape) - k :]) if k else 1
    rows = node.size
    # short rows: one thread walks a whole row; long rows: a workgroup shares one row
    if r <= 64 or (rows >= 16384 and r <= 256):
        return KernelChoice("reduce", f"{node.op.value}_serial", workgroup=(64, 1, 1))
    return KernelChoice("reduce", f"{node.op.value}_rows", workgroup=(_row_workgroup(r, caps), 1, 1))


def _select_matmul(graph: Graph, node: Node, caps: DeviceCaps) -> KernelChoice:
    m, n = node.shape[-2], node.shape[-1]
    _, b_view = view_of_operand(graph, node.srcs[1])
    k = graph[node.srcs[0]].shape[-1]
    b_k_stride, b_n_stride = b_view.strides[-2], b_view.strides[-1]
    if m == 1:
        if b_k_stride == 1 and n > 1 or n == 1:
            # each output column is a dot product of two contiguous runs: a workgroup per column
            return KernelChoice("gemv", "k_contig", workgroup=(_row_workgroup(k, caps) if k < 256 else 256, 1, 1))
        if b_n_stride == 1:
            return KernelChoice("gemv", "n_contig", workgroup=(64, 4, 1))
    return KernelChoice("gemm", "tiled", workgroup=(16, 16, 1), params=(("tile_m", 64), ("tile_n", 64), ("tile_k", 16)))
