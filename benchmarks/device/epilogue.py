"""Does an epilogue slow a GEMM down? (GPU machine, < 1 min; a diagnostic.)

    python -m benchmarks.device.epilogue [--shapes 512x2048x2048,512x512x2048]

For each m x n x k, times (GPU timestamps around the pass, interleaved blocks) y = x @ w.T alone,
with a residual added (y + r: the o and down projections of a decoder), with a bias (a broadcast
leaf, whose element the epilogue finds from coordinates), and torch's F.linear and F.linear + r in
the same process. Prints a table last.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np


def program_of(*tensors: Any) -> tuple[Any, list[Any]]:
    from tracer.graph_builder import build_graph
    from tracer.realize import device_buffer, program_for

    built = build_graph([t._lazy for t in tensors])
    return program_for(built.graph), [device_buffer(lz) for lz in built.inputs]


def torch_fns(torch: Any, dev: str, x: np.ndarray, w: np.ndarray, r: np.ndarray) -> dict[str, Any]:
    """torch's F.linear, and F.linear + r, on the GPU."""
    a, b, c = (torch.tensor(v, device=dev) for v in (x, w, r))
    linear = torch.nn.functional.linear
    return {"torch": lambda: linear(a, b), "torch+r": lambda: linear(a, b) + c}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="512x2048x2048,512x512x2048,512x2048x8192")
    parser.add_argument("--blocks", type=int, default=6)
    args = parser.parse_args()
    import tracer as tr
    from backend_wgpu import get_device
    from benchmarks.timing import ProgramTimer, time_program, time_torch

    timer = ProgramTimer(get_device())
    rng = np.random.default_rng(0)
    try:
        import torch

        torch.backends.cuda.matmul.allow_tf32 = False
        dev = "cuda" if torch.cuda.is_available() else None
    except ImportError:
        torch, dev = None, None
    rows = []
    for shape in args.shapes.split(","):
        m, n, k = (int(v) for v in shape.split("x"))
        x = rng.standard_normal((m, k), dtype=np.float32)
        w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
        r = rng.standard_normal((m, n), dtype=np.float32)
        bias = rng.standard_normal(n, dtype=np.float32)
        tx, tw, trr, tb = tr.tensor(x), tr.tensor(w), tr.tensor(r), tr.tensor(bias)
        ref = x.astype(np.float64) @ w.T.astype(np.float64)
        cases: dict[str, Any] = {}
        for name, y, want in (
            ("gemm", tr.nn.linear(tx, tw), ref),
            ("gemm+r", tr.nn.linear(tx, tw) + trr, ref + r),
            ("gemm+b", tr.nn.linear(tx, tw, tb), ref + bias),  # a broadcast leaf: read by coordinates
        ):
            program, buffers = program_of(y)
            err = float(np.abs(y.numpy() - want).max() / np.abs(want).max())
            kernels = ",".join(d.kernel for d in program.dispatches)
            print(f"{shape} {name}: {len(program.dispatches)} dispatches {kernels} err {err:.1e}", flush=True)
            cases[name] = (program, buffers)
        end = time.perf_counter() + 2.0
        while time.perf_counter() < end:
            for program, buffers in cases.values():
                time_program(program, buffers, timer, 0, 2)
        samples: dict[str, list[float]] = {name: [] for name in cases}
        tsamples: dict[str, list[float]] = {"torch": [], "torch+r": []}
        fns = torch_fns(torch, dev, x, w, r) if dev else {}
        for _ in range(args.blocks):
            for name, (program, buffers) in cases.items():
                samples[name].append(statistics.median(time_program(program, buffers, timer, 2, 10).gpu_ms))
            for name, fn in fns.items():
                tsamples[name].append(time_torch(fn, 2, 10).median)
        med = {name: statistics.median(v) for name, v in {**samples, **tsamples}.items() if v}
        rows.append((shape, med))
    print(f"\nGEMM with and without a residual epilogue, GPU ms (median of blocks), on {get_device().caps.name}")
    for shape, med in rows:
        print(f"{shape:<16} " + "  ".join(f"{name} {ms:.4f}" for name, ms in med.items()))


if __name__ == "__main__":
    main()
