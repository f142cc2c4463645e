"""Text generation with Llama, Mistral and Qwen2 checkpoints, run on the GPU by wgjit.

Reads a Hugging Face checkpoint folder (config.json, model.safetensors or a sharded
model.safetensors.index.json, tokenizer.json when present) or a llama.cpp GGUF file (Llama
metadata; Q8_0, Q4_0, Q4_K and Q6_K weights stay quantized on the GPU (a Q4_K_M file's Q6_K
head and projections too), the other types become float32; the tokenizer from the file's metadata, or --tokenizer), prefills the
prompt, then decodes one token at a time with a KV cache; greedy, or seeded sampling with
temperature, top-k and top-p drawn on the GPU (tr.sample: one id read back per token).
--quantize q8_0 (or q4_0, q4_k, q6_k, q4_k_m: llama.cpp's Q4_K_M mix) quantizes a checkpoint's matrices as it loads. The model code is in examples/llama.py.

    python examples/generate.py --model DIR --prompt "The capital of France is" --max-new-tokens 32
    python examples/generate.py --model DIR --quantize q4_0 --prompt "The capital of France is"
    python examples/generate.py --model model-q8_0.gguf --prompt "The capital of France is"
    python examples/generate.py --model DIR --prompt-ids 1,17,923 --max-new-tokens 8 --temperature 0 --json out.json

The second form writes {"ids": [the new ids], "prompt_logits": [[logits over the vocabulary]
for each prompt position]} (float32 values) for scripts and checks.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

import tracer as tr  # noqa: E402
from examples.llama import (  # noqa: E402
    QUANTIZE,
    CheckpointError,
    KVCache,
    Llama,
    LlamaConfig,
    is_gguf,
    load_gguf_checkpoint,
    load_weights,
    read_config,
)

MODES = ("jit", "lazy")


# --- sampling ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sampling:
    """temperature 0 is greedy; top_k 0 and top_p 1 keep every token."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.temperature < 0 or self.top_k < 0 or not 0 < self.top_p <= 1:
            raise ValueError(
                f"sampling: need temperature >= 0, top_k >= 0 and 0 < top_p <= 1, got {self.temperature}, "
                f"{self.top_k}, {self.top_p}"
            )


def sample(logits: np.ndarray, s: Sampling, rng: np.random.Generator) -> int:
    """One id from a row of logits on the host: temperature, then top-k, then top-p (nucleus).

    generate() draws on the GPU instead (next_token, tr.sample); this host version stays for
    comparison: the same distribution, its own stream of numbers.
    """
    if s.temperature == 0:
        return int(np.argmax(logits))
    z = logits.astype(np.float64) / s.temperature
    order = np.argsort(-z, kind="stable")  # most likely first; ties keep the lower id first
    if s.top_k:
        order = order[: s.top_k]
    p = np.exp(z[order] - z[order[0]])
    p /= p.sum()
    if s.top_p < 1:
        keep = int(np.searchsorted(np.cumsum(p), s.top_p)) + 1  # the smallest head reaching top_p
        order, p = order[:keep], p[:keep] / p[:keep].sum()
    return int(order[min(int(np.searchsorted(np.cumsum(p), rng.random(), side="right")), len(order) - 1)])


def next_id(logits: tr.Tensor, argmax: tr.Tensor, s: Sampling, step: int) -> tr.Tensor:
    """The next id as a (1,) int32 tensor on the GPU: greedy takes the step's argmax, sampling
    draws there (tr.sample: the `step`-th draw of this generation's seed)."""
    if s.temperature == 0:
        return argmax
    return tr.sample(logits, temperature=s.temperature, top_k=s.top_k, top_p=s.top_p, seed=s.seed, step=step)


def next_token(logits: tr.Tensor, argmax: tr.Tensor, s: Sampling, step: int) -> int:
    """The one place that picks the next id, reading back 4 bytes (next_id on the GPU)."""
    return int(next_id(logits, argmax, s, step).numpy().reshape(-1)[0])


# --- generation ----------------------------------------------------------------------------------


@dataclass
class Result:
    ids: list[int]  # the new ids, an end-of-sequence id included when it stopped there
    prompt_logits: np.ndarray | None  # (prompt tokens, vocab) float32 when asked for
    prefill_seconds: float
    decode_seconds: float
    stopped_at_eos: bool = False


