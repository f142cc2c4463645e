"""`wgjit dump SCRIPT.py [script args] -o DIR`: run a script and write what it compiled, every stage.

wgjit's own options may stand before the script or among its arguments; everything after a
`--` goes to the script untouched (`wgjit dump -o out s.py -- -o theirs`).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback


def _add_options(p: argparse.ArgumentParser, default: object) -> None:
    def d(value: object) -> object:
        return value if default is None else default

    p.add_argument("-o", "--out", default=d(None), help="directory to write into (created if missing)")
    p.add_argument(
        "--stage",
        default=d("all"),
        help="stages to write: traced, optimized (after each pass but the last), scheduled, all; comma-separated (default all)",
    )
    p.add_argument(
        "--format", default=d("text,json,dot,svg,html"), help="comma-separated: text,json,dot,svg,html (default all)"
    )
    p.add_argument(
        "--profile",
        action="store_true",
        default=d(False),
        help="also time every kernel (GPU timestamps) into the JSON and HTML",
    )
    p.add_argument("--quiet", action="store_true", default=d(False), help="no progress lines on stderr")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "dump",
        help="run a script and dump every program it compiles (IR per pass, schedule, WGSL, JSON, DOT/SVG, HTML)",
    )
    # one REMAINDER positional keeps the script's arguments (and any `--`) as they were typed
    p.add_argument(
        "script_args", nargs=argparse.REMAINDER, metavar="SCRIPT.py [ARGS]", help="the script and its arguments"
    )
    _add_options(p, None)
    p.set_defaults(func=run)


def split_script_args(args: argparse.Namespace, add_options: object = _add_options) -> bool:
    """Set args.script and move wgjit's own options out of the script's arguments (those before
    any `--`); False when no script was given."""
    if not args.script_args:
        return False
    args.script, rest = args.script_args[0], list(args.script_args[1:])
    cut = rest.index("--") if "--" in rest else len(rest)
    mine = argparse.ArgumentParser(add_help=False)
    add_options(mine, argparse.SUPPRESS)  # type: ignore[operator]
    ours, theirs = mine.parse_known_args(rest[:cut])
    for k, v in vars(ours).items():
        setattr(args, k, v)
    args.script_args = theirs + rest[cut + 1 :]
    return True


def run(args: argparse.Namespace) -> int:
    from tracer.inspect.dump import FORMATS, STAGE_CHOICES, parse_list, write_dump
    from tracer.inspect.profiling import profile_programs, stderr_progress
    from tracer.inspect.record import Recorder, run_script

    if not split_script_args(args):
        print("wgjit dump: name the script to run: wgjit dump SCRIPT.py [ARGS] -o DIR", file=sys.stderr)
        return 2
    if not args.out:
        print("wgjit dump: say where to write with -o DIR", file=sys.stderr)
        return 2
    try:
        stages = parse_list(args.stage, STAGE_CHOICES, "stage")
        formats = parse_list(args.format, FORMATS, "format")
    except ValueError as e:
        print(f"wgjit dump: {e}", file=sys.stderr)
        return 2
    say = None if args.quiet else stderr_progress("wgjit dump")
    recorder = Recorder(progress=say)
    status = 0
    try:
        status = run_script(args.script, args.script_args, recorder)
    except FileNotFoundError as e:
        print(f"wgjit dump: {e}", file=sys.stderr)
        return 2
    except Exception:  # noqa: BLE001  the script failed: keep and write what it compiled so far
        traceback.print_exc()
        print("wgjit dump: the script raised; writing what it compiled before that", file=sys.stderr)
        status = 1
    programs = recorder.programs
    if args.profile:
        profile_programs(programs, progress=say)
    result = write_dump(programs, args.out, stages, formats, args.script, args.script_args, say)
    for m in result.messages:
        print(f"wgjit dump: {m}", file=sys.stderr)
    if say is not None:
        report = os.path.join(args.out, "index.html")
        where = f"; open {report}" if os.path.exists(report) and "html" in formats else ""
        say(f"{len(programs)} program(s), {len(result.files)} files in {args.out}{where}")
    return status
