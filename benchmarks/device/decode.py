"""H200 figures for issue 13's decode kernels (run on the GPU machine; prints a table last, < 3 min).

    python -m benchmarks.device.decode [--quick] [--attention-only] [--json OUT]

1. attention_decode (one query row per head over a KV cache, flash-decoding) at cache
   lengths 512..8192, f32 and f16 caches, two head layouts: checked against float64 numpy,
   then timed (GPU timestamps around the pass) and set against the bandwidth of reading K
   and V once: bytes(K) + bytes(V) over its time, and that over the read bandwidth torch
   reaches summing one large buffer in the same process (the target is at least 0.8x);
   torch's SDPA on the same decode shapes beside it. The ~1B layout (32/8 heads of 64) runs
   every candidate of CANDIDATES (threads per workgroup, keys per row per step, target
   workgroups: the knobs of passes.select_kernels.decode_attention_plan for caches cut into
   key ranges), the default first. Up to DECODE_ONE_RANGE_KEYS (512) keys a cache is one range
   with its own threads (DECODE_ONE_RANGE_THREADS), which the candidates leave as they are.
   These are lone passes at the GPU's idle clocks, whose dispatch floors dominate short caches;
   `decode_knobs --marginal` measures the attention inside a decode step.
2. The `@tr.jit` decode step of examples/llama.py at the 12-layer and ~1B configurations
   (benchmarks/e2e/decoder.py): dispatches per step and per layer, and GPU time per token,
   with fusion (the passes of issue 13) and with WGJIT_FUSION=0, checked against each other,
   and torch eager's GPU time per token (CUDA events, TF32 off) in the same process.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import tracer as tr  # noqa: E402
from backend_wgpu import get_device  # noqa: E402
from benchmarks.timing import ProgramTimer, time_program  # noqa: E402
from ir.ops import AttentionArg, Op  # noqa: E402
from tracer.graph_builder import build_graph  # noqa: E402
from tracer.realize import device_buffer, program_for  # noqa: E402
from tracer.tensor import make  # noqa: E402

LENGTHS = (512, 1024, 2048, 4096, 8192)
LAYOUTS = ((32, 8, 128), (32, 8, 64))  # (heads, kv heads, head dim): Llama-3-8B-like, the ~1B config
# (threads, unroll, target workgroups, slices per lane):
# DECODE_THREADS, DECODE_UNROLL, DECODE_TARGET_WORKGROUPS, DECODE_SLICES
# a target of 8 workgroups gives 8 kv heads one range each: no combine (one dispatch)
CANDIDATES = (
    (64, 2, 528, 4), (128, 2, 264, 4), (128, 4, 264, 4), (256, 2, 264, 4), (128, 1, 528, 4), (128, 2, 132, 4),
    (64, 4, 1056, 4), (128, 2, 264, 2), (256, 4, 264, 2), (256, 2, 8, 4), (256, 4, 8, 2), (512, 4, 8, 2),
)  # fmt: skip


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def load_torch() -> Any:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    return torch


def torch_ms(torch: Any, fn: Any, repeat: int = 20) -> float:
    for _ in range(3):
        fn()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeat)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in events)


def program_of(*tensors: tr.Tensor) -> tuple[Any, list[Any]]:
    """The program computing these pending tensors, and its input buffers."""
    built = build_graph([t._lazy for t in tensors])
    return program_for(built.graph), [device_buffer(lz) for lz in built.inputs]


def gpu_ms(timer: ProgramTimer, program: Any, buffers: list[Any], repeat: int) -> float:
    t = time_program(program, buffers, timer, 3, repeat)
    return statistics.median(t.gpu_ms) if t.gpu_ms else statistics.median(t.wall_ms)


# --- 1. the attention kernel ---------------------------------------------------------------------


def attention_reference(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    g = q.shape[1] // k.shape[1]
    q64 = q.astype(np.float64).reshape(k.shape[1], g, q.shape[-1])  # (Hkv, g, E)
    s = np.einsum("hge,hse->hgs", q64, k[0].astype(np.float64)) / math.sqrt(q.shape[-1])
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("hgs,hse->hge", p, v[0].astype(np.float64)).reshape(q.shape)


def candidate_program(y: tr.Tensor, candidate: tuple[int, ...] | None) -> tuple[Any, list[Any]]:
    """y's program compiled under a candidate's knobs (not cached: the program cache keys no knobs)."""
    if candidate is None:
        return program_of(y)
    from backend_wgpu.program import Program
    from passes import run_pipeline
    from passes import select_kernels as sk

    saved = default_candidate()
    sk.DECODE_THREADS, sk.DECODE_UNROLL, sk.DECODE_TARGET_WORKGROUPS, sk.DECODE_SLICES = candidate
    try:
        built = build_graph([y._lazy])
        program = Program(run_pipeline(built.graph, get_device().caps).graph, get_device())
    finally:
        sk.DECODE_THREADS, sk.DECODE_UNROLL, sk.DECODE_TARGET_WORKGROUPS, sk.DECODE_SLICES = saved
    return program, [device_buffer(lz) for lz in built.inputs]


def attention_case(
    timer: ProgramTimer,
    torch: Any,
    layout: tuple[int, int, int],
    s: int,
    dtype: str,
    candidate: tuple[int, ...] | None = None,
) -> dict:
    h, hkv, e = layout
    rng = np.random.default_rng(s)
    q = rng.standard_normal((1, h, 1, e)).astype(dtype)
    k = rng.standard_normal((1, hkv, s, e)).astype(dtype)
    v = rng.standard_normal((1, hkv, s, e)).astype(dtype)
    tq, tk, tv = tr.tensor(q), tr.tensor(k), tr.tensor(v)
    tr.realize(tq, tk, tv)
    y = make(
        Op.ATTENTION, (tq, tk, tv), (1, h, 1, e), tq.dtype, AttentionArg(1.0 / math.sqrt(e), False, "none", h // hkv)
    )
    program, buffers = candidate_program(y, candidate)
    kernels = [d.kernel for d in program.dispatches]
    first = program.dispatches[0]
    params = dict(program.graph[first.node].kernel.params)
    config = f"t{first.workgroup_size[0]}.l{params.get('lanes', '-')}.u{params.get('unroll', '-')}"
    config += f".wg{math.prod(first.workgroup_count)}{'.rt' if params.get('lane_shuffle') == 'runtime' else ''}"
    got = np.frombuffer(get_device().read(program.run(buffers)[0]), dtype=q.dtype).reshape(q.shape)
    err = float(np.abs(got.astype(np.float64) - attention_reference(q, k, v)).max())
    ms = gpu_ms(timer, program, buffers, 30)
    nbytes = k.nbytes + v.nbytes
    row = {
        "layout": f"{h}/{hkv}x{e}", "dtype": dtype, "S": s, "kernels": "+".join(kernels), "max_err": err,
        "us": ms * 1e3, "GBps": nbytes / (ms * 1e-3) / 1e9, "config": config,
        "candidate": "default" if candidate is None else "t{}.u{}.target{}.s{}".format(*candidate),
    }  # fmt: skip
    if err > (1e-4 if dtype == "float32" else 5e-3):
        row["kernels"] += " WRONG"
    if torch is not None and candidate is None:
        f = torch.nn.functional.scaled_dot_product_attention
        tdt = {"float32": torch.float32, "float16": torch.float16}[dtype]
        qt, kt, vt = (torch.from_numpy(a).to("cuda", tdt) for a in (q, k, v))
        try:
            row["torch_us"] = torch_ms(torch, lambda: f(qt, kt, vt, enable_gqa=True)) * 1e3
        except TypeError:  # torch before 2.5
            kr, vr = kt.repeat_interleave(h // hkv, 1), vt.repeat_interleave(h // hkv, 1)
            row["torch_us"] = torch_ms(torch, lambda: f(qt, kr, vr)) * 1e3
    return row


def floors(timer: ProgramTimer) -> list[tuple[str, float]]:
    """GPU us of programs too small to read memory for long: what a pass, a dispatch and a dependent
    dispatch cost here, and attention_decode alone over 64 keys (one step, one dispatch)."""
    x = tr.tensor(np.ones((1, 4), np.float32))
    m = tr.tensor(np.ones((64, 64), np.float32))
    tr.realize(x, m)
    rows = []
    for name, y in (
        ("one dispatch (a 4-element add)", x + 1.0),
        ("two dependent dispatches (a sum, then the sum of it)", m.sum(-1).sum()),
        ("four dependent dispatches", ((m.sum(-1) + 1.0).sum().exp() * m).sum(-1).max()),
    ):
        program, buffers = program_of(y)
        rows.append((f"{name}: {len(program.dispatches)} dispatches", gpu_ms(timer, program, buffers, 30) * 1e3))
    for s in (64, 512):
        rng = np.random.default_rng(0)
        q = tr.tensor(rng.standard_normal((1, 32, 1, 64)).astype(np.float32))
        k, v = (tr.tensor(rng.standard_normal((1, 8, s, 64)).astype(np.float32)) for _ in range(2))
        tr.realize(q, k, v)
        y = make(Op.ATTENTION, (q, k, v), (1, 32, 1, 64), q.dtype, AttentionArg(0.125, False, "none", 4))
        program, buffers = program_of(y)
        kernels = "+".join(d.kernel for d in program.dispatches)
        rows.append((f"attention 32/8x64 f32 S={s}: {kernels}", gpu_ms(timer, program, buffers, 30) * 1e3))
    return rows


def read_bandwidth(torch: Any) -> float | None:
    """GB/s torch reaches reading 1 GiB once (a sum): the reference the kernel's bandwidth is set against."""
    if torch is None:
        return None
    x = torch.ones(1 << 28, device="cuda")
    ms = torch_ms(torch, lambda: x.sum(), repeat=10)
    return (1 << 30) / (ms * 1e-3) / 1e9


