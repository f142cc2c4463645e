"""Decode wall time per token by weight format (f32, f16, q8_0, q4_0, q4_k, q6_k, q4_k_m), one process (GPU machine, ~2-3 min).

    python -m benchmarks.device.decode_formats [--config 1B] [--formats f32,f16,q8_0,q4_0] [--loops sync,ahead]

Issue 13's targets are ratios of wgjit to itself: f16 weights >= 1.8x our f32 per token, q8_0
>= 3x, q4_0 >= 4.5x, end to end (the `@tr.jit` decode step of benchmarks/e2e/decoder.py, the
next id read back, after a 128-token prefill). Every format's model is built first (random
weights, seed 0; q8_0/q4_0/q4_k/q6_k/q4_k_m (llama.cpp's mix: examples/llama.format_of) by tr.quantize of the same matrices, f16 computes in float16 with
float16 caches), then the formats' token loops run interleaved in blocks after a warm-up, so each
sees the same clocks. Two loops per format: `sync` reads id t before submitting step t+1,
`ahead` submits step t+1 (fed with id t on the GPU) and then reads id t, as examples/generate.py
does. GPU ms of one step (timestamps) is printed beside as a diagnostic.
A table is printed last; --json writes the figures.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np


def build(name: str, fmt: str) -> tuple[Any, Any, Any]:
    import tracer as tr
    from benchmarks.e2e.decoder import JitDecode, config
    from examples import llama as L

    cfg = config(name)
    weights = L.random_weights(cfg, seed=0)
    ours = L.quantize_weights(weights, cfg, fmt) if fmt in L.QUANTIZE else weights
    dtype = tr.float16 if fmt == "f16" else tr.float32
    model = L.Llama(cfg, L.check_weights(ours, cfg, f"random {name} {fmt}", dtype), cfg.max_positions, dtype)
    tr.realize(*model.w.values())
    del weights, ours
    gc.collect()
    prompt = np.random.default_rng(1).integers(0, cfg.vocab, min(128, cfg.max_positions // 2)).tolist()
    return model, JitDecode(model, prompt), JitDecode(model, prompt, ahead=True)


def step_gpu(step: Any) -> tuple[float | None, int]:
    """GPU ms of one decode step (the lazy step's program, timestamps) and its dispatches: a diagnostic."""
    from types import SimpleNamespace

    from backend_wgpu import get_device
    from benchmarks.timing import ProgramTimer

    ctx = SimpleNamespace(timer=ProgramTimer(get_device()))
    step.prepare(1)
    return step.gpu_time(ctx)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="1B")
    parser.add_argument("--formats", default="f32,f16,q8_0,q4_0")
    parser.add_argument("--loops", default="sync,ahead")
    parser.add_argument("--blocks", type=int, default=6)
    parser.add_argument("--per-block", type=int, default=20)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    from backend_wgpu import get_device

    caps = get_device().caps
    formats, loops = args.formats.split(","), args.loops.split(",")
    steps = {}
    for fmt in formats:
        t0 = time.perf_counter()
        model, sync, ahead = build(args.config, fmt)
        steps.update({(fmt, "sync"): sync, (fmt, "ahead"): ahead})
        print(f"{fmt}: built and prefilled in {time.perf_counter() - t0:.1f} s", flush=True)
    runs = [(fmt, loop) for fmt in formats for loop in loops]

    def token(run: tuple[str, str]) -> None:
        step = steps[run]
        step.prepare(1)
        step()

    for run in runs:  # warm: compiled, clocks up
        end = time.perf_counter() + 2.0
        while time.perf_counter() < end:
            token(run)
    samples: dict[tuple[str, str], list[float]] = {r: [] for r in runs}
    for _ in range(args.blocks):
        for run in runs:
            token(run)
            for _ in range(args.per_block):
                t0 = time.perf_counter()
                token(run)
                samples[run].append((time.perf_counter() - t0) * 1e3)
    rows = []
    for fmt, loop in runs:
        ms = statistics.median(samples[(fmt, loop)])
        base = statistics.median(samples[(formats[0], loop)])
        gpu, dispatches = step_gpu(steps[(fmt, "sync")])
        rows.append({"format": fmt, "loop": loop, "wall_ms": ms, "gpu_ms": gpu, "dispatches": dispatches,
                     "vs_first": base / ms})  # fmt: skip
    lines = [
        f"decode per token by weight format, {args.config} config, on {caps.name} ({caps.backend}); wall ms per token "
        f"with the next id read back (median of {args.blocks}x{args.per_block}, interleaved), GPU ms of one step "
        f"(timestamps, diagnostic); ratio = {formats[0]} wall / this wall, in the same loop",
        "| weights | loop | wall ms | GPU ms | dispatches | vs " + formats[0] + " |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        gpu = f"{r['gpu_ms']:.3f}" if r["gpu_ms"] is not None else "-"
        lines.append(
            f"| {r['format']} | {r['loop']} | {r['wall_ms']:.3f} | {gpu} | {r['dispatches']} | {r['vs_first']:.2f}x |"
        )
    print("\n".join(lines))
    if args.json is not None:
        args.json.write_text(json.dumps({"config": args.config, "device": caps.name, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
