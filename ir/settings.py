"""The WGJIT_* environment variables that hold numbers (README: Knobs), read with errors that name them."""

from __future__ import annotations

import os

from ir.errors import SettingError


def env_int(name: str, default: int) -> int:
    """The integer in environment variable `name` (`default` when unset or empty)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise SettingError(f"{name}={raw!r}: expected an integer (README: Knobs)") from None


def env_float(name: str, default: float) -> float:
    """The number in environment variable `name` (`default` when unset or empty)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise SettingError(f"{name}={raw!r}: expected a number (README: Knobs)") from None
