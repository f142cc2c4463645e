"""A fused group as data: the arg of an Op.FUSED node (passes.fuse builds them).

A FUSED node stands for several original nodes that run as one kernel. Its arg keeps
those nodes themselves, the "terms" (original ids, topological order, annotations
stripped); the last term is the group's result and has the FUSED node's own id. The
FUSED node's srcs are the group's "leaves": the values from outside the group that the
terms read (buffers, or VIEWs of buffers). A term's srcs name leaves or earlier terms.

At most one term is a "core": a reduction, softmax, norm or matmul (passes.fuse_gemv's groups
hold several matmuls that share their input, with a norm before and rope and in-place
index_writes after them; their kernel, gemv_multi, reads such groups itself, and their core
is the first matmul: the norm is its prologue). Terms upstream of the core
are its prologue (evaluated per element of the core's input); the others its epilogue
(evaluated per element of its output). Without a core, every term is evaluated per
output element. A VIEW term is a reshape that keeps the linear element order, so it
passes its source's value through unchanged; transposes and slices never appear inside a
group (they are read from memory by the leaves), broadcasts only where a side write of
passes.fuse_gemv spreads a value along them.

The ids of the nodes a group holds are `FusedArg.holds`, and passes.fuse also records
them in the node's KernelChoice.params as ("group", holds) for tools.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from ir.node import Node
from ir.ops import ELEMENTWISE, NORM, REDUCE, ROW, Op
from ir.view import View

if TYPE_CHECKING:
    from ir.graph import Graph

CORE_OPS = REDUCE | ROW | NORM | frozenset({Op.MATMUL})


def linear_identity(view: View, source_size: int) -> bool:
    """Does this view show its source's elements in the same linear order (a plain reshape)?"""
    return view.offset == 0 and view.size == source_size and view.is_contiguous


def linear_broadcast(view: View, source_size: int) -> bool:
    """Is this view its source in linear order with broadcast axes (stride 0) added?"""
    kept = [(d, st) for d, st in zip(view.shape, view.strides) if st != 0 or d == 1]
    inner = View(tuple(d for d, _ in kept), tuple(st for _, st in kept), view.offset)
    return linear_identity(inner, source_size)


@dataclass(frozen=True)
class FusedArg:
    terms: tuple[Node, ...]
    leaves: tuple[int, ...]

    @property
    def root(self) -> Node:
        return self.terms[-1]

    @property
    def holds(self) -> tuple[int, ...]:
        """Ids of the original nodes this group computes, in order."""
        return tuple(t.id for t in self.terms)

    @cached_property
    def _by_id(self) -> dict[int, Node]:
        return {t.id: t for t in self.terms}

    def term(self, term_id: int) -> Node:
        return self._by_id[term_id]

    def is_term(self, value_id: int) -> bool:
        return value_id in self._by_id

    def leaf_index(self, leaf_id: int) -> int:
        return self.leaves.index(leaf_id)

    @cached_property
    def core(self) -> Node | None:
        cores = [t for t in self.terms if t.op in CORE_OPS]
        # a norm before matmuls (passes.fuse_gemv) is their prologue, not the group's core
        return next((t for t in cores if t.op is Op.MATMUL), cores[0] if cores else None)

    @cached_property
    def prologue(self) -> frozenset[int]:
        """Ids of the terms the core reads, directly or not (empty without a core)."""
        core = self.core
        if core is None:
            return frozenset()
        found: set[int] = set()
        stack = [s for s in core.srcs if self.is_term(s)]
        while stack:
            t = stack.pop()
            if t not in found:
                found.add(t)
                stack.extend(s for s in self.term(t).srcs if self.is_term(s))
        return frozenset(found)

    def site_terms(self, site: str) -> list[Node]:
        """The terms evaluated per element at a site: "in" (the prologue) or "out" (the rest, core excluded)."""
        core = self.core
        if site == "in":
            return [t for t in self.terms if t.id in self.prologue]
        return [t for t in self.terms if t.id not in self.prologue and t is not core]

    def site_leaves(self, site: str) -> list[int]:
        """Operand indices of the leaves the terms of a site read (not those the core reads itself)."""
        used: list[int] = []
        for t in self.site_terms(site):
            for s in t.srcs:
                if not self.is_term(s) and self.leaf_index(s) not in used:
                    used.append(self.leaf_index(s))
        return used

    def signature(self) -> str:
        """The group's structure without node ids: what its kernel's WGSL depends on."""
        name = {leaf: f"L{i}" for i, leaf in enumerate(self.leaves)}
        parts = []
        for j, t in enumerate(self.terms):
            name[t.id] = f"t{j}"
            extra = f"/{t.arg}" if t.op in CORE_OPS else ""
            parts.append(f"{t.op.value}{extra}({','.join(name[s] for s in t.srcs)}):{t.dtype.value}")
        return ";".join(parts)

    def short_key(self) -> str:
        """A readable, bounded kernel-key fragment: the ops held and a hash of the structure."""
        ops = [t.op.value for t in self.terms if t.op is not Op.VIEW]
        shown = ".".join(ops if len(ops) <= 6 else ops[:3] + [f"+{len(ops) - 5}"] + ops[-2:])
        digest = hashlib.sha1(self.signature().encode()).hexdigest()[:10]
        return f"{shown}#{digest}"

    def __str__(self) -> str:
        parts = [f"%{t.id}={t.op.value}({', '.join(f'%{s}' for s in t.srcs)})" for t in self.terms]
        return "; ".join(parts)


