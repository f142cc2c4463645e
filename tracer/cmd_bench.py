"""`wgjit bench`: the benchmark harness (benchmarks/), side by side with numpy and torch."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    from benchmarks.harness import SUITES

    p = sub.add_parser("bench", help="time wgjit's kernels against numpy and torch (see benchmarks/RESULTS.md)")
    p.add_argument(
        "--suite",
        action="append",
        choices=SUITES + ["all"],
        help="a suite to run (repeatable; default: every suite but e2e, which 'all' includes)",
    )
    p.add_argument(
        "--sizes", choices=["small", "full"], default="small", help="small: a quick check; full: the H200 sizes"
    )
    p.add_argument("--repeat", type=int, default=20, help="timed runs per case (fewer for slow cases)")
    p.add_argument("--warmup", type=int, default=3, help="untimed runs before timing")
    p.add_argument("--json", metavar="FILE", help="write one record per case to FILE")
    p.add_argument("--md", metavar="FILE", help="write the markdown table to FILE")
    p.add_argument("--plots", metavar="DIR", help="write PNG plots (needs matplotlib) into DIR")
    p.add_argument("--no-torch", action="store_true", help="skip the torch comparators even where CUDA works")
    p.add_argument("--quiet", action="store_true", help="print only the final table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from benchmarks import harness, report

    if not args.suite:
        suites = harness.DEFAULT_SUITES
    else:
        suites = harness.SUITES if "all" in args.suite else list(dict.fromkeys(args.suite))
    log = (lambda _msg: None) if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    settings = harness.Settings(
        sizes=args.sizes, repeat=args.repeat, warmup=args.warmup, use_torch=not args.no_torch, log=log
    )
    result = harness.run(suites, settings)
    if args.json:
        report.write_json(result, args.json)
    if args.md:
        with open(args.md, "w") as f:
            f.write(report.markdown_table(result))
    if args.plots:
        written = report.plot(result, args.plots)
        if not written:
            result["notes"].append("no plots: matplotlib is not installed (pip install wgjit[viz])")
    print(report.terminal_table(result))
    bad = [r for r in result["records"] if r.get("verified") is False or "error" in r]
    return 1 if bad else 0
