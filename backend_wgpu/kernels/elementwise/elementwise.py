"""One kernel for every elementwise op and every fused elementwise group.

Each thread computes one KernelElement (1, 2 or 4 lanes) of the contiguous output by
evaluating an expression DAG (fused.py): a FUSED node's terms, or a single op
seen as a group of one. Each operand is read in the cheapest way its view allows
(contig, vector, splat or strided; see fused.py).
"""

from __future__ import annotations

from backend_wgpu.element import why_not_wider, widest_elementwise
from backend_wgpu.kernel import Meta, PerElementKernel
from backend_wgpu.kernels.elementwise.fused import FusedCode, plain_group
from backend_wgpu.wgsl import WgslBuilder, store_cast
from ir.graph import Graph
from ir.node import Node
from ir.ops import Op
from ir.view import View


class ElementwiseKernel(PerElementKernel):
    name = "elementwise"

    @classmethod
    def widest_element(cls, node: Node, views: list[View]) -> int:
        return widest_elementwise(node, views)

    @classmethod
    def inplace_operands(cls, node: Node) -> tuple[int, ...]:
        return tuple(range(len(node.srcs)))  # any operand read element for element

    @classmethod
    def reason(cls, graph: Graph, node: Node) -> str:
        return "one thread per element (vector)" if node.kernel.element > 1 else "one thread per element"

    @classmethod
    def width_reason(cls, node: Node, views: list[View]) -> str:
        return why_not_wider(node, views)

    def __init__(self, node: Node, graph: Graph, max_workgroups: int = 65535) -> None:
        super().__init__(node, graph, max_workgroups)
        if node.op is Op.FUSED:
            group = node.arg
        else:
            group = plain_group(node)  # x * x binds x once
            self.operands = [self.operands[node.srcs.index(s)] for s in group.leaves]
        self.code = FusedCode(self, group, {"out": self.kernel_element()})

    def access(self, i: int) -> str:
        return self.code.modes[i]

    def variant_key(self) -> str:
        return self.choice.variant + ":" + self.code.key()

    def operand_type(self, i: int) -> str:
        return self.code.operand_type(i)

    def extra_metadata(self) -> Meta:
        return self.code.metadata()

    def render(self, b: WgslBuilder) -> None:
        w = self.kernel_element()
        self.code.describe(b)
        idx = self.thread_index(b)
        value = self.code.emit(b, "out", "", f"{idx} * {w}u" if w > 1 else idx, idx)
        b.line(f"out[{idx}] = {store_cast(value, self.node.dtype, w)};")
