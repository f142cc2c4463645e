"""The decoder comparator: the same Llama architecture in plain, lean torch, with a static KV cache.

Lean as torch inference code is written (gpt-fast, vLLM): q, k and v come from one matmul over
the concatenated weights, one rotary call covers q and k, `F.rms_norm` where torch has it, and
F.scaled_dot_product_attention for attention. A decode query folds its grouped heads into the
query axis (q (1, H, 1, d) as (1, Hkv, H/Hkv, d)), so attention runs without repeating the
cache's heads. Eager decoding writes the new key and value at the position and attends over
`cache[:, :, :pos + 1]`. The CUDA-graph form captures one decode step over the whole static
cache (position in a device tensor, `index_copy_` for the write, an additive mask for the
unused slots), then replays it per token. float32 without TF32 (the harness sets that up), or
float16 weights, activations and cache (`dtype=torch.float16`: wgjit's float16 model beside it).
Sliding windows are not needed by the benchmark's configurations and are refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class _Layer:
    norm1: Any
    wqkv: Any
    bqkv: Any
    wo: Any
    bo: Any
    norm2: Any
    gate: tuple[Any, Any]
    up: tuple[Any, Any]
    down: tuple[Any, Any]


class TorchLlama:
    """Weights on the device and the forward passes; batch size 1. `cache()` makes a static cache."""

    def __init__(
        self, torch: Any, cfg: Any, weights: dict[str, np.ndarray], ctx: int, device: str = "cuda", dtype: Any = None
    ) -> None:
        if any(w is not None for w in cfg.windows):
            raise ValueError("the torch comparator has no sliding windows")
        self.torch, self.cfg, self.ctx, self.device = torch, cfg, ctx, device
        self.dtype = dtype or torch.float32
        self.F = torch.nn.functional
        w = {k: torch.from_numpy(np.ascontiguousarray(v)).to(device, self.dtype) for k, v in weights.items()}
        self.layers = [self._layer(w, f"model.layers.{i}.") for i in range(cfg.layers)]
        self.embed, self.norm = w["model.embed_tokens.weight"], w["model.norm.weight"]
        self.head = w["model.embed_tokens.weight" if cfg.tie_embeddings else "lm_head.weight"]
        angles = torch.arange(ctx, dtype=torch.float32)[:, None] * torch.from_numpy(cfg.inv_freq())[None, :]
        # full-width tables (each angle twice) for x * cos + rotate_half(x) * sin; (ctx, 1, d) to span heads
        self.cos = torch.cat([angles.cos()] * 2, -1)[:, None, :].to(device, self.dtype)
        self.sin = torch.cat([angles.sin()] * 2, -1)[:, None, :].to(device, self.dtype)
        self.positions = torch.arange(ctx, device=device)

    def _layer(self, w: dict[str, Any], p: str) -> _Layer:
        names = [p + f"self_attn.{n}_proj" for n in "qkv"]
        bias = [w.get(n + ".bias") for n in names]
        return _Layer(
            w[p + "input_layernorm.weight"],
            self.torch.cat([w[n + ".weight"] for n in names]),
            self.torch.cat(bias) if bias[0] is not None else None,
            w[p + "self_attn.o_proj.weight"],
            w.get(p + "self_attn.o_proj.bias"),
            w[p + "post_attention_layernorm.weight"],
            *((w[p + f"mlp.{n}_proj.weight"], w.get(p + f"mlp.{n}_proj.bias")) for n in ("gate", "up", "down")),
        )

    def cache(self) -> list[Any]:
        shape = (1, self.cfg.kv_heads, self.ctx, self.cfg.head_dim)
        return [self.torch.zeros(shape, device=self.device, dtype=self.dtype) for _ in range(2 * self.cfg.layers)]

    # --- pieces ---
    def _rms_norm(self, x: Any, weight: Any) -> Any:
        if hasattr(self.F, "rms_norm"):
            return self.F.rms_norm(x, (x.shape[-1],), weight, self.cfg.eps)
        return x * self.torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.cfg.eps) * weight

    def _rope(self, x: Any, cos: Any, sin: Any) -> Any:
        """Half-split rotary embedding (pairs i and i + d/2) of x (1, T, heads, d)."""
        half = x.shape[-1] // 2
        return x * cos + self.torch.cat([-x[..., half:], x[..., :half]], -1) * sin

    def _forward(self, ids: Any, cos: Any, sin: Any, attend: Any) -> Any:
        """ids (1, T) -> the last position's logits (1, vocab); attend(i, q, k, v) with q (1, T, H, d),
        k and v (1, T, Hkv, d) returns (1, T, H * d)."""
        c, F = self.cfg, self.F
        t, h, kv = ids.shape[1], c.heads, c.kv_heads
        x = self.embed[ids]
        for i, lw in enumerate(self.layers):
            qkv = F.linear(self._rms_norm(x, lw.norm1), lw.wqkv, lw.bqkv).view(1, t, h + 2 * kv, c.head_dim)
            qk = self._rope(qkv[:, :, : h + kv], cos, sin)  # q and k in one rotary call
            x = x + F.linear(attend(i, qk[:, :, :h], qk[:, :, h:], qkv[:, :, h + kv :]), lw.wo, lw.bo)
            y = self._rms_norm(x, lw.norm2)
            x = x + F.linear(F.silu(F.linear(y, *lw.gate)) * F.linear(y, *lw.up), *lw.down)
        return F.linear(self._rms_norm(x[:, -1], self.norm), self.head)

    def _decode_attention(self, q: Any, k: Any, v: Any, mask: Any = None) -> Any:
        """One query (1, 1, H, d) over k, v (1, Hkv, S, d): the H/Hkv heads of a group share the query axis."""
        c = self.cfg
        q = q.reshape(1, c.kv_heads, c.heads // c.kv_heads, c.head_dim)  # head h = kv head h // group, in order
        out = self.F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return out.reshape(1, 1, c.heads * c.head_dim)

    # --- the user's calls ---
    def prefill(self, ids: Any, cache: list[Any]) -> Any:
        """Prompt ids (1, T) from position 0 into `cache`; the last position's logits (1, vocab)."""
        t = ids.shape[1]
        sdpa = self.F.scaled_dot_product_attention

        def attend(i: int, q: Any, k: Any, v: Any) -> Any:
            k, v = k.transpose(1, 2), v.transpose(1, 2)
            cache[2 * i][:, :, :t] = k
            cache[2 * i + 1][:, :, :t] = v
            q = q.transpose(1, 2)
            try:
                out = sdpa(q, k, v, is_causal=True, enable_gqa=True)
            except TypeError:  # torch before 2.5: repeat the kv heads
                g = q.shape[1] // k.shape[1]
                out = sdpa(q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1), is_causal=True)
            return out.transpose(1, 2).reshape(1, t, -1)

        with self.torch.no_grad():
            return self._forward(ids, self.cos[:t], self.sin[:t], attend)

    def step(self, ids: Any, pos: int, cache: list[Any]) -> Any:
        """One token at python position `pos`: write, then attend over cache[:, :, :pos + 1]."""

        def attend(i: int, q: Any, k: Any, v: Any) -> Any:
            ck, cv = cache[2 * i], cache[2 * i + 1]
            ck[:, :, pos] = k[:, 0]
            cv[:, :, pos] = v[:, 0]
            return self._decode_attention(q, ck[:, :, : pos + 1], cv[:, :, : pos + 1])

        with self.torch.no_grad():
            return self._forward(ids, self.cos[pos : pos + 1], self.sin[pos : pos + 1], attend)

    def step_static(self, ids: Any, pos: Any, cache: list[Any]) -> Any:
        """One token at device position `pos` (1,): the whole cache with a mask, as a CUDA graph needs."""
        mask = self.torch.where(self.positions <= pos, 0.0, float("-inf")).to(self.dtype).view(1, 1, 1, self.ctx)

        def attend(i: int, q: Any, k: Any, v: Any) -> Any:
            cache[2 * i].index_copy_(2, pos, k.transpose(1, 2))
            cache[2 * i + 1].index_copy_(2, pos, v.transpose(1, 2))
            return self._decode_attention(q, cache[2 * i], cache[2 * i + 1], mask)

        with self.torch.no_grad():
            return self._forward(ids, self.cos[pos], self.sin[pos], attend)


class CudaGraphStep:
    """One decode step captured once over a static cache; `__call__(token, pos)` replays it, returns the next id."""

    def __init__(self, model: TorchLlama, cache: list[Any]) -> None:
        torch = model.torch
        self.torch = torch
        self.ids = torch.zeros((1, 1), dtype=torch.long, device="cuda")
        self.pos = torch.zeros((1,), dtype=torch.long, device="cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up off the default stream, as capture wants
            for _ in range(3):
                model.step_static(self.ids, self.pos, cache)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.logits = model.step_static(self.ids, self.pos, cache)
            self.next = self.logits.argmax(-1)
        # the warm-up wrote slot 0 of the cache: the caller prefills after this

    def replay(self, token: int, pos: int) -> None:
        self.ids.fill_(token)
        self.pos.fill_(pos)
        self.graph.replay()

    def __call__(self, token: int, pos: int) -> int:
        self.replay(token, pos)
        return int(self.next.item())
