"""Host (Python) time of one `@tr.jit` replay, split by stage (any adapter; lavapipe ~1 min).

    python -m benchmarks.device.replay_host [--workloads 12L,minilm] [--calls 200] [--top 25]

Workloads: one decode token of the e2e decoder's JitDecode step (`12L` is the e2e 12-layer
decoder; `12L-narrow`, the default here, has its 12 layers and so its dispatches, inputs and
outputs, at width 64, so a CPU adapter spends little time on the kernels), and MiniLM's
forward_jit (`minilm`: the real model, WGJIT_MINILM_DIR or its package, at 32x128 as in the
e2e suite; `minilm-narrow`: its 6 layers at width 32 with random weights, 2x8 tokens).

Each call is timed on the host only (this thread's CPU time; --wall for wall time): the step (bind, program run, outputs), then the GPU is
waited for (not timed), then the read-back (timed: its copy, map and host copy, not the
GPU's work). Stages are exclusive times of the functions below, by wrappers installed for a
second series of calls (so each stage carries a little wrapper overhead, shown per stage as
its calls per replay): the first table's `host ms` is the unwrapped total.
Then cProfile's top functions by own time. On a CPU adapter the GPU's work still competes
for the cores: read these as host Python time per call, not wall time.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import json
import pstats
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

# This thread's CPU time: the host's own cost, without the time other processes (or a CPU adapter's
# threads) take from the cores, and without sleeping in a wait; --wall uses wall time instead.
_clock = time.thread_time
NARROW = (12, 64, 4, 2, 128, 256, 512)  # the 12L decoder's structure at width 64 (layers ... ctx)


def _sync() -> None:
    """Wait until the GPU has run everything submitted (not timed)."""
    from wgpu.backends.wgpu_native import ffi, lib

    from backend_wgpu import get_device

    lib.wgpuDevicePoll(get_device().device._internal, True, ffi.NULL)  # wait: every submission done


def decoder_step(name: str) -> tuple[Callable[[], Any], Callable[[Any], Any]]:
    """(step, read): one JitDecode token without and with its read-back of the next id."""
    import tracer as tr
    from benchmarks.e2e import decoder as D
    from examples import llama as L

    if name == "12L-narrow":
        D.CONFIGS.setdefault(name, NARROW)
    cfg = D.config(name)
    model = L.Llama(cfg, L.check_weights(L.random_weights(cfg, seed=0), cfg, "random"), cfg.max_positions)
    # a prompt past half the cache: the timed calls stay in one bucket of the attended length (no compile)
    step = D.JitDecode(model, [1 + i % 200 for i in range(cfg.max_positions // 2 + 4)])

    def run() -> Any:  # as JitDecode's loop runs it: the caches written in place (Llama.step_into)
        step.prepare(1)
        ids, _ = step.inputs()
        out = step.model.step_into_jit(ids, tr.dynamic(step.pos), *step.cache)
        step.pos += 1
        return out[1]

    def read(token: Any) -> int:
        step.token = int(token.numpy()[0])
        return step.token

    return run, read


def tiny_bert(real: Path, folder: Path) -> Path:
    """The real model's 6-layer structure at width 32 (random float32 weights, its tokenizer and config)."""
    from safetensors import safe_open
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "sentence_bert_config.json"):
        shutil.copy(real / name, folder / name)
    cfg = json.loads((real / "config.json").read_text())
    sizes = {cfg["hidden_size"]: 32, cfg["intermediate_size"]: 64}
    cfg.update(hidden_size=32, intermediate_size=64, num_attention_heads=4)
    (folder / "config.json").write_text(json.dumps(cfg))
    rng = np.random.default_rng(0)
    out = {}
    with safe_open(str(real / "model.safetensors"), framework="numpy") as f:
        for name in f.keys():
            s = f.get_slice(name)
            if s.get_dtype() not in ("F32", "F16", "BF16"):
                out[name] = f.get_tensor(name)  # position ids
                continue
            w = rng.standard_normal([sizes.get(d, d) for d in s.get_shape()], dtype=np.float32)
            out[name] = (1 + 0.1 * w) if name.endswith("LayerNorm.weight") else 0.1 * w
    save_file(out, str(folder / "model.safetensors"))
    return folder


