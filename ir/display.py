"""Pictures and tables of a graph for notebooks: SVG through Graphviz when installed, HTML tables.

Only the standard library: Graphviz's `dot` program is run when it is on PATH; without it
callers fall back to text and say how to install it (GRAPHVIZ_HELP).
"""

from __future__ import annotations

import html
import shutil
import subprocess
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ir.graph import Graph

GRAPHVIZ_HELP = (
    "Graphviz's `dot` is not installed, so there is no SVG picture (the DOT text is still written); "
    "install it with `sudo apt-get install graphviz` (Debian/Ubuntu) or `brew install graphviz` (macOS)"
)


def dot_available() -> bool:
    return shutil.which("dot") is not None


def render_svg(dot_text: str, timeout: float = 60.0) -> str | None:
    """The SVG that Graphviz draws for this DOT text, or None when `dot` is not installed."""
    exe = shutil.which("dot")
    if exe is None:
        return None
    done = subprocess.run([exe, "-Tsvg"], input=dot_text.encode(), capture_output=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"graphviz dot failed ({done.returncode}): {done.stderr.decode(errors='replace')[:500]}")
    return done.stdout.decode()


def inline_svg(svg: str) -> str:
    """SVG ready to sit inside an HTML page: without the XML prolog and DOCTYPE."""
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else svg


def html_table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], table_id: str = "", css_class: str = "wgjit"
) -> str:
    """A plain HTML table; every cell is escaped text."""
    tid = f' id="{html.escape(table_id)}"' if table_id else ""
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{css_class}"{tid}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


NODE_HEADERS = ("id", "op", "inputs", "shape", "dtype", "kernel", "width", "in-place", "slot")


def node_rows(graph: Graph) -> list[tuple[Any, ...]]:
    """One row per node: what NODE_HEADERS names ("" where the passes have not annotated yet)."""
    rows = []
    for n in graph:
        kernel = f"{n.kernel.name}[{n.kernel.variant}]" if n.kernel else ""
        width = n.kernel.element if n.kernel else ""
        inplace = f"%{n.srcs[n.inplace]}" if n.inplace is not None else ""
        slot = "" if n.slot is None else n.slot
        srcs = " ".join(f"%{s}" for s in n.srcs)
        shape = "x".join(map(str, n.shape)) or "scalar"
        rows.append((n.id, n.op.value, srcs, shape, n.dtype.value, kernel, width, inplace, slot))
    return rows


def graph_html(graph: Graph, title: str = "") -> str:
    """A picture of the graph (text when Graphviz is missing) above its node table."""
    from ir.dot import to_dot
    from ir.printer import format_graph

    svg = render_svg(to_dot(graph, title=title))
    if svg is None:
        picture = f"<pre>{html.escape(format_graph(graph))}</pre><p><small>{html.escape(GRAPHVIZ_HELP)}</small></p>"
    else:
        picture = inline_svg(svg)
    return f"<div>{picture}{html_table(NODE_HEADERS, node_rows(graph))}</div>"
