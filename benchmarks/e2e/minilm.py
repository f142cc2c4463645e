"""The MiniLM workloads: the encoder forward at a throughput and a latency shape, and encode() of many sentences.

wgjit runs examples/minilm.py: `jit` is `MiniLM.forward_jit` (a @tr.jit program per
(batch, length)) and `encode` (which uses it), `lazy` is `MiniLM.forward` traced on every
call. A forward call reads the last hidden state back to the host; so does torch's
(transformers' BertModel, eager, the same weights). encode() includes tokenizing, pooling
and reading back the unit vectors, for both. The smoke configuration (lavapipe) uses a tiny
random BERT with the real tokenizer, built by `tiny_model`.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.e2e.blocks import Contender, interleave
from benchmarks.e2e.common import gpu_time_of, record, summary, torch_device, torch_gpu_ms

WORDS = (
    "the a man woman child dog cat eats runs reads writes sees blue red green quick slow bright dark river city "
    "house garden music food pasta bread coffee morning evening night sky sun rain wind tree forest road car "
    "train station book letter story song picture window door table chair friend teacher doctor market"
).split()


def sentences(n: int, seed: int = 0) -> list[str]:
    """n made-up sentences of 4 to 40 words, the same for a given seed."""
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, rng.integers(4, 41))) + "." for _ in range(n)]


def tiny_model(real: Path, folder: Path, seed: int = 0) -> Path:
    """A 2-layer, 32-wide random BERT with the real model's tokenizer, written as the real folder is laid out."""
    from safetensors import safe_open
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "sentence_bert_config.json"):
        shutil.copy(real / name, folder / name)
    cfg = json.loads((real / "config.json").read_text())
    sizes = {cfg["hidden_size"]: 32, cfg["intermediate_size"]: 64}
    cfg.update(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_hidden_layers=2)
    (folder / "config.json").write_text(json.dumps(cfg))
    rng = np.random.default_rng(seed)
    out = {}
    with safe_open(str(real / "model.safetensors"), framework="numpy") as f:
        for name in f.keys():
            if ".layer." in name and int(name.split(".layer.")[1].split(".")[0]) >= 2:
                continue
            s = f.get_slice(name)
            if s.get_dtype() not in ("F32", "F16", "BF16"):  # a float16 copy of the model (the device's) too
                out[name] = f.get_tensor(name)  # position ids
                continue
            shape = [sizes.get(d, d) for d in s.get_shape()]
            w = rng.standard_normal(shape, dtype=np.float32)
            out[name] = (1 + 0.1 * w) if name.endswith("LayerNorm.weight") else 0.1 * w
    save_file(out, str(folder / "model.safetensors"))
    return folder


