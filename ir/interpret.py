"""The numpy reference interpreter: evaluates any graph, before or after any pass.

It is the oracle of the tests, so it is written for clarity, computes floats in float32
(float16 ops in float32, rounded at the end, as the GPU kernels do), and shares no code
with the kernels it checks: each op's numpy meaning is its record's reference (ir/optable),
written apart from that record's WGSL.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from ir.graph import Graph
from ir.node import Node
from ir.ops import Op
from ir.quant import dequantize
from ir.symbolic import bind, syms_in


def eval_node(node: Node, args: list[np.ndarray]) -> np.ndarray:
    """The value of `node` from its operands' values, in the node's dtype and shape."""
    with np.errstate(all="ignore"):
        if node.op is Op.FUSED:  # a fused group: evaluate the nodes it holds, one by one
            values = dict(zip(node.arg.leaves, args))
            for term in node.arg.terms:
                values[term.id] = eval_node(term, [values[s] for s in term.srcs])
            result = values[node.arg.root.id]
        else:
            result = node.op.opdef.reference(node, args)
        # rounding to the node's dtype may overflow (float16 past 65504): inf, as the GPU stores it
        return np.array(np.asarray(result).astype(node.dtype.np).reshape(node.shape), order="C")


def interpret(graph: Graph, inputs: Sequence[np.ndarray], ints: Sequence[int] | None = None) -> list[np.ndarray]:
    """Evaluate `graph` on host arrays given by input index; returns the outputs.

    `ints`: the graph's runtime integers by slot (ir.symbolic), for the nodes whose args hold them
    (default: the values it was traced with, `graph.ints`).

    A quantized input (ir/quant.py) is given as its GPU layout (u32 words) and evaluated as
    its float32 values; the ops that read it (matmul, gather, cast) then need no rule of their own.
    """
    values: dict[int, np.ndarray] = {}
    ints = graph.ints if ints is None else ints
    for node in graph:
        if node.op is Op.INPUT and node.dtype.is_quantized:  # its blocks (u32 words), as float32 values
            values[node.id] = dequantize(np.asarray(inputs[node.arg.index]), node.dtype, node.shape)
        elif node.op is Op.INPUT:
            values[node.id] = np.asarray(inputs[node.arg.index]).astype(node.dtype.np).reshape(node.shape)
        else:
            if syms_in(node.arg):
                node = replace(node, arg=bind(node.arg, ints))
            values[node.id] = eval_node(node, [values[s] for s in node.srcs])
    return [values[o] for o in graph.outputs]
