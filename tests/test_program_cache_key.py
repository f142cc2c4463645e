"""The program cache's key (tracer.realize._Key): equal structures built anew hit, others miss, and a hit
moves its program to the end of the LRU order."""

from __future__ import annotations

import sys

import numpy as np

import tracer as tr
from tests.helpers import assert_close

realize_mod = sys.modules["tracer.realize"]  # the package exports a function of that name


def test_equal_structures_hit_and_move_to_the_end(rng: np.random.Generator) -> None:
    a = rng.standard_normal((6, 5), dtype=np.float32)

    def first(x: np.ndarray) -> tr.Tensor:
        return (tr.tensor(x) * 3.0).sum(axis=0)

    def second(x: np.ndarray) -> tr.Tensor:
        return (tr.tensor(x) - 1.0).max(axis=1)

    assert_close(first(a).numpy(), (a * 3).sum(axis=0))
    assert_close(second(a).numpy(), (a - 1).max(axis=1))
    compiled = realize_mod.stats["programs_compiled"]
    hits = realize_mod.stats["program_cache_hits"]
    b = a + 2
    assert_close(first(b).numpy(), (b * 3).sum(axis=0))  # a new structure tuple, equal to the first's
    assert realize_mod.stats["programs_compiled"] == compiled
    assert realize_mod.stats["program_cache_hits"] == hits + 1
    last = realize_mod.cached_programs()[-1]
    assert last._cache_key is not None and last.dispatches  # the program just run is the most recent
    assert_close(second(b).numpy(), (b - 1).max(axis=1))
    assert realize_mod.cached_programs()[-1] is not last
    assert_close(tr.tensor(a).T.sum(axis=0).numpy(), a.T.sum(axis=0))  # another structure: compiled
    assert realize_mod.stats["programs_compiled"] == compiled + 1


def test_key_equality() -> None:
    key = realize_mod._Key
    s = ((("input", 0, True, (2, 3), "float32"),), (0,))
    t = ((("input", 0, True, (2, 3), "float32"),), (0,))
    assert key((s, True, "")) == key((t, True, "")) and hash(key((s, True, ""))) == hash(key((t, True, "")))
    assert key((s, True, "")) != key((s, False, ""))
    assert key((s, True, "")) != (s, True, "")
