"""cumsum and cumprod along the last axis: out[..., j] = x[..., 0] (+ or *) ... x[..., j].

Two variants (passes.select_kernels picks by row length):
  serial  one thread per row walks it in order: numpy's order of operations, so float32
          results are numpy's bit for bit; for rows up to `serial_max`.
  blocks  one workgroup per row: each thread scans its chunk, the workgroup scans the chunk
          totals in workgroup memory (Hillis-Steele), each thread rescans its chunk from its
          prefix. Chunks keep every loop far below lavapipe's 65,535 iterations.
Rows are read through any strides (rows.strided_row_base); floats accumulate in f32 (float16
too, rounded once per output: numpy rounds each partial sum to float16), ints in their type.
"""

from __future__ import annotations

from typing import ClassVar

from backend_wgpu.kernel import Kernel, Meta, Workload
from backend_wgpu.kernels.rows import outer_dims_meta, strided_row_base
from backend_wgpu.wgsl import WgslBuilder, store_cast, vtype
from ir.dtypes import DType
from ir.graph import Graph
from ir.node import Node
from ir.ops import Op


class ScanKernel(Kernel):
    name = "scan"
    serial_max: ClassVar[int] = 1024  # the longest row one thread scans alone (select_kernels asks)

    @classmethod
    def reason(cls, graph: Graph, node: Node) -> str:
        n = node.shape[-1] if node.shape else 1
        if node.kernel.variant == "serial":
            return f"one thread walks each row of {n} in order (numpy's order)"
        return f"a workgroup of {node.kernel.workgroup[0]} threads per row of {n}: chunks, then their prefixes"

    def _acc_type(self) -> str:
        return "f32" if self.node.dtype.is_float else vtype(self.node.dtype, 1)

    def _combine(self, a: str, b: str) -> str:
        return f"({a} + {b})" if self.node.op is Op.CUMSUM else f"({a} * {b})"

    def _identity(self) -> str:
        return f"{self._acc_type()}({0 if self.node.op is Op.CUMSUM else 1})"

    def metadata(self) -> Meta:
        v = self.operands[0].view
        n = v.shape[-1] if v.shape else 1
        meta: Meta = [("rows", "u32", self.node.size // max(n, 1)), ("n", "u32", n), ("offset", "u32", v.offset)]
        return meta + outer_dims_meta(v, len(v.shape) - 1) + [("inner", "i32", v.strides[-1] if v.shape else 1)]

    def calculate_dispatch(self) -> Workload:
        rows = self.node.size // max(self.node.shape[-1] if self.node.shape else 1, 1)
        if self.choice.variant == "serial":
            rows = -(-rows // self.choice.workgroup[0])
        return Workload.for_workgroups(rows, self.choice.workgroup, self.max_workgroups)

    def _load(self, j: str) -> str:
        return f"{self._acc_type()}({self.in_name(0)}[u32(base + i32({j}) * params.inner)])"

    def _store(self, b: WgslBuilder, j: str, value: str, indent: str) -> None:
        out = vtype(self.node.dtype, 1)
        cast = value if self.node.dtype is DType.float32 or not self.node.dtype.is_float else f"{out}({value})"
        b.line(f"{indent}out[row * params.n + {j}] = {store_cast(cast, self.node.dtype, 1)};")

    def render(self, b: WgslBuilder) -> None:
        kept = len(self.operands[0].view.shape) - 1
        if self.choice.variant == "serial":
            b.line(f"let row = wg * {self.choice.workgroup[0]}u + lidx;")
            b.line("if (row >= params.rows) { return; }")
            strided_row_base(b, "row", kept)
            b.line(f"var run = {self._identity()};")
            b.line("for (var j = 0u; j < params.n; j++) {")
            b.line(f"  run = {self._combine('run', self._load('j'))};")
            self._store(b, "j", "run", "  ")
            b.line("}")
            return
        self._render_blocks(b, kept)

    def _render_blocks(self, b: WgslBuilder, kept: int) -> None:
        wgx, acc = self.choice.workgroup[0], self._acc_type()
        b.workgroup_var(f"totals: array<{acc}, {wgx}>")
        b.line("let row = wg;")
        b.line("if (row >= params.rows) { return; }")
        strided_row_base(b, "row", kept)
        b.line(f"let chunk = (params.n + {wgx - 1}u) / {wgx}u;")
        b.line("let lo = min(lidx * chunk, params.n);")
        b.line("let hi = min(lo + chunk, params.n);")
        b.line(f"var total = {self._identity()};")
        b.line(f"for (var j = lo; j < hi; j++) {{ total = {self._combine('total', self._load('j'))}; }}")
        b.line("totals[lidx] = total;")
        b.line("workgroupBarrier();")
        # Hillis-Steele: after the round of step s, totals[i] combines the chunks i - 2s + 1 .. i
        b.line(f"for (var step = 1u; step < {wgx}u; step = step << 1u) {{")
        b.line(f"  var before = {self._identity()};")
        b.line("  if (lidx >= step) { before = totals[lidx - step]; }")
        b.line("  workgroupBarrier();")
        b.line(f"  totals[lidx] = {self._combine('before', 'totals[lidx]')};")
        b.line("  workgroupBarrier();")
        b.line("}")
        b.line(f"var run = {self._identity()};")
        b.line("if (lidx > 0u) { run = totals[lidx - 1u]; }")
        b.line("for (var j = lo; j < hi; j++) {")
        b.line(f"  run = {self._combine('run', self._load('j'))};")
        self._store(b, "j", "run", "  ")
        b.line("}")
