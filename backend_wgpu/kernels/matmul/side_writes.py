"""Side writes of a GEMV group (passes.fuse_gemv): its kernel writes values into other buffers.

Two forms write a value of the group into a buffer x:
  box     index_write(x, value, offsets): element e of the value lands at its coordinates
          plus the offsets (a KV-cache append at a position);
  spread  where(cond, value spread along some axes, x): element e of the value lands at every
          position along the spread axes where cond holds (the one-hot cache update of a
          fixed-size cache).
In place (the group's side-write node overwrites x's buffer) only the written elements are
stored. As a copy (x stays visible, so the side write has a buffer of its own) every
workgroup also copies its share of x's other elements, in linear order, to that buffer.

The unit's values come from thread 0 (the epilogue); spread writes and copies are made by
all the workgroup's threads, after a barrier, the values passed through workgroup memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from backend_wgpu.kernel import Meta, address, index_to_coords
from backend_wgpu.wgsl import WgslBuilder, load_cast, store_cast, vtype
from ir.graph import Graph
from ir.node import Node
from ir.ops import Op
from ir.view import View, contiguous_strides

if TYPE_CHECKING:
    from backend_wgpu.kernel import Kernel


@dataclass
class SideWrite:
    term: Node  # the index_write or where term
    target: int  # operand index of x: overwritten in place, or read for the copy
    copy: int | None  # the extra output binding `side{copy}` when it writes a copy
    slot: int  # its values' place in workgroup memory (two: the unit's elements)

    @property
    def box(self) -> bool:
        return self.term.op is Op.INDEX_WRITE

    @property
    def value(self) -> int:
        """The term whose value is written (the index_write's source, the where's spread view)."""
        return self.term.srcs[1]

    @property
    def cond(self) -> int:
        return self.term.srcs[0]


def side_writes(node: Node, graph: Graph, terms: list[Node]) -> list[SideWrite]:
    """The side writes among a group's terms; in place when the graph's side-write node overwrites x."""
    found: list[SideWrite] = []
    copies = 0
    for t in terms:
        companion = graph.nodes.get(t.id)
        if companion is None or companion.kernel is None or companion.kernel.param("done_by") != node.id:
            continue
        target = t.srcs[0] if t.op is Op.INDEX_WRITE else t.srcs[2]
        copy = None if companion.inplace is not None else copies
        copies += copy is not None
        found.append(SideWrite(t, node.arg.leaf_index(target), copy, 2 * len(found)))
    return found


def spread_axes(kernel: Kernel, w: SideWrite) -> tuple[list[int], list[int]]:
    """(axes the value's elements run along, axes it is spread along) of a spread write's view."""
    view: View = kernel.node.arg.term(w.value).arg
    spread = [d for d, (n, s) in enumerate(zip(view.shape, view.strides)) if s == 0 and n > 1]
    return [d for d in range(len(view.shape)) if d not in spread], spread


def metadata(kernel: Kernel, writes: list[SideWrite]) -> Meta:
    meta: Meta = []
    for w in writes:
        t = w.term
        meta += [(f"w{t.id}_n{d}", "u32", n) for d, n in enumerate(t.shape)]
        meta += [(f"w{t.id}_os{d}", "u32", s) for d, s in enumerate(contiguous_strides(t.shape))]
        if w.box:
            shape = _value_shape(kernel, w)
            meta += [(f"w{t.id}_vn{d}", "u32", n) for d, n in enumerate(shape)]
            meta += [(f"w{t.id}_lo{d}", "u32", o) for d, o in enumerate(t.arg)]
            meta += [(f"w{t.id}_hi{d}", "u32", o + n) for d, (o, n) in enumerate(zip(t.arg, shape))]
        if w.copy is not None:
            x = kernel.operands[w.target].view
            meta += [(f"w{t.id}_xoff", "u32", x.offset)] + [
                (f"w{t.id}_xs{d}", "i32", s) for d, s in enumerate(x.strides)
            ]
        if not w.box:
            c = kernel.operands[kernel.node.arg.leaf_index(w.cond)].view
            meta += [(f"w{t.id}_coff", "u32", c.offset)] + [
                (f"w{t.id}_cs{d}", "i32", s) for d, s in enumerate(c.strides)
            ]
    return meta


def _value_shape(kernel: Kernel, w: SideWrite) -> tuple[int, ...]:
    arg = kernel.node.arg
    return arg.term(w.value).shape if arg.is_term(w.value) else kernel.operands[arg.leaf_index(w.value)].view.shape


def register(b: WgslBuilder, kernel: Kernel, writes: list[SideWrite]) -> None:
    for w in writes:
        if w.copy is not None:
            b.storage(f"side{w.copy}", vtype(w.term.dtype, 1, storage=True), read_only=False)


def _store(w: SideWrite, value: str) -> str:
    return store_cast(f"{vtype(w.term.dtype, 1)}({value})", w.term.dtype, 1)


def _destination(kernel: Kernel, w: SideWrite) -> str:
    return kernel.in_name(w.target) if w.copy is None else f"side{w.copy}"


def _cond(kernel: Kernel, w: SideWrite, coords: list[str]) -> str:
    t = w.term
    at = address(f"w{t.id}_coff", [f"w{t.id}_cs{d}" for d in range(len(coords))], coords)
    cond_dtype = kernel.operands[kernel.node.arg.leaf_index(w.cond)].dtype
    return load_cast(f"in{kernel.node.arg.leaf_index(w.cond)}[u32({at})]", cond_dtype, 1)


def by_thread0(b: WgslBuilder, kernel: Kernel, w: SideWrite, j: int, element: str, value: str) -> None:
    """Inside thread 0's epilogue: a box write of element j, or the spread value kept for all threads."""
    t = w.term
    if not w.box:
        b.line(f"wv[{w.slot + j}u] = f32({value});")
        return
    shape = _value_shape(kernel, w)
    prefix = f"w{t.id}_{j}_c"
    for line in index_to_coords(element, [f"w{t.id}_vn{d}" for d in range(len(shape))], prefix):
        b.line(line)
    # the value's coordinates split by its own shape: the box dims are its dims
    target = " + ".join(f"({prefix}{d} + params.w{t.id}_lo{d}) * params.w{t.id}_os{d}" for d in range(len(shape)))
    b.line(f"{_destination(kernel, w)}[{target or '0u'}] = {_store(w, value)};")


PRELOAD_STEPS = 8  # spread positions per thread up to which their conditions load before the k loop


def _spread_walk(kernel: Kernel, w: SideWrite) -> tuple[list[int], list[int], int, int]:
    """(kept axes, spread axes, positions walked, steps per thread) of a spread write."""
    kept, spread = spread_axes(kernel, w)
    count = math.prod(w.term.shape[d] for d in spread)
    return kept, spread, count, -(-count // kernel.choice.workgroup[0])


def _spread_coords(
    b: WgslBuilder, w: SideWrite, kept: list[int], spread: list[int], r: str, e: str, tag: str
) -> list[str]:
    """Emit the coordinates of position r of the spread axes and element e of the value; returns them."""
    t = w.term
    for line in index_to_coords(r, [f"w{t.id}_n{d}" for d in spread], f"sp{tag}_"):
        b.line(line)
    for line in index_to_coords(e, [f"w{t.id}_n{d}" for d in kept], f"k{tag}_"):
        b.line(line)
    coords = ["" for _ in range(len(t.shape))]
    for n, d in enumerate(kept):
        coords[d] = f"k{tag}_{n}"
    for n, d in enumerate(spread):
        coords[d] = f"sp{tag}_{n}"
    return coords


def preload(b: WgslBuilder, kernel: Kernel, w: SideWrite, elements: list[str]) -> None:
    """Before the k loop: where each thread's positions of a spread write hold its condition (their loads
    then overlap the weight loads instead of following the epilogue), for short walks."""
    if w.box:
        return
    kept, spread, count, steps = _spread_walk(kernel, w)
    if steps > PRELOAD_STEPS:
        return
    t = w.term
    for i in range(steps):
        for j, e in enumerate(elements):
            tag = f"{t.id}_{i}_{j}"
            b.line(f"var pc{tag} = false;")
            b.line(f"if (lidx + {i * kernel.choice.workgroup[0]}u < {count}u) {{")
            inner = WgslBuilder()
            coords = _spread_coords(inner, w, kept, spread, f"lidx + {i * kernel.choice.workgroup[0]}u", e, tag)
            for line in inner.body:
                b.line("  " + line)
            b.line(f"  pc{tag} = {_cond(kernel, w, coords)};")
            b.line("}")


def by_all(b: WgslBuilder, kernel: Kernel, w: SideWrite, elements: list[str]) -> None:
    """After the barrier, every thread: the spread writes of the unit's elements (conditions preloaded
    by `preload` for short walks, else read here)."""
    if w.box:
        return
    t = w.term
    kept, spread, count, steps = _spread_walk(kernel, w)
    wg = kernel.choice.workgroup[0]
    if steps <= PRELOAD_STEPS:
        for i in range(steps):
            for j, e in enumerate(elements):
                tag = f"{t.id}_{i}_{j}"
                b.line(f"if (pc{tag}) {{")
                inner = WgslBuilder()
                coords = _spread_coords(inner, w, kept, spread, f"lidx + {i * wg}u", e, f"s{tag}")
                for line in inner.body:
                    b.line("  " + line)
                target = " + ".join(f"{c} * params.w{t.id}_os{d}" for d, c in enumerate(coords)) or "0u"
                b.line(f"  {_destination(kernel, w)}[{target}] = {_store(w, f'wv[{w.slot + j}u]')};")
                b.line("}")
        return
    count_expr = " * ".join(f"params.w{t.id}_n{d}" for d in spread) or "1u"
    b.line(f"for (var r = lidx; r < {count_expr}; r += {wg}u) {{")
    for j, e in enumerate(elements):
        inner = WgslBuilder()
        coords = _spread_coords(inner, w, kept, spread, "r", e, f"{j}")
        for line in inner.body:
            b.line("  " + line)
        target = " + ".join(f"{c} * params.w{t.id}_os{d}" for d, c in enumerate(coords)) or "0u"
        b.line(
            f"  if ({_cond(kernel, w, coords)}) {{ {_destination(kernel, w)}[{target}] = {_store(w, f'wv[{w.slot + j}u]')}; }}"
        )
    b.line("}")


def copy_share(b: WgslBuilder, kernel: Kernel, w: SideWrite, units: str) -> None:
    """A copy's share of x for this workgroup: the elements the write leaves, in linear order."""
    if w.copy is None:
        return
    t = w.term
    rank = len(t.shape)
    size = " * ".join(f"params.w{t.id}_n{d}" for d in range(rank)) or "1u"
    b.line(f"let share{t.id} = ({size} + {units} - 1u) / {units};")
    b.line(
        f"for (var i = wg * share{t.id} + lidx; i < min((wg + 1u) * share{t.id}, {size}); i += {kernel.choice.workgroup[0]}u) {{"
    )
    for line in index_to_coords("i", [f"w{t.id}_n{d}" for d in range(rank)], f"x{t.id}_"):
        b.line("  " + line)
    coords = [f"x{t.id}_{d}" for d in range(rank)]
    if w.box:
        inside = " && ".join(f"{c} >= params.w{t.id}_lo{d} && {c} < params.w{t.id}_hi{d}" for d, c in enumerate(coords))
        kept = f"!({inside or 'true'})"
    else:
        kept = f"!{_cond(kernel, w, coords)}"
    x_at = address(f"w{t.id}_xoff", [f"w{t.id}_xs{d}" for d in range(rank)], coords)
    b.line(f"  if ({kept}) {{ side{w.copy}[i] = {kernel.in_name(w.target)}[u32({x_at})]; }}")
    b.line("}")
