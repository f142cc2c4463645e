"""Softmax and log-softmax over the last axis: one workgroup per row, in one kernel.

Pass 1 keeps a running (max, sum of exp) per thread (the online-softmax recurrence) and
merges them in the workgroup tree (blocks.tree_fold); pass 2 writes exp(x - max) / sum. The row is read twice,
written once; math in f32 for f16 data too.

As the core of a fused group (kernels/elementwise/fused.py) it reads each element through an
elementwise prologue (a scale, a mask) evaluated in both passes, and writes through an
epilogue; the input is then contiguous, in the order the prologue computes it.
"""

from __future__ import annotations

from backend_wgpu.element import WIDTHS, row_vector, why_not_wider
from backend_wgpu.kernel import Kernel, Meta, Workload
from backend_wgpu.kernels.blocks import infinity, lanes, tree_fold
from backend_wgpu.kernels.elementwise.fused import core_input
from backend_wgpu.kernels.rows import outer_dims_meta, strided_row_base, strided_row_load
from backend_wgpu.wgsl import WgslBuilder, f32v, store_cast, vtype
from ir.graph import Graph
from ir.node import Node
from ir.ops import Op
from ir.view import View


class SoftmaxKernel(Kernel):
    name = "softmax"
    takes_prologue = takes_epilogue = True
    vector_epilogue = True  # pass 2 writes KernelElement lanes through the epilogue at once

    @classmethod
    def widest_element(cls, node: Node, views: list[View]) -> int:
        return next(w for w in WIDTHS if node.shape[-1] % w == 0 and row_vector(views[0], 1, w))

    @classmethod
    def reason(cls, graph: Graph, node: Node) -> str:
        return f"a workgroup of {node.kernel.workgroup[0]} threads per row of {node.shape[-1] if node.shape else 1}"

    @classmethod
    def width_reason(cls, node: Node, views: list[View]) -> str:
        return why_not_wider(node, views)

    def __init__(self, node: Node, graph: Graph, max_workgroups: int = 65535) -> None:
        super().__init__(node, graph, max_workgroups)
        read = core_input(self, {"in": self.kernel_element(), "out": self.kernel_element()})
        self.core, self.code, self.src = read.core, read.code, read.src
        self.in_view, self.in_dtype = read.view, read.dtype

    def variant_key(self) -> str:
        return self.choice.variant + (f":{self.code.key()}" if self.code else "")

    def operand_type(self, i: int) -> str:
        if i != self.src and self.code is not None:
            return self.code.operand_type(i)
        return vtype(self.in_dtype, self.kernel_element(), storage=True)

    def metadata(self) -> Meta:
        v = self.in_view
        meta: Meta = [
            ("rows", "u32", self.core.size // max(self.core.shape[-1], 1)),
            ("n", "u32", v.shape[-1]),
            ("offset", "u32", v.offset),
        ]
        meta += outer_dims_meta(v, len(v.shape) - 1)
        meta.append(("inner", "i32", v.strides[-1]))
        return meta + (self.code.metadata() if self.code else [])

    def calculate_dispatch(self) -> Workload:
        rows = self.core.size // max(self.core.shape[-1], 1)
        return Workload.for_workgroups(rows, self.choice.workgroup, self.max_workgroups)

    def render(self, b: WgslBuilder) -> None:
        w, wgx = self.kernel_element(), self.choice.workgroup[0]
        vt = f32v(w)
        if self.code:
            self.code.describe(b)
        b.line("let row = wg;")
        b.line("if (row >= params.rows) { return; }")
        strided_row_base(b, "row", len(self.in_view.shape) - 1)
        load, count = strided_row_load(self.in_name(self.src) if self.src is not None else "", w)
        self._row_max_and_sum(b, load, count)
        b.line(f"let out_base = row * {count};")
        b.line(f"for (var j = lidx; j < {count}; j += {wgx}u) {{")
        b.line(f"  let x = {self._prologue(b, 'q', load)};")
        ct = vtype(self.core.dtype, w)
        if self.core.op is Op.SOFTMAX:
            value = f"{ct}(exp(x - {vt}(row_max)) / {vt}(row_sum))"
        else:
            value = f"{ct}((x - {vt}(row_max)) - {vt}(log(row_sum)))"  # never x - (m + log s): it rounds
        if self.code is not None and self.node.id != self.core.id:
            b.line(f"  let y = {value};")
            value = self.code.emit(b, "out", "e", f"(out_base + j) * {w}u", "(out_base + j)", acc="y", indent="  ")
        b.line(f"  out[out_base + j] = {store_cast(value, self.node.dtype, w)};")
        b.line("}")

    def _row_max_and_sum(self, b: WgslBuilder, load: str, count: str) -> None:
        """Pass 1: `row_max` and `row_sum` (of exp(x - row_max)), from each thread's running pair."""
        w, wgx = self.kernel_element(), self.choice.workgroup[0]
        b.workgroup_var(f"sh_m: array<f32, {wgx}>")
        b.workgroup_var(f"sh_s: array<f32, {wgx}>")
        b.helper(
            "merge",
            "fn merge(m1: f32, s1: f32, m2: f32, s2: f32) -> vec2<f32> {\n"
            "  let m = max(m1, m2);\n"
            "  if (s1 == 0.0) { return vec2<f32>(m2, s2); }\n"
            "  if (s2 == 0.0) { return vec2<f32>(m1, s1); }\n"
            "  // equal maxima (both -inf for masked-out entries) would make exp(-inf - -inf) a NaN\n"
            "  if (m1 == m2) { return vec2<f32>(m1, s1 + s2); }\n"
            "  return vec2<f32>(m, s1 * exp(m1 - m) + s2 * exp(m2 - m));\n}",
        )
        b.line(f"var m = -{infinity(b)};")
        b.line("var s = 0.0;")
        b.line(f"for (var j = lidx; j < {count}; j += {wgx}u) {{")
        b.line(f"  let x = {self._prologue(b, 'p', load)};")
        for lane in lanes("x", w):
            b.line(f"  {{ let ms = merge(m, s, {lane}, 1.0); m = ms.x; s = ms.y; }}")
        b.line("}")
        b.line("sh_m[lidx] = m;")
        b.line("sh_s[lidx] = s;")
        b.line("workgroupBarrier();")
        tree_fold(
            b,
            wgx,
            lambda h: (
                f"let ms = merge(sh_m[lidx], sh_s[lidx], sh_m[lidx + {h}], sh_s[lidx + {h}]); "
                "sh_m[lidx] = ms.x; sh_s[lidx] = ms.y;"
            ),
        )
        b.line("let row_max = sh_m[0];")
        b.line("let row_sum = sh_s[0];")

    def _prologue(self, b: WgslBuilder, tag: str, load: str) -> str:
        """The row element j in f32 lanes: loaded, or computed by the fused prologue."""
        if self.src is not None:
            return load
        w = self.kernel_element()
        elem, vidx = (
            (f"(u32(base) + j * {w}u)", f"(u32(base) / {w}u + j)") if w > 1 else ("(u32(base) + j)", "(u32(base) + j)")
        )
        return f"{f32v(w)}({self.code.emit(b, 'in', tag, elem, vidx, indent='  ')})"
