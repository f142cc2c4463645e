"""Host uploads reuse the GPU buffers of dead tensors (backend_wgpu.device.UploadPool): values stay right
while buffers are reused between lazy calls, and a lazy loop's replay binds nothing new (issue 12).
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import tracer as tr
from backend_wgpu import get_device
from tests.helpers import assert_close
from tracer.limits import float16_supported


def _delta(before: dict[str, int], key: str) -> int:
    return get_device().stats[key] - before.get(key, 0)


def _rowsum(a: np.ndarray) -> tr.Tensor:
    """A lazy call over host data whose output cannot be the input's buffer (another shape)."""
    return (tr.tensor(a) * 2.0).sum(axis=1)


def test_reused_buffer_does_not_corrupt_an_earlier_call(rng: np.random.Generator) -> None:
    a1, a2, a3 = (rng.standard_normal((8, 5), dtype=np.float32) for _ in range(3))
    _rowsum(a1).numpy()  # compiled; its upload buffer is free again
    gc.collect()
    before = dict(get_device().stats)
    r1 = _rowsum(a2).realize()  # submitted, not read: its input's tensor dies, the buffer goes back
    r2 = _rowsum(a3).realize()  # its upload reuses that buffer while r1's run may still be reading it
    assert _delta(before, "uploads_reused") == 2  # the test exercises reuse
    assert _delta(before, "buffers_allocated") == 1  # r2's output only: r1 holds the first
    assert_close(r2.numpy(), (a3 * 2).sum(axis=1))  # read back in reverse order
    assert_close(r1.numpy(), (a2 * 2).sum(axis=1))


def test_pending_results_of_several_calls_read_in_reverse(rng: np.random.Generator) -> None:
    data = [rng.standard_normal((4, 33), dtype=np.float32) for _ in range(6)]
    results = [(tr.tensor(a) + 1.0).realize() for a in data]  # an in-place kernel may take the upload's buffer
    pending = [tr.tensor(a).sum(axis=0) for a in data]  # uploaded only when read
    for a, p in reversed(list(zip(data, pending, strict=True))):
        assert_close(p.numpy(), a.sum(axis=0))
    for a, r in reversed(list(zip(data, results, strict=True))):
        assert_close(r.numpy(), a + 1)


def test_live_tensors_keep_their_values(rng: np.random.Generator) -> None:
    kept, want = [], []
    for _ in range(5):
        a = rng.standard_normal((6, 7), dtype=np.float32)
        x = tr.tensor(a)
        _rowsum_of = (x * 3.0).sum(axis=1)
        assert_close(_rowsum_of.numpy(), (a * 3).sum(axis=1))
        kept.append(x)  # uploaded and alive: its buffer must never be handed to a later upload
        want.append(a)
        gc.collect()
    for x, a in zip(kept, want, strict=True):
        assert_close(x.numpy(), a)
        assert_close((x - 1.0).numpy(), a - 1)


def test_same_size_inputs_keep_their_buffers_and_plan(rng: np.random.Generator) -> None:
    """Three host inputs of one size (a model's ids, types and mask) bind the same buffers on every call."""

    def call(ids: np.ndarray, types: np.ndarray, mask: np.ndarray) -> np.ndarray:
        i, t, m = tr.tensor(ids), tr.tensor(types), tr.tensor(mask)
        return ((i * 3 + t) * m).sum(axis=1).numpy()

    def data() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return (
            rng.integers(0, 100, (4, 16)).astype(np.int32),
            rng.integers(0, 2, (4, 16)).astype(np.int32),
            rng.integers(0, 2, (4, 16)).astype(np.int32),
        )

    for _ in range(2):
        ids, types, mask = data()
        assert np.array_equal(call(ids, types, mask), ((ids * 3 + types) * mask).sum(axis=1))
    before = dict(get_device().stats)
    for _ in range(4):
        ids, types, mask = data()
        assert np.array_equal(call(ids, types, mask), ((ids * 3 + types) * mask).sum(axis=1))
    assert _delta(before, "uploads_reused") == 12
    assert _delta(before, "buffers_allocated") == 0
    assert _delta(before, "bind_groups_created") == 0


