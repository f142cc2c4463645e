"""Sampling one id per row of logits on the GPU: the definition every implementation follows.

For a row x of V logits, with temperature T, top_k k and top_p p:
  - T == 0: the id of the first largest logit (greedy).
  - else each id has the weight w = exp((x - max(x)) / T). The kept ids are the k largest
    logits (k == 0 or k >= V: all of them; among equal logits the lower ids first), then,
    of those, the smallest set of the largest whose weights reach p times their sum (the same
    order; p == 1: all). With u the row's uniform number, the id is the first, in increasing
    id order, whose running sum of kept weights exceeds u times their total.
  - u = (h >> 8) / 2**24 in [0, 1), h = mix(mix(mix(seed) + step) + row) on uint32 words,
    `mix` the PCG output hash (Jarzynski and Olano, "Hash Functions for GPU Rendering",
    JCGT 2020). A counter-based stream: (seed, step, row) alone decide u, so a replay with
    the same seed and steps draws the same ids, on any device, with no state to carry.
The reference computes the weights in float64; the kernel (backend_wgpu/kernels/sample)
in float32, so an id may differ where u falls within rounding of a boundary.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ir.optable.record import Dtypes, Kind, OpDef

if TYPE_CHECKING:
    from ir.node import Node

MASK32 = 0xFFFFFFFF


def mix(x: int) -> int:
    """The PCG output hash of a uint32 word (python ints, wrapped to 32 bits)."""
    state = (x * 747796405 + 2891336453) & MASK32
    word = (((state >> ((state >> 28) + 4)) ^ state) * 277803737) & MASK32
    return (word >> 22) ^ word


def uniform(seed: int, step: int, row: int) -> float:
    """The row's number in [0, 1) for this seed and step (24 bits)."""
    h = mix((mix((mix(seed & MASK32) + step) & MASK32) + row) & MASK32)
    return (h >> 8) / float(1 << 24)


def kept_weights(x: np.ndarray, temperature: float, top_k: int, top_p: float) -> np.ndarray:
    """The weights of one row of logits after temperature, top-k and top-p (0 where dropped), float64."""
    x = x.astype(np.float64)
    w = np.exp((x - x.max()) / temperature)
    order = np.argsort(-x, kind="stable")  # largest first, lower ids first among equals
    keep = np.ones(x.shape, bool)
    if 0 < top_k < x.size:
        keep[:] = False
        keep[order[:top_k]] = True
    if top_p < 1:
        head = order[keep[order]]
        mass = np.cumsum(w[head])
        n = int(np.searchsorted(mass, top_p * mass[-1])) + 1  # the smallest head reaching top_p
        keep[:] = False
        keep[head[: min(n, head.size)]] = True
    return np.where(keep, w, 0.0)


def draw(weights: np.ndarray, u: float) -> int:
    """The first id whose running sum of weights exceeds u times their total."""
    run = np.cumsum(weights)
    return int(min(np.searchsorted(run, u * run[-1], side="right"), weights.size - 1))


def _sample(node: Node, args: list[np.ndarray]) -> np.ndarray:
    arg = node.arg
    rows = args[0].reshape(-1, args[0].shape[-1])
    seed, step = (int(np.asarray(a).reshape(-1)[0]) & MASK32 for a in args[1:3])
    out = np.zeros(rows.shape[0], np.int32)
    for r, x in enumerate(rows):
        if arg.temperature == 0:
            out[r] = int(np.argmax(x))
        else:
            out[r] = draw(kept_weights(x, arg.temperature, arg.top_k, arg.top_p), uniform(seed, step, r))
    return out.reshape(args[0].shape[:-1])


# srcs: logits (..., V) float, seed, step (uint32, one element each); arg: SampleArg; out int32 (...)
SAMPLE = OpDef(
    "sample", Kind.OTHER, 3, Dtypes(frozenset({"float"}), result="int32"), "one id per row of logits, drawn",
    evaluate=_sample,
)  # fmt: skip
