"""A replay's next run recorded while the host waits for a read-back (backend_wgpu.program's _record_next):
submitted only when the run's plan is the one it was recorded for, and the values always numpy's."""

from __future__ import annotations

import gc
import weakref

import numpy as np

import tracer as tr
from backend_wgpu import get_device
from backend_wgpu.device import RawMap
from tests.helpers import assert_close


def _layer(x: tr.Tensor, w: tr.Tensor, b: tr.Tensor) -> tr.Tensor:
    return tr.maximum(x @ w + b, 0.0) * 0.5


def _program(fn: tr.jit) -> object:
    (trace,) = [t for t in fn.traces.values() if t.program is not None]
    return trace.program


def _setup(seed: int) -> tuple[np.random.Generator, np.ndarray, np.ndarray, tr.Tensor, tr.Tensor, tr.jit]:
    """A generator, the layer's weight and bias (numpy and wgjit) and a fresh jitted step."""
    rng = np.random.default_rng(seed)
    w_np = rng.standard_normal((16, 8)).astype(np.float32)
    b_np = rng.standard_normal(8).astype(np.float32)
    return rng, w_np, b_np, tr.tensor(w_np), tr.tensor(b_np), tr.jit(_layer)


def test_a_recorded_run_is_submitted_when_its_plan_comes_and_gives_numpy_values() -> None:
    rng, w_np, b_np, w, b, step = _setup(0)
    dev = get_device()
    for _ in range(4):  # traced, replayed (a full bind, then the fast one): the plans exist
        x = rng.standard_normal((4, 16)).astype(np.float32)
        assert_close(step(tr.tensor(x), w, b).numpy(), np.maximum(x @ w_np + b_np, 0) * 0.5)
    program = _program(step)
    used = dev.stats["runs_prerecorded"]
    for i in range(4):  # a loop that drops each result: the same plan again, recorded ahead each time
        program._record_next()  # what a read-back that finds the GPU busy does (Device.when_reading)
        assert program._recorded is not None
        x = rng.standard_normal((4, 16)).astype(np.float32)
        assert_close(step(tr.tensor(x), w, b).numpy(), np.maximum(x @ w_np + b_np, 0) * 0.5)
        assert dev.stats["runs_prerecorded"] == used + i + 1
        # (the read-back may have recorded the next run already, when it found the GPU still busy)


def test_a_recorded_run_for_another_plan_is_released_not_submitted() -> None:
    rng, w_np, b_np, w, b, step = _setup(1)
    xs = [rng.standard_normal((4, 16)).astype(np.float32) for _ in range(6)]
    want = [np.maximum(x @ w_np + b_np, 0) * 0.5 for x in xs]
    for _ in range(2):
        for x, y in zip(xs[:2], want[:2], strict=True):
            assert_close(step(tr.tensor(x), w, b).numpy(), y)
    program = _program(step)
    dev = get_device()
    used = dev.stats["runs_prerecorded"]
    program._record_next()
    kept = [step(tr.tensor(x), w, b) for x in xs[2:]]  # results held: other output buffers, other plans
    assert dev.stats["runs_prerecorded"] <= used + 1  # at most the first of them was the plan recorded for
    assert program._recorded is None and not program._unsubmitted
    for got, y in zip(kept, want[2:], strict=True):
        assert_close(got.numpy(), y)


def test_a_replaced_weight_never_runs_the_commands_recorded_for_the_old_one() -> None:
    rng = np.random.default_rng(2)
    w_np = rng.standard_normal((16, 8)).astype(np.float32)
    b_np = np.zeros(8, np.float32)
    step = tr.jit(_layer)
    w, b = tr.tensor(w_np), tr.tensor(b_np)
    x = rng.standard_normal((4, 16)).astype(np.float32)
    for _ in range(4):
        step(tr.tensor(x), w, b).numpy()
    _program(step)._record_next()
    assert _program(step)._recorded is not None
    w2_np = -w_np
    w = tr.tensor(w2_np)  # a new weight: another buffer, so another plan
    gc.collect()
    assert_close(step(tr.tensor(x), w, b).numpy(), np.maximum(x @ w2_np, 0) * 0.5)


def test_work_while_reading_runs_once_and_only_while_the_gpu_is_busy() -> None:
    dev = get_device()
    ran: list[int] = []

    class Task:
        def __call__(self) -> None:
            ran.append(1)

    task = Task()
    ref = weakref.ref(task)
    dev.when_reading(ref)
    dev.when_reading(ref)  # the same task once
    busy = RawMap()  # a map nobody completes: the GPU "still busy"
    dev._work_while_reading(busy)
    assert ran == [1]
    dev._work_while_reading(busy)  # done once: not again
    assert ran == [1]
    dev.when_reading(ref)
    done = RawMap()
    done.status = 0  # the read's copy is done: the task is dropped, not run
    dev._work_while_reading(done)
    assert ran == [1] and not dev._while_reading
    gone = Task()
    dev.when_reading(weakref.ref(gone))
    del gone
    dev._work_while_reading(busy)  # a dead reference is skipped
    assert ran == [1]


def test_recorded_runs_read_the_runtime_integers_written_just_before() -> None:
    """A decode-like step at a runtime position: each call writes the uniform (the position) and its
    argument, then submits the commands recorded during the last read; every token equals numpy's."""
    rng = np.random.default_rng(3)
    cache_np = np.zeros((16, 4), np.float32)
    cache = tr.tensor(cache_np)
    w_np = rng.standard_normal((4, 4)).astype(np.float32)
    w = tr.tensor(w_np)

    @tr.jit
    def step(row: tr.Tensor, pos: object, cache: tr.Tensor) -> tuple[tr.Tensor, tr.Tensor]:
        cache.index_write(row, (pos, 0))
        return cache[pos] @ w + cache.sum(axis=0), cache

    dev = get_device()
    used = dev.stats["runs_prerecorded"]
    for pos in range(12):
        row = rng.standard_normal((1, 4)).astype(np.float32)
        if pos >= 4:  # the plans exist: record the next run as a busy read-back would
            for trace in step.traces.values():
                if trace.program is not None:
                    trace.program._record_next()
        out, cache = step(tr.tensor(row), tr.dynamic(pos), cache)
        cache_np[pos] = row[0]
        assert_close(out.numpy(), cache_np[pos] @ w_np + cache_np.sum(axis=0), rtol=1e-5, atol=1e-5)
    assert dev.stats["runs_prerecorded"] > used  # the recorded commands ran (the values above say they were right)
