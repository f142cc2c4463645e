"""The WGJIT_* environment variables that hold numbers (README: Knobs), read with errors that name them."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

from ir.errors import SettingError

N = TypeVar("N", int, float)


def env_int(name: str, default: int) -> int:
    """The integer in environment variable `name` (`default` when unset or empty)."""
    return _env_number(name, default, int, "an integer")


def env_float(name: str, default: float) -> float:
    """The number in environment variable `name` (`default` when unset or empty)."""
    return _env_number(name, default, float, "a number")


def _env_number(name: str, default: N, parse: Callable[[str], N], what: str) -> N:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return parse(raw)
    except ValueError:
        raise SettingError(f"{name}={raw!r}: expected {what} (README: Knobs)") from None