def default_candidate() -> tuple[int, int, int, int]:
    from passes import select_kernels as sk

    return sk.DECODE_THREADS, sk.DECODE_UNROLL, sk.DECODE_TARGET_WORKGROUPS, sk.DECODE_SLICES


# --- 2. the decode step ----------------------------------------------------------------------------


def decode_case(timer: ProgramTimer, torch: Any, name: str, prompt: int = 128) -> dict:
    from benchmarks.e2e.decoder import config
    from examples import llama as L

    cfg = config(name)
    t0 = time.perf_counter()
    weights = L.random_weights(cfg, seed=0)
    model = L.Llama(cfg, L.check_weights(weights, cfg, f"random {name}"), cfg.max_positions)
    tr.realize(*model.w.values())
    log(f"  {name}: weights ready in {time.perf_counter() - t0:.1f} s")
    ids = tr.tensor(np.random.default_rng(1).integers(0, cfg.vocab, (1, prompt)).astype(np.int32))
    cache = list(model.prefill_jit(ids, *model.empty_cache().tensors())[2:])
    tok, pos = tr.tensor(np.array([[7]], np.int32)), tr.tensor(np.array([prompt], np.int32))
    row: dict[str, Any] = {"config": name, "layers": cfg.layers}
    logits = {}
    for fusion in ("1", "0"):
        os.environ["WGJIT_FUSION"] = fusion
        out = model.step(tok, pos, *cache)  # the jit step's graph, pending
        program, buffers = program_of(*out)
        logits[fusion] = np.frombuffer(get_device().read(program.run(buffers)[0]), np.float32)
        tag = "fused" if fusion == "1" else "unfused"
        row[f"dispatches_{tag}"] = len(program.dispatches)
        row[f"ms_{tag}"] = gpu_ms(timer, program, buffers, 10)
        del out, program, buffers
    os.environ.pop("WGJIT_FUSION")
    scale = max(1.0, float(np.abs(logits["0"]).max()))
    row["rel_err"] = float(np.abs(logits["1"] - logits["0"]).max()) / scale
    row["per_layer"] = dispatches_per_layer(cfg)
    if torch is not None:
        from benchmarks.e2e.torch_llama import TorchLlama

        theirs = TorchLlama(torch, cfg, weights, cfg.max_positions, "cuda")
        tcache = theirs.cache()
        theirs.prefill(torch.tensor(np.asarray(ids.numpy()), device="cuda"), tcache)
        tid = torch.tensor([[7]], device="cuda")
        row["torch_eager_ms"] = torch_ms(torch, lambda: theirs.step(tid, prompt, tcache), repeat=10)
        del theirs, tcache
    del weights, model, cache
    gc.collect()
    if torch is not None:
        torch.cuda.empty_cache()
    return row


