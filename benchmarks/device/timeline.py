"""Where a call's wall time goes, measured inside the real loop (GPU machine, < 3 min for all three cases).

    python -m benchmarks.device.timeline [--cases minilm,12L,1B] [--calls 40] [--chunks 4,8,16] [--json F]

Runs the e2e loops (benchmarks/e2e): MiniLM's `forward_jit` at 32x128 tokens with its read-back, and
one `@tr.jit` decode token (`JitDecode`: the step and the next id read back) of the 12-layer and the
~1B decoder, under `tr.timeline()` (backend_wgpu.timeline) after a warm-up. Each case runs once per
first-chunk size of --chunks (backend_wgpu.program.SUBMIT_CHUNK set between runs; SUBMIT_GROWTH and
the default chunk come from WGJIT_SUBMIT_GROWTH / WGJIT_SUBMIT_CHUNK as the caller sets them), in one
process. Per setting: a warm-up, --calls calls timed by the wall clock alone (no recorder), --calls
calls under the timeline, --calls under it with host stamps only (`gpu=False`: what the pass
timestamps cost the host shows beside; on lavapipe wgpu-native's submit takes ~55 us more with
them), then the GPU time of the same program in one separate pass (timestamps around one compute pass, as the e2e table's GPU
column). Two tables follow, the second last: the comparison (wall without and with the recorder,
GPU busy inside the loop against the separate pass: a GPU slower inside the loop shows there) and the
timeline's medians per call (see backend_wgpu/timeline.py for the columns). --json writes both.
Decoder positions start after a fresh prefill, so --calls up to ~120 stay in one attention bucket
(one program); more calls show a second row for the next bucket's program.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np


class Case:
    """A user's call (read-back included), a way to start it afresh, and its GPU time in one separate pass."""

    def __init__(self, name: str, call: Callable[[], Any], gpu_pass: Callable[[Any], Any], fresh: Callable[[], None]):
        self.name, self.call, self.gpu_pass, self.fresh = name, call, gpu_pass, fresh


def minilm_case(shape: str) -> Case:
    import tracer as tr
    from benchmarks.e2e.common import gpu_time_of
    from benchmarks.e2e.minilm import _batch
    from examples import minilm

    n, t = (int(v) for v in shape.split("x"))
    model = minilm.MiniLM(minilm.model_dir())
    ids, types, mask = _batch(n, t)

    def call() -> Any:
        return model.forward_jit(tr.tensor(ids), tr.tensor(types), tr.tensor(mask)).numpy()

    return Case(f"minilm {shape}", call, lambda ctx: gpu_time_of(ctx, model.forward(ids, types, mask)), lambda: None)


def decoder_case(name: str) -> Case:
    """`12L`, `1B`, `tiny`: the step then the read; with `-ahead` (`1B-ahead`): the loop a token ahead."""
    from benchmarks.device.decode_formats import build

    config, _, ahead = name.partition("-")
    model, sync, run_ahead = build(config, "f32")
    step = run_ahead if ahead else sync

    def call() -> int:
        step.prepare(1)
        return step()

    def gpu_pass(ctx: Any) -> Any:
        step.prepare(1)
        return step.gpu_time(ctx)

    case = Case(f"decoder {name}", call, gpu_pass, step.reset)
    case.model = model  # kept alive with the case
    return case


def _label(chunk: int, growth: float) -> str:
    return str(chunk) if growth == 1 or chunk <= 0 else f"{chunk}x{growth:g}"


