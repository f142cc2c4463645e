"""The benchmark harness behind `wgjit bench`: run the suites, check each case once, time it.

Each op case is compiled once, checked against numpy once (a wrong kernel is reported,
never timed as if it were right), then timed after a warm-up: ours with GPU timestamps
around the compute pass (wall time too), torch on CUDA with events (eager; torch.compile
where the case asks; TF32 off), numpy with wall time. All in one process, side by side.
The `compile`, `dispatch` and `model` suites measure what their names say; `e2e`
(benchmarks/e2e/) times whole models as users run them, wall time per call.
"""

from __future__ import annotations

import math
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from benchmarks import cases as C
from benchmarks.timing import ProgramTimer, Timing, time_host, time_program, time_torch

SUITES = ["elementwise", "reduce", "softmax", "norm", "matmul", "attention", "model", "compile", "dispatch", "e2e"]
DEFAULT_SUITES = [s for s in SUITES if s != "e2e"]  # e2e takes minutes on the H200: ask for it by name


@dataclass
class Settings:
    sizes: str = "small"  # small | full
    repeat: int = 20
    warmup: int = 3
    use_torch: bool = True
    log: Callable[[str], None] = print


@dataclass
class Context:
    settings: Settings
    device: Any
    timer: ProgramTimer
    torch: Any = None  # the torch module when CUDA is usable
    notes: list[str] = field(default_factory=list)


# --- sizes ------------------------------------------------------------------------------------
def suite_sizes(suite: str, sizes: str) -> dict[str, Any]:
    full = sizes == "full"
    return {
        "elementwise": {"n": [1 << 20, 1 << 22, 1 << 24, 1 << 26] if full else [1 << 14, 100_003]},
        "reduce": {"shapes": [(8192, 1024), (8192, 4096), (1024, 32768)] if full else [(64, 1000), (33, 4096)]},
        "softmax": {"shapes": [(8192, 1024), (8192, 4096), (1024, 32768)] if full else [(64, 1000), (33, 4096)]},
        "norm": {"shapes": [(8192, 1024), (8192, 4096)] if full else [(64, 1000), (33, 512)]},
        "matmul": {
            "squares": [256, 512, 1024, 2048, 4096] if full else [64, 130],
            "gemvs": [(4096, 4096), (4096, 11008)] if full else [(256, 300), (130, 64)],
            "attn": [(32, 12, 128, 64)] if full else [(2, 3, 16, 8)],
        },
        "attention": {  # (batch, heads, length, head dim, mask): issue 14's targets
            "specs": [(32, 12, 128, 64, "pad"), (1, 32, 2048, 128, "causal")]
            if full
            else [(2, 3, 40, 64, "pad"), (1, 2, 70, 32, "causal")]
        },
        "compile": {"ops": [10, 100] if full else [10]},
        "dispatch": {"n": [10, 100, 1000] if full else [16]},
        "model": {"batch": 32 if full else 2, "seq": 128 if full else 16},
        "e2e": {"full": full},  # benchmarks/e2e/__init__.py plans the rest
    }[suite]


# --- the context --------------------------------------------------------------------------------
def make_context(settings: Settings) -> Context:
    from backend_wgpu import get_device

    device = get_device()
    ctx = Context(settings, device, ProgramTimer(device))
    if settings.use_torch:
        ctx.torch = _cuda_torch(ctx.notes)
    return ctx


def _cuda_torch(notes: list[str]) -> Any:
    try:
        import torch
    except ImportError:
        notes.append("torch is not importable: no torch comparator")
        return None
    if not torch.cuda.is_available():
        notes.append("torch has no CUDA device here: no torch comparator")
        return None
    # f32 means f32: no TF32 in cuBLAS or cuDNN
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    return torch


def device_info(ctx: Context) -> dict[str, Any]:
    caps = ctx.device.caps
    info: dict[str, Any] = {
        "adapter": caps.name,
        "backend": caps.backend,
        "timestamps": caps.timestamps,
        "subgroups": caps.subgroups,
        "subgroup_size": caps.subgroup_size,
        "shader_f16": caps.shader_f16,
        "max_storage_binding": caps.max_storage_binding,
        "host": platform.node(),
        "python": platform.python_version(),
    }
    if ctx.torch is not None:
        info["torch"] = ctx.torch.__version__
        info["torch_device"] = ctx.torch.cuda.get_device_name(0)
    return info


