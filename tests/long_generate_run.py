"""Long generation: thousands of tokens in one process, with what wgjit holds printed as it goes.

    python tests/long_generate_run.py 10000 [--per-generation 500] [--mode jit|lazy] [--model DIR]

Generates `per_generation` tokens at a time from prompts of one length (seeded sampling:
temperature, top-k and top-p, a new seed per generation) until the total is reached, on a
tiny random Llama checkpoint written to a temporary folder (or --model). The first
generation is the warm-up (it traces and compiles). Each line then shows the tokens so far,
the speed, live wgpu objects (buffers, bind groups, pipelines), wgjit's caches (pipelines,
programs), programs compiled since the warm-up, and the process's RSS. At the end two
generations are replayed with their seeds and must give the same ids. tests/test_generate_long.py
runs the same loop with fewer tokens and asserts the plateau.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from examples import generate as G  # noqa: E402
from examples import llama as L  # noqa: E402

PROMPT_LEN = 8


def tiny_checkpoint(folder: Path) -> Path:
    """A 2-layer Llama with grouped-query attention and room for long generations (random weights)."""
    cfg = L.LlamaConfig(
        "LlamaForCausalLM", vocab=128, dim=32, layers=2, heads=4, kv_heads=2, head_dim=8, ff=64, max_positions=4096
    )
    return L.write_checkpoint(folder, cfg, L.random_weights(cfg, seed=0, scale=0.3))


def snapshot() -> dict[str, int]:
    """Live GPU objects, wgjit's cache sizes and counters, and the RSS (after a collection)."""
    import wgpu

    from backend_wgpu.device import get_device

    realize = sys.modules["tracer.realize"]  # the package exports a function of that name
    gc.collect()
    counts = wgpu.diagnostics.object_counts.get_dict()
    pages = int(Path("/proc/self/statm").read_text().split()[1]) if Path("/proc/self/statm").exists() else 0
    return {
        "buffers": counts["Buffer"]["count"],
        "buffer_KiB": counts["Buffer"].get("resource_mem", 0) // 1024,
        "bind_groups": counts["BindGroup"]["count"],
        "pipelines": counts["ComputePipeline"]["count"],
        "pipeline_cache": len(get_device().pipelines),
        "programs": len(realize.cached_programs()),
        "compiled": realize.stats["programs_compiled"],
        "rss_MiB": pages * os.sysconf("SC_PAGE_SIZE") // 2**20,
    }


def sampling(i: int) -> G.Sampling:
    return G.Sampling(temperature=0.9, top_k=40, top_p=0.95, seed=1000 + i)


def prompt(i: int, vocab: int) -> list[int]:
    return np.random.default_rng(i).integers(0, vocab, PROMPT_LEN).tolist()


def run(
    tokens: int, per_generation: int, mode: str = "jit", model: Path | None = None, log: Any = print
) -> dict[str, Any]:
    """Generate `tokens` tokens in generations of `per_generation`; returns snapshots, ids and the replay check."""
    with tempfile.TemporaryDirectory() as tmp:
        gen = G.Generator.load(model or tiny_checkpoint(Path(tmp) / "tiny"), mode=mode)
    vocab = gen.cfg.vocab
    t0 = time.perf_counter()
    ids = [gen.generate(prompt(0, vocab), per_generation, sampling(0), stop_at_eos=False).ids]  # the warm-up
    after_warmup = snapshot()
    log(f"warm-up: {len(ids[0])} tokens in {time.perf_counter() - t0:.1f} s; {after_warmup}")
    snapshots = [after_warmup]
    done, t1 = len(ids[0]), time.perf_counter()
    every = max(per_generation, tokens // 10)
    while done < tokens:
        i = len(ids)
        ids.append(
            gen.generate(prompt(i, vocab), min(per_generation, tokens - done), sampling(i), stop_at_eos=False).ids
        )
        done += len(ids[-1])
        if done % every < len(ids[-1]) or done >= tokens:
            snapshots.append(snapshot())
            rate = (done - len(ids[0])) / (time.perf_counter() - t1)
            log(f"{done} tokens, {rate:.0f} tok/s: {snapshots[-1]}")
    replayed = {
        i: gen.generate(prompt(i, vocab), len(ids[i]), sampling(i), stop_at_eos=False).ids for i in {0, len(ids) - 1}
    }
    same = all(replayed[i] == ids[i] for i in replayed)
    log(f"replayed generations {sorted(replayed)} with their seeds: {'the same ids' if same else 'DIFFERENT ids'}")
    return {"ids": ids, "snapshots": snapshots, "replay_same": same, "tokens": done}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tokens", type=int, nargs="?", default=10000)
    ap.add_argument("--per-generation", type=int, default=500)
    ap.add_argument("--mode", choices=G.MODES, default="jit")
    ap.add_argument("--model", type=Path, help="a checkpoint folder instead of the tiny random one")
    args = ap.parse_args(argv)
    out = run(args.tokens, args.per_generation, args.mode, args.model)
    first, last = out["snapshots"][0], out["snapshots"][-1]
    print(f"after the warm-up -> at the end: {first} -> {last}")
    print(f"compiled after the warm-up: {last['compiled'] - first['compiled']} programs")
    return 0 if out["replay_same"] else 1


if __name__ == "__main__":
    sys.exit(main())