def minilm_step(name: str, tmp: Path) -> tuple[Callable[[], Any], Callable[[Any], Any]]:
    import tracer as tr
    from benchmarks.e2e.minilm import _batch
    from examples import minilm

    path = minilm.model_dir()
    if name == "minilm-narrow":
        path = tiny_bert(path, tmp / "narrow")
    model = minilm.MiniLM(path)
    ids, types, mask = _batch(*((2, 8) if name == "minilm-narrow" else (32, 128)))
    return (lambda: model.forward_jit(tr.tensor(ids), tr.tensor(types), tr.tensor(mask))), (lambda out: out.numpy())


class _SubmitClock:
    """Times queue submissions (wgpu-py's and program._SUBMIT's C call): a CPU adapter runs the kernels there."""

    def __init__(self) -> None:
        from wgpu.backends.wgpu_native import _api

        import backend_wgpu.program as program

        self.targets = [(_api.GPUQueue, "submit", _api.GPUQueue.submit)]
        if getattr(program, "_SUBMIT", None) is not None:  # submissions straight through C
            self.targets.append((program, "_SUBMIT", program._SUBMIT))
        self.seconds = 0.0

    def __enter__(self) -> _SubmitClock:
        for owner, name, original in self.targets:

            def timed(*a: Any, _f: Any = original) -> Any:
                t0 = _clock()
                try:
                    return _f(*a)
                finally:
                    self.seconds += _clock() - t0

            setattr(owner, name, timed)
        return self

    def __exit__(self, *exc: object) -> None:
        for owner, name, original in self.targets:
            setattr(owner, name, original)


def host_times(run: Callable[[], Any], read: Callable[[Any], Any], calls: int) -> tuple[list[float], float]:
    """Host ms per call (the step plus the read-back after the GPU finished), and queue.submit's.

    In wall time a CPU adapter runs the kernels inside queue.submit: it is left out of the call's time then.
    """
    out = []
    with _SubmitClock() as clock:
        for _ in range(calls):
            before = clock.seconds
            t0 = _clock()
            y = run()
            t1 = _clock()
            _sync()
            t2 = _clock()
            read(y)
            submitted = clock.seconds - before if _clock is time.perf_counter else 0.0  # kernels ran there
            out.append((t1 - t0 + _clock() - t2 - submitted) * 1e3)
            del y
    return out, clock.seconds * 1e3 / calls


QUEUE_SUBMIT = "queue.submit itself (wgpu-native, the driver)"
# (stage, owner module, owner attribute path, function name): exclusive time of each
STAGES = [
    ("jit call (fast key, lock)", "tracer.jit", "JitFunction", "__call__"),
    ("jit call (fast key, lock)", "tracer.jit", "JitFunction", "_replay"),
    ("bind", "tracer.jit", "Trace", "bind"),
    ("bind", "tracer.jit", "Trace", "_bind_fast"),
    ("bind", "tracer.arg_staging", "ArgumentStaging", "write"),
    ("outputs (Lazy, Tensor, rebinds)", "tracer.jit", "Trace", "replay"),
    ("outputs (Lazy, Tensor, rebinds)", "tracer.jit", "Trace", "_run"),
    ("program.run (ints, uniform)", "backend_wgpu.program", "Program", "run"),
    ("program.run (ints, uniform)", "backend_wgpu.program", "Program", "_run"),
    ("submit loop (encoders, passes)", "backend_wgpu.program", "Program", "_run_locked"),
    ("output buffers (pool)", "backend_wgpu.program", "Program", "_output_buffer"),
    ("output buffers (pool)", "backend_wgpu.program", "Program", "_output_buffers"),
    ("plan lookup", "backend_wgpu.program", "Program", "_plan"),
    ("encode (C calls)", "backend_wgpu.program", None, "_encode"),
    ("submit loop (encoders, passes)", "backend_wgpu.program", None, "_submit"),
    ("read-back", "backend_wgpu.device", "Device", "read_into"),
    (QUEUE_SUBMIT, "wgpu.backends.wgpu_native._api", "GPUQueue", "submit"),
    (QUEUE_SUBMIT, "backend_wgpu.program", None, "_SUBMIT"),
]


