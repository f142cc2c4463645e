"""Long differential fuzzing run outside pytest: every failure is logged and the run goes on.

    python tests/fuzz_run.py N [logdir] [--seconds S]
    python tests/fuzz_run.py replay FILE.pkl     (check one saved program in a fresh process)

`--seconds S` ends the survey after S seconds even before N programs (for a fixed time slot).

Writes one file per failing program (the script that replays it, and the error) and a
summary line every 500 programs. `pytest --fuzz-long` runs the same check under
hypothesis (it stops at the first failure and shrinks it); this driver is for surveys.
"""

from __future__ import annotations

import hashlib
import math
import os
import pickle
import sys
import time
import traceback

from hypothesis import HealthCheck, Phase, given, settings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.strategies import Program, programs  # noqa: E402
from tests.test_fuzz import _has_f16, check_program  # noqa: E402


def _resources() -> str:
    """Host RSS and the sizes of everything wgjit caches (to watch for growth)."""
    import resource

    import wgpu

    from backend_wgpu.device import device_if_created

    realize = sys.modules["tracer.realize"]  # the package exports a function of that name
    from tracer.host import CONSTANTS

    dev = device_if_created()
    counts = wgpu.diagnostics.object_counts.get_dict()
    live = {k: v["count"] for k, v in counts.items() if k in ("Buffer", "BindGroup", "ComputePipeline", "ShaderModule")}
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    pipes = len(dev.pipelines) if dev else 0
    return f"maxrss {rss} MiB, programs {len(realize.cached_programs())}, pipelines {pipes}, constants {len(CONSTANTS)}, wgpu {live}"


class _TimeUp(Exception):
    """Raised inside the hypothesis loop to end a survey at its time limit."""


def main() -> None:
    if sys.argv[1:2] == ["replay"]:
        with open(sys.argv[2], "rb") as f:
            program = pickle.load(f)
        print(program.source())
        check_program(program)
        print("passed")
        return
    args = sys.argv[1:]
    seconds = math.inf
    if "--seconds" in args:
        at = args.index("--seconds")
        seconds = float(args[at + 1])
        del args[at : at + 2]
    n = int(args[0]) if args else 1000
    logdir = args[1] if len(args) > 1 else "/tmp/wgjit-fuzz"
    os.makedirs(logdir, exist_ok=True)
    counts = {"run": 0, "failed": 0}
    kinds: dict[str, int] = {}
    t0 = time.time()

    @settings(
        max_examples=n, deadline=None, database=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck)
    )
    @given(programs(f16=_has_f16()))
    def run(program: Program) -> None:
        if time.time() - t0 > seconds:
            raise _TimeUp
        counts["run"] += 1
        try:
            check_program(program)
        except Exception as e:  # noqa: BLE001  a survey logs every failure and goes on
            counts["failed"] += 1
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            kind = type(e).__name__ + ": " + first.split(";")[0][:90]
            kinds[kind] = kinds.get(kind, 0) + 1
            name = hashlib.sha1(program.source().encode()).hexdigest()[:10]
            with open(os.path.join(logdir, f"fail_{name}.pkl"), "wb") as f:
                pickle.dump(program, f)
            with open(os.path.join(logdir, f"fail_{name}.py"), "w") as f:
                trace = "".join(traceback.format_exception(e))[-4000:]
                f.write(f"{program.source()}\n\n'''\n{str(e)[:600]}\n\n{trace}\n'''\n")
        if counts["run"] % 500 == 0:
            print(
                f"{counts['run']} programs, {counts['failed']} failed, {time.time() - t0:.0f}s, {_resources()}",
                flush=True,
            )

    try:
        run()
    except _TimeUp:
        print(f"time limit of {seconds:.0f}s reached")
    print(f"done: {counts['run']} programs, {counts['failed']} failed, {time.time() - t0:.0f}s")
    for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]):
        print(f"{v:6d}  {k}")


if __name__ == "__main__":
    main()
