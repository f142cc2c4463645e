"""The per-user tuning cache: a JSON file of tuned kernel configurations, one table per adapter.

Where: $WGJIT_CACHE_DIR, else $XDG_CACHE_HOME/wgjit, else platformdirs' user cache directory
when platformdirs is installed, else ~/.cache/wgjit; the file is tuning.json there. Each
adapter's table sits under "<adapter name> | <driver> | <backend>", so a driver update or
another GPU starts from the built-in rules. A missing file means no tuning; a file that
cannot be read gives one warning and the built-in rules, never an error. WGJIT_AUTOTUNE=0
ignores the cache. Nothing here imports wgpu: the device loads the table into its caps.
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

from ir.caps import DeviceCaps
from ir.tuning import TunedEntry, TuningTable

FORMAT = 1  # the file's "wgjit_tuning" version; another version is read as no tuning (with a warning)
FILE_NAME = "tuning.json"


def autotune_enabled() -> bool:
    """False when WGJIT_AUTOTUNE=0: the built-in rules only, whatever the cache holds."""
    return os.environ.get("WGJIT_AUTOTUNE", "1").strip().lower() not in ("0", "false", "no", "off")


def cache_dir() -> Path:
    explicit = os.environ.get("WGJIT_CACHE_DIR") or ""
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME") or ""
    if xdg:
        return Path(xdg) / "wgjit"
    try:
        import platformdirs
    except ImportError:
        return Path.home() / ".cache" / "wgjit"
    return Path(platformdirs.user_cache_dir("wgjit", appauthor=False))


def cache_path() -> Path:
    return cache_dir() / FILE_NAME


def adapter_key(caps: DeviceCaps) -> str:
    return f"{caps.name} | {caps.driver} | {caps.backend}"


def _read_file(path: Path) -> dict[str, Any]:
    """The whole file as JSON ({} when absent); raises ValueError when it is not a tuning cache."""
    if not path.exists():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or data.get("wgjit_tuning") != FORMAT or not isinstance(data.get("adapters"), dict):
        raise ValueError(f"not a wgjit tuning cache of format {FORMAT}")
    return data


def load_table(caps: DeviceCaps, path: Path | None = None) -> TuningTable:
    """This adapter's tuned entries from the cache file; an empty table when there are none or it is unreadable."""
    path = path or cache_path()
    if not autotune_enabled():
        return TuningTable()
    try:
        data = _read_file(path)
    except (OSError, ValueError) as e:  # json.JSONDecodeError is a ValueError
        warnings.warn(f"wgjit: ignoring the tuning cache {path} ({e}); the built-in kernel rules apply", stacklevel=2)
        return TuningTable()
    raw = data.get("adapters", {}).get(adapter_key(caps), {}).get("entries", {})
    table = TuningTable(source=str(path))
    bad = 0
    for key, value in raw.items() if isinstance(raw, dict) else ():
        try:
            table = table.with_entry(str(key), TunedEntry.from_json(value))
        except (KeyError, TypeError, ValueError, AttributeError):
            bad += 1
    if bad:
        warnings.warn(f"wgjit: {bad} malformed entries in the tuning cache {path} were ignored", stacklevel=2)
    return table


def save_table(caps: DeviceCaps, table: TuningTable, path: Path | None = None) -> Path:
    """Write this adapter's entries into the cache file (other keys and adapters are kept); returns the path.

    A cache file that cannot be read is replaced (load_table warned about it already).
    """
    path = path or cache_path()
    try:
        data = _read_file(path)
    except (OSError, ValueError):
        data = {}
    adapters = data.get("adapters", {})
    # entries already in the file stay unless `table` has a newer one for their key (a table loaded
    # under WGJIT_AUTOTUNE=0 is empty, and saving it must not forget what was tuned before)
    kept = adapters.get(adapter_key(caps), {}).get("entries", {})
    entries = dict(kept) if isinstance(kept, dict) else {}
    entries.update({k: e.to_json() for k, e in table.entries})
    adapters[adapter_key(caps)] = {"entries": entries}
    out = {"wgjit_tuning": FORMAT, "adapters": adapters}
    path.parent.mkdir(parents=True, exist_ok=True)
    # write a temporary file beside it and rename: a crash never leaves half a file
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tuning-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, sort_keys=True)
    os.replace(tmp, path)
    return path
