"""The decoder workloads: a 128-token prefill, then decoding token by token (random seeded weights).

wgjit runs examples/llama.py two ways: `lazy`, the natural loop (`index_write` at the
position, attention over `cache[:, :, :pos + 1]`) with the position a runtime integer
(`tr.dynamic`), which compiles one program per bucket of the attended length (powers of
two), not per token; and `jit`, the same step under `@tr.jit` (`Llama.step_into_jit`: the
caches are arguments written in place, one trace per bucket, replayed per token). A decode call is one token: the step plus
reading back the next id (greedy, argmax on the GPU), which the next call feeds in.
WGJIT_E2E_WEIGHTS=q8_0 (or q4_0, q4_k, q6_k, q4_k_m) runs wgjit with the matrices quantized (tr.quantize) and
gives torch and the check their dequantized values; the default, f32, keeps them float32;
f16 runs both wgjit and torch in float16 (weights, activations, cache).
torch runs the same architecture eagerly and as a replayed CUDA graph
(benchmarks/e2e/torch_llama.py). The lazy loop's tokens each trace the step again (its
host cost); the record says how many programs the decode case compiled.
"""

from __future__ import annotations

import gc
import os
import statistics
import time
from typing import Any

import numpy as np

from benchmarks.e2e.blocks import Contender, interleave
from benchmarks.e2e.common import gpu_time_of, record, summary, torch_device, torch_gpu_ms

CONFIGS = {  # layers, dim, heads, kv heads, ff, vocab, ctx
    "12L": (12, 768, 12, 4, 2048, 32000, 512),
    "1B": (16, 2048, 32, 8, 8192, 32000, 1024),
    "tiny": (2, 64, 4, 2, 128, 256, 24),
}


