"""gemv[k_contig]: M == 1 and B contiguous along K (a transposed weight, x @ W.T).

One workgroup per output column: a dot product of two contiguous runs, threads striding
along k with vector loads where the views allow, then a tree sum in workgroup memory.
(M == 1 with B contiguous along N runs gemv_split.)
"""

from __future__ import annotations

from backend_wgpu.element import WIDTHS, k_contiguous, row_vector
from backend_wgpu.kernel import Workload
from backend_wgpu.kernels.matmul.base import MatmulKernel
from backend_wgpu.wgsl import WgslBuilder, vtype
from ir.graph import Graph
from ir.node import Node
from ir.view import View


class GemvKernel(MatmulKernel):
    """gemv[k_contig]: one workgroup per output column (its only variant)."""

    name = "gemv"

    @classmethod
    def widest_element(cls, node: Node, views: list[View]) -> int:
        a_view, b_view = views
        k = a_view.shape[-1]
        return next(w for w in WIDTHS if k % w == 0 and row_vector(a_view, 1, w) and k_contiguous(b_view, w))

    @classmethod
    def reason(cls, graph: Graph, node: Node) -> str:
        return "one output row (M=1): B read contiguously along K (a workgroup per output column)"

    def out_width(self) -> int:
        return 1

    def operand_type(self, i: int) -> str:
        if self.role(i) == "epilogue":
            return self.code.operand_type(i)
        return vtype(self.operands[i].dtype, self.kernel_element(), storage=True)

    def output_type(self) -> str:
        return vtype(self.node.dtype, self.out_width(), storage=True)

    def calculate_dispatch(self) -> Workload:
        batch, _, n, _ = self._dims()
        return Workload.for_workgroups(batch * n, self.choice.workgroup, self.max_workgroups)

    def render(self, b: WgslBuilder) -> None:
        w = self.kernel_element()
        wgx = self.choice.workgroup[0]
        vt = f"vec{w}<f32>" if w > 1 else "f32"
        in_a, in_b = self.in_name(self.ia), self.in_name(self.ib)
        if self.code:
            self.code.describe(b)
        b.workgroup_var(f"sh: array<f32, {wgx}>")
        b.line("let col = wg % params.n;")
        b.line("let bt = wg / params.n;")
        b.line("if (bt >= params.batch) { return; }")
        self._batch_offsets(b, "bt")
        b.line("let b_col = b_base + i32(col) * params.b_sn;")
        b.line(f"var acc: {vt} = {vt}(0.0);")
        if w > 1:
            b.line(f"for (var j = lidx; j < params.k / {w}u; j += {wgx}u) {{")
            b.line(f"  acc = fma({vt}({in_a}[u32(a_base) / {w}u + j]), {vt}({in_b}[u32(b_col) / {w}u + j]), acc);")
            b.line("}")
            b.line(f"sh[lidx] = dot(acc, {vt}(1.0));")
        else:
            b.line(f"for (var j = lidx; j < params.k; j += {wgx}u) {{")
            b.line(
                f"  acc = fma(f32({in_a}[u32(a_base + i32(j) * params.a_sk)]), f32({in_b}[u32(b_col + i32(j) * params.b_sk)]), acc);"
            )
            b.line("}")
            b.line("sh[lidx] = acc;")
        b.line("workgroupBarrier();")
        b.line(f"for (var s = {wgx // 2}u; s > 0u; s = s >> 1u) {{")
        b.line("  if (lidx < s) { sh[lidx] += sh[lidx + s]; }")
        b.line("  workgroupBarrier();")
        b.line("}")
        b.line("if (lidx == 0u) {")
        self.store(b, "bt * params.n + col", "sh[0]", indent="  ")
        b.line("}")
