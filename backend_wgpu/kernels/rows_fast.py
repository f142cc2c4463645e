"""Row kernels for contiguous float rows: loads kept in flight, and subgroup reductions.

  row_reduce[sum_rows|max_rows|min_rows] - one workgroup per row; each thread issues
      `unroll` independent (vector) loads per step, then the workgroup combines its
      threads' partials: subgroupAdd/Max/Min and one barrier where the adapter has
      subgroups, else a tree in workgroup memory.
  softmax_regs[softmax|log_softmax] - one workgroup per row, the row read from memory
      once and held in registers (`per_thread` KernelElements per thread): max, then
      the sum of exp, then exp * (1 / sum) is written. One exp per element.
Both read the rows as one contiguous run (select_kernels checks the view) and compute in
f32. max/min return NaN for a row holding a NaN, as numpy does. As the core of a fused
group (kernels/fused.py) they read each element through the prologue (the row is then
the prologue's contiguous result) and store through the epilogue (wg_epilogue).
"""

from __future__ import annotations

from backend_wgpu.element import WIDTHS, row_vector, why_not_wider
from backend_wgpu.kernel import Kernel, Meta, Workload
from backend_wgpu.kernels.fused import core_input
from backend_wgpu.wgsl import WgslBuilder, vtype
from ir.graph import Graph
from ir.node import Node
from ir.ops import Op
from ir.view import View


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


class _RowBase(Kernel):
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


class RowReduceKernel(_RowBase):
    name = "row_reduce"

    @classmethod
    def widest_element(cls, node: Node, views: list[View]) -> int:
        return next(w for w in WIDTHS if row_vector(views[0], node.arg, w))

    @classmethod
    def reason(cls, graph: Graph, node: Node) -> str:
        row = graph[node.srcs[0]].size // max(node.size, 1)
        how = "subgroup reductions" if node.kernel.param("subgroups") else "a tree in workgroup memory"
        return f"{node.size} rows of {row}: a workgroup shares each contiguous row ({how})"

    def _row_len(self) -> int:
        return self.input.view.size // max(self.core.size, 1)

    def output_type(self) -> str:
        return vtype(self.node.dtype, 1, storage=True)

    def render(self, b: WgslBuilder) -> None:
        w = self.kernel_element()
        wgx = self.choice.workgroup[0]
        unroll = self.choice.param("unroll", 4)
        kind = {Op.SUM: "add", Op.MAX: "max", Op.MIN: "min"}[self.core.op]
        vt = f"vec{w}<f32>" if w > 1 else "f32"
        if self.code:
            self.code.describe(b)
        b.line("let row = wg;")
        b.line("if (row >= params.rows) { return; }")
        b.line("let base = params.offset + row * params.cnt;")
        if kind == "add":
            b.line(f"var acc = {vt}(0.0);")
        else:
            inf = _inf(b)
            b.line(f"var acc = {vt}({'-' if kind == 'max' else ''}{inf});")
            b.line(f"var bad = {'vec' + str(w) + '<bool>' if w > 1 else 'bool'}(false);  // NaN seen")

        def step(x: str) -> list[str]:
            if kind == "add":
                return [f"acc += {x};"]
            # NaN test on the bits: drivers may fold `x != x` to false (fast math)
            u = f"vec{w}<u32>" if w > 1 else "u32"
            return [
                f"bad = bad | ((bitcast<{u}>({x}) & {u}(0x7fffffffu)) > {u}(0x7f800000u));",
                f"acc = {kind}(acc, {x});",
            ]

        b.line("var j = lidx;")
        b.line(f"for (; j + {(unroll - 1) * wgx}u < params.cnt; j += {unroll * wgx}u) {{")
        for u in range(unroll):
            b.line(f"  let x{u} = {self.load(b, f'base + j + {u * wgx}u', f'p{u}', indent='  ')};")
        for u in range(unroll):
            for line in step(f"x{u}"):
                b.line("  " + line)
        b.line("}")
        b.line(f"for (; j < params.cnt; j += {wgx}u) {{")
        b.line(f"  let x = {self.load(b, 'base + j', 'q', indent='  ')};")
        for line in step("x"):
            b.line("  " + line)
        b.line("}")
        b.line(f"var total = {_hfold(kind, 'acc', w)};")
        workgroup_reduce(b, "total", kind, wgx, self.subgroups)
        if kind != "add":
            b.line(f"var nans = select(0u, 1u, {'any(bad)' if w > 1 else 'bad'});")
            workgroup_reduce(b, "nans", "max", wgx, self.subgroups, "u32")
            b.line("var nan_bits = 0x7fc00000u;")
            b.line("if (nans != 0u) { total = bitcast<f32>(nan_bits); }")
        b.line("if (lidx == 0u) {")
        self.store(b, "row", "total", 1, indent="  ")
        b.line("}")


