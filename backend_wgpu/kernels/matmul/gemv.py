"""gemv[k_contig]: M == 1 and B contiguous along K (a transposed weight, x @ W.T).

One workgroup per output column: a dot product of two contiguous runs, threads striding
along k with vector loads where the views allow, then the workgroup tree sums their parts.
(M == 1 with B contiguous along N runs gemv_split.)
"""

from __future__ import annotations

from backend_wgpu.element import WIDTHS, k_contiguous, row_vector
from backend_wgpu.kernel import Workload
from backend_wgpu.kernels.blocks import strided_loop, strided_loop_cost, workgroup_reduce, workgroup_reduce_cost
from backend_wgpu.kernels.matmul.base import MatmulKernel, rule_said
from backend_wgpu.wgsl import WgslBuilder, f32v, vtype
from ir.graph import Graph
from ir.node import Node
from ir.view import View


class GemvKernel(MatmulKernel):
    """gemv[k_contig]: one workgroup per output column (its only variant)."""

    name = "gemv"
    width_along_k = True

    @classmethod
    def widest_element(cls, node: Node, views: list[View]) -> int:
        a_view, b_view = views
        k = a_view.shape[-1]
        return next(w for w in WIDTHS if k % w == 0 and row_vector(a_view, 1, w) and k_contiguous(b_view, w))

    @classmethod
    def reason(cls, graph: Graph, node: Node) -> str:
        return f"one output row (M=1): B read contiguously along K (a workgroup per output column); {rule_said(node)}"

    def operand_type(self, i: int) -> str:
        if self.role(i) == "epilogue":
            return self.code.operand_type(i)
        return vtype(self.operands[i].dtype, self.kernel_element(), storage=True)

    def output_type(self) -> str:
        return vtype(self.node.dtype, 1, storage=True)

    def calculate_dispatch(self) -> Workload:
        batch, _, n, _ = self._dims()
        return Workload.for_workgroups(batch * n, self.choice.workgroup, self.max_workgroups)

    @property
    def unroll(self) -> int:
        return self.choice.param("unroll", 1)

    def loop_iterations(self) -> int:
        wgx = self.choice.workgroup[0]
        k = self._dims()[3] // self.kernel_element()
        return strided_loop_cost(k, wgx, self.unroll) + workgroup_reduce_cost(
            wgx, self.choice.param("subgroups", False)
        )

    def render(self, b: WgslBuilder) -> None:
        w, wgx = self.kernel_element(), self.choice.workgroup[0]
        vt = f32v(w)
        in_a, in_b = self.in_name(self.ia), self.in_name(self.ib)
        if self.code:
            self.code.describe(b)
        b.line("let col = wg % params.n;")
        b.line("let bt = wg / params.n;")
        b.line("if (bt >= params.batch) { return; }")
        self._batch_offsets(b, "bt")
        b.line("let b_col = b_base + i32(col) * params.b_sn;")
        b.line(f"var acc: {vt} = {vt}(0.0);")

        def visit(j: str, _copy: int, indent: str) -> None:
            if w > 1:
                a_at, b_at = f"{vt}({in_a}[u32(a_base) / {w}u + {j}])", f"{vt}({in_b}[u32(b_col) / {w}u + {j}])"
            else:
                a_at = f"f32({in_a}[u32(a_base + i32({j}) * params.a_sk)])"
                b_at = f"f32({in_b}[u32(b_col + i32({j}) * params.b_sk)])"
            b.line(f"{indent}acc = fma({a_at}, {b_at}, acc);")

        strided_loop(b, "j", "lidx", "params.k" if w == 1 else f"params.k / {w}u", f"{wgx}u", self.unroll, visit)
        b.line(f"var total = {f'dot(acc, {vt}(1.0))' if w > 1 else 'acc'};")
        workgroup_reduce(b, "total", "add", wgx, subgroups=self.choice.param("subgroups", False))
        b.line("if (lidx == 0u) {")
        self.store(b, "bt * params.n + col", "total", indent="  ")
        b.line("}")
