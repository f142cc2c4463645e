"""Flash attention (Op.ATTENTION, kernels/attention/flash.py) against numpy in float64.

Every case asserts that the attention ran as one flash_attention dispatch, so a rule change
that routes it elsewhere fails. Covered: every mask kind (none, bool, additive f32/f16,
each with and without causal), causal with Lq < S, Lq == S and Lq > S (rows that see no key
are NaN), grouped-query and multi-query attention, the head dims 32..128 and odd ones
(scalar loads), masks broadcast over batch and heads (stride-0 views), strided q/k/v (a
permuted (B, S, H, D) layout, a slice of a cache), empty and length-1 edges, float16, every
tile configuration of passes.select_kernels and the subgroup reduction.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracer as tr
from backend_wgpu import Program, get_device
from ir.ops import AttentionArg
from passes import run_pipeline
from passes import select_kernels as sk
from tests.strategies import attention_programs
from tests.test_fuzz import check_program
from tracer.graph_builder import build_graph

pytestmark = pytest.mark.gpu


def np_attention(q, k, v, mask=None, causal=False, scale=None) -> np.ndarray:  # noqa: ANN001
    """softmax(q k^T * scale + mask) v in float64; kv head h // (H / Hkv) for grouped-query attention."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    if q.ndim >= 3 and k.ndim >= 3 and q.shape[-3] != k.shape[-3]:
        g = q.shape[-3] // k.shape[-3]
        k, v = np.repeat(k, g, axis=-3), np.repeat(v, g, axis=-3)
    s = q @ np.swapaxes(k, -1, -2) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    lq, n = s.shape[-2:]
    if n == 0:
        return np.zeros(s.shape[:-1] + v.shape[-1:])
    if causal:
        s = np.where(np.arange(n)[None, :] <= np.arange(lq)[:, None] + (n - lq), s, -np.inf)
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask.astype(np.float64)
    with np.errstate(invalid="ignore"):
        p = np.exp(s - s.max(-1, keepdims=True))
        return (p / p.sum(-1, keepdims=True)) @ v


@pytest.fixture(autouse=True)
def flash_only(monkeypatch: pytest.MonkeyPatch) -> object:
    """These tests are about flash_attention: one query row over a cache goes to attention_decode
    otherwise (tests/test_decode_attention.py tests that kernel). Cached programs are dropped on
    both sides so no program compiled under the other rule is replayed."""
    from passes import select_kernels, split_attention
    from tracer.realize import clear_program_cache

    clear_program_cache()
    for module in (select_kernels, split_attention):
        monkeypatch.setattr(module, "decode_attention_plan", lambda graph, node, caps: None)
    yield
    clear_program_cache()


def sdpa(q, k, v, mask=None, causal=False, scale=None) -> tr.Tensor:  # noqa: ANN001
    t = [tr.tensor(a) for a in (q, k, v)]
    m = None if mask is None else tr.tensor(mask)
    return tr.nn.scaled_dot_product_attention(*t, mask=m, is_causal=causal, scale=scale)


def attention_dispatch(y: tr.Tensor) -> object:
    """The one dispatch that computes y: flash attention (a host mask or a view adds nothing)."""
    dispatches = tr.compile(y).dispatches
    assert [d.kernel for d in dispatches] == ["flash_attention"], tr.compile(y).summary()
    return dispatches[0]


def check(y: tr.Tensor, want: np.ndarray, tol: float = 2e-6) -> None:
    got = y.numpy().astype(np.float64)
    assert got.shape == want.shape
    assert np.array_equal(np.isnan(got), np.isnan(want)), "NaN rows differ"
    scale = max(1.0, float(np.nanmax(np.abs(want)))) if want.size and not np.isnan(want).all() else 1.0
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale, equal_nan=True)


def randn(rng: np.random.Generator, *shape: int, dtype: str = "float32") -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


# --- head dims -------------------------------------------------------------------------------------


