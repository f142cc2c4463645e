"""GEMV groups (passes/fuse_gemv.py, kernels/matmul/gemv_multi.py) against the unfused graph.

Each case builds the same decode-step fragment with fusion on and with WGJIT_FUSION=0,
and checks the values of both runs against the reference interpreter on the traced graph
(float64-free numpy, ir.interpret), the dispatch counts, and which kernel ran.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import tracer as tr
from backend_wgpu import get_device
from ir.interpret import interpret
from ir.ops import Op
from passes import run_pipeline
from tests.helpers import assert_close
from tests.strategies import decode_programs
from tests.test_fuzz import check_program
from tracer.graph_builder import build_graph
from tracer.lazy import Lazy

pytestmark = pytest.mark.gpu

Build = Callable[[], tuple[tr.Tensor, ...]]


@pytest.fixture(autouse=True)
def blocks_layout_at_eight_lanes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The layouts these tests assert (columns per workgroup, workgroup counts) are those of 8 GEMV lanes and
    the `blocks` quantized layout (the staged one, the default, is tested with GEMV_STAGED_ROW set on);
    the default (passes.select_kernels.GEMV_LANES, set by H200 measurement) is checked for values in
    tests/test_quant.py and by the decoder tests."""
    from passes import select_kernels as sk

    monkeypatch.setattr(sk, "GEMV_LANES", 8)
    monkeypatch.setattr(sk, "GEMV_STAGED_ROW", 0)


def reference(build: Build) -> list[np.ndarray]:
    """ir.interpret on the traced graph of `build()`'s tensors (the caches written in place)."""
    outs = build()
    built = build_graph([t._lazy for t in outs])
    inputs = [_words(lz) if lz.dtype.is_quantized else tr.Tensor(lz).numpy() for lz in built.inputs]
    return interpret(built.graph, inputs)[: len(outs)]


def _words(lz: Lazy) -> np.ndarray:
    """A quantized input as the interpreter takes it: its GPU layout's u32 words (ir/quant.py)."""
    tr.realize(tr.Tensor(lz))
    return np.frombuffer(get_device().read(lz.buffer), np.uint32)


def run(monkeypatch: pytest.MonkeyPatch, build: Build, fusion: bool) -> tuple[list[np.ndarray], list]:
    monkeypatch.setenv("WGJIT_FUSION", "1" if fusion else "0")
    outs = build()
    dispatches = tr.compile(*outs).dispatches
    values = [t.numpy() for t in outs]
    monkeypatch.delenv("WGJIT_FUSION")
    return values, dispatches


def check(monkeypatch: pytest.MonkeyPatch, build: Build, tol: float = 1e-4) -> tuple[list, list]:
    """Fused and unfused runs agree with the interpreter; returns both runs' dispatches."""
    want = reference(build)
    fused, fused_d = run(monkeypatch, build, True)
    unfused, unfused_d = run(monkeypatch, build, False)
    for got_f, got_u, ref in zip(fused, unfused, want, strict=True):
        assert_close(got_u, ref, rtol=tol, atol=tol)
        assert_close(got_f, ref, rtol=tol, atol=tol)
    return fused_d, unfused_d


RNG = np.random.default_rng(3)


def arr(*shape: int, scale: float = 1.0, dtype: str = "float32") -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(dtype)


