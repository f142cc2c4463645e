"""tr.trace, tr.explain, tr.record, notebook reprs of Graph and Program, and WGJIT_DEBUG levels."""

from __future__ import annotations

import importlib
import shutil

import numpy as np
import pytest
from inspect_common import tiny, tiny_reference

import tracer as tr
from ir.display import NODE_HEADERS
from tracer.inspect.explain import BASE_COLUMNS, explain_text, plain_table

# tiny() shows an in-place chain and buffer reuse: fusion would fold them into one kernel
pytestmark = pytest.mark.usefixtures("no_fusion")

realize = importlib.import_module("tracer.realize")  # the attribute `tracer.realize` is the function


def test_trace_builds_the_graph_without_running():
    before = dict(realize.stats)

    def layer(x, w):
        return {"out": (x @ w).relu(), "aux": [x.sum()]}

    g = tr.trace(layer, np.ones((2, 3), np.float32), np.ones((3, 4), np.float32))
    assert realize.stats == before  # nothing compiled, nothing ran
    assert [n.op.value for n in g] == ["input", "input", "matmul", "relu", "sum"]
    assert [g[o].op.value for o in g.outputs] == ["relu", "sum"]
    assert g[2].shape == (2, 4) and g[4].shape == ()
    with pytest.raises(TypeError, match="returned int, not a Tensor"):
        tr.trace(lambda x: 3, np.ones(2, np.float32))
    with pytest.raises(ValueError, match="already realized"):
        tr.trace(lambda x: x, np.ones(2, np.float32))


def test_explain_lists_every_dispatch_and_does_not_run():
    y = tiny()
    exp = tr.explain(y)
    assert not y.is_realized
    program = tr.compile(y)
    text = str(exp)
    lines = text.splitlines()
    assert lines[0].startswith("program 0 (") and "6 dispatches" in lines[0]
    assert lines[1].split() == [*BASE_COLUMNS, "why"]
    rows = [line.split() for line in lines[3:]]
    assert [(r[1], r[2], r[5], r[6]) for r in rows] == [
        (f"%{d.node}", d.op, f"{d.kernel}[{d.variant}]", str(d.element)) for d in program.dispatches
    ]
    col = lines[1].index("why")
    why = {r[1]: line[col:] for r, line in zip(rows, lines[3:], strict=True)}
    by_op = {d.op: f"%{d.node}" for d in program.dispatches}
    # the reasons name the rule: width bounded by the last dim 3, the in-place reuse, the reduce strategy
    assert why[by_op["add"]] == (
        "one thread per element; last dim 3 not divisible by 2; overwrites %2 in slot4: nothing reads it afterwards"
    )
    assert why[by_op["sum"]] == "4 rows of 3: one thread walks each row; reduce reads scalars"
    assert why[by_op["matmul"]].startswith("general matmul: b64 tiles 64x64x16")
    inplace = [r[7:9] for r in rows if r[7].startswith("%")]
    assert len(inplace) == 2 and all(slot.startswith("slot") for _, slot in inplace)
    again = str(tr.explain(y)).splitlines()
    assert again[1:] == lines[1:]  # stable: only the origin line (where explain was called) differs
    assert "<table>" in exp._repr_html_()
    np.testing.assert_allclose(y.numpy(), tiny_reference(), rtol=1e-5, atol=1e-6)


def test_plain_table_layout():
    text = plain_table(["#", "op", "bytes"], [["0", "matmul", "216"], ["10", "add", "4"]])
    assert text == " #  op      bytes\n--  ------  -----\n 0  matmul    216\n10  add         4"
    assert explain_text([]) == "no program was compiled"


def test_record_counts_realizations_of_one_program():
    x = tr.tensor(np.arange(6, dtype=np.float32))
    with tr.record() as rec:
        for i in range(3):
            (x * 3.0 + float(i)).numpy()
    assert len(rec.programs) == 1 and rec.programs[0].realizations == 3
    assert (
        rec.programs[0].origin.startswith("tests/test_inspect_api.py:")
        or "test_inspect_api.py:" in rec.programs[0].origin
    )
    assert [name for name, _ in rec.programs[0].stages][0] == "traced"


def test_graph_and_program_display_in_notebooks(monkeypatch):
    y = tiny()
    g = y.graph()
    page = g._repr_html_()
    assert page.count("<tr>") == len(g) + 1 and "".join(f"<th>{h}</th>" for h in NODE_HEADERS) in page
    assert repr(g) == f"<Graph {len(g)} nodes, outputs %{g.outputs[0]}>"
    program = tr.compile(y)
    ph = program._repr_html_()
    # the node table, then one dispatch row per kernel launch
    assert ph.count("<tr>") == (len(program.graph) + 1) + (len(program.dispatches) + 1)
    assert ph.count("<td>gemm_blocked</td><td>a_s.b_s.o1:64x64x16:g8</td>") == 1
    assert ph.count("<td>softmax_regs</td><td>softmax:u0:p1:sg") == 2
    if shutil.which("dot"):
        assert g._repr_svg_().startswith("<svg") and "<svg" in page
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert g._repr_svg_() is None
    text_page = g._repr_html_()
    assert "<svg" not in text_page and "apt-get install graphviz" in text_page and "= matmul(%0, %1)" in text_page


def test_debug_levels(monkeypatch, capsys):
    def compile_fresh(level: str) -> str:
        monkeypatch.setenv("WGJIT_DEBUG", level)
        realize.clear_program_cache()
        tr.compile(tiny())
        tr.compile(tiny())  # the same structure again: a cache hit
        return capsys.readouterr().err

    one = compile_fresh("1")
    assert one.count("[wgjit] compiled program") == 1 and "6 dispatches" in one and "vectorize" in one
    assert "backend" in one and "[wgjit] program cache hit" in one and "after dce" not in one
    two = compile_fresh("2")
    assert (
        "[wgjit] --- traced graph ---" in two
        and "[wgjit] --- after fold_views ---" in two
        and "Program: 6 dispatches" in two
    )
    assert "@compute" not in two
    three = compile_fresh("3")
    assert "[wgjit] --- WGSL gemm_blocked[" in three and "@compute" in three
    assert compile_fresh("0") == ""