def matmul_depths(graph: Graph, node: Node) -> list[tuple[Node, int]]:
    """Each matmul a node computes (itself, or the terms of a fused group) with its k (A's last dim)."""
    if node.op is Op.MATMUL:
        return [(node, graph[node.srcs[0]].shape[-1])]
    if node.op is not Op.FUSED:
        return []
    arg: FusedArg = node.arg
    return [
        (t, (arg.term(t.srcs[0]) if arg.is_term(t.srcs[0]) else graph[t.srcs[0]]).shape[-1])
        for t in arg.terms
        if t.op is Op.MATMUL
    ]


def check_fused(node: Node, source_shapes: dict[int, tuple[int, ...]]) -> str | None:
    """Why a FUSED node is malformed (None when it is fine); `source_shapes` maps its srcs to shapes."""
    arg = node.arg
    if not isinstance(arg, FusedArg) or not arg.terms:
        return "fused node without a FusedArg"
    if tuple(node.srcs) != arg.leaves:
        return f"srcs {node.srcs} differ from the group's leaves {arg.leaves}"
    root = arg.root
    if root.id != node.id or root.shape != node.shape or root.dtype != node.dtype:
        return f"root term %{root.id} {root.shape} does not match the node {node.shape}"
    shapes = dict(source_shapes)
    cores = 0
    for t in arg.terms:
        missing = [s for s in t.srcs if s not in shapes]
        if missing:
            return f"term %{t.id} reads %{missing[0]}, neither a leaf nor an earlier term"
        if t.op in CORE_OPS:
            cores += 1
        elif t.op is Op.VIEW:
            if not isinstance(t.arg, View) or not linear_broadcast(t.arg, _size(shapes[t.srcs[0]])):
                return f"view term %{t.id} does not keep the linear element order"
        elif t.op in ELEMENTWISE and any(shapes[s] != t.shape for s in t.srcs):
            return f"term %{t.id} ({t.op.value}): operand shapes {[shapes[s] for s in t.srcs]} differ from {t.shape}"
        shapes[t.id] = t.shape
    matmuls = [t for t in arg.terms if t.op is Op.MATMUL]
    if matmuls:  # passes.fuse_gemv: a norm before them is their prologue
        cores -= sum(t.op in NORM for t in arg.terms)
    if cores > 1 and not (len(matmuls) == cores and len({t.srcs[0] for t in matmuls}) == 1):
        return f"{cores} core terms in one group (only matmuls sharing their input may be several)"
    return None


def _size(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
