"""`wgjit tune SCRIPT.py [script args] [--repeats N] [--only FAMILIES]`: tune a script's kernels on this adapter.

Runs the script (its own output goes to stderr), collects the GEMMs of every program it
compiled, times each one's candidate configurations (backend_wgpu.autotune: each checked
against numpy first), writes the winners to the per-user tuning cache and prints a table of
them. Later runs on the same adapter and driver use them; WGJIT_AUTOTUNE=0 ignores them.
"""

from __future__ import annotations

import argparse
import sys
import traceback

# graphs are tuned as passes.split_k sees them: after fold_views, fuse_attention and dequantize_wide, before any split
TUNED_STAGE = "dequantize_wide"
FAMILIES = {
    "gemm_blocked",
    "gemm_thin",
    "gemv",
    "gemv_split",
    "qgemv",
    "qgemm_thin",
}  # the kernels with tunable configurations


def _add_options(p: argparse.ArgumentParser, default: object) -> None:
    def d(value: object) -> object:
        return value if default is None else default

    p.add_argument("--repeats", type=int, default=d(5), help="timed runs per candidate; the median counts (default 5)")
    p.add_argument("--dry-run", action="store_true", default=d(False), help="time and print, but write no cache")
    p.add_argument(
        "--only",
        default=d(""),
        help="comma-separated kernel families to tune: gemm_blocked, gemm_thin, gemv, gemv_split, qgemv, qgemm_thin (default: all)",
    )


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "tune", help="run a script, time candidate kernel configurations for what it compiles, keep the winners"
    )
    p.add_argument(
        "script_args", nargs=argparse.REMAINDER, metavar="SCRIPT.py [ARGS]", help="the script and its arguments"
    )
    _add_options(p, None)
    p.set_defaults(func=run)


def winners_table(results: list) -> str:
    """One line per tuned problem: the winner and its time against the built-in rule's."""
    from tracer.inspect.explain import plain_table

    headers = ["problem", "winner", "us", "built-in", "us ", "speedup", "rejected"]
    rows = []
    for r in results:
        e = r.entry
        speedup = e.builtin_seconds / e.seconds if e.seconds > 0 else 1.0
        rows.append(
            [
                r.problem,
                e.config,
                f"{e.seconds * 1e6:.1f}",
                e.builtin,
                f"{e.builtin_seconds * 1e6:.1f}",
                f"{speedup:.2f}x",
                ",".join(e.rejected) or "-",
            ]
        )
    return plain_table(headers, rows)


def _families(args: argparse.Namespace) -> set[str] | None:
    """The kernel families --only names (None: all); ValueError naming any unknown one."""
    families = {f.strip() for f in args.only.split(",") if f.strip()} or None
    unknown = (families or set()) - FAMILIES
    if unknown:
        raise ValueError(f"--only {','.join(sorted(unknown))}: choose among {', '.join(sorted(FAMILIES))}")
    return families


def _record(args: argparse.Namespace) -> tuple[list, int]:
    """Run the script (its prints to stderr); the graphs of what it compiled, at TUNED_STAGE, and its status."""
    from tracer.inspect.record import Recorder, run_script

    recorder = Recorder()
    try:
        saved, sys.stdout = sys.stdout, sys.stderr
        try:
            status = run_script(args.script, args.script_args, recorder)
        finally:
            sys.stdout = saved
    except FileNotFoundError:
        raise
    except Exception:  # noqa: BLE001  tune what was compiled before the failure
        traceback.print_exc()
        status = 1
    graphs = [dict(rec.stages).get(TUNED_STAGE) for rec in recorder.programs]
    return [g for g in graphs if g is not None], status


def run(args: argparse.Namespace) -> int:
    from backend_wgpu import get_device
    from backend_wgpu.autotune import tune_graphs
    from backend_wgpu.tuning_cache import autotune_enabled, cache_path
    from tracer.cmd_dump import split_script_args
    from tracer.inspect.profiling import stderr_progress

    if not split_script_args(args, _add_options):
        print("wgjit tune: name the script to run: wgjit tune SCRIPT.py [ARGS] [--repeats N]", file=sys.stderr)
        return 2
    try:
        if args.repeats < 1:
            raise ValueError(f"--repeats must be at least 1, got {args.repeats}")
        families = _families(args)
        graphs, status = _record(args)
    except (ValueError, FileNotFoundError) as e:
        print(f"wgjit tune: {e}", file=sys.stderr)
        return 2
    say = stderr_progress("tune")
    device = get_device()
    say(f"{len(graphs)} programs from {args.script}; tuning on {device.caps.name} ({device.caps.backend})")
    results = tune_graphs(graphs, device, repeats=args.repeats, progress=say, save=not args.dry_run, families=families)
    if not results:
        print("wgjit tune: the script compiled no kernel with tunable configurations (matrix products)")
        return status
    print(winners_table(results))
    where = "not written (--dry-run)" if args.dry_run else f"written to {cache_path()}"
    print(f"{len(results)} tuned for {device.caps.name} | {device.caps.driver} | {device.caps.backend}; {where}")
    if not autotune_enabled():
        print("note: WGJIT_AUTOTUNE=0 is set: runs in this environment keep the built-in rules")
    return status
