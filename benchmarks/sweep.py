"""Kernel tuning sweep: time each candidate KernelChoice of one op side by side (run on the GPU machine).

    python -m benchmarks.sweep [--only gemm,gemv,...] [--quick]

Each candidate replaces the choice passes.select_kernels made (a pass inserted after it),
is checked against numpy, and timed with GPU timestamps; torch's time for the same op is
printed beside it. This is how the choices in select_kernels were picked (RESULTS.md).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from ir.node import KernelChoice
from ir.ops import Op


def _program(y: Any, override: Callable[[Any], KernelChoice | None] | None) -> tuple[Any, list[Any]]:
    from backend_wgpu import Program, get_device
    from passes import pipeline as pl
    from tracer.graph_builder import build_graph
    from tracer.tensor import Tensor

    dev = get_device()
    built = build_graph([y._lazy])

    def force(graph: Any, caps: Any) -> Any:
        if override is None:
            return graph
        return graph.with_nodes([replace(n, kernel=override(n) or n.kernel) if n.kernel else n for n in graph])

    passes = list(pl.PIPELINE)
    passes.insert(passes.index(pl.select_kernels) + 1, force)
    run = pl.run_pipeline(built.graph, dev.caps, passes=passes)
    program = Program(run.graph, dev)
    bufs = []
    for lz in built.inputs:
        Tensor(lz)
        if lz.buffer is None:
            lz.buffer = dev.upload(lz.host)
            lz.host = None
        bufs.append(lz.buffer)
    return program, bufs


def measure(
    y: Any, ref: np.ndarray | None, override: Callable[[Any], KernelChoice | None] | None, repeat: int
) -> tuple[float, str, bool]:
    from backend_wgpu import get_device
    from benchmarks.timing import ProgramTimer, time_program

    dev = get_device()
    program, bufs = _program(y, override)
    ok = True
    if ref is not None:
        got = np.frombuffer(dev.read(program.run(bufs)[0]), dtype=y.dtype.np).reshape(y.shape)
        ok = bool(np.allclose(got.astype(np.float64), ref, rtol=2e-3, atol=2e-3 * max(1.0, float(np.abs(ref).max()))))
    t = time_program(program, bufs, ProgramTimer(dev), 3, repeat)
    d = program.dispatches[-1]
    return t.median, f"{d.kernel}[{d.variant}] x{d.element} wg{d.workgroup_size} n{d.workgroup_count}", ok


def torch_ms(fn: Callable[[], Any], repeat: int) -> float | None:
    try:
        import torch

        if not torch.cuda.is_available():
            return None
    except ImportError:
        return None
    from benchmarks.timing import time_torch

    return statistics.median(time_torch(fn, 3, repeat).gpu_ms)


def _t(a: np.ndarray) -> Any:
    import torch

    return torch.from_numpy(a).cuda()


def report(
    title: str, nbytes: int, flops: int, rows: list[tuple[str, float, str, bool]], torch_t: float | None
) -> None:
    print(f"\n== {title}" + (f"   torch {torch_t:.4f} ms" if torch_t else ""))
    for label, ms, kernel, ok in rows:
        bw = nbytes / ms / 1e6 if nbytes else 0
        fl = flops / ms / 1e9 if flops else 0
        ratio = f"{torch_t / ms:.2f}x" if torch_t else "-"
        print(
            f"  {label:<22} {ms:8.4f} ms {bw:7.0f} GB/s {fl:6.2f} TF/s {ratio:>6} {'ok' if ok else 'WRONG'} {kernel[13:58]}"
        )
    sys.stdout.flush()


def _with(
    name: str, variant: str | None = None, wg: tuple[int, int, int] | None = None, **params: Any
) -> Callable[[Any], KernelChoice | None]:
    def f(node: Any) -> KernelChoice | None:
        k = node.kernel
        if k is None or node.op in (Op.INPUT, Op.VIEW):
            return None
        if name == "elementwise" and k.name != "elementwise":
            return None
        if name != "elementwise" and node.op not in (Op.MATMUL, Op.SUM, Op.MAX, Op.SOFTMAX):
            return None
        p = dict(k.params) if k.name == name else {}
        p.update(params)
        return KernelChoice(
            name, variant if variant is not None else k.variant, k.element, wg or k.workgroup, tuple(p.items())
        )

    return f


def sweep_elementwise(repeat: int, quick: bool) -> None:
    import tracer as tr

    n = 1 << 16 if quick else 1 << 26
    a, b = (
        np.random.default_rng(1).standard_normal(n, dtype=np.float32),
        np.random.default_rng(2).standard_normal(n, dtype=np.float32),
    )
    ta, tb = tr.tensor(a), tr.tensor(b)
    rows = []
    for wg in (64, 128, 256, 512, 1024):
        ms, k, ok = measure(
            ta + tb, a.astype(np.float64) + b if wg == 256 else None, _with("elementwise", wg=(wg, 1, 1)), repeat
        )
        rows.append((f"add wg{wg}", ms, k, ok))
    tt = None
    try:
        xa, xb = _t(a), _t(b)
        tt = torch_ms(lambda: xa + xb, repeat)
        rows.append(
            (
                "torch copy 256MB (x.clone)",
                torch_ms(lambda: xa.clone(), repeat) * 1.5,
                "2 x 256MB moved, scaled to 3x",
                True,
            )
        )
    except Exception as e:  # noqa: BLE001
        print("torch:", e)
    report("elementwise add 64M f32 (768 MB moved)", 3 * a.nbytes, 0, rows, tt)


def sweep_gemm(repeat: int, quick: bool) -> None:
    import tracer as tr
    from passes.select_kernels import GEMM_CONFIGS

    configs = dict(GEMM_CONFIGS)
    configs.update(
        {"b128k16": (128, 128, 16, (16, 16)), "b64x128": (64, 128, 16, (16, 8)), "b128x64": (128, 64, 16, (8, 16))}
    )
    rng = np.random.default_rng(3)
    shapes = (
        [((2, 3, 16, 8), (2, 3, 8, 16), False), ((128,), (128, 128), False)]
        if quick
        else [
            ((32, 12, 128, 64), (32, 12, 128, 64), True),  # q @ k.T
            ((32, 12, 128, 128), (32, 12, 128, 64), False),  # p @ v
            ((1024, 1024), (1024, 1024), False),
            ((2048, 2048), (2048, 2048), False),
            ((4096, 4096), (4096, 4096), False),
            ((4096, 1024), (1024, 4096), False),  # a transformer MLP, 4096 tokens
        ]
    )
    for sa, sb, trans_b in shapes:
        if len(sa) == 1:
            sa = (sa[0], sa[0])
        a = rng.standard_normal(sa, dtype=np.float32)
        b = rng.standard_normal(sb, dtype=np.float32)
        bb = np.swapaxes(b, -1, -2) if trans_b else b
        flops = 2 * int(np.prod(sa)) * bb.shape[-1]
        ref = a.astype(np.float64) @ bb if flops < 2e10 else None
        ta, tb = tr.tensor(a), tr.tensor(b)
        y = ta @ (tb.transpose(-1, -2) if trans_b else tb)
        rows = []
        for name, (tm, tn, tk, (wx, wy)) in configs.items():
            ov = _with("gemm_blocked", wg=(wx, wy, 1), config=name, tile_m=tm, tile_n=tn, tile_k=tk, group_m=8)
            ms, k, ok = measure(y, ref, ov, repeat)
            rows.append((name, ms, k, ok))
        ms, k, ok = measure(y, ref, None, repeat)
        rows.append(("selected", ms, k, ok))
        tt = None
        try:
            xa, xb = _t(a), _t(b)
            tt = torch_ms(lambda: xa @ (xb.transpose(-1, -2) if trans_b else xb), repeat)  # noqa: B023
        except Exception as e:  # noqa: BLE001
            print("torch:", e)
        report(f"gemm {sa}@{bb.shape}", 0, flops, rows, tt)


def sweep_gemv(repeat: int, quick: bool) -> None:
    """Every (wx, wy, unroll) for the GEMV shapes; prints the five best and the selected one."""
    import tracer as tr

    for dt in ("float32", "float16"):
        for k, n in ((256, 304), (130, 64)) if quick else ((4096, 4096), (4096, 11008)):
            x = np.random.default_rng(5).standard_normal((1, k), dtype=np.float32).astype(dt)
            w = np.random.default_rng(6).standard_normal((k, n), dtype=np.float32).astype(dt)
            ref = x.astype(np.float64) @ w.astype(np.float64)
            tx, tw = tr.tensor(x), tr.tensor(w)
            rows = []
            variants = ["n_contig", "n_contig_h8"] if dt == "float16" else ["n_contig"]
            for variant in variants:
                for wx in (1, 2, 4, 8, 16):
                    for wy in (32, 64, 128, 256):
                        for unroll in (4, 8):
                            if wx * wy > 1024 or wx * wy < 64:
                                continue
                            ov = _with("gemv_split", variant, (wx, wy, 1), unroll=unroll)
                            ms, kname, ok = measure(tx @ tw, ref, ov, repeat)
                            rows.append(
                                (f"{'h8' if variant.endswith('h8') else 'v'} wx{wx} wy{wy} u{unroll}", ms, kname, ok)
                            )
            rows.sort(key=lambda r: r[1] if r[3] else 1e9)
            bad = [r for r in rows if not r[3]]
            ms, kname, ok = measure(tx @ tw, ref, None, repeat)
            tt = None
            try:
                xx, xw = _t(x), _t(w)
                tt = torch_ms(lambda: xx @ xw, repeat)  # noqa: B023
            except Exception as e:  # noqa: BLE001
                print("torch:", e)
            report(
                f"gemv 1x{k}@{k}x{n} {dt}",
                w.nbytes + x.nbytes,
                2 * k * n,
                rows[:6] + bad[:3] + [("selected", ms, kname, ok)],
                tt,
            )


def sweep_rows(repeat: int, quick: bool) -> None:
    import tracer as tr

    for rows_, cols in ((16, 4096), (16, 1024)) if quick else ((8192, 4096), (8192, 1024)):
        x = np.random.default_rng(7).standard_normal((rows_, cols), dtype=np.float32)
        tx = tr.tensor(x)
        xx = None
        try:
            xx = _t(x)
        except Exception:  # noqa: BLE001
            pass
        for op in ("sum", "max"):
            ref = getattr(x.astype(np.float64), op)(-1)
            rows = []
            for wg in (128, 256, 512):
                for unroll in (2, 4, 8):
                    for sg in (True, False):
                        ov = _with("row_reduce", f"{op}_rows", (wg, 1, 1), unroll=unroll, subgroups=sg)
                        ms, k, ok = measure(getattr(tx, op)(axis=-1), ref, ov, repeat)
                        rows.append((f"row_reduce wg{wg} u{unroll} sg{int(sg)}", ms, k, ok))
            ms, k, ok = measure(getattr(tx, op)(axis=-1), ref, _with("reduce", f"{op}_rows", (256, 1, 1)), repeat)
            rows.append(("old reduce", ms, k, ok))
            tt = (
                torch_ms(lambda: getattr(xx, "amax" if op == "max" else op)(dim=-1), repeat) if xx is not None else None  # noqa: B023
            )  # noqa: B023
            report(f"{op} rows {rows_}x{cols}", x.nbytes + 4 * rows_, 0, rows, tt)
        e = np.exp(x - x.max(-1, keepdims=True))
        ref = e / e.sum(-1, keepdims=True)
        rows = []
        for wg in (128, 256, 512, 1024):
            if cols // 4 // wg > 8 or cols // 4 < wg // 4:
                continue
            for sg in (True, False):
                ms, k, ok = measure(
                    tx.softmax(-1), ref, _with("softmax_regs", "softmax", (wg, 1, 1), subgroups=sg), repeat
                )
                rows.append((f"softmax_regs wg{wg} sg{int(sg)}", ms, k, ok))
        ms, k, ok = measure(tx.softmax(-1), ref, _with("softmax", "softmax", (256, 1, 1)), repeat)
        rows.append(("old softmax", ms, k, ok))
        tt = torch_ms(lambda: xx.softmax(dim=-1), repeat) if xx is not None else None  # noqa: B023
        report(f"softmax {rows_}x{cols}", 2 * x.nbytes, 0, rows, tt)


def sweep_alloc(repeat: int, quick: bool) -> None:
    """What a run's fresh output buffer costs: create + zero-fill + sync, against zero-fill alone."""
    import time

    import wgpu

    from backend_wgpu import get_device
    from benchmarks.timing import ProgramTimer

    dev = get_device()
    timer = ProgramTimer(dev)
    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
    print("\n== fresh output buffers (wall ms per run, median)")
    for mib in (1, 16, 64, 256) if not quick else (1, 16):
        size = mib << 20
        kept = dev.device.create_buffer(size=size, usage=usage)
        results = {}
        for label, fresh in (("clear existing", False), ("create+clear", True)):
            samples = []
            for _ in range(max(5, repeat)):
                t0 = time.perf_counter()
                buf = dev.device.create_buffer(size=size, usage=usage) if fresh else kept
                enc = dev.device.create_command_encoder()
                enc.clear_buffer(buf, 0, size)
                dev.queue.submit([enc.finish()])
                timer.sync()
                samples.append((time.perf_counter() - t0) * 1e3)
                if fresh:
                    buf.destroy()
            results[label] = statistics.median(samples)
        print(
            f"  {mib:4d} MiB: clear existing {results['clear existing']:.3f} ms, create+clear {results['create+clear']:.3f} ms"
        )


SWEEPS = {
    "gemv": sweep_gemv,
    "gemm": sweep_gemm,
    "elementwise": sweep_elementwise,
    "rows": sweep_rows,
    "alloc": sweep_alloc,
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default=",".join(SWEEPS), help="comma-separated: " + ",".join(SWEEPS))
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    from backend_wgpu import get_device

    print("caps:", get_device().caps)
    for name in args.only.split(","):
        try:
            SWEEPS[name](args.repeat, args.quick)
        except Exception as e:  # noqa: BLE001  one broken sweep must not hide the others
            print(f"sweep {name} failed: {type(e).__name__}: {str(e)[:400]}")
        from tracer.realize import clear_program_cache

        clear_program_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
