"""attention_combine: the key ranges of ATTENTION_SPLITS added up into the attention output.

One thread per output element (b, head, query, c): the ranges' max scores give the
common max M; each range's sums are rescaled by exp(m - M) (0 for a range that saw no
key) and added; the output is the rescaled value sum over the rescaled sum of exp. A row
whose keys were all masked is NaN (0 / 0), as the unsplit attention's.
"""

from __future__ import annotations

from backend_wgpu.kernel import Meta, PerElementKernel
from backend_wgpu.kernels.blocks import infinity
from backend_wgpu.wgsl import WgslBuilder, vtype
from ir.graph import Graph
from ir.node import Node


class AttentionCombineKernel(PerElementKernel):
    name = "attention_combine"

    @classmethod
    def reason(cls, graph: Graph, node: Node) -> str:
        splits = graph[node.srcs[0]].shape[-2]
        return f"one thread per output element, adding the {splits} key ranges"

    def extra_metadata(self) -> Meta:
        parts = self.operands[0].view
        return [("splits", "u32", parts.shape[-2]), ("ev", "u32", self.node.shape[-1]), ("p_off", "u32", parts.offset)]

    def operand_type(self, i: int) -> str:
        return "f32"

    def output_type(self) -> str:
        return vtype(self.node.dtype, 1, storage=True)

    def render(self, b: WgslBuilder) -> None:
        idx = self.thread_index(b)
        inf = infinity(b)
        b.line(f"let c = {idx} % params.ev;")
        b.line(f"let base = params.p_off + ({idx} / params.ev) * params.splits * (params.ev + 2u);")
        b.line("let stride = params.ev + 2u;")
        b.line(f"var top = -{inf};")
        b.line("for (var r = 0u; r < params.splits; r++) { top = max(top, in0[base + r * stride + params.ev]); }")
        b.line("var acc = 0.0;")
        b.line("var total = 0.0;")
        b.line("for (var r = 0u; r < params.splits; r++) {")
        b.line("  let m = in0[base + r * stride + params.ev];")
        b.line(f"  let scale = select(exp(m - top), 0.0, m == -{inf});")
        b.line("  acc = fma(scale, in0[base + r * stride + c], acc);")
        b.line("  total = fma(scale, in0[base + r * stride + params.ev + 1u], total);")
        b.line("}")
        b.line(f"out[{idx}] = {vtype(self.node.dtype, 1, storage=True)}(acc / total);")
