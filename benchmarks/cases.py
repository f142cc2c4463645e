"""The benchmark cases of the op suites: what to compute, on which inputs, against which references.

A Case names its inputs (numpy arrays), the wgjit expression, the numpy reference, the
torch expression, and the bytes and flops one run must at least move and do (each input
read once, the output written once): GB/s and GFLOP/s are those counts over the time.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Case:
    suite: str
    name: str  # the family, e.g. "add"; plots draw one line per family
    shape: str  # for humans, e.g. "8192x4096" or "1x4096@4096x11008"
    dtype: str
    size: int  # the x axis of the plots (elements of the largest operand, or n of a square matmul)
    inputs: list[np.ndarray]
    ours: Callable[[list[Any]], Any]  # wgjit tensors -> wgjit tensor
    ref: Callable[[list[np.ndarray]], np.ndarray]  # numpy arrays -> numpy array (the oracle)
    torch: Callable[[list[Any]], Any] | None = None  # torch tensors -> torch tensor
    bytes: int = 0
    flops: int = 0
    rtol: float = 1e-4
    atol: float = 1e-5
    torch_compile: bool = False  # also time torch.compile of `torch`
    note: str = ""
    numpy_fn: Callable[[list[np.ndarray]], Any] | None = None  # what numpy's timing runs (default: ref)


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def randn(shape: tuple[int, ...], dtype: str = "float32", seed: int = 0) -> np.ndarray:
    return _rng(seed).standard_normal(shape, dtype=np.float32).astype(dtype)


def nbytes(*arrays_or_shapes: Any, itemsize: int = 4) -> int:
    total = 0
    for a in arrays_or_shapes:
        total += a.nbytes if isinstance(a, np.ndarray) else math.prod(a) * itemsize
    return total


def fmt_shape(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))


# --- elementwise --------------------------------------------------------------------------
def chain6(x: Any, y: Any) -> Any:
    """Six elementwise ops (mul, add, relu, sub, mul, sigmoid); written once for every library."""
    h = x * y + 1.0
    h = h * (h > 0) if isinstance(h, np.ndarray) else h.relu()
    return _sigmoid((h - x) * 0.5)


def _sigmoid(h: Any) -> Any:
    if isinstance(h, np.ndarray):
        return 1.0 / (1.0 + np.exp(-h))
    return h.sigmoid()


def elementwise_cases(sizes: list[int]) -> list[Case]:
    cases = []
    for n in sizes:
        a, b = randn((n,), seed=1), randn((n,), seed=2)
        cases.append(
            Case(
                "elementwise", "add", str(n), "float32", n, [a, b],
                ours=lambda t: t[0] + t[1], ref=lambda x: x[0] + x[1], torch=lambda t: t[0] + t[1],
                bytes=3 * a.nbytes,
            )
        )  # fmt: skip
        cases.append(
            Case(
                "elementwise", "chain6", str(n), "float32", n, [a, b],
                ours=lambda t: chain6(t[0], t[1]), ref=lambda x: chain6(x[0].astype(np.float64), x[1]).astype(np.float32),
                torch=lambda t: chain6_torch(t[0], t[1]), bytes=3 * a.nbytes, flops=6 * n, torch_compile=True,
                numpy_fn=lambda x: chain6(x[0], x[1]),
                note="bytes: two inputs read and one output written (what one fused kernel moves)",
            )
        )  # fmt: skip
    return cases


def chain6_torch(x: Any, y: Any) -> Any:
    h = (x * y + 1.0).relu()
    return ((h - x) * 0.5).sigmoid()


# --- reductions, softmax, norms ------------------------------------------------------------
def reduce_cases(shapes: list[tuple[int, int]]) -> list[Case]:
    cases = []
    for rows, cols in shapes:
        x = randn((rows, cols), seed=3)
        out = rows * 4
        cases.append(
            Case(
                "reduce", "sum_rows", fmt_shape((rows, cols)), "float32", rows * cols, [x],
                ours=lambda t: t[0].sum(axis=-1), ref=lambda a: a[0].astype(np.float64).sum(-1).astype(np.float32),
                torch=lambda t: t[0].sum(dim=-1), bytes=x.nbytes + out, flops=rows * cols,
                numpy_fn=lambda a: a[0].sum(-1), rtol=1e-4, atol=1e-3,
            )
        )  # fmt: skip
        cases.append(
            Case(
                "reduce", "max_rows", fmt_shape((rows, cols)), "float32", rows * cols, [x],
                ours=lambda t: t[0].max(axis=-1), ref=lambda a: a[0].max(-1),
                torch=lambda t: t[0].amax(dim=-1), bytes=x.nbytes + out, flops=rows * cols,
            )
        )  # fmt: skip
    return cases


def _softmax_np(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def softmax_cases(shapes: list[tuple[int, int]]) -> list[Case]:
    cases = []
    for rows, cols in shapes:
        x = randn((rows, cols), seed=4)
        cases.append(
            Case(
                "softmax", "softmax", fmt_shape((rows, cols)), "float32", rows * cols, [x],
                ours=lambda t: t[0].softmax(axis=-1), ref=lambda a: _softmax_np(a[0].astype(np.float64)).astype(np.float32),
                torch=lambda t: t[0].softmax(dim=-1), bytes=2 * x.nbytes, flops=5 * rows * cols,
                numpy_fn=lambda a: _softmax_np(a[0]), rtol=1e-4, atol=1e-6,
            )
        )  # fmt: skip
    return cases


def _layer_norm_np(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def _rms_norm_np(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def norm_cases(shapes: list[tuple[int, int]], tr_nn: Any) -> tuple[list[Case], list[str]]:
    """layer_norm and rms_norm through tr.nn; an op that tr.nn lacks is skipped with a note."""
    cases, notes = [], []
    have_ln = tr_nn is not None and hasattr(tr_nn, "layer_norm")
    have_rms = tr_nn is not None and hasattr(tr_nn, "rms_norm")
    if not have_ln:
        notes.append("norm/layer_norm skipped: tr.nn.layer_norm does not exist in this build (issue 3 adds it)")
    if not have_rms:
        notes.append("norm/rms_norm skipped: tr.nn.rms_norm does not exist in this build (issue 3 adds it)")
    for rows, cols in shapes:
        x = randn((rows, cols), seed=5)
        w, b = randn((cols,), seed=6), randn((cols,), seed=7)
        shape = fmt_shape((rows, cols))
        if have_ln:
            cases.append(
                Case(
                    "norm", "layer_norm", shape, "float32", rows * cols, [x, w, b],
                    ours=lambda t: tr_nn.layer_norm(t[0], t[1], t[2], 1e-5),
                    ref=lambda a: _layer_norm_np(a[0].astype(np.float64), a[1], a[2], 1e-5).astype(np.float32),
                    torch=lambda t: _torch_layer_norm(t[0], t[1], t[2]), bytes=2 * x.nbytes + w.nbytes + b.nbytes,
                    flops=8 * rows * cols, numpy_fn=lambda a: _layer_norm_np(a[0], a[1], a[2], 1e-5), rtol=1e-4, atol=1e-4,
                )
            )  # fmt: skip
        if have_rms:
            cases.append(
                Case(
                    "norm", "rms_norm", shape, "float32", rows * cols, [x, w],
                    ours=lambda t: tr_nn.rms_norm(t[0], t[1], 1e-6),
                    ref=lambda a: _rms_norm_np(a[0].astype(np.float64), a[1], 1e-6).astype(np.float32),
                    torch=lambda t: _torch_rms_norm(t[0], t[1]), bytes=2 * x.nbytes + w.nbytes,
                    flops=4 * rows * cols, numpy_fn=lambda a: _rms_norm_np(a[0], a[1], 1e-6), rtol=1e-4, atol=1e-4,
                )
            )  # fmt: skip
    return cases, notes


def _torch_layer_norm(x: Any, w: Any, b: Any) -> Any:
    import torch.nn.functional as F  # noqa: N812

    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


def _torch_rms_norm(x: Any, w: Any) -> Any:
    import torch
    import torch.nn.functional as F  # noqa: N812

    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), w, 1e-6)
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w


# --- matmul ---------------------------------------------------------------------------------
def _mm_ref(a: list[np.ndarray]) -> np.ndarray:
    return (a[0].astype(np.float64) @ a[1].astype(np.float64)).astype(a[0].dtype)


def matmul_cases(
    squares: list[int], gemvs: list[tuple[int, int]], attn: list[tuple[int, int, int, int]], f16: bool
) -> list[Case]:
    cases = []
    for n in squares:
        a, b = randn((n, n), seed=8), randn((n, n), seed=9)
        cases.append(
            Case(
                "matmul", "square", f"{n}x{n}x{n}", "float32", n, [a, b],
                ours=lambda t: t[0] @ t[1], ref=_mm_ref, torch=lambda t: t[0] @ t[1],
                bytes=3 * a.nbytes, flops=2 * n**3, rtol=1e-4, atol=1e-4 * math.sqrt(n),
                numpy_fn=lambda x: x[0] @ x[1],
            )
        )  # fmt: skip
    dtypes = ["float32", "float16"] if f16 else ["float32"]
    for dt in dtypes:
        for k, n in gemvs:
            x, w = randn((1, k), dt, seed=10), randn((k, n), dt, seed=11)
            tol = 1e-4 if dt == "float32" else 2e-3
            cases.append(
                Case(
                    "matmul", f"gemv_{dt[5:]}", f"1x{k}@{k}x{n}", dt, k * n, [x, w],
                    ours=lambda t: t[0] @ t[1], ref=_mm_ref, torch=lambda t: t[0] @ t[1],
                    bytes=x.nbytes + w.nbytes + n * x.itemsize, flops=2 * k * n, rtol=tol, atol=tol * math.sqrt(k),
                    numpy_fn=lambda a: a[0] @ a[1],
                )
            )  # fmt: skip
    for k, n in gemvs[:1]:
        x, w = randn((1, k), seed=12), randn((n, k), seed=13)
        cases.append(
            Case(
                "matmul", "gemv_wT", f"1x{k}@({n}x{k}).T", "float32", k * n, [x, w],
                ours=lambda t: t[0] @ t[1].T, ref=lambda a: (a[0].astype(np.float64) @ a[1].T).astype(np.float32),
                torch=lambda t: t[0] @ t[1].T, bytes=x.nbytes + w.nbytes + 4 * n, flops=2 * k * n,
                rtol=1e-4, atol=1e-4 * math.sqrt(k), numpy_fn=lambda a: a[0] @ a[1].T,
            )
        )  # fmt: skip
    for b, h, s, d in attn:
        q, kk, v = randn((b, h, s, d), seed=14), randn((b, h, s, d), seed=15), randn((b, h, s, d), seed=16)
        p = np.abs(randn((b, h, s, s), seed=17)) / s
        shape = f"{b}x{h}x{s}x{d}"
        cases.append(
            Case(
                "matmul", "attn_qkT", shape, "float32", b * h * s * s, [q, kk],
                ours=lambda t: t[0] @ t[1].swapaxes(-1, -2),
                ref=lambda a: (a[0].astype(np.float64) @ np.swapaxes(a[1], -1, -2)).astype(np.float32),
                torch=lambda t: t[0] @ t[1].transpose(-1, -2), bytes=q.nbytes + kk.nbytes + 4 * b * h * s * s,
                flops=2 * b * h * s * s * d, rtol=1e-4, atol=1e-3, numpy_fn=lambda a: a[0] @ np.swapaxes(a[1], -1, -2),
            )
        )  # fmt: skip
        cases.append(
            Case(
                "matmul", "attn_pv", shape, "float32", b * h * s * s, [p, v],
                ours=lambda t: t[0] @ t[1], ref=_mm_ref, torch=lambda t: t[0] @ t[1],
                bytes=p.nbytes + v.nbytes + q.nbytes, flops=2 * b * h * s * s * d, rtol=1e-4, atol=1e-4,
                numpy_fn=lambda a: a[0] @ a[1],
            )
        )  # fmt: skip
    return cases


# --- attention --------------------------------------------------------------------------------
def _attention_np(a: list[np.ndarray], causal: bool) -> np.ndarray:
    q, k, v = (x.astype(np.float64) for x in a[:3])
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    lq, n = s.shape[-2:]
    if causal:
        s = np.where(np.arange(n)[None, :] <= np.arange(lq)[:, None] + (n - lq), s, -np.inf)
    if len(a) > 3:
        s = np.where(a[3], s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return ((p / p.sum(-1, keepdims=True)) @ v).astype(a[0].dtype)


def _torch_attention(t: list[Any], causal: bool) -> Any:
    import torch.nn.functional as F  # noqa: N812

    return F.scaled_dot_product_attention(t[0], t[1], t[2], attn_mask=t[3] if len(t) > 3 else None, is_causal=causal)


def attention_cases(specs: list[tuple[int, int, int, int, str]], tr_nn: Any, f16: bool) -> list[Case]:
    """tr.nn.scaled_dot_product_attention (one flash-attention dispatch) against torch's SDPA.

    specs: (batch, heads, length, head dim, "pad" | "causal"); "pad" is a (B, 1, 1, S) bool mask
    keeping a prefix of each sequence's keys, as a padded batch has.
    """
    cases = []
    for b, h, n, d, kind in specs:
        causal = kind == "causal"
        for dt in ["float32", "float16"] if f16 and causal else ["float32"]:
            q, k, v = (randn((b, h, n, d), dt, seed=20 + i) for i in range(3))
            inputs = [q, k, v]
            if kind == "pad":
                lengths = _rng(23).integers(n // 4, n + 1, b)
                inputs.append((np.arange(n)[None, :] < lengths[:, None]).reshape(b, 1, 1, n))
            tol = 2e-3 if dt == "float16" else 1e-4
            cases.append(
                Case(
                    "attention", f"sdpa_{kind}", f"{b}x{h}x{n}x{d}", dt, b * h * n * n, inputs,
                    ours=lambda t, c=causal: tr_nn.scaled_dot_product_attention(
                        t[0], t[1], t[2], mask=t[3] if len(t) > 3 else None, is_causal=c
                    ),
                    ref=lambda a, c=causal: _attention_np(a, c), torch=lambda t, c=causal: _torch_attention(t, c),
                    bytes=4 * q.nbytes + (inputs[3].size if kind == "pad" else 0),
                    flops=(2 if causal else 4) * b * h * n * n * d, rtol=tol, atol=tol,
                    note="one flash_attention dispatch",
                )
            )  # fmt: skip
    return cases
