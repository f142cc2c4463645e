"""A strided view of a contiguous buffer: shape, element strides and offset.

Movement ops are lowered to Views (passes.fold_views). A View can be composed with
another movement op without copying, except for a reshape that no stride pattern
expresses: `reshape` then returns None and the caller materializes a copy first.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from ir.symbolic import Sym


@functools.lru_cache(maxsize=4096)  # tracing asks for the same few shapes again and again
def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides = []
    acc = 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(strides))


@dataclass(frozen=True)
class View:
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int = 0

    @staticmethod
    def contiguous(shape: tuple[int, ...]) -> View:
        return View(tuple(shape), contiguous_strides(tuple(shape)), 0)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property  # not functools.cached_property: its lock (Python 3.11) costs more than this does
    def is_contiguous(self) -> bool:
        """True when this view reads its buffer from `offset` in plain row-major order."""
        return self._canonical() == contiguous_strides(self.shape)

    @property
    def is_identity(self) -> bool:
        """True when element i of the view is element i of the buffer."""
        return self.offset == 0 and self.is_contiguous

    def _canonical(self) -> tuple[int, ...]:
        # strides of size-1 dims never matter
        ref = contiguous_strides(self.shape)
        return tuple(r if d == 1 else s for d, s, r in zip(self.shape, self.strides, ref))

    def permute(self, order: tuple[int, ...]) -> View:
        return View(tuple(self.shape[i] for i in order), tuple(self.strides[i] for i in order), self.offset)

    def expand(self, shape: tuple[int, ...]) -> View:
        lead = len(shape) - len(self.shape)
        strides = [0] * lead
        for d_old, s, d_new in zip(self.shape, self.strides, shape[lead:]):
            strides.append(s if d_old == d_new else 0)
        return View(tuple(shape), tuple(strides), self.offset)

    def slice(self, spec: tuple[tuple[int, int, int], ...]) -> View:
        """Each axis gets (start, stop, step) already normalized as range() takes them.

        A start may be a runtime integer (ir.symbolic.Sym, with stop = start + n and step 1):
        the offset is then one too.
        """
        shape, strides, offset = [], [], self.offset
        for (start, stop, step), stride in zip(spec, self.strides):
            n = stop - start if isinstance(start, Sym) else len(range(start, stop, step))
            shape.append(n)
            strides.append(stride * step)
            if n:
                offset += start * stride
        return View(tuple(shape), tuple(strides), offset)

    def reshape(self, shape: tuple[int, ...]) -> View | None:
        """The same elements under a new shape, or None when strides cannot express it."""
        if self.is_contiguous or math.prod(shape) == 0:
            return View(tuple(shape), contiguous_strides(tuple(shape)), self.offset)
        # Drop size-1 dims, then match groups of old dims to groups of new dims whose
        # products agree; a group of old dims must itself be contiguous to merge.
        old = [(d, s) for d, s in zip(self.shape, self.strides) if d != 1]
        new_strides: list[int] = []
        oi = 0
        new_nonunit = [d for d in shape if d != 1]
        ni = 0
        group_strides: list[int] = []
        while ni < len(new_nonunit):
            if oi >= len(old):
                return None
            # gather old dims until their product equals the product of new dims gathered
            o_prod, n_prod = old[oi][0], new_nonunit[ni]
            o_start, n_start = oi, ni
            while o_prod != n_prod:
                if o_prod < n_prod:
                    oi += 1
                    if oi >= len(old):
                        return None
                    o_prod *= old[oi][0]
                else:
                    ni += 1
                    if ni >= len(new_nonunit):
                        return None
                    n_prod *= new_nonunit[ni]
            for k in range(o_start, oi):  # old group must be mergeable
                if old[k][1] != old[k + 1][1] * old[k + 1][0]:
                    return None
            stride = old[oi][1]
            chunk = []
            for k in range(ni, n_start - 1, -1):
                chunk.append(stride)
                stride *= new_nonunit[k]
            group_strides.extend(reversed(chunk))
            oi += 1
            ni += 1
        if oi != len(old):
            return None
        it = iter(group_strides)
        for d in shape:
            new_strides.append(0 if d == 1 else next(it))
        return View(tuple(shape), tuple(new_strides), self.offset)

    def span(self) -> tuple[int, int]:
        """The lowest and one-past-highest buffer element this view touches."""
        if self.size == 0:
            return self.offset, self.offset
        lo = self.offset + sum(s * (d - 1) for d, s in zip(self.shape, self.strides) if s < 0)
        hi = self.offset + sum(s * (d - 1) for d, s in zip(self.shape, self.strides) if s > 0)
        return lo, hi + 1