def fresh_program(outs: tuple[tr.Tensor, ...], patch: Any = None) -> tuple[Any, list[Any]]:
    """The program of these pending tensors compiled now (no program cache), `patch()` active while it compiles."""
    from contextlib import nullcontext

    from backend_wgpu.program import Program
    from passes import run_pipeline

    built = build_graph([t._lazy for t in outs])
    with patch() if patch else nullcontext():
        program = Program(run_pipeline(built.graph, get_device().caps).graph, get_device())
    return program, [device_buffer(lz) for lz in built.inputs]


def without_new_folds() -> Any:
    """What fuse_gemv did before this branch: no float16 norm folded, no quantized weight in a group."""
    from contextlib import contextmanager

    from ir.dtypes import DType
    from passes import fuse_gemv as fg
    from passes.fold_views import view_of_operand

    @contextmanager
    def patched() -> Any:
        is_core, norm = fg._is_core, fg._norm_prologue

        def old_core(graph: Any, node: Any) -> bool:
            return is_core(graph, node) and not view_of_operand(graph, node.srcs[1])[0].dtype.is_quantized

        def old_norm(graph: Any, info: Any, cores: list[int]) -> int | None:
            found = norm(graph, info, cores)
            return None if found is not None and graph[found].dtype is DType.float16 else found

        fg._is_core, fg._norm_prologue = old_core, old_norm
        try:
            yield
        finally:
            fg._is_core, fg._norm_prologue = is_core, norm

    return patched


