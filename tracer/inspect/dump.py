"""Writing a dump directory: every recorded program in the chosen stages and formats.

Layout (NNN = program index, SS = stage position, NAME = "traced" or the pass name):

    OUT/index.html                       the HTML report (format html)
    OUT/dump.json                        every program, schema in tracer/inspect/SCHEMA.md (format json)
    OUT/program_NNN/SS_NAME.txt          the IR after that stage, ir.printer's text (format text)
    OUT/program_NNN/SS_NAME.dot|.svg     its picture (formats dot, svg)
    OUT/program_NNN/schedule.txt         dispatches and buffer slots (text; scheduled stage)
    OUT/program_NNN/kernels/*.wgsl       the WGSL of every kernel, its key on the first line (scheduled stage)

Stages: `traced` is the graph as traced, `scheduled` the graph after the last pass (with the
schedule and the WGSL), `optimized` every stage in between; `all` is all of them.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from ir.display import GRAPHVIZ_HELP, dot_available
from ir.printer import format_graph
from tracer.inspect.dot import graph_dot, program_dot, too_big_to_draw, write_svg
from tracer.inspect.html import report
from tracer.inspect.record import RecordedProgram
from tracer.inspect.schema import dump_document

STAGE_CHOICES = ("traced", "optimized", "scheduled", "all")
FORMATS = ("text", "json", "dot", "svg", "html")


def parse_list(text: str, allowed: tuple[str, ...], what: str) -> list[str]:
    """A comma-separated choice list, checked; ValueError naming the bad entry and the choices."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    for t in items:
        if t not in allowed:
            raise ValueError(f"unknown {what} {t!r}; choose from {', '.join(allowed)}")
    if not items:
        raise ValueError(f"no {what} given; choose from {', '.join(allowed)}")
    return items


def select_stages(stage_names: list[str], choices: list[str]) -> list[str]:
    """The stage names (in pipeline order) that the choices traced/optimized/scheduled/all cover."""
    if not stage_names:
        return []
    wanted: set[str] = set()
    for c in choices:
        if c == "all":
            wanted.update(stage_names)
        elif c == "traced":
            wanted.add(stage_names[0])
        elif c == "scheduled":
            wanted.add(stage_names[-1])
        elif c == "optimized":
            wanted.update(stage_names[1:-1])
    return [s for s in stage_names if s in wanted]


def kernel_filename(key: str) -> str:
    """A short, stable file name for a kernel key (the key itself goes inside the file)."""
    return key.split("[")[0] + "_" + hashlib.sha1(key.encode()).hexdigest()[:10] + ".wgsl"


def schedule_text(rec: RecordedProgram) -> str:
    p = rec.program
    lines = [p.summary(), "", "buffer slots:"]
    lines += [f"  slot{i:<3} {s.kind:<6} #{s.index:<3} {s.nbytes} bytes" for i, s in enumerate(p.slots)]
    compile_ms = ", ".join(f"{k} {v * 1e3:.3f}" for k, v in rec.pass_seconds.items())
    lines += ["", f"compile ms: {compile_ms}, backend {p.compile_seconds * 1e3:.3f}"]
    return "\n".join(lines) + "\n"


@dataclass
class DumpResult:
    files: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)


def _write(path: str, text: str, result: DumpResult) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    result.files.append(path)


def write_dump(
    programs: list[RecordedProgram],
    out_dir: str,
    stage_choices: list[str] | None = None,
    formats: list[str] | None = None,
    script: str | None = None,
    argv: list[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> DumpResult:
    """Write every program's chosen stages in the chosen formats under out_dir."""
    formats = list(FORMATS) if formats is None else formats
    stage_choices = ["all"] if stage_choices is None else stage_choices
    result = DumpResult()
    os.makedirs(out_dir, exist_ok=True)
    svg = "svg" in formats and dot_available()
    if "svg" in formats and not svg:
        result.messages.append(GRAPHVIZ_HELP)
    all_names = [name for name, _ in programs[0].stages] if programs else []
    chosen = select_stages(all_names, stage_choices)
    for rec in programs:
        if progress is not None:
            progress(f"writing program {rec.index} ({len(rec.program.dispatches)} dispatches)")
        names = [name for name, _ in rec.stages]
        stages = select_stages(names, stage_choices)
        base = os.path.join(out_dir, f"program_{rec.index:03d}")
        final = names[-1]
        for pos, (name, graph) in enumerate(rec.stages):
            if name not in stages:
                continue
            stem = os.path.join(base, f"{pos:02d}_{name}")
            if "text" in formats:
                _write(stem + ".txt", format_graph(graph) + "\n", result)
            if "dot" in formats or svg:
                title = f"program {rec.index}: {name}"
                dot = program_dot(rec.program, title, rec.profile) if name == final else graph_dot(graph, title)
                if "dot" in formats:
                    _write(stem + ".dot", dot, result)
                big = too_big_to_draw(len(graph))
                if svg and big:
                    result.messages.append(f"program {rec.index}, {name}: {big}")
                elif svg and write_svg(dot, stem + ".svg"):
                    result.files.append(stem + ".svg")
        if final in stages and "text" in formats:
            _write(os.path.join(base, "schedule.txt"), schedule_text(rec), result)
            for key, code in rec.program.sources.items():
                _write(os.path.join(base, "kernels", kernel_filename(key)), f"// {key}\n{code}", result)
    if "json" in formats:
        doc = dump_document(programs, script, argv, chosen)
        _write(os.path.join(out_dir, "dump.json"), json.dumps(doc, indent=1) + "\n", result)
    if "html" in formats:
        from backend_wgpu import get_device

        title = os.path.basename(script) if script else "wgjit dump"
        page = report(programs, title, get_device().caps.name, chosen, argv)
        _write(os.path.join(out_dir, "index.html"), page, result)
    return result
