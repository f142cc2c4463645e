"""One merge step of a long row's argsort: sorted runs of `run` become sorted runs of 2 * run.

One thread per element. The runs hold consecutive index ranges (a left run's indices are all
below its right neighbour's), so an element's place in the merged run is its place in its own
run plus the number of elements of the other run that go before it: a binary search over the
other run's keys (kernels/sort/keys.py, read through the indices). A left element goes before
the right run's equal keys, a right element after the left run's: numpy's stable order.
Each search is at most log2(run) + 2 iterations, so a row of any length stays far within
lavapipe's loop budget; passes.split_sort chains log2(n / block) of these steps.
"""

from __future__ import annotations

from backend_wgpu.kernel import Meta, PerElementKernel
from backend_wgpu.kernels.rows import outer_dims_meta, strided_row_base
from backend_wgpu.kernels.sort.keys import key_binding_type, sort_key_fn
from backend_wgpu.wgsl import WgslBuilder
from ir.graph import Graph
from ir.node import Node
from ir.view import View


class SortMergeKernel(PerElementKernel):
    name = "sort_merge"

    @classmethod
    def reason(cls, graph: Graph, node: Node) -> str:
        return f"a thread per element finds its place in the merged run of {2 * node.arg.run} (binary search)"

    def __init__(self, node: Node, graph: Graph, max_workgroups: int = 65535) -> None:
        super().__init__(node, graph, max_workgroups)
        perm = self.operands[1].view
        assert perm == View.contiguous(perm.shape), "sort_merge reads the previous step's contiguous output"

    def operand_type(self, i: int) -> str:
        return key_binding_type(self.operands[i].dtype) if i == 0 else "i32"

    def extra_metadata(self) -> Meta:
        v = self.operands[0].view
        meta: Meta = [("n", "u32", v.shape[-1]), ("run", "u32", self.node.arg.run), ("offset", "u32", v.offset)]
        return meta + outer_dims_meta(v, len(v.shape) - 1) + [("inner", "i32", v.strides[-1])]

    def loop_iterations(self) -> int:
        return self.node.arg.run.bit_length() + 2

    def render(self, b: WgslBuilder) -> None:
        b.helper("sort_key", sort_key_fn(self.operands[0].dtype, self.node.arg.descending))
        b.helper(
            "key_at",
            "fn key_at(base: i32, at: u32) -> u32 {\n  return sort_key(in0[u32(base + in1[at] * params.inner)]);\n}",
        )
        idx = self.thread_index(b)
        b.line(f"let row = {idx} / params.n;")
        b.line(f"let j = {idx} % params.n;")
        strided_row_base(b, "row", len(self.operands[0].view.shape) - 1)
        b.line("let r0 = row * params.n;")
        b.line("let b0 = j / (2u * params.run) * (2u * params.run);")
        b.line("let mid = min(b0 + params.run, params.n);")
        b.line("let end = min(mid + params.run, params.n);")
        b.line("let left = j < mid;")
        b.line("let key = key_at(base, r0 + j);")
        b.line("var lo = select(b0, mid, left);  // search the other run")
        b.line("var hi = select(mid, end, left);")
        b.line("let other = lo;")
        b.line("while (lo < hi) {")
        b.line("  let m = (lo + hi) / 2u;")
        b.line("  let km = key_at(base, r0 + m);")
        b.line("  if (km < key || (!left && km == key)) { lo = m + 1u; } else { hi = m; }")
        b.line("}")
        b.line("let own = select(j - mid, j - b0, left);")
        b.line("out[r0 + b0 + own + (lo - other)] = in1[r0 + j];")
