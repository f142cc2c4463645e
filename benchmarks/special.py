"""The suites that are not one op against numpy and torch: compile time, dispatch overhead, the model.

compile  - trace + passes + codegen of a graph of N ops: cold (no cached program, no cached
           pipeline), pipelines cached (a new program whose shaders were compiled before),
           and warm (a structurally identical graph: the program cache answers).
dispatch - wall time per dispatch of a graph of N tiny kernels, against the floor: a
           hand-written wgpu-py loop issuing N dispatches of a trivial shader in one pass,
           one submit, with every bind group made beforehand.
model    - the MiniLM forward of examples/minilm.py (issue 3), when that file exists.
"""

from __future__ import annotations

import importlib.util
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import wgpu

from benchmarks.timing import Timing, time_host


# --- compile -----------------------------------------------------------------------------------------
def _trace_mlp(n_ops: int, seed: int = 0) -> Any:
    """A graph of n_ops ops cycling through matmul, bias add, gelu and softmax (4 kernel kinds)."""
    import tracer as tr

    x = tr.tensor(np.random.default_rng(seed).standard_normal((32, 64), dtype=np.float32))
    w = tr.tensor(np.random.default_rng(seed + 1).standard_normal((64, 64), dtype=np.float32) / 8)
    b = tr.tensor(np.zeros(64, np.float32))
    h = x
    for i in range(n_ops):
        h = [lambda v: v @ w, lambda v: v + b, lambda v: v.gelu(), lambda v: v.softmax(axis=-1)][i % 4](h)
    return h


def compile_suite(ctx: Any, sizes: dict[str, Any]) -> list[dict[str, Any]]:
    from tracer.graph_builder import build_graph
    from tracer.realize import clear_program_cache, program_for

    records = []
    repeat = max(3, min(ctx.settings.repeat, 10))
    for n in sizes["ops"]:
        phases: dict[str, dict[str, list[float]]] = {"cold": {}, "pipelines_cached": {}, "warm": {}}
        for mode in phases:
            for _ in range(repeat):
                if mode != "warm":
                    clear_program_cache()
                if mode == "cold":
                    ctx.device.pipelines.clear()
                t0 = time.perf_counter()
                y = _trace_mlp(n)
                t1 = time.perf_counter()
                graph = build_graph([y._lazy]).graph
                t2 = time.perf_counter()
                program = program_for(graph)
                t3 = time.perf_counter()
                passes = sum(program.pass_seconds.values()) if mode != "warm" else 0.0
                codegen = program.compile_seconds if mode != "warm" else 0.0
                p = phases[mode]
                for key, v in (
                    ("trace", t1 - t0),
                    ("build", t2 - t1),
                    ("passes", passes),
                    ("codegen", codegen),
                    ("total", t3 - t0),
                ):
                    p.setdefault(key, []).append(v * 1e3)
        for mode, p in phases.items():
            total = p["total"]
            rec = {
                "suite": "compile", "case": mode, "shape": f"{n} ops", "dtype": "float32", "size": n,
                "device": ctx.device.caps.name, "bytes": 0, "flops": 0,
                "ours": {"ms": statistics.median(total), "timer": "wall", "wall_ms": statistics.median(total), "gpu_ms": None,
                         "spread_pct": Timing(wall_ms=total).spread, "runs": len(total)},
                "ours_ms": statistics.median(total), "comparators": {}, "ratios": {}, "gbps": None, "gflops": None,
                "phases_ms": {k: statistics.median(v) for k, v in p.items()},
                "dispatches": len(program.dispatches), "kernels": sorted({d.kernel for d in program.dispatches}),
                "verified": True, "max_rel_err": 0.0,
                "notes": ["trace = Python op calls; build = Lazy DAG to ir.Graph; passes; codegen = WGSL, pipelines, uniform"],
            }  # fmt: skip
            records.append(rec)
            ctx.settings.log(
                f"  compile/{mode} {n} ops: {rec['ours_ms']:.2f} ms "
                + str({k: round(v, 2) for k, v in rec["phases_ms"].items()})
            )
        clear_program_cache()
    return records


