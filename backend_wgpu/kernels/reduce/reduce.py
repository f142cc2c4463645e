"""Reductions (sum, prod, max, min, argmax, argmin) over the last k axes of a strided view.

Two variants, chosen by passes.select_kernels:
  *_rows   - one workgroup per output row: threads stride over the row, then the
             workgroup tree (blocks.tree_fold); vec4 loads when the row is contiguous.
  *_serial - one thread per output row, for short rows (or very many rows).
Floats accumulate in f32 (also for f16 data), ints in their type (a product wraps, as
numpy's int32 multiply does); max/min and argmax/argmin propagate NaN
as numpy does (argmax returns the first NaN).

As the core of a fused group (kernels/elementwise/fused.py) the reduction reads its input through an
elementwise prologue evaluated per element (the input is then contiguous, in the order
the prologue's terms compute it) and writes each row's result through an epilogue.
"""

from __future__ import annotations

import math

from backend_wgpu.element import WIDTHS, row_vector
from backend_wgpu.kernel import Kernel, Meta, Workload, index_to_coords
from backend_wgpu.kernels.blocks import (
    infinity,
    lanes,
    strided_loop,
    strided_loop_cost,
    tree_cost,
    tree_fold,
    workgroup_reduce,
)
from backend_wgpu.kernels.elementwise.fused import core_input
from backend_wgpu.kernels.expr import isnan
from backend_wgpu.kernels.rows import outer_dims_meta, strided_row_base
from backend_wgpu.wgsl import WgslBuilder, load_cast, store_cast, vtype
from ir.dtypes import DType
from ir.graph import Graph
from ir.node import Node
from ir.ops import Op
from ir.view import View


