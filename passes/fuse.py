"""Fusion: run groups of nodes as one kernel, each group an Op.FUSED node (ir.fusion.FusedArg).

Groups are chains and trees of elementwise ops (unary, binary, where, casts, copies, and
the plain reshapes between them), optionally around one core: a reduction, softmax or norm
with an elementwise prologue (a scale or mask before a softmax, a cast or square feeding
a sum, a split-k product's partial sums, bias and residual before a layer norm) and an
epilogue (a mean's scale, `+ eps` and rsqrt after a sum of squares), or a matmul with an
epilogue (bias + activation + residual after a GEMM or GEMV). A prologue computes the
core's first operand only (a norm reads its weight and bias itself).

Where it runs: after select_kernels, so that legality can ask the kernel each core got
whether it renders fused code (`Kernel.takes_prologue` / `takes_epilogue`), and before
vectorize, which then picks one KernelElement width for the whole group, and inplace and
plan_memory, which then never allocate the values a group keeps in registers.

Grouping walks the graph backwards, so a node's readers are placed before the node. A
node N joins the group G of its readers when all of these hold:
  1. N is elementwise (run by the elementwise kernel: not a dequant), or it is a core whose
     kernel renders epilogues and G has no core yet;
  2. N is not a graph output and has at least one element;
  3. every reader of N is in G and reads N in linear order: directly or through a VIEW
     that is a plain reshape (ir.fusion.linear_identity); such views join G too;
  4. when G has a core C, N's readers are all upstream of C (N joins the prologue, which
     C's kernel must render) or all downstream of it (the epilogue); never both;
  5. G then still fits the device: its leaves plus its output need at most
     caps.max_storage_buffers_per_stage storage bindings; and no leaf is read both by the
     prologue or core and by the epilogue (the two are read at different widths);
  6. G then holds at most MAX_GROUP_TERMS computing nodes: a driver's compile time grows
     faster than the shader (see MAX_GROUP_TERMS), so a long chain becomes several kernels.
Otherwise N starts a group of its own, as its root.

The recompute-or-store rule: nothing is recomputed by two kernels. A value is stored
(it is the root of its group, written to memory once) when it is a graph output, when
its readers are in different groups, when a reader sees it through a broadcast,
transpose or slice (any view that is not a plain reshape), or when joining would break
rule 4 or 5. Inside a group a value used by several terms is computed once (a WGSL
`let`); a prologue is evaluated where its core reads its input (twice per element for
softmax, whose kernel reads each row twice).

Why groups cannot form a cycle: a non-root member has all its readers inside its group,
so only the root is read from outside; if group A's root fed group B and B's root fed a
member of A, that member would reach A's root through B, a cycle in the original DAG.
`check_acyclic` verifies this on every result, and the graph verifier checks that every
FUSED node comes after its leaves.

Set WGJIT_FUSION=0 (the pass then returns its graph unchanged), or run a pipeline without
this pass (passes.pipeline.default_pipeline(fusion=False)), to compare with unfused runs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

import networkx as nx

from backend_wgpu.kernels import kernel_class
from ir.caps import DeviceCaps
from ir.fusion import CORE_OPS, FusedArg, linear_identity
from ir.graph import Graph
from ir.node import Node
from ir.ops import ELEMENTWISE, Op
from passes.select_kernels import fused_group_choice


def fusion_enabled() -> bool:
    """WGJIT_FUSION=0 turns fusion off (to compare fused and unfused runs)."""
    return os.environ.get("WGJIT_FUSION", "1").strip().lower() not in ("0", "false", "off", "no")


# Drivers compile a shader in time that grows faster than its length. lavapipe with its shader
# cache off, a chain of `sin`: 16 terms 0.8 s, 32 2.1 s, 64 3.7 s, 128 11.8 s, 256 56 s (tanh:
# 32 1.6 s, 64 4.0 s, 128 10.5 s). Up to 64 terms the cost per term stays flat; past it a long
# chain pays quadratically (2,000 terms took minutes), so groups stop there.
MAX_GROUP_TERMS = 64


@dataclass
class _Group:
    root: int
    members: set[int]  # computing nodes and the reshape views between them
    core: int | None = None
    prologue: set[int] = field(default_factory=set)  # members upstream of the core


def fuse(graph: Graph, caps: DeviceCaps) -> Graph:
    if not fusion_enabled():
        return graph  # WGJIT_FUSION=0: every node keeps its own kernel
    readers = _readers(graph)
    position = {nid: i for i, nid in enumerate(graph.nodes)}
    outputs = set(graph.outputs)
    max_leaves = caps.max_storage_buffers_per_stage - 1  # one storage binding is the output
    group_of: dict[int, _Group] = {}
    for node in reversed(list(graph)):
        if node.kernel is None:
            continue
        joined = _join(graph, node, readers, outputs, group_of, position, max_leaves)
        if joined is None:
            core = node.id if node.op in CORE_OPS else None
            group_of[node.id] = _Group(node.id, {node.id}, core)
            continue
        group, site, views = joined
        group.members |= {node.id, *views}
        if node.op in CORE_OPS:
            group.core = node.id
        elif site == "in":
            group.prologue |= {node.id, *views}
        for v in views:
            group_of[v] = group
        group_of[node.id] = group

    nodes: list[Node] = []
    for node in graph:
        group = group_of.get(node.id)
        if group is None:
            nodes.append(node)  # inputs and the views that stay leaves
        elif len(group.members) == 1:
            nodes.append(node)  # a group of one runs its usual kernel
        elif group.root == node.id:
            nodes.append(_fused_node(graph, group, position))
    out = graph.with_nodes(nodes)
    check_acyclic(out)
    return out


def _readers(graph: Graph) -> dict[int, list[tuple[int, int | None]]]:
    """For each node: (reader, the VIEW node it reads through or None), looking through views."""
    readers: dict[int, list[tuple[int, int | None]]] = {nid: [] for nid in graph.nodes}
    for node in graph:
        if node.op is Op.VIEW:
            continue
        for s in dict.fromkeys(node.srcs):
            src = graph[s]
            if src.op is Op.VIEW:
                readers[src.srcs[0]].append((node.id, s))
            else:
                readers[s].append((node.id, None))
    return readers


def _join(
    graph: Graph,
    node: Node,
    readers: dict[int, list[tuple[int, int | None]]],
    outputs: set[int],
    group_of: dict[int, _Group],
    position: dict[int, int],
    max_leaves: int,
) -> tuple[_Group, str, set[int]] | None:
    """The group `node` may join (with its site, "in" or "out", and the views it brings), or None."""
    is_core = (
        node.op in CORE_OPS and kernel_class(node.kernel.name).takes_epilogue and len(set(node.srcs)) == len(node.srcs)
    )
    if node.size == 0 or node.id in outputs or not (node.op in ELEMENTWISE or is_core):
        return None
    if node.op in ELEMENTWISE and node.kernel.name != fused_group_choice().name:
        return None  # an elementwise op with a kernel of its own (dequant: a cast of quantized blocks)
    reads = readers[node.id]
    if not reads:
        return None
    views: set[int] = set()
    for _, v in reads:
        if v is not None:
            if not linear_identity(graph[v].arg, node.size):
                return None  # stored: a broadcast, transpose or slice reads it from memory
            views.add(v)
    groups = {id(group_of[r]) for r, _ in reads}
    if len(groups) != 1:
        return None  # stored: read by several kernels
    group = group_of[reads[0][0]]
    if group.core is None and graph[group.root].op not in ELEMENTWISE:
        return None  # a group of one kernel that renders no fused code (concat, arange...)
    if is_core:
        if group.core is not None:
            return None
        site = "core"
    elif group.core is None:
        site = "out"
    else:
        sites = {"in" if r in group.prologue or r == group.core else "out" for r, _ in reads}
        if len(sites) != 1:
            return None
        site = sites.pop()
        if site == "in" and not kernel_class(graph[group.core].kernel.name).takes_prologue:
            return None
        if site == "in" and not _feeds_first_operand(graph[group.core], node, reads):
            return None
    members = group.members | {node.id} | views
    if sum(graph[m].op is not Op.VIEW for m in members) > MAX_GROUP_TERMS:
        return None
    core = node.id if is_core else group.core
    prologue = group.prologue | ({node.id} | views if site == "in" else set())
    in_leaves, out_leaves = _leaves(graph, members, core, prologue, position)
    if len(set(in_leaves) | set(out_leaves)) > max_leaves or set(in_leaves) & set(out_leaves):
        return None
    return group, site, views


def _feeds_first_operand(core: Node, node: Node, reads: list[tuple[int, int | None]]) -> bool:
    """A prologue computes the core's first operand only: a norm reads its weight and bias itself,
    whole rows at the core's width, so `node` may neither be one of them nor read one."""
    others = set(core.srcs[1:])
    if others & set(node.srcs):
        return False
    return all(r != core.id or (v if v is not None else node.id) == core.srcs[0] for r, v in reads)


