"""examples/numpy_tour.ipynb runs top to bottom (nbclient): every cell checks its answers against
numpy with asserts, so a cell that raises is a wrong answer or a missing feature."""

from __future__ import annotations

import os

import pytest

nbformat = pytest.importorskip("nbformat", reason="needs the notebook extra: pip install -e '.[notebook]'")
nbclient = pytest.importorskip("nbclient", reason="needs the notebook extra: pip install -e '.[notebook]'")
pytest.importorskip("ipykernel", reason="needs the notebook extra: pip install -e '.[notebook]'")
pytest.importorskip("sklearn", reason="the tour's last part runs scikit-learn: pip install -e '.[sklearn]'")

pytestmark = pytest.mark.gpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_numpy_tour_runs_and_agrees_with_numpy() -> None:
    nb = nbformat.read(os.path.join(ROOT, "examples", "numpy_tour.ipynb"), as_version=4)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": ROOT}})
    client.execute()  # raises CellExecutionError, naming the cell, at the first failing assert
    code = [c for c in nb.cells if c.cell_type == "code"]
    text = {c.source.splitlines()[0]: "".join(o.get("text", "") for o in c.outputs) for c in code}
    shown = {c.source.splitlines()[0]: [o.get("data", {}).get("text/plain", "") for o in c.outputs] for c in code}
    assert shown["import numpy as np"] == ["Tensor(shape=(5,), dtype=float32, lazy sum)"]
    assert text["stats = {"].count("matches numpy") == 8
    assert text["e = np.exp(x)  # np.exp(tensor) is a lazy tensor"].startswith("Tensor Tensor (7, 8)")
    assert text["import os"].startswith("Tensor (5, 8) Tensor (5, 5)")  # scikit-learn returned wgjit tensors
    assert "bitonic_sort" in text["print(tr.compile(tr.sort((x - x.mean(axis=0)) / x.std(axis=0), axis=0)).summary())"]
