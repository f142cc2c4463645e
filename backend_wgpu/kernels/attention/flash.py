"""Flash attention: softmax(q k^T * scale + mask) v in one dispatch; the scores never reach memory.

A workgroup owns `br` query rows of one (batch, head) and streams the keys (and values) in
blocks of `bc` through workgroup memory, keeping for each row the running max m, the
running sum l of exp(s - m) and the output accumulator o in registers (the online
softmax): per block, m' = max(m, block max), o and l are scaled by exp(m - m'), and the
block's p = exp(s - m') are added (o += p v, l += sum p). The output is o / l.

Threads form a (br / 4) x tx grid: thread (ty, tx) owns 4 query rows (ty + i br / 4) and,
for those rows, the scores of bc / tx keys (tx, tx + tx_threads, ...) and the output of
dv / tx head dims, so both products are register-blocked outer products over vec4s of rows:
  scores   s[rows, keys] += q[rows][d] * k[key][d]         (q, k in workgroup memory)
  output   o[rows, dims] += p^T[key][rows] * v[key][dims]  (p^T, v in workgroup memory)
k and v are stored as loaded (consecutive threads, consecutive vec4s of a key's row: no bank
conflicts); k's rows are padded to an odd number of vec4s so the tx threads reading their
keys at one head dim hit distinct banks.
The tx threads of a row group agree on the block max through workgroup memory, or through
subgroup shuffles (`sg`) where they are lanes of one subgroup.

Scores are kept in log2 units (scale * log2(e) is in the uniform, exp2 then needs no
multiply). Causal attention is bottom-right aligned (query i sees keys j <= i + S - Lq),
and the key loop stops at the last key any row of the workgroup sees; boolean masks
(True = attend) and additive masks are read through their strided view, so a padding mask
(B, 1, 1, S) is a stride-0 read, never a copy. A bool mask the same for every query row (a
key padding mask) is first scanned by the workgroup for the first and last key it lets
through, and only the blocks between are visited (a padded batch skips its padding). Grouped-query attention reads kv head
h // group. A row that sees no key is NaN (0 / 0, as the composed softmax gives); with no
keys at all (S == 0) it is 0. A key of weight exactly 0 inside a visited block still
multiplies its value, so an inf or NaN there gives NaN; keys past the causal limit and
blocks a padding mask hides entirely are never read (torch's fused kernels leave this open too).

The output is stored (B, H, Lq, Ev), or (B, Lq, H, Ev) where AttentionArg.heads_inner says so (the
transpose ahead of the output projection, folded in by passes.attention_layout: no copy after).

Lengths, strides and the scale live in the uniform (one shader serves every sequence
length, and the attended length can change between runs); the head dims, the tile
sizes and the load mode are in the WGSL. Every loop runs at most S / bc, dk / 4 or bc / 4
times. Loads: the variant's `v4` reads q, k, v as vec4 along the head dim (f16 too),
`s` reads scalars through any strides; workgroup memory holds f32.

Config params (passes.select_kernels picks them; `smem_bytes` is what they cost):
  br, bc     query rows per workgroup, keys per block (br a multiple of 4, bc of tx)
  tx         threads across keys and head dims; the workgroup has br / 4 * tx threads
  dk, dv     the head dims padded (dk to 4, dv to 4 * tx): zeros fill the padding
  q_smem     q staged in workgroup memory (as loaded, rows padded) (else each thread reads its rows' q from memory)
  kv_alias   k and v share one buffer (k for the scores, then v), for large head dims
  sg         the block max through subgroup shuffles (needs subgroups of at least tx lanes)
  vg         v read from memory in the product with p (no workgroup memory for v: a row group's
             threads read one contiguous run of a key's row, as from workgroup memory)
  un         the loops over head dims and over a block's keys unrolled in the WGSL (constants in each
             copy): larger shaders, slow to compile on CPU adapters (lavapipe)
  pl         pipelined: two barriers per block instead of four (k of the next block stored during
             this one; implies pf; not with kv_alias)
  lpt        causal: workgroups row block major across heads (every head's last, longest row block
             first) instead of head major (a head's row blocks together, longest first)
  pf         prefetch: the next block of k and v is loaded into registers while this one is
             computed (global latency hidden behind the block's FMAs; costs those registers)
  sw         k's rows unpadded in workgroup memory, key c's vec4 d stored at d ^ (c % 8): the tx threads
             still hit distinct banks, and a 64x64 tile of k and v sharing a buffer fits 48 KiB exactly
             (head dims multiple of 32)
  qr         q in registers (_scores_split): the tx threads of a row group split the head dims instead of
             the keys; each holds its 4 rows' q at its dims from the start, takes partial dot products with
             every key of a tx-key chunk, and the chunk's partial sums are reduced and scattered across the
             tx lanes by subgroup shuffles, leaving each thread its own keys' scores as without it (needs `sg`,
             vec4 loads, head dims a multiple of 4 tx; k's rows unpadded, not swizzled: the lanes read
             different keys at their own vec4 slots). Without it each thread reads its rows' q from memory
             for every block, through the L1 cache: H200 run AA (attention_ablation.txt) timed the scores
             product at 1.15 ms of the unmasked 1x32x2048x128's 2.26 (30 TFLOP/s) against p v's 0.70 (49);
             with it 0.83 of 1.94 (ablation_qx.txt)
"""

from __future__ import annotations

import functools
import math

from backend_wgpu.kernel import LOOP_BUDGET, Kernel, Meta, Workload
from backend_wgpu.kernels.blocks import infinity
from backend_wgpu.wgsl import WgslBuilder, vtype
from ir.graph import Graph
from ir.node import Node
from ir.ops import AttentionArg
from ir.view import View

LOG2E = 1.4426950408889634


