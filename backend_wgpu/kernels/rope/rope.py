"""rope[half|interleaved]: rotary position embedding, one thread per output element.

Element i of a row of d is rotated with its partner: i + d/2 or i - d/2 (the half form
of GPT-NeoX and Llama), i ^ 1 (the interleaved form of GPT-J). With angle index j (the
pair's place in the row), the first of a pair becomes x[i] cos[j] - x[p] sin[j] and the
second x[i] cos[j] + x[p] sin[j]. x, cos and sin are read through any strides (cos and
sin have the shape x.shape[:-1] + (d/2,), broadcasts included); math in f32.
"""

from __future__ import annotations

from backend_wgpu.kernel import Meta, PerElementKernel, address, index_to_coords
from backend_wgpu.wgsl import WgslBuilder, vtype
from ir.graph import Graph
from ir.node import Node


class RopeKernel(PerElementKernel):
    name = "rope"

    @classmethod
    def reason(cls, graph: Graph, node: Node) -> str:
        form = "(2i, 2i+1)" if node.arg.interleaved else "(i, i + d/2)"
        return f"one thread per element, rotated with its partner {form}"

    def extra_metadata(self) -> Meta:
        meta: Meta = [(f"sh{d}", "u32", n) for d, n in enumerate(self.node.shape)]
        for i, name in enumerate(("x", "c", "s")):
            view = self.operands[i].view
            meta += [(f"{name}_off", "u32", view.offset)] + [
                (f"{name}_s{d}", "i32", s) for d, s in enumerate(view.strides)
            ]
        return meta

    def output_type(self) -> str:
        return vtype(self.node.dtype, 1, storage=True)

    def render(self, b: WgslBuilder) -> None:
        rank = len(self.node.shape)
        last = rank - 1
        idx = self.thread_index(b)
        for line in index_to_coords(idx, [f"sh{d}" for d in range(rank)]):
            b.line(line)
        b.line(f"let half = params.sh{last} / 2u;")
        if self.node.arg.interleaved:
            b.line(f"let j = c{last} / 2u;")
            b.line(f"let p = c{last} ^ 1u;")
            b.line(f"let first = (c{last} & 1u) == 0u;")
        else:
            b.line(f"let first = c{last} < half;")
            b.line(f"let j = select(c{last} - half, c{last}, first);")
            b.line(f"let p = select(c{last} - half, c{last} + half, first);")
        coords = [f"c{d}" for d in range(rank)]

        def at(name: str, i: int, lane: str) -> str:
            addr = address(f"{name}_off", [f"{name}_s{d}" for d in range(rank)], coords[:last] + [lane])
            return f"f32(in{i}[u32({addr})])"

        b.line(f"let cs = {at('c', 1, 'j')};")
        b.line(f"let sn = {at('s', 2, 'j')};")
        b.line(f"let other = {at('x', 0, 'p')} * sn;")
        b.line(f"let y = {at('x', 0, f'c{last}')} * cs + select(other, -other, first);")
        b.line(f"out[{idx}] = {vtype(self.node.dtype, 1, storage=True)}(y);")
