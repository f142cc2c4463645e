"""The dump's JSON: a versioned schema (as a JSON Schema document), the export, and a validator.

SCHEMA_VERSION changes whenever a field is removed, renamed or changes meaning; adding a field
keeps the version (readers ignore fields they do not know). SCHEMA.md beside this file
explains every field; SCHEMA below is the same contract as data, and `validate` checks a
document against it (the subset of JSON Schema used here: type, properties, required,
items, enum, additionalProperties, minimum).
"""

from __future__ import annotations

import datetime
import math
import numbers
from typing import Any

from backend_wgpu.program import Dispatch
from ir.graph import Graph
from ir.node import Node
from ir.ops import Op
from ir.printer import format_arg, format_graph
from ir.symbolic import Sym
from tracer.inspect.record import RecordedProgram
from tracer.inspect.why import why

SCHEMA_VERSION = 1

_INT = {"type": "integer"}
_NUM = {"type": "number"}
_STR = {"type": "string"}
_INTS = {"type": "array", "items": _INT}
_TRIPLE = {"type": "array", "items": {"type": "integer", "minimum": 0}}


def _obj(required: dict[str, Any], optional: dict[str, Any] | None = None, nullable: bool = False) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": ["object", "null"] if nullable else "object",
        "properties": {**required, **(optional or {})},
        "required": sorted(required),
    }
    return schema


KERNEL = _obj(
    {
        "name": _STR,
        "variant": _STR,
        "element": {"type": "integer", "enum": [1, 2, 4]},
        "workgroup": _TRIPLE,
        "params": {"type": "object"},
    },
    nullable=True,
)
INPLACE = _obj({"operand": _INT, "overwrites": _INT, "slot": {"type": ["integer", "null"]}}, nullable=True)
BUFFER = _obj(
    {
        "slot": _INT,
        "kind": {"type": "string", "enum": ["input", "output", "temp"]},
        "offset": _INT,
        "nbytes": _INT,
        "slot_nbytes": _INT,
    },
    nullable=True,
)
DISPATCH = _obj(
    {
        "index": _INT,
        "kernel": _STR,
        "variant": _STR,
        "element": {"type": "integer", "enum": [1, 2, 4]},
        "inplace": {"type": "boolean"},
        "workgroup_size": _TRIPLE,
        "workgroup_count": _TRIPLE,
        "slots": _INTS,
        "key": _STR,
        "uniform_offset": _INT,
        "metadata": {"type": "object", "additionalProperties": _NUM},
    },
    nullable=True,
)
NODE = _obj(
    {
        "id": _INT,
        "op": {"type": "string", "enum": [o.value for o in Op]},
        "inputs": _INTS,
        "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        "dtype": _STR,
        "arg": {"type": ["string", "null"]},
        "label": _STR,
        "output": {"type": ["integer", "null"]},
        "kernel": KERNEL,
        "inplace": INPLACE,
        "buffer": BUFFER,
        "dispatch": DISPATCH,
        "why": _STR,
    }
)
STAGE = _obj({"name": _STR, "text": _STR, "nodes": {"type": "array", "items": NODE}})
SLOT = _obj(
    {"index": _INT, "kind": {"type": "string", "enum": ["input", "output", "temp"]}, "nbytes": _INT, "kind_index": _INT}
)
KERNEL_SOURCE = _obj({"key": _STR, "kernel": _STR, "wgsl": _STR, "nodes": _INTS})
PROFILE = _obj(
    {
        "clock": _STR,
        "device": _STR,
        "repeats": _INT,
        "total_seconds": _NUM,
        "notes": {"type": "array", "items": _STR},
        "kernels": {
            "type": "array",
            "items": _obj(
                {
                    "node": _INT,
                    "op": _STR,
                    "kernel": _STR,
                    "variant": _STR,
                    "key": _STR,
                    "seconds": _NUM,
                    "bytes": _INT,
                    "flops": _INT,
                    "gbps": _NUM,
                    "gflops": _NUM,
                }
            ),
        },
        "by_op": {"type": "array", "items": _obj({"op": _STR, "seconds": _NUM, "share": _NUM})},
    },
    nullable=True,
)
PROGRAM = _obj(
    {
        "index": _INT,
        "origin": _STR,
        "structural_key": _STR,
        "realizations": _INT,
        "compiled_here": {"type": "boolean"},
        "dispatch_count": _INT,
        "peak_bytes": _INT,
        "compile_seconds": _obj(
            {"passes": {"type": "object", "additionalProperties": _NUM}, "backend": _NUM, "total": _NUM}
        ),
        "outputs": _INTS,
        "slots": {"type": "array", "items": SLOT},
        "schedule": _INTS,
        "stages": {"type": "array", "items": STAGE},
        "nodes": {"type": "array", "items": NODE},
        "kernels": {"type": "array", "items": KERNEL_SOURCE},
        "profile": PROFILE,
    }
)
SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "wgjit dump",
    **_obj(
        {
            "schema_version": {"type": "integer", "enum": [SCHEMA_VERSION]},
            "generator": _STR,
            "created": _STR,
            "script": {"type": ["string", "null"]},
            "argv": {"type": "array", "items": _STR},
            "device": _obj({"name": _STR, "backend": _STR}),
            "stages": {"type": "array", "items": _STR},
            "programs": {"type": "array", "items": PROGRAM},
        }
    ),
}


