"""Matrix products (..., M, K) @ (..., K, N) over strided, batch-broadcast operands.

  gemm[tiled]    - 64x64 output tiles, 16-deep k steps staged in workgroup memory, a 4x4
                   register block per thread; zero-filled edges make every size correct.
  gemv[k_contig] - M == 1 and B contiguous along K (a transposed weight, x @ W.T): one
                   workgroup per output column, a dot product of two contiguous runs.
(M == 1 with B contiguous along N runs gemv_split, kernels/gemv_split.py.) All accumulate in f32. As the core of a fused group (kernels/fused.py) a matmul writes
each output element through an elementwise epilogue (bias, activation, residual).
"""

from __future__ import annotations

import math

from backend_wgpu.element import WIDTHS, k_contiguous, row_vector
from backend_wgpu.kernel import Kernel, Meta, Workload, index_to_coords
from backend_wgpu.kernels.fused import FusedCode
from backend_wgpu.wgsl import WgslBuilder, vtype
from ir.graph import Graph
from ir.node import Node
from ir.ops import Op
from ir.view import View


class _MatmulBase(Kernel):
    takes_epilogue = True  # bias, activation, residual: per output element (wg_epilogue)

    def __init__(self, node: Node, graph: Graph, max_workgroups: int = 65535) -> None:
        super().__init__(node, graph, max_workgroups)
        self.core = node.arg.core if node.op is Op.FUSED else node
        self.code: FusedCode | None = None
        self.ia, self.ib = 0, 1  # operands holding A and B
        if node.op is Op.FUSED:
            self.ia, self.ib = (node.arg.leaf_index(s) for s in self.core.srcs)
            # the epilogue runs per element (wg_epilogue), also where a store writes several lanes
            self.code = FusedCode(self, node.arg, {"in": 1, "out": 1})

    def out_width(self) -> int:
        """Lanes each store writes (KernelElements of the output)."""
        return 1

    def variant_key(self) -> str:
        return self.choice.variant + (f":{self.code.key()}" if self.code else "")

    def role(self, i: int) -> str:
        return "a" if i == self.ia else "b" if i == self.ib else "epilogue"

    def store(self, b: WgslBuilder, index: str, value: str, lanes: int = 1, indent: str = "") -> None:
        """out[index] = value (`lanes` f32 lanes), through the fused epilogue when there is one."""
        if self.code is not None and self.code.has_epilogue():
            b.line(f"{indent}out[{index}] = {self.code.store_lanes(index, value, lanes, b)};")
        else:
            b.line(f"{indent}out[{index}] = {vtype(self.node.dtype, lanes, storage=True)}({value});")

    def _dims(self) -> tuple[int, int, int, int]:
        a = self.operands[self.ia].view
        m, k = a.shape[-2], a.shape[-1]
        n = self.core.shape[-1]
        return math.prod(self.core.shape[:-2]), m, n, k

    def metadata(self) -> Meta:
        batch, m, n, k = self._dims()
        a, b = self.operands[self.ia].view, self.operands[self.ib].view
        nb = len(self.core.shape) - 2
        meta: Meta = [("batch", "u32", batch), ("m", "u32", m), ("n", "u32", n), ("k", "u32", k)]
        meta += [("a_off", "u32", a.offset), ("a_sm", "i32", a.strides[-2]), ("a_sk", "i32", a.strides[-1])]
        meta += [("b_off", "u32", b.offset), ("b_sk", "i32", b.strides[-2]), ("b_sn", "i32", b.strides[-1])]
        meta += [(f"bs{d}", "u32", self.core.shape[d]) for d in range(nb)]
        meta += [(f"ab{d}", "i32", a.strides[d]) for d in range(nb)] + [
            (f"bb{d}", "i32", b.strides[d]) for d in range(nb)
        ]
        return meta + (self.code.metadata() if self.code else [])

    def _batch_offsets(self, b: WgslBuilder, bt: str) -> None:
        nb = len(self.core.shape) - 2
        for line in index_to_coords(bt, [f"bs{d}" for d in range(nb)], "q"):
            b.line(line)
        a_terms = ["i32(params.a_off)"] + [f"i32(q{d}) * params.ab{d}" for d in range(nb)]
        b_terms = ["i32(params.b_off)"] + [f"i32(q{d}) * params.bb{d}" for d in range(nb)]
        b.line(f"let a_base = {' + '.join(a_terms)};")
        b.line(f"let b_base = {' + '.join(b_terms)};")