def walk_iterations(keys: int, dk: int, bc: int, threads: int, unroll: bool, key_range: bool) -> int:
    """Loop iterations one thread runs over `keys` keys: the key range scan, then per key block (and
    one more exit test) the loops not unrolled in the WGSL: the scores' head dims (dk / 4) and the
    p v product's keys (bc / 4)."""
    scan = -(-keys // threads) + 1 if key_range else 0
    per_block = 1 + (0 if unroll else (-(-dk // 4) + 1) + (bc // 4 + 1))
    return scan + (-(-keys // bc) + 1) * per_block


@functools.cache  # asked by every traced attention (tracer.nn); the search walks thousands of sizes
def max_fused_keys(dk: int) -> int:
    """The most keys a flash tile of 16-key blocks (the smallest for head dims up to 128 on adapters
    with 32 KiB of workgroup memory) walks within LOOP_BUDGET, with the key range scan of 32 threads."""
    n = LOOP_BUDGET * 16 // (-(-dk // 4) + 7)
    while n > 0 and walk_iterations(n, dk, 16, 32, False, True) > LOOP_BUDGET:
        n -= 16
    return n


class FlashAttentionKernel(Kernel):
    name = "flash_attention"

    @classmethod
    def reason(cls, graph: Graph, node: Node) -> str:
        k, arg = node.kernel, node.arg
        what = [f"{arg.mask} mask" if arg.mask != "none" else "", "causal" if arg.causal else ""]
        what += [f"{arg.group} query heads per kv head" if arg.group > 1 else ""]
        what += ["stored (B, Lq, H, Ev), heads inside rows: no copy after" if arg.heads_inner else ""]
        tx = k.param("tx")
        what += [
            f"q held in registers, head dims split across {tx} lanes, scores summed by shuffles"
            if k.param("qr", False)
            else ""
        ]
        extra = ", ".join(w for w in what if w)
        q = graph[node.srcs[0]].shape
        workgroups = math.prod(q[:-2]) * -(-q[-2] // k.param("br"))
        return (
            f"one dispatch: {k.param('br')} query rows per workgroup ({workgroups} workgroups), "
            f"keys streamed {k.param('bc')} at a time "
            f"through workgroup memory, online softmax in registers{'; ' + extra if extra else ''}"
        )

    @classmethod
    def width_reason(cls, node: Node, views: list) -> str:
        return ""  # the variant names the loads (v4: vec4 along the head dim, s: scalars)

    @staticmethod
    def smem_bytes(
        br: int,
        bc: int,
        tx: int,
        dk: int,
        dv: int,
        q_smem: bool,
        kv_alias: bool,
        sg: bool,
        vg: bool = False,
        sw: bool = False,
        key_range: bool = True,
    ) -> int:
        """Workgroup memory of a configuration (dk, dv padded), to check against the device's limit."""
        kr = 4 * FlashAttentionKernel.key_stride(dk, sw)  # a key's row of k
        q = 4 * FlashAttentionKernel.key_stride(dk) * br if q_smem else 0  # q's rows are always padded
        kv = max(kr, dv) * bc if kv_alias else (kr + (0 if vg else dv)) * bc
        red = 0 if sg else 4 * (br // 4) * tx
        return 4 * (q + kv + bc * br + red) + (8 if key_range else 0)  # 8: the key range of a padding mask

    @staticmethod
    def key_stride(dk: int, swizzled: bool = False) -> int:
        """vec4s per row of k (or q) in workgroup memory: odd, so 8 threads reading 8 keys hit 8 banks; or,
        swizzled (`sw`), dk / 4 unpadded with vec4 d of key c stored at d ^ (c % 8) (dk a multiple of 32)."""
        return dk // 4 if swizzled else dk // 4 + (dk // 4 + 1) % 2

    @staticmethod
    def scans_key_range(arg: AttentionArg, mask_view: View | None) -> bool:
        """A bool mask hiding keys (no fill score) the same for every query row (a padding mask (B, 1, 1, S)):
        the workgroup first finds the first and last key it lets through and visits only the blocks between."""
        return mask_view is not None and mask_view.strides[2] == 0 and arg.mask == "bool" and not arg.fill

    @staticmethod
    def padded_dims(dk: int, dv: int, tx: int) -> tuple[int, int]:
        """The head dims as held in workgroup memory: dk to a multiple of 4, dv of 4 * tx (at least one)."""
        return 4 * max(1, math.ceil(dk / 4)), 4 * tx * max(1, math.ceil(dv / (4 * tx)))

    # --- configuration ------------------------------------------------------------------
    def __init__(self, node: Node, graph: Graph, max_workgroups: int = 65535) -> None:
        super().__init__(node, graph, max_workgroups)
        self.arg: AttentionArg = node.arg
        c = self.choice
        self.br, self.bc, self.tx = c.param("br"), c.param("bc"), c.param("tx")
        self.dk, self.dv = c.param("dk"), c.param("dv")
        self.q_smem, self.kv_alias, self.sg = c.param("q_smem", True), c.param("kv_alias", False), c.param("sg", False)
        self.pf = c.param("pf", False)
        self.unroll = c.param("un", False)
        # two barriers per block (_render_pipelined): k and v pass through registers as with `pf`
        self.pl = c.param("pl", False)
        # causal: workgroups ordered row block major across heads (every head's longest first), not head major
        self.lpt = c.param("lpt", False)
        self.pf = self.pf or self.pl
        self.vg = c.param("vg", False)
        self.ty = self.br // 4
        self.rn = self.bc // self.tx  # keys per thread: tx + j * tx_threads for j < rn
        # k's rows in workgroup memory: padded to an odd stride, or unpadded and swizzled (`sw`)
        self.sw = c.param("sw", False)
        self.qr = c.param("qr", False)
        # with `qr` the lanes of a row group read different keys, each at its own vec4 slot tx + i tx_threads: rows
        # of k unpadded and not swizzled keep those slots in distinct banks (a row a multiple of 8 vec4s)
        self.ks = self.key_stride(self.dk, self.sw or self.qr)
        self.qstride = self.key_stride(self.dk)
        self.true_dv = self.operands[2].view.shape[3]
        self.gd = self.dv // (4 * self.tx)  # vec4 groups of head dims per thread
        self.v4 = c.variant.startswith("v4")
        # a mask the same for every query row (a padding mask (B, 1, 1, S)): one load per key, not four
        m = self.arg.operand("mask")
        self.mask_row0 = m is not None and self.operands[m].view.strides[2] == 0
        self.key_range = self.scans_key_range(self.arg, self.operands[m].view if m is not None else None)
        self.o4 = c.variant.endswith("o4")
        self.nq = self.dk // (4 * self.tx)  # with `qr`: the vec4s of head dims each thread holds per row
        assert not self.qr or (self.v4 and self.sg and not self.q_smem and not self.sw), (
            "flash_attention: q in registers needs vec4 loads, subgroup shuffles, q not staged and k unswizzled"
        )
        assert not self.qr or (self.nq * 4 * self.tx == self.dk and self.tx >= 2 and self.tx & (self.tx - 1) == 0), (
            "flash_attention: q in registers needs a head dim that is a multiple of 4 tx, and tx a power of two >= 2"
        )
        assert self.br % 4 == 0 and self.rn * self.tx == self.bc
        assert not self.vg or (self.v4 and not self.kv_alias), "flash_attention: v from memory needs vec4 loads"
        assert not (self.pl and self.kv_alias), "flash_attention: the pipelined loop needs k and v apart"
        assert self.gd * 4 * self.tx == self.dv and self.dk % 4 == 0
        assert not self.sw or self.ks % 8 == 0, "flash_attention: a swizzled k needs a head dim multiple of 32"

    def unchecked(self) -> bool:
        """Every index is in range by construction: loads of k, v and the output stores are guarded by
        the lengths, q rows and mask rows clamped to the last row, mask keys to the last key, and the
        workgroup-memory indices are below their arrays' sizes (tile constants). So the module is
        compiled without wgpu's clamp on each index (Device.pipeline, WGJIT_TRUSTED_SHADERS=0: never)."""
        return True

    def variant_key(self) -> str:
        c = self.choice
        flags = "".join(
            f
            for f, on in (
                ("q", self.q_smem),
                ("a", self.kv_alias),
                ("g", self.sg),
                ("p", self.pf),
                ("v", self.vg),
                ("u", self.unroll),
                ("l", self.pl),
                ("o", self.lpt and self.arg.causal),
                ("w", self.sw),
                ("r", self.qr),
            )
            if on
        )
        a = self.arg
        mode = f"{a.mask}{'.row0' * self.mask_row0}{'.hide' * a.hide}{'.fill' * a.fill}{'.' + a.scale_by if a.scale_by else ''}{'.causal' * a.causal}{'.bshd' * a.heads_inner}"
        return f"{c.variant}:{self.br}x{self.bc}t{self.tx}:d{self.dk}.{self.dv}:{flags}:{mode}"

    def operand_type(self, i: int) -> str:
        return vtype(self.operands[i].dtype, 4 if self.v4 and i < 3 else 1, storage=True)

    def output_type(self) -> str:
        return vtype(self.node.dtype, 4 if self.o4 else 1, storage=True)

    def metadata(self) -> Meta:
        b, h, lq, dk = self.operands[0].view.shape
        s, dv = self.operands[1].view.shape[2], self.operands[2].view.shape[3]
        if self.arg.length is not None:  # the keys attended (a runtime integer: k and v reach its bucket)
            s = self.arg.length
        meta: Meta = [("bh", "u32", b * h), ("heads", "u32", h), ("group", "u32", self.arg.group)]
        meta += [("lq", "u32", lq), ("s", "u32", s), ("dk", "u32", dk), ("dv", "u32", dv)]
        meta += [("qblocks", "u32", -(-lq // self.br)), ("scale2", "f32", self.arg.scale * LOG2E)]
        for name, i in (("q", 0), ("k", 1), ("v", 2), ("m", self.arg.operand("mask"))):
            if i is not None:
                v = self.operands[i].view
                meta += [(f"{name}_off", "u32", v.offset)] + [
                    (f"{name}_s{d}", "i32", st) for d, st in zip("bhlx", v.strides)
                ]
        for name in ("scale", "fill"):  # one element each: where it is
            i = self.arg.operand(name)
            if i is not None:
                meta.append((f"{name}_off", "u32", self.operands[i].view.offset))
        return meta

    def loop_iterations(self) -> int:
        keys = self.operands[1].view.shape[2]  # the stored length: a runtime length is at most this
        return walk_iterations(keys, self.dk, self.bc, self.ty * self.tx, self.unroll, self.key_range)

    def calculate_dispatch(self) -> Workload:
        b, h, lq, _ = self.operands[0].view.shape
        return Workload.for_workgroups(b * h * -(-lq // self.br), self.choice.workgroup, self.max_workgroups)

    # --- rendering ----------------------------------------------------------------------
    def render(self, b: WgslBuilder) -> None:
        self._declare(b)
        self._prologue(b)
        if self.pl:
            self._render_pipelined(b)
            self._finish(b)
            return
        karr = "kv" if self.kv_alias else "ks"
        varr = "kv" if self.kv_alias else "vs"
        loads = "k" if self.vg else "kv"  # what goes through workgroup memory
        if self.pf:  # block blk0 in registers before the loop; each block then fetches the next
            for which in loads:
                for li in range(self._kv_items(which)[2]):
                    b.line(f"var p{which}{li} = {'vec4<f32>(0.0)' if self.v4 else '0.0'};")
            b.line(f"let c0_first = blk0 * {self.bc}u;")
            for which in loads:
                self._load_kv(b, which, "c0_first", None)
        b.line("for (var blk = blk0; blk < nblocks; blk++) {")
        b.line(f"  let c0 = blk * {self.bc}u;")
        b.line("  workgroupBarrier();  // the previous block's readers are done")
        self._load_kv(b, "k", "c0", karr)
        if not self.kv_alias and not self.vg:
            self._load_kv(b, "v", "c0", varr)
        b.line("  workgroupBarrier();")
        if self.pf:  # the next block's loads are in flight while this one is computed
            b.line("  if (blk + 1u < nblocks) {")
            self._load_kv(b, "k", f"(c0 + {self.bc}u)", None)
            if not self.kv_alias and not self.vg:
                self._load_kv(b, "v", f"(c0 + {self.bc}u)", None)
            b.line("  }")
        self._scores(b)
        self._mask(b)
        self._softmax_step(b)
        if self.kv_alias:
            if self.sg:
                b.line("  workgroupBarrier();  // every thread is done reading k")
            self._load_kv(b, "v", "c0", varr)
            if self.pf:
                b.line("  if (blk + 1u < nblocks) {")
                self._load_kv(b, "v", f"(c0 + {self.bc}u)", None)
                b.line("  }")
        b.line("  workgroupBarrier();  // p^T (and v) in workgroup memory")
        self._accumulate(b, "" if self.vg else varr)
        b.line("}")
        self._finish(b)

    def _render_pipelined(self, b: WgslBuilder) -> None:
        """The key loop with two barriers per block instead of four (`pl`).

        Between the block's row-max barrier (every thread is done with this block's k, and with the
        previous block's v and p) and the barrier before p v, each thread stores this block's v and the
        next block's k from its registers, and starts loading the next v and the k after that: k of
        block b + 1 is in workgroup memory when block b + 1 starts, and the loads run under a block."""
        loads = "k" if self.vg else "kv"
        for which in loads:
            for li in range(self._kv_items(which)[2]):
                b.line(f"var p{which}{li} = {'vec4<f32>(0.0)' if self.v4 else '0.0'};")
        b.line(f"let c0_first = blk0 * {self.bc}u;")
        for which in loads:
            self._load_kv(b, which, "c0_first", None)
        self._load_kv(b, "k", "c0_first", "ks")
        b.line("if (blk0 + 1u < nblocks) {")
        self._load_kv(b, "k", f"(c0_first + {self.bc}u)", None)
        b.line("}")
        b.line("workgroupBarrier();  // k of the first block in workgroup memory")
        b.line("for (var blk = blk0; blk < nblocks; blk++) {")
        b.line(f"  let c0 = blk * {self.bc}u;")
        self._scores(b)
        self._mask(b)
        self._softmax_step(b)
        if self.sg:  # the row max needed no barrier: this one frees k, and the previous block's v and p
            b.line("  workgroupBarrier();")
        if not self.vg:
            self._load_kv(b, "v", "c0", "vs")
        b.line("  if (blk + 1u < nblocks) {")
        self._load_kv(b, "k", f"(c0 + {self.bc}u)", "ks")
        if not self.vg:
            self._load_kv(b, "v", f"(c0 + {self.bc}u)", None)
        b.line("  }")
        b.line("  if (blk + 2u < nblocks) {")
        self._load_kv(b, "k", f"(c0 + {2 * self.bc}u)", None)
        b.line("  }")
        b.line("  workgroupBarrier();  // p^T, v, and the next block's k in workgroup memory")
        self._accumulate(b, "" if self.vg else "vs")
        b.line("}")

    def _declare(self, b: WgslBuilder) -> None:
        br4 = self.br // 4
        if self.q_smem:
            b.workgroup_var(f"qs: array<vec4<f32>, {self.br * self.qstride}>")  # q: [row][d / 4], rows padded
        if self.kv_alias:
            b.workgroup_var(f"kv: array<vec4<f32>, {max(self.ks, self.dv // 4) * self.bc}>")  # k, then v
        else:
            b.workgroup_var(f"ks: array<vec4<f32>, {self.ks * self.bc}>")  # k: [key][d / 4], padded or swizzled
            if not self.vg:
                b.workgroup_var(f"vs: array<vec4<f32>, {self.bc * self.dv // 4}>")  # v: [key][d / 4]
        if self.key_range:
            b.workgroup_var("key_lo: atomic<u32>")
            b.workgroup_var("key_hi: atomic<u32>")
            b.workgroup_var("key_span: vec2<u32>")
        b.workgroup_var(f"ps: array<vec4<f32>, {self.bc * br4}>")  # p^T: [key][row / 4]
        if not self.sg:
            b.workgroup_var(f"red: array<vec4<f32>, {br4 * self.tx}>")

    def _prologue(self, b: WgslBuilder) -> None:
        """Which (batch, head, row block) this workgroup owns, its key range, q staged, state zeroed."""
        b.line("if (params.lq == 0u || params.bh == 0u) { return; }  // nothing to compute (and no row to clamp to)")
        if self.arg.causal and self.lpt:
            # later row blocks see more keys: the last row block of every head starts first, then the one
            # before... (workgroups start in index order; the longest first leaves the shortest for the tail)
            b.line("let bh = wg % params.bh;")
            b.line("if (wg / params.bh >= params.qblocks) { return; }")
            b.line(f"let r0 = (params.qblocks - 1u - wg / params.bh) * {self.br}u;")
        else:  # a head's row blocks side by side: they share its k and v in the cache
            b.line("let bh = wg / params.qblocks;")
            b.line("if (bh >= params.bh) { return; }")
            # causal: later row blocks see more keys; within a head they start first
            qb = "params.qblocks - 1u - wg % params.qblocks" if self.arg.causal else "wg % params.qblocks"
            b.line(f"let r0 = ({qb}) * {self.br}u;")
        b.line("let bi = bh / params.heads;")
        b.line("let hq = bh % params.heads;")
        b.line("let hk = hq / params.group;")
        b.line(f"let tx = lidx % {self.tx}u;")
        b.line(f"let ty = lidx / {self.tx}u;")
        if self.sw:  # where this thread's keys keep their vec4s (k swizzled: key c's vec4 d at d ^ (c % 8))
            for j in range(self.rn):
                b.line(f"let kx{j} = ({j * self.tx}u + tx) & 7u;")
        for name, head in (("q", "hq"), ("k", "hk"), ("v", "hk")):
            b.line(
                f"let {name}_base = i32(params.{name}_off) + i32(bi) * params.{name}_sb + i32({head}) * params.{name}_sh;"
            )
        inf = infinity(b)
        b.line(f"let ninf = -{inf};")
        if self.arg.causal:  # rows below r0 + br see keys j < r0 + br + S - Lq
            b.line(f"let last = i32(r0 + {self.br}u) + i32(params.s) - i32(params.lq);")
            b.line("var kv_end = u32(clamp(last, 0, i32(params.s)));")
        else:
            b.line("var kv_end = params.s;")
        b.line("var kv_begin = 0u;")
        if self.key_range:
            self._key_range(b)
        b.line(f"let nblocks = (kv_end + {self.bc - 1}u) / {self.bc}u;")
        b.line(f"let blk0 = kv_begin / {self.bc}u;")
        scale = "params.scale2"
        if self.arg.scale_by:  # a scalar operand scales the scores (passes.fuse_attention)
            c = f"f32({self.in_name(self.arg.operand('scale'))}[params.scale_off])"
            scale = f"{scale} * {c}" if self.arg.scale_by == "mul" else f"{scale} / {c}"
        b.line(f"let scale2 = {scale};")
        if self.arg.fill:  # the score of a key the mask hides, in log2 units
            b.line(f"let fill2 = vec4<f32>(f32({self.in_name(self.arg.operand('fill'))}[params.fill_off]) * {LOG2E});")
        for ri in range(4):
            b.line(f"let row{ri} = r0 + ty + {ri * self.ty}u;")
            b.line(f"let qrow{ri} = min(row{ri}, params.lq - 1u);  // rows past lq compute, never store")
        if self.q_smem:
            self._load_q(b)
        if self.qr:
            self._load_q_registers(b)
        b.line("var m_run = vec4<f32>(ninf);")
        b.line("var l_run = vec4<f32>(0.0);")
        for ri in range(4):
            for g in range(self.gd):
                b.line(f"var o{ri}_{g} = vec4<f32>(0.0);")
        if self.arg.mask != "none":
            for ri in range(4):
                b.line(
                    f"let mrow{ri} = i32(params.m_off) + i32(bi) * params.m_sb + i32(hq) * params.m_sh + i32(qrow{ri}) * params.m_sl;"
                )

    def _key_range(self, b: WgslBuilder) -> None:
        """[kv_begin, kv_end): from the first to past the last key the mask lets through (all rows share it).

        Blocks outside hold only hidden keys, whose weights are exactly 0: skipping them changes no
        finite result (a row seeing no key stays 0 / 0 = NaN)."""
        threads = self.ty * self.tx
        seen = "!= 0u" if not self.arg.hide else "== 0u"
        b.line("if (lidx == 0u) { atomicStore(&key_lo, 0xffffffffu); atomicStore(&key_hi, 0u); }")
        b.line("workgroupBarrier();")
        b.line("{")
        b.line("  let mrow = i32(params.m_off) + i32(bi) * params.m_sb + i32(hq) * params.m_sh;")
        b.line("  var lo = 0xffffffffu;")
        b.line("  var hi = 0u;")
        # only the ends of runs of kept keys take part (a padding mask: one thread each), so few threads
        # contend for the workgroup's atomics
        keep = f"(u32({self.in_name(3)}[u32(mrow + i32({{}}) * params.m_sx)]) {seen})"
        b.line(f"  for (var j = lidx; j < kv_end; j += {threads}u) {{")
        b.line(f"    if {keep.format('j')} {{")
        b.line(f"      if (j == 0u || !{keep.format('j - 1u')}) {{ lo = min(lo, j); }}")
        b.line(f"      if (j + 1u == kv_end || !{keep.format('j + 1u')}) {{ hi = max(hi, j + 1u); }}")
        b.line("    }")
        b.line("  }")
        b.line("  if (lo != 0xffffffffu) { atomicMin(&key_lo, lo); }")
        b.line("  if (hi > 0u) { atomicMax(&key_hi, hi); }")
        b.line("}")
        b.line("workgroupBarrier();")
        b.line("if (lidx == 0u) { key_span = vec2<u32>(atomicLoad(&key_lo), atomicLoad(&key_hi)); }")
        b.line("let span = workgroupUniformLoad(&key_span);  // uniform: the key loop holds barriers")
        b.line("kv_end = span.y;")
        b.line("kv_begin = min(span.x, span.y);")

    def _load_q(self, b: WgslBuilder) -> None:
        """q into qs as loaded: qs[row * ks + d / 4] (zeros past lq and dk), once per workgroup."""
        threads = self.ty * self.tx
        per = self.dk // 4 if self.v4 else self.dk
        items = self.br * per
        for li in range(-(-items // threads)):
            e = f"(lidx + {li * threads}u)"
            guard = f"{e} < {items}u" if (li + 1) * threads > items else ""
            b.line(f"{'if (' + guard + ') ' if guard else ''}{{")
            b.line(f"  let r = {e} / {per}u;")
            b.line(f"  let dd = {e} % {per}u;")
            b.line("  let row = r0 + r;")
            if self.v4:
                b.line("  var x = vec4<f32>(0.0);")
                b.line("  if (row < params.lq && dd * 4u < params.dk) {")
                b.line(
                    f"    x = vec4<f32>({self.in_name(0)}[u32(q_base + i32(row) * params.q_sl + i32(dd * 4u)) / 4u]);"
                )
                b.line("  }")
                b.line(f"  qs[r * {self.qstride}u + dd] = x;")
            else:
                b.line("  var x = 0.0;")
                b.line("  if (row < params.lq && dd < params.dk) {")
                b.line(f"    x = f32({self.in_name(0)}[u32(q_base + i32(row) * params.q_sl + i32(dd) * params.q_sx)]);")
                b.line("  }")
                b.line(f"  qs[r * {self.qstride}u + dd / 4u][dd % 4u] = x;")
            b.line("}")

    def _load_q_registers(self, b: WgslBuilder) -> None:
        """`qr`: qt{i}_{l}, a vec4 over the thread's 4 rows of head dim 4 (tx + i tx_threads) + l, for the
        whole key loop (rows past lq read the last row, as everywhere); kc{c}, where this lane's c-th key
        of a chunk (c ^ tx) starts in k's workgroup memory, at its own head dims."""
        for c in range(self.tx):
            b.line(f"let kc{c} = (tx ^ {c}u) * {self.ks}u + tx;")
        for i in range(self.nq):
            d = f"i32((tx + {i * self.tx}u) * 4u)"
            for ri in range(4):
                row = f"q_base + i32(qrow{ri}) * params.q_sl + {d}"
                b.line(f"let qa{i}_{ri} = vec4<f32>({self.in_name(0)}[u32({row}) / 4u]);")
            for lane, c in enumerate("xyzw"):
                b.line(f"let qt{i}_{lane} = vec4<f32>(qa{i}_0.{c}, qa{i}_1.{c}, qa{i}_2.{c}, qa{i}_3.{c});")

    def _shuffle_masks(self) -> list[int]:
        """The lane masks of the butterfly over a row group's tx lanes, the highest first."""
        return [1 << e for e in reversed(range(self.tx.bit_length() - 1))]

    def _kv_items(self, which: str) -> tuple[int, int, int]:
        """(loads per key row, loads per block, loads per thread) of k or v."""
        per = (self.dk if which == "k" else self.dv) // (4 if self.v4 else 1)
        items = self.bc * per
        return per, items, -(-items // (self.ty * self.tx))

    def _load_kv(self, b: WgslBuilder, which: str, c0: str, arr: str | None) -> None:
        """Block c0 of k or v into workgroup memory as [key][d / 4], zeros past S and the head dim.

        With prefetching (`pf`), arr None loads block c0 into this thread's registers p{which}{li},
        and a named arr stores those registers (loaded one block earlier) instead of loading."""
        threads = self.ty * self.tx
        src = self.in_name(1 if which == "k" else 2)
        dim = "params.dk" if which == "k" else "params.dv"
        per, items, n = self._kv_items(which)
        for li in range(n):
            e = f"(lidx + {li * threads}u)"
            guard = f"{e} < {items}u" if (li + 1) * threads > items else ""
            b.line(f"  {'if (' + guard + ') ' if guard else ''}{{")
            b.line(f"    let c = {e} / {per}u;")
            b.line(f"    let dd = {e} % {per}u;")
            if self.pf and arr is not None:
                b.line(f"    let x = p{which}{li};")
                self._store_kv(b, which, arr)
                b.line("  }")
                continue
            b.line(f"    let key = {c0} + c;")
            row = f"{which}_base + i32(key) * params.{which}_sl"
            x = "x" if arr is not None else f"p{which}{li}"
            zero = "vec4<f32>(0.0)" if self.v4 else "0.0"
            if arr is not None:
                b.line(f"    var x = {zero};")
            else:  # a register still holding the previous block's value
                b.line(f"    {x} = {zero};")
            if self.v4:
                b.line(
                    f"    if (key < params.s && dd * 4u < {dim}) {{ {x} = vec4<f32>({src}[u32({row} + i32(dd * 4u)) / 4u]); }}"
                )
            else:
                b.line(
                    f"    if (key < params.s && dd < {dim}) {{ {x} = f32({src}[u32({row} + i32(dd) * params.{which}_sx)]); }}"
                )
            if arr is not None:
                self._store_kv(b, which, arr)
            b.line("  }")

    def _store_kv(self, b: WgslBuilder, which: str, arr: str) -> None:
        """As loaded: consecutive threads store consecutive vec4s of a key's row (no bank conflicts; swizzled,
        k's vec4s are permuted within each aligned 8)."""
        stride = self.ks if which == "k" else self.dv // 4
        d = "dd" if self.v4 else "dd / 4u"
        if which == "k" and self.sw:
            d = f"({d} ^ (c & 7u))"
        b.line(f"    {arr}[c * {stride}u + {d}]{'' if self.v4 else '[dd % 4u]'} = x;")

    def _scores(self, b: WgslBuilder) -> None:
        """s{j} (vec4 over this thread's 4 rows) for its keys j: the dot products over the head dim.

        Key j of thread tx is tx + j * tx_threads: the tx threads of a row group read consecutive
        rows of k (odd stride: distinct banks), and the row group's q is one broadcast read."""
        karr = "kv" if self.kv_alias else "ks"
        for j in range(self.rn):
            b.line(f"  var s{j} = vec4<f32>(0.0);")
        if self.qr:
            self._scores_split(b, karr)
            return
        # `un`: unrolled here (d4 a constant in each copy): no loop for the driver to keep bounded or to
        # unroll, so it can schedule the next step's loads under this one's FMAs
        for head in self._steps("d4", self.dk // 4):
            b.line(head)
            self._score_step(b, karr)
            b.line("  }")

    def _scores_split(self, b: WgslBuilder, karr: str) -> None:
        """`qr`: per chunk j of tx keys, this thread's partial dot products (over its head dims, 4 rows at
        once) with every key of the chunk, then a butterfly of subgroup shuffles that sums each key's
        partials over the row group's lanes and leaves key j tx_threads + tx with lane tx: s{j}, as _scores
        gives it.

        Lane tx keeps the partial of the chunk's key c ^ tx at position c (kc{c}). At the shuffle across
        bit h, the keys a lane passes on (their bit h not its own) are then those at positions with bit h
        set, and what its partner sends from the same position is the partner's partial of the key the
        lane keeps: a[c] += shuffleXor(a[c | h], h) for the positions c without h, the same for every lane
        (no select), tx - 1 vec4 shuffles a chunk. Position 0 ends with key tx."""
        masks = self._shuffle_masks()
        for j in range(self.rn):
            b.line("  {")
            # position c + h right before c and shuffled into it at once: half the partials live at a time
            half = masks[0]
            for c in range(half):
                for pos in (c + half, c):
                    b.line(f"    var a{pos} = vec4<f32>(0.0);")
                    for i in range(self.nq):
                        b.line(f"    {{ let kk = {karr}[kc{pos} + {j * self.tx * self.ks + i * self.tx}u];")
                        for lane, ch in enumerate("xyzw"):
                            b.line(f"      a{pos} = fma(qt{i}_{lane}, vec4<f32>(kk.{ch}), a{pos});")
                        b.line("    }")
                b.line(f"    a{c} += subgroupShuffleXor(a{c + half}, {half}u);")
            for h in masks[1:]:
                for c in range(h):  # the positions below h hold what is left
                    b.line(f"    a{c} += subgroupShuffleXor(a{c + h}, {h}u);")
            b.line(f"    s{j} = a0;")
            b.line("  }")

    def _steps(self, var: str, n: int) -> list[str]:
        """The openings of a loop of n steps over `var`: one loop, or n blocks with `var` a constant (`un`)."""
        if self.unroll:
            return [f"  {{ let {var} = {i}u;" for i in range(n)]
        return [f"  for (var {var} = 0u; {var} < {n}u; {var}++) {{"]

    def _score_step(self, b: WgslBuilder, karr: str) -> None:
        """One vec4 of head dims d4: the 4 rows' q, the thread's keys' k, 16 rn FMAs."""
        if self.q_smem:  # each row's 4 head dims: the row group's 4 rows are consecutive (distinct banks)
            for ri in range(4):
                b.line(f"    let qr{ri} = qs[(ty + {ri * self.ty}u) * {self.qstride}u + d4];")
        elif self.v4:  # each row's 4 head dims from memory, turned into 4 vec4s over rows
            for ri in range(4):
                b.line(
                    f"    let qr{ri} = vec4<f32>({self.in_name(0)}[u32(q_base + i32(qrow{ri}) * params.q_sl + i32(d4 * 4u)) / 4u]);"
                )
        for j in range(self.rn):
            d4 = f"(d4 ^ kx{j})" if self.sw else "d4"  # the swizzle: key c's vec4 d at d ^ (c % 8)
            b.line(f"    let k{j} = {karr}[({j * self.tx}u + tx) * {self.ks}u + {d4}];")
        for lane, c in enumerate("xyzw"):
            d = f"d4 * 4u + {lane}u"
            if self.q_smem or self.v4:
                q = f"vec4<f32>(qr0.{c}, qr1.{c}, qr2.{c}, qr3.{c})"
            else:  # scalars through any strides; the padding past dk reads 0
                dd = f"i32(min({d}, max(params.dk, 1u) - 1u)) * params.q_sx"
                rows = ", ".join(
                    f"f32({self.in_name(0)}[u32(q_base + i32(qrow{ri}) * params.q_sl + {dd})])" for ri in range(4)
                )
                q = f"select(vec4<f32>(0.0), vec4<f32>({rows}), {d} < params.dk)"
            b.line(f"    {{ let qv = {q};")
            for j in range(self.rn):
                b.line(f"      s{j} = fma(qv, vec4<f32>(k{j}.{c}), s{j});")
            b.line("    }")

    def _key_index(self, j: int) -> str:
        return f"(c0 + {j * self.tx}u + tx)"

    def _mask(self, b: WgslBuilder) -> None:
        """Scale to log2 units, add or apply the mask, hide keys past S (and past the causal limit)."""
        arg = self.arg
        if arg.causal:
            b.line("  let shift = i32(params.s) - i32(params.lq);")
        for j in range(self.rn):
            key = self._key_index(j)
            b.line(f"  {{ let key = {key};")
            b.line(f"    var sc = s{j} * scale2;")
            lanes = ["key < params.s"] * 4
            if arg.mask != "none":
                b.line("    let mk = i32(min(key, params.s - 1u)) * params.m_sx;")
                vals = [f"{self.in_name(3)}[u32(mrow{ri} + mk)]" for ri in range(4)]
                if self.mask_row0:
                    b.line(f"    let m0 = {vals[0]};")
                    vals = ["m0"] * 4
                if arg.mask == "bool":
                    b.line(f"    let mb = vec4<u32>({', '.join(vals)}) {'==' if arg.hide else '!='} vec4<u32>(0u);")
                    if arg.fill:  # hidden keys score `fill`; keys past S and the causal limit stay -inf
                        b.line("    sc = select(fill2, sc, mb);")
                    else:
                        lanes = [f"{lane} && mb.{c}" for lane, c in zip(lanes, "xyzw")]
                else:
                    b.line(f"    sc = fma(vec4<f32>({', '.join(f'f32({v})' for v in vals)}), vec4<f32>({LOG2E}), sc);")
            if arg.causal:
                lanes = [f"{lane} && i32(key) <= i32(row{ri}) + shift" for ri, lane in enumerate(lanes)]
            b.line(f"    let seen = vec4<bool>({', '.join(lanes)});")
            b.line(f"    s{j} = select(vec4<f32>(ninf), sc, seen);")
            b.line("  }")

    def _row_max(self, b: WgslBuilder) -> None:
        """`mx`: each of the thread's 4 rows' max over the block (all tx threads of the row group agree)."""
        parts = [f"s{j}" for j in range(self.rn)]
        expr = parts[0]
        for p in parts[1:]:
            expr = f"max({expr}, {p})"
        b.line(f"  var mx = {expr};")
        if self.sg:
            h = self.tx // 2
            while h:
                b.line(f"  mx = max(mx, subgroupShuffleXor(mx, {h}u));")
                h //= 2
            return
        b.line(f"  red[ty * {self.tx}u + tx] = mx;")
        b.line("  workgroupBarrier();")
        for t in range(self.tx):
            b.line(f"  mx = max(mx, red[ty * {self.tx}u + {t}u]);")

    def _softmax_step(self, b: WgslBuilder) -> None:
        """The online softmax: new max, rescale o and l, p = exp2(s - m) into p^T."""
        self._row_max(b)
        b.line("  let m_new = max(m_run, mx);")
        # a row that has seen only -inf keeps m = -inf: exp2 against 0 then gives p = 0, alpha = 0
        b.line("  let m_use = select(m_new, vec4<f32>(0.0), m_new == vec4<f32>(ninf));")
        b.line("  let alpha = exp2(m_run - m_use);")
        b.line("  m_run = m_new;")
        b.line("  var psum = vec4<f32>(0.0);")
        for j in range(self.rn):
            col = f"({j * self.tx}u + tx)"
            b.line(f"  {{ let p = exp2(s{j} - m_use); psum += p; ps[{col} * {self.ty}u + ty] = p; }}")
        b.line("  l_run = l_run * alpha + psum;")
        for ri, c in enumerate("xyzw"):
            for g in range(self.gd):
                b.line(f"  o{ri}_{g} *= alpha.{c};")

    def _accumulate(self, b: WgslBuilder, arr: str) -> None:
        """o += p v over the block's keys: per key, this thread's 4 rows of p^T times its head dims of v.

        Unrolled (`un`, see _scores), or a loop of 4 keys per iteration."""
        if self.unroll:
            for c in range(self.bc):
                b.line(f"    {{ let c = {c}u;")
                self._pv_key(b, arr)
            return
        b.line(f"  for (var c4 = 0u; c4 < {self.bc // 4}u; c4++) {{")
        for i in range(4):
            b.line(f"    {{ let c = c4 * 4u + {i}u;")
            self._pv_key(b, arr)
        b.line("  }")

    def _pv_key(self, b: WgslBuilder, arr: str) -> None:
        """Key c of the block: o += p^T[c] (4 rows) * v[c] (this thread's head dims); closes c's scope."""
        b.line(f"      let pv = ps[c * {self.ty}u + ty];")
        if not arr:  # v from memory: a row group's threads read one contiguous run of a key's row
            b.line("      let vkey = c0 + c;")
            b.line("      let vrow = v_base + i32(min(vkey, params.s - 1u)) * params.v_sl;")
        for g in range(self.gd):
            if arr:
                b.line(f"      let vv{g} = {arr}[c * {self.dv // 4}u + {g * self.tx}u + tx];")
            else:  # keys past S (p = 0) and head dims past dv read 0, never another row's inf or NaN
                d = f"({g * self.tx}u + tx) * 4u"
                ok = "vkey < params.s" + ("" if self.dv == self.true_dv else f" && {d} < params.dv")
                dd = d if self.dv == self.true_dv else f"min({d}, params.dv - 4u)"
                val = f"vec4<f32>({self.in_name(2)}[u32(vrow + i32({dd})) / 4u])"
                b.line(f"      let vv{g} = select(vec4<f32>(0.0), {val}, {ok});")
            for ri, ch in enumerate("xyzw"):
                b.line(f"      o{ri}_{g} = fma(vec4<f32>(pv.{ch}), vv{g}, o{ri}_{g});")
        b.line("    }")

    def _finish(self, b: WgslBuilder) -> None:
        """l summed over the row group's threads; o / l stored (a row with no key: 0 / 0 = NaN; S == 0: 0)."""
        b.line("var lsum = l_run;")
        if self.sg:
            h = self.tx // 2
            while h:
                b.line(f"lsum += subgroupShuffleXor(lsum, {h}u);")
                h //= 2
        else:
            b.line("workgroupBarrier();")
            b.line(f"red[ty * {self.tx}u + tx] = lsum;")
            b.line("workgroupBarrier();")
            b.line("lsum = vec4<f32>(0.0);")
            for t in range(self.tx):
                b.line(f"lsum += red[ty * {self.tx}u + {t}u];")
        b.line("let inv = select(vec4<f32>(1.0) / lsum, vec4<f32>(0.0), params.s == 0u);")
        ot = vtype(self.node.dtype, 1)
        for ri, ch in enumerate("xyzw"):
            b.line(f"if (row{ri} < params.lq) {{")
            if self.arg.heads_inner:  # (B, Lq, H, Ev): the row holds every head's values
                b.line(f"  let obase = ((bi * params.lq + row{ri}) * params.heads + hq) * params.dv;")
            else:
                b.line(f"  let obase = (bh * params.lq + row{ri}) * params.dv;")
            for g in range(self.gd):
                b.line(f"  {{ let d = ({g * self.tx}u + tx) * 4u;")
                val = f"o{ri}_{g} * inv.{ch}"
                if self.o4:
                    b.line(f"    if (d < params.dv) {{ out[(obase + d) / 4u] = vec4<{ot}>({val}); }}")
                else:
                    b.line(f"    let y = {val};")
                    for lane, c in enumerate("xyzw"):
                        b.line(f"    if (d + {lane}u < params.dv) {{ out[obase + d + {lane}u] = {ot}(y.{c}); }}")
                b.line("  }")
            b.line("}")
