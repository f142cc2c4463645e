"""Long use: memory reaches a plateau, caches stay bounded, threads are safe, a lost device
gives a DeviceError and a way back.

What grows with use is bounded: compiled programs (MAX_CACHED_PROGRAMS, and their
temporaries by MAX_CACHED_TEMP_BYTES), pipelines (MAX_CACHED_PIPELINES), cached scalar
constants, the free output buffers programs keep for replays (a byte budget over all
programs, backend_wgpu.program.OUTPUT_POOL; `clear_program_cache()` releases them). Everything else is freed when the tensors that use it are dropped. The
plateau is checked on counts of live wgpu objects and on the python heap, never on time.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import threading
import tracemalloc

import numpy as np
import pytest
import wgpu

import tracer as tr
from backend_wgpu import device as backend_device
from backend_wgpu import get_device
from ir.ops import Op
from tests.long_use_run import step
from tracer.lazy import Lazy

pytestmark = pytest.mark.gpu
realize_mod = sys.modules["tracer.realize"]  # the package exports a function of that name
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def live() -> dict[str, int]:
    gc.collect()
    counts = wgpu.diagnostics.object_counts.get_dict()
    return {k: counts[k]["count"] for k in ("Buffer", "BindGroup", "ComputePipeline")}


def test_memory_plateaus_over_many_realizations(monkeypatch: pytest.MonkeyPatch) -> None:
    # a small program cache reaches its plateau quickly; the workload cycles through more
    # program structures than it holds, so the cache keeps evicting and compiling
    monkeypatch.setattr(realize_mod, "MAX_CACHED_PROGRAMS", 24)
    monkeypatch.setattr(backend_device, "MAX_CACHED_PIPELINES", 16)
    rng = np.random.default_rng(0)
    tracemalloc.start()
    try:
        for i in range(150):  # warm up: caches fill
            step(i, rng)
        base, base_heap = live(), tracemalloc.get_traced_memory()[0]
        for i in range(150, 450):
            step(i, rng)
        end, end_heap = live(), tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(realize_mod.cached_programs()) <= 24 and len(get_device().pipelines) <= 16
    # counts may wobble by what the last few programs hold (temporaries, spare outputs)
    assert end["Buffer"] <= base["Buffer"] + 24, (base, end)
    assert end["BindGroup"] <= base["BindGroup"] + 24, (base, end)
    assert end["ComputePipeline"] <= base["ComputePipeline"] + 24, (base, end)
    assert end_heap <= base_heap + (2 << 20), f"python heap grew {base_heap} -> {end_heap} bytes"


def test_dropped_tensors_free_their_buffers() -> None:
    x = tr.tensor(np.ones((64, 64), np.float32))
    before = live()["Buffer"]
    held = [(x * 2).realize() for _ in range(20)]  # one program, 20 outputs the caller holds
    assert live()["Buffer"] >= before + 20
    del held
    # what stays: x's upload, the constant 2, the program's uniform, up to 4 spare outputs
    assert live()["Buffer"] <= before + 8


def _buffer_bytes() -> int:
    gc.collect()
    return wgpu.diagnostics.object_counts.get_dict()["Buffer"].get("resource_mem", 0)


def test_free_outputs_are_bounded_in_bytes_and_released_on_clear(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 16 item 8: 8 warm programs of large outputs once held 366 MiB after every result was dropped."""
    from backend_wgpu.program import OUTPUT_POOL

    realize_mod.clear_program_cache()
    monkeypatch.setattr(OUTPUT_POOL, "budget", 6 << 20)
    before = _buffer_bytes()
    x = tr.tensor(np.ones((1 << 20,), np.float32))  # 4 MiB
    for i in range(8):  # 8 programs (another constant each: another structure? no, another op), 4 MiB outputs
        ys = [(x * 2).exp() if i % 2 else (x + float(i)).sqrt() for _ in range(3)]
        ys = [y.realize() for y in ys]
        if i == 0:
            np.testing.assert_allclose(ys[0].numpy()[:4], np.sqrt(np.ones(4)))
        for z in (x * 3 + float(i), (x - float(i)).abs(), x.square() + float(i)):
            z.realize()
        del ys, z
    gc.collect()
    assert OUTPUT_POOL.free_bytes <= 6 << 20
    held = _buffer_bytes() - before
    assert held <= (6 << 20) + (12 << 20), f"{held / 2**20:.1f} MiB held after every result was dropped"
    realize_mod.clear_program_cache()
    gc.collect()
    assert OUTPUT_POOL.free_bytes == 0
    assert _buffer_bytes() - before <= (4 << 20) + (1 << 20)  # x itself and a few small buffers


