"""qgemm_thin: a few rows of x (a short prompt's prefill) times a quantized weight, x @ w.T.

qgemm stages 64x64 tiles: a prompt of 16 tokens fills a quarter of each tile, and a 2048-wide weight
makes 32 workgroups, each walking k one dependent block at a time. Here, as in qgemv, a workgroup's
threads stride along the 16-byte units of its weight rows, every load independent and dequantized in
registers; and, as in gemm_thin, the workgroup owns a block of `rows` rows of x (at most
QTHIN_ROWS) by `cols` weight rows: each unit, loaded and unpacked once, serves every row of x, and
each load of x every weight row. The partial sums meet in workgroup memory (gemm_thin's
store_block_sums) and go out through the fused epilogue. The weight is read once per block of x's
rows; x (a few rows) by every workgroup, from cache. All arithmetic in f32.

With a unit per thread, neighbouring threads read x 64 or 128 bytes apart: on the H200 a 16x2048x2048
q4_0 product took 91 us where gemm_thin's f32 one takes 23 (run W). The `split` param gives each unit
to four threads, one 4-byte word and its lanes each (formats.word_lanes), so that neighbouring threads
read neighbouring 16 bytes of x. It is tested on every format but not yet timed on a GPU (the device
time ran out): the rule leaves it off, and benchmarks/device/qthin_sweep.py times it beside the rest.
"""

from __future__ import annotations

from backend_wgpu.kernel import Workload
from backend_wgpu.kernels.matmul.base import rule_said
from backend_wgpu.kernels.matmul.gemm_thin import ThinBlock, parts_size, store_block_sums
from backend_wgpu.kernels.quant.formats import describe
from backend_wgpu.kernels.quant.qgemv import QuantMatmulKernel, quant_operand, unit_update
from backend_wgpu.wgsl import WgslBuilder
from ir.graph import Graph
from ir.node import Node

QTHIN_ROWS = 16  # rows of x per workgroup at most (rows x cols partial sums in each thread's registers)


