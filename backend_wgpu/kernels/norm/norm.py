"""Layer norm and RMS norm over the last axis: one workgroup per row, math in f32.

Layer norm is two-pass: the row's mean first, then the mean of squared deviations from
it (numerically stable where E[x^2] - E[x]^2 is not), then one pass that writes
(x - mean) * rsqrt(var + eps) * weight + bias. RMS norm needs only the mean of squares.
Each pass strides threads over the row and sums in the workgroup tree (blocks.workgroup_reduce). The row is read
as vec4/vec2 when passes.vectorize allows it; f16 data is widened to f32 on load.
"""

from __future__ import annotations

from collections.abc import Callable

from backend_wgpu.element import WIDTHS, contiguous_run, row_vector
from backend_wgpu.kernel import Kernel, Meta, Workload
from backend_wgpu.kernels.blocks import strided_loop, strided_loop_cost, tree_cost, workgroup_reduce
from backend_wgpu.kernels.rows import outer_dims_meta, strided_row_base, strided_row_load
from backend_wgpu.wgsl import WgslBuilder, f32v, vtype
from ir.graph import Graph
from ir.node import Node
from ir.ops import NormArg, Op
from ir.view import View


def norm_width(node: Node, views: list[View]) -> int:
    """Norms walk each row of x and the weight/bias vectors contiguously: all must allow the width."""
    x_view, affine = views[0], views[1:]
    n = node.shape[-1]
    for w in WIDTHS:
        if n % w == 0 and row_vector(x_view, 1, w) and all(contiguous_run(v, w) for v in affine):
            return w
    return 1


class NormKernel(Kernel):
    name = "norm"

    @classmethod
    def widest_element(cls, node: Node, views: list[View]) -> int:
        return norm_width(node, views)

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
        meta: Meta = [("rows", "u32", self._rows()), ("n", "u32", v.shape[-1]), ("offset", "u32", v.offset)]
        meta += outer_dims_meta(v, len(v.shape) - 1)
        meta += [("inner", "i32", v.strides[-1]), ("eps", "f32", self.arg.eps)]
        for i, op in enumerate(self.operands[1:], start=1):
            meta += [(f"off{i}", "u32", op.view.offset), (f"st{i}", "i32", op.view.strides[-1])]
        return meta

    def calculate_dispatch(self) -> Workload:
        return Workload.for_workgroups(self._rows(), self.choice.workgroup, self.max_workgroups)

    def _row_sum(self, b: WgslBuilder, acc: str, result: str) -> None:
        """`var result`: the sum over the workgroup of every thread's (vector) accumulator `acc`."""
        w = self.kernel_element()
        # a thread's partial sum of a vector accumulator is the sum of its lanes
        b.line(f"var {result} = {f'dot({acc}, {f32v(w)}(1.0))' if w > 1 else acc};")
        workgroup_reduce(b, result, "add", self.choice.workgroup[0], subgroups=False)

    def _affine(self, i: int, j: str) -> str:
        """Element j of weight or bias (operand i) as f32 lanes."""
        w = self.kernel_element()
        if w > 1:
            return f"{f32v(w)}(in{i}[params.off{i} / {w}u + {j}])"
        return f"f32(in{i}[u32(i32(params.off{i}) + i32({j}) * params.st{i})])"

    @property
    def unroll(self) -> int:
        return self.choice.param("unroll", 1)

    def loop_iterations(self) -> int:
        wgx = self.choice.workgroup[0]
        passes = 3 if self.node.op is Op.LAYER_NORM else 2
        n = self.node.shape[-1] // self.kernel_element()
        return passes * strided_loop_cost(n, wgx, self.unroll) + (passes - 1) * tree_cost(wgx)

    def render(self, b: WgslBuilder) -> None:
        w, wgx = self.kernel_element(), self.choice.workgroup[0]
        vt = f32v(w)
        layer = self.node.op is Op.LAYER_NORM
        b.line("let row = wg;")
        b.line("if (row >= params.rows) { return; }")
        strided_row_base(b, "row", len(self.operands[0].view.shape) - 1)
        load, count = strided_row_load("in0", w)

        def walk(body: Callable[[str, str], list[str]]) -> None:
            """One pass over this thread's elements of the row: body(j) gives the WGSL lines of a visit."""

            def visit(j: str, _copy: int, indent: str) -> None:
                for line in body(j):
                    b.line(indent + line)

            strided_loop(b, "j", "lidx", count, f"{wgx}u", self.unroll, visit)

        def deviation(j: str) -> str:
            return f"({load(j)} - {vt}(mean))" if layer else load(j)

        b.line("let n = f32(params.n);")
        if layer:
            b.line(f"var acc = {vt}(0.0);")
            walk(lambda j: [f"acc += {load(j)};"])
            self._row_sum(b, "acc", "total")
            b.line("let mean = total / n;")
        b.line(f"var acc2 = {vt}(0.0);")
        walk(lambda j: [f"let v = {deviation(j)};", "acc2 += v * v;"])
        self._row_sum(b, "acc2", "squares")
        b.line("let inv = inverseSqrt(squares / n + params.eps);")
        b.line(f"let out_base = row * {count};")

        def write(j: str) -> list[str]:
            lines = [f"var y = {deviation(j)} * {vt}(inv);"]
            for i in range(1, len(self.operands)):
                is_weight = i == 1 and self.arg.weight
                lines.append(f"y = y {'*' if is_weight else '+'} {self._affine(i, j)};")
            return lines + [f"out[out_base + {j}] = {vtype(self.node.dtype, w, storage=True)}(y);"]

        walk(write)
