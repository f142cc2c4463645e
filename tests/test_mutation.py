"""Mutation as numpy does it: in-place operators, item assignment, views, copies (tracer/mutation.py).

Every test runs the same statements on a numpy array and on a Tensor and compares the values.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracer as tr

pytestmark = pytest.mark.gpu


def pair(shape=(3, 4), dtype=np.float32):
    a = np.arange(np.prod(shape), dtype=dtype).reshape(shape)
    return a, tr.tensor(a)


def same(t: tr.Tensor, a: np.ndarray) -> None:
    got = t.numpy()
    assert got.shape == a.shape
    assert got.dtype == a.dtype, (got.dtype, a.dtype)
    np.testing.assert_array_equal(got, a)


# --- in-place operators -----------------------------------------------------------------

IOPS = [
    ("+=", lambda x, y: x.__iadd__(y)),
    ("-=", lambda x, y: x.__isub__(y)),
    ("*=", lambda x, y: x.__imul__(y)),
    ("/=", lambda x, y: x.__itruediv__(y)),
    ("//=", lambda x, y: x.__ifloordiv__(y)),
    ("%=", lambda x, y: x.__imod__(y)),
    ("**=", lambda x, y: x.__ipow__(y)),
]


@pytest.mark.parametrize("name,op", IOPS, ids=[n for n, _ in IOPS])
def test_inplace_operator_updates_every_name(name: str, op) -> None:
    a, x = pair()
    a += 1
    x += 1
    alias = x
    b = np.full((3, 4), 2.0, np.float32)
    op(a, b)
    out = op(x, tr.tensor(b))
    assert out is x and alias is x
    np.testing.assert_allclose(alias.numpy(), a, rtol=1e-6)


def test_inplace_integer_and_bool_operators() -> None:
    a, x = pair(dtype=np.int32)
    for name, y in (("iadd", 3), ("imul", -2), ("ifloordiv", 3), ("imod", 5), ("isub", 7), ("ipow", 2)):
        getattr(a, f"__{name}__")(y)
        assert getattr(x, f"__{name}__")(y) is x
    same(x, a)
    m = np.array([True, False, True])
    mb = tr.tensor(m)
    keep = mb
    mb &= tr.tensor([True, True, False])
    m &= np.array([True, True, False])
    same(keep, m)
    mb |= np.array([False, True, False])
    m |= np.array([False, True, False])
    same(keep, m)
    mb ^= np.array([True, True, True])
    m ^= np.array([True, True, True])
    same(keep, m)


def test_inplace_matmul() -> None:
    a = np.eye(3, dtype=np.float32) * 2
    w = np.arange(9, dtype=np.float32).reshape(3, 3)
    x = tr.tensor(a)
    alias = x
    x @= w
    a @= w
    np.testing.assert_allclose(alias.numpy(), a)


def test_inplace_keeps_earlier_values() -> None:
    a, x = pair()
    before = x * 2  # pending, computed from the old value
    snapshot = x.copy()
    x += 10
    np.testing.assert_array_equal(before.numpy(), a * 2)
    np.testing.assert_array_equal(snapshot.numpy(), a)
    np.testing.assert_array_equal(x.numpy(), a + 10)


@pytest.mark.parametrize(
    "dtype,stmt",
    [
        (np.int32, "x += 1.5"),
        (np.int32, "x /= 2"),
        (np.int32, "x *= np.float32(2)"),
        (np.bool_, "x += 1"),
        (np.float16, "x += tr.tensor(np.ones(4, np.int32))"),
    ],
)
def test_inplace_casting_is_same_kind_as_numpy(dtype, stmt: str) -> None:
    """What numpy refuses (casting='same_kind') is refused with a DTypeError, a TypeError as numpy's."""
    a = np.ones(4, dtype)
    x = tr.tensor(a)
    np_stmt = stmt.replace("tr.tensor(np.ones(4, np.int32))", "np.ones(4, np.int32)").replace("x ", "a ", 1)
    if dtype is np.float16:  # numpy refuses nothing here: float16 += int32 casts back (same kind)
        exec(np_stmt)
        exec(stmt)
        same(x, a)
        return
    with pytest.raises(TypeError):
        exec(np_stmt)
    with pytest.raises(tr.DTypeError, match="same_kind"):
        exec(stmt)
    same(x, np.ones(4, dtype))  # unchanged


