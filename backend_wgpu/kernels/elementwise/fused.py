"""Renders the terms of a fused group (ir.fusion.FusedArg) as WGSL `let` lines.

Every kernel that runs a group uses it: the elementwise kernel for a whole group, and the
reduce, softmax and matmul kernels for a prologue (evaluated per element of the core's
input, site "in") and an epilogue (per element of the output, site "out"). Each leaf is
read in the cheapest way its view allows, at the width of the site that reads it:
  contig  - contiguous view: a direct (vector) load at the vector index + offset
  row     - one vector broadcast over every other axis (a bias): addressed by the last coordinate only
  vector  - strided outer dims, unit stride inner dim: address from coordinates, vector load
  splat   - broadcast along the inner dim (stride 0): one scalar load, splatted
  strided - scalar element, any strides
Coordinates come from the linear element index split by the leaf's own shape: leaves of
one group may differ in shape when plain reshapes sit between its terms, and leaves of
one shape share one split (a "domain"). Each term becomes one `let`, named by its position
in the group, with a comment naming the node it computes, so a fused kernel's WGSL reads as
the list of nodes it holds while identical groups share one text (comments aside).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from backend_wgpu.kernel import Meta, address, index_to_coords
from backend_wgpu.kernels import expr
from backend_wgpu.wgsl import WgslBuilder, load_cast, store_cast, vtype
from ir.dtypes import DType
from ir.fusion import FusedArg
from ir.node import Node
from ir.ops import COMPARISON, Op
from ir.view import View

if TYPE_CHECKING:
    from backend_wgpu.kernel import Kernel


def access_mode(kernel: Kernel, i: int, width: int) -> str:
    """How operand i is read at `width` lanes (passes.vectorize made every mode legal)."""
    view = kernel.operands[i].view
    if kernel.reads_output(i) or view.is_contiguous:
        return "contig"
    if len(view.shape) > 1 and not any(view.strides[:-1]) and view.strides[-1] != 0:
        return "row"  # a vector broadcast over every other axis: a bias (passes.vectorize checked its width)
    if width > 1:
        return "splat" if view.strides[-1] == 0 else "vector"
    return "strided"


class FusedCode:
    """The leaves, metadata and WGSL of one group's terms inside one kernel."""

    def __init__(self, kernel: Kernel, arg: FusedArg, widths: dict[str, int]) -> None:
        self.kernel = kernel
        self.arg = arg
        self.widths = widths  # site -> lanes per evaluation
        # the term whose value the core's result already is (a bias a GEMM starts its sums from):
        # the epilogue starts after it; None: the core's own value
        self.folded: int | None = None
        # WGSL names values by their term's position, never its node id: identical groups of
        # different graphs are then one WGSL text, so one pipeline (the id stays in a comment)
        self.position = {t.id: j for j, t in enumerate(arg.terms)}
        self.modes: dict[int, str] = {}
        self.lanes: dict[int, int] = {}
        self.domain: dict[int, int] = {}
        self.domains: list[tuple[int, ...]] = []
        for site, width in widths.items():
            for i in arg.site_leaves(site):
                self.lanes[i] = width
                self.modes[i] = access_mode(kernel, i, width)
                if self.modes[i] != "contig":
                    shape = kernel.operands[i].view.shape
                    if shape not in self.domains:
                        self.domains.append(shape)
                    self.domain[i] = self.domains.index(shape)

    # --- what the kernel's bindings, uniform and cache key need ------------------------
    def operand_type(self, i: int) -> str:
        width = self.lanes.get(i, 1) if self.modes.get(i) in ("contig", "vector", "row") else 1
        return vtype(self.kernel.operands[i].dtype, width, storage=True)

    def metadata(self) -> Meta:
        meta: Meta = []
        for j, shape in enumerate(self.domains):
            meta += [(f"sh{j}_{d}", "u32", n) for d, n in enumerate(shape)]
        for i in sorted(self.modes):
            view = self.kernel.operands[i].view
            if self.modes[i] == "contig":
                off = 0 if self.kernel.reads_output(i) else view.offset // self.lanes[i]
                meta.append((f"off{i}", "u32", off))
            else:
                meta.append((f"off{i}", "u32", view.offset))
                meta += [(f"st{i}_{d}", "i32", s) for d, s in enumerate(view.strides)]
        return meta

    def key(self) -> str:
        """Access mode per leaf: "contig,vector" for one op; with leaf index and shape domain for a group."""
        if len(self.arg.terms) == 1:
            return ",".join(self.modes[i] for i in sorted(self.modes))
        modes = ",".join(
            f"{i}{self.modes[i]}" + (f"@{self.domain[i]}" if i in self.domain else "") for i in sorted(self.modes)
        )
        return f"{self.arg.short_key()}:{modes}"

    def describe(self, b: WgslBuilder) -> None:
        """Comment lines naming the nodes this kernel holds, by site."""
        if len(self.arg.terms) == 1:
            return
        core = self.arg.core
        parts = [
            ("prologue", self.arg.site_terms("in")),
            ("core", [core] if core else []),
            ("epilogue" if core else "fused", self.arg.site_terms("out")),
        ]
        for name, terms in parts:
            if terms:
                b.line(f"// {name}: " + ", ".join(f"%{t.id} {t.op.value}" for t in terms))

    # --- code --------------------------------------------------------------------------
    def emit(
        self,
        b: WgslBuilder,
        site: str,
        tag: str,
        elem: str,
        vidx: str,
        acc: str | None = None,
        indent: str = "",
        core_coords: list[str] | None = None,
    ) -> str:
        """Emit the terms of `site` evaluated at linear element `elem` (vector index `vidx`).

        Returns the WGSL name of the site's result: the core's input for "in", the group's
        root for "out". `acc` is the core's result (arithmetic type), which an epilogue reads.
        `core_coords`: the element's coordinates in the core's output shape, where the kernel has
        them (a GEMM's batch, row and column): leaves of that shape are addressed from them, with no
        division of `elem` (an epilogue may reshape, and leaves of other shapes split `elem`).
        """
        width = self.widths[site]
        values: dict[int, tuple[str, DType]] = {}
        core = self.arg.core
        if acc is not None and core is not None:
            start = core if self.folded is None else self.arg.term(self.folded)
            values[start.id] = (acc, start.dtype)
        coords: dict[int, list[str]] = {}
        if core_coords is not None:
            assert core is not None and len(core_coords) == len(core.shape)
            coords.update({j: core_coords for j, shape in enumerate(self.domains) if shape == core.shape})
        for t in self.arg.site_terms(site):
            if t.id in values:
                continue  # the folded term: the core's result holds its value
            args = [self._value(b, s, values, coords, tag, elem, vidx, indent) for s in t.srcs]
            if t.op in (Op.VIEW, Op.COPY):  # a plain reshape or copy passes its value through
                values[t.id] = (args[0], t.dtype)
                continue
            name = f"{tag}t{self.position[t.id]}"
            b.line(
                f"{indent}let {name} = {self._expression(b, t, args, [values[s][1] for s in t.srcs], width)};  // %{t.id} {t.op.value}"
            )
            values[t.id] = (name, t.dtype)
        result = core.srcs[0] if site == "in" else self.arg.root.id
        return self._value(b, result, values, coords, tag, elem, vidx, indent)

    def _value(
        self,
        b: WgslBuilder,
        vid: int,
        values: dict[int, tuple[str, DType]],
        coords: dict[int, list[str]],
        tag: str,
        elem: str,
        vidx: str,
        indent: str,
    ) -> str:
        if vid in values:
            return values[vid][0]
        i = self.arg.leaf_index(vid)
        op = self.kernel.operands[i]
        width, mode, name = self.lanes[i], self.modes[i], self.kernel.in_name(i)
        if mode == "contig":
            raw = f"{name}[{vidx} + params.off{i}]"
        elif mode == "row":
            # the last coordinate only: the kernel's own (core_coords) or one remainder; a bias's
            # loads then repeat along the rows a thread stores, and the compiler keeps one per column
            j, last = self.domain[i], len(op.view.shape) - 1
            column = coords[j][-1] if j in coords else f"(({elem}) % params.sh{j}_{last})"
            b.line(f"{indent}let {tag}a{i} = i32(params.off{i}) + i32({column}) * params.st{i}_{last};")
            raw = f"{name}[u32({tag}a{i}) / {width}u]" if width > 1 else f"{name}[u32({tag}a{i})]"
        else:
            j = self.domain[i]
            if j not in coords:
                rank = len(self.domains[j])
                for line in index_to_coords(elem, [f"sh{j}_{d}" for d in range(rank)], f"{tag}d{j}_"):
                    b.line(indent + line)
                coords[j] = [f"{tag}d{j}_{d}" for d in range(rank)]
            b.line(
                f"{indent}let {tag}a{i} = {address(f'off{i}', [f'st{i}_{d}' for d in range(len(coords[j]))], coords[j])};"
            )
            if mode == "vector":
                raw = f"{name}[u32({tag}a{i}) / {width}u]"
            elif mode == "splat":
                raw = f"{vtype(op.dtype, width, storage=True)}({name}[u32({tag}a{i})])"
            else:
                raw = f"{name}[u32({tag}a{i})]"
        b.line(f"{indent}let {tag}v{i} = {load_cast(raw, op.dtype, width)};")
        values[vid] = (f"{tag}v{i}", op.dtype)
        return f"{tag}v{i}"

    def has_epilogue(self) -> bool:
        """Terms left after the core's result (and after the folded term, whose value that result is)."""
        core = self.arg.core
        return core is not None and self.arg.root.id != (core.id if self.folded is None else self.folded)

    def epilogue_function(self, b: WgslBuilder, coords: bool = False) -> str:
        """Define `fn wg_epilogue(acc, elem: u32)`: the epilogue of one element; returns its name.

        `acc` is the core's result in its arithmetic type (scalar), `elem` the element's linear
        index in the output; the result is the group's value (arithmetic type, before the store
        cast). Kernels that store several lanes at once call it once per lane. Needs the "out"
        site at width 1. With `coords`, `fn wg_epilogue_at(acc, elem, c0, c1, ...)` also takes the
        element's coordinates in the core's output, and leaves of that shape read from them.
        """
        assert self.widths["out"] == 1 and self.arg.core is not None
        rank = len(self.arg.core.shape)
        name = "wg_epilogue_at" if coords else "wg_epilogue"
        at = [f"c{d}" for d in range(rank)] if coords else None
        inner = WgslBuilder()
        value = self.emit(inner, "out", "e", "elem", "elem", acc="acc", core_coords=at)
        for helper, code in inner.helpers.items():
            b.helper(helper, code)
        body = "\n".join("  " + line for line in inner.body)
        core_t, root_t = vtype(self.arg.core.dtype, 1), vtype(self.arg.root.dtype, 1)
        params = "".join(f", {c}: u32" for c in at or [])
        b.helper(name, f"fn {name}(acc: {core_t}, elem: u32{params}) -> {root_t} {{\n{body}\n  return {value};\n}}")
        return name

    def store_lanes(self, index: str, value: str, lanes: int, b: WgslBuilder, coords: list[str] | None = None) -> str:
        """The stored form of `value` (`lanes` lanes of the core's result, each lane's element at
        index * lanes + lane) after the epilogue: the right-hand side of `out[index] = ...`.
        `coords`: lane 0's coordinates in the core's output where the kernel knows them (the lanes
        are consecutive along its last axis); the epilogue then reads its leaves from them."""
        fn = self.epilogue_function(b, coords=coords is not None)

        def at(j: int) -> str:
            if coords is None:
                return ""
            return "".join(f", {c}" for c in coords[:-1]) + f", {coords[-1]} + {j}u"

        core_dt = self.arg.core.dtype
        dt = self.arg.root.dtype

        def core_value(lane: str) -> str:
            # the core accumulates in f32: a float16 core value is rounded as its node would be
            if core_dt is DType.float16:
                for name, code in expr.f16_round_helper("f32").items():
                    b.helper(name, code)
                return f"f16({expr.f16_rounded(f'f32({lane})', 'f32')})"
            return f"{vtype(core_dt, 1)}({lane})"

        if lanes == 1:
            return store_cast(f"{fn}({core_value(value)}, {index}{at(0)})", dt, 1)
        parts = [
            store_cast(f"{fn}({core_value(f'{value}.{c}')}, ({index}) * {lanes}u + {j}u{at(j)})", dt, 1)
            for j, c in enumerate("xyzw"[:lanes])
        ]
        return f"{vtype(dt, lanes, storage=True)}({', '.join(parts)})"

    @staticmethod
    def _expression(b: WgslBuilder, t: Node, args: list[str], arg_dtypes: list[DType], width: int) -> str:
        if t.op is Op.CAST:
            to, src = vtype(t.dtype, width), arg_dtypes[0]
            if src.is_float and t.dtype.is_int:  # saturating (WGSL) and NaN -> 0 (documented)
                # float16 goes via float32: i32(f16) clamps to the f16 range, so inf gave 65504
                f32 = vtype(DType.float32, width)
                x = f"{f32}({args[0]})" if src is DType.float16 else args[0]
                # clamped to the largest floats inside the range first: WGSL's conversion saturates,
                # but naga's GLSL (Mesa's GL adapter) gave INT32_MIN for 3e9 and inf
                lo, hi = ("-2147483648.0", "2147483520.0") if t.dtype is DType.int32 else ("0.0", "4294967040.0")
                clamped = f"clamp({x}, {f32}({lo}), {f32}({hi}))"
                return f"select({to}({clamped}), {to}(0), {expr.isnan(x, f32)})"
            if t.dtype is DType.float16 and src is not DType.float16:  # see expr.f16_rounded
                wide = vtype(DType.float32, width)
                for name, code in expr.f16_round_helper(wide).items():
                    b.helper(name, code)
                return f"{to}({expr.f16_rounded(f'{wide}({args[0]})', wide)})"
            return f"{to}({args[0]})"
        # comparisons and where compute in their operands' type; everything else in the result's
        math_dtype = arg_dtypes[-1] if t.op in COMPARISON or t.op is Op.WHERE else t.dtype
        wt = vtype(math_dtype, width)
        for name, code in expr.helpers(t.op, wt, math_dtype).items():
            b.helper(name, code)
        return expr.expression(t.op, args, wt, math_dtype)


