"""Kernel selection: the GPUOperation step. Picks one of the kernels that can run each op.

Several kernels may serve one op (matmul: tiled GEMM, GEMV over rows, GEMV over columns;
reductions: a workgroup per row or a thread per row). The choice is a KernelChoice record
naming a registered kernel class (backend_wgpu.kernels); this is the one place that
chooses. KernelElement width is decided later by passes.vectorize.
"""

from __future__ import annotations

import math
from dataclasses import replace

from backend_wgpu.element import row_vector
from backend_wgpu.kernels import (
    ArangeKernel,
    BlockedGemmKernel,
    ConcatKernel,
    Conv1dKernel,
    DequantKernel,
    ElementwiseKernel,
    GatherKernel,
    GemmKernel,
    GemvKernel,
    IndexWriteKernel,
    NormKernel,
    QuantGatherKernel,
    QuantGemmKernel,
    QuantGemvKernel,
    ReduceKernel,
    RowReduceKernel,
    SoftmaxKernel,
    SoftmaxRegsKernel,
    SplitGemvKernel,
)
from ir.caps import DeviceCaps
from ir.dtypes import DType
from ir.errors import DTypeError, ShapeError
from ir.graph import Graph
from ir.node import KernelChoice, Node
from ir.ops import ELEMENTWISE, NO_KERNEL, NORM, REDUCE, ROW, Op
from ir.view import View
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
    if any(graph[s].dtype.is_quantized for s in node.srcs) or node.dtype.is_quantized:
        return _select_quantized(graph, node)
    if node.op in ELEMENTWISE:
        return KernelChoice(ElementwiseKernel.name, node.op.value, workgroup=(256, 1, 1))
    if node.op in REDUCE:
        return _select_reduce(graph, node, caps)
    if node.op in ROW:
        n = node.shape[-1] if node.shape else 1
        return _select_softmax_regs(graph, node, caps) or KernelChoice(
            SoftmaxKernel.name, node.op.value, workgroup=(_row_workgroup(n, caps), 1, 1)
        )
    if node.op is Op.MATMUL:
        return _select_matmul(graph, node, caps)
    if node.op is Op.CONCAT:
        return KernelChoice(ConcatKernel.name, f"n{len(node.srcs)}", workgroup=(256, 1, 1))
    if node.op is Op.ARANGE:
        return KernelChoice(ArangeKernel.name, workgroup=(256, 1, 1))
    if node.op in NORM:
        n = node.shape[-1] if node.shape else 1
        return KernelChoice(NormKernel.name, node.op.value, workgroup=(_row_workgroup(n, caps), 1, 1))
    if node.op is Op.GATHER:
        return KernelChoice(GatherKernel.name, workgroup=(256, 1, 1))
    if node.op is Op.CONV1D:
        return KernelChoice(Conv1dKernel.name, workgroup=(64, 1, 1))
    if node.op is Op.INDEX_WRITE:
        return KernelChoice(IndexWriteKernel.name, workgroup=(256, 1, 1))
    raise NotImplementedError(f"select_kernels: no kernel for op {node.op.value}")


# qgemv sizing: wx threads along a weight row (16-byte loads side by side), wy row groups per
# workgroup, `rows` weight rows per thread sharing each load of x
QGEMV_WX, QGEMV_WY, QGEMV_ROWS, QGEMV_UNROLL = 32, 4, 4, 2
MAX_LOOP = 65535  # lavapipe ends a loop after this many iterations


def _select_quantized(graph: Graph, node: Node) -> KernelChoice:
    """Kernels that read quantized blocks: the tracer lets only matmul (x @ w.T), gather and cast reach here."""
    if node.op is Op.MATMUL:
        return quant_matmul_choice(graph, node)
    if node.op is Op.CAST:
        return KernelChoice(DequantKernel.name, workgroup=(256, 1, 1))
    if node.op is Op.GATHER:
        return KernelChoice(QuantGatherKernel.name, workgroup=(256, 1, 1))
    raise DTypeError(f"select_kernels: no kernel reads a {node.dtype.value} operand for {node.op.value} (%{node.id})")


