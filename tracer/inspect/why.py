"""Short reasons for what the passes chose for a node: its kernel, its vector width, in place or not.

Read from the annotated graph (the choice is already made; nothing here re-decides it):
the kernel's variant names the rule select_kernels applied, the shapes and operand views say
what bounded the KernelElement width, the in-place annotation which buffer was reused.
"""

from __future__ import annotations

from ir.graph import Graph
from ir.node import Node
from ir.ops import Op
from passes.fold_views import view_of_operand
from passes.vectorize import vector_readable


def kernel_reason(graph: Graph, node: Node) -> str:
    k = node.kernel
    if k is None:
        return ""
    if k.name == "reduce":
        src = graph[node.srcs[0]]
        row = src.size // max(node.size, 1)
        how = "one thread walks each row" if k.variant.endswith("_serial") else "a workgroup shares each row"
        return f"{node.size} rows of {row}: {how}"
    if k.name == "gemv":
        along = "K (a workgroup per output column)" if k.variant == "k_contig" else "N (threads along the row)"
        return f"one output row (M=1): B read contiguously along {along}"
    if k.name == "gemm":
        tiles = "x".join(str(k.param(p)) for p in ("tile_m", "tile_n", "tile_k") if k.param(p) is not None)
        return f"general matmul: workgroup tiles {tiles}" if tiles else "general matmul"
    if k.name == "softmax":
        return f"a workgroup of {k.workgroup[0]} threads per row of {node.shape[-1] if node.shape else 1}"
    if k.name in FAST_KERNEL_REASONS:  # the issue-5 kernels (kernels/gemm_blocked.py, gemv_split.py, rows_fast.py)
        return FAST_KERNEL_REASONS[k.name](graph, node)
    if k.name == "elementwise":
        return "one thread per element (vector)" if k.element > 1 else "one thread per element"
    if k.name == "norm":
        return f"a workgroup of {k.workgroup[0]} threads per row of {node.shape[-1] if node.shape else 1}"
    if k.name == "gather":
        return f"one thread per output element, ids along axis {node.arg} (out-of-range ids clamped)"
    if k.name == "conv1d":
        return "direct convolution: one thread per output element"
    if k.name == "index_write":
        return (
            "writes only src into the buffer it updates" if node.inplace is not None else "copies x, then src over it"
        )
    return ""


def _gemm_blocked(graph: Graph, node: Node) -> str:
    k = node.kernel
    tiles = "x".join(str(k.param(p)) for p in ("tile_m", "tile_n", "tile_k"))
    return f"general matmul: workgroup tiles {tiles}, register-blocked, loads {k.variant}"


def _gemv_split(graph: Graph, node: Node) -> str:
    wx, wy, _ = node.kernel.workgroup
    return f"one output row (M=1): B read contiguously along N, k split over {wy} rows of threads ({wx} across)"


def _row_reduce(graph: Graph, node: Node) -> str:
    row = graph[node.srcs[0]].size // max(node.size, 1)
    how = "subgroup reductions" if node.kernel.param("subgroups") else "a tree in workgroup memory"
    return f"{node.size} rows of {row}: a workgroup shares each contiguous row ({how})"


def _softmax_regs(graph: Graph, node: Node) -> str:
    n = node.shape[-1] if node.shape else 1
    return f"a workgroup of {node.kernel.workgroup[0]} threads per row of {n}, the row held in registers"


FAST_KERNEL_REASONS = {
    "gemm_blocked": _gemm_blocked,
    "gemv_split": _gemv_split,
    "row_reduce": _row_reduce,
    "softmax_regs": _softmax_regs,
}


def width_reason(graph: Graph, node: Node) -> str:
    k = node.kernel
    if k is None:
        return ""
    last = node.shape[-1] if node.shape else 1
    if k.element == 4:
        return f"vec4: last dim {last} divisible by 4"
    if k.name == "gemm_blocked":
        return ""  # its variant names how each operand is loaded (a_k4: vec4 along k, ...)
    if k.name not in ("elementwise", "softmax", "softmax_regs"):
        return "" if k.element > 1 else f"{k.name} reads scalars"
    wider = k.element * 2
    if last % wider:
        return f"last dim {last} not divisible by {wider}"
    for s in node.srcs:
        if not vector_readable(view_of_operand(graph, s)[1], wider):
            return f"operand %{s} cannot be read {wider} at a time (stride or offset)"
    return ""


def inplace_reason(graph: Graph, node: Node) -> str:
    if node.inplace is None:
        return ""
    src = node.srcs[node.inplace]
    where = f" in slot{node.slot}" if node.slot is not None else ""
    return f"overwrites %{src}{where}: nothing reads it afterwards"


def why(graph: Graph, node: Node) -> str:
    """One line: the kernel rule, what bounded the width, and the in-place reuse ('' for no kernel)."""
    if node.op in (Op.INPUT, Op.VIEW):
        return ""
    parts = [kernel_reason(graph, node), width_reason(graph, node), inplace_reason(graph, node)]
    return "; ".join(p for p in parts if p)