def block_units(units: int) -> Any:
    """passes.select_kernels.GEMV_LANES set to `units` while a program compiles."""
    from contextlib import contextmanager

    from passes import select_kernels as sk

    @contextmanager
    def patched() -> Any:
        saved, sk.GEMV_LANES = sk.GEMV_LANES, units
        try:
            yield
        finally:
            sk.GEMV_LANES = saved

    return patched


def format_model(cfg: Any, fmt: str, weights: dict[str, np.ndarray] | None = None) -> Any:
    """examples/llama.py's model of cfg with f32, f16, q8_0, q4_0, q4_k or q6_k weights (random, or zeros), realized."""
    from examples import llama as L

    if weights is None:
        weights = {n: np.zeros(shape, np.float32) for n, shape in cfg.tensor_shapes().items()}
    dtype = tr.float16 if fmt == "f16" else tr.float32
    w = L.quantize_weights(weights, cfg, fmt) if fmt in L.QUANTIZE else weights
    model = L.Llama(cfg, L.check_weights(w, cfg, f"random {fmt}", dtype), cfg.max_positions, dtype)
    tr.realize(*model.w.values())
    return model


def format_case(timer: ProgramTimer, name: str, fmt: str, prompt: int = 128) -> dict:
    """The jit step with `fmt` weights: dispatches per layer and GPU ms per token, fused, as before this
    branch (no float16 norm fold, quantized weights left to qgemv), and unfused; logits checked."""
    from dataclasses import replace

    from benchmarks.e2e.decoder import config
    from examples import llama as L

    cfg = config(name)
    t0 = time.perf_counter()
    model = format_model(cfg, fmt, L.random_weights(cfg, seed=0))
    log(f"  {name} {fmt}: weights ready in {time.perf_counter() - t0:.1f} s")
    ids = tr.tensor(np.random.default_rng(1).integers(0, cfg.vocab, (1, prompt)).astype(np.int32))
    cache = list(model.prefill_jit(ids, *model.empty_cache().tensors())[2:])
    tok, pos = tr.tensor(np.array([[7]], np.int32)), tr.tensor(np.array([prompt], np.int32))
    row: dict[str, Any] = {"config": name, "weights": fmt}
    logits = {}
    variants = [("fused", "1", None), ("before", "1", without_new_folds()), ("unfused", "0", None)]
    variants += [(f"lanes{u}", "1", block_units(u)) for u in (1, 4, 16)]  # gemv_multi's dot products per thread
    for tag, fusion, patch in variants:
        os.environ["WGJIT_FUSION"] = fusion
        out = model.step(tok, pos, *cache)
        program, buffers = fresh_program(out, patch)
        logits[tag] = np.frombuffer(get_device().read(program.run(buffers)[0]), np.float32)
        row[f"dispatches_{tag}"] = len(program.dispatches)
        row[f"ms_{tag}"] = gpu_ms(timer, program, buffers, 10)
        del out, program, buffers
    os.environ.pop("WGJIT_FUSION")
    scale = max(1.0, float(np.abs(logits["unfused"]).max()))
    row["rel_err"] = max(float(np.abs(v - logits["unfused"]).max()) / scale for v in logits.values())
    counts: dict[Any, list[int]] = {None: [], "before": []}
    for layers in (1, 2):  # one more layer adds this many dispatches (zero weights)
        small = format_model(replace(cfg, layers=layers, windows=(None,) * layers), fmt)
        for key, patch in ((None, None), ("before", without_new_folds())):
            out = small.step(tok, tr.tensor(np.array([3], np.int32)), *small.empty_cache().tensors())
            counts[key].append(len(fresh_program(out, patch)[0].dispatches))
    row["per_layer"] = counts[None][1] - counts[None][0]
    row["per_layer_before"] = counts["before"][1] - counts["before"][0]
    del model, cache
    gc.collect()
    return row