@dataclass
class CoreInput:
    """What a row kernel (one input, reduced or normalised along rows) reads when it may be fused."""

    core: Node  # the reduction or softmax itself (the node when unfused)
    code: FusedCode | None  # its group's prologue and epilogue, when fused
    src: int | None  # the operand it reads itself; None when the prologue computes its input
    view: View  # how that input is read (contiguous in the prologue's order when computed)
    dtype: DType


def core_input(kernel: Kernel, widths: dict[str, int]) -> CoreInput:
    node = kernel.node
    if node.op is not Op.FUSED:
        return CoreInput(node, None, 0, kernel.operands[0].view, kernel.operands[0].dtype)
    group: FusedArg = node.arg
    code = FusedCode(kernel, group, widths)
    src = group.core.srcs[0]
    if group.is_term(src):
        term = group.term(src)
        return CoreInput(group.core, code, None, View.contiguous(term.shape), term.dtype)
    i = group.leaf_index(src)
    return CoreInput(group.core, code, i, kernel.operands[i].view, kernel.operands[i].dtype)


def store_value(
    b: WgslBuilder, kernel: Kernel, code: FusedCode | None, index: str, value: str, lanes: int, indent: str = ""
) -> None:
    """`out[index] = value` (`lanes` lanes of the core's f32 result), through the group's epilogue when it has one."""
    if code is not None and code.has_epilogue():
        b.line(f"{indent}out[{index}] = {code.store_lanes(index, value, lanes, b)};")
    else:
        b.line(f"{indent}out[{index}] = {vtype(kernel.node.dtype, lanes, storage=True)}({value});")


def plain_group(node: Node) -> FusedArg:
    """A single node as a one-term group (its distinct srcs are the leaves)."""
    from dataclasses import replace

    return FusedArg((replace(node, kernel=None, inplace=None, slot=None),), tuple(dict.fromkeys(node.srcs)))