def config(name: str) -> Any:
    from examples.llama import LlamaConfig

    layers, dim, heads, kv, ff, vocab, ctx = CONFIGS[name]
    return LlamaConfig("LlamaForCausalLM", vocab, dim, layers, heads, kv, dim // heads, ff, 1e-5, max_positions=ctx)


def describe(cfg: Any) -> str:
    return (
        f"{cfg.layers} layers, d {cfg.dim}, {cfg.heads}/{cfg.kv_heads} heads, ff {cfg.ff}, vocab {cfg.vocab}, "
        f"ctx {cfg.max_positions}"
    )


WEIGHTS = ("f32", "f16", "q8_0", "q4_0", "q4_k", "q6_k", "q4_k_m")


def weights_format() -> str:
    """WGJIT_E2E_WEIGHTS: f32 (the default), f16, q8_0, q4_0, q4_k, q6_k or q4_k_m (rows of whole 256: not the tiny config)."""
    fmt = os.environ.get("WGJIT_E2E_WEIGHTS", "f32").strip() or "f32"
    if fmt not in WEIGHTS:
        raise ValueError(f"WGJIT_E2E_WEIGHTS={fmt!r}: choose one of {', '.join(WEIGHTS)}")
    return fmt


def quantized(weights: dict[str, np.ndarray], cfg: Any, fmt: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """wgjit's weights with the matrices quantized, and the values they hold as float32 (for torch, the check)."""
    import tracer as tr
    from examples import llama as L

    ours = L.quantize_weights(weights, cfg, fmt)
    held = {n: ours[n].astype(tr.float32).numpy() if n in L.quantized_names(cfg) else w for n, w in weights.items()}
    return ours, held


# --- wgjit's two decode loops ----------------------------------------------------------------------


class JitDecode:
    """The `@tr.jit` step (`Llama.step_into_jit`): the caches written in place at a runtime position;
    positions wrap after prefill. `where_form=True` runs the older `Llama.step_jit` (the whole
    cache rewritten through `where` each token) instead. `ahead=True` runs a token ahead, as
    examples/generate.py does: a call submits step t+1, fed with id t on the GPU, then reads id t
    (its copy started when step t was submitted: Tensor.copy_to_host_async)."""

    def __init__(self, model: Any, prompt: list[int], where_form: bool = False, ahead: bool = False) -> None:
        self.model, self.prompt, self.where_form, self.ahead = model, prompt, where_form, ahead
        self.reset()

    def reset(self) -> None:
        import tracer as tr

        out = self.model.prefill_jit(tr.tensor(np.array([self.prompt], np.int32)), *self.model.empty_cache().tensors())
        self.cache, self.pos = list(out[2:]), len(self.prompt)
        self.pending = out[1].copy_to_host_async() if self.ahead else None
        self.token = 0 if self.ahead else int(out[1].numpy()[0])

    def prepare(self, n: int) -> None:
        if self.pos + n > self.model.ctx:
            self.reset()

    def inputs(self) -> tuple[Any, Any]:
        import tracer as tr

        return tr.tensor(np.array([[self.token]], np.int32)), tr.tensor(np.array([self.pos], np.int32))

    def __call__(self) -> int:
        import tracer as tr

        if self.ahead:
            following = self.model.step_into_jit(self.pending, tr.dynamic(self.pos), *self.cache)[1]
            following.copy_to_host_async()
            self.token = int(self.pending.numpy()[0])
            self.pending = following
        elif self.where_form:
            out = self.model.step_jit(*self.inputs(), *self.cache)
            self.cache = list(out[2:])
            self.token = int(out[1].numpy()[0])
        else:
            ids = tr.tensor(np.array([[self.token]], np.int32))
            out = self.model.step_into_jit(ids, tr.dynamic(self.pos), *self.cache)
            self.token = int(out[1].numpy()[0])
        self.pos += 1
        return self.token

    def _held_trace(self) -> tuple[list[tuple[Any, Any]], list[Any]]:
        """The compiled traces of step_into_jit that hold the next step's call (with their buffers), and its leaves."""
        import tracer as tr

        ids, _ = self.inputs()
        jitted = self.model.step_into_jit
        leaves = [ids, tr.dynamic(self.pos), *self.cache]  # the call's leaves: its positional arguments
        traces = [*jitted.traces.values(), *(t for ts in jitted._others.values() for t in ts)]
        return [(t, b) for t in traces if t.program is not None and not isinstance(b := t.bind(leaves), str)], leaves

    def gpu_time(self, ctx: Any) -> Any:
        """GPU time of one pass of the program the jit replays for the next step (a diagnostic;
        benchmarks.e2e.common.gpu_time_of for the where form): it writes the caches at the next
        position, which the next real step writes again."""
        import tracer as tr

        if self.where_form:
            ids, _ = self.inputs()
            return gpu_time_of(ctx, self.model.step(ids, tr.tensor(np.array([self.pos], np.int32)), *self.cache))
        held, leaves = self._held_trace()
        if not held:  # the next position is the first of a bucket of the attended length: one real step compiles it
            self.prepare(2)
            self()
            held, leaves = self._held_trace()
        if not held:
            raise RuntimeError("JitDecode.gpu_time: no trace of step_into_jit holds this call (run a step first)")
        (trace, buffers), ints = held[0], held[0][0].runtime_ints(leaves)
        program = trace.program
        t = ctx.timer.time(lambda writes: program.run(buffers, timestamp_writes=writes, ints=ints), 3, 10)
        return (statistics.median(t.gpu_ms) if t.gpu_ms else None, len(program.dispatches))


class LazyDecode:
    """The natural loop over a KVCache that `step_lazy` writes in place."""

    def __init__(self, model: Any, prompt: list[int]) -> None:
        self.model, self.prompt = model, prompt
        self.reset()

    def reset(self) -> None:
        import tracer as tr
        from examples.llama import KVCache

        out = self.model.prefill(tr.tensor(np.array([self.prompt], np.int32)), *self.model.empty_cache().tensors())
        self.cache = KVCache.from_tensors(out[2:], len(self.prompt))
        self.token = int(out[1].numpy()[0])

    def prepare(self, n: int) -> None:
        if self.cache.length + n > self.model.ctx:
            self.reset()

    def __call__(self) -> int:
        import tracer as tr

        ids = tr.tensor(np.array([[self.token]], np.int32))
        argmax = self.model.step_lazy(ids, self.cache.length, self.cache)[1]  # the logits are not kept
        self.token = int(argmax.numpy()[0])
        return self.token


class TorchDecode:
    """torch eager (natural slices) or a CUDA graph replayed per token, over its own static cache.

    `ahead=True` runs a token ahead, as JitDecode(ahead=True): step t+1 is launched with id t
    still on the GPU, id t was copied to pinned memory behind step t (non_blocking, an event
    recorded), and the call waits for that event only.
    """

    def __init__(self, model: Any, prompt: list[int], graph: bool, ahead: bool = False) -> None:
        from benchmarks.e2e.torch_llama import CudaGraphStep

        self.model, self.torch, self.ahead = model, model.torch, ahead
        self.prompt = self.torch.tensor([prompt], device=model.device)
        self.cache = model.cache()
        self.graph = CudaGraphStep(model, self.cache) if graph else None
        if ahead:
            cuda = model.device == "cuda"
            self.host = [self.torch.zeros(1, dtype=self.torch.long, pin_memory=cuda) for _ in range(2)]
            self.events = [self.torch.cuda.Event() if cuda else None for _ in range(2)]
            self.slot = 0
        self.reset()

    def reset(self) -> None:
        following = self.model.prefill(self.prompt, self.cache).argmax(-1)
        self.pos = self.prompt.shape[1]
        if self.ahead:
            self.pending = following.view(1, 1)
            self._start_read(following)
        else:
            self.token = int(following.item())

    def prepare(self, n: int) -> None:
        if self.pos + n > self.model.ctx:
            self.reset()

    def __call__(self) -> int:
        if self.ahead:
            if self.graph is not None:
                self.graph.ids.copy_(self.pending)  # on the GPU, behind the step that made it
                self.graph.pos.fill_(self.pos)
                self.graph.graph.replay()
                following = self.graph.next
            else:
                following = self.model.step(self.pending, self.pos, self.cache).argmax(-1)
            before = self.slot
            self._start_read(following)
            self.token = self._finish_read(before)
            self.pending = following.view(1, 1)
        elif self.graph is not None:
            self.token = self.graph(self.token, self.pos)
        else:
            ids = self.torch.tensor([[self.token]], device=self.model.device)
            self.token = int(self.model.step(ids, self.pos, self.cache).argmax(-1).item())
        self.pos += 1
        return self.token

    def _start_read(self, ids: Any) -> None:
        self.slot ^= 1
        self.host[self.slot].copy_(ids.view(-1), non_blocking=True)
        if self.events[self.slot] is not None:
            self.events[self.slot].record()

    def _finish_read(self, slot: int) -> int:
        if self.events[slot] is not None:
            self.events[slot].synchronize()
        return int(self.host[slot][0])

    def gpu_call(self) -> None:
        """The step without the read-back, for CUDA events."""
        if self.graph is not None:
            self.graph.replay(self.token, self.pos % self.model.ctx)
        else:
            ids = self.torch.tensor([[self.token]], device=self.model.device)
            self.model.step(ids, min(self.pos, self.model.ctx - 1), self.cache)


# --- the cases -------------------------------------------------------------------------------------


def decoder_cases(ctx: Any, name: str, prompt_len: int, check_tokens: int, plan: dict[str, Any]) -> list[dict]:
    """Prefill and per-token records for one configuration; `plan` holds the blocks and schedules."""
    import tracer as tr
    from examples import llama as L

    log = ctx.settings.log
    cfg = config(name)
    fmt = weights_format()
    t0 = time.perf_counter()
    weights = L.random_weights(cfg, seed=0)
    ours = weights
    if fmt in ("q8_0", "q4_0", "q4_k", "q6_k", "q4_k_m"):
        ours, weights = quantized(weights, cfg, fmt)
    if fmt != "f32":
        name = f"{name} {fmt}"
    dtype = tr.float16 if fmt == "f16" else tr.float32
    model = L.Llama(cfg, L.check_weights(ours, cfg, f"random {name}", dtype), cfg.max_positions, dtype)
    tr.realize(*model.w.values())
    prompt = np.random.default_rng(1).integers(0, cfg.vocab, prompt_len).tolist()
    theirs = None
    if ctx.torch is not None:
        from benchmarks.e2e.torch_llama import TorchLlama

        tdt = ctx.torch.float16 if fmt == "f16" else ctx.torch.float32
        theirs = TorchLlama(ctx.torch, cfg, weights, cfg.max_positions, torch_device(ctx.torch), tdt)
    del weights, ours
    log(f"  e2e decoder {name} ({describe(cfg)}): weights ready in {time.perf_counter() - t0:.1f} s")
    check = _check(model, theirs, prompt, check_tokens)
    log(f"    check: {check['summary']}")
    records = [_prefill_case(ctx, name, cfg, model, theirs, prompt, check, plan)]
    long = plan.get("long_prefill", {}).get(name)
    if long and long < cfg.max_positions:  # issue 14: a long prompt, where matrix products dominate
        long_prompt = np.random.default_rng(2).integers(0, cfg.vocab, long).tolist()
        long_check = _prefill_check(model, theirs, long_prompt)
        log(f"    check ({long} tokens): {long_check['summary']}")
        records.append(_prefill_case(ctx, name, cfg, model, theirs, long_prompt, long_check, plan))
    records.extend(_decode_case(ctx, name, cfg, model, theirs, prompt, check, plan))
    del model, theirs
    gc.collect()
    if ctx.torch is not None and ctx.torch.cuda.is_available():
        ctx.torch.cuda.empty_cache()
    return records


def _weights_note() -> str:
    fmt = weights_format()
    if fmt == "f16":
        return ", float16 weights, activations and caches (wgjit and torch)"
    return "" if fmt == "f32" else f", matrices {fmt} for wgjit (torch: their dequantized values in f32)"


def _check(model: Any, theirs: Any, prompt: list[int], n: int) -> dict[str, Any]:
    """Greedy ids from both wgjit loops (and torch), the prefill logits compared; before any timing."""
    import tracer as tr

    ids = tr.tensor(np.array([prompt], np.int32))
    logits = model.prefill_jit(ids, *model.empty_cache().tensors())[0].numpy()[0]
    lazy_logits = model.prefill(ids, *model.empty_cache().tensors())[0].numpy()[0]
    jit, lazy = JitDecode(model, prompt), LazyDecode(model, prompt)
    out: dict[str, Any] = {"prompt": prompt, "prefill_logits_head": logits[:8].tolist()}
    out["ids_jit"] = [jit.token] + [jit() for _ in range(n - 1)]
    out["ids_lazy"] = [lazy.token] + [lazy() for _ in range(n - 1)]
    scale = max(1.0, float(np.abs(logits).max()))
    errors = {"lazy": float(np.abs(lazy_logits - logits).max()) / scale}
    if theirs is not None:
        t = theirs.prefill(theirs.torch.tensor([prompt], device=theirs.device), theirs.cache())[0].float().cpu().numpy()
        errors["torch"] = float(np.abs(t - logits).max()) / scale
        eager = TorchDecode(theirs, prompt, graph=False)
        out["ids_torch"] = [eager.token] + [eager() for _ in range(n - 1)]
    out["max_rel_err"] = max(errors.values())
    out["errors"] = errors
    tol = 3e-2 if weights_format() == "f16" else 1e-3  # float16: two roundings' worth between the programs
    out["verified"] = out["ids_jit"] == out["ids_lazy"] and out["max_rel_err"] < tol
    out["summary"] = f"ids jit {out['ids_jit'][:4]}..., lazy {'same' if out['ids_jit'] == out['ids_lazy'] else 'DIFFER'}" + (
        f", torch {'same' if out.get('ids_torch') == out['ids_jit'] else 'differ (near-ties)'}" if theirs else ""
    ) + f"; prefill logits rel err {errors}"  # fmt: skip
    return out


def _prefill_check(model: Any, theirs: Any, prompt: list[int]) -> dict[str, Any]:
    """The prefill's logits of jit, lazy (and torch) compared, and the next ids; before any timing."""
    import tracer as tr

    ids = tr.tensor(np.array([prompt], np.int32))
    out_jit = model.prefill_jit(ids, *model.empty_cache().tensors())
    logits, next_jit = out_jit[0].numpy()[0], int(out_jit[1].numpy()[0])
    out_lazy = model.prefill(ids, *model.empty_cache().tensors())
    scale = max(1.0, float(np.abs(logits).max()))
    errors = {"lazy": float(np.abs(out_lazy[0].numpy()[0] - logits).max()) / scale}
    out: dict[str, Any] = {"prompt_len": len(prompt), "next_jit": next_jit, "next_lazy": int(out_lazy[1].numpy()[0])}
    if theirs is not None:
        t = theirs.prefill(theirs.torch.tensor([prompt], device=theirs.device), theirs.cache())[0].float().cpu().numpy()
        errors["torch"] = float(np.abs(t - logits).max()) / scale
        out["next_torch"] = int(t.argmax())
    tol = 3e-2 if weights_format() == "f16" else 1e-3
    out.update(errors=errors, max_rel_err=max(errors.values()))
    out["verified"] = out["next_jit"] == out["next_lazy"] and out["max_rel_err"] < tol
    out["summary"] = (
        f"next id jit {next_jit}, lazy {out['next_lazy']}, torch {out.get('next_torch', '-')}; logits rel err {errors}"
    )
    return out


def _prefill_case(
    ctx: Any, name: str, cfg: Any, model: Any, theirs: Any, prompt: list[int], check: dict, plan: dict[str, Any]
) -> dict:
    import tracer as tr

    zero = model.empty_cache().tensors()  # prefill is pure: one zero cache serves every call
    arr = np.array([prompt], np.int32)

    def ours(jit: bool) -> Any:
        fn = model.prefill_jit if jit else model.prefill
        return lambda: int(fn(tr.tensor(arr), *zero)[1].numpy()[0])

    contenders = [
        Contender("jit", ours(True), plan["prefill_block"]),
        Contender("lazy", ours(False), plan["prefill_block"]),
    ]
    same = gpu_time_of(ctx, model.prefill(tr.tensor(arr), *zero))
    gpu = {"jit": same, "lazy": same}  # both run the same program
    if theirs is not None:
        t_prompt, t_cache = theirs.torch.tensor([prompt], device=theirs.device), theirs.cache()
        contenders.append(Contender("torch", lambda: int(theirs.prefill(t_prompt, t_cache).argmax(-1).item()), plan["prefill_block"]))  # fmt: skip
    ctx.settings.log(f"  e2e decoder {name}: prefill {len(prompt)} tokens")
    outcome = interleave(contenders, plan["prefill"], ctx.settings.log)
    if theirs is not None:
        gpu["torch"] = torch_gpu_ms(ctx.torch, lambda: theirs.prefill(t_prompt, t_cache))
    by = {c.name: c for c in contenders}
    return record(
        ctx, "decoder_prefill", f"{name}: {len(prompt)} tokens", {k: summary(by[k], gpu.get(k)) for k in ("jit", "lazy")},
        {"torch": summary(by["torch"], gpu.get("torch"))} if theirs is not None else {}, outcome, check,
        [f"{describe(cfg)}, f32, random weights (seed 0){_weights_note()}; a call: the prompt through the model and the next id read back",
         "jit: prefill under @tr.jit; lazy: the same function traced each call (its program comes from the cache)"],
    )  # fmt: skip


def _decode_case(
    ctx: Any, name: str, cfg: Any, model: Any, theirs: Any, prompt: list[int], check: dict, plan: dict[str, Any]
) -> list[dict]:
    from tracer.realize import stats

    compiled = stats["programs_compiled"]
    jit, lazy, ahead = JitDecode(model, prompt), LazyDecode(model, prompt), JitDecode(model, prompt, ahead=True)
    contenders = [
        Contender("jit", jit, plan["jit_block"], jit.prepare),
        Contender("lazy", lazy, plan["lazy_block"], lazy.prepare),
        Contender("jit_ahead", ahead, plan["jit_block"], ahead.prepare),
    ]
    eager = graph = None
    if theirs is not None:
        eager = TorchDecode(theirs, prompt, graph=False)
        eager_ahead = TorchDecode(theirs, prompt, graph=False, ahead=True)
        contenders.append(Contender("torch", eager, plan["jit_block"], eager.prepare))
        contenders.append(Contender("torch_ahead", eager_ahead, plan["jit_block"], eager_ahead.prepare))
        if theirs.device == "cuda":
            graph = TorchDecode(theirs, prompt, graph=True)
            graph_ahead = TorchDecode(theirs, prompt, graph=True, ahead=True)
            contenders.append(Contender("torch_cuda_graph", graph, plan["jit_block"], graph.prepare))
            contenders.append(Contender("torch_cuda_graph_ahead", graph_ahead, plan["jit_block"], graph_ahead.prepare))
    ctx.settings.log(f"  e2e decoder {name}: decode per token after {len(prompt)} prompt tokens")
    outcome = interleave(contenders, plan["decode"], ctx.settings.log)
    compiled = stats["programs_compiled"] - compiled
    gpu = {"jit": jit.gpu_time(ctx)}
    scratch = model.empty_cache()
    lazy_pos = min(len(prompt) + 8, model.ctx - 1)
    import tracer as tr

    gpu["lazy"] = gpu_time_of(ctx, model.step_lazy(tr.tensor(np.array([[1]], np.int32)), lazy_pos, scratch), scratch)
    if eager is not None:
        eager.prepare(2)
        gpu["torch"] = torch_gpu_ms(ctx.torch, eager.gpu_call)
    if graph is not None:
        gpu["torch_cuda_graph"] = torch_gpu_ms(ctx.torch, graph.gpu_call)
    by = {c.name: c for c in contenders}
    variants = {k: summary(by[k], gpu[k]) for k in ("jit", "lazy")}
    comparators = {k: summary(by[k], gpu.get(k)) for k in ("torch", "torch_cuda_graph") if k in by}
    rec = record(
        ctx, "decoder_token", f"{name}: per token", variants, comparators, outcome, check,
        [f"{describe(cfg)}, f32, random weights (seed 0){_weights_note()}; a call: one token, the next id read back (greedy)",
         "lazy: index_write + cache[:, :, :pos+1] at a runtime position (tr.dynamic), one program per bucket of "
         "the attended length; jit: the same step under @tr.jit (Llama.step_into_jit, caches written in place) "
         f"({compiled} programs compiled in this case, warm-up included); torch: eager with slices, and one step "
         "captured as a CUDA graph over the static cache",
         f"lazy GPU time: one pass at position {lazy_pos}"],
    )  # fmt: skip
    rec["tokens_per_s"] = {k: 1e3 / statistics.median(c.samples) for k, c in by.items() if c.samples}
    ahead_comparators = {
        k: summary(by[f"{k}_ahead"], gpu.get(k)) for k in ("torch", "torch_cuda_graph") if f"{k}_ahead" in by
    }
    ahead = record(
        ctx, "decoder_token", f"{name}: per token, a token ahead", {"jit": summary(by["jit_ahead"], gpu["jit"])},
        ahead_comparators, outcome, check,
        ["the loop examples/generate.py runs: a call submits step t+1 fed with id t on the GPU, then reads id t, "
         "whose copy started behind step t (wgjit: Tensor.copy_to_host_async; torch: a non_blocking copy to pinned "
         "memory and a CUDA event), so neither GPU waits for its host between tokens",
         f"{describe(cfg)}, f32, random weights (seed 0){_weights_note()}; GPU ms: one pass of the step (as above)"],
    )  # fmt: skip
    ahead["tokens_per_s"] = {k: 1e3 / statistics.median(by[k].samples) for k in by if k.endswith("_ahead")}
    return [rec, ahead]
