"""Recording every program a piece of code compiles: the traced graph, each pass's output, the Program.

A Recorder listens to tracer.realize while it is active (a `with` block). It keeps one
RecordedProgram per distinct program, counting how many times it was realized (program-cache
hits included). `run_script` runs a Python file as `python SCRIPT args` would, under a
recorder; that is what `wgjit dump` and `wgjit explain` do.
"""

from __future__ import annotations

import os
import runpy
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType

from backend_wgpu.profile import Profile
from backend_wgpu.program import Program
from ir.graph import Graph
from passes import run_pipeline
from tracer.realize import CompileEvent, add_compile_listener

# packages whose frames are wgjit's own: the user frame that caused a compile is the first other one
_OWN_DIRS = tuple(
    os.path.dirname(os.path.abspath(m.__file__)) + os.sep
    for m in (sys.modules["ir"], sys.modules["passes"], sys.modules["backend_wgpu"], sys.modules["tracer"])
    if m.__file__
)


@dataclass
class RecordedProgram:
    """One compiled program as a script produced it, with the stages the passes went through."""

    index: int
    program: Program
    stages: list[tuple[str, Graph]]  # ("traced", graph), then (pass name, graph after it)
    pass_seconds: dict[str, float]
    origin: str  # "file.py:LINE in function" of the user code that asked for it
    structural_key: str
    realizations: int = 1
    compiled_here: bool = True  # False: it was already in the cache when recording began
    profile: Profile | None = None

    @property
    def traced(self) -> Graph:
        return self.stages[0][1]

    @property
    def scheduled(self) -> Graph:
        return self.program.graph


def user_origin() -> str:
    """Where, in the user's code, the current compile was asked for."""
    for frame in reversed(traceback.extract_stack()):
        path = os.path.abspath(frame.filename)
        if not path.startswith(_OWN_DIRS) and "runpy" not in path and not path.startswith("<frozen"):
            rel = os.path.relpath(path)
            return f"{path if rel.startswith('..') else rel}:{frame.lineno} in {frame.name}"
    return "?"


@dataclass
class Recorder:
    """Collects the programs compiled (or fetched from the cache) while it is active."""

    progress: Callable[[str], None] | None = None  # told one line per new program
    programs: list[RecordedProgram] = field(default_factory=list)
    started: float = 0.0
    _remove: Callable[[], None] | None = None
    _by_program: dict[int, RecordedProgram] = field(default_factory=dict)

    def __enter__(self) -> Recorder:
        self.started = time.perf_counter()
        self._remove = add_compile_listener(self._on_compile)
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._remove is not None:
            self._remove()
            self._remove = None

    def _on_compile(self, event: CompileEvent) -> None:
        seen = self._by_program.get(id(event.program))
        if seen is not None:
            seen.realizations += 1
            return
        program = event.program
        if event.run is not None:
            stages, seconds = list(event.run.stages), dict(event.run.seconds)
        else:
            # compiled before recording began: replay the passes (no GPU work) for the stages
            again = run_pipeline(event.graph, program.device.caps, keep=True)
            stages, seconds = again.stages, dict(program.pass_seconds or again.seconds)
        rec = RecordedProgram(
            index=len(self.programs),
            program=program,
            stages=stages,
            pass_seconds=seconds,
            origin=user_origin(),
            structural_key=event.graph.structural_key(),
            compiled_here=not event.cached,
        )
        self.programs.append(rec)
        self._by_program[id(program)] = rec
        if self.progress is not None:
            elapsed = time.perf_counter() - self.started
            self.progress(
                f"program {rec.index}: {len(program.dispatches)} dispatches, {len(rec.traced)} traced nodes "
                f"({'compiled' if rec.compiled_here else 'from cache'}) at {rec.origin} [{elapsed:.1f}s]"
            )


def run_script(path: str, args: list[str], recorder: Recorder) -> int:
    """Run a Python file as `python path args...` would, recording what it compiles; its exit status."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no such script: {path}")
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [path, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    status = 0
    try:
        with recorder:
            runpy.run_path(path, run_name="__main__")
    except SystemExit as e:  # the script's own exit: keep what was recorded
        code = e.code
        status = code if isinstance(code, int) else (0 if code is None else 1)
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
    return status
