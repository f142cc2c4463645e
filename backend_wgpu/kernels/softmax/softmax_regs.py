"""softmax_regs[softmax|log_softmax]: the row held in registers, read from memory once.

One workgroup per row, `per_thread` KernelElements per thread: max, then the sum of exp,
then exp * (1 / sum) is written. One exp per element; math in f32. Rows too long for the
registers run the streaming softmax kernel.
"""

from __future__ import annotations

from backend_wgpu.element import WIDTHS, row_vector, why_not_wider
from backend_wgpu.kernels.blocks import fold_lanes, infinity, workgroup_reduce, workgroup_reduce_cost
from backend_wgpu.kernels.rows import ContiguousRowKernel
from backend_wgpu.wgsl import WgslBuilder, f32v, vtype
from ir.graph import Graph
from ir.node import Node
from ir.ops import Op
from ir.view import View


class SoftmaxRegsKernel(ContiguousRowKernel):
    name = "softmax_regs"

    @classmethod
    def widest_element(cls, node: Node, views: list[View]) -> int:
        return next(w for w in WIDTHS if node.shape[-1] % w == 0 and row_vector(views[0], 1, w))

    @classmethod
    def reason(cls, graph: Graph, node: Node) -> str:
        n = node.shape[-1] if node.shape else 1
        return f"a workgroup of {node.kernel.workgroup[0]} threads per row of {n}, the row held in registers"

    @classmethod
    def width_reason(cls, node: Node, views: list[View]) -> str:
        return why_not_wider(node, views)

    def _row_len(self) -> int:
        return self.core.shape[-1]

    def per_thread(self) -> int:
        """KernelElements each thread holds: the row split over the workgroup (shapes fix it)."""
        return max(1, -(-(self._row_len() // self.kernel_element()) // self.choice.workgroup[0]))

    def output_type(self) -> str:
        return vtype(self.node.dtype, self.kernel_element(), storage=True)

    def loop_iterations(self) -> int:
        return 2 * workgroup_reduce_cost(self.choice.workgroup[0], self.subgroups)  # the row is in registers

    def render(self, b: WgslBuilder) -> None:
        w = self.kernel_element()
        wgx = self.choice.workgroup[0]
        per = self.per_thread()
        vt = f32v(w)
        self.begin_row(b)
        b.line("let out_base = row * params.cnt;")
        inf = infinity(b)
        b.line(f"var m = -{inf};")
        # slots past the row's end hold -inf: exp gives 0 there, and they are never stored
        self.load_registers(b, per, f"{vt}(-{inf})")
        for r in range(per):
            b.line(f"m = max(m, {fold_lanes('max', f'v{r}', w)});")
        workgroup_reduce(b, "m", "max", wgx, self.subgroups)
        b.line("var s = 0.0;")
        for r in range(per):
            if self.core.op is Op.SOFTMAX:  # keep exp(x - max) in the registers for the store
                b.line(f"v{r} = exp(v{r} - {vt}(m));")
                b.line(f"s += {fold_lanes('add', f'v{r}', w)};")
            else:
                b.line(f"{{ let e = exp(v{r} - {vt}(m)); s += {fold_lanes('add', 'e', w)}; }}")
        workgroup_reduce(b, "s", "add", wgx, self.subgroups)
        if self.core.op is Op.SOFTMAX:
            b.line("let scale = 1.0 / s;")
            value = "v{r} * " + f"{vt}(scale)"
        else:
            # (x - m) - log s: folding m + log s first would round the answer away at large x
            b.line("let log_s = log(s);")
            value = "(v{r} - " + f"{vt}(m)) - {vt}(log_s)"
        for r in range(per):
            b.line(f"if (lidx + {r * wgx}u < params.cnt) {{")
            self.store(b, f"out_base + lidx + {r * wgx}u", f"({value.format(r=r)})", w, indent="  ")
            b.line("}")