def attention_inputs(d: int, heads: int, kv_heads: int, hd: int, ctx: int, dtype: str, bias: bool) -> dict:
    w = {
        "x": arr(1, 1, d, dtype=dtype),
        "norm": (1 + 0.1 * RNG.standard_normal(d)).astype(dtype),
        "q": arr(heads * hd, d, scale=d**-0.5, dtype=dtype),
        "k": arr(kv_heads * hd, d, scale=d**-0.5, dtype=dtype),
        "v": arr(kv_heads * hd, d, scale=d**-0.5, dtype=dtype),
        "cos": np.cos(np.arange(hd // 2) * 0.3).astype(dtype).reshape(1, -1),
        "sin": np.sin(np.arange(hd // 2) * 0.3).astype(dtype).reshape(1, -1),
        "ck": arr(1, kv_heads, ctx, hd, dtype=dtype),
        "cv": arr(1, kv_heads, ctx, hd, dtype=dtype),
    }
    if bias:
        w |= {
            "bq": arr(heads * hd, dtype=dtype),
            "bk": arr(kv_heads * hd, dtype=dtype),
            "bv": arr(kv_heads * hd, dtype=dtype),
        }
    return w


def qkv_step(w: dict, heads: int, kv_heads: int, hd: int, pos: int, interleaved: bool = False) -> Build:
    """rms_norm, q/k/v projections, rope on q and k, k and v appended to their caches at pos."""

    def build() -> tuple[tr.Tensor, ...]:
        t = {n: tr.tensor(a) for n, a in w.items()}
        h = tr.nn.rms_norm(t["x"], t["norm"], 1e-5)

        def heads_of(y: tr.Tensor, n: int) -> tr.Tensor:
            return y.reshape(1, 1, n, hd).permute(0, 2, 1, 3)

        q = tr.nn.linear(h, t["q"], t.get("bq"))
        k = tr.nn.linear(h, t["k"], t.get("bk"))
        v = tr.nn.linear(h, t["v"], t.get("bv"))
        q = tr.nn.rope(heads_of(q, heads), t["cos"], t["sin"], interleaved=interleaved)
        k = tr.nn.rope(heads_of(k, kv_heads), t["cos"], t["sin"], interleaved=interleaved)
        t["ck"].index_write(k, (0, 0, pos, 0))
        t["cv"].index_write(heads_of(v, kv_heads), (0, 0, pos, 0))
        return q, t["ck"], t["cv"]

    return build


@pytest.mark.parametrize(
    "d,heads,kv_heads,hd,dtype,bias",
    [
        (64, 4, 2, 16, "float32", False),
        (48, 3, 1, 16, "float32", True),  # Qwen2's q/k/v biases, one kv head
        (30, 2, 2, 8, "float32", False),  # k 2 mod 4: vec2 loads
        (21, 3, 3, 4, "float32", False),  # odd k: scalar loads
        (64, 4, 2, 16, "float16", False),
    ],
)
def test_qkv_rope_and_cache_writes_are_one_dispatch(monkeypatch, d, heads, kv_heads, hd, dtype, bias):
    w = attention_inputs(d, heads, kv_heads, hd, 12, dtype, bias)
    fused, unfused = check(monkeypatch, qkv_step(w, heads, kv_heads, hd, 5), tol=3e-3 if dtype == "float16" else 1e-4)
    assert [(d.kernel, d.op) for d in fused] == [("gemv_multi", "fused")]  # a float16 norm folds in too
    assert len(unfused) >= 8


def test_interleaved_rope(monkeypatch):
    w = attention_inputs(32, 2, 1, 8, 6, "float32", False)
    fused, _ = check(monkeypatch, qkv_step(w, 2, 1, 8, 0, interleaved=True))
    assert [d.kernel for d in fused] == ["gemv_multi"]


def side_write_modes(build: Build) -> list[str]:
    """ "in place" or "copy" for each side-write node of the fused program of `build()`."""
    graph = tr.compile(*build()).graph
    done = [n for n in graph if n.kernel is not None and n.kernel.param("done_by") is not None]
    return ["in place" if n.inplace is not None else "copy" for n in done]


def test_a_cache_read_after_the_write_is_written_as_a_copy(monkeypatch):
    """The old cache is read after the write (through another tensor): the group writes a new buffer."""
    w = attention_inputs(32, 2, 1, 8, 6, "float32", False)

    def build() -> tuple[tr.Tensor, ...]:
        t = {n: tr.tensor(a) for n, a in w.items()}
        # the cache's values before the write, read after it (a copy: a view would follow the write, as numpy's)
        old = t["ck"][:, :, 1:].copy()
        h = tr.nn.rms_norm(t["x"], t["norm"], 1e-5)
        q = tr.nn.rope(tr.nn.linear(h, t["q"]).reshape(1, 1, 2, 8).permute(0, 2, 1, 3), t["cos"], t["sin"])
        k = tr.nn.rope(tr.nn.linear(h, t["k"]).reshape(1, 1, 1, 8).permute(0, 2, 1, 3), t["cos"], t["sin"])
        t["ck"].index_write(k, (0, 0, 3, 0))
        return q, t["ck"], old * 2.0

    fused, _ = check(monkeypatch, build)
    assert [d.kernel for d in fused] == ["gemv_multi", "elementwise"]
    assert side_write_modes(build) == ["copy"]
    assert side_write_modes(qkv_step(w, 2, 1, 8, 3)) == ["in place", "in place"]


def where_step(w: dict, heads: int, kv_heads: int, hd: int, ctx: int, pos: int) -> Build:
    """The `@tr.jit` decode step's cache update: where(one-hot of pos, k spread along ctx, cache)."""

    def build() -> tuple[tr.Tensor, ...]:
        t = {n: tr.tensor(a) for n, a in w.items()}
        at = (tr.arange(ctx) == tr.tensor(np.array([pos], np.int32))).reshape(1, 1, ctx, 1)
        h = tr.nn.rms_norm(t["x"], t["norm"], 1e-5)

        def heads_of(y: tr.Tensor, n: int) -> tr.Tensor:
            return y.reshape(1, 1, n, hd).permute(0, 2, 1, 3)

        q = tr.nn.rope(heads_of(tr.nn.linear(h, t["q"]), heads), t["cos"], t["sin"])
        k = tr.nn.rope(heads_of(tr.nn.linear(h, t["k"]), kv_heads), t["cos"], t["sin"])
        v = heads_of(tr.nn.linear(h, t["v"]), kv_heads)
        return q, tr.where(at, k, t["ck"]), tr.where(at, v, t["cv"])

    return build


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_one_hot_cache_updates_are_side_writes(monkeypatch, dtype):
    w = attention_inputs(32, 4, 2, 8, 7, dtype, False)
    build = where_step(w, 4, 2, 8, 7, 4)
    fused, unfused = check(monkeypatch, build, tol=3e-3 if dtype == "float16" else 1e-4)
    assert [d.kernel for d in fused] == ["arange", "elementwise", "gemv_multi"]  # the one-hot, then the rest
    assert side_write_modes(build) == ["in place", "in place"]


@pytest.mark.parametrize("ctx", [300, 2100])
def test_one_hot_updates_of_long_caches(monkeypatch, ctx):
    """The spread writes' walk over the cache: 300 positions, their conditions loaded before the k loop
    (a few per thread, the last step partial); 2100, past PRELOAD_STEPS per thread: the loop."""
    w = attention_inputs(32, 4, 2, 8, ctx, "float32", False)
    fused, _ = check(monkeypatch, where_step(w, 4, 2, 8, ctx, ctx - 3))
    assert [d.kernel for d in fused] == ["arange", "elementwise", "gemv_multi"]


def test_one_hot_cache_update_of_a_cache_read_later_is_a_copy(monkeypatch):
    """The old k cache is read after the update: its side write fills a new buffer (the copy form)."""
    w = attention_inputs(32, 4, 2, 8, 7, "float32", False)
    ctx, pos = 7, 6

    def build() -> tuple[tr.Tensor, ...]:
        t = {n: tr.tensor(a) for n, a in w.items()}
        old = t["ck"][:, :, 2:]
        at = (tr.arange(ctx) == tr.tensor(np.array([pos], np.int32))).reshape(1, 1, ctx, 1)
        h = tr.nn.rms_norm(t["x"], t["norm"], 1e-5)
        q = tr.nn.linear(h, t["q"]).reshape(1, 1, 4, 8).permute(0, 2, 1, 3)
        k = tr.nn.linear(h, t["k"]).reshape(1, 1, 2, 8).permute(0, 2, 1, 3)
        v = tr.nn.linear(h, t["v"]).reshape(1, 1, 2, 8).permute(0, 2, 1, 3)
        return q.exp(), tr.where(at, k, t["ck"]), tr.where(at, v, t["cv"]), old * 2.0

    fused, _ = check(monkeypatch, build)
    assert [d.kernel for d in fused] == ["arange", "elementwise", "gemv_multi", "elementwise"]
    assert side_write_modes(build) == ["copy", "in place"]


def test_swiglu_is_one_dispatch(monkeypatch):
    d, ff = 40, 24
    x, wn, g, u = arr(1, 1, d), (1 + 0.1 * RNG.standard_normal(d)).astype(np.float32), arr(ff, d), arr(ff, d)

    def build() -> tuple[tr.Tensor, ...]:
        h = tr.nn.rms_norm(tr.tensor(x), tr.tensor(wn), 1e-6)
        return (tr.nn.linear(h, tr.tensor(g)).silu() * tr.nn.linear(h, tr.tensor(u)),)

    fused, unfused = check(monkeypatch, build)
    assert [d.kernel for d in fused] == ["gemv_multi"]
    assert len(unfused) == 5  # norm, two gemv, silu, mul


def test_norm_folds_into_a_lone_matmul(monkeypatch):
    """The final norm and the vocabulary projection: one dispatch."""
    x, wn, head = arr(1, 1, 32), arr(32), arr(50, 32)

    def build() -> tuple[tr.Tensor, ...]:
        h = tr.nn.rms_norm(tr.tensor(x), tr.tensor(wn), 1e-5)
        return (tr.nn.linear(h, tr.tensor(head)).reshape(1, 50),)

    fused, _ = check(monkeypatch, build)
    assert [d.kernel for d in fused] == ["gemv_multi"]


@pytest.mark.skipif(not get_device().caps.shader_f16, reason="no shader-f16 on this adapter")
def test_a_float16_norm_rounds_its_row_where_the_graph_stores_it(monkeypatch):
    """A float16 norm folds in with its row rounded to float16 before the products: its first element
    (about 2.06 * 40000) overflows there, so its products are inf (halved: still inf) and 0 * inf is
    NaN, as in the unfused graph and the interpreter; the row kept in float32 would give 41000 and 0."""
    x = np.array([[1.0, 0.0, 0.0, 0.0, 0.5, -0.25, 0.75, 0.125]], np.float16)
    wn = np.array([40000.0, 1.0, 1.0, 1.0, 1.1, 0.9, 1.3, 0.7], np.float16)
    a = np.zeros((4, 8), np.float16)
    a[:, 0] = [1.0, 0.5, 0.0, -0.25]
    a[:, 4:] = [0.3, -0.7, 1.9, 0.01]

    def build() -> tuple[tr.Tensor, ...]:
        h = tr.nn.rms_norm(tr.tensor(x), tr.tensor(wn), 1e-5)
        return (tr.nn.linear(h, tr.tensor(a)),)

    with np.errstate(over="ignore", invalid="ignore"):
        want = reference(build)[0]
    assert want[0, 0] == want[0, 1] == np.inf and np.isnan(want[0, 2]) and want[0, 3] == -np.inf
    fused, _ = check(monkeypatch, build)
    assert [d.kernel for d in fused] == ["gemv_multi"]


@pytest.mark.skipif(not get_device().caps.shader_f16, reason="no shader-f16 on this adapter")
@pytest.mark.parametrize("weight", [True, False])
def test_float16_norm_folds_against_the_interpreter(monkeypatch, weight):
    """SwiGLU of a float16 normed row (k = 96: vec4 loads) against the interpreter and the unfused graph."""
    d, ff = 96, 40
    x = arr(1, 1, d, scale=3.0, dtype="float16")
    wn = (1 + 0.2 * RNG.standard_normal(d)).astype(np.float16)
    g, u = arr(ff, d, scale=d**-0.5, dtype="float16"), arr(ff, d, scale=d**-0.5, dtype="float16")

    def build() -> tuple[tr.Tensor, ...]:
        h = tr.nn.rms_norm(tr.tensor(x), tr.tensor(wn) if weight else None, 1e-6)
        return (tr.nn.linear(h, tr.tensor(g)).silu() * tr.nn.linear(h, tr.tensor(u)),)

    fused, _ = check(monkeypatch, build, tol=2e-3)
    # ":nr": the float16 norm's rounded row (then ":x<columns per workgroup>")
    assert [(d.kernel, ":nr" in d.variant, d.element) for d in fused] == [("gemv_multi", True, 4)]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("k", [520, 4400])
def test_long_rows_loop_or_unroll(monkeypatch, k, dtype):
    """k = 520: each thread's row KernelElements unrolled, loads first (the last step partial); k = 4400:
    past UNROLLED_STEPS per thread, the k loop. SwiGLU of the normed row, 9 columns (4 per workgroup)."""
    if dtype == "float16" and not get_device().caps.shader_f16:
        pytest.skip("no shader-f16 on this adapter")
    x, wn = arr(1, k, dtype=dtype), (1 + 0.1 * RNG.standard_normal(k)).astype(dtype)
    g, u = arr(9, k, scale=k**-0.5, dtype=dtype), arr(9, k, scale=k**-0.5, dtype=dtype)

    def build() -> tuple[tr.Tensor, ...]:
        h = tr.nn.rms_norm(tr.tensor(x), tr.tensor(wn), 1e-5)
        return (tr.nn.linear(h, tr.tensor(g)).silu() * tr.nn.linear(h, tr.tensor(u)),)

    fused, _ = check(monkeypatch, build, tol=3e-3 if dtype == "float16" else 1e-4)
    assert [(d.kernel, d.workgroup_count) for d in fused] == [("gemv_multi", (3, 1, 1))]


def test_a_norm_read_elsewhere_is_stored(monkeypatch):
    """h is read by the matmuls and by an add: the norm keeps its own kernel; the matmuls still merge."""
    x, a, b = arr(1, 32), arr(16, 32), arr(16, 32)

    def build() -> tuple[tr.Tensor, ...]:
        h = tr.nn.rms_norm(tr.tensor(x), None, 1e-5)
        return (tr.nn.linear(h, tr.tensor(a)) * tr.nn.linear(h, tr.tensor(b)), h + 1.0)

    fused, _ = check(monkeypatch, build)
    kernels = [d.kernel for d in fused]
    assert kernels.count("gemv_multi") == 1 and "norm_regs" in kernels


@pytest.mark.parametrize("subgroups", [True, False], ids=["subgroups", "tree"])
def test_a_where_of_a_leaf_mask_reads_its_leaves(monkeypatch, subgroups):
    """tril (where(mask, y, 0)) and where(m, y, z) after the matmul: the masks and z are leaves the
    epilogue reads, not side writes (they were left out of the uniform: `params.l3_off` undeclared,
    found by the fuzzer on the GL adapter). Both workgroup sums: subgroups and the tree."""
    from tests.test_kernels_perf_variants import run_with_caps

    if subgroups and not get_device().caps.subgroups:
        pytest.skip("no subgroups on this adapter")
    x, wn, a = arr(1, 4), arr(4), arr(3, 4)
    mask, z = np.array([False, True, True]), arr(1, 3)

    def build() -> tuple[tr.Tensor, ...]:
        y = tr.nn.linear(tr.nn.rms_norm(tr.tensor(x), tr.tensor(wn), 1e-5), tr.tensor(a))
        return (tr.where(tr.tensor(mask), tr.tril(y), tr.tensor(z)),)

    want = reference(build)[0]
    fused, _ = check(monkeypatch, build)
    mask_kernels = ["arange", "elementwise", "arange", "elementwise"]  # tril's mask
    assert [d.kernel for d in fused] == [*mask_kernels, "gemv_multi"]
    got, program = run_with_caps(build()[0], subgroups=subgroups)
    assert [d.kernel for d in program.dispatches] == [*mask_kernels, "gemv_multi"]
    assert ("subgroupAdd" in program.sources[program.dispatches[-1].key]) == subgroups
    assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_interpreter_agrees_on_the_fused_graph():
    """The FUSED nodes (the group and its side writes) evaluate as the nodes they hold."""
    w = attention_inputs(32, 2, 1, 8, 6, "float32", True)
    build = qkv_step(w, 2, 1, 8, 2)
    outs = build()
    built = build_graph([t._lazy for t in outs])
    inputs = [tr.Tensor(lz).numpy() for lz in built.inputs]
    fused = run_pipeline(built.graph, get_device().caps).graph
    assert sum(n.op is Op.FUSED for n in fused) == 3  # the group and its two side writes
    for got, want in zip(interpret(fused, inputs), interpret(built.graph, inputs), strict=True):
        assert_close(got, want, rtol=1e-6, atol=1e-6)


# --- the decoder of examples/llama.py ---------------------------------------------------------


def _decoder_logits(monkeypatch: pytest.MonkeyPatch, fusion: bool, jit: bool) -> tuple[np.ndarray, int]:
    """Logits of five decode steps of a tiny random Llama (and the dispatches of one step)."""
    from benchmarks.e2e.decoder import config
    from examples import llama as L

    monkeypatch.setenv("WGJIT_FUSION", "1" if fusion else "0")
    cfg = config("tiny")
    model = L.Llama(cfg, L.check_weights(L.random_weights(cfg, seed=0), cfg, "random"), cfg.max_positions)
    logits = []
    if jit:
        cache = model.empty_cache().tensors()
        for pos, tok in enumerate([3, 17, 5, 9, 11]):
            out = model.step_jit(tr.tensor(np.array([[tok]], np.int32)), tr.tensor(np.array([pos], np.int32)), *cache)
            cache = out[2:]
            logits.append(out[0].numpy())
        step = model.step(tr.tensor(np.array([[1]], np.int32)), tr.tensor(np.array([0], np.int32)), *cache)
        count = len(tr.compile(*step).dispatches)
    else:
        kv = model.empty_cache()
        for pos, tok in enumerate([3, 17, 5, 9, 11]):
            logits.append(model.step_lazy(tr.tensor(np.array([[tok]], np.int32)), pos, kv)[0].numpy())
        lg, nxt = model.step_lazy(tr.tensor(np.array([[1]], np.int32)), 5, kv)
        count = len(tr.compile(lg, nxt, *kv.tensors()).dispatches)
    monkeypatch.delenv("WGJIT_FUSION")
    return np.array(logits), count


@pytest.mark.parametrize("jit", [True, False], ids=["jit step", "lazy step"])
def test_decoder_steps_match_the_unfused_graph(monkeypatch, jit):
    fused, n_fused = _decoder_logits(monkeypatch, True, jit)
    unfused, n_unfused = _decoder_logits(monkeypatch, False, jit)
    assert_close(fused, unfused, rtol=1e-4, atol=1e-5)
    assert n_fused < n_unfused


@pytest.mark.parametrize("weights", ["float16", "q8_0", "q4_0"])
def test_decoder_step_against_the_interpreter(monkeypatch, weights):
    """A float16 or quantized model's jit-form step (random caches): fused, unfused and the interpreter
    agree, and each layer is five dispatches, as a float32 model's (the norms fold into the q/k/v and
    gate/up groups; quantized matrices are read as blocks by gemv_multi, o and down by qgemv)."""
    from benchmarks.e2e.decoder import config
    from examples import llama as L

    dtype = tr.float16 if weights == "float16" else tr.float32
    if dtype is tr.float16 and not get_device().caps.shader_f16:
        pytest.skip("no shader-f16 on this adapter")
    if weights != "float16":
        pytest.importorskip("gguf", reason="quantizing needs the gguf package")
    cfg = config("tiny")
    w = L.random_weights(cfg, seed=1, scale=0.1)
    w = L.check_weights(L.quantize_weights(w, cfg, weights) if dtype is tr.float32 else w, cfg, "random", dtype)
    tr.realize(*w.values())
    model = L.Llama(cfg, w, cfg.max_positions, dtype)
    shape = (1, cfg.kv_heads, cfg.max_positions, cfg.head_dim)
    caches = [arr(*shape, dtype=str(dtype.np)) for _ in range(2 * cfg.layers)]

    def build() -> tuple[tr.Tensor, ...]:
        ids, pos = tr.tensor(np.array([[7]], np.int32)), tr.tensor(np.array([9], np.int32))
        out = model.step(ids, pos, *[tr.tensor(c) for c in caches])
        return (out[0], *out[2:])  # the logits and the caches (not the argmax: a near tie may flip)

    fused, unfused = check(monkeypatch, build, tol=5e-3 if dtype is tr.float16 else 1e-4)
    kernels = [d.kernel for d in fused]
    last = len(kernels) - kernels[::-1].index("attention_decode") - 2  # the last layer's q/k/v group
    gemv = "gemv" if dtype is tr.float16 else "qgemv"
    layer = ["gemv_multi", "attention_decode", gemv, "gemv_multi", gemv]  # (the first's mask runs between)
    assert kernels[last : last + 5] == layer
    assert kernels.count("gemv_multi") == 2 * cfg.layers + 1 and kernels.count("norm") == 0
    assert len(fused) < len(unfused)


@pytest.mark.parametrize("weights", ["q8_0", "q4_0"])
def test_quantized_decoder_step_staged(monkeypatch, weights):
    """passes.select_kernels.GEMV_STAGED_ROW on: a quantized model's jit-form step (random caches, 16
    units a workgroup, shuffles where the adapter allows) agrees with the unfused graph and the
    interpreter; gate/up and the head are staged, q/k/v (a spread cache write) keep the blocks layout."""
    from benchmarks.e2e.decoder import config
    from examples import llama as L
    from passes import select_kernels as sk

    realize_mod = sys.modules["tracer.realize"]  # the package exports a function of that name

    pytest.importorskip("gguf", reason="quantizing needs the gguf package")
    monkeypatch.setattr(realize_mod, "_PROGRAMS", OrderedDict())  # programs are cached by structure, not by rules
    monkeypatch.setattr(sk, "GEMV_STAGED_ROW", 1)
    monkeypatch.setattr(sk, "GEMV_STAGED_GROUP", 4)  # 4 lanes: shuffles on any adapter with subgroups
    cfg = config("tiny")
    w = L.random_weights(cfg, seed=2, scale=0.1)
    w = L.check_weights(L.quantize_weights(w, cfg, weights), cfg, "random", tr.float32)
    tr.realize(*w.values())
    model = L.Llama(cfg, w, cfg.max_positions, tr.float32)
    shape = (1, cfg.kv_heads, cfg.max_positions, cfg.head_dim)
    caches = [arr(*shape) for _ in range(2 * cfg.layers)]

    def build() -> tuple[tr.Tensor, ...]:
        ids, pos = tr.tensor(np.array([[7]], np.int32)), tr.tensor(np.array([9], np.int32))
        out = model.step(ids, pos, *[tr.tensor(c) for c in caches])
        return (out[0], *out[2:])

    fused, _ = check(monkeypatch, build)
    staged = [":staged4" in d.variant for d in fused if d.kernel == "gemv_multi"]
    assert staged == [False, True] * cfg.layers + [True]


# --- the fuzzer's decode fragments ------------------------------------------------------------------


@settings(max_examples=40, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(decode_programs(f16=get_device().caps.shader_f16))
def test_random_decode_fragments(program):
    """tests/strategies.py's decode fragments through the fuzzer's three oracles (numpy, ir.interpret on
    the traced graph, ir.interpret after every pass)."""
    check_program(program)
