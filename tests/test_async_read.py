"""Tensor.copy_to_host_async / tr.copy_to_host_async: reads started now and finished by the next numpy().

What is checked against numpy: the values of every dtype and layout a read can start from
(program outputs at an offset in an arena, views, 0-d, empty, host data never uploaded);
that work submitted after a read started does not change what it returns, including a
jitted step that writes its arguments in place; that a started read is used once and a
second numpy() reads again; the staging buffers' reuse across many reads; errors (inside a
trace, quantized tensors, a device replaced in between).
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import tracer as tr
from backend_wgpu import get_device
from ir.errors import DeviceError, DTypeError, JitError
from tracer.realize import _STARTED_READS

pytestmark = pytest.mark.gpu


def test_values_of_every_dtype(rng: np.random.Generator) -> None:
    a = rng.standard_normal((5, 7)).astype(np.float32)
    b = rng.integers(-50, 50, (3, 4)).astype(np.int32)
    x, y = tr.tensor(a), tr.tensor(b)
    outs = [x * 2 + 1, (x > 0), y * 3, x.astype(tr.float16), x.sum(), (y - 1).reshape(12)]
    want = [a * 2 + 1, a > 0, b * 3, a.astype(np.float16), a.sum(), (b - 1).reshape(12)]
    if not get_device().caps.shader_f16:  # Mesa's GL adapter
        outs, want = outs[:3] + outs[4:], want[:3] + want[4:]
    tr.copy_to_host_async(*outs)  # one program for all, one submission of copies
    assert all(o._lazy in _STARTED_READS for o in outs)
    for o, w in zip(outs, want, strict=True):
        got = o.numpy()
        assert got.dtype == w.dtype and got.shape == w.shape
        np.testing.assert_allclose(got, w, rtol=1e-3 if w.dtype == np.float16 else 1e-5, atol=1e-5)
        assert o._lazy not in _STARTED_READS  # finished: used once


def test_later_work_does_not_change_a_started_read(rng: np.random.Generator) -> None:
    a = rng.standard_normal(4096).astype(np.float32)
    x = tr.tensor(a)
    y = (x * 3).realize()
    y.copy_to_host_async()
    y += 1  # y now shows a new value (in place where nothing else sees the old one)
    z = (y * 2).realize()
    np.testing.assert_allclose(y.numpy(), a * 3 + 1, rtol=1e-6)  # the read started was of the old value
    np.testing.assert_allclose(z.numpy(), (a * 3 + 1) * 2, rtol=1e-6)


def test_a_read_started_before_a_jitted_in_place_write(rng: np.random.Generator) -> None:
    """A step that writes its argument in place (as Llama.step_into writes the caches): the read
    started before the call returns the value before it; the tensor shows the value after."""

    @tr.jit
    def bump(cache: tr.Tensor, row: tr.Tensor, pos: tr.RuntimeInt) -> tr.Tensor:
        cache.index_write(row, (pos, 0))
        return cache.sum(-1)

    start = rng.standard_normal((8, 16)).astype(np.float32)
    cache = tr.tensor(start.copy()).realize()
    expect = start.copy()
    for step in range(4):
        sums = bump(cache, tr.tensor(np.full((1, 16), step + 1.0, np.float32)), tr.dynamic(step))
        sums.copy_to_host_async()
        before = cache.sum(-1).realize().copy_to_host_async()
        bump(cache, tr.tensor(np.full((1, 16), -9.0, np.float32)), tr.dynamic(7))  # later work on the same cache
        expect[step] = step + 1.0
        np.testing.assert_allclose(sums.numpy(), expect.sum(-1), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(before.numpy(), expect.sum(-1), rtol=1e-5, atol=1e-5)
        expect[7] = -9.0
    np.testing.assert_allclose(cache.numpy(), expect, rtol=1e-6)


def test_a_second_read_and_odd_shapes(rng: np.random.Generator) -> None:
    a = rng.standard_normal((3, 5)).astype(np.float32)
    x = tr.tensor(a)
    y = (x + 1)[1:, ::2]  # a view of a program output
    assert y.copy_to_host_async() is y
    np.testing.assert_allclose(y.numpy(), (a + 1)[1:, ::2], rtol=1e-6)
    np.testing.assert_allclose(y.numpy(), (a + 1)[1:, ::2], rtol=1e-6)  # read again, synchronously
    host = tr.tensor(a)  # never uploaded: nothing to copy, its data is on the host
    host.copy_to_host_async()
    np.testing.assert_array_equal(host.numpy(), a)
    empty = (x[:0] * 2).copy_to_host_async()
    assert empty.numpy().shape == (0, 5)
    scalar = (x.max() * 1).copy_to_host_async()
    assert scalar.item() == pytest.approx(float(a.max()))


def test_many_reads_in_flight_and_abandoned_ones(rng: np.random.Generator) -> None:
    """Reads started and never finished (their tensors die) leave nothing behind; staging buffers are reused."""
    a = rng.standard_normal(1000).astype(np.float32)
    x = tr.tensor(a)
    kept = [(x * float(i)).copy_to_host_async() for i in range(12)]  # 12 in flight at once
    for i in range(0, 12, 2):
        (x + float(i)).copy_to_host_async()  # dies unread
    gc.collect()
    for i, t in enumerate(kept):
        np.testing.assert_allclose(t.numpy(), a * i, rtol=1e-6)
    assert not _STARTED_READS
    for i in range(50):  # a long loop reads as it goes: the staging buffers are those of the reads before
        np.testing.assert_allclose((x - float(i)).copy_to_host_async().numpy(), a - i, rtol=1e-6)


def test_errors_name_the_call(rng: np.random.Generator) -> None:
    @tr.jit
    def f(x: tr.Tensor) -> tr.Tensor:
        y = x * 2
        y.copy_to_host_async()
        return y

    with pytest.raises(JitError, match="on the host"):
        f(tr.tensor(np.ones(4, np.float32)))
    q = tr.quantize(tr.tensor(rng.standard_normal((4, 32)).astype(np.float32)), tr.q8_0)
    with pytest.raises(DTypeError, match="copy_to_host_async.*astype"):
        q.copy_to_host_async()
    with pytest.raises(TypeError, match="Tensors"):
        tr.copy_to_host_async(np.ones(3))  # type: ignore[arg-type]


def test_a_read_across_reset_device_is_a_clear_error() -> None:
    y = (tr.tensor(np.ones(8, np.float32)) * 2).copy_to_host_async()
    tr.reset_device()
    with pytest.raises(DeviceError, match="reset_device"):
        y.numpy()
    np.testing.assert_array_equal((tr.tensor(np.ones(3, np.float32)) + 1).copy_to_host_async().numpy(), 2.0)


@pytest.mark.parametrize("threads", [1, 3, 4])
def test_large_read_split_over_threads(rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, threads: int) -> None:
    """A read-back of several MiB is copied out of the staging buffer by READ_COPY_THREADS threads:
    every byte arrives, including a tail shorter than a thread's share, started or plain."""
    import backend_wgpu.device as device_module

    monkeypatch.setattr(device_module, "READ_COPY_THREADS", threads)
    a = rng.standard_normal(1_300_001).astype(np.float32)  # 5.2 MB: four shares of page-aligned bytes, then a tail
    x = tr.tensor(a)
    np.testing.assert_allclose((x * 3 - 1).numpy(), a * 3 - 1, rtol=1e-6, atol=1e-6)
    y = x + 2
    y.copy_to_host_async()
    np.testing.assert_allclose(y.numpy(), a + 2, rtol=1e-6, atol=1e-6)
