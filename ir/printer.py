"""A stable text form of a graph: one line per node, kernel annotations once known."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ir.ops import Op
from ir.view import View

if TYPE_CHECKING:
    from ir.graph import Graph
    from ir.node import Node


def format_arg(node: Node) -> str:
    arg = node.arg
    if arg is None:
        return ""
    if isinstance(arg, View):
        return f"strides={arg.strides} offset={arg.offset}"
    if node.op is Op.INPUT:
        text = f"#{arg.index}" + (" donatable" if arg.donatable else "")
        if node.dtype.is_quantized:  # its format and bytes: blocks, not elements
            d = node.dtype
            text += f" {node.nbytes} bytes, {d.block_bytes}-byte blocks of {d.block}"
        return text
    if node.op is Op.CAST:
        return ""
    return f"{arg}"


def format_node(node: Node) -> str:
    srcs = ", ".join(f"%{s}" for s in node.srcs)
    shape = "x".join(str(d) for d in node.shape) or "scalar"
    text = f"%{node.id} = {node.op.value}({srcs})"
    arg = format_arg(node)
    if arg:
        text += f" {{{arg}}}"
    text += f" : {node.dtype.value}[{shape}]"
    if node.kernel is not None:
        text += f"  -> {node.kernel.label()}"
    if node.inplace is not None:
        text += f" inplace(%{node.srcs[node.inplace]})"
    if node.slot is not None:
        text += f" @slot{node.slot}"
    return text


def format_graph(graph: Graph) -> str:
    lines = [format_node(n) for n in graph]
    lines.append("return " + ", ".join(f"%{o}" for o in graph.outputs))
    return "\n".join(lines)
