"""H200 figures for quantized weights: the q8_0, q4_0, q4_k and q6_k GEMVs beside our f32 and f16 GEMVs and torch's.

    python benchmarks/device/quant.py [--quick] [--repeat 30] [--formats q8_0,q4_0,q4_k,q6_k]

For y = x @ W.T with W (N, K) as GGUF and torch store it, at (K, N) = (4096, 4096) and
(4096, 11008): wgjit's f32 and f16 GEMV (gemv[k_contig], what tr.nn.linear runs) and
qgemv for each format (--formats) under every (wx, wy, rows, unroll) configuration in CONFIGS (the
default one marked), torch's f16 and f32 GEMV (F.linear on CUDA) in the same process.
Every wgjit case is checked against numpy (float64 of the values the weight holds) before
it is timed with GPU timestamps around its pass; torch with CUDA events. GB/s counts the
weight's bytes on the GPU (34 per 32 weights for q8_0, 18 for q4_0, 18.5 for q4_k, 26.25 for q6_k). The sweep
shares one time budget: list fewer formats to sweep each further. A prefill-sized product (128
rows, qgemm) follows. Prints the sweep as it goes and a short table last; < 3 minutes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout

SHAPES = ((4096, 4096), (4096, 11008))
FORMATS = ["q8_0", "q4_0", "q4_k"]  # --formats (q6_k too: not swept by default)
SWEEP_BUDGET_S = 140  # configurations past this many seconds are skipped (said so), to stay under 3 minutes
T0 = time.perf_counter()
# qgemv (wx, wy, rows, unroll): threads along a row, row groups, rows per thread, units per step
CONFIGS = [
    (wx, wy, rows, unroll)
    for wx in (16, 32, 64, 128)
    for wy in (1, 2, 4, 8)
    for rows in (1, 2, 4, 8)
    for unroll in (1, 2)
    if 64 <= wx * wy <= 512 and rows * wy <= 32 and (rows <= 4 or wx >= 32)
]


def program_for(y: Any, choice: Any = None) -> tuple[Any, list[Any]]:
    """y's program, its matmul's KernelChoice replaced by `choice` (None: what select_kernels chose)."""
    from backend_wgpu import Program, get_device
    from ir.ops import Op
    from passes import pipeline as pl
    from tracer.graph_builder import build_graph
    from tracer.tensor import Tensor

    dev = get_device()
    built = build_graph([y._lazy])

    def force(graph: Any, caps: Any) -> Any:
        if choice is None:
            return graph
        return graph.with_nodes([replace(n, kernel=choice) if n.op is Op.MATMUL else n for n in graph])

    passes = list(pl.PIPELINE)
    passes.insert(passes.index(pl.select_kernels) + 1, force)
    program = Program(pl.run_pipeline(built.graph, dev.caps, passes=passes).graph, dev)
    bufs = []
    for lz in built.inputs:
        Tensor(lz)  # keep it alive
        if lz.buffer is None:
            lz.buffer = dev.upload(lz.host)
            lz.host = None
        bufs.append(lz.buffer)
    return program, bufs


def measure(y: Any, want: np.ndarray, repeat: int, choice: Any = None) -> tuple[float, str, bool]:
    """(GPU ms median, kernel label, values right) of one program."""
    from backend_wgpu import get_device
    from benchmarks.timing import ProgramTimer, time_program

    dev = get_device()
    program, bufs = program_for(y, choice)
    got = np.frombuffer(dev.read(program.run(bufs)[0]), dtype=y.dtype.np).reshape(y.shape).astype(np.float64)
    scale = max(1.0, float(np.abs(want).max()))
    ok = bool(np.allclose(got, want, rtol=3e-3, atol=3e-3 * scale))
    t = time_program(program, bufs, ProgramTimer(dev), 5, repeat)
    d = next(d for d in program.dispatches if d.op in ("matmul", "fused"))
    return t.median, f"{d.kernel}[{d.variant.split(':')[0]}] wg{'x'.join(map(str, d.workgroup_size))}", ok


def torch_ms(fn: Any, repeat: int) -> float | None:
    from benchmarks.timing import time_torch

    return statistics.median(time_torch(fn, 5, repeat).gpu_ms)


def torch_available() -> Any:
    try:
        import torch

        return torch if torch.cuda.is_available() else None
    except ImportError:
        return None


def gemv_rows(k: int, n: int, repeat: int, quick: bool) -> list[dict[str, Any]]:
    """Every case of one shape; each a dict (name, ms, bytes, kernel, ok)."""
    import tracer as tr
    from ir.node import KernelChoice
    from tracer.gguf import quantize

    rng = np.random.default_rng(k + n)
    w = (rng.standard_normal((n, k), dtype=np.float32) * 0.05).astype(np.float32)
    x = rng.standard_normal((1, k), dtype=np.float32)
    out: list[dict[str, Any]] = []

    def add(name: str, y: Any, want: np.ndarray, nbytes: int, choice: Any = None) -> None:
        ms, kernel, ok = measure(y, want, repeat, choice)
        out.append({"name": name, "ms": ms, "bytes": nbytes, "kernel": kernel, "ok": ok})
        print(f"  {name:<28} {ms * 1e3:8.1f} us {nbytes / ms / 1e6:7.0f} GB/s {'ok' if ok else 'WRONG'} {kernel}")
        sys.stdout.flush()

    print(f"\n== x (1, {k}) @ W.T, W ({n}, {k})")
    add("wgjit f32", tr.nn.linear(tr.tensor(x), tr.tensor(w)), x.astype(np.float64) @ w.T.astype(np.float64), w.nbytes)
    w16, x16 = w.astype(np.float16), x.astype(np.float16)
    add(
        "wgjit f16",
        tr.nn.linear(tr.tensor(x16), tr.tensor(w16)),
        x16.astype(np.float64) @ w16.T.astype(np.float64),
        w16.nbytes,
    )
    for fmt in (tr.DType(f) for f in FORMATS):
        q = quantize(w, fmt)
        held = q.astype(tr.float32).numpy().astype(np.float64)
        want = x.astype(np.float64) @ held.T
        y = tr.nn.linear(tr.tensor(x), q)
        nbytes = fmt.nbytes(w.size)
        add(f"wgjit {fmt.value} (default)", y, want, nbytes)
        for i, (wx, wy, rows, unroll) in enumerate(CONFIGS[:: 6 if quick else 1]):
            if time.perf_counter() - T0 > SWEEP_BUDGET_S:
                print(f"  (time budget reached: {len(CONFIGS[:: 6 if quick else 1]) - i} {fmt.value} configs skipped)")
                break
            choice = KernelChoice("qgemv", "x4", 1, (wx, wy, 1), (("rows", rows), ("unroll", unroll)))
            add(f"wgjit {fmt.value} {wx}x{wy} r{rows} u{unroll}", y, want, nbytes, choice)
    torch = torch_available()
    if torch is not None:
        import torch.nn.functional as F  # noqa: N812

        for name, dt, nbytes in (("torch f16", torch.float16, w16.nbytes), ("torch f32", torch.float32, w.nbytes)):
            tw, tx = torch.from_numpy(w).cuda().to(dt), torch.from_numpy(x).cuda().to(dt)
            got = F.linear(tx, tw).float().cpu().numpy().astype(np.float64)
            ok = bool(np.allclose(got, x.astype(np.float64) @ w.T.astype(np.float64), rtol=3e-3, atol=3e-2))
            ms = torch_ms(lambda tw=tw, tx=tx: F.linear(tx, tw), repeat)
            out.append({"name": name, "ms": ms, "bytes": nbytes, "kernel": "F.linear", "ok": ok})
            print(f"  {name:<28} {ms * 1e3:8.1f} us {nbytes / ms / 1e6:7.0f} GB/s {'ok' if ok else 'WRONG'}")
    return out


def prefill_rows(repeat: int) -> list[dict[str, Any]]:
    """128 rows of x times a 4096x4096 weight: qgemm against our f32 GEMM and torch f16."""
    import tracer as tr
    from tracer.gguf import quantize

    m, k, n = 128, 4096, 4096
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((n, k), dtype=np.float32) * 0.05).astype(np.float32)
    x = rng.standard_normal((m, k), dtype=np.float32)
    rows = []
    print(f"\n== prefill: x ({m}, {k}) @ W.T, W ({n}, {k})")
    cases = [("wgjit f32", tr.tensor(w), w)] + [(f"wgjit {f}", quantize(w, tr.DType(f)), None) for f in FORMATS]
    for name, weight, held in cases:
        values = held if held is not None else weight.astype(tr.float32).numpy()
        ms, kernel, ok = measure(tr.nn.linear(tr.tensor(x), weight), x.astype(np.float64) @ values.T, repeat)
        rows.append(
            {"name": name, "ms": ms, "bytes": 0, "kernel": kernel, "ok": ok, "tflops": 2 * m * n * k / ms / 1e9}
        )
        print(
            f"  {name:<14} {ms * 1e3:9.1f} us {2 * m * n * k / ms / 1e9:6.2f} TF/s {'ok' if ok else 'WRONG'} {kernel}"
        )
    torch = torch_available()
    if torch is not None:
        tw, tx = torch.from_numpy(w).cuda().half(), torch.from_numpy(x).cuda().half()
        ms = torch_ms(lambda: torch.nn.functional.linear(tx, tw), repeat)
        rows.append({"name": "torch f16", "ms": ms, "bytes": 0, "kernel": "F.linear", "ok": True})
        print(f"  torch f16      {ms * 1e3:9.1f} us {2 * m * n * k / ms / 1e9:6.2f} TF/s")
    return rows


def table(results: dict[tuple[int, int], list[dict[str, Any]]]) -> None:
    """The summary: per shape, our f32/f16, each format's default and best config, torch."""
    print("\n== summary: GEMV y = x @ W.T, GPU time of one dispatch (median), GB/s of the weight's bytes")
    print(f"{'shape':<12} {'case':<30} {'us':>8} {'GB/s':>7} {'vs torch f16':>13} {'vs our f32':>11}  check")
    for (k, n), rows in results.items():
        by = {r["name"]: r for r in rows}
        f32, t16 = by["wgjit f32"]["ms"], by.get("torch f16", {}).get("ms")
        picks = [by["wgjit f32"], by["wgjit f16"]]
        for fmt in FORMATS:
            picks.append(by[f"wgjit {fmt} (default)"])
            swept = [r for r in rows if r["name"].startswith(f"wgjit {fmt} ") and r["ok"]]
            if swept:
                best = min(swept, key=lambda r: r["ms"])
                picks.append(dict(best, name=best["name"].replace("wgjit ", "best ")))
        picks += [by[t] for t in ("torch f16", "torch f32") if t in by]
        for r in picks:
            ratio16 = f"{t16 / r['ms']:.2f}x" if t16 else "-"
            print(
                f"{f'{k}x{n}':<12} {r['name']:<30} {r['ms'] * 1e3:8.1f} {r['bytes'] / r['ms'] / 1e6:7.0f} "
                f"{ratio16:>13} {f32 / r['ms']:>10.2f}x  {'ok' if r['ok'] else 'WRONG'}"
            )
    wrong = [r["name"] for rows in results.values() for r in rows if not r["ok"]]
    print("all values checked against numpy" if not wrong else f"WRONG VALUES: {wrong}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--quick", action="store_true", help="small shapes and every sixth config (a smoke run)")
    ap.add_argument("--formats", default=",".join(FORMATS), help="quantized formats to time (comma-separated)")
    args = ap.parse_args(argv)
    FORMATS[:] = args.formats.split(",")
    from backend_wgpu import get_device

    t0 = time.perf_counter()
    print("device:", get_device().caps.name, "| configs:", len(CONFIGS), "| torch CUDA:", torch_available() is not None)
    shapes = ((256, 96), (512, 64)) if args.quick else SHAPES
    results = {s: gemv_rows(*s, args.repeat, args.quick) for s in shapes}
    if not args.quick:
        prefill_rows(args.repeat)
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
