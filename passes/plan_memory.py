"""Memory plan: give every value a buffer slot, reusing temporaries by live interval.

Values that share a buffer (views, in-place chains) form one group. Input groups use the
caller's buffers, output groups get fresh buffers every run. Temporary groups are packed
greedily by size into a pool (Pisarchyk and Lee, arXiv 2001.03288, as ratchet does): the
largest first, each into the first pool buffer that is big enough and whose users' live
intervals do not overlap its own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ir.caps import DeviceCaps
from ir.graph import Graph, Schedule, SlotInfo
from ir.ops import Op


@dataclass
class _Group:
    root: int
    nbytes: int
    first: int
    last: int
    input_index: int | None = None
    output_index: int | None = None


def plan_memory(graph: Graph, caps: DeviceCaps) -> Graph:
    position = {nid: i for i, nid in enumerate(graph.nodes)}
    root: dict[int, int] = {}
    for node in graph:
        if node.op is Op.VIEW:
            root[node.id] = root[node.srcs[0]]
        elif node.inplace is not None:
            root[node.id] = root[node.srcs[node.inplace]]
        else:
            root[node.id] = node.id

    groups: dict[int, _Group] = {}
    for node in graph:
        r = root[node.id]
        if node.op is not Op.VIEW:
            g = groups.setdefault(r, _Group(r, 0, position[node.id], position[node.id]))
            g.nbytes = max(g.nbytes, node.nbytes)
            if node.op is Op.INPUT:
                g.input_index = node.arg.index
        for s in node.srcs:
            groups[root[s]].last = max(groups[root[s]].last, position[node.id])
    for i, o in enumerate(graph.outputs):
        g = groups[root[o]]
        if g.output_index is None:
            g.output_index = i
        g.last = len(position)  # outputs live past the end

    slots: list[SlotInfo] = []
    slot_of_group: dict[int, int] = {}
    for r, g in groups.items():
        if g.input_index is not None:
            slot_of_group[r] = len(slots)
            slots.append(SlotInfo("input", g.nbytes, g.input_index))
        elif g.output_index is not None:
            slot_of_group[r] = len(slots)
            slots.append(SlotInfo("output", g.nbytes, g.output_index))

    temps = sorted(
        (g for g in groups.values() if g.input_index is None and g.output_index is None),
        key=lambda g: (-g.nbytes, g.first),
    )
    pool: list[tuple[int, list[tuple[int, int]]]] = []  # (size, intervals)
    pool_index: dict[int, int] = {}
    for g in temps:
        for k, (size, intervals) in enumerate(pool):
            if size >= g.nbytes and all(g.last < a or b < g.first for a, b in intervals):
                intervals.append((g.first, g.last))
                pool_index[g.root] = k
                break
        else:
            pool_index[g.root] = len(pool)
            pool.append((g.nbytes, [(g.first, g.last)]))
    pool_slot = []
    for k, (size, _) in enumerate(pool):
        pool_slot.append(len(slots))
        slots.append(SlotInfo("temp", size, k))
    for r, k in pool_index.items():
        slot_of_group[r] = pool_slot[k]

    nodes = [replace(n, slot=slot_of_group[root[n.id]]) for n in graph]
    out = graph.with_nodes(nodes)
    out.schedule = Schedule((), tuple(slots))
    return out


def peak_bytes(graph: Graph) -> int:
    """Bytes of temporaries plus outputs a planned graph allocates (inputs belong to the caller)."""
    assert graph.schedule is not None
    return sum(s.nbytes for s in graph.schedule.slots if s.kind != "input")
