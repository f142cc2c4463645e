"""Quantized products of many rows (a long prompt's prefill): the weight dequantized once, then the f32 GEMM.

qgemm dequantizes every block into workgroup memory for each 64-row tile of x and multiplies
with scalar reads: on the H200 it ran the ~1B decoder's 512-token prefill at 80 ms against the
f32 GEMM's 30 (benchmarks/runs/2026-12-01-W). Where x has many rows (past qgemm_thin's, or
DEQUANTIZE_MIN_ROWS), this pass reads the weight through a CAST to float32 instead (the dequant
kernel, one pass over the blocks) and leaves the product to the float GEMM rules: the blocked
GEMM, its splits, its fused epilogues. The float copy is a temporary of the program
(passes.plan_memory reuses its slot), at most DEQUANTIZE_MAX_BYTES and within one storage
binding; a larger weight keeps the quantized kernels. It runs after fold_views (it reads operands
through their views) and before split_k and select_kernels, which then see an ordinary float matmul.
"""

from __future__ import annotations

from backend_wgpu.kernels.quant.dequant import FOR_WIDE_PRODUCT
from ir.caps import DeviceCaps
from ir.dtypes import DType
from ir.graph import Graph
from ir.node import Node
from ir.ops import Op
from ir.settings import env_int
from passes.fold_views import view_of_operand
from passes.select_kernels import quant_thin_wins

# the largest float32 copy of one weight this pass makes (WGJIT_DEQUANTIZE_MAX_BYTES; 0: never)
DEQUANTIZE_MAX_BYTES = env_int("WGJIT_DEQUANTIZE_MAX_BYTES", 256 << 20)
# products of this many rows or more are dequantized even where qgemm_thin would take them (0: only past
# it). H200 run W (qprefill_dequant_rows.txt), the ~1B prefill with every weight whose copy fits dequantized
# against the rules without this: 128 tokens q4_0 18.4 against 29.3 ms, q8_0 15.4 against 23.0; 64 tokens
# 19.7 against 19.2, 17.1 against 15.3; fewer tokens lose more. Between 64 and 128, unmeasured: 96.
DEQUANTIZE_MIN_ROWS = 96


def dequantize_wide(graph: Graph, caps: DeviceCaps) -> Graph:
    wide = [n for n in graph if _dequantized_here(graph, n, min(DEQUANTIZE_MAX_BYTES, caps.max_storage_binding))]
    if not wide:
        return graph
    rewrite = {n.id for n in wide}
    nodes: list[Node] = []
    next_id = graph.next_id()
    for node in graph:
        if node.id not in rewrite:
            nodes.append(node)
            continue
        weight, view = view_of_operand(graph, node.srcs[1])
        label = f"{weight.label} {FOR_WIDE_PRODUCT}" if weight.label else FOR_WIDE_PRODUCT
        cast = Node(next_id, Op.CAST, (weight.id,), weight.shape, DType.float32, label=label)
        read = Node(next_id + 1, Op.VIEW, (cast.id,), view.shape, DType.float32, view)
        next_id += 2
        nodes += [
            cast,
            read,
            Node(node.id, node.op, (node.srcs[0], read.id), node.shape, node.dtype, node.arg, label=node.label),
        ]
    return graph.with_nodes(nodes)


def _dequantized_here(graph: Graph, node: Node, limit: int) -> bool:
    """A float matmul x @ w.T of a quantized weight w (N, K) whose rows of x are past qgemm_thin's, its float
    copy at most `limit` bytes."""
    if node.op is not Op.MATMUL or node.dtype is not DType.float32 or len(node.shape) != 2:
        return False
    x = graph[node.srcs[0]]
    weight, _ = view_of_operand(graph, node.srcs[1])
    if not weight.dtype.is_quantized or x.dtype.is_quantized:
        return False
    m, n = node.shape
    return many_rows(m, n) and 0 < 4 * weight.size <= limit


def many_rows(m: int, n: int) -> bool:
    """Enough rows of x (m) by n weight rows for a float copy of the weight to pay (if it fits)."""
    return m > 1 and (not quant_thin_wins(m, n) or 0 < DEQUANTIZE_MIN_ROWS <= m)
