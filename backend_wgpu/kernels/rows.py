"""What the contiguous-row kernels share (row_reduce, softmax_regs): one workgroup per row.

They read the rows as one contiguous run (select_kernels checks the view), compute in f32,
and, as the core of a fused group (kernels/elementwise/fused.py), read each element through
the prologue (the row is then the prologue's contiguous result) and store through the
epilogue (wg_epilogue). Also the WGSL blocks they use: the workgroup reduction (subgroups
where the adapter has them, else a tree in workgroup memory) and lane folds.
"""

from __future__ import annotations

from backend_wgpu.kernel import Kernel, Meta, Workload
from backend_wgpu.kernels.elementwise.fused import core_input
from backend_wgpu.wgsl import WgslBuilder, vtype
from ir.graph import Graph
from ir.node import Node


def _inf(b: WgslBuilder) -> str:
    b.line("var inf_bits = 0x7f800000u;  // a var: an infinite constant is a WGSL compile error")
    b.line("let inf = bitcast<f32>(inf_bits);")
    return "inf"


def workgroup_reduce(b: WgslBuilder, var: str, kind: str, wg: int, subgroups: bool, value_type: str = "f32") -> None:
    """Combine `var` (a scalar) over the workgroup; afterwards every thread holds the result in `var`.

    kind: "add", "max", "min". Needs every thread of the workgroup to reach this point.
    """
    fn = {"add": "{a} + {b}", "max": "max({a}, {b})", "min": "min({a}, {b})"}[kind]
    arr = f"red_{var}"
    if subgroups:
        b.builtin("@builtin(subgroup_invocation_id) sg_lane: u32")
        b.builtin("@builtin(subgroup_size) sg_size: u32")
        b.workgroup_var(f"{arr}: array<{value_type}, {wg}>")
        sg_fn = {"add": "subgroupAdd", "max": "subgroupMax", "min": "subgroupMin"}[kind]
        b.line(f"{var} = {sg_fn}({var});")
        b.line(f"if (sg_lane == 0u) {{ {arr}[lidx / sg_size] = {var}; }}")
        b.line("workgroupBarrier();")
        b.line(f"{var} = {arr}[0];")
        b.line(
            f"for (var i = 1u; i < ({wg}u + sg_size - 1u) / sg_size; i++) {{ {var} = {fn.format(a=var, b=f'{arr}[i]')}; }}"
        )
        return
    b.workgroup_var(f"{arr}: array<{value_type}, {wg}>")
    b.line(f"{arr}[lidx] = {var};")
    b.line("workgroupBarrier();")
    b.line(f"for (var s = {wg // 2}u; s > 0u; s = s >> 1u) {{")
    b.line(f"  if (lidx < s) {{ {arr}[lidx] = {fn.format(a=f'{arr}[lidx]', b=f'{arr}[lidx + s]')}; }}")
    b.line("  workgroupBarrier();")
    b.line("}")
    b.line(f"{var} = {arr}[0];")


def _hfold(kind: str, x: str, w: int) -> str:
    """Fold the lanes of a vector into one scalar."""
    if w == 1:
        return x
    lanes = [f"{x}.{c}" for c in "xyzw"[:w]]
    if kind == "add":
        return " + ".join(lanes)
    fn = kind
    out = lanes[0]
    for lane in lanes[1:]:
        out = f"{fn}({out}, {lane})"
    return out


class ContiguousRowKernel(Kernel):
    """Rows of `cnt` KernelElements at `offset`: the uniform, the dispatch, loads and stores."""

    takes_prologue = takes_epilogue = True

    def __init__(self, node: Node, graph: Graph, max_workgroups: int = 65535) -> None:
        super().__init__(node, graph, max_workgroups)
        self.input = core_input(self, {"in": self.kernel_element(), "out": 1})
        self.core, self.code = self.input.core, self.input.code

    def operand_type(self, i: int) -> str:
        if i != self.input.src and self.code is not None:
            return self.code.operand_type(i)
        return vtype(self.input.dtype, self.kernel_element(), storage=True)

    def _row_len(self) -> int:
        raise NotImplementedError

    def metadata(self) -> Meta:
        n = self._row_len()
        rows = self.input.view.size // max(n, 1)
        w = self.kernel_element()
        meta: Meta = [("rows", "u32", rows), ("cnt", "u32", n // w), ("offset", "u32", self.input.view.offset // w)]
        return meta + (self.code.metadata() if self.code else [])

    def calculate_dispatch(self) -> Workload:
        rows = self.input.view.size // max(self._row_len(), 1)
        return Workload.for_workgroups(rows, self.choice.workgroup, self.max_workgroups)

    def load(self, b: WgslBuilder, index: str, tag: str, indent: str = "") -> str:
        """The row's KernelElement at vector index `index` as f32 lanes: loaded, or computed by the prologue."""
        w = self.kernel_element()
        vt = f"vec{w}<f32>" if w > 1 else "f32"
        if self.input.src is not None:
            return f"{vt}({self.in_name(self.input.src)}[{index}])"
        elem = f"({index}) * {w}u" if w > 1 else f"({index})"
        return f"{vt}({self.code.emit(b, 'in', tag, elem, f'({index})', indent=indent)})"

    def store(self, b: WgslBuilder, index: str, value: str, lanes: int, indent: str = "") -> None:
        """out[index] = value (f32 lanes), through the epilogue when the group has one."""
        if self.code is not None and self.code.has_epilogue():
            b.line(f"{indent}out[{index}] = {self.code.store_lanes(index, value, lanes, b)};")
        else:
            b.line(f"{indent}out[{index}] = {vtype(self.node.dtype, lanes, storage=True)}({value});")

    @property
    def subgroups(self) -> bool:
        return bool(self.choice.param("subgroups", False))

    def variant_key(self) -> str:
        # the knobs below change the WGSL, so they are part of the pipeline-cache key
        fused = f":{self.code.key()}" if self.code else ""
        return f"{self.choice.variant}:u{self.choice.param('unroll', 0)}:p{self.per_thread()}:sg{int(self.subgroups)}{fused}"

    def per_thread(self) -> int:
        return 0
