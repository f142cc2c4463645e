"""attention_decode: one query row per head over a long key/value cache (flash-decoding).

It runs ATTENTION nodes with one query row (a decode step: every head in one dispatch)
and ATTENTION_SPLITS nodes (passes.split_attention cut the keys into `splits` ranges;
attention_combine adds the ranges up). A workgroup owns one (batch, key range) and
`heads_per_wg` query heads that share one kv head: all `heads_per_kv` of them (grouped-query
attention), so every key and value row is read from memory once, or fewer (a divisor), so that
more workgroups share a short cache (the kv head's rows are then read once per workgroup, the
repeats mostly from L2).

The workgroup's threads are `rows` of `lanes` threads (lanes * rows = threads). A row
takes keys start + row, + rows, + 2 * rows, ... `unroll` of them a step: each lane loads
its slices of the step's keys and values (KernelElements lane, lane + lanes, ...: the
lanes of a row read neighbouring memory), every load of the step issued before any
arithmetic. The lanes' partial dot products with each query head (its slices loaded
beside the keys: no barrier before the loop) are summed over the row by subgroup shuffles where the adapter's
subgroups hold a row (`lane_shuffle`: "always" where its smallest subgroup does, "runtime"
where the workgroup finds its subgroups wide enough as it starts, e.g. an adapter whose
smallest subgroup wgpu reports as 4), else through workgroup memory; then each row
keeps, per head, a running max, sum of exp and value sum (online softmax), so keys and
values stream together and nothing waits on a barrier inside the loop when shuffles
sum the lanes. At the end the rows' (max, sum, values) merge in a tree in workgroup
memory (`merge_heads` heads at a time), and row 0 stores the range's output: the
normalized row, or (ATTENTION_SPLITS) the value sums with the max and sum of exp.
The attended length `s` lives in the uniform, so a new length needs no new shader; a
range is ceil(s / splits) keys. Math in f32; float16 caches are widened as they load.
"""

from __future__ import annotations

from backend_wgpu.element import WIDTHS, vector_readable
from backend_wgpu.kernel import Kernel, Meta, Workload
from backend_wgpu.kernels.blocks import infinity
from backend_wgpu.kernels.expr import isnan
from backend_wgpu.wgsl import WgslBuilder, f32v, vtype
from ir.graph import Graph
from ir.node import Node
from ir.ops import AttentionArg, Op
from ir.view import View


def pow2_at_least(n: int) -> int:
    return 1 << max(0, (max(n, 1) - 1).bit_length())


def attention_arg(node: Node) -> AttentionArg:
    return node.arg.attention if node.op is Op.ATTENTION_SPLITS else node.arg


