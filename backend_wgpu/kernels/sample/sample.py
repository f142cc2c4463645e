"""sample[greedy|draw]: one id per row of logits, drawn on the GPU (ir/optable/sampling.py defines it).

One workgroup per row; thread t owns a contiguous run of ids. The steps, each a pass over
the row (the row stays in cache after the first):
  1. the row's max (greedy: the first id holding it, and done);
  2. top-k: the k-th largest logit as a threshold on the logits' order-preserving uint32
     keys, found a 4-bit digit at a time from the top (8 rounds: each counts the candidates
     per digit, a 16-bin histogram summed over the workgroup); the ties at the threshold
     are kept in id order (their ranks from a scan of each thread's tie count);
  3. top-p: the same search over the kept ids, on their weights exp((x - max) / T) instead of
     counts, for the smallest head reaching top_p of their sum;
  4. the draw: u from the counter-based hash of (seed, step, row); each thread's sum of kept
     weights, a scan over the threads, then the thread where u times the total falls walks its
     ids to the first whose running sum exceeds it.
Scans over the threads' sums run on one thread. Math in f32.
"""

from __future__ import annotations

from backend_wgpu.kernel import Kernel, Meta, Workload, index_to_coords
from backend_wgpu.kernels.blocks import infinity
from backend_wgpu.wgsl import WgslBuilder
from ir.graph import Graph
from ir.node import Node

HELPERS = {
    "wg_okey": (
        "fn wg_okey(x: f32) -> u32 {\n"
        "  // the float order as a uint32 order: negative floats flip all bits, others the sign bit\n"
        "  let b = bitcast<u32>(x);\n"
        "  return select(b | 0x80000000u, ~b, (b >> 31u) == 1u);\n"
        "}"
    ),
    "wg_from_okey": (
        "fn wg_from_okey(k: u32) -> f32 {\n  return bitcast<f32>(select(~k, k & 0x7fffffffu, (k >> 31u) == 1u));\n}"
    ),
    "wg_mix": (
        "fn wg_mix(x: u32) -> u32 {\n"
        "  // the PCG output hash (Jarzynski and Olano 2020); u32 arithmetic wraps\n"
        "  let s = x * 747796405u + 2891336453u;\n"
        "  let w = ((s >> ((s >> 28u) + 4u)) ^ s) * 277803737u;\n"
        "  return (w >> 22u) ^ w;\n"
        "}"
    ),
}


