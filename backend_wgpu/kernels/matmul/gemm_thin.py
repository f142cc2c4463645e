"""gemm_thin[k_contig]: a few output rows and B contiguous along K (x @ W.T).

A register-blocked GEMM walks k in steps, each waiting on the loads of the step before: with a
handful of rows its few workgroups spend their time on that chain (MiniLM at 1x16 tokens ran
16x384x1536 in 72 us on an H200, for 2.4 MB of weights). Here, as in gemv, a workgroup's threads
stride along k, every load independent of the others; the workgroup owns a block of `rows` rows
(at most THIN_ROWS) by `cols` columns, so each thread keeps rows x cols partial sums, each load of
a column of B serves every row and each load of a row of A every column. The sums meet in
workgroup memory (after subgroup sums where the adapter has subgroups), and thread i adds block
element i's (and i + threads, ...) and stores it through the epilogue. B is read once in all; A (a few rows) is read by
every column block's workgroup, from cache: `cols` divides that traffic.
"""

from __future__ import annotations

from backend_wgpu.element import WIDTHS, k_contiguous
from backend_wgpu.kernel import Workload
from backend_wgpu.kernels.blocks import strided_loop, strided_loop_cost
from backend_wgpu.kernels.matmul.base import MatmulKernel, rule_said
from backend_wgpu.kernels.matmul.gemv import GemvKernel
from backend_wgpu.wgsl import WgslBuilder, f32v
from ir.graph import Graph
from ir.node import KernelChoice, Node
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


