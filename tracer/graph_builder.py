"""Turns the pending Lazies behind some tensors into an ir.Graph ready for the passes.

`walk` collects what a realization needs (the Lazies in topological order, the inputs,
the outputs) and the graph's structure (ir.graph.Graph.structure), the program cache's
key, without building any Node: a realization whose structure was compiled before never
builds its Graph. `graph_of` builds it when a program must be compiled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ir.graph import Graph
from ir.node import Node
from ir.ops import MOVEMENT, InputArg, Op
from ir.symbolic import Sym, map_syms
from tracer.lazy import Lazy

_INPUT = Op.INPUT  # a leaf: realized, or host data waiting for upload (Lazy.is_leaf, read fast)
_ARANGE = Op.ARANGE  # its arg is keyed by repr (ir.graph.node_key)


@dataclass
class Walk:
    order: list[Lazy]  # every Lazy the graph holds, in topological order
    inputs: list[Lazy]  # the leaves, by InputArg.index
    donatable: list[bool]  # per input: nothing outside the graph can see it (an in-place kernel may overwrite it)
    outputs: list[Lazy]  # by position in graph.outputs
    structure: tuple  # ir.graph.Graph.structure() of graph_of(this walk)
    args: dict[int, Any]  # id(Lazy) -> its arg with runtime variables numbered (only Lazies with some)
    variables: list[Any]  # the runtime variables (tracer.runtime_ints.Var) by slot
    ints: tuple[int, ...]  # their values: the program's runtime integers

    def arg(self, lz: Lazy) -> Any:
        return self.args[id(lz)] if lz.dyn else lz.arg


@dataclass
class BuiltGraph:
    graph: Graph
    inputs: list[Lazy]  # by InputArg.index
    outputs: list[Lazy]  # by position in graph.outputs
    variables: list[Any]  # the runtime variables by slot (Walk.variables)
    ints: tuple[int, ...]  # their values


def walk(targets: list[Lazy]) -> Walk:
    """Collect every pending Lazy the targets need, in topological order, and the graph's structure.

    Besides the targets, a pending value becomes an output when something outside this
    graph can still see it (a live user Tensor, or a pending Lazy that is not part of
    this graph): it is computed now, once, and never recomputed later. A visible view
    (reshape, slice...) is not copied out: its base becomes the output instead, and the
    view stays a cheap lazy view of that buffer. What stays visible after the run is
    never donated to an in-place kernel.
    """
    order: list[Lazy] = []
    # Lazy -> its position in order: the graph's members. Keyed by the Lazy itself (it hashes and
    # compares by identity, in C), not by id(): one builtin call less per lookup, several per node
    pos: dict[Lazy, int] = {}
    for t in targets:
        postorder(t, order, pos)
    target_set = set(targets)
    outputs: list[Lazy] = list(dict.fromkeys(targets))
    output_set = set(outputs)
    kept_leaves: set[Lazy] = set()
    for lz in order:
        if lz.op is _INPUT or lz in target_set or not lz.seen_outside(pos):
            continue
        base = lz
        while base.op in MOVEMENT and not base.is_leaf:
            base = base.srcs[0]
        if base.is_leaf:
            kept_leaves.add(base)
        elif base not in output_set:
            outputs.append(base)
            output_set.add(base)

    nodes: list[tuple] = []
    inputs: list[Lazy] = []
    donatable: list[bool] = []
    args: dict[int, Any] = {}
    slots: dict[int, int] = {}  # id(variable) -> slot
    variables: list[Any] = []

    def number(s: Sym) -> Sym:
        slot = slots.get(id(s.slot))
        if slot is None:
            slot = slots[id(s.slot)] = len(variables)
            variables.append(s.slot)
        return Sym(slot, s.scale, s.const, s.lo, s.hi, s.what)  # replace(s, slot=slot), without its field walk

    append = nodes.append
    position = pos.__getitem__  # mapped over a node's sources: no comprehension frame per node
    for lz in order:
        op = lz.op
        if op is _INPUT:
            free = not lz.pinned and lz not in kept_leaves and not lz.seen_outside(pos)
            append(("input", len(inputs), free, lz.shape, lz.dtype._value_))  # ir.graph.input_key, inlined
            inputs.append(lz)
            donatable.append(free)
        else:
            arg = lz.arg
            if lz.dyn:
                arg = args[id(lz)] = map_syms(arg, number)
            # ir.graph.node_key, inlined (one call less per node); tests/test_lazy_host.py checks they agree
            srcs = tuple(map(position, lz.srcs))
            append((op._value_, srcs, lz.shape, lz.dtype._value_, repr(arg) if op is _ARANGE else arg))
    structure = (tuple(nodes), tuple(map(position, outputs)))
    ints = tuple(v.value for v in variables)
    return Walk(order, inputs, donatable, outputs, structure, args, variables, ints)


def graph_of(w: Walk) -> Graph:
    """The ir.Graph of a walk (node ids are positions in the walk's order)."""
    ids: dict[int, int] = {}
    nodes: list[Node] = []
    index = {id(lz): i for i, lz in enumerate(w.inputs)}
    for lz in w.order:
        nid = len(nodes)
        ids[id(lz)] = nid
        if lz.op is _INPUT:
            i = index[id(lz)]
            nodes.append(Node(nid, Op.INPUT, (), lz.shape, lz.dtype, InputArg(i, w.donatable[i])))
        else:
            nodes.append(Node(nid, lz.op, tuple(ids[id(s)] for s in lz.srcs), lz.shape, lz.dtype, w.arg(lz)))
    return Graph({n.id: n for n in nodes}, tuple(ids[id(lz)] for lz in w.outputs), ints=w.ints)


def build_graph(targets: list[Lazy]) -> BuiltGraph:
    """The graph that computes `targets` (see walk), with its inputs and outputs."""
    w = walk(targets)
    return BuiltGraph(graph_of(w), w.inputs, w.outputs, w.variables, w.ints)


def postorder(root: Lazy, order: list[Lazy], pos: dict[Lazy, int]) -> None:
    """Append every Lazy `root` needs that is not in `pos` to `order`, sources first (leaves are not entered),
    and its position there to `pos`."""
    if root in pos:
        return
    if root.op is _INPUT:
        pos[root] = len(order)
        order.append(root)
        return
    # iterative DFS, sources left to right: user graphs can be deeper than Python's recursion limit
    stack = [(root, iter(root.srcs))]
    push, pop = stack.append, stack.pop
    while stack:
        lz, srcs = stack[-1]
        for s in srcs:
            if s in pos:
                continue
            if s.op is _INPUT:
                pos[s] = len(order)
                order.append(s)
                continue
            push((s, iter(s.srcs)))
            break
        else:
            pop()
            pos[lz] = len(order)
            order.append(lz)