# --- export ------------------------------------------------------------------------------
def _number(v: Any, ints: tuple[int, ...] = ()) -> int | float:
    """A plain JSON number from a metadata value (a numpy scalar, or a runtime integer: its traced value)."""
    if isinstance(v, Sym):
        return v.value(ints) if v.slot < len(ints) else v.const
    return int(v) if isinstance(v, numbers.Integral) else float(v)


def node_record(graph: Graph, node: Node, dispatch: Dispatch | None = None, dispatch_index: int = -1) -> dict[str, Any]:
    """One node as the schema's NODE: what the IR says, plus its dispatch once scheduled."""
    outputs = list(graph.outputs)
    rec: dict[str, Any] = {
        "id": node.id,
        "op": node.op.value,
        "inputs": list(node.srcs),
        "shape": list(node.shape),
        "dtype": node.dtype.value,
        "arg": format_arg(node) or None,
        "label": node.label,
        "output": outputs.index(node.id) if node.id in outputs else None,
        "kernel": None,
        "inplace": None,
        "buffer": None,
        "dispatch": None,
        "why": why(graph, node),
    }
    k = node.kernel
    if k is not None:
        rec["kernel"] = {
            "name": k.name,
            "variant": k.variant,
            "element": k.element,
            "workgroup": list(k.workgroup),
            "params": {str(a): _plain(b) for a, b in k.params},
        }
    if node.inplace is not None:
        rec["inplace"] = {"operand": node.inplace, "overwrites": node.srcs[node.inplace], "slot": node.slot}
    if node.slot is not None and graph.schedule is not None:
        info = graph.schedule.slots[node.slot]
        offset, nbytes = 0, node.nbytes
        if node.op is Op.VIEW:
            lo, hi = node.arg.span()
            offset, nbytes = node.dtype.nbytes(lo), node.dtype.nbytes(max(0, hi - lo))
        rec["buffer"] = {
            "slot": node.slot,
            "kind": info.kind,
            "offset": offset,
            "nbytes": nbytes,
            "slot_nbytes": info.nbytes,
        }
    if dispatch is not None:
        rec["dispatch"] = {
            "index": dispatch_index,
            "kernel": dispatch.kernel,
            "variant": dispatch.variant,
            "element": dispatch.element,
            "inplace": dispatch.inplace,
            "workgroup_size": list(dispatch.workgroup_size),
            "workgroup_count": list(dispatch.workgroup_count),
            "slots": list(dispatch.slots),
            "key": dispatch.key,
            "uniform_offset": dispatch.uniform_offset,
            "metadata": {name: _number(v, graph.ints) for name, v in dispatch.metadata},
        }
    return rec


def _plain(v: Any) -> Any:
    if isinstance(v, bool | int | float | str) or v is None:
        return v
    if isinstance(v, tuple | list):
        return [_plain(x) for x in v]
    return repr(v)


def graph_nodes(graph: Graph, dispatches: list[Dispatch] | None = None) -> list[dict[str, Any]]:
    index = {d.node: i for i, d in enumerate(dispatches or [])}
    records = []
    for n in graph:
        i = index.get(n.id)
        records.append(node_record(graph, n, None if i is None else dispatches[i], -1 if i is None else i))
    return records


