"""What the e2e workloads share: GPU time of one pass (wgjit timestamps, torch CUDA events) and the record."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from benchmarks.e2e.blocks import Contender, Outcome, spread_pct

GpuTime = tuple[float | None, int]  # (GPU ms of one pass, dispatches)


def gpu_time_of(ctx: Any, tensors: Any, *keep: Any) -> GpuTime:
    """GPU time of the one program that computes `tensors` (pending), from timestamps around its pass.

    `keep` holds whatever must stay visible while the graph is built (a cache the step writes).
    """
    from benchmarks.timing import time_program
    from tracer.graph_builder import build_graph
    from tracer.realize import device_buffer, program_for

    tensors = tensors if isinstance(tensors, tuple | list) else (tensors,)
    built = build_graph([t._lazy for t in tensors if not t._lazy.is_leaf])
    program = program_for(built.graph)
    buffers = [device_buffer(lz) for lz in built.inputs]
    t = time_program(program, buffers, ctx.timer, 3, 10)
    del keep
    return (statistics.median(t.gpu_ms) if t.gpu_ms else None, len(program.dispatches))


def torch_device(torch: Any) -> str:
    """Where the torch comparator runs: CUDA (the H200 run); the CPU only in tests of this code."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def torch_gpu_ms(torch: Any, fn: Callable[[], Any]) -> float | None:
    """CUDA events around `fn` (no read-back inside), median of 10 after 3 warm-ups; None without CUDA."""
    from benchmarks.timing import time_torch

    if not torch.cuda.is_available():
        return None
    return statistics.median(time_torch(fn, 3, 10).gpu_ms)


def summary(c: Contender, gpu: GpuTime | float | None) -> dict[str, Any]:
    """One contender's figures: wall median (the headline), GPU time of one pass, host cost per dispatch."""
    ms = statistics.median(c.samples)
    gpu_ms, dispatches = gpu if isinstance(gpu, tuple) else (gpu, None)
    out: dict[str, Any] = {
        "ms": ms,
        "timer": "wall",
        "wall_ms": ms,
        "gpu_ms": gpu_ms,
        "spread_pct": spread_pct(c.samples),
        "runs": len(c.samples),
        "block": c.block,
        "block_medians": c.block_medians,
        "compiles": c.compiles,
        "dispatches": dispatches,
    }
    if gpu_ms is not None and dispatches:
        out["host_us_per_dispatch"] = (ms - gpu_ms) * 1e3 / dispatches
    return out


def record(
    ctx: Any,
    case: str,
    shape: str,
    variants: dict[str, dict[str, Any]],
    comparators: dict[str, dict[str, Any]],
    outcome: Outcome,
    check: dict[str, Any],
    notes: list[str],
) -> dict[str, Any]:
    """An e2e record in the harness's format; `ours` is the jit variant, every variant keeps its own ratios."""
    ours = variants["jit"]
    ratios = {v: {k: c["wall_ms"] / s["wall_ms"] for k, c in comparators.items()} for v, s in variants.items()}
    gpu_ratios = {
        v: {k: c["gpu_ms"] / s["gpu_ms"] for k, c in comparators.items() if c.get("gpu_ms") and s.get("gpu_ms")}
        for v, s in variants.items()
    }
    return {
        "suite": "e2e", "case": case, "shape": shape, "dtype": "float32", "size": None,
        "device": ctx.device.caps.name, "bytes": 0, "flops": 0, "gbps": None, "gflops": None,
        "ours": ours, "ours_ms": ours["ms"], "variants": variants, "comparators": comparators,
        "ratios": ratios["jit"], "variant_ratios": ratios, "gpu_ratios": gpu_ratios,
        "dispatches": ours.get("dispatches"), "kernels": [],
        "verified": bool(check["verified"]), "max_rel_err": float(check["max_rel_err"]),
        "check": {k: v for k, v in check.items() if k not in ("verified", "max_rel_err", "summary")},
        "warmup": {"rounds": outcome.warm_rounds, "settled": outcome.settled, "timed_rounds": outcome.timed_rounds,
                   "seconds": outcome.seconds},
        "notes": ["wall time per call, read-back included, contenders interleaved in blocks; GPU ms: one pass "
                  "(wgjit: timestamps around its compute pass; torch: CUDA events)", *notes],
    }  # fmt: skip
