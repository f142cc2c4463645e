"""A register-blocked GEMM: large output tiles, vec4 loads, double-buffered workgroup memory.

Each workgroup computes a tile_m x tile_n block of C; each thread a (tile_m / wy) x (tile_n / wx)
block held in vec4 registers, so one k step costs 2 + 2 workgroup-memory vec4 reads per
64 FMAs (for 8x8 per thread). The tiles of A and B for the next k step are loaded from
global memory into registers while the current step computes, then stored to the other
half of workgroup memory: one barrier per k step.

How each operand is read is the variant, chosen by passes.select_kernels from the views:
  A: a_k4 (contiguous along k, vec4 loads), a_m4 (contiguous along m), a_s (any strides)
  B: b_n4 (contiguous along n, vec4 loads), b_k4 (contiguous along k: x @ W.T), b_s
  C: o4 (vec4 stores, n % 4 == 0) or o1; a float32 bias added first is where the sums start (`bi`)
  .x (exact): the tiles cover m, n and k exactly, so no load or store checks an edge
Elsewhere edges read zeros and skip their stores, so every size is correct. Workgroup memory always
holds f32 as A[k][m] and B[k][n] (vec4 along m and n), whatever the operand dtype.
Tiles are walked in groups of `group_m` tile rows so neighbouring workgroups share B in L2.
The `cf` param (conflict-free) pads each k row of a tile stored transposed (operands read along k
or as scalars) by one vec4 and has each 32 threads load 16 rows by 2 quads of k, so their
stores hit 32 distinct banks. The `lanes` param (x, y) lays each 32-lane subgroup on an x-by-y block of threads (rows of
wx threads otherwise): a subgroup then reads fewer distinct A and B vectors per k step.
The `slices` of a configuration (the workgroup's z size) split each k tile among that many
planes of wx x wy threads (sliced k): plane s runs k steps s * tk / slices onwards on the same
output tile, all planes load the tiles together, and at the end planes 1.. hand their
accumulators through workgroup memory to plane 0, which adds them and stores. More threads per
output tile (latency hidden on a GPU that small problems leave half idle) at the same register
blocking.
All code inside the k loop is unrolled here in Python: no arrays of accumulators, so the
driver keeps them in registers.
"""

from __future__ import annotations

from backend_wgpu.kernel import Workload
from backend_wgpu.kernels.matmul.base import MatmulKernel, rule_said
from backend_wgpu.wgsl import WgslBuilder, vtype
from ir.dtypes import DType
from ir.graph import Graph
from ir.node import Node
from ir.ops import Op
from ir.view import View