@pytest.mark.parametrize("d", [32, 64, 80, 96, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_head_dims(d: int, causal: bool, rng: np.random.Generator) -> None:
    # 37 rows and 45 keys: partial row blocks and key blocks at every tile size
    q, k, v = randn(rng, 1, 2, 37, d), randn(rng, 1, 2, 45, d), randn(rng, 1, 2, 45, d)
    y = sdpa(q, k, v, causal=causal)
    assert attention_dispatch(y).variant.startswith("v4.o4")
    check(y, np_attention(q, k, v, causal=causal))


@pytest.mark.parametrize("dk,dv", [(5, 7), (1, 3), (20, 12), (33, 65), (6, 2)])
def test_odd_head_dims(dk: int, dv: int, rng: np.random.Generator) -> None:
    q, k, v = randn(rng, 2, 3, 9, dk), randn(rng, 2, 3, 11, dk), randn(rng, 2, 3, 11, dv)
    y = sdpa(q, k, v, causal=True)
    d = attention_dispatch(y)
    assert d.variant.startswith("s." if dk % 4 else "v4.") or dv % 4, d.variant
    check(y, np_attention(q, k, v, causal=True))


def test_head_dim_past_the_kernel_is_composed(rng: np.random.Generator) -> None:
    q, k, v = randn(rng, 1, 1, 3, 520), randn(rng, 1, 1, 4, 520), randn(rng, 1, 1, 4, 2)
    y = sdpa(q, k, v)
    assert "flash_attention" not in [d.kernel for d in tr.compile(y).dispatches]
    check(y, np_attention(q, k, v), tol=1e-5)


# --- masks -------------------------------------------------------------------------------------------


def make_mask(rng: np.random.Generator, kind: str, shape: tuple[int, ...]) -> np.ndarray:
    if kind == "bool":
        m = rng.random(shape) > 0.3
        m[..., 0] = True  # every query sees a key (fully masked rows have their own test)
        return m
    m = rng.standard_normal(shape).astype("float16" if kind == "add16" else "float32")
    m[rng.random(shape) < 0.2] = -np.inf
    m[..., 0] = 0.5
    return m


@pytest.mark.parametrize("kind", ["bool", "add", "add16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_mask_kinds(kind: str, causal: bool, rng: np.random.Generator) -> None:
    if kind == "add16" and not get_device().caps.shader_f16:  # a float16 mask (conftest's name test misses it)
        pytest.skip(f"the adapter ({get_device().caps.name}) lacks shader-f16")
    q, k, v = randn(rng, 2, 3, 13, 16), randn(rng, 2, 3, 21, 16), randn(rng, 2, 3, 21, 8)
    mask = make_mask(rng, kind, (2, 3, 13, 21))
    y = sdpa(q, k, v, mask, causal=causal)
    attention_dispatch(y)
    check(y, np_attention(q, k, v, mask, causal))


@pytest.mark.parametrize(
    "mshape",
    [(21,), (13, 21), (2, 1, 1, 21), (2, 1, 13, 21), (1, 3, 1, 21), (3, 13, 21), (2, 3, 13, 21)],
    ids=lambda s: "x".join(map(str, s)),
)
def test_masks_broadcast_over_batch_and_heads(mshape: tuple[int, ...], rng: np.random.Generator) -> None:
    q, k, v = randn(rng, 2, 3, 13, 32), randn(rng, 2, 3, 21, 32), randn(rng, 2, 3, 21, 32)
    mask = make_mask(rng, "bool", mshape)
    y = sdpa(q, k, v, mask)
    attention_dispatch(y)  # the broadcast is a stride-0 view: no copy of the mask
    check(y, np_attention(q, k, v, mask))
    add = make_mask(rng, "add", mshape)
    check(sdpa(q, k, v, add), np_attention(q, k, v, add))


def test_padding_mask_as_minilm_builds_it(rng: np.random.Generator) -> None:
    # (n, 1, 1, t) keep-mask over q, k, v that are (n, t, heads, dh) views permuted to (n, heads, t, dh)
    n, t, heads, dh = 3, 20, 4, 32
    x = randn(rng, n, t, 3 * heads * dh)
    lengths = [20, 13, 1]
    keep = np.arange(t)[None, :] < np.array(lengths)[:, None]
    X = tr.tensor(x)

    def split(i: int) -> tr.Tensor:
        return X[..., i * heads * dh : (i + 1) * heads * dh].reshape(n, t, heads, dh).permute(0, 2, 1, 3)

    y = tr.nn.scaled_dot_product_attention(split(0), split(1), split(2), mask=tr.tensor(keep).reshape(n, 1, 1, t))
    assert attention_dispatch(y).variant.startswith("v4.o4")
    ref = [
        x[..., i * heads * dh : (i + 1) * heads * dh].reshape(n, t, heads, dh).transpose(0, 2, 1, 3) for i in range(3)
    ]
    check(y, np_attention(*ref, keep.reshape(n, 1, 1, t)))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("kv_heads", [1, 3])
def test_padding_mask_skips_hidden_key_blocks(causal: bool, kv_heads: int, rng: np.random.Generator) -> None:
    # a key padding mask (B, 1, 1, S) is the same for every row: the kernel visits only the blocks from
    # the first to the last key it lets through; per batch: all keys, a right-padded prefix, a
    # left-padded suffix, a window in the middle, one key, and none (its rows are NaN)
    b, s = 6, 150
    q, k, v = randn(rng, b, 3, 70, 64), randn(rng, b, kv_heads, s, 64), randn(rng, b, kv_heads, s, 48)
    keep = np.zeros((b, 1, 1, s), bool)
    for i, (lo, hi) in enumerate([(0, s), (0, 37), (100, s), (40, 90), (77, 78), (0, 0)]):
        keep[i, ..., lo:hi] = True
    keep[3, ..., 60] = False  # a hidden key inside the window
    y = sdpa(q, k, v, keep, causal=causal)
    assert ".row0" in attention_dispatch(y).variant
    want = np_attention(q, k, v, keep, causal=causal)
    assert np.isnan(want[5]).all()
    check(y, want)


# --- causal, grouped-query ------------------------------------------------------------------------


@pytest.mark.parametrize("row_major", [False, True], ids=["head-major", "row-block-major"])
@pytest.mark.parametrize("lq,s", [(5, 70), (70, 70), (70, 5), (1, 40), (40, 1), (1, 1), (300, 300)])
def test_causal_lengths(
    lq: int, s: int, row_major: bool, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sk, "ATTENTION_CAUSAL_ROW_MAJOR", row_major)  # the order workgroups take row blocks
    q, k, v = randn(rng, 1, 3, lq, 32), randn(rng, 1, 3, s, 32), randn(rng, 1, 3, s, 32)
    y = sdpa(q, k, v, causal=True)
    assert ("o" in attention_dispatch(y).variant.split(":")[3]) == row_major
    want = np_attention(q, k, v, causal=True)
    if lq > s:  # the first lq - s queries see no key: NaN, as the composed softmax gives
        assert np.isnan(want[..., : lq - s, :]).all()
    check(y, want)


@pytest.mark.parametrize("kv_heads", [1, 2, 4])
@pytest.mark.parametrize("mask", [None, "bool", "add"])
def test_grouped_query(kv_heads: int, mask: str | None, rng: np.random.Generator) -> None:
    q, k, v = randn(rng, 2, 8, 9, 16), randn(rng, 2, kv_heads, 12, 16), randn(rng, 2, kv_heads, 12, 16)
    m = None if mask is None else make_mask(rng, mask, (2, 8, 9, 12))
    y = sdpa(q, k, v, m, causal=True)
    d = attention_dispatch(y)
    assert d.metadata and dict(d.metadata)["group"] == 8 // kv_heads
    check(y, np_attention(q, k, v, m, causal=True))


def test_scale_and_unbatched(rng: np.random.Generator) -> None:
    q, k, v = randn(rng, 7, 12), randn(rng, 9, 12), randn(rng, 9, 4)
    y = sdpa(q, k, v, scale=0.3)
    assert y.shape == (7, 4)
    attention_dispatch(y)
    check(y, np_attention(q, k, v, scale=0.3))


# --- edges ---------------------------------------------------------------------------------------------


def test_fully_masked_rows_are_nan(rng: np.random.Generator) -> None:
    q, k, v = randn(rng, 1, 2, 6, 8), randn(rng, 1, 2, 40, 8), randn(rng, 1, 2, 40, 8)
    keep = rng.random((1, 2, 6, 40)) > 0.5
    keep[0, 0, 2] = False  # this query sees nothing
    add = np.zeros((1, 2, 6, 40), np.float32)
    add[0, 1, 4] = -np.inf
    for mask in (keep, add):
        y = sdpa(q, k, v, mask).numpy()
        want = np_attention(q, k, v, mask)
        assert np.isnan(y[0, 0, 2]).all() if mask is keep else np.isnan(y[0, 1, 4]).all()
        check(sdpa(q, k, v, mask), want)


@pytest.mark.parametrize(
    "qs,ks", [((1, 2, 3, 8), (1, 2, 0, 8)), ((1, 2, 0, 8), (1, 2, 5, 8)), ((0, 2, 3, 8), (0, 2, 5, 8))]
)
def test_empty(qs: tuple[int, ...], ks: tuple[int, ...], rng: np.random.Generator) -> None:
    q, k = randn(rng, *qs), randn(rng, *ks)
    y = sdpa(q, k, k, causal=True)
    want = np_attention(q, k, k, causal=ks[2] >= qs[2])  # no keys at all: 0, the empty sum
    if ks[2] == 0:
        assert (want == 0).all() and want.shape == (1, 2, 3, 8)
    else:
        want = np_attention(q, k, k, causal=True)
    check(y, want)


def test_nonfinite_scores_follow_numpy(rng: np.random.Generator) -> None:
    q, k, v = randn(rng, 1, 1, 4, 8), randn(rng, 1, 1, 6, 8), randn(rng, 1, 1, 6, 8)
    q[0, 0, 1, 3] = np.nan  # NaN row
    q[0, 0, 2, :] = 1e30  # scores overflow to +-inf: inf - inf is NaN as in numpy
    check(sdpa(q, k, v), np_attention(q, k, v))


# --- dtypes and layouts ------------------------------------------------------------------------------


@pytest.mark.parametrize("loads", ["", "pv"], ids=["rule", "prefetch+v-from-memory"])
def test_float16(loads: str, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    if not get_device().caps.shader_f16:
        pytest.skip("this adapter has no shader-f16")
    if loads:
        monkeypatch.setattr(sk, "ATTENTION_PREFETCH_MAX", 10**6)
        monkeypatch.setattr(sk, "ATTENTION_V_FROM_MEMORY", True)
    q, k, v = (randn(rng, 2, 4, 19, 64, dtype="float16") for _ in range(3))
    mask = make_mask(rng, "add16", (2, 1, 19, 19))
    y = sdpa(q, k, v, mask, causal=True)
    assert y.dtype is tr.float16
    got, program = run_with_caps(y)  # a fresh compile: the program cache does not know the patched rule
    (d,) = program.dispatches
    assert d.kernel == "flash_attention" and all(f in d.variant.split(":")[3] for f in loads), d.variant
    # f32 accumulation: within one float16 rounding of the float64 result
    check_arrays(got, np_attention(q, k, v, mask, causal=True), tol=2e-3)
    keep = np.zeros((2, 1, 1, 19), bool)  # a key padding mask: its hidden blocks skipped
    keep[0, ..., :7], keep[1, ..., 3:] = True, True
    got, _ = run_with_caps(sdpa(q, k, v, keep))
    check_arrays(got, np_attention(q, k, v, keep), tol=2e-3)


def test_mixed_dtypes_promote(rng: np.random.Generator) -> None:
    if not get_device().caps.shader_f16:
        pytest.skip("this adapter has no shader-f16")
    q, k, v = randn(rng, 1, 2, 5, 8, dtype="float16"), randn(rng, 1, 2, 7, 8), randn(rng, 1, 2, 7, 8)
    y = sdpa(q, k, v)
    assert y.dtype is tr.float32
    check(y, np_attention(q, k, v), tol=1e-5)


def test_slice_of_a_cache_and_odd_offsets(rng: np.random.Generator) -> None:
    cache = randn(rng, 1, 2, 64, 33)
    q = randn(rng, 1, 2, 1, 32)
    C = tr.tensor(cache)
    keys = C[:, :, :37, 1:]  # offset 1: not vec4-aligned, read as scalars
    y = tr.nn.scaled_dot_product_attention(tr.tensor(q), keys, keys)
    assert attention_dispatch(y).variant.startswith("s.")
    check(y, np_attention(q, cache[:, :, :37, 1:], cache[:, :, :37, 1:]))
    keys4 = C[:, :, :37, :32]  # aligned rows of 33: row stride 33 is not a multiple of 4 either
    check(tr.nn.scaled_dot_product_attention(tr.tensor(q), keys4, keys4), np_attention(q, *[cache[:, :, :37, :32]] * 2))


def test_expanded_batch_of_kv(rng: np.random.Generator) -> None:
    # k and v shared by every batch row (2-D): broadcast as stride-0 views
    q, k, v = randn(rng, 3, 2, 5, 8), randn(rng, 6, 8), randn(rng, 6, 4)
    y = sdpa(q, k, v)
    attention_dispatch(y)
    check(y, np_attention(q, k, v))


# --- every tile and both reductions ------------------------------------------------------------------


def run_with_caps(y: tr.Tensor, **changes: object) -> tuple[np.ndarray, Program]:
    dev = get_device()
    built = build_graph([y._lazy])
    program = Program(run_pipeline(built.graph, dataclasses.replace(dev.caps, **changes)).graph, dev)
    buffers = []
    for lz in built.inputs:
        if lz.buffer is None:
            lz.buffer = dev.upload(lz.host)
            lz.host = None
        buffers.append(lz.buffer)
    out = program.run(buffers)[0]
    return np.frombuffer(dev.read(out), dtype=y.dtype.np).reshape(y.shape), program


@pytest.mark.parametrize(
    "prefetch,v_memory", [(False, False), (True, False), (False, True), (True, True)], ids=["", "p", "v", "pv"]
)
@pytest.mark.parametrize("tile", sk.ATTENTION_TILES, ids=lambda t: f"{t[0]}x{t[1]}{'q' * t[2]}{'a' * t[3]}")
def test_every_tile(
    tile: tuple[int, int, bool, bool],
    prefetch: bool,
    v_memory: bool,
    rng: np.random.Generator,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # every tile at head dim 24 (its code does not depend on the head dim; 128 would pass lavapipe's 32 KiB
    # of workgroup memory for the larger tiles); q in registers or not, as the adapter allows (both:
    # test_q_in_registers)
    monkeypatch.setattr(sk, "ATTENTION_TILES", (tile._replace(pf=None, only_qr=False, min_dk=0),))
    monkeypatch.setattr(sk, "ATTENTION_PREFETCH_MAX", 10**6 if prefetch else 0)
    monkeypatch.setattr(sk, "ATTENTION_V_FROM_MEMORY", v_memory)
    q, k, v = randn(rng, 1, 4, 70, 24), randn(rng, 1, 2, 75, 24), randn(rng, 1, 2, 75, 40)
    mask = make_mask(rng, "add", (1, 1, 70, 75))
    y = sdpa(q, k, v, mask, causal=True)
    got, program = run_with_caps(y)  # a fresh compile: the program cache does not know the patched table
    (d,) = program.dispatches
    assert d.kernel == "flash_attention" and f":{tile[0]}x{tile[1]}t" in d.variant, d.variant
    flags = d.variant.split(":")[3]  # q, a, g, p, v
    assert ("p" in flags) == prefetch and ("v" in flags) == (v_memory and not tile[3]), d.variant
    check_arrays(got, np_attention(q, k, v, mask, causal=True))
    # a key padding mask (the blocks it hides are skipped), the scalar loads of a strided k
    keep = make_mask(rng, "bool", (1, 1, 1, 75))
    keep[..., 50:] = False
    kt = np.ascontiguousarray(np.swapaxes(k, -1, -2))
    y = tr.nn.scaled_dot_product_attention(
        tr.tensor(q), tr.tensor(kt).transpose(0, 1, 3, 2), tr.tensor(v), mask=tr.tensor(keep)
    )
    got, program = run_with_caps(y)
    assert program.dispatches[-1].variant.startswith("s."), program.dispatches[-1].variant
    check_arrays(got, np_attention(q, k, v, keep))


@pytest.mark.parametrize("tile", [None, sk.AttentionTile(32, 16, False, True)], ids=["rule", "aliased"])
@pytest.mark.parametrize("dv", [8, 16])
def test_subgroup_reduction(
    dv: int, tile: tuple | None, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not get_device().caps.subgroups:
        pytest.skip("this adapter has no subgroups")
    if tile is not None:  # k and v sharing a buffer: the subgroup path's extra barrier, with the prefetch
        monkeypatch.setattr(sk, "ATTENTION_TILES", (tile,))
    # lavapipe's subgroups have at least 4 lanes: tx = dv / 4 threads fit in one
    q, k, v = randn(rng, 2, 2, 33, 12), randn(rng, 2, 2, 50, 12), randn(rng, 2, 2, 50, dv)
    keep = make_mask(rng, "bool", (2, 1, 1, 50))
    y = sdpa(q, k, v, keep, causal=True)
    got, program = run_with_caps(y, subgroups=True, subgroup_size=4)
    (d,) = program.dispatches
    assert d.kernel == "flash_attention" and "g" in d.variant.split(":")[3], d.variant  # flags: q, a, g
    check_arrays(got, np_attention(q, k, v, keep, causal=True))


def check_arrays(got: np.ndarray, want: np.ndarray, tol: float = 2e-6) -> None:
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol * max(1.0, np.abs(want).max()))


def test_small_workgroup_memory_picks_a_smaller_tile(rng: np.random.Generator) -> None:
    # WebGPU's default 16 KiB: head dim 128 still fits a smaller tile (k and v sharing a buffer)
    q, k, v = randn(rng, 1, 1, 20, 128), randn(rng, 1, 1, 30, 128), randn(rng, 1, 1, 30, 128)
    y = sdpa(q, k, v, causal=True)
    got, program = run_with_caps(y, max_workgroup_storage=16384)
    (d,) = program.dispatches
    assert d.kernel == "flash_attention" and ":32x16t" in d.variant and "a" in d.variant.split(":")[3], d.variant
    check_arrays(got, np_attention(q, k, v, causal=True))


# --- the op -------------------------------------------------------------------------------------------


def test_one_node_in_the_graph_and_explain(rng: np.random.Generator) -> None:
    q, k, v = randn(rng, 2, 4, 8, 16), randn(rng, 2, 2, 8, 16), randn(rng, 2, 2, 8, 16)
    y = sdpa(q, k, v, make_mask(rng, "bool", (2, 1, 1, 8)), causal=True)
    node = y._lazy
    assert node.op.value == "attention" and node.arg == AttentionArg(0.25, True, "bool", 2)
    text = str(tr.explain(y))
    assert "1 dispatches" in text and "flash_attention" in text
    assert "one dispatch:" in text and "bool mask, causal, 2 query heads per kv head" in text


def test_interpreter_agrees(rng: np.random.Generator) -> None:
    from ir.interpret import interpret

    q, k, v = randn(rng, 2, 4, 9, 8), randn(rng, 2, 2, 11, 8), randn(rng, 2, 2, 11, 8)
    mask = make_mask(rng, "add", (2, 4, 9, 11))
    y = sdpa(q, k, v, mask, causal=True)
    built = build_graph([y._lazy])
    inputs = [lz.host if lz.host is not None else None for lz in built.inputs]
    (got,) = interpret(built.graph, inputs)
    np.testing.assert_allclose(got, np_attention(q, k, v, mask, causal=True), rtol=1e-6, atol=1e-6)


# --- differential fuzzing -------------------------------------------------------------------------


def _has_f16() -> bool:
    return get_device().caps.shader_f16


@settings(max_examples=60, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(attention_programs(f16=_has_f16()))
def test_random_attention_programs(program) -> None:  # noqa: ANN001
    """The GPU and ir.interpret (before and after every pass) against the generator's numpy meaning,
    on attention steps with every mask kind and head layout (tests/strategies.py, d_attention)."""
    check_program(program)


@pytest.mark.parametrize(
    "d,tile",
    [(32, sk.AttentionTile(64, 32, True, False, pf=True)), (128, sk.AttentionTile(64, 16, False, True))],
    ids=["d32-q-prefetch", "d128-aliased"],
)
def test_unrolled_loops(
    d: int, tile: sk.AttentionTile, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loops over head dims and a block's keys unrolled in the WGSL (what GPUs run; CPU adapters
    compile the loops: select_kernels.cpu_adapter), causal with a padding mask, grouped-query."""
    monkeypatch.setattr(sk, "ATTENTION_UNROLL", True)
    monkeypatch.setattr(sk, "ATTENTION_TILES", (tile,))
    q, k, v = randn(rng, 2, 4, 45, d), randn(rng, 2, 2, 50, d), randn(rng, 2, 2, 50, d)
    keep = np.ones((2, 1, 1, 50), bool)
    keep[1, ..., 33:] = False
    got, program = run_with_caps(sdpa(q, k, v, keep, causal=True))
    (dispatch,) = program.dispatches
    assert "u" in dispatch.variant.split(":")[3] and f":{tile.br}x{tile.bc}t" in dispatch.variant, dispatch.variant
    check_arrays(got, np_attention(q, k, v, keep, causal=True))


@pytest.mark.parametrize(
    "tile,v_memory,subgroups",
    [
        (sk.AttentionTile(64, 16, False, False, pl=True), False, False),
        (sk.AttentionTile(32, 16, True, False, pl=True), True, False),
        (sk.AttentionTile(16, 8, False, False, pl=True), False, True),
    ],
    ids=["64x16", "32x16-q-v-from-memory", "16x8-subgroups"],
)
def test_pipelined_loop(
    tile: sk.AttentionTile,
    v_memory: bool,
    subgroups: bool,
    rng: np.random.Generator,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two barriers per block (k of the next block stored during this one): one block, several, a
    partial last one, keys skipped by a padding mask at both ends, causal, grouped-query."""
    if subgroups and not get_device().caps.subgroups:
        pytest.skip("this adapter has no subgroups")
    monkeypatch.setattr(sk, "ATTENTION_TILES", (tile,))
    monkeypatch.setattr(sk, "ATTENTION_V_FROM_MEMORY", v_memory)
    caps = {"subgroups": True, "subgroup_size": 4} if subgroups else {"subgroups": False}
    for s in (5, 16, 61):
        q, k, v = randn(rng, 2, 4, 37, 16), randn(rng, 2, 2, s, 16), randn(rng, 2, 2, s, 8)
        keep = np.ones((2, 1, 1, s), bool)
        keep[1, ..., : s // 3], keep[1, ..., s - s // 4 :] = False, False
        for mask, causal in ((None, True), (keep, False), (keep, True)):
            got, program = run_with_caps(sdpa(q, k, v, mask, causal=causal), **caps)
            (d,) = program.dispatches
            flags = d.variant.split(":")[3]
            assert "l" in flags and ("v" in flags) == v_memory and ("g" in flags) == subgroups, d.variant
            check_arrays(got, np_attention(q, k, v, mask, causal=causal))


@pytest.mark.parametrize(
    "tile,d,subgroup_size",
    [
        (sk.AttentionTile(32, 32, False, True, sw=True), 64, 0),  # k and v sharing the buffer
        (sk.AttentionTile(32, 16, True, False, sw=True, pf=True), 32, 0),  # q staged (padded), the prefetch
        (sk.AttentionTile(16, 16, False, False, sw=True, pl=True), 128, 0),  # pipelined
        (sk.AttentionTile(32, 32, False, True, sw=True), 32, 8),  # subgroup row maxes (lavapipe's 8 lanes)
        (sk.AttentionTile(32, 16, False, True, sw=True), 80, 0),  # 80 is no multiple of 32: padded after all
    ],
    ids=["aliased", "q-prefetch", "pipelined", "subgroups", "head-80-padded"],
)
def test_swizzled_k(
    tile: sk.AttentionTile, d: int, subgroup_size: int, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """k stored unpadded, key c's vec4 d at d ^ (c % 8) (`sw`): every tile mode, partial blocks, causal and a
    padding mask, grouped-query attention, against numpy."""
    if subgroup_size and not get_device().caps.subgroups:
        pytest.skip("this adapter has no subgroups")
    monkeypatch.setattr(sk, "ATTENTION_TILES", (tile,))
    caps = {"subgroups": True, "subgroup_size": subgroup_size} if subgroup_size else {"subgroups": False}
    q, k, v = randn(rng, 2, 4, 45, d), randn(rng, 2, 2, 61, d), randn(rng, 2, 2, 61, d)
    keep = np.ones((2, 1, 1, 61), bool)
    keep[1, ..., 40:] = False
    for mask, causal in ((None, True), (keep, False)):
        got, program = run_with_caps(sdpa(q, k, v, mask, causal=causal), **caps)
        (d_,) = program.dispatches
        flags = d_.variant.split(":")[3]
        assert ("w" in flags) == (d % 32 == 0) and ("g" in flags) == bool(subgroup_size), d_.variant
        check_arrays(got, np_attention(q, k, v, mask, causal=causal))


@pytest.mark.parametrize(
    "tile,d,dv,held",
    [
        (
            sk.AttentionTile(32, 16, False, True, qr=True),
            128,
            128,
            True,
        ),  # k and v sharing the buffer (the rule's kind)
        (sk.AttentionTile(32, 16, False, True, qr=True, pf=True), 32, 32, True),  # the next block prefetched
        (sk.AttentionTile(32, 32, False, False, qr=True, sw=True), 64, 64, True),  # k and v apart, k swizzled
        (sk.AttentionTile(16, 16, False, False, qr=True, sw=True, pl=True), 32, 32, True),  # pipelined
        (sk.AttentionTile(32, 16, False, True, tx=4, qr=True, sw=True), 96, 96, True),  # 4 lanes, 6 vec4s of q each
        (sk.AttentionTile(32, 16, False, True, qr=True), 80, 80, True),  # 80: 4 lanes a row group, 5 vec4s each
        (sk.AttentionTile(32, 16, False, True, qr=True), 80, 64, False),  # 8 lanes (v's 64) do not split 80
    ],
    ids=["aliased-128", "prefetch-32", "swizzled-64", "pipelined-32", "tx4-96", "head-80", "head-80-v-64-without"],
)
def test_q_in_registers(
    tile: sk.AttentionTile, d: int, dv: int, held: bool, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """q held in registers with the head dims split across a row group, each chunk's scores summed and
    scattered by subgroup shuffles (`qr`, lavapipe's subgroups taken as 8 lanes): causal with partial
    blocks, a padding mask, an additive mask, grouped-query attention, against numpy; where the lanes
    do not split the head dim evenly, q is read per block as without `qr`."""
    if not get_device().caps.subgroups:
        pytest.skip("this adapter has no subgroups")
    monkeypatch.setattr(sk, "ATTENTION_TILES", (tile,))
    q, k, v = randn(rng, 2, 4, 45, d), randn(rng, 2, 2, 61, d), randn(rng, 2, 2, 61, dv)
    keep = np.ones((2, 1, 1, 61), bool)
    keep[1, ..., 40:] = False
    additive = randn(rng, 2, 4, 45, 61)
    for mask, causal in ((None, True), (keep, False), (additive, True)):
        got, program = run_with_caps(sdpa(q, k, v, mask, causal=causal), subgroups=True, subgroup_size=8)
        (dispatch,) = program.dispatches
        flags = dispatch.variant.split(":")[3]
        assert ("r" in flags) == held and "g" in flags, dispatch.variant
        check_arrays(got, np_attention(q, k, v, mask, causal=causal))


QR_TILES = [
    sk.AttentionTile(32, 16, False, True, qr=True),
    sk.AttentionTile(32, 32, False, False, qr=True, only_qr=True),
    sk.AttentionTile(16, 16, False, False, qr=True, pf=True),
    sk.AttentionTile(16, 16, False, False, qr=True, pl=True),
    sk.AttentionTile(32, 16, False, True, tx=4, qr=True),
    sk.AttentionTile(16, 16, False, True, tx=2, qr=True),
]


@settings(max_examples=12, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(
    tile=st.sampled_from(QR_TILES),
    dims=st.tuples(*[st.sampled_from([8, 16, 24, 32, 64])] * 2),
    heads=st.tuples(st.integers(1, 2), st.integers(1, 2), st.sampled_from([1, 2, 3])),
    lengths=st.tuples(st.integers(1, 40), st.integers(1, 60)),
    kind=st.sampled_from(["none", "pad", "bool", "add"]),
    causal=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_random_q_in_registers(tile, dims, heads, lengths, kind, causal, seed) -> None:  # noqa: ANN001
    """Random shapes, head layouts, masks and `qr` tiles (where the head dims allow it, else the same tile
    without), lavapipe's subgroups taken as 8 lanes, against numpy. A longer survey of the same kind
    found nothing in run AA's session (closing note)."""
    if not get_device().caps.subgroups:
        pytest.skip("this adapter has no subgroups")
    rng = np.random.default_rng(seed)
    (d, dv), (b, hkv, group), (lq, s) = dims, heads, lengths
    q, k, v = randn(rng, b, hkv * group, lq, d), randn(rng, b, hkv, s, d), randn(rng, b, hkv, s, dv)
    mask = None
    if kind == "pad":  # a padding mask: the first sequence keeps a prefix
        mask = np.ones((b, 1, 1, s), bool)
        mask[0, ..., int(rng.integers(1, s + 1)) :] = False
    elif kind != "none":
        mask = make_mask(rng, kind, (b, hkv * group, lq, s))
    causal = causal and lq <= s  # (a longer query than keys leaves rows that see no key: their own test)
    previous = sk.ATTENTION_TILES
    sk.ATTENTION_TILES = (tile, sk.AttentionTile(16, 16, False, True))  # the second where only_qr cannot
    try:
        got, _ = run_with_caps(sdpa(q, k, v, mask, causal=causal), subgroups=True, subgroup_size=8)
    finally:
        sk.ATTENTION_TILES = previous
    check_arrays(got, np_attention(q, k, v, mask, causal=causal))


def test_rule_tiles_on_the_h200() -> None:
    """The tiles the rule picks with the H200's 48 KiB of workgroup memory, as measured in
    benchmarks/runs/2026-12-01-F, -H, -M, 2026-12-02-X and -AA (unrolled loops): MiniLM's head dim 64 and the
    causal head dim 128 at 128 rows, q in registers, k and v apart and prefetched, subgroup row maxes
    (NVIDIA's 32 lanes); the same with a padding mask at head dim 128, where k and v apart do not fit, shares
    one buffer for them, and so does MiniLM's own head dim 32 (run AB); a problem of too few 128-row blocks (the ~1B decoder's causal prefill of 512 tokens: 32 heads
    x 4 blocks) takes 64 rows by 64 keys, 16 threads a row group, k swizzled."""
    from backend_wgpu.kernels.attention.flash import FlashAttentionKernel

    caps = dataclasses.replace(
        get_device().caps, max_workgroup_storage=49152, subgroups=True, subgroup_size=32, name="H200-like"
    )
    picked, reasons = {}, {}
    for name, (b, h, hkv, n, d) in {
        "minilm": (32, 12, 12, 128, 64),
        "minilm 384": (32, 12, 12, 128, 32),
        "causal 2048": (1, 32, 32, 2048, 128),
        "prefill 512": (1, 32, 8, 512, 64),
        "padded 128": (2, 32, 32, 2048, 128),
    }.items():
        q = tr.tensor(np.zeros((b, h, n, d), np.float32))
        kv = tr.tensor(np.zeros((b, hkv, n, d), np.float32))
        mask = tr.tensor(np.ones((b, 1, 1, n), bool)) if name in ("padded 128", "minilm 384") else None
        causal = not (name.startswith("minilm") or name == "padded 128")
        y = tr.nn.scaled_dot_product_attention(q, kv, kv, mask=mask, is_causal=causal)
        graph = run_pipeline(build_graph([y._lazy]).graph, caps).graph
        (node,) = [n for n in graph if n.kernel is not None and n.kernel.name == "flash_attention"]
        params = ("br", "bc", "tx", "q_smem", "kv_alias", "pf", "un", "pl", "sg", "sw", "qr")
        picked[name] = tuple(node.kernel.param(p) for p in params)
        reasons[name] = FlashAttentionKernel.reason(graph, node)
    assert "(256 workgroups)" in reasons["prefill 512"], reasons  # 32 heads x 8 blocks of 64 rows, as explain says
    assert picked["minilm"] == (128, 32, 8, False, False, True, True, False, True, False, True)
    assert picked["causal 2048"] == (128, 32, 8, False, False, True, True, False, True, False, True)
    assert picked["padded 128"] == (128, 32, 8, False, True, False, True, False, True, False, True)
    assert picked["minilm 384"] == picked["padded 128"]  # head dim 32: k and v sharing a buffer (run AB)
    assert picked["prefill 512"] == (64, 64, 16, False, True, False, True, False, True, True, False)


@pytest.mark.parametrize("causal", [False, True])
def test_long_key_lengths_stay_within_the_loop_budget(causal: bool, monkeypatch) -> None:
    """The flash kernel states its walk (issue 16: lavapipe ends loops after 65,535 iterations):
    with 16-key blocks at max_fused_keys it walks to the edge of the budget and is right (so the
    count is not short); one key more takes the composed path."""
    from backend_wgpu.kernel import LOOP_BUDGET
    from backend_wgpu.kernels import KERNELS
    from backend_wgpu.kernels.attention.flash import max_fused_keys

    monkeypatch.setattr(sk, "ATTENTION_TILES", (sk.AttentionTile(64, 16, True, False),))
    monkeypatch.setattr(sk, "ATTENTION_UNROLL", False)
    rng = np.random.default_rng(7)
    dk = 16
    s = max_fused_keys(dk)
    q = rng.standard_normal((1, 2, 4, dk)).astype(np.float32)
    for keys, kernel in ((s, "flash_attention"), (s + 1, "softmax")):
        k = rng.standard_normal((1, 2, keys, dk)).astype(np.float32)
        v = rng.standard_normal((1, 2, keys, dk)).astype(np.float32)
        y = tr.nn.scaled_dot_product_attention(tr.tensor(q), tr.tensor(k), tr.tensor(v), is_causal=causal)
        program = tr.compile(y)
        assert kernel in [d.kernel for d in program.dispatches]
        for node in program.graph:
            if node.kernel is not None and node.kernel.name == "flash_attention":
                walk = KERNELS["flash_attention"](node, program.graph).loop_iterations()
                assert LOOP_BUDGET - 3000 < walk <= LOOP_BUDGET  # near the edge: a short count would show
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(dk)
        if causal:  # bottom-right aligned: row i sees keys j <= i + keys - 4
            scores = np.where(np.arange(keys)[None, :] <= np.arange(4)[:, None] + keys - 4, scores, -np.inf)
        p = np.exp(scores - scores.max(-1, keepdims=True))
        np.testing.assert_allclose(y.numpy(), (p / p.sum(-1, keepdims=True)) @ v, rtol=2e-4, atol=2e-5)


def test_a_head_dim_of_zero_needs_a_scale() -> None:
    """E = 0: no default scale (1 / sqrt(0)) is a clear error; with one, every score is 0 and each row
    is the mean of the values (numpy)."""
    q, k = tr.tensor(np.zeros((1, 2, 3, 0), np.float32)), tr.tensor(np.zeros((1, 2, 4, 0), np.float32))
    v = np.arange(40, dtype=np.float32).reshape(1, 2, 4, 5)
    with pytest.raises(tr.ShapeError, match=r"q \(1, 2, 3, 0\), k \(1, 2, 4, 0\): a head dim of 0 has no default"):
        tr.nn.scaled_dot_product_attention(q, k, tr.tensor(v))
    got = tr.nn.scaled_dot_product_attention(q, k, tr.tensor(v), scale=1.0).numpy()
    np.testing.assert_allclose(got, np.broadcast_to(v.mean(2, keepdims=True), (1, 2, 3, 5)), rtol=1e-6)


def test_scores_overflow_as_in_float32() -> None:
    """q = 1e30 against k = 1e30: the score overflows float32 (the kernel's), so the row is inf - inf = NaN on
    the GPU, and the reference interpreter says the same (its float64 scores would give v[0] instead;
    the fuzz survey of 2026-12-02 found them apart)."""
    from ir.interpret import interpret

    q = np.array([[[[1e30], [1.0]]]], np.float32)
    k = np.array([[[[1e30], [-3.0]]]], np.float32)
    v = np.array([[[[0.625], [2.0]]]], np.float32)
    y = sdpa(q, k, v)
    built = build_graph([y._lazy])
    (ref,) = interpret(built.graph, [lz.host for lz in built.inputs])
    got = y.numpy()
    assert np.isnan(got[0, 0, 0, 0]) and np.isnan(ref[0, 0, 0, 0])
    np.testing.assert_allclose(got[0, 0, 1], ref[0, 0, 1], rtol=1e-6)
    np.testing.assert_allclose(got[0, 0, 1], np_attention(q, k, v)[0, 0, 1], rtol=1e-6)
