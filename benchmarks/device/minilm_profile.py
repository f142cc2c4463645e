"""Where MiniLM's forward GPU time goes, per kernel (GPU machine, < 1 min).

    python -m benchmarks.device.minilm_profile [--batch 32] [--length 128] [--repeat-each 8]

Compiles examples/minilm.py's forward at one (batch, length) (the e2e suite's padded batch),
then times every dispatch of its program (backend_wgpu.profile, each dispatch `--repeat-each`
times in its own pass: close to its cost inside the program) and the whole pass once. Prints
the GPU us, MB, GB/s and GFLOP/s per kernel and the costliest distinct dispatches. A
diagnostic of GPU time, not of end-to-end speed (that is `wgjit bench --suite e2e`).
"""

from __future__ import annotations

import argparse
from types import SimpleNamespace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--repeat-each", type=int, default=8)
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
    prof = program.profile(repeats=5, repeat_each=args.repeat_each)
    print(f"MiniLM forward {args.batch}x{args.length} per kernel on {get_device().caps.name}")
    report(prof, f"the pass in one go: {ms * 1e3:.1f} us" if ms else "no timestamps", args.repeat_each, args.top)


if __name__ == "__main__":
    main()