# --- one op case ---------------------------------------------------------------------------------
def _prepare(case: C.Case) -> tuple[Any, list[Any], Any]:
    """Compile the case's graph once; returns (program, its input buffers, the graph's tensors)."""
    import tracer as tr
    from tracer.graph_builder import build_graph
    from tracer.realize import program_for
    from tracer.tensor import Tensor

    tensors = [tr.tensor(x) for x in case.inputs]
    y = case.ours(tensors)
    built = build_graph([y._lazy])
    program = program_for(built.graph)
    device = _device()
    buffers = []
    for lz in built.inputs:
        Tensor(lz)  # a handle, so no input is ever donated to an in-place kernel while we replay
        if lz.buffer is None:
            lz.buffer = device.upload(lz.host)
            lz.host = None
        buffers.append(lz.buffer)
    return program, buffers, (tensors, built, y)


def _device() -> Any:
    from backend_wgpu import get_device

    return get_device()


def _read(buf: Any, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    raw = _device().read(buf)
    return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()


def check(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> tuple[bool, float]:
    """allclose, and the largest error relative to the reference's scale (NaN never passes)."""
    g, w = got.astype(np.float64), want.astype(np.float64)
    if g.shape != w.shape:
        return False, math.inf
    err = float(np.max(np.abs(g - w))) / max(1.0, float(np.max(np.abs(w)))) if g.size else 0.0
    ok = bool(np.allclose(g, w, rtol=rtol, atol=atol)) and not np.isnan(err)
    return ok, err


def run_case(ctx: Context, case: C.Case) -> dict[str, Any]:
    s = ctx.settings
    program, buffers, keep = _prepare(case)
    y = keep[2]
    # check once: a fresh run, read back, compared with numpy
    outs = program.run(buffers)
    got = _read(outs[0], y.shape, y.dtype.np)
    want = case.ref(case.inputs)
    ok, err = check(got, want, case.rtol, case.atol)
    del outs
    ours = time_program(program, buffers, ctx.timer, s.warmup, s.repeat)
    rec = _record(ctx, case, ours, program)
    rec.update(verified=ok, max_rel_err=err)
    if not ok:
        ctx.settings.log(f"  MISMATCH {case.suite}/{case.name} {case.shape}: max error {err:.3e}")
    npf = case.numpy_fn or case.ref
    rec["comparators"]["numpy"] = _summary(time_host(lambda: npf(case.inputs), 1, min(s.repeat, 10)))
    if ctx.torch is not None and case.torch is not None:
        _torch_comparators(ctx, case, rec)
    _ratios(rec)
    return rec


def _torch_comparators(ctx: Context, case: C.Case, rec: dict[str, Any]) -> None:
    torch, s = ctx.torch, ctx.settings
    targs = [torch.from_numpy(np.ascontiguousarray(x)).cuda() for x in case.inputs]
    fn = case.torch
    got = fn(targs).float().cpu().numpy()
    ok, _ = check(got, case.ref(case.inputs), max(case.rtol, 1e-3), max(case.atol, 1e-3))
    rec["comparators"]["torch"] = _summary(time_torch(lambda: fn(targs), s.warmup, s.repeat)) | {"verified": ok}
    if case.torch_compile:
        try:
            compiled = torch.compile(fn)
            compiled(targs)
            rec["comparators"]["torch_compile"] = _summary(time_torch(lambda: compiled(targs), s.warmup, s.repeat))
        except Exception as e:  # noqa: BLE001  inductor needs a C compiler and triton; say why it is missing
            rec["notes"].append(f"torch.compile failed: {type(e).__name__}: {str(e)[:120]}")


def _summary(t: Timing) -> dict[str, Any]:
    return {
        "ms": t.median,
        "timer": t.timer,
        "wall_ms": t.wall_median,
        "gpu_ms": (sorted(t.gpu_ms)[len(t.gpu_ms) // 2] if t.gpu_ms else None),
        "spread_pct": t.spread,
        "runs": len(t.samples),
    }


def _record(ctx: Context, case: C.Case, ours: Timing, program: Any) -> dict[str, Any]:
    kernels = [f"{d.kernel}[{d.variant}] x{d.element}" for d in program.dispatches]
    return {
        "suite": case.suite,
        "case": case.name,
        "shape": case.shape,
        "dtype": case.dtype,
        "size": case.size,
        "device": ctx.device.caps.name,
        "bytes": case.bytes,
        "flops": case.flops,
        "ours": _summary(ours),
        "ours_ms": ours.median,
        "comparators": {},
        "ratios": {},
        "dispatches": len(program.dispatches),
        "kernels": kernels,
        "notes": [case.note] if case.note else [],
    }


def _ratios(rec: dict[str, Any]) -> None:
    """ratio vs X = X's median / ours (above 1: we are faster), on the same kind of timer when both have it."""
    ours = rec["ours"]
    ms = rec["ours_ms"]
    rec["gbps"] = rec["bytes"] / (ms * 1e6) if rec["bytes"] and ms else None
    rec["gflops"] = rec["flops"] / (ms * 1e6) if rec["flops"] and ms else None
    for name, c in rec["comparators"].items():
        if ours["timer"] == "gpu" and c.get("gpu_ms"):
            rec["ratios"][name] = c["gpu_ms"] / ms
        else:
            rec["ratios"][name] = c["wall_ms"] / ours["wall_ms"]
        c["gbps"] = rec["bytes"] / (c["ms"] * 1e6) if rec["bytes"] else None
        c["gflops"] = rec["flops"] / (c["ms"] * 1e6) if rec["flops"] else None


# --- the suites -----------------------------------------------------------------------------------
def op_cases(ctx: Context, suite: str) -> list[C.Case]:
    sz = suite_sizes(suite, ctx.settings.sizes)
    if suite == "elementwise":
        return C.elementwise_cases(sz["n"])
    if suite == "reduce":
        return C.reduce_cases(sz["shapes"])
    if suite == "softmax":
        return C.softmax_cases(sz["shapes"])
    if suite == "norm":
        import tracer as tr

        found, notes = C.norm_cases(sz["shapes"], getattr(tr, "nn", None))
        ctx.notes.extend(notes)
        return found
    if suite == "matmul":
        return C.matmul_cases(sz["squares"], sz["gemvs"], sz["attn"], ctx.device.caps.shader_f16)
    if suite == "attention":
        import tracer as tr

        return C.attention_cases(sz["specs"], tr.nn, ctx.device.caps.shader_f16)
    raise ValueError(f"unknown op suite {suite!r}")


def run_suite(ctx: Context, suite: str) -> list[dict[str, Any]]:
    if suite == "compile":
        from benchmarks.special import compile_suite

        return compile_suite(ctx, suite_sizes(suite, ctx.settings.sizes))
    if suite == "dispatch":
        from benchmarks.special import dispatch_suite

        return dispatch_suite(ctx, suite_sizes(suite, ctx.settings.sizes))
    if suite == "model":
        from benchmarks.special import model_suite

        return model_suite(ctx, suite_sizes(suite, ctx.settings.sizes))
    if suite == "e2e":
        from benchmarks.e2e import e2e_suite

        return e2e_suite(ctx, suite_sizes(suite, ctx.settings.sizes))
    records = []
    for case in op_cases(ctx, suite):
        t0 = time.perf_counter()
        try:
            rec = run_case(ctx, case)
        except Exception as e:  # noqa: BLE001  one broken case must not hide the others' figures
            ctx.settings.log(f"  ERROR {suite}/{case.name} {case.shape}: {type(e).__name__}: {str(e)[:300]}")
            rec = {
                "suite": suite,
                "case": case.name,
                "shape": case.shape,
                "dtype": case.dtype,
                "error": f"{type(e).__name__}: {e}",
            }
        rec["bench_seconds"] = time.perf_counter() - t0
        ctx.settings.log(_progress_line(rec))
        records.append(rec)
        _release_programs()
    return records


def _release_programs() -> None:
    """Large cases hold GPU memory in cached programs; the next case starts clean."""
    from tracer.realize import clear_program_cache

    clear_program_cache()


def _progress_line(rec: dict[str, Any]) -> str:
    if "error" in rec:
        return f"  {rec['suite']}/{rec['case']} {rec['shape']}: error"
    ratio = rec["ratios"].get("torch")
    tail = f", torch ratio {ratio:.2f}" if ratio else ""
    return f"  {rec['suite']}/{rec['case']} {rec['shape']} {rec['dtype']}: {rec['ours_ms']:.4f} ms{tail}"


def run(suites: list[str], settings: Settings) -> dict[str, Any]:
    ctx = make_context(settings)
    info = device_info(ctx)
    settings.log(
        f"device: {info['adapter']} ({info['backend']}), timestamps={info['timestamps']}, torch={info.get('torch_device')}"
    )
    records: list[dict[str, Any]] = []
    for suite in suites:
        settings.log(f"suite {suite}")
        try:
            records.extend(run_suite(ctx, suite))
        except (Exception, SystemExit) as e:  # noqa: BLE001  one broken suite must not lose the others' records
            ctx.notes.append(f"suite {suite} failed: {type(e).__name__}: {str(e)[:300]}")
            settings.log(f"  suite {suite} failed: {type(e).__name__}: {e}")
    return {"device": info, "settings": {"sizes": settings.sizes, "repeat": settings.repeat, "warmup": settings.warmup},
            "notes": ctx.notes, "records": records}  # fmt: skip
