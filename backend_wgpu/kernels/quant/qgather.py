"""qgather: rows of a quantized table at ids, dequantized (tr.nn.embedding of a q8_0 / q4_0 table).

out[r, :] = table[clamp(ids[r]), :] as float32. One thread per unit of an output row (16
values of q8_0, 32 of q4_0): it reads its id, one vec4<u32> of quants and the block's scale,
and writes vec4 stores. The ids arrive as embedding makes them, a (rows, dim) view that
repeats each id along the row (stride 0); an id outside [0, vocab) is clamped, as in the
float gather (kernels/movement/gather.py).
"""

from __future__ import annotations

from backend_wgpu.kernel import Meta, PerElementKernel
from backend_wgpu.kernels.quant.formats import QuantFormat, describe, quant_format
from backend_wgpu.wgsl import WgslBuilder, vtype
from ir.graph import Graph
from ir.node import Node
from ir.view import View


class QuantGatherKernel(PerElementKernel):
    name = "qgather"

    @classmethod
    def reason(cls, graph: Graph, node: Node) -> str:
        table = graph[node.srcs[0]]
        src = graph[table.srcs[0]] if table.srcs else table
        return f"one thread per 16 bytes of quants of a row at its id (clamped): {describe(src.dtype, src.shape)}"

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
        return "vec4<u32>" if i == 0 else vtype(self.operands[1].dtype, 1, storage=True)

    def output_type(self) -> str:
        return vtype(self.node.dtype, 4, storage=True)

    def extra_metadata(self) -> Meta:
        table, ids = self.operands[0].view, self.operands[1].view
        vocab, dim = table.shape
        return [
            ("s4", "u32", self.fmt.units(vocab * dim)),
            ("upr", "u32", self.fmt.units(dim)),  # units per row
            ("vocab", "i32", vocab),
            ("i_off", "u32", ids.offset),
            ("i_s0", "i32", ids.strides[0]),
        ]

    def render(self, b: WgslBuilder) -> None:
        fmt = self.fmt
        fmt.define(b, "in0")
        idx = self.thread_index(b)
        b.line("let r = idx / params.upr;")
        b.line("let u = idx % params.upr;")
        b.line("let raw_id = i32(in1[u32(i32(params.i_off) + i32(r) * params.i_s0)]);")
        b.line("let id = u32(clamp(raw_id, 0, params.vocab - 1));  // out-of-range ids are clamped (documented)")
        b.line("let unit = id * params.upr + u;")
        b.line("let q = in0[unit];")
        for load in fmt.loads("in0", "q", "unit"):
            b.line(load)
        b.line(f"let d = in0_scale({fmt.block_of('unit')});")
        per = fmt.values_per_unit // 4
        for value, offset in fmt.lanes("q"):
            b.line(f"out[{idx} * {per}u + {offset // 4}u] = {fmt.value('d', value, offset)};")
