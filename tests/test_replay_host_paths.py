"""The shortcuts of a `@tr.jit` replay's host path, each made to face what it must notice, against numpy.

On a replay whose captured tensors are unchanged (tracer.jit._bind_fast), the argument buffers
are checked all at once and only those without a buffer (host data, pending values) go through
the full lookup; repeated buffers among the donated arguments are looked for among the
argument inputs and the ids the last full bind kept of the captured ones (_Bound.fixed_ids);
the donated arguments are tested for being kept in place all at once (Trace._rebind); the
program checks the devices of the argument inputs alone and keys its plan by their buffers and
offsets (Program._run_locked, Program._plan).
"""

from __future__ import annotations

import numpy as np
import pytest

import tracer as tr

pytestmark = pytest.mark.gpu


def _trace_of(fn: tr.jit) -> object:
    (trace,) = fn.traces.values()
    return trace


def test_a_donated_argument_that_is_also_a_captured_value_is_copied():
    """The argument written into is the very tensor the function also reads as a capture: its buffer is
    another input of the call (found through the captured buffers' ids), so the program writes into a copy."""
    rng = np.random.default_rng(1)
    wn = rng.standard_normal((8, 4)).astype(np.float32)
    w = tr.tensor(wn.copy()).realize()

    @tr.jit
    def f(cache, row, pos):
        cache.index_write(row, (pos, 0))
        return w + cache.sum() * 0.0, cache.sum(-1)  # w read after the write (it depends on the written cache)

    cn = rng.standard_normal((8, 4)).astype(np.float32)
    c = tr.tensor(cn.copy()).realize()
    for step in range(3):  # traced, then replayed through the fast bind
        row = np.full((1, 4), step + 1.0, np.float32)
        got_w, sums = f(c, tr.tensor(row), tr.dynamic(step))
        cn[step] = row[0]
        np.testing.assert_array_equal(got_w.numpy(), wn)
        np.testing.assert_allclose(sums.numpy(), cn.sum(-1), rtol=1e-5, atol=1e-5)
    w.index_write(tr.tensor(np.full((1, 4), 9.0, np.float32)), (7, 0))  # a new value, not pinned: full bind
    wn[7] = 9.0
    got_w, _ = f(c, tr.tensor(np.zeros((1, 4), np.float32)), tr.dynamic(3))
    cn[3] = 0.0
    np.testing.assert_array_equal(got_w.numpy(), wn)
    for step in range(3):  # now w itself is the argument written into (the first call on the fast bind)
        row = np.full((1, 4), -1.0 - step, np.float32)
        before = wn.copy()
        got_w, sums = f(w, tr.tensor(row), tr.dynamic(step))
        wn[step] = row[0]
        np.testing.assert_array_equal(got_w.numpy(), before)  # the capture read as it was when called
        np.testing.assert_allclose(sums.numpy(), wn.sum(-1), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(w.numpy(), wn)
        c_now = c.numpy()
        np.testing.assert_array_equal(c_now, cn)  # the other cache untouched


def test_the_same_tensor_as_donated_and_read_argument_on_replays():
    @tr.jit
    def f(x, y, pos):
        total = y.sum(-1)
        x.index_write(tr.full((1, 4), 5.0), (pos, 0))
        return total, y * 1.0

    a = tr.tensor(np.arange(16, dtype=np.float32).reshape(4, 4)).realize()
    want = a.numpy()
    for step in range(4):  # x and y the same tensor: one trace, replayed
        before = want.copy()
        total, ycopy = f(a, a, tr.dynamic(step))
        want[step] = 5.0
        np.testing.assert_allclose(total.numpy(), before.sum(-1), rtol=1e-6)  # read before the write
        np.testing.assert_array_equal(ycopy.numpy(), want)  # y is x: after the write it shows it, as in numpy
        np.testing.assert_array_equal(a.numpy(), want)
    assert f.trace_count == 1


def test_staged_and_pending_arguments_beside_realized_ones():
    """Host data (staged), a pending value and realized tensors in one call: only the first two are looked up."""
    rng = np.random.default_rng(2)
    table = rng.standard_normal((10, 4)).astype(np.float32)
    emb = tr.tensor(table)

    @tr.jit
    def f(ids, x, scale, cache, pos):
        row = emb[ids] * scale + x
        cache.index_write(row, (pos, 0))
        return cache.sum(0)

    cache = tr.tensor(np.zeros((6, 4), np.float32)).realize()
    cn = np.zeros((6, 4), np.float32)
    x = tr.tensor(rng.standard_normal((1, 4)).astype(np.float32)).realize()
    for step in range(6):
        tok = int(rng.integers(0, 10))
        sn = rng.standard_normal((1, 1)).astype(np.float32)
        scale = tr.tensor(sn) + 0.0 if step % 2 else tr.tensor(sn)  # pending on odd steps, host data on even
        out = f(tr.tensor(np.array([tok], np.int32)), x, scale, cache, tr.dynamic(step))
        cn[step] = table[tok] * sn[0, 0] + x.numpy()[0]
        np.testing.assert_allclose(out.numpy(), cn.sum(0), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(cache.numpy(), cn, rtol=1e-6, atol=1e-6)
    assert f.trace_count == 1


def test_two_staged_arguments_in_one_buffer_keep_their_places():
    """Both host arguments live in the trace's one staging buffer at different offsets: the plan is keyed by both."""

    @tr.jit
    def f(a, b):
        return a - b

    rng = np.random.default_rng(3)
    for _ in range(5):
        an = rng.standard_normal(8).astype(np.float32)
        bn = rng.standard_normal(8).astype(np.float32)
        np.testing.assert_array_equal(f(tr.tensor(an), tr.tensor(bn)).numpy(), an - bn)
        np.testing.assert_array_equal(f(tr.tensor(bn), tr.tensor(an)).numpy(), bn - an)


@tr.jit
def _append_all(c0, c1, c2, row, pos):
    for c in (c0, c1, c2):
        c.index_write(row, (pos, 0))
    return c0.sum() + c1.sum() + c2.sum()


def _caches() -> tuple[list[tr.Tensor], list[np.ndarray]]:
    rng = np.random.default_rng(4)
    host = [rng.standard_normal((8, 4)).astype(np.float32) for _ in range(3)]
    return [tr.tensor(h.copy()).realize() for h in host], host


def _step(caches: list[tr.Tensor], host: list[np.ndarray], step: int) -> None:
    row = np.full((1, 4), step + 0.5, np.float32)
    total = _append_all(*caches, tr.tensor(row), tr.dynamic(step))
    for h in host:
        h[step] = row[0]
    np.testing.assert_allclose(total.numpy(), sum(h.sum() for h in host), rtol=1e-5, atol=1e-4)


def test_caches_kept_in_place_all_at_once_and_one_that_must_not_be():
    caches, host = _caches()
    for step in range(3):
        _step(caches, host, step)
    kept = [c._lazy for c in caches]
    _step(caches, host, 3)
    assert [c._lazy for c in caches] == kept, "written in place: every cache keeps its value object"
    caches[1].copy_to_host_async()  # a read of the middle one's value under way
    _step(caches, host, 4)
    assert caches[0]._lazy is kept[0] and caches[2]._lazy is kept[2]
    assert caches[1]._lazy is not kept[1], "the read belongs to the old value: rebound"
    view = caches[2][5]  # a live view of the last one: rebound, so the view follows the new value
    _step(caches, host, 5)
    np.testing.assert_array_equal(view.numpy(), host[2][5])
    for c, h in zip(caches, host, strict=True):
        np.testing.assert_array_equal(c.numpy(), h)
    del view
    for step in range(6, 8):  # the view gone: all kept again (its dead reference dropped on the way)
        _step(caches, host, step)
    for c, h in zip(caches, host, strict=True):
        np.testing.assert_array_equal(c.numpy(), h)


class _OtherDevice:
    """Stands for a device tr.reset_device() replaced, still alive (check_alive passes)."""

    def check_alive(self) -> None:
        pass


def test_an_input_on_another_device_is_refused_under_a_varying_token():
    """Under `varying`, a run checks the devices of the picked inputs; the others once, when the token's plan is made."""
    from backend_wgpu.device import DeviceBuffer

    w = tr.tensor(np.full((4, 4), 2.0, np.float32))

    @tr.jit
    def f(x):
        return x @ w

    x = tr.tensor(np.eye(4, dtype=np.float32)).realize()
    for _ in range(2):
        np.testing.assert_array_equal(f(x).numpy(), np.full((4, 4), 2.0, np.float32))
    trace = _trace_of(f)
    program = trace.program
    buffers = trace.bind([x])
    trace.fast_bound = None
    arg = next(n for n, i in enumerate(trace.inputs) if type(i).__name__ == "ArgTensor")
    pick = lambda inputs: (inputs[arg],)  # noqa: E731
    token = object()
    program.run(list(buffers), varying=(token, pick))  # the token's plan: every input checked
    elsewhere = [DeviceBuffer(b.buffer, b.nbytes, _OtherDevice(), b.offset, b.size) for b in buffers]
    moved = list(buffers)
    moved[arg] = elsewhere[arg]
    with pytest.raises(tr.DeviceError):
        program.run(moved, varying=(token, pick))  # a picked input
    others = [e if n != arg else b for n, (b, e) in enumerate(zip(buffers, elsewhere, strict=True))]
    with pytest.raises(tr.DeviceError):
        program.run(others, varying=(object(), pick))  # a left-out input, under a token new to the program
    with pytest.raises(tr.DeviceError):
        program.run(others)
    np.testing.assert_array_equal(f(x).numpy(), np.full((4, 4), 2.0, np.float32))


def test_replays_trust_their_last_check_only_while_no_tensor_is_rebound():
    """While no Tensor has been rebound since the last check (tracer.tensor.value_epoch), a replay reuses
    the captured buffers it found then; a rebind of the weight, or of any tensor, makes it look again."""
    from tracer.tensor import value_epoch

    rng = np.random.default_rng(3)
    wn = rng.standard_normal((4, 3)).astype(np.float32)
    w = tr.tensor(wn.copy()).realize()
    other = tr.tensor(np.zeros(3, np.float32)).realize()

    @tr.jit
    def f(x):
        return x @ w

    for step in range(3):
        xn = rng.standard_normal((2, 4)).astype(np.float32)
        np.testing.assert_allclose(f(tr.tensor(xn)).numpy(), xn @ wn, rtol=1e-5, atol=1e-5)
        if step:
            assert _trace_of(f).bound.epoch == value_epoch()  # the replays found nothing rebound
    other += 1.0  # another tensor rebound: the next replay checks, finds w unchanged, keeps its binding
    xn = rng.standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_allclose(f(tr.tensor(xn)).numpy(), xn @ wn, rtol=1e-5, atol=1e-5)
    w += 2.0  # the weight itself rebound: its new value is read
    wn += 2.0
    for _ in range(2):
        xn = rng.standard_normal((2, 4)).astype(np.float32)
        np.testing.assert_allclose(f(tr.tensor(xn)).numpy(), xn @ wn, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(other.numpy(), np.ones(3, np.float32))
    assert f.trace_count == 1


def test_a_captured_tensor_that_dies_is_noticed_without_a_rebind():
    """The captured Tensor is dropped and a new one made in its place (no Tensor rebound, the epoch
    unchanged): the trace must not replay the dead one's buffer."""
    rng = np.random.default_rng(4)
    params = {"w": tr.tensor(rng.standard_normal((4, 3)).astype(np.float32)).realize()}

    @tr.jit
    def f(x):
        return x @ params["w"]

    xn = rng.standard_normal((2, 4)).astype(np.float32)
    for _ in range(2):
        f(tr.tensor(xn)).numpy()
    wn = rng.standard_normal((4, 3)).astype(np.float32)
    params["w"] = tr.tensor(wn).realize()  # the old Tensor and its value die
    np.testing.assert_allclose(f(tr.tensor(xn)).numpy(), xn @ wn, rtol=1e-5, atol=1e-5)


def test_a_replaced_weight_buffer_is_not_kept_by_a_trace():
    """After a replay, rebinding the captured weight frees its old buffer at once (the trace's
    remembered buffers hold only values that live), before the function is called again."""
    import gc
    import weakref

    rng = np.random.default_rng(5)
    w = tr.tensor(rng.standard_normal((4, 3)).astype(np.float32)).realize()

    @tr.jit
    def f(x):
        return x @ w

    xn = rng.standard_normal((2, 4)).astype(np.float32)
    for _ in range(3):
        f(tr.tensor(xn)).numpy()
    old = weakref.ref(w._lazy.buffer)
    w += 1.0
    w.realize()
    gc.collect()
    assert old() is None
