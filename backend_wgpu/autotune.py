"""Autotuning: time each candidate configuration of a kernel on this adapter and keep the winner.

For each tunable node of a graph (today the matmuls: GEMMs, GEMVs; passes.select_kernels), tune_gemm
builds a graph of that one product (the same sizes, dtypes and operand layouts, random data),
compiles it once per candidate under a tuning table that names the candidate, so the normal
passes (select_kernels, split_k) build exactly what a tuned program will run, checks the answer
against numpy on the host, and times the candidates that pass with GPU timestamp queries
(backend_wgpu.profile; the wall clock where the adapter has none). The fastest passing
candidate wins; one whose answer differs, or that fails to compile, is recorded as rejected
and can never win. tune_graphs tunes every distinct problem of some graphs, saves the table
in the per-user cache (backend_wgpu.tuning_cache) and installs it on the device.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from backend_wgpu.device import Device, get_device
from backend_wgpu.program import Program
from backend_wgpu.tuning_cache import save_table
from ir.graph import Graph
from ir.node import Node
from ir.ops import InputArg, Op
from ir.tuning import TunedEntry, TuningTable
from ir.view import View
from passes import run_pipeline
from passes.dce import dce
from passes.dequantize_wide import dequantize_wide
from passes.fold_views import fold_views
from passes.fuse_attention import fuse_attention
from passes.select_kernels import (
    GemmProblem,
    QuantGemvProblem,
    builtin_matmul_config,
    gemm_problem,
    is_tunable_matmul,
    matmul_candidates,
    quant_matmul_problem,
)

Problem = GemmProblem | QuantGemvProblem

# |got - numpy| / max(1, max |numpy|) a candidate may reach: f32 accumulation over k in any order
TOLERANCE = {"float32": 1e-4, "float16": 4e-3}


@dataclass
class TuneResult:
    """One tuned problem: the entry kept, every passing candidate's time and why others were rejected."""

    key: str
    problem: str
    entry: TunedEntry
    times: dict[str, float] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)


def describe(p: Problem) -> str:
    if isinstance(p, QuantGemvProblem):
        return f"{p.m}x{p.n}x{p.k} {p.dtypes[1].value}"
    batch = f"{p.batch}x" if p.batch > 1 else ""
    return f"{batch}{p.m}x{p.n}x{p.k} {p.dtypes[0].value}"


def builtin_config(p: Problem, device: Device) -> str:
    return builtin_matmul_config(p, device.caps)


def _span(view: View) -> int:
    """Elements a buffer needs to hold every element `view` reads."""
    if any(d == 0 for d in view.shape):
        return 1
    return view.offset + sum((d - 1) * s for d, s in zip(view.shape, view.strides, strict=True) if s > 0) + 1


def problem_graph(p: Problem, rng: np.random.Generator) -> tuple[Graph, list[np.ndarray], np.ndarray]:
    """A graph of this one product over random data laid out as `p`'s views, its inputs and numpy's answer."""
    if isinstance(p, QuantGemvProblem):
        return quant_problem_graph(p, rng)
    nodes: list[Node] = []
    hosts: list[np.ndarray] = []
    for i, (view, dtype) in enumerate(((p.a, p.dtypes[0]), (p.b, p.dtypes[1]))):
        flat = rng.standard_normal(_span(view)).astype(dtype.np)
        hosts.append(flat)
        nodes.append(Node(2 * i, Op.INPUT, (), flat.shape, dtype, InputArg(i)))
        nodes.append(Node(2 * i + 1, Op.VIEW, (2 * i,), view.shape, dtype, view))
    out_shape = p.a.shape[:-2] + (p.m, p.n)
    nodes.append(Node(4, Op.MATMUL, (1, 3), out_shape, p.dtypes[2]))
    graph = Graph({n.id: n for n in nodes}, (4,))
    a, b = (_strided(h, v) for h, v in zip(hosts, (p.a, p.b), strict=True))
    return graph, hosts, np.matmul(a.astype(np.float64), b.astype(np.float64))


def quant_problem_graph(p: QuantGemvProblem, rng: np.random.Generator) -> tuple[Graph, list[np.ndarray], np.ndarray]:
    """x (m, k) @ w.T with w (n, k) quantized on the host (tr.quantize), and numpy's product with w's values."""
    import tracer as tr
    from ir.quant import dequantize
    from tracer.graph_builder import build_graph

    x = rng.standard_normal((p.m, p.k)).astype(p.dtypes[0].np)
    wq = tr.quantize(rng.standard_normal((p.n, p.k)).astype(np.float32), p.dtypes[1])
    values = dequantize(wq._lazy.host, p.dtypes[1], (p.n, p.k))
    # x1: x read through a stride of 2 (a column slice), as a strided x is
    tx = tr.tensor(x) if p.layout == "x4" else tr.tensor(np.repeat(x, 2, axis=1))[:, ::2]
    built = build_graph([(tx @ wq.T).astype(p.dtypes[2])._lazy])
    hosts = [lz.host for lz in built.inputs]
    return built.graph, hosts, x.astype(np.float64) @ values.astype(np.float64).T


def _strided(flat: np.ndarray, view: View) -> np.ndarray:
    item = flat.itemsize
    if any(d == 0 for d in view.shape):
        return np.zeros(view.shape, flat.dtype)
    return np.lib.stride_tricks.as_strided(
        flat[view.offset :], view.shape, tuple(s * item for s in view.strides), writeable=False
    )


