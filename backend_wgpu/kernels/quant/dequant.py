"""dequant: a quantized tensor's values as float32 or float16 (`.astype` of a q8_0 / q4_0 tensor).

One thread per unit (one vec4<u32> load of quants: 16 values of q8_0, a whole q4_0 block
of 32) and its block's scale; it writes its values as vec4 stores.
"""

from __future__ import annotations

from backend_wgpu.kernel import Meta, PerElementKernel
from backend_wgpu.kernels import expr
from backend_wgpu.kernels.quant.formats import QuantFormat, describe, quant_format
from backend_wgpu.wgsl import WgslBuilder, vtype
from ir.dtypes import DType
from ir.graph import Graph
from ir.node import Node
from ir.view import View

# the label's end on the CASTs passes.dequantize_wide makes (explain says why the program dequantizes)
FOR_WIDE_PRODUCT = "(dequantize_wide)"


class DequantKernel(PerElementKernel):
    name = "dequant"

    @classmethod
    def reason(cls, graph: Graph, node: Node) -> str:
        src = graph[node.srcs[0]]
        said = f"one thread per 16 bytes of quants: {describe(src.dtype, src.shape)} to {node.dtype.value}"
        if node.label.endswith(FOR_WIDE_PRODUCT):
            said += "; a float copy for a product of many rows (passes.dequantize_wide, WGJIT_DEQUANTIZE_MAX_BYTES)"
        return said

    @classmethod
    def width_reason(cls, node: Node, views: list[View]) -> str:
        return ""  # 16-byte units of quants in, vec4 stores out

    @property
    def fmt(self) -> QuantFormat:
        return quant_format(self.operands[0].dtype)

    def variant_key(self) -> str:
        return self.fmt.name

    def threads(self) -> int:
        return self.fmt.units(self.node.size)

    def operand_type(self, i: int) -> str:
        return "vec4<u32>"

    def output_type(self) -> str:
        return vtype(self.node.dtype, 4, storage=True)

    def extra_metadata(self) -> Meta:
        return [("s4", "u32", self.fmt.units(self.node.size))]

    def render(self, b: WgslBuilder) -> None:
        fmt = self.fmt
        self.fmt.define(b, "in0")
        idx = self.thread_index(b)
        b.line(f"let q = in0[{idx}];")
        for load in fmt.loads("in0", "q", idx):
            b.line(load)
        b.line(f"let d = in0_scale({fmt.block_of(idx)});")
        f16 = self.node.dtype is DType.float16
        if f16:  # rounded on the bits, as every f32 -> f16 cast in registers (kernels/expr.py)
            for name, code in expr.f16_round_helper("vec4<f32>").items():
                b.helper(name, code)
        per = fmt.values_per_unit // 4
        for value, offset in fmt.lanes("q"):
            v = fmt.value("d", value, offset)
            v = f"vec4<f16>({expr.f16_rounded(v, 'vec4<f32>')})" if f16 else v
            b.line(f"out[{idx} * {per}u + {offset // 4}u] = {v};")
