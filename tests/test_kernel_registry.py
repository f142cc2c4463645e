"""The kernel registry and the facts each kernel declares, as the passes see them (no GPU).

The passes and `explain` ask a kernel class what it allows (KernelElement widths, fused
prologues and epilogues, in-place operands, the reason it was chosen) instead of matching
kernel names; asking must never import wgpu or create a device.
"""

from __future__ import annotations

import ast
import importlib
import os
import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import backend_wgpu.kernels as kernels_package
import tracer as tr
from backend_wgpu.kernel import Kernel
from backend_wgpu.kernels import KERNELS, ElementwiseKernel, ReduceKernel, kernel_class
from ir.caps import DeviceCaps
from ir.graph import Graph
from ir.ops import Op
from passes import run_pipeline

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


def _kernel_classes() -> set[type[Kernel]]:
    """Every Kernel subclass with a name defined anywhere under backend_wgpu.kernels."""
    for info in pkgutil.walk_packages(kernels_package.__path__, kernels_package.__name__ + "."):
        importlib.import_module(info.name)
    found: set[type[Kernel]] = set()
    todo = [Kernel]
    while todo:
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            if sub.name and sub.__module__.startswith(kernels_package.__name__ + "."):  # not a test's own kernel
                found.add(sub)
    return found


def test_every_named_kernel_is_registered_once() -> None:
    classes = _kernel_classes()
    assert len({k.name for k in classes}) == len(classes), "two kernel classes share a name"
    assert set(KERNELS.values()) == classes
    for name, cls in KERNELS.items():
        assert cls.name == name and kernel_class(name) is cls


def test_an_unknown_kernel_name_is_a_clear_error() -> None:
    with pytest.raises(KeyError, match="no kernel named 'gemm_magic'; registered: .*elementwise"):
        kernel_class("gemm_magic")


def test_passes_and_inspection_never_spell_a_kernel_name() -> None:
    """They ask kernel classes (select_kernels names them by `TheKernel.name`), never match name strings."""
    sources = [*ROOT.glob("passes/*.py"), *ROOT.glob("tracer/inspect/*.py")]
    named = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}"
        for path in sources
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and node.value in KERNELS
    ]
    assert len(sources) > 10 and named == []


# --- the passes ask the kernel: change a fact and the pass follows -------------------------
def _pipeline(y: tr.Tensor) -> Graph:
    return run_pipeline(y.graph(), DeviceCaps()).graph


def _computing(graph: Graph) -> list:
    return [n for n in graph if n.kernel is not None]


def test_fuse_asks_whether_the_core_takes_a_prologue(monkeypatch) -> None:
    x = tr.tensor(np.ones((8, 3), np.float32))  # rows of 3: the general reduce kernel
    y = (x * 2).sum(axis=-1)
    (fused,) = _computing(_pipeline(y))
    assert fused.op is Op.FUSED and fused.kernel.name == ReduceKernel.name
    monkeypatch.setattr(ReduceKernel, "takes_prologue", False)
    assert [n.op for n in _computing(_pipeline(y))] == [Op.MUL, Op.SUM]


def test_inplace_asks_which_operands_the_kernel_may_overwrite(monkeypatch) -> None:
    x = tr.tensor(np.ones(16, np.float32))
    y = (x.exp() + 1).exp()  # unfused: the later kernels may overwrite the temporaries
    monkeypatch.setenv("WGJIT_FUSION", "0")
    assert any(n.inplace is not None for n in _pipeline(y))
    monkeypatch.setattr(ElementwiseKernel, "inplace_operands", classmethod(lambda cls, node: ()))
    assert all(n.inplace is None for n in _pipeline(y))


def test_vectorize_asks_the_kernel_for_its_widest_element(monkeypatch) -> None:
    y = tr.tensor(np.ones((4, 8), np.float32)).exp()
    assert [n.kernel.element for n in _computing(_pipeline(y))] == [4]
    monkeypatch.setattr(ElementwiseKernel, "widest_element", classmethod(lambda cls, node, views: 2))
    assert [n.kernel.element for n in _computing(_pipeline(y))] == [2]
