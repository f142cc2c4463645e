"""index_write: x with `src` written into the box starting at per-axis `offsets`.

Two forms, decided by passes.inplace (the kernel reads `self.inplace`):
  in place - x's buffer is the output: one thread per element of src writes it into
             the box; the rest of x is never touched (a KV-cache append costs |src|).
  copy     - x is still visible elsewhere, so it may not be overwritten: one thread per
             element of x writes src inside the box and x outside it.
"""

from __future__ import annotations

from backend_wgpu.kernel import Meta, PerElementKernel, address, index_to_coords
from backend_wgpu.wgsl import WgslBuilder, load_cast, store_cast
from ir.graph import Graph
from ir.node import Node
from ir.view import contiguous_strides


class IndexWriteKernel(PerElementKernel):
    name = "index_write"
    inplace_exclusive = True  # src[i] lands at x[i + offsets]: no other operand may read x's buffer

    @classmethod
    def inplace_operands(cls, node: Node) -> tuple[int, ...]:
        return (0,)  # only the tensor written into

    @classmethod
    def reason(cls, graph: Graph, node: Node) -> str:
        if node.inplace is not None:
            return "writes only src into the buffer it updates"
        return "copies x, then src over it"

    def variant_key(self) -> str:
        return "inplace" if self.inplace else "copy"

    def threads(self) -> int:
        return self.operands[1].view.size if self.inplace else self.node.size

    def extra_metadata(self) -> Meta:
        x, src = self.operands[0].view, self.operands[1].view
        shape = src.shape if self.inplace else self.node.shape
        meta: Meta = [(f"shape{d}", "u32", n) for d, n in enumerate(shape)]
        meta += [(f"lo{d}", "u32", o) for d, o in enumerate(self.node.arg)]
        meta += [(f"hi{d}", "u32", o + n) for d, (o, n) in enumerate(zip(self.node.arg, src.shape))]
        meta += [(f"os{d}", "u32", s) for d, s in enumerate(contiguous_strides(self.node.shape))]
        meta += [("s_off", "u32", src.offset)] + [(f"ss{d}", "i32", s) for d, s in enumerate(src.strides)]
        if not self.inplace:
            meta += [("x_off", "u32", x.offset)] + [(f"xs{d}", "i32", s) for d, s in enumerate(x.strides)]
        return meta

    def render(self, b: WgslBuilder) -> None:
        rank = len(self.node.shape)
        dt = self.node.dtype
        coords = [f"c{d}" for d in range(rank)]
        idx = self.thread_index(b)
        for line in index_to_coords(idx, [f"shape{d}" for d in range(rank)]):
            b.line(line)

        def src_at(cs: list[str]) -> str:
            return f"in1[u32({address('s_off', [f'ss{d}' for d in range(rank)], cs)})]"

        if self.inplace:
            # c is a coordinate in src; its place in x (contiguous, the output buffer) is c + lo
            dst = " + ".join([f"(c{d} + params.lo{d}) * params.os{d}" for d in range(rank)] or ["0u"])
            b.line(f"out[{dst}] = {src_at(coords)};")
            return
        inside = " && ".join([f"c{d} >= params.lo{d} && c{d} < params.hi{d}" for d in range(rank)] or ["true"])
        b.line(f"if ({inside}) {{")
        b.line(f"  out[{idx}] = {src_at([f'(c{d} - params.lo{d})' for d in range(rank)])};")
        b.line("} else {")
        x_val = load_cast(f"in0[u32({address('x_off', [f'xs{d}' for d in range(rank)], coords)})]", dt, 1)
        b.line(f"  out[{idx}] = {store_cast(x_val, dt, 1)};")
        b.line("}")
