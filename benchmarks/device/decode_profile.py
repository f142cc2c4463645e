"""Where a decode step's GPU time goes, per kernel, for each weight format (GPU machine, < 1 min for 12L).

    python -m benchmarks.device.decode_profile [--config 1B] [--formats f32,f16,q8_0,q4_0] [--repeat-each 16]
                                               [--in-pass | --marginal 4] [--prefill 512]

Builds the e2e decoder (benchmarks/device/decode_formats.py's models), runs one `@tr.jit` step,
then times every dispatch of its program (backend_wgpu.profile: a compute pass per dispatch
with timestamps, zero-filled inputs; each dispatch `--repeat-each` times in its pass, so the
pass's own cost, 20-30 us on the H200, is spread over the repeats and the time is close to
the dispatch's cost inside the step). Prints, per format, the step's GPU time in one pass,
the GPU us per kernel summed over the step with the bytes it moves and the GB/s that gives,
and per distinct dispatch (kernel and variant) its count, us each and GB/s. `--in-pass` times
the dispatches between timestamps inside the step's one pass instead (Program.profile(in_pass=True):
the real run's caches and barriers; a dispatch's time includes the barrier before it).
`--marginal K` gives each dispatch what it adds to the step's one pass instead
(Program.profile(marginal=K): the step timed whole, then again with each kind of dispatch run
1+K times in a row; a lone dispatch's launch and in-pass timestamps both distort on the H200),
and prints the step's time in that one pass beside the sum of the marginal costs, which need
not add up to it (overlap, caches; noise may make a small cost negative).
`--prefill N` profiles the program of a prompt of N tokens through `prefill_jit` instead of a step.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from typing import TYPE_CHECKING

import numpy as np

from benchmarks.device.decode_formats import build, step_gpu

if TYPE_CHECKING:
    from backend_wgpu.profile import Profile


def report(prof: Profile, title: str, how: str, top: int) -> None:
    """Per kernel: count, us, MB, GB/s, GFLOP/s summed; then the costliest distinct dispatches (kernel[variant])."""
    by: dict[str, list[float]] = defaultdict(lambda: [0.0, 0, 0, 0])
    distinct: dict[str, list[float]] = defaultdict(lambda: [0.0, 0, 0, 0])
    for k in prof.kernels:
        for row in (by[k.kernel], distinct[f"{k.kernel}[{k.variant}]"]):
            row[0] += k.seconds * 1e6
            row[1] += 1
            row[2] += k.bytes
            row[3] += k.flops
    total = sum(r[0] for r in by.values())
    print(f"\n== {title}; {len(prof.kernels)} dispatches, {total:.1f} us summed ({how})")
    print(f"{'kernel':<22} {'count':>5} {'us':>8} {'MB':>8} {'GB/s':>7} {'GFLOP/s':>8}")
    for name, (us, n, nbytes, flops) in sorted(by.items(), key=lambda kv: -kv[1][0]):
        rate = (nbytes / (us * 1e3), flops / (us * 1e3)) if us > 0 else (0.0, 0.0)
        print(f"{name:<22} {n:>5} {us:>8.1f} {nbytes / 1e6:>8.2f} {rate[0]:>7.0f} {rate[1]:>8.0f}")
    print(f"distinct dispatches, the costliest {top}:  us each  MB each  GB/s  GFLOP/s  count")
    for name, (us, n, nbytes, flops) in sorted(distinct.items(), key=lambda kv: -kv[1][0])[:top]:
        rate = (nbytes / (us * 1e3), flops / (us * 1e3)) if us > 0 else (0.0, 0.0)
        print(f"  {us / n:8.1f} {nbytes / n / 1e6:8.2f} {rate[0]:6.0f} {rate[1]:8.0f} {n:4d}  {name}")
    if prof.base_seconds is not None:
        print(
            f"the program in one pass: {prof.base_seconds * 1e6:.1f} us; marginal sum {total:.1f} us "
            "(marginal costs need not add up to the pass)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="1B")
    parser.add_argument("--repeat-each", type=int, default=16)
    parser.add_argument("--formats", default="f32,f16,q8_0,q4_0")
    parser.add_argument("--top", type=int, default=12)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--in-pass", action="store_true", help="timestamps between the dispatches of the one pass")
    mode.add_argument(
        "--marginal", type=int, default=0, help="K > 0: each dispatch's marginal cost in the one pass, from K copies"
    )
    parser.add_argument("--prefill", type=int, default=0, help="profile a prompt of this many tokens, not a step")
    args = parser.parse_args()
    import tracer as tr
    from backend_wgpu import get_device

    what = f"prefill of {args.prefill} tokens" if args.prefill else "decode step"
    print(f"{what} per kernel, {args.config} config, on {get_device().caps.name}: GPU us summed per kernel")
    for fmt in args.formats.split(","):
        model, step, _ = build(args.config, fmt)
        if args.prefill:
            ids = np.random.default_rng(2).integers(0, model.cfg.vocab, (1, args.prefill)).astype(np.int32)
            model.prefill_jit(tr.tensor(ids), *model.empty_cache().tensors())[1].numpy()
            program = next(reversed(model.prefill_jit.traces.values())).program
        else:
            step.prepare(1)
            step()
            program = next(reversed(model.step_into_jit.traces.values())).program
        if args.marginal:
            prof = program.profile(repeats=5, marginal=args.marginal)
            how = f"marginal cost in the one pass, each kind x{1 + args.marginal} in turn"
        elif args.in_pass:
            prof, how = program.profile(repeats=5, in_pass=True), "timestamps between the dispatches of one pass"
        else:
            prof = program.profile(repeats=5, repeat_each=args.repeat_each)
            how = f"each x{args.repeat_each} in its own pass"
        if args.prefill:
            report(prof, f"{fmt}: the prefill", how, args.top)
        else:
            step_ms, _ = step_gpu(step)
            step_text = f"{step_ms * 1e3:.1f}" if step_ms is not None else "-"
            report(prof, f"{fmt}: the step in one pass: {step_text} us", how, args.top)
        del model, step, program, prof


if __name__ == "__main__":
    main()
