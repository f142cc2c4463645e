"""Ops that combine many elements: reductions, scans, row ops (softmax), norms, matmul and conv1d.

Their kernels live in backend_wgpu/kernels; here are their dtype rules and references.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ir.dtypes import DType
from ir.optable.record import FLOAT, NUMERIC, Dtypes, Kind, OpDef, upcast

if TYPE_CHECKING:
    from ir.node import Node

# --- reductions over the last `arg` axes (bools are reduced as int32: the tracer casts them) ------


def _axes(node: Node) -> tuple[int, ...]:
    return tuple(range(-node.arg, 0)) if node.arg else ()


def _sum(node: Node, args: list[np.ndarray]) -> np.ndarray:
    # float16 sums accumulate in float32, as the kernels do
    acc = np.float32 if node.dtype is DType.float16 else node.dtype.np
    return np.sum(upcast(args[0]), axis=_axes(node), dtype=acc)


def _prod(node: Node, args: list[np.ndarray]) -> np.ndarray:
    # floats multiply in float32 (float16 too, rounded once); ints in their type, wrapping as the GPU's
    acc = np.float32 if node.dtype.is_float else node.dtype.np
    return np.prod(upcast(args[0]), axis=_axes(node), dtype=acc)


def _max(node: Node, args: list[np.ndarray]) -> np.ndarray:
    return np.max(upcast(args[0]), axis=_axes(node))


def _min(node: Node, args: list[np.ndarray]) -> np.ndarray:
    return np.min(upcast(args[0]), axis=_axes(node))


def _arg_reduce(fn: np.ufunc) -> object:
    def evaluate(node: Node, args: list[np.ndarray]) -> np.ndarray:
        a = args[0]
        flat = a.reshape(a.shape[: a.ndim - node.arg] + (-1,))  # the reduced axes as one
        return fn(flat, axis=-1)

    return evaluate


SUM = OpDef("sum", Kind.REDUCE, 1, NUMERIC, "the sum over the last `arg` axes", evaluate=_sum)
PROD = OpDef("prod", Kind.REDUCE, 1, NUMERIC, "the product over the last `arg` axes", evaluate=_prod)
MAX = OpDef("max", Kind.REDUCE, 1, NUMERIC, "the largest element over the last `arg` axes", evaluate=_max)
MIN = OpDef("min", Kind.REDUCE, 1, NUMERIC, "the smallest element over the last `arg` axes", evaluate=_min)
_INDEX = Dtypes(NUMERIC.families, result="int32")
ARGMAX = OpDef("argmax", Kind.REDUCE, 1, _INDEX, "where the first largest element is", evaluate=_arg_reduce(np.argmax))
ARGMIN = OpDef("argmin", Kind.REDUCE, 1, _INDEX, "where the first smallest element is", evaluate=_arg_reduce(np.argmin))

# --- scans along the last axis (ints in their type, floats in f32: float16 too, as the kernel) ------


def _scan(fn: np.ufunc) -> Callable[[Node, list[np.ndarray]], np.ndarray]:
    def evaluate(node: Node, args: list[np.ndarray]) -> np.ndarray:
        acc = np.float32 if node.dtype.is_float else node.dtype.np
        return fn(upcast(args[0]), axis=-1, dtype=acc)

    return evaluate


CUMSUM = OpDef("cumsum", Kind.SCAN, 1, NUMERIC, "the running sum along the last axis", evaluate=_scan(np.cumsum))
CUMPROD = OpDef("cumprod", Kind.SCAN, 1, NUMERIC, "the running product along the last axis", evaluate=_scan(np.cumprod))

# --- row ops over the last axis -------------------------------------------------------------------


def _softmax(log: bool) -> object:
    def evaluate(node: Node, args: list[np.ndarray]) -> np.ndarray:
        a = upcast(args[0])
        m = np.max(a, axis=-1, keepdims=True, initial=-np.inf)  # initial: rows may be empty
        e = np.exp(a - m)
        s = np.sum(e, axis=-1, keepdims=True)
        return (a - m) - np.log(s) if log else e / s

    return evaluate


SOFTMAX = OpDef("softmax", Kind.ROW, 1, FLOAT, "exp(x) / sum(exp(x)) over the last axis", evaluate=_softmax(False))
LOG_SOFTMAX = OpDef(
    "log_softmax", Kind.ROW, 1, FLOAT, "x - log(sum(exp(x))) over the last axis", evaluate=_softmax(True)
)

# --- norms: srcs x[, weight][, bias]; arg: NormArg; statistics in float32 --------------------------


def _norm(rms: bool) -> object:
    """Layer norm (x - mean) / sqrt(var + eps) or RMS norm x / sqrt(mean(x^2) + eps), then affine."""

    def evaluate(node: Node, args: list[np.ndarray]) -> np.ndarray:
        arg = node.arg
        x = args[0].astype(np.float32)
        if rms:
            y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(arg.eps))
        else:
            centered = x - x.mean(axis=-1, keepdims=True)
            y = centered / np.sqrt(np.mean(centered * centered, axis=-1, keepdims=True) + np.float32(arg.eps))
        rest = iter(upcast(a) for a in args[1:])
        if arg.weight:
            y = y * next(rest)
        if arg.bias:
            y = y + next(rest)
        return y

    return evaluate


LAYER_NORM = OpDef("layer_norm", Kind.NORM, None, FLOAT, "layer norm over the last axis", evaluate=_norm(rms=False))
RMS_NORM = OpDef("rms_norm", Kind.NORM, None, FLOAT, "RMS norm over the last axis", evaluate=_norm(rms=True))

# --- contractions ------------------------------------------------------------------------------------

# (..., M, K) @ (..., K, N), batch dims already broadcast; ints are refused (no int matmul kernel)
MATMUL = OpDef(
    "matmul",
    Kind.OTHER,
    2,
    Dtypes(frozenset({"float"}), hint="only float matmul is supported; cast with astype()"),
    "the matrix product",
    evaluate=lambda node, args: np.matmul(upcast(args[0]), upcast(args[1])),
)


def _conv1d(node: Node, args: list[np.ndarray]) -> np.ndarray:
    """out[n, co, l] = sum over ci, k of x[n, g*cin_g + ci, l*stride - pad + k*dil] * w[co, ci, k]."""
    x, w, arg = upcast(args[0]), upcast(args[1]), node.arg
    n, cin, length = x.shape
    cout, cin_g, k = w.shape
    g = arg.groups
    xp = np.pad(x, ((0, 0), (0, 0), (arg.padding, arg.padding)))
    lout = (length + 2 * arg.padding - arg.dilation * (k - 1) - 1) // arg.stride + 1
    taps = [xp[:, :, j * arg.dilation : j * arg.dilation + arg.stride * (lout - 1) + 1 : arg.stride] for j in range(k)]
    cols = np.stack(taps, axis=-1).reshape(n, g, cin_g, lout, k)  # (N, G, Cin/G, Lout, K)
    wg = w.reshape(g, cout // g, cin_g, k)
    return np.einsum("ngclk,gock->ngol", cols, wg).reshape(n, cout, lout)


# srcs: x (N, Cin, L), weight (Cout, Cin/groups, K); arg: Conv1dArg (the bias is added after)
CONV1D = OpDef("conv1d", Kind.OTHER, 2, FLOAT, "1-D cross-correlation, as torch's conv1d", evaluate=_conv1d)
