"""Factories, conversions and the Tensor API."""

from __future__ import annotations

import numpy as np
import pytest

import tracer as tr
from tests.helpers import assert_close


@pytest.mark.f16  # uses float16 among other dtypes
def test_tensor_from_lists_scalars_and_arrays() -> None:
    assert tr.tensor([[1, 2], [3, 4]]).dtype == tr.int32
    assert tr.tensor([1.5, 2]).dtype == tr.float32
    assert tr.tensor(True).dtype == tr.bool
    assert tr.tensor(np.arange(3, dtype=np.float64)).dtype == tr.float32
    assert tr.tensor(np.arange(3, dtype=np.int64)).dtype == tr.int32
    assert tr.tensor(np.ones(2, np.float16)).dtype == tr.float16
    assert tr.tensor(np.ones(2, np.uint32)).dtype == tr.uint32
    assert tr.tensor([1, 2], dtype=tr.float32).dtype == tr.float32
    assert tr.tensor([1, 2], dtype="float16").numpy().dtype == np.float16
    np.testing.assert_array_equal(tr.tensor([[1, 2], [3, 4]]).numpy(), [[1, 2], [3, 4]])


def test_tensor_conversion_errors() -> None:
    with pytest.raises(tr.DTypeError, match="do not fit int32"):
        tr.tensor(np.array([2**40]))
    with pytest.raises(tr.DTypeError, match="complex"):
        tr.tensor(np.array([1 + 2j]))
    with pytest.raises(tr.DTypeError, match="out of float32 range"):
        tr.tensor(np.array([1e300]))
    with pytest.raises(tr.DTypeError, match="ragged"):
        tr.tensor([[1, 2], [3]])
    with pytest.raises(tr.DTypeError, match="not supported"):
        tr.tensor(np.array(["a"]))


def test_factories() -> None:
    assert_close(tr.zeros((2, 3)).numpy(), np.zeros((2, 3), np.float32))
    assert_close(tr.ones(4, tr.int32).numpy(), np.ones(4, np.int32))
    assert_close(tr.full((2, 2), 7.5).numpy(), np.full((2, 2), 7.5, np.float32))
    assert tr.full((2,), 3).dtype == tr.int32
    np.testing.assert_array_equal(tr.arange(5).numpy(), np.arange(5))
    np.testing.assert_array_equal(tr.arange(2, 11, 3).numpy(), np.arange(2, 11, 3))
    assert_close(tr.arange(0.0, 1.0, 0.25).numpy(), np.arange(0, 1, 0.25, dtype=np.float32))
    np.testing.assert_array_equal(tr.arange(5, 0, -2).numpy(), np.arange(5, 0, -2))
    assert tr.arange(0).shape == (0,)
    a = tr.rand(3, 4, seed=1).numpy()
    assert a.shape == (3, 4) and (a >= 0).all() and (a < 1).all()
    np.testing.assert_array_equal(a, tr.rand((3, 4), seed=1).numpy())
    n = tr.randn(2000, seed=2).numpy()
    assert abs(n.mean()) < 0.1 and abs(n.std() - 1) < 0.1
    assert_close(tr.zeros_like(tr.ones((2, 2))).numpy(), np.zeros((2, 2)))


def test_tensor_properties_and_conversions() -> None:
    x = tr.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert (x.shape, x.ndim, x.size, len(x)) == ((2, 3), 2, 6, 2)
    y = x * 2
    assert "lazy mul" in repr(y)  # repr never computes
    assert not y.is_realized
    assert y.tolist() == [[0.0, 2.0, 4.0], [6.0, 8.0, 10.0]]
    assert y.is_realized and "realized" in repr(y)
    np.testing.assert_array_equal(np.asarray(y), [[0, 2, 4], [6, 8, 10]])
    assert y[1, 2].item() == 10.0
    assert float(y.sum()) == 30.0
    assert [r.tolist() for r in x] == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(tr.ShapeError, match="item"):
        x.item()
    with pytest.raises(TypeError):
        len(tr.tensor(1.0))


def test_realized_tensors_are_never_recomputed() -> None:
    x = tr.tensor(np.arange(4, dtype=np.float32))
    y = x * 3
    y.realize()
    from tracer.realize import stats

    before = stats["realizations"]
    z = y + 1
    assert [n.op.value for n in z.graph()] == ["input", "input", "expand", "add"]  # y enters as an input
    assert_close(z.numpy(), np.arange(4) * 3 + 1)
    assert stats["realizations"] == before + 1


def test_held_intermediates_are_computed_once_and_kept() -> None:
    x = tr.tensor(np.arange(4, dtype=np.float32))
    a = x * 2
    b = a.exp()
    b.realize()
    assert a.is_realized  # a is still held: it was realized in the same submission
    assert_close(a.numpy(), np.arange(4) * 2)


def test_compile_exposes_dispatches_without_running() -> None:
    x = tr.tensor(np.ones((8, 8), np.float32))
    y = (x @ x).sum(axis=-1)
    program = tr.compile(y)
    assert [d.kernel for d in program.dispatches] == ["gemm_blocked", "reduce"]
    d = program.dispatches[0]
    assert d.workgroup_size == (16, 16, 1) and d.workgroup_count == (1, 1, 1) and d.element == 1
    assert not y.is_realized
    assert_close(y.numpy(), np.full(8, 64.0))


def test_public_errors_form_one_hierarchy() -> None:
    for err in (tr.ShapeError, tr.DTypeError, tr.DeviceError, tr.KernelCompileError, tr.IndexOutOfRangeError):
        assert issubclass(err, tr.WgjitError)
    assert issubclass(tr.ShapeError, ValueError) and issubclass(tr.DTypeError, TypeError)
