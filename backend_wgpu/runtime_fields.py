"""The runtime integers' fields in a program's uniform: checked, packed and written once per change.

A program's uniform holds every dispatch's metadata; a few words of it are affine in the graph's
runtime integers (ir.symbolic: a decoder's position, an attended length). Before a run whose
integers differ from the last one, those words are recomputed and the stretch of the uniform
that holds them is written. This sits on the host's path between two decode steps, where the
GPU waits, so the common case is kept to a few Python comparisons and numpy calls: each
integer's allowed range is the intersection of its fields' ranges, worked out once, and all
fields are computed in one vectorized expression. A value outside its range falls back to the
field-by-field check, which raises the first field's IndexOutOfRangeError in order.
"""

from __future__ import annotations

import numpy as np

from ir.symbolic import Sym

_SMALL = 1 << 31  # scales, constants and values below this compute in int64 without overflow


class RuntimeFields:
    """The fields of one uniform: `words(ints)` gives the uniform's changed stretch for these integers."""

    def __init__(self, uniform: bytes, fields: list[tuple[int, str, Sym]]) -> None:
        """`fields`: (byte offset in the uniform, WGSL type, value) per runtime field; not empty."""
        self.fields = fields
        self.count = 1 + max(s.slot for _, _, s in fields)  # how many runtime integers the fields read
        first = min(o for o, _, _ in fields) // 4
        self.byte_offset = 4 * first  # where the written stretch starts in the uniform
        last = max(o for o, _, _ in fields) // 4 + 1
        self._base = np.frombuffer(uniform, dtype=np.uint32)[first:last].copy()
        self._at = np.array([o // 4 - first for o, _, _ in fields], np.intp)
        self._slot = np.array([s.slot for _, _, s in fields], np.intp)
        self._scale = np.array([s.scale for _, _, s in fields], object)
        self._const = np.array([s.const for _, _, s in fields], object)
        self._ranges = _slot_ranges(fields, self.count)
        # int64 arithmetic is exact when every scale and constant is small and each integer is too
        self._vectorized = all(-_SMALL < s.scale < _SMALL and -_SMALL < s.const < _SMALL for _, _, s in fields)
        if self._vectorized:
            self._scale, self._const = self._scale.astype(np.int64), self._const.astype(np.int64)
        self._one_slot = self.count == 1
        self._last: tuple[tuple[int, ...], np.ndarray] | None = None

    def words(self, ints: tuple[int, ...]) -> np.ndarray:
        """The uniform's stretch from byte_offset with `ints` written in (IndexOutOfRangeError if one is out of range)."""
        last = self._last
        if last is not None and last[0] == ints:
            return last[1]
        if len(ints) < self.count:
            raise ValueError(f"this program reads {self.count} runtime integers, {len(ints)} given")
        fits = self._vectorized and all(lo <= v <= hi for v, (lo, hi) in zip(ints, self._ranges))
        words = self._base.copy()
        if fits:
            x = ints[0] if self._one_slot else np.asarray(ints[: self.count], np.int64)[self._slot]
            words[self._at] = (x * self._scale + self._const).astype(np.uint32)  # i32 fields: two's complement
        else:
            for offset, _, sym in self.fields:  # raises the first field's IndexOutOfRangeError, in order
                words[offset // 4 - self.byte_offset // 4] = sym.check(ints) & 0xFFFFFFFF
        self._last = (ints, words)
        return words


def _slot_ranges(fields: list[tuple[int, str, Sym]], count: int) -> list[tuple[int, int]]:
    """Per runtime integer, the values for which every field that reads it is inside its [lo, hi]."""
    ranges = [(-_SMALL + 1, _SMALL - 1)] * count  # beyond these, int64 products could overflow
    for _, _, s in fields:
        if s.scale > 0:
            lo, hi = -((s.const - s.lo) // s.scale), (s.hi - s.const) // s.scale  # ceil, floor
        elif s.scale < 0:
            lo, hi = -((s.hi - s.const) // -s.scale), (s.const - s.lo) // -s.scale
        else:
            lo, hi = (0, -1) if not s.lo <= s.const <= s.hi else ranges[s.slot]
        old = ranges[s.slot]
        ranges[s.slot] = (max(old[0], lo), min(old[1], hi))
    return ranges
