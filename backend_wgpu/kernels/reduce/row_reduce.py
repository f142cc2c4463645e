"""row_reduce[sum_rows|max_rows|min_rows]: contiguous float rows, loads kept in flight.

One workgroup per row; each thread issues `unroll` independent (vector) loads per step,
then the workgroup combines its threads' partials: subgroupAdd/Max/Min and one barrier
where the adapter has subgroups, else a tree in workgroup memory. Computes in f32; max/min
return NaN for a row holding a NaN, as numpy does (the NaN test is on the bits).
"""

from __future__ import annotations

from backend_wgpu.element import WIDTHS, row_vector
from backend_wgpu.kernels.rows import ContiguousRowKernel, _hfold, _inf, workgroup_reduce
from backend_wgpu.wgsl import WgslBuilder, vtype
from ir.graph import Graph
from ir.node import Node
from ir.ops import Op
from ir.view import View


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

    def render(self, b: WgslBuilder) -> None:
        w = self.kernel_element()
        wgx = self.choice.workgroup[0]
        unroll = self.choice.param("unroll", 4)
        kind = {Op.SUM: "add", Op.MAX: "max", Op.MIN: "min"}[self.core.op]
        vt = f"vec{w}<f32>" if w > 1 else "f32"
        if self.code:
            self.code.describe(b)
        b.line("let row = wg;")
        b.line("if (row >= params.rows) { return; }")
        b.line("let base = params.offset + row * params.cnt;")
        if kind == "add":
            b.line(f"var acc = {vt}(0.0);")
        else:
            inf = _inf(b)
            b.line(f"var acc = {vt}({'-' if kind == 'max' else ''}{inf});")
            b.line(f"var bad = {'vec' + str(w) + '<bool>' if w > 1 else 'bool'}(false);  // NaN seen")

        def step(x: str) -> list[str]:
            if kind == "add":
                return [f"acc += {x};"]
            # NaN test on the bits: drivers may fold `x != x` to false (fast math)
            u = f"vec{w}<u32>" if w > 1 else "u32"
            return [
                f"bad = bad | ((bitcast<{u}>({x}) & {u}(0x7fffffffu)) > {u}(0x7f800000u));",
                f"acc = {kind}(acc, {x});",
            ]

        b.line("var j = lidx;")
        b.line(f"for (; j + {(unroll - 1) * wgx}u < params.cnt; j += {unroll * wgx}u) {{")
        for u in range(unroll):
            b.line(f"  let x{u} = {self.load(b, f'base + j + {u * wgx}u', f'p{u}', indent='  ')};")
        for u in range(unroll):
            for line in step(f"x{u}"):
                b.line("  " + line)
        b.line("}")
        b.line(f"for (; j < params.cnt; j += {wgx}u) {{")
        b.line(f"  let x = {self.load(b, 'base + j', 'q', indent='  ')};")
        for line in step("x"):
            b.line("  " + line)
        b.line("}")
        b.line(f"var total = {_hfold(kind, 'acc', w)};")
        workgroup_reduce(b, "total", kind, wgx, self.subgroups)
        if kind != "add":
            b.line(f"var nans = select(0u, 1u, {'any(bad)' if w > 1 else 'bad'});")
            workgroup_reduce(b, "nans", "max", wgx, self.subgroups, "u32")
            b.line("var nan_bits = 0x7fc00000u;")
            b.line("if (nans != 0u) { total = bitcast<f32>(nan_bits); }")
        b.line("if (lidx == 0u) {")
        self.store(b, "row", "total", 1, indent="  ")
        b.line("}")