def dispatches_per_layer(cfg: Any) -> int:
    """Dispatches one more layer adds to the fused jit step (shallow copies of cfg, zero weights)."""
    from dataclasses import replace

    from examples import llama as L

    counts = []
    for layers in (1, 2):
        small = replace(cfg, layers=layers, windows=(None,) * layers)
        w = {name: tr.zeros(shape) for name, shape in small.tensor_shapes().items()}
        tr.realize(*w.values())
        model = L.Llama(small, w, small.max_positions)
        cache = model.empty_cache().tensors()
        out = model.step(tr.tensor(np.array([[1]], np.int32)), tr.tensor(np.array([3], np.int32)), *cache)
        counts.append(len(program_of(*out)[0].dispatches))
    return counts[1] - counts[0]


# --- the table -------------------------------------------------------------------------------------


def format_table(rows: list[dict]) -> str:
    lines = ["", "decode step by weight format (@tr.jit, one token after a 128-token prefill): GPU ms per token;",
             "'before' = this branch's new folds off (float16 norms stored, quantized weights in qgemv)"]  # fmt: skip
    lines.append(
        f"{'config':>6} {'weights':>7} {'/layer':>6} {'before':>6} {'disp':>5} {'ms fused':>8} {'ms before':>9} "
        f"{'ms off':>7} {'rel err':>8}"
    )
    for r in rows:
        lines.append(
            f"{r['config']:>6} {r['weights']:>7} {r['per_layer']:>6} {r['per_layer_before']:>6} "
            f"{r['dispatches_fused']:>5} {r['ms_fused']:>8.3f} {r['ms_before']:>9.3f} {r['ms_unfused']:>7.3f} "
            f"{r['rel_err']:>8.1e}"
            + "".join(f"  lanes={u}: {r[f'ms_lanes{u}']:.3f}" for u in (1, 4, 16) if f"ms_lanes{u}" in r)
        )
    return "\n".join(lines)


