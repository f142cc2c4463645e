"""Flash-decoding: an attention of one query row over many keys runs as key ranges, then a combine.

A decode step's attention has one query row per head: a workgroup per (batch, kv head)
would leave most of a large GPU idle while the cache is read. Where attention_decode runs
the node (passes.select_kernels.decode_attention_plan) and sizes it at more than one
key range, the ATTENTION node becomes ATTENTION_SPLITS (per range: the unnormalized
output and its softmax statistics) and ATTENTION_COMBINE (the ranges rescaled and added),
which keeps the node's id, so its readers and the graph's outputs are unchanged. It runs
before select_kernels, which then picks the kernels of both.
"""

from __future__ import annotations

from ir.caps import DeviceCaps
from ir.dtypes import DType
from ir.graph import Graph
from ir.node import Node
from ir.ops import Op, SplitsArg
from passes.select_kernels import decode_attention_plan


def split_attention(graph: Graph, caps: DeviceCaps) -> Graph:
    nodes: list[Node] = []
    fresh = graph.next_id()
    changed = False
    for node in graph:
        plan = decode_attention_plan(graph, node, caps) if node.op is Op.ATTENTION else None
        # an attention over no keys stays whole: it is 0 there, while a combine of nothing is NaN
        if plan is None or plan.splits == 1 or node.size == 0 or graph[node.srcs[1]].shape[2] == 0:
            nodes.append(node)
            continue
        ev = graph[node.srcs[2]].shape[-1]
        shape = node.shape[:-1] + (plan.splits, ev + 2)
        parts = Node(fresh, Op.ATTENTION_SPLITS, node.srcs, shape, DType.float32, SplitsArg(node.arg, plan.splits))
        nodes += [parts, Node(node.id, Op.ATTENTION_COMBINE, (fresh,), node.shape, node.dtype, label=node.label)]
        fresh += 1
        changed = True
    return graph.with_nodes(nodes) if changed else graph