@pytest.mark.parametrize("n", [0, 1, 3, 4, 5, 17])
@pytest.mark.parametrize("dtype", ["float32", "int32", "uint32", "bool", "float16"])
def test_odd_sizes_and_dtypes(n: int, dtype: str, rng: np.random.Generator) -> None:
    if dtype == "float16" and not float16_supported():
        pytest.skip("this adapter has no shader-f16")
    for _ in range(3):  # the second and third calls reuse the first's buffer
        a = (rng.standard_normal(n) * 10).astype(dtype)
        b = (rng.standard_normal(n) * 10).astype(dtype)  # same size: may take the buffer a's tensor had
        x = tr.tensor(a)
        if dtype == "bool":
            got, want = (x & tr.tensor(b)).numpy(), a & b
        else:
            got, want = (x + tr.tensor(b)).numpy(), a + b
        assert got.dtype == want.dtype
        assert_close(got, want)
        assert_close(x.numpy(), a)


def test_sizes_alternating_in_one_buffer_size(rng: np.random.Generator) -> None:
    """3 and 4 float32 elements both live in 16-byte buffers: each call reads only its own elements."""
    for n in (4, 3, 4, 3, 2, 4):
        a = rng.standard_normal(n, dtype=np.float32)
        assert_close(tr.tensor(a).sum().numpy(), a.sum())
        assert_close((tr.tensor(a) * 2.0).numpy(), a * 2)


def test_reset_device_between_calls(rng: np.random.Generator) -> None:
    a1, a2 = (rng.standard_normal((5, 9), dtype=np.float32) for _ in range(2))
    assert_close(_rowsum(a1).numpy(), (a1 * 2).sum(axis=1))
    old = get_device()
    tr.reset_device()
    assert get_device() is not old
    pending = _rowsum(a2)  # host data made before nothing was uploaded: fine on the new device
    assert_close(pending.numpy(), (a2 * 2).sum(axis=1))
    assert_close(_rowsum(a1).numpy(), (a1 * 2).sum(axis=1))


def test_released_buffer_never_comes_back() -> None:
    dev = get_device()
    a = np.arange(40, dtype=np.float32)
    buf = dev.upload(a)
    raw = buf.buffer
    buf.release()  # destroyed: must not be handed to the next upload
    del buf
    gc.collect()
    again = dev.upload(a)
    assert again.buffer is not raw
    out = np.empty(40, np.float32)
    dev.read_into(again, out)
    assert_close(out, a)


def test_free_buffers_stay_within_the_budget() -> None:
    dev = get_device()
    pool = dev.uploads
    old = pool.budget
    pool.budget = 256
    try:
        held = [dev.upload(np.full(24, i, np.float32)) for i in range(10)]  # 96 bytes each
        del held
        gc.collect()
        assert 0 < pool.free_bytes <= 256
        again = dev.upload(np.full(24, 7.0, np.float32))
        out = np.empty(24, np.float32)
        dev.read_into(again, out)
        assert_close(out, np.full(24, 7.0, np.float32))
    finally:
        pool.budget = old