def forced(device: Device, key: str, config: str) -> Any:
    """The device's caps with a tuning table that names `config` for `key` (the normal passes then build it)."""
    table = TuningTable(((key, TunedEntry(config, 0.0, "", 0.0)),), source="a candidate being tuned")
    return dataclasses.replace(device.caps, tuning=table)


def run_candidate(
    device: Device, graph: Graph, hosts: list[np.ndarray], caps: Any, repeats: int
) -> tuple[np.ndarray, float, Program]:
    """Compile `graph` under `caps`, run it once for its answer and time it (median over repeats)."""
    program = Program(run_pipeline(graph, caps).graph, device)
    inputs = [device.upload(h) for h in hosts]
    out = program.run(inputs)[0]
    node = graph[graph.outputs[0]]
    got = np.frombuffer(device.read(out), dtype=node.dtype.np)[: node.size].reshape(node.shape)
    seconds = program.profile(inputs=inputs, repeats=repeats).total_seconds
    return got, seconds, program


def check(got: np.ndarray, want: np.ndarray, dtype: str) -> str:
    """'' when `got` is numpy's answer within the dtype's tolerance, else what is wrong."""
    if got.shape != want.shape:
        return f"shape {got.shape}, numpy {want.shape}"
    g = got.astype(np.float64)
    if not np.all(np.isfinite(g)):
        return "non-finite values"
    err = float(np.abs(g - want).max()) if want.size else 0.0
    scale = max(1.0, float(np.abs(want).max())) if want.size else 1.0
    if err > TOLERANCE.get(dtype, 4e-3) * scale:
        return f"max |difference| {err:.3g} (scale {scale:.3g})"
    return ""


def tune_gemm(
    p: Problem,
    device: Device | None = None,
    repeats: int = 5,
    candidates: list[str] | None = None,
    progress: Callable[[str], None] | None = None,
    seed: int = 0,
) -> TuneResult:
    """Time every candidate for one GEMM problem; the fastest that gives numpy's answer wins."""
    device = device or get_device()
    key = p.tuning_key()
    graph, hosts, want = problem_graph(p, np.random.default_rng(seed))
    names = list(candidates if candidates is not None else matmul_candidates(p, device.caps))
    builtin = builtin_config(p, device)
    if builtin not in names:
        names.append(builtin)
    result = TuneResult(key, describe(p), TunedEntry(builtin, 0.0, builtin, 0.0))
    for name in names:
        try:
            got, seconds, _ = run_candidate(device, graph, hosts, forced(device, key, name), repeats)
            why = check(got, want, p.dtypes[2].value)
        except Exception as e:  # noqa: BLE001  a candidate that cannot compile or run is rejected, not fatal
            why, seconds = f"{type(e).__name__}: {e}".splitlines()[0][:200], 0.0
        if why:
            result.rejected[name] = why
        else:
            result.times[name] = seconds
        if progress is not None:
            said = f"rejected: {why}" if why else f"{seconds * 1e6:.1f} us"
            progress(f"  {result.problem} {name}: {said}")
    if not result.times:
        raise RuntimeError(f"autotune: no candidate for {key} gave numpy's answer: {result.rejected}")
    best = min(result.times, key=result.times.__getitem__)
    base = result.times.get(builtin, result.times[best])
    result.entry = TunedEntry(best, result.times[best], builtin, base, tuple(sorted(result.rejected)))
    return result


def gemm_keys(graph: Graph, caps: Any) -> list[str]:
    """The tuning keys of the GEMMs in a traced graph, as passes.split_k and select_kernels will see them."""
    g = dequantize_wide(fuse_attention(fold_views(dce(graph, caps), caps), caps), caps)
    return list(tunable_problems([g]))


def _static(view: View) -> bool:
    """Plain integers only: a view at a runtime offset (a position bound per call) has no stand-in graph."""
    return all(type(x) is int for x in (view.offset, *view.strides, *view.shape))


def tunable_problems(graphs: list[Graph]) -> dict[str, Problem]:
    """The distinct matmul problems (one per tuning key, the first seen) of graphs after dequantize_wide (the
    passes before it: fold_views's views; a quantized weight read by many rows already a float copy)."""
    found: dict[str, Problem] = {}
    for graph in graphs:
        for node in graph:
            quantized = node.op is Op.MATMUL and graph[node.srcs[1]].dtype.is_quantized
            q = quant_matmul_problem(graph, node) if quantized else None
            if q is not None:
                found.setdefault(q.tuning_key(), q)
            if is_tunable_matmul(graph, node):
                p = gemm_problem(graph, node)
                if _static(p.a) and _static(p.b):
                    found.setdefault(p.tuning_key(), p)
    return found


def tune_graphs(
    graphs: list[Graph],
    device: Device | None = None,
    repeats: int = 5,
    progress: Callable[[str], None] | None = None,
    save: bool = True,
    families: set[str] | None = None,
) -> list[TuneResult]:
    """Tune every distinct problem of `graphs` (of these kernel `families` only, when given: kernel
    names such as gemm_blocked, gemv, gemv_split, qgemv, qgemm_thin); keep the winners in the cache and on the device."""
    device = device or get_device()
    problems = {k: p for k, p in tunable_problems(graphs).items() if families is None or p.family in families}
    results = []
    table = device.caps.tuning
    for i, (key, p) in enumerate(problems.items()):
        if progress is not None:
            progress(f"[{i + 1}/{len(problems)}] {key}")
        result = tune_gemm(p, device, repeats, progress=progress)
        results.append(result)
        table = table.with_entry(key, result.entry)
    if results:
        if save:
            path = save_table(device.caps, table)
            table = dataclasses.replace(table, source=str(path))
        device.caps = dataclasses.replace(device.caps, tuning=table)
    return results
