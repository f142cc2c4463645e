"""Before and after a change, in one device session: `wgjit bench` in two checkouts, interleaved.

    python -m benchmarks.before_after BEFORE_DIR [AFTER_DIR] [--rounds 3] [--suite reduce ...]

BEFORE_DIR is a second checkout of the repository (e.g. `git archive <commit> | tar -x -C
before/`, carried to the device machine with the working tree); AFTER_DIR defaults to this one.
Each round runs the suites (full sizes unless told, no torch) once in BEFORE_DIR, then once in AFTER_DIR,
each in its own process with that checkout first on the path; a case's time is the fastest of
its rounds' medians, so clocks that drift during the session hit both sides alike. The last
thing printed is the table: before ms, after ms, and after / before (below 1: faster).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SUITES = ["elementwise", "reduce", "softmax", "norm", "matmul"]


def bench(checkout: Path, suites: list[str], sizes: str, out: Path) -> dict[tuple[str, str, str, str], float]:
    """Median ms per (suite, case, shape, dtype) of one `wgjit bench` run in `checkout`."""
    cmd = [sys.executable, "-m", "tracer.cli", "bench", "--sizes", sizes, "--quiet", "--no-torch", "--json", str(out)]
    for s in suites:
        cmd += ["--suite", s]
    # the checkout first; keep the rest (the device machine finds wgpu through PYTHONPATH)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(checkout), os.environ.get("PYTHONPATH")]))}
    subprocess.run(cmd, cwd=checkout, env=env, check=True, stdout=subprocess.DEVNULL)
    records = json.loads(out.read_text())["records"]
    return {(r["suite"], r["case"], r["shape"], r["dtype"]): r["ours_ms"] for r in records if "error" not in r}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("before", type=Path)
    p.add_argument("after", type=Path, nargs="?", default=Path(__file__).resolve().parents[1])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--sizes", choices=["small", "full"], default="full", help="full: the H200 sizes")
    p.add_argument("--suite", action="append", choices=SUITES, help="repeatable; default: " + ", ".join(SUITES))
    args = p.parse_args()
    suites = args.suite or SUITES
    best: dict[str, dict[tuple[str, str, str, str], float]] = {"before": {}, "after": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for side in ("before", "after"):
                times = bench(getattr(args, side).resolve(), suites, args.sizes, Path(tmp) / f"{side}{r}.json")
                for case, ms in times.items():
                    best[side][case] = min(ms, best[side].get(case, ms))
                print(f"round {r + 1}/{args.rounds} {side}: {len(times)} cases", file=sys.stderr, flush=True)
    print(
        f"{'suite':<12} {'case':<14} {'shape':<18} {'dtype':<8} {'before ms':>10} {'after ms':>10} {'after/before':>12}"
    )
    for case in sorted(set(best["before"]) | set(best["after"])):
        b, a = best["before"].get(case), best["after"].get(case)
        ratio = f"{a / b:.3f}" if a is not None and b else "-"
        cells = [f"{x:.4f}" if x is not None else "-" for x in (b, a)]
        print(f"{case[0]:<12} {case[1]:<14} {case[2]:<18} {case[3]:<8} {cells[0]:>10} {cells[1]:>10} {ratio:>12}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
