"""Program._runtime_words computes every runtime field at once (numpy columns): the uniform's words and
the out-of-range errors are the per-field Sym.check's."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import tracer as tr
from ir.errors import IndexOutOfRangeError
from tests.helpers import assert_close

realize_mod = sys.modules["tracer.realize"]  # the package exports a function of that name


def _reference(program, ints: tuple[int, ...]) -> np.ndarray:  # noqa: ANN001
    words = program._uniform_words.copy()
    for offset, _, sym in program._runtime:
        words[offset // 4] = sym.check(ints) & 0xFFFFFFFF
    return words


def test_runtime_words_match_the_per_field_checks() -> None:
    cache = tr.zeros((1, 16, 4))
    cache.realize()
    for pos in (3, 9):
        cache.index_write(tr.ones((1, 1, 4)) * float(pos), (0, tr.dynamic(pos), 0))
        view = cache[:, : tr.dynamic(pos) + 1].padded
        out = (view * 2.0).sum(axis=2)
        got = out.numpy()
    want = np.zeros((1, 16), np.float32)
    want[0, 3], want[0, 9] = 3.0 * 4 * 2, 9.0 * 4 * 2
    assert_close(got[:, :10], want[:, :10])
    program = next(p for p in reversed(realize_mod.cached_programs()) if p._runtime)
    assert program._runtime_table is not None
    lo = min(s.lo for _, _, s in program._runtime)
    for value in range(-2, 19):  # in range, and past either end
        ints = (value,) + tuple(program.ints[1:])
        try:
            want_words = _reference(program, ints)
        except IndexOutOfRangeError as e:
            program._last_words = None
            with pytest.raises(IndexOutOfRangeError, match=str(e).split(":")[0]):
                program._runtime_words(ints)
            continue
        program._last_words = None
        assert np.array_equal(program._runtime_words(ints), want_words), value
    assert lo >= -(1 << 31)
    with pytest.raises(IndexOutOfRangeError):  # far outside: the per-field path says which field
        program._last_words = None
        program._runtime_words((1 << 40,) + tuple(program.ints[1:]))
    with pytest.raises(IndexOutOfRangeError):
        program._last_words = None
        program._runtime_words((-5,) + tuple(program.ints[1:]))
