"""One self-contained HTML report of a dump: pictures, sortable node tables, WGSL, per-pass diffs.

Everything is inline (CSS, the SVG pictures, a few lines of JavaScript to sort tables), so
the file opens offline. Without Graphviz the picture is the DOT text with a note saying how
to get pictures. A table can be opened pre-sorted with `report.html#sort=TABLE_ID:COLUMN`
(COLUMN counts from 0; append `:desc` to reverse).
"""

from __future__ import annotations

import datetime
import difflib
import html
from typing import Any

from ir.display import GRAPHVIZ_HELP, inline_svg, render_svg
from ir.graph import Graph
from ir.printer import format_graph
from tracer.inspect.dot import program_dot, too_big_to_draw
from tracer.inspect.record import RecordedProgram
from tracer.inspect.why import why

NODE_COLUMNS = (
    "id", "op", "inputs", "shape", "dtype", "kernel", "variant", "width", "in-place on", "slot",
    "offset", "bytes", "workgroup", "count", "dispatch", "time (us)", "why",
)  # fmt: skip

_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #1c2833; }
h1 { font-size: 1.4em; } h2 { font-size: 1.2em; border-bottom: 1px solid #ccd1d1; margin-top: 2em; }
h3 { font-size: 1.05em; margin-top: 1.4em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.4em 0; }
th, td { border: 1px solid #d5d8dc; padding: 2px 6px; text-align: left; white-space: nowrap; }
td:last-child { white-space: normal; min-width: 18em; }
th { background: #eaeded; }
table.sortable th { cursor: pointer; user-select: none; }
table.sortable th[aria-sort=ascending]::after { content: " \\25B2"; }
table.sortable th[aria-sort=descending]::after { content: " \\25BC"; }
pre { background: #f8f9f9; padding: 0.5em; overflow-x: auto; font-size: 0.82em; }
.graph { overflow: auto; max-height: 80vh; border: 1px solid #d5d8dc; padding: 0.3em; }
.add { color: #1e8449; } .del { color: #c0392b; } .hunk { color: #7f8c8d; }
.note { color: #7f8c8d; font-size: 0.9em; }
nav a { margin-right: 1em; }
"""

_JS = """
(function () {
  function cellValue(row, col) {
    var text = row.cells[col] ? row.cells[col].textContent.trim() : "";
    var num = Number(text.replace(/^%/, ""));
    return text !== "" && !isNaN(num) ? num : text.toLowerCase();
  }
  function sortTable(table, col, descending) {
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = cellValue(a, col), y = cellValue(b, col);
      if (typeof x !== typeof y) { x = String(x); y = String(y); }
      var c = x < y ? -1 : x > y ? 1 : 0;
      return descending ? -c : c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
    var heads = table.tHead.rows[0].cells;
    for (var i = 0; i < heads.length; i++) { heads[i].removeAttribute("aria-sort"); }
    heads[col].setAttribute("aria-sort", descending ? "descending" : "ascending");
  }
  var tables = document.querySelectorAll("table.sortable");
  tables.forEach(function (table) {
    var heads = table.tHead.rows[0].cells;
    Array.prototype.forEach.call(heads, function (th, col) {
      th.addEventListener("click", function () {
        sortTable(table, col, th.getAttribute("aria-sort") === "ascending");
      });
    });
  });
  var m = /^#sort=([^:]+):(\\d+)(:desc)?$/.exec(window.location.hash);
  if (m) {
    var t = document.getElementById(m[1]);
    if (t) { sortTable(t, Number(m[2]), !!m[3]); }
  }
  document.body.setAttribute("data-ready", "1");
})();
"""


def _esc(v: Any) -> str:
    return html.escape(str(v))


def _table(
    headers: tuple[str, ...] | list[str], rows: list[list[Any]], table_id: str = "", sortable: bool = False
) -> str:
    attrs = f' id="{_esc(table_id)}"' if table_id else ""
    attrs += ' class="sortable"' if sortable else ""
    head = "".join(f"<th>{_esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table{attrs}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def node_rows(rec: RecordedProgram) -> list[list[Any]]:
    """One row per node of the scheduled graph, the columns of NODE_COLUMNS."""
    program = rec.program
    graph = program.graph
    dispatch_of = {d.node: (i, d) for i, d in enumerate(program.dispatches)}
    times = {k.node: k.seconds for k in rec.profile.kernels} if rec.profile is not None else {}
    rows = []
    for n in graph:
        i, d = dispatch_of.get(n.id, (None, None))
        offset, nbytes = 0, n.nbytes
        if n.op.value == "view":
            lo, hi = n.arg.span()
            offset, nbytes = n.dtype.nbytes(lo), n.dtype.nbytes(max(0, hi - lo))  # a quantized view: whole blocks
        rows.append(
            [
                n.id,
                n.op.value,
                " ".join(f"%{s}" for s in n.srcs),
                "x".join(map(str, n.shape)) or "scalar",
                n.dtype.value,
                d.kernel if d else (n.kernel.name if n.kernel else ""),
                d.variant if d else (n.kernel.variant if n.kernel else ""),
                d.element if d else "",
                f"%{n.srcs[n.inplace]}" if n.inplace is not None else "",
                "" if n.slot is None else n.slot,
                offset if n.slot is not None else "",
                nbytes,
                "x".join(map(str, d.workgroup_size)) if d else "",
                "x".join(map(str, d.workgroup_count)) if d else "",
                "" if i is None else i,
                f"{times[n.id] * 1e6:.1f}" if n.id in times else "",
                why(graph, n),
            ]
        )
    return rows


def stage_diff(before: Graph, after: Graph) -> str:
    """The unified diff of two stages' text forms as coloured HTML ('' when nothing changed)."""
    lines = list(
        difflib.unified_diff(format_graph(before).splitlines(), format_graph(after).splitlines(), lineterm="", n=1)
    )
    out = []
    for line in lines[2:]:  # skip the ---/+++ file headers
        cls = (
            "add"
            if line.startswith("+")
            else "del"
            if line.startswith("-")
            else "hunk"
            if line.startswith("@@")
            else ""
        )
        out.append(f'<span class="{cls}">{_esc(line)}</span>' if cls else _esc(line))
    return "\n".join(out)


def _picture(rec: RecordedProgram) -> str:
    dot = program_dot(rec.program, title=f"program {rec.index}", profile=rec.profile)
    big = too_big_to_draw(len(rec.program.graph))
    if big:
        return f'<p class="note">{_esc(big)}</p><details><summary>DOT</summary><pre class="dot">{_esc(dot)}</pre></details>'
    svg = render_svg(dot)
    if svg is None:
        return f'<p class="note">{_esc(GRAPHVIZ_HELP)}</p><pre class="dot">{_esc(dot)}</pre>'
    return f'<div class="graph">{inline_svg(svg)}</div>'


def _legend() -> str:
    return (
        '<p class="note">Edges: solid = data; dashed grey = a view of its base buffer; '
        "bold red = the consumer overwrites that operand in place; dotted blue = the memory plan reuses "
        "a dead buffer slot (no data flows). Double border = graph output; blue = input; pink = in-place kernel; "
        "a shaded box around nodes = one fused group.</p>"
    )


def program_section(rec: RecordedProgram, stages: list[str] | None = None) -> str:
    p = rec.program
    i = rec.index
    parts = [f'<section class="program" id="program-{i}">', f"<h2>Program {i}: {_esc(rec.origin)}</h2>"]
    total = sum(rec.pass_seconds.values()) + p.compile_seconds
    parts.append(
        f"<p>{len(p.dispatches)} dispatches, {len(p.slots)} buffer slots, peak {p.peak_bytes} bytes, "
        f"realized {rec.realizations} time(s){'' if rec.compiled_here else ' (compiled before recording began)'}, "
        f"compiled in {total * 1e3:.2f} ms. Structural key <code>{_esc(rec.structural_key)}</code>.</p>"
    )
    pass_rows = [[name, f"{s * 1e3:.3f}"] for name, s in rec.pass_seconds.items()]
    pass_rows.append(["backend (WGSL + pipelines)", f"{p.compile_seconds * 1e3:.3f}"])
    parts.append("<h3>Compile time</h3>" + _table(["pass", "ms"], pass_rows, f"passes-{i}"))
    parts.append("<h3>Graph (after scheduling)</h3>" + _picture(rec) + _legend())
    parts.append("<h3>Nodes</h3>" + _table(NODE_COLUMNS, node_rows(rec), f"nodes-{i}", sortable=True))
    slot_rows = [[k, s.kind, s.index, s.nbytes] for k, s in enumerate(p.slots)]
    parts.append(
        "<h3>Buffer slots</h3>" + _table(["slot", "kind", "index", "bytes"], slot_rows, f"slots-{i}", sortable=True)
    )
    if rec.profile is not None:
        prof = rec.profile
        krows = [
            [
                k.node,
                k.op,
                f"{k.kernel}[{k.variant}]",
                f"{k.seconds * 1e6:.2f}",
                f"{k.gbps:.3f}",
                f"{k.gflops:.3f}",
                k.bytes,
                k.flops,
            ]
            for k in prof.kernels
        ]
        orows = [[op, f"{s * 1e6:.2f}", f"{share * 100:.1f}"] for op, s, share in prof.by_op()]
        notes = "".join(f'<p class="note">{_esc(n)}</p>' for n in prof.notes)
        parts.append(
            f"<h3>Profile ({_esc(prof.clock)}, median of {prof.repeats})</h3>"
            + _table(
                ["node", "op", "kernel", "time (us)", "GB/s", "GFLOP/s", "bytes", "flops"],
                krows,
                f"profile-{i}",
                sortable=True,
            )
            + _table(["op", "time (us)", "share %"], orows, f"profile-ops-{i}", sortable=True)
            + notes
        )
    kernels = []
    for key, code in p.sources.items():
        users = " ".join(f"%{d.node}" for d in p.dispatches if d.key == key)
        kernels.append(
            f"<details><summary><code>{_esc(key)}</code> ({_esc(users)})</summary><pre>{_esc(code)}</pre></details>"
        )
    parts.append(f"<h3>Kernels ({len(p.sources)})</h3>" + "".join(kernels))
    chosen = [(name, g) for name, g in rec.stages if stages is None or name in stages]
    diffs = []
    for (_, before), (name, after) in zip(chosen, chosen[1:], strict=False):
        diff = stage_diff(before, after)
        body = f'<pre class="diff">{diff}</pre>' if diff else '<p class="note">no change</p>'
        diffs.append(f'<details class="pass"><summary>{_esc(name)}</summary>{body}</details>')
    texts = "".join(
        f"<details><summary>{_esc(name)}</summary><pre>{_esc(format_graph(g))}</pre></details>" for name, g in chosen
    )
    parts.append("<h3>What each pass changed</h3>" + ("".join(diffs) or '<p class="note">one stage only</p>'))
    parts.append("<h3>The IR at each stage</h3>" + texts)
    parts.append("</section>")
    return "\n".join(parts)


def report(
    programs: list[RecordedProgram],
    title: str,
    device: str = "",
    stages: list[str] | None = None,
    argv: list[str] | None = None,
) -> str:
    """The whole HTML page for a run."""
    created = datetime.datetime.now().isoformat(timespec="seconds")
    nav = "".join(f'<a href="#program-{r.index}">program {r.index}</a>' for r in programs)
    dispatches = sum(len(r.program.dispatches) for r in programs)
    head = (
        f"<h1>wgjit: {_esc(title)}</h1>"
        f"<p>{len(programs)} program(s), {dispatches} dispatches; device {_esc(device)}; {_esc(created)}"
        + (f"; arguments <code>{_esc(' '.join(argv))}</code>" if argv else "")
        + "</p>"
    )
    summary_rows = [
        [r.index, r.origin, len(r.program.dispatches), r.program.peak_bytes, r.realizations] for r in programs
    ]
    summary = _table(
        ["program", "origin", "dispatches", "peak bytes", "realizations"], summary_rows, "programs", sortable=True
    )
    body = (
        "\n".join(program_section(r, stages) for r in programs) or '<p class="note">the script compiled no program</p>'
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>wgjit: {_esc(title)}</title><style>{_CSS}</style></head>\n"
        f'<body data-ready="0">{head}<nav>{nav}</nav>{summary}\n{body}\n<script>{_JS}</script></body></html>\n'
    )