@pytest.mark.f16  # uses float16 among other dtypes
def test_inplace_downcast_within_kind() -> None:
    a = np.ones(4, np.float16)
    x = tr.tensor(a)
    x += tr.tensor(np.full(4, 0.5, np.float32))
    a += np.full(4, 0.5, np.float32)
    same(x, a)


def test_inplace_shape_cannot_grow() -> None:
    x = tr.ones(3)
    with pytest.raises(tr.ShapeError, match=r"\+=.*\(2, 3\).*\(3,\)"):
        x += tr.ones((2, 3))


# --- item assignment ----------------------------------------------------------------------

SETITEMS = [
    (1, 5.0),
    (-1, 5.0),
    (np.int64(2), 7.0),
    ((0, 1), 3.0),
    ((0, np.int32(-1)), 3.0),
    (slice(1, 3), np.arange(4, dtype=np.float32)),
    ((slice(None), 2), np.array([1.0, 2.0, 3.0], np.float32)),
    ((slice(None), slice(None, None, 2)), -1.0),
    ((slice(None, None, -1), 0), np.array([9.0, 8.0, 7.0], np.float32)),
    ((Ellipsis, 1), 0.5),
    ((None, 1), 4.0),
    (([0, 2],), 6.0),
    (([0, 2, 0], [1, 1, 3]), np.array([1.0, 2.0, 3.0], np.float32)),
    ((slice(None), [3, 0]), np.array([[1.0, 2.0]], np.float32)),
    (([2, 2],), np.array([[1.0] * 4, [2.0] * 4], np.float32)),  # repeated: the last write wins
    ((np.array([True, False, True]),), 11.0),
    ((np.array([True, False, True]),), np.array([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]], np.float32)),
    ((slice(0, 0),), 1.0),
    ((Ellipsis,), 2.0),
]


@pytest.mark.parametrize("index,value", SETITEMS, ids=[repr(i) for i, _ in SETITEMS])
def test_setitem_matches_numpy(index, value) -> None:
    a, x = pair()
    alias = x
    a[index] = value
    x[index] = value
    same(alias, a)


def test_setitem_with_masks_and_tensors() -> None:
    a, x = pair()
    a[a > 5] = 0
    x[x > 5] = 0
    same(x, a)
    a[a < 3] = a[a < 3] * 10  # one value per selected element
    x[x < 3] = x[x < 3] * 10
    same(x, a)
    rows = np.array([True, False, True])
    a[rows] = np.array([1.0, 2.0, 3.0, 4.0], np.float32)  # one value per trailing element
    x[tr.tensor(rows)] = tr.tensor([1.0, 2.0, 3.0, 4.0])
    same(x, a)
    idx = np.array([2, -3])
    a[idx] = -1
    x[tr.tensor(idx)] = -1  # an integer tensor on the GPU: read back for the positions
    same(x, a)
    a[np.argmax(a.sum(axis=1))] = 42  # numpy's int64 scalar
    x[np.argmax(x.numpy().sum(axis=1))] = 42
    same(x, a)


def test_setitem_value_dtypes() -> None:
    a, x = pair(dtype=np.int32)
    a[0] = 2.7  # numpy truncates a float assigned to an int array
    x[0] = 2.7
    a[1] = np.array([1.9, -1.9, 3.0, 4.5])
    x[1] = np.array([1.9, -1.9, 3.0, 4.5])
    x[2] = tr.tensor([1.5, 2.5, 3.5, 4.5])  # a tensor is cast as astype does (truncation)
    a[2] = [1, 2, 3, 4]
    same(x, a)
    with pytest.raises(tr.DTypeError, match="setitem.*nan.*int32"):
        x[0] = float("nan")
    with pytest.raises(tr.DTypeError, match="setitem.*4294967296.*int32"):
        x[0] = 2**32
    same(x, a)


@pytest.mark.parametrize(
    "index,value,error,words",
    [
        (5, 1.0, tr.IndexOutOfRangeError, ("5", "axis 0", "(3, 4)")),
        (([0, 3],), 1.0, tr.IndexOutOfRangeError, ("3", "(3, 4)")),
        ((0,), np.ones(3), tr.ShapeError, ("(3,)", "(4,)")),
        ((np.array([True, False]),), 1.0, tr.IndexOutOfRangeError, ("mask", "(2,)", "(3, 4)")),
        ((0.5,), 1.0, tr.DTypeError, ("0.5",)),
    ],
)
def test_setitem_errors(index, value, error, words) -> None:
    a, x = pair()
    with pytest.raises(error) as info:
        x[index] = value
    for w in words:
        assert w in str(info.value), (w, str(info.value))
    same(x, a)  # unchanged and still usable


