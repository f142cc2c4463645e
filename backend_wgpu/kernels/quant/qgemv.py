"""qgemv: one row of x times a quantized weight, x @ w.T, dequantizing in registers (decode).

A GEMV reads each weight once, so it runs at the speed of memory: q8_0 reads 34 bytes,
q4_0 18 bytes, q4_k 18.5 and q6_k 26.25 per 32 weights where f32 reads 128. A workgroup of (wx, wy) threads owns
wy * rows weight rows; each thread owns `rows` of them and walks their units (one
16-byte vec4<u32> load of quants each, formats.py) with stride wx, so the wx threads of a
row group read consecutive 16-byte pieces of every row. One load of x (four vec4<f32>
for q8_0, eight for q4_0) serves all `rows` rows; the block's f16 scale multiplies the
unit's dot product once (q4_k: its scale, less its offset times the sum of x over the
unit, formats.py; q6_k: two scales, one per 16 values). The wx partial sums of each row are added by the workgroup
tree over x (blocks.tree_fold), and the sum goes out through the fused epilogue (bias,
activation, residual), as in the float GEMVs. All arithmetic in f32.

Variants: `x4` reads x as vec4 (a contiguous row starting on a multiple of 4), `x1` reads
it element by element through its strides. A thread's loop runs units_per_row / wx times
(passes.select_kernels keeps that under 65,535).
"""

from __future__ import annotations

from backend_wgpu.kernel import Meta, Workload
from backend_wgpu.kernels.blocks import tree_fold
from backend_wgpu.kernels.matmul.base import MatmulKernel, rule_said
from backend_wgpu.kernels.quant.formats import QuantFormat, describe, quant_format
from backend_wgpu.wgsl import WgslBuilder, vtype
from ir.graph import Graph
from ir.node import Node
from ir.ops import Op
from ir.view import View


def quant_operand(graph: Graph, node: Node) -> Node:
    """The quantized weight (N, K) a quant matmul (or its fused group) reads through w.T."""
    core = node.arg.core if node.op is Op.FUSED else node
    b = graph[core.srcs[1]]
    return graph[b.srcs[0]] if b.op is Op.VIEW else b


def unit_update(fmt: QuantFormat, acc: str, lanes: list[tuple[str, int]], d: str, x: str, s: str) -> str:
    """WGSL: `acc` += one unit's dot product, its lanes of quants (`fmt.lanes(q)`: value, offset in the unit)
    and scale `d` (formats.py) against x's values `{x}0`, `{x}1`, ... (vec4<f32>, one per lane) whose sum is
    `s` (used where the format has an offset)."""
    terms = " + ".join(f"dot({value}, {x}{j})" for j, (value, _) in enumerate(lanes))
    if fmt.half_scales:  # values 0..15 (the first four lanes) and 16..31 scaled apart
        lo, hi = (" + ".join(f"dot({v}, {x}{j})" for j, (v, o) in enumerate(lanes) if (o < 16) == h) for h in (1, 0))
        return f"{acc} = fma({d}.x, {lo}, fma({d}.y, {hi}, {acc}));"
    if fmt.has_offset:
        return f"{acc} = fma({d}.x, {terms}, fma(-{d}.y, {s}, {acc}));"
    return f"{acc} = fma({d}, {terms}, {acc});"


class QuantMatmulKernel(MatmulKernel):
    """What qgemv and qgemm share: x (M, K) @ w.T, w quantized (N, K) in units of 16 bytes."""

    @classmethod
    def width_reason(cls, node: Node, views: list[View]) -> str:
        return ""  # it reads 16-byte units of quants and vec4 of x whatever the KernelElement

    @property
    def fmt(self) -> QuantFormat:
        return quant_format(self.operands[self.ib].dtype)

    def x_vec4(self) -> bool:
        return self.choice.variant.startswith("x4")

    def variant_key(self) -> str:
        fused = f":{self.code.key()}" if self.code else ""
        params = ",".join(f"{k}{v}" for k, v in self.choice.params if k != "group")
        return f"{self.choice.variant}.{self.fmt.name}:{params}{fused}"

    def operand_type(self, i: int) -> str:
        role = self.role(i)
        if role == "epilogue":
            return self.code.operand_type(i)
        if role == "b":
            return "vec4<u32>"
        return vtype(self.operands[i].dtype, 4 if self.x_vec4() else 1, storage=True)

    def output_type(self) -> str:
        return vtype(self.node.dtype, 1, storage=True)

    def metadata(self) -> Meta:
        a = self.operands[self.ia].view
        m, k = a.shape
        n = self.core.shape[-1]
        meta: Meta = [("m", "u32", m), ("n", "u32", n), ("k", "u32", k)]
        meta += [("a_off", "u32", a.offset), ("a_sm", "i32", a.strides[0]), ("a_sk", "i32", a.strides[1])]
        meta += [("s4", "u32", self.fmt.units(n * k)), ("upr", "u32", self.fmt.units(k))]
        return meta + (self.code.metadata() if self.code else [])

    def x_at(self, row: str, k: str) -> str:
        """WGSL vec4<f32>: x[row, k .. k + 3] (k a multiple of 4)."""
        in_a = self.in_name(self.ia)
        if self.x_vec4():
            return f"vec4<f32>({in_a}[(params.a_off + {row} * u32(params.a_sm)) / 4u + ({k}) / 4u])"
        base = f"i32(params.a_off) + i32({row}) * params.a_sm"
        parts = [f"f32({in_a}[u32({base} + i32({k} + {j}u) * params.a_sk)])" for j in range(4)]
        return f"vec4<f32>({', '.join(parts)})"


