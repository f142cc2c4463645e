"""Layer norm and RMS norm over the last axis: one workgroup per row, math in f32.

Layer norm is two-pass: the row's mean first, then the mean of squared deviations from
it (numerically stable where E[x^2] - E[x]^2 is not), then one pass that writes
(x - mean) * rsqrt(var + eps) * weight + bias. RMS norm needs only the mean of squares.
Each pass strides threads over the row and sums in workgroup memory. The row is read
as vec4/vec2 when passes.vectorize allows it; f16 data is widened to f32 on load.
"""

from __future__ import annotations

from backend_wgpu.element import WIDTHS, contiguous_run, row_vector
from backend_wgpu.kernel import Kernel, Meta, Workload, address, index_to_coords
from backend_wgpu.wgsl import WgslBuilder, vtype
from ir.graph import Graph
from ir.node import Node
from ir.ops import NormArg, Op
from ir.view import View


class NormKernel(Kernel):
    name = "norm"

    @classmethod
    def widest_element(cls, node: Node, views: list[View]) -> int:
        """Norms walk each row of x and the weight/bias vectors contiguously: all must allow the width."""
        x_view, affine = views[0], views[1:]
        n = node.shape[-1]
        for w in WIDTHS:
            if n % w == 0 and row_vector(x_view, 1, w) and all(contiguous_run(v, w) for v in affine):
                return w
        return 1

    @classmethod
    def reason(cls, graph: Graph, node: Node) -> str:
        return f"a workgroup of {node.kernel.workgroup[0]} threads per row of {node.shape[-1] if node.shape else 1}"

    @property
    def arg(self) -> NormArg:
        return self.node.arg

    def variant_key(self) -> str:
        return f"{self.choice.variant},w{int(self.arg.weight)},b{int(self.arg.bias)}"

    def operand_type(self, i: int) -> str:
        return vtype(self.operands[i].dtype, self.kernel_element(), storage=True)

    def _rows(self) -> int:
        return self.node.size // max(self.node.shape[-1], 1)

    def metadata(self) -> Meta:
        v = self.operands[0].view
        r = len(v.shape)
        meta: Meta = [("rows", "u32", self._rows()), ("n", "u32", v.shape[-1]), ("offset", "u32", v.offset)]
        meta += [(f"ks{d}", "u32", v.shape[d]) for d in range(r - 1)] + [
            (f"kt{d}", "i32", v.strides[d]) for d in range(r - 1)
        ]
        meta += [("inner", "i32", v.strides[-1]), ("eps", "f32", self.arg.eps)]
        for i, op in enumerate(self.operands[1:], start=1):
            meta += [(f"off{i}", "u32", op.view.offset), (f"st{i}", "i32", op.view.strides[-1])]
        return meta

    def calculate_dispatch(self) -> Workload:
        return Workload.for_workgroups(self._rows(), self.choice.workgroup, self.max_workgroups)

    def _tree_sum(self, b: WgslBuilder, value: str, result: str) -> None:
        """Sum `value` over the workgroup into `let result`, leaving `sh` free for reuse."""
        wgx = self.choice.workgroup[0]
        b.line(f"sh[lidx] = {value};")
        b.line("workgroupBarrier();")
        b.line(f"for (var s = {wgx // 2}u; s > 0u; s = s >> 1u) {{")
        b.line("  if (lidx < s) { sh[lidx] += sh[lidx + s]; }")
        b.line("  workgroupBarrier();")
        b.line("}")
        b.line(f"let {result} = sh[0];")
        b.line("workgroupBarrier();  // everyone has read sh[0] before it is written again")

    def render(self, b: WgslBuilder) -> None:
        w = self.kernel_element()
        wgx = self.choice.workgroup[0]
        r = len(self.operands[0].view.shape)
        vt = f"vec{w}<f32>" if w > 1 else "f32"
        out_t = vtype(self.node.dtype, w, storage=True)
        layer = self.node.op is Op.LAYER_NORM
        b.workgroup_var(f"sh: array<f32, {wgx}>")
        b.line("let row = wg;")
        b.line("if (row >= params.rows) { return; }")
        for line in index_to_coords("row", [f"ks{d}" for d in range(r - 1)], "k"):
            b.line(line)
        b.line(f"let base = {address('offset', [f'kt{d}' for d in range(r - 1)], [f'k{d}' for d in range(r - 1)])};")
        if w > 1:
            count = f"params.n / {w}u"
            load = f"{vt}(in0[u32(base) / {w}u + j])"
        else:
            count = "params.n"
            load = "f32(in0[u32(base + i32(j) * params.inner)])"
        # a thread's partial sum of a vector accumulator is the sum of its lanes
        lane_sum = (lambda v: f"dot({v}, {vt}(1.0))") if w > 1 else (lambda v: v)
        b.line("let n = f32(params.n);")
        if layer:
            b.line(f"var acc = {vt}(0.0);")
            b.line(f"for (var j = lidx; j < {count}; j += {wgx}u) {{ acc += {load}; }}")
            self._tree_sum(b, lane_sum("acc"), "total")
            b.line("let mean = total / n;")
            b.line(f"var acc2 = {vt}(0.0);")
            b.line(f"for (var j = lidx; j < {count}; j += {wgx}u) {{ let v = {load} - {vt}(mean); acc2 += v * v; }}")
        else:
            b.line(f"var acc2 = {vt}(0.0);")
            b.line(f"for (var j = lidx; j < {count}; j += {wgx}u) {{ let v = {load}; acc2 += v * v; }}")
        self._tree_sum(b, lane_sum("acc2"), "squares")
        b.line("let inv = inverseSqrt(squares / n + params.eps);")
        b.line(f"let out_base = row * {count};")
        b.line(f"for (var j = lidx; j < {count}; j += {wgx}u) {{")
        centered = f"({load} - {vt}(mean))" if layer else load
        b.line(f"  var y = {centered} * {vt}(inv);")
        for i in range(1, len(self.operands)):
            if w > 1:
                term = f"{vt}(in{i}[params.off{i} / {w}u + j])"
            else:
                term = f"f32(in{i}[u32(i32(params.off{i}) + i32(j) * params.st{i})])"
            is_weight = i == 1 and self.arg.weight
            b.line(f"  y = y {'*' if is_weight else '+'} {term};")
        b.line(f"  out[out_base + j] = {out_t}(y);")
        b.line("}")
