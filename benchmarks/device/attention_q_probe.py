"""Probe: how much of causal flash attention's time goes to reading q (GPU machine, < 1 minute).

    python3 -m benchmarks.device.attention_q_probe

The flash kernel reads each thread's 4 query rows at one head dim for every block of keys. From q as
(B, H, Lq, E) a warp's load touches 4 memory lines (its 4 row groups' rows), and the score loop
issues 4 such loads per 64 FMAs. This probe times the causal 1x32x2048x128 case (the attention
tool's) three ways, interleaved in blocks: the rule's kernel, the same kernel with every q load
made to read one row per warp (1 line a load: wrong values, right traffic), and with no q loads
at all (registers made from the loop counter). The gap between the first two is what a layout
with one line per load can gain: run X found 1.234 ms -> 0.919 (no loads: 0.902), which is why
passes.attention_layout copies q transposed for long attention. The numbers the modified kernels
compute are garbage: only their times mean anything.
"""

from __future__ import annotations

import statistics
from typing import Any

from backend_wgpu import get_device
from backend_wgpu.kernels.attention import flash
from benchmarks.device.attention import CASES, inputs, wgjit_program
from benchmarks.timing import ProgramTimer
from passes import attention_layout


def _patched_step(mode: str, original: Any) -> Any:
    """_score_step rewriting its q loads: 'uniform' (a warp's row groups all read one row) or 'none'."""

    def step(self: Any, b: Any, karr: str) -> None:
        lines: list[str] = []
        real = b.line
        b.line = lines.append
        try:
            original(self, b, karr)
        finally:
            b.line = real
        for s in lines:
            if "let qr" in s and mode == "uniform":
                s = s.replace("i32(qrow", "i32((r0 + (ty & ~3u)) + 0u * (qrow").replace(
                    ") * params.q_sl", ")) * params.q_sl", 1
                )
            elif "let qr" in s and mode == "none":
                name = s.split("let ")[1].split(" =")[0]
                s = f"    let {name} = vec4<f32>(f32(d4) * 1e-3);"
            real(s)

    return step


def main() -> None:
    case = next(c for c in CASES if c.name.startswith("causal 1x32x2048x128"))
    data = inputs(case)
    dev = get_device()
    timer = ProgramTimer(dev)
    kernel = flash.FlashAttentionKernel
    step, key, rows = kernel._score_step, kernel.variant_key, attention_layout.Q_TRANSPOSED_MIN_ROWS
    attention_layout.Q_TRANSPOSED_MIN_ROWS = 1 << 30  # q as it is: the loads this probe rewrites
    try:
        programs = {"rule": wgjit_program(case, data, None)[:2]}
        for mode in ("uniform", "none"):
            kernel._score_step = _patched_step(mode, step)
            kernel.variant_key = lambda self, m=mode: key(self) + ":" + m  # a pipeline of its own
            programs[mode] = wgjit_program(case, data, None)[:2]
    finally:
        kernel._score_step, kernel.variant_key = step, key
        attention_layout.Q_TRANSPOSED_MIN_ROWS = rows
    samples: dict[str, list[float]] = {k: [] for k in programs}
    for _ in range(7):
        for name, (program, buffers) in programs.items():
            t = timer.time(lambda w, p=program, b=buffers: p.run(b, timestamp_writes=w) if w else p.run(b), 2, 10)
            samples[name].append(t.median)
    print(f"{case.name} on {dev.caps.name}, GPU ms (timestamps, median of 7 blocks x 10 runs)")
    for name, s in samples.items():
        print(f"causal 1x32x2048x128 q loads {name:8s} {statistics.median(s):.4f} ms")


if __name__ == "__main__":
    main()
