"""Tuned kernel choices as plain data: what `wgjit tune` measured on one adapter.

A TuningTable maps a tuning key (kernel family, dtypes, operand layout, shape bucket; made
by passes.select_kernels) to the configuration that won there, with its time, the built-in
rule's configuration and time, and the candidates rejected because they computed a wrong
answer. passes.select_kernels reads it from DeviceCaps.tuning, so the passes stay free of
wgpu; backend_wgpu/autotune.py measures the entries and keeps them in a per-user JSON file.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TunedEntry:
    """The winner for one tuning key, and what it was measured against."""

    config: str  # the winning configuration's name (passes.select_kernels knows what it means)
    seconds: float  # its median GPU time
    builtin: str  # the configuration the built-in rules pick
    builtin_seconds: float
    rejected: tuple[str, ...] = ()  # candidates whose answer differed from numpy's

    def to_json(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "seconds": self.seconds,
            "builtin": self.builtin,
            "builtin_seconds": self.builtin_seconds,
            "rejected": list(self.rejected),
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> TunedEntry:
        """Raises (KeyError, TypeError, ValueError) on a malformed entry; the loader turns that into a warning."""
        return TunedEntry(
            config=str(data["config"]),
            seconds=float(data["seconds"]),
            builtin=str(data["builtin"]),
            builtin_seconds=float(data["builtin_seconds"]),
            rejected=tuple(str(r) for r in data.get("rejected", ())),
        )


@dataclass(frozen=True)
class TuningTable:
    """Tuned entries by key, for one adapter; empty means the built-in rules everywhere."""

    entries: tuple[tuple[str, TunedEntry], ...] = ()
    source: str = field(default="", compare=False)  # the cache file it came from (for explain)

    def get(self, key: str) -> TunedEntry | None:
        for k, e in self.entries:
            if k == key:
                return e
        return None

    def with_entry(self, key: str, entry: TunedEntry) -> TuningTable:
        kept = tuple((k, e) for k, e in self.entries if k != key)
        return TuningTable(tuple(sorted(kept + ((key, entry),))), self.source)

    def digest(self) -> str:
        """A short hash of the winners: programs compiled under different tables differ in it."""
        return self._digest

    @functools.cached_property
    def _digest(self) -> str:  # once per table (entries never change): the program cache asks on every realization
        text = ";".join(f"{k}={e.config}" for k, e in self.entries)
        return hashlib.sha1(text.encode()).hexdigest()[:12] if text else ""

    def __len__(self) -> int:
        return len(self.entries)


def bucket(n: int) -> int:
    """The shape bucket of one dimension: the next power of two (1 for 0 and 1)."""
    return 1 << max(0, (max(n, 1) - 1).bit_length())
