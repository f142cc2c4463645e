"""What the row kernels share: walking strided rows, and the contiguous-row base class.

reduce, softmax and norm walk rows of any strides: `strided_row_base` finds where a row
starts from its index (the outer dims' sizes and strides are in the uniform,
`outer_dims_meta`), `strided_row_load` reads its element j.

ContiguousRowKernel is the base of row_reduce and softmax_regs: one workgroup per row.
They read the rows as one contiguous run (select_kernels checks the view), compute in f32,
and, as the core of a fused group (kernels/elementwise/fused.py), read each element through
the prologue (the row is then the prologue's contiguous result) and store through the
epilogue (wg_epilogue). Their threads' partials meet in blocks.workgroup_reduce.
"""

from __future__ import annotations

from collections.abc import Callable

from backend_wgpu.kernel import Kernel, Meta, Workload, address, index_to_coords
from backend_wgpu.kernels.elementwise.fused import core_input, store_value
from backend_wgpu.wgsl import WgslBuilder, f32v, vtype
from ir.graph import Graph
from ir.node import Node
from ir.view import View


def outer_dims_meta(view: View, kept: int) -> Meta:
    """Uniform fields for the first `kept` (outer) dims of a row walk: sizes ks{d}, then strides kt{d}."""
    return [(f"ks{d}", "u32", view.shape[d]) for d in range(kept)] + [
        (f"kt{d}", "i32", view.strides[d]) for d in range(kept)
    ]


def strided_row_base(b: WgslBuilder, row: str, kept: int) -> None:
    """`let base` (i32): where row `row` starts, params.offset plus its outer coordinates times their strides."""
    for line in index_to_coords(row, [f"ks{d}" for d in range(kept)], "k"):
        b.line(line)
    b.line(f"let base = {address('offset', [f'kt{d}' for d in range(kept)], [f'k{d}' for d in range(kept)])};")


def strided_row_load(binding: str, width: int) -> tuple[Callable[[str], str], str]:
    """How to read element j of the row in `binding` as f32 lanes, and how many such elements the row has.

    Vectors when width > 1 (passes.vectorize saw a contiguous row), else scalars `params.inner` apart.
    """
    if width > 1:
        return (lambda j: f"{f32v(width)}({binding}[u32(base) / {width}u + {j}])"), f"params.n / {width}u"
    return (lambda j: f"f32({binding}[u32(base + i32({j}) * params.inner)])"), "params.n"


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

    def begin_row(self, b: WgslBuilder) -> None:
        """The workgroup's row and where it starts (`base`, in KernelElements)."""
        if self.code:
            self.code.describe(b)
        b.line("let row = wg;")
        b.line("if (row >= params.rows) { return; }")
        b.line("let base = params.offset + row * params.cnt;")

    def load(self, b: WgslBuilder, index: str, tag: str, indent: str = "") -> str:
        """The row's KernelElement at vector index `index` as f32 lanes: loaded, or computed by the prologue."""
        w = self.kernel_element()
        vt = f32v(w)
        if self.input.src is not None:
            return f"{vt}({self.in_name(self.input.src)}[{index}])"
        elem = f"({index}) * {w}u" if w > 1 else f"({index})"
        return f"{vt}({self.code.emit(b, 'in', tag, elem, f'({index})', indent=indent)})"

    def load_registers(self, b: WgslBuilder, per: int, fill: str) -> list[str]:
        """`var v0 .. v{per-1}`: this thread's KernelElements of the row (`fill` in slots past its end),
        as the row kernels that hold a row in registers read it; returns each slot's in-row test."""
        wgx = self.choice.workgroup[0]
        inside = [f"lidx + {r * wgx}u < params.cnt" for r in range(per)]
        for r in range(per):
            b.line(f"var v{r} = {fill};")
            b.line(f"if ({inside[r]}) {{")
            b.line(f"  v{r} = {self.load(b, f'base + lidx + {r * wgx}u', f'p{r}', indent='  ')};")
            b.line("}")
        return inside

    def store(self, b: WgslBuilder, index: str, value: str, lanes: int, indent: str = "") -> None:
        """out[index] = value (f32 lanes), through the epilogue when the group has one."""
        store_value(b, self, self.code, index, value, lanes, indent)

    @property
    def subgroups(self) -> bool:
        return bool(self.choice.param("subgroups", False))

    def variant_key(self) -> str:
        # the knobs below change the WGSL, so they are part of the pipeline-cache key
        fused = f":{self.code.key()}" if self.code else ""
        return f"{self.choice.variant}:u{self.choice.param('unroll', 0)}:p{self.per_thread()}:sg{int(self.subgroups)}{fused}"

    def per_thread(self) -> int:
        return 0
