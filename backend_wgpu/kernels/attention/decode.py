"""attention_decode: one query row per head over a long key/value cache (flash-decoding).

It runs ATTENTION nodes with one query row (a decode step: every head in one dispatch)
and ATTENTION_SPLITS nodes (passes.split_attention cut the keys into `splits` ranges;
attention_combine adds the ranges up). A workgroup owns one (batch, kv head, key range)
and the `heads_per_kv` query heads that share the kv head (grouped-query attention), so
every key and value row is read from memory once. Three phases:
  1. scores: `lanes` threads per key each load one KernelElement of it (neighbouring
     threads read neighbouring memory) and dot it with their slice of every query head,
     held in registers and pre-scaled; the lanes are summed with subgroup shuffles where
     the adapter's subgroups hold them, else a tree in workgroup memory. The range's
     scores sit in workgroup memory (at most `chunk` keys), and their max per head.
  2. softmax statistics per head: exp(score - max) in place, and its sum.
  3. values: each thread owns one KernelElement of the value row and strides over the
     keys; the rows of threads are added in workgroup memory, one head at a time.
The attended length `s` lives in the uniform, so a new length needs no new shader; a
range is ceil(s / splits) keys. Math in f32; float16 caches are widened as they load.
"""

from __future__ import annotations

from backend_wgpu.element import WIDTHS, vector_readable
from backend_wgpu.kernel import Kernel, Meta, Workload
from backend_wgpu.kernels.blocks import infinity
from backend_wgpu.wgsl import WgslBuilder, f32v, vtype
from ir.graph import Graph
from ir.node import Node
from ir.ops import AttentionArg, Op
from ir.view import View

THREADS = 256  # per workgroup
UNROLL = 4  # keys (and value rows) each thread loads per pass


def pow2_at_least(n: int) -> int:
    return 1 << max(0, (max(n, 1) - 1).bit_length())


def attention_arg(node: Node) -> AttentionArg:
    return node.arg.attention if node.op is Op.ATTENTION_SPLITS else node.arg


