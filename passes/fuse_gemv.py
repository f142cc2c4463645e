"""GEMV groups: the matmuls of one row that share their input run as one kernel, with what surrounds them.

A decode step multiplies one row by many weights: q, k and v of the same normed row, gate
and up of another. Each GEMV alone is a short launch that reads its weight once; this
pass gives every set of them that shares its input one kernel (gemv_multi), and folds in:
  - the prologue: an rms_norm whose only readers are these matmuls (its row statistic is
    summed in the same k loop that reads the row, so the normed row is never stored);
  - per-column epilogues: elementwise ops (bias, activation, SwiGLU's silu(gate) * up
    across two of the matmuls), rope (whose pairs of columns one workgroup computes
    together) and plain reshapes between them;
  - side writes: an index_write of an epilogue's value into a buffer it may overwrite (the
    KV-cache append), which the kernel stores directly.
The group's value is its one stored result (the root: the epilogue value read elsewhere);
each side write stays in the graph as a FUSED node that holds the terms it needs, keeps
its id and reads the written buffer in place, and is `done_by` the group's kernel (it
dispatches nothing). No weight is copied: each matmul keeps its own B operand.

A matmul is a candidate when it is one row (M = 1, no batch) of floats with B read
contiguously along k (x @ W.T, torch's Linear layout), or B a whole quantized weight w.T
(q8_0, q4_0, q4_k, q6_k: the kernel dequantizes its blocks in registers, as qgemv). Epilogue terms join while every
operand is a member (through a plain reshape) or a value that does not depend on the
group; each connected part of the epilogue (its matmuls, the terms between them) must
end in side writes or in the root, and at most one part holds the root. A side write
joins only if its buffer is read by nothing else after the group runs, is no graph
output, and is a buffer the graph may overwrite. A group forms only when it saves
something: two matmuls or more, the norm, a rope or a side write; a lone matmul with a
plain epilogue is left to passes.fuse.

It runs after select_kernels and before fuse (which leaves FUSED nodes alone), and it is
off with WGJIT_FUSION=0, as fuse is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import networkx as nx

from ir.caps import DeviceCaps
from ir.dtypes import DType
from ir.fusion import FusedArg, linear_broadcast, linear_identity
from ir.graph import Graph
from ir.node import KernelChoice, Node
from ir.ops import ELEMENTWISE, Op
from passes.fold_views import view_of_operand
from passes.fuse import fusion_enabled
from passes.select_kernels import gemv_group_choice


def fuse_gemv(graph: Graph, caps: DeviceCaps) -> Graph:
    if not fusion_enabled():
        return graph
    info = _Info(graph)
    by_input: dict[tuple, list[int]] = {}
    for node in graph:
        if _is_core(graph, node):
            owner, view = view_of_operand(graph, node.srcs[0])
            by_input.setdefault((owner.id, view), []).append(node.id)
    groups: list[_Group] = []
    for cores in by_input.values():
        group = _plan(graph, info, cores, caps)
        if group is not None:
            groups.append(group)
    return _rewrite(graph, groups, caps) if groups else graph


# --- what the graph looks like around the candidates -----------------------------------------


class _Info:
    """Readers (through views), positions, outputs and reachability of one graph."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.position = {nid: i for i, nid in enumerate(graph.nodes)}
        self.outputs = set(graph.outputs)
        self.readers: dict[int, list[int]] = {nid: [] for nid in graph.nodes}
        for node in graph:
            if node.op is Op.VIEW:
                continue
            for s in dict.fromkeys(node.srcs):
                owner = graph[s].srcs[0] if graph[s].op is Op.VIEW else s
                self.readers[owner].append(node.id)

    def descendants(self, nodes: list[int]) -> set[int]:
        found: set[int] = set()
        for n in nodes:
            found |= nx.descendants(self.graph.nx, n)
        return found

    def member_of(self, src: int, members: set[int]) -> int | None:
        """The member an operand reads, directly or through a plain reshape; None otherwise."""
        if src in members:
            return src
        node = self.graph[src]
        if node.op is Op.VIEW and node.srcs[0] in members:
            owner = self.graph[node.srcs[0]]
            return owner.id if linear_identity(node.arg, owner.size) else None
        return None

    def spread_member(self, src: int, members: set[int]) -> int | None:
        """The member an operand reads through a broadcast of its linear order (a side write spreads it)."""
        node = self.graph[src]
        if node.op is Op.VIEW and node.srcs[0] in members:
            owner = self.graph[node.srcs[0]]
            return owner.id if linear_broadcast(node.arg, owner.size) else None
        return None

    def is_write(self, node_id: int, members: set[int]) -> bool:
        """A member that writes another buffer: an index_write of a member, or where(cond, member spread, x)."""
        node = self.graph[node_id]
        if node.op is Op.INDEX_WRITE:
            return True
        if node.op is not Op.WHERE or self.graph[node.srcs[1]].op is not Op.VIEW:
            return False
        view = self.graph[node.srcs[1]]
        owner = self.graph[view.srcs[0]]
        return (
            owner.id in members and not linear_identity(view.arg, owner.size) and linear_broadcast(view.arg, owner.size)
        )


