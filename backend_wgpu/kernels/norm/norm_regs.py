"""norm_regs[layer_norm|rms_norm]: the row held in registers, read once, fusable.

One workgroup per contiguous row, `per_thread` KernelElements per thread, math in f32.
Layer norm: the row's mean, then the mean of squared deviations from it (two-pass, as the
strided `norm` kernel computes it), then (x - mean) * rsqrt(var + eps) * weight + bias is
written; RMS norm needs only the mean of squares. Because the row is read once, the kernel
can be the core of a fused group (passes.fuse): the prologue computes x (a split-k product's
partial sums, its bias and the residual: BERT's `layer_norm(x + ff(x))` is the product and this
one kernel) and an epilogue follows the store. Weight and bias are read by the core itself, as vectors.
Rows too long for the registers run the strided `norm` kernel.
"""

from __future__ import annotations

from backend_wgpu.kernel import Meta
from backend_wgpu.kernels.blocks import fold_lanes, workgroup_reduce, workgroup_reduce_cost
from backend_wgpu.kernels.norm.norm import norm_width
from backend_wgpu.kernels.rows import ContiguousRowKernel
from backend_wgpu.wgsl import WgslBuilder, f32v, vtype
from ir.graph import Graph
from ir.node import Node
from ir.ops import NormArg, Op
from ir.view import View


class NormRegsKernel(ContiguousRowKernel):
    name = "norm_regs"

    @classmethod
    def widest_element(cls, node: Node, views: list[View]) -> int:
        return norm_width(node, views)

    @classmethod
    def reason(cls, graph: Graph, node: Node) -> str:
        n = node.shape[-1] if node.shape else 1
        return f"a workgroup of {node.kernel.workgroup[0]} threads per row of {n}, the row held in registers"

    def __init__(self, node: Node, graph: Graph, max_workgroups: int = 65535) -> None:
        super().__init__(node, graph, max_workgroups)
        srcs = self.core.srcs
        if node.op is Op.FUSED:
            self.affine = [node.arg.leaf_index(s) for s in srcs[1:]]  # passes.fuse keeps them leaves
        else:
            self.affine = list(range(1, len(srcs)))

    @property
    def arg(self) -> NormArg:
        return self.core.arg

    def _row_len(self) -> int:
        return self.core.shape[-1]

    def per_thread(self) -> int:
        """KernelElements each thread holds: the row split over the workgroup (shapes fix it)."""
        return max(1, -(-(self._row_len() // self.kernel_element()) // self.choice.workgroup[0]))

    def operand_type(self, i: int) -> str:
        if i in self.affine:
            return vtype(self.operands[i].dtype, self.kernel_element(), storage=True)
        return super().operand_type(i)

    def output_type(self) -> str:
        return vtype(self.node.dtype, self.kernel_element(), storage=True)

    def metadata(self) -> Meta:
        meta = super().metadata() + [("eps", "f32", self.arg.eps)]
        for i in self.affine:
            view = self.operands[i].view
            meta += [(f"aoff{i}", "u32", view.offset), (f"ast{i}", "i32", view.strides[-1])]
        return meta

    def variant_key(self) -> str:
        # "layer_norm,w1,b1:..." as the strided kernel names its variant, then the row kernels' knobs
        op, knobs = super().variant_key().split(":", 1)
        return f"{op},w{int(self.arg.weight)},b{int(self.arg.bias)}:{knobs}"

    def loop_iterations(self) -> int:
        return 2 * workgroup_reduce_cost(self.choice.workgroup[0], self.subgroups)  # the row is in registers

    def _affine(self, i: int, j: str) -> str:
        """Element j (in KernelElements) of weight or bias, operand i, as f32 lanes."""
        w = self.kernel_element()
        if w > 1:
            return f"{f32v(w)}(in{i}[params.aoff{i} / {w}u + {j}])"
        return f"f32(in{i}[u32(i32(params.aoff{i}) + i32({j}) * params.ast{i})])"

    def render(self, b: WgslBuilder) -> None:
        w, wgx, per = self.kernel_element(), self.choice.workgroup[0], self.per_thread()
        vt = f32v(w)
        layer = self.core.op is Op.LAYER_NORM
        self.begin_row(b)
        b.line("let out_base = row * params.cnt;")
        b.line(f"let n = f32(params.cnt * {w}u);")
        inside = self.load_registers(b, per, f"{vt}(0.0)")  # slots past the row's end: 0, never stored
        if layer:
            b.line("var total = 0.0;")
            for r in range(per):
                b.line(f"total += {fold_lanes('add', f'v{r}', w)};")
            workgroup_reduce(b, "total", "add", wgx, self.subgroups)
            b.line("let mean = total / n;")
            for r in range(per):  # deviations in place; the empty slots stay 0
                b.line(f"if ({inside[r]}) {{ v{r} = v{r} - {vt}(mean); }}")
        b.line("var squares = 0.0;")
        for r in range(per):
            b.line(f"squares += {f'dot(v{r}, v{r})' if w > 1 else f'v{r} * v{r}'};")
        workgroup_reduce(b, "squares", "add", wgx, self.subgroups)
        b.line("let inv = inverseSqrt(squares / n + params.eps);")
        for r in range(per):
            j = f"lidx + {r * wgx}u"
            b.line(f"if ({inside[r]}) {{")
            b.line(f"  var y = v{r} * {vt}(inv);")
            for k, i in enumerate(self.affine):
                is_weight = k == 0 and self.arg.weight
                b.line(f"  y = y {'*' if is_weight else '+'} {self._affine(i, j)};")
            self.store(b, f"out_base + {j}", "y", w, indent="  ")
            b.line("}")
