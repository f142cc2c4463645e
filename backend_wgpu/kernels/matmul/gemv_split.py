"""GEMV for 1 x K @ K x N with B contiguous along N, the k axis split across a workgroup.

A GEMV reads B once and does 2 flops per 4 bytes: it is bound by memory bandwidth, so it
must keep enough loads in flight on every multiprocessor. gemv[n_contig] gives each thread
a column and walks all of k (few, fat workgroups: N=4096 makes 16 of them). Here a
workgroup owns only `wx` KernelElements of columns (thin) and splits k across its `wy`
rows of threads; each thread keeps `unroll` independent loads of B in flight, then the
wy partial sums are added in workgroup memory (a tree over y). With narrow column tiles
N=4096 makes hundreds of workgroups, enough for a large GPU.
All arithmetic in f32. Variant n_contig_h8 (f16 weights, n % 8 == 0) reads 8 halves per
load as one vec4<u32> (16 bytes, as wide as an f32 vec4 load) and unpacks them.
"""

from __future__ import annotations

from backend_wgpu.element import WIDTHS, vector_readable
from backend_wgpu.kernel import Workload
from backend_wgpu.kernels.matmul.base import MatmulKernel
from backend_wgpu.wgsl import WgslBuilder, vtype
from ir.graph import Graph
from ir.node import Node
from ir.view import View


class SplitGemvKernel(MatmulKernel):
    name = "gemv_split"

    @classmethod
    def widest_element(cls, node: Node, views: list[View]) -> int:
        n = node.shape[-1]
        return next(w for w in WIDTHS if n % w == 0 and vector_readable(views[1], w))

    @classmethod
    def reason(cls, graph: Graph, node: Node) -> str:
        wx, wy, _ = node.kernel.workgroup
        return f"one output row (M=1): B read contiguously along N, k split over {wy} rows of threads ({wx} across)"

    def variant_key(self) -> str:
        fused = f":{self.code.key()}" if self.code else ""
        return f"{self.choice.variant}:u{self.choice.param('unroll', 4)}{fused}"

    @property
    def h8(self) -> bool:
        return self.choice.variant == "n_contig_h8"

    def width(self) -> int:
        """Columns per thread: the KernelElement, or 8 for packed halves."""
        return 8 if self.h8 else self.kernel_element()

    def operand_type(self, i: int) -> str:
        role = self.role(i)
        if role == "epilogue":
            return self.code.operand_type(i)
        if role == "b" and self.h8:
            return "vec4<u32>"
        return vtype(self.operands[i].dtype, self.kernel_element() if role == "b" else 1, storage=True)

    def output_type(self) -> str:
        return vtype(self.node.dtype, 4 if self.h8 else self.kernel_element(), storage=True)

    def calculate_dispatch(self) -> Workload:
        batch, _, n, _ = self._dims()
        cols = n // self.width()
        wx = self.choice.workgroup[0]
        return Workload.for_workgroups(batch * -(-cols // wx), self.choice.workgroup, self.max_workgroups)

    def render(self, b: WgslBuilder) -> None:
        w = self.width()
        wx, wy, _ = self.choice.workgroup
        unroll = self.choice.param("unroll", 4)
        lanes = 2 if self.h8 else 1  # accumulators per thread (vec4 each for h8)
        vt = "vec4<f32>" if self.h8 else f"vec{w}<f32>" if w > 1 else "f32"
        in_a, in_b = self.in_name(self.ia), self.in_name(self.ib)
        if self.code:
            self.code.describe(b)
        b.workgroup_var(f"sh: array<{vt}, {lanes * wx * wy}>")
        b.line(f"let cols = params.n / {w}u;")
        b.line(f"let tiles = (cols + {wx - 1}u) / {wx}u;")
        b.line(f"let col = (wg % tiles) * {wx}u + lid.x;")
        b.line("let bt = wg / tiles;")
        b.line("if (bt >= params.batch) { return; }")
        self._batch_offsets(b, "bt")
        # threads past the last column still run the loop (on a clamped column) so that
        # every thread reaches the barriers; only their store is skipped
        b.line("let c = min(col, cols - 1u);")
        if w > 1:
            b.line(f"let b_col = u32(b_base) / {w}u + c;")

            def b_at(k: str) -> str:
                raw = f"{in_b}[u32(i32({k}) * params.b_sk) / {w}u + b_col]"
                return raw if self.h8 else f"{vt}({raw})"
        else:
            b.line("let b_col = b_base + i32(c) * params.b_sn;")

            def b_at(k: str) -> str:
                return f"f32({in_b}[u32(b_col + i32({k}) * params.b_sk)])"

        def a_at(k: str) -> str:
            return f"f32({in_a}[u32(a_base + i32({k}) * params.a_sk)])"

        def fma_lines(a: str, x: str) -> list[str]:
            if not self.h8:
                return [f"acc0 = fma({vt}({a}), {x}, acc0);"]
            lo = f"vec4<f32>(unpack2x16float({x}.x), unpack2x16float({x}.y))"
            hi = f"vec4<f32>(unpack2x16float({x}.z), unpack2x16float({x}.w))"
            return [f"acc0 = fma(vec4<f32>({a}), {lo}, acc0);", f"acc1 = fma(vec4<f32>({a}), {hi}, acc1);"]

        for j in range(lanes):
            b.line(f"var acc{j} = {vt}(0.0);")
        b.line("var k = lid.y;")
        # main loop: `unroll` rows of B per thread per step, all loads issued before the FMAs
        b.line(f"for (; k + {(unroll - 1) * wy}u < params.k; k += {unroll * wy}u) {{")
        for u in range(unroll):
            b.line(f"  let x{u} = {b_at(f'k + {u * wy}u')};")
        for u in range(unroll):
            b.line(f"  let a{u} = {a_at(f'k + {u * wy}u')};")
        for u in range(unroll):
            for line in fma_lines(f"a{u}", f"x{u}"):
                b.line("  " + line)
        b.line("}")
        b.line(f"for (; k < params.k; k += {wy}u) {{")
        b.line(f"  let a = {a_at('k')};")
        b.line(f"  let x = {b_at('k')};")
        for line in fma_lines("a", "x"):
            b.line("  " + line)
        b.line("}")
        for j in range(lanes):
            b.line(f"sh[{j * wx * wy}u + lidx] = acc{j};")
        b.line("workgroupBarrier();")
        b.line(f"for (var s = {wy // 2}u; s > 0u; s = s >> 1u) {{")
        b.line("  if (lid.y < s) {")
        for j in range(lanes):
            o = j * wx * wy
            b.line(f"    sh[{o}u + lidx] += sh[{o}u + lidx + s * {wx}u];")
        b.line("  }")
        b.line("  workgroupBarrier();")
        b.line("}")
        b.line("if (lid.y == 0u && col < cols) {")
        for j in range(lanes):
            index = f"(bt * cols + col) * {lanes}u + {j}u"
            self.store(b, index, f"sh[{j * wx * wy}u + lid.x]", lanes=4 if self.h8 else w, indent="  ")
        b.line("}")
