"""Kernel selection: the GPUOperation step. Picks one of the kernels that can run each op.

Several kernels may serve one op (matmul: tiled GEMM, GEMV over rows, GEMV over columns;
reductions: a workgroup per row or a thread per row). The choice is a KernelChoice record
naming a registered kernel class (backend_wgpu.kernels); this is the one place that
chooses. KernelElement width is decided later by passes.vectorize.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from backend_wgpu.element import row_vector, vector_readable
from backend_wgpu.kernel import LOOP_BUDGET
from backend_wgpu.kernels import (
    ArangeKernel,
    AttentionCombineKernel,
    BlockedGemmKernel,
    ConcatKernel,
    Conv1dKernel,
    DecodeAttentionKernel,
    DequantKernel,
    ElementwiseKernel,
    FlashAttentionKernel,
    GatherKernel,
    GemmKernel,
    GemvKernel,
    GemvMultiKernel,
    IndexWriteKernel,
    NormKernel,
    NormRegsKernel,
    QuantGatherKernel,
    QuantGemmKernel,
    QuantGemvKernel,
    QuantThinKernel,
    ReduceKernel,
    RopeKernel,
    RowReduceKernel,
    SampleKernel,
    ScanKernel,
    SoftmaxKernel,
    SoftmaxRegsKernel,
    SortMergeKernel,
    SplitGemvKernel,
    ThinGemmKernel,
)
from backend_wgpu.kernels.attention.decode_combine import COMBINE_THREADS
from backend_wgpu.kernels.attention.flash import walk_iterations
from backend_wgpu.kernels.blocks import LOOP_STEPS, unroll_for
from backend_wgpu.kernels.matmul.gemm_thin import THIN_ROWS, parts_size
from backend_wgpu.kernels.quant.qgemm_thin import QTHIN_ROWS
from backend_wgpu.kernels.sort.bitonic import SIZES, BitonicSortKernel, padded, run_length
from ir.caps import DeviceCaps
from ir.dtypes import DType
from ir.errors import DTypeError, ShapeError
from ir.graph import Graph
from ir.node import KernelChoice, Node
from ir.ops import ELEMENTWISE, NO_KERNEL, NORM, REDUCE, ROW, SCAN, Op
from ir.settings import env_int
from ir.tuning import TuningTable, bucket
from ir.view import View
from passes.fold_views import view_of_operand


def select_kernels(graph: Graph, caps: DeviceCaps) -> Graph:
    nodes = []
    for node in graph:
        if node.op in NO_KERNEL:
            nodes.append(node)
        else:
            nodes.append(replace(node, kernel=select_kernel(graph, node, caps)))
    return graph.with_nodes(nodes)


def select_kernel(graph: Graph, node: Node, caps: DeviceCaps) -> KernelChoice:
    if any(graph[s].dtype.is_quantized for s in node.srcs) or node.dtype.is_quantized:
        return _select_quantized(graph, node, caps)
    if node.op in ELEMENTWISE:
        return KernelChoice(ElementwiseKernel.name, node.op.value, workgroup=(256, 1, 1))
    if node.op in REDUCE:
        return _select_reduce(graph, node, caps)
    if node.op in ROW:
        wg, params = _row_walk(node.shape[-1] if node.shape else 1, caps)
        return _select_softmax_regs(graph, node, caps) or KernelChoice(
            SoftmaxKernel.name, node.op.value, workgroup=(wg, 1, 1), params=params
        )
    if node.op is Op.MATMUL:
        return _select_matmul(graph, node, caps)
    if node.op is Op.CONCAT:
        return KernelChoice(ConcatKernel.name, f"n{len(node.srcs)}", workgroup=(256, 1, 1))
    if node.op is Op.ARANGE:
        return KernelChoice(ArangeKernel.name, workgroup=(256, 1, 1))
    if node.op in NORM:
        return _select_norm_regs(graph, node, caps) or _select_norm(node, caps)
    if node.op is Op.GATHER:
        return KernelChoice(GatherKernel.name, workgroup=(256, 1, 1))
    if node.op is Op.CONV1D:
        _, cin_g, taps = graph[node.srcs[1]].shape
        unroll = unroll_for(cin_g * taps, 1)  # one thread sums its group's channels x taps
        return KernelChoice(Conv1dKernel.name, workgroup=(64, 1, 1), params=(("unroll", unroll),) if unroll > 1 else ())
    if node.op is Op.INDEX_WRITE:
        return KernelChoice(IndexWriteKernel.name, workgroup=(256, 1, 1))
    if node.op in SCAN:  # short rows one thread each, in numpy's order; long ones a workgroup each
        serial = (node.shape[-1] if node.shape else 1) <= ScanKernel.serial_max
        return KernelChoice(ScanKernel.name, "serial" if serial else "blocks", workgroup=(64 if serial else 256, 1, 1))
    if node.op is Op.ARGSORT:  # a workgroup per run; passes.split_sort cut longer rows into runs and merges
        if padded(run_length(node)) > BitonicSortKernel.block:
            raise RuntimeError(f"argsort {node.shape}: a run of {run_length(node)} is past one workgroup (split_sort)")
        variant = BitonicSortKernel.variant_for(node)
        return KernelChoice(BitonicSortKernel.name, variant, workgroup=(SIZES[variant][1], 1, 1))
    if node.op is Op.ARGSORT_MERGE:
        return KernelChoice(SortMergeKernel.name, workgroup=(256, 1, 1))
    if node.op in (Op.ATTENTION, Op.ATTENTION_SPLITS):
        plan = decode_attention_plan(graph, node, caps)
        if plan is not None:
            return plan.choice
    if node.op is Op.ATTENTION:
        return attention_choice(graph, node, caps)
    if node.op is Op.ROPE:
        return KernelChoice(RopeKernel.name, "interleaved" if node.arg.interleaved else "half", workgroup=(256, 1, 1))
    if node.op is Op.SAMPLE:
        return KernelChoice(SampleKernel.name, workgroup=(SAMPLE_THREADS, 1, 1))
    if node.op is Op.ATTENTION_COMBINE:
        return KernelChoice(AttentionCombineKernel.name, workgroup=(min(COMBINE_THREADS, caps.max_invocations), 1, 1))
    raise NotImplementedError(f"select_kernels: no kernel for op {node.op.value}")


@dataclass(frozen=True)
class DecodePlan:
    """How attention_decode runs one attention: its choice and the key ranges."""

    choice: KernelChoice
    splits: int


DECODE_MAX_HEAD_DIM = 256  # heads up to 256 elements: at most 16 lanes of four slices each
DECODE_THREADS = 64  # per workgroup of a key range: rows of `lanes` threads (run F: 64 threads, 528 workgroups in f32)
DECODE_UNROLL = 2  # keys per row per step, their loads in flight together
DECODE_TARGET_WORKGROUPS = 528  # (batch, query heads, range) workgroups: four per multiprocessor of an H200
DECODE_SLICES = 4  # KernelElements of a head per lane at most (a 64-wide f32 head: 4 lanes of 4 vec4)
DECODE_MIN_RANGE = 64  # keys per range before more ranges stop paying for their merge and combine
# Up to DECODE_ONE_RANGE_KEYS keys (the bucket of the attended length) a head is one range, no combine
# dispatch after it, in a workgroup of DECODE_ONE_RANGE_THREADS threads per DECODE_ONE_RANGE_HEADS query
# heads; longer caches are cut into ranges, DECODE_RANGE_HEADS query heads a workgroup (0: all of a kv head's,
# whose keys and values are then read once; fewer give a short cache more workgroups, the repeats read from
# L2). H200 run Q (benchmarks/runs/2026-12-01-Q/knobs_heads.txt), the ~1B step's 16 attentions, us inside the
# step (Program.profile(marginal=2)), against all 4 heads, 64 threads and one range up to 256 keys before:
# 129 keys one range, 1 head, 256 threads 77.3 (140.3); bucket 512, the same 105.3 (ranges, 2 heads 114.3,
# before 157.8); bucket 1024, ranges, 2 heads 131.5 (one range 155.7, before 165.2). Past
# DECODE_RANGE_HEADS_KEYS keys (not measured yet) a workgroup keeps all of a kv head's query heads: the
# repeated reads of a long cache would no longer come from L2
DECODE_ONE_RANGE_KEYS = 512
DECODE_ONE_RANGE_THREADS = 256
DECODE_ONE_RANGE_HEADS = 1
DECODE_RANGE_HEADS = 2
DECODE_RANGE_HEADS_KEYS = 1024


def decode_attention_plan(graph: Graph, node: Node, caps: DeviceCaps) -> DecodePlan | None:
    """attention_decode for one query row per head; None if it cannot run it.

    Rows of `lanes` threads stream keys and values with an online softmax (no scores are
    kept), so a range may be any length; the keys are cut into enough ranges to fill the GPU
    (passes.split_attention makes them). The lanes of a row are summed by subgroup shuffles
    where the adapter's smallest subgroup holds them, else through workgroup memory.
    """
    from backend_wgpu.kernels.attention.decode import lanes_for, merge_heads_for

    arg = node.arg.attention if node.op is Op.ATTENTION_SPLITS else node.arg
    if arg.hide or arg.fill or arg.scale_by:  # attention written by hand (fuse_attention): the flash kernel's
        return None
    q, k, v = (graph[s] for s in node.srcs[:3])
    if len(q.shape) != 4 or q.shape[2] != 1 or max(q.shape[3], v.shape[3]) > DECODE_MAX_HEAD_DIM:
        return None
    views = [view_of_operand(graph, s)[1] for s in node.srcs]
    w = DecodeAttentionKernel.widest_element(node, views)
    ew, ev = -(-q.shape[3] // w), -(-v.shape[3] // w)
    lanes = lanes_for(max(ew, ev), DECODE_SLICES)
    g, s = arg.group, k.shape[2]
    one_range = s <= DECODE_ONE_RANGE_KEYS  # short caches: one range per head, no combine dispatch after it
    if one_range:
        heads = DECODE_ONE_RANGE_HEADS
    elif s <= DECODE_RANGE_HEADS_KEYS:
        heads = DECODE_RANGE_HEADS
    else:
        heads = 0  # all of the kv head's: a long cache read once
    per_wg = math.gcd(g, heads) if heads > 0 else g
    threads = min(DECODE_ONE_RANGE_THREADS if one_range else DECODE_THREADS, caps.max_invocations)
    if threads < lanes:
        return None
    # float16 caches too: twice the keys per step (the same bytes in flight) was slower at the decoder's
    # lengths on the H200 (run F: 18.7 vs 16.9 us at 512 keys)
    rows, unroll = threads // lanes, DECODE_UNROLL
    # shuffles where the smallest subgroup holds a row; else, with subgroups, where the workgroup finds its
    # subgroups wide enough when it runs (wgpu reports 4 for most adapters: backend_wgpu.device.least_subgroup_size),
    # workgroup memory otherwise
    shuffle = ("always" if lanes <= caps.subgroup_size else "runtime") if caps.subgroups and lanes > 1 else ""
    per_v = -(-ev // lanes)
    used = 0 if shuffle == "always" or lanes == 1 else 4 * threads * per_wg * unroll  # the lane sums' memory
    merge = merge_heads_for(per_wg, rows, lanes, per_v, w, caps.max_workgroup_storage - used)
    if rows > 1 and used + (rows // 2) * merge * (lanes * per_v * 4 * w + 12) > caps.max_workgroup_storage:
        return None
    units = q.shape[0] * (q.shape[1] // per_wg)
    splits = 1 if one_range else max(1, min(-(-DECODE_TARGET_WORKGROUPS // units), -(-s // DECODE_MIN_RANGE)))
    params = (("heads_per_kv", g), ("lanes", lanes), ("unroll", unroll), ("subgroups", caps.subgroups))
    params += (("lane_shuffle", shuffle), ("merge_heads", merge))
    if per_wg != g:
        params += (("heads_per_wg", per_wg),)
    choice = KernelChoice(DecodeAttentionKernel.name, "", workgroup=(threads, 1, 1), params=params)
    return DecodePlan(choice, splits)


# dot products per thread in a GEMV group's plain parts: lanes // matmuls columns per workgroup (H200 run H,
# ~1B step f32: 8 -> 4 took 1.649 -> 1.555 ms, q4_0 unchanged; 16 was slower in both)
GEMV_LANES = 4
# float groups' threads per workgroup at most (H200 run H, ~1B step: 256 -> 128 took f32 1.60 -> 1.52 ms,
# f16 1.33 -> 1.26; benchmarks/runs/2026-12-01-H/decode_knobs_threads.txt)
GEMV_MAX_THREADS = 128
GEMV_BLOCK_THREADS: int | None = None  # quantized groups' threads per workgroup (None: as many as the row has blocks)
# quantized groups (1: on): the row normed and weighted once per workgroup into workgroup memory, then
# GEMV_STAGED_THREADS / GEMV_STAGED_GROUP units a workgroup, GEMV_STAGED_GROUP threads a unit over its
# blocks, GEMV_STAGED_UNROLL blocks' loads in flight per thread (H200 run H, ~1B decode step GPU time:
# q4_0 1.707 -> 1.147 ms, q8_0 1.649 -> 1.039 against the blocks layout; benchmarks/runs/2026-12-01-H/
# decode_knobs_staged.txt: groups of 16 beat 8 and 32, 2 blocks in flight beat 4)
GEMV_STAGED_ROW = 1
GEMV_STAGED_THREADS = 256
GEMV_STAGED_GROUP = 16
GEMV_STAGED_UNROLL = 2
GEMV_STAGED_MIN_WORKGROUPS = 0  # a group of fewer workgroups widens its units' thread groups (x2) up to this many


def gemv_group_choice(k: int, caps: DeviceCaps, quantized: bool = False, spread: int = 0) -> KernelChoice:
    """gemv_multi for a group of passes.fuse_gemv: a workgroup per output column (or pair), threads along k
    (a block of 32 values each when a weight is quantized: as many threads as the row has blocks, 32..256),
    several columns per workgroup where a part allows (GEMV_LANES). A group that spreads values along
    `spread` positions of a cache (where(one-hot, value, cache)) takes a quarter of that many threads, up
    to 256: its threads walk those positions."""
    params = (("subgroups", caps.subgroups), ("lanes", GEMV_LANES))
    least = min(256, caps.max_invocations, 1 << max(0, (spread // 4 - 1).bit_length()))
    if quantized and GEMV_STAGED_ROW and spread == 0:
        wg = 1 << (min(GEMV_STAGED_THREADS, caps.max_invocations).bit_length() - 1)  # powers of two: whole
        group = 1 << (min(GEMV_STAGED_GROUP, wg).bit_length() - 1)  # groups a workgroup, shuffles by xor
        # the row's k f32 and `red` (a vec4 a thread; the units' sums without shuffles: up to 4 a thread)
        if 4 * k + 64 * wg <= caps.max_workgroup_storage and k % 32 == 0:
            more = (("unit_threads", group), ("unroll", max(1, GEMV_STAGED_UNROLL)))
            more += (("shuffle_max", caps.subgroup_size if caps.subgroups else 0),)
            more += (("min_workgroups", GEMV_STAGED_MIN_WORKGROUPS),)
            return KernelChoice(GemvMultiKernel.name, "staged", workgroup=(wg, 1, 1), params=params + more)
    if quantized:
        threads = _row_workgroup(k // 32, caps) if GEMV_BLOCK_THREADS is None else GEMV_BLOCK_THREADS
        wg = max(least, min(threads, caps.max_invocations))
        return KernelChoice(GemvMultiKernel.name, "blocks", workgroup=(wg, 1, 1), params=params)
    # two vec4 steps of the row per thread at least (loads in flight, fewer threads to sum), 32..GEMV_MAX_THREADS
    wg = max(least, min(max(32, 1 << max(0, (k // 8).bit_length() - 1)), GEMV_MAX_THREADS, caps.max_invocations))
    return KernelChoice(GemvMultiKernel.name, "", workgroup=(wg, 1, 1), params=params)


# qgemv sizing: wx threads along a weight row (16-byte loads side by side), wy row groups per
# workgroup, `rows` weight rows per thread sharing each load of x
QGEMV_WX, QGEMV_WY, QGEMV_ROWS, QGEMV_UNROLL = 32, 4, 4, 2
QGEMV_MAX_WX, QGEMV_THREADS = 128, 128  # untuned: wx from the row's units up to this, wy = threads / wx
QGEMV_MIN_WORKGROUPS = 256  # untuned: fewer rows per thread below this many workgroups
MAX_LOOP = 65535  # lavapipe ends a loop after this many iterations


def _select_quantized(graph: Graph, node: Node, caps: DeviceCaps) -> KernelChoice:
    """Kernels that read quantized blocks: the tracer lets only matmul (x @ w.T), gather and cast reach here."""
    if node.op is Op.MATMUL:
        p = quant_matmul_problem(graph, node)
        tuned = _tuned(p, caps) if p is not None else None
        if tuned is None:
            return quant_matmul_choice(graph, node, caps=caps)
        if p is not None and p.family == QuantThinKernel.name:
            cols, threads, split = qthin_numbers(tuned[0])
            choice = quant_thin_choice(p.m, p.n, p.k, p.dtypes[1], p.layout, caps, cols, threads, split)
        else:
            wx, wy, rows, unroll = _gemv_numbers(tuned[0])
            choice = quant_matmul_choice(graph, node, wx, wy, rows, unroll, caps=caps)
        return replace(choice, params=choice.params + (("tuned", tuned[1]),))
    if node.op is Op.CAST:
        return KernelChoice(DequantKernel.name, workgroup=(256, 1, 1))
    if node.op is Op.GATHER:
        return KernelChoice(QuantGatherKernel.name, workgroup=(256, 1, 1))
    raise DTypeError(f"select_kernels: no kernel reads a {node.dtype.value} operand for {node.op.value} (%{node.id})")


def quant_matmul_choice(
    graph: Graph,
    node: Node,
    wx: int | None = None,
    wy: int | None = None,
    rows: int | None = None,
    unroll: int | None = None,
    caps: DeviceCaps | None = None,
) -> KernelChoice:
    """qgemv for one row of x, qgemm_thin for a few, qgemm for more; x read as vec4 where its view allows."""
    m = node.shape[0]
    w = graph[node.srcs[1]]
    k = graph[node.srcs[0]].shape[-1]
    _, a_view = view_of_operand(graph, node.srcs[0])
    variant = "x4" if row_vector(a_view, 1, 4) else "x1"
    return quant_choice(m, k, w.dtype, variant, wx, wy, rows, unroll, n=node.shape[-1], caps=caps)


def quant_choice(
    m: int,
    k: int,
    wdtype: DType,
    variant: str,
    wx: int | None = None,
    wy: int | None = None,
    rows: int | None = None,
    unroll: int | None = None,
    n: int | None = None,
    caps: DeviceCaps | None = None,
) -> KernelChoice:
    """quant_matmul_choice from the sizes: wx doubled (wy halved) while a row's units would pass the loop budget.

    Untuned, a row's threads grow with its units (32..128, the H200 tuner's winners were 64-128
    wide), wy keeps 128 threads a workgroup, and a thread's rows halve (4, 2, 1) while the n rows
    would make fewer than QGEMV_MIN_WORKGROUPS workgroups: a decode step's short projections fill the GPU.
    """
    if m == 1:
        units = k // (16 if wdtype is DType.q8_0 else 32)
        if wx is None:
            wx = min(QGEMV_MAX_WX, max(QGEMV_WX, 1 << (max(units, 1).bit_length() - 1)))
        if wy is None:
            wy = max(1, QGEMV_THREADS // wx)
        if unroll is None:
            unroll = QGEMV_UNROLL if units >= QGEMV_UNROLL * wx else 1
        if rows is None:
            rows = QGEMV_ROWS
            while n is not None and rows > 1 and -(-n // (wy * rows)) < QGEMV_MIN_WORKGROUPS:
                rows //= 2
        while -(-units // wx) > MAX_LOOP and wx < 256:
            wx *= 2
            wy = max(1, wy // 2)
        if -(-units // wx) > MAX_LOOP:
            raise ShapeError(f"matmul: k={k} is too long for one {wdtype.value} GEMV row")
        params = (("rows", rows), ("unroll", unroll))
        return KernelChoice(QuantGemvKernel.name, variant, workgroup=(wx, wy, 1), params=params)
    if k // 32 > MAX_LOOP:
        raise ShapeError(f"matmul: k={k} is too long for the {wdtype.value} GEMM (at most {MAX_LOOP * 32})")
    if n is not None and quant_thin_wins(m, n):
        return quant_thin_choice(m, n, k, wdtype, variant, caps)
    return KernelChoice(QuantGemmKernel.name, variant, workgroup=(16, 16, 1))


# qgemm_thin against qgemm, H200 run W (benchmarks/runs/2026-12-01-W/qthin_sweep.txt: q4_0 and q8_0 weights of
# 2048x2048, 8192x2048 and 2048x8192, 2 to 128 rows of x), us: 16x2048x2048 q4_0 90.7 against 1253, 2x2048x8192
# 16.7 against 889, 32x8192x2048 169.5 against 227.0, 128x2048x2048 170.3 against 227.3; qgemm wins from 64 rows
# by 8192 (q4_0 227.8 against 330.9) and at 128 by 8192 (327.5 against 652.5). So: qgemm_thin up to QTHIN_ALWAYS_M
# rows, and up to QTHIN_MAX_M where the output has at most QTHIN_MAX_OUTPUTS values.
QTHIN_ALWAYS_M, QTHIN_MAX_M, QTHIN_MAX_OUTPUTS = 32, 128, 1 << 18
# its settings, from the same sweep: 4 weight rows a workgroup won every case (against 1 and 2); threads along a row
# about half its units (32 to 128), halved again from QTHIN_MANY_BLOCKS workgroups: within 14% of each case's
# fastest thread count
QTHIN_COLS, QTHIN_UNITS, QTHIN_MANY_BLOCKS = 4, 2, 2048


def quant_thin_wins(m: int, n: int) -> bool:
    """A quantized product of a few rows of x (m > 1) that qgemm_thin runs rather than qgemm."""
    return 1 < m <= QTHIN_MAX_M and (m <= QTHIN_ALWAYS_M or m * n <= QTHIN_MAX_OUTPUTS)


def quant_thin_choice(
    m: int,
    n: int,
    k: int,
    wdtype: DType,
    variant: str,
    caps: DeviceCaps | None,
    cols: int | None = None,
    threads: int | None = None,
    split: bool = False,
) -> KernelChoice:
    """qgemm_thin's block of rows of x (m split evenly in blocks of at most QTHIN_ROWS) and weight rows, and
    its threads along a weight row's units: the rule's, or the given `cols`, `threads` and `split` (tuned)."""
    rows = -(-m // -(-m // QTHIN_ROWS))
    subgroups = bool(caps is not None and caps.subgroups)
    if cols is not None and threads is not None:
        params = (("rows", rows), ("cols", cols), ("subgroups", subgroups), ("split", split))
        return KernelChoice(QuantThinKernel.name, variant, workgroup=(threads, 1, 1), params=params)
    units = k // (16 if wdtype is DType.q8_0 else 32)
    limit = min(128, caps.max_invocations) if caps is not None else 128
    threads = min(limit, max(32, 1 << max(0, (-(-units // QTHIN_UNITS) - 1).bit_length())))
    storage = caps.max_workgroup_storage if caps is not None else 16384
    cols = QTHIN_COLS
    while cols > 1 and (n < 8 * cols or 4 * parts_size(rows, cols, threads, subgroups) > storage // 2):
        cols //= 2
    if -(-m // rows) * -(-n // cols) >= QTHIN_MANY_BLOCKS:
        threads = max(32, threads // 2)
    params = (("rows", rows), ("cols", cols), ("subgroups", subgroups))
    return KernelChoice(QuantThinKernel.name, variant, workgroup=(threads, 1, 1), params=params)


@dataclass(frozen=True)
class QuantGemvProblem:
    """What the quantized GEMV rules look at: m rows of x (k) times a quantized weight (n, k), read as w.T;
    one row for qgemv, a few for qgemm_thin (`family`)."""

    n: int
    k: int
    dtypes: tuple[DType, DType, DType]  # x, the weight's format, the output
    layout: str  # x4 (x read as vec4) or x1
    family: str = QuantGemvKernel.name
    m: int = 1

    def tuning_key(self) -> str:
        dt = ",".join(d.value for d in self.dtypes[:2]) + "->" + self.dtypes[2].value
        if self.family == QuantThinKernel.name:
            return f"qgemm_thin {dt} {self.layout} m{bucket(self.m)} n{bucket(self.n)} k{bucket(self.k)}"
        return f"qgemv {dt} {self.layout} n{bucket(self.n)} k{bucket(self.k)}"


def quant_matmul_problem(graph: Graph, node: Node) -> QuantGemvProblem | None:
    """The qgemv problem of a quantized matmul of one row, the qgemm_thin one of a few rows (None for more:
    qgemm has no knobs)."""
    if node.op is not Op.MATMUL or len(node.shape) != 2:
        return None
    m, n = node.shape
    if m != 1 and not quant_thin_wins(m, n):
        return None
    _, a_view = view_of_operand(graph, node.srcs[0])
    w = graph[node.srcs[1]]
    dtypes = (graph[node.srcs[0]].dtype, w.dtype, node.dtype)
    family = QuantGemvKernel.name if m == 1 else QuantThinKernel.name
    return QuantGemvProblem(n, a_view.shape[-1], dtypes, "x4" if row_vector(a_view, 1, 4) else "x1", family, m)


def qthin_candidates(p: QuantGemvProblem, caps: DeviceCaps) -> list[str]:
    """The qgemm_thin configurations `wgjit tune` times: "c<weight rows a workgroup>.t<threads>", ".s" ending
    those whose units are split four threads to a unit."""
    rows = -(-p.m // -(-p.m // QTHIN_ROWS))
    grid = [
        f"c{cols}.t{threads}{'.s' * split}"
        for cols in (1, 2, 4, 8)
        for threads in (32, 64, 128, 256)
        for split in (False, True)
        if threads <= caps.max_invocations and (cols == 1 or p.n >= 8 * cols)
        if 4 * parts_size(rows, cols, threads, caps.subgroups) <= caps.max_workgroup_storage // 2
    ]
    builtin = builtin_qthin_config(p, caps)
    return grid if builtin in grid else [*grid, builtin]


def builtin_qthin_config(p: QuantGemvProblem, caps: DeviceCaps) -> str:
    c = quant_thin_choice(p.m, p.n, p.k, p.dtypes[1], p.layout, caps)
    return f"c{c.param('cols')}.t{c.workgroup[0]}{'.s' * bool(c.param('split', False))}"


def qthin_numbers(name: str) -> tuple[int, int, bool]:
    """(cols, threads, split) of a qgemm_thin configuration's name: "c4.t64.s" -> (4, 64, True)."""
    parts = name.split(".")
    return int(parts[0][1:]), int(parts[1][1:]), parts[-1] == "s"


