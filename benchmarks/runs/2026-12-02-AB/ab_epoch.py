"""A/B in one process: a jit decode step-then-read token with the value-epoch shortcut (tracer.jit
_bind_fast skips its check of the captured tensors while no Tensor was rebound) against the check
made every call, as before ef9c390. Blocks of tokens alternate; medians of wall ms per token.

    python benchmarks/runs/2026-12-02-AB/ab_epoch.py [--cases 12L,1B] [--blocks 10] [--per-block 40]
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import statistics
import sys
import time

sys.path.insert(0, ".")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", default="12L,1B")
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--per-block", type=int, default=40)
    args = parser.parse_args()
    from backend_wgpu import get_device
    from benchmarks.device.timeline import decoder_case

    jit = importlib.import_module("tracer.jit")
    shortcut = jit.value_epoch
    ticks = itertools.count()
    print(f"ab_epoch on {get_device().caps.name}", flush=True)
    rows = []
    for name in args.cases.split(","):
        t0 = time.perf_counter()
        case = decoder_case(name)
        end = time.perf_counter() + 3.0
        while time.perf_counter() < end:
            case.call()
        print(f"{name}: built and warm in {time.perf_counter() - t0:.1f} s", flush=True)
        walls: dict[str, list[float]] = {"epoch": [], "check": []}
        for _ in range(args.blocks):
            for mode in ("check", "epoch"):
                jit.value_epoch = shortcut if mode == "epoch" else lambda: -1 - next(ticks)
                for _ in range(5):
                    case.call()
                for _ in range(args.per_block):
                    t = time.perf_counter()
                    case.call()
                    walls[mode].append((time.perf_counter() - t) * 1e3)
        jit.value_epoch = shortcut
        e, c = statistics.median(walls["epoch"]), statistics.median(walls["check"])
        rows.append((name, c, e))
        print(f"{name}: check every call {c:.4f} ms, epoch {e:.4f} ms ({c - e:+.4f})", flush=True)
        del case
    print("\ncase | check ms | epoch ms | saved us")
    for name, c, e in rows:
        print(f"{name} | {c:.4f} | {e:.4f} | {(c - e) * 1e3:.1f}")


if __name__ == "__main__":
    main()