class SampleKernel(Kernel):
    name = "sample"

    @property
    def t(self) -> int:
        """Threads per row (the workgroup)."""
        return self.choice.workgroup[0]

    @classmethod
    def reason(cls, graph: Graph, node: Node) -> str:
        arg = node.arg
        if arg.temperature == 0:
            return "a workgroup per row: the first largest logit"
        steps = ["temperature"] + (["top-k"] * (arg.top_k > 0)) + (["top-p"] * (arg.top_p < 1))
        return f"a workgroup per row: {', '.join(steps)}, one draw from a counter-based hash (one id read back)"

    def metadata(self) -> Meta:
        x = self.operands[0].view
        arg = self.node.arg
        meta: Meta = [("rows", "u32", self.node.size), ("v", "u32", x.shape[-1])]
        meta += [(f"n{d}", "u32", n) for d, n in enumerate(x.shape[:-1])]
        meta += [("x_off", "u32", x.offset)] + [(f"x_s{d}", "i32", s) for d, s in enumerate(x.strides)]
        meta += [("seed_off", "u32", self.operands[1].view.offset), ("step_off", "u32", self.operands[2].view.offset)]
        meta += [("inv_t", "f32", 1.0 / arg.temperature if arg.temperature else 0.0)]
        meta += [("top_k", "u32", arg.top_k), ("top_p", "f32", arg.top_p)]
        return meta

    def variant_key(self) -> str:
        arg = self.node.arg
        if arg.temperature == 0:
            return "greedy"
        return f"draw{'.k' if 0 < arg.top_k else ''}{'.p' if arg.top_p < 1 else ''}"

    def output_type(self) -> str:
        return "i32"

    def calculate_dispatch(self) -> Workload:
        return Workload.for_workgroups(self.node.size, self.choice.workgroup, self.max_workgroups)

    # --- code -----------------------------------------------------------------------
    def render(self, b: WgslBuilder) -> None:
        for name, code in HELPERS.items():
            b.helper(name, code)
        b.workgroup_var(f"red: array<f32, {16 * self.t}>")
        b.workgroup_var("shared_u: array<u32, 4>")
        b.workgroup_var("shared_f: array<f32, 4>")
        inf = infinity(b)
        b.line("let row = wg;")
        b.line("if (row >= params.rows) { return; }")
        lead = len(self.operands[0].view.shape) - 1
        for line in index_to_coords("row", [f"n{d}" for d in range(lead)], "r"):
            b.line(line)
        base = " + ".join(["i32(params.x_off)"] + [f"i32(r{d}) * params.x_s{d}" for d in range(lead)])
        b.line(f"let base = {base};")
        b.line(f"let chunk = (params.v + {self.t - 1}u) / {self.t}u;")
        b.line("let lo = min(lidx * chunk, params.v);")
        b.line("let hi = min(lo + chunk, params.v);")
        b.line(f"var m = -{inf};")
        b.line(f"for (var i = lo; i < hi; i++) {{ m = max(m, {self._x('i')}); }}")
        self._reduce(b, "m", "max")
        arg = self.node.arg
        if arg.temperature == 0:
            self._greedy(b)
            return
        b.line("var k_key = 0u;  // ids above k_key, and the first k_ties at it, are kept by top-k")
        b.line("var k_ties = 0xffffffffu;")
        if arg.top_k > 0:
            b.line("if (params.top_k < params.v) {")
            self._threshold(b, "k", counts=True, keep=None)
            b.line("}")
            self._tie_starts(b, "k")
        else:
            b.line("let start_k = 0u;")
        b.line("var p_key = 0u;")
        b.line("var p_ties = 0xffffffffu;")
        if arg.top_p < 1:
            self._threshold(b, "p", counts=False, keep="k")
            self._tie_starts(b, "p")
        else:
            b.line("let start_p = 0u;")
        self._draw(b)

    def _x(self, i: str) -> str:
        last = len(self.operands[0].view.shape) - 1
        return f"f32(in0[u32(base + i32({i}) * params.x_s{last})])"

    def _weight(self, x: str) -> str:
        return f"exp(({x} - m) * params.inv_t)"

    def _reduce(self, b: WgslBuilder, var: str, kind: str) -> None:
        """var over the workgroup (every thread gets it), through red[0..self.t)."""
        fn = "max({a}, {b})" if kind == "max" else "min({a}, {b})" if kind == "min" else "{a} + {b}"
        b.line(f"red[lidx] = f32({var});")
        b.line("workgroupBarrier();")
        b.line(f"for (var half = {self.t // 2}u; half > 0u; half = half >> 1u) {{")
        b.line(f"  if (lidx < half) {{ red[lidx] = {fn.format(a='red[lidx]', b='red[lidx + half]')}; }}")
        b.line("  workgroupBarrier();")
        b.line("}")
        b.line(f"{var} = {'u32(red[0])' if kind == 'min' else 'red[0]'};")
        b.line("workgroupBarrier();  // red is reused")

    def _greedy(self, b: WgslBuilder) -> None:
        b.line("var first = params.v;")
        b.line(f"for (var i = lo; i < hi; i++) {{ if ({self._x('i')} == m) {{ first = i; break; }} }}")
        self._reduce(b, "first", "min")
        b.line("if (lidx == 0u) { out[row] = i32(first); }")

    def _kept(self, which: str | None) -> str:
        """Is id i (key `key`, running tie rank `rank_{which}`) kept by the `which` step (None: always)."""
        if which is None:
            return "true"
        return f"(key > {which}_key || (key == {which}_key && rank_{which} < {which}_ties))"

    def _walk(self, b: WgslBuilder, steps: list[str], body: list[str]) -> None:
        """for each id of this thread: its key, the running tie ranks of `steps`, then `body`."""
        b.line("{")
        for s in steps:
            b.line(f"  var rank_{s} = start_{s};")
        b.line("  for (var i = lo; i < hi; i++) {")
        b.line(f"    let x = {self._x('i')};")
        b.line("    let key = wg_okey(x);")
        for line in body:
            b.line("    " + line)
        for s in steps:
            b.line(f"    if (key == {s}_key) {{ rank_{s} += 1u; }}")
        b.line("  }")
        b.line("}")

    def _threshold(self, b: WgslBuilder, which: str, counts: bool, keep: str | None) -> None:
        """{which}_key and {which}_ties: the threshold of the head reaching the goal (a count or a weight)."""
        steps = [keep] if keep else []
        if not counts:
            b.line("var total = 0.0;")
            self._walk(b, steps, [f"if ({self._kept(keep)}) {{ total += {self._weight('x')}; }}"])
            self._reduce(b, "total", "add")
            b.line("let goal = params.top_p * total;")
        else:
            b.line("let goal = f32(params.top_k);")
        b.line("var prefix = 0u;")
        b.line("var above = 0.0;")
        b.line("for (var round = 0u; round < 8u; round++) {")
        b.line("  let shift = 28u - 4u * round;")
        b.line("  var bins = array<f32, 16>();  // zeroed explicitly each round")
        add = "1.0" if counts else self._weight("x")
        match = "(round == 0u || (key >> (shift + 4u)) == prefix)"
        inner = WgslBuilder()
        self._walk(inner, steps, [f"if ({self._kept(keep)} && {match}) {{ bins[(key >> shift) & 15u] += {add}; }}"])
        for line in inner.body:
            b.line("  " + line)
        b.line(f"  for (var d = 0u; d < 16u; d++) {{ red[d * {self.t}u + lidx] = bins[d]; }}")
        b.line("  workgroupBarrier();")
        b.line(f"  for (var half = {self.t // 2}u; half > 0u; half = half >> 1u) {{")
        b.line(
            f"    if (lidx < half) {{ for (var d = 0u; d < 16u; d++) {{ red[d * {self.t}u + lidx] += red[d * {self.t}u + lidx + half]; }} }}"
        )
        b.line("    workgroupBarrier();")
        b.line("  }")
        b.line("  if (lidx == 0u) {")
        b.line("    // the highest digit where the head reaches the goal (else the lowest one holding any)")
        b.line("    var pick = 16u;")
        b.line("    var low = 0u;")
        b.line("    var acc = above;")
        b.line("    for (var d = 15; d >= 0; d--) {")
        b.line(f"      let here = red[u32(d) * {self.t}u];")
        b.line("      if (here > 0.0) { low = u32(d); }")
        b.line("      if (pick == 16u && here > 0.0 && acc + here >= goal) { pick = u32(d); }")
        b.line("      if (pick == 16u) { acc += here; }")
        b.line("    }")
        b.line(f"    if (pick == 16u) {{ pick = low; acc -= red[low * {self.t}u]; }}")
        b.line("    shared_u[0] = (prefix << 4u) | pick;")
        b.line("    shared_f[0] = acc;")
        b.line("  }")
        b.line("  workgroupBarrier();")
        b.line("  prefix = shared_u[0];")
        b.line("  above = shared_f[0];")
        b.line("  workgroupBarrier();")
        b.line("}")
        b.line(f"{which}_key = prefix;")
        if counts:
            b.line(f"{which}_ties = u32(goal - above);")
        else:
            b.line(f"let tie_weight = {self._weight('wg_from_okey(prefix)')};")
            b.line(f"{which}_ties = max(1u, u32(ceil((goal - above) / tie_weight)));")

    def _tie_starts(self, b: WgslBuilder, which: str) -> None:
        """start_{which}: how many ids before this thread's sit at the threshold (and are kept so far)."""
        before = ["k"] if which == "p" else []
        cond = " && ".join([self._kept(s) for s in before] + [f"key == {which}_key"])
        b.line(f"var ties_{which} = 0u;")
        self._walk(b, before, [f"if ({cond}) {{ ties_{which} += 1u; }}"])
        b.line(f"red[lidx] = f32(ties_{which});")
        b.line("workgroupBarrier();")
        b.line("if (lidx == 0u) {")
        b.line("  var run = 0.0;")
        b.line(f"  for (var t = 0u; t < {self.t}u; t++) {{ let n = red[t]; red[{self.t}u + t] = run; run += n; }}")
        b.line("}")
        b.line("workgroupBarrier();")
        b.line(f"let start_{which} = u32(red[{self.t}u + lidx]);")
        b.line("workgroupBarrier();  // red is reused")

    def _draw(self, b: WgslBuilder) -> None:
        """u from (seed, step, row); the thread where u times the kept total falls finds the id."""
        b.line("let seed = u32(in1[params.seed_off]);")
        b.line("let step = u32(in2[params.step_off]);")
        b.line("let u = f32(wg_mix(wg_mix(wg_mix(seed) + step) + row) >> 8u) / 16777216.0;")
        kept = f"{self._kept('k')} && {self._kept('p')}"
        b.line("var mine = 0.0;")
        self._walk(b, ["k", "p"], [f"if ({kept}) {{ mine += {self._weight('x')}; }}"])
        b.line("red[lidx] = mine;")
        b.line("workgroupBarrier();")
        b.line("if (lidx == 0u) {")
        b.line("  var total = 0.0;")
        b.line(f"  for (var t = 0u; t < {self.t}u; t++) {{ total += red[t]; }}")
        b.line("  let goal = u * total;")
        b.line("  var run = 0.0;")
        b.line("  var pick = 0u;")
        b.line("  var rest = -1.0;")
        b.line(f"  for (var t = 0u; t < {self.t}u; t++) {{")
        b.line("    if (red[t] > 0.0) { pick = t; }")
        b.line("    if (red[t] > 0.0 && run + red[t] > goal) { rest = goal - run; break; }")
        b.line("    run += red[t];")
        b.line("  }")
        b.line("  shared_u[1] = pick;")
        b.line("  shared_f[1] = rest;  // < 0: rounding left u past the last: that thread's last kept id")
        b.line("}")
        b.line("workgroupBarrier();")
        b.line("if (lidx == shared_u[1]) {")
        b.line("  let rest = shared_f[1];")
        b.line("  var acc = 0.0;")
        b.line("  var found = params.v;")
        b.line("  var last = params.v;")
        inner = WgslBuilder()
        self._walk(
            inner,
            ["k", "p"],
            [
                f"if ({kept}) {{",
                f"  acc += {self._weight('x')};",
                "  last = i;",
                "  if (found == params.v && rest >= 0.0 && acc > rest) { found = i; }",
                "}",
            ],
        )
        for line in inner.body:
            b.line("  " + line)
        b.line("  out[row] = i32(select(found, last, found == params.v));")
        b.line("}")