class QuantGemvKernel(QuantMatmulKernel):
    name = "qgemv"

    @classmethod
    def reason(cls, graph: Graph, node: Node) -> str:
        w = quant_operand(graph, node)
        wx, wy, _ = node.kernel.workgroup
        rows, unroll = node.kernel.param("rows", 1), node.kernel.param("unroll", 1)
        return (
            f"one output row (M=1) of x @ w.T, w {describe(w.dtype, w.shape)} dequantized in registers: "
            f"{rows} weight rows per thread, {wx} threads along each row, {unroll} units of 16 bytes a step; "
            + rule_said(node)
        )

    def calculate_dispatch(self) -> Workload:
        _, wy, _ = self.choice.workgroup
        per_group = wy * self.choice.param("rows", 1)
        return Workload.for_workgroups(-(-self.core.shape[-1] // per_group), self.choice.workgroup, self.max_workgroups)

    def _units(self, b: WgslBuilder, units: list[str], rows: int) -> None:
        """Loop body: the given units of each of the thread's rows into acc0.. (loads first)."""
        fmt, in_b = self.fmt, self.in_name(self.ib)
        for i, u in enumerate(units):
            for r in range(rows):
                b.line(f"  let q{i}_{r} = {in_b}[unit{r} + {u}];")
                for load in fmt.loads(in_b, f"q{i}_{r}", f"unit{r} + {u}"):
                    b.line(f"  {load}")
        for i, u in enumerate(units):
            for r in range(rows):
                b.line(f"  let d{i}_{r} = {in_b}_scale({fmt.block_of(f'unit{r} + {u}')});")
            lanes = fmt.lanes("q")
            for j, (_, offset) in enumerate(lanes):
                b.line(f"  let x{i}_{j} = {self.x_at('0u', f'({u}) * {fmt.values_per_unit}u + {offset}u')};")
            if fmt.has_offset:  # sum(x) over the unit, for its offset: scale * dot(q, x) - offset * sum(x)
                b.line(f"  let s{i} = dot({' + '.join(f'x{i}_{j}' for j in range(len(lanes)))}, vec4<f32>(1.0));")
        for i in range(len(units)):
            for r in range(rows):
                b.line(f"  {unit_update(fmt, f'acc{r}', fmt.lanes(f'q{i}_{r}'), f'd{i}_{r}', f'x{i}_', f's{i}')}")

    def render(self, b: WgslBuilder) -> None:
        fmt = self.fmt
        wx, wy, _ = self.choice.workgroup
        rows = self.choice.param("rows", 1)
        in_b = self.in_name(self.ib)
        fmt.define(b, in_b)
        if self.code:
            self.code.describe(b)
        b.workgroup_var(f"sh: array<f32, {rows * wx * wy}>")
        b.line(f"let first = (wg * {wy}u + lid.y) * {rows}u;  // this thread's first weight row")
        # rows past the end are clamped, not skipped: every thread must reach the barriers
        for r in range(rows):
            b.line(f"let unit{r} = min(first + {r}u, params.n - 1u) * params.upr;")
            b.line(f"var acc{r} = 0.0;")
        unroll = self.choice.param("unroll", 1)
        b.line("var u = lid.x;")
        if unroll > 1:  # `unroll` units a step, every load issued before the arithmetic
            b.line(f"for (; u + {(unroll - 1) * wx}u < params.upr; u += {unroll * wx}u) {{")
            self._units(b, [f"u + {i * wx}u" for i in range(unroll)], rows)
            b.line("}")
        b.line(f"for (; u < params.upr; u += {wx}u) {{")
        self._units(b, ["u"], rows)
        b.line("}")
        # the wx partial sums of each row, added in a tree over x (lidx = lid.y * wx + lid.x)
        for r in range(rows):
            b.line(f"sh[{r * wx * wy}u + lidx] = acc{r};")
        b.line("workgroupBarrier();")
        step = " ".join(f"sh[{r * wx * wy}u + lidx] += sh[{r * wx * wy}u + lidx + {{h}}];" for r in range(rows))
        tree_fold(b, wx, lambda h: step.format(h=h), "lid.x")
        b.line("if (lid.x == 0u) {")
        for r in range(rows):
            b.line(f"  if (first + {r}u < params.n) {{")
            self.store(b, f"first + {r}u", f"sh[{r * wx * wy}u + lidx]", indent="    ")
            b.line("  }")
        b.line("}")