# --- dispatch -------------------------------------------------------------------------------------------
_FLOOR_WGSL = """
struct Params { n: u32, scale: f32 };
@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;
@group(0) @binding(2) var<uniform> params: Params;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  if (gid.x < params.n) { dst[gid.x] = src[gid.x] * params.scale; }
}
"""


def _floor_loop(device: Any, n_dispatch: int, elems: int, groups: int) -> Any:
    """The hand-written floor: everything prepared once; a run encodes N dispatches in one pass."""
    dev = device.device
    module = dev.create_shader_module(code=_FLOOR_WGSL)
    pipeline = dev.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": "main"})
    layout = pipeline.get_bind_group_layout(0)
    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
    bufs = [dev.create_buffer(size=4 * elems, usage=usage) for _ in range(2)]
    align = device.caps.uniform_align
    raw = bytearray()
    for _ in range(n_dispatch):
        raw += np.array([elems], np.uint32).tobytes() + np.array([1.0], np.float32).tobytes()
        raw += b"\0" * ((-len(raw)) % align)
    uniform = dev.create_buffer_with_data(data=bytes(raw), usage=wgpu.BufferUsage.UNIFORM)
    groups_ = [
        dev.create_bind_group(
            layout=layout,
            entries=[
                {"binding": 0, "resource": {"buffer": bufs[i % 2], "offset": 0, "size": 4 * elems}},
                {"binding": 1, "resource": {"buffer": bufs[(i + 1) % 2], "offset": 0, "size": 4 * elems}},
                {"binding": 2, "resource": {"buffer": uniform, "offset": i * align, "size": 8}},
            ],
        )
        for i in range(n_dispatch)
    ]

    def run(writes: dict | None = None) -> None:
        enc = dev.create_command_encoder()
        cpass = enc.begin_compute_pass(timestamp_writes=writes) if writes else enc.begin_compute_pass()
        cpass.set_pipeline(pipeline)
        for g in groups_:
            cpass.set_bind_group(0, g)
            cpass.dispatch_workgroups(groups, 1, 1)
        cpass.end()
        device.queue.submit([enc.finish()])

    return run


def program_and_inputs(t: Any) -> tuple[Any, list[Any]]:
    """The compiled program that computes tensor t and its input buffers (uploaded), to time it."""
    from tracer.graph_builder import build_graph
    from tracer.realize import device_buffer, program_for

    built = build_graph([t._lazy])
    return program_for(built.graph), [device_buffer(lz) for lz in built.inputs]


