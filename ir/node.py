"""The node of the IR: one frozen record per op application, annotated by replacement."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ir.dtypes import DType
from ir.ops import Op


@dataclass(frozen=True)
class KernelChoice:
    """Which kernel runs a node, as plain data: the backend turns it into WGSL.

    `name` picks the kernel implementation, `variant` one of its specializations (for
    instance how each operand is read), `element` is the KernelElement width (1, 2, 4),
    `workgroup` the workgroup size. `params` holds extra hashable knobs (tile sizes).
    """

    name: str
    variant: str = ""
    element: int = 1
    workgroup: tuple[int, int, int] = (256, 1, 1)
    params: tuple[tuple[str, Any], ...] = ()

    def param(self, key: str, default: Any = None) -> Any:
        return dict(self.params).get(key, default)

    def label(self) -> str:
        v = f"[{self.variant}]" if self.variant else ""
        return f"{self.name}{v} x{self.element}"


@dataclass(frozen=True)
class Node:
    id: int
    op: Op
    srcs: tuple[int, ...]
    shape: tuple[int, ...]
    dtype: DType
    arg: Any = None
    # annotations, filled in by passes
    kernel: KernelChoice | None = None
    inplace: int | None = None  # index into srcs whose buffer this node overwrites
    slot: int | None = None  # buffer slot from passes.plan_memory
    label: str = field(default="", compare=False)  # free text for dumps (e.g. user names)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.dtype.nbytes(self.size)
