"""Softmax and log-softmax over the last axis: one workgroup per row, in one kernel.

Pass 1 keeps a running (max, sum of exp) per thread (the online-softmax recurrence) and
merges them in workgroup memory; pass 2 writes exp(x - max) / sum. The row is read twice,
written once; math in f32 for f16 data too.
"""

from __future__ import annotations

from backend_wgpu.kernel import Kernel, Meta, Workload, address, index_to_coords
from backend_wgpu.wgsl import WgslBuilder, vtype
from ir.ops import Op


class SoftmaxKernel(Kernel):
    name = "softmax"

    def operand_type(self, i: int) -> str:
        return vtype(self.operands[0].dtype, self.kernel_element(), storage=True)

    def metadata(self) -> Meta:
        v = self.operands[0].view
        r = len(v.shape)
        meta: Meta = [
            ("rows", "u32", self.node.size // max(self.node.shape[-1], 1)),
            ("n", "u32", v.shape[-1]),
            ("offset", "u32", v.offset),
        ]
        meta += [(f"ks{d}", "u32", v.shape[d]) for d in range(r - 1)] + [
            (f"kt{d}", "i32", v.strides[d]) for d in range(r - 1)
        ]
        meta.append(("inner", "i32", v.strides[-1]))
        return meta

    def calculate_dispatch(self) -> Workload:
        rows = self.node.size // max(self.node.shape[-1], 1)
        return Workload.for_workgroups(rows, self.choice.workgroup, self.max_workgroups)

    def render(self, b: WgslBuilder) -> None:
        w = self.kernel_element()
        wgx = self.choice.workgroup[0]
        r = len(self.operands[0].view.shape)
        vt = f"vec{w}<f32>" if w > 1 else "f32"
        out_t = vtype(self.node.dtype, w, storage=True)
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
        b.line("let row = wg;")
        b.line("if (row >= params.rows) { return; }")
        for line in index_to_coords("row", [f"ks{d}" for d in range(r - 1)], "k"):
            b.line(line)
        b.line(f"let base = {address('offset', [f'kt{d}' for d in range(r - 1)], [f'k{d}' for d in range(r - 1)])};")
        if w > 1:
            load = f"{vt}(in0[u32(base) / {w}u + j])"
            count = f"params.n / {w}u"
        else:
            load = "f32(in0[u32(base + i32(j) * params.inner)])"
            count = "params.n"
        b.line("var inf_bits = 0x7f800000u;  // a var: an infinite constant is a WGSL compile error")
        b.line("var m = -bitcast<f32>(inf_bits);")
        b.line("var s = 0.0;")
        b.line(f"for (var j = lidx; j < {count}; j += {wgx}u) {{")
        b.line(f"  let x = {load};")
        lanes = [f"x.{c}" for c in "xyzw"[:w]] if w > 1 else ["x"]
        for lane in lanes:
            b.line(f"  {{ let ms = merge(m, s, {lane}, 1.0); m = ms.x; s = ms.y; }}")
        b.line("}")
        b.line("sh_m[lidx] = m;")
        b.line("sh_s[lidx] = s;")
        b.line("workgroupBarrier();")
        b.line(f"for (var st = {wgx // 2}u; st > 0u; st = st >> 1u) {{")
        b.line("  if (lidx < st) {")
        b.line("    let ms = merge(sh_m[lidx], sh_s[lidx], sh_m[lidx + st], sh_s[lidx + st]);")
        b.line("    sh_m[lidx] = ms.x; sh_s[lidx] = ms.y;")
        b.line("  }")
        b.line("  workgroupBarrier();")
        b.line("}")
        b.line("let row_max = sh_m[0];")
        b.line("let row_sum = sh_s[0];")
        b.line(f"let out_base = row * {count};")
        b.line(f"for (var j = lidx; j < {count}; j += {wgx}u) {{")
        b.line(f"  let x = {load};")
        if self.node.op is Op.SOFTMAX:
            b.line(f"  out[out_base + j] = {out_t}(exp(x - {vt}(row_max)) / {vt}(row_sum));")
        else:
            b.line(f"  out[out_base + j] = {out_t}(x - {vt}(row_max) - {vt}(log(row_sum)));")
        b.line("}")
