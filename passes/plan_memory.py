"""Memory plan: give every value a buffer slot, reusing temporaries by live interval.

Values that share a buffer form one group: a VIEW shares its source's, an in-place node
its overwritten operand's (so an in-place chain is one group), and a fused kernel's
inner values have no buffer at all (only the FUSED node's result does). A group lives
from the position of its first producer to that of its last reader. Input groups use
the caller's buffers, output groups get fresh buffers every run and live to the end.

Two plans are made and the one with fewer bytes is kept (whole buffers on a tie):

- Whole buffers (Pisarchyk and Lee, arXiv 2001.03288, "shared objects", as ratchet does):
  each temporary goes into the buffer whose users' live intervals do not overlap its own
  and that wastes least: big enough and smallest, else the one that must grow least,
  else a new pool buffer. Three orders are tried: largest first ("greedy by size"),
  earliest first and latest first (these keep a chain alternating between two buffers,
  from either end). The output buffers take part: each is fresh for its run, so before
  its output is written it can hold temporaries, and it may be allocated larger for
  them, up to OUTPUT_GROWTH times its tensor (which then uses a prefix of it).
- An arena (the same paper's "offset calculation"): every temporary is a range of one
  buffer, largest first, each at the lowest aligned offset that no temporary live at
  the same time covers; outputs get buffers of their own. Whole buffers cannot hold two
  live values at once, the arena can (attention keeps four same-size values live while a
  wider one waits for its turn). WebGPU forbids one buffer bound read-only and writable
  in one dispatch whatever the ranges, so a kernel that writes into the arena binds its
  arena operands read_write (backend_wgpu.kernel.Kernel.writable_operand); writable
  ranges that do not overlap are allowed, and values live at once never overlap.

`memory_report` gives a planned graph's figures: `peak` (bytes of temporaries and
outputs the program allocates, the arena counted once), `lower_bound` (the largest sum of
simultaneously live groups in the graph's order: no plan can do better) and `no_reuse`
(every group its own buffer).
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


OUTPUT_GROWTH = 2  # an output buffer may be allocated up to this many times its tensor's bytes


@dataclass
class _Buffer:
    size: int
    intervals: list[tuple[int, int]]  # live intervals of the groups it holds
    output_slot: int | None  # the output slot it is, or None for a pool buffer
    tensor_bytes: int  # bytes of that output's tensor

    def free_during(self, first: int, last: int) -> bool:
        return all(last < a or b < first for a, b in self.intervals)

    def gap(self, first: int, last: int) -> int:
        """Positions between [first, last] and the nearest interval this buffer holds."""
        return min((first - b if b < first else a - last for a, b in self.intervals), default=1 << 30)


def buffer_groups(graph: Graph) -> tuple[dict[int, int], dict[int, _Group]]:
    """Each node's group root, and the groups with their sizes and live intervals (positions)."""
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
            g.last = max(g.last, position[node.id])
            if node.op is Op.INPUT:
                g.input_index = node.arg.index
        for s in node.srcs:
            groups[root[s]].last = max(groups[root[s]].last, position[node.id])
    for i, o in enumerate(graph.outputs):
        g = groups[root[o]]
        if g.output_index is None:
            g.output_index = i
        g.last = len(position)  # outputs live past the end
    return root, groups


def _pack(temps: list[_Group], outputs: list[_Buffer]) -> tuple[list[_Buffer], dict[int, int]]:
    """Place temporaries, in the given order, into the output buffers and a pool; returns both and who went where."""
    pool = [_Buffer(o.size, list(o.intervals), o.output_slot, o.tensor_bytes) for o in outputs]
    where: dict[int, int] = {}
    for g in temps:
        free = [k for k, buf in enumerate(pool) if buf.free_during(g.first, g.last)]
        # the free buffer big enough that wastes least, else the free one that needs to grow
        # least; among equals the one whose users end or start nearest (packs chains tightly)
        best = min(
            (k for k in free if pool[k].size >= g.nbytes),
            key=lambda k: (pool[k].size, pool[k].gap(g.first, g.last), k),
            default=None,
        )
        if best is None:
            growable = [
                k for k in free if pool[k].output_slot is None or g.nbytes <= OUTPUT_GROWTH * pool[k].tensor_bytes
            ]
            best = min(growable, key=lambda k: (g.nbytes - pool[k].size, pool[k].gap(g.first, g.last), k), default=None)
            if best is not None:
                pool[best].size = g.nbytes
        if best is None:
            best = len(pool)
            pool.append(_Buffer(g.nbytes, [], None, 0))
        pool[best].intervals.append((g.first, g.last))
        where[g.root] = best
    return pool, where


def extent(nbytes: int) -> int:
    """Bytes a buffer or arena range of `nbytes` takes (the backend rounds to 4, at least 4)."""
    return max(4, (nbytes + 3) & ~3)


