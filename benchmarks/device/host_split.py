"""How a replay's wall time splits on a real GPU, and what chunked submission buys (GPU machine, ~2 min).

    python -m benchmarks.device.host_split [--workloads minilm,12L] [--chunks 0,8,16,32,64] [--growths 1,2]

For each workload (MiniLM 32x128 forward under @tr.jit with its read-back; one decode token of
the 12-layer decoder of the e2e suite, read-back of the next id included) this runs the call
with backend_wgpu.program.SUBMIT_CHUNK set to each value in turn (and SUBMIT_GROWTH to each of
--growths: a setting "16x2" is chunks of 16, 32, 64... dispatches), interleaved in blocks after
a warm-up (so every setting sees the same clocks), and prints the median wall time per call.
Then cProfile's top functions of the default setting's calls (CPU attribution: wgpu-native's
C calls count in the Python function that makes them). The wgpu-py split lists only what still
goes through wgpu-py's methods: a run's encoders, passes and submissions, and a read-back's copy,
call wgpu-native directly (backend_wgpu.program; replay_host.py times them by stage). The summary
table comes last.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


def minilm_call() -> Callable[[], Any]:
    import tracer as tr
    from benchmarks.e2e.minilm import _batch
    from examples import minilm

    model = minilm.MiniLM(minilm.model_dir())
    ids, types, mask = _batch(32, 128)
    return lambda: model.forward_jit(tr.tensor(ids), tr.tensor(types), tr.tensor(mask)).numpy()


def decoder_call(name: str) -> Callable[[], Any]:
    from benchmarks.e2e.decoder import JitDecode, config
    from examples import llama as L

    cfg = config(name)
    model = L.Llama(cfg, L.check_weights(L.random_weights(cfg, seed=0), cfg, "random"), cfg.max_positions)
    step = JitDecode(model, list(range(1, min(129, cfg.max_positions // 2))))

    def call() -> int:
        step.prepare(1)
        return step()

    return call


def sweep(
    call: Callable[[], Any], chunks: list[tuple[int, float]], blocks: int, per_block: int
) -> dict[tuple[int, float], list[float]]:
    """Wall ms per call for each (SUBMIT_CHUNK, SUBMIT_GROWTH), interleaved in blocks."""
    import backend_wgpu.program as program

    default, default_growth = program.SUBMIT_CHUNK, getattr(program, "SUBMIT_GROWTH", 1.0)
    end = time.perf_counter() + 3.0
    while time.perf_counter() < end:  # warm: compiled, clocks up
        call()
    samples: dict[tuple[int, float], list[float]] = {c: [] for c in chunks}
    try:
        for _ in range(blocks):
            for c in chunks:
                program.SUBMIT_CHUNK, program.SUBMIT_GROWTH = c
                call()
                for _ in range(per_block):
                    t0 = time.perf_counter()
                    call()
                    samples[c].append((time.perf_counter() - t0) * 1e3)
    finally:
        program.SUBMIT_CHUNK, program.SUBMIT_GROWTH = default, default_growth
    return samples


def profile(call: Callable[[], Any], calls: int, top: int) -> str:
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        call()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


WGPU_CALLS = [  # (class, method) of wgpu-py whose wall time per call is split out
    ("GPUDevice", "create_command_encoder"),
    ("GPUCommandEncoder", "begin_compute_pass"),
    ("GPUComputePassEncoder", "end"),
    ("GPUCommandEncoder", "finish"),
    ("GPUQueue", "submit"),
    ("GPUQueue", "write_buffer"),
    ("GPUCommandEncoder", "copy_buffer_to_buffer"),
    ("GPUBuffer", "map_async"),
    ("GPUBuffer", "read_mapped"),
    ("GPUBuffer", "unmap"),
]


def wgpu_split(call: Callable[[], Any], calls: int) -> str:
    """Wall ms per workload call spent in each wgpu-py method (and in the whole call)."""
    import functools

    from wgpu.backends.wgpu_native import _api

    spent: dict[str, float] = {}
    undo = []
    for cls_name, meth in WGPU_CALLS:
        cls = getattr(_api, cls_name)
        original = getattr(cls, meth)

        def timed(*a: Any, _f: Any = original, _k: str = f"{cls_name}.{meth}", **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return _f(*a, **kw)
            finally:
                spent[_k] = spent.get(_k, 0.0) + time.perf_counter() - t0

        setattr(cls, meth, functools.wraps(original)(timed))
        undo.append((cls, meth, original))
    try:
        t0 = time.perf_counter()
        for _ in range(calls):
            call()
        total = time.perf_counter() - t0
    finally:
        for cls, meth, original in undo:
            setattr(cls, meth, original)
    rows = [f"  {k:<40} {v * 1e3 / calls:8.3f} ms/call" for k, v in sorted(spent.items(), key=lambda kv: -kv[1])]
    return "\n".join([f"  {'whole call':<40} {total * 1e3 / calls:8.3f} ms/call", *rows])


def _label(setting: tuple[int, float]) -> str:
    chunk, growth = setting
    return str(chunk) if growth == 1 else f"{chunk}x{growth:g}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="minilm,12L")
    parser.add_argument("--chunks", default="0,8,16,32,64")
    parser.add_argument("--growths", default="1", help="SUBMIT_GROWTH values, each swept with every chunk")
    parser.add_argument("--blocks", type=int, default=6)
    parser.add_argument("--per-block", type=int, default=15)
    parser.add_argument("--out", type=Path, default=None, help="also write the output here")
    args = parser.parse_args()
    from backend_wgpu import get_device

    growths = [float(g) for g in args.growths.split(",")]
    chunks = [(int(c), g) for g in growths for c in args.chunks.split(",") if g == 1 or int(c) > 0]
    caps = get_device().caps
    lines = [
        f"host_split on {caps.name} ({caps.backend}), SUBMIT_CHUNK default {os.environ.get('WGJIT_SUBMIT_CHUNK', '16')}"
    ]
    table = []
    for name in args.workloads.split(","):
        call = minilm_call() if name == "minilm" else decoder_call(name)
        samples = sweep(call, chunks, args.blocks, args.per_block)
        row = {c: statistics.median(s) for c, s in samples.items()}
        table.append((name, row))
        lines.append(f"\n== {name}: wall time in wgpu-py calls, 100 calls (default chunk)")
        lines.append(wgpu_split(call, 100))
        lines.append(f"\n== {name}: cProfile of 100 calls (default chunk), top by own time")
        lines.append(profile(call, 100, 22))
        del call
    lines.append(
        "\nmedian wall ms per call (read-back included) by SUBMIT_CHUNK (0: one submission; CxG: chunks growing G times)"
    )
    lines.append("| workload | " + " | ".join(_label(c) for c in chunks) + " |")
    lines.append("|---|" + "---|" * len(chunks))
    for name, row in table:
        lines.append(f"| {name} | " + " | ".join(f"{row[c]:.3f}" for c in chunks) + " |")
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    np.set_printoptions(precision=4)
    main()
