"""The invariants a cheap `@tr.jit` replay relies on, each against numpy.

A replay whose captured tensors are unchanged reuses the buffers its last full bind found
(tracer.jit._Bound) and keys its program's plan by that and its argument buffers only
(Program.run's `varying`); outputs come back to the pool by a weak-reference callback; a run
is encoded and submitted through wgpu-native's C functions. These tests change exactly what
those shortcuts must notice.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tracer as tr
from tests.helpers import assert_close

pytestmark = pytest.mark.gpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_captured_weight_written_or_replaced_between_calls_is_seen():
    rng = np.random.default_rng(0)
    wn = rng.standard_normal((6, 5)).astype(np.float32)
    w = tr.tensor(wn)
    b = tr.tensor(np.zeros(5, np.float32))

    @tr.jit
    def f(x):
        return x @ w + b

    xn = rng.standard_normal((3, 6)).astype(np.float32)
    x = tr.tensor(xn)
    for _ in range(3):  # traced, then replayed through the fast bind
        assert_close(f(x).numpy(), xn @ wn, rtol=1e-5, atol=1e-5)
    row = rng.standard_normal((1, 5)).astype(np.float32)
    w.index_write(tr.tensor(row), (2, 0))  # the same Tensor shows a new (pending) value
    wn[2] = row[0]
    for _ in range(3):
        assert_close(f(x).numpy(), xn @ wn, rtol=1e-5, atol=1e-5)
    w += 1.0  # rebound again, to a pending sum
    wn += 1.0
    assert_close(f(x).numpy(), xn @ wn, rtol=1e-5, atol=1e-5)
    b.index_write(tr.tensor(np.full((1,), 3.0, np.float32)), (4,))  # the other captured tensor
    want = xn @ wn
    want[:, 4] += 3.0
    for _ in range(2):
        assert_close(f(x).numpy(), want, rtol=1e-5, atol=1e-5)
    assert f.trace_count == 1


def test_the_bound_cache_does_not_keep_a_replaced_weight_alive():
    """The fast bind remembers captured values by weak reference: a weight replaced in place can be freed."""
    import weakref

    w = tr.tensor(np.full((4, 4), 2.0, np.float32)).realize()

    @tr.jit
    def f(x):
        return x @ w

    x = tr.tensor(np.ones((1, 4), np.float32))
    for _ in range(3):
        assert_close(f(x).numpy(), np.full((1, 4), 8.0, np.float32))
    old = weakref.ref(w._lazy)
    w *= 0.5  # the Tensor shows a new value; nothing else holds the old one
    w.realize()
    gc.collect()
    assert old() is None
    assert_close(f(x).numpy(), np.full((1, 4), 4.0, np.float32))
    assert_close(f(x).numpy(), np.full((1, 4), 4.0, np.float32))


def test_a_captured_weight_shown_by_two_tensors_follows_either():
    """Two Tensors show one captured value (an argument rebinding does this): a write through either is seen."""
    base = tr.tensor(np.ones(4, np.float32)).realize()
    alias = tr.Tensor(base._lazy)  # a second Tensor showing the same value

    @tr.jit
    def f(x):
        return x * base.sum() + alias.max()

    x = tr.tensor(np.arange(4, dtype=np.float32))
    assert_close(f(x).numpy(), np.arange(4) * 4.0 + 1.0)
    assert_close(f(x).numpy(), np.arange(4) * 4.0 + 1.0)
    alias.index_write(tr.tensor(np.array([5.0], np.float32)), (0,))  # alias moves on, base does not
    retraced_or_replayed = f(x).numpy()  # the two now disagree: the trace no longer holds, so it traces again
    assert_close(retraced_or_replayed, np.arange(4) * 4.0 + 5.0)
    assert_close(f(x).numpy(), np.arange(4) * 4.0 + 5.0)


def test_outputs_held_across_decode_style_calls_are_never_overwritten():
    """Each call's outputs are the next call's arguments (a KV cache): none is overwritten while held."""
    rng = np.random.default_rng(1)
    wn = rng.standard_normal((4, 4)).astype(np.float32) / 2
    w = tr.tensor(wn)

    @tr.jit
    def step(state, token):
        new = (state @ w).tanh() + token
        return new, new.sum()

    state_n = rng.standard_normal((2, 4)).astype(np.float32)
    state = tr.tensor(state_n)
    kept: list[tuple[tr.Tensor, np.ndarray]] = []
    for i in range(8):
        token = np.full((1, 4), i, np.float32)
        state, total = step(state, tr.tensor(token))
        state_n = np.tanh(state_n @ wn) + token
        assert_close(total.numpy(), state_n.sum(), rtol=1e-4, atol=1e-4)
        if i % 3 == 0:
            kept.append((state, state_n.copy()))  # held for good: its buffer must stay out of the pool
        del total
        gc.collect()
    for t, want in kept:
        assert_close(t.numpy(), want, rtol=1e-5, atol=1e-5)
    assert_close(state.numpy(), state_n, rtol=1e-5, atol=1e-5)


def test_new_argument_buffers_each_call_find_the_right_plan():
    """The plan key under a fast bind is the argument buffers: new ones, old ones again, pending ones."""
    w = tr.tensor(np.eye(3, dtype=np.float32) * 2)

    @tr.jit
    def f(a, b):
        return a @ w - b

    rng = np.random.default_rng(2)
    pairs = [
        (rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal((2, 3)).astype(np.float32))
        for _ in range(3)
    ]
    tensors = [(tr.tensor(a).realize(), tr.tensor(b).realize()) for a, b in pairs]
    for order in ([0, 1, 2], [2, 0, 1, 1, 0]):
        for k in order:
            (a, b), (an, bn) = tensors[k], pairs[k]
            assert_close(f(a, b).numpy(), an * 2 - bn, rtol=1e-5, atol=1e-5)
            assert_close(f(b, a).numpy(), bn * 2 - an, rtol=1e-5, atol=1e-5)  # the same buffers swapped
            assert_close(f(a + 1, b).numpy(), (an + 1) * 2 - bn, rtol=1e-5, atol=1e-5)  # a pending argument
            assert_close(f(np.asarray(an), b).numpy(), an * 2 - bn, rtol=1e-5, atol=1e-5)  # host data, staged
    assert f.trace_count == 1


def test_a_dropped_output_is_reused_and_a_held_one_is_not():
    from backend_wgpu import get_device

    w = tr.tensor(np.full((5, 5), 0.5, np.float32))

    @tr.jit
    def f(x):
        return x @ w

    x = tr.tensor(np.ones((9, 5), np.float32))  # a shape no other test uses
    y1 = f(x)
    held = y1._lazy.buffer.buffer
    y2 = f(x)
    assert y2._lazy.buffer.buffer is not held
    dropped = y2._lazy.buffer.buffer
    reused = get_device().stats["outputs_reused"]
    del y2
    gc.collect()
    y3 = f(x)
    assert y3._lazy.buffer.buffer is dropped  # came back to the pool when its tensor died
    assert get_device().stats["outputs_reused"] == reused + 1
    assert_close(y1.numpy(), np.full((9, 5), 2.5, np.float32))
    assert_close(y3.numpy(), np.full((9, 5), 2.5, np.float32))


def test_an_output_freed_while_this_thread_holds_the_pool_lock_comes_back():
    """The garbage collector may free an output inside the pool's locked section: no deadlock, and it is reused."""
    code = textwrap.dedent(
        """
        import gc, os, threading
        import numpy as np, tracer as tr
        from backend_wgpu.program import OUTPUT_POOL
        w = tr.tensor(np.full((3, 3), 1.0, np.float32))
        f = tr.jit(lambda x: x @ w)
        x = tr.tensor(np.ones((11, 3), np.float32))
        f(x)
        held = [f(x)]
        raw = held[0]._lazy.buffer.buffer
        finished = []

        def drop_while_locked():
            with OUTPUT_POOL._lock:  # as if a collection started inside take_all or give_back
                held.clear()  # the output dies here, in this thread, while it holds the lock
                gc.collect()
            finished.append(True)

        t = threading.Thread(target=drop_while_locked, daemon=True)
        t.start()
        t.join(timeout=60)
        if not finished:
            print("deadlock", flush=True)
            os._exit(1)
        y = f(x)
        assert y._lazy.buffer.buffer is raw
        np.testing.assert_allclose(y.numpy(), np.full((11, 3), 3.0, np.float32))
        print("ok")
        """
    )
    done = _run_script(code)
    assert done.returncode == 0 and "ok" in done.stdout, done.stdout + done.stderr


