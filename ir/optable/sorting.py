"""Stable sorting along the last axis: the order every implementation follows.

A row is ordered by a uint32 key per element whose unsigned order is the sort order, ties kept
in index order (numpy's kind="stable"):
  - float32, float16: the bits of the value as float32, negatives' bits inverted and the others'
    sign bit set, so -inf < ... < -0 == +0 < ... < +inf; -0.0 counts as +0.0 (numpy compares
    them equal) and every NaN, whatever its sign and payload, is the largest key (numpy: last).
  - int32: the bits with the sign bit flipped; uint32: the value; bool: False < True.
  - descending: every key inverted, so NaN comes first (the largest value, as torch's sort and
    topk have it) and ties still keep index order.
The kernels (backend_wgpu/kernels/sort) compute the same keys on the GPU. An ARGSORT node sorts
each run of `arg.run` consecutive elements of a row on its own (0: the whole row); an
ARGSORT_MERGE node merges an argsort by runs of `run` into one by runs of `2 * run`
(passes.split_sort cuts rows longer than one workgroup holds into such steps).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ir.optable.record import FAMILIES, Dtypes, Kind, OpDef

if TYPE_CHECKING:
    from ir.node import Node

_SIGN, _MAGNITUDE, _INF = np.uint32(0x80000000), np.uint32(0x7FFFFFFF), np.uint32(0x7F800000)


def sort_keys(a: np.ndarray, descending: bool) -> np.ndarray:
    """The uint32 key of each element of `a` (see the module docstring)."""
    if a.dtype.kind == "f":
        bits = a.astype(np.float32).view(np.uint32)
        bits = np.where(bits & _MAGNITUDE == 0, np.uint32(0), bits)  # -0.0 is +0.0
        keys = np.where(bits & _SIGN != 0, ~bits, bits | _SIGN)
        keys = np.where(bits & _MAGNITUDE > _INF, np.uint32(0xFFFFFFFF), keys)  # every NaN last
    elif a.dtype == np.int32:
        keys = a.view(np.uint32) ^ _SIGN
    else:  # uint32, bool
        keys = a.astype(np.uint32)
    return ~keys if descending else keys


def _runs(n: int, run: int) -> range:
    return range(0, n, run or max(n, 1))


def _argsort(node: Node, args: list[np.ndarray]) -> np.ndarray:
    keys = sort_keys(args[0], node.arg.descending)
    out = np.empty(keys.shape, np.int64)
    n, run = keys.shape[-1], node.arg.run or keys.shape[-1]
    for s in _runs(n, run):
        out[..., s : s + run] = s + np.argsort(keys[..., s : s + run], axis=-1, kind="stable")
    return out


def _merge(node: Node, args: list[np.ndarray]) -> np.ndarray:
    """Each pair of sorted runs of the given argsort, merged: its indices ordered by (key, index)."""
    keys, perm = sort_keys(args[0], node.arg.descending), args[1].astype(np.int64)
    out = np.empty(perm.shape, np.int64)
    n, run = perm.shape[-1], 2 * node.arg.run
    for s in _runs(n, run):
        ids = perm[..., s : s + run]
        order = np.lexsort((ids, np.take_along_axis(keys, ids, axis=-1)), axis=-1)
        out[..., s : s + run] = np.take_along_axis(ids, order, axis=-1)
    return out


_INDICES = Dtypes(frozenset(FAMILIES), result="int32")
ARGSORT = OpDef("argsort", Kind.OTHER, 1, _INDICES, "the stable argsort along the last axis", evaluate=_argsort)
ARGSORT_MERGE = OpDef(
    "argsort_merge", Kind.OTHER, 2, _INDICES, "pairs of sorted runs of an argsort, merged", evaluate=_merge
)
