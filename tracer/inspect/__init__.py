"""Inspection: record what the compiler did and show it as text, JSON, DOT/SVG, HTML or a terminal table.

Modules, one job each: record (capturing compiled programs), schema (the versioned JSON and
its validator; SCHEMA.md documents it), dot (pictures), html (the report), explain (the
terminal table), profiling (per-kernel GPU time over recorded programs), dump (writing a
dump directory), api (tr.trace, tr.explain, tr.record).
"""

from tracer.inspect.api import explain, record, trace
from tracer.inspect.explain import Explanation
from tracer.inspect.record import RecordedProgram, Recorder, run_script
from tracer.inspect.schema import SCHEMA, SCHEMA_VERSION, SchemaError, validate

__all__ = [
    "SCHEMA",
    "SCHEMA_VERSION",
    "Explanation",
    "RecordedProgram",
    "Recorder",
    "SchemaError",
    "explain",
    "record",
    "run_script",
    "trace",
    "validate",
]