def test_an_encoder_error_submitted_through_c_still_raises():
    """Encoding goes through plain C calls; an invalid dispatch must raise at finish, as wgpu-py's would."""
    code = textwrap.dedent(
        """
        import numpy as np, tracer as tr
        import backend_wgpu.program as P
        w = tr.tensor(np.ones((4, 4), np.float32)).realize()
        f = tr.jit(lambda x: (x @ w).exp())
        x = tr.tensor(np.ones((2, 4), np.float32)).realize()
        f(x).numpy()
        program = next(iter(f.traces.values())).program
        pipeline, group, *_ = next(iter(program._plans.values())).commands[0]
        try:  # past the 65,535 workgroups a dimension allows
            P._submit(program.device, [(pipeline, group, 70000, 1, 1)], [(0, 1)])
        except Exception as e:
            print("raised:", type(e).__name__)
        else:
            print("silent")
        np.testing.assert_allclose(f(x).numpy(), np.exp(np.full((2, 4), 4.0, np.float32)), rtol=1e-5)
        print("ok")
        """
    )
    done = _run_script(code)
    assert "raised: GPUValidationError" in done.stdout and "ok" in done.stdout, done.stdout + done.stderr


def test_growing_submission_chunks_give_the_same_values(device, monkeypatch):
    """SUBMIT_GROWTH: chunks of 1, 2, 4... dispatches: fewer submissions, the same answer."""
    import backend_wgpu.program as program_module

    assert program_module._chunks(10, 1, 2.0) == [(0, 1), (1, 3), (3, 7), (7, 10)]
    assert program_module._chunks(10, 4, 1.0) == [(0, 4), (4, 8), (8, 10)]
    assert program_module._chunks(10, 0, 2.0) == [(0, 10)] and program_module._chunks(0, 16, 2.0) == []
    rng = np.random.default_rng(4)
    a = rng.standard_normal((8, 8), dtype=np.float32) / 3
    w = tr.tensor(a)

    @tr.jit
    def chain(x):
        for _ in range(9):
            x = (x @ w).tanh()
        return x

    x0 = rng.standard_normal((4, 8), dtype=np.float32)
    want = x0
    for _ in range(9):
        want = np.tanh(want @ a)
    x = tr.tensor(x0)
    chain(x).numpy()
    before = device.stats["dispatches"]
    chain(x).numpy()
    n = device.stats["dispatches"] - before
    assert n >= 9
    monkeypatch.setattr(program_module, "SUBMIT_CHUNK", 1)
    monkeypatch.setattr(program_module, "SUBMIT_GROWTH", 2.0)
    monkeypatch.setattr(program_module, "PRERECORD", False)  # encoded as it comes (tests/test_prerecord.py)
    for trace in chain.traces.values():
        trace.program.trim()  # drops a run recorded before
    submits = device.stats["submits"]
    got = chain(x).numpy()
    assert device.stats["submits"] - submits == len(program_module._chunks(n, 1, 2.0)) < n
    assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_reset_device_between_replays():
    """After tr.reset_device() the jitted function traces again on the new device and answers right."""
    code = textwrap.dedent(
        """
        import numpy as np, tracer as tr
        wn = np.arange(12, dtype=np.float32).reshape(4, 3)
        w = tr.tensor(wn)
        f = tr.jit(lambda x: x @ w + 1)
        xn = np.ones((2, 4), np.float32)
        for _ in range(3):
            np.testing.assert_allclose(f(tr.tensor(xn)).numpy(), xn @ wn + 1)
        tr.reset_device()
        try:  # w lived on the old device: refused, not read from a stale buffer
            f(tr.tensor(xn)).numpy()
        except tr.DeviceError:
            print("refused")
        w = tr.tensor(wn * 2)  # the global the function reads: a new tensor on the new device
        for _ in range(3):
            np.testing.assert_allclose(f(tr.tensor(xn)).numpy(), xn @ (wn * 2) + 1)
        print("ok", f.trace_count)
        """
    )
    done = _run_script(code)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "refused" in done.stdout and "ok" in done.stdout


def _run_script(code: str) -> subprocess.CompletedProcess:
    """In a child process: destroying buffers or replacing the device would disturb the other tests."""
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, PYTHONPATH=path, XDG_RUNTIME_DIR=os.environ.get("XDG_RUNTIME_DIR", "/tmp"))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, env=env, cwd=ROOT)