def test_program_cache_is_bounded_by_temporary_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(realize_mod, "MAX_CACHED_TEMP_BYTES", 64 << 10)
    realize_mod.clear_program_cache()
    for n in range(40, 60):  # each shape its own program, each with temporaries of a few KiB
        x = tr.tensor(np.ones((n, 32), np.float32))
        y = ((x @ x.T).softmax(-1) @ x).sum(axis=0)
        np.testing.assert_allclose(y.numpy(), np.full(32, n, np.float32), rtol=1e-4)
        total = sum(p.temp_bytes for p in realize_mod.cached_programs())
        assert total <= 64 << 10 or len(realize_mod.cached_programs()) == 1


def test_pipeline_cache_is_bounded_and_evicted_kernels_still_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backend_device, "MAX_CACHED_PIPELINES", 4)
    realize_mod.clear_program_cache()
    x = tr.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))
    ops = [
        lambda t: t.exp(),
        lambda t: t.sin(),
        lambda t: t.cos(),
        lambda t: t.tanh(),
        lambda t: t.sigmoid(),
        lambda t: t.sum(axis=0),
    ]
    refs = [np.exp, np.sin, np.cos, np.tanh, lambda a: 1 / (1 + np.exp(-a)), lambda a: a.sum(axis=0)]
    for _ in range(2):  # the second round recompiles what the first evicted
        for op, ref in zip(ops, refs, strict=True):
            np.testing.assert_allclose(op(x).numpy(), ref(x.numpy()), rtol=1e-5, atol=1e-6)
            assert len(get_device().pipelines) <= 4
        realize_mod.clear_program_cache()


# --- threads ------------------------------------------------------------------------------------


def test_two_threads_build_and_realize_independent_graphs() -> None:
    """Tracing takes no lock and realization holds one; both threads share a weight and constants."""
    weight = tr.tensor(np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4)).realize()
    w = weight.numpy()
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for i in range(60):
                a = rng.standard_normal((int(rng.integers(1, 9)), 8)).astype(np.float32)
                x = tr.tensor(a)
                y = ((x @ weight) * 2 + 1).relu()  # shared weight, shared cached constants 2 and 1
                z = y.sum(axis=1) if i % 2 else y.softmax(-1)
                want = np.maximum((a @ w) * 2 + 1, 0)
                want = want.sum(axis=1) if i % 2 else np.exp(want - want.max(-1, keepdims=True))
                if i % 2 == 0:
                    want = want / want.sum(-1, keepdims=True)
                np.testing.assert_allclose(z.numpy(), want, rtol=1e-4, atol=1e-5)
        except BaseException as e:  # noqa: BLE001  reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors, errors[0]


def test_graph_walks_survive_a_consumer_added_meanwhile() -> None:
    """Another thread may add a consumer to a shared value while a realization walks it."""
    base = Lazy(Op.INPUT, (), (3,), tr.float32)
    keep = [Lazy(Op.NEG, (base,), (3,), tr.float32) for _ in range(3)]
    walk = iter(base.live_consumers())
    next(walk)
    keep.append(Lazy(Op.ABS, (base,), (3,), tr.float32))  # what the other thread does meanwhile
    assert len(list(walk)) == 2  # the snapshot is unaffected
    assert len(base.live_consumers()) == 4
    keep[0].mark_realized(None)  # realized: reads nothing any more
    del keep[1]  # dropped
    assert base.live_consumers() == keep[1:]