def program_record(rec: RecordedProgram, stages: list[str] | None = None) -> dict[str, Any]:
    """One recorded program as the schema's PROGRAM; `stages` filters which stages are listed."""
    p = rec.program
    kernels: dict[str, dict[str, Any]] = {}
    for d in p.dispatches:
        entry = kernels.setdefault(d.key, {"key": d.key, "kernel": d.kernel, "wgsl": p.sources[d.key], "nodes": []})
        entry["nodes"].append(d.node)
    chosen = [(name, g) for name, g in rec.stages if stages is None or name in stages]
    return {
        "index": rec.index,
        "origin": rec.origin,
        "structural_key": rec.structural_key,
        "realizations": rec.realizations,
        "compiled_here": rec.compiled_here,
        "dispatch_count": len(p.dispatches),
        "peak_bytes": p.peak_bytes,
        "compile_seconds": {
            "passes": dict(rec.pass_seconds),
            "backend": p.compile_seconds,
            "total": sum(rec.pass_seconds.values()) + p.compile_seconds,
        },
        "outputs": list(p.graph.outputs),
        "slots": [
            {"index": i, "kind": s.kind, "nbytes": s.nbytes, "kind_index": s.index} for i, s in enumerate(p.slots)
        ],
        "schedule": [d.node for d in p.dispatches],
        "stages": [{"name": name, "text": format_graph(g), "nodes": graph_nodes(g)} for name, g in chosen],
        "nodes": graph_nodes(p.graph, p.dispatches),
        "kernels": list(kernels.values()),
        "profile": rec.profile.to_dict() if rec.profile is not None else None,
    }


def dump_document(
    programs: list[RecordedProgram],
    script: str | None = None,
    argv: list[str] | None = None,
    stages: list[str] | None = None,
) -> dict[str, Any]:
    """The whole dump: every recorded program, as the schema's top-level object."""
    from backend_wgpu import get_device

    caps = get_device().caps
    return {
        "schema_version": SCHEMA_VERSION,
        "generator": "wgjit dump",
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "script": script,
        "argv": list(argv or []),
        "device": {"name": caps.name, "backend": caps.backend},
        "stages": list(stages) if stages is not None else [name for name, _ in programs[0].stages] if programs else [],
        "programs": [program_record(p, stages) for p in programs],
    }


# --- validation --------------------------------------------------------------------------
class SchemaError(ValueError):
    """A document does not follow the dump schema; the message lists where and why."""


_TYPES: dict[str, Any] = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
    "null": type(None),
}


def _is(value: Any, t: str) -> bool:
    if t == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if t == "number":
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return isinstance(value, _TYPES[t])


def _check(value: Any, schema: dict[str, Any], path: str, errors: list[str]) -> None:
    types = schema.get("type")
    if types is not None:
        allowed = [types] if isinstance(types, str) else types
        if not any(_is(value, t) for t in allowed):
            errors.append(f"{path}: expected {' or '.join(allowed)}, got {type(value).__name__}")
            return
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} is not one of {schema['enum']}")
    if "minimum" in schema and isinstance(value, int | float) and value < schema["minimum"]:
        errors.append(f"{path}: {value} is below {schema['minimum']}")
    if isinstance(value, dict):
        for name in schema.get("required", []):
            if name not in value:
                errors.append(f"{path}: missing field {name!r}")
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for name, v in value.items():
            if name in props:
                _check(v, props[name], f"{path}.{name}", errors)
            elif isinstance(extra, dict):
                _check(v, extra, f"{path}.{name}", errors)
            elif extra is False:
                errors.append(f"{path}: unexpected field {name!r}")
    if isinstance(value, list) and "items" in schema:
        for i, v in enumerate(value):
            _check(v, schema["items"], f"{path}[{i}]", errors)


def validate(document: Any, schema: dict[str, Any] | None = None) -> None:
    """Raise SchemaError listing every place where `document` breaks the schema."""
    errors: list[str] = []
    _check(document, SCHEMA if schema is None else schema, "$", errors)
    if errors:
        shown = "\n  ".join(errors[:20])
        more = f"\n  ... and {len(errors) - 20} more" if len(errors) > 20 else ""
        raise SchemaError(f"{len(errors)} schema errors:\n  {shown}{more}")
