"""The argsort of runs of up to `block` elements: a bitonic sort in workgroup memory.

One workgroup per run (a whole row, or one of the runs passes.split_sort cuts a long row
into). Its threads load the run's (key, index) pairs (kernels/sort/keys.py), padded to a
power of two with pairs that sort last, run the bitonic network over them (log2(p) merge
stages of compare-exchanges between barriers) and store the indices. Comparing whole
(key, index) pairs makes the order total, so the unstable network gives numpy's stable order.
Variants: `small` (runs up to 128, 64 threads) and `block` (up to 2,048 pairs: 16 KiB of
workgroup memory, WebGPU's guaranteed minimum; 256 threads, 4 exchanges each per stage).
"""

from __future__ import annotations

from typing import ClassVar

from backend_wgpu.kernel import Kernel, Meta, Workload
from backend_wgpu.kernels.rows import outer_dims_meta, strided_row_base
from backend_wgpu.kernels.sort.keys import key_binding_type, sort_key_fn
from backend_wgpu.wgsl import WgslBuilder
from ir.graph import Graph
from ir.node import Node

# variant: (the most pairs one workgroup sorts, its threads)
SIZES = {"small": (128, 64), "block": (2048, 256)}


def run_length(node: Node) -> int:
    """The elements one workgroup sorts: the node's run, or its whole row."""
    n = node.shape[-1] if node.shape else 1
    return min(node.arg.run, n) if node.arg.run else n


def padded(n: int) -> int:
    """The power of two the network sorts (at least 1)."""
    return 1 << max(n - 1, 0).bit_length()


class BitonicSortKernel(Kernel):
    name = "bitonic_sort"
    block: ClassVar[int] = SIZES["block"][0]  # the longest run one workgroup sorts (passes.split_sort asks)

    @classmethod
    def variant_for(cls, node: Node) -> str:
        return "small" if padded(run_length(node)) <= SIZES["small"][0] else "block"

    @classmethod
    def reason(cls, graph: Graph, node: Node) -> str:
        run = run_length(node)
        what = "each row" if run == (node.shape[-1] if node.shape else 1) else f"each run of {run}"
        return f"a workgroup sorts {what}: a bitonic network over (key, index) pairs in workgroup memory"

    def operand_type(self, i: int) -> str:
        return key_binding_type(self.operands[i].dtype)

    def _sizes(self) -> tuple[int, int, int]:
        """(rows, runs per row, padded run)."""
        n = self.node.shape[-1] if self.node.shape else 1
        run = run_length(self.node)
        return self.node.size // max(n, 1), -(-n // max(run, 1)), padded(run)

    def metadata(self) -> Meta:
        v = self.operands[0].view
        rows, runs, p = self._sizes()
        meta: Meta = [("rows", "u32", rows), ("runs", "u32", runs), ("n", "u32", v.shape[-1])]
        meta += [("run", "u32", run_length(self.node)), ("pow", "u32", p), ("offset", "u32", v.offset)]
        return meta + outer_dims_meta(v, len(v.shape) - 1) + [("inner", "i32", v.strides[-1])]

    def calculate_dispatch(self) -> Workload:
        rows, runs, _ = self._sizes()
        return Workload.for_workgroups(rows * runs, self.choice.workgroup, self.max_workgroups)

    def loop_iterations(self) -> int:
        _, _, p = self._sizes()
        threads = self.choice.workgroup[0]
        logp = p.bit_length() - 1
        stages = logp * (logp + 1) // 2  # the compare-exchange rounds of the network
        load = -(-p // threads) + 1
        exchange = stages * (-(-p // (2 * threads)) + 1)
        return 2 * load + (logp + 1) + (stages + logp) + exchange

    def render(self, b: WgslBuilder) -> None:
        cap, threads = SIZES[self.choice.variant]
        dtype, arg = self.operands[0].dtype, self.node.arg
        b.helper("sort_key", sort_key_fn(dtype, arg.descending))
        b.workgroup_var(f"keys: array<u32, {cap}>")
        b.workgroup_var(f"ids: array<u32, {cap}>")
        b.line("let row = wg / params.runs;")
        b.line("if (row >= params.rows) { return; }")
        strided_row_base(b, "row", len(self.operands[0].view.shape) - 1)
        b.line("let start = (wg % params.runs) * params.run;")
        b.line("let len = min(params.run, params.n - start);")
        # padding pairs (largest key, largest index) sort after every element, NaN keys too
        b.line(f"for (var i = lidx; i < params.pow; i += {threads}u) {{")
        b.line("  var key = 0xffffffffu;")
        b.line("  var id = 0xffffffffu;")
        b.line("  if (i < len) {")
        b.line("    id = start + i;")
        b.line("    key = sort_key(in0[u32(base + i32(id) * params.inner)]);")
        b.line("  }")
        b.line("  keys[i] = key;")
        b.line("  ids[i] = id;")
        b.line("}")
        b.line("workgroupBarrier();")
        b.line("for (var k = 2u; k <= params.pow; k = k << 1u) {")
        b.line("  for (var j = k >> 1u; j > 0u; j = j >> 1u) {")
        b.line(f"    for (var t = lidx; t < params.pow / 2u; t += {threads}u) {{")
        b.line("      let i = ((t & ~(j - 1u)) << 1u) | (t & (j - 1u));  // the pair (i, i + j)")
        b.line("      let l = i + j;")
        b.line("      let ki = keys[i];")
        b.line("      let kl = keys[l];")
        b.line("      let ii = ids[i];")
        b.line("      let il = ids[l];")
        b.line("      let greater = ki > kl || (ki == kl && ii > il);")
        b.line("      if (greater == ((i & k) == 0u)) {  // out of order for this half's direction")
        b.line("        keys[i] = kl;")
        b.line("        keys[l] = ki;")
        b.line("        ids[i] = il;")
        b.line("        ids[l] = ii;")
        b.line("      }")
        b.line("    }")
        b.line("    workgroupBarrier();")
        b.line("  }")
        b.line("}")
        b.line(f"for (var i = lidx; i < len; i += {threads}u) {{")
        b.line("  out[row * params.n + start + i] = i32(ids[i]);")
        b.line("}")
