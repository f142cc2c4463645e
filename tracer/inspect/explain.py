"""The terminal view: a table of every dispatch (rich when installed, plain text otherwise).

One row per kernel launch: the node and op, shape and dtype, the kernel with its variant,
KernelElement width, which buffer it overwrites in place, workgroup size and count, buffer
slots and bytes moved; with a profile also GPU time, GB/s, GFLOP/s and share of the total,
and after the table the time per op type.
"""

from __future__ import annotations

import html
import io
import sys
from collections.abc import Sequence
from typing import Any

from backend_wgpu.profile import Profile, dispatch_bytes
from backend_wgpu.program import Program
from tracer.inspect.profiling import op_shares
from tracer.inspect.record import RecordedProgram
from tracer.inspect.why import why

BASE_COLUMNS = ("#", "node", "op", "shape", "dtype", "kernel", "x", "in-place", "workgroup", "count", "slots", "bytes")
WHY_COLUMN = "why"
PROFILE_COLUMNS = ("us", "GB/s", "GFLOP/s", "share")
RIGHT = frozenset({"#", "x", "bytes", "us", "GB/s", "GFLOP/s", "share"})


def dispatch_table(program: Program, profile: Profile | None = None) -> tuple[list[str], list[list[str]]]:
    """Headers and rows (as text) of the dispatch table of one program."""
    headers = list(BASE_COLUMNS) + (list(PROFILE_COLUMNS) if profile is not None else []) + [WHY_COLUMN]
    graph = program.graph
    timing = {k.node: k for k in profile.kernels} if profile is not None else {}
    total = profile.total_seconds if profile is not None else 0.0
    rows = []
    for i, d in enumerate(program.dispatches):
        node = graph[d.node]
        inplace = f"%{node.srcs[node.inplace]} slot{node.slot}" if node.inplace is not None else ""
        row = [
            str(i),
            f"%{d.node}",
            d.op,
            "x".join(map(str, node.shape)) or "scalar",
            node.dtype.value,
            f"{d.kernel}[{d.variant}]",
            str(d.element),
            inplace,
            "x".join(map(str, d.workgroup_size)),
            "x".join(map(str, d.workgroup_count)),
            ",".join(map(str, d.slots)),
            str(dispatch_bytes(graph, d.node)),
        ]
        if profile is not None:
            k = timing[d.node]
            share = k.seconds / total if total else 0.0
            row += [f"{k.seconds * 1e6:.1f}", f"{k.gbps:.2f}", f"{k.gflops:.2f}", f"{share * 100:.1f}%"]
        rows.append(row + [why(graph, node)])
    return headers, rows


def plain_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A fixed-width text table; numeric columns right-aligned."""
    widths = [max([len(h)] + [len(r[c]) for r in rows]) for c, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if h in RIGHT else c.ljust(w) for c, w, h in zip(cells, widths, headers, strict=True)
        ).rstrip()

    out = [line(headers), line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    return "\n".join(out)


def program_title(rec: RecordedProgram) -> str:
    p = rec.program
    return (
        f"program {rec.index} ({rec.origin}): {len(p.dispatches)} dispatches, peak {p.peak_bytes} bytes, "
        f"realized {rec.realizations}x"
    )


def profile_footer(profile: Profile) -> list[str]:
    lines = [f"GPU time {profile.total_seconds * 1e6:.1f} us ({profile.clock}, median of {profile.repeats})"]
    lines += [f"  {op:<14} {s * 1e6:10.1f} us {share * 100:5.1f}%" for op, s, share in profile.by_op()]
    lines += [f"  note: {n}" for n in profile.notes]
    return lines


def explain_text(programs: list[RecordedProgram]) -> str:
    """The whole explanation as plain text (stable: no timings unless profiled)."""
    blocks = []
    for rec in programs:
        headers, rows = dispatch_table(rec.program, rec.profile)
        block = [program_title(rec), plain_table(headers, rows)]
        if rec.profile is not None:
            block += profile_footer(rec.profile)
        blocks.append("\n".join(block))
    if len(programs) > 1 and any(r.profile is not None for r in programs):
        shares = op_shares(programs)
        lines = ["whole run, by op type (kernel time x realizations):"]
        lines += [f"  {op:<14} {s * 1e6:10.1f} us {share * 100:5.1f}%" for op, s, share in shares]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) if blocks else "no program was compiled"


def print_explain(programs: list[RecordedProgram], file: Any = None, use_rich: bool = True) -> None:
    """Print the explanation to a terminal, with rich's tables when it is installed."""
    console_cls = None
    if use_rich:
        try:
            from rich.console import Console
            from rich.table import Table
            from rich.text import Text

            console_cls = Console
        except ImportError:
            console_cls = None
    if console_cls is None:
        print(explain_text(programs), file=file)
        return
    out = file if file is not None else sys.stdout
    # a pipe or file has no width: do not squeeze the table into 80 columns there
    console = console_cls(file=out, width=None if out.isatty() else 240)
    for rec in programs:
        headers, rows = dispatch_table(rec.program, rec.profile)
        table = Table(title=Text(program_title(rec)), title_justify="left")
        for h in headers:
            table.add_column(h, justify="right" if h in RIGHT else "left", no_wrap=h != WHY_COLUMN)
        for r in rows:
            table.add_row(*(Text(c) for c in r))  # Text: "gemm[tiled]" is not rich markup
        console.print(table)
        if rec.profile is not None:
            console.print("\n".join(profile_footer(rec.profile)), highlight=False)
    if not programs:
        console.print("no program was compiled")
    elif len(programs) > 1 and any(r.profile is not None for r in programs):
        console.print("whole run, by op type (kernel time x realizations):")
        for op, s, share in op_shares(programs):
            console.print(f"  {op:<14} {s * 1e6:10.1f} us {share * 100:5.1f}%", highlight=False)


class Explanation:
    """What tr.explain returns: shows as a text table in a terminal, as HTML tables in a notebook."""

    def __init__(self, programs: list[RecordedProgram]) -> None:
        self.programs = programs

    def __str__(self) -> str:
        return explain_text(self.programs)

    def __repr__(self) -> str:
        return explain_text(self.programs)

    def print(self) -> None:
        print_explain(self.programs)

    def _repr_html_(self) -> str:
        out = io.StringIO()
        for rec in self.programs:
            headers, rows = dispatch_table(rec.program, rec.profile)
            head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
            body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
            out.write(
                f"<p><b>{html.escape(program_title(rec))}</b></p><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
            )
            if rec.profile is not None:
                out.write("<pre>" + html.escape("\n".join(profile_footer(rec.profile))) + "</pre>")
        return out.getvalue()
