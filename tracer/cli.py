"""The `wgjit` command line: `wgjit devices`, `wgjit demo`, `wgjit tune`, and the tools' subcommands.

Each subcommand lives in its own module with `register(subparsers)`; add a module's
name to SUBCOMMANDS to expose it.
"""

from __future__ import annotations

import argparse
import importlib
import sys

SUBCOMMANDS = [
    "tracer.cmd_devices",
    "tracer.cmd_demo",
    "tracer.cmd_dump",
    "tracer.cmd_explain",
    "tracer.cmd_bench",
    "tracer.cmd_tune",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="wgjit", description="A JIT tracing graph compiler for tensors on WebGPU.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(name).register(sub)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
