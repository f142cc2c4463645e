"""Movement ops and indexing: zero-copy views, composed by passes.fold_views."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracer as tr
from ir.view import View
from tests.helpers import assert_close

X = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)

MOVES = {
    "reshape": (lambda t: t.reshape(4, -1), lambda x: x.reshape(4, -1)),
    "reshape_tuple": (lambda t: t.reshape((3, 8)), lambda x: x.reshape(3, 8)),
    "permute": (lambda t: t.permute(2, 0, 1), lambda x: x.transpose(2, 0, 1)),
    "transpose": (lambda t: t.transpose(0, 2), lambda x: x.swapaxes(0, 2)),
    "T": (lambda t: t.T, lambda x: x.T),
    "expand": (lambda t: t[:, :1].expand(2, 5, 4), lambda x: np.broadcast_to(x[:, :1], (2, 5, 4))),
    "broadcast_to": (lambda t: t.broadcast_to((3, 2, 3, 4)), lambda x: np.broadcast_to(x, (3, 2, 3, 4))),
    "squeeze": (lambda t: t[:, :1].squeeze(1), lambda x: x[:, :1].squeeze(1)),
    "squeeze_all": (lambda t: t[:1, :, :1].squeeze(), lambda x: x[:1, :, :1].squeeze()),
    "unsqueeze": (lambda t: t.unsqueeze(-1), lambda x: x[..., None]),
    "flatten": (lambda t: t.flatten(), lambda x: x.flatten()),
    "flatten_range": (lambda t: t.flatten(1), lambda x: x.reshape(2, 12)),
    "permute_then_reshape": (lambda t: t.permute(1, 0, 2).reshape(6, 4), lambda x: x.transpose(1, 0, 2).reshape(6, 4)),
    "slice_then_reshape": (lambda t: t[:, 1:, ::2].reshape(-1), lambda x: x[:, 1:, ::2].reshape(-1)),
    "concat0": (lambda t: tr.concat([t, t * 2], axis=0), lambda x: np.concatenate([x, x * 2], 0)),
    "concat_neg": (lambda t: tr.concat([t, t[:, :, :1]], axis=-1), lambda x: np.concatenate([x, x[:, :, :1]], -1)),
    "concat_many": (
        lambda t: tr.concat([t + i for i in range(9)], axis=1),
        lambda x: np.concatenate([x + i for i in range(9)], 1),
    ),
    "stack": (lambda t: tr.stack([t, -t], axis=1), lambda x: np.stack([x, -x], 1)),
}


@pytest.mark.parametrize("name", list(MOVES))
def test_movement(name: str) -> None:
    fn, ref = MOVES[name]
    got = fn(tr.tensor(X)).numpy()
    assert_close(got, ref(X))


INDEXES = [
    1,
    -1,
    (0, 2),
    (slice(None), 1),
    (Ellipsis, 2),
    (None, 0),
    (slice(None, None, -1),),
    (slice(1, None), slice(None, None, 2), slice(None, None, -3)),
    (0, None, slice(1, 3), None),
    (Ellipsis, None),
    (slice(5, 9),),
    (-2, Ellipsis, -1),
]


@pytest.mark.parametrize("index", INDEXES, ids=str)
def test_indexing(index) -> None:
    got = tr.tensor(X)[index]
    assert_close(got.numpy(), X[index])


def test_index_errors() -> None:
    t = tr.tensor(X)
    with pytest.raises(tr.IndexOutOfRangeError, match="out of range for axis 1 with size 3"):
        t[0, 3]
    with pytest.raises(IndexError):
        t[5]
    with pytest.raises(tr.DTypeError, match="not a valid index"):
        t[1.5]
    with pytest.raises(tr.IndexOutOfRangeError, match="too many indices"):
        t[0, 0, 0, 0]


def test_views_compose_without_copies() -> None:
    t = tr.tensor(X)
    y = t.permute(2, 1, 0)[1:, ::-1].unsqueeze(0) + 1
    program = tr.compile(y)
    assert [d.kernel for d in program.dispatches] == ["elementwise"]
    assert_close(y.numpy(), X.transpose(2, 1, 0)[1:, ::-1][None] + 1)


def test_reshape_of_noncontiguous_view_copies_once(monkeypatch: pytest.MonkeyPatch) -> None:
    t = tr.tensor(X)
    y = t.permute(1, 0, 2).reshape(3, 8) * 2  # not expressible by strides
    (fused,) = tr.compile(y).dispatches  # the copy and the multiply run as one kernel
    assert (fused.op, fused.kernel) == ("fused", "elementwise") and len(fused.group) == 3  # copy, reshape, mul
    monkeypatch.setenv("WGJIT_FUSION", "0")
    kinds = [(d.op, d.kernel) for d in tr.compile(y).dispatches]
    assert kinds == [("copy", "elementwise"), ("mul", "elementwise")]
    assert_close(y.numpy(), X.transpose(1, 0, 2).reshape(3, 8) * 2)


def test_shape_errors_name_the_op_and_shapes() -> None:
    t = tr.tensor(X)
    with pytest.raises(tr.ShapeError, match=r"reshape: cannot reshape \(2, 3, 4\) \(24 elements\) to \(5, 5\)"):
        t.reshape(5, 5)
    with pytest.raises(tr.ShapeError, match="not a permutation"):
        t.permute(0, 0, 1)
    with pytest.raises(tr.ShapeError, match="cannot expand"):
        t.expand(2, 4, 4)
    with pytest.raises(tr.ShapeError, match="differ outside axis"):
        tr.concat([t, tr.ones((2, 4, 4))], axis=2)
    with pytest.raises(tr.ShapeError, match="axis 3 is out of range"):
        t.sum(axis=3)
    with pytest.raises(tr.ShapeError, match="do not broadcast"):
        t + tr.ones((3, 3))
    with pytest.raises(tr.ShapeError, match="squeeze: axis 1"):
        t.squeeze(1)


@st.composite
def reshape_case(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=4)))
    perm = tuple(draw(st.permutations(range(len(shape)))))
    permuted = tuple(shape[i] for i in perm)
    size = int(np.prod(shape))
    divisors = [d for d in range(1, size + 1) if size % d == 0]
    a = draw(st.sampled_from(divisors))
    new = (a, size // a) if draw(st.booleans()) else (size,)
    return shape, perm, permuted, new


@settings(max_examples=200, deadline=None)
@given(reshape_case())
def test_view_reshape_matches_numpy(case) -> None:
    """View.reshape either gives numpy's elements or declines (then the pass copies)."""
    shape, perm, permuted, new = case
    base = np.arange(int(np.prod(shape)))
    view = View.contiguous(shape).permute(perm)
    want = base.reshape(shape).transpose(perm).reshape(new)
    got = view.reshape(new)
    if got is not None:
        flat = np.lib.stride_tricks.as_strided(base, shape=got.shape, strides=[s * base.itemsize for s in got.strides])
        np.testing.assert_array_equal(flat, want)
    else:
        assert not view.is_contiguous