def measure(case: Case, chunk: int, calls: int, warm_s: float, ctx: Any) -> dict[str, Any]:
    """One setting of one case: wall alone, the timeline, the separate pass."""
    import backend_wgpu.program as program
    import tracer as tr

    program.SUBMIT_CHUNK = chunk
    end = time.perf_counter() + warm_s
    case.call()
    while time.perf_counter() < end:  # compiled, clocks up
        case.call()
    case.fresh()  # decoders: a new prefill, so the calls below stay in one attention bucket
    for _ in range(3):
        case.call()
    gc.collect()
    walls = []
    for _ in range(calls):
        t0 = time.perf_counter()
        case.call()
        walls.append((time.perf_counter() - t0) * 1e3)
    case.fresh()
    for _ in range(3):
        case.call()
    gc.collect()
    with tr.timeline() as tl:
        for _ in range(calls):
            case.call()
    case.fresh()
    for _ in range(3):
        case.call()
    gc.collect()
    with tr.timeline(gpu=False) as host_only:  # what the GPU timestamps cost the host shows against this
        for _ in range(calls):
            case.call()
    gpu_ms, dispatches = case.gpu_pass(ctx)
    return {"case": case.name, "setting": _label(chunk, program.SUBMIT_GROWTH), "timeline": tl,
            "host_only": host_only, "wall_alone_ms": statistics.median(walls), "gpu_one_pass_ms": gpu_ms,
            "dispatches": dispatches}  # fmt: skip


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def comparison(rows: list[dict[str, Any]]) -> str:
    """Per setting, the wall without and with the recorder, and the GPU clock's split of a call's period."""
    lines = [
        "median ms per call. wall: host clock, without the recorder, with its host stamps only, and with GPU "
        "timestamps too (the timeline below). GPU clock: period (a call's first "
        "pass start to the next call's) = busy (passes summed) + gaps in call (between its chunks) + idle to the "
        "next call (read-back copy, host's turn); one pass: the same program's GPU time in a separate single pass "
        "(busy / one pass above 1: the GPU runs slower inside the loop)",
        "| case | chunks | dispatches | wall alone | wall host stamps | wall in timeline | GPU period | GPU busy | gaps in call "
        "| idle to next | GPU one pass | busy / one pass |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        reports = r["timeline"].report()
        m = reports[0].medians() if reports else {}
        host = r["host_only"].report()
        host_wall = host[0].median("wall") if host else None
        busy, one = m.get("gpu_busy"), r["gpu_one_pass_ms"]
        ratio = f"{busy / one:.3f}" if busy and one else "-"
        dispatches = str(reports[0].dispatches) if reports else "-"
        if dispatches != str(r["dispatches"]):  # the separate pass runs the lazy form's program
            dispatches += f" (one pass: {r['dispatches']})"
        lines.append(
            f"| {r['case']} | {r['setting']} | {dispatches} | {_f(r['wall_alone_ms'])} | {_f(host_wall)} "
            f"| {_f(m.get('wall'))} "
            f"| {_f(m.get('gpu_period'))} | {_f(busy)} | {_f(m.get('gpu_gaps'))} | {_f(m.get('gpu_idle_after'))} "
            f"| {_f(one)} | {ratio} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cases", default="minilm,12L,1B", help="minilm and decoder configs (12L, 1B, tiny; 1B-ahead: a token ahead)"
    )
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--chunks", default="", help="first-chunk sizes to compare (default: WGJIT_SUBMIT_CHUNK's)")
    parser.add_argument("--minilm-shape", default="32x128")
    parser.add_argument("--warm", type=float, default=1.5, help="seconds of warm-up calls per setting")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--plain", action="store_true", help="plain text tables even when rich is installed")
    args = parser.parse_args(argv)
    import backend_wgpu.program as program
    from backend_wgpu import get_device
    from backend_wgpu.timeline import chunk_lines, print_table
    from benchmarks.timing import ProgramTimer

    dev = get_device()
    default_chunk = program.SUBMIT_CHUNK
    chunks = [int(c) for c in args.chunks.split(",")] if args.chunks else [default_chunk]
    ctx = SimpleNamespace(timer=ProgramTimer(dev))
    print(
        f"timeline on {dev.caps.name} ({dev.caps.backend}), timestamps {'yes' if dev.caps.timestamps else 'no'}; "
        f"SUBMIT_GROWTH {program.SUBMIT_GROWTH:g}, chunks {chunks}, {args.calls} calls per setting",
        flush=True,
    )
    rows: list[dict[str, Any]] = []
    try:
        for name in args.cases.split(","):
            t0 = time.perf_counter()
            case = minilm_case(args.minilm_shape) if name == "minilm" else decoder_case(name)
            print(f"{case.name}: built in {time.perf_counter() - t0:.1f} s", flush=True)
            for chunk in chunks:
                rows.append(measure(case, chunk, args.calls, args.warm, ctx))
                print(f"  chunks {rows[-1]['setting']}: done", flush=True)
            del case
            gc.collect()
    finally:
        program.SUBMIT_CHUNK = default_chunk
    notes = list(dict.fromkeys(n for r in rows for n in r["timeline"].notes))
    print("\nthe call of median wall time of each setting, chunk by chunk (host and GPU clocks apart):")
    for r in rows:
        reports = r["timeline"].report()
        if not reports:
            continue
        calls = sorted(reports[0].calls, key=lambda c: c.wall)
        call = calls[len(calls) // 2]
        print(f"{r['case']} chunks {r['setting']}: wall {call.wall:.3f} ms, GPU busy {_f(call.gpu_busy)} ms")
        print("\n".join(chunk_lines(call)))
    print()
    print(comparison(rows))
    print()
    table = []
    for r in rows:
        reports = r["timeline"].report()
        for i, rep in enumerate(reports):
            label = f"{r['case']} c{r['setting']}" + (" (another program)" if i else "")
            table.append((label, rep))
    print_table(table, notes, use_rich=not args.plain)
    if args.json is not None:
        timelines = ("timeline", "host_only")
        out = [{k: (v.to_dict() if k in timelines else v) for k, v in r.items()} for r in rows]
        args.json.write_text(json.dumps({"device": dev.caps.name, "rows": out}, indent=1))


if __name__ == "__main__":
    np.set_printoptions(precision=4)
    main()
