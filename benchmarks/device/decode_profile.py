"""Where a decode step's GPU time goes, per kernel, for each weight format (GPU machine, < 1 min for 12L).

    python -m benchmarks.device.decode_profile [--config 12L] [--formats f32,f16,q8_0,q4_0]

Builds the e2e decoder (benchmarks/device/decode_formats.py's models), runs one `@tr.jit` step,
then times every dispatch of its program on its own (backend_wgpu.profile: one compute pass per
dispatch with timestamps, zero-filled inputs). Prints, per format, the GPU us per kernel summed
over the step, with the bytes it moves and the GB/s that gives, and the slowest dispatches.
"""

from __future__ import annotations

import argparse
from collections import defaultdict

from benchmarks.device.decode_formats import build


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="12L")
    parser.add_argument("--formats", default="f32,f16,q8_0,q4_0")
    parser.add_argument("--top", type=int, default=8)
    args = parser.parse_args()
    from backend_wgpu import get_device

    print(f"decode step per kernel, {args.config} config, on {get_device().caps.name}: GPU us summed per kernel")
    for fmt in args.formats.split(","):
        model, step = build(args.config, fmt)
        step.prepare(1)
        step()
        program = next(reversed(model.step_jit.traces.values())).program
        prof = program.profile(repeats=5)
        by: dict[str, list[float]] = defaultdict(lambda: [0.0, 0, 0])
        for k in prof.kernels:
            row = by[k.kernel]
            row[0] += k.seconds * 1e6
            row[1] += 1
            row[2] += k.bytes
        total = sum(r[0] for r in by.values())
        print(f"\n== {fmt}: {len(prof.kernels)} dispatches, {total:.1f} us in all (each dispatch alone)")
        print(f"{'kernel':<22} {'count':>5} {'us':>8} {'MB':>8} {'GB/s':>7}")
        for name, (us, n, nbytes) in sorted(by.items(), key=lambda kv: -kv[1][0]):
            gbps = nbytes / (us * 1e3) if us else 0.0
            print(f"{name:<22} {n:>5} {us:>8.1f} {nbytes / 1e6:>8.2f} {gbps:>7.0f}")
        print(f"slowest {args.top} dispatches:")
        for k in sorted(prof.kernels, key=lambda k: -k.seconds)[: args.top]:
            print(f"  {k.seconds * 1e6:7.1f} us  {k.bytes / 1e6:7.2f} MB  {k.kernel}[{k.variant}]")
        del model, step, program, prof


if __name__ == "__main__":
    main()