def _is_core(graph: Graph, node: Node) -> bool:
    if node.op is not Op.MATMUL or node.kernel is None or node.size == 0 or not node.dtype.is_float:
        return False
    if node.shape[-2] != 1 or math.prod(node.shape[:-2]) != 1:
        return False
    a_owner, b_owner = (view_of_operand(graph, s)[0] for s in node.srcs)
    b_view = view_of_operand(graph, node.srcs[1])[1]
    if a_owner.dtype.is_quantized:
        return False
    if b_owner.dtype.is_quantized:  # x @ w.T of a whole quantized w (N, K): gemv_multi reads its blocks
        k, n = b_view.shape[-2:]
        return b_owner.shape == (n, k) and b_view.strides[-2:] == (1, k) and b_view.offset == 0
    return b_view.strides[-2] == 1 or b_view.shape[-2] == 1


# --- the parts: the matmuls' epilogues, grown forwards ----------------------------------------


@dataclass
class _Part:
    cores: list[int]
    members: set[int]  # cores and epilogue terms
    stored: list[int] = field(default_factory=list)  # members read outside the group (or outputs)
    writes: list[int] = field(default_factory=list)  # members that write another buffer: side writes


def _joinable(info: _Info, node: Node, members: set[int], downstream: set[int]) -> bool:
    """May `node`, a reader of a member, join the epilogue? Its other operands must not depend on the group."""
    if node.kernel is None or node.size == 0:
        return False
    if node.op is Op.WHERE and info.member_of(node.srcs[1], members) is None:
        if info.spread_member(node.srcs[1], members) is None:
            return False
        member_operands: tuple[int, ...] | range = (1,)  # where(cond, member spread along axes, x): a write
    elif node.op in ELEMENTWISE:
        member_operands = range(len(node.srcs))
    elif node.op is Op.ROPE:
        member_operands = (0,)
    elif node.op is Op.INDEX_WRITE:
        member_operands = (1,)
    else:
        return False
    for i, s in enumerate(node.srcs):
        inside = info.member_of(s, members)
        if inside is None and node.op is Op.WHERE and i == 1:
            inside = info.spread_member(s, members)
        if i in member_operands and inside is not None:
            continue
        owner = info.graph[s].srcs[0] if info.graph[s].op is Op.VIEW else s
        if owner in downstream or owner in members or s in downstream:
            return False  # depends on the group (or reads a member through a transpose, a slice...)
    return True


def _grow(info: _Info, core: int, cores: set[int], downstream: set[int]) -> set[int]:
    """The epilogue of `core`: readers that may join, and the other matmuls they read (SwiGLU's up)."""
    members = {core}
    queue = [core]
    while queue:
        m = queue.pop()
        if info.is_write(m, members | cores):
            continue  # a side write ends its branch
        for r in info.readers[m]:
            node = info.graph[r]
            if r in members or not _joinable(info, node, members | cores, downstream):
                continue
            members.add(r)
            queue.append(r)
            for s in node.srcs:
                inside = info.member_of(s, members | cores)
                spread = inside is None and info.spread_member(s, members | cores) is not None
                if (inside is not None or spread) and info.graph[s].op is Op.VIEW:
                    members.add(s)  # the views it reads members through are terms too
                if inside in cores and inside not in members:
                    members.add(inside)
                    queue.append(inside)
    return members


def _parts(info: _Info, cores: list[int]) -> list[_Part]:
    downstream = info.descendants(cores)
    parts: list[_Part] = []
    for core in cores:
        members = _grow(info, core, set(cores), downstream)
        overlapping = [p for p in parts if p.members & members]
        for p in overlapping:
            parts.remove(p)
            members |= p.members
        found = sorted(members & set(cores), key=info.position.__getitem__)
        parts.append(_Part(found, members))
    for part in parts:
        _find_results(info, part)
        # a value read outside is stored: the terms after it that are stored as well leave the
        # part (one stored value per part), so the first stored value of a chain is the root
        while len(part.stored) > 1 and part.stored[-1] not in part.cores:
            part.members -= _downstream_in(info, part.stored[-1], part.members)
            read = {s for m in part.members for s in info.graph[m].srcs}
            part.members -= {m for m in part.members if info.graph[m].op is Op.VIEW and m not in read}
            _find_results(info, part)
    return parts