def dispatch_suite(ctx: Any, sizes: dict[str, Any]) -> list[dict[str, Any]]:
    import tracer as tr
    from benchmarks.timing import time_program
    from tracer.realize import clear_program_cache

    s = ctx.settings
    records = []
    rows, cols = 16, 64
    for n in sizes["n"]:
        x0 = np.random.default_rng(0).standard_normal((rows, cols), dtype=np.float32)
        x = tr.tensor(x0)
        y = x
        for _ in range(n):  # softmax after softmax: nothing fuses, each is its own dispatch
            y = y.softmax(axis=-1)
        program, buffers = program_and_inputs(y)
        got = np.frombuffer(ctx.device.read(program.run(buffers)[0]), np.float32).reshape(rows, cols)
        ref = x0.astype(np.float64)
        for _ in range(n):
            ref = np.exp(ref - ref.max(-1, keepdims=True))
            ref /= ref.sum(-1, keepdims=True)
        ok = bool(np.allclose(got, ref, rtol=1e-4, atol=1e-6))
        nd = len(program.dispatches)
        ours = time_program(program, buffers, ctx.timer, s.warmup, s.repeat)
        floor_run = _floor_loop(ctx.device, nd, rows * cols, 1)
        floor = ctx.timer.time(floor_run, s.warmup, s.repeat)
        per = {k: v / nd * 1e3 for k, v in (("ours_wall", ours.wall_median), ("floor_wall", floor.wall_median))}
        rec = {
            "suite": "dispatch", "case": "softmax_chain", "shape": f"{nd} dispatches", "dtype": "float32", "size": nd,
            "device": ctx.device.caps.name, "bytes": 0, "flops": 0,
            "ours": {"ms": ours.wall_median, "timer": "wall", "wall_ms": ours.wall_median,
                     "gpu_ms": statistics.median(ours.gpu_ms) if ours.gpu_ms else None, "spread_pct": ours.spread, "runs": len(ours.wall_ms)},
            "ours_ms": ours.wall_median,
            "comparators": {"wgpu_floor": {"ms": floor.wall_median, "timer": "wall", "wall_ms": floor.wall_median,
                                           "gpu_ms": statistics.median(floor.gpu_ms) if floor.gpu_ms else None,
                                           "spread_pct": floor.spread, "runs": len(floor.wall_ms)}},
            "ratios": {"wgpu_floor": floor.wall_median / ours.wall_median},
            "us_per_dispatch": {"ours": per["ours_wall"], "wgpu_floor": per["floor_wall"]},
            "overhead_vs_floor": per["ours_wall"] / per["floor_wall"],
            "gbps": None, "gflops": None, "dispatches": nd, "kernels": sorted({f"{d.kernel}[{d.variant}]" for d in program.dispatches}),
            "verified": ok, "max_rel_err": float(np.max(np.abs(got - ref))),
            "notes": ["wall time per run (submit to result ready) over the dispatch count; the floor reuses prepared bind groups"],
        }  # fmt: skip
        ctx.settings.log(
            f"  dispatch/{nd}: ours {per['ours_wall']:.2f} us/dispatch, floor {per['floor_wall']:.2f} us/dispatch"
        )
        records.append(rec)
        clear_program_cache()
    return records


