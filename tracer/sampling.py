"""`tr.sample`: one id per row of logits, drawn on the GPU, so a decode step reads back 4 bytes.

What is drawn is defined in ir/optable/sampling.py (temperature, then top-k, then top-p, and
a counter-based generator: the id depends only on the logits, the seed, the step and the
row). Pass a new `step` for every draw of a generation: a Tensor (an int32 or uint32 scalar
or one-element tensor) inside `@tr.jit`, so a replay reads it; a python int elsewhere.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ir.dtypes import DType
from ir.errors import DTypeError, ShapeError
from ir.ops import Op, SampleArg
from tracer.tensor import Tensor, as_tensor, from_data, make

__all__ = ["sample"]


def sample(
    logits: Any,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int | Tensor = 0,
    step: int | Tensor = 0,
) -> Tensor:
    """One id per row of `logits` (..., V): int32 of shape logits.shape[:-1], drawn on the GPU.

    temperature 0 takes the first largest logit (greedy); otherwise each id weighs
    exp((logit - max) / temperature), top_k > 0 keeps the k largest logits (lower ids first
    among equal ones), top_p < 1 keeps the smallest head of those whose weights reach top_p of
    their sum, and the draw uses u = hash(seed, step, row) in [0, 1): the first id, in id
    order, whose running sum of kept weights passes u times their total. seed and step are
    ints in [0, 2**32) or one-element int32/uint32 tensors (pass step as a tensor under
    `@tr.jit`, so replays draw anew).
    """
    logits = as_tensor(logits, "sample", "logits")
    if logits.ndim == 0 or logits.shape[-1] == 0:
        raise ShapeError(f"sample: logits must have a last axis of at least one id, got shape {logits.shape}")
    if not logits.dtype.is_float:
        logits = logits.astype(DType.float32, copy=False)
    if not (isinstance(temperature, int | float) and math.isfinite(temperature) and temperature >= 0):
        raise ValueError(f"sample: temperature must be a finite number >= 0, got {temperature!r}")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise ValueError(f"sample: top_k must be an int >= 0 (0 keeps every id), got {top_k!r}")
    if not (isinstance(top_p, int | float) and 0 < top_p <= 1):
        raise ValueError(f"sample: top_p must be in (0, 1] (1 keeps every id), got {top_p!r}")
    arg = SampleArg(float(temperature), top_k, float(top_p))
    srcs = (logits, _word("seed", seed), _word("step", step))
    return make(Op.SAMPLE, srcs, logits.shape[:-1], DType.int32, arg)


def _word(what: str, value: int | Tensor) -> Tensor:
    """seed or step as a one-element int32/uint32 tensor."""
    if isinstance(value, Tensor):
        if value.dtype not in (DType.int32, DType.uint32) or value.size != 1:
            raise DTypeError(
                f"sample: {what} must be one int32 or uint32 element, got {value.dtype.value} of shape {value.shape}"
            )
        return value.reshape(1)
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not 0 <= int(value) < 1 << 32:
        raise ValueError(f"sample: {what} must be an int in [0, 2**32) or a tensor, got {value!r}")
    return from_data(np.array([int(value)], np.uint32))
