"""Long generation in one process (issue 12, long use): memory flat, no compile after the warm-up,
the same ids when a seed is replayed.

Runs tests/long_generate_run.py's loop on a tiny random Llama: generations of seeded sampling
(temperature, top-k, top-p) from same-length prompts, through the `@tr.jit` decode step. The
full 10,000-token run is `python tests/long_generate_run.py 10000`; WGJIT_LONG_TOKENS=N sets the
count here (default 192, a CI-sized run).
"""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.gpu

pytest.importorskip("safetensors", reason="the run writes a safetensors checkpoint")


def test_long_generation_plateaus_and_replays() -> None:
    from tests.long_generate_run import run

    tokens = int(os.environ.get("WGJIT_LONG_TOKENS", "192"))
    out = run(tokens, per_generation=64, log=lambda _m: None)
    assert out["tokens"] == tokens and all(len(ids) == 64 for ids in out["ids"][:-1])
    first, last = out["snapshots"][0], out["snapshots"][-1]
    assert last["compiled"] == first["compiled"], "a program was compiled after the warm-up"
    assert last["programs"] == first["programs"] and last["pipelines"] == first["pipelines"]
    # each generation allocates its cache and outputs afresh; what is held must not grow with use
    assert last["buffers"] <= first["buffers"] + 8, (first, last)
    assert last["bind_groups"] <= first["bind_groups"] + 8, (first, last)
    assert last["buffer_KiB"] <= first["buffer_KiB"] + 256, (first, last)
    assert last["rss_MiB"] <= first["rss_MiB"] + 64, (first, last)
    assert out["replay_same"], "a replayed seed gave other ids"
    assert len({tuple(ids) for ids in out["ids"]}) == len(out["ids"]), "different seeds gave the same ids"