class ReduceKernel(Kernel):
    name = "reduce"
    takes_prologue = takes_epilogue = True

    @classmethod
    def widest_element(cls, node: Node, views: list[View]) -> int:
        if node.op in (Op.SUM, Op.PROD, Op.MAX, Op.MIN) and node.kernel.variant.endswith("_rows"):
            return next(w for w in WIDTHS if row_vector(views[0], node.arg, w))
        return 1  # argmax/argmin compare indices lane by lane; a serial thread walks scalars

    @classmethod
    def reason(cls, graph: Graph, node: Node) -> str:
        row = graph[node.srcs[0]].size // max(node.size, 1)
        serial = node.kernel.variant.endswith("_serial")
        how = "one thread walks each row" if serial else "a workgroup shares each row"
        return f"{node.size} rows of {row}: {how}"

    def __init__(self, node: Node, graph: Graph, max_workgroups: int = 65535) -> None:
        super().__init__(node, graph, max_workgroups)
        read = core_input(self, {"in": self.kernel_element(), "out": 1})
        self.core, self.code, self.src = read.core, read.code, read.src
        self.in_view, self.in_dtype = read.view, read.dtype

    @property
    def k(self) -> int:
        return self.core.arg

    @property
    def serial(self) -> bool:
        return self.choice.variant.endswith("_serial")

    @property
    def is_arg(self) -> bool:
        return self.core.op in (Op.ARGMAX, Op.ARGMIN)

    def variant_key(self) -> str:
        return self.choice.variant + (f":{self.code.key()}" if self.code else "")

    def _kept(self) -> int:
        return len(self.in_view.shape) - self.k

    def _reduced(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Shape and strides of the reduced (last k) axes."""
        kept = self._kept()
        return self.in_view.shape[kept:], self.in_view.strides[kept:]

    def acc_dtype(self) -> DType:
        return DType.float32 if self.in_dtype.is_float else self.in_dtype

    def acc_type(self) -> str:
        return vtype(self.acc_dtype())

    def operand_type(self, i: int) -> str:
        if i != self.src and self.code is not None:
            return self.code.operand_type(i)
        return vtype(self.in_dtype, self.kernel_element(), storage=True)

    def output_type(self) -> str:
        return vtype(self.node.dtype, 1, storage=True)

    def metadata(self) -> Meta:
        rshape, rstrides = self._reduced()
        meta: Meta = [
            ("rows", "u32", self.node.size),
            ("rlen", "u32", math.prod(rshape)),
            ("offset", "u32", self.in_view.offset),
        ]
        meta += outer_dims_meta(self.in_view, self._kept())
        if self.kernel_element() == 1 and self.src is not None:
            meta += [(f"rs{d}", "u32", n) for d, n in enumerate(rshape)]
            meta += [(f"rt{d}", "i32", s) for d, s in enumerate(rstrides)]
        return meta + (self.code.metadata() if self.code else [])

    def calculate_dispatch(self) -> Workload:
        rows = self.node.size
        groups = -(-rows // self.choice.workgroup[0]) if self.serial else rows
        return Workload.for_workgroups(groups, self.choice.workgroup, self.max_workgroups)

    # --- rendering --------------------------------------------------------------------
    def _identity(self, b: WgslBuilder) -> str:
        op, acc = self.core.op, self.acc_type()
        if op in (Op.SUM, Op.PROD):
            return f"{acc}({int(op is Op.PROD)})"
        if acc == "f32":
            inf = infinity(b)
            return f"-{inf}" if op in (Op.MAX, Op.ARGMAX) else inf
        if acc == "i32":
            return "i32(-2147483647 - 1)" if op in (Op.MAX, Op.ARGMAX) else "i32(2147483647)"
        return "0u" if op in (Op.MAX, Op.ARGMAX) else "4294967295u"

    def _combine_helpers(self, b: WgslBuilder) -> None:
        """`combine(a, b)` (sum, prod, max, min; NaN wins) or `better(a, ia, b, ib)` (argmax, argmin; first NaN wins)."""
        acc, op = self.acc_type(), self.core.op
        nan = (
            f"let an = {isnan('a', 'f32')}; let bn = {isnan('b', 'f32')};"
            if acc == "f32"
            else "let an = false; let bn = false;"
        )
        if op in (Op.MAX, Op.MIN):
            fn = "max" if op is Op.MAX else "min"
            b.helper(
                "combine",
                f"fn combine(a: {acc}, b: {acc}) -> {acc} {{ {nan} return select(select({fn}(a, b), b, bn), a, an); }}",
            )
        elif op in (Op.SUM, Op.PROD):
            sign = "+" if op is Op.SUM else "*"
            b.helper("combine", f"fn combine(a: {acc}, b: {acc}) -> {acc} {{ return a {sign} b; }}")
        else:
            cmp = ">" if op is Op.ARGMAX else "<"
            # true when candidate (a, ia) should replace the best so far (b, ib)
            b.helper(
                "better",
                # branch-free (selects): an unrolled walk keeps its loads in flight across visits
                f"fn better(a: {acc}, ia: u32, b: {acc}, ib: u32) -> bool {{\n"
                f"  {nan}\n"
                f"  let plain = a {cmp} b || (a == b && ia < ib);\n"
                f"  return select(select(plain, true, an), an && ia < ib, bn);\n}}",
            )

    def _load(self, b: WgslBuilder, j: str, var: str, indent: str) -> None:
        """Emit `let var = element j of the row` in the accumulator type (scalar path)."""
        if self.src is None:  # the prologue computes the element; the input is contiguous
            value = self.code.emit(b, "in", "p", f"(u32(base) + {j})", f"(u32(base) + {j})", indent=indent)
            b.line(f"{indent}let {var} = {self.acc_type()}({value});")
            return
        r = len(self._reduced()[0])
        if r == 1:  # one reduced axis: j is its coordinate (no division per element)
            b.line(f"{indent}let r0 = {j};")
        else:
            for line in index_to_coords(j, [f"rs{d}" for d in range(r)], "r"):
                b.line(indent + line)
        addr = " + ".join(["base"] + [f"i32(r{d}) * params.rt{d}" for d in range(r)])
        raw = load_cast(f"{self.in_name(self.src)}[u32({addr})]", self.in_dtype, 1)
        b.line(f"{indent}let {var} = {self.acc_type()}({raw});")

    @property
    def unroll(self) -> int:
        return self.choice.param("unroll", 1)

    def _accumulate(self, b: WgslBuilder) -> None:
        """This thread's part of the row into `best` (and `best_i`): serial threads walk all of it."""
        w, wgx = self.kernel_element(), self.choice.workgroup[0]
        start, step = ("0u", "1u") if self.serial else ("lidx", f"{wgx}u")

        def scalar(j: str, _copy: int, indent: str) -> None:
            self._load(b, j, "x", indent)
            if self.is_arg:
                b.line(f"{indent}let take = better(x, {j}, best, best_i);")
                b.line(f"{indent}best = select(best, x, take);")
                b.line(f"{indent}best_i = select(best_i, {j}, take);")
            else:
                b.line(f"{indent}best = combine(best, x);")

        def vector(j: str, _copy: int, indent: str) -> None:
            vt = vtype(self.acc_dtype(), w)
            if self.src is None:
                elem, vidx = f"(u32(base) + {j} * {w}u)", f"(u32(base) / {w}u + {j})"
                b.line(f"{indent}let x = {vt}({self.code.emit(b, 'in', 'p', elem, vidx, indent=indent)});")
            else:
                b.line(f"{indent}let x = {vt}({self.in_name(self.src)}[(u32(base) / {w}u) + {j}]);")
            for lane in lanes("x", w):
                b.line(f"{indent}best = combine(best, {lane});")

        end = "params.rlen" if w == 1 else f"params.rlen / {w}u"
        strided_loop(b, "j", start, end, step, self.unroll, scalar if w == 1 else vector)

    def loop_iterations(self) -> int:
        rlen = math.prod(self._reduced()[0])
        if self.serial:
            return rlen + 1
        wgx = self.choice.workgroup[0]
        return strided_loop_cost(rlen // self.kernel_element(), wgx, self.unroll) + tree_cost(wgx)

    def _workgroup_combine(self, b: WgslBuilder) -> None:
        """The workgroup's threads combine their partials; thread 0 goes on with the row's result."""
        wgx = self.choice.workgroup[0]
        if not self.is_arg:
            workgroup_reduce(b, "best", "", wgx, False, self.acc_type(), combine="combine")
        else:
            b.workgroup_var(f"sh: array<{self.acc_type()}, {wgx}>")
            b.workgroup_var(f"sh_i: array<u32, {wgx}>")
            b.line("sh[lidx] = best;")
            b.line("sh_i[lidx] = best_i;")
            b.line("workgroupBarrier();")
            tree_fold(
                b,
                wgx,
                lambda h: (
                    f"if (better(sh[lidx + {h}], sh_i[lidx + {h}], sh[lidx], sh_i[lidx])) "
                    f"{{ sh[lidx] = sh[lidx + {h}]; sh_i[lidx] = sh_i[lidx + {h}]; }}"
                ),
            )
            b.line("best = sh[0];")
            b.line("best_i = sh_i[0];")
        b.line("if (lidx != 0u) { return; }")

    def _result(self) -> str:
        """The row's result in the core's arithmetic type."""
        if self.is_arg:
            return "i32(select(best_i, 0u, best_i == 0xffffffffu))"
        if self.core.dtype is DType.bool:
            return f"(best != {self.acc_type()}(0))"
        return f"{vtype(self.core.dtype)}(best)"

    def render(self, b: WgslBuilder) -> None:
        self._combine_helpers(b)
        ident = self._identity(b)
        if self.code:
            self.code.describe(b)
        b.line(f"let row = wg * {self.choice.workgroup[0]}u + lidx;" if self.serial else "let row = wg;")
        b.line("if (row >= params.rows) { return; }")
        strided_row_base(b, "row", self._kept())
        b.line(f"var best: {self.acc_type()} = {ident};")
        if self.is_arg:
            b.line("var best_i: u32 = 0xffffffffu;")
        self._accumulate(b)
        if not self.serial:
            self._workgroup_combine(b)
        value = self._result()
        if self.code is not None and self.node.id != self.core.id:
            value = self.code.emit(b, "out", "e", "row", "row", acc=value)
        b.line(f"out[row] = {store_cast(value, self.node.dtype, 1)};")
