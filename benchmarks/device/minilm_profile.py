"""Where MiniLM's forward GPU time goes, per kernel (GPU machine, < 1 min).

    python -m benchmarks.device.minilm_profile [--batch 32] [--length 128] [--repeat-each 8 | --marginal K]

Compiles examples/minilm.py's forward at one (batch, length) (the e2e suite's padded batch),
then times every dispatch of its program (backend_wgpu.profile, each dispatch `--repeat-each`
times in its own pass: close to its cost inside the program) and the whole pass once. Prints
the GPU us, MB, GB/s and GFLOP/s per kernel and the costliest distinct dispatches. `--marginal K`
times each kind of dispatch inside the one pass instead (Program.profile(marginal=K): the pass whole,
then with each kind run 1+K times, the difference per copy). A
diagnostic of GPU time, not of end-to-end speed (that is `wgjit bench --suite e2e`).
"""

from __future__ import annotations

import argparse
from types import SimpleNamespace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--repeat-each", type=int, default=8)
    mode.add_argument("--marginal", type=int, default=0, help="K > 0: each kind's marginal cost in the one pass")
    parser.add_argument("--top", type=int, default=16)
    args = parser.parse_args()
    from backend_wgpu import get_device
    from benchmarks.device.decode_profile import report
    from benchmarks.e2e.common import gpu_time_of
    from benchmarks.e2e.minilm import _batch
    from benchmarks.timing import ProgramTimer
    from examples import minilm
    from tracer.graph_builder import build_graph
    from tracer.realize import program_for

    model = minilm.MiniLM(minilm.model_dir())
    ids, types, mask = _batch(args.batch, args.length)
    y = model.forward(ids, types, mask)
    program = program_for(build_graph([y._lazy]).graph)
    ms, _ = gpu_time_of(SimpleNamespace(timer=ProgramTimer(get_device())), y)
    if args.marginal:
        prof = program.profile(repeats=5, marginal=args.marginal)
        how = f"marginal cost in the one pass, each kind x{1 + args.marginal} in turn"
    else:
        prof = program.profile(repeats=5, repeat_each=args.repeat_each)
        how = f"each x{args.repeat_each} in its own pass"
    print(f"MiniLM forward {args.batch}x{args.length} per kernel on {get_device().caps.name}")
    report(prof, f"the pass in one go: {ms * 1e3:.1f} us" if ms else "no timestamps", how, args.top)


if __name__ == "__main__":
    main()
