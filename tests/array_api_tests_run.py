"""Run the data-apis array-api-tests suite against wgjit's namespace (tracer/array_api.py).

    python tests/array_api_tests_run.py PATH/TO/array-api-tests [pytest arguments...]

PATH is a checkout of https://github.com/data-apis/array-api-tests with its `array-api`
submodule; wgjit was checked at commit 914124a, the last before the suite began to assume
complex dtypes at import (`widest_complex_dtype`, PR #430); wgjit has none. The suite's code
is not part of this repository.

The suite reads a few dtypes wgjit cannot store (float64, int64, complex64...) as attributes
of the namespace; they are given here as placeholders equal only to themselves, and
ARRAY_API_TESTS_SKIP_DTYPES keeps the suite from drawing them. The tests wgjit does not pass
are listed, each under a comment saying why, in tests/array_api_skips.txt.

Last runs (2026-12-01, lavapipe, suite 914124a with array-api 5f847a3, hypothesis 6.170):
    python tests/array_api_tests_run.py ../array-api-tests --max-examples=5 --derandomize
526 passed, 820 skipped (728 by the skips file, 609 of those the float64 special cases; the
rest the suite's own: no linalg/fft, 2025.12 tests, its "flaky" marks), 0 failed, 0 xfail; the
same with --max-examples=50 (not derandomized), which found the take/vecdot/expand_dims bugs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
ABSENT = ("int8", "int16", "int64", "uint8", "uint16", "uint64", "float64", "complex64", "complex128")


class Absent:
    """A dtype wgjit does not have: equal only to itself, so the suite's dtype tables stay consistent."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<no {self.name} in wgjit>"


def namespace() -> types.ModuleType:
    """tracer.array_api, with placeholders for the dtypes the suite names but wgjit lacks."""
    import tracer.array_api as xp

    ns = types.ModuleType("wgjit_array_api")
    ns.__dict__.update({k: v for k, v in vars(xp).items() if not k.startswith("__") or k == "__array_api_version__"})
    ns.__dict__["__array_namespace_info__"] = xp.__array_namespace_info__
    for name in ABSENT:
        setattr(ns, name, Absent(name))
    return ns


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    suite = Path(sys.argv[1]).resolve()
    env = dict(os.environ)
    env["ARRAY_API_TESTS_MODULE"] = "exec('import array_api_tests_run as r; xp = r.namespace()')"
    env["ARRAY_API_TESTS_VERSION"] = "2024.12"
    env["ARRAY_API_TESTS_SKIP_DTYPES"] = ",".join(ABSENT)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(HERE.parent), env.get("PYTHONPATH", "")])
    env.setdefault("XDG_RUNTIME_DIR", "/tmp")
    extra = sys.argv[2:]
    paths = [] if any(a.startswith("array_api_tests") for a in extra) else ["array_api_tests"]
    args = [sys.executable, "-m", "pytest", *paths, "-p", "no:cacheprovider", "--disable-deadline",
            f"--skips-file={HERE / 'array_api_skips.txt'}", *extra]  # fmt: skip
    return subprocess.call(args, cwd=suite, env=env)


if __name__ == "__main__":
    sys.exit(main())