def _find_results(info: _Info, part: _Part) -> None:
    part.stored, part.writes = [], []
    for m in sorted(part.members, key=info.position.__getitem__):
        if info.is_write(m, part.members):
            part.writes.append(m)
        elif m in info.outputs or any(r not in part.members for r in info.readers[m]):
            part.stored.append(m)


def _downstream_in(info: _Info, node_id: int, members: set[int]) -> set[int]:
    """node_id and the members that read it, directly or not (views included)."""
    found = {node_id}
    stack = [node_id]
    while stack:
        for r in info.readers[stack.pop()]:
            if r in members and r not in found:
                found.add(r)
                stack.append(r)
    return found | {m for m in members if info.graph[m].op is Op.VIEW and info.graph[m].srcs[0] in found}


# --- one group: parts that share the input ---------------------------------------------------


@dataclass
class _Group:
    root: int
    members: set[int]  # every node the group's kernel computes (norm, views, matmuls, epilogues)
    writes: list[int]
    position: int  # where the group's kernel runs: its last member's place
    in_place: set[int] = field(default_factory=set)  # the side writes that overwrite their buffer


def _plan(graph: Graph, info: _Info, cores: list[int], caps: DeviceCaps) -> _Group | None:
    parts = _parts(info, cores)
    rooted = [p for p in parts if len(p.stored) == 1]
    side = [p for p in parts if not p.stored and p.writes]
    if not rooted:
        return None
    chosen = [rooted[0], *side]
    while True:
        group = _assemble(graph, info, chosen)
        late = [w for w in group.writes if any(info.position[r] <= group.position for r in info.readers[w])]
        if not late and all(info.position[r] > group.position for r in info.readers[group.root]):
            break
        if len(chosen) == 1:  # the root is read before the group's last member runs
            return None
        # a value is read before the group would run: leave out the side part that runs last
        drop = next((p for p in chosen[1:] if set(p.writes) & set(late)), None)
        chosen.remove(drop or max(chosen[1:], key=lambda p: max(info.position[m] for m in p.members)))
    group.in_place = {w for w in group.writes if _overwritable(info, group, w)}
    n_cores = sum(len(p.cores) for p in chosen)
    saves = n_cores > 1 or group.writes or any(graph[m].op in (Op.ROPE, Op.RMS_NORM) for m in group.members)
    leaves = {s for m in group.members for s in graph[m].srcs if s not in group.members}
    bindings = len(leaves) + 1 + len(group.writes) - len(group.in_place)
    if not saves or bindings > caps.max_storage_buffers_per_stage:
        return None
    return group


def _assemble(graph: Graph, info: _Info, parts: list[_Part]) -> _Group:
    members = set().union(*(p.members for p in parts))
    cores = [c for p in parts for c in p.cores]
    norm = _norm_prologue(graph, info, cores)
    if norm is not None:  # the matmuls read the norm through plain reshapes: those join too
        members |= {norm} | {graph[c].srcs[0] for c in cores if graph[graph[c].srcs[0]].op is Op.VIEW}
    writes = [w for p in parts for w in p.writes]
    position = max(info.position[m] for m in members)
    return _Group(parts[0].stored[0], members, writes, position)


def _norm_prologue(graph: Graph, info: _Info, cores: list[int]) -> int | None:
    """The rms_norm the matmuls read (through plain reshapes) when nothing else reads it.

    The folded norm never stores its row: for a float16 norm gemv_multi rounds each element of
    the row to float16 before the products (its rstd summed first), as the stored row would be
    (NUMERICS.md), so a row past 65504 gives inf - inf = NaN there as in the unfused graph.
    """
    owner, view = view_of_operand(graph, graph[cores[0]].srcs[0])
    if owner.op is not Op.RMS_NORM or owner.id in info.outputs or not linear_identity(view, owner.size):
        return None
    if owner.dtype not in (DType.float32, DType.float16):
        return None
    return owner.id if sorted(info.readers[owner.id]) == sorted(cores) else None


def _overwritable(info: _Info, group: _Group, w: int) -> bool:
    """May side write w overwrite its buffer (else it writes a copy, the buffer read through its view)?

    The buffer must be whole, of w's dtype, no graph output, an input the graph may overwrite
    or a value it computed, and read by nothing else once the group runs.
    """
    graph = info.graph
    node = graph[w]
    target = node.srcs[0] if node.op is Op.INDEX_WRITE else node.srcs[2]
    base, view = view_of_operand(graph, target)
    if not view.is_identity or base.dtype != node.dtype or base.size != node.size:
        return False
    if base.id in info.outputs or base.id in group.members or (base.op is Op.INPUT and not base.arg.donatable):
        return False
    others = [r for r in info.readers[base.id] if r != w]
    return all(r not in group.members and info.position[r] < group.position for r in others)


