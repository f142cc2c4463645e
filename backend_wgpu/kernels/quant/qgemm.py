"""qgemm: x (M, K) @ w.T with w quantized (N, K), M > 1 (prefill), dequantizing into workgroup memory.

A workgroup of 16x16 threads computes a 64x64 tile of the output: 64 rows of x times 64
weight rows. It walks k one block (32 values) at a time: it stages x's 64x32 piece and
the 64 weight rows' blocks, dequantized once each (one 16-byte load of quants and a
scale per unit, formats.py), in workgroup memory as f32 (16 KiB, WebGPU's default
limit), then each thread accumulates a 4x4 register block, rows ty + 16i and columns
tx + 16j, so that neighbouring threads read neighbouring words and store neighbouring
outputs. Each output goes out through the fused epilogue (bias, activation, residual).
All arithmetic in f32; the loop runs K / 32 times (passes.select_kernels keeps it under 65,535).
"""

from __future__ import annotations

from backend_wgpu.kernel import Workload
from backend_wgpu.kernels.quant.formats import describe
from backend_wgpu.kernels.quant.qgemv import QuantMatmulKernel, quant_operand
from backend_wgpu.wgsl import WgslBuilder
from ir.graph import Graph
from ir.node import Node

TILE = 64  # rows of x and weight rows per workgroup
TK = 32  # one block along k
THREADS = 256  # a 16 x 16 workgroup


class QuantGemmKernel(QuantMatmulKernel):
    name = "qgemm"

    @classmethod
    def reason(cls, graph: Graph, node: Node) -> str:
        w = quant_operand(graph, node)
        return (
            f"x @ w.T, w {describe(w.dtype, w.shape)}: 64x64 tiles, each block dequantized once into workgroup memory"
        )

    def calculate_dispatch(self) -> Workload:
        m, n = self.core.shape
        tiles = -(-m // TILE) * -(-n // TILE)
        return Workload.for_workgroups(tiles, self.choice.workgroup, self.max_workgroups)

    def _stage_x(self, b: WgslBuilder) -> None:
        """x[m0 .. m0 + 63, k0 .. k0 + 31] into xs[kk * 64 + mm]; rows past M are clamped (never stored)."""
        if self.x_vec4():
            for t in range(TILE * TK // 4 // THREADS):
                b.line(f"  let v{t} = lidx + {t * THREADS}u;")
                b.line(f"  let xm{t} = v{t} / {TK // 4}u;")
                b.line(f"  let xk{t} = (v{t} % {TK // 4}u) * 4u;")
                b.line(f"  let xv{t} = {self.x_at(f'min(m0 + xm{t}, params.m - 1u)', f'k0 + xk{t}')};")
                for c, lane in enumerate("xyzw"):
                    b.line(f"  xs[(xk{t} + {c}u) * {TILE}u + xm{t}] = xv{t}.{lane};")
            return
        in_a = self.in_name(self.ia)
        for t in range(TILE * TK // THREADS):
            b.line(f"  let e{t} = lidx + {t * THREADS}u;")
            b.line(f"  let xm{t} = e{t} / {TK}u;")
            b.line(f"  let xk{t} = e{t} % {TK}u;")
            row = f"i32(min(m0 + xm{t}, params.m - 1u))"
            at = f"u32(i32(params.a_off) + {row} * params.a_sm + i32(k0 + xk{t}) * params.a_sk)"
            b.line(f"  xs[xk{t} * {TILE}u + xm{t}] = f32({in_a}[{at}]);")

    def _stage_w(self, b: WgslBuilder) -> None:
        """The 64 weight rows' block at k0 into ws[kk * 64 + nn], dequantized; one unit per thread."""
        fmt, in_b = self.fmt, self.in_name(self.ib)
        upb = fmt.units_per_block
        b.line(f"  if (lidx < {TILE * upb}u) {{")
        b.line(f"    let nn = lidx / {upb}u;")
        b.line(f"    let sub = lidx % {upb}u;")
        b.line(f"    let unit = min(n0 + nn, params.n - 1u) * params.upr + kb * {upb}u + sub;")
        b.line(f"    let q = {in_b}[unit];")
        for load in fmt.loads(in_b, "q", "unit"):
            b.line(f"    {load}")
        b.line(f"    let d = {in_b}_scale({fmt.block_of('unit')});")
        for j, (value, offset) in enumerate(fmt.lanes("q")):
            b.line(f"    let w{j} = {fmt.value('d', value, offset)};")
            for c, lane in enumerate("xyzw"):
                b.line(f"    ws[(sub * {fmt.values_per_unit}u + {offset + c}u) * {TILE}u + nn] = w{j}.{lane};")
        b.line("  }")

    def render(self, b: WgslBuilder) -> None:
        self.fmt.define(b, self.in_name(self.ib))
        if self.code:
            self.code.describe(b)
        b.workgroup_var(f"xs: array<f32, {TK * TILE}>")
        b.workgroup_var(f"ws: array<f32, {TK * TILE}>")
        b.line(f"let tiles_n = (params.n + {TILE - 1}u) / {TILE}u;")
        b.line(f"let tiles = ((params.m + {TILE - 1}u) / {TILE}u) * tiles_n;")
        b.line("if (wg >= tiles) { return; }  // whole workgroups only: the barriers stay uniform")
        b.line(f"let m0 = (wg / tiles_n) * {TILE}u;")
        b.line(f"let n0 = (wg % tiles_n) * {TILE}u;")
        for i in range(4):
            b.line(f"var acc{i} = vec4<f32>(0.0);")
        b.line(f"for (var kb = 0u; kb < params.k / {TK}u; kb++) {{")
        b.line(f"  let k0 = kb * {TK}u;")
        self._stage_x(b)
        self._stage_w(b)
        b.line("  workgroupBarrier();")
        b.line(f"  for (var kk = 0u; kk < {TK}u; kk++) {{")
        b.line(
            f"    let wv = vec4<f32>(ws[kk * {TILE}u + lid.x], ws[kk * {TILE}u + lid.x + 16u], "
            f"ws[kk * {TILE}u + lid.x + 32u], ws[kk * {TILE}u + lid.x + 48u]);"
        )
        for i in range(4):
            b.line(f"    acc{i} = fma(vec4<f32>(xs[kk * {TILE}u + lid.y + {16 * i}u]), wv, acc{i});")
        b.line("  }")
        b.line("  workgroupBarrier();")
        b.line("}")
        for i in range(4):
            b.line(f"let row{i} = m0 + lid.y + {16 * i}u;")
            for j, lane in enumerate("xyzw"):
                b.line(f"if (row{i} < params.m && n0 + lid.x + {16 * j}u < params.n) {{")
                self.store(b, f"row{i} * params.n + n0 + lid.x + {16 * j}u", f"acc{i}.{lane}", indent="  ")
                b.line("}")
