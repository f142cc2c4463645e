"""@tr.jit writes the arguments a function writes into in place (donation), and copies them when it must.

A jitted function that does `cache.index_write(row, (pos, 0))` on an argument: after the traced
call, each replay overwrites the argument's own buffer (the Tensor keeps its buffer from call to
call) instead of writing the whole result to a new one. Whenever something else can still see
the argument's old value (another Tensor showing it, a pending value computed from it, the same
tensor passed as another argument), that call writes into a copy and the old value stays as it
was. Every value is checked against numpy.
"""

from __future__ import annotations

import numpy as np
import pytest

import tracer as tr

pytestmark = pytest.mark.gpu


@tr.jit
def append(cache: tr.Tensor, row: tr.Tensor, pos: tr.RuntimeInt) -> tr.Tensor:
    cache.index_write(row, (pos, 0))
    return cache.sum(-1)


def _buffer(t: tr.Tensor) -> object:
    return t._lazy.buffer.buffer


def _row(value: float) -> tr.Tensor:
    return tr.tensor(np.full((1, 8), value, np.float32))


def test_replays_write_the_argument_in_place(rng: np.random.Generator) -> None:
    start = rng.standard_normal((16, 8)).astype(np.float32)
    cache, want = tr.tensor(start.copy()).realize(), start.copy()
    buffers = []
    for step in range(6):
        sums = append(cache, _row(step + 1.0), tr.dynamic(step))
        want[step] = step + 1.0
        np.testing.assert_allclose(sums.numpy(), want.sum(-1), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(cache.numpy(), want)
        buffers.append(_buffer(cache))
    # the traced call and the first replay may copy (values of the trace are still about); then in place
    assert len({id(b) for b in buffers[2:]}) == 1
    trace = next(iter(append.traces.values()))
    assert trace.donated, "the argument written into is donated"


def test_another_tensor_showing_the_old_value_keeps_it(rng: np.random.Generator) -> None:
    start = rng.standard_normal((16, 8)).astype(np.float32)
    cache = tr.tensor(start.copy()).realize()
    for step in range(3):  # past the traced call: replays
        append(cache, _row(1.0), tr.dynamic(step))
    before = cache.numpy()
    alias = tr.Tensor(cache._lazy)  # a second handle on the very value (as a captured or returned tensor has)
    pending = cache * 2.0  # and a pending value that reads it
    append(cache, _row(-7.0), tr.dynamic(5))
    np.testing.assert_array_equal(alias.numpy(), before)
    np.testing.assert_allclose(pending.numpy(), before * 2.0, rtol=1e-6)
    after = before.copy()
    after[5] = -7.0
    np.testing.assert_array_equal(cache.numpy(), after)


def test_the_same_tensor_passed_twice() -> None:
    @tr.jit
    def write_then_read(x: tr.Tensor, y: tr.Tensor, pos: tr.RuntimeInt) -> tr.Tensor:
        x.index_write(tr.ones((1, 4)), (pos, 0))
        return y.sum()

    a = tr.tensor(np.zeros((4, 4), np.float32)).realize()
    b = tr.tensor(np.zeros((4, 4), np.float32)).realize()
    for step in range(3):  # traced with two tensors, replayed
        assert write_then_read(a, b, tr.dynamic(step)).item() == 0.0
    np.testing.assert_array_equal(a.numpy()[:3], 1.0)
    # x and y the same tensor (a signature of its own): y is x, so it shows the write, as in numpy
    for step in range(3):
        c = tr.tensor(np.full((4, 4), 2.0, np.float32)).realize()
        assert write_then_read(c, c, tr.dynamic(step)).item() == 12 * 2.0 + 4 * 1.0
        want = np.full((4, 4), 2.0, np.float32)
        want[step] = 1.0
        np.testing.assert_array_equal(c.numpy(), want)


def test_a_jitted_decoder_step_keeps_its_caches_in_place() -> None:
    """examples/llama.py's step_into_jit: the caches keep their buffers from token to token, logits as the lazy step's."""
    from examples import llama as L

    cfg = L.LlamaConfig("LlamaForCausalLM", 64, 32, 2, 4, 2, 8, 48, 1e-5, max_positions=32)
    w = L.random_weights(cfg, 0, scale=0.2)
    model = L.Llama(cfg, L.check_weights(w, cfg, "tiny", tr.float32), 32, tr.float32)
    prompt = tr.tensor(np.array([[3, 1, 4, 1]], np.int32))
    out = model.prefill_jit(prompt, *model.empty_cache().tensors())
    cache = list(out[2:])
    reference = L.KVCache.from_tensors([c.copy() for c in cache], 4)
    token = int(out[1].numpy()[0])
    kept = []
    for pos in range(4, 10):
        ids = tr.tensor(np.array([[token]], np.int32))
        logits, nxt = model.step_into_jit(ids, tr.dynamic(pos), *cache)
        want, _ = model.step_lazy(ids, pos, reference)
        np.testing.assert_allclose(logits.numpy(), want.numpy(), rtol=1e-4, atol=1e-5)
        kept.append([id(_buffer(c)) for c in cache])
        token = int(nxt.numpy()[0])
    assert kept[2:] == [kept[2]] * len(kept[2:])
    for c, r in zip(cache, reference.tensors(), strict=True):
        np.testing.assert_allclose(c.numpy()[:, :, :10], r.numpy()[:, :, :10], rtol=1e-5, atol=1e-6)


def test_a_replay_in_place_keeps_the_value_but_not_its_started_read(rng: np.random.Generator) -> None:
    """A donated argument written in its own buffer keeps its Lazy (no new value object per replay),
    unless a read of the old value was started (copy_to_host_async): that read belongs to the old
    value, so the argument is rebound, and the next numpy() reads the new one."""
    start = rng.standard_normal((16, 8)).astype(np.float32)
    cache, want = tr.tensor(start.copy()).realize(), start.copy()
    for step in range(3):  # the traced call and the first replays
        append(cache, _row(step + 1.0), tr.dynamic(step))
        want[step] = step + 1.0
    kept = cache._lazy
    append(cache, _row(4.0), tr.dynamic(3))
    want[3] = 4.0
    assert cache._lazy is kept, "written in place: the same value object, now holding the result"
    np.testing.assert_array_equal(cache.numpy(), want)
    cache.copy_to_host_async()  # a read of this value under way...
    append(cache, _row(5.0), tr.dynamic(4))  # ...while a replay overwrites it
    want[4] = 5.0
    assert cache._lazy is not kept
    np.testing.assert_array_equal(cache.numpy(), want)
