"""GEMV for 1 x K @ K x N with B contiguous along N, the k axis split across a workgroup.

A GEMV reads B once and does 2 flops per 4 bytes: it is bound by memory bandwidth, so it
must keep enough loads in flight on every multiprocessor. gemv[n_contig] gives each thread
a column and walks all of k (few, fat workgroups: N=4096 makes 16 of them). Here a
workgroup owns only `wx` KernelElements of columns (thin) and splits k across its `wy`
rows of threads; each thread keeps `unroll` independent loads of B in flight, then the
wy partial sums are added in workgroup memory (a tree over y). With narrow column tiles
N=4096 makes hundreds of workgroups, enough for a large GPU.
All arithmetic in f32; f16 weights are read as vec4<f16> (half the bytes).
"""

from __future__ import annotations

from backend_wgpu.kernel import Workload
from backend_wgpu.kernels.matmul import _MatmulBase
from backend_wgpu.wgsl import WgslBuilder, vtype


class SplitGemvKernel(_MatmulBase):
    name = "gemv_split"

    def variant_key(self) -> str:
        return f"{self.choice.variant}:u{self.choice.param('unroll', 4)}"

    def operand_type(self, i: int) -> str:
        return vtype(self.operands[i].dtype, self.kernel_element() if i == 1 else 1, storage=True)

    def output_type(self) -> str:
        return vtype(self.node.dtype, self.kernel_element(), storage=True)

    def calculate_dispatch(self) -> Workload:
        batch, _, n, _ = self._dims()
        cols = n // self.kernel_element()
        wx = self.choice.workgroup[0]
        return Workload.for_workgroups(batch * -(-cols // wx), self.choice.workgroup, self.max_workgroups)

    def render(self, b: WgslBuilder) -> None:
        w = self.kernel_element()
        wx, wy, _ = self.choice.workgroup
        unroll = self.choice.param("unroll", 4)
        vt = f"vec{w}<f32>" if w > 1 else "f32"
        out_t = vtype(self.node.dtype, w, storage=True)
        b.workgroup_var(f"sh: array<{vt}, {wx * wy}>")
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
                return f"{vt}(in1[u32(i32({k}) * params.b_sk) / {w}u + b_col])"
        else:
            b.line("let b_col = b_base + i32(c) * params.b_sn;")

            def b_at(k: str) -> str:
                return f"f32(in1[u32(b_col + i32({k}) * params.b_sk)])"

        def a_at(k: str) -> str:
            return f"f32(in0[u32(a_base + i32({k}) * params.a_sk)])"

        b.line(f"var acc = {vt}(0.0);")
        b.line("var k = lid.y;")
        # main loop: `unroll` rows of B per thread per step, all loads issued before the FMAs
        b.line(f"for (; k + {(unroll - 1) * wy}u < params.k; k += {unroll * wy}u) {{")
        for u in range(unroll):
            b.line(f"  let x{u} = {b_at(f'k + {u * wy}u')};")
        for u in range(unroll):
            b.line(f"  let a{u} = {a_at(f'k + {u * wy}u')};")
        for u in range(unroll):
            b.line(f"  acc = fma({vt}(a{u}), x{u}, acc);")
        b.line("}")
        b.line(f"for (; k < params.k; k += {wy}u) {{")
        b.line(f"  acc = fma({vt}({a_at('k')}), {b_at('k')}, acc);")
        b.line("}")
        b.line("sh[lidx] = acc;")
        b.line("workgroupBarrier();")
        b.line(f"for (var s = {wy // 2}u; s > 0u; s = s >> 1u) {{")
        b.line(f"  if (lid.y < s) {{ sh[lidx] += sh[lidx + s * {wx}u]; }}")
        b.line("  workgroupBarrier();")
        b.line("}")
        b.line("if (lid.y == 0u && col < cols) {")
        b.line(f"  out[bt * cols + col] = {out_t}(sh[lid.x]);")
        b.line("}")
