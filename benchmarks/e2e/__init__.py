"""`wgjit bench --suite e2e`: whole programs timed as users run them, wall time per call with read-back.

MiniLM (examples/minilm.py) at 32x128 tokens (throughput) and 1x16 (latency) and encode()
of 1,000 sentences; a Llama-style decoder (examples/llama.py, random seeded weights) at two
sizes, its 128-token prefill (and a 512-token one for the ~1B size) and then per-token decoding. wgjit runs each as a `@tr.jit`
program (`jit`, the headline) and as plain lazy code (`lazy`); torch runs them eagerly and,
for decoding, as a CUDA graph. Contenders take turns in blocks after a warm-up that lasts
until their times settle (blocks.py), so all see the same GPU clocks. Beside each wall
time: the GPU time of one pass (wgjit: timestamps around its compute pass; torch: CUDA
events) and, for wgjit, the host time per dispatch that the difference implies.

`--sizes small` is a smoke configuration (a tiny random BERT with the real tokenizer, a
2-layer decoder, a few tokens) that runs on lavapipe; `--sizes full` is the H200 run.
WGJIT_E2E_PARTS=minilm,12L,1B (any subset) runs only those parts: benchmarks/run_e2e_h200.sh
runs each in its own process and merges them with `python -m benchmarks.e2e.table`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from benchmarks.e2e.blocks import Schedule

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # `examples` is importable from a checkout


def plan(full: bool) -> dict[str, Any]:
    """What to run and how long to warm up and time it, for --sizes full (H200) and small (smoke)."""
    if not full:
        quick = Schedule(min_warm=1, max_warm=2, timed=2, tol=1.0, budget_s=60)
        return {
            "minilm": {"tiny": True, "shapes": [(2, 8), (1, 4)], "sentences": 6,
                       "forward": {"block": 2, "schedule": quick}, "encode": {"schedule": quick}},
            "decoders": ["tiny"], "prompt": 6, "check_tokens": 3,
            "decoder": {"prefill_block": 1, "jit_block": 2, "lazy_block": 1, "long_prefill": {"tiny": 12},
                        "prefill": quick, "decode": quick},
        }  # fmt: skip
    return {
        "minilm": {"tiny": False, "shapes": [(32, 128), (1, 16)], "sentences": 1000,
                   "forward": {"block": 10, "schedule": Schedule(budget_s=25)},
                   "encode": {"schedule": Schedule(min_warm=2, max_warm=4, timed=3, budget_s=75)}},
        "decoders": ["12L", "1B"], "prompt": 128, "check_tokens": 8,
        "decoder": {"prefill_block": 3, "jit_block": 16, "lazy_block": 4, "long_prefill": {"1B": 512},
                    "prefill": Schedule(budget_s=20), "decode": Schedule(max_warm=6, timed=5, budget_s=50)},
    }  # fmt: skip


def e2e_suite(ctx: Any, sizes: dict[str, Any]) -> list[dict[str, Any]]:
    from benchmarks.e2e.decoder import decoder_cases
    from benchmarks.e2e.minilm import minilm_cases

    p = plan(sizes["full"])
    parts = os.environ.get("WGJIT_E2E_PARTS", "")
    wanted = {x.strip() for x in parts.split(",") if x.strip()} or {"minilm", *p["decoders"]}
    records = minilm_cases(ctx, p["minilm"]) if "minilm" in wanted else []
    for name in p["decoders"]:
        if name in wanted:
            records.extend(decoder_cases(ctx, name, p["prompt"], p["check_tokens"], p["decoder"]))
    return records