class SoftmaxRegsKernel(_RowBase):
    name = "softmax_regs"

    @classmethod
    def widest_element(cls, node: Node, views: list[View]) -> int:
        return next(w for w in WIDTHS if node.shape[-1] % w == 0 and row_vector(views[0], 1, w))

    @classmethod
    def reason(cls, graph: Graph, node: Node) -> str:
        n = node.shape[-1] if node.shape else 1
        return f"a workgroup of {node.kernel.workgroup[0]} threads per row of {n}, the row held in registers"

    @classmethod
    def width_reason(cls, node: Node, views: list[View]) -> str:
        return why_not_wider(node, views)

    def _row_len(self) -> int:
        return self.core.shape[-1]

    def per_thread(self) -> int:
        """KernelElements each thread holds: the row split over the workgroup (shapes fix it)."""
        return max(1, -(-(self._row_len() // self.kernel_element()) // self.choice.workgroup[0]))

    def output_type(self) -> str:
        return vtype(self.node.dtype, self.kernel_element(), storage=True)

    def render(self, b: WgslBuilder) -> None:
        w = self.kernel_element()
        wgx = self.choice.workgroup[0]
        per = self.per_thread()
        vt = f"vec{w}<f32>" if w > 1 else "f32"
        if self.code:
            self.code.describe(b)
        b.line("let row = wg;")
        b.line("if (row >= params.rows) { return; }")
        b.line("let base = params.offset + row * params.cnt;")
        b.line("let out_base = row * params.cnt;")
        inf = _inf(b)
        b.line(f"var m = -{inf};")
        for r in range(per):
            # slots past the row's end hold -inf: exp gives 0 there, and they are never stored
            b.line(f"var v{r} = {vt}(-{inf});")
            b.line(f"if (lidx + {r * wgx}u < params.cnt) {{")
            b.line(f"  v{r} = {self.load(b, f'base + lidx + {r * wgx}u', f'p{r}', indent='  ')};")
            b.line("}")
        for r in range(per):
            b.line(f"m = max(m, {_hfold('max', f'v{r}', w)});")
        workgroup_reduce(b, "m", "max", wgx, self.subgroups)
        b.line("var s = 0.0;")
        for r in range(per):
            if self.core.op is Op.SOFTMAX:  # keep exp(x - max) in the registers for the store
                b.line(f"v{r} = exp(v{r} - {vt}(m));")
                b.line(f"s += {_hfold('add', f'v{r}', w)};")
            else:
                b.line(f"{{ let e = exp(v{r} - {vt}(m)); s += {_hfold('add', 'e', w)}; }}")
        workgroup_reduce(b, "s", "add", wgx, self.subgroups)
        if self.core.op is Op.SOFTMAX:
            b.line("let scale = 1.0 / s;")
            value = "v{r} * " + f"{vt}(scale)"
        else:
            b.line("let shift = m + log(s);")
            value = "v{r} - " + f"{vt}(shift)"
        for r in range(per):
            b.line(f"if (lidx + {r * wgx}u < params.cnt) {{")
            self.store(b, f"out_base + lidx + {r * wgx}u", f"({value.format(r=r)})", w, indent="  ")
            b.line("}")