class DecodeAttentionKernel(Kernel):
    name = "attention_decode"

    @classmethod
    def widest_element(cls, node: Node, views: list[View]) -> int:
        q, k, v = views[:3]
        return next(w for w in WIDTHS if all(vector_readable(x, w) and x.strides[-1] == 1 for x in (q, k, v)) or w == 1)

    @classmethod
    def reason(cls, graph: Graph, node: Node) -> str:
        g = node.kernel.param("heads_per_kv")
        splits = node.arg.splits if node.op is Op.ATTENTION_SPLITS else 1
        ranges = f", keys in {splits} ranges" if splits > 1 else ""
        return f"one query row: a workgroup per kv head{ranges}, its {g} query heads together (K and V read once)"

    # --- shapes ---------------------------------------------------------------------
    @property
    def g(self) -> int:
        return self.choice.param("heads_per_kv")

    @property
    def splits(self) -> int:
        return self.node.arg.splits if self.node.op is Op.ATTENTION_SPLITS else 1

    def _lanes(self, n: int) -> int:
        return pow2_at_least(-(-n // self.kernel_element()))

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

    def calculate_dispatch(self) -> Workload:
        q, k = self.operands[0].view, self.operands[1].view
        return Workload.for_workgroups(
            q.shape[0] * k.shape[1] * self.splits, self.choice.workgroup, self.max_workgroups
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

    def _reduce(self, b: WgslBuilder, var: str, kind: str) -> None:
        """`var` combined over the workgroup (every thread gets it); reuses one workgroup array."""
        subgroups = self.choice.param("subgroups", False)
        fn = "max({a}, {b})" if kind == "max" else "{a} + {b}"
        if subgroups:
            op = "subgroupMax" if kind == "max" else "subgroupAdd"
            b.line(f"{var} = {op}({var});")
            b.line(f"if (sg_lane == 0u) {{ red[lidx / sg_size] = {var}; }}")
            b.line("workgroupBarrier();")
            b.line(f"{var} = red[0];")
            b.line(f"for (var i = 1u; i < {THREADS}u / sg_size; i++) {{ {var} = {fn.format(a=var, b='red[i]')}; }}")
        else:
            b.line(f"red[lidx] = {var};")
            b.line("workgroupBarrier();")
            b.line(f"for (var half = {THREADS // 2}u; half > 0u; half = half >> 1u) {{")
            b.line(f"  if (lidx < half) {{ red[lidx] = {fn.format(a='red[lidx]', b='red[lidx + half]')}; }}")
            b.line("  workgroupBarrier();")
            b.line("}")
            b.line(f"{var} = red[0];")
        b.line("workgroupBarrier();  // red is reused")

    def _lane_sum(self, b: WgslBuilder, lanes: int, names: list[str], indent: str) -> None:
        """Sum each of `names` over the `lanes` threads of its key (lane 0 of the key gets the sums)."""
        if lanes == 1:
            return
        if self.choice.param("lane_shuffle", False):
            for name in names:
                m = lanes // 2
                while m:
                    b.line(f"{indent}{name} += subgroupShuffleXor({name}, {m}u);")
                    m //= 2
            return
        for i, name in enumerate(names):
            b.line(f"{indent}lane_red[{i * THREADS}u + lidx] = {name};")
        b.line(f"{indent}workgroupBarrier();")
        b.line(f"{indent}for (var half = {lanes // 2}u; half > 0u; half = half >> 1u) {{")
        adds = " ".join(
            f"lane_red[{i * THREADS}u + lidx] += lane_red[{i * THREADS}u + lidx + half];" for i in range(len(names))
        )
        b.line(f"{indent}  if (lane < half) {{ {adds} }}")
        b.line(f"{indent}  workgroupBarrier();")
        b.line(f"{indent}}}")
        for i, name in enumerate(names):
            b.line(f"{indent}{name} = lane_red[{i * THREADS}u + lidx];")
        b.line(f"{indent}workgroupBarrier();  // lane_red is reused by the next keys")

    @property
    def unroll(self) -> int:
        """Keys each thread loads per pass (several loads in flight), from select_kernels' plan."""
        return self.choice.param("unroll", 1)

    def render(self, b: WgslBuilder) -> None:
        arg = attention_arg(self.node)
        g, w, chunk = self.g, self.kernel_element(), self.choice.param("chunk")
        q = self.operands[0].view
        lanes, lanes_v = self._lanes(q.shape[3]), self._lanes(self.operands[2].view.shape[3])
        vt = f32v(w)
        if self.choice.param("subgroups", False):
            b.builtin("@builtin(subgroup_invocation_id) sg_lane: u32")
            b.builtin("@builtin(subgroup_size) sg_size: u32")
        b.workgroup_var(f"scores: array<f32, {g * chunk}>")
        b.workgroup_var(f"red: array<f32, {THREADS}>")
        b.workgroup_var(f"out_red: array<{vt}, {THREADS}>")
        if lanes > 1 and not self.choice.param("lane_shuffle", False):
            b.workgroup_var(f"lane_red: array<f32, {g * self.unroll * THREADS}>")
        inf = infinity(b)
        b.line("let split = wg % params.splits;")
        b.line("let hk = (wg / params.splits) % params.hkv;")
        b.line("let bt = wg / (params.splits * params.hkv);")
        b.line("if (bt >= params.batch) { return; }")
        b.line("let range_len = (params.s + params.splits - 1u) / params.splits;")
        b.line("let start = min(split * range_len, params.s);")
        b.line("let n = min(start + range_len, params.s) - start;")
        # 1. scores
        b.line(f"let lane = lidx % {lanes}u;")
        b.line(f"let key_row = lidx / {lanes}u;")
        b.line(f"let lane_on = lane * {w}u < params.e;")
        for h in range(g):
            b.line(f"var q{h} = {vt}(0.0);")
            b.line(f"var m{h} = -{inf};")
        b.line("if (lane_on) {")
        for h in range(g):
            head = f"hk * {g}u + {h}u"
            b.line(f"  q{h} = {vt}(in0[{self._addr('q', head, '0u', 'lane')}]) * params.scale;")
        b.line("}")
        per_pass, unroll = THREADS // lanes, self.unroll
        b.line(f"for (var first = 0u; first < n; first += {per_pass * unroll}u) {{")
        for u in range(unroll):  # every load of the pass first, then the arithmetic
            b.line(f"  let j{u} = first + {u * per_pass}u + key_row;")
            b.line(f"  var kv{u} = {vt}(0.0);")
            key = self._addr("k", "hk", f"start + j{u}", "lane")
            b.line(f"  if (j{u} < n && lane_on) {{ kv{u} = {vt}(in1[{key}]); }}")
        names = []
        for u in range(unroll):
            for h in range(g):
                b.line(f"  var d{h}_{u} = {f'dot(q{h}, kv{u})' if w > 1 else f'q{h} * kv{u}'};")
                names.append(f"d{h}_{u}")
        self._lane_sum(b, lanes, names, "  ")
        for u in range(unroll):
            b.line(f"  if (lane == 0u && j{u} < n) {{")
            for h in range(g):
                b.line(f"    var s{h} = d{h}_{u};")
                self._mask(b, arg, f"s{h}", f"hk * {g}u + {h}u", f"start + j{u}", inf, "    ")
                b.line(f"    scores[{h * chunk}u + j{u}] = s{h};")
                b.line(f"    m{h} = max(m{h}, s{h});")
            b.line("  }")
        b.line("}")
        b.line("workgroupBarrier();")
        # 2. max and sum of exp per head
        for h in range(g):
            self._reduce(b, f"m{h}", "max")
        for h in range(g):
            b.line(f"var l{h} = 0.0;")
        b.line(f"for (var j = lidx; j < n; j += {THREADS}u) {{")
        for h in range(g):
            # keys all masked (max -inf) contribute nothing rather than NaN
            b.line(f"  let p{h} = select(exp(scores[{h * chunk}u + j] - m{h}), 0.0, m{h} == -{inf});")
            b.line(f"  scores[{h * chunk}u + j] = p{h};")
            b.line(f"  l{h} += p{h};")
        b.line("}")
        for h in range(g):
            self._reduce(b, f"l{h}", "add")  # its barrier also publishes the exps in `scores`
        # 3. values
        rows = THREADS // lanes_v
        b.line(f"let vlane = lidx % {lanes_v}u;")
        b.line(f"let vrow = lidx / {lanes_v}u;")
        for h in range(g):
            b.line(f"var o{h} = {vt}(0.0);")
        b.line(f"if (vlane * {w}u < params.ev) {{")
        b.line(f"  for (var first = vrow; first < n; first += {rows * UNROLL}u) {{")
        for u in range(UNROLL):
            b.line(f"    let j{u} = first + {u * rows}u;")
            b.line(f"    var vv{u} = {vt}(0.0);")
            b.line(f"    if (j{u} < n) {{ vv{u} = {vt}(in2[{self._addr('v', 'hk', f'start + j{u}', 'vlane')}]); }}")
        for u in range(UNROLL):
            b.line(f"    if (j{u} < n) {{")
            for h in range(g):
                b.line(f"      o{h} = fma({vt}(scores[{h * chunk}u + j{u}]), vv{u}, o{h});")
            b.line("    }")
        b.line("  }")
        b.line("}")
        for h in range(g):
            b.line(f"out_red[lidx] = o{h};")
            b.line("workgroupBarrier();")
            b.line(f"for (var half = {rows // 2}u; half > 0u; half = half >> 1u) {{")
            b.line(f"  if (vrow < half) {{ out_red[lidx] += out_red[lidx + half * {lanes_v}u]; }}")
            b.line("  workgroupBarrier();")
            b.line("}")
            b.line(f"if (vrow == 0u && vlane * {w}u < params.ev) {{")
            self._store(b, f"hk * {g}u + {h}u", "out_red[lidx]", f"m{h}", f"l{h}", "  ")
            b.line("}")
            b.line("workgroupBarrier();  // out_red is reused by the next head")

    def _mask(self, b: WgslBuilder, arg: AttentionArg, var: str, head: str, key: str, inf: str, indent: str) -> None:
        if arg.mask == "none":
            return
        at = f"in3[u32(i32(params.m_off) + i32(bt) * params.m_s0 + i32({head}) * params.m_s1 + i32({key}) * params.m_s3)]"
        if arg.mask == "bool":
            b.line(f"{indent}if ({at} == 0u) {{ {var} = -{inf}; }}")
        else:
            b.line(f"{indent}{var} += f32({at});")

    def _store(self, b: WgslBuilder, head: str, acc: str, m: str, total: str, indent: str) -> None:
        w = self.kernel_element()
        if self.node.op is Op.ATTENTION_SPLITS:
            # row (bt, head, split) of (B, H, 1, splits, Ev + 2): the sums, then m and sum(exp)
            b.line(f"{indent}let base = ((bt * params.heads + {head}) * params.splits + split) * (params.ev + 2u);")
            for c in range(w):
                lane = f"{acc}.{'xyzw'[c]}" if w > 1 else acc
                b.line(f"{indent}out[base + vlane * {w}u + {c}u] = {lane};")
            b.line(f"{indent}if (vlane == 0u) {{ out[base + params.ev] = {m}; out[base + params.ev + 1u] = {total}; }}")
            return
        # no keys at all gives 0 (the empty sum); keys all masked give NaN (0 / 0), as the reference
        dt = self.node.dtype
        value = f"select({acc} / {total}, {f32v(w)}(0.0), params.s == 0u)"
        b.line(
            f"{indent}out[(bt * params.heads + {head}) * (params.ev / {w}u) + vlane] = {vtype(dt, w, storage=True)}({value});"
        )
