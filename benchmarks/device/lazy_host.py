"""Host time of the natural lazy (un-jitted) loops, split by stage, per call and per Lazy (any adapter, ~1 min).

    python -m benchmarks.device.lazy_host [--sizes tiny|e2e] [--repeat N] [--top N] [--only decoder,minilm] [--freeze]

Workloads, the same Python as the e2e suite's lazy contenders:

  decoder  benchmarks/e2e/decoder.py's LazyDecode: one token of examples/llama.py's step_lazy at
           the next position, read-back of the next id included; 12 layers (tiny widths with
           --sizes tiny, the e2e 12L config with --sizes e2e)
  minilm   examples/minilm.py's MiniLM.forward on host token arrays, the hidden state read back;
           6 layers, random weights (tiny widths and 4x16 tokens, or 384 wide and 32x128 with e2e)

Every call reuses a cached program (none compiles after the warm-up), so what is left is host
work. `cpu ms` is the median of this thread's CPU time per call, `best` its minimum (the least
disturbed by other processes on a shared machine). Stages are the exclusive CPU time (this thread's clock: lavapipe's threads not counted)
of the functions that do them:

  trace       the user code building Tensors and Lazies (tracer/tensor.py, nn, lazy.py)
  walk        graph_builder.postorder: the pending Lazies in topological order
  key         the rest of graph_builder.walk: outputs, inputs, the structure tuples
  lookup      realize._program: the cache lookup (hashing the structure)
  bind        uploads of host data, runtime ints, output buffers, the bind-group plan
  submit      encoding and submitting the dispatches (`submits`: how many command buffers)
  read-back   Device.read_into, Device.read_array (wait for the GPU: wall time minus CPU shows it)
  realize     the rest of realize_lazies/read_lazy (marking outputs realized)

The garbage collector's time per call is shown apart (it runs inside whichever stage allocates
when a generation fills; its full walks cost in proportion to every object the process holds);
--freeze calls gc.freeze() after the warm-up, as a user may after loading a model. Then
cProfile's top functions of the same calls. Last: the summary table (ms per call, us per
Lazy by stage) and the device's counters per call: GPU buffers allocated, bind groups created,
uploads (and how many found a free buffer: backend_wgpu.device.UploadPool), submissions.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.device.host_split import profile
from benchmarks.host_path import CLOCK, StageClock

STAGES: list[tuple[str, str, str]] = [
    ("walk", "tracer.graph_builder", "postorder"),
    ("key", "tracer.graph_builder", "walk"),
    ("lookup", "tracer.realize", "_program"),
    ("bind", "tracer.realize", "device_buffer"),
    ("bind", "backend_wgpu.program", "Program.run"),
    ("bind", "backend_wgpu.program", "Program._run"),
    ("submit", "backend_wgpu.program", "Program._run_locked"),
    ("bind", "backend_wgpu.program", "Program._output_buffers"),
    ("bind", "backend_wgpu.program", "Program._plan"),
    ("read-back", "backend_wgpu.device", "Device.read_into"),
    ("read-back", "backend_wgpu.device", "Device.read_array"),
    ("realize", "tracer.realize", "realize_lazies"),
    ("realize", "tracer.realize", "read_lazy"),
]
ORDER = ["trace", "walk", "key", "lookup", "bind", "submit", "read-back", "realize"]

SIZES = {  # decoder: layers, dim, heads, kv heads, ff, vocab, ctx; minilm: layers, hidden, heads, ff, vocab, n, t
    "tiny": {"decoder": (12, 96, 12, 4, 128, 256, 64), "minilm": (6, 48, 12, 96, 1000, 4, 16)},
    "e2e": {"decoder": (12, 768, 12, 4, 2048, 32000, 512), "minilm": (6, 384, 12, 1536, 30522, 32, 128)},
}


def decoder_call(size: str) -> Callable[[], Any]:
    from benchmarks.e2e.decoder import LazyDecode
    from examples import llama as L

    layers, dim, heads, kv, ff, vocab, ctx = SIZES[size]["decoder"]
    cfg = L.LlamaConfig("LlamaForCausalLM", vocab, dim, layers, heads, kv, dim // heads, ff, 1e-5, max_positions=ctx)
    model = L.Llama(cfg, L.check_weights(L.random_weights(cfg, seed=0), cfg, "random"), ctx)
    step = LazyDecode(model, list(range(1, ctx // 2)))  # every call attends within one length bucket

    def call() -> int:
        step.prepare(1)
        return step()

    return call


def minilm_call(size: str) -> Callable[[], Any]:
    from benchmarks.host_path import _random_bert_weights
    from examples.minilm import MiniLM

    layers, hidden, heads, ff, vocab, n, t = SIZES[size]["minilm"]
    model = MiniLM.__new__(MiniLM)  # the forward's code without a model folder: random weights
    model.layers, model.hidden, model.heads, model.eps = layers, hidden, heads, 1e-12
    model.w = _random_bert_weights(layers, hidden, ff, vocab)
    MiniLM.fuse_qkv(model.w, layers)
    ids = np.random.default_rng(0).integers(1, vocab, (n, t)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1::2, t * 3 // 4 :] = 0
    types = np.zeros_like(ids)
    return lambda: model.forward(ids, types, mask).numpy()


def count_lazies(call: Callable[[], Any]) -> int:
    """Lazies made by one call."""
    from tracer.lazy import Lazy

    original = Lazy.__init__
    count = [0]

    def counting(self: Any, *args: Any, **kwargs: Any) -> None:
        count[0] += 1
        original(self, *args, **kwargs)

    Lazy.__init__ = counting  # type: ignore[method-assign]
    try:
        call()
    finally:
        Lazy.__init__ = original  # type: ignore[method-assign]
    return count[0]


COUNTERS = ["buffers_allocated", "bind_groups_created", "uploads", "uploads_reused", "submits"]


def measure(call: Callable[[], Any], repeat: int, freeze: bool = False) -> dict[str, Any]:
    from backend_wgpu import get_device
    from tracer.realize import stats

    for _ in range(3):  # traced, compiled, output buffers and plans exist
        call()
    if freeze:  # what a user may do after loading: the model, programs and modules leave the collector's walks
        gc.collect()
        gc.freeze()
    lazies = count_lazies(call)
    compiled = stats["programs_compiled"]
    device_stats = get_device().stats
    counted = {k: device_stats[k] for k in COUNTERS}
    clock = StageClock()
    for stage, module, path in STAGES:
        clock.wrap(stage, module, path)
    walls, cpus = [], []
    gc_time = [0.0, 0.0, 0.0, 0.0]  # seconds in the garbage collector by generation, start of the running one

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            gc_time[3] = CLOCK()
        else:
            gc_time[info["generation"]] += CLOCK() - gc_time[3]

    gc.callbacks.append(on_gc)
    try:
        for _ in range(repeat):
            t0, c0 = time.perf_counter(), CLOCK()
            with clock.stage("trace"):
                call()
            walls.append(time.perf_counter() - t0)
            cpus.append(CLOCK() - c0)
    finally:
        clock.restore()
        gc.callbacks.remove(on_gc)
        gc.unfreeze()
    return {
        "lazies": lazies,
        "wall_ms": statistics.median(walls) * 1e3,
        "cpu_ms": statistics.median(cpus) * 1e3,
        "best_ms": min(cpus) * 1e3,
        "stages_ms": {k: clock.seconds.get(k, 0.0) / repeat * 1e3 for k in ORDER},
        "compiles": stats["programs_compiled"] - compiled,
        "gc_ms": [g / repeat * 1e3 for g in gc_time[:3]],
        "counts": {k: (device_stats[k] - counted[k]) / repeat for k in COUNTERS},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", choices=sorted(SIZES), default="tiny")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--top", type=int, default=25, help="cProfile rows per workload (0: no profile)")
    parser.add_argument("--only", default="decoder,minilm")
    parser.add_argument("--freeze", action="store_true", help="gc.freeze() after the warm-up calls")
    args = parser.parse_args(argv)
    from backend_wgpu import get_device

    makers = {"decoder": decoder_call, "minilm": minilm_call}
    results = {}
    for name in args.only.split(","):
        call = makers[name](args.sizes)
        results[name] = measure(call, args.repeat, args.freeze)
        if args.top:
            print(f"--- cProfile, {name}, {args.repeat} calls (tottime) ---")
            print(profile(call, args.repeat, args.top))
    frozen = ", gc.freeze() after warm-up" if args.freeze else ""
    print(f"device: {get_device().caps.name}; sizes {args.sizes}{frozen}; host CPU per call by stage (exclusive, mean)")
    head = f"{'workload':<8} {'lazies':>6} {'wall ms':>8} {'cpu ms':>7} {'best':>7} {'us/Lazy':>7} | " + " ".join(
        f"{s:>9}" for s in ORDER
    )
    print(head)
    for name, r in results.items():
        n = r["lazies"]
        ms = " ".join(f"{r['stages_ms'][s]:9.3f}" for s in ORDER)
        us = " ".join(f"{r['stages_ms'][s] * 1e3 / n:9.2f}" for s in ORDER)
        line = (
            f"{name:<8} {n:>6} {r['wall_ms']:8.2f} {r['cpu_ms']:7.2f} {r['best_ms']:7.2f} {r['cpu_ms'] * 1e3 / n:7.2f}"
        )
        print(f"{line} | {ms}  (ms)")
        print(f"{'':<8} {'':>6} {'':>8} {'':>7} {'':>7} {'':>7} | {us}  (us/Lazy)")
        g0, g1, g2 = r["gc_ms"]
        print(
            f"{'':<8} garbage collector: {g0 + g1 + g2:.3f} ms per call (inside the stages above; "
            f"generations 0/1/2: {g0:.3f}/{g1:.3f}/{g2:.3f})"
        )
        counts = ", ".join(f"{k} {v:g}" for k, v in r["counts"].items())
        print(f"{'':<8} per call: {counts}")
        if r["compiles"]:
            print(f"  note: {r['compiles']} programs compiled during the timed calls")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