def quant_matmul_choice(
    graph: Graph, node: Node, wx: int = QGEMV_WX, wy: int = QGEMV_WY, rows: int = QGEMV_ROWS, unroll: int = QGEMV_UNROLL
) -> KernelChoice:
    """qgemv for one row of x, qgemm for more; x read as vec4 where its view allows."""
    m, n = node.shape
    w = graph[node.srcs[1]]
    k = graph[node.srcs[0]].shape[-1]
    _, a_view = view_of_operand(graph, node.srcs[0])
    variant = "x4" if row_vector(a_view, 1, 4) else "x1"
    if m == 1:
        units = k // (16 if w.dtype is DType.q8_0 else 32)
        while -(-units // wx) > MAX_LOOP and wx < 256:
            wx *= 2
            wy = max(1, wy // 2)
        if -(-units // wx) > MAX_LOOP:
            raise ShapeError(f"matmul: k={k} is too long for one {w.dtype.value} GEMV row")
        params = (("rows", rows), ("unroll", unroll))
        return KernelChoice(QuantGemvKernel.name, variant, workgroup=(wx, wy, 1), params=params)
    if k // 32 > MAX_LOOP:
        raise ShapeError(f"matmul: k={k} is too long for the {w.dtype.value} GEMM (at most {MAX_LOOP * 32})")
    return KernelChoice(QuantGemmKernel.name, variant, workgroup=(16, 16, 1))


def fused_group_choice() -> KernelChoice:
    """The kernel of a fused group without a core (passes.fuse): elementwise over all its terms."""
    return KernelChoice(ElementwiseKernel.name, "fused", workgroup=(256, 1, 1))


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
        return KernelChoice(ReduceKernel.name, f"{node.op.value}_serial", workgroup=(64, 1, 1))
    if node.op in (Op.SUM, Op.MAX, Op.MIN) and _contiguous_float(graph, node):
        # contiguous float rows: loads in flight and subgroup reductions (RowReduceKernel)
        wg = _row_workgroup(-(-r // 4 // ROW_REDUCE_UNROLL), caps)
        params = (("unroll", ROW_REDUCE_UNROLL), ("subgroups", caps.subgroups))
        return KernelChoice(RowReduceKernel.name, f"{node.op.value}_rows", workgroup=(wg, 1, 1), params=params)
    return KernelChoice(ReduceKernel.name, f"{node.op.value}_rows", workgroup=(_row_workgroup(r, caps), 1, 1))


ROW_REDUCE_UNROLL = 4
SOFTMAX_MAX_PER_THREAD = 8  # vec4 registers per thread for a row held in registers


def _contiguous_float(graph: Graph, node: Node) -> bool:
    src = graph[node.srcs[0]]
    return src.dtype.is_float and view_of_operand(graph, node.srcs[0])[1].is_contiguous


def _select_softmax_regs(graph: Graph, node: Node, caps: DeviceCaps) -> KernelChoice | None:
    """Rows short enough to sit in registers (at most 8 KernelElements a thread): read once."""
    if not node.shape or not _contiguous_float(graph, node):
        return None
    n = node.shape[-1]
    elems = -(-n // 4) if n % 4 == 0 else n  # vec4 when the row allows (passes.vectorize decides)
    limit = min(1024, caps.max_invocations)
    wg = max(32, min(limit, 1 << max(0, math.ceil(math.log2(max(1, -(-elems // 4)))))))
    per = -(-elems // wg)
    if per > SOFTMAX_MAX_PER_THREAD:
        return None
    params = (("subgroups", caps.subgroups),)
    return KernelChoice(SoftmaxRegsKernel.name, node.op.value, workgroup=(wg, 1, 1), params=params)


def _select_matmul(graph: Graph, node: Node, caps: DeviceCaps) -> KernelChoice:
    m, n = node.shape[-2], node.shape[-1]
    _, b_view = view_of_operand(graph, node.srcs[1])
    k = graph[node.srcs[0]].shape[-1]
    b_k_stride, b_n_stride = b_view.strides[-2], b_view.strides[-1]
    if m == 1:
        if b_k_stride == 1 and n > 1 or n == 1:
            # each output column is a dot product of two contiguous runs: a workgroup per column
            return KernelChoice(
                GemvKernel.name, "k_contig", workgroup=(_row_workgroup(k, caps) if k < 256 else 256, 1, 1)
            )
        if b_n_stride == 1:
            h8 = graph[node.srcs[1]].dtype is DType.float16 and _vec_along(b_view, -1, 8)
            return gemv_split_choice(n, k, caps, h8=h8, itemsize=graph[node.srcs[1]].dtype.itemsize)
    return _select_gemm(graph, node, caps) or KernelChoice(
        GemmKernel.name, "tiled", workgroup=(16, 16, 1), params=(("tile_m", 64), ("tile_n", 64), ("tile_k", 16))
    )


# gemv_split sizing, from the H200 sweep (benchmarks/sweep.py, RESULTS.md): workgroups of
# 1024 threads, each reading k-rows of B in segments as long as GEMV_MAX_WX threads make,
# narrowed (down to one 32-byte sector) while that leaves fewer than GEMV_MIN_WORKGROUPS
GEMV_MAX_WX = 16
GEMV_MIN_WORKGROUPS = 80


def gemv_split_choice(n: int, k: int, caps: DeviceCaps, h8: bool = False, itemsize: int = 4) -> KernelChoice:
    """Thin column tiles (wx threads across) and k split over the workgroup's wy rows of threads."""
    per_thread = 8 if h8 else 4 if n % 4 == 0 else 1  # columns a thread owns (KernelElement decided later)
    thread_bytes = per_thread * itemsize
    cols = -(-n // per_thread)
    wx = GEMV_MAX_WX
    while wx * thread_bytes > 32 and -(-cols // wx) < GEMV_MIN_WORKGROUPS:
        wx //= 2
    unroll = 4 if h8 else 8
    threads = min(1024, caps.max_invocations)
    wy = max(1, min(threads // wx, 1 << max(0, math.ceil(math.log2(max(1, -(-k // unroll)))))))
    variant = "n_contig_h8" if h8 else "n_contig"
    return KernelChoice(SplitGemvKernel.name, variant, workgroup=(wx, wy, 1), params=(("unroll", unroll),))


# gemm_blocked configurations: (tile_m, tile_n, tile_k, (wx, wy)); see backend_wgpu/kernels/matmul/gemm_blocked.py
GEMM_CONFIGS: dict[str, tuple[int, int, int, tuple[int, int]]] = {
    "b128k16": (128, 128, 16, (16, 16)),  # 32 KiB of workgroup memory: the fastest on the H200
    "b128": (128, 128, 8, (16, 16)),  # 16 KiB, for adapters at WebGPU's default limit
    "b64": (64, 64, 16, (16, 16)),
}


def _vec4_along(view: View, axis: int) -> bool:
    """Can 4 consecutive elements along `axis` be one vec4 load, at every index of the other axes?"""
    return _vec_along(view, axis, 4)


def _vec_along(view: View, axis: int, width: int) -> bool:
    if view.shape[axis] % width or view.strides[axis] != 1 or view.offset % width:
        return False
    return all(
        s % width == 0
        for i, (d, s) in enumerate(zip(view.shape, view.strides, strict=True))
        if d > 1 and i != axis % len(view.shape)
    )


def gemm_variant(a: View, b: View, n: int) -> str:
    """How gemm_blocked reads A and B and writes C: vec4 where the views allow it."""
    a_mode = "a_k4" if _vec4_along(a, -1) else "a_m4" if _vec4_along(a, -2) else "a_s"
    b_mode = "b_n4" if _vec4_along(b, -1) else "b_k4" if _vec4_along(b, -2) else "b_s"
    return f"{a_mode}.{b_mode}.{'o4' if n % 4 == 0 else 'o1'}"


def gemm_choice(config: str, variant: str) -> KernelChoice:
    tm, tn, tk, (wx, wy) = GEMM_CONFIGS[config]
    params = (("config", config), ("tile_m", tm), ("tile_n", tn), ("tile_k", tk), ("group_m", 8))
    return KernelChoice(BlockedGemmKernel.name, variant, workgroup=(wx, wy, 1), params=params)


# 128x128 tiles only when they alone make this many workgroups (a large GPU has 100+ multiprocessors)
# and k is long enough to pay for their larger prologue (the H200 sweep: q @ k.T with k=64 prefers 64x64)
BIG_GEMM_TILES = 256
BIG_GEMM_MIN_K = 256


def _select_gemm(graph: Graph, node: Node, caps: DeviceCaps) -> KernelChoice | None:
    """Register-blocked GEMM: 128x128 tiles when there are enough of them and few are padding, else 64x64."""
    m, n = node.shape[-2], node.shape[-1]
    batch = math.prod(node.shape[:-2])
    _, a_view = view_of_operand(graph, node.srcs[0])
    _, b_view = view_of_operand(graph, node.srcs[1])
    variant = gemm_variant(a_view, b_view, n)
    k = graph[node.srcs[0]].shape[-1]
    for config in ("b128k16", "b128", "b64"):
        tm, tn, tk, (wx, wy) = GEMM_CONFIGS[config]
        tiles = batch * -(-m // tm) * -(-n // tn)
        # the share of the tiles' outputs that exist (an empty output has no tiles: it never runs)
        useful = batch * m * n / (tiles * tm * tn) if tiles else 1.0
        if tm == 128 and (tiles < BIG_GEMM_TILES or useful < 0.85 or k < BIG_GEMM_MIN_K):
            continue
        smem = 2 * 4 * tk * (tm + tn)  # two stages of f32 A and B tiles
        if smem <= caps.max_workgroup_storage and wx * wy <= caps.max_invocations:
            return gemm_choice(config, variant)
    return None
