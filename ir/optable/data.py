"""Ops that place data rather than compute it: inputs, ranges, movement, views, joins, gathers.

A FUSED node is here too: the group of nodes passes.fuse made (ir.interpret evaluates the
nodes it holds one by one, so its record has no reference of its own).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ir.optable.record import ANY, NUMERIC, Dtypes, Kind, OpDef
from ir.view import View

if TYPE_CHECKING:
    from ir.node import Node

_GIVEN = Dtypes(ANY.families, result="given")

# --- leaves ---------------------------------------------------------------------------------------

# arg: InputArg (which program input, and whether it may be overwritten); ir.interpret reads it
INPUT = OpDef("input", Kind.LEAF, 0, _GIVEN, "a realized buffer entering the graph", kernel=False)


def _arange(node: Node, args: list[np.ndarray]) -> np.ndarray:
    start, step = node.arg
    return (start + step * np.arange(node.size, dtype=np.float64)).astype(node.dtype.np)


ARANGE = OpDef(
    "arange",
    Kind.LEAF,
    0,
    Dtypes(NUMERIC.families, result="given"),
    "start + step * i; arg: (start, step)",
    evaluate=_arange,
)

# --- movement, as traced (passes.fold_views lowers them to VIEW) ---------------------------------


def _slice(node: Node, args: list[np.ndarray]) -> np.ndarray:
    # index lists from range(): a normalized stop of -1 means "before index 0", which a
    # python slice would read as "the last element"
    return args[0][np.ix_(*(np.arange(a, b, c) for a, b, c in node.arg))] if node.arg else args[0]


RESHAPE = OpDef(
    "reshape",
    Kind.MOVEMENT,
    1,
    ANY,
    "x with a new shape; arg: the shape",
    kernel=False,
    evaluate=lambda node, args: args[0].reshape(node.arg),
)
PERMUTE = OpDef(
    "permute",
    Kind.MOVEMENT,
    1,
    ANY,
    "x with its axes reordered; arg: the order",
    kernel=False,
    evaluate=lambda node, args: np.transpose(args[0], node.arg),
)
EXPAND = OpDef(
    "expand",
    Kind.MOVEMENT,
    1,
    ANY,
    "x broadcast to a larger shape; arg: the shape",
    kernel=False,
    evaluate=lambda node, args: np.broadcast_to(args[0], node.arg),
)
SLICE = OpDef(
    "slice",
    Kind.MOVEMENT,
    1,
    ANY,
    "x[start:stop:step] per axis; arg: (start, stop, step) per axis",
    kernel=False,
    evaluate=_slice,
)


def view_of(base: np.ndarray, view: View) -> np.ndarray:
    """The elements `view` reads from the contiguous buffer `base`."""
    flat = np.ascontiguousarray(base).reshape(-1)
    if view.size == 0:
        return np.zeros(view.shape, dtype=flat.dtype)
    lo, _ = view.span()
    start = flat[lo:]
    item = flat.itemsize
    out = np.lib.stride_tricks.as_strided(
        start[view.offset - lo :], shape=view.shape, strides=tuple(s * item for s in view.strides)
    )
    return out.copy()


VIEW = OpDef(
    "view",
    Kind.VIEW,
    1,
    ANY,
    "a strided view of its source's buffer; arg: View",
    kernel=False,
    evaluate=lambda node, args: view_of(args[0], node.arg),
)

# --- joins and indexed reads/writes ---------------------------------------------------------------

CONCAT = OpDef(
    "concat",
    Kind.OTHER,
    None,
    ANY,
    "its operands joined along axis `arg`",
    evaluate=lambda node, args: np.concatenate(args, axis=node.arg),
)


def _gather(node: Node, args: list[np.ndarray]) -> np.ndarray:
    # the GPU clamps out-of-range ids (documented in tracer/nn.py); so does the oracle
    ids = np.clip(args[1].astype(np.int64), 0, args[0].shape[node.arg] - 1)
    return np.take_along_axis(args[0], ids, axis=node.arg)


# srcs: x, ids (int32, the output's shape); arg: axis
GATHER = OpDef("gather", Kind.OTHER, 2, ANY, "x[ids] along axis `arg` (ids clamped to [0, dim))", evaluate=_gather)


def _index_write(node: Node, args: list[np.ndarray]) -> np.ndarray:
    result = args[0].copy()
    result[tuple(slice(o, o + n) for o, n in zip(node.arg, args[1].shape))] = args[1]
    return result


# srcs: x, src; arg: per-axis offsets (kernels may overwrite x in place)
INDEX_WRITE = OpDef("index_write", Kind.OTHER, 2, ANY, "x with src written at offsets `arg`", evaluate=_index_write)

# arg: ir.fusion.FusedArg; ir.interpret evaluates the nodes it holds
FUSED = OpDef("fused", Kind.FUSED, None, ANY, "a fused group of nodes (passes.fuse)")
