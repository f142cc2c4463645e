"""examples/inspect.ipynb runs top to bottom (nbclient) and shows the graph, the program, the tables and the profile."""

from __future__ import annotations

import os
import shutil

import pytest

# tiny() shows an in-place chain and buffer reuse: fusion would fold them into one kernel
pytestmark = pytest.mark.usefixtures("no_fusion")

nbformat = pytest.importorskip("nbformat", reason="needs the notebook extra: pip install -e '.[notebook]'")
nbclient = pytest.importorskip("nbclient", reason="needs the notebook extra: pip install -e '.[notebook]'")
pytest.importorskip("ipykernel", reason="needs the notebook extra: pip install -e '.[notebook]'")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _outputs(cell) -> tuple[str, dict]:
    text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
    data: dict = {}
    for o in cell.outputs:
        data.update(o.get("data", {}))
    return text, data


def test_notebook_runs_and_shows_everything():
    nb = nbformat.read(os.path.join(ROOT, "examples", "inspect.ipynb"), as_version=4)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": ROOT}})
    client.execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    for c in code:
        assert not any(o.output_type == "error" for o in c.outputs), c.source
    by_source = {c.source.splitlines()[0]: _outputs(c) for c in code}

    _, lazy = by_source["x = tr.randn(16, 32, seed=0)"]
    assert lazy["text/plain"] == "Tensor(shape=(16, 8), dtype=float32, lazy softmax)"
    printed, _ = by_source["g = y.graph()"]
    assert "= matmul(%0, %1) : float32[16x8]" in printed and "= softmax(" in printed
    _, shown = by_source["g"]
    assert "<table" in shown["text/html"] and "<td>matmul</td>" in shown["text/html"]
    if shutil.which("dot"):
        assert "<svg" in shown["text/html"] and shown["image/svg+xml"].startswith("<svg")
    else:
        assert "apt-get install graphviz" in shown["text/html"]
    traced, _ = by_source["def layer(x, w):"]
    assert traced.splitlines()[-2:] == ["%3 = gelu(%2) : float32[4x3]", "return %3"]
    _, program = by_source["program = tr.compile(y)"]
    assert program["text/plain"].startswith("<Program 4 dispatches")
    assert "gemm" in program["text/html"] and "softmax" in program["text/html"]
    _, explained = by_source["tr.explain(y)"]
    assert "elementwise[" in explained["text/plain"] and "<table>" in explained["text/html"]
    profile, _ = by_source["prof = program.profile()"]
    assert "GB/s" in profile and "GFLOP/s" in profile and ("gpu-timestamps" in profile or "wall-clock" in profile)
    _, explained = by_source["tr.explain(y, profile=True)"]
    assert "GPU time" in explained["text/plain"] and "share" in explained["text/plain"]
    checked, _ = by_source["h = np.maximum(x.numpy() @ w.numpy() + b.numpy(), 0)"]
    assert checked.startswith("max |wgjit - numpy| = ")
