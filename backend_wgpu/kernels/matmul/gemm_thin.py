"""gemm_thin[k_contig]: a few output rows (2 to THIN_ROWS) and B contiguous along K (x @ W.T).

A register-blocked GEMM walks k in steps, each waiting on the loads of the step before: with a
handful of rows its few workgroups spend their time on that chain (MiniLM at 1x16 tokens ran
16x384x1536 in 72 us on an H200, for 2.4 MB of weights). Here, as in gemv, a workgroup owns
one output column and its threads stride along k, every load independent of the others; it
does so for a block of `rows` rows at once, so each load of B's column serves all of them and
each thread keeps one partial sum per row. The sums meet in workgroup memory (after subgroup
sums where the adapter has subgroups), and thread r adds row r's and stores it through the
epilogue. B is read once in all; A (a few rows) is read by every column's workgroup, from cache.
"""

from __future__ import annotations

from backend_wgpu.element import WIDTHS, k_contiguous
from backend_wgpu.kernel import Workload
from backend_wgpu.kernels.blocks import strided_loop, strided_loop_cost
from backend_wgpu.kernels.matmul.base import MatmulKernel, rule_said
from backend_wgpu.wgsl import WgslBuilder, f32v, vtype
from ir.graph import Graph
from ir.node import Node
from ir.view import View

THIN_ROWS = 16  # rows per workgroup at most (one partial sum per row in each thread's registers)


def rows_vector(a_view: View, width: int) -> bool:
    """A's rows are contiguous runs along k that start at multiples of `width` (vector loads of every row)."""
    if width == 1:
        return True
    if a_view.strides[-1] != 1 or a_view.offset % width or a_view.shape[-1] % width:
        return False
    return all(
        s % width == 0
        for i, (d, s) in enumerate(zip(a_view.shape, a_view.strides))
        if d > 1 and i != len(a_view.shape) - 1
    )


class ThinGemmKernel(MatmulKernel):
    """gemm_thin[k_contig]: a workgroup per (output column, block of rows), threads along k."""

    name = "gemm_thin"
    width_along_k = True

    @classmethod
    def widest_element(cls, node: Node, views: list[View]) -> int:
        a_view, b_view = views
        k = a_view.shape[-1]
        return next(w for w in WIDTHS if k % w == 0 and rows_vector(a_view, w) and k_contiguous(b_view, w))

    @classmethod
    def reason(cls, graph: Graph, node: Node) -> str:
        rows = node.kernel.param("rows")
        return (
            f"few output rows: a workgroup per output column and {rows} rows, threads along K (B read "
            f"contiguously along K, once); {rule_said(node)}"
        )

    @property
    def rows(self) -> int:
        return self.choice.param("rows")

    @property
    def unroll(self) -> int:
        return self.choice.param("unroll", 1)

    def variant_key(self) -> str:
        fused = f":{self.code.key()}" if self.code else ""
        sg = ":sg" if self.choice.param("subgroups", False) else ""
        return f"{self.choice.variant}:r{self.rows}:u{self.unroll}{sg}{fused}"

    def operand_type(self, i: int) -> str:
        if self.role(i) == "epilogue":
            return self.code.operand_type(i)
        return vtype(self.operands[i].dtype, self.kernel_element(), storage=True)

    def output_type(self) -> str:
        return vtype(self.node.dtype, 1, storage=True)

    def calculate_dispatch(self) -> Workload:
        batch, m, n, _ = self._dims()
        blocks = -(-m // self.rows)
        return Workload.for_workgroups(batch * blocks * n, self.choice.workgroup, self.max_workgroups)

    def loop_iterations(self) -> int:
        wg = self.choice.workgroup[0]
        k = self._dims()[3] // self.kernel_element()
        return strided_loop_cost(k, wg, self.unroll) + wg + 1  # the loop, then row r's sum of the parts

    def render(self, b: WgslBuilder) -> None:
        w, wg, rows = self.kernel_element(), self.choice.workgroup[0], self.rows
        subgroups = bool(self.choice.param("subgroups", False))
        vt = f32v(w)
        in_a, in_b = self.in_name(self.ia), self.in_name(self.ib)
        if self.code:
            self.code.describe(b)
        b.workgroup_var(f"parts: array<f32, {rows * wg}>")
        b.line("let col = wg % params.n;")
        b.line(f"let blocks = (params.m + {rows - 1}u) / {rows}u;")
        b.line("let row0 = (wg / params.n) % blocks * " + f"{rows}u;")
        b.line("let bt = wg / params.n / blocks;")
        b.line("if (bt >= params.batch) { return; }")
        self._batch_offsets(b, "bt")
        b.line("let b_col = b_base + i32(col) * params.b_sn;")
        # rows past m read row m - 1 again (their sums are never stored): no branch in the loop
        for r in range(rows):
            b.line(f"let a_row{r} = a_base + i32(min(row0 + {r}u, params.m - 1u)) * params.a_sm;")
            b.line(f"var acc{r}: {vt} = {vt}(0.0);")

        def visit(j: str, _copy: int, indent: str) -> None:
            if w > 1:
                b.line(f"{indent}let bv = {vt}({in_b}[u32(b_col) / {w}u + {j}]);")
                for r in range(rows):
                    b.line(f"{indent}acc{r} = fma({vt}({in_a}[u32(a_row{r}) / {w}u + {j}]), bv, acc{r});")
            else:
                b.line(f"{indent}let bv = f32({in_b}[u32(b_col + i32({j}) * params.b_sk)]);")
                for r in range(rows):
                    b.line(f"{indent}acc{r} = fma(f32({in_a}[u32(a_row{r} + i32({j}) * params.a_sk)]), bv, acc{r});")

        strided_loop(b, "j", "lidx", "params.k" if w == 1 else f"params.k / {w}u", f"{wg}u", self.unroll, visit)
        for r in range(rows):
            total = f"dot(acc{r}, {vt}(1.0))" if w > 1 else f"acc{r}"
            if subgroups:  # each subgroup's sum by its first lane, at that subgroup's place
                b.builtin("@builtin(subgroup_invocation_id) sg_lane: u32")
                b.builtin("@builtin(subgroup_size) sg_size: u32")
                b.line(f"let sum{r} = subgroupAdd({total});")
                b.line(f"if (sg_lane == 0u) {{ parts[{r * wg}u + lidx / sg_size] = sum{r}; }}")
            else:
                b.line(f"parts[{r * wg}u + lidx] = {total};")
        b.line("workgroupBarrier();")
        count = f"({wg}u + sg_size - 1u) / sg_size" if subgroups else f"{wg}u"
        b.line(f"if (lidx < {rows}u && row0 + lidx < params.m) {{")
        b.line(f"  var total = parts[lidx * {wg}u];")
        b.line(f"  for (var i = 1u; i < {count}; i++) {{ total += parts[lidx * {wg}u + i]; }}")
        self.store(b, "(bt * params.m + row0 + lidx) * params.n + col", "total", indent="  ")
        b.line("}")
