"""Profiling recorded programs, and where a whole script's GPU time went by op type.

Each distinct program is timed once (backend_wgpu.profile: one compute pass per kernel
with timestamp queries, or the wall clock where the adapter has none); a script's total is
estimated as each program's kernel time times the number of times the script realized it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from backend_wgpu.profile import Profile
from tracer.inspect.record import RecordedProgram


def profile_programs(
    programs: list[RecordedProgram], repeats: int = 3, progress: Callable[[str], None] | None = None
) -> None:
    """Time every recorded program (zero-filled inputs), storing each Profile on its record."""
    for rec in programs:
        if progress is not None:
            progress(f"profiling program {rec.index} ({len(rec.program.dispatches)} dispatches)")
        rec.profile = rec.program.profile(repeats=repeats)


def op_shares(programs: list[RecordedProgram]) -> list[tuple[str, float, float]]:
    """(op, estimated seconds over the run, share) per op type, largest first, from profiled records."""
    totals: dict[str, float] = {}
    for rec in programs:
        if rec.profile is None:
            continue
        for k in rec.profile.kernels:
            totals[k.op] = totals.get(k.op, 0.0) + k.seconds * rec.realizations
    whole = sum(totals.values()) or 1.0
    return sorted(((op, s, s / whole) for op, s in totals.items()), key=lambda t: -t[1])


def clocks(programs: list[RecordedProgram]) -> set[str]:
    return {rec.profile.clock for rec in programs if rec.profile is not None}


def stderr_progress(prefix: str) -> Callable[[str], None]:
    def say(line: str) -> None:
        print(f"[{prefix}] {line}", file=sys.stderr, flush=True)

    return say


__all__ = ["Profile", "clocks", "op_shares", "profile_programs", "stderr_progress"]
