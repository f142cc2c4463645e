"""The signature of a jitted call: the structure of its arguments and what each leaf is.

Tuples, lists and dicts are walked; every other value is a leaf. A tensor leaf is keyed
by shape, dtype and which earlier leaf is the same tensor (aliasing); a runtime integer
(tr.dynamic) only by being one; any other leaf is a static value, keyed by its value. Floats are keyed by their bits, so 0.0 and -0.0
(and every NaN) are told apart as a program that divides by them must.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracer.runtime_ints import RuntimeInt
from tracer.tensor import Tensor


def flatten(value: Any, path: str, leaves: list[tuple[str, Any]]) -> Hashable:
    """Walk tuples, lists and dicts; collect (path, leaf) pairs; return the hashable structure."""
    if isinstance(value, tuple | list):
        return (type(value).__name__, tuple(flatten(v, f"{path}[{i}]", leaves) for i, v in enumerate(value)))
    if isinstance(value, dict):
        keys = tuple(value)
        return ("dict", keys, tuple(flatten(value[k], f"{path}[{k!r}]", leaves) for k in keys))
    leaves.append((path, value))
    return "*"


def unflatten(structure: Hashable, leaves: list[Any], pos: list[int]) -> Any:
    """The structure `flatten` described, rebuilt from `leaves` (consumed from pos[0] on)."""
    if structure == "*":
        pos[0] += 1
        return leaves[pos[0] - 1]
    kind = structure[0]
    if kind == "dict":
        _, keys, items = structure
        return {k: unflatten(s, leaves, pos) for k, s in zip(keys, items, strict=True)}
    items = [unflatten(s, leaves, pos) for s in structure[1]]
    return tuple(items) if kind == "tuple" else items


@dataclass(frozen=True)
class FloatKey:
    """A float compared by its repr, which is exact for every double: 0.0 != -0.0, and NaN == NaN."""

    text: str

    def __repr__(self) -> str:
        return self.text


def static_key(value: Any) -> Hashable:
    """A static value as a key: floats by their bits (FloatKey), everything else as it is."""
    if isinstance(value, float | np.floating):
        return FloatKey(repr(float(value)))
    return value


def leaf_key(leaf: Any, seen: dict[int, int], path: str) -> Hashable:
    """The key of one leaf; `seen` numbers the distinct tensors met so far (aliasing)."""
    if isinstance(leaf, Tensor):
        first = seen.setdefault(id(leaf._lazy), len(seen))
        return ("tensor", leaf.shape, leaf.dtype.value, first)
    if isinstance(leaf, RuntimeInt):  # any value: the program reads it from the uniform
        return ("dynamic",)
    try:
        hash(leaf)
    except TypeError:
        raise TypeError(
            f"jit: argument {path} ({type(leaf).__name__}) is neither a Tensor nor hashable; pass it as a Tensor or a static value"
        ) from None
    return ("static", type(leaf).__name__, static_key(leaf))


_PLAIN = (int, bool, str, type(None))


def fast_key(args: tuple) -> Hashable | None:
    """A signature for calls with positional tensors and plain scalars only (None otherwise)."""
    key: list[Hashable] = []
    seen: dict[int, int] = {}
    for a in args:
        if isinstance(a, Tensor):
            lz = a._lazy
            key.append((lz.shape, lz.dtype, seen.setdefault(id(lz), len(seen))))
        elif type(a) is float:
            key.append((float, repr(a)))
        elif type(a) is RuntimeInt:
            key.append(RuntimeInt)
        elif type(a) in _PLAIN:
            key.append((type(a), a))
        else:
            return None
    return tuple(key)


def describe(key: Hashable) -> str:
    """A leaf key as words, for the retrace reason."""
    if key[0] == "tensor":
        return f"tensor {key[1]} {key[2]}"
    if key[0] == "dynamic":
        return "a runtime integer (tr.dynamic)"
    return f"{key[2]!r}"