@dataclass
class Generator:
    """A checkpoint on the GPU and its tokenizer; `generate` runs one prompt."""

    path: Path
    cfg: LlamaConfig
    weights: dict[str, tr.Tensor]
    dtype: tr.DType = tr.float32
    mode: str = "jit"
    tokenizer: object | None = None
    _models: dict[int, Llama] = field(default_factory=dict)

    @classmethod
    def load(
        cls,
        path: str | Path,
        dtype: tr.DType = tr.float32,
        mode: str = "jit",
        quantize: str | None = None,
        tokenizer: str | Path | None = None,
    ) -> Generator:
        """A Hugging Face folder or a GGUF file; `quantize` ("q8_0", "q4_0", "q4_k", "q6_k", "q4_k_m") its matrices as they load;
        `tokenizer`: a tokenizer.json (or a folder holding one) instead of the checkpoint's own."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        path = Path(path)
        if is_gguf(path):
            cfg, weights = load_gguf_checkpoint(path, dtype, quantize)
            tok = _tokenizer(Path(tokenizer)) if tokenizer else gguf_tokenizer(tr.gguf_metadata(path))
            return cls(path, cfg, weights, dtype, mode, tok)
        cfg = read_config(path)
        weights = load_weights(path, cfg, dtype, quantize)
        tok = _tokenizer(Path(tokenizer) if tokenizer else path)
        return cls(path, _eos_from_generation_config(path, cfg), weights, dtype, mode, tok)

    def model(self, ctx: int) -> Llama:
        """The model with a cache of `ctx` positions (kept: its jit traces are reused)."""
        if ctx not in self._models:
            self._models[ctx] = Llama(self.cfg, self.weights, ctx, self.dtype)
        return self._models[ctx]

    def context_for(self, prompt: int, new: int) -> int:
        """Cache length for a generation: prompt + new rounded up to 64, at most the model's limit."""
        need = prompt + new
        if need > self.cfg.max_positions:
            raise ValueError(
                f"generate: {prompt} prompt + {new} new tokens exceed the model's {self.cfg.max_positions} positions"
            )
        return min(self.cfg.max_positions, -(-need // 64) * 64)

    def generate(
        self,
        prompt_ids: list[int],
        max_new_tokens: int,
        sampling: Sampling = Sampling(),
        want_prompt_logits: bool = False,
        stop_at_eos: bool = True,
        on_token: Callable[[int], None] | None = None,
    ) -> Result:
        if not prompt_ids:
            raise ValueError("generate: the prompt has no tokens")
        bad = [i for i in prompt_ids if not 0 <= i < self.cfg.vocab]
        if bad:
            raise ValueError(f"generate: prompt id {bad[0]} is outside the vocabulary 0..{self.cfg.vocab - 1}")
        if max_new_tokens < 0:
            raise ValueError(f"generate: max_new_tokens must be >= 0, got {max_new_tokens}")
        model = self.model(self.context_for(len(prompt_ids), max_new_tokens))
        t0 = time.perf_counter()
        ids = tr.tensor(np.array([prompt_ids], np.int32))
        prefill = model.prefill_jit if self.mode == "jit" else model.prefill
        logits, first, *tensors = prefill(ids, *model.empty_cache().tensors(), all_logits=want_prompt_logits)
        cache = KVCache.from_tensors(tensors, len(prompt_ids))
        prompt_logits = logits.numpy()[0] if want_prompt_logits else None
        last = logits[:, -1] if want_prompt_logits else logits
        if self.mode == "jit" and not any(w is not None for w in self.cfg.windows) and max_new_tokens:
            pending = next_id(last, first, sampling, 0).copy_to_host_async()
            ids_out, eos, t1 = self._run_ahead(model, pending, cache, sampling, max_new_tokens, stop_at_eos, on_token)
            return Result(ids_out, prompt_logits, t1 - t0, time.perf_counter() - t1, eos)
        out: list[int] = []
        token = next_token(last, first, sampling, 0) if max_new_tokens else None
        t1 = time.perf_counter()
        while token is not None:
            out.append(token)
            if on_token is not None:
                on_token(token)
            eos = stop_at_eos and token in self.cfg.eos_ids
            if eos or len(out) == max_new_tokens:
                return Result(out, prompt_logits, t1 - t0, time.perf_counter() - t1, eos)
            token, cache = self._step(model, token, cache, sampling, len(out))
        return Result(out, prompt_logits, t1 - t0, 0.0)

    def _run_ahead(
        self,
        model: Llama,
        pending: tr.Tensor,
        cache: KVCache,
        sampling: Sampling,
        max_new_tokens: int,
        stop_at_eos: bool,
        on_token: Callable[[int], None] | None,
    ) -> tuple[list[int], bool, float]:
        """Decode a token ahead of the host: step t+1 is submitted, fed with id t on the GPU, before
        id t is read back (its copy started when it was computed), so the GPU goes from one step
        to the next without waiting for the host. The same ids as a step-then-read loop; when id
        t ends the generation, step t+1 has run for nothing (its cache row is past the result).
        Returns the ids, whether the last is an end-of-sequence id, and when the first id was read
        (the end of the prefill, as the step-then-read loop counts it)."""
        out: list[int] = []
        first_read = 0.0
        while True:
            ahead = None
            if len(out) + 1 < max_new_tokens:  # the token after `pending` may be needed
                pos = cache.length
                logits, argmax = model.step_into_jit(pending, tr.dynamic(pos), *cache.tensors())
                cache.length = pos + 1
                ahead = next_id(logits, argmax, sampling, len(out) + 1).copy_to_host_async()
            token = int(pending.numpy().reshape(-1)[0])
            first_read = first_read or time.perf_counter()
            out.append(token)
            if on_token is not None:
                on_token(token)
            eos = stop_at_eos and token in self.cfg.eos_ids
            if eos or ahead is None:
                return out, eos, first_read
            pending = ahead

    def _step(self, model: Llama, token: int, cache: KVCache, sampling: Sampling, step: int) -> tuple[int, KVCache]:
        """Decode one token at position cache.length; returns the next id (the `step`-th draw) and the cache."""
        ids = tr.tensor(np.array([[token]], np.int32))
        pos = cache.length
        if self.mode == "lazy":
            logits, argmax = model.step_lazy(ids, pos, cache)
            return next_token(logits, argmax, sampling, step), cache
        if not any(w is not None for w in self.cfg.windows):  # the caches written in place at a runtime position
            logits, argmax = model.step_into_jit(ids, tr.dynamic(pos), *cache.tensors())
            cache.length = pos + 1
            return next_token(logits, argmax, sampling, step), cache
        logits, argmax, *tensors = model.step_jit(ids, tr.tensor(np.array([pos], np.int32)), *cache.tensors())
        return next_token(logits, argmax, sampling, step), KVCache.from_tensors(tensors, pos + 1)


def _tokenizer(path: Path) -> object | None:
    """tokenizer.json (the file, or in the folder) through the `tokenizers` package, when both are there."""
    file = path if path.is_file() else path / "tokenizer.json"
    if not file.is_file():
        return None
    try:
        from tokenizers import Tokenizer
    except ImportError:
        print("note: tokenizer.json found but the tokenizers package is missing: ids only", file=sys.stderr)
        return None
    return Tokenizer.from_file(str(file))


CONTROL = 3  # tokenizer.ggml.token_type of special tokens (<s>, </s>, <|eot_id|>...)


def gguf_tokenizer(meta: dict[str, object]) -> object | None:
    """A `tokenizers` Tokenizer from a GGUF file's tokenizer.ggml.* metadata, or None.

    "gpt2": byte-level BPE with the file's merges (GPT-2's pre-tokenizer, close to but not
    always Llama 3's); "llama": SentencePiece BPE, its merges derived from the pieces' scores
    (a piece made of two pieces merges in the order of its score), with byte fallback. Give
    --tokenizer for a model's exact tokenizer.json.
    """
    kind, tokens = meta.get("tokenizer.ggml.model"), meta.get("tokenizer.ggml.tokens")
    if kind not in ("gpt2", "llama") or not tokens:
        return None
    try:
        from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    except ImportError:
        print("note: the tokenizers package is missing: ids only", file=sys.stderr)
        return None
    vocab = {t: i for i, t in enumerate(tokens)}
    if kind == "gpt2":
        merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges") or []]
        tok = Tokenizer(models.BPE(vocab, merges))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
    else:
        scores = meta.get("tokenizer.ggml.scores") or [0.0] * len(tokens)
        unk = tokens[int(meta.get("tokenizer.ggml.unknown_token_id", 0))]
        tok = Tokenizer(
            models.BPE(vocab, _piece_merges(tokens, scores), unk_token=unk, fuse_unk=True, byte_fallback=True)
        )
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tok.decoder = decoders.Sequence(
            [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
        )
    types = meta.get("tokenizer.ggml.token_type") or []
    tok.add_special_tokens([AddedToken(tokens[i], special=True) for i, t in enumerate(types) if t == CONTROL])
    bos = meta.get("tokenizer.ggml.bos_token_id")
    if bos is not None and meta.get("tokenizer.ggml.add_bos_token", kind == "llama"):
        name = tokens[int(bos)]
        tok.post_processor = processors.TemplateProcessing(single=f"{name} $A", special_tokens=[(name, int(bos))])
    return tok


def _piece_merges(tokens: list[str], scores: list[float]) -> list[tuple[str, str]]:
    """SentencePiece BPE as merges: every split of a piece into two pieces, best-scored piece first."""
    index = {t: i for i, t in enumerate(tokens)}
    found = []
    for piece, i in index.items():
        for cut in range(1, len(piece)):
            if piece[:cut] in index and piece[cut:] in index:
                found.append((-float(scores[i]), i, piece[:cut], piece[cut:]))
    return [(left, right) for _, _, left, right in sorted(found)]


def _eos_from_generation_config(path: Path, cfg: LlamaConfig) -> LlamaConfig:
    """generation_config.json's eos_token_id, when config.json has none."""
    file = path / "generation_config.json"
    if cfg.eos_ids or not file.is_file():
        return cfg
    eos = json.loads(file.read_text()).get("eos_token_id")
    if eos is None:
        return cfg
    return replace(cfg, eos_ids=tuple(eos) if isinstance(eos, list) else (int(eos),))


# --- the command line ---------------------------------------------------------------------------


class _Streamer:
    """Prints the prompt, then the text as ids arrive: the whole sequence is decoded each time and
    the new tail printed, so spaces and multi-token characters come out as the tokenizer means them."""

    def __init__(self, tokenizer: object, prompt: list[int]) -> None:
        self.tokenizer, self.ids = tokenizer, list(prompt)
        self.shown = tokenizer.decode(self.ids)
        print(self.shown, end="", flush=True)

    def __call__(self, token: int) -> None:
        self.ids.append(token)
        text = self.tokenizer.decode(self.ids)
        if not text.endswith("\ufffd"):  # an incomplete UTF-8 sequence: wait for the next id
            print(text[len(self.shown) :], end="", flush=True)
            self.shown = text


def _parse_ids(text: str) -> list[int]:
    try:
        return [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise SystemExit(f"--prompt-ids: expected comma-separated integers, got {text!r}") from None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a Hugging Face checkpoint folder or a llama.cpp GGUF file")
    ap.add_argument("--quantize", choices=sorted(QUANTIZE), help="quantize the matrices as they load")
    ap.add_argument("--tokenizer", help="a tokenizer.json, or a folder holding one (default: the checkpoint's)")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="prompt text (needs tokenizer.json)")
    src.add_argument("--prompt-ids", help="prompt token ids, comma-separated")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.0, help="0: greedy (the default)")
    ap.add_argument("--top-k", type=int, default=0, help="keep the k most likely tokens (0: all)")
    ap.add_argument("--top-p", type=float, default=1.0, help="keep the smallest set reaching this probability")
    ap.add_argument("--seed", type=int, default=0, help="sampling seed")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float16"], help="weights and activations")
    ap.add_argument("--mode", default="jit", choices=MODES, help="jit: the compiled decode step; lazy: the plain loop")
    ap.add_argument("--ignore-eos", action="store_true", help="do not stop at an end-of-sequence id")
    ap.add_argument("--json", metavar="OUT", help='write {"ids": [...], "prompt_logits": [[...], ...]} to OUT')
    args = ap.parse_args(argv)
    try:
        gen = Generator.load(args.model, tr.DType(args.dtype), args.mode, args.quantize, args.tokenizer)
        sampling = Sampling(args.temperature, args.top_k, args.top_p, args.seed)
    except (CheckpointError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.prompt is not None:
        if gen.tokenizer is None:
            need = "--tokenizer" if is_gguf(gen.path) else gen.path / "tokenizer.json"
            print(f"error: --prompt needs {need}; give --prompt-ids instead", file=sys.stderr)
            return 2
        prompt = gen.tokenizer.encode(args.prompt).ids
    else:
        prompt = _parse_ids(args.prompt_ids)
    stream = _Streamer(gen.tokenizer, prompt) if gen.tokenizer is not None and not args.json else None
    try:
        res = gen.generate(prompt, args.max_new_tokens, sampling, bool(args.json), not args.ignore_eos, stream)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if stream is not None:
        print()
    if args.json:
        data = {"ids": res.ids, "prompt_logits": res.prompt_logits.astype(np.float32).tolist()}
        Path(args.json).write_text(json.dumps(data))
    if stream is None and not args.json:
        print(" ".join(str(i) for i in res.ids))
    n = len(res.ids)
    per = f"{(n - 1) / res.decode_seconds:.1f} tok/s" if n > 1 and res.decode_seconds > 0 else "-"
    weights = f", {args.quantize} weights" if args.quantize else ""
    print(
        f"prefill {len(prompt)} tokens in {res.prefill_seconds * 1e3:.1f} ms; decoded {n} tokens, {per} "
        f"({args.mode}, {args.dtype}{weights}){'; stopped at end of sequence' if res.stopped_at_eos else ''}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