def qgemv_candidates(p: QuantGemvProblem, caps: DeviceCaps) -> list[str]:
    """The qgemv configurations `wgjit tune` times: "wx<threads along a row>.wy<row groups>.r<rows>.u<unroll>"."""
    units = p.k // (16 if p.dtypes[1] is DType.q8_0 else 32)
    grid = [
        f"wx{wx}.wy{wy}.r{rows}.u{u}"
        for wx in (16, 32, 64)
        for wy in (2, 4, 8)
        for rows in (2, 4)
        for u in (1, 2, 4)
        if wx * wy <= caps.max_invocations and 4 * rows * wx * wy <= caps.max_workgroup_storage
        if -(-units // wx) <= MAX_LOOP
    ]
    builtin = builtin_qgemv_config(p)  # the rule's own configuration is always timed beside them
    return grid if builtin in grid else [*grid, builtin]


def builtin_qgemv_config(p: QuantGemvProblem) -> str:
    c = quant_choice(1, p.k, p.dtypes[1], p.layout, n=p.n)
    return f"wx{c.workgroup[0]}.wy{c.workgroup[1]}.r{c.param('rows')}.u{c.param('unroll')}"


def fused_group_choice() -> KernelChoice:
    """The kernel of a fused group without a core (passes.fuse): elementwise over all its terms."""
    return KernelChoice(ElementwiseKernel.name, "fused", workgroup=(256, 1, 1))


def _row_workgroup(n: int, caps: DeviceCaps) -> int:
    """Threads per row: enough to cover the row in a few steps, a power of two in 32..256."""
    return max(32, min(256, caps.max_invocations, 1 << max(0, math.ceil(math.log2(max(n, 1))))))


NORM_STEPS_PER_THREAD = 4  # vec4 steps of a row per thread the norm rule aims at (fewer threads, a shorter sum tree)


def _select_norm(node: Node, caps: DeviceCaps) -> KernelChoice:
    """A workgroup per row, sized by the row's vec4 steps (its usual width) at NORM_STEPS_PER_THREAD each.

    A row of 384 took 29.5 us on the H200 with 256 threads (run H): 96 vec4 steps left 160
    threads idle and the two sums climbed an 8-level tree each; 32 threads take 3 steps each.
    """
    n = node.shape[-1] if node.shape else 1
    steps = n // 4 if n % 4 == 0 else n
    wg, params = _row_walk(n, caps)
    fitted = _norm_threads(steps, wg)
    unroll = unroll_for(n, fitted)
    if fitted < wg and unroll <= 8:
        wg, params = fitted, (("unroll", unroll),) if unroll > 1 else ()
    return KernelChoice(NormKernel.name, node.op.value, workgroup=(wg, 1, 1), params=params)


def _norm_threads(steps: int, limit: int) -> int:
    """Threads for a norm's row of `steps` KernelElements: NORM_STEPS_PER_THREAD each, a power of two in 32..limit."""
    return max(32, min(limit, 1 << max(0, math.ceil(math.log2(max(1, -(-steps // NORM_STEPS_PER_THREAD)))))))


NORM_REGS_MAX_PER_THREAD = 8  # KernelElements a thread holds for a row in registers (as softmax_regs)


def _select_norm_regs(graph: Graph, node: Node, caps: DeviceCaps) -> KernelChoice | None:
    """Contiguous float rows short enough for registers: read once, and fusable (norm_regs).

    Threads as the strided rule sizes them (NORM_STEPS_PER_THREAD vec4 steps each); rows that
    would need more than NORM_REGS_MAX_PER_THREAD elements a thread take the strided kernel.
    """
    if not node.shape or not _contiguous_float(graph, node):
        return None
    n = node.shape[-1]
    steps = n // 4 if n % 4 == 0 else n  # vec4 when the row allows (passes.vectorize decides)
    limit = min(256, caps.max_invocations)  # the strided rule's threads (run H), the row in registers
    wg = _norm_threads(steps, limit)
    if -(-steps // wg) > NORM_REGS_MAX_PER_THREAD:
        return None
    params = (("subgroups", caps.subgroups),)
    return KernelChoice(NormRegsKernel.name, node.op.value, workgroup=(wg, 1, 1), params=params)


def _row_walk(n: int, caps: DeviceCaps) -> tuple[int, tuple[tuple[str, int], ...]]:
    """Threads per row, and the unroll that keeps each thread's walk over n elements within
    LOOP_STEPS loop iterations (kernel.LOOP_BUDGET); rows that long get every thread allowed."""
    wg = _row_workgroup(n, caps)
    unroll = unroll_for(n, wg)
    if unroll > 8:
        wg = 1 << (min(1024, caps.max_invocations).bit_length() - 1)
        unroll = unroll_for(n, wg)
    return wg, (("unroll", unroll),) if unroll > 1 else ()


def _select_reduce(graph: Graph, node: Node, caps: DeviceCaps) -> KernelChoice:
    src = graph[node.srcs[0]]
    k = node.arg
    r = math.prod(src.shape[len(src.shape) - k :]) if k else 1
    rows = node.size
    # short rows: one thread walks a whole row; long rows: a workgroup shares one row
    if r <= 64 or (rows >= 16384 and r <= 256):
        return KernelChoice(ReduceKernel.name, f"{node.op.value}_serial", workgroup=(64, 1, 1))
    if node.op in (Op.SUM, Op.MAX, Op.MIN) and _contiguous_float(graph, node):
        # contiguous float rows: loads in flight and subgroup reductions (RowReduceKernel)
        wg = _row_workgroup(-(-r // 4 // ROW_REDUCE_UNROLL), caps)
        params = (("unroll", max(ROW_REDUCE_UNROLL, unroll_for(r, wg))), ("subgroups", caps.subgroups))
        return KernelChoice(RowReduceKernel.name, f"{node.op.value}_rows", workgroup=(wg, 1, 1), params=params)
    wg, params = _row_walk(r, caps)
    if rows < FEW_ROWS and r >= 16 * wg:
        # few long rows (argmax over a vocabulary): most of the GPU idles and each thread's walk
        # is a chain of load latencies, so the widest workgroup and REDUCE_LOADS_IN_FLIGHT loads
        # per step (a 32000-long argmax took ~190 us with 256 threads one load at a time)
        wg = 1 << (min(1024, caps.max_invocations).bit_length() - 1)
        params = (("unroll", max(REDUCE_LOADS_IN_FLIGHT, unroll_for(r, wg))),)
    return KernelChoice(ReduceKernel.name, f"{node.op.value}_rows", workgroup=(wg, 1, 1), params=params)


FEW_ROWS = 64  # fewer rows than this leave most of a large GPU idle with a workgroup each
REDUCE_LOADS_IN_FLIGHT = 4


ROW_REDUCE_UNROLL = 4
SAMPLE_THREADS = 128  # threads per row of logits (backend_wgpu/kernels/sample/sample.py sizes its arrays by it)
SOFTMAX_MAX_PER_THREAD = 8  # vec4 registers per thread for a row held in registers


def _contiguous_float(graph: Graph, node: Node) -> bool:
    src = graph[node.srcs[0]]
    return src.dtype.is_float and view_of_operand(graph, node.srcs[0])[1].is_contiguous


def _select_softmax_regs(graph: Graph, node: Node, caps: DeviceCaps) -> KernelChoice | None:
    """Rows short enough to sit in registers (at most 8 KernelElements a thread): read once."""
    if not node.shape or not _contiguous_float(graph, node):
        return None
    n = node.shape[-1]
    elems = -(-n // 4) if n % 4 == 0 else n  # vec4 when the row allows (passes.vectorize decides)
    limit = min(1024, caps.max_invocations)
    wg = max(32, min(limit, 1 << max(0, math.ceil(math.log2(max(1, -(-elems // 4)))))))
    per = -(-elems // wg)
    if per > SOFTMAX_MAX_PER_THREAD:
        return None
    params = (("subgroups", caps.subgroups),)
    return KernelChoice(SoftmaxRegsKernel.name, node.op.value, workgroup=(wg, 1, 1), params=params)


def _select_matmul(graph: Graph, node: Node, caps: DeviceCaps) -> KernelChoice:
    p = gemm_problem(graph, node)
    if p.family == GemvKernel.name:
        # each output column is a dot product of two contiguous runs: a workgroup per column
        return gemv_choice(p, caps)
    if p.family == SplitGemvKernel.name:
        return split_gemv_choice(p, caps)
    if p.family == ThinGemmKernel.name:
        return thin_gemm_choice(p, caps)
    return _select_gemm(graph, node, caps) or KernelChoice(
        GemmKernel.name, "tiled", workgroup=(16, 16, 1), params=(("tile_m", 64), ("tile_n", 64), ("tile_k", 16))
    )


GEMV_MIN_UNROLL = 4  # 1: the row walk's own unroll (before 571c7be)
GEMV_SUBGROUPS = True  # False: the workgroup tree for gemv's sum (before 571c7be)


def gemv_choice(p: GemmProblem, caps: DeviceCaps) -> KernelChoice:
    """gemv[k_contig]: the tuned "wg<threads>.u<unroll>" where `wgjit tune` measured one, else the row walk."""
    tuned = _tuned(p, caps)
    if tuned is not None:
        wg, unroll = _gemv_numbers(tuned[0])
        params: tuple[tuple[str, Any], ...] = (("unroll", unroll),) if unroll > 1 else ()
        return KernelChoice(GemvKernel.name, "k_contig", workgroup=(wg, 1, 1), params=params + (("tuned", tuned[1]),))
    wg, params = _row_walk(p.k, caps)
    # at least GEMV_MIN_UNROLL loads in flight per thread (a decode step's GEMVs are latency bound:
    # one column per workgroup, each thread's vec4 steps along k otherwise each wait for the last)
    steps = max(1, -(-p.k // (4 * wg)))  # vec4 steps per thread (k may be 0: an empty sum)
    unroll = max(dict(params).get("unroll", 1), min(GEMV_MIN_UNROLL, 1 << (steps.bit_length() - 1)))
    params = (("unroll", unroll),) if unroll > 1 else ()
    return KernelChoice(
        GemvKernel.name,
        "k_contig",
        workgroup=(wg, 1, 1),
        params=params + (("subgroups", caps.subgroups and GEMV_SUBGROUPS),),
    )


# gemm_thin (backend_wgpu/kernels/matmul/gemm_thin.py) for products of few rows whose B is contiguous along k:
# up to THIN_GEMM_ALWAYS_M rows, and up to THIN_GEMM_MAX_M where B has at most THIN_GEMM_MAX_WEIGHTS elements
# (past that, the blocked GEMM's k splits win). Two columns per workgroup past THIN_GEMM_TWO_COLS
# multiply-adds (A is read once per column block: fewer reads), one below (more workgroups).
# H200 run U (benchmarks/runs/2026-12-01-U/), us, gemm_thin with 1 / 2 columns against the best blocked
# configuration (b32x64 or a k split): 16x384x384 9.0 / 12.0 against 16.0; 16x2048x2048 34.8 / 23.0 against
# 30.9; 32x1536x384 16.1 / 13.0 against 15.6; 64x384x1536 27.4 / 14.2 against 25.7; 32x2048x2048 33.5 at
# best against 30.9, 64x2048x2048 60.0 against 32.0; 96x384x384 16.0 against 15.9
THIN_GEMM_ALWAYS_M, THIN_GEMM_MAX_M, THIN_GEMM_MAX_WEIGHTS = 16, 64, 1536 * 1536
THIN_GEMM_TWO_COLS = 12 << 20
THIN_GEMM_STEPS = 4  # vector loads along k per thread the rule aims for (all in flight at once)
THIN_GEMM_COLS = env_int("WGJIT_THIN_COLS", 0)  # columns per workgroup (0: the rule's 1 or 2)


def thin_gemm_wins(p: GemmProblem) -> bool:
    """A product of a few rows (m > 1) that gemm_thin runs: B contiguous along k, and the rows few enough."""
    if not 1 < p.m <= THIN_GEMM_MAX_M or p.n < 2 or p.b.strides[-2] != 1:  # m 0: no output, nothing runs
        return False
    return p.m <= THIN_GEMM_ALWAYS_M or p.n * p.k <= THIN_GEMM_MAX_WEIGHTS


def thin_block_rows(m: int) -> int:
    """gemm_thin's rows per workgroup: m split evenly in blocks of at most THIN_ROWS (20 rows: two of ten)."""
    return -(-m // -(-m // THIN_ROWS))


def thin_gemm_choice(p: GemmProblem, caps: DeviceCaps) -> KernelChoice:
    """gemm_thin: rows per workgroup split m evenly in blocks of at most THIN_ROWS; threads along k so that
    each takes about THIN_GEMM_STEPS vector loads (32 to 256 threads); `wgjit tune`'s "wg<threads>.u<unroll>"
    where it measured one."""
    rows = thin_block_rows(p.m)
    tuned = _tuned(p, caps)
    if tuned is not None:
        wg, unroll = _gemv_numbers(tuned[0])
        said: tuple[tuple[str, Any], ...] = (("tuned", tuned[1]),)
    else:
        steps = -(-p.k // 4)  # vec4 loads along k (the KernelElement is decided later; 4 where the views allow)
        wg = min(
            256, min(1024, caps.max_invocations), max(32, 1 << max(0, (-(-steps // THIN_GEMM_STEPS) - 1).bit_length()))
        )
        unroll = max(1, min(4, -(-steps // wg)))
        said = ()
    while -(-p.k // (wg * unroll)) > LOOP_STEPS:  # k this long: more loads per iteration
        unroll *= 2
    cols = THIN_GEMM_COLS or (2 if p.m * p.n * p.k > THIN_GEMM_TWO_COLS else 1)  # A's loads serve that many
    while cols > 1 and (
        p.n < 8 * cols or 4 * parts_size(rows, cols, wg, caps.subgroups) > caps.max_workgroup_storage // 2
    ):
        cols //= 2
    params = (("rows", rows), ("cols", cols), ("unroll", unroll), ("subgroups", caps.subgroups)) + said
    return KernelChoice(ThinGemmKernel.name, "k_contig", workgroup=(wg, 1, 1), params=params)


def split_gemv_choice(p: GemmProblem, caps: DeviceCaps) -> KernelChoice:
    """gemv_split: the tuned "wx<x>.wy<y>.u<unroll>" where `wgjit tune` measured one, else the sizing rule."""
    h8 = p.dtypes[1] is DType.float16 and _vec_along(p.b, -1, 8)
    choice = gemv_split_choice(p.n, p.k, caps, h8=h8, itemsize=p.dtypes[1].itemsize)
    tuned = _tuned(p, caps)
    if tuned is None:
        return choice
    wx, wy, unroll = _gemv_numbers(tuned[0])
    return replace(choice, workgroup=(wx, wy, 1), params=(("unroll", unroll), ("tuned", tuned[1])))


def _gemv_numbers(name: str) -> tuple[int, ...]:
    """The numbers of a GEMV configuration's name: "wg256.u4" -> (256, 4), "wx8.wy128.u8" -> (8, 128, 8),
    "wx32.wy4.r4.u2" -> (32, 4, 4, 2)."""
    return tuple(int(part.lstrip("wxygur")) for part in name.split("."))


def gemv_candidates(p: GemmProblem, caps: DeviceCaps) -> list[str]:
    """The GEMV configurations `wgjit tune` times: thread counts and unrolls within the loop budget."""
    limit = min(1024, caps.max_invocations)
    if p.family in (GemvKernel.name, ThinGemmKernel.name):
        rows = thin_block_rows(p.m)

        def fits(wg: int) -> bool:  # gemm_thin's partial sums (one column a workgroup) in its workgroup memory
            return (
                p.family == GemvKernel.name or 4 * parts_size(rows, 1, wg, caps.subgroups) <= caps.max_workgroup_storage
            )

        return [
            f"wg{wg}.u{u}"
            for wg in (32, 64, 128, 256, 512, 1024)
            for u in (1, 2, 4, 8)
            if wg <= limit and -(-p.k // (wg * u)) <= LOOP_STEPS and fits(wg)
        ]
    return [
        f"wx{wx}.wy{wy}.u{u}"
        for wx in (2, 4, 8, 16)
        for wy in (32, 64, 128, 256)
        for u in (4, 8)
        if 64 <= wx * wy <= limit and -(-p.k // wy) // u <= LOOP_STEPS
    ]


def _builtin_gemv(p: GemmProblem, caps: DeviceCaps) -> str:
    if p.family == ThinGemmKernel.name:
        c = thin_gemm_choice(p, untuned(caps))
        return f"wg{c.workgroup[0]}.u{c.param('unroll')}"
    if p.family == GemvKernel.name:
        wg, params = _row_walk(p.k, caps)
        return f"wg{wg}.u{dict(params).get('unroll', 1)}"
    c = split_gemv_choice(p, untuned(caps))
    return f"wx{c.workgroup[0]}.wy{c.workgroup[1]}.u{c.param('unroll')}"


def untuned(caps: DeviceCaps) -> DeviceCaps:
    """caps without a tuning table: what the built-in rules alone choose."""
    return replace(caps, tuning=TuningTable()) if len(caps.tuning) else caps


# gemv_split sizing, from the H200 sweep (benchmarks/sweep.py, RESULTS.md): workgroups of
# 1024 threads, each reading k-rows of B in segments as long as GEMV_MAX_WX threads make,
# narrowed (down to one 32-byte sector) while that leaves fewer than GEMV_MIN_WORKGROUPS
GEMV_MAX_WX = 16
GEMV_MIN_WORKGROUPS = 80


def gemv_split_choice(n: int, k: int, caps: DeviceCaps, h8: bool = False, itemsize: int = 4) -> KernelChoice:
    """Thin column tiles (wx threads across) and k split over the workgroup's wy rows of threads."""
    per_thread = 8 if h8 else 4 if n % 4 == 0 else 1  # columns a thread owns (KernelElement decided later)
    thread_bytes = per_thread * itemsize
    cols = -(-n // per_thread)
    wx = GEMV_MAX_WX
    while wx * thread_bytes > 32 and -(-cols // wx) < GEMV_MIN_WORKGROUPS:
        wx //= 2
    unroll = 4 if h8 else 8
    threads = min(1024, caps.max_invocations)
    wy = max(1, min(threads // wx, 1 << max(0, math.ceil(math.log2(max(1, -(-k // unroll)))))))
    while -(-k // wy) // unroll > LOOP_STEPS:  # each thread's rows of k stay within the loop budget
        unroll *= 2
    variant = "n_contig_h8" if h8 else "n_contig"
    return KernelChoice(SplitGemvKernel.name, variant, workgroup=(wx, wy, 1), params=(("unroll", unroll),))


@dataclass(frozen=True)
class GemmConfig:
    """One gemm_blocked configuration (backend_wgpu/kernels/matmul/gemm_blocked.py).

    A tile_m x tile_n output tile per workgroup of wx x wy threads, k staged tile_k deep; each
    thread holds (tile_m / wy) x (tile_n / wx) outputs. `lanes` (x, y) places a 32-lane subgroup
    on an x-by-y block of threads (subgroup-level tiling: fewer distinct workgroup-memory reads
    per subgroup), None keeps rows of wx threads.
    """

    tile_m: int
    tile_n: int
    tile_k: int
    wx: int
    wy: int
    lanes: tuple[int, int] | None = None
    conflict_free: bool = False  # k-major tiles stored without bank conflicts (a padded row, 16x2 loads)
    # f16 operands multiplied and summed in f16 within a k tile, tiles summed in f32: never chosen unless
    # asked for (WGJIT_TUNE_F16_PRODUCTS=1 lets `wgjit tune` try it), as it rounds more than f32 sums
    half_products: bool = False
    # compiled without wgpu's index clamps (Device.pipeline); only for tiles that cover the problem exactly
    unchecked: bool = False
    # planes of wx x wy threads splitting each k tile (sliced k, summed in workgroup memory at the end)
    slices: int = 1
    kernel: str = BlockedGemmKernel.name

    @property
    def smem(self) -> int:
        item = 2 if self.half_products else 4
        pad = 2 * 2 * 4 * item * self.tile_k if self.conflict_free else 0  # a vec4 per k row, stages, operands
        red = 4 * self.tile_m * self.tile_n if self.slices > 1 else 0  # another plane's accumulators
        return 2 * item * self.tile_k * (self.tile_m + self.tile_n) + pad + red  # two stages of A and B tiles

    @property
    def threads(self) -> int:
        return self.wx * self.wy * self.slices

    def fits(self, caps: DeviceCaps) -> bool:
        return self.smem <= caps.max_workgroup_storage and self.threads <= caps.max_invocations


# the configurations gemm_blocked runs; the built-in rules use the first three, `wgjit tune` times them all
GEMM_CONFIGS: dict[str, GemmConfig] = {
    "b128k16": GemmConfig(128, 128, 16, 16, 16),  # 32 KiB of workgroup memory: the fastest on the H200
    "b128": GemmConfig(128, 128, 8, 16, 16),  # 16 KiB, for adapters at WebGPU's default limit
    "b64": GemmConfig(64, 64, 16, 16, 16),
    "b128k16l": GemmConfig(128, 128, 16, 16, 16, lanes=(8, 4)),  # 8x8 per thread, subgroups on 8x4 threads
    "b128x64": GemmConfig(128, 64, 16, 8, 16),  # 8x8 per thread, 128 threads
    "b64x128": GemmConfig(64, 128, 16, 16, 8),
    "b64l": GemmConfig(64, 64, 16, 16, 16, lanes=(8, 4)),
    "b64t8": GemmConfig(64, 64, 16, 8, 8),  # 8x8 per thread, 64 threads: fewer, busier threads
    "b64k32": GemmConfig(64, 64, 32, 16, 16),
    "b32x64": GemmConfig(32, 64, 16, 16, 8),  # small tiles: more workgroups for small outputs
    "b128k16c": GemmConfig(128, 128, 16, 16, 16, conflict_free=True),
    "b128k16lc": GemmConfig(128, 128, 16, 16, 16, lanes=(8, 4), conflict_free=True),
    "b128c": GemmConfig(128, 128, 8, 16, 16, conflict_free=True),
    # 16x8 / 8x16 per thread: fewer workgroup-memory reads per FMA, more registers
    "b256x128": GemmConfig(256, 128, 8, 16, 16, conflict_free=True),
    "b128x256": GemmConfig(128, 256, 8, 16, 16, conflict_free=True),
    "b128k16h": GemmConfig(128, 128, 16, 16, 16, conflict_free=True, half_products=True),
    "b128h": GemmConfig(128, 128, 8, 16, 16, conflict_free=True, half_products=True),
    "b64h": GemmConfig(64, 64, 16, 16, 16, conflict_free=True, half_products=True),
    "b128x64c": GemmConfig(128, 64, 16, 8, 16, conflict_free=True),
    "b64c": GemmConfig(64, 64, 16, 16, 16, conflict_free=True),
    "b64t8c": GemmConfig(64, 64, 16, 8, 8, conflict_free=True),
    "b128k16u": GemmConfig(128, 128, 16, 16, 16, unchecked=True),
    "b128k16cu": GemmConfig(128, 128, 16, 16, 16, conflict_free=True, unchecked=True),
    "b128cu": GemmConfig(128, 128, 8, 16, 16, conflict_free=True, unchecked=True),
    "b64u": GemmConfig(64, 64, 16, 16, 16, unchecked=True),
    "b64cu": GemmConfig(64, 64, 16, 16, 16, conflict_free=True, unchecked=True),
    # issue 14: small squares (1024^3: 64 tiles of 128x128, 256 of 64x64 for 132 multiprocessors) want more
    # threads per tile at 8x8 per thread: k sliced over 2 or 4 planes; and unchecked forms of the 8x8 tiles
    "b64t8s2": GemmConfig(64, 64, 16, 8, 8, slices=2),
    "b64t8s4": GemmConfig(64, 64, 16, 8, 8, slices=4),
    "b64t8s2u": GemmConfig(64, 64, 16, 8, 8, slices=2, unchecked=True),
    "b128x64s2": GemmConfig(128, 64, 8, 8, 16, slices=2),
    "b64x128s2": GemmConfig(64, 128, 8, 16, 8, slices=2),
    "b64t8k32s2": GemmConfig(64, 64, 32, 8, 8, slices=2),
    "b64t8u": GemmConfig(64, 64, 16, 8, 8, unchecked=True),
    "b128x64u": GemmConfig(128, 64, 16, 8, 16, unchecked=True),
    "b64x128u": GemmConfig(64, 128, 16, 16, 8, unchecked=True),
    "b128k16lu": GemmConfig(128, 128, 16, 16, 16, lanes=(8, 4), unchecked=True),
    "b128x64k32": GemmConfig(128, 64, 32, 8, 16),  # 48 KiB: half the barriers of k16
    "b64x128k32": GemmConfig(64, 128, 32, 16, 8),
    # around run F's winner of 4096^3 and 1024^3 (b64x128u: 8x8 per thread, 128 threads, unchecked)
    "b64x128k8u": GemmConfig(64, 128, 8, 16, 8, unchecked=True),
    "b64x128lu": GemmConfig(64, 128, 16, 16, 8, lanes=(8, 4), unchecked=True),
    "b64x128cu": GemmConfig(64, 128, 16, 16, 8, conflict_free=True, unchecked=True),
    "b32x128u": GemmConfig(32, 128, 16, 16, 4, unchecked=True),
    # 96 columns (12 threads of 8): widths of 384 (MiniLM, 384 = 4 x 96), 768, 1152, 1536 make whole waves of
    # 132 multiprocessors where 128-wide tiles leave a wave part-empty (4096x384: 128 tiles of 128x96, 96 of
    # 128x128; 4096x1152: 384 against 288)
    "b128x96": GemmConfig(128, 96, 16, 12, 16),
    "b128x96u": GemmConfig(128, 96, 16, 12, 16, unchecked=True),
    "b128x96k8u": GemmConfig(128, 96, 8, 12, 16, unchecked=True),
    "b64x96u": GemmConfig(64, 96, 16, 12, 8, unchecked=True),
}
# split-K candidates: "split4" cuts k into 4 chunks (passes.split_k), each chunk's GEMM chosen by the rules
GEMM_SPLITS = (2, 4, 8)


def _vec4_along(view: View, axis: int) -> bool:
    """Can 4 consecutive elements along `axis` be one vec4 load, at every index of the other axes?"""
    return _vec_along(view, axis, 4)


def _vec_along(view: View, axis: int, width: int) -> bool:
    if view.shape[axis] % width or view.strides[axis] != 1 or view.offset % width:
        return False
    return all(
        s % width == 0
        for i, (d, s) in enumerate(zip(view.shape, view.strides, strict=True))
        if d > 1 and i != axis % len(view.shape)
    )


def gemm_variant(a: View, b: View, n: int) -> str:
    """How gemm_blocked reads A and B and writes C: vec4 where the views allow it."""
    a_mode = "a_k4" if _vec4_along(a, -1) else "a_m4" if _vec4_along(a, -2) else "a_s"
    b_mode = "b_n4" if _vec4_along(b, -1) else "b_k4" if _vec4_along(b, -2) else "b_s"
    return f"{a_mode}.{b_mode}.{'o4' if n % 4 == 0 else 'o1'}"


def gemm_choice(config: str, variant: str, tuned: str = "") -> KernelChoice:
    """The KernelChoice of a named configuration; `tuned` (the cache entry, said by explain) when a tuning won."""
    c = GEMM_CONFIGS[config]
    params: tuple[tuple[str, Any], ...] = (("config", config), ("tile_m", c.tile_m), ("tile_n", c.tile_n))
    params += (("tile_k", c.tile_k), ("group_m", 8))
    if c.lanes is not None:
        params += (("lanes", c.lanes),)
    if c.conflict_free:
        params += (("cf", True),)
    if c.half_products:
        params += (("h16", True),)
    if c.unchecked:
        params += (("unchecked", True),)
    if tuned:
        params += (("tuned", tuned),)
    return KernelChoice(c.kernel, variant, workgroup=(c.wx, c.wy, c.slices), params=params)


# 128x128 tiles only when they alone make this many workgroups (a large GPU has 100+ multiprocessors)
# and k is long enough to pay for their larger prologue (the H200 sweep: q @ k.T with k=64 prefers 64x64).
# 96 (was 256): MiniLM's 4096x384 products make 96 such tiles, and b128k16 beat b64 on them anyway
# (benchmarks/runs/2026-12-01-C/gemm_sweep.txt: x384x384 0.0495 vs 0.0539 ms, x384x1536 0.171 vs 0.199)
BIG_GEMM_TILES = 96
BIG_GEMM_MIN_K = 256


@dataclass(frozen=True)
class GemmProblem:
    """What the GEMM rules look at: sizes, dtypes and operand views of one matmul."""

    batch: int
    m: int
    n: int
    k: int
    a: View
    b: View
    dtypes: tuple[DType, DType, DType]  # A, B, C

    @property
    def layout(self) -> str:
        return gemm_variant(self.a, self.b, self.n)

    @property
    def family(self) -> str:
        """Which kernel family runs it: one output row reads B along k (gemv) or along n (gemv_split); a few
        rows with B along k, gemm_thin; else gemm."""
        if self.m != 1:
            return ThinGemmKernel.name if thin_gemm_wins(self) else BlockedGemmKernel.name
        b_k_stride, b_n_stride = self.b.strides[-2], self.b.strides[-1]
        if b_k_stride == 1 and self.n > 1 or self.n == 1:
            return GemvKernel.name
        return SplitGemvKernel.name if b_n_stride == 1 else BlockedGemmKernel.name

    def variant(self, config: GemmConfig) -> str:
        """The layout, and `.x` (no edge checks) when the tiles cover the problem exactly."""
        exact = (
            self.k > 0 and self.m % config.tile_m == 0 and self.n % config.tile_n == 0 and self.k % config.tile_k == 0
        )
        return self.layout + (".x" if exact else "")

    def tuning_key(self) -> str:
        """The tuning cache's key: dtypes, operand layout and the power-of-two bucket of each size."""
        dt = ",".join(d.value for d in self.dtypes[:2]) + "->" + self.dtypes[2].value
        sizes = f"b{bucket(self.batch)} m{bucket(self.m)} n{bucket(self.n)} k{bucket(self.k)}"
        return f"{self.family} {dt} {self.layout} {sizes}"


def gemm_problem(graph: Graph, node: Node) -> GemmProblem:
    _, a_view = view_of_operand(graph, node.srcs[0])
    _, b_view = view_of_operand(graph, node.srcs[1])
    m, n, k = node.shape[-2], node.shape[-1], a_view.shape[-1]
    dtypes = (graph[node.srcs[0]].dtype, graph[node.srcs[1]].dtype, node.dtype)
    return GemmProblem(math.prod(node.shape[:-2]), m, n, k, a_view, b_view, dtypes)


def is_gemm(graph: Graph, node: Node) -> bool:
    """A matmul that gemm_blocked may run (not a GEMV, not a quantized product)."""
    return is_tunable_matmul(graph, node) and node.shape[-2] > 1


def is_tunable_matmul(graph: Graph, node: Node) -> bool:
    """A matmul whose kernel has configurations `wgjit tune` may time (not a quantized product)."""
    if node.op is not Op.MATMUL or node.dtype.is_quantized:
        return False
    return not any(graph[s].dtype.is_quantized for s in node.srcs)


def matmul_candidates(p: GemmProblem | QuantGemvProblem, caps: DeviceCaps) -> list[str]:
    """What `wgjit tune` times for one matmul problem, by its family."""
    if isinstance(p, QuantGemvProblem):
        return qthin_candidates(p, caps) if p.family == QuantThinKernel.name else qgemv_candidates(p, caps)
    return gemm_candidates(p, caps) if p.family == BlockedGemmKernel.name else gemv_candidates(p, caps)


def builtin_matmul_config(p: GemmProblem | QuantGemvProblem, caps: DeviceCaps) -> str:
    """The name of what the built-in rules pick for `p` (the tuner's baseline)."""
    caps = untuned(caps)
    if isinstance(p, QuantGemvProblem):
        return builtin_qthin_config(p, caps) if p.family == QuantThinKernel.name else builtin_qgemv_config(p)
    if p.family != BlockedGemmKernel.name:
        return _builtin_gemv(p, caps)
    split = builtin_gemm_split(p)
    return f"split{split}" if split > 1 else builtin_gemm_config(p, caps) or GemmKernel.name


# f32 GEMMs this large, tiled exactly by 64x128x8, with at least BIG_EXACT_MIN_TILES 128x128 tiles, run
# b64x128k8u (8x8 per thread, 128 threads, k steps of 8, no index clamps): the H200's fastest at 4096^3,
# 3.092 ms against b64x128u's (k steps of 16) 3.252 and cuBLAS's 2.673 (benchmarks/runs/2026-12-02-X/
# gemm_square.txt; run F: b128k16 3.39). Fewer tiles go to _wide_exact_gemm: 1024^3 (64 tiles) runs b64x128k8u
# too, 0.0635 ms against b64x128u's 0.0710 (cuBLAS 0.0576; run Q: 0.0647, 0.0716)
BIG_EXACT_GEMM, BIG_EXACT_MIN_TILES = 1024, 256


def builtin_gemm_config(p: GemmProblem, caps: DeviceCaps) -> str | None:
    """The built-in rule: b64x128k8u for large exact f32 problems, 64x128 tiles for wide ones (_wide_exact_gemm);
    128x128 tiles when there are enough of them and few are padding, else 64x64."""
    c = GEMM_CONFIGS["b64x128k8u"]
    f32 = all(d is DType.float32 for d in p.dtypes)
    # with index clamps (WGJIT_TRUSTED_SHADERS=0, backend_wgpu.device) b64x128 lost to b128k16 in run F
    trusted = os.environ.get("WGJIT_TRUSTED_SHADERS", "1").strip() != "0"
    big_tiles = p.batch * -(-p.m // 128) * -(-p.n // 128)
    big = min(p.m, p.n, p.k) >= BIG_EXACT_GEMM and big_tiles >= BIG_EXACT_MIN_TILES
    if f32 and trusted and big and _config_runs(p, c, caps):  # exact tiles
        return "b64x128k8u"
    wide = (_wide_exact_gemm(p, caps) or _narrow_exact_gemm(p, caps)) if f32 and trusted else None
    if wide is not None:
        return wide
    for config in ("b128k16", "b128", "b64"):
        c = GEMM_CONFIGS[config]
        tiles = p.batch * -(-p.m // c.tile_m) * -(-p.n // c.tile_n)
        # the share of the tiles' outputs that exist (an empty output has no tiles: it never runs)
        useful = p.batch * p.m * p.n / (tiles * c.tile_m * c.tile_n) if tiles else 1.0
        if c.tile_m == 128 and (tiles < BIG_GEMM_TILES or useful < 0.85 or p.k < BIG_GEMM_MIN_K):
            continue
        if c.fits(caps):
            return config
    return None


WIDE_GEMM_MIN_M, WIDE_GEMM_MIN_N = 512, 1024  # from these rows and columns the 64x128 exact tiles below win


def _narrow_exact_gemm(p: GemmProblem, caps: DeviceCaps) -> str | None:
    """128x96 unchecked tiles, k steps of 8, for f32 problems of 512+ rows and fewer than WIDE_GEMM_MIN_N
    columns that they tile exactly: 96-wide tiles fill whole waves where 128-wide ones leave one part-empty.

    H200 run J (benchmarks/runs/2026-12-01-J/gemm_minilm96.txt), ms against the older rule's b128k16:
    4096x384x384 0.0461 (0.0495), 4096x384x1536 0.1663 (0.1729).
    """
    if p.m < WIDE_GEMM_MIN_M or p.n >= WIDE_GEMM_MIN_N:
        return None
    return "b128x96k8u" if _config_runs(p, GEMM_CONFIGS["b128x96k8u"], caps) else None


def _wide_exact_gemm(p: GemmProblem, caps: DeviceCaps) -> str | None:
    """64x128 unchecked tiles for f32 problems of 512+ rows and 1024+ columns they tile exactly, where 128x128
    tiles are few (under 256) or k is short (under 1024): k steps of 8 up to k 2048, else 16.

    H200 run H (benchmarks/runs/2026-12-01-H/gemm_minilm.txt, gemm_prefill512.txt), ms against the older rule:
    4096x1536x384 0.1295 (b128k16 0.1390), 512x2048x2048 0.1345 (b64 0.1777), 512x2048x8192 b64x128u
    0.5952 (b64 0.6970); 512x8192x2048 keeps b128k16 (0.4455, the fastest there).
    """
    if p.m < WIDE_GEMM_MIN_M or p.n < WIDE_GEMM_MIN_N:
        return None
    big_tiles = p.batch * -(-p.m // 128) * -(-p.n // 128)
    few = big_tiles < 256
    name = "b64x128k8u" if p.k < 1024 or (few and p.k <= 2048) else "b64x128u" if few else None
    return name if name is not None and _config_runs(p, GEMM_CONFIGS[name], caps) else None


# thin GEMMs (prefill: few rows, long k) leave a large GPU idle: split k when 64x64 tiles make fewer
# than THIN_TILES workgroups and the product is large enough (THIN_MIN_FLOPS) to pay for the extra sum,
# into chunks until the tiles of all of them reach THIN_SPLIT_TILES (or a chunk would be under
# THIN_MIN_DEPTH). H200 runs F and M (64 tiles, k 2048): 512x512x2048, the ~1B decoder's k and v
# projections in a 512-token prefill, split8 0.0432 ms, split4 0.0543; 128x2048x2048 split4 0.0548, split8 0.0565
THIN_TILES = 128
THIN_SPLIT_TILES = 512
THIN_MIN_FLOPS = 1 << 28
THIN_MIN_DEPTH = 256  # k per chunk at least


# a product this deep whose 64x128 tiles fill at most one wave of an H200's 132 multiprocessors is cut
# in four along k: four times the workgroups, each a quarter as long. The ~1B decoder's down projection
# in a 512-token prefill, 512x2048x8192 (128 tiles), H200 run L (benchmarks/runs/2026-12-01-L/
# gemm_down512.txt): split4 0.4606 ms, split8 0.4720, split2 0.5052, unsplit at best 0.5866 (b64t8)
LONG_K, ONE_WAVE_TILES, LONG_K_SPLIT = 4096, 132, 4


# a product of MID_ROWS rows or more whose 64x128 tiles make at most MID_SPLIT_TILES workgroups (a wave and a
# half of an H200's 132 multiprocessors) and whose k is at least MID_K is cut in two along k. H200 run Q (benchmarks/runs/
# 2026-12-01-Q/gemm_minilm_splits.txt): MiniLM's down projection 4096x384x1536 (192 such tiles) split2
# 0.1524 ms against the best unsplit 0.1671 (b128x96k8u), split4 0.1558; run L: 512x2048x2048 (128 tiles)
# split2 0.1295 against 0.1333; 512x8192x2048 (512 tiles) keeps its unsplit 0.4469 (split2 0.4930). Not
# under MID_ROWS rows: 128x8192x2048 (128 tiles) ran fastest unsplit (run C: b64t8 0.1594, splits slower).
# 1024^3 (128 tiles, k 1024) since the chunks are summed by adds (passes/split_k.py: ADDED_CHUNKS): run Z
# (benchmarks/runs/2026-12-02-Z/gemm_1024.txt) split2 0.0614 ms against b64x128k8u's 0.0647 (cuBLAS 0.0579);
# with the SUM of run Q split2 took 0.0698
MID_SPLIT_TILES, MID_K, MID_ROWS = 192, 1024, 512


def builtin_gemm_split(p: GemmProblem) -> int:
    tiles = p.batch * -(-p.m // 64) * -(-p.n // 64)
    if 2 * p.batch * p.m * p.n * p.k < THIN_MIN_FLOPS:
        return 1
    if tiles >= THIN_TILES:
        wide = p.batch * -(-p.m // 64) * -(-p.n // 128)
        deep = p.k >= LONG_K and wide <= ONE_WAVE_TILES and p.k // LONG_K_SPLIT >= THIN_MIN_DEPTH
        if deep:
            return LONG_K_SPLIT
        return 2 if p.k >= MID_K and p.m >= MID_ROWS and wide <= MID_SPLIT_TILES else 1
    split = 1
    while tiles * split < THIN_SPLIT_TILES and p.k // (2 * split) >= THIN_MIN_DEPTH:
        split *= 2
    return split


def gemm_candidates(p: GemmProblem, caps: DeviceCaps, f16_products: bool | None = None) -> list[str]:
    """What `wgjit tune` times for one problem: every configuration that fits, and k splits for thin ones.

    f16 products (half_products) only for f16 operands, and only when asked (`f16_products`, by
    default WGJIT_TUNE_F16_PRODUCTS=1).
    """
    if f16_products is None:
        f16_products = os.environ.get("WGJIT_TUNE_F16_PRODUCTS", "") == "1"
    names = [
        name for name, c in GEMM_CONFIGS.items() if _config_runs(p, c, caps) and (f16_products or not c.half_products)
    ]
    tiles = p.batch * -(-p.m // 64) * -(-p.n // 64)
    if (tiles < 2 * THIN_TILES or p.k >= LONG_K // 2) and p.m > 1:
        names += [f"split{s}" for s in GEMM_SPLITS if p.k // s >= THIN_MIN_DEPTH]
    return names


def _tuned(p: GemmProblem | QuantGemvProblem, caps: DeviceCaps) -> tuple[str, str] | None:
    """(configuration, what explain says) from the tuning table, when it has a usable entry for `p`."""
    entry = caps.tuning.get(p.tuning_key())
    if entry is None:
        return None
    if not _usable(p, entry.config, caps):
        return None
    source = caps.tuning.source or "the tuning cache"
    said = (
        f"tuned ({source}, entry '{p.tuning_key()}': {entry.config} {entry.seconds * 1e6:.1f} us, "
        f"built-in {entry.builtin} {entry.builtin_seconds * 1e6:.1f} us)"
    )
    return entry.config, said


def _config_runs(p: GemmProblem, c: GemmConfig, caps: DeviceCaps) -> bool:
    """The configuration fits the adapter, f16 products only meet f16 operands, unchecked ones exact tiles."""
    f16 = p.dtypes[0] is DType.float16 and p.dtypes[1] is DType.float16 and caps.shader_f16
    exact = p.variant(c).endswith(".x")
    return c.fits(caps) and (f16 or not c.half_products) and (exact or not c.unchecked)


def _usable(p: GemmProblem | QuantGemvProblem, config: str, caps: DeviceCaps) -> bool:
    """Can `config` (a cache entry's name) run `p` on this adapter? A stale or foreign entry cannot."""
    if p.family == QuantGemvKernel.name:
        return config in qgemv_candidates(p, caps)
    if p.family == QuantThinKernel.name:
        return config in qthin_candidates(p, caps)
    if p.family == BlockedGemmKernel.name:
        return config.startswith("split") or (config in GEMM_CONFIGS and _config_runs(p, GEMM_CONFIGS[config], caps))
    return config in gemv_candidates(p, caps)


def gemm_split(graph: Graph, node: Node, caps: DeviceCaps) -> int:
    """How many chunks of k passes.split_k cuts a GEMM into (1: none): tuned, else the built-in thin rule."""
    if not is_gemm(graph, node):
        return 1
    p = gemm_problem(graph, node)
    if p.family != BlockedGemmKernel.name:  # gemm_thin splits k over its threads already
        return 1
    tuned = _tuned(p, caps)
    if tuned is not None:
        return int(tuned[0][len("split") :]) if tuned[0].startswith("split") else 1
    return builtin_gemm_split(p)


def _select_gemm(graph: Graph, node: Node, caps: DeviceCaps) -> KernelChoice | None:
    """Register-blocked GEMM: the tuned configuration where `wgjit tune` measured one, else the built-in rule."""
    p = gemm_problem(graph, node)
    tuned = _tuned(p, caps)
    if tuned is not None and not tuned[0].startswith("split"):
        return gemm_choice(tuned[0], p.variant(GEMM_CONFIGS[tuned[0]]), tuned=tuned[1])
    config = builtin_gemm_config(p, caps)
    return gemm_choice(config, p.variant(GEMM_CONFIGS[config])) if config else None


class AttentionTile(NamedTuple):
    """A flash_attention tile (backend_wgpu/kernels/attention/flash.py): query rows, keys per block, q^T in
    workgroup memory, k/v sharing one buffer; at most `tx` threads across the head dims; prefetch and v read
    from memory as the module's defaults say (ATTENTION_PREFETCH_MAX, ATTENTION_V_FROM_MEMORY) unless set."""

    br: int
    bc: int
    q_smem: bool
    kv_alias: bool
    tx: int = 8
    pf: bool | None = None
    vg: bool | None = None
    pl: bool | None = None
    sw: bool = False  # k swizzled instead of padded (FlashAttentionKernel's `sw`) where the head dim allows
    qr: bool = False  # q in registers, head dims split across a row group (`qr`) where subgroups and the head dim allow
    only_qr: bool = False  # the tile is for q in registers alone: skipped where `qr` cannot be
    min_dk: int = 0  # skipped for head dims below this


# flash_attention tiles, best first: the first that fits the device's workgroup memory wins. An H200
# multiprocessor runs one workgroup of each at a time (25 KiB of workgroup memory or more; run Z,
# benchmarks/device/occupancy.py); tiles under about 17 KiB run two at once, which made them no faster per
# query row (p kept in registers, run Z's occupancy_pr.txt)
ATTENTION_TILES: tuple[AttentionTile, ...] = (
    # 128 query rows per workgroup, k and v sharing a buffer, no prefetch, for every head dim that fits. H200
    # run X (benchmarks/runs/2026-12-02-X/attention_*.txt, loops unrolled, subgroup row maxes): MiniLM's
    # padded 32x12x128x64 0.0690 ms against 0.0753 with k and v apart and the next block prefetched (the
    # rule before), 0.0728 apart without it; causal 1x32x2048x128 (head dim 128, where k and v apart do not
    # fit 48 KiB) 1.233 ms, 1.338 with the prefetch. Run B: 128 rows beat 64 (0.110 against 0.145 ms).
    # q in registers (`qr`), k and v apart, the next block prefetched (ATTENTION_PREFETCH_MAX): with q in
    # registers k takes no padding, so at head dim 128 k, v and p fill 48 KiB exactly (with no padding mask). H200 run AA (attention_qx.txt): MiniLM's padded 0.0656 ms against 0.0724 with k and v sharing a
    # buffer; causal 1x32x2048x128 1.061 against 1.053-1.060, unmasked 1.938 against 1.942-1.947 (a wash)
    # Not below head dim 64: MiniLM's own heads (32 wide, its padded sentences' short key ranges) took 7.8 us a
    # dispatch with it against 5.9 with the next tile (H200 run AB, minilm_tiles_*.txt, two processes each;
    # random key ranges: 0.0420 ms against 0.0420, attention_d32.txt)
    AttentionTile(128, 32, False, False, qr=True, only_qr=True, min_dk=64),
    # q in registers where subgroups allow: run AA (attention_qr.txt, attention_qx.txt) causal 1x32x2048x128
    # 1.053 ms against 1.229 without (torch 0.911), unmasked 1.942 against 2.256
    AttentionTile(128, 32, False, True, pf=False, qr=True),
    # where 128-row blocks are too few (ATTENTION_MIN_WORKGROUPS): 64 rows by 64 keys, 16 threads a row group,
    # k swizzled so that the tile fits 48 KiB. H200 run X (attention_prefill_qt.txt): the ~1B decoder's
    # 512-token causal prefill, 32 query heads over 8, head dim 64, 0.0617 ms against 0.0778 for 64x32 with q
    # staged (the next tile)
    AttentionTile(64, 64, False, True, tx=16, pf=False, sw=True),
) + tuple(
    AttentionTile(*t)
    for t in (
        (64, 32, True, False),
        (64, 32, False, False),
        (64, 16, True, False),
        (32, 32, True, True),
        (32, 16, False, True),
        (16, 16, False, True),
        (8, 8, False, True),
        (4, 4, False, True),
    )
)


# a 128-row tile that makes fewer workgroups than this (batch x heads x query blocks) gives way to the next
# tile of fewer rows: one wave's longest block is the whole run's time, so more, shorter blocks finish sooner
# (two per multiprocessor of an H200; the ~1B decoder's causal prefill of 512 tokens is 32 heads x 4 blocks)
ATTENTION_MIN_WORKGROUPS = 264
# vec4 registers per thread a prefetch of the next k/v block may take (FlashAttentionKernel's `pf`)
ATTENTION_PREFETCH_MAX = 8
# v read from memory in the p v product instead of through workgroup memory (FlashAttentionKernel's `vg`)
ATTENTION_V_FROM_MEMORY = False
# the kernel's inner loops unrolled in the WGSL (`un`): None unrolls except on CPU adapters, whose LLVM
# takes minutes over the unrolled shaders (lavapipe: the attention tests 1.5 -> 11 minutes)
# (benchmarks/device/attention.py times both; H200 run H: MiniLM's padded 32x12x128x64 0.0805 -> 0.0744 ms,
# causal 1x32x2048x128 1.83 -> 1.59 ms, with the row-major order below 1.45 -> 1.30 ms)
ATTENTION_UNROLL: bool | None = None
# two barriers per block instead of four, k and v through registers (FlashAttentionKernel's `pl`; not with
# k and v sharing a buffer): slower on the H200 in run H (0.0818 vs 0.0744 ms padded, unrolled)
ATTENTION_PIPELINED = False
# causal: workgroups row block major across heads, every head's longest row block first (`lpt`); off: head major
# (H200 run H: causal 1x32x2048x128 1.83 -> 1.45 ms, 1.59 -> 1.30 unrolled)
ATTENTION_CAUSAL_ROW_MAJOR = True


def cpu_adapter(caps: DeviceCaps) -> bool:
    """Mesa's llvmpipe (lavapipe, and its GL driver): shaders compiled by LLVM on the CPU."""
    return "llvmpipe" in caps.name.lower()


def attention_choice(graph: Graph, node: Node, caps: DeviceCaps, tile: AttentionTile | None = None) -> KernelChoice:
    """Flash attention: vec4 loads where q, k and v allow them, the largest tile that fits (or `tile`)."""
    q, k, v = (view_of_operand(graph, s)[1] for s in node.srcs[:3])
    m = node.arg.operand("mask")
    key_range = FlashAttentionKernel.scans_key_range(
        node.arg, None if m is None else view_of_operand(graph, node.srcs[m])[1]
    )
    dk, dv = q.shape[-1], v.shape[-1]
    v4 = all(x.strides[-1] == 1 and vector_readable(x, 4) for x in (q, k, v))
    variant = f"{'v4' if v4 else 's'}.{'o4' if dv % 4 == 0 else 'o1'}"
    dv4 = 4 * max(1, -(-dv // 4))
    units, rows = math.prod(q.shape[:-2]), q.shape[-2]
    tiles = ATTENTION_TILES if tile is None else (tile,)
    for i, at in enumerate(tiles):
        few = at.br > 64 and units * -(-rows // at.br) < ATTENTION_MIN_WORKGROUPS
        if few and any(later.br < at.br for later in tiles[i + 1 :]):
            continue  # too few workgroups: a later tile of fewer rows runs more of them at once
        br, bc, q_smem, kv_alias = at.br, at.bc, at.q_smem, at.kv_alias
        # threads across dv: no padding past 4
        t = min(next(t for t in (16, 8, 4, 2, 1) if t <= at.tx and dv4 % (4 * t) == 0), bc)
        dkp, dvp = FlashAttentionKernel.padded_dims(dk, dv, t)
        sg = caps.subgroups and caps.subgroup_size >= t > 1
        vg = (ATTENTION_V_FROM_MEMORY if at.vg is None else at.vg) and v4 and not kv_alias
        sw = at.sw and dkp % 32 == 0
        qr = at.qr and sg and v4 and not q_smem and dkp % (4 * t) == 0
        sw = sw and not qr  # q in registers reads k unpadded and in order (the same bytes as swizzled)
        if (at.only_qr and not qr) or dk < at.min_dk:
            continue
        smem = FlashAttentionKernel.smem_bytes(br, bc, t, dkp, dvp, q_smem, kv_alias, sg, vg, sw or qr, key_range)
        un = not cpu_adapter(caps) if ATTENTION_UNROLL is None else ATTENTION_UNROLL
        walk = walk_iterations(k.shape[2], dkp, bc, br // 4 * t, un, True)  # the scan counted: the worst case
        if smem <= caps.max_workgroup_storage and br // 4 * t <= caps.max_invocations and walk <= LOOP_BUDGET:
            params = (("br", br), ("bc", bc), ("tx", t), ("dk", dkp), ("dv", dvp))
            params += (("q_smem", q_smem), ("kv_alias", kv_alias), ("sg", sg))
            # the next block of k and v prefetched into registers where that costs few of them
            fetches = -(-bc * (dkp + (0 if vg else dvp)) // (4 * (br // 4) * t))
            pf = fetches <= ATTENTION_PREFETCH_MAX if at.pf is None else at.pf
            pl = (ATTENTION_PIPELINED if at.pl is None else at.pl) and not kv_alias
            params += (("pf", pf), ("vg", vg), ("un", un), ("pl", pl), ("lpt", ATTENTION_CAUSAL_ROW_MAJOR), ("sw", sw))
            params += (("qr", qr),)
            return KernelChoice(FlashAttentionKernel.name, variant, workgroup=(br // 4 * t, 1, 1), params=params)
    raise NotImplementedError(f"select_kernels: no flash_attention tile fits head dims {dk}, {dv} on {caps.name}")
