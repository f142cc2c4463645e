"""GEMV for 1 x K @ K x N with B contiguous along N, the k axis split across a workgroup.

A GEMV reads B once and does 2 flops per 4 bytes: it is bound by memory bandwidth, so it
must keep enough loads in flight on every multiprocessor. gemv[n_contig] gives each thread
a column and walks all of k (few, fat workgroups: N=4096 makes 16 of them). Here a
workgroup owns only `wx` KernelElements of columns (thin) and splits k across its `wy`
rows of threads; each thread keeps `unroll` independent loads of B in flight, then the
wy partial sums are added in workgroup memory (blocks.tree_fold over y). With narrow column tiles
N=4096 makes hundreds of workgroups, enough for a large GPU.
All arithmetic in f32. Variant n_contig_h8 (f16 weights, n % 8 == 0) reads 8 halves per
load as one vec4<u32> (16 bytes, as wide as an f32 vec4 load) and unpacks them.
"""

from __future__ import annotations

from backend_wgpu.element import WIDTHS, vector_readable
from backend_wgpu.kernel import Workload
from backend_wgpu.kernels.blocks import tree_cost, tree_fold
from backend_wgpu.kernels.matmul.base import MatmulKernel, rule_said
from backend_wgpu.wgsl import WgslBuilder, f32v, vtype
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
        return (
            f"one output row (M=1): B read contiguously along N, k split over {wy} rows of threads ({wx} across); "
            + rule_said(node)
        )

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

    def _lanes(self) -> int:
        """Accumulators per thread: one, or two vec4 for the 8 packed halves of h8."""
        return 2 if self.h8 else 1

    def _acc_type(self) -> str:
        return "vec4<f32>" if self.h8 else f32v(self.width())

    def _a_at(self, k: str) -> str:
        return f"f32({self.in_name(self.ia)}[u32(a_base + i32({k}) * params.a_sk)])"

    def _b_at(self, k: str) -> str:
        """The thread's columns of row k of B: f32 lanes, or the packed vec4<u32> of h8."""
        w, in_b = self.width(), self.in_name(self.ib)
        if w == 1:
            return f"f32({in_b}[u32(b_col + i32({k}) * params.b_sk)])"
        raw = f"{in_b}[u32(i32({k}) * params.b_sk) / {w}u + b_col]"
        return raw if self.h8 else f"{self._acc_type()}({raw})"

    def _fma_lines(self, a: str, x: str) -> list[str]:
        if not self.h8:
            return [f"acc0 = fma({self._acc_type()}({a}), {x}, acc0);"]
        lo = f"vec4<f32>(unpack2x16float({x}.x), unpack2x16float({x}.y))"
        hi = f"vec4<f32>(unpack2x16float({x}.z), unpack2x16float({x}.w))"
        return [f"acc0 = fma(vec4<f32>({a}), {lo}, acc0);", f"acc1 = fma(vec4<f32>({a}), {hi}, acc1);"]

    def _k_loop(self, b: WgslBuilder) -> None:
        """This thread's rows of k (lid.y, lid.y + wy, ...) into acc0 (and acc1)."""
        wy, unroll = self.choice.workgroup[1], self.choice.param("unroll", 4)
        for j in range(self._lanes()):
            b.line(f"var acc{j} = {self._acc_type()}(0.0);")
        b.line("var k = lid.y;")
        # main loop: `unroll` rows of B per thread per step, all loads issued before the FMAs
        b.line(f"for (; k + {(unroll - 1) * wy}u < params.k; k += {unroll * wy}u) {{")
        for u in range(unroll):
            b.line(f"  let x{u} = {self._b_at(f'k + {u * wy}u')};")
        for u in range(unroll):
            b.line(f"  let a{u} = {self._a_at(f'k + {u * wy}u')};")
        for u in range(unroll):
            for line in self._fma_lines(f"a{u}", f"x{u}"):
                b.line("  " + line)
        b.line("}")
        b.line(f"for (; k < params.k; k += {wy}u) {{")
        b.line(f"  let a = {self._a_at('k')};")
        b.line(f"  let x = {self._b_at('k')};")
        for line in self._fma_lines("a", "x"):
            b.line("  " + line)
        b.line("}")

    def loop_iterations(self) -> int:
        _, wy, _ = self.choice.workgroup
        unroll = self.choice.param("unroll", 4)
        rows = -(-self._dims()[3] // wy)  # rows of k per thread
        return rows // unroll + 1 + unroll + tree_cost(wy)  # the unrolled loop, its tail, the tree over y

    def render(self, b: WgslBuilder) -> None:
        w, lanes = self.width(), self._lanes()
        wx, wy, _ = self.choice.workgroup
        if self.code:
            self.code.describe(b)
        b.workgroup_var(f"sh: array<{self._acc_type()}, {lanes * wx * wy}>")
        b.line(f"let cols = params.n / {w}u;")
        b.line(f"let tiles = (cols + {wx - 1}u) / {wx}u;")
        b.line(f"let col = (wg % tiles) * {wx}u + lid.x;")
        b.line("let bt = wg / tiles;")
        b.line("if (bt >= params.batch) { return; }")
        self._batch_offsets(b, "bt")
        # threads past the last column still run the loop (on a clamped column) so that
        # every thread reaches the barriers; only their store is skipped
        b.line("let c = min(col, cols - 1u);")
        b.line(f"let b_col = u32(b_base) / {w}u + c;" if w > 1 else "let b_col = b_base + i32(c) * params.b_sn;")
        self._k_loop(b)
        # the wy rows of partial sums, added in a tree over y (lidx = lid.y * wx + lid.x)
        offsets = [j * wx * wy for j in range(lanes)]
        for j, o in enumerate(offsets):
            b.line(f"sh[{o}u + lidx] = acc{j};")
        b.line("workgroupBarrier();")
        tree_fold(
            b, wy, lambda h: " ".join(f"sh[{o}u + lidx] += sh[{o}u + lidx + {h} * {wx}u];" for o in offsets), "lid.y"
        )
        b.line("if (lid.y == 0u && col < cols) {")
        for j, o in enumerate(offsets):
            index = f"(bt * cols + col) * {lanes}u + {j}u"
            self.store(b, index, f"sh[{o}u + lid.x]", lanes=4 if self.h8 else w, indent="  ")
        b.line("}")
