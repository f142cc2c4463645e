"""DOT and SVG pictures of recorded programs: ir.dot's drawing plus what the backend knows.

A scheduled graph's dispatch nodes gain a line with their workgroup size and count (and,
once profiled, their GPU time). SVG needs Graphviz's `dot`; without it `write_svg` says so
(ir.display.GRAPHVIZ_HELP) and the caller keeps the DOT text.
"""

from __future__ import annotations

from backend_wgpu.profile import Profile
from backend_wgpu.program import Program
from ir.display import GRAPHVIZ_HELP, render_svg
from ir.dot import ClusterKey, default_cluster, to_dot
from ir.graph import Graph


def dispatch_labels(program: Program, profile: Profile | None = None) -> dict[int, str]:
    """One extra label line per dispatched node: workgroup size x count, and GPU time if profiled."""
    times = {k.node: k.seconds for k in profile.kernels} if profile is not None else {}
    labels = {}
    for d in program.dispatches:
        wg = "x".join(map(str, d.workgroup_size))
        count = "x".join(map(str, d.workgroup_count))
        text = f"wg {wg} * {count}"
        if d.node in times:
            text += f"\n{times[d.node] * 1e6:.1f} us"
        labels[d.node] = text
    return labels


def graph_dot(graph: Graph, title: str = "", clusters: ClusterKey = default_cluster) -> str:
    """DOT text of any stage's graph."""
    return to_dot(graph, title=title, clusters=clusters)


def program_dot(
    program: Program, title: str = "", profile: Profile | None = None, clusters: ClusterKey = default_cluster
) -> str:
    """DOT text of a program's scheduled graph with its dispatch details."""
    return to_dot(program.graph, title=title, clusters=clusters, extra=dispatch_labels(program, profile))


# Graphviz takes minutes on graphs of many thousand nodes: past this, keep the DOT and say so
MAX_DRAWN_NODES = 2000


def too_big_to_draw(node_count: int) -> str:
    """'' when a graph of this size is drawn, else the message saying why it is not."""
    if node_count <= MAX_DRAWN_NODES:
        return ""
    return f"a graph of {node_count} nodes is not drawn (over {MAX_DRAWN_NODES}); render its DOT file with `dot -Tsvg`"


class GraphvizMissing(RuntimeError):
    """Graphviz's `dot` is not installed."""


def svg_of(dot_text: str) -> str:
    """The SVG for this DOT text; GraphvizMissing (with how to install it) when `dot` is absent."""
    svg = render_svg(dot_text)
    if svg is None:
        raise GraphvizMissing(GRAPHVIZ_HELP)
    return svg


def write_svg(dot_text: str, path: str) -> bool:
    """Write the SVG next to its DOT; False (nothing written) when Graphviz is missing."""
    svg = render_svg(dot_text)
    if svg is None:
        return False
    with open(path, "w") as f:
        f.write(svg)
    return True