def lanes_for(elements: int, slices: int = 4) -> int:
    """Lanes per key row for a head of `elements` KernelElements: at least four (a row fits the
    smallest subgroup wgpu reports), more where a lane would hold more than `slices` of them (its
    slices of a query head, a key, a value and its output stay few registers)."""
    return max(1, min(pow2_at_least(elements), max(4, pow2_at_least(-(-elements // slices)))))


def merge_heads_for(g: int, rows: int, lanes: int, per_v: int, w: int, storage: int) -> int:
    """Heads merged per round of the rows' tree: as many as half the rows' values fit in `storage` bytes."""
    per_head = (rows // 2) * (lanes * per_v * 4 * w + 8 + 4)  # values, (max, sum) and the NaN flag
    return max(1, min(g, storage // max(per_head, 1)))


class DecodeAttentionKernel(Kernel):
    name = "attention_decode"

    @classmethod
    def widest_element(cls, node: Node, views: list[View]) -> int:
        q, k, v = views[:3]
        return next(w for w in WIDTHS if all(vector_readable(x, w) and x.strides[-1] == 1 for x in (q, k, v)) or w == 1)

    @classmethod
    def reason(cls, graph: Graph, node: Node) -> str:
        c = node.kernel
        g, lanes, unroll = c.param("heads_per_wg", c.param("heads_per_kv")), c.param("lanes"), c.param("unroll")
        shared = c.param("heads_per_kv")
        rows = c.workgroup[0] // lanes
        splits = node.arg.splits if node.op is Op.ATTENTION_SPLITS else 1
        ranges = f", keys in {splits} ranges" if splits > 1 else ""
        sums = {"always": "subgroup shuffles", "runtime": "subgroup shuffles where the subgroups hold a row"}.get(
            c.param("lane_shuffle"), "workgroup memory"
        )
        who = (
            f"a workgroup per kv head{ranges}, its {g} query heads together (K and V read once)"
            if g == shared
            else f"a workgroup per {g} of the {shared} query heads of a kv head{ranges} (K and V read {shared // g}x)"
        )
        return (
            f"one query row: {who}; "
            f"{rows} rows of {lanes} lanes, {unroll} keys per row a step (lanes summed by {sums}), online softmax"
        )

    # --- shapes ---------------------------------------------------------------------
    @property
    def g(self) -> int:
        """Query heads per workgroup."""
        return self.choice.param("heads_per_wg", self.group)

    @property
    def group(self) -> int:
        """Query heads per kv head."""
        return self.choice.param("heads_per_kv")

    @property
    def splits(self) -> int:
        return self.node.arg.splits if self.node.op is Op.ATTENTION_SPLITS else 1

    @property
    def lanes(self) -> int:
        return self.choice.param("lanes")

    @property
    def rows(self) -> int:
        return self.choice.workgroup[0] // self.lanes

    @property
    def unroll(self) -> int:
        """Keys each row loads per step (their loads in flight together)."""
        return self.choice.param("unroll", 1)

    def _ew(self, i: int) -> int:
        """KernelElements of a row of operand i (q, k: E; v: Ev)."""
        return self.operands[i].view.shape[3] // self.kernel_element()

    def _per(self, i: int) -> int:
        """KernelElements of a row of operand i each lane holds."""
        return -(-self._ew(i) // self.lanes)

    def metadata(self) -> Meta:
        q, k, v = (self.operands[i].view for i in range(3))
        arg = attention_arg(self.node)
        meta: Meta = [
            ("batch", "u32", q.shape[0]),
            ("heads", "u32", q.shape[1]),
            ("hkv", "u32", k.shape[1]),
            ("s", "u32", k.shape[2] if arg.length is None else arg.length),
            ("e", "u32", q.shape[3]),
            ("ev", "u32", v.shape[3]),
            ("splits", "u32", self.splits),
            ("scale", "f32", arg.scale),
        ]
        for name, view in (("q", q), ("k", k), ("v", v)):
            meta += [(f"{name}_off", "u32", view.offset)]
            meta += [(f"{name}_s{d}", "i32", s) for d, s in enumerate(view.strides)]
        if arg.mask != "none":
            m = self.operands[3].view
            meta += [("m_off", "u32", m.offset)] + [(f"m_s{d}", "i32", s) for d, s in enumerate(m.strides)]
        return meta

    def loop_iterations(self) -> int:
        """The key loop's steps over the longest range, and the query's load loop."""
        range_len = -(-self.operands[1].view.shape[2] // self.splits)
        steps = -(-range_len // (self.rows * self.unroll))
        query = -(-self.g * self.lanes * self._per(0) // self.choice.workgroup[0])
        return steps + 1 + query + 1  # each loop's exit test too

    def calculate_dispatch(self) -> Workload:
        q = self.operands[0].view
        return Workload.for_workgroups(
            q.shape[0] * (q.shape[1] // self.g) * self.splits, self.choice.workgroup, self.max_workgroups
        )

    def operand_type(self, i: int) -> str:
        w = self.kernel_element() if i < 3 else 1
        return vtype(self.operands[i].dtype, w, storage=True)

    def output_type(self) -> str:
        if self.node.op is Op.ATTENTION_SPLITS:
            return "f32"
        return vtype(self.node.dtype, self.kernel_element(), storage=True)

    # --- code -----------------------------------------------------------------------
    def _addr(self, name: str, head: str, key: str, lane: str) -> str:
        """Element (or KernelElement) index of operand `name` at (bt, head, key, lane)."""
        w = self.kernel_element()
        parts = [f"i32(params.{name}_off)", f"i32(bt) * params.{name}_s0", f"i32({head}) * params.{name}_s1"]
        if key != "0u":
            parts.append(f"i32({key}) * params.{name}_s2")
        if w == 1:
            return f"u32({' + '.join(parts)} + i32({lane}) * params.{name}_s3)"
        return f"u32({' + '.join(parts)}) / {w}u + {lane}"

    def _slice_ok(self, i: int, slot: int) -> str | None:
        """WGSL: is this lane's slice `slot` of operand i inside the row (None: always)."""
        if self._ew(i) % self.lanes == 0:
            return None
        return f"lane + {slot * self.lanes}u < {self._ew(i)}u"

    def render(self, b: WgslBuilder) -> None:
        arg = attention_arg(self.node)
        g, w, lanes, rows, unroll = self.g, self.kernel_element(), self.lanes, self.rows, self.unroll
        threads = self.choice.workgroup[0]
        per_k, per_v = self._per(0), self._per(2)
        vt = f32v(w)
        shuffle = self.choice.param("lane_shuffle", False) or ""
        if lanes > 1 and shuffle != "always":
            b.workgroup_var(f"part: array<f32, {threads * g * unroll}>")
        inf = infinity(b)
        if shuffle == "runtime":  # do the subgroups hold a row? one answer for the workgroup (a uniform value)
            b.builtin("@builtin(subgroup_size) sg_size: u32")
            b.workgroup_var("sg_least: atomic<u32>")
            b.workgroup_var("sg_wide: u32")
            b.line("if (lidx == 0u) { atomicStore(&sg_least, 0xffffffffu); }")
            b.line("workgroupBarrier();")
            b.line("atomicMin(&sg_least, sg_size);")
            b.line("workgroupBarrier();")
            b.line(f"if (lidx == 0u) {{ sg_wide = select(0u, 1u, atomicLoad(&sg_least) >= {lanes}u); }}")
            b.line("let wide = workgroupUniformLoad(&sg_wide) == 1u;")
        b.line("let split = wg % params.splits;")
        b.line(f"let hg = (wg / params.splits) % (params.heads / {g}u);  // which {g} query heads")
        b.line(f"let bt = wg / (params.splits * (params.heads / {g}u));")
        b.line(f"let h0 = hg * {g}u;  // the first of them")
        b.line(f"let hk = h0 / {self.group}u;  // their kv head")
        b.line("if (bt >= params.batch) { return; }")
        b.line("let range_len = (params.s + params.splits - 1u) / params.splits;")
        b.line("let start = min(split * range_len, params.s);")
        b.line("let n = min(start + range_len, params.s) - start;")
        b.line(f"let lane = lidx % {lanes}u;")
        b.line(f"let row = lidx / {lanes}u;")
        b.line("var nan_bits = 0x7fc00000u;")
        b.line("let nan = bitcast<f32>(nan_bits);")
        for h in range(g):
            b.line(f"var m{h} = -{inf};")
            b.line(f"var l{h} = 0.0;")
            # a NaN score makes the head's output NaN (as the reference's softmax): kept as a flag,
            # tested on the bits, because drivers may assume no NaN and lose it in max/exp/sums
            b.line(f"var bad{h} = false;")
            for i in range(per_v):
                b.line(f"var o{h}_{i} = {vt}(0.0);")
        b.line(f"for (var first = 0u; first < n; first += {rows * unroll}u) {{")
        self._step(b, arg, inf, shuffle, per_k, per_v, "  ")
        b.line("}")
        self._merge_rows(b, inf, per_v)
        b.line("if (row == 0u) {")
        for h in range(g):
            self._store(b, h, per_v, "  ")
        b.line("}")

    def _step(
        self, b: WgslBuilder, arg: AttentionArg, inf: str, shuffle: str, per_k: int, per_v: int, ind: str
    ) -> None:
        """One step of the key loop: `unroll` keys per row, loaded, scored and folded into the running sums."""
        g, w, lanes, rows, unroll = self.g, self.kernel_element(), self.lanes, self.rows, self.unroll
        vt = f32v(w)
        for u in range(unroll):
            b.line(f"{ind}let j{u} = first + {u * rows}u + row;")
            b.line(f"{ind}let ok{u} = j{u} < n;")
        for name, operand, per in (("k", 1, per_k), ("v", 2, per_v)):  # every load of the step first
            for u in range(unroll):
                for i in range(per):
                    cond = " && ".join(c for c in (f"ok{u}", self._slice_ok(operand, i)) if c)
                    at = self._addr(name, "hk", f"start + j{u}", f"lane + {i * lanes}u")
                    b.line(f"{ind}var {name}{u}_{i} = {vt}(0.0);")
                    b.line(f"{ind}if ({cond}) {{ {name}{u}_{i} = {vt}(in{operand}[{at}]); }}")
        if arg.mask != "none":  # the mask's values load with the keys, not after the lane sums
            for u in range(unroll):
                for h in range(g):
                    at = self._mask_at(f"h0 + {h}u", f"start + j{u}")
                    if arg.mask == "bool":
                        b.line(f"{ind}var mk{h}_{u} = 1u;")
                    else:
                        b.line(f"{ind}var mk{h}_{u} = 0.0;")
                    b.line(f"{ind}if (ok{u}) {{ mk{h}_{u} = {at if arg.mask == 'bool' else f'f32({at})'}; }}")
        # the lane's slices of the query heads: loop-invariant loads beside the step's (no barrier, nothing kept)
        for h in range(g):
            for i in range(per_k):
                ok = self._slice_ok(0, i)
                at = self._addr("q", f"h0 + {h}u", "0u", f"lane + {i * lanes}u")
                b.line(f"{ind}var q{h}_{i} = {vt}(0.0);")
                b.line(f"{ind}{f'if ({ok}) {{ ' if ok else '{ '}q{h}_{i} = {vt}(in0[{at}]); }}")
        names = []
        for u in range(unroll):
            for h in range(g):
                terms = [f"dot(q{h}_{i}, k{u}_{i})" if w > 1 else f"q{h}_{i} * k{u}_{i}" for i in range(per_k)]
                b.line(f"{ind}var d{h}_{u} = ({' + '.join(terms)}) * params.scale;")
                names.append((h, u))
        self._lane_sum(b, names, shuffle, ind)
        for u in range(unroll):
            for h in range(g):
                score = f"d{h}_{u} + mk{h}_{u}" if arg.mask == "add" else f"d{h}_{u}"
                keep = f"ok{u} && mk{h}_{u} != 0u" if arg.mask == "bool" else f"ok{u}"
                b.line(f"{ind}let s{h}_{u} = select(-{inf}, {score}, {keep});")
                b.line(f"{ind}bad{h} = bad{h} || {isnan(f's{h}_{u}', 'f32')};")
        for h in range(g):
            top = f"m{h}"
            for u in range(unroll):
                top = f"max({top}, s{h}_{u})"
            b.line(f"{ind}let mn{h} = {top};")
            # nothing seen yet (all -inf): keep the zeros, rather than exp(-inf + inf) = NaN
            b.line(f"{ind}let none{h} = mn{h} == -{inf};")
            b.line(f"{ind}let c{h} = select(exp(m{h} - mn{h}), 1.0, none{h});")
            for u in range(unroll):
                b.line(f"{ind}let p{h}_{u} = select(exp(s{h}_{u} - mn{h}), 0.0, none{h});")
            b.line(f"{ind}l{h} = l{h} * c{h} + {' + '.join(f'p{h}_{u}' for u in range(unroll))};")
            for i in range(per_v):
                acc = f"o{h}_{i} * {vt}(c{h})"
                for u in range(unroll):
                    acc = f"fma({vt}(p{h}_{u}), v{u}_{i}, {acc})"
                b.line(f"{ind}o{h}_{i} = {acc};")
            b.line(f"{ind}m{h} = mn{h};")

    def _lane_sum(self, b: WgslBuilder, names: list[tuple[int, int]], shuffle: str, ind: str) -> None:
        """Sum each d{h}_{u} over the row's lanes; every lane of the row gets the sums."""
        lanes = self.lanes
        if lanes == 1:
            return
        if shuffle:
            if shuffle == "runtime":
                b.line(f"{ind}if (wide) {{")
            inner = ind + ("  " if shuffle == "runtime" else "")
            for h, u in names:
                m = lanes // 2
                while m:
                    b.line(f"{inner}d{h}_{u} += subgroupShuffleXor(d{h}_{u}, {m}u);")
                    m //= 2
            if shuffle == "always":
                return
            b.line(f"{ind}}} else {{")
            self._lane_sum_memory(b, names, ind + "  ")
            b.line(f"{ind}}}")
            return
        self._lane_sum_memory(b, names, ind)

    def _lane_sum_memory(self, b: WgslBuilder, names: list[tuple[int, int]], ind: str) -> None:
        """The lane sums through workgroup memory (two barriers)."""
        lanes = self.lanes
        stride = len(names)
        for n, (h, u) in enumerate(names):
            b.line(f"{ind}part[lidx * {stride}u + {n}u] = d{h}_{u};")
        b.line(f"{ind}workgroupBarrier();")
        for n, (h, u) in enumerate(names):
            terms = [f"part[(row * {lanes}u + {ln}u) * {stride}u + {n}u]" for ln in range(lanes)]
            b.line(f"{ind}d{h}_{u} = {' + '.join(terms)};")
        b.line(f"{ind}workgroupBarrier();  // part is rewritten by the next step")

    def _merge_rows(self, b: WgslBuilder, inf: str, per_v: int) -> None:
        """The rows' (max, sum of exp, value sums) merged into row 0, a tree in workgroup memory."""
        g, lanes, rows, w = self.g, self.lanes, self.rows, self.kernel_element()
        if rows == 1:
            return
        vt = f32v(w)
        hpr = self.choice.param("merge_heads", 1)
        slots = lanes * per_v
        b.workgroup_var(f"mg_o: array<{vt}, {(rows // 2) * hpr * slots}>")
        b.workgroup_var(f"mg_ml: array<vec2<f32>, {(rows // 2) * hpr}>")
        b.workgroup_var(f"mg_bad: array<u32, {(rows // 2) * hpr}>")
        half = rows // 2
        while half:
            for first in range(0, g, hpr):
                heads = list(range(first, min(g, first + hpr)))
                b.line(f"if (row >= {half}u && row < {2 * half}u) {{  // the upper half of the rows left")
                b.line(f"  let r = row - {half}u;")
                for k, h in enumerate(heads):
                    b.line(
                        f"  if (lane == 0u) {{ mg_ml[r * {hpr}u + {k}u] = vec2<f32>(m{h}, l{h}); "
                        f"mg_bad[r * {hpr}u + {k}u] = select(0u, 1u, bad{h}); }}"
                    )
                    for i in range(per_v):
                        b.line(f"  mg_o[(r * {hpr}u + {k}u) * {slots}u + lane + {i * lanes}u] = o{h}_{i};")
                b.line("}")
                b.line("workgroupBarrier();")
                b.line(f"if (row < {half}u) {{")
                for k, h in enumerate(heads):
                    b.line(f"  let ml{h} = mg_ml[row * {hpr}u + {k}u];")
                    b.line(f"  bad{h} = bad{h} || mg_bad[row * {hpr}u + {k}u] != 0u;")
                    b.line(f"  let top{h} = max(m{h}, ml{h}.x);")
                    b.line(f"  let a{h} = select(exp(m{h} - top{h}), 0.0, m{h} == -{inf});")
                    b.line(f"  let b{h} = select(exp(ml{h}.x - top{h}), 0.0, ml{h}.x == -{inf});")
                    b.line(f"  l{h} = l{h} * a{h} + ml{h}.y * b{h};")
                    for i in range(per_v):
                        other = f"mg_o[(row * {hpr}u + {k}u) * {slots}u + lane + {i * lanes}u]"
                        b.line(f"  o{h}_{i} = o{h}_{i} * {vt}(a{h}) + {other} * {vt}(b{h});")
                    b.line(f"  m{h} = top{h};")
                b.line("}")
                b.line("workgroupBarrier();  // mg is rewritten next")
            half //= 2

    def _mask_at(self, head: str, key: str) -> str:
        return f"in3[u32(i32(params.m_off) + i32(bt) * params.m_s0 + i32({head}) * params.m_s1 + i32({key}) * params.m_s3)]"

    def _store(self, b: WgslBuilder, h: int, per_v: int, ind: str) -> None:
        w, lanes = self.kernel_element(), self.lanes
        head = f"h0 + {h}u"
        if self.node.op is Op.ATTENTION_SPLITS:
            # row (bt, head, split) of (B, H, 1, splits, Ev + 2): the sums, then m and sum(exp)
            b.line(f"{ind}let base{h} = ((bt * params.heads + {head}) * params.splits + split) * (params.ev + 2u);")
            for i in range(per_v):
                ok = self._slice_ok(2, i)
                pre, post = (f"if ({ok}) {{ ", " }") if ok else ("", "")
                for c in range(w):
                    lane_value = f"o{h}_{i}.{'xyzw'[c]}" if w > 1 else f"o{h}_{i}"
                    b.line(f"{ind}{pre}out[base{h} + (lane + {i * lanes}u) * {w}u + {c}u] = {lane_value};{post}")
            # a NaN score: the range's sum of exp is NaN, which attention_combine tests on the bits
            b.line(
                f"{ind}if (lane == 0u) {{ out[base{h} + params.ev] = m{h}; "
                f"out[base{h} + params.ev + 1u] = select(l{h}, nan, bad{h}); }}"
            )
            return
        # no keys at all gives 0 (the empty sum); keys all masked give NaN (0 / 0), as the reference
        dt = self.node.dtype
        for i in range(per_v):
            ok = self._slice_ok(2, i)
            pre, post = (f"if ({ok}) {{ ", " }") if ok else ("", "")
            value = f"select(select(o{h}_{i} / l{h}, {f32v(w)}(0.0), params.s == 0u), {f32v(w)}(nan), bad{h})"
            at = f"(bt * params.heads + {head}) * (params.ev / {w}u) + lane + {i * lanes}u"
            b.line(f"{ind}{pre}out[{at}] = {vtype(dt, w, storage=True)}({value});{post}")
