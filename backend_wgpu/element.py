"""KernelElement widths: which operand views can be read 4, 2 or 1 lanes at a time.

The dimension a kernel walks contiguously must be divisible by the width, and every
operand read as a vector must start on a multiple of it (ratchet's, ONNX Runtime's and
TVM's 4/2/1 rule). An operand broadcast along that dimension (stride 0) is read as a
scalar and splatted, which never blocks a width. Each kernel's `widest_element` combines
these predicates (backend_wgpu/kernel.py); passes.vectorize asks it. Plain data, no wgpu.
"""

from __future__ import annotations

import math

from ir.node import Node
from ir.view import View

WIDTHS = (4, 2, 1)


def vector_readable(view: View, width: int) -> bool:
    """Can `width` consecutive elements along the last axis be loaded as one vector?"""
    if width == 1:
        return True
    if not view.shape or view.shape[-1] % width:
        return False
    if view.strides[-1] == 0:
        return True  # splat
    if view.strides[-1] != 1 or view.offset % width:
        return False
    return all(s % width == 0 for d, s in zip(view.shape[:-1], view.strides[:-1]) if d > 1)


def row_vector(view: View, k: int, width: int) -> bool:
    """The last k axes form one contiguous run per row, its length and every row start a multiple of width."""
    if width == 1:
        return True
    shape, strides = view.shape[len(view.shape) - k :], view.strides[len(view.strides) - k :]
    run = math.prod(shape)
    if run % width or view.offset % width:
        return False
    expected = 1
    for d, s in zip(reversed(shape), reversed(strides)):
        if d != 1 and s != expected:
            return False
        expected *= d
    return all(s % width == 0 for d, s in zip(view.shape[: len(view.shape) - k], view.strides) if d > 1)


def contiguous_run(view: View, width: int) -> bool:
    """A 1-D operand read as vectors: unit stride, starting on a multiple of the width."""
    return width == 1 or (view.strides[-1] == 1 and view.offset % width == 0 and view.shape[-1] % width == 0)


def k_contiguous(b_view: View, width: int) -> bool:
    """B of a k-contiguous GEMV: each column (fixed n) is a contiguous run along k."""
    if width == 1:  # scalar loads follow any strides (n == 1 picks this kernel for every B)
        return True
    if b_view.strides[-2] != 1 or b_view.offset % width:
        return False
    return all(
        s % width == 0
        for i, (d, s) in enumerate(zip(b_view.shape, b_view.strides))
        if d > 1 and i != len(b_view.shape) - 2
    )


def widest_elementwise(node: Node, views: list[View]) -> int:
    """One lane per element along the last axis: it and every operand must allow the width."""
    for w in WIDTHS:
        if node.shape and node.shape[-1] % w == 0 and all(vector_readable(v, w) for v in views):
            return w
    return 1


def why_not_wider(node: Node, views: list[View]) -> str:
    """What kept a last-axis kernel from the next wider element (for `explain`)."""
    last = node.shape[-1] if node.shape else 1
    wider = node.kernel.element * 2
    if last % wider:
        return f"last dim {last} not divisible by {wider}"
    for s, view in zip(node.srcs, views):
        if not vector_readable(view, wider):
            return f"operand %{s} cannot be read {wider} at a time (stride or offset)"
    return ""
