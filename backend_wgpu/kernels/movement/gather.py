"""Gather along one axis (take_along_axis; index_select and embedding are views of it).

out[c] = x[c with c[axis] replaced by ids[c]]. Both operands are strided views of the
output's shape (x keeps its own size along the axis), so index_select's 1-D ids arrive
as a zero-copy broadcast. An id outside [0, dim) is clamped into it: the GPU never reads
out of bounds, and the reference interpreter clamps the same way.
When the gathered axis is not the last one and one id serves a whole vector of the last
axis (an embedding row), each thread copies a vec4/vec2.
"""

from __future__ import annotations

from backend_wgpu.element import WIDTHS, vector_readable
from backend_wgpu.kernel import Meta, PerElementKernel, address, index_to_coords
from backend_wgpu.wgsl import WgslBuilder, load_cast, store_cast, vtype
from ir.graph import Graph
from ir.node import Node
from ir.view import View


class GatherKernel(PerElementKernel):
    name = "gather"

    @classmethod
    def widest_element(cls, node: Node, views: list[View]) -> int:
        """Gathering along an outer axis (embedding rows): one id serves a whole vector of the last axis."""
        if node.arg == len(node.shape) - 1:
            return 1
        x_view, ids_view = views
        if ids_view.strides[-1] != 0:
            return 1
        return next(
            w
            for w in WIDTHS
            if node.shape[-1] % w == 0 and (w == 1 or x_view.strides[-1] == 1) and vector_readable(x_view, w)
        )

    @classmethod
    def reason(cls, graph: Graph, node: Node) -> str:
        return f"one thread per output element, ids along axis {node.arg} (out-of-range ids clamped)"

    @property
    def axis(self) -> int:
        return self.node.arg

    def variant_key(self) -> str:
        return f"axis{self.axis}"

    def operand_type(self, i: int) -> str:
        width = self.kernel_element() if i == 0 else 1
        return vtype(self.operands[i].dtype, width, storage=True)

    def extra_metadata(self) -> Meta:
        x, ids = self.operands[0].view, self.operands[1].view
        meta: Meta = [("dim", "i32", x.shape[self.axis])]
        meta += [(f"shape{d}", "u32", n) for d, n in enumerate(self.node.shape)]
        meta += [("x_off", "u32", x.offset)] + [(f"xs{d}", "i32", s) for d, s in enumerate(x.strides)]
        meta += [("i_off", "u32", ids.offset)] + [(f"is{d}", "i32", s) for d, s in enumerate(ids.strides)]
        return meta

    def render(self, b: WgslBuilder) -> None:
        w = self.kernel_element()
        rank = len(self.node.shape)
        dt = self.node.dtype
        coords = [f"c{d}" for d in range(rank)]
        idx = self.thread_index(b)
        b.line(f"let e = {idx} * {w}u;")
        for line in index_to_coords("e", [f"shape{d}" for d in range(rank)]):
            b.line(line)
        b.line(f"let raw_id = i32(in1[u32({address('i_off', [f'is{d}' for d in range(rank)], coords)})]);")
        b.line("let id = u32(clamp(raw_id, 0, params.dim - 1));  // out-of-range ids are clamped (documented)")
        x_coords = ["id" if d == self.axis else c for d, c in enumerate(coords)]
        b.line(f"let a = {address('x_off', [f'xs{d}' for d in range(rank)], x_coords)};")
        src = f"in0[u32(a) / {w}u]" if w > 1 else "in0[u32(a)]"
        b.line(f"out[{idx}] = {store_cast(load_cast(src, dt, w), dt, w)};")
