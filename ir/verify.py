"""Structural checks of a graph: valid IR in, valid IR out of every pass."""

from __future__ import annotations

from ir.errors import WgjitError
from ir.fusion import check_fused
from ir.graph import Graph
from ir.ops import ELEMENTWISE, MOVEMENT, NO_KERNEL, Op
from ir.symbolic import lower, upper
from ir.view import View


class VerifyError(WgjitError, AssertionError):
    """The graph broke an IR invariant: a bug in wgjit, never in user code."""


def verify(graph: Graph) -> None:
    seen: set[int] = set()
    for nid, node in graph.nodes.items():
        if nid != node.id:
            raise VerifyError(f"node keyed {nid} has id {node.id}")
        for s in node.srcs:
            if s not in seen:
                raise VerifyError(f"%{nid} ({node.op.value}) reads %{s}, which is not defined before it")
        if any(d < 0 for d in node.shape):
            raise VerifyError(f"%{nid} has a negative dim in {node.shape}")
        srcs = [graph[s] for s in node.srcs]
        if node.op in ELEMENTWISE and any(s.shape != node.shape for s in srcs):
            shapes = [s.shape for s in srcs]
            raise VerifyError(f"%{nid} ({node.op.value}): operand shapes {shapes} differ from {node.shape}")
        if node.op is Op.VIEW:
            if not isinstance(node.arg, View) or node.arg.shape != node.shape:
                raise VerifyError(f"%{nid}: view arg does not match shape {node.shape}")
            lo, hi = node.arg.span()
            if node.arg.size and (lower(lo) < 0 or upper(hi) > srcs[0].size):  # a runtime offset: its range
                raise VerifyError(f"%{nid}: view {node.arg} reaches outside its source of {srcs[0].size} elements")
        if node.op is Op.FUSED:
            problem = check_fused(node, {s.id: s.shape for s in srcs})
            if problem:
                raise VerifyError(f"%{nid} (fused): {problem}")
        if node.op in MOVEMENT and len(srcs) != 1:
            raise VerifyError(f"%{nid}: movement op needs one source")
        if node.inplace is not None:
            if not 0 <= node.inplace < len(node.srcs):
                raise VerifyError(f"%{nid}: inplace index {node.inplace} out of range")
            if node.kernel is None or node.op in NO_KERNEL:
                raise VerifyError(f"%{nid}: inplace set on a node without a kernel")
        seen.add(nid)
    for o in graph.outputs:
        if o not in graph.nodes:
            raise VerifyError(f"output %{o} is not a node")
