"""The decoder comparator: the same Llama architecture in plain torch, with a static KV cache.

Eager decoding writes the new key and value at the position and attends over
`cache[:, :, :pos + 1]` (what a torch user writes). The CUDA-graph form captures one decode
step over the whole static cache (position in a device tensor, `index_copy_` for the
write, an additive mask for the unused slots), then replays it per token. Both run in
float32 without TF32 (the harness sets that up). Sliding windows are not needed by the
benchmark's configurations and are refused.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


class TorchLlama:
    """Weights on the GPU and the forward passes; batch size 1. `cache()` makes a static cache."""

    def __init__(self, torch: Any, cfg: Any, weights: dict[str, np.ndarray], ctx: int, device: str = "cuda") -> None:
        if any(w is not None for w in cfg.windows):
            raise ValueError("the torch comparator has no sliding windows")
        self.torch, self.cfg, self.ctx, self.device = torch, cfg, ctx, device
        dev = device
        self.w = {k: torch.from_numpy(np.ascontiguousarray(v)).to(dev) for k, v in weights.items()}
        angles = torch.arange(ctx, dtype=torch.float32)[:, None] * torch.from_numpy(cfg.inv_freq())[None, :]
        self.cos, self.sin = angles.cos().to(dev), angles.sin().to(dev)
        self.positions = torch.arange(ctx, device=dev)
        self.head = self.w["model.embed_tokens.weight" if cfg.tie_embeddings else "lm_head.weight"]
        self.scale = 1.0 / math.sqrt(cfg.head_dim)

    def cache(self) -> list[Any]:
        shape = (1, self.cfg.kv_heads, self.ctx, self.cfg.head_dim)
        return [self.torch.zeros(shape, device=self.device) for _ in range(2 * self.cfg.layers)]

    # --- pieces ---
    def _linear(self, x: Any, name: str) -> Any:
        return self.torch.nn.functional.linear(x, self.w[name + ".weight"], self.w.get(name + ".bias"))

    def _norm(self, x: Any, name: str) -> Any:
        return x * self.torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.cfg.eps) * self.w[name]

    def _rope(self, x: Any, cos: Any, sin: Any) -> Any:
        """Half-split rotary embedding (pairs i and i + d/2), as Llama applies it."""
        half = x.shape[-1] // 2
        a, b = x[..., :half], x[..., half:]
        return self.torch.cat([a * cos - b * sin, b * cos + a * sin], -1)

    def _attention(self, q: Any, k: Any, v: Any, **kw: Any) -> Any:
        f = self.torch.nn.functional.scaled_dot_product_attention
        try:
            return f(q, k, v, enable_gqa=True, **kw)
        except TypeError:  # torch before 2.5: repeat the kv heads
            group = q.shape[1] // k.shape[1]
            return f(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1), **kw)

    def _forward(self, ids: Any, cos: Any, sin: Any, attend: Any) -> Any:
        c = self.cfg
        t = ids.shape[1]
        x = self.w["model.embed_tokens.weight"][ids]
        for i in range(c.layers):
            p = f"model.layers.{i}."
            h = self._norm(x, p + "input_layernorm.weight")
            q = self._linear(h, p + "self_attn.q_proj").view(1, t, c.heads, c.head_dim).transpose(1, 2)
            k = self._linear(h, p + "self_attn.k_proj").view(1, t, c.kv_heads, c.head_dim).transpose(1, 2)
            v = self._linear(h, p + "self_attn.v_proj").view(1, t, c.kv_heads, c.head_dim).transpose(1, 2)
            a = attend(i, self._rope(q, cos, sin), self._rope(k, cos, sin), v)
            x = x + self._linear(a.transpose(1, 2).reshape(1, t, c.heads * c.head_dim), p + "self_attn.o_proj")
            h = self._norm(x, p + "post_attention_layernorm.weight")
            gated = self.torch.nn.functional.silu(self._linear(h, p + "mlp.gate_proj")) * self._linear(
                h, p + "mlp.up_proj"
            )
            x = x + self._linear(gated, p + "mlp.down_proj")
        x = self._norm(x[:, -1], "model.norm.weight")
        return self.torch.nn.functional.linear(x, self.head)  # (1, vocab)

    # --- the user's calls ---
    def prefill(self, ids: Any, cache: list[Any]) -> Any:
        """Prompt ids (1, T) from position 0 into `cache`; the last position's logits (1, vocab)."""
        t = ids.shape[1]

        def attend(i: int, q: Any, k: Any, v: Any) -> Any:
            cache[2 * i][:, :, :t] = k
            cache[2 * i + 1][:, :, :t] = v
            return self._attention(q, k, v, is_causal=True)

        with self.torch.no_grad():
            return self._forward(ids, self.cos[:t], self.sin[:t], attend)

    def step(self, ids: Any, pos: int, cache: list[Any]) -> Any:
        """One token at python position `pos`: write, then attend over cache[:, :, :pos + 1]."""

        def attend(i: int, q: Any, k: Any, v: Any) -> Any:
            cache[2 * i][:, :, pos : pos + 1] = k
            cache[2 * i + 1][:, :, pos : pos + 1] = v
            return self._attention(q, cache[2 * i][:, :, : pos + 1], cache[2 * i + 1][:, :, : pos + 1])

        with self.torch.no_grad():
            return self._forward(ids, self.cos[pos : pos + 1], self.sin[pos : pos + 1], attend)

    def step_static(self, ids: Any, pos: Any, cache: list[Any]) -> Any:
        """One token at device position `pos` (1,): the whole cache with a mask, as a CUDA graph needs."""
        mask = self.torch.where(self.positions <= pos, 0.0, float("-inf")).view(1, 1, 1, self.ctx)

        def attend(i: int, q: Any, k: Any, v: Any) -> Any:
            cache[2 * i].index_copy_(2, pos, k)
            cache[2 * i + 1].index_copy_(2, pos, v)
            return self._attention(q, cache[2 * i], cache[2 * i + 1], attn_mask=mask)

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
