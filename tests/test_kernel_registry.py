"""The kernel registry and the facts each kernel declares, as the passes see them (no GPU).

The passes and `explain` ask a kernel class what it allows (KernelElement widths, fused
prologues and epilogues, in-place operands, the reason it was chosen) instead of matching
kernel names; asking must never import wgpu or create a device.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# a graph with a matmul + elementwise epilogue, a reduction, a softmax, a norm and an
# index_write, built from ir nodes only (the tracer would create the device)
PIPELINE_WITHOUT_WGPU = """
import importlib.util, sys
from ir.caps import DeviceCaps
from ir.dtypes import DType
from ir.graph import Graph
from ir.node import Node
from ir.ops import InputArg, NormArg, Op
import backend_wgpu.kernels  # the registry the passes ask
from passes import run_pipeline

f32 = DType.float32
nodes = [
    Node(0, Op.INPUT, (), (4, 8), f32, InputArg(0)),
    Node(1, Op.INPUT, (), (8, 6), f32, InputArg(1)),
    Node(2, Op.MATMUL, (0, 1), (4, 6), f32),
    Node(3, Op.RELU, (2,), (4, 6), f32),
    Node(4, Op.SUM, (3,), (4,), f32, 1),
    Node(5, Op.SOFTMAX, (3,), (4, 6), f32),
    Node(6, Op.LAYER_NORM, (5,), (4, 6), f32, NormArg(1e-5, False, False)),
    Node(7, Op.INPUT, (), (2, 6), f32, InputArg(2, True)),
    Node(8, Op.INDEX_WRITE, (6, 7), (4, 6), f32, (1, 0)),
]
graph = run_pipeline(Graph({n.id: n for n in nodes}, (4, 8)), DeviceCaps()).graph
# tracer/inspect/why.py on its own: importing the tracer package would start the device
spec = importlib.util.spec_from_file_location("why", "tracer/inspect/why.py")
why = importlib.util.module_from_spec(spec)
spec.loader.exec_module(why)
reasons = [why.why(graph, n) for n in graph]
assert any(reasons), reasons
print(sorted(m for m in sys.modules if m == "wgpu" or m.startswith("wgpu.")))
"""


def test_passes_and_kernel_facts_never_import_wgpu() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(PIPELINE_WITHOUT_WGPU)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout
