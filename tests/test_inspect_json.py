"""The dump's JSON: valid against its schema, and every field agreeing with Program.dispatches and the IR."""

from __future__ import annotations

import copy
import json

import pytest
from inspect_common import recorded_tiny

from ir.printer import format_graph
from passes.pipeline import PIPELINE
from tracer.inspect.schema import SCHEMA, SCHEMA_VERSION, SchemaError, dump_document, validate

# tiny() shows an in-place chain and buffer reuse: fusion would fold them into one kernel
pytestmark = pytest.mark.usefixtures("no_fusion")


@pytest.fixture(scope="module")
def doc_and_rec():
    with pytest.MonkeyPatch.context() as mp:  # module scope: the no_fusion fixture is not active yet
        mp.setenv("WGJIT_FUSION", "0")
        rec = recorded_tiny()
    doc = json.loads(json.dumps(dump_document([rec], script="tiny.py", argv=["--n", "1"])))  # through text and back
    return doc, rec


def test_document_validates_and_names_its_version(doc_and_rec):
    doc, _ = doc_and_rec
    validate(doc)
    assert doc["schema_version"] == SCHEMA_VERSION == 1
    assert doc["script"] == "tiny.py" and doc["argv"] == ["--n", "1"]
    assert doc["stages"] == ["traced"] + [p.__name__ for p in PIPELINE]


def test_schema_is_real_json_schema(doc_and_rec):
    jsonschema = pytest.importorskip(
        "jsonschema", reason="jsonschema (comes with the notebook extra) checks SCHEMA independently"
    )
    doc, _ = doc_and_rec
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    jsonschema.Draft202012Validator(SCHEMA).validate(doc)


def test_program_fields_match_the_program(doc_and_rec):
    doc, rec = doc_and_rec
    (prog,) = doc["programs"]
    p = rec.program
    assert prog["dispatch_count"] == len(p.dispatches) == 6
    assert prog["peak_bytes"] == p.peak_bytes == sum(s.nbytes for s in p.slots if s.kind != "input")
    assert prog["schedule"] == [d.node for d in p.dispatches] == list(p.graph.schedule.dispatches)
    assert set(prog["compile_seconds"]["passes"]) == {f.__name__ for f in PIPELINE}
    assert all(v >= 0 for v in prog["compile_seconds"]["passes"].values())
    assert prog["compile_seconds"]["backend"] == p.compile_seconds
    assert prog["slots"] == [
        {"index": i, "kind": s.kind, "nbytes": s.nbytes, "kind_index": s.index} for i, s in enumerate(p.slots)
    ]
    assert prog["outputs"] == list(p.graph.outputs)
    assert [k["key"] for k in prog["kernels"]] == list(dict.fromkeys(d.key for d in p.dispatches))
    for k in prog["kernels"]:
        assert k["wgsl"] == p.sources[k["key"]] and "@compute" in k["wgsl"]
        assert k["nodes"] == [d.node for d in p.dispatches if d.key == k["key"]]
    assert [s["name"] for s in prog["stages"]] == [name for name, _ in rec.stages]
    for stage, (_, graph) in zip(prog["stages"], rec.stages, strict=True):
        assert stage["text"] == format_graph(graph)
        assert [n["id"] for n in stage["nodes"]] == list(graph.nodes)
    assert prog["profile"] is None


def test_every_node_record_matches_the_ir_and_its_dispatch(doc_and_rec):
    doc, rec = doc_and_rec
    p = rec.program
    graph = p.graph
    nodes = {n["id"]: n for n in doc["programs"][0]["nodes"]}
    assert list(nodes) == list(graph.nodes)
    dispatch_of = {d.node: (i, d) for i, d in enumerate(p.dispatches)}
    for nid, rec_node in nodes.items():
        n = graph[nid]
        assert rec_node["op"] == n.op.value and rec_node["inputs"] == list(n.srcs)
        assert rec_node["shape"] == list(n.shape) and rec_node["dtype"] == n.dtype.value
        buf = rec_node["buffer"]
        assert (
            buf["slot"] == n.slot
            and buf["kind"] == p.slots[n.slot].kind
            and buf["slot_nbytes"] == p.slots[n.slot].nbytes
        )
        assert 0 <= buf["offset"] and buf["offset"] + buf["nbytes"] <= buf["slot_nbytes"]
        if n.op.value != "view":
            assert buf["nbytes"] == n.nbytes and buf["offset"] == 0
        if nid not in dispatch_of:
            assert rec_node["dispatch"] is None
            continue
        i, d = dispatch_of[nid]
        got = rec_node["dispatch"]
        assert got["index"] == i
        assert (got["kernel"], got["variant"], got["element"], got["inplace"]) == (
            d.kernel,
            d.variant,
            d.element,
            d.inplace,
        )
        assert tuple(got["workgroup_size"]) == d.workgroup_size and tuple(got["workgroup_count"]) == d.workgroup_count
        assert tuple(got["slots"]) == d.slots and got["key"] == d.key and got["uniform_offset"] == d.uniform_offset
        assert got["metadata"] == dict(d.metadata)
        assert rec_node["kernel"]["name"] == n.kernel.name and rec_node["kernel"]["element"] == n.kernel.element
        assert rec_node["why"].startswith(("one thread", "general matmul", "a workgroup", "4 rows of 3"))
    # the in-place chain: add writes over the matmul's buffer, relu over add's: same slot
    inplace = {nid: r["inplace"] for nid, r in nodes.items() if r["inplace"] is not None}
    assert inplace == {
        n.id: {"operand": n.inplace, "overwrites": n.srcs[n.inplace], "slot": n.slot}
        for n in graph
        if n.inplace is not None
    }
    assert len(inplace) == 2
    for nid, ip in inplace.items():
        assert nodes[ip["overwrites"]]["buffer"]["slot"] == nodes[nid]["buffer"]["slot"] == ip["slot"]
        assert nodes[nid]["dispatch"]["inplace"] is True


def test_traced_stage_has_no_annotations(doc_and_rec):
    doc, _ = doc_and_rec
    traced = doc["programs"][0]["stages"][0]
    assert traced["name"] == "traced"
    assert all(n["kernel"] is None and n["buffer"] is None and n["dispatch"] is None for n in traced["nodes"])
    assert {n["op"] for n in traced["nodes"]} >= {"matmul", "expand", "add", "relu", "softmax", "sum"}


def test_validator_names_what_is_wrong(doc_and_rec):
    doc, _ = doc_and_rec
    bad = copy.deepcopy(doc)
    del bad["programs"][0]["nodes"][2]["dtype"]
    bad["programs"][0]["nodes"][3]["shape"] = [4, -1]
    bad["programs"][0]["dispatch_count"] = "six"
    bad["schema_version"] = 99
    with pytest.raises(SchemaError) as err:
        validate(bad)
    msg = str(err.value)
    assert "4 schema errors" in msg
    assert "$.programs[0].nodes[2]: missing field 'dtype'" in msg
    assert "$.programs[0].nodes[3].shape[1]: -1 is below 0" in msg
    assert "$.programs[0].dispatch_count: expected integer, got str" in msg
    assert "$.schema_version: 99 is not one of [1]" in msg
