"""The ~1B decoder's prefill with quantized weights: qgemm_thin's rule against qgemm alone, one process.

    python3 -m benchmarks.device.qprefill [--config 1B] [--formats q4_0,q8_0] [--lengths 16,64,128]

For each format (random weights, seed 0, tr.quantize of the same matrices) and prompt length, the
prefill program (examples/llama.py's `Llama.prefill`, all of a prompt's logits and its KV cache) is
compiled twice from one traced graph: with the built-in rules (qgemm_thin for products of a few rows)
and with every quantized product of several rows on qgemm (the rule before qgemm_thin). Both are
checked against each other, then timed interleaved in blocks: wall ms of a run with the last
position's logits read back, and GPU ms of the one pass (timestamps, a diagnostic). Table last.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np

import tracer as tr
from backend_wgpu import Program, get_device
from benchmarks.timing import ProgramTimer
from passes import dequantize_wide as dw
from passes import run_pipeline
from passes import select_kernels as sk
from tracer.graph_builder import build_graph


def programs(model: Any, length: int, vocab: int) -> tuple[dict[str, Program], list[Any], int]:
    """The prefill of `length` random ids compiled three ways from one traced graph; its inputs; the logits'
    output: the rules, the rules without dequantize_wide (qgemm past qgemm_thin's rows), and qgemm alone (the
    rules before this session)."""
    dev = get_device()
    ids = tr.tensor(np.random.default_rng(length).integers(0, vocab, (1, length)).astype(np.int32)).realize()
    cache = [t.realize() for t in model.empty_cache().tensors()]
    outs = model.prefill(ids, *cache)
    built = build_graph([t._lazy for t in outs])
    compiled = {"rules": Program(run_pipeline(built.graph, dev.caps).graph, dev)}
    rule, limit, min_rows = sk.quant_thin_wins, dw.DEQUANTIZE_MAX_BYTES, dw.DEQUANTIZE_MIN_ROWS
    try:
        dw.DEQUANTIZE_MAX_BYTES = 0
        compiled["no_dequant"] = Program(run_pipeline(built.graph, dev.caps).graph, dev)
        sk.quant_thin_wins = lambda m, n: False
        compiled["qgemm"] = Program(run_pipeline(built.graph, dev.caps).graph, dev)
        sk.quant_thin_wins, dw.DEQUANTIZE_MAX_BYTES = rule, limit
        dw.DEQUANTIZE_MIN_ROWS = 2  # every weight whose copy fits dequantized; qgemm_thin for the rest
        compiled["dequant_all"] = Program(run_pipeline(built.graph, dev.caps).graph, dev)
    finally:
        sk.quant_thin_wins, dw.DEQUANTIZE_MAX_BYTES, dw.DEQUANTIZE_MIN_ROWS = rule, limit, min_rows
    return compiled, [lz.buffer for lz in built.inputs], 0


def main() -> list[tuple[str, int, dict[str, tuple[float, float]], float]]:
    """Run, print, and return the table: (format, tokens, {program: (wall ms, GPU ms)}, the programs' largest difference)."""
    from benchmarks.e2e.decoder import config
    from examples import llama as L

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="1B")
    ap.add_argument("--formats", default="q4_0,q8_0")
    ap.add_argument("--lengths", default="16,64,128,512")
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    dev = get_device()
    timer = ProgramTimer(dev)
    cfg = config(args.config)
    print(f"qprefill on {dev.caps.name} ({dev.caps.backend}), config {args.config}", flush=True)
    weights = L.random_weights(cfg, seed=0)
    table = []
    for fmt in args.formats.split(","):
        ours = L.quantize_weights(weights, cfg, fmt)
        model = L.Llama(cfg, L.check_weights(ours, cfg, f"random {args.config} {fmt}", tr.float32), cfg.max_positions)
        tr.realize(*model.w.values())
        for length in (int(x) for x in args.lengths.split(",")):
            compiled, inputs, out = programs(model, length, cfg.vocab)
            logits = {}
            for name, program in compiled.items():
                res = program.run(inputs)[out]
                logits[name] = np.frombuffer(dev.read(res), np.float32)[-cfg.vocab :]
                kinds = sorted(
                    {d.kernel for d in program.dispatches if d.kernel.startswith(("qgemm", "dequant", "gemm"))}
                )
                print(f"{fmt} prefill {length}: {name}: {len(program.dispatches)} dispatches, {kinds}", flush=True)
            b = logits["qgemm"]
            err = max(float(np.abs(a - b).max() / np.abs(b).max()) for a in logits.values())
            print(f"{fmt} prefill {length}: last logits max |diff| / max = {err:.1e}", flush=True)
            wall: dict[str, list[float]] = {n: [] for n in compiled}
            gpu: dict[str, list[float]] = {n: [] for n in compiled}
            for _ in range(args.blocks):
                for name, program in compiled.items():
                    for _ in range(args.runs):
                        t0 = time.perf_counter()
                        res = program.run(inputs)[out]
                        dev.read(res)
                        wall[name].append((time.perf_counter() - t0) * 1e3)
                    t = timer.time(lambda w, p=program, i=inputs: p.run(i, timestamp_writes=w) if w else p.run(i), 1, 3)
                    gpu[name].append(t.median)
            row = {n: (statistics.median(wall[n]), statistics.median(gpu[n])) for n in compiled}
            table.append((fmt, length, row, err))
            print(
                f"{fmt} prefill {length}: " + "  ".join(f"{n} {w:.3f} ms (GPU {g:.3f})" for n, (w, g) in row.items()),
                flush=True,
            )
        del model
    print("\nprefill wall ms with the logits read back (GPU ms of one pass, diagnostic); x = qgemm alone / that")
    print(f"{'format':<7} {'tokens':>6} {'rules':>24} {'no dequantize_wide':>24} {'qgemm alone':>18} {'check':>8}")
    for fmt, length, row, err in table:
        (rw, rg), (nw, ng), (qw, qg) = row["rules"], row["no_dequant"], row["qgemm"]
        dw_, dg = row["dequant_all"]
        print(
            f"{fmt:<7} {length:>6} {rw:>9.3f} ({rg:>6.3f}) {qw / rw:>5.2f}x {nw:>9.3f} ({ng:>6.3f}) {qw / nw:>5.2f}x "
            f"{qw:>9.3f} ({qg:>6.3f}) {err:>8.1e}   every weight that fits dequantized: {dw_:.3f} ({dg:.3f})"
        )
    return table


if __name__ == "__main__":
    main()
