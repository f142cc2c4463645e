"""MiniLM's per-kernel profile with the attention rule's first tile replaced (run AB, call 5).

    python benchmarks/runs/2026-12-02-AB/minilm_tiles.py {rule|agur|agu}

`agur`: ATTENTION_TILES' second tile first (128x32, k and v sharing a buffer, no prefetch, q in
registers); `agu`: the same without q in registers (the rule of run Y); `rule`: unchanged.
"""

from __future__ import annotations

import sys

sys.path.insert(0, ".")

import passes.select_kernels as sk  # noqa: E402
from benchmarks.device import minilm_profile  # noqa: E402

which = sys.argv.pop(1)
tiles = sk.ATTENTION_TILES
if which == "agur":
    sk.ATTENTION_TILES = (tiles[1], *tiles[2:])
elif which == "agu":
    sk.ATTENTION_TILES = (tiles[1]._replace(qr=False), *tiles[2:])
print(f"attention tiles: {which}: first {sk.ATTENTION_TILES[0]}")
minilm_profile.main()
