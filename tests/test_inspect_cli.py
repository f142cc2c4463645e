"""`wgjit dump` and `wgjit explain` on a small script: every file read back and checked."""

from __future__ import annotations

import glob
import json
import os
import re
import shutil

import pytest
from inspect_common import parse_dot

from tracer.cli import main
from tracer.inspect.schema import validate

# the programs show in-place chains and buffer reuse: fusion would fold them into one kernel
pytestmark = pytest.mark.usefixtures("no_fusion")

SCRIPT = """\
import json
import sys

import numpy as np

import tracer as tr

steps = int(sys.argv[1])
x = tr.tensor(np.arange(8, dtype=np.float32) / 8)
for i in range(steps):
    y = ((x * 2.0) + 1.0).exp().sum()
    value = y.item()  # realize: the line the dump names
expected = float(np.exp(np.arange(8) / 4 + 1).sum())
assert abs(value - expected) < 1e-3 * expected, (value, expected)
with open(sys.argv[2], "w") as f:
    json.dump(sys.argv[1:], f)
print("script done")
"""
REALIZE_LINE = 12


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "loop.py"
    path.write_text(SCRIPT)
    return str(path)


def test_dump_writes_every_stage_in_every_format(script, tmp_path, capsys):
    out = tmp_path / "out"
    args_file = str(tmp_path / "args.json")
    assert main(["dump", script, "3", args_file, "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "[wgjit dump] program 0:" in err and f"loop.py:{REALIZE_LINE}" in err  # progress on stderr
    assert json.loads(open(args_file).read()) == ["3", args_file]  # the script saw its own arguments

    doc = json.load(open(out / "dump.json"))
    validate(doc)
    (prog,) = doc["programs"]
    assert prog["realizations"] == 3  # one program, realized on each of the three steps
    assert prog["origin"].endswith(f"loop.py:{REALIZE_LINE} in <module>")
    pdir = out / "program_000"
    stage_files = sorted(os.listdir(pdir))
    names = [s["name"] for s in prog["stages"]]
    for pos, stage in enumerate(prog["stages"]):
        stem = f"{pos:02d}_{stage['name']}"
        assert (pdir / f"{stem}.txt").read_text() == stage["text"] + "\n"
        nodes, edges, _ = parse_dot((pdir / f"{stem}.dot").read_text())
        assert sorted(nodes) == [n["id"] for n in stage["nodes"]]
        assert sum(1 for _, _, a in edges if "reuses" not in a) == sum(len(n["inputs"]) for n in stage["nodes"])
        if shutil.which("dot"):
            svg = (pdir / f"{stem}.svg").read_text()
            assert svg.count('class="node"') == len(stage["nodes"])
    assert names[0] == "traced" and len(names) >= 8
    traced = (pdir / "00_traced.txt").read_text()
    assert re.search(r"= exp\(%\d+\)", traced) and re.search(r"= sum\(%\d+\) \{1\}", traced)
    # the schedule lists each dispatch; the kernels folder holds each kernel's WGSL under its key
    schedule = (pdir / "schedule.txt").read_text()
    for node in prog["nodes"]:
        if node["dispatch"]:
            assert f"%{node['id']} " in schedule and node["dispatch"]["kernel"] in schedule
    wgsl = {open(p).readline()[3:].rstrip("\n"): open(p).read() for p in glob.glob(str(pdir / "kernels" / "*.wgsl"))}
    assert set(wgsl) == {k["key"] for k in prog["kernels"]}
    for k in prog["kernels"]:
        assert wgsl[k["key"]] == f"// {k['key']}\n{k['wgsl']}"
    html = (out / "index.html").read_text()
    table = html.split('id="nodes-0"')[1].split("</table>")[0]
    assert table.count("<tr>") == len(prog["nodes"]) + 1  # header + one row per node
    assert ("<svg" in html) == bool(shutil.which("dot"))
    assert len([f for f in stage_files if f.endswith(".txt")]) == len(names) + 1


def test_dump_stage_and_format_filters(script, tmp_path):
    out = tmp_path / "traced"
    assert (
        main(["dump", script, "1", str(tmp_path / "a.json"), "-o", str(out), "--stage", "traced", "--format", "text"])
        == 0
    )
    assert sorted(os.listdir(out)) == ["program_000"]
    assert os.listdir(out / "program_000") == ["00_traced.txt"]

    out = tmp_path / "sched"
    assert (
        main(
            ["dump", "--stage", "scheduled", "--format", "json", "-o", str(out), script, "1", str(tmp_path / "b.json")]
        )
        == 0
    )
    assert os.listdir(out) == ["dump.json"]
    doc = json.load(open(out / "dump.json"))
    validate(doc)
    assert doc["stages"] == ["schedule"] and [s["name"] for s in doc["programs"][0]["stages"]] == ["schedule"]

    out = tmp_path / "opt"
    assert (
        main(
            [
                "dump",
                script,
                "1",
                str(tmp_path / "c.json"),
                "-o",
                str(out),
                "--stage",
                "optimized",
                "--format",
                "text",
                "--quiet",
            ]
        )
        == 0
    )
    files = sorted(os.listdir(out / "program_000"))
    assert files[0] == "01_dce.txt" and not any("traced" in f or "schedule" in f for f in files)


def test_dump_passes_arguments_after_double_dash_to_the_script(tmp_path):
    path = tmp_path / "argv.py"
    path.write_text("import sys, json\nopen(sys.argv[-1], 'w').write(json.dumps(sys.argv[1:]))\n")
    record = str(tmp_path / "seen.json")
    assert main(["dump", "-o", str(tmp_path / "o"), str(path), "--", "-o", "theirs", record]) == 0
    assert json.loads(open(record).read()) == ["-o", "theirs", record]
    assert json.load(open(tmp_path / "o" / "dump.json"))["programs"] == []


def test_dump_errors_are_clear(script, tmp_path, capsys):
    assert main(["dump", script, "-o", str(tmp_path / "x"), "--format", "text,pdf"]) == 2
    assert "unknown format 'pdf'; choose from text, json, dot, svg, html" in capsys.readouterr().err
    assert main(["dump", script, "1", "a"]) == 2
    assert "-o DIR" in capsys.readouterr().err
    assert main(["dump", str(tmp_path / "missing.py"), "-o", str(tmp_path / "y")]) == 2
    assert "no such script" in capsys.readouterr().err


def test_dump_keeps_what_a_failing_script_compiled(tmp_path, capsys):
    path = tmp_path / "fails.py"
    path.write_text("import tracer as tr\nprint((tr.arange(6) * 3).numpy())\nraise RuntimeError('boom')\n")
    out = tmp_path / "o"
    assert main(["dump", str(path), "-o", str(out), "--format", "json"]) == 1
    assert "boom" in capsys.readouterr().err
    doc = json.load(open(out / "dump.json"))
    assert len(doc["programs"]) == 1 and doc["programs"][0]["origin"].endswith("fails.py:2 in <module>")


def test_explain_prints_one_row_per_dispatch(script, tmp_path, capsys):
    assert main(["explain", script, "2", str(tmp_path / "a.json"), "--plain"]) == 0
    out, err = capsys.readouterr()
    assert "script done" in err and "script done" not in out  # the table alone on stdout
    lines = out.splitlines()
    assert lines[0].startswith("program 0 (") and "realized 2x" in lines[0]
    header = lines[1].split()
    assert header[:6] == ["#", "node", "op", "shape", "dtype", "kernel"]
    rows = [line.split() for line in lines[3:] if line.strip()]
    assert [r[0] for r in rows] == [str(i) for i in range(len(rows))]
    ops = [r[2] for r in rows]
    assert "exp" in ops and "sum" in ops
    for r in rows:
        assert re.fullmatch(r"\w+\[[^\]]*\]", r[5]) and r[6] in {"1", "2", "4"}


def test_explain_profile_shows_time_bandwidth_and_shares(script, tmp_path, capsys):
    assert main(["explain", script, "1", str(tmp_path / "a.json"), "--profile", "--repeats", "1", "--plain"]) == 0
    out = capsys.readouterr().out
    assert "GB/s" in out and "GFLOP/s" in out and "share" in out
    assert re.search(r"GPU time [\d.]+ us \((gpu-timestamps|wall-clock), median of 1\)", out)
    shares = [float(m) for m in re.findall(r"^\s+\w+\s+[\d.]+ us\s+([\d.]+)%$", out, re.M)]
    assert shares and sum(shares) == pytest.approx(100, abs=0.5)


def test_explain_with_rich(script, tmp_path, capsys):
    pytest.importorskip("rich", reason="rich is optional (the viz extra); plain text is tested above")
    assert main(["explain", script, "1", str(tmp_path / "a.json")]) == 0
    out = capsys.readouterr().out
    assert "program 0" in out and "─" in out  # a rich table
    assert re.search(r"│ elementwise\[\w+:[\w,]+\] +│", out)  # brackets kept, not read as rich markup
