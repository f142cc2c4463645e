"""Split the argsort of rows longer than one workgroup sorts: sorted runs, then merges.

An ARGSORT node's kernel (backend_wgpu/kernels/sort/bitonic.py) sorts a row in one
workgroup's memory, which holds BitonicSortKernel.block elements. A longer row becomes an
ARGSORT by runs of that length, then ARGSORT_MERGE steps that merge pairs of sorted runs
(block, 2 * block, ...) until one run holds the row; the last step keeps the node's id. Every
step reads x through the same operand. It runs before select_kernels, which picks their kernels.
"""

from __future__ import annotations

from dataclasses import replace

from backend_wgpu.kernels.sort.bitonic import BitonicSortKernel
from ir.caps import DeviceCaps
from ir.graph import Graph
from ir.node import Node
from ir.ops import Op


def split_sort(graph: Graph, caps: DeviceCaps) -> Graph:
    if not any(_too_long(n) for n in graph):
        return graph
    nodes: list[Node] = []
    next_id = graph.next_id()
    for node in graph:
        if _too_long(node):
            steps = _split(node, next_id)
            next_id = max(n.id for n in steps) + 1
            nodes.extend(steps)
        else:
            nodes.append(node)
    return graph.with_nodes(nodes)


def _too_long(node: Node) -> bool:
    return node.op is Op.ARGSORT and node.arg.run == 0 and node.shape[-1] > BitonicSortKernel.block


def _split(node: Node, next_id: int) -> list[Node]:
    """The runs' argsort, then the merges; the last merge keeps the node's id and label."""
    n, run = node.shape[-1], BitonicSortKernel.block
    x = node.srcs[0]
    steps = [Node(next_id, Op.ARGSORT, (x,), node.shape, node.dtype, replace(node.arg, run=run))]
    while run < n:
        last = 2 * run >= n
        nid = node.id if last else next_id + len(steps)
        merge = Node(nid, Op.ARGSORT_MERGE, (x, steps[-1].id), node.shape, node.dtype, replace(node.arg, run=run))
        steps.append(replace(merge, label=node.label) if last else merge)
        run *= 2
    return steps