def _arena(temps: list[_Group], align: int) -> tuple[dict[int, int], int]:
    """Offsets of temporaries in one buffer: largest first, each at the lowest aligned gap
    that no temporary live at the same time covers ("greedy by size for offset calculation")."""
    placed: list[tuple[int, int, int, int]] = []  # first, last, offset, extent
    offsets: dict[int, int] = {}
    for g in sorted(temps, key=lambda g: (-g.nbytes, g.first)):
        size = extent(g.nbytes)
        busy = sorted((o, o + e) for a, b, o, e in placed if not (g.last < a or b < g.first))
        off = 0
        for lo, hi in busy:
            if off + size <= lo:
                break
            off = max(off, -(-hi // align) * align)
        placed.append((g.first, g.last, off, size))
        offsets[g.root] = off
    return offsets, max((o + e for _, _, o, e in placed), default=0)


def plan_memory(graph: Graph, caps: DeviceCaps) -> Graph:
    root, groups = buffer_groups(graph)
    slots: list[SlotInfo] = []
    slot_of_group: dict[int, int] = {}
    for r, g in groups.items():
        if g.input_index is not None:
            slot_of_group[r] = len(slots)
            slots.append(SlotInfo("input", g.nbytes, g.input_index))
        elif g.output_index is not None:
            slot_of_group[r] = len(slots)
            slots.append(SlotInfo("output", g.nbytes, g.output_index))

    # Output buffers are fresh each run, so before its output is written one can hold
    # temporaries: they start the pool with their slot and interval.
    outputs = [
        _Buffer(g.nbytes, [(g.first, g.last)], slot_of_group[r], g.nbytes)
        for r, g in groups.items()
        if g.output_index is not None and g.input_index is None
    ]
    temps = [g for g in groups.values() if g.input_index is None and g.output_index is None]
    by_size = _pack(sorted(temps, key=lambda g: (-g.nbytes, g.first)), outputs)
    by_time = _pack(sorted(temps, key=lambda g: (g.first, -g.nbytes)), outputs)
    by_end = _pack(sorted(temps, key=lambda g: (-g.last, -g.nbytes)), outputs)
    pool, pool_index = min(by_size, by_time, by_end, key=lambda plan: sum(buf.size for buf in plan[0]))
    # the arena: temporaries at offsets of one buffer, outputs exact; kept only when smaller,
    # since dispatches writing into it bind their arena operands read_write
    offsets, arena_bytes = _arena(temps, caps.storage_align)
    whole = sum(buf.size for buf in pool)
    arena_total = arena_bytes + sum(buf.tensor_bytes for buf in outputs)
    if len(temps) > 1 and arena_total < whole and arena_bytes <= caps.max_storage_binding:
        for k, g in enumerate(sorted(temps, key=lambda g: g.first)):
            slot_of_group[g.root] = len(slots)
            slots.append(SlotInfo("temp", g.nbytes, k, offset=offsets[g.root]))
        nodes = [replace(n, slot=slot_of_group[root[n.id]]) for n in graph]
        out = graph.with_nodes(nodes)
        out.schedule = Schedule((), tuple(slots))
        return out
    pool_slot = []
    temp_count = 0
    for buf in pool:
        if buf.output_slot is None:
            pool_slot.append(len(slots))
            slots.append(SlotInfo("temp", buf.size, temp_count))
            temp_count += 1
        else:
            pool_slot.append(buf.output_slot)
            slots[buf.output_slot] = replace(slots[buf.output_slot], nbytes=buf.size)
    for r, k in pool_index.items():
        slot_of_group[r] = pool_slot[k]

    nodes = [replace(n, slot=slot_of_group[root[n.id]]) for n in graph]
    out = graph.with_nodes(nodes)
    out.schedule = Schedule((), tuple(slots))
    return out


def peak_bytes(graph: Graph) -> int:
    """Bytes of temporaries plus outputs a planned graph allocates (inputs belong to the caller)."""
    assert graph.schedule is not None
    return slots_bytes(graph.schedule.slots)


def slots_bytes(slots: tuple[SlotInfo, ...]) -> int:
    """Output and temporary buffer bytes of a plan, its arena counted once."""
    arena = max((s.offset + extent(s.nbytes) for s in slots if s.offset is not None), default=0)
    return arena + sum(s.nbytes for s in slots if s.kind != "input" and s.offset is None)


def lower_bound_bytes(graph: Graph) -> int:
    """The largest sum of simultaneously live temporary and output groups, in the graph's order."""
    _, groups = buffer_groups(graph)
    events: dict[int, int] = {}
    for g in groups.values():
        if g.input_index is None and g.nbytes:
            events[g.first] = events.get(g.first, 0) + g.nbytes
            events[g.last + 1] = events.get(g.last + 1, 0) - g.nbytes
    live = best = 0
    for t in sorted(events):
        live += events[t]
        best = max(best, live)
    return best


def no_reuse_bytes(graph: Graph) -> int:
    """Bytes if every temporary and output group had a buffer of its own."""
    _, groups = buffer_groups(graph)
    return sum(g.nbytes for g in groups.values() if g.input_index is None)


@dataclass(frozen=True)
class MemoryReport:
    peak: int  # bytes the plan allocates: temporary pool + outputs
    lower_bound: int  # largest sum of simultaneously live values
    no_reuse: int  # every value in a buffer of its own
    buffers: int  # temporary buffers (the arena counts one)
    arena: bool = False  # temporaries are ranges of one arena buffer

    @property
    def ratio(self) -> float:
        """peak / lower bound (1.0 is optimal)."""
        return self.peak / self.lower_bound if self.lower_bound else 1.0

    def __str__(self) -> str:
        return (
            f"peak {self.peak} bytes = {self.ratio:.3f}x the lower bound {self.lower_bound} "
            f"(no reuse: {self.no_reuse} bytes; {'one arena' if self.arena else f'{self.buffers} pooled buffers'})"
        )


def memory_report(graph: Graph) -> MemoryReport:
    """Peak, lower bound and no-reuse bytes of a planned graph."""
    assert graph.schedule is not None, "memory_report needs a graph after plan_memory"
    temps = sum(1 for s in graph.schedule.slots if s.kind == "temp" and s.offset is None)
    arena = any(s.offset is not None for s in graph.schedule.slots)
    return MemoryReport(peak_bytes(graph), lower_bound_bytes(graph), no_reuse_bytes(graph), temps + arena, arena)
