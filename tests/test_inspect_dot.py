"""DOT and SVG: node and edge counts read back, labels, in-place and reuse edges, clusters."""

from __future__ import annotations

import re
import shutil
from dataclasses import replace

import pytest
from inspect_common import graphviz_plain, parse_dot, recorded_tiny, tiny

from ir.dot import to_dot
from ir.ops import NO_KERNEL
from tracer.inspect.dot import GraphvizMissing, dispatch_labels, program_dot, svg_of

# tiny() shows an in-place chain and buffer reuse: fusion would fold them into one kernel
pytestmark = pytest.mark.usefixtures("no_fusion")


def test_traced_graph_dot_has_one_node_per_ir_node_and_one_edge_per_operand():
    graph = tiny().graph()
    nodes, edges, clusters = parse_dot(to_dot(graph))
    assert sorted(nodes) == sorted(graph.nodes)
    assert len(edges) == sum(len(n.srcs) for n in graph)
    assert {(s, d) for s, d, _ in edges} == {(s, n.id) for n in graph for s in n.srcs}
    assert clusters == []
    for n in graph:  # op, dtype and shape on every node; no kernel before the passes
        assert nodes[n.id].splitlines()[0] == f"%{n.id} {n.op.value}"
        assert f"{n.dtype.value}[{'x'.join(map(str, n.shape)) or 'scalar'}]" in nodes[n.id]


def test_scheduled_dot_shows_kernels_widths_inplace_and_reuse():
    rec = recorded_tiny()
    graph = rec.program.graph
    text = program_dot(rec.program)
    nodes, edges, _ = parse_dot(text)
    assert sorted(nodes) == sorted(graph.nodes)
    for n in graph:
        if n.kernel is not None:
            assert f"{n.kernel.name}[{n.kernel.variant}] x{n.kernel.element}" in nodes[n.id]
            assert f"slot{n.slot}" in nodes[n.id]
    inplace_edges = [(s, d) for s, d, a in edges if 'label="in-place"' in a]
    want = [(n.srcs[n.inplace], n.id) for n in graph if n.inplace is not None]
    assert sorted(inplace_edges) == sorted(want) and len(want) == 2  # add and relu write over the matmul
    reuse = [(s, d, a) for s, d, a in edges if "reuses slot" in a]
    assert reuse, "the second softmax reuses the matmul's dead buffer"
    for s, d, a in reuse:
        assert graph[s].slot == graph[d].slot and f"reuses slot{graph[d].slot}" in a and "constraint=false" in a
    view_edges = [(s, d) for s, d, a in edges if "style=dashed" in a]
    assert view_edges == [(n.srcs[0], n.id) for n in graph if n.op.value == "view"]
    data = len(edges) - len(reuse)
    assert data == sum(len(n.srcs) for n in graph)
    # the dispatch line: workgroup size x count, as Program.dispatches says
    labels = dispatch_labels(rec.program)
    for d in rec.program.dispatches:
        assert labels[d.node] == f"wg {'x'.join(map(str, d.workgroup_size))} * {'x'.join(map(str, d.workgroup_count))}"
        assert labels[d.node] in nodes[d.node]
    assert all(n.op not in NO_KERNEL or n.id not in labels for n in graph)
    counts = graphviz_plain(text)
    if counts is not None:
        assert counts == (len(nodes), len(edges))


def test_clusters_from_kernel_params_and_from_a_mapping():
    graph = recorded_tiny().program.graph
    # a fusion pass marks groups as a kernel parameter: clusters follow it with no other change
    marked = graph
    for nid in (5, 6):
        n = marked[nid]
        marked = marked.replace(replace(n, kernel=replace(n.kernel, params=(("group", "g0"),))))
    text = to_dot(marked)
    nodes, _, clusters = parse_dot(text)
    assert len(clusters) == 1 and sorted(nodes) == sorted(graph.nodes)
    block = text.split("subgraph cluster_0 {")[1].split("}")[0]
    assert re.findall(r"^\s*n(\d+) \[", block, re.M) == ["5", "6"] and 'label="g0"' in block
    by_map = to_dot(graph, clusters={2: "a", 7: "b", 8: "b"})
    _, _, clusters = parse_dot(by_map)
    assert len(clusters) == 2
    assert parse_dot(to_dot(marked, clusters=None))[2] == []
    counts = graphviz_plain(by_map)
    if counts is not None:
        assert counts[0] == len(graph)


def test_svg_draws_every_node_or_says_how_to_get_graphviz(monkeypatch):
    rec = recorded_tiny()
    text = program_dot(rec.program)
    if shutil.which("dot") is None:
        with pytest.raises(GraphvizMissing, match="apt-get install graphviz"):
            svg_of(text)
        return
    svg = svg_of(text)
    assert svg.count('class="node"') == len(rec.program.graph)
    titles = set(re.findall(r"<title>n(\d+)</title>", svg))
    assert titles == {str(n) for n in rec.program.graph.nodes}
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(GraphvizMissing, match="apt-get install graphviz"):
        svg_of(text)