# --- views ----------------------------------------------------------------------------------


def test_write_through_views_reaches_the_base() -> None:
    a, x = pair()
    v, w = a[1:], x[1:]
    v += 100
    w += 100
    same(x, a)
    same(w, v)
    a[0][1] = -7  # a view of a view
    x[0][1] = -7
    same(x, a)
    a.T[0] = 9  # a transposed view
    x.T[0] = 9
    same(x, a)
    col, tcol = a[:, 2], x[:, 2]
    a[1, 2] = 55  # the base changes: the view follows
    x[1, 2] = 55
    same(tcol, col)
    r, tr_ = a.reshape(2, 6), x.reshape(2, 6)
    r[1, ::2] = 0  # a strided write through a reshaped view
    tr_[1, ::2] = 0
    same(x, a)
    same(tr_, r)
    s, ts = a[::2, ::-1], x[::2, ::-1]
    s *= 2
    ts *= 2
    same(x, a)
    same(ts, s)


def test_views_follow_numpy_view_or_copy_rules() -> None:
    a, x = pair((2, 3, 4))
    assert x[0].base is x and x.T.base is x and x.reshape(6, 4).base is x and x[None].base is x
    assert x.flatten().base is None and x[[0]].base is None and x.copy().base is None
    t = x.permute(2, 1, 0)  # non-contiguous: numpy's reshape of it copies
    flat, tflat = a.transpose(2, 1, 0).reshape(-1), t.reshape(-1)
    assert not np.shares_memory(flat, a) and tflat.base is None
    tflat[0] = 100.0
    flat[0] = 100.0
    same(x, a)  # unchanged: the reshape was a copy
    same(tflat, flat)


def test_views_of_a_dropped_base_stay_linked() -> None:
    a = np.arange(12, dtype=np.float32)
    v = tr.tensor(a) * 2  # the base is a temporary nobody holds
    m = v.reshape(3, 4)
    row = m[1]
    m[1, 0] = -1
    ref = (a * 2).reshape(3, 4)
    ref[1, 0] = -1
    same(row, ref[1])
    same(m, ref)


def test_broadcast_view_is_read_only() -> None:
    x = tr.ones(3)
    e = x.expand(2, 3)
    with pytest.raises(tr.ShapeError, match="broadcast"):
        e[0, 0] = 5
    with pytest.raises(tr.ShapeError, match="broadcast"):
        e += 1
    same(x, np.ones(3, np.float32))
    x[0] = 7  # the base stays writable, and the broadcast view follows it
    same(e, np.broadcast_to(np.array([7, 1, 1], np.float32), (2, 3)))


def test_augmented_item_assignment() -> None:
    a, x = pair()
    a[0] += 1
    x[0] += 1
    a[:, 1] *= 3
    x[:, 1] *= 3
    a[[0, 2]] -= 5  # advanced: a copy is updated, then assigned back
    x[[0, 2]] -= 5
    a[a > 10] += 0.5
    x[x > 10] += 0.5
    same(x, a)


def test_setitem_box_writes_in_place() -> None:
    x = tr.zeros((64, 8)).realize()
    x[3:5] = tr.ones((2, 8))
    (d,) = tr.compile(x).dispatches
    assert (d.op, d.inplace) == ("index_write", True)
    x.realize()
    v = x[10]
    v[2:4] = 2.0  # through a view: still a box of the base
    (d,) = tr.compile(x).dispatches
    assert (d.op, d.inplace) == ("index_write", True)
    ref = np.zeros((64, 8), np.float32)
    ref[3:5] = 1
    ref[10, 2:4] = 2
    same(x, ref)


def test_mutation_inside_jit_repeats_on_replay() -> None:
    @tr.jit
    def bump(x: tr.Tensor, by: tr.Tensor) -> tr.Tensor:
        x[0] += by
        x[1:] *= 2
        return x.sum()

    a = np.ones((3, 2), np.float32)
    x = tr.tensor(a)
    for _ in range(3):
        total = bump(x, tr.tensor([1.0, 2.0]))
        a[0] += [1.0, 2.0]
        a[1:] *= 2
        np.testing.assert_allclose(total.numpy(), a.sum())
        same(x, a)
    assert len(bump.traces) == 1  # traced once, replayed after