def table(attn: list[dict], peak: float | None, steps: list[dict]) -> str:
    lines = ["", "attention_decode: K+V read once (target >= 0.8x of torch's read bandwidth"
             + (f", {peak:.0f} GB/s here)" if peak else ")")]  # fmt: skip
    lines.append(
        f"{'layout':>9} {'dtype':>7} {'S':>5} {'candidate':>20} {'config':>20} {'us':>8} {'GB/s':>7} {'x read':>6} "
        f"{'torch us':>8} {'err':>8}  kernels"
    )
    for r in attn:
        x = f"{r['GBps'] / peak:.2f}" if peak else "-"
        t = f"{r['torch_us']:.1f}" if "torch_us" in r else "-"
        lines.append(
            f"{r['layout']:>9} {r['dtype']:>7} {r['S']:>5} {r['candidate']:>20} {r['config']:>20} {r['us']:>8.1f} "
            f"{r['GBps']:>7.0f} {x:>6} {t:>8} {r['max_err']:>8.1e}  {r['kernels']}"
        )
    best = {}
    for r in attn:
        key = (r["layout"], r["dtype"], r["S"])
        if "WRONG" not in r["kernels"] and (key not in best or r["us"] < best[key]["us"]):
            best[key] = r
    if any(r["candidate"] != "default" for r in attn):
        lines += ["", "fastest candidate per case:"]
        for (layout, dtype, length), r in best.items():
            x = f"{r['GBps'] / peak:.2f}x read" if peak else ""
            lines.append(
                f"{layout:>9} {dtype:>7} {length:>5}: {r['candidate']} {r['us']:.1f} us {r['GBps']:.0f} GB/s {x}"
            )
    if not steps:
        return "\n".join(lines)
    lines += ["", "decode step (@tr.jit, one token after a 128-token prefill): dispatches and GPU ms per token"]
    lines.append(
        f"{'config':>6} {'disp fused':>10} {'/layer':>6} {'disp off':>8} {'ms fused':>8} {'ms off':>7} {'torch eager':>11} {'rel err':>8}"
    )
    for r in steps:
        per = r["per_layer"]
        t = f"{r['torch_eager_ms']:.3f}" if "torch_eager_ms" in r else "-"
        lines.append(
            f"{r['config']:>6} {r['dispatches_fused']:>10} {per:>6} {r['dispatches_unfused']:>8} "
            f"{r['ms_fused']:>8.3f} {r['ms_unfused']:>7.3f} {t:>11} {r['rel_err']:>8.1e}"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="two cache lengths and the 12-layer config only")
    ap.add_argument(
        "--smoke", action="store_true", help="tiny shapes (lavapipe: runs every code path, times nothing real)"
    )
    ap.add_argument("--attention-only", action="store_true", help="the attention table only (no decode steps)")
    ap.add_argument(
        "--formats",
        default="f32,f16,q8_0,q4_0",
        help="weight formats of the 12L step table ('' for none; q* need gguf)",
    )
    ap.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = ap.parse_args()
    t0 = time.perf_counter()
    device = get_device()
    log(f"device: {device.caps.name} ({device.caps.backend})")
    timer = ProgramTimer(device)
    torch = load_torch()
    peak = read_bandwidth(torch)
    lengths = (64, 300) if args.smoke else LENGTHS[:2] if args.quick else LENGTHS
    layouts = ((4, 2, 16),) if args.smoke else LAYOUTS
    configs = ("tiny",) if args.smoke else ("12L",) if args.quick else ("12L", "1B")
    floor = floors(timer)
    attn = []
    for layout in layouts:
        for dtype in ("float32", "float16"):
            for s in lengths:
                tried = [None] + ([c for c in CANDIDATES if c != default_candidate()] if layout[2] == 64 else [])
                if args.smoke:  # every code path once, on lavapipe's small shapes
                    tried = [None, CANDIDATES[1]]
                for candidate in tried:
                    attn.append(attention_case(timer, torch, layout, s, dtype, candidate))
                    r = attn[-1]
                    log(f"  attention {r['layout']} {dtype} S={s} {r['candidate']} ({r['config']}): {r['us']:.1f} us")
    steps = (
        [] if args.attention_only else [decode_case(timer, torch, n, prompt=8 if args.smoke else 128) for n in configs]
    )
    formats = [] if args.attention_only else [f for f in args.formats.split(",") if f]
    if any(f.startswith("q") for f in formats) and importlib.util.find_spec("gguf") is None:
        log("  gguf is not installed: the q8_0/q4_0 rows are skipped (tr.quantize needs it)")
        formats = [f for f in formats if not f.startswith("q")]
    by_format = [format_case(timer, "tiny" if args.smoke else "12L", f, 8 if args.smoke else 128) for f in formats]
    if args.json:
        record = {"attention": attn, "read_GBps": peak, "decode": steps, "formats": by_format, "floors": floor}
        args.json.write_text(json.dumps(record, indent=1))
    log(f"total {time.perf_counter() - t0:.0f} s")
    floor_lines = ["", "floors (GPU us per run of a program of almost no bytes):"]
    floor_lines += [f"  {us:8.1f} us  {name}" for name, us in floor]
    print(table(attn, peak, steps) + (format_table(by_format) if by_format else "") + "\n".join(floor_lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
