"""Small GGUF files for the tests, written with the gguf package's GGUFWriter (as llama.cpp's converter does).

`write_gguf` writes any tensors and metadata; `write_llama_gguf` writes a Llama checkpoint
the way llama.cpp's convert_hf_to_gguf.py lays it out: its tensor names, its metadata keys,
and q/k rows permuted for its rope (pairs of adjacent rows rotate together). That
permutation is written here from the converter's definition, apart from examples/llama.py,
which undoes it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import numpy as np

GGUF_NAMES = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def encode(values: np.ndarray, kind: str) -> tuple[np.ndarray, Any]:
    """values (float32, numpy order) as the data GGUFWriter.add_tensor takes for GGML type `kind`."""
    qtype = gguf.GGMLQuantizationType[kind]
    if kind in ("F32", "F16", "I32"):
        return values.astype({"F32": np.float32, "F16": np.float16, "I32": np.int32}[kind]), None
    if kind in ("Q4_K", "Q6_K"):  # gguf.quants cannot quantize these: wgjit's quantizers make the blocks
        from ir.quant import quantize_q4_k, quantize_q6_k

        blocks = (quantize_q4_k if kind == "Q4_K" else quantize_q6_k)(values)
        rows = blocks.reshape(values.shape[:-1] + (-1,))  # GGUFWriter reads the shape from bytes per row
        return rows, qtype
    return gguf.quants.quantize(np.ascontiguousarray(values, dtype=np.float32), qtype), qtype


def write_gguf(path: Path, tensors: dict[str, tuple[np.ndarray, Any]], meta: dict[str, Any] | None = None) -> Path:
    """tensors: name -> (data, raw GGML type or None), data in numpy order (GGUF stores dims reversed)."""
    w = gguf.GGUFWriter(str(path), (meta or {}).get("general.architecture", "llama"))
    for key, value in (meta or {}).items():
        if key == "general.architecture":
            continue  # the writer adds it
        if isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, int):
            w.add_uint32(key, value)
        elif isinstance(value, float):
            w.add_float32(key, value)
        elif isinstance(value, str):
            w.add_string(key, value)
        else:
            w.add_array(key, list(value))
    for name, (data, raw) in tensors.items():
        w.add_tensor(name, data, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def permute_for_ggml_rope(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's converter: within each head, row j of the first half goes to 2j, of the second to 2j + 1."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama_meta(cfg: Any, tokenizer: dict[str, Any] | None = None) -> dict[str, Any]:
    meta = {
        "general.architecture": "llama",
        "llama.vocab_size": cfg.vocab,
        "llama.context_length": cfg.max_positions,
        "llama.embedding_length": cfg.dim,
        "llama.block_count": cfg.layers,
        "llama.feed_forward_length": cfg.ff,
        "llama.attention.head_count": cfg.heads,
        "llama.attention.head_count_kv": cfg.kv_heads,
        "llama.attention.layer_norm_rms_epsilon": float(cfg.eps),
        "llama.rope.freq_base": float(cfg.rope_theta),
        "llama.rope.dimension_count": cfg.head_dim,
    }
    return meta | (tokenizer or {})


def write_llama_gguf(
    path: Path, cfg: Any, weights: dict[str, np.ndarray], kind: str = "F32", tokenizer: dict | None = None
) -> Path:
    """A Llama checkpoint (Hugging Face names, float32) as llama.cpp would convert it; kind: the matrices' GGML type."""
    return write_gguf(path, llama_tensors(cfg, weights, kind), llama_meta(cfg, tokenizer))


def llama_tensors(cfg: Any, weights: dict[str, np.ndarray], kind: str = "F32") -> dict[str, tuple[np.ndarray, Any]]:
    """llama.cpp's tensors for a Llama checkpoint: its names, q/k permuted, matrices in GGML type `kind`."""
    tensors: dict[str, tuple[np.ndarray, Any]] = {}
    for name, w in weights.items():
        if name == "model.embed_tokens.weight":
            gname = "token_embd.weight"
        elif name == "model.norm.weight":
            gname = "output_norm.weight"
        elif name == "lm_head.weight":
            gname = "output.weight"
        else:
            _, _, layer, rest = name.split(".", 3)
            module, _, suffix = rest.rpartition(".")
            gname = f"blk.{layer}.{GGUF_NAMES[module]}.{suffix}"
            if module == "self_attn.q_proj":
                w = permute_for_ggml_rope(w, cfg.heads)
            elif module == "self_attn.k_proj":
                w = permute_for_ggml_rope(w, cfg.kv_heads)
        tensors[gname] = encode(w, kind if w.ndim == 2 else "F32")
    return tensors
