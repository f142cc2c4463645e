"""Quantized products of a few rows (a short prompt's prefill): qgemm_thin's settings against qgemm, on a GPU.

    python3 -m benchmarks.device.qthin_sweep            # the H200 run (about 2 minutes)
    python3 -m benchmarks.device.qthin_sweep --quick    # small shapes, any adapter (a smoke run)

For q4_0 and q8_0 weights of the ~1B decoder's shapes (w 2048x2048, 8192x2048, 2048x8192: x @ w.T)
and 2 to 128 rows of x, each contender is checked against numpy (x times the weight's dequantized
values) and then timed, interleaved in blocks (timestamps around the one dispatch; the median of
block medians): qgemm (64x64 tiles), the built-in rule, and qgemm_thin with 1, 2 or 4 weight rows a
workgroup and 32 to 256 threads, and with each unit split among four threads (names ending in `s`, 4
or 8 weight rows). The last lines are the table, microseconds, fastest first per case.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from typing import Any

import numpy as np

import tracer as tr
from backend_wgpu import Program, get_device
from benchmarks.timing import ProgramTimer
from ir.node import KernelChoice
from passes import run_pipeline
from tracer.graph_builder import build_graph

SHAPES = [(2048, 2048), (8192, 2048), (2048, 8192)]  # (n, k) of w
ROWS = [2, 8, 16, 32, 64, 128]
QUICK_SHAPES, QUICK_ROWS = [(96, 256)], [2, 16, 40]
# (weight rows a workgroup, threads, units split four threads to a unit)
SETTINGS = [(cols, threads, False) for cols in (1, 2, 4) for threads in (32, 64, 128, 256)]
SETTINGS += [(cols, threads, True) for cols in (4, 8) for threads in (64, 128, 256)]


def forced(choice: KernelChoice | None) -> Any:
    """A graph rewrite putting `choice` on the quantized matmul (None: the rule's own)."""

    def apply(node: Any) -> Any:
        if choice is None or node.kernel is None or node.kernel.name not in ("qgemm", "qgemm_thin"):
            return node
        return dataclasses.replace(node, kernel=dataclasses.replace(choice, variant=node.kernel.variant))

    return apply


def compile_with(y: tr.Tensor, choice: KernelChoice | None) -> tuple[Program, list[Any], str]:
    dev = get_device()
    built = build_graph([y._lazy])
    graph = run_pipeline(built.graph, dev.caps).graph
    graph = graph.with_nodes(forced(choice)(n) for n in graph)
    program = Program(graph, dev)
    (d,) = [d for d in program.dispatches if d.op in ("matmul", "fused")]
    return program, [lz.buffer for lz in built.inputs], f"{d.kernel}[{d.variant}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--formats", default="q4_0,q8_0")
    args = ap.parse_args()
    dev = get_device()
    timer = ProgramTimer(dev)
    print(f"qthin_sweep on {dev.caps.name} ({dev.caps.backend})", flush=True)
    rng = np.random.default_rng(0)
    rows_out: list[tuple[str, str, float]] = []
    failures = 0
    shapes, all_rows = (QUICK_SHAPES, QUICK_ROWS) if args.quick else (SHAPES, ROWS)
    for fmt in args.formats.split(","):
        for n, k in shapes:
            w = tr.quantize(rng.standard_normal((n, k)).astype(np.float32), fmt)
            ref_w = w.astype(tr.float32).numpy().astype(np.float64)
            for m in all_rows:
                x = rng.standard_normal((m, k)).astype(np.float32)
                ref = x.astype(np.float64) @ ref_w.T
                xt = tr.tensor(x).realize()
                case = f"{fmt} {m}x{n}x{k}"
                choices: dict[str, KernelChoice | None] = {"rule": None}
                choices["qgemm"] = KernelChoice("qgemm", "x4", workgroup=(16, 16, 1))
                for cols, threads, split in SETTINGS:
                    rows = -(-m // -(-m // 16))
                    params = (("rows", rows), ("cols", cols), ("subgroups", dev.caps.subgroups), ("split", split))
                    choices[f"c{cols}t{threads}{'s' * split}"] = KernelChoice(
                        "qgemm_thin", "x4", workgroup=(threads, 1, 1), params=params
                    )
                contenders = {}
                for name, choice in choices.items():
                    program, buffers, label = compile_with(xt @ w.T, choice)
                    out = program.run(buffers)[0]
                    got = np.frombuffer(dev.read(out), np.float32)[: m * n].reshape(m, n)
                    err = float(np.abs(got - ref).max() / np.abs(ref).max())
                    if err > 1e-4:
                        failures += 1
                        print(f"{case} {name} {label}: FAIL {err:.1e}", flush=True)
                        continue
                    contenders[name if name != "rule" else f"rule {label.split('[')[0]}"] = (program, buffers)
                samples: dict[str, list[float]] = {c: [] for c in contenders}
                for _ in range(args.blocks):
                    for name, (program, buffers) in contenders.items():
                        t = timer.time(
                            lambda wr, p=program, b=buffers: p.run(b, timestamp_writes=wr) if wr else p.run(b),
                            2,
                            args.runs,
                        )
                        samples[name].append(t.median)
                best = sorted((statistics.median(s) * 1e3, name) for name, s in samples.items())
                print(f"{case}: " + "  ".join(f"{name} {us:.1f}" for us, name in best), flush=True)
                rows_out.extend((case, name, us) for us, name in best)
    print(f"\n{failures} check failures; us per product (timestamps), the rule, qgemm and the fastest thin setting:")
    print(f"{'case':<24} {'rule':>16} {'us':>8} {'qgemm us':>9} {'best thin':>10} {'us':>8}")
    cases = dict.fromkeys(c for c, _, _ in rows_out)
    for case in cases:
        mine = [(n, us) for c, n, us in rows_out if c == case]
        rule = next(((n, us) for n, us in mine if n.startswith("rule")), ("-", float("nan")))
        qgemm = next((us for n, us in mine if n == "qgemm"), float("nan"))
        thin = min(((us, n) for n, us in mine if n.startswith("c")), default=(float("nan"), "-"))
        print(f"{case:<24} {rule[0]:>16} {rule[1]:>8.1f} {qgemm:>9.1f} {thin[1]:>10} {thin[0]:>8.1f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
