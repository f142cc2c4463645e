"""Concatenation of N inputs along one axis in one kernel.

The seed's dynamic metadata: how many inputs, and so the fields of the uniform, is known
only when the graph is built; the input count is part of the kernel key.
"""

from __future__ import annotations

from backend_wgpu.kernel import Meta, PerElementKernel, index_to_coords
from backend_wgpu.wgsl import WgslBuilder, load_cast, store_cast


class ConcatKernel(PerElementKernel):
    name = "concat"

    def variant_key(self) -> str:
        return f"{self.choice.variant},axis{self.node.arg}"

    def extra_metadata(self) -> Meta:
        axis = self.node.arg
        meta: Meta = [(f"shape{d}", "u32", n) for d, n in enumerate(self.node.shape)]
        end = 0
        for i, op in enumerate(self.operands):
            start = end
            end += op.view.shape[axis]
            meta += [(f"start{i}", "u32", start), (f"end{i}", "u32", end), (f"off{i}", "u32", op.view.offset)]
            meta += [(f"st{i}_{d}", "i32", s) for d, s in enumerate(op.view.strides)]
        return meta

    def render(self, b: WgslBuilder) -> None:
        axis = self.node.arg
        rank = len(self.node.shape)
        dt = self.node.dtype
        idx = self.thread_index(b)
        for line in index_to_coords(idx, [f"shape{d}" for d in range(rank)]):
            b.line(line)
        for i in range(len(self.operands)):
            cond = "if" if i == 0 else "} else if"
            b.line(f"{cond} (c{axis} < params.end{i}) {{")
            terms = [f"i32(params.off{i})"]
            for d in range(rank):
                c = f"(c{d} - params.start{i})" if d == axis else f"c{d}"
                terms.append(f"i32({c}) * params.st{i}_{d}")
            value = load_cast(f"in{i}[u32({' + '.join(terms)})]", dt, 1)
            b.line(f"  out[{idx}] = {store_cast(value, dt, 1)};")
        b.line("}")
