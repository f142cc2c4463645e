"""backend_wgpu.runtime_fields computes every runtime field at once (numpy columns, each integer's range
worked out once): the uniform's words and the out-of-range errors are the per-field Sym.check's."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import tracer as tr
from backend_wgpu.runtime_fields import RuntimeFields
from ir.errors import IndexOutOfRangeError
from ir.symbolic import Sym
from tests.helpers import assert_close

realize_mod = sys.modules["tracer.realize"]  # the package exports a function of that name


def _reference(fields: RuntimeFields, ints: tuple[int, ...]) -> np.ndarray:
    words = fields._base.copy()
    for offset, _, sym in fields.fields:
        words[(offset - fields.byte_offset) // 4] = sym.check(ints) & 0xFFFFFFFF
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
    fields = program._fields
    assert fields is not None and fields._vectorized
    _check_against_reference(fields, tuple(program.ints), range(-2, 19))


def _check_against_reference(fields: RuntimeFields, ints: tuple[int, ...], values: range) -> None:
    """For each value of the first integer (in range and past either end): the same words or the same error."""
    for value in values:
        at = (value, *ints[1:])
        fields._last = None
        try:
            want_words = _reference(fields, at)
        except IndexOutOfRangeError as e:
            with pytest.raises(IndexOutOfRangeError, match=str(e).split(":")[0]):
                fields.words(at)
            continue
        assert np.array_equal(fields.words(at), want_words), value
    for far in (1 << 40, -5, -(1 << 40)):  # far outside: the per-field path says which field
        fields._last = None
        with pytest.raises(IndexOutOfRangeError):
            fields.words((far, *ints[1:]))


def test_fields_of_every_sign_and_two_integers() -> None:
    """Negative scales, i32 fields holding negative values (two's complement), two integers, and a
    field whose constant lies outside its range whatever the integer."""
    uniform = np.arange(40, dtype=np.uint32).tobytes()
    fields = [
        (8, "u32", Sym(0, 3, 1, 1, 40)),  # 3p + 1 in 1..40: p in 0..13
        (16, "i32", Sym(0, -2, 5, -30, 5)),  # 5 - 2p in -30..5: p in 0..17
        (20, "i32", Sym(1, 1, -7, -7, 100)),  # q - 7
        (60, "u32", Sym(1, 4, 0, 0, 64)),  # 4q in 0..64: q in 0..16
        (64, "u32", Sym(0, 1, 0, 0, 12)),  # p in 0..12
    ]
    got = RuntimeFields(uniform, fields)
    assert got.count == 2 and got.byte_offset == 8
    assert got._ranges == [(0, 12), (0, 16)]
    for q in (0, 5, 16, 17, -1):
        _check_against_reference(got, (0, q), range(-3, 16))
    words = got.words((2, 3))
    assert words.dtype == np.uint32 and len(words) == (64 - 8) // 4 + 1
    assert int(words[(16 - 8) // 4]) == 1 and int(words[(20 - 8) // 4]) == (3 - 7) & 0xFFFFFFFF
    assert int(words[1]) == 3  # a word no field covers keeps the uniform's value
    with pytest.raises(ValueError, match="reads 2 runtime integers"):
        got.words((1,))