def parts_size(rows: int, cols: int, threads: int, subgroups: bool) -> int:
    """Floats of workgroup memory for the partial sums: one per thread per block element, or one per
    subgroup (WebGPU's subgroups have at least 4 lanes)."""
    return rows * cols * (max(1, threads // 4) if subgroups else threads)


class ThinBlock:
    """What the thin kernels (gemm_thin, qgemm_thin) share: a workgroup per block of `rows` rows by `cols`
    columns of the output, both in their KernelChoice's params."""

    choice: KernelChoice

    @property
    def rows(self) -> int:
        return self.choice.param("rows")

    @property
    def cols(self) -> int:
        return self.choice.param("cols", 1)


class ThinGemmKernel(ThinBlock, GemvKernel):
    """gemm_thin[k_contig]: a workgroup per block of rows x cols outputs, threads along k (gemv's operand
    types and unroll; gemv is its one-row, one-column case with a workgroup tree)."""

    name = "gemm_thin"

    @classmethod
    def widest_element(cls, node: Node, views: list[View]) -> int:
        a_view, b_view = views
        k = a_view.shape[-1]
        return next(w for w in WIDTHS if k % w == 0 and rows_vector(a_view, w) and k_contiguous(b_view, w))

    @classmethod
    def reason(cls, graph: Graph, node: Node) -> str:
        rows, cols = node.kernel.param("rows"), node.kernel.param("cols", 1)
        return (
            f"few output rows: a workgroup per {rows} rows x {cols} columns, threads along K (B read "
            f"contiguously along K, once); {rule_said(node)}"
        )

    def variant_key(self) -> str:
        fused = f":{self.code.key()}" if self.code else ""
        sg = ":sg" if self.choice.param("subgroups", False) else ""
        return f"{self.choice.variant}:r{self.rows}c{self.cols}:u{self.unroll}{sg}{fused}"

    def calculate_dispatch(self) -> Workload:
        batch, m, n, _ = self._dims()
        blocks = -(-m // self.rows) * -(-n // self.cols)
        return Workload.for_workgroups(batch * blocks, self.choice.workgroup, self.max_workgroups)

    def loop_iterations(self) -> int:
        wg = self.choice.workgroup[0]
        k = self._dims()[3] // self.kernel_element()
        outs = self.rows * self.cols
        return strided_loop_cost(k, wg, self.unroll) + -(-outs // wg) * (wg + 1) + 1  # the loop, then the parts

    def render(self, b: WgslBuilder) -> None:
        w, wg, rows, cols = self.kernel_element(), self.choice.workgroup[0], self.rows, self.cols
        subgroups = bool(self.choice.param("subgroups", False))
        vt = f32v(w)
        in_a, in_b = self.in_name(self.ia), self.in_name(self.ib)
        if self.code:
            self.code.describe(b)
        b.workgroup_var(f"parts: array<f32, {parts_size(rows, cols, wg, subgroups)}>")
        b.line(f"let col_blocks = (params.n + {cols - 1}u) / {cols}u;")
        b.line(f"let row_blocks = (params.m + {rows - 1}u) / {rows}u;")
        b.line(f"let col0 = wg % col_blocks * {cols}u;")
        b.line(f"let row0 = wg / col_blocks % row_blocks * {rows}u;")
        b.line("let bt = wg / col_blocks / row_blocks;")
        b.line("if (bt >= params.batch) { return; }")
        self._batch_offsets(b, "bt")
        # rows and columns past the edge read the last one again (their sums are never stored): no branch
        for r in range(rows):
            b.line(f"let a_row{r} = a_base + i32(min(row0 + {r}u, params.m - 1u)) * params.a_sm;")
        for c in range(cols):
            b.line(f"let b_col{c} = b_base + i32(min(col0 + {c}u, params.n - 1u)) * params.b_sn;")
        for r in range(rows):
            for c in range(cols):
                b.line(f"var acc{r}_{c} = 0.0;")

        def visit(j: str, _copy: int, indent: str) -> None:
            for c in range(cols):
                at = f"u32(b_col{c}) / {w}u + {j}" if w > 1 else f"u32(b_col{c} + i32({j}) * params.b_sk)"
                b.line(f"{indent}let b{c} = {vt}({in_b}[{at}]);")
            for r in range(rows):
                at = f"u32(a_row{r}) / {w}u + {j}" if w > 1 else f"u32(a_row{r} + i32({j}) * params.a_sk)"
                b.line(f"{indent}let a{r} = {vt}({in_a}[{at}]);")
                for c in range(cols):
                    term = f"dot(a{r}, b{c})" if w > 1 else f"a{r} * b{c}"
                    b.line(f"{indent}acc{r}_{c} += {term};")

        strided_loop(b, "j", "lidx", "params.k" if w == 1 else f"params.k / {w}u", f"{wg}u", self.unroll, visit)
        store_block_sums(self, b, rows, cols, wg, subgroups, "(bt * params.m + row) * params.n + col")


def store_block_sums(
    kernel: MatmulKernel, b: WgslBuilder, rows: int, cols: int, wg: int, subgroups: bool, index: str
) -> None:
    """The end of a thin kernel (gemm_thin, qgemm_thin): each thread's partial sums `acc{r}_{c}` of a block of
    rows x cols outputs (from row0, col0) into `parts` (declared parts_size floats; after subgroup sums where
    `subgroups`), then thread e adds block element e's parts (and e + wg's...) and stores the total through
    the kernel's epilogue at `index` (WGSL, of `row` and `col`)."""
    outs = rows * cols
    stride = parts_size(rows, cols, wg, subgroups) // outs  # one block element's parts
    for r in range(rows):
        for c in range(cols):
            at = (r * cols + c) * stride
            if subgroups:  # each subgroup's sum by its first lane, at that subgroup's place
                b.builtin("@builtin(subgroup_invocation_id) sg_lane: u32")
                b.builtin("@builtin(subgroup_size) sg_size: u32")
                b.line(f"let sum{r}_{c} = subgroupAdd(acc{r}_{c});")
                b.line(f"if (sg_lane == 0u) {{ parts[{at}u + lidx / sg_size] = sum{r}_{c}; }}")
            else:
                b.line(f"parts[{at}u + lidx] = acc{r}_{c};")
    b.line("workgroupBarrier();")
    count = f"({wg}u + sg_size - 1u) / sg_size" if subgroups else f"{wg}u"
    b.line(f"for (var e = lidx; e < {outs}u; e += {wg}u) {{  // block element e: row e / cols, column e % cols")
    b.line(f"  let row = row0 + e / {cols}u;")
    b.line(f"  let col = col0 + e % {cols}u;")
    b.line("  if (row < params.m && col < params.n) {")
    b.line(f"    var total = parts[e * {stride}u];")
    b.line(f"    for (var i = 1u; i < {count}; i++) {{ total += parts[e * {stride}u + i]; }}")
    kernel.store(b, index, "total", indent="    ")
    b.line("  }")
    b.line("}")
