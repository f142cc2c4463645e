"""attention_combine: the key ranges of ATTENTION_SPLITS added up into the attention output.

One workgroup per output row (b, head, query): its threads are `groups` groups of one
thread per output element c; group r takes ranges r, r + groups, ... four at a time (their
loads in flight together) and folds each into a running (max, sum of exp, value sum):
a range's sums are rescaled by exp(m - M) for the common max M (0 for a range that saw
no key). The groups then merge through workgroup memory, and the output is the value sum
over the sum of exp. A row whose keys were all masked is NaN (0 / 0), as the unsplit
attention's.
"""

from __future__ import annotations

from backend_wgpu.kernel import Kernel, Meta, Workload
from backend_wgpu.kernels.attention.decode import pow2_at_least
from backend_wgpu.kernels.blocks import infinity
from backend_wgpu.kernels.expr import isnan
from backend_wgpu.wgsl import WgslBuilder, vtype
from ir.graph import Graph
from ir.node import Node

COMBINE_THREADS = 256
STEP = 4  # ranges a thread loads per step


class AttentionCombineKernel(Kernel):
    name = "attention_combine"

    @classmethod
    def reason(cls, graph: Graph, node: Node) -> str:
        splits = graph[node.srcs[0]].shape[-2]
        return f"a workgroup per output row adding its {splits} key ranges, groups of threads over the ranges"

    def _ev(self) -> int:
        return self.node.shape[-1]

    def _lanes(self) -> int:
        """Threads per group: one per output element (a power of two), at most the workgroup."""
        return min(pow2_at_least(self._ev()), self.choice.workgroup[0])

    def metadata(self) -> Meta:
        parts = self.operands[0].view
        rows = self.node.size // max(self._ev(), 1)
        return [
            ("rows", "u32", rows),
            ("splits", "u32", parts.shape[-2]),
            ("ev", "u32", self._ev()),
            ("p_off", "u32", parts.offset),
        ]

    def loop_iterations(self) -> int:
        """The element loop times the range loop (and the groups' merge), exit tests included."""
        lanes = self._lanes()
        groups = self.choice.workgroup[0] // lanes
        splits = self.operands[0].view.shape[-2]
        return (-(-self._ev() // lanes) + 1) * (-(-splits // (groups * STEP)) + 1 + groups)

    def calculate_dispatch(self) -> Workload:
        rows = self.node.size // max(self._ev(), 1)
        return Workload.for_workgroups(rows, self.choice.workgroup, self.max_workgroups)

    def operand_type(self, i: int) -> str:
        return "f32"

    def output_type(self) -> str:
        return vtype(self.node.dtype, 1, storage=True)

    def render(self, b: WgslBuilder) -> None:
        threads = self.choice.workgroup[0]
        lanes = self._lanes()
        groups = threads // lanes
        inf = infinity(b)
        b.workgroup_var(f"cm: array<vec3<f32>, {threads}>")
        b.workgroup_var(f"cb: array<u32, {threads}>")
        b.line("let row = wg;")
        b.line("if (row >= params.rows) { return; }")
        b.line(f"let lane = lidx % {lanes}u;")
        b.line(f"let grp = lidx / {lanes}u;")
        b.line("let stride = params.ev + 2u;")
        b.line("let base = params.p_off + row * params.splits * stride;")
        b.line(f"var m = -{inf};")
        b.line("var total = 0.0;")
        b.line("var acc = 0.0;")
        # a range that saw a NaN score stores its sum of exp as NaN: the output is NaN, tested on
        # the bits (drivers may assume no NaN and lose it in max/exp/sums)
        b.line("var bad = false;")
        b.line("var nan_bits = 0x7fc00000u;")
        # element loops over the row when it is wider than the workgroup
        b.line(f"for (var c0 = 0u; c0 < params.ev; c0 += {lanes}u) {{")
        b.line("  let c = c0 + lane;")
        b.line("  let on = c < params.ev;")
        b.line(f"  m = -{inf};")
        b.line("  total = 0.0;")
        b.line("  acc = 0.0;")
        b.line("  bad = false;")
        b.line(f"  for (var r0 = grp; r0 < params.splits; r0 += {groups * STEP}u) {{")
        for u in range(STEP):  # every load of the step first
            b.line(f"    let r{u} = r0 + {u * groups}u;")
            b.line(f"    var mr{u} = -{inf};")
            b.line(f"    var lr{u} = 0.0;")
            b.line(f"    var sr{u} = 0.0;")
            b.line(f"    if (r{u} < params.splits) {{")
            b.line(f"      let at{u} = base + r{u} * stride;")
            b.line(f"      mr{u} = in0[at{u} + params.ev];")
            b.line(f"      lr{u} = in0[at{u} + params.ev + 1u];")
            b.line(f"      bad = bad || {isnan(f'lr{u}', 'f32')};")
            b.line(f"      if (on) {{ sr{u} = in0[at{u} + c]; }}")
            b.line("    }")
        top = "m"
        for u in range(STEP):
            top = f"max({top}, mr{u})"
        b.line(f"    let top = {top};")
        b.line(f"    let none = top == -{inf};  // no key seen yet: keep the zeros")
        b.line("    let a = select(exp(m - top), 1.0, none);")
        b.line("    total = total * a;")
        b.line("    acc = acc * a;")
        for u in range(STEP):
            b.line(f"    let x{u} = select(exp(mr{u} - top), 0.0, none);")
            b.line(f"    total = fma(x{u}, lr{u}, total);")
            b.line(f"    acc = fma(x{u}, sr{u}, acc);")
        b.line("    m = top;")
        b.line("  }")
        if groups > 1:
            b.line("  cm[lidx] = vec3<f32>(m, total, acc);")
            b.line("  cb[lidx] = select(0u, 1u, bad);")
            b.line("  workgroupBarrier();")
            b.line("  if (grp == 0u) {")
            b.line(f"    for (var r = 1u; r < {groups}u; r++) {{")
            b.line(f"      bad = bad || cb[r * {lanes}u + lane] != 0u;")
            b.line(f"      let o = cm[r * {lanes}u + lane];")
            b.line("      let top = max(m, o.x);")
            b.line(f"      let a = select(exp(m - top), 0.0, m == -{inf});")
            b.line(f"      let x = select(exp(o.x - top), 0.0, o.x == -{inf});")
            b.line("      total = total * a + o.y * x;")
            b.line("      acc = acc * a + o.z * x;")
            b.line("      m = top;")
            b.line("    }")
            b.line("  }")
            b.line("  workgroupBarrier();  // cm is rewritten next")
        b.line("  if (grp == 0u && on) {")
        b.line(
            f"    out[row * params.ev + c] = {vtype(self.node.dtype, 1, storage=True)}"
            "(select(acc / total, bitcast<f32>(nan_bits), bad));"
        )
        b.line("  }")
        b.line("}")