class GemmKernel(_MatmulBase):
    name = "gemm"

    @classmethod
    def reason(cls, graph: Graph, node: Node) -> str:
        k = node.kernel
        tiles = "x".join(str(k.param(p)) for p in ("tile_m", "tile_n", "tile_k") if k.param(p) is not None)
        return f"general matmul: workgroup tiles {tiles}" if tiles else "general matmul"

    def calculate_dispatch(self) -> Workload:
        batch, m, n, _ = self._dims()
        tm, tn = self.choice.param("tile_m"), self.choice.param("tile_n")
        return Workload.for_workgroups(batch * -(-m // tm) * -(-n // tn), self.choice.workgroup, self.max_workgroups)

    def operand_type(self, i: int) -> str:
        if self.role(i) == "epilogue":
            return self.code.operand_type(i)
        return vtype(self.operands[i].dtype, 1, storage=True)

    def render(self, b: WgslBuilder) -> None:
        tm, tn, tk = self.choice.param("tile_m"), self.choice.param("tile_n"), self.choice.param("tile_k")
        wx, wy, _ = self.choice.workgroup
        threads = wx * wy
        rm, rn = tm // wy, tn // wx  # register block per thread
        in_a, in_b = self.in_name(self.ia), self.in_name(self.ib)
        if self.code:
            self.code.describe(b)
        b.workgroup_var(f"tile_a: array<f32, {tk * tm}>")
        b.workgroup_var(f"tile_b: array<f32, {tk * tn}>")
        b.line(f"let tiles_n = (params.n + {tn - 1}u) / {tn}u;")
        b.line(f"let tiles_m = (params.m + {tm - 1}u) / {tm}u;")
        b.line(f"let tn0 = (wg % tiles_n) * {tn}u;")
        b.line(f"let tm0 = ((wg / tiles_n) % tiles_m) * {tm}u;")
        b.line("let bt = wg / (tiles_n * tiles_m);")
        b.line("if (bt >= params.batch) { return; }")
        self._batch_offsets(b, "bt")
        b.line(f"let tx = lidx % {wx}u;")
        b.line(f"let ty = lidx / {wx}u;")
        b.line(f"var acc: array<array<f32, {rn}>, {rm}>;")
        b.line(f"for (var k0 = 0u; k0 < params.k; k0 += {tk}u) {{")
        b.line(f"  for (var l = 0u; l < {tk * tm // threads}u; l++) {{")
        b.line(f"    let e = lidx + l * {threads}u;")
        b.line(f"    let mm = e / {tk}u; let kk = e % {tk}u;")
        b.line("    let gm = tm0 + mm; let gk = k0 + kk;")
        b.line("    var v = 0.0;")
        b.line(
            f"    if (gm < params.m && gk < params.k) {{ v = f32({in_a}[u32(a_base + i32(gm) * params.a_sm + i32(gk) * params.a_sk)]); }}"
        )
        b.line(f"    tile_a[kk * {tm}u + mm] = v;")
        b.line("  }")
        b.line(f"  for (var l = 0u; l < {tk * tn // threads}u; l++) {{")
        b.line(f"    let e = lidx + l * {threads}u;")
        b.line(f"    let kk = e / {tn}u; let nn = e % {tn}u;")
        b.line("    let gk = k0 + kk; let gn = tn0 + nn;")
        b.line("    var v = 0.0;")
        b.line(
            f"    if (gk < params.k && gn < params.n) {{ v = f32({in_b}[u32(b_base + i32(gk) * params.b_sk + i32(gn) * params.b_sn)]); }}"
        )
        b.line(f"    tile_b[kk * {tn}u + nn] = v;")
        b.line("  }")
        b.line("  workgroupBarrier();")
        b.line(f"  for (var kk = 0u; kk < {tk}u; kk++) {{")
        b.line(f"    var ra: array<f32, {rm}>;")
        b.line(f"    var rb: array<f32, {rn}>;")
        b.line(f"    for (var i = 0u; i < {rm}u; i++) {{ ra[i] = tile_a[kk * {tm}u + ty + i * {wy}u]; }}")
        b.line(f"    for (var j = 0u; j < {rn}u; j++) {{ rb[j] = tile_b[kk * {tn}u + tx + j * {wx}u]; }}")
        b.line(f"    for (var i = 0u; i < {rm}u; i++) {{")
        b.line(f"      for (var j = 0u; j < {rn}u; j++) {{ acc[i][j] = fma(ra[i], rb[j], acc[i][j]); }}")
        b.line("    }")
        b.line("  }")
        b.line("  workgroupBarrier();")
        b.line("}")
        b.line("let out_base = bt * params.m * params.n;")
        b.line(f"for (var i = 0u; i < {rm}u; i++) {{")
        b.line(f"  let gm = tm0 + ty + i * {wy}u;")
        b.line(f"  for (var j = 0u; j < {rn}u; j++) {{")
        b.line(f"    let gn = tn0 + tx + j * {wx}u;")
        b.line("    if (gm < params.m && gn < params.n) {")
        self.store(b, "out_base + gm * params.n + gn", "acc[i][j]", indent="      ")
        b.line("    }")
        b.line("  }")
        b.line("}")


class GemvKernel(_MatmulBase):
    """gemv[k_contig]: one workgroup per output column (its only variant)."""

    name = "gemv"

    @classmethod
    def widest_element(cls, node: Node, views: list[View]) -> int:
        a_view, b_view = views
        k = a_view.shape[-1]
        return next(w for w in WIDTHS if k % w == 0 and row_vector(a_view, 1, w) and k_contiguous(b_view, w))

    @classmethod
    def reason(cls, graph: Graph, node: Node) -> str:
        return "one output row (M=1): B read contiguously along K (a workgroup per output column)"

    def out_width(self) -> int:
        return 1

    def operand_type(self, i: int) -> str:
        if self.role(i) == "epilogue":
            return self.code.operand_type(i)
        return vtype(self.operands[i].dtype, self.kernel_element(), storage=True)

    def output_type(self) -> str:
        return vtype(self.node.dtype, self.out_width(), storage=True)

    def calculate_dispatch(self) -> Workload:
        batch, _, n, _ = self._dims()
        return Workload.for_workgroups(batch * n, self.choice.workgroup, self.max_workgroups)

    def render(self, b: WgslBuilder) -> None:
        w = self.kernel_element()
        wgx = self.choice.workgroup[0]
        vt = f"vec{w}<f32>" if w > 1 else "f32"
        in_a, in_b = self.in_name(self.ia), self.in_name(self.ib)
        if self.code:
            self.code.describe(b)
        b.workgroup_var(f"sh: array<f32, {wgx}>")
        b.line("let col = wg % params.n;")
        b.line("let bt = wg / params.n;")
        b.line("if (bt >= params.batch) { return; }")
        self._batch_offsets(b, "bt")
        b.line("let b_col = b_base + i32(col) * params.b_sn;")
        b.line(f"var acc: {vt} = {vt}(0.0);")
        if w > 1:
            b.line(f"for (var j = lidx; j < params.k / {w}u; j += {wgx}u) {{")
            b.line(f"  acc = fma({vt}({in_a}[u32(a_base) / {w}u + j]), {vt}({in_b}[u32(b_col) / {w}u + j]), acc);")
            b.line("}")
            b.line(f"sh[lidx] = dot(acc, {vt}(1.0));")
        else:
            b.line(f"for (var j = lidx; j < params.k; j += {wgx}u) {{")
            b.line(
                f"  acc = fma(f32({in_a}[u32(a_base + i32(j) * params.a_sk)]), f32({in_b}[u32(b_col + i32(j) * params.b_sk)]), acc);"
            )
            b.line("}")
            b.line("sh[lidx] = acc;")
        b.line("workgroupBarrier();")
        b.line(f"for (var s = {wgx // 2}u; s > 0u; s = s >> 1u) {{")
        b.line("  if (lidx < s) { sh[lidx] += sh[lidx + s]; }")
        b.line("  workgroupBarrier();")
        b.line("}")
        b.line("if (lidx == 0u) {")
        self.store(b, "bt * params.n + col", "sh[0]", indent="  ")
        b.line("}")