class QuantThinKernel(ThinBlock, QuantMatmulKernel):
    name = "qgemm_thin"

    @classmethod
    def reason(cls, graph: Graph, node: Node) -> str:
        w = quant_operand(graph, node)
        rows, cols = node.kernel.param("rows"), node.kernel.param("cols", 1)
        units = "each unit split among four threads" if node.kernel.param("split", False) else "a unit each"
        return (
            f"few rows of x @ w.T, w {describe(w.dtype, w.shape)} dequantized in registers: a workgroup per "
            f"{rows} rows of x by {cols} weight row{'s' * (cols > 1)}, {node.kernel.workgroup[0]} threads along "
            f"the weight rows' 16-byte units ({units}); {rule_said(node)}"
        )

    def calculate_dispatch(self) -> Workload:
        m, n = self.core.shape
        blocks = -(-m // self.rows) * -(-n // self.cols)
        return Workload.for_workgroups(blocks, self.choice.workgroup, self.max_workgroups)

    def loop_iterations(self) -> int:
        threads = self.choice.workgroup[0] // (4 if self.choice.param("split", False) else 1)
        units = self.fmt.units(self.operands[self.ia].view.shape[-1])
        outs = self.rows * self.cols
        return -(-units // threads) + 1 + -(-outs // threads) * (threads + 1)  # the units, then the sums

    def render(self, b: WgslBuilder) -> None:
        fmt, rows, cols = self.fmt, self.rows, self.cols
        threads = self.choice.workgroup[0]
        subgroups = bool(self.choice.param("subgroups", False))
        in_b = self.in_name(self.ib)
        fmt.define(b, in_b)
        if self.code:
            self.code.describe(b)
        b.workgroup_var(f"parts: array<f32, {parts_size(rows, cols, threads, subgroups)}>")
        b.line(f"let col_blocks = (params.n + {cols - 1}u) / {cols}u;")
        b.line(f"let col0 = wg % col_blocks * {cols}u;")
        b.line(f"let row0 = wg / col_blocks * {rows}u;")
        b.line("if (row0 >= params.m) { return; }  // whole workgroups only: the barrier stays uniform")
        # rows and weight rows past the edge read the last one again (their sums are never stored): no branch
        for c in range(cols):
            b.line(f"let unit{c} = min(col0 + {c}u, params.n - 1u) * params.upr;")
        for r in range(rows):
            b.line(f"let xrow{r} = min(row0 + {r}u, params.m - 1u);")
            for c in range(cols):
                b.line(f"var acc{r}_{c} = 0.0;")
        if self.choice.param("split", False):
            self._split_units(b, threads)
        else:
            self._whole_units(b, threads)
        b.line("}")
        store_block_sums(self, b, rows, cols, threads, subgroups, "row * params.n + col")

    def _whole_units(self, b: WgslBuilder, threads: int) -> None:
        """The loop over units, one thread per unit (its 16-byte load and every lane): neighbouring threads
        read x a unit (64 or 128 bytes) apart."""
        fmt = self.fmt
        lanes = fmt.lanes("q")
        b.line(f"for (var u = lidx; u < params.upr; u += {threads}u) {{")
        for c in range(self.cols):  # every load first: the weight rows' units and scales
            self._unit_loads(b, c)
            # each lane unpacked once, for every row of x
            for j, (value, _) in enumerate(fmt.lanes(f"q{c}")):
                b.line(f"  let w{c}_{j} = {value};")
        unpacked = [[(f"w{c}_{j}", offset) for j, (_, offset) in enumerate(lanes)] for c in range(self.cols)]
        self._rows(b, unpacked, [f"u * {fmt.values_per_unit}u + {offset}u" for _, offset in lanes])

    def _split_units(self, b: WgslBuilder, threads: int) -> None:
        """The loop over units, four threads per unit, one word each (`split`): the unit's load is the same for
        the four, and neighbouring threads read neighbouring 16 bytes of x."""
        fmt = self.fmt
        lanes = fmt.word_lanes("q", "sub")
        b.line("let sub = lidx % 4u;  // this thread's word of each unit")
        b.line(f"for (var u = lidx / 4u; u < params.upr; u += {threads // 4}u) {{")
        for c in range(self.cols):
            self._unit_loads(b, c)
            for j, (value, _) in enumerate(fmt.word_lanes(f"q{c}", "sub")):
                b.line(f"  let w{c}_{j} = {value};")
        unpacked = [[(f"w{c}_{j}", h) for j, (_, h) in enumerate(lanes)] for c in range(self.cols)]
        self._rows(b, unpacked, [f"u * {fmt.values_per_unit}u + {h}u + 4u * sub" for _, h in lanes])

    def _unit_loads(self, b: WgslBuilder, c: int) -> None:
        """Weight row c's unit u (`q{c}`, and what its lanes read besides) and its scale (`d{c}`)."""
        fmt, in_b = self.fmt, self.in_name(self.ib)
        b.line(f"  let q{c} = {in_b}[unit{c} + u];")
        for load in fmt.loads(in_b, f"q{c}", f"unit{c} + u"):
            b.line(f"  {load}")
        b.line(f"  let d{c} = {in_b}_scale({fmt.block_of(f'unit{c} + u')});")

    def _rows(self, b: WgslBuilder, unpacked: list[list[tuple[str, int]]], at: list[str]) -> None:
        """For each row of x: its values at positions `at` (one vec4 per lane) times every weight row's lanes."""
        fmt = self.fmt
        for r in range(self.rows):
            for j, k in enumerate(at):
                b.line(f"  let x{r}_{j} = {self.x_at(f'xrow{r}', k)};")
            if fmt.has_offset:  # sum(x) over the lanes, for the offset: scale * dot(q, x) - offset * sum(x)
                b.line(f"  let s{r} = dot({' + '.join(f'x{r}_{j}' for j in range(len(at)))}, vec4<f32>(1.0));")
            for c in range(self.cols):
                b.line(f"  {unit_update(fmt, f'acc{r}_{c}', unpacked[c], f'd{c}', f'x{r}_', f's{r}')}")