class BlockedGemmKernel(MatmulKernel):
    name = "gemm_blocked"

    def __init__(self, node: Node, graph: Graph, max_workgroups: int = 65535) -> None:
        super().__init__(node, graph, max_workgroups)
        self.bias = self._bias_leaf()
        if self.bias is not None:
            self.code.folded = self.bias[0]

    def _bias_leaf(self) -> tuple[int, int] | None:
        """(the term, the leaf) of a bias added to the product first, which the sums then start from.

        `x @ W + b` with b broadcast over the rows (a `row` leaf), in float32: each thread's
        accumulators start at b's values for their columns, and the epilogue starts after the add
        (nothing left for `linear`'s bias: the plain store). In the epilogue it cost about a fifth of
        MiniLM's 4096x1152x384 product (run Y, epilogue.txt). The sum then rounds in another order.
        """
        code, core = self.code, self.core
        if code is None or core.dtype is not DType.float32:
            return None
        readers = [t for t in self.node.arg.terms if core.id in t.srcs]
        if len(readers) != 1 or readers[0].op is not Op.ADD or readers[0].dtype is not DType.float32:
            return None
        (t,) = readers
        other = [s for s in t.srcs if s != core.id]
        if len(other) != 1 or self.node.arg.is_term(other[0]):
            return None
        leaf = self.node.arg.leaf_index(other[0])
        if code.modes.get(leaf) != "row" or self.operands[leaf].dtype is not DType.float32:
            return None
        return t.id, leaf

    @classmethod
    def reason(cls, graph: Graph, node: Node) -> str:
        k = node.kernel
        tiles = "x".join(str(k.param(p)) for p in ("tile_m", "tile_n", "tile_k"))
        rule = rule_said(node)
        edges = ", no edge checks" if k.variant.endswith(".x") else ""
        return f"general matmul: {k.param('config')} tiles {tiles}, register-blocked, loads {k.variant}{edges}; {rule}"

    @classmethod
    def width_reason(cls, node: Node, views: list[View]) -> str:
        return ""  # its variant names how each operand is loaded (a_k4: vec4 along k, ...)

    # --- variant decoding -------------------------------------------------------------
    def _modes(self) -> tuple[str, str, str]:
        a, b, o = self.choice.variant.split(".")[:3]
        return a, b, o

    @property
    def h16(self) -> bool:
        """f16 products (h16): workgroup memory holds f16, each tile's products are summed in f16 (two
        per lane-instruction on most GPUs) and added to f32 accumulators once per tile. Only for f16
        operands, and only where asked for: it rounds more than an f32 sum (select_kernels)."""
        return bool(self.choice.param("h16"))

    def unchecked(self) -> bool:
        """The `unchecked` configurations of exact tiles: every index is in range by construction (tiles
        inside m and n, k tiles inside k, workgroup-memory indices below their stage sizes)."""
        return bool(self.choice.param("unchecked")) and self.exact

    @property
    def exact(self) -> bool:
        """The tiles cover the problem exactly (passes.select_kernels checked the shapes): no edge checks."""
        return self.choice.variant.endswith(".x")

    @property
    def slices(self) -> int:
        """Planes of wx x wy threads splitting each k tile (the workgroup's z size)."""
        return self.choice.workgroup[2]

    def _tiles(self) -> tuple[int, int, int, int, int]:
        tm, tn, tk = self.choice.param("tile_m"), self.choice.param("tile_n"), self.choice.param("tile_k")
        wx, wy, _ = self.choice.workgroup
        return tm, tn, tk, wx, wy

    def variant_key(self) -> str:
        tm, tn, tk, _, _ = self._tiles()
        fused = f":{self.code.key()}" if self.code else ""
        lanes = self.choice.param("lanes")
        lanes = f":l{lanes[0]}x{lanes[1]}" if lanes else ""
        cf = ":cf" if self.choice.param("cf") else ""
        cf += ":h16" if self.h16 else ""
        cf += ":u" if self.unchecked() else ""
        cf += f":s{self.slices}" if self.slices > 1 else ""
        cf += ":bi" if self.bias is not None else ""
        return f"{self.choice.variant}:{tm}x{tn}x{tk}:g{self.choice.param('group_m', 8)}{lanes}{cf}{fused}"

    def operand_type(self, i: int) -> str:
        role = self.role(i)
        if role == "epilogue":
            return self.code.operand_type(i)
        mode = self._modes()[0 if role == "a" else 1]
        return vtype(self.operands[i].dtype, 1 if mode.endswith("_s") else 4, storage=True)

    def output_type(self) -> str:
        return vtype(self.node.dtype, 4 if self._modes()[2] == "o4" else 1, storage=True)

    def calculate_dispatch(self) -> Workload:
        batch, m, n, _ = self._dims()
        tm, tn, _, _, _ = self._tiles()
        return Workload.for_workgroups(batch * -(-m // tm) * -(-n // tn), self.choice.workgroup, self.max_workgroups)

    # --- rendering ----------------------------------------------------------------------
    def render(self, b: WgslBuilder) -> None:
        tm, tn, tk, wx, wy = self._tiles()
        slices = self.slices
        threads = wx * wy * slices
        rm, rn = tm // wy, tn // wx  # rows / columns per thread
        gn_ = rn // 4  # vec4 groups per thread along n
        assert rm % 4 == 0 and rn % 4 == 0 and tk % 4 == 0, "gemm_blocked: per-thread blocks must be multiples of 4"
        assert tk % slices == 0, "gemm_blocked: the k slices must split the k tile"
        stage_a, stage_b = tk * self._row("a"), tk * self._row("b")  # vec4 per stage
        elem = "vec4<f16>" if self.h16 else "vec4<f32>"
        b.workgroup_var(f"sa: array<{elem}, {2 * stage_a}>")
        b.workgroup_var(f"sb: array<{elem}, {2 * stage_b}>")
        if slices > 1:  # planes 1.. hand their accumulators to plane 0 here
            b.workgroup_var(f"sred: array<vec4<f32>, {tm * tn // 4}>")
        if self.code:
            self.code.describe(b)
        self._tile_origin(b)
        self._batch_offsets(b, "bt")
        self._thread_position(b, wx, wy)
        self._init_accumulators(b, rm, gn_, wx)
        a_loads = self._declare_loads(b, "a", tm * tk, threads)
        b_loads = self._declare_loads(b, "b", tn * tk, threads)

        b.line(f"let ntiles = (params.k + {tk - 1}u) / {tk}u;")
        self._emit_load(b, "a", "0u", a_loads, threads)
        self._emit_load(b, "b", "0u", b_loads, threads)
        self._emit_store(b, "a", "0u", a_loads, threads)
        self._emit_store(b, "b", "0u", b_loads, threads)
        b.line("workgroupBarrier();")
        if slices > 1:  # this plane's first k step within a tile
            steps = tk // slices
            b.line(f"let slice_a = plane_k * {steps * self._row('a')}u;")
            b.line(f"let slice_b = plane_k * {steps * self._row('b')}u;")
        b.line("for (var t = 0u; t < ntiles; t++) {")
        if slices > 1:
            b.line(f"  let cur_a = (t & 1u) * {stage_a}u + slice_a;")
            b.line(f"  let cur_b = (t & 1u) * {stage_b}u + slice_b;")
        else:
            b.line(f"  let cur_a = (t & 1u) * {stage_a}u;")
            b.line(f"  let cur_b = (t & 1u) * {stage_b}u;")
        b.line(f"  let k_next = (t + 1u) * {tk}u;")
        # the next tile's global loads are in flight while this tile computes; exact tiles have no
        # edge checks, so the last step skips them (a uniform branch) instead of reading past k
        indent = "    " if self.exact else "  "
        if self.exact:
            b.line("  if (k_next < params.k) {")
        self._emit_load(b, "a", "k_next", a_loads, threads, indent=indent)
        self._emit_load(b, "b", "k_next", b_loads, threads, indent=indent)
        if self.exact:
            b.line("  }")
        if self.h16:  # this tile's products summed in f16, then added to the f32 accumulators
            for r in range(rm):
                for h in range(gn_):
                    b.line(f"  var h{r}_{h} = vec4<f16>(0.0);")
        for kk in range(tk // slices):
            self._k_step(b, kk)
        if self.h16:
            for r in range(rm):
                for h in range(gn_):
                    b.line(f"  c{r}_{h} += vec4<f32>(h{r}_{h});")
        b.line(f"  let nxt_a = {stage_a}u - (t & 1u) * {stage_a}u;")
        b.line(f"  let nxt_b = {stage_b}u - (t & 1u) * {stage_b}u;")
        self._emit_store(b, "a", "nxt_a", a_loads, threads, indent="  ")
        self._emit_store(b, "b", "nxt_b", b_loads, threads, indent="  ")
        b.line("  workgroupBarrier();")
        b.line("}")
        if slices > 1:
            self._reduce_slices(b, rm, gn_, wx * wy)
            b.line("if (plane_k == 0u) {")
        self._emit_output(b, rm, gn_, wx, wy)
        if slices > 1:
            b.line("}")

    def _init_accumulators(self, b: WgslBuilder, rm: int, gn_: int, wx: int) -> None:
        """Zeros, or the folded bias of each column (plane 0 only where planes split k): `_bias_leaf`."""
        if self.bias is None:
            for r in range(rm):
                for h in range(gn_):
                    b.line(f"var c{r}_{h} = vec4<f32>(0.0);")
            return
        i = self.bias[1]
        last = len(self.operands[i].view.shape) - 1
        for h in range(gn_):
            b.line(f"let bcol{h} = tn0 + ({h * wx}u + tx) * 4u;")
            b.line(f"var bias{h} = vec4<f32>(0.0);")
            # the other planes' sums are added to plane 0's; past n (edge tiles) nothing is read
            guards = (["plane_k == 0u"] if self.slices > 1 else []) + (
                [] if self.exact else ["bcol{h} + {j}u < params.n"]
            )
            for j, lane in enumerate("xyzw"):
                load = f"in{i}[u32(i32(params.off{i}) + i32(bcol{h} + {j}u) * params.st{i}_{last})]"
                cond = " && ".join(g.format(h=h, j=j) for g in guards)
                b.line(f"if ({cond}) {{ bias{h}.{lane} = {load}; }}" if cond else f"bias{h}.{lane} = {load};")
        for r in range(rm):
            for h in range(gn_):
                b.line(f"var c{r}_{h} = bias{h};")

    def _reduce_slices(self, b: WgslBuilder, rm: int, gn_: int, plane: int) -> None:
        """Planes 1.. in turn store their accumulators (consecutive threads, consecutive vec4s) into one
        tile-sized buffer; plane 0 adds each (in plane order: the sum's rounding is fixed)."""
        b.line(f"for (var sl = 1u; sl < {self.slices}u; sl++) {{")
        b.line("  if (plane_k == sl) {")
        for r in range(rm):
            for h in range(gn_):
                b.line(f"    sred[{(r * gn_ + h) * plane}u + pidx] = c{r}_{h};")
        b.line("  }")
        b.line("  workgroupBarrier();")
        b.line("  if (plane_k == 0u) {")
        for r in range(rm):
            for h in range(gn_):
                b.line(f"    c{r}_{h} += sred[{(r * gn_ + h) * plane}u + pidx];")
        b.line("  }")
        b.line("  workgroupBarrier();")
        b.line("}")

    def _thread_position(self, b: WgslBuilder, wx: int, wy: int) -> None:
        """`tx`, `ty`: this thread's column and row in its plane's wx x wy grid of threads (`pidx`: its
        index in the plane, `plane_k`: the plane, the k slice it runs)."""
        lanes = self.choice.param("lanes")
        if self.slices > 1:
            b.line(f"let pidx = lidx % {wx * wy}u;")
            b.line(f"let plane_k = lidx / {wx * wy}u;")
        else:
            b.line("let pidx = lidx;")
        if lanes is None:
            b.line(f"let tx = pidx % {wx}u;")
            b.line(f"let ty = pidx / {wx}u;")
            return
        lx, ly = lanes
        assert lx * ly == 32 and wx % lx == 0 and wy % ly == 0, "gemm_blocked: lanes must tile the threads"
        b.line("let lane = pidx % 32u;")
        b.line("let sg = pidx / 32u;")
        b.line(f"let tx = (sg % {wx // lx}u) * {lx}u + lane % {lx}u;")
        b.line(f"let ty = (sg / {wx // lx}u) * {ly}u + lane / {lx}u;")

    def _tile_origin(self, b: WgslBuilder) -> None:
        """`bt`, `tm0`, `tn0`: this workgroup's batch and tile, in grouped order (group_m tile
        rows walk the tile columns together, so neighbouring workgroups share B in L2)."""
        tm, tn, _, _, _ = self._tiles()
        group = self.choice.param("group_m", 8)
        b.line(f"let tiles_n = (params.n + {tn - 1}u) / {tn}u;")
        b.line(f"let tiles_m = (params.m + {tm - 1}u) / {tm}u;")
        b.line("let per_batch = tiles_m * tiles_n;")
        b.line("let bt = wg / per_batch;")
        b.line("if (bt >= params.batch) { return; }")
        b.line("let pid = wg % per_batch;")
        b.line(f"let first_m = (pid / ({group}u * tiles_n)) * {group}u;")
        b.line(f"let gsize = min(tiles_m - first_m, {group}u);")
        b.line(f"let inner = pid % ({group}u * tiles_n);")
        b.line(f"let tm0 = (first_m + inner % gsize) * {tm}u;")
        b.line(f"let tn0 = (inner / gsize) * {tn}u;")

    def _k_step(self, b: WgslBuilder, kk: int) -> None:
        """One unrolled k step in its own scope (it declares a*/b* anew): vec4 outer products into c*."""
        tm, tn, _, wx, wy = self._tiles()
        gm_, gn_ = tm // wy // 4, tn // wx // 4
        b.line("  {")
        for g in range(gm_):
            b.line(f"    let a{g} = sa[cur_a + {kk * self._row('a') + g * wy}u + ty];")
        for h in range(gn_):
            b.line(f"    let b{h} = sb[cur_b + {kk * self._row('b') + h * wx}u + tx];")
        acc, vec = ("h", "vec4<f16>") if self.h16 else ("c", "vec4<f32>")
        for g in range(gm_):
            for c, lane in enumerate("xyzw"):
                for h in range(gn_):
                    r = g * 4 + c
                    b.line(f"    {acc}{r}_{h} = fma({vec}(a{g}.{lane}), b{h}, {acc}{r}_{h});")
        b.line("  }")

    def loop_iterations(self) -> int:
        # one per k tile (everything inside is unrolled), and the planes' sum of sliced k
        return -(-self._dims()[3] // self._tiles()[2]) + 1 + self.slices

    # operand loads: each thread moves `count` items (vec4 or scalar) per tile
    def _declare_loads(self, b: WgslBuilder, which: str, elems: int, threads: int) -> int:
        mode = self._modes()[0 if which == "a" else 1]
        per = elems // 4 if not mode.endswith("_s") else elems
        count = -(-per // threads)
        zero = "vec4<f32>(0.0)" if not mode.endswith("_s") else "0.0"
        for li in range(count):
            b.line(f"var p{which}{li} = {zero};")
        return count

    def _emit_load(self, b: WgslBuilder, which: str, k0: str, count: int, threads: int, indent: str = "") -> None:
        tm, tn, tk, _, _ = self._tiles()
        mode = self._modes()[0 if which == "a" else 1]
        src = self.in_name(self.ia if which == "a" else self.ib)
        base = "a_base" if which == "a" else "b_base"
        extent = tm if which == "a" else tn  # tile extent along m (A) or n (B)
        origin = "tm0" if which == "a" else "tn0"
        dim = "params.m" if which == "a" else "params.n"
        s_mn = "params.a_sm" if which == "a" else "params.b_sn"
        s_k = "params.a_sk" if which == "a" else "params.b_sk"
        total = (extent * tk) // (1 if mode.endswith("_s") else 4)
        for li in range(count):
            p = f"p{which}{li}"
            e = f"(lidx + {li * threads}u)"
            guard = f"{e} < {total}u && " if count * threads > total else ""
            if mode in ("a_k4", "b_k4"):  # vec4 along k: e -> (mn, kq)
                mn, kq = self._k4_coords(e, extent)
                kk = f"({kq}) * 4u"
            elif mode in ("a_m4", "b_n4"):  # vec4 along m/n: e -> (k, mnq)
                kk, mn = f"{e} / {extent // 4}u", f"({e} % {extent // 4}u) * 4u"
            else:  # scalar: e -> (mn, k), k fastest
                mn, kk = f"{e} / {tk}u", f"{e} % {tk}u"
            b.line(f"{indent}{{ let gmn = {origin} + {mn}; let gk = {k0} + {kk};")
            addr = f"{base} + i32(gmn) * {s_mn} + i32(gk) * {s_k}"
            value = f"f32({src}[u32({addr})])" if mode.endswith("_s") else f"vec4<f32>({src}[u32({addr}) / 4u])"
            if self.exact and not guard:
                b.line(f"{indent}  {p} = {value}; }}")
            elif self.exact:
                b.line(f"{indent}  if ({guard[:-4]}) {{ {p} = {value}; }} }}")
            elif mode.endswith("_s"):
                b.line(f"{indent}  {p} = 0.0;")
                b.line(f"{indent}  if ({guard}gmn < {dim} && gk < params.k) {{ {p} = f32({src}[u32({addr})]); }} }}")
            else:
                b.line(f"{indent}  {p} = vec4<f32>(0.0);")
                b.line(
                    f"{indent}  if ({guard}gmn < {dim} && gk < params.k) {{ {p} = vec4<f32>({src}[u32({addr}) / 4u]); }} }}"
                )

    def _padded(self, which: str) -> bool:
        """Operands stored transposed into workgroup memory (read along k, or scalars) get a padded row
        under the conflict-free layout ("cf"): one vec4 more per k row moves each k row 4 banks on."""
        mode = self._modes()[0 if which == "a" else 1]
        return bool(self.choice.param("cf")) and not mode.endswith(("_m4", "_n4"))

    def _row(self, which: str) -> int:
        """vec4 per k row of an operand's tile in workgroup memory."""
        tm, tn, _, _, _ = self._tiles()
        return (tm if which == "a" else tn) // 4 + (1 if self._padded(which) else 0)

    def _k4_coords(self, e: str, extent: int) -> tuple[str, str]:
        """(row along m or n, quad along k) of vec4 number `e` of a tile read along k.

        Plainly each thread takes the next quad along k. Under "cf" each 32 threads take 16 rows by
        2 quads instead: every 32-byte sector they read is whole, and with the padded row their
        transposed stores fall in 32 distinct banks (4 threads per bank otherwise).
        """
        q = self._tiles()[2] // 4
        if self.choice.param("cf") and q % 2 == 0 and extent % 16 == 0 and extent * q % 32 == 0:
            half = q // 2
            sub, grp = f"({e} % 32u)", f"({e} / 32u)"
            return f"({grp} / {half}u) * 16u + {sub} % 16u", f"({grp} % {half}u) * 2u + {sub} / 16u"
        return f"{e} / {q}u", f"{e} % {q}u"

    def _emit_store(self, b: WgslBuilder, which: str, stage: str, count: int, threads: int, indent: str = "") -> None:
        tm, tn, tk, _, _ = self._tiles()
        mode = self._modes()[0 if which == "a" else 1]
        arr = "sa" if which == "a" else "sb"
        extent = tm if which == "a" else tn
        ext4 = extent // 4
        row = self._row(which)
        vec, one = ("vec4<f16>", "f16") if self.h16 else ("", "")
        total = (extent * tk) // (1 if mode.endswith("_s") else 4)
        for li in range(count):
            p = f"p{which}{li}"
            e = f"(lidx + {li * threads}u)"
            open_, close = (f"{indent}if ({e} < {total}u) {{ ", " }") if count * threads > total else (indent, "")
            if mode in ("a_m4", "b_n4"):
                b.line(f"{open_}{arr}[{stage} + ({e} / {ext4}u) * {row}u + {e} % {ext4}u] = {vec}({p});{close}")
            elif mode in ("a_k4", "b_k4"):
                # a vec4 along k lands in four rows k..k+3 of one column mn
                mn, kq = (f"({x})" for x in self._k4_coords(e, extent))
                lanes = " ".join(
                    f"{arr}[{stage} + ({kq} * 4u + {c}u) * {row}u + {mn} / 4u][{mn} % 4u] = {one}({p}.{lane});"
                    for c, lane in enumerate("xyzw")
                )
                b.line(f"{open_}{lanes}{close}")
            else:
                mn, kk = f"({e} / {tk}u)", f"({e} % {tk}u)"
                b.line(f"{open_}{arr}[{stage} + {kk} * {row}u + {mn} / 4u][{mn} % 4u] = {one}({p});{close}")

    def _emit_output(self, b: WgslBuilder, rm: int, gn_: int, wx: int, wy: int) -> None:
        vec_out = self._modes()[2] == "o4"
        b.line("let out_base = bt * params.m * params.n;")
        if self.code is not None and self.code.has_epilogue():
            self._emit_output_loads_first(b, rm, gn_, wx, wy)
            return
        for r in range(rm):
            g, c = divmod(r, 4)
            b.line(f"{{ let gm = tm0 + ({g * wy}u + ty) * 4u + {c}u;")
            b.line("  if (gm < params.m) {" if not self.exact else "  {")
            for h in range(gn_):
                b.line(f"    {{ let gn = tn0 + ({h * wx}u + tx) * 4u;")
                if vec_out:
                    b.line("      if (gn < params.n) {" if not self.exact else "      {")
                    self.store(b, "(out_base + gm * params.n + gn) / 4u", f"c{r}_{h}", lanes=4, indent="        ")
                    b.line("      } }")
                else:
                    for j, lane in enumerate("xyzw"):
                        b.line(f"      if (gn + {j}u < params.n) {{" if not self.exact else "      {")
                        self.store(b, f"out_base + gm * params.n + gn + {j}u", f"c{r}_{h}.{lane}", indent="        ")
                        b.line("      }")
                    b.line("    }")
            b.line("  }")
            b.line("}")

    def _emit_output_loads_first(self, b: WgslBuilder, rm: int, gn_: int, wx: int, wy: int) -> None:
        """Tiles with an epilogue: every stored value (and so every load of the epilogue's inputs) first,
        then the stores. Interleaved, each store has to wait for the loads before it (out may be the same
        memory as an input as far as the compiler knows), one memory round trip per vec4, which cost a
        third of the 512x2048x2048 product with a residual add on the H200
        (benchmarks/runs/2026-12-01-M/epilogue.txt). Where the tiles do not cover the output exactly,
        each value and its store sit under the same edge check (`ok*`): no load reads past an input."""
        assert self.code is not None
        lanes = 4 if self._modes()[2] == "o4" else 1  # one vec4 store per 4 columns, or 4 scalar stores
        for r in range(rm):
            g, c = divmod(r, 4)
            b.line(f"let gm{r} = tm0 + ({g * wy}u + ty) * 4u + {c}u;")
        for h in range(gn_):
            b.line(f"let gn{h} = tn0 + ({h * wx}u + tx) * 4u;")
        stores = []
        for r in range(rm):
            for h in range(gn_):
                for j in range(0, 4, lanes):
                    s, col = f"{r}_{h}_{j}", f"gn{h} + {j}u"
                    flat = f"out_base + gm{r} * params.n + {col}"
                    index, value = (f"({flat}) / 4u", f"c{r}_{h}") if lanes == 4 else (flat, f"c{r}_{h}.{'xyzw'[j]}")
                    b.line(f"let o{s} = {index};")
                    # the thread knows each element's batch, row and column: no split of the index
                    at = [f"q{d}" for d in range(len(self.core.shape) - 2)] + [f"gm{r}", col]
                    stored = self.code.store_lanes(f"o{s}", value, lanes, b, coords=at)
                    if self.exact:
                        b.line(f"let e{s} = {stored};")
                    else:
                        b.line(f"let ok{s} = gm{r} < params.m && {col} < params.n;")
                        b.line(f"var e{s}: {self.output_type()};")
                        b.line(f"if (ok{s}) {{ e{s} = {stored}; }}")
                    stores.append(s)
        for s in stores:
            b.line(f"out[o{s}] = e{s};" if self.exact else f"if (ok{s}) {{ out[o{s}] = e{s}; }}")
