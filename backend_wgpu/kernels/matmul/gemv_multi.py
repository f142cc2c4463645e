"""gemv_multi: the GEMV group of passes.fuse_gemv, one row times several weights in one kernel.

The group (an ir.fusion.FusedArg) holds matmuls of one row that share their input A
(1 x K), each with its own B (K x N, contiguous along k: x @ W.T), optionally an
rms_norm before them and an epilogue after them. The epilogue splits into parts, each
one or more matmuls and the terms that read them; a part ends in the group's stored
result (the root) or in side writes (in-place index_writes into another buffer).

A workgroup computes one unit of one part: one output element, or the two elements a
rope rotates together (i and i + d/2, or 2i and 2i + 1), for every matmul of the part
(SwiGLU's gate and up at the same column). Its threads stride along k, reading A once
for all of the unit's dot products (and, with the norm, squaring it into the row's
sum of squares and scaling it by the norm weight); one workgroup sum gives every dot
product, and the norm's 1 / rms then scales them (rms_norm(x) @ B = (x * w) @ B / rms).
A float16 norm instead sums the row's squares first (a pass over the row, then a
workgroup sum): the k loop then rounds each normed, weighted element to float16 where the
unfused graph stores its row, so the products are those of the stored row (an element past
65504 is inf there as well).
Thread 0 evaluates the part's terms at the unit's elements, stores the root and makes
the side writes.

Quantized weights (q8_0, q4_0, q4_k, q6_k: kernels/quant/formats.py) make the `blocks` variant: each
thread takes whole blocks of 32 values along k (one or two 16-byte loads of quants and a
scale per B, eight vec4 of the row), dequantizes in registers as qgemv does and adds
scale * (quants . row) to its sum (q4_k: less its offset times the block's sum of the row,
once per 32 values; q6_k: its high bits loaded beside the unit, its two halves scaled apart);
a float B of the same group is read 32 values a block.
A part without rope pairs or side writes (SwiGLU's gate and up, a head) gives each
workgroup `lanes` / (its matmuls) consecutive output elements, so each load of the row serves that many
columns of every B (a block of quants is 16-18 bytes against the row's 128), and there are
fewer workgroups, each with more loads in flight. Where each thread takes at most
UNROLLED_STEPS KernelElements of the row, the loop is unrolled with every load issued first.

The `staged` variant (quantized groups without spread writes, passes.select_kernels.GEMV_STAGED_ROW) instead
has every workgroup read the row (times the norm weight, or normed and rounded for a float16 norm) once into
workgroup memory, with the norm's sum of squares summed once; then `unit_threads` threads take each unit
(a column, or a rope pair) of many per workgroup (groups twice as wide while the dispatch would have fewer
than `min_workgroups`), each thread blocks sub, sub + unit_threads, ... of it,
`unroll` blocks' loads issued together; the unit's sums by subgroup shuffles (or through workgroup memory)
and its epilogue (the terms, the root, box side writes) by the unit's first thread. The blocks layout
re-reads the row and norm weight in every workgroup of a few columns; this reads them once per many.

Math in f32; each term's value is rounded to its dtype as the unfused graph would store it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from backend_wgpu.element import WIDTHS, k_contiguous, vector_readable
from backend_wgpu.kernel import Kernel, Meta, Workload, index_to_coords
from backend_wgpu.kernels import expr
from backend_wgpu.kernels.elementwise.fused import FusedCode
from backend_wgpu.kernels.matmul import side_writes
from backend_wgpu.kernels.quant.formats import describe, quant_format
from backend_wgpu.wgsl import WgslBuilder, f32v, load_cast, store_cast, vtype
from ir.dtypes import DType
from ir.fusion import FusedArg
from ir.graph import Graph
from ir.node import Node
from ir.ops import Op
from ir.view import View


@dataclass
class Part:
    """Matmuls whose epilogue terms connect them, and how a workgroup's unit of elements is made."""

    cores: list[Node]
    terms: list[Node] = field(default_factory=list)  # epilogue terms, in order
    pair: tuple[bool, int] | None = None  # (interleaved, d) of its rope: units are the pairs it rotates

    @property
    def size(self) -> int:
        return self.cores[0].size

    @property
    def units(self) -> int:
        return self.size // 2 if self.pair else self.size


@dataclass
class Layout:
    """The roles of a group's terms and leaves."""

    arg: FusedArg
    cores: list[Node]
    norm: Node | None
    parts: list[Part]
    a_leaf: int  # operand index of the row (the norm's input when there is a norm)
    w_leaf: int | None  # operand index of the norm weight
    b_leaves: list[int]  # operand index of each core's B

    @staticmethod
    def of(arg: FusedArg) -> Layout:
        cores = [t for t in arg.terms if t.op is Op.MATMUL]
        prologue = arg.prologue
        norm = next((t for t in arg.terms if t.id in prologue and t.op is Op.RMS_NORM), None)
        a_src = norm.srcs[0] if norm else cores[0].srcs[0]
        w_leaf = arg.leaf_index(norm.srcs[1]) if norm and norm.arg.weight else None
        parts = _parts(arg, cores, prologue)
        return Layout(
            arg, cores, norm, parts, arg.leaf_index(a_src), w_leaf, [arg.leaf_index(c.srcs[1]) for c in cores]
        )

    @property
    def rounded_row(self) -> bool:
        """A float16 norm: its row is rounded to float16 (as the unfused graph stores it) before the products."""
        return self.norm is not None and self.norm.dtype is DType.float16

    def loop_leaves(self) -> set[int]:
        return {self.a_leaf, *self.b_leaves} | ({self.w_leaf} if self.w_leaf is not None else set())

    def epilogue_leaves(self, written: frozenset[int] | set[int] = frozenset()) -> set[int]:
        """Leaves the epilogue terms read, but for the side writes in `written` (term ids), which
        read theirs in side_writes.py. A where that writes nothing (tril's mask, say) reads its
        leaves here: its condition is a leaf as a side write's is, so the op alone cannot tell."""
        found = set()
        for part in self.parts:
            for t in part.terms:
                if t.id not in written:
                    found |= {self.arg.leaf_index(s) for s in t.srcs if not self.arg.is_term(s)}
        return found


def _parts(arg: FusedArg, cores: list[Node], prologue: frozenset[int]) -> list[Part]:
    """Connected parts of the epilogue, in the order of their first matmul."""
    part_of: dict[int, Part] = {}
    parts: list[Part] = []
    for t in arg.terms:
        if t.id in prologue:
            continue
        if t.op is Op.MATMUL:
            part = Part([t])
            parts.append(part)
            part_of[t.id] = part
            continue
        joined = [part_of[s] for s in t.srcs if s in part_of]
        part = joined[0]
        for other in joined[1:]:
            if other is not part:
                part.cores += other.cores
                part.terms += other.terms
                parts.remove(other)
                for k, v in part_of.items():
                    if v is other:
                        part_of[k] = part
        part.terms.append(t)
        part_of[t.id] = part
        if t.op is Op.ROPE:
            pair = (t.arg.interleaved, t.shape[-1])
            assert part.pair in (None, pair), "gemv_multi: one part rotates one way"
            part.pair = pair
    for part in parts:
        order = {t.id: i for i, t in enumerate(arg.terms)}
        part.cores.sort(key=lambda c: order[c.id])
        part.terms.sort(key=lambda t: order[t.id])
    return parts


