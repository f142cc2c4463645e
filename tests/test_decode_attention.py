"""attention_decode and attention_combine (flash-decoding) against a float64 numpy attention.

Each case asserts which kernels ran, so a selection change cannot reroute silently; the
key ranges (ATTENTION_SPLITS + ATTENTION_COMBINE) are forced with a small workgroup
memory, and both lane sums (subgroup shuffles and the workgroup tree) run.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

import tracer as tr
from backend_wgpu import get_device
from backend_wgpu.kernels.attention.decode import DecodeAttentionKernel
from ir.ops import AttentionArg, Op
from tests.helpers import assert_close
from tests.test_kernels_perf_variants import run_with_caps
from tracer.tensor import make

pytestmark = pytest.mark.gpu
RNG = np.random.default_rng(7)


def attention(q: tr.Tensor, k: tr.Tensor, v: tr.Tensor, mask: tr.Tensor | None = None, kind: str = "none") -> tr.Tensor:
    """An ATTENTION node (q (B, H, 1, E), k/v (B, Hkv, S, E)); the mask broadcast to (B, H, 1, S)."""
    b, h, lq, e = q.shape
    arg = AttentionArg(1.0 / math.sqrt(e), False, kind, h // k.shape[1])
    srcs = (q, k, v) if mask is None else (q, k, v, mask.broadcast_to((b, h, lq, k.shape[2])))
    return make(Op.ATTENTION, srcs, (b, h, lq, v.shape[3]), q.dtype, arg)


def reference(q, k, v, mask=None, kind="none") -> np.ndarray:
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    g = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if kind == "add":
        s = s + mask
    elif kind == "bool":
        s = np.where(mask, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def kernels(program) -> list[str]:
    return [d.kernel for d in program.dispatches]


def inputs(b, h, hkv, s, e, ev, dtype="float32"):
    q = RNG.standard_normal((b, h, 1, e)).astype(dtype)
    k = RNG.standard_normal((b, hkv, s, e)).astype(dtype)
    v = RNG.standard_normal((b, hkv, s, ev)).astype(dtype)
    return q, k, v


@pytest.mark.parametrize(
    "b,h,hkv,s,e,ev",
    [
        (1, 4, 4, 1, 16, 16),  # one key
        (1, 8, 2, 37, 64, 64),  # grouped, a range shorter than a pass
        (2, 4, 1, 300, 32, 32),  # batch, one kv head for all
        (1, 2, 2, 129, 6, 6),  # head dim 2 mod 4: vec2 loads
        (1, 3, 3, 50, 7, 5),  # odd dims: scalar loads, Ev != E
        (1, 4, 2, 2000, 128, 128),  # many ranges
    ],
)
@pytest.mark.parametrize("subgroups", [True, False])
def test_decode_attention_values(b, h, hkv, s, e, ev, subgroups):
    q, k, v = inputs(b, h, hkv, s, e, ev)
    y = attention(tr.tensor(q), tr.tensor(k), tr.tensor(v))
    got, program = run_with_caps(y, subgroups=subgroups and get_device().caps.subgroups)
    assert "attention_decode" in kernels(program)
    assert_close(got, reference(q, k, v), rtol=1e-4, atol=1e-5)


def test_decode_attention_splits_when_memory_is_small():
    q, k, v = inputs(1, 4, 2, 700, 16, 16)
    y = attention(tr.tensor(q), tr.tensor(k), tr.tensor(v))
    got, program = run_with_caps(y, max_workgroup_storage=16384)
    assert kernels(program) == ["attention_decode", "attention_combine"]
    assert_close(got, reference(q, k, v), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("s", [40, 512, 513])
def test_decode_attention_one_range(s):
    """Up to DECODE_ONE_RANGE_KEYS keys a head is one range (no combine); past it, ranges and a combine."""
    from passes.select_kernels import DECODE_ONE_RANGE_KEYS

    assert DECODE_ONE_RANGE_KEYS == 512
    q, k, v = inputs(1, 4, 4, s, 16, 16)
    y = attention(tr.tensor(q), tr.tensor(k), tr.tensor(v))
    got, program = run_with_caps(y)
    assert kernels(program) == ["attention_decode"] + (["attention_combine"] if s > 512 else [])
    assert_close(got, reference(q, k, v), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", ["add", "bool"])
@pytest.mark.parametrize("s", [30, 900])
def test_decode_attention_masks(kind, s):
    q, k, v = inputs(1, 4, 2, s, 32, 32)
    keep = RNG.random(s) < 0.6
    keep[-1] = True
    keep[: s // 2] = False  # whole ranges masked: they must add nothing, not NaN
    mask = keep if kind == "bool" else np.where(keep, RNG.standard_normal(s), -np.inf).astype(np.float32)
    y = attention(tr.tensor(q), tr.tensor(k), tr.tensor(v), tr.tensor(mask.reshape(1, 1, 1, s)), kind)
    got, program = run_with_caps(y)
    assert kernels(program)[0] == "attention_decode"
    assert_close(got, reference(q, k, v, mask.reshape(1, 1, 1, s), kind), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("s", [20, 700])
def test_decode_attention_all_masked_is_nan(s):
    q, k, v = inputs(1, 2, 2, s, 16, 16)
    mask = np.zeros((1, 1, 1, s), bool)
    y = attention(tr.tensor(q), tr.tensor(k), tr.tensor(v), tr.tensor(mask), "bool")
    got, _ = run_with_caps(y)
    assert np.isnan(got).all()


@pytest.mark.parametrize("s", [20, 2000])
@pytest.mark.parametrize("subgroups", [True, False])
def test_a_nan_score_makes_its_heads_nan(s, subgroups):
    """Fuzzing on the H200 found NaN scores dropped (0 * inf, or a NaN key): the heads that read
    them are NaN, as the reference's softmax; the others keep their values (one range or many)."""
    q, k, v = inputs(1, 4, 2, s, 16, 16)
    q[0, 1, 0, 3] = -0.0
    k[0, 0, s // 3, 3] = np.inf  # -0.0 * inf: a NaN score for query head 1 only (kv head 0)
    k[0, 1, s - 2, 5] = np.nan  # a NaN key: query heads 2 and 3 (kv head 1)
    q[0, 0, 0, 3] = 0.5  # head 0 reads the inf key: its score is +-inf, not NaN
    y = attention(tr.tensor(q), tr.tensor(k), tr.tensor(v))
    got, program = run_with_caps(y, subgroups=subgroups and get_device().caps.subgroups)
    assert kernels(program)[0] == "attention_decode"
    with np.errstate(all="ignore"):
        want = reference(q, k, v)
    assert np.isnan(got[0, 1:]).all() and np.isnan(want[0, 1:]).all()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


def test_decode_attention_float16_cache():
    q, k, v = inputs(1, 8, 2, 500, 64, 64, "float16")
    y = attention(tr.tensor(q), tr.tensor(k), tr.tensor(v))
    got, program = run_with_caps(y)
    assert "attention_decode" in kernels(program)
    assert got.dtype == np.float16
    assert_close(got, reference(q, k, v), rtol=3e-3, atol=3e-3)


def test_decode_attention_over_a_cache_slice():
    """The lazy decode loop attends over cache[:, :, :pos + 1]: a strided view of a longer cache."""
    q, k, v = inputs(1, 4, 2, 256, 32, 32)
    pos = 99
    y = attention(tr.tensor(q), tr.tensor(k)[:, :, : pos + 1], tr.tensor(v)[:, :, : pos + 1])
    got, program = run_with_caps(y)
    assert "attention_decode" in kernels(program)
    assert_close(got, reference(q, k[:, :, : pos + 1], v[:, :, : pos + 1]), rtol=1e-4, atol=1e-5)


def test_split_matches_the_interpreter():
    """ATTENTION_SPLITS + ATTENTION_COMBINE evaluated by ir.interpret equal the whole attention."""
    from ir.interpret import interpret
    from passes import run_pipeline
    from tracer.graph_builder import build_graph

    q, k, v = inputs(1, 4, 2, 700, 16, 16)
    y = attention(tr.tensor(q), tr.tensor(k), tr.tensor(v))
    built = build_graph([y._lazy])
    caps = get_device().caps
    graph = run_pipeline(built.graph, caps).graph
    assert any(n.op is Op.ATTENTION_SPLITS for n in graph)
    hosts = [
        lz.host if lz.host is not None else np.frombuffer(get_device().read(lz.buffer), lz.dtype.np).reshape(lz.shape)
        for lz in built.inputs
    ]
    (got,) = interpret(graph, hosts)
    assert_close(got, reference(q, k, v), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("e,s,ranges", [(16, 333, "many"), (32, 333, "many"), (32, 900, "few"), (128, 333, "many")])
def test_lane_sums_by_subgroup_shuffles(e, s, ranges, monkeypatch):
    """Where the adapter's subgroups hold a row's lanes (lavapipe's are 8 wide), shuffles sum them
    (4 lanes; 8 for e = 128) ("few" ranges: long ones, many steps each)."""
    from passes import select_kernels as sk

    if not get_device().caps.subgroups:  # the kernel is forced to shuffle: it cannot compile without them
        pytest.skip(f"the adapter ({get_device().caps.name}) has no subgroups")
    if ranges == "few":
        monkeypatch.setattr(sk, "DECODE_TARGET_WORKGROUPS", 1)
    q, k, v = inputs(1, 8, 2, s, e, e)
    y = attention(tr.tensor(q), tr.tensor(k), tr.tensor(v))
    got, program = run_with_caps(y, subgroups=True, subgroup_size=8)
    assert "subgroupShuffleXor" in program.sources[program.dispatches[0].key]
    assert_close(got, reference(q, k, v), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("threads,unroll,slices", [(32, 1, 4), (64, 3, 4), (256, 4, 4), (4, 2, 4), (128, 2, 2)])
@pytest.mark.parametrize("subgroups", [True, False])
def test_workgroup_shapes(threads, unroll, slices, subgroups, monkeypatch):
    """Every rows x unroll x lanes shape the H200 benchmark tries (one row of 4 lanes: no merge; two
    slices a lane: rows of 8 lanes), with a mask hiding the first ranges and the lanes summed both
    ways, against float64 numpy."""
    from passes import select_kernels as sk

    monkeypatch.setattr(sk, "DECODE_THREADS", threads)
    monkeypatch.setattr(sk, "DECODE_UNROLL", unroll)
    monkeypatch.setattr(sk, "DECODE_SLICES", slices)
    q, k, v = inputs(1, 8, 2, 777, 64, 64)
    keep = RNG.random(777) < 0.7
    keep[:200] = False
    y = attention(tr.tensor(q), tr.tensor(k), tr.tensor(v), tr.tensor(keep.reshape(1, 1, 1, 777)), "bool")
    got, program = run_with_caps(y, subgroups=subgroups and get_device().caps.subgroups, subgroup_size=4)
    assert kernels(program) == ["attention_decode", "attention_combine"]
    assert program.dispatches[0].workgroup_size == (threads, 1, 1)
    assert_close(got, reference(q, k, v, keep.reshape(1, 1, 1, 777), "bool"), rtol=1e-4, atol=1e-5)


def test_rows_merge_a_head_at_a_time(monkeypatch):
    """Workgroup memory for one head's half rows only (128 threads: 32 rows of 4 lanes): the rows' tree
    merges the heads one by one."""
    from passes import run_pipeline
    from passes import select_kernels as sk
    from tracer.graph_builder import build_graph

    monkeypatch.setattr(sk, "DECODE_THREADS", 128)

    q, k, v = inputs(1, 8, 2, 700, 64, 64)
    y = attention(tr.tensor(q), tr.tensor(k), tr.tensor(v))
    caps = replace(get_device().caps, max_workgroup_storage=10240, subgroups=False)
    graph = run_pipeline(build_graph([y._lazy]).graph, caps).graph
    assert [n.kernel.param("merge_heads") for n in graph if n.op is Op.ATTENTION_SPLITS] == [1]
    got, _ = run_with_caps(y, max_workgroup_storage=10240, subgroups=False)
    assert_close(got, reference(q, k, v), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("e", [128, 256])
def test_lane_shuffles_chosen_as_the_workgroup_runs(e):
    """Rows of 8 or 16 lanes where the adapter reports subgroups of 4 (as wgpu does for most adapters): the
    workgroup picks shuffles or workgroup memory from the subgroup size it finds (both are compiled in;
    lavapipe runs subgroups of 8: e = 128 takes the shuffles, e = 256 workgroup memory)."""
    if not get_device().caps.subgroups:
        pytest.skip(f"the adapter ({get_device().caps.name}) has no subgroups")
    q, k, v = inputs(1, 8, 2, 300, e, e)
    y = attention(tr.tensor(q), tr.tensor(k), tr.tensor(v))
    got, program = run_with_caps(y, subgroups=True, subgroup_size=4)
    code = program.sources[program.dispatches[0].key]
    assert "workgroupUniformLoad" in code and "subgroupShuffleXor" in code and "part[" in code
    assert_close(got, reference(q, k, v), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("per_wg", [1, 2, 3, 0])
@pytest.mark.parametrize("s,kind", [(129, "none"), (700, "bool"), (300, "add"), (600, "add")])
def test_fewer_query_heads_per_workgroup(per_wg, s, kind, monkeypatch):
    """DECODE_ONE_RANGE_HEADS / DECODE_RANGE_HEADS: each workgroup takes a divisor of a kv head's query
    heads (3 gives gcd(4, 3) = 1), so a short cache gets heads / per_wg workgroups instead of one per kv
    head; one range or several, masks broadcast per head, a batch of two, against float64 numpy."""
    from passes import select_kernels as sk

    monkeypatch.setattr(sk, "DECODE_ONE_RANGE_HEADS", per_wg)
    monkeypatch.setattr(sk, "DECODE_RANGE_HEADS", per_wg)
    q, k, v = inputs(2, 8, 2, s, 64, 64)
    mask = None
    if kind == "bool":
        mask = RNG.random((2, 8, 1, s)) < 0.6
        mask[..., 0] = True
    elif kind == "add":
        mask = RNG.standard_normal((2, 1, 1, s)).astype(np.float32)
    y = attention(tr.tensor(q), tr.tensor(k), tr.tensor(v), None if mask is None else tr.tensor(mask), kind)
    got, program = run_with_caps(y)
    heads = {0: 4, 2: 2}.get(per_wg, 1)  # query heads per workgroup (0: all four of a kv head)
    first = program.dispatches[0]
    node = program.graph[first.node]
    splits = node.arg.splits if node.op is Op.ATTENTION_SPLITS else 1
    assert (splits > 1) == (s > 512) and kernels(program)[0] == "attention_decode"
    assert first.workgroup_count[0] == 2 * (8 // heads) * splits  # (batch, query heads, range)
    reason = DecodeAttentionKernel.reason(program.graph, node)
    said = "a workgroup per kv head" if heads == 4 else f"a workgroup per {heads} of the 4 query heads of a kv head"
    assert said in reason, reason
    assert_close(got, reference(q, k, v, mask, kind), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("s,heads", [(129, 1), (700, 2), (2000, 4)])
def test_heads_per_workgroup_rule_by_length(s, heads):
    """The built-in rule: one query head a workgroup up to DECODE_ONE_RANGE_KEYS, two with key ranges up
    to DECODE_RANGE_HEADS_KEYS, all four of the kv head past it (a long cache read once); against numpy."""
    q, k, v = inputs(1, 8, 2, s, 64, 64)
    got, program = run_with_caps(attention(tr.tensor(q), tr.tensor(k), tr.tensor(v)))
    reason = DecodeAttentionKernel.reason(program.graph, program.graph[program.dispatches[0].node])
    said = "a workgroup per kv head" if heads == 4 else f"a workgroup per {heads} of the 4 query heads"
    assert said in reason, reason
    assert_close(got, reference(q, k, v), rtol=1e-4, atol=1e-5)
