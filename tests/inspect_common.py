"""A tiny program that shows every annotation the inspection tool draws, and a DOT reader."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np

import tracer as tr

XN = np.linspace(-1, 1, 24, dtype=np.float32).reshape(4, 6)
WN = np.linspace(0, 1, 18, dtype=np.float32).reshape(6, 3)


def tiny() -> tr.Tensor:
    """matmul, a broadcast view, an in-place chain (add, relu), buffer reuse (two softmaxes), a reduction."""
    x = tr.tensor(XN)
    w = tr.tensor(WN)
    h = ((x @ w) + 1.0).relu()
    return h.softmax(axis=-1).softmax(axis=-1).sum(axis=-1)


def tiny_reference() -> np.ndarray:
    h = np.maximum(XN @ WN + 1.0, 0)
    for _ in range(2):
        h = np.exp(h - h.max(-1, keepdims=True))
        h = h / h.sum(-1, keepdims=True)
    return h.sum(-1)


def recorded_tiny():  # noqa: ANN201
    """The RecordedProgram of tiny(), compiled (not run) under a recorder."""
    y = tiny()
    with tr.record() as rec:
        tr.compile(y)
    assert len(rec.programs) == 1
    return rec.programs[0]


NODE_RE = re.compile(r"^\s*n(\d+) \[label=\"((?:[^\"\\]|\\.)*)\"(.*)\];$")
EDGE_RE = re.compile(r"^\s*n(\d+) -> n(\d+)(?: \[(.*)\])?;$")


def parse_dot(text: str) -> tuple[dict[int, str], list[tuple[int, int, str]], list[str]]:
    """(node id -> label, edges (src, dst, attrs), cluster labels) of the DOT wgjit writes."""
    nodes: dict[int, str] = {}
    edges: list[tuple[int, int, str]] = []
    clusters: list[str] = []
    lines = text.splitlines()
    assert lines[0].startswith("digraph") and lines[-1] == "}", "not a complete digraph"
    for line in lines:
        if m := NODE_RE.match(line):
            nodes[int(m.group(1))] = m.group(2).replace("\\n", "\n")
        elif m := EDGE_RE.match(line):
            edges.append((int(m.group(1)), int(m.group(2)), m.group(3) or ""))
        elif "subgraph cluster_" in line:
            clusters.append(line)
    return nodes, edges, clusters


def graphviz_plain(text: str) -> tuple[int, int] | None:
    """(nodes, edges) as Graphviz itself reads the DOT, or None without Graphviz."""
    exe = shutil.which("dot")
    if exe is None:
        return None
    out = subprocess.run([exe, "-Tplain"], input=text.encode(), capture_output=True, check=True).stdout.decode()
    rows = [line.split()[0] for line in out.splitlines() if line]
    return rows.count("node"), rows.count("edge")
