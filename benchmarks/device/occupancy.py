"""How many workgroups of a kernel an H200 multiprocessor runs at once (GPU time, ~1-2 min).

    python3 -m benchmarks.device.occupancy [--tiles rule,64x32t8] [--gemm b64x128k8u,b128k16] [--sms 132]

Vulkan shows neither a pipeline's registers nor its occupancy, so this measures it: a dispatch of
equal workgroups, timed with 1, 2, 3 and 4 times as many workgroups as multiprocessors. If a
multiprocessor runs one workgroup at a time, each extra wave adds a whole workgroup's time (ratios
2, 3, 4); if it runs two whose work overlaps, the second wave costs less (ratio under 2), and so on.
  flash attention (--tiles): one query-row block per head (Lq = the tile's rows, 4096 keys, head
    dim 128, no mask), so a dispatch is one workgroup per head;
  GEMM (--gemm): a product of exactly N 64x128 (or the config's) tiles, k 4096, float32.
The last lines are the table: per kernel, the median GPU ms at each multiple and its ratio to 1x.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from typing import Any

import numpy as np

import tracer as tr
from backend_wgpu import get_device
from benchmarks.device.attention import Case, fits, inputs, wgjit_program
from benchmarks.device.gemm_sweep import compile_candidate
from benchmarks.timing import ProgramTimer
from passes.select_kernels import GEMM_CONFIGS

# (br, bc, tx, q, a, sg, pf, vg, un, pl, lpt, sw) as benchmarks.device.attention's VARIANTS; "rule": the rule's tile
TILES: dict[str, tuple | None] = {
    "rule": None,
    "128x32t16": (128, 32, 16, False, True, True, False, False, True, False, True),
    "128x64t16": (128, 64, 16, False, True, True, False, False, True, False, True),
    "64x64t16": (64, 64, 16, False, True, True, False, False, True, False, True, True),
    "64x32t8": (64, 32, 8, False, True, True, False, False, True, False, True),
    # the same, loops not unrolled (fewer registers)
    "64x32t8-loops": (64, 32, 8, False, True, True, False, False, False, False, True),
    "64x16t8-loops": (64, 16, 8, False, True, True, False, False, False, False, True),
    "128x32t8-loops": (128, 32, 8, False, True, True, False, False, False, False, True),
}
MULTIPLES = (1, 2, 3, 4)


def rule_rows(sms: int, keys: int) -> int:
    """The query rows of the rule's tile for these problems (a probe of 128 rows reads them off the kernel)."""
    case = Case("probe", 1, sms, 128, keys, 128, causal=False, padding=False)
    label = wgjit_program(case, inputs(case), None)[2]
    return int(label.split(":")[1].split("x")[0])


def attention_programs(name: str, sms: int, keys: int) -> tuple[dict[int, tuple[Any, list]], str] | None:
    variant = TILES[name]
    br = variant[0] if variant else rule_rows(sms, keys)
    programs, label = {}, ""
    for mult in MULTIPLES:
        case = Case(f"{name} x{mult}", 1, mult * sms, br, keys, 128, causal=False, padding=False)
        if variant is not None and not fits(variant, case):
            return None
        program, buffers, label = wgjit_program(case, inputs(case), variant)
        programs[mult] = (program, buffers)
    return programs, label


def gemm_programs(config: str, sms: int, k: int) -> tuple[dict[int, tuple[Any, list]], str]:
    """sms x mult tiles of `config`: 12 tiles down by 11 across for 132 (rows x columns of tiles near square)."""
    c = GEMM_CONFIGS[config]
    rows = next(r for r in range(int(sms**0.5), 0, -1) if sms % r == 0)
    cols = sms // rows
    rng = np.random.default_rng(0)
    programs, label = {}, ""
    for mult in MULTIPLES:
        m, n = rows * mult * c.tile_m, cols * c.tile_n
        a = tr.tensor(rng.standard_normal((m, k)).astype(np.float32)).realize()
        b = tr.tensor(rng.standard_normal((k, n)).astype(np.float32)).realize()
        program, buffers, label = compile_candidate(a @ b, config)
        programs[mult] = (program, buffers)
    return programs, label


def _row(name: str, ms: dict[int, float]) -> str:
    return f"{name:<22} " + " ".join(f"{ms[m]:>9.4f} {ms[m] / ms[1]:>6.2f}" for m in MULTIPLES)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tiles", default=",".join(TILES), help=f"flash tiles, comma-separated, of: {', '.join(TILES)}")
    ap.add_argument("--gemm", default="b64x128k8u,b128k16", help="GEMM configurations (passes.select_kernels)")
    ap.add_argument("--sms", type=int, default=132, help="multiprocessors (the H200 has 132)")
    ap.add_argument("--keys", type=int, default=4096, help="keys per head (attention), k (GEMM)")
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    unknown = [t for t in args.tiles.split(",") if t and t not in TILES]
    unknown += [g for g in args.gemm.split(",") if g and g not in GEMM_CONFIGS]
    if unknown:
        ap.error(f"unknown tiles or GEMM configurations: {', '.join(unknown)}")
    dev = get_device()
    timer = ProgramTimer(dev)
    print(f"adapter: {dev.caps.name} ({dev.caps.backend}), {args.sms} multiprocessors assumed", flush=True)
    rows = []
    kernels = [
        ("flash " + t, lambda t=t: attention_programs(t, args.sms, args.keys)) for t in args.tiles.split(",") if t
    ]
    kernels += [("gemm " + g, lambda g=g: gemm_programs(g, args.sms, args.keys)) for g in args.gemm.split(",") if g]
    for name, build in kernels:
        built = build()
        if built is None:
            print(f"{name}: does not fit this adapter")
            continue
        programs, label = built
        print(f"{name}: {label}", flush=True)
        samples: dict[int, list[float]] = {m: [] for m in programs}
        for _ in range(args.blocks):
            for mult, (program, buffers) in programs.items():
                t = timer.time(lambda w, p=program, b=buffers: p.run(b, timestamp_writes=w), 2, args.runs)
                samples[mult].append(t.median)
        rows.append(_row(name, {m: statistics.median(s) for m, s in samples.items()}))
        print(rows[-1], flush=True)
    print(f"\n{'kernel':<22} " + " ".join(f"{f'{m}x ms':>9} {'ratio':>6}" for m in MULTIPLES))
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
