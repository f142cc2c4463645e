"""The Python face of inspection: tr.trace, tr.explain and tr.record, usable without the CLI."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ir.graph import Graph
from tracer.factories import tensor
from tracer.graph_builder import build_graph
from tracer.inspect.explain import Explanation
from tracer.inspect.profiling import profile_programs
from tracer.inspect.record import Recorder
from tracer.tensor import Tensor
from tracer.tensor import compile as compile_program


def _tensors_in(value: Any) -> Iterator[Tensor]:
    """Every Tensor in a function's result: a Tensor, or nested tuples, lists and dict values."""
    if isinstance(value, Tensor):
        yield value
    elif isinstance(value, tuple | list):
        for v in value:
            yield from _tensors_in(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors_in(v)


def trace(fn: Callable[..., Any], *example_inputs: Any) -> Graph:
    """The graph `fn` builds on these example inputs (arrays, scalars or Tensors); nothing runs."""
    args = [x if isinstance(x, Tensor) else tensor(x) for x in example_inputs]
    result = fn(*args)
    outputs = list(_tensors_in(result))
    if not outputs:
        raise TypeError(
            f"trace: {getattr(fn, '__name__', fn)!r} returned {type(result).__name__}, not a Tensor (or a tuple, list or dict of them)"
        )
    pending = [t._lazy for t in outputs if not t.is_realized]
    if not pending:
        raise ValueError("trace: every tensor the function returned is already realized; there is no graph to show")
    return build_graph(pending).graph


def explain(*tensors: Tensor, profile: bool = False, repeats: int = 3) -> Explanation:
    """The dispatches that would compute these tensors (compiled, not run); `profile` times each kernel.

    `print(tr.explain(y))` in a script; a notebook shows it as a table.
    """
    with Recorder() as recorder:
        compile_program(*tensors)
    if profile:
        profile_programs(recorder.programs, repeats)
    return Explanation(recorder.programs)


def record() -> Recorder:
    """A context manager that records every program compiled inside it (`with tr.record() as r:`)."""
    return Recorder()
