"""Flash attention on the H200: checks against torch on the GPU, then times it against torch.

    python3 -m benchmarks.device.attention            # the H200 run (< 3 minutes)
    python3 -m benchmarks.device.attention --quick    # small shapes, any adapter (a smoke run)

Cases (issue 14's targets first): MiniLM's attention 32x12x128x64 with a (B, 1, 1, S) padding
mask, causal 1x32x2048x128, both float32 (TF32 off in torch), and the causal case in float16.
For each case every tile configuration of the flash kernel that fits the device is checked
against torch's F.scaled_dot_product_attention (max |difference| over max |torch|), then all
of them and torch are timed in the same process, interleaved: each block runs every contender
`--runs` times, and the median over blocks of each contender's block medians is reported.
wgjit is timed with timestamps around its compute pass (one dispatch), torch with CUDA events.
The last lines are the table: per case, each contender's median, its ratio to torch (> 1 is
faster than torch) and its rate (4 B H L S D flops, halved for causal).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

import tracer as tr
from backend_wgpu import Program, get_device
from benchmarks.timing import ProgramTimer, time_torch
from ir.ops import Op
from passes import run_pipeline
from tracer.graph_builder import build_graph


@dataclass(frozen=True)
class Case:
    name: str
    b: int
    h: int
    lq: int
    s: int
    d: int
    causal: bool
    padding: bool
    dtype: str = "float32"
    target: bool = True  # one of issue 14's targets (else for information)
    hkv: int = 0  # kv heads (grouped-query attention); 0: as many as query heads

    @property
    def flops(self) -> float:
        full = 4.0 * self.b * self.h * self.lq * self.s * self.d
        return full / 2 if self.causal else full


CASES = [
    Case("pad 32x12x128x64", 32, 12, 128, 128, 64, causal=False, padding=True),
    # MiniLM's own heads (384 wide, 12 heads): head dim 32
    Case("pad 32x12x128x32", 32, 12, 128, 128, 32, causal=False, padding=True, target=False),
    Case("causal 1x32x2048x128", 1, 32, 2048, 2048, 128, causal=True, padding=False),
    # the same without the causal mask: the kernel's rate with every block full (twice the work)
    Case("full 1x32x2048x128", 1, 32, 2048, 2048, 128, causal=False, padding=False, target=False),
    Case("causal f16 1x32x2048x128", 1, 32, 2048, 2048, 128, causal=True, padding=False, dtype="float16", target=False),
    # the ~1B decoder's prefill of 512 tokens (benchmarks/e2e): 32 query heads over 8 kv heads
    Case("prefill 1x32/8x512x64", 1, 32, 512, 512, 64, causal=True, padding=False, target=False, hkv=8),
    # a 7B-style prefill (head dim 128) of as few row blocks
    Case("prefill 1x32/8x512x128", 1, 32, 512, 512, 128, causal=True, padding=False, target=False, hkv=8),
]
QUICK = [
    Case("pad 2x3x40x64", 2, 3, 40, 40, 64, causal=False, padding=True),
    Case("causal 1x2x70x128", 1, 2, 70, 70, 128, causal=True, padding=False),
    Case("gqa causal 1x4/2x70x64", 1, 4, 70, 70, 64, causal=True, padding=False, hkv=2),
]

# tile configurations tried besides the rule's choice: (br, bc, tx, q in workgroup memory, k/v aliased, subgroups,
# next k/v block prefetched into registers[, v read from memory in p v[, loops unrolled[, pipelined[, causal
# workgroups row block major[, k swizzled[, q in registers]]]]]]; unrolled as the rule says where not given); those past the device's workgroup memory (48 KiB on the H200) or not dividing the head
# dim are left out. Run F (benchmarks/runs/2026-12-01-F) pruned the list: v from memory lost everywhere, tx 4
# and 16 mostly lost.
VARIANTS: list[tuple[int, ...]] = [
    # head dim 64 (MiniLM)
    (128, 32, 8, False, False, False, True),
    (128, 32, 8, False, False, False, True, False, True),  # the same, loops unrolled
    (128, 32, 8, False, False, False, False),
    (128, 32, 4, False, False, False, True),
    (128, 32, 8, False, True, False, True),
    (128, 16, 8, False, False, False, True),
    (128, 16, 4, False, False, False, True),
    (128, 32, 16, False, False, False, True),
    (64, 32, 8, True, False, False, False),
    (64, 32, 8, True, False, False, True),
    (64, 16, 8, False, False, False, True),
    (64, 16, 8, False, False, False, False),
    (64, 16, 8, True, False, False, True),
    (64, 32, 8, False, False, False, True, True),  # v from memory, for reference
    # head dim 128 (causal 2048)
    (128, 32, 8, False, True, False, False),
    (128, 32, 8, False, True, False, False, False, True),  # the same, loops unrolled
    (128, 32, 8, False, True, False, False, False, False, False, True),  # causal workgroups row block major
    (128, 32, 8, False, True, False, False, False, True, False, True),
    (128, 32, 8, False, True, False, True),
    (64, 32, 8, False, False, False, True),
    (64, 32, 8, False, False, False, True, False, True),  # the same, loops unrolled
    (64, 32, 8, False, False, False, True, False, False, False, True),  # causal workgroups row block major
    (64, 32, 8, False, False, False, False),
    (64, 32, 8, False, True, False, True),
    (64, 16, 8, False, False, False, True),
    (64, 16, 8, True, True, False, True),
    (128, 16, 8, False, False, False, True),
    (32, 32, 8, True, True, False, True),
    (32, 16, 8, True, False, False, True),
    (64, 32, 16, False, False, False, False),
    (64, 32, 8, False, False, True, False),
    (128, 32, 8, False, False, True, False),
    # 256 query rows (512 threads): each block of k and v serves twice the rows; k and v sharing a buffer
    (256, 16, 8, False, True, False, False, False, True, False, True),
    (256, 16, 8, False, True, False, False, False, True),
    (128, 16, 8, False, True, False, False, False, True, False, True),
    # subgroup row maxes (NVIDIA's 32-lane subgroups, known to the caps since run X): tx 16 halves each
    # thread's registers (o and s), which may leave room for the prefetch
    (128, 32, 8, False, True, True, False, False, True, False, True),
    (128, 32, 8, False, True, True, True, False, True, False, True),
    (128, 32, 16, False, True, True, False, False, True, False, True),
    (128, 32, 16, False, True, True, True, False, True, False, True),
    (128, 32, 16, False, True, False, False, False, True, False, True),
    (128, 32, 8, False, False, True, True, False, True),
    (128, 32, 16, False, False, True, True, False, True),
    (64, 32, 8, False, False, True, True, False, True, True, True),
    # k swizzled instead of padded (the 12th field): 64 rows by 64 keys, k and v sharing a buffer, fit 48 KiB
    # exactly (no padding mask's key range): twice the keys per q read and per barrier of 128x32
    (64, 64, 8, False, True, True, False, False, True, False, True, True),
    (64, 64, 8, False, True, True, True, False, True, False, True, True),
    (128, 32, 8, False, True, True, False, False, True, False, True, True),
    (128, 32, 8, False, True, True, False, False, True, False, False, True),
    (64, 64, 16, False, True, True, False, False, True, False, True, True),
    # q in registers, head dims split across the row group, scores reduced by subgroup shuffles (the 13th field)
    (128, 32, 8, False, True, True, False, False, True, False, True, False, True),
    (128, 32, 8, False, True, True, True, False, True, False, True, False, True),
    (128, 32, 16, False, True, True, False, False, True, False, True, False, True),
    (128, 16, 8, False, True, True, False, False, True, False, True, False, True),
    (128, 32, 8, False, False, True, False, False, True, False, True, False, True),
    (64, 32, 8, False, True, True, False, False, True, False, True, False, True),
    (64, 64, 8, False, True, True, False, False, True, False, True, False, True),
    # with k and v apart (k unpadded with q in registers: 48 KiB exactly at head dim 128): one barrier fewer a
    # block than aliased; with the prefetch; pipelined
    (128, 32, 8, False, False, True, True, False, True, False, True, False, True),
    (128, 32, 8, False, False, True, True, False, True, True, True, False, True),
    # pipelined: two barriers per block (br, bc, tx, q, a, sg, pf, vg, unrolled, pipelined)
    (128, 32, 8, False, False, False, True, False, True, True),
    (128, 32, 4, False, False, False, True, False, True, True),
    (64, 16, 8, False, False, False, True, False, True, True),
    (64, 32, 8, True, False, False, True, False, True, True),
    (64, 32, 8, False, False, False, True, False, True, True),
    (128, 16, 8, False, False, False, True, False, True, True),
    (32, 32, 8, False, False, False, True, False, True, True),
]


def inputs(case: Case, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((case.b, case.h, case.lq, case.d)).astype(case.dtype)
    hkv = case.hkv or case.h
    k = rng.standard_normal((case.b, hkv, case.s, case.d)).astype(case.dtype)
    v = rng.standard_normal((case.b, hkv, case.s, case.d)).astype(case.dtype)
    out = {"q": q, "k": k, "v": v}
    if case.padding:  # each sequence keeps a prefix of its keys, as a padded batch does
        lengths = rng.integers(case.s // 4, case.s + 1, case.b)
        lengths[0] = case.s
        out["keep"] = (np.arange(case.s)[None, :] < lengths[:, None]).reshape(case.b, 1, 1, case.s)
    return out


def wgjit_program(case: Case, data: dict[str, np.ndarray], variant: tuple | None) -> tuple[Program, list, str]:
    """The compiled one-dispatch program (the rule's tile, or `variant`), its input buffers, its kernel label."""
    dev = get_device()
    t = {name: tr.tensor(a).realize() for name, a in data.items()}
    y = tr.nn.scaled_dot_product_attention(t["q"], t["k"], t["v"], mask=t.get("keep"), is_causal=case.causal)
    built = build_graph([y._lazy])
    graph = run_pipeline(built.graph, dev.caps).graph
    if variant is not None:
        graph = graph.with_nodes(_forced(n, variant) if n.op is Op.ATTENTION else n for n in graph)
    program = Program(graph, dev)
    (d,) = [d for d in program.dispatches if d.op == "attention"]
    return program, [lz.buffer for lz in built.inputs], f"{d.kernel}[{d.variant}]"


def _forced(node: Any, variant: tuple) -> Any:
    from backend_wgpu.kernels.attention.flash import FlashAttentionKernel

    br, bc, tx, q_smem, kv_alias, sg, pf, *more = variant
    defaults = [False, node.kernel.param("un"), False, False, False, False]
    vg, un, pl, lpt, sw, qr = (more + defaults[len(more) :])[:6]
    dk, dv = FlashAttentionKernel.padded_dims(node.kernel.param("dk"), node.kernel.param("dv"), tx)
    params = (("br", br), ("bc", bc), ("tx", tx), ("dk", dk), ("dv", dv))
    params += (("q_smem", q_smem), ("kv_alias", kv_alias), ("sg", sg), ("pf", pf), ("vg", vg), ("un", un))
    params += (("pl", pl), ("lpt", lpt), ("sw", sw), ("qr", qr))
    return dataclasses.replace(
        node, kernel=dataclasses.replace(node.kernel, params=params, workgroup=(br // 4 * tx, 1, 1))
    )


def fits(variant: tuple, case: Case) -> bool:
    from backend_wgpu.kernels.attention.flash import FlashAttentionKernel

    caps = get_device().caps
    br, bc, tx, q_smem, kv_alias, sg, _pf, *more = variant
    vg, sw = bool(more and more[0]), len(more) > 4 and more[4]
    qr = len(more) > 5 and more[5]
    if sg and not (caps.subgroups and caps.subgroup_size >= tx):
        return False  # the row max's shuffles need the tx threads of a row group in one subgroup
    dk, dv = FlashAttentionKernel.padded_dims(case.d, case.d, tx)
    if sw and dk % 32:
        return False
    if qr and not (sg and dk % (4 * tx) == 0):
        return False  # q in registers: shuffles across the row group, the head dims split evenly
    smem = FlashAttentionKernel.smem_bytes(br, bc, tx, dk, dv, q_smem, kv_alias, sg, vg, sw or qr, case.padding)
    return smem <= caps.max_workgroup_storage and br // 4 * tx <= caps.max_invocations and case.d % (4 * tx) == 0


def torch_fn(case: Case, data: dict[str, np.ndarray], device: str) -> tuple[Any, Any]:
    import torch
    import torch.nn.functional as F

    t = {n: torch.from_numpy(a).to(device) for n, a in data.items()}
    mask = t.get("keep")
    gqa = {"enable_gqa": True} if case.hkv and case.hkv != case.h else {}

    def run() -> Any:
        return F.scaled_dot_product_attention(t["q"], t["k"], t["v"], attn_mask=mask, is_causal=case.causal, **gqa)

    return run, t


def numpy_fn(case: Case, data: dict[str, np.ndarray]) -> Any:
    """The reference in float64 on the host, for a smoke run where torch is not installed."""

    def run() -> np.ndarray:
        q, k, v = (data[n].astype(np.float64) for n in "qkv")
        k, v = (np.repeat(x, case.h // x.shape[1], axis=1) for x in (k, v))
        s = q @ np.swapaxes(k, -1, -2) / np.sqrt(case.d)
        if case.causal:
            s = np.where(np.arange(case.s)[None, :] <= np.arange(case.lq)[:, None] + case.s - case.lq, s, -np.inf)
        if case.padding:
            s = np.where(data["keep"], s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        return (p / p.sum(-1, keepdims=True)) @ v

    return run


def read(program: Program, buffers: list, shape: tuple, dtype: str) -> np.ndarray:
    dev = get_device()
    out = program.run(buffers)[0]
    return np.frombuffer(dev.read(out), dtype=dtype).reshape(shape).astype(np.float64)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small shapes: a smoke run on any adapter")
    ap.add_argument("--blocks", type=int, default=7)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--only", default="", help="the cases whose names contain one of these (comma-separated)")
    ap.add_argument("--flags", default="", help="the rule and the tiles whose flags include these, e.g. `au`")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:  # a smoke run without torch: numpy on the host is the reference and the yardstick
        torch = None
    if torch is not None:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    cuda = torch is not None and torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    dev = get_device()
    timer = ProgramTimer(dev)
    who = f"torch {torch.__version__} on {device}" if torch is not None else "no torch: numpy on the host instead"
    print(f"adapter: {dev.caps.name} ({dev.caps.backend}); {who}", flush=True)
    t_start = time.perf_counter()
    rows: list[tuple[str, str, float, float, float, str]] = []
    failures = 0
    for case in [c for c in (QUICK if args.quick else CASES) if any(o in c.name for o in args.only.split(","))]:
        if case.dtype == "float16" and not dev.caps.shader_f16:
            print(f"{case.name}: skipped (no shader-f16)")
            continue
        data = inputs(case)
        if torch is not None:
            run_torch, _ = torch_fn(case, data, device)
            ref = run_torch().float().cpu().numpy().astype(np.float64)
        else:
            run_torch = numpy_fn(case, data)
            ref = run_torch()
        scale = float(np.abs(ref).max())
        tol = 2e-3 if case.dtype == "float16" else 1e-4
        contenders: dict[str, Any] = {}
        for variant in [None] + [v for v in VARIANTS if fits(v, case)]:
            program, buffers, label = wgjit_program(case, data, variant)
            name = ("rule " if variant is None else "") + label.split("[", 1)[1].rstrip("]")
            if variant is not None and any(c[2] == label for c in contenders.values()):
                continue  # the rule's own tile
            if variant is not None and not set(args.flags) <= set(label.split(":")[3]):
                continue
            err = float(np.abs(read(program, buffers, ref.shape, case.dtype) - ref).max()) / scale
            ok = err <= tol
            failures += not ok
            print(f"{case.name}: {name}: max |diff| / max |torch| = {err:.2e} {'ok' if ok else 'FAIL'}", flush=True)
            if ok:
                contenders[name] = (program, buffers, label)
        samples: dict[str, list[float]] = {n: [] for n in [*contenders, "torch"]}
        for _ in range(args.blocks):
            for name, (program, buffers, _) in contenders.items():
                t = timer.time(
                    lambda w, p=program, b=buffers: p.run(b, timestamp_writes=w) if w else p.run(b), 2, args.runs
                )
                samples[name].append(t.median)
            if cuda:
                samples["torch"].append(time_torch(run_torch, 2, args.runs).median)
            else:
                t0 = time.perf_counter()
                run_torch()
                samples["torch"].append((time.perf_counter() - t0) * 1e3)
        torch_ms = statistics.median(samples["torch"])
        for name, s in samples.items():
            ms = statistics.median(s)
            rows.append((case.name, name, ms, torch_ms / ms, case.flops / ms / 1e9, "target" if case.target else ""))
    print(f"\n(total {time.perf_counter() - t_start:.0f} s; {failures} check failures)")
    print(f"{'case':<26} {'contender':<48} {'median ms':>10} {'vs torch':>9} {'TFLOP/s':>8}")
    for case, name, ms, ratio, tflops, tag in rows:
        print(f"{case:<26} {name:<48} {ms:>10.4f} {ratio:>8.2f}x {tflops:>8.2f} {tag}")
    best = {}
    for case, name, _ms, ratio, _, _ in rows:
        if name != "torch" and (case not in best or ratio > best[case][1]):
            best[case] = (name, ratio)
    for case, (name, ratio) in best.items():
        print(f"best {case}: {name} {ratio:.2f}x torch")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