def test_large_uploads_are_not_kept() -> None:
    from backend_wgpu.device import UPLOAD_POOLED_MAX

    dev = get_device()
    gc.collect()
    free = dev.uploads.free_bytes
    big = dev.upload(np.zeros(UPLOAD_POOLED_MAX // 4 + 4, np.float32))
    del big
    gc.collect()
    assert dev.uploads.free_bytes == free


def test_ever_new_sizes_keep_a_bounded_count() -> None:
    dev = get_device()
    held = [dev.upload(np.full(n, n, np.float32)) for n in range(5, 5 + 3 * dev.uploads.count)]  # all sizes differ
    while held:  # freed in order of size
        held.pop(0)
    gc.collect()
    assert dev.uploads.free_count == dev.uploads.count
    n = 4 + 3 * dev.uploads.count  # the newest freed is kept
    before = dict(dev.stats)
    again = dev.upload(np.full(n, 1.5, np.float32))
    assert _delta(before, "uploads_reused") == 1
    out = np.empty(n, np.float32)
    dev.read_into(again, out)
    assert_close(out, np.full(n, 1.5, np.float32))


class _Raw:
    """A stand-in for a wgpu buffer: the pool reads only its size."""

    def __init__(self, size: int) -> None:
        self.size = size


def test_pool_prefers_the_hinted_buffer_and_drops_the_oldest() -> None:
    from backend_wgpu.device import DeviceBuffer, UploadPool

    pool = UploadPool(budget=1 << 20, count=3)
    raws = [_Raw(64) for _ in range(3)]
    bufs = [DeviceBuffer(r, 64, None) for r in raws]  # type: ignore[arg-type]
    for i, b in enumerate(bufs):
        pool.hand_out(b, ("program", i))
    assert pool.take(64, None) is None  # nothing free while the DeviceBuffers live
    del b
    for i in (2, 0, 1):  # freed in another order than handed out
        bufs[i] = None  # type: ignore[call-overload]
    assert pool.free_count == 3 and pool.free_bytes == 192
    assert pool.take(64, ("program", 0)) is raws[0]  # the hinted one, not the one freed last
    assert pool.take(64, ("program", 7)) is raws[1]  # no such hint: the one freed last
    assert pool.take(32, None) is None  # another size: never
    extra = [DeviceBuffer(_Raw(64), 64, None) for _ in range(4)]  # type: ignore[arg-type]
    for b in extra:
        pool.hand_out(b, None)
    del b
    extra.clear()  # four more freed: the count keeps the three freed last, raws[2] (the oldest) is dropped
    assert pool.free_count == 3 and pool.free_bytes == 192
    taken = {id(pool.take(64, ("program", 2))) for _ in range(3)}
    assert id(raws[2]) not in taken and pool.free_count == 0


def test_a_burst_of_freed_buffers_keeps_the_reused_ones() -> None:
    """A model's weights freed at once (never reused) go before a loop's buffer that is reused every call."""
    from backend_wgpu.device import DeviceBuffer, UploadPool

    pool = UploadPool(budget=1 << 20, count=4)
    hot = _Raw(64)
    buf = DeviceBuffer(hot, 64, None)  # type: ignore[arg-type]
    pool.hand_out(buf, ("loop", 0))
    del buf
    for _ in range(2):  # the loop: taken, handed out again, freed
        raw = pool.take(64, ("loop", 0))
        assert raw is hot
        buf = DeviceBuffer(raw, 64, None)  # type: ignore[arg-type]
        pool.hand_out(buf, ("loop", 0))
        del buf, raw
    burst = [DeviceBuffer(_Raw(128), 128, None) for _ in range(10)]  # type: ignore[arg-type]
    for b in burst:
        pool.hand_out(b, None)
    del b
    burst.clear()
    assert pool.free_count == 4
    assert pool.take(64, ("loop", 0)) is hot


def test_a_new_loop_finds_room_beside_an_old_one() -> None:
    """A pool full of an old loop's reused buffers still keeps a new loop's, so they are reused too."""
    from backend_wgpu.device import DeviceBuffer, UploadPool

    pool = UploadPool(budget=1 << 20, count=4)

    def cycle(raw: _Raw, hint: tuple) -> None:  # handed out, then its DeviceBuffer dies
        pool.hand_out(DeviceBuffer(raw, raw.size, None), hint)  # type: ignore[arg-type]

    old = [_Raw(64) for _ in range(4)]
    for i, raw in enumerate(old):
        cycle(raw, ("old", i))
    for _ in range(2):  # the old loop: its four buffers reused every call, then it ends
        for i in range(4):
            cycle(pool.take(64, ("old", i)), ("old", i))
    assert pool.free_count == 4
    new = _Raw(128)
    cycle(new, ("new", 0))
    for _ in range(3):  # the new loop: its buffer is there every call
        got = pool.take(128, ("new", 0))
        assert got is new
        cycle(got, ("new", 0))
    assert pool.free_count == 4
