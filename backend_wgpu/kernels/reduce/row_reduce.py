"""row_reduce[sum_rows|max_rows|min_rows]: contiguous float rows, loads kept in flight.

One workgroup per row; each thread issues `unroll` independent (vector) loads per step,
then the workgroup combines its threads' partials (blocks.workgroup_reduce: subgroup
operations and one barrier where the adapter has subgroups, else a tree in workgroup
memory). Computes in f32; max/min return NaN for a row holding a NaN, as numpy does (the
NaN test is on the bits: drivers may fold `x != x` to false).
"""

from __future__ import annotations

from backend_wgpu.element import WIDTHS, row_vector
from backend_wgpu.kernels import expr
from backend_wgpu.kernels.blocks import fold_lanes, infinity, workgroup_reduce, workgroup_reduce_cost
from backend_wgpu.kernels.rows import ContiguousRowKernel
from backend_wgpu.wgsl import WgslBuilder, f32v, vtype
from ir.dtypes import DType
from ir.graph import Graph
from ir.node import Node
from ir.ops import Op
from ir.view import View

KIND = {Op.SUM: "add", Op.MAX: "max", Op.MIN: "min"}


class RowReduceKernel(ContiguousRowKernel):
    name = "row_reduce"

    @classmethod
    def widest_element(cls, node: Node, views: list[View]) -> int:
        return next(w for w in WIDTHS if row_vector(views[0], node.arg, w))

    @classmethod
    def reason(cls, graph: Graph, node: Node) -> str:
        row = graph[node.srcs[0]].size // max(node.size, 1)
        how = "subgroup reductions" if node.kernel.param("subgroups") else "a tree in workgroup memory"
        return f"{node.size} rows of {row}: a workgroup shares each contiguous row ({how})"

    def _row_len(self) -> int:
        return self.input.view.size // max(self.core.size, 1)

    def output_type(self) -> str:
        return vtype(self.node.dtype, 1, storage=True)

    def _step(self, x: str) -> list[str]:
        """Fold the element x into the thread's accumulator (and its NaN flag for max/min)."""
        kind = KIND[self.core.op]
        if kind == "add":
            return [f"acc += {x};"]
        return [f"bad = bad | {expr.isnan(x, f32v(self.kernel_element()))};", f"acc = {kind}(acc, {x});"]

    def loop_iterations(self) -> int:
        wgx, unroll = self.choice.workgroup[0], self.choice.param("unroll", 4)
        per_thread = -(-(self._row_len() // self.kernel_element()) // wgx)
        trees = 1 if KIND[self.core.op] == "add" else 2  # max/min also combine their NaN flags
        return per_thread // unroll + 1 + unroll + trees * workgroup_reduce_cost(wgx, self.subgroups)

    def render(self, b: WgslBuilder) -> None:
        w, wgx = self.kernel_element(), self.choice.workgroup[0]
        unroll = self.choice.param("unroll", 4)
        kind = KIND[self.core.op]
        self.begin_row(b)
        if kind == "add":
            b.line(f"var acc = {f32v(w)}(0.0);")
        else:
            inf = infinity(b)
            b.line(f"var acc = {f32v(w)}({'-' if kind == 'max' else ''}{inf});")
            b.line(f"var bad = {vtype(DType.bool, w)}(false);  // NaN seen")
        b.line("var j = lidx;")
        b.line(f"for (; j + {(unroll - 1) * wgx}u < params.cnt; j += {unroll * wgx}u) {{")
        for u in range(unroll):  # every load issued before the first use
            b.line(f"  let x{u} = {self.load(b, f'base + j + {u * wgx}u', f'p{u}', indent='  ')};")
        for u in range(unroll):
            for line in self._step(f"x{u}"):
                b.line("  " + line)
        b.line("}")
        b.line(f"for (; j < params.cnt; j += {wgx}u) {{")
        b.line(f"  let x = {self.load(b, 'base + j', 'q', indent='  ')};")
        for line in self._step("x"):
            b.line("  " + line)
        b.line("}")
        b.line(f"var total = {fold_lanes(kind, 'acc', w)};")
        workgroup_reduce(b, "total", kind, wgx, self.subgroups)
        if kind != "add":
            b.line(f"var nans = select(0u, 1u, {'any(bad)' if w > 1 else 'bad'});")
            workgroup_reduce(b, "nans", "max", wgx, self.subgroups, "u32")
            b.line("var nan_bits = 0x7fc00000u;")
            b.line("if (nans != 0u) { total = bitcast<f32>(nan_bits); }")
        b.line("if (lidx == 0u) {")
        self.store(b, "row", "total", 1, indent="  ")
        b.line("}")