def staged(run: Callable[[], Any], read: Callable[[Any], Any], calls: int) -> tuple[dict[str, float], dict[str, float]]:
    """Exclusive host ms per call by stage, and calls per replay of each stage's functions."""
    import importlib

    spent: dict[str, float] = {}
    count: dict[str, int] = {}
    stack: list[float] = []  # per active wrapper: time its wrapped children took
    undo = []
    for stage, module, owner, name in STAGES:
        mod = importlib.import_module(module)
        target = getattr(mod, owner) if owner else mod
        original = target.__dict__.get(name) if owner else getattr(mod, name, None)
        if original is None:
            continue

        def timed(*a: Any, _f: Any = original, _s: str = stage, **kw: Any) -> Any:
            stack.append(0.0)
            t0 = _clock()
            try:
                return _f(*a, **kw)
            finally:
                took = _clock() - t0
                children = stack.pop()
                spent[_s] = spent.get(_s, 0.0) + took - children
                count[_s] = count.get(_s, 0) + 1
                if stack:
                    stack[-1] += took

        setattr(target, name, functools.wraps(original)(timed))
        undo.append((target, name, original))
    try:
        total, submit = host_times(run, read, calls)
    finally:
        for target, name, original in undo:
            setattr(target, name, original)
    per = {k: v * 1e3 / calls for k, v in spent.items()}
    wall = _clock is time.perf_counter
    per["other (benchmark loop, tr.tensor, ...)"] = sum(total) / calls + (submit if wall else 0) - sum(per.values())
    return per, {k: v / calls for k, v in count.items()}


def profile(run: Callable[[], Any], read: Callable[[Any], Any], calls: int, top: int) -> str:
    prof = cProfile.Profile(_clock)
    for _ in range(calls):
        prof.enable()
        y = run()
        prof.disable()
        _sync()
        prof.enable()
        read(y)
        prof.disable()
        del y
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="12L-narrow,minilm-narrow")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10, help="untimed calls first (traced, compiled)")
    parser.add_argument("--top", type=int, default=25, help="cProfile's top functions (0: no profile)")
    parser.add_argument("--wall", action="store_true", help="wall time instead of this thread's CPU time")
    parser.add_argument("--out", type=Path, default=None, help="also write the output here")
    args = parser.parse_args()
    global _clock
    if args.wall:
        _clock = time.perf_counter
    from backend_wgpu import get_device

    dev = get_device()
    clock = "wall time" if args.wall else "this thread's CPU time"
    lines = [f"replay_host on {dev.caps.name} ({dev.caps.backend}): host {clock} per call, GPU waits untimed"]
    table = []
    tmp = tempfile.TemporaryDirectory()
    for name in args.workloads.split(","):
        run, read = minilm_step(name, Path(tmp.name)) if name.startswith("minilm") else decoder_step(name)
        host_times(run, read, args.warmup)  # traced, compiled, plans built
        dispatches = dev.stats["dispatches"]
        times, submit = host_times(run, read, args.calls)
        ms = statistics.median(times)
        per_call = (dev.stats["dispatches"] - dispatches) / args.calls
        stages, counts = staged(run, read, args.calls)
        table.append((name, ms, per_call, stages, counts))
        if args.top > 0:
            lines.append(f"\n== {name}: cProfile of {args.calls} calls (GPU waits excluded), top by own time")
            lines.append(profile(run, read, args.calls, args.top))
        del run, read
    tmp.cleanup()
    for name, ms, per_call, stages, counts in table:
        lines.append(
            f"\n{name}: host ms per call {ms:.3f} (median, unwrapped{', less queue.submit' if args.wall else ''}), "
            f"{per_call:.0f} dispatches per call,"
        )
        lines.append(f"  {ms * 1e3 / max(per_call, 1):.1f} us per dispatch; by stage (wrapped, exclusive):")
        lines.append("| stage | ms/call | calls/call |")
        lines.append("|---|---|---|")
        for stage, v in sorted(stages.items(), key=lambda kv: (kv[0] == QUEUE_SUBMIT, -kv[1])):
            lines.append(f"| {stage} | {v:.3f} | {counts.get(stage, 0):.0f} |")
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    np.set_printoptions(precision=4)
    main()
