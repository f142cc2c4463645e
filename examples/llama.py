"""Llama-family decoders (Llama, Mistral, Qwen2) in wgjit ops: config, checkpoint loading, forward.

`examples/generate.py` (text generation) and `benchmarks/e2e.py` (the end-to-end suite)
both use this module. The architecture, as Hugging Face's LlamaForCausalLM,
MistralForCausalLM and Qwen2ForCausalLM compute it: token embedding; per layer
x += o(attention(rope(q(rms_norm(x))), rope(k(...)), v(...))) with grouped-query
attention, then x += down(silu(gate(h)) * up(h)) with h = rms_norm(x); a final rms_norm
and the vocabulary projection (tied to the embedding or not). Qwen2 adds biases to q, k
and v; Llama's `attention_bias` and `mlp_bias` add them everywhere.

Decoding comes in two forms, kept side by side so the benchmark shows what each costs:

- `Llama.step_lazy` is the loop as users write it: `index_write` the new key and value
  at the position, attend over `cache[:, :, :pos + 1]`, with the position a runtime
  integer (`tr.dynamic`): one program per bucket of the attended length, not per token.
- `Llama.step_into` is the same step for `@tr.jit` (`step_into_jit`): the caches are
  arguments written in place at a `tr.dynamic` position, one trace per bucket. It writes
  one row of each cache per token and attends over the filled positions only: the fastest
  form, and what `examples/generate.py` and the e2e benchmark run.
- `Llama.step` is the older jit form, kept for sliding-window models (the window's start
  needs the position in python): a fixed-size cache updated with `where` at a one-hot of
  the position (the whole cache is rewritten each token), attention over the whole cache
  with an additive mask, and the position passed as an int32 tensor.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

import tracer as tr  # noqa: E402
from tracer.gguf import take_rows  # noqa: E402

ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM")
ROPE_TYPES = ("default", "linear", "llama3")


class CheckpointError(ValueError):
    """A checkpoint folder wgjit cannot run: what is wrong and where (file, tensor, config key)."""


# --- configuration ----------------------------------------------------------------------------


@dataclass(frozen=True)
class LlamaConfig:
    """The numbers that decide the computation, read from a Hugging Face config.json."""

    architecture: str
    vocab: int
    dim: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ff: int
    eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None
    tie_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    max_positions: int = 2048
    windows: tuple[int | None, ...] = ()  # per layer: sliding-window length, None = full attention
    eos_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not self.windows:  # no sliding windows given: every layer attends to everything
            object.__setattr__(self, "windows", (None,) * self.layers)
        if len(self.windows) != self.layers:
            raise CheckpointError(f"{len(self.windows)} sliding windows given for {self.layers} layers")

    @classmethod
    def from_hf(cls, cfg: dict[str, Any], where: str = "config.json") -> LlamaConfig:
        arch = (cfg.get("architectures") or [None])[0]
        if arch not in ARCHITECTURES:
            raise CheckpointError(
                f"{where}: architecture {arch!r} is not supported; expected one of {', '.join(ARCHITECTURES)}"
            )
        need = ["vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"]
        missing = [k for k in need if cfg.get(k) is None]
        if missing:
            raise CheckpointError(f"{where}: missing {', '.join(missing)} for {arch}")
        act = cfg.get("hidden_act", "silu")
        if act != "silu":
            raise CheckpointError(f"{where}: hidden_act {act!r} is not supported ({arch} uses silu)")
        heads = cfg["num_attention_heads"]
        kv_heads = cfg.get("num_key_value_heads") or heads
        if heads % kv_heads:
            raise CheckpointError(f"{where}: {heads} attention heads do not split into {kv_heads} key/value heads")
        head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
        rope = cfg.get("rope_parameters") or {}  # newer transformers keep rope_theta and the scaling here
        theta = float(cfg.get("rope_theta") or rope.get("rope_theta") or 10000.0)
        scaling = _rope_scaling(cfg.get("rope_scaling") or rope or None, where)
        layers = cfg["num_hidden_layers"]
        qwen = arch == "Qwen2ForCausalLM"
        eos = cfg.get("eos_token_id")
        return cls(
            architecture=arch,
            vocab=cfg["vocab_size"],
            dim=cfg["hidden_size"],
            layers=layers,
            heads=heads,
            kv_heads=kv_heads,
            head_dim=head_dim,
            ff=cfg["intermediate_size"],
            eps=float(cfg.get("rms_norm_eps", 1e-6)),
            rope_theta=theta,
            rope_scaling=scaling,
            tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            qkv_bias=qwen or bool(cfg.get("attention_bias", False)),
            o_bias=(not qwen) and bool(cfg.get("attention_bias", False)),
            mlp_bias=bool(cfg.get("mlp_bias", False)),
            max_positions=int(cfg.get("max_position_embeddings") or 2048),
            windows=_windows(cfg, arch, layers),
            eos_ids=tuple(eos) if isinstance(eos, list) else (() if eos is None else (int(eos),)),
        )

    def to_hf(self) -> dict[str, Any]:
        """A config.json that reads back as this config (tiny test checkpoints, the benchmark)."""
        cfg: dict[str, Any] = {
            "architectures": [self.architecture],
            "model_type": {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral"}.get(
                self.architecture, "qwen2"
            ),
            "vocab_size": self.vocab,
            "hidden_size": self.dim,
            "intermediate_size": self.ff,
            "num_hidden_layers": self.layers,
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "rms_norm_eps": self.eps,
            "rope_theta": self.rope_theta,
            "rope_scaling": self.rope_scaling,
            "tie_word_embeddings": self.tie_embeddings,
            "max_position_embeddings": self.max_positions,
            "torch_dtype": "float32",
        }
        if self.architecture == "LlamaForCausalLM":
            cfg["attention_bias"] = self.qkv_bias
            cfg["mlp_bias"] = self.mlp_bias
        window = next((w for w in self.windows if w), None)
        if self.architecture == "MistralForCausalLM":
            cfg["sliding_window"] = window
        if self.architecture == "Qwen2ForCausalLM":
            cfg["use_sliding_window"] = window is not None
            cfg["sliding_window"] = window
            cfg["max_window_layers"] = next((i for i, w in enumerate(self.windows) if w), self.layers)
        if self.eos_ids:
            cfg["eos_token_id"] = list(self.eos_ids) if len(self.eos_ids) > 1 else self.eos_ids[0]
        return cfg

    def tensor_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every tensor the checkpoint must hold, by its Hugging Face name, with its shape."""
        d, hd, ff = self.dim, self.head_dim, self.ff
        q, kv = self.heads * hd, self.kv_heads * hd
        shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (self.vocab, d)}
        for i in range(self.layers):
            p = f"model.layers.{i}."
            shapes[p + "input_layernorm.weight"] = (d,)
            shapes[p + "post_attention_layernorm.weight"] = (d,)
            for name, rows in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
                shapes[f"{p}self_attn.{name}.weight"] = (rows, d)
                if self.qkv_bias:
                    shapes[f"{p}self_attn.{name}.bias"] = (rows,)
            shapes[p + "self_attn.o_proj.weight"] = (d, q)
            if self.o_bias:
                shapes[p + "self_attn.o_proj.bias"] = (d,)
            for name, shape in (("gate_proj", (ff, d)), ("up_proj", (ff, d)), ("down_proj", (d, ff))):
                shapes[f"{p}mlp.{name}.weight"] = shape
                if self.mlp_bias:
                    shapes[f"{p}mlp.{name}.bias"] = (shape[0],)
        shapes["model.norm.weight"] = (d,)
        if not self.tie_embeddings:
            shapes["lm_head.weight"] = (self.vocab, d)
        return shapes

    def inv_freq(self) -> np.ndarray:
        """Rotary frequencies (head_dim / 2,) in float32, with the configured scaling applied."""
        base = np.float32(self.rope_theta)
        exponents = np.arange(0, self.head_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(self.head_dim)
        inv = (np.float32(1.0) / base**exponents).astype(np.float32)
        s = self.rope_scaling
        kind = (s or {}).get("rope_type", (s or {}).get("type", "default"))
        if kind == "linear":
            return (inv / np.float32(s["factor"])).astype(np.float32)
        if kind == "llama3":
            return _llama3_inv_freq(inv, s)
        return inv


def _rope_scaling(s: dict[str, Any] | None, where: str) -> dict[str, Any] | None:
    """The rope_scaling entry if it is one we compute; a clear error for the others."""
    if not s:
        return None
    kind = s.get("rope_type", s.get("type", "default"))
    if kind not in ROPE_TYPES:
        raise CheckpointError(
            f"{where}: rope scaling {kind!r} is not supported (supported: {', '.join(ROPE_TYPES)}); "
            "the model would run with wrong positions"
        )
    if kind == "default":
        return None
    need = ["factor"] + (
        ["low_freq_factor", "high_freq_factor", "original_max_position_embeddings"] if kind == "llama3" else []
    )
    missing = [k for k in need if k not in s]
    if missing:
        raise CheckpointError(f"{where}: rope scaling {kind!r} lacks {', '.join(missing)}")
    return {"rope_type": kind} | {k: s[k] for k in need}


def _llama3_inv_freq(inv: np.ndarray, s: dict[str, Any]) -> np.ndarray:
    """Llama 3.1's frequency scaling: long wavelengths divided by `factor`, short ones kept, a blend between."""
    factor, low, high = float(s["factor"]), float(s["low_freq_factor"]), float(s["high_freq_factor"])
    old = float(s["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv.astype(np.float64)
    scaled = np.where(wavelen > old / low, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old / high) & (wavelen <= old / low)
    return np.where(medium, blended, scaled).astype(np.float32)


def _windows(cfg: dict[str, Any], arch: str, layers: int) -> tuple[int | None, ...]:
    """Sliding-window length per layer (None: full attention), as transformers reads these configs."""
    window = cfg.get("sliding_window")
    if arch == "Qwen2ForCausalLM" and not cfg.get("use_sliding_window", False):
        window = None
    if window is None:
        return (None,) * layers
    types = cfg.get("layer_types")
    if types is not None:
        return tuple(int(window) if t == "sliding_attention" else None for t in types)
    if arch == "Qwen2ForCausalLM":
        first = cfg.get("max_window_layers", layers)
        return tuple(int(window) if i >= first else None for i in range(layers))
    return (int(window),) * layers


# --- checkpoints ----------------------------------------------------------------------------------


def read_config(path: str | os.PathLike) -> LlamaConfig:
    folder = Path(path)
    file = folder / "config.json"
    if not file.is_file():
        raise CheckpointError(f"{folder}: no config.json (expected a Hugging Face checkpoint folder)")
    return LlamaConfig.from_hf(json.loads(file.read_text()), str(file))


def load_weights(
    path: str | os.PathLike, cfg: LlamaConfig, dtype: tr.DType = tr.float32, quantize: str | None = None
) -> dict[str, tr.Tensor]:
    """The checkpoint's tensors (model.safetensors or a sharded index), checked by name and shape.

    quantize ("q8_0", "q4_0", "q4_k", "q6_k") quantizes the matrices on the host as they load (quantize_weights).
    """
    folder = Path(path)
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text()).get("weight_map", {})
        files = sorted(set(weight_map.values()))
    elif (folder / "model.safetensors").is_file():
        files = ["model.safetensors"]
    else:
        raise CheckpointError(f"{folder}: neither model.safetensors nor model.safetensors.index.json is there")
    found: dict[str, tr.Tensor] = {}
    for name in files:
        if not (folder / name).is_file():
            raise CheckpointError(f"{folder}: shard {name} named in model.safetensors.index.json is missing")
        found.update(tr.load_safetensors(folder / name))
    if quantize:
        found = quantize_weights(found, cfg, quantize)
    return check_weights(found, cfg, str(folder), dtype)


def check_weights(
    found: dict[str, Any], cfg: LlamaConfig, where: str, dtype: tr.DType = tr.float32
) -> dict[str, tr.Tensor]:
    """The tensors the architecture needs, cast to `dtype`; errors name a missing or misshapen tensor."""
    out: dict[str, tr.Tensor] = {}
    for name, shape in cfg.tensor_shapes().items():
        t = found.get(name)
        if t is None:
            raise CheckpointError(f"{where}: tensor {name!r} is missing ({cfg.architecture} needs it, shape {shape})")
        if tuple(t.shape) != shape:
            raise CheckpointError(f"{where}: tensor {name!r} has shape {tuple(t.shape)}, expected {shape}")
        t = t if isinstance(t, tr.Tensor) else tr.tensor(t)
        out[name] = t.astype(dtype) if t.dtype.is_float and not t.dtype.is_quantized else t
    return out


# --- quantized weights and GGUF files (llama.cpp) ---------------------------------------------------

# q4_k_m: q4_k, but q6_k where llama.cpp's Q4_K_M mix puts Q6_K (format_of)
QUANTIZE = {"q8_0": tr.q8_0, "q4_0": tr.q4_0, "q4_k": tr.q4_k, "q6_k": tr.q6_k, "q4_k_m": tr.q4_k}


def format_of(fmt: str, name: str, cfg: LlamaConfig) -> tr.DType:
    """The format `--quantize fmt` gives matrix `name`. q4_k_m follows llama.cpp's Q4_K_M mix: q6_k for the
    output head (the embedding when tied), and for attn_v and ffn_down of the first and last eighth of the
    layers and every third layer between; q4_k for the rest."""
    if fmt != "q4_k_m":
        return QUANTIZE[fmt]
    if name == ("model.embed_tokens.weight" if cfg.tie_embeddings else "lm_head.weight"):
        return tr.q6_k
    if name.endswith(("self_attn.v_proj.weight", "mlp.down_proj.weight")):
        i, n = int(name.split(".")[2]), cfg.layers
        if i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2:
            return tr.q6_k
    return tr.q4_k


def quantized_names(cfg: LlamaConfig) -> list[str]:
    """The matrices quantization applies to: every projection, the embedding and the output head."""
    return [n for n, s in cfg.tensor_shapes().items() if len(s) == 2]


def quantize_weights(weights: dict[str, Any], cfg: LlamaConfig, fmt: str) -> dict[str, Any]:
    """The checkpoint (Tensors or arrays) with its matrices quantized to `fmt` (q8_0, q4_0, q4_k, q6_k, or the
    q4_k_m mix: format_of) on the host; norms and biases kept."""
    if fmt not in QUANTIZE:
        raise CheckpointError(f"--quantize {fmt!r}: choose one of {', '.join(QUANTIZE)}")
    out = dict(weights)
    for name in quantized_names(cfg):
        w = weights.get(name)
        if w is None or (isinstance(w, tr.Tensor) and w.dtype.is_quantized):
            continue  # missing (check_weights says so) or already quantized (a GGUF file)
        dtype = format_of(fmt, name, cfg)
        block = dtype.block  # 32 values, 256 for q4_k and q6_k
        if w.shape[-1] % block:
            raise CheckpointError(
                f"--quantize {fmt}: tensor {name!r} has rows of {w.shape[-1]}, not whole blocks of {block}"
            )
        out[name] = tr.quantize(w, dtype)
    return out


def is_gguf(path: str | os.PathLike) -> bool:
    """A GGUF file (llama.cpp's format), told by its magic, not its name."""
    p = Path(path)
    if not p.is_file():
        return False
    with open(p, "rb") as f:
        return f.read(4) == b"GGUF"


# llama.cpp's tensor names (per layer: blk.N.<name>) and the Hugging Face names they hold
GGUF_GLOBAL = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
GGUF_LAYER = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def gguf_config(meta: dict[str, Any], tensor_names: list[str], where: str) -> LlamaConfig:
    """A LlamaConfig from llama.cpp's metadata (general.architecture = llama, llama.* keys)."""
    arch = meta.get("general.architecture")
    if arch != "llama":
        raise CheckpointError(f"{where}: general.architecture is {arch!r}; only 'llama' GGUF files are supported")

    def key(name: str, default: Any = None) -> Any:
        value = meta.get(f"llama.{name}", default)
        if value is None:
            raise CheckpointError(f"{where}: metadata llama.{name} is missing")
        return value

    heads = int(key("attention.head_count"))
    kv_heads = int(key("attention.head_count_kv", heads))
    dim = int(key("embedding_length"))
    if heads % kv_heads:
        raise CheckpointError(f"{where}: {heads} attention heads do not split into {kv_heads} key/value heads")
    vocab = meta.get("llama.vocab_size") or len(meta.get("tokenizer.ggml.tokens") or []) or None
    if vocab is None:
        raise CheckpointError(f"{where}: neither llama.vocab_size nor tokenizer.ggml.tokens gives the vocabulary size")
    scaling = None
    if meta.get("llama.rope.scaling.type") not in (None, "none"):
        kind = meta["llama.rope.scaling.type"]
        scaling = _rope_scaling({"rope_type": kind, "factor": meta.get("llama.rope.scaling.factor")}, where)
    if "rope_freqs.weight" in tensor_names:
        raise CheckpointError(f"{where}: rope_freqs.weight (Llama 3.1 frequency factors) is not supported yet")
    eos = meta.get("tokenizer.ggml.eos_token_id")
    return LlamaConfig(
        architecture="LlamaForCausalLM",
        vocab=int(vocab),
        dim=dim,
        layers=int(key("block_count")),
        heads=heads,
        kv_heads=kv_heads,
        head_dim=int(meta.get("llama.attention.key_length") or dim // heads),
        ff=int(key("feed_forward_length")),
        eps=float(key("attention.layer_norm_rms_epsilon", 1e-5)),
        rope_theta=float(key("rope.freq_base", 10000.0)),
        rope_scaling=scaling,
        tie_embeddings="output.weight" not in tensor_names,
        max_positions=int(key("context_length", 2048)),
        eos_ids=() if eos is None else (int(eos),),
    )


def gguf_name(name: str) -> str | None:
    """The Hugging Face name of a llama.cpp tensor name (None for tensors the model does not use)."""
    base, _, suffix = name.rpartition(".")
    parts = base.split(".")
    if len(parts) == 3 and parts[0] == "blk" and parts[2] in GGUF_LAYER:
        return f"model.layers.{parts[1]}.{GGUF_LAYER[parts[2]]}.{suffix}"
    return f"{GGUF_GLOBAL[base]}.{suffix}" if base in GGUF_GLOBAL else None


def rope_rows(heads: int, head_dim: int) -> np.ndarray:
    """The row order that undoes llama.cpp's permutation of q and k for its rope.

    llama.cpp rotates adjacent pairs (2i, 2i + 1) of a head; Hugging Face rotates i with
    i + head_dim / 2. Its converter therefore stores row j of a head at position 2j for the
    first half and 2(j - head_dim / 2) + 1 for the second. Row r of the Hugging Face weight
    is row rope_rows[r] of the GGUF one.
    """
    half = head_dim // 2
    within = np.concatenate([2 * np.arange(half), 2 * np.arange(half) + 1])
    return (np.arange(heads)[:, None] * head_dim + within[None, :]).reshape(-1)


def load_gguf_checkpoint(
    path: str | os.PathLike, dtype: tr.DType = tr.float32, quantize: str | None = None
) -> tuple[LlamaConfig, dict[str, tr.Tensor]]:
    """A llama.cpp GGUF file as (config, weights by Hugging Face name); Q8_0/Q4_0/Q4_K/Q6_K stay quantized.

    quantize ("q8_0", "q4_0", "q4_k", "q6_k") quantizes its float matrices too (quantize_weights).
    """
    where = str(path)
    try:
        meta = tr.gguf_metadata(path)
        found = tr.load_gguf(path)
    except tr.FormatError as e:
        raise CheckpointError(str(e)) from None
    cfg = gguf_config(meta, list(found), where)
    named: dict[str, tr.Tensor] = {}
    for name, t in found.items():
        hf = gguf_name(name)
        if hf is None:
            continue
        if hf.endswith(("q_proj.weight", "k_proj.weight")):
            heads = cfg.heads if "q_proj" in hf else cfg.kv_heads
            if t.shape[0] != heads * cfg.head_dim:
                raise CheckpointError(
                    f"{where}: tensor {name!r} has shape {t.shape}, expected {(heads * cfg.head_dim, cfg.dim)}"
                )
            t = take_rows(t, rope_rows(heads, cfg.head_dim))
        named[hf] = t
    if quantize:
        named = quantize_weights(named, cfg, quantize)
    return cfg, check_weights(named, cfg, where, dtype)


def random_weights(cfg: LlamaConfig, seed: int = 0, scale: float = 0.02) -> dict[str, np.ndarray]:
    """Seeded random float32 weights of the right shapes (norm weights near 1), by Hugging Face name."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in cfg.tensor_shapes().items():
        w = rng.standard_normal(shape, dtype=np.float32)
        if name.endswith("norm.weight"):
            w = 1.0 + 0.1 * w
        elif name != "model.embed_tokens.weight":  # embeddings keep unit scale (a tied head then spreads logits)
            w *= np.float32(scale)
        out[name] = w.astype(np.float32, copy=False)
    return out


def write_checkpoint(
    folder: str | os.PathLike, cfg: LlamaConfig, weights: dict[str, np.ndarray], shards: int = 1
) -> Path:
    """A Hugging Face folder (config.json + model.safetensors, or `shards` files and their index)."""
    from safetensors.numpy import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg.to_hf(), indent=1))
    names = list(weights)
    if shards <= 1:
        save_file(weights, str(folder / "model.safetensors"))
        return folder
    weight_map = {}
    for s in range(shards):
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: weights[n] for n in names[s::shards]}
        save_file(part, str(folder / file))
        weight_map.update({n: file for n in part})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return folder


# --- the model -----------------------------------------------------------------------------------


@dataclass
class KVCache:
    """Per layer, keys and values (1, kv_heads, ctx, head_dim); `length` positions are filled."""

    k: list[tr.Tensor]
    v: list[tr.Tensor]
    length: int = 0

    def tensors(self) -> list[tr.Tensor]:
        return [t for pair in zip(self.k, self.v) for t in pair]

    @classmethod
    def from_tensors(cls, tensors: list[tr.Tensor] | tuple[tr.Tensor, ...], length: int) -> KVCache:
        return cls(list(tensors[0::2]), list(tensors[1::2]), length)


Attend = Callable[[int, tr.Tensor, tr.Tensor, tr.Tensor], tr.Tensor]


class Llama:
    """The weights on the GPU, the rope tables and the forward passes; batch size 1.

    ctx is the cache length: the most positions one generation can reach.
    """

    def __init__(self, cfg: LlamaConfig, w: dict[str, tr.Tensor], ctx: int, dtype: tr.DType = tr.float32) -> None:
        if not 0 < ctx <= cfg.max_positions:
            raise ValueError(f"ctx {ctx} must be in 1..{cfg.max_positions} (the model's max_position_embeddings)")
        self.cfg, self.w, self.ctx, self.dtype = cfg, w, ctx, dtype
        angles = np.arange(self.ctx, dtype=np.float32)[:, None] * self.cfg.inv_freq()[None, :]
        self.cos = tr.tensor(np.cos(angles)).astype(self.dtype)
        self.sin = tr.tensor(np.sin(angles)).astype(self.dtype)
        self.positions = tr.arange(self.ctx)
        tr.realize(self.cos, self.sin, self.positions)
        self.step_jit = tr.jit(self.step)
        self.step_into_jit = tr.jit(self.step_into)
        self.prefill_jit = tr.jit(self.prefill)

    @classmethod
    def load(cls, path: str | os.PathLike, ctx: int, dtype: tr.DType = tr.float32) -> Llama:
        cfg = read_config(path)
        return cls(cfg, load_weights(path, cfg, dtype), ctx, dtype)

    def empty_cache(self) -> KVCache:
        shape = (1, self.cfg.kv_heads, self.ctx, self.cfg.head_dim)
        tensors = [tr.zeros(shape, dtype=self.dtype) for _ in range(2 * self.cfg.layers)]
        tr.realize(*tensors)
        return KVCache.from_tensors(tensors, 0)

    # --- pieces ---
    def _linear(self, x: tr.Tensor, name: str) -> tr.Tensor:
        return tr.nn.linear(x, self.w[name + ".weight"], self.w.get(name + ".bias"))

    def _layer(self, x: tr.Tensor, i: int, cos: tr.Tensor, sin: tr.Tensor, attend: Attend) -> tr.Tensor:
        """One decoder layer over x (1, T, dim); `attend(i, q, k, v)` owns the cache and the mask."""
        c, p = self.cfg, f"model.layers.{i}."
        t = x.shape[1]
        h = tr.nn.rms_norm(x, self.w[p + "input_layernorm.weight"], c.eps)

        def heads(y: tr.Tensor, n: int) -> tr.Tensor:  # (1, T, n * hd) -> (1, n, T, hd)
            return y.reshape(1, t, n, c.head_dim).permute(0, 2, 1, 3)

        q = tr.nn.rope(heads(self._linear(h, p + "self_attn.q_proj"), c.heads), cos, sin)
        k = tr.nn.rope(heads(self._linear(h, p + "self_attn.k_proj"), c.kv_heads), cos, sin)
        v = heads(self._linear(h, p + "self_attn.v_proj"), c.kv_heads)
        a = attend(i, q, k, v).permute(0, 2, 1, 3).reshape(1, t, c.heads * c.head_dim)
        x = x + self._linear(a, p + "self_attn.o_proj")
        h = tr.nn.rms_norm(x, self.w[p + "post_attention_layernorm.weight"], c.eps)
        gated = self._linear(h, p + "mlp.gate_proj").silu() * self._linear(h, p + "mlp.up_proj")
        return x + self._linear(gated, p + "mlp.down_proj")

    def _logits(self, x: tr.Tensor) -> tr.Tensor:
        x = tr.nn.rms_norm(x, self.w["model.norm.weight"], self.cfg.eps)
        head = self.w["model.embed_tokens.weight" if self.cfg.tie_embeddings else "lm_head.weight"]
        return tr.nn.linear(x, head).astype(tr.float32)

    def _embed(self, ids: tr.Tensor) -> tr.Tensor:
        # .astype: rows of a quantized table come out float32
        return tr.nn.embedding(ids, self.w["model.embed_tokens.weight"]).astype(self.dtype)

    # --- prefill ---
    def prefill(self, ids: tr.Tensor, *cache: tr.Tensor, all_logits: bool = False) -> tuple[tr.Tensor, ...]:
        """The prompt ids (1, T) from position 0: (logits, next id (1,), *the caches with 0..T-1 filled).

        logits are float32, (1, vocab) for the last position, or (1, T, vocab) with all_logits.
        Pure (no argument is changed), so it runs under `@tr.jit` (`prefill_jit`) as well as lazily.
        """
        t = ids.shape[1]
        if t > self.ctx:
            raise ValueError(f"prefill: the prompt has {t} tokens, more than the cache's {self.ctx} positions")
        cos, sin = self.cos[:t], self.sin[:t]
        new: list[tr.Tensor] = list(cache)
        masks: dict[int, tr.Tensor] = {}  # one mask per sliding window, shared by its layers

        def attend(i: int, q: tr.Tensor, k: tr.Tensor, v: tr.Tensor) -> tr.Tensor:
            for j, kv in ((2 * i, k), (2 * i + 1, v)):
                rest = cache[j][:, :, t:]
                new[j] = tr.concat([kv.astype(self.dtype), rest], axis=2) if rest.shape[2] else kv.astype(self.dtype)
            window = self.cfg.windows[i]
            if window is None:  # causal: the attention kernel skips the key blocks after each query block
                return tr.nn.scaled_dot_product_attention(q, k, v, is_causal=True)
            if window not in masks:
                masks[window] = self._window_mask(window, t)
            return tr.nn.scaled_dot_product_attention(q, k, v, mask=masks[window])

        x = self._embed(ids)
        for i in range(self.cfg.layers):
            x = self._layer(x, i, cos, sin, attend)
        if all_logits:
            logits = self._logits(x)
            return (logits, logits[:, -1].argmax(-1), *new)
        logits = self._logits(x[:, -1:]).reshape(1, self.cfg.vocab)
        return (logits, logits.argmax(-1), *new)

    @staticmethod
    def _window_mask(window: int, t: int) -> tr.Tensor:
        """(t, t) bool: causal, and inside a sliding window of `window` positions."""
        rows = np.arange(t)[:, None]
        cols = np.arange(t)[None, :]
        return tr.tensor((cols <= rows) & (cols > rows - window))

    # --- decoding: the jit form ---
    def step(self, ids: tr.Tensor, pos: tr.Tensor, *cache: tr.Tensor) -> tuple[tr.Tensor, ...]:
        """One token at a runtime position, for `@tr.jit` (`step_jit`): returns (logits (1, vocab), next id (1,), *cache).

        ids (1, 1) int32, pos (1,) int32. The cache stays (1, kv_heads, ctx, head_dim): the new
        key and value are written with `where` at the one-hot of pos, attention covers every slot
        and an additive mask hides those after pos (and those outside a sliding window).
        """
        cos = tr.nn.embedding(pos, self.cos).reshape(1, 1, 1, -1)
        sin = tr.nn.embedding(pos, self.sin).reshape(1, 1, 1, -1)
        at = (self.positions == pos).reshape(1, 1, self.ctx, 1)
        new: list[tr.Tensor] = list(cache)
        masks: dict[int | None, tr.Tensor] = {}

        def attend(i: int, q: tr.Tensor, k: tr.Tensor, v: tr.Tensor) -> tr.Tensor:
            for j, kv in ((2 * i, k), (2 * i + 1, v)):
                new[j] = tr.where(at, kv.astype(self.dtype), cache[j])
            window = self.cfg.windows[i]
            if window not in masks:
                masks[window] = self._step_mask(pos, window)
            return tr.nn.scaled_dot_product_attention(q, new[2 * i], new[2 * i + 1], mask=masks[window])

        x = self._embed(ids)
        for i in range(self.cfg.layers):
            x = self._layer(x, i, cos, sin, attend)
        logits = self._logits(x).reshape(1, self.cfg.vocab)
        return (logits, logits.argmax(-1), *new)

    def _step_mask(self, pos: tr.Tensor, window: int | None) -> tr.Tensor:
        """Additive (1, 1, 1, ctx): 0 where the slot is attended, -inf elsewhere."""
        keep = self.positions <= pos
        if window is not None:
            keep = keep & (self.positions > pos - window)
        return tr.where(keep, 0.0, float("-inf")).astype(self.dtype).reshape(1, 1, 1, self.ctx)

    # --- decoding: the natural loop, lazily or under @tr.jit ---
    def step_lazy(self, ids: tr.Tensor, pos: int, cache: KVCache) -> tuple[tr.Tensor, tr.Tensor]:
        """One token as users write it: index_write at pos, attend over cache[:, :, :pos + 1]; changes `cache`.

        Returns (logits (1, vocab), next id (1,)), lazily. The position is a runtime integer
        (`tr.dynamic`): the rope rows, the cache writes and the attended length read it when the
        program runs, so the loop compiles one program per bucket of the attended length
        (powers of two), not one per token.
        """
        if not 0 <= pos < self.ctx:
            raise ValueError(f"step_lazy: position {pos} is outside the cache's {self.ctx} positions")
        logits, next_id = self._step_at(ids, tr.dynamic(pos), cache.k, cache.v, pos)
        cache.length = pos + 1
        return logits, next_id

    def step_into(self, ids: tr.Tensor, pos: tr.RuntimeInt, *cache: tr.Tensor) -> tuple[tr.Tensor, tr.Tensor]:
        """The natural step for `@tr.jit` (`step_into_jit`): writes the key and value into `cache` at `pos`.

        ids (1, 1) int32, or (1,): the next id a step returned, fed back without reading it (a
        loop that runs a token ahead); pos a `tr.dynamic` position; cache as `KVCache.tensors()`,
        changed in place (a jitted call writes one row per layer: no cache is copied). Returns
        (logits (1, vocab), next id (1,)). The jit keeps one trace per bucket of the attended
        length. Models with a sliding window use `step` (the window's start needs the position in
        python).
        """
        if any(w is not None for w in self.cfg.windows):
            raise ValueError("step_into: this model has sliding-window layers; use step (step_jit) instead")
        if ids.shape == (1,):  # reshaped inside the step: outside, the view would be a program of its own
            ids = ids.reshape(1, 1)
        return self._step_at(ids, pos, list(cache[0::2]), list(cache[1::2]), None)

    def _step_at(
        self, ids: tr.Tensor, p: tr.RuntimeInt, ks: list[tr.Tensor], vs: list[tr.Tensor], pos: int | None
    ) -> tuple[tr.Tensor, tr.Tensor]:
        """One token at runtime position p into the caches ks, vs (changed); pos: p's value where python may read it."""
        cos, sin = self.cos[p : p + 1], self.sin[p : p + 1]

        def attend(i: int, q: tr.Tensor, k: tr.Tensor, v: tr.Tensor) -> tr.Tensor:
            window = self.cfg.windows[i]
            ks[i].index_write(k.astype(self.dtype), (0, 0, p, 0))
            vs[i].index_write(v.astype(self.dtype), (0, 0, p, 0))
            if window is not None and pos is not None and pos + 1 > window:  # a fixed length from a runtime start
                start = p + 1 - window
                keys, values = ks[i][:, :, start : p + 1], vs[i][:, :, start : p + 1]
            else:
                keys, values = ks[i][:, :, : p + 1], vs[i][:, :, : p + 1]
            return tr.nn.scaled_dot_product_attention(q, keys, values)

        x = self._embed(ids)
        for i in range(self.cfg.layers):
            x = self._layer(x, i, cos, sin, attend)
        logits = self._logits(x).reshape(1, self.cfg.vocab)
        return logits, logits.argmax(-1)
