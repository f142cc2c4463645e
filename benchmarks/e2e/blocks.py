"""Interleaved timing: every contender runs a block of calls in turn, so all see the same GPU clocks.

The H200 drops to idle clocks whenever it waits for the host, and climbs back only after a
while of steady work; a contender timed alone after another one inherits whatever clocks the
other left. So the contenders take turns: a round is one block of calls of each, and the
rounds repeat. Warm-up rounds repeat until every contender's block median is within `tol`
of its previous block's (at least `min_warm` rounds, at most `max_warm`); then `timed`
rounds are kept. A time budget caps both phases (at least one timed round always runs).
Before each block the garbage of earlier blocks is collected (untimed), so no contender pays
for a collection of another's objects; what a block's own calls leave is collected during it,
as in a user's loop.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Contender:
    """One way of doing the user's call; `call()` does it once, read-back included."""

    name: str
    call: Callable[[], Any]
    block: int = 8  # calls per block
    prepare: Callable[[int], None] | None = None  # before a block, untimed: make room for `block` calls
    samples: list[float] = field(default_factory=list)  # ms, timed rounds only
    block_medians: list[float] = field(default_factory=list)  # ms, every round, warm-up included
    compiles: int = 0  # programs compiled during the timed rounds

    def run_block(self, keep: bool) -> None:
        if self.prepare is not None:
            self.prepare(self.block)
        gc.collect()  # not this block's garbage: the others' (and its own preparation's)
        before = _compiled()
        times = []
        for _ in range(self.block):
            t0 = time.perf_counter()
            self.call()
            times.append((time.perf_counter() - t0) * 1e3)
        self.block_medians.append(statistics.median(times))
        if keep:
            self.samples.extend(times)
            self.compiles += _compiled() - before


@dataclass
class Schedule:
    """How long to warm up and time; `budget_s` caps the whole interleaved run."""

    min_warm: int = 2
    max_warm: int = 8
    timed: int = 5
    tol: float = 0.05
    budget_s: float = 60.0


@dataclass
class Outcome:
    warm_rounds: int
    settled: bool
    timed_rounds: int
    seconds: float


def _compiled() -> int:
    """Programs wgjit has compiled so far (its pass pipeline ran), from tracer.realize's counters."""
    from tracer.realize import stats

    return int(stats.get("programs_compiled", 0))


def _settled(contenders: list[Contender], tol: float) -> bool:
    for c in contenders:
        if len(c.block_medians) < 2:
            return False
        last, before = c.block_medians[-1], c.block_medians[-2]
        if abs(last - before) > tol * before:
            return False
    return True


def interleave(contenders: list[Contender], schedule: Schedule, log: Callable[[str], None] = print) -> Outcome:
    """Warm up until settled, then time `schedule.timed` rounds; each round runs one block of each contender."""
    t0 = time.perf_counter()
    warm = 0
    settled = False
    while warm < schedule.max_warm:
        for c in contenders:
            c.run_block(keep=False)
        warm += 1
        settled = _settled(contenders, schedule.tol)
        if warm >= schedule.min_warm and settled:
            break
        if time.perf_counter() - t0 > schedule.budget_s / 2:
            break
    timed = 0
    while timed < schedule.timed:
        for c in contenders:
            c.run_block(keep=True)
        timed += 1
        if time.perf_counter() - t0 > schedule.budget_s:
            break
    outcome = Outcome(warm, settled, timed, time.perf_counter() - t0)
    log(
        f"    {warm} warm-up rounds ({'settled' if settled else 'NOT settled'}), {timed} timed, "
        f"{outcome.seconds:.1f} s: "
        + ", ".join(f"{c.name} {statistics.median(c.samples):.3f} ms" for c in contenders if c.samples)
    )
    return outcome


def spread_pct(samples: list[float]) -> float:
    """Interquartile range over the median, in percent."""
    if len(samples) < 4:
        return 100.0 * (max(samples) - min(samples)) / max(statistics.median(samples), 1e-12)
    q1, med, q3 = statistics.quantiles(samples, n=4)
    return 100.0 * (q3 - q1) / max(statistics.median(samples), 1e-12)