# --- the rewrite ------------------------------------------------------------------------------


def _rewrite(graph: Graph, groups: list[_Group], caps: DeviceCaps) -> Graph:
    """Each group's side writes, then its FUSED node, where its last member was; members leave.

    The side writes come first so that a copy's buffer is live while the group's kernel
    writes it; what reads them comes after the group (_plan checked).
    """
    runs_at = {g.position: g for g in groups}
    removed = set().union(*(g.members for g in groups))
    group_of_output = {o: g for g in groups for o in (g.root, *g.writes)}
    emitted: set[int] = set()
    waiting: dict[int, list[Node]] = {}  # views of a group's results met before the group runs
    nodes: list[Node] = []
    for i, node in enumerate(graph):
        if node.id not in removed:
            group = group_of_output.get(node.srcs[0]) if node.op is Op.VIEW else None
            if group is not None and group.root not in emitted:
                waiting.setdefault(group.root, []).append(node)
            else:
                nodes.append(node)
        group = runs_at.get(i)
        if group is not None:
            nodes += _group_nodes(graph, group, caps)
            emitted.add(group.root)
            nodes += waiting.pop(group.root, [])
    return graph.with_nodes(nodes)


def _group_nodes(graph: Graph, group: _Group, caps: DeviceCaps) -> list[Node]:
    """One FUSED node per side write, done by the group's FUSED node, which comes last."""
    position = {nid: i for i, nid in enumerate(graph.nodes)}
    order = sorted(group.members - {group.root}, key=position.__getitem__) + [group.root]
    arg = _fused_arg(graph, order)
    core = next(t for t in arg.terms if t.op is Op.MATMUL)
    quantized = any(view_of_operand(graph, t.srcs[1])[0].dtype.is_quantized for t in arg.terms if t.op is Op.MATMUL)
    # the positions a spread write walks (a one-hot cache update: the cache's length)
    spread = max((graph[w].size // max(graph[graph[graph[w].srcs[1]].srcs[0]].size, 1) for w in group.writes
                  if graph[w].op is Op.WHERE), default=0)  # fmt: skip
    choice = gemv_group_choice(graph[core.srcs[0]].shape[-1], caps, quantized, spread)
    root = graph[group.root]
    out: list[Node] = []
    for w in group.writes:
        needed = _upstream(graph, w, group.members)
        sub = _fused_arg(graph, [m for m in order if m in needed and m != w] + [w])
        node = graph[w]
        target = node.srcs[0] if node.op is Op.INDEX_WRITE else node.srcs[2]
        params = (("done_by", root.id), ("group", sub.holds))
        out.append(
            Node(w, Op.FUSED, sub.leaves, node.shape, node.dtype, sub, label=node.label,
                 kernel=KernelChoice(choice.name, "done_by", workgroup=choice.workgroup, params=params),
                 inplace=sub.leaves.index(target) if w in group.in_place else None)
        )  # fmt: skip
    params = choice.params + (("group", arg.holds),)
    out.append(
        Node(root.id, Op.FUSED, arg.leaves, root.shape, root.dtype, arg, label=root.label,
             kernel=replace(choice, params=params))
    )  # fmt: skip
    return out


def _fused_arg(graph: Graph, order: list[int]) -> FusedArg:
    """The terms in order, annotations stripped; the matmuls all read the first one's input
    (views of one buffer through equal Views, or the same value: passes grouped them so)."""
    inside = set(order)
    terms = [replace(graph[m], kernel=None, inplace=None, slot=None) for m in order]
    cores = [i for i, t in enumerate(terms) if t.op is Op.MATMUL]
    a = terms[cores[0]].srcs[0]
    unused = {terms[i].srcs[0] for i in cores} - {a}
    for i in cores:
        terms[i] = replace(terms[i], srcs=(a, terms[i].srcs[1]))
    terms = [t for t in terms if t.id not in unused]
    inside -= unused
    leaves: list[int] = []
    for t in terms:
        leaves.extend(s for s in t.srcs if s not in inside and s not in leaves)
    return FusedArg(tuple(terms), tuple(leaves))


def _upstream(graph: Graph, node_id: int, members: set[int]) -> set[int]:
    """node_id and the members it reads, directly or not."""
    found = {node_id}
    stack = [node_id]
    while stack:
        for s in graph[stack.pop()].srcs:
            if s in members and s not in found:
                found.add(s)
                stack.append(s)
    return found