def test_liveness_lists_stay_bounded() -> None:
    """A weight read by many dropped graphs keeps a short list of references, not one per use."""
    w = tr.tensor(np.ones(4, np.float32))
    for _ in range(5000):
        y = (w * 2) + 1
        del y
    assert len(w._lazy.consumers) < 256 and len(w._lazy.handles) == 1
    c = tr.tensor(np.float32(2.0)) * 1  # constants are shared Lazies: a Tensor per use
    const = c._lazy.srcs[1]
    assert len(const.handles) < 256 and len(const.live_handles()) == 0


# --- a lost device --------------------------------------------------------------------------------

LOST_DEVICE_SCRIPT = textwrap.dedent(
    """
    import numpy as np
    import tracer as tr
    from backend_wgpu import get_device

    x = tr.tensor(np.arange(4, dtype=np.float32))
    y = (x * 2).realize()
    host_only = tr.tensor(np.ones(4, np.float32))     # never uploaded
    pending = y + 1                                    # traced before the loss

    @tr.jit
    def double(t):
        return t * 2

    arg = tr.tensor(np.ones(4, np.float32))
    double(arg)
    get_device().device.destroy()                      # what a driver reset looks like to us

    def expect(what, fn, words):
        try:
            fn()
        except tr.DeviceError as e:
            assert all(w in str(e) for w in words), (what, str(e))
            print("DeviceError", what)
        else:
            raise AssertionError(what + ": no DeviceError")

    expect("run", lambda: pending.numpy(), ["lost", "tr.reset_device()"])
    expect("read", lambda: y.numpy(), ["lost"])
    expect("new graph", lambda: (tr.tensor(np.ones(2, np.float32)) * 3).numpy(), ["lost"])
    expect("jit replay", lambda: double(arg), ["lost"])

    tr.reset_device()                                  # the way back
    np.testing.assert_array_equal((tr.tensor(np.arange(3, dtype=np.float32)) * 3).numpy(), [0, 3, 6])
    np.testing.assert_array_equal((host_only + 1).numpy(), [2, 2, 2, 2])   # host data carries over
    np.testing.assert_array_equal(double(tr.tensor(np.ones(4, np.float32))).numpy(), [2, 2, 2, 2])  # traces again
    expect("old tensor", lambda: (y + 1).numpy(), ["tr.reset_device()"])   # its data died with the device
    print("recovered")
    """
)


def run_script(code: str) -> subprocess.CompletedProcess:
    # ROOT in front of the caller's path, which may be where wgpu is installed
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, PYTHONPATH=path, XDG_RUNTIME_DIR=os.environ.get("XDG_RUNTIME_DIR", "/tmp"))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, env=env, cwd=ROOT)


def test_lost_device_raises_device_error_and_reset_recovers() -> None:
    # in a child process: destroying this process's device would break the other tests
    done = run_script(LOST_DEVICE_SCRIPT)  # the timeout also proves nothing hangs
    assert done.returncode == 0, done.stdout + done.stderr
    for what in ("run", "read", "new graph", "jit replay", "old tensor"):
        assert f"DeviceError {what}" in done.stdout
    assert "recovered" in done.stdout


def test_tensors_of_a_replaced_device_are_refused() -> None:
    """One device per process: a tensor realized before tr.reset_device() is not silently mixed in."""
    code = textwrap.dedent(
        """
        import numpy as np, tracer as tr
        old = tr.tensor(np.ones(3, np.float32)).realize()
        tr.reset_device()
        new = tr.tensor(np.ones(3, np.float32)).realize()
        try:
            (old + new).numpy()
        except tr.DeviceError as e:
            print("refused:", e)
        np.testing.assert_array_equal((new * 2).numpy(), [2, 2, 2])
        print("ok")
        """
    )
    done = run_script(code)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "refused:" in done.stdout and "ok" in done.stdout
