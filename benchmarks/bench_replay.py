"""Host overhead of a JIT replay per dispatch, against the floor of a hand-written wgpu-py loop.

For a chain of N kernels that do not fuse, three ways to issue the same N dispatches are
timed side by side in one process, host time only (from the call to the return after
`queue.submit`; the GPU is drained outside the timed region after every call):

  replay  - a `@tr.jit` function called on the same input: signature check, input and
            output buffers, bind groups from the cache, one pass, one submit, output tensors
  floor   - a hand-written loop over the same pipelines and bind groups, prepared once:
            encoder, pass, set_pipeline (when it changes), set_bind_group, dispatch, submit
  eager   - the same ops traced and realized on every call (graph building, structural
            hash, program-cache lookup, then the same run), for context

Target (issue 6): replay per dispatch <= 1.3x the floor per dispatch, measured in the
same run. Two chains: softmax after softmax (one pipeline for all) and matmul/softmax
alternating (a pipeline change at every dispatch).

    python -m benchmarks.bench_replay [--repeat N] [--dispatches N ...]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import tracer as tr
from backend_wgpu import get_device


def _softmax_chain(n: int) -> Callable[[tr.Tensor], tr.Tensor]:
    def f(x: tr.Tensor) -> tr.Tensor:
        for _ in range(n):
            x = x.softmax(-1)
        return x

    return f


def _mixed_chain(n: int, width: int) -> Callable[[tr.Tensor], tr.Tensor]:
    w = tr.tensor(np.random.default_rng(1).standard_normal((width, width), dtype=np.float32) / np.sqrt(width))

    def f(x: tr.Tensor) -> tr.Tensor:
        for i in range(n):
            x = x @ w if i % 2 == 0 else x.softmax(-1)
        return x

    return f


def _floor(program: Any) -> Callable[[], None]:
    """The floor loop for `program`: its pipelines and (already built) bind groups, nothing else."""
    dev = program.device
    plan = next(reversed(program._plans.values()))  # the bind groups of the last run
    launches = [
        (launch.pipeline, group, launch.count) for launch, group in zip(program._launches, plan.groups, strict=True)
    ]

    def run() -> None:
        encoder = dev.device.create_command_encoder()
        cpass = encoder.begin_compute_pass()
        last = None
        for pipeline, group, (x, y, z) in launches:
            if pipeline is not last:
                cpass.set_pipeline(pipeline)
                last = pipeline
            cpass.set_bind_group(0, group)
            cpass.dispatch_workgroups(x, y, z)
        cpass.end()
        dev.queue.submit([encoder.finish()])

    return run


def _host_times(calls: dict[str, Callable[[], Any]], sync: Callable[[], None], repeat: int) -> dict[str, list[float]]:
    """Seconds per call of each function, interleaved round by round, the GPU drained between calls."""
    times: dict[str, list[float]] = {k: [] for k in calls}
    for _ in range(repeat):
        for name, fn in calls.items():
            t0 = time.perf_counter()
            out = fn()
            times[name].append(time.perf_counter() - t0)
            del out
            sync()
    return times


def measure(case: str, fn: Callable[[tr.Tensor], tr.Tensor], rows: int, width: int, repeat: int) -> dict[str, Any]:
    device = get_device()
    x = tr.tensor(np.random.default_rng(0).standard_normal((rows, width), dtype=np.float32))
    jitted = tr.jit(fn)
    want = fn(x).numpy()
    got = jitted(x).numpy()  # trace + compile + run
    for _ in range(3):  # warm: bind groups for x's buffer and the output buffer exist now
        jitted(x).numpy()
    program = next(iter(jitted.traces.values())).program
    n = len(program.dispatches)
    floor = _floor(program)
    sync_buf = device.alloc(4)

    def sync() -> None:
        device.read(sync_buf)  # a small read waits for the work submitted before it

    def eager() -> tr.Tensor:
        y = fn(x)
        y.realize()
        return y

    before = dict(device.stats)
    times = _host_times({"replay": lambda: jitted(x), "floor": floor, "eager": eager}, sync, repeat)
    created = device.stats["bind_groups_created"] - before.get("bind_groups_created", 0)
    med = {k: statistics.median(v) for k, v in times.items()}
    per = {k: v / n * 1e6 for k, v in med.items()}
    return {
        "suite": "replay",
        "case": case,
        "device": device.caps.name,
        "dispatches": n,
        "traces": jitted.trace_count,
        "replays": jitted.replay_count,
        "runs": repeat,
        "host_ms": {k: v * 1e3 for k, v in med.items()},
        "us_per_dispatch": per,
        "overhead_vs_floor": per["replay"] / per["floor"],
        "eager_vs_floor": per["eager"] / per["floor"],
        "bind_groups_created_while_timed": created,  # eager builds new outputs, hence some
        "verified": bool(np.allclose(got, want, rtol=1e-4, atol=1e-6)),
        "notes": ["host time from call to return after queue.submit; GPU drained outside the timed region"],
    }


def run(repeat: int = 50, dispatches: tuple[int, ...] = (16, 128)) -> list[dict]:
    """One record per chain and length: host microseconds per dispatch for replay, floor, eager."""
    records = []
    for n in dispatches:
        records.append(measure(f"softmax_chain_{n}", _softmax_chain(n), 8, 64, repeat))
        records.append(measure(f"matmul_softmax_{n}", _mixed_chain(n, 64), 8, 64, repeat))
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--dispatches", type=int, nargs="+", default=[16, 128])
    args = parser.parse_args(argv)
    print(f"device: {get_device().caps.name}")
    for r in run(args.repeat, tuple(args.dispatches)):
        p = r["us_per_dispatch"]
        print(
            f"{r['case']:<20} {r['dispatches']:>4} dispatches  us/dispatch: replay {p['replay']:7.2f}  "
            f"floor {p['floor']:7.2f}  eager {p['eager']:8.2f}  replay/floor {r['overhead_vs_floor']:.2f}x  "
            f"traces {r['traces']}  verified {r['verified']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