def test_copy_and_clone_are_independent() -> None:
    a, x = pair()
    c, k = x.copy(), x.clone()
    x[0] = 0
    c[1] = 1
    a2 = a.copy()
    a[0] = 0
    a2[1] = 1
    same(x, a)
    same(c, a2)
    np.testing.assert_array_equal(k.numpy(), np.arange(12, dtype=np.float32).reshape(3, 4))
    y = x.astype(tr.float32)  # numpy's astype copies
    y += 1
    same(x, a)


def test_xor() -> None:
    p, q = np.array([True, True, False, False]), np.array([True, False, True, False])
    same(tr.tensor(p) ^ tr.tensor(q), p ^ q)
    same(tr.tensor(p) ^ True, p ^ True)
    same(False ^ tr.tensor(q), False ^ q)


# --- numpy integer scalars are indices everywhere -----------------------------------------


def test_numpy_integer_scalars_as_indices() -> None:
    a, x = pair((4, 5))
    i = np.argmax(a[:, 0])  # np.int64
    same(x[i], a[i])
    same(x[np.int32(1) : np.int64(3), np.uint8(2)], a[1:3, 2])
    same(x[np.array(2)], a[np.array(2)])
    same(tr.index_select(x, np.int64(2), 0), np.take(a, np.int64(2), 0))
    same(x.sum(axis=np.int64(0)), a.sum(axis=0))
    same(x.reshape(np.int64(20)), a.reshape(20))


# --- advanced indexing reads --------------------------------------------------------------

GETITEMS = [
    ([1, 0, 1],),
    ([[0], [1]], [[0, 1, 2]]),
    (0, slice(None), [1, 2]),
    ([0, 1], slice(None), [1, 2]),
    (slice(None), [0, 2], [1, 3]),
    (None, [1], Ellipsis, 2),
    (slice(None), [-1, 0]),
    (np.array([True, False]),),
    (Ellipsis, np.array([True, False, False, True])),
    (slice(None), np.array([[True, False, True, False], [False, False, True, True], [True] * 4])),
    (np.array([[True, False, True], [False, False, True]]), slice(1, 3)),
    ([],),
]


@pytest.mark.parametrize("index", GETITEMS, ids=[repr(i) for i in GETITEMS])
def test_advanced_getitem_matches_numpy(index) -> None:
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    same(tr.tensor(a)[index], a[index])


def test_advanced_getitem_with_tensors() -> None:
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    x = tr.tensor(a)
    ids = np.array([[3, -1], [0, 2]], np.int32)
    same(x[tr.tensor(ids)], a[ids])  # negative ids wrap on the GPU
    same(x[1, tr.tensor(ids)], a[1, ids])
    same(x[x[:, 0] > 5], a[a[:, 0] > 5])  # a GPU mask: read back for its count
    same(x[tr.tensor(np.int32(2))], a[2])


# --- a random differential walk -----------------------------------------------------------

STEPS = st.lists(
    st.tuples(
        st.sampled_from(["view", "iadd", "imul", "set_int", "set_slice", "set_mask", "set_fancy", "base"]),
        st.integers(0, 2),
        st.integers(-3, 3),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(STEPS)
def test_mutation_walk_matches_numpy(steps) -> None:
    """A random walk of views and writes on a numpy array and a Tensor ends with the same values everywhere."""
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    x = tr.tensor(a)
    pairs = [(a, x)]  # (numpy view, tensor view) of the same elements
    for kind, which, k in steps:
        na, tx = pairs[which % len(pairs)]
        if kind == "view":
            views = [
                lambda t: t[1:],
                lambda t: t.T,
                lambda t: t[..., ::2],
                lambda t: t[::-1],
            ]
            f = views[k % len(views)]
            pairs.append((f(na), f(tx)))
        elif kind == "iadd":
            na += k
            tx += k
        elif kind == "imul":
            na *= k
            tx *= k
        elif kind == "set_int" and na.shape and na.shape[0]:
            na[k % na.shape[0]] = k
            tx[k % tx.shape[0]] = k
        elif kind == "set_slice":
            na[::2] = k
            tx[::2] = k
        elif kind == "set_mask":
            na[na > k] = -k
            tx[tx > k] = -k
        elif kind == "set_fancy" and na.ndim and na.shape[0]:
            idx = [0, na.shape[0] - 1]
            na[idx] = k * 2
            tx[idx] = k * 2
        elif kind == "base":
            pairs.append((a, x))
    for na, tx in pairs:
        np.testing.assert_array_equal(tx.numpy(), na)
