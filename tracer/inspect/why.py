"""Short reasons for what the passes chose for a node: its kernel, its vector width, in place or not.

Read from the annotated graph (the choice is already made; nothing here re-decides it):
each kernel class says what its choice means for a node (`Kernel.reason`) and what kept its
KernelElement from being wider (`Kernel.width_reason`, from the operand views); the in-place
annotation says which buffer was reused.
"""

from __future__ import annotations

from backend_wgpu.kernels import kernel_class
from ir.fusion import matmul_depths
from ir.graph import Graph
from ir.node import Node
from ir.ops import Op
from passes.fold_views import view_of_operand


def kernel_reason(graph: Graph, node: Node) -> str:
    if node.kernel is None:
        return ""
    return kernel_class(node.kernel.name).reason(graph, node)


def width_reason(graph: Graph, node: Node) -> str:
    k = node.kernel
    if k is None:
        return ""
    if k.element == 4:
        depths = matmul_depths(graph, node)
        if kernel_class(k.name).width_along_k and depths:  # the row (and B) read along k, 4 at a time
            return f"vec4: k {depths[0][1]} divisible by 4"
        return f"vec4: last dim {node.shape[-1] if node.shape else 1} divisible by 4"
    views = [view_of_operand(graph, s)[1] for s in node.srcs]
    return kernel_class(k.name).width_reason(node, views)


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
