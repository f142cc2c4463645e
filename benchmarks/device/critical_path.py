"""The host's stretch of a call that the GPU waits for, stamp by stamp (GPU machine, ~1 min a case).

    python -m benchmarks.device.critical_path [--cases 12L,minilm] [--calls 200]

In a loop that reads each result back before the next call (the e2e loops, benchmarks/e2e), the GPU
is idle from the end of one call's read-back until the next call's first submission: every microsecond
of Python on that stretch is wall time. backend_wgpu.timeline measures the stretch whole ("host after
read" + "entry>1st submit"); this splits it. The functions on the path are wrapped (for the measured
calls only) to note the time each is first entered after the read-back returned, so each row is
"microseconds after the last read returned"; wrapped durations of the functions that run once per call
follow. A wrapper adds ~0.2 us per stamp. Cases are timeline's (`minilm`: forward_jit at 32x128 with the
real model; `12L`, `1B`, `tiny`: JitDecode, the step then the next id read back).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import statistics
import time
from collections.abc import Callable
from typing import Any

from benchmarks.device.timeline import decoder_case, minilm_case

_ns = time.perf_counter_ns


class Stamps:
    """First-entry times of wrapped functions after a mark, and the durations of others."""

    def __init__(self) -> None:
        self.mark = 0
        self.first: dict[str, int] = {}
        self.spent: dict[str, int] = {}
        self._undo: list[tuple[Any, str, Any]] = []

    def entered(self, owner: Any, name: str, label: str) -> None:
        original = getattr(owner, name, None)
        if original is None:  # another version of the code: no such stage
            return

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self.first.setdefault(label, _ns())
            return original(*args, **kwargs)

        self._swap(owner, name, original, wrapper)

    def returned(self, owner: Any, name: str, label: str) -> None:
        """Note when `name` first returns after the mark (and its time spent, summed over the call)."""
        original = getattr(owner, name, None)
        if original is None:
            return

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t = _ns()
            out = original(*args, **kwargs)
            now = _ns()
            self.first.setdefault(label, now)
            self.spent[label] = self.spent.get(label, 0) + now - t
            return out

        self._swap(owner, name, original, wrapper)

    def _swap(self, owner: Any, name: str, original: Any, wrapper: Any) -> None:
        self._undo.append((owner, name, original))
        setattr(owner, name, wrapper)

    def undo(self) -> None:
        for owner, name, original in reversed(self._undo):
            setattr(owner, name, original)
        self._undo.clear()


def install(stamps: Stamps) -> None:
    import backend_wgpu.device as device
    import backend_wgpu.program as program
    import tracer
    import tracer.arg_staging as staging

    jit = importlib.import_module("tracer.jit")  # the module (tracer.jit is also the decorator's name)
    stamps.entered(tracer, "tensor", "a tr.tensor entered")
    stamps.entered(jit.JitFunction, "__call__", "b jit call")
    stamps.returned(jit, "fast_key", "c fast key")
    stamps.returned(jit.Trace, "bind", "d bound")
    stamps.returned(jit, "_protect_shared_values", "e donated checked")
    stamps.entered(program.Program, "run", "f Program.run")
    stamps.returned(program.Program, "_runtime_words", "g runtime words")  # before backend_wgpu.runtime_fields
    try:
        from backend_wgpu.runtime_fields import RuntimeFields

        stamps.returned(RuntimeFields, "words", "g runtime words")
    except ImportError:
        pass
    stamps.returned(program.Program, "_output_buffers", "h output buffers")
    stamps.returned(program.Program, "_plan", "i plan")
    stamps.returned(program, "_SUBMIT", "j 1st submit returned")
    stamps.returned(jit.Trace, "replay", "k replay returned")
    stamps.returned(device.Device, "start_reads", "l read copy submitted")
    stamps.returned(device.Device, "_wait_raw_map", "m map waited")
    stamps.returned(staging.ArgumentStaging, "write", "staged arguments written")
    stamps.returned(device.Device, "write", "queue writes (device.write)")


def measure(
    case: Any, calls: int, warm_s: float, settle_s: float = 0.0
) -> tuple[dict[str, float], dict[str, float], float]:
    """(median us after the read per stamp, median us spent per wrapped function, median wall ms per call).
    Each stamp's median is taken apart: medians of stages that follow one another need not be in order."""
    rows, spent, walls = measure_calls(case, calls, warm_s, settle_s)
    return _medians(rows), _medians(spent), statistics.median(walls) * 1e3


def measure_calls(
    case: Any, calls: int, warm_s: float, settle_s: float = 0.0
) -> tuple[list[dict[str, float]], list[dict[str, float]], list[float]]:
    """Per measured call: us after the read per stamp, and us spent per wrapped function; the unwrapped
    calls' wall seconds."""
    import backend_wgpu.device as device

    end = time.perf_counter() + warm_s
    while time.perf_counter() < end:
        case.call()
    walls = []
    for _ in range(calls):
        t = time.perf_counter()
        case.call()
        walls.append(time.perf_counter() - t)
    stamps = Stamps()
    install(stamps)
    read_array = device.Device.read_array

    def marked(self: Any, *args: Any, **kwargs: Any) -> Any:  # the mark: a tensor's read-back returned
        out = read_array(self, *args, **kwargs)
        stamps.mark = _ns()
        return out

    device.Device.read_array = marked  # type: ignore[method-assign]
    rows: list[dict[str, float]] = []
    spent: list[dict[str, float]] = []
    try:
        case.call()
        for _ in range(calls):
            if settle_s:  # a CPU adapter's threads finish their work first (they share the cores)
                time.sleep(settle_s)
                stamps.mark = _ns()
            mark = stamps.mark
            stamps.first.clear()
            stamps.spent.clear()
            case.call()
            rows.append({k: (v - mark) / 1e3 for k, v in stamps.first.items() if v >= mark})
            spent.append({k: v / 1e3 for k, v in stamps.spent.items()})
    finally:
        device.Device.read_array = read_array  # type: ignore[method-assign]
        stamps.undo()
    return rows, spent, walls


def _medians(rows: list[dict[str, float]]) -> dict[str, float]:
    keys = sorted({k for r in rows for k in r})
    return {k: statistics.median(r[k] for r in rows if k in r) for k in keys}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="12L,minilm")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--warm", type=float, default=2.0, help="seconds of warm-up calls per case")
    parser.add_argument(
        "--settle", type=float, default=0.0, help="ms to sleep between calls, the mark moved after it (CPU adapters)"
    )
    args = parser.parse_args(argv)
    from backend_wgpu import get_device

    dev = get_device()
    print(f"critical_path on {dev.caps.name} ({dev.caps.backend}), {args.calls} calls per case")
    build: dict[str, Callable[[], Any]] = {"minilm": lambda: minilm_case("32x128")}
    for name in args.cases.split(","):
        case = build[name]() if name in build else decoder_case(name)
        before = dev.stats["runs_prerecorded"], 0
        after, spent, wall = measure(case, args.calls, args.warm, args.settle / 1e3)
        recorded = dev.stats["runs_prerecorded"] - before[0]
        print(f"\n{case.name}: wall {wall:.3f} ms per call (unwrapped); runs submitted as recorded ahead: {recorded}")
        print("us after the last read returned:")
        for k, v in after.items():
            print(f"  {k:32s} {v:9.1f}")
        print("  us spent per call in:")
        for k, v in spent.items():
            print(f"  {k:32s} {v:9.1f}")


if __name__ == "__main__":
    main()