def _writes(arg: FusedArg, t: Node) -> bool:
    """Does term t write another buffer (an index_write, or a where that spreads a term along axes)?"""
    if t.op is Op.INDEX_WRITE:
        return True
    return (
        t.op is Op.WHERE and arg.is_term(t.srcs[1]) and arg.term(t.srcs[1]).op is Op.VIEW and not arg.is_term(t.srcs[2])
    )


UNROLLED_STEPS = 4  # KernelElements of the row per thread up to which the k loop is unrolled, loads first
HOIST_EPILOGUE_LOADS = True  # one-unit parts: the epilogue's leaf loads before the k loop (False: thread 0's, after)


class GemvMultiKernel(Kernel):
    name = "gemv_multi"
    width_along_k = True

    @classmethod
    def widest_group(cls, node: Node, views: list[View]) -> int:
        """The k loop's KernelElement: the row, the norm weight and every B read along k at it."""
        lay = Layout.of(node.arg)
        k = lay.norm.shape[-1] if lay.norm else views[lay.a_leaf].shape[-1]
        if lay.loop_leaves() & lay.epilogue_leaves():  # side writes counted in: only ever narrower
            return 1  # a leaf read in the loop and by the epilogue is bound once, as scalars
        for w in WIDTHS:
            row = [views[lay.a_leaf]] + ([views[lay.w_leaf]] if lay.w_leaf is not None else [])
            if k % w == 0 and all(vector_readable(v, w) for v in row):
                if all(k_contiguous(views[i], w) for i in lay.b_leaves):
                    return w
        return 1

    @classmethod
    def reason(cls, graph: Graph, node: Node) -> str:
        if node.kernel.param("done_by") is not None:
            return f"written by %{node.kernel.param('done_by')}'s kernel (a side write of its group)"
        lay = Layout.of(node.arg)
        what = [f"{len(lay.cores)} matmuls of one row sharing it"]
        if lay.norm:
            what.append("rms_norm folded in" + (" (its row rounded to float16 first)" if lay.rounded_row else ""))
        if any(p.pair for p in lay.parts):
            what.append("rope pairs per workgroup")
        owners = [graph[node.srcs[i]] for i in sorted(set(lay.b_leaves))]
        owners = [graph[o.srcs[0]] if o.op is Op.VIEW else o for o in owners]
        quantized = [describe(o.dtype, o.shape) for o in owners if o.dtype.is_quantized]
        if quantized:
            many = " (several columns a workgroup but in rope or side-write parts)"
            what.append(f"blocks of 32 along k{many}, {', '.join(quantized)} dequantized in registers")
        if node.kernel.variant == "staged":
            what.append("the row staged in workgroup memory, threads in groups per column")
        writes = [t for p in lay.parts for t in p.terms if _writes(node.arg, t)]
        if writes:
            what.append(f"{len(writes)} side writes")
        return ", ".join(what)

    def __init__(self, node: Node, graph: Graph, max_workgroups: int = 65535) -> None:
        super().__init__(node, graph, max_workgroups)
        self.lay = Layout.of(node.arg)
        # a quantized B: threads walk whole blocks of 32 along k (the row's length is whole blocks)
        self.blocks = any(self.operands[i].dtype.is_quantized for i in self.lay.b_leaves)
        self.writes = side_writes.side_writes(node, graph, [t for p in self.lay.parts for t in p.terms])
        # the `staged` variant (quantized groups, select_kernels.GEMV_STAGED_ROW): the row in workgroup memory
        self.staged = self.choice.variant == "staged"
        if self.staged and (not self.blocks or any(not w.box for w in self.writes)):
            raise ValueError(f"gemv_multi %{node.id}: the staged variant takes quantized groups without spread writes")
        self.targets = {w.target for w in self.writes if w.copy is None}
        # terms whose writes need the workgroup's threads after the epilogue (spread writes, copies of x)
        shared = {w.term.id for w in self.writes if not w.box or w.copy is not None}
        lanes = self.choice.param("lanes", 1)
        # units per workgroup of each part: as many as keep a thread's dot products within `lanes`, where each
        # unit's thread can finish it alone (its root and box writes: a KV-cache append at a position); one
        # where spread writes or copies follow. (A decode step's k and v parts, one unit each, read 8 KB of
        # weights per workgroup beside 16 KB of row and norm weight.)
        self.per_wg = [
            1
            if any(t.id in shared for t in part.terms)
            else max(1, lanes // (len(part.cores) * (2 if part.pair else 1)))
            for part in self.lay.parts
        ]
        if self.staged:  # a unit per group of threads, side writes or not
            wgx, self.group = self.choice.workgroup[0], self.choice.param("unit_threads", 1)
            least = self.choice.param("min_workgroups", 0)  # wider groups (fewer units each) up to this many
            while self.group < wgx and sum(-(-p.units // (wgx // self.group)) for p in self.lay.parts) < least:
                self.group *= 2
            self.shuffle = self.group <= self.choice.param("shuffle_max", 0)  # a group within a subgroup
            self.per_wg = [wgx // self.group] * len(self.lay.parts)
        self.copy_slots = [graph[w.term.id].slot for w in self.writes if w.copy is not None]
        self._pre: WgslBuilder | None = None  # where the epilogue's leaf loads go (see _part)

    # --- bindings and uniform ---------------------------------------------------------
    def variant_key(self) -> str:
        parts = ";".join(
            f"{len(p.cores)}{'p' if p.pair else ''}{'i' if p.pair and p.pair[0] else ''}" for p in self.lay.parts
        )
        norm = ("nr" if self.lay.rounded_row else "n") if self.lay.norm else ""
        units = f"x{max(self.per_wg)}" if max(self.per_wg) > 1 else ""
        way = f":blocks{units}" if self.blocks else (f":{units}" if units else "")
        if self.staged:
            group, unroll = self.group, self.choice.param("unroll", 1)
            way = f":staged{group}u{unroll}{'s' if self.shuffle else ''}x{max(self.per_wg)}"
        return f"{self.node.arg.short_key()}:{parts}:{norm}{way}"

    def operand_type(self, i: int) -> str:
        if self.operands[i].dtype.is_quantized:
            return "vec4<u32>"  # 16-byte units of quants, then the scales (formats.py)
        w = self.kernel_element() if i in self.lay.loop_leaves() else 1
        return vtype(self.operands[i].dtype, w, storage=True)

    def output_type(self) -> str:
        return vtype(self.node.dtype, 1, storage=True)

    def writable_operand(self, i: int) -> bool:
        if i in self.targets:
            return True
        in_arena = any(self.operands[t].slot in self.arena_slots for t in self.targets)
        return super().writable_operand(i) or (in_arena and self.operands[i].slot in self.arena_slots)

    def register_bindings(self, b: WgslBuilder) -> None:
        for i in range(len(self.operands)):
            if not self.reads_output(i):
                b.storage(f"in{i}", self.operand_type(i), read_only=not self.writable_operand(i))
        side_writes.register(b, self, self.writes)
        b.storage("out", self.output_type(), read_only=False)
        b.uniform_meta([(n, t) for n, t, _ in self.metadata()])

    def binding_slots(self) -> list[int | None]:
        slots: list[int | None] = [o.slot for i, o in enumerate(self.operands) if not self.reads_output(i)]
        return slots + list(self.copy_slots) + [self.node.slot, None]

    def _quantized(self) -> list[int]:
        """Operand indices of the quantized Bs, each once."""
        return sorted({i for i in self.lay.b_leaves if self.operands[i].dtype.is_quantized})

    def _k(self) -> int:
        return self.lay.norm.shape[-1] if self.lay.norm else self.operands[self.lay.a_leaf].view.shape[-1]

    def metadata(self) -> Meta:
        lay, w = self.lay, self.kernel_element()
        a = self.operands[lay.a_leaf].view
        meta: Meta = [("kw", "u32", self._k() // w), ("a_off", "u32", a.offset), ("a_sk", "i32", a.strides[-1])]
        if lay.norm:
            meta += [("k", "u32", self._k()), ("eps", "f32", lay.norm.arg.eps)]
            if lay.w_leaf is not None:
                meta += [("nw_off", "u32", self.operands[lay.w_leaf].view.offset)]
        if self.blocks:
            meta.append(("kb", "u32", self._k() // 32))
        for i in self._quantized():  # w (N, K) read through w.T (K, N)
            fmt = quant_format(self.operands[i].dtype)
            n = self.operands[i].view.shape[-1]
            meta += [(f"q{i}_s4", "u32", fmt.units(n * self._k())), (f"q{i}_upr", "u32", fmt.units(self._k()))]
        for c, i in enumerate(lay.b_leaves):
            b = self.operands[i].view
            if self.operands[i].dtype.is_quantized:
                continue
            meta += [
                (f"b{c}_off", "u32", b.offset),
                (f"b{c}_sk", "i32", b.strides[-2]),
                (f"b{c}_sn", "i32", b.strides[-1]),
            ]
        end = 0
        for p, part in enumerate(lay.parts):  # u{p}: the workgroups of parts 0..p
            end += -(-part.units // self.per_wg[p])
            meta.append((f"u{p}", "u32", end))
            if self.per_wg[p] > 1 or self.staged:
                meta.append((f"n{p}", "u32", part.units))
            if part.pair:
                meta.append((f"half{p}", "u32", part.pair[1] // 2))
        for i in sorted(lay.epilogue_leaves({w.term.id for w in self.writes})):
            view = self.operands[i].view
            meta += [(f"l{i}_off", "u32", view.offset)] + [(f"l{i}_s{d}", "i32", s) for d, s in enumerate(view.strides)]
        for t in self._terms():
            meta += [(f"t{t.id}_n{d}", "u32", n) for d, n in enumerate(t.shape)]
        return meta + side_writes.metadata(self, self.writes)

    def _terms(self) -> list[Node]:
        """Epilogue terms whose element coordinates the code needs (rope and readers of leaves)."""
        out = []
        written = {w.term.id for w in self.writes}
        for part in self.lay.parts:
            for t in part.terms:
                reads_leaf = any(not self.node.arg.is_term(s) for s in t.srcs)
                if t.id not in written and (t.op is Op.ROPE or reads_leaf):
                    out.append(t)
        return out

    def calculate_dispatch(self) -> Workload:
        groups = sum(-(-part.units // m) for part, m in zip(self.lay.parts, self.per_wg, strict=True))
        return Workload.for_workgroups(groups, self.choice.workgroup, self.max_workgroups)

    # --- code -----------------------------------------------------------------------
    def render(self, b: WgslBuilder) -> None:
        self._describe(b)
        wg = self.choice.workgroup[0]
        subgroups = self.choice.param("subgroups", False)
        red = max(wg, self._red_stride() * self._packs()) if subgroups else wg
        if self.staged and not self.shuffle:  # the units' sums: a vec4 a thread a pack
            red = max(red, wg * self._unit_packs())
        b.workgroup_var(f"red: array<vec4<f32>, {red}>")
        if self.staged:
            b.workgroup_var(f"row: array<vec4<f32>, {self._k() // 4}>")
        if any(not w.box for w in self.writes):
            b.workgroup_var(f"wv: array<f32, {2 * len(self.writes)}>")
        for i in self._quantized():
            quant_format(self.operands[i].dtype).define(b, f"in{i}", f"q{i}_s4")
        if self.choice.param("subgroups", False):
            b.builtin("@builtin(subgroup_invocation_id) sg_lane: u32")
            b.builtin("@builtin(subgroup_size) sg_size: u32")
        b.line(f"if (wg >= params.u{len(self.lay.parts) - 1}) {{ return; }}")
        if self.staged:
            self._stage_row(b)
        for p, part in enumerate(self.lay.parts):
            first = "0u" if p == 0 else f"params.u{p - 1}"
            b.line(f"{'if' if p == 0 else '} else if'} (wg < params.u{p}) {{")
            body = WgslBuilder()
            (self._staged_part if self.staged else self._part)(body, p, part, first)
            for name, code in body.helpers.items():
                b.helper(name, code)
            for line in body.body:
                b.line("  " + line)
        b.line("}")
        for w in self.writes:  # every workgroup copies its share of the buffers written as copies
            side_writes.copy_share(b, self, w, f"params.u{len(self.lay.parts) - 1}")

    def _describe(self, b: WgslBuilder) -> None:
        arg = self.node.arg
        b.line("// prologue: " + ", ".join(f"%{t.id} {t.op.value}" for t in arg.terms if t.id in arg.prologue))
        for p, part in enumerate(self.lay.parts):
            held = [f"%{t.id} {t.op.value}" for t in part.cores + part.terms]
            b.line(f"// part {p}: " + ", ".join(held))

    def _elements(self, b: WgslBuilder, p: int, part: Part, first: str) -> list[str]:
        """Emit the unit's element indices; returns their names."""
        many = self.per_wg[p]
        if many > 1:  # the workgroup's units; past the last one they read its column (and store nothing)
            b.line(f"let u = (wg - {first}) * {many}u;")
            if part.pair is None:
                for t in range(many):
                    b.line(f"let e{t} = min(u + {t}u, params.n{p} - 1u);")
                return [f"e{t}" for t in range(many)]
            names = []
            for t in range(many):  # unit t's pair: elements 2t and 2t + 1 of the list
                names += self._pair(b, p, part, f"min(u + {t}u, params.n{p} - 1u)", f"e{2 * t}", f"e{2 * t + 1}")
            return names
        b.line(f"let u = wg - {first};")
        if part.pair is None:
            b.line("let e0 = u;")
            return ["e0"]
        return self._pair(b, p, part, "u", "e0", "e1")

    def _pair(self, b: WgslBuilder, p: int, part: Part, unit: str, first: str, second: str) -> list[str]:
        """Emit the two elements rope rotates together for unit `unit` of a pair part; returns their names."""
        assert part.pair is not None
        if part.pair[0]:  # interleaved: (2i, 2i + 1)
            b.line(f"let {first} = 2u * ({unit});")
        else:  # half: (i, i + d/2) within each row of d
            b.line(f"let {first}_u = {unit};")
            b.line(f"let {first} = ({first}_u / params.half{p}) * 2u * params.half{p} + {first}_u % params.half{p};")
        b.line(f"let {second} = {first} + {'1u' if part.pair[0] else f'params.half{p}'};")
        return [first, second]

    def _part(self, b: WgslBuilder, p: int, part: Part, first: str) -> None:
        elements = self._elements(b, p, part, first)
        lanes = [(c, j) for c in range(len(part.cores)) for j in range(len(elements))]
        spread = [w for w in self.writes if not w.box and any(t.id == w.term.id for t in part.terms)]
        for w in spread:  # the spread writes' conditions: their loads overlap the weights'
            side_writes.preload(b, self, w, elements)
        loop = WgslBuilder()
        sums = self._k_loop(loop, part, elements, lanes)
        inner = WgslBuilder()
        # one unit a workgroup: the epilogue's leaves (rope's cos and sin, a bias...) load before the k loop,
        # by every thread (one address: a broadcast), so thread 0 waits on no load after the sums
        self._pre = WgslBuilder() if self.per_wg[p] == 1 and HOIST_EPILOGUE_LOADS else None
        if self.per_wg[p] > 1:  # unit t's epilogue by thread t, in a block of its own (its names repeat)
            width = 2 if part.pair else 1  # elements of a unit
            for t in range(self.per_wg[p]):
                inner.line(f"if (lidx == {t}u && u + {t}u < params.n{p}) {{")
                unit = WgslBuilder()
                mine = [sums[n] for n, (_, j) in enumerate(lanes) if j // width == t] + sums[len(lanes) :]
                own = elements[t * width : (t + 1) * width]
                self._epilogue(unit, p, part, own, [(c, j) for c in range(len(part.cores)) for j in range(width)], mine)
                for name, code in unit.helpers.items():
                    inner.helper(name, code)
                for line in unit.body:
                    inner.line("  " + line)
                inner.line("}")
        else:
            self._epilogue(inner, p, part, elements, lanes, sums)
        for piece in ([self._pre] if self._pre is not None else []) + [loop]:
            for name, code in piece.helpers.items():
                b.helper(name, code)
            for line in piece.body:
                b.line(line)
        self._pre = None
        b.line("if (lidx == 0u) {" if self.per_wg[p] == 1 else "{  // every thread has the sums: the units' threads")
        for name, code in inner.helpers.items():
            b.helper(name, code)
        for line in inner.body:
            b.line("  " + line)
        b.line("}")
        if spread:
            b.line("workgroupBarrier();  // thread 0's values in wv")
            for w in spread:
                side_writes.by_all(b, self, w, elements)

    def _b_load(self, core: int, base: str, kk: str) -> str:
        """One KernelElement of the B of global core index `core` at k-step kk (f32 lanes)."""
        w, i = self.kernel_element(), self.lay.b_leaves[core]
        if w == 1:
            return f"f32(in{i}[u32({base} + i32({kk}) * params.b{core}_sk)])"
        return f"{f32v(w)}(in{i}[{base} + {kk}])"

    def _k_loop(self, b: WgslBuilder, part: Part, elements: list[str], lanes: list[tuple[int, int]]) -> list[str]:
        """Every dot product of the unit (and the row's sum of squares), summed over the workgroup."""
        lay, w, wgx = self.lay, self.kernel_element(), self.choice.workgroup[0]
        if self.blocks:
            return self._sums(b, self._block_loop(b, part, elements, lanes))
        if -(-(self._k() // w) // wgx) <= UNROLLED_STEPS:
            return self._sums(b, self._unrolled_loop(b, part, elements, lanes))
        vt = f32v(w)
        globals_ = [lay.cores.index(c) for c in part.cores]
        for n, (c, j) in enumerate(lanes):
            g = globals_[c]
            col = f"i32(params.b{g}_off) + i32({elements[j]}) * params.b{g}_sn"
            b.line(f"let bb{n} = {f'u32({col}) / {w}u' if w > 1 else col};")
            b.line(f"var acc{n} = {vt}(0.0);")
        ia = lay.a_leaf
        raw = (
            f"in{ia}[params.a_off / {w}u + kk]" if w > 1 else f"in{ia}[u32(i32(params.a_off) + i32(kk) * params.a_sk)]"
        )
        if lay.rounded_row:
            self._row_rstd(b, raw)
        folded = lay.norm is not None and not lay.rounded_row  # its sum of squares rides along the products
        if folded:
            b.line(f"var sq = {vt}(0.0);")
        b.line(f"for (var kk = lidx; kk < params.kw; kk += {wgx}u) {{")
        b.line(f"  let xa = {vt}({raw});")
        a = "xa"
        if folded:
            b.line("  sq = fma(xa, xa, sq);")
        if lay.norm:
            normed = f"xa * {vt}(rstd)" if lay.rounded_row else "xa"
            if lay.w_leaf is not None:
                wl = f"in{lay.w_leaf}[params.nw_off / {w}u + kk]" if w > 1 else f"in{lay.w_leaf}[params.nw_off + kk]"
                normed = f"{normed} * {vt}({wl})"
            if lay.rounded_row:  # the norm kernel's value, rounded as its store rounds it
                for name, code in expr.f16_round_helper(vt).items():
                    b.helper(name, code)
                normed = expr.f16_rounded(normed, vt)
            if normed != "xa":
                b.line(f"  let a = {normed};")
                a = "a"
        for n, (c, _) in enumerate(lanes):
            b.line(f"  acc{n} = fma({a}, {self._b_load(globals_[c], f'bb{n}', 'kk')}, acc{n});")
        b.line("}")
        values = [f"dot(acc{n}, {vt}(1.0))" if w > 1 else f"acc{n}" for n in range(len(lanes))]
        if folded:
            values.append(f"dot(sq, {vt}(1.0))" if w > 1 else "sq")
        return self._sums(b, values)

    def _unrolled_loop(
        self, b: WgslBuilder, part: Part, elements: list[str], lanes: list[tuple[int, int]]
    ) -> list[str]:
        """The k loop when each thread takes at most UNROLLED_STEPS KernelElements of the row: every load
        (the row, the norm weight, each lane's B) issued first, then the norm (a float16 one's sum of
        squares summed over the workgroup while the B loads are in flight), then the products."""
        lay, w, wgx = self.lay, self.kernel_element(), self.choice.workgroup[0]
        vt = f32v(w)
        kw = self._k() // w
        steps = -(-kw // wgx)
        globals_ = [lay.cores.index(c) for c in part.cores]
        for n, (c, j) in enumerate(lanes):
            g = globals_[c]
            col = f"i32(params.b{g}_off) + i32({elements[j]}) * params.b{g}_sn"
            b.line(f"let bb{n} = {f'u32({col}) / {w}u' if w > 1 else col};")
        ia, wl = lay.a_leaf, lay.w_leaf
        for t in range(steps):
            b.line(f"let kk{t} = lidx + {t * wgx}u;")
            guard = f"if (kk{t} < params.kw) " if (t + 1) * wgx > kw else ""
            raw = (
                f"in{ia}[params.a_off / {w}u + kk{t}]"
                if w > 1
                else f"in{ia}[u32(i32(params.a_off) + i32(kk{t}) * params.a_sk)]"
            )
            b.line(f"var xa{t} = {vt}(0.0);")
            b.line(f"{guard}{{ xa{t} = {vt}({raw}); }}")
            if lay.norm is not None and wl is not None:
                at = f"in{wl}[params.nw_off / {w}u + kk{t}]" if w > 1 else f"in{wl}[params.nw_off + kk{t}]"
                b.line(f"var nw{t} = {vt}(0.0);")
                b.line(f"{guard}{{ nw{t} = {vt}({at}); }}")
            for n, (c, _) in enumerate(lanes):
                b.line(f"var b{n}_{t} = {vt}(0.0);")
                b.line(f"{guard}{{ b{n}_{t} = {self._b_load(globals_[c], f'bb{n}', f'kk{t}')}; }}")
        folded = lay.norm is not None and not lay.rounded_row
        if lay.norm is not None:
            squares = " + ".join(f"xa{t} * xa{t}" for t in range(steps))
            b.line(f"let sq = {squares};")
        if lay.rounded_row:  # the row's 1 / rms first: every product reads the rounded row
            total = f"dot(sq, {vt}(1.0))" if w > 1 else "sq"
            b.line(f"var ss = vec4<f32>({total}, 0.0, 0.0, 0.0);")
            self._workgroup_sum(b, "ss")
            b.line("let rstd = inverseSqrt(ss.x / f32(params.k) + params.eps);")
            for name, code in expr.f16_round_helper(vt).items():
                b.helper(name, code)
        for t in range(steps):
            normed = f"xa{t}"
            if lay.rounded_row:
                normed = f"{normed} * {vt}(rstd)"
            if lay.norm is not None and wl is not None:
                normed = f"{normed} * nw{t}"
            if lay.rounded_row:
                normed = expr.f16_rounded(normed, vt)
            b.line(f"let a{t} = {normed};")
        values = []
        for n in range(len(lanes)):
            acc = " + ".join(f"a{t} * b{n}_{t}" for t in range(steps))
            values.append(f"dot({acc}, {vt}(1.0))" if w > 1 else f"({acc})")
        if folded:
            values.append(f"dot(sq, {vt}(1.0))" if w > 1 else "sq")
        return values

    def _sums(self, b: WgslBuilder, values: list[str]) -> list[str]:
        """Each thread's values summed over the workgroup, four at a time; the names of the sums.
        With subgroups every pack is summed in one round (one barrier before and one after)."""
        names, packs = [], []
        for pack in range(0, len(values), 4):
            chunk = values[pack : pack + 4] + ["0.0"] * (4 - len(values[pack : pack + 4]))
            name = f"sum{pack // 4}"
            b.line(f"var {name} = vec4<f32>({', '.join(chunk)});")
            packs.append(name)
            names += [f"{name}.{'xyzw'[i]}" for i in range(min(4, len(values) - pack))]
        if not self.choice.param("subgroups", False):
            for name in packs:
                self._workgroup_sum(b, name)
            return names
        wg = self._red_stride()
        for name in packs:
            b.line(f"{name} = subgroupAdd({name});")
        stores = " ".join(f"red[{n * wg}u + lidx / sg_size] = {name};" for n, name in enumerate(packs))
        b.line(f"if (sg_lane == 0u) {{ {stores} }}")
        b.line("workgroupBarrier();")
        for n, name in enumerate(packs):
            b.line(f"{name} = red[{n * wg}u];")
        adds = " ".join(f"{name} += red[{n * wg}u + i];" for n, name in enumerate(packs))
        threads = self.choice.workgroup[0]
        b.line(f"for (var i = 1u; i < ({threads}u + sg_size - 1u) / sg_size; i++) {{ {adds} }}")
        b.line("workgroupBarrier();  // red is reused")
        return names

    def _red_stride(self) -> int:
        """Entries of `red` per pack with subgroups: one per subgroup, subgroups being 4 lanes at least."""
        return max(1, -(-self.choice.workgroup[0] // 4))

    def _packs(self) -> int:
        """The most vec4 packs a part's threads sum at once (the size of `red`, in workgroups)."""
        most = 1
        for p, part in enumerate(self.lay.parts):
            elements = self.per_wg[p] * (2 if part.pair else 1)
            values = len(part.cores) * elements + (1 if self.lay.norm is not None else 0)
            most = max(most, -(-values // 4))
        return most

    def _vec4(self, at: Callable[[str], str], k: str) -> str:
        """vec4<f32> of a loop leaf's values k .. k + 3 (k a multiple of 4), from `at(index)`: the WGSL
        of its KernelElement at an index in KernelElements (one value at an element index when 1)."""
        w = self.kernel_element()
        if w == 4:
            return f"vec4<f32>({at(f'({k}) / 4u')})"
        if w == 2:
            return f"vec4<f32>(vec2<f32>({at(f'({k}) / 2u')}), vec2<f32>({at(f'({k}) / 2u + 1u')}))"
        lanes = [f"f32({at(f'{k} + {t}u')})" for t in range(4)]
        return f"vec4<f32>({', '.join(lanes)})"

    def _lane_bases(
        self, b: WgslBuilder, part: Part, elements: list[str], lanes: list[tuple[int, int]]
    ) -> tuple[list[int], list[int]]:
        """Each lane's B row start (`bb<n>`: its first block, or its first KernelElement of a float B) and its
        accumulator (`acc<n>`); returns the group index of each of the part's matmuls and each lane's B operand."""
        lay, w = self.lay, self.kernel_element()
        globals_ = [lay.cores.index(c) for c in part.cores]
        leaves = [lay.b_leaves[globals_[c]] for c, _ in lanes]
        for n, (c, j) in enumerate(lanes):
            g, i = globals_[c], leaves[n]
            if self.operands[i].dtype.is_quantized:
                b.line(f"let bb{n} = {elements[j]} * params.q{i}_upr;  // its row's first unit")
            else:
                col = f"i32(params.b{g}_off) + i32({elements[j]}) * params.b{g}_sn"
                b.line(f"let bb{n} = {f'u32({col}) / {w}u' if w > 1 else col};")
            b.line(f"var acc{n} = 0.0;")
        return globals_, leaves

    def _block_loop(self, b: WgslBuilder, part: Part, elements: list[str], lanes: list[tuple[int, int]]) -> list[str]:
        """The k loop of the `blocks` variant: a thread per block of 32 values at a time; returns the
        values to sum (every lane's dot product, then the row's sum of squares when the norm folds)."""
        lay, w, wgx = self.lay, self.kernel_element(), self.choice.workgroup[0]
        ia, wl = lay.a_leaf, lay.w_leaf
        globals_, leaves = self._lane_bases(b, part, elements, lanes)

        def a_at(idx: str) -> str:
            return (
                f"in{ia}[params.a_off / {w}u + {idx}]"
                if w > 1
                else f"in{ia}[u32(i32(params.a_off) + i32({idx}) * params.a_sk)]"
            )

        if lay.rounded_row:
            self._row_rstd(b, a_at("kk"))
        folded = lay.norm is not None and not lay.rounded_row
        if folded:
            b.line("var sq = vec4<f32>(0.0);")
        b.line(f"for (var kb = lidx; kb < params.kb; kb += {wgx}u) {{")
        b.line("  let k0 = kb * 32u;")
        for n, i in enumerate(leaves):  # the quants first: the loads in flight together
            if self.operands[i].dtype in (DType.q4_0, DType.q4_k, DType.q6_k):  # one unit per 32 values
                b.line(f"  let q{n} = in{i}[bb{n} + kb];")
                for load in quant_format(self.operands[i].dtype).loads(f"in{i}", f"q{n}", f"bb{n} + kb"):
                    b.line(f"  {load}")  # q6_k's high bits
            elif self.operands[i].dtype is DType.q8_0:
                b.line(f"  let q{n}_0 = in{i}[bb{n} + 2u * kb];")
                b.line(f"  let q{n}_1 = in{i}[bb{n} + 2u * kb + 1u];")
        for t in range(8):
            b.line(f"  let xa{t} = {self._vec4(a_at, f'k0 + {4 * t}u')};")
            if folded:
                b.line(f"  sq = fma(xa{t}, xa{t}, sq);")
            normed = f"xa{t} * vec4<f32>(rstd)" if lay.rounded_row else f"xa{t}"
            if lay.norm and wl is not None:
                nw = self._vec4(
                    lambda idx: f"in{wl}[params.nw_off / {w}u + {idx}]" if w > 1 else f"in{wl}[params.nw_off + {idx}]",
                    f"k0 + {4 * t}u",
                )
                normed = f"{normed} * {nw}"
            if lay.rounded_row:  # the norm kernel's value, rounded as its store rounds it
                for name, code in expr.f16_round_helper("vec4<f32>").items():
                    b.helper(name, code)
                normed = expr.f16_rounded(normed, "vec4<f32>")
            b.line(f"  let a{t} = {normed};")
        if any(self.operands[i].dtype is DType.q4_k for i in leaves):  # for q4_k's offsets: offset * sum(a)
            b.line(f"  let asum = dot({' + '.join(f'a{t}' for t in range(8))}, vec4<f32>(1.0));")
        for n, i in enumerate(leaves):
            dtype = self.operands[i].dtype
            if dtype.is_quantized:
                fmt = quant_format(dtype)
                units = [f"q{n}_0", f"q{n}_1"] if dtype is DType.q8_0 else [f"q{n}"]
                values = [v for u in units for v, _ in fmt.lanes(u)]
                blk = f"bb{n} / {fmt.units_per_block}u + kb" if fmt.units_per_block > 1 else f"bb{n} + kb"
                terms = " + ".join(f"dot({v}, a{t})" for t, v in enumerate(values))
                if fmt.half_scales:  # q6_k: values 0..15 (a0..a3) and 16..31 (a4..a7) scaled apart
                    lo, hi = (
                        " + ".join(f"dot({v}, a{t})" for t, v in enumerate(values) if (t < 4) == h) for h in (1, 0)
                    )
                    b.line(f"  let sc{n} = in{i}_scale({blk});")
                    b.line(f"  acc{n} = fma(sc{n}.x, {lo}, fma(sc{n}.y, {hi}, acc{n}));")
                elif fmt.has_offset:  # scale * dot(q, a) - offset * sum(a)
                    b.line(f"  let sc{n} = in{i}_scale({blk});")
                    b.line(f"  acc{n} = fma(sc{n}.x, {terms}, fma(-sc{n}.y, asum, acc{n}));")
                else:
                    b.line(f"  acc{n} = fma(in{i}_scale({blk}), {terms}, acc{n});")
            else:
                g = globals_[lanes[n][0]]

                def b_at(idx: str, n: int = n, i: int = i, g: int = g) -> str:
                    return f"in{i}[bb{n} + {idx}]" if w > 1 else f"in{i}[u32(bb{n} + i32({idx}) * params.b{g}_sk)]"

                terms = " + ".join(f"dot({self._vec4(b_at, f'k0 + {4 * t}u')}, a{t})" for t in range(8))
                b.line(f"  acc{n} += {terms};")
        b.line("}")
        return [f"acc{n}" for n in range(len(lanes))] + (["dot(sq, vec4<f32>(1.0))"] if folded else [])

    # --- the staged variant ------------------------------------------------------------
    def _a_at(self, idx: str) -> str:
        """WGSL of the row's KernelElement at index idx (in KernelElements)."""
        w, ia = self.kernel_element(), self.lay.a_leaf
        return (
            f"in{ia}[params.a_off / {w}u + {idx}]"
            if w > 1
            else f"in{ia}[u32(i32(params.a_off) + i32({idx}) * params.a_sk)]"
        )

    def _nw_at(self, idx: str) -> str:
        w, wl = self.kernel_element(), self.lay.w_leaf
        return f"in{wl}[params.nw_off / {w}u + {idx}]" if w > 1 else f"in{wl}[params.nw_off + {idx}]"

    def _stage_row(self, b: WgslBuilder) -> None:
        """Every workgroup, before its part: the row (times the norm weight) into `row`, read once from memory
        by all threads, and the norm's sum of squares `ss` summed once. A float16 norm then scales the row by
        1 / rms and rounds it to float16 in place, as the unfused graph stores it."""
        lay, wgx = self.lay, self.choice.workgroup[0]
        folded = lay.norm is not None and not lay.rounded_row
        if lay.norm is not None:
            b.line("var sq = vec4<f32>(0.0);")
        b.line(f"for (var i = lidx; i < params.kb * 8u; i += {wgx}u) {{")
        b.line(f"  let xa = {self._vec4(self._a_at, '4u * i')};")
        value = "xa"
        if lay.norm is not None:
            b.line("  sq = fma(xa, xa, sq);")
            if folded and lay.w_leaf is not None:
                value = f"xa * {self._vec4(self._nw_at, '4u * i')}"
        # vec4 t of block kb at kb * 8 + (t + kb) % 8: a group's threads (consecutive blocks, the same t) then
        # read 8 different 16-byte bank groups at once, not one (the blocks are 128 bytes apart)
        b.line(f"  row[(i & ~7u) | ((i + (i >> 3u)) & 7u)] = {value};")
        b.line("}")
        if lay.norm is None:
            b.line("workgroupBarrier();  // the row staged")
            return
        b.line("var ss = vec4<f32>(dot(sq, vec4<f32>(1.0)), 0.0, 0.0, 0.0);")
        self._workgroup_sum(b, "ss")  # its barriers also publish the row
        if not lay.rounded_row:
            return
        b.line("let rstd = inverseSqrt(ss.x / f32(params.k) + params.eps);")
        normed = "row[i] * vec4<f32>(rstd)"
        if lay.w_leaf is not None:
            normed = f"{normed} * {self._vec4(self._nw_at, '4u * i')}"
        for name, code in expr.f16_round_helper("vec4<f32>").items():
            b.helper(name, code)
        b.line(f"for (var i = lidx; i < params.kb * 8u; i += {wgx}u) {{")  # each thread its own elements
        b.line("  let at = (i & ~7u) | ((i + (i >> 3u)) & 7u);")
        b.line(f"  row[at] = {expr.f16_rounded(normed.replace('row[i]', 'row[at]'), 'vec4<f32>')};")
        b.line("}")
        b.line("workgroupBarrier();  // the normed row staged")

    def _unit_packs(self) -> int:
        """vec4 packs of a staged unit's dot products (the most over the parts)."""
        return max(-(-len(part.cores) * (2 if part.pair else 1) // 4) for part in self.lay.parts)

    def _staged_part(self, b: WgslBuilder, p: int, part: Part, first: str) -> None:
        """A part in the staged variant: `group` threads a unit (a column, or a rope pair), over its blocks;
        the unit's sums by shuffles (or through `red`); its epilogue by the group's first thread."""
        group, wgx = self.group, self.choice.workgroup[0]
        b.line(f"let u = (wg - {first}) * {wgx // group}u + lidx / {group}u;")
        b.line(f"let sub = lidx % {group}u;")
        unit = f"min(u, params.n{p} - 1u)"  # past the last unit: its column again, nothing stored
        if part.pair is None:
            b.line(f"let e0 = {unit};")
            elements = ["e0"]
        else:
            elements = self._pair(b, p, part, unit, "e0", "e1")
        lanes = [(c, j) for c in range(len(part.cores)) for j in range(len(elements))]
        self._pre = WgslBuilder() if HOIST_EPILOGUE_LOADS else None  # a unit's own loads: before the loop
        loop, inner = WgslBuilder(), WgslBuilder()
        sums = self._unit_sums(loop, inner, self._staged_loop(loop, part, elements, lanes))
        folded = self.lay.norm is not None and not self.lay.rounded_row
        self._epilogue(inner, p, part, elements, lanes, sums + (["ss.x"] if folded else []))
        for piece in ([self._pre] if self._pre is not None else []) + [loop]:
            for name, code in piece.helpers.items():
                b.helper(name, code)
            for line in piece.body:
                b.line(line)
        self._pre = None
        b.line(f"if (sub == 0u && u < params.n{p}) {{")
        for name, code in inner.helpers.items():
            b.helper(name, code)
        for line in inner.body:
            b.line("  " + line)
        b.line("}")

    def _staged_loop(self, b: WgslBuilder, part: Part, elements: list[str], lanes: list[tuple[int, int]]) -> list[str]:
        """The staged k loop: thread `sub` of the unit's group takes blocks sub, sub + group, ..., `unroll` of them
        a step with every load first (the last step's blocks past the row clamped, their products dropped);
        the row's blocks come from `row`. Returns each lane's partial dot product."""
        w = self.kernel_element()
        group, unroll = self.group, self.choice.param("unroll", 1)
        globals_, leaves = self._lane_bases(b, part, elements, lanes)
        b.line(f"for (var kb0 = sub; kb0 < params.kb; kb0 += {group * unroll}u) {{")
        for s in range(unroll):
            if s:
                b.line(f"  let kb{s} = min(kb0 + {s * group}u, params.kb - 1u);")
            for n, i in enumerate(leaves):  # the quants and scales first: the loads in flight together
                dtype = self.operands[i].dtype
                if not dtype.is_quantized:
                    continue
                fmt = quant_format(dtype)
                if dtype in (DType.q4_0, DType.q4_k, DType.q6_k):
                    b.line(f"  let q{n}_{s} = in{i}[bb{n} + kb{s}];")
                    for load in fmt.loads(f"in{i}", f"q{n}_{s}", f"bb{n} + kb{s}"):
                        b.line(f"  {load}")  # q6_k's high bits
                else:
                    b.line(f"  let q{n}_{s}_0 = in{i}[bb{n} + 2u * kb{s}];")
                    b.line(f"  let q{n}_{s}_1 = in{i}[bb{n} + 2u * kb{s} + 1u];")
                blk = f"bb{n} / {fmt.units_per_block}u + kb{s}" if fmt.units_per_block > 1 else f"bb{n} + kb{s}"
                b.line(f"  let sc{n}_{s} = in{i}_scale({blk});")
        for s in range(unroll):
            for t in range(8):
                b.line(f"  let a{s}_{t} = row[kb{s} * 8u + (({t}u + kb{s}) & 7u)];  // swizzled (_stage_row)")
            if any(self.operands[i].dtype is DType.q4_k for i in leaves):  # for q4_k's offsets: offset * sum(a)
                b.line(f"  let asum{s} = dot({' + '.join(f'a{s}_{t}' for t in range(8))}, vec4<f32>(1.0));")
            for n, i in enumerate(leaves):
                dtype = self.operands[i].dtype
                if dtype.is_quantized:
                    units = [f"q{n}_{s}_0", f"q{n}_{s}_1"] if dtype is DType.q8_0 else [f"q{n}_{s}"]
                    values = [v for u in units for v, _ in quant_format(dtype).lanes(u)]
                    terms = " + ".join(f"dot({v}, a{s}_{t})" for t, v in enumerate(values))
                    if dtype is DType.q6_k:  # values 0..15 (a0..a3) and 16..31 (a4..a7) scaled apart
                        lo, hi = (
                            " + ".join(f"dot({v}, a{s}_{t})" for t, v in enumerate(values) if (t < 4) == h)
                            for h in (1, 0)
                        )
                        value = f"fma(sc{n}_{s}.x, {lo}, fma(sc{n}_{s}.y, {hi}, acc{n}))"
                    elif dtype is DType.q4_k:  # scale * dot(q, a) - offset * sum(a)
                        value = f"fma(sc{n}_{s}.x, {terms}, fma(-sc{n}_{s}.y, asum{s}, acc{n}))"
                    else:
                        value = f"fma(sc{n}_{s}, {terms}, acc{n})"
                else:
                    g = globals_[lanes[n][0]]

                    def b_at(idx: str, n: int = n, i: int = i, g: int = g) -> str:
                        return f"in{i}[bb{n} + {idx}]" if w > 1 else f"in{i}[u32(bb{n} + i32({idx}) * params.b{g}_sk)]"

                    k0 = f"kb{s} * 32u"
                    terms = " + ".join(f"dot({self._vec4(b_at, f'{k0} + {4 * t}u')}, a{s}_{t})" for t in range(8))
                    value = f"acc{n} + {terms}"
                # a clamped block's products dropped by select (a product times 0 would still make NaN of inf)
                b.line(f"  acc{n} = {f'select(acc{n}, {value}, kb0 + {s * group}u < params.kb)' if s else value};")
        b.line("}")
        return [f"acc{n}" for n in range(len(lanes))]

    def _unit_sums(self, b: WgslBuilder, inner: WgslBuilder, values: list[str]) -> list[str]:
        """Each value summed over the unit's group of threads, four at a time: by subgroupShuffleXor (every
        thread of the group gets the sums), or through `red` (the group's first thread reads them, in `inner`)."""
        group, wgx = self.group, self.choice.workgroup[0]
        names, packs = [], []
        for pack in range(0, len(values), 4):
            chunk = values[pack : pack + 4] + ["0.0"] * (4 - len(values[pack : pack + 4]))
            name = f"us{pack // 4}"
            b.line(f"var {name} = vec4<f32>({', '.join(chunk)});")
            packs.append(name)
            names += [f"{name}.{'xyzw'[i]}" for i in range(min(4, len(values) - pack))]
        if group == 1:
            return names
        if self.shuffle:
            m = group // 2
            while m:
                for name in packs:
                    b.line(f"{name} += subgroupShuffleXor({name}, {m}u);")
                m //= 2
            return names
        for n, name in enumerate(packs):
            b.line(f"red[{n * wgx}u + lidx] = {name};")
        b.line("workgroupBarrier();")
        adds = " ".join(f"{name} += red[{n * wgx}u + lidx + i];" for n, name in enumerate(packs))
        inner.line(f"for (var i = 1u; i < {group}u; i++) {{ {adds} }}")
        return names

    def _row_rstd(self, b: WgslBuilder, raw: str) -> None:
        """`rstd`, the norm's 1 / rms of the row, from a pass over it before the k loop (as the norm kernel)."""
        vt, wgx = f32v(self.kernel_element()), self.choice.workgroup[0]
        b.line(f"var sq = {vt}(0.0);")
        b.line(f"for (var kk = lidx; kk < params.kw; kk += {wgx}u) {{")
        b.line(f"  let xa = {vt}({raw});")
        b.line("  sq = fma(xa, xa, sq);")
        b.line("}")
        total = f"dot(sq, {vt}(1.0))" if self.kernel_element() > 1 else "sq"
        b.line(f"var ss = vec4<f32>({total}, 0.0, 0.0, 0.0);")
        self._workgroup_sum(b, "ss")
        b.line("let rstd = inverseSqrt(ss.x / f32(params.k) + params.eps);")

    def _workgroup_sum(self, b: WgslBuilder, var: str) -> None:
        wg = self.choice.workgroup[0]
        if self.choice.param("subgroups", False):
            b.line(f"{var} = subgroupAdd({var});")
            b.line(f"if (sg_lane == 0u) {{ red[lidx / sg_size] = {var}; }}")
            b.line("workgroupBarrier();")
            b.line(f"{var} = red[0];")
            b.line(f"for (var i = 1u; i < ({wg}u + sg_size - 1u) / sg_size; i++) {{ {var} += red[i]; }}")
        else:
            b.line(f"red[lidx] = {var};")
            b.line("workgroupBarrier();")
            b.line(f"for (var half = {wg // 2}u; half > 0u; half = half >> 1u) {{")
            b.line("  if (lidx < half) { red[lidx] += red[lidx + half]; }")
            b.line("  workgroupBarrier();")
            b.line("}")
            b.line(f"{var} = red[0];")
        b.line("workgroupBarrier();  // red is reused")

    # --- the epilogue (thread 0) --------------------------------------------------------
    def _epilogue(
        self, b: WgslBuilder, p: int, part: Part, elements: list[str], lanes: list[tuple[int, int]], sums: list[str]
    ) -> None:
        values: dict[tuple[int, int], tuple[str, DType]] = {}
        scaled = self.lay.norm is not None and not self.lay.rounded_row  # else rstd scaled the row itself
        if scaled:
            b.line(f"let rstd = inverseSqrt({sums[-1]} / f32(params.k) + params.eps);")
        for n, (c, j) in enumerate(lanes):
            core = part.cores[c]
            acc = f"{sums[n]} * rstd" if scaled else sums[n]
            name = f"c{n}"
            b.line(f"let {name} = {self._rounded(b, acc, core.dtype)};")
            values[(core.id, j)] = (name, core.dtype)
        for t in part.terms:
            for j, e in enumerate(elements):
                self._term(b, t, j, e, elements, values)
        root = self.node.arg.root
        if any(t.id == root.id for t in part.terms) or any(c.id == root.id for c in part.cores):
            for j, e in enumerate(elements):
                value, _ = values[(root.id, j)]
                b.line(f"out[{e}] = {store_cast(f'{vtype(root.dtype, 1)}({value})', root.dtype, 1)};")

    def _rounded(self, b: WgslBuilder, f32_value: str, dtype: DType) -> str:
        """An f32 value as a `dtype` value, float16 rounded as a store would (expr.f16_rounded)."""
        if dtype is DType.float16:
            for name, code in expr.f16_round_helper("f32").items():
                b.helper(name, code)
            return f"f16({expr.f16_rounded(f'f32({f32_value})', 'f32')})"
        return f"{vtype(dtype, 1)}({f32_value})"

    def _coords(self, b: WgslBuilder, t: Node, j: int, e: str) -> list[str]:
        b = self._pre or b  # hoisted before the k loop where the part allows
        shape = t.shape
        prefix = f"t{t.id}_{j}_c"
        for line in index_to_coords(e, [f"t{t.id}_n{d}" for d in range(len(shape))], prefix):
            b.line(line)
        return [f"{prefix}{d}" for d in range(len(shape))]

    def _leaf(self, b: WgslBuilder, s: int, coords: list[str], tag: str) -> tuple[str, DType]:
        b = self._pre or b  # hoisted before the k loop where the part allows
        i = self.node.arg.leaf_index(s)
        terms = [f"i32(params.l{i}_off)"] + [f"i32({c}) * params.l{i}_s{d}" for d, c in enumerate(coords)]
        name = f"lv{i}_{tag}"
        dt = self.operands[i].dtype
        address = " + ".join(terms)
        b.line(f"let {name} = {load_cast(f'in{i}[u32({address})]', dt, 1)};")
        return name, dt

    def _term(
        self,
        b: WgslBuilder,
        t: Node,
        j: int,
        e: str,
        elements: list[str],
        values: dict[tuple[int, int], tuple[str, DType]],
    ) -> None:
        arg = self.node.arg
        if t.op is Op.VIEW:
            values[(t.id, j)] = values[(t.srcs[0], j)]
            return
        if t.op is Op.ROPE:
            self._rope(b, t, j, e, values)
            return
        write = next((w for w in self.writes if w.term.id == t.id), None)
        if write is not None:
            side_writes.by_thread0(b, self, write, j, e, values[(write.value, j)][0])
            return
        coords: list[str] | None = None
        args, dtypes = [], []
        for s in t.srcs:
            if arg.is_term(s):
                name, dt = values[(s, j)]
            else:
                coords = coords or self._coords(b, t, j, e)
                name, dt = self._leaf(b, s, coords, f"{t.id}_{j}_{len(args)}")
            args.append(name)
            dtypes.append(dt)
        name = f"v{t.id}_{j}"
        b.line(f"let {name} = {FusedCode._expression(b, t, args, dtypes, 1)};  // %{t.id} {t.op.value}")
        values[(t.id, j)] = (name, t.dtype)

    def _rope(self, b: WgslBuilder, t: Node, j: int, e: str, values: dict[tuple[int, int], tuple[str, DType]]) -> None:
        """Element j of the pair: x[j] cos - x[other] sin (the first), x[j] cos + x[other] sin (the second)."""
        coords = self._coords(b, t, j, e)
        last = len(coords) - 1
        angle = f"{coords[last]} / 2u" if t.arg.interleaved else f"{coords[last]} % (params.t{t.id}_n{last} / 2u)"
        (self._pre or b).line(f"let ang{t.id}_{j} = {angle};")
        at = coords[:last] + [f"ang{t.id}_{j}"]
        cos, _ = self._leaf(b, t.srcs[1], at, f"cos{t.id}_{j}")
        sin, _ = self._leaf(b, t.srcs[2], at, f"sin{t.id}_{j}")
        mine, _ = values[(t.srcs[0], j)]
        other, _ = values[(t.srcs[0], 1 - j)]
        sign = "-" if j == 0 else "+"
        y = f"f32({mine}) * f32({cos}) {sign} f32({other}) * f32({sin})"
        name = f"v{t.id}_{j}"
        b.line(f"let {name} = {self._rounded(b, y, t.dtype)};  // %{t.id} rope")
        values[(t.id, j)] = (name, t.dtype)