def _batch(n: int, t: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random token ids; with n > 1 every other row is padded from 3/4 of the length (the mask matters)."""
    ids = np.random.default_rng(0).integers(1000, 20000, (n, t)).astype(np.int32)
    mask = np.ones_like(ids)
    if n > 1:
        mask[1::2, t * 3 // 4 :] = 0
    return ids, np.zeros_like(ids), mask


def _bert(ctx: Any, path: Path) -> Any:
    if ctx.torch is None:
        return None
    try:
        from transformers import BertModel

        return BertModel.from_pretrained(str(path), torch_dtype=ctx.torch.float32).to(torch_device(ctx.torch)).eval()
    except Exception as e:  # noqa: BLE001  transformers may be missing; the records say so
        ctx.notes.append(f"e2e: no torch MiniLM comparator: {type(e).__name__}: {str(e)[:160]}")
        return None


def _compiled_bert(ctx: Any, bert: Any) -> Any:
    """torch.compile of the BertModel when WGJIT_E2E_TORCH_COMPILE=1 and CUDA runs it (else None)."""
    if os.environ.get("WGJIT_E2E_TORCH_COMPILE", "0") != "1" or not ctx.torch.cuda.is_available():
        return None
    try:
        return ctx.torch.compile(bert)
    except Exception as e:  # noqa: BLE001  no compiler on this machine: the record says so
        ctx.notes.append(f"e2e: no torch.compile comparator: {type(e).__name__}: {str(e)[:160]}")
        return None


def forward_case(ctx: Any, model: Any, bert: Any, n: int, t: int, plan: dict[str, Any]) -> dict:
    import tracer as tr

    ids, types, mask = _batch(n, t)
    lazy = model.forward(ids, types, mask).numpy()
    jit = model.forward_jit(tr.tensor(ids), tr.tensor(types), tr.tensor(mask)).numpy()
    valid = mask.astype(bool)  # padded positions are don't-care
    errors = {"lazy": float(np.abs(lazy - jit)[valid].max())}
    contenders = [
        Contender("jit", lambda: model.forward_jit(tr.tensor(ids), tr.tensor(types), tr.tensor(mask)).numpy(), plan["block"]),
        Contender("lazy", lambda: model.forward(ids, types, mask).numpy(), plan["block"]),
    ]  # fmt: skip
    if bert is not None:
        torch = ctx.torch

        def runner(net: Any) -> Any:
            """A call of `net` (the BertModel, or its compiled form) on this batch, read back unless told not to."""

            def run(read: bool = True) -> Any:
                args = {k: torch.from_numpy(v.astype(np.int64)).to(bert.device) for k, v in
                        (("input_ids", ids), ("token_type_ids", types), ("attention_mask", mask))}  # fmt: skip
                with torch.no_grad():
                    out = net(**args).last_hidden_state
                return out.cpu().numpy() if read else out

            return run

        theirs = runner(bert)
        errors["torch"] = float(np.abs(theirs() - jit)[valid].max())
        contenders.append(Contender("torch", theirs, plan["block"]))
        compiled = _compiled_bert(ctx, bert) if n * t >= 1024 else None  # the throughput shape only
        if compiled is not None:
            theirs_compiled = runner(compiled)
            t0 = time.perf_counter()
            try:
                error = float(np.abs(theirs_compiled() - jit)[valid].max())  # compiles here
            except Exception as e:  # noqa: BLE001  inductor may fail on a machine: the record says so
                ctx.notes.append(f"e2e: torch.compile of BertModel failed: {type(e).__name__}: {str(e)[:160]}")
            else:
                errors["torch_compile"] = error
                ctx.settings.log(f"    torch.compile of BertModel at {n}x{t}: {time.perf_counter() - t0:.1f} s")
                contenders.append(Contender("torch_compile", theirs_compiled, plan["block"]))
    ctx.settings.log(f"  e2e minilm forward {n}x{t}")
    outcome = interleave(contenders, plan["schedule"], ctx.settings.log)
    same = gpu_time_of(ctx, model.forward(ids, types, mask))
    gpu = {"jit": same, "lazy": same}  # both run the same program
    if bert is not None:
        gpu["torch"] = torch_gpu_ms(ctx.torch, lambda: theirs(read=False))
    if "torch_compile" in errors:
        gpu["torch_compile"] = torch_gpu_ms(ctx.torch, lambda: theirs_compiled(read=False))
    by = {c.name: c for c in contenders}
    check = {"verified": max(errors.values()) < 1e-3, "max_rel_err": max(errors.values()), "errors": errors,
             "sample": jit[0, :2, :4].tolist(), "ids": ids[:1, :4].tolist()}  # fmt: skip
    return record(
        ctx, "minilm_forward", f"{n}x{t} tokens", {k: summary(by[k], gpu.get(k)) for k in ("jit", "lazy")},
        {k: summary(by[k], gpu.get(k)) for k in ("torch", "torch_compile") if k in by}, outcome, check,
        ["examples/minilm.py's forward; a call: the last hidden state read back (f32); "
         "jit: MiniLM.forward_jit; lazy: MiniLM.forward; torch: transformers BertModel, eager"
         + ("; torch_compile: torch.compile of it (WGJIT_E2E_TORCH_COMPILE=1)" if "torch_compile" in by else "")],
    )  # fmt: skip


def encode_case(ctx: Any, model: Any, bert: Any, count: int, plan: dict[str, Any]) -> dict:
    texts = sentences(count)
    batch = 32

    def lazy() -> np.ndarray:
        out = []
        for start in range(0, len(texts), batch):
            ids, types, mask = model.tokenize(texts[start : start + batch])
            out.append(model.pool(model.forward(ids, types, mask), mask).numpy())
        return np.concatenate(out)

    ours = model.encode(texts, batch)
    errors = {"lazy": float(np.abs(lazy() - ours).max())}
    contenders = [Contender("jit", lambda: model.encode(texts, batch), 1), Contender("lazy", lazy, 1)]
    if bert is not None:
        torch = ctx.torch

        def theirs() -> np.ndarray:
            out = []
            for start in range(0, len(texts), batch):
                ids, types, mask = model.tokenize(texts[start : start + batch])
                t_ids, t_types, t_mask = (
                    torch.from_numpy(a.astype(np.int64)).to(bert.device) for a in (ids, types, mask)
                )
                with torch.no_grad():
                    hidden = bert(input_ids=t_ids, token_type_ids=t_types, attention_mask=t_mask).last_hidden_state
                m = t_mask.unsqueeze(-1).float()
                mean = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
                out.append(torch.nn.functional.normalize(mean, dim=-1).cpu().numpy())
            return np.concatenate(out)

        errors["torch"] = float(np.abs(theirs() - ours).max())
        contenders.append(Contender("torch", theirs, 1))
    ctx.settings.log(f"  e2e minilm encode {count} sentences")
    outcome = interleave(contenders, plan["schedule"], ctx.settings.log)
    by = {c.name: c for c in contenders}
    check = {"verified": max(errors.values()) < 1e-4, "max_rel_err": max(errors.values()), "errors": errors,
             "sample": ours[:2, :4].tolist(), "sentences": texts[:2]}  # fmt: skip
    rec = record(
        ctx, "minilm_encode", f"{count} sentences", {k: summary(by[k], None) for k in ("jit", "lazy")},
        {"torch": summary(by["torch"], None)} if bert is not None else {}, outcome, check,
        [f"encode(): tokenize, forward, mean pool, normalize, read back; batches of {batch} padded to their longest "
         "(a jit trace per new (batch, length)); torch: the same tokens through BertModel"],
    )  # fmt: skip
    rec["traces"] = model.forward_jit.trace_count + model._embed_jit.trace_count
    return rec


def minilm_cases(ctx: Any, plan: dict[str, Any]) -> list[dict]:
    """The MiniLM records, or none (with a note) when the model cannot be loaded."""
    import tempfile

    from examples import minilm

    try:
        path = minilm.model_dir()
    except (Exception, SystemExit) as e:  # noqa: BLE001  the weights or packages may be missing
        ctx.notes.append(f"e2e: MiniLM skipped: {type(e).__name__}: {str(e)[:200]}")
        return []
    with tempfile.TemporaryDirectory() as tmp:
        if plan["tiny"]:
            path = tiny_model(path, Path(tmp) / "tiny")
        model = minilm.MiniLM(path)
        bert = _bert(ctx, path)
        records = [forward_case(ctx, model, bert, n, t, plan["forward"]) for n, t in plan["shapes"]]
        records.append(encode_case(ctx, model, bert, plan["sentences"], plan["encode"]))
    return records