def _leaves(
    graph: Graph, members: set[int], core: int | None, prologue: set[int], position: dict[int, int]
) -> tuple[list[int], list[int]]:
    """The group's leaves read by the prologue and core, and those read by the other terms."""
    in_leaves: list[int] = []
    out_leaves: list[int] = []
    for m in sorted(members, key=position.__getitem__):
        side = in_leaves if m in prologue or m == core else out_leaves
        for s in graph[m].srcs:
            if s not in members and s not in side:
                side.append(s)
    return in_leaves, out_leaves


def _fused_node(graph: Graph, group: _Group, position: dict[int, int]) -> Node:
    order = sorted(group.members, key=position.__getitem__)
    terms = tuple(replace(graph[m], kernel=None, inplace=None, slot=None) for m in order)
    leaves: list[int] = []
    for t in terms:
        leaves.extend(s for s in t.srcs if s not in group.members and s not in leaves)
    arg = FusedArg(terms, tuple(leaves))
    root = graph[group.root]
    if group.core is None:
        choice = fused_group_choice()
    else:
        choice = graph[group.core].kernel
    choice = replace(choice, params=choice.params + (("group", arg.holds),))
    return Node(root.id, Op.FUSED, arg.leaves, root.shape, root.dtype, arg, kernel=choice, label=root.label)


def check_acyclic(graph: Graph) -> None:
    """Kernels (fused or not) must form a DAG; raise when two groups read each other."""
    g = nx.DiGraph()
    for node in graph:
        g.add_node(node.id)
        for s in node.srcs:
            g.add_edge(s, node.id)
    if not nx.is_directed_acyclic_graph(g):
        cycle = nx.find_cycle(g)
        raise AssertionError(f"fuse: the groups form a cycle through {cycle}")
