"""A decode step's GPU time under other settings of the GEMV rules' knobs (GPU machine, ~2-3 min).

    python -m benchmarks.device.decode_knobs [--config 1B] [--formats f32,q4_0] [--settings "A=1;B=2,C=3"]
                                             [--positions 129,300,700] [--marginal 2]

Each setting is a comma-separated list of `passes.select_kernels` constants (GEMV_LANES,
GEMV_BLOCK_THREADS, QGEMV_ROWS, QGEMV_THREADS, QGEMV_MIN_WORKGROUPS, ...) set for that run
only; `default` is the built-in rules. For each weight format the e2e decoder's `@tr.jit`
step (benchmarks/e2e/decoder.py, after a 128-token prefill) is compiled anew under each
setting and its logits checked against the default setting's (max |diff| / max |logit|);
then, after a warm-up of all of them (the H200 idles down while the host compiles), each
setting's step is timed with timestamps around its pass, interleaved in blocks so each sees
the same clocks. `--positions` compiles the step at each of these positions instead of the first one
after the prompt (the attended length's bucket decides the attention's key ranges); `--marginal K`
adds each setting's attention cost inside the step (Program.profile(marginal=K): attention_decode and
its combine, summed over the layers). This finds the rules' constants; it is not a figure of
end-to-end speed. A table is printed last.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np

DEFAULT_SETTINGS = (
    "default;GEMV_LANES=4;GEMV_LANES=16;GEMV_LANES=32;GEMV_BLOCK_THREADS=32;GEMV_BLOCK_THREADS=128;"
    "GEMV_BLOCK_THREADS=32,GEMV_LANES=16;GEMV_BLOCK_THREADS=128,GEMV_LANES=16;"
    "QGEMV_ROWS=2;QGEMV_ROWS=8;QGEMV_THREADS=64;QGEMV_THREADS=256;QGEMV_MIN_WORKGROUPS=128;QGEMV_MIN_WORKGROUPS=512;"
    "UNROLLED_STEPS=2;UNROLLED_STEPS=8"
)


def parse(setting: str) -> dict[str, Any]:
    if setting.strip() == "default":
        return {}
    out = {}
    for item in setting.split(","):
        name, value = item.split("=")
        out[name.strip()] = None if value.strip() == "None" else int(value)
    return out


def apply(values: dict[str, Any]) -> dict[str, Any]:
    """Set the constants (in passes.select_kernels, or gemv_multi's UNROLLED_STEPS); returns the old values."""
    import backend_wgpu.kernels.matmul.gemv_multi as gm
    import passes.select_kernels as sk

    old = {}
    for name, value in values.items():
        module = gm if name == "UNROLLED_STEPS" else sk
        if not hasattr(module, name):
            raise SystemExit(f"decode_knobs: no constant {name} in {module.__name__}")
        old[name] = getattr(module, name)
        setattr(module, name, value)
    return old


def compile_step(step: Any, cache: list[Any]) -> tuple[Any, list[Any], np.ndarray]:
    """The next step's program under the current constants, its input buffers, and its logits (run once)."""
    import tracer as tr
    from tracer.graph_builder import build_graph
    from tracer.realize import device_buffer, program_for

    ids, _ = step.inputs()
    logits, next_id = step.model.step_into(ids, tr.dynamic(step.pos), *cache)
    built = build_graph([logits._lazy, next_id._lazy])
    program = program_for(built.graph)
    buffers = [device_buffer(lz) for lz in built.inputs]
    return program, buffers, logits.numpy()


def attention_us(program: Any, buffers: list[Any], copies: int) -> float:
    """The attention kernels' summed cost inside the step's one pass, in us (Program.profile(marginal=...))."""
    prof = program.profile(buffers, repeats=3, marginal=copies)
    return sum(k.seconds for k in prof.kernels if k.kernel.startswith("attention")) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="1B")
    parser.add_argument("--formats", default="f32,q4_0")
    parser.add_argument("--settings", default=DEFAULT_SETTINGS)
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--warm-seconds", type=float, default=2.0)
    parser.add_argument("--positions", default="", help="positions to compile the step at (default: after the prompt)")
    parser.add_argument("--marginal", type=int, default=0, help="K > 0: the attention's marginal cost per setting")
    args = parser.parse_args()
    import tracer as tr
    from backend_wgpu import get_device
    from benchmarks.device.decode_formats import build
    from benchmarks.timing import ProgramTimer, time_program
    from tracer.realize import clear_program_cache

    settings = [s.strip() for s in args.settings.split(";") if s.strip()]
    timer = ProgramTimer(get_device())
    rows = []
    for fmt, position in [(f, p) for f in args.formats.split(",") for p in args.positions.split(",")]:
        model, step, _ = build(args.config, fmt)
        if position:
            step.pos = int(position)
        cache = [c.copy() for c in step.cache]  # the steps write the next position here, not in the live cache
        tr.realize(*cache)
        entries = []
        for setting in settings:
            old = apply(parse(setting))
            try:
                clear_program_cache()
                entries.append((setting, *compile_step(step, cache)))
            finally:
                apply(old)
        label = f"{fmt}@{step.pos}"
        end = time.perf_counter() + args.warm_seconds  # clocks up before any is timed
        while time.perf_counter() < end:
            for _, program, buffers, _ in entries:
                time_program(program, buffers, timer, 0, 2)
        samples: dict[str, list[float]] = {setting: [] for setting in settings}  # a repeated setting: one list
        for block in range(args.blocks):  # interleaved, each block from another start: the same clocks, no
            turn = block % len(entries)  # setting always first after the host's pause between blocks
            for setting, program, buffers, _ in entries[turn:] + entries[:turn]:
                t = time_program(program, buffers, timer, 2, 8)
                samples[setting].append(statistics.median(t.gpu_ms) if t.gpu_ms else float("nan"))
        reference = entries[0][3]
        for setting, program, buffers, logits in entries:
            err = float(np.abs(logits - reference).max() / max(float(np.abs(reference).max()), 1e-30))
            ms = statistics.median(samples[setting])
            attention = attention_us(program, buffers, args.marginal) if args.marginal else float("nan")
            rows.append((label, setting, ms, len(program.dispatches), err, attention))
            print(f"  {label} {setting}: {ms:.4f} ms, {len(program.dispatches)} dispatches, err {err:.1e}, "
                  f"attention {attention:.1f} us", flush=True)  # fmt: skip
        del model, step, cache, entries
    print(f"\ndecode step GPU ms by rule constants, {args.config}, on {get_device().caps.name} (timestamps, median of "
          f"{args.blocks} interleaved blocks after {args.warm_seconds:.0f} s of warm-up; diagnostic)")  # fmt: skip
    print(f"{'weights@pos':<12} {'setting':<48} {'GPU ms':>8} {'vs default':>10} {'disp':>5} {'err':>8} {'attn us':>8}")
    base = {label: ms for label, s, ms, _, _, _ in rows if s == settings[0]}
    for label, setting, ms, dispatches, err, attention in rows:
        ratio = base[label] / ms if ms and base.get(label) else float("nan")
        flag = "" if err < 1e-3 else "  WRONG"
        print(f"{label:<12} {setting:<48} {ms:8.4f} {ratio:9.2f}x {dispatches:5d} {err:8.1e} {attention:8.1f}{flag}")


if __name__ == "__main__":
    main()
