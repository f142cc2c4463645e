"""`wgjit explain SCRIPT.py [script args] [--profile]`: a terminal table of every dispatch a script ran."""

from __future__ import annotations

import argparse
import sys
import traceback


def _add_options(p: argparse.ArgumentParser, default: object) -> None:
    def d(value: object) -> object:
        return value if default is None else default

    p.add_argument(
        "--profile",
        action="store_true",
        default=d(False),
        help="time every kernel (GPU timestamp queries; wall clock where absent)",
    )
    p.add_argument(
        "--repeats", type=int, default=d(3), help="profile runs per program; the median is shown (default 3)"
    )
    p.add_argument("--plain", action="store_true", default=d(False), help="plain text even when rich is installed")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "explain", help="run a script and show the dispatches of every program it compiled (--profile: GPU time)"
    )
    # one REMAINDER positional keeps the script's arguments (and any `--`) as they were typed
    p.add_argument(
        "script_args", nargs=argparse.REMAINDER, metavar="SCRIPT.py [ARGS]", help="the script and its arguments"
    )
    _add_options(p, None)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tracer.cmd_dump import split_script_args
    from tracer.inspect.explain import print_explain
    from tracer.inspect.profiling import profile_programs
    from tracer.inspect.record import Recorder, run_script

    if not split_script_args(args, _add_options):
        print("wgjit explain: name the script to run: wgjit explain SCRIPT.py [ARGS] [--profile]", file=sys.stderr)
        return 2
    recorder = Recorder()
    status = 0
    try:
        # the script's own prints go to stderr so the table is the only thing on stdout
        saved, sys.stdout = sys.stdout, sys.stderr
        try:
            status = run_script(args.script, args.script_args, recorder)
        finally:
            sys.stdout = saved
    except FileNotFoundError as e:
        print(f"wgjit explain: {e}", file=sys.stderr)
        return 2
    except Exception:  # noqa: BLE001  show what was compiled before the failure
        traceback.print_exc()
        status = 1
    if args.profile:
        profile_programs(recorder.programs, args.repeats)
    print_explain(recorder.programs, use_rich=not args.plain)
    return status