# --- model ------------------------------------------------------------------------------------------------
def _load_minilm() -> Any:
    path = Path(__file__).resolve().parent.parent / "examples" / "minilm.py"
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location("wgjit_examples_minilm", path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def model_suite(ctx: Any, sizes: dict[str, Any]) -> list[dict[str, Any]]:
    """MiniLM: the encoder forward (batch x seq tokens) as one program, timed like an op case; then encode().

    Checked by meaning: the embeddings are unit vectors and "A man is eating food." is
    closer to "A man is eating pasta." than to "The sky is blue.".
    """
    try:
        minilm = _load_minilm()
        model = minilm._model() if minilm is not None and hasattr(minilm, "_model") else None
    except (Exception, SystemExit) as e:  # noqa: BLE001  its weights or packages may be missing
        ctx.notes.append(
            f"model skipped: examples/minilm.py could not load the model ({type(e).__name__}: {str(e)[:200]})"
        )
        return []
    if model is None:
        ctx.notes.append("model skipped: examples/minilm.py (issue 3) is not in this build")
        return []
    from benchmarks.timing import time_program
    from tracer import realize as tr_realize

    s = ctx.settings
    batch, seq = sizes["batch"], sizes["seq"]
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 20000, (batch, seq)).astype(np.int32)
    types = np.zeros_like(ids)
    mask = np.ones_like(ids)
    mask[1::2, seq * 3 // 4 :] = 0  # every other row padded: the attention mask is exercised
    tr_realize(*model.w.values())  # weights in the compute dtype once, outside the timed forward
    emb = minilm.encode(["A man is eating food.", "A man is eating pasta.", "The sky is blue."])
    cos = emb @ emb.T
    ok = bool(np.allclose(np.linalg.norm(emb, axis=-1), 1.0, atol=1e-4) and cos[0, 1] > cos[0, 2] + 0.2)
    hidden = model.forward(ids, types, mask)
    program, buffers = program_and_inputs(hidden)
    out = np.frombuffer(ctx.device.read(program.run(buffers)[0]), np.float32)
    ok = ok and bool(np.isfinite(out).all())
    fwd = time_program(program, buffers, ctx.timer, s.warmup, min(s.repeat, 10))
    flops = 2 * 10_616_832 * batch * seq  # the 6 layers' linear weights, 2 flops each per token (attention not counted)
    base = {"device": ctx.device.caps.name, "dtype": "float32", "size": batch * seq, "comparators": {}, "ratios": {},
            "gbps": None, "verified": ok, "max_rel_err": 0.0}  # fmt: skip
    rec = base | {
        "suite": "model", "case": "minilm_forward", "shape": f"{batch}x{seq} tokens", "bytes": 0, "flops": flops,
        "ours": {"ms": fwd.median, "timer": fwd.timer, "wall_ms": fwd.wall_median,
                 "gpu_ms": statistics.median(fwd.gpu_ms) if fwd.gpu_ms else None, "spread_pct": fwd.spread, "runs": len(fwd.samples)},
        "ours_ms": fwd.median, "gflops": flops / (fwd.median * 1e6),
        "dispatches": len(program.dispatches), "kernels": sorted({f"{d.kernel}" for d in program.dispatches}),
        "notes": ["the encoder's forward as one program (random token ids, half the rows padded); flops: linear layers only"],
    }  # fmt: skip
    if ctx.torch is not None:
        _torch_bert(ctx, minilm, rec, ids, types, mask, out.reshape(batch, seq, -1))
    sentences = ["the quick brown fox jumps over the lazy dog " * (seq // 10)] * batch
    enc = time_host(lambda: minilm.encode(sentences), 1, min(s.repeat, 5))
    rec2 = base | {"comparators": {}, "ratios": {},
        "suite": "model", "case": "minilm_encode", "shape": f"{batch} sentences", "bytes": 0, "flops": 0, "gflops": None,
        "ours": {"ms": enc.median, "timer": "wall", "wall_ms": enc.wall_median, "gpu_ms": None, "spread_pct": enc.spread,
                 "runs": len(enc.wall_ms)},
        "ours_ms": enc.median, "dispatches": None, "kernels": [],
        "notes": ["wall time of minilm.encode: tokenize, trace, forward, pool, read back"],
    }  # fmt: skip
    ctx.settings.log(
        f"  model/minilm forward {batch}x{seq}: {fwd.median:.3f} ms ({len(program.dispatches)} dispatches)"
    )
    return [rec, rec2]


def _torch_bert(
    ctx: Any, minilm: Any, rec: dict[str, Any], ids: np.ndarray, types: np.ndarray, mask: np.ndarray, ours: np.ndarray
) -> None:
    """torch eager on CUDA running the same weights through transformers' BertModel, side by side."""
    from benchmarks.harness import _ratios, _summary
    from benchmarks.timing import time_torch

    torch = ctx.torch
    try:
        from transformers import BertModel

        bert = BertModel.from_pretrained(str(minilm.model_dir()), torch_dtype=torch.float32).cuda().eval()
    except Exception as e:  # noqa: BLE001  transformers may be missing; say so
        rec["notes"].append(f"torch comparator skipped: {type(e).__name__}: {str(e)[:160]}")
        return
    t_ids, t_types, t_mask = (torch.from_numpy(a.astype(np.int64)).cuda() for a in (ids, types, mask))

    def forward() -> Any:
        with torch.no_grad():
            return bert(input_ids=t_ids, attention_mask=t_mask, token_type_ids=t_types).last_hidden_state

    theirs = forward().float().cpu().numpy()
    valid = mask.astype(bool)  # padded positions are don't-care in both
    err = float(np.abs(theirs[valid] - ours[valid]).max())
    s = ctx.settings
    rec["comparators"]["torch"] = _summary(time_torch(forward, s.warmup, min(s.repeat, 10))) | {"verified": err < 1e-3}
    rec["notes"].append(
        f"torch: transformers BertModel eager, same weights; max |ours - torch| on real tokens {err:.2e}"
    )
    _ratios(rec)
