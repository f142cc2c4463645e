"""gemm[tiled]: a plain tiled GEMM, for adapters below WebGPU's default workgroup memory.

64x64 output tiles, 16-deep k steps staged in workgroup memory (8 KiB), a 4x4 register
block per thread; zero-filled edges make every size correct. passes.select_kernels
chooses it only when no gemm_blocked configuration fits the adapter's limits.
"""

from __future__ import annotations

from backend_wgpu.kernel import Workload
from backend_wgpu.kernels.matmul.base import MatmulKernel
from backend_wgpu.wgsl import WgslBuilder, vtype
from ir.graph import Graph
from ir.node import Node


class GemmKernel(MatmulKernel):
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

    def _tiles(self) -> tuple[int, int, int, int, int]:
        tm, tn, tk = self.choice.param("tile_m"), self.choice.param("tile_n"), self.choice.param("tile_k")
        wx, wy, _ = self.choice.workgroup
        return tm, tn, tk, wx, wy

    def render(self, b: WgslBuilder) -> None:
        tm, tn, tk, wx, wy = self._tiles()
        rm, rn = tm // wy, tn // wx  # register block per thread
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
        self._stage(b, "a")
        self._stage(b, "b")
        b.line("  workgroupBarrier();")
        self._multiply(b)
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

    def _stage(self, b: WgslBuilder, which: str) -> None:
        """Copy this k step's tile of A (tile_a[k][m]) or B (tile_b[k][n]) into workgroup memory, zeros past the edges.

        Unrolled here in Python, as _multiply: only the k loop costs loop iterations (kernel.LOOP_BUDGET).
        """
        tm, tn, tk, wx, wy = self._tiles()
        threads = wx * wy
        src = self.in_name(self.ia if which == "a" else self.ib)
        for l in range(tk * (tm if which == "a" else tn) // threads):  # noqa: E741
            b.line("  {")
            b.line(f"    let e = lidx + {l * threads}u;")
            if which == "a":
                b.line(f"    let mm = e / {tk}u; let kk = e % {tk}u;")
                b.line("    let gm = tm0 + mm; let gk = k0 + kk;")
                inside, addr = (
                    "gm < params.m && gk < params.k",
                    "a_base + i32(gm) * params.a_sm + i32(gk) * params.a_sk",
                )
                target = f"tile_a[kk * {tm}u + mm]"
            else:
                b.line(f"    let kk = e / {tn}u; let nn = e % {tn}u;")
                b.line("    let gk = k0 + kk; let gn = tn0 + nn;")
                inside, addr = (
                    "gk < params.k && gn < params.n",
                    "b_base + i32(gk) * params.b_sk + i32(gn) * params.b_sn",
                )
                target = f"tile_b[kk * {tn}u + nn]"
            b.line("    var v = 0.0;")
            b.line(f"    if ({inside}) {{ v = f32({src}[u32({addr})]); }}")
            b.line(f"    {target} = v;")
            b.line("  }")

    def _multiply(self, b: WgslBuilder) -> None:
        """Each thread's rm x rn block of C += its column of tile_a times its row of tile_b, per k (unrolled)."""
        tm, tn, tk, wx, wy = self._tiles()
        rm, rn = tm // wy, tn // wx
        for kk in range(tk):
            b.line("  {")
            for i in range(rm):
                b.line(f"    let a{i} = tile_a[{kk * tm}u + ty + {i * wy}u];")
            for j in range(rn):
                b.line(f"    let b{j} = tile_b[{kk * tn}u + tx + {j * wx}u];")
            for i in range(rm):
                for j in range(rn):
                    b.line(f"    acc[{i}][{j}] = fma(a{i}, b{j}, acc[{i}][{j}]);")
            b.line("  }")

    def loop_iterations(self) -> int:
        tm, tn, tk, wx, wy = self._tiles()
        rm, rn = tm // wy, tn // wx
        return -(-self._dims()[3] // tk) + 1 + rm * (rn + 1) + 1  # the k loop, then the stores
