"""The tracer package's modules depend on each other in one direction, through public names."""

from __future__ import annotations

import ast
import graphlib
import pathlib

TRACER = pathlib.Path(__file__).resolve().parent.parent / "tracer"
# the one wgjit import kept inside functions on purpose: tracer.inspect, which
# `import tracer` loads only when an inspection function is first called
DEFERRED_OK = {"tracer.inspect"}


def _modules() -> dict[str, ast.Module]:
    files = [p for p in TRACER.rglob("*.py")]
    return {".".join(p.relative_to(TRACER.parent).with_suffix("").parts): ast.parse(p.read_text()) for p in files}


def _imported(node: ast.AST) -> list[tuple[str, list[str]]]:
    if isinstance(node, ast.ImportFrom) and node.module:
        return [(node.module, [a.name for a in node.names])]
    if isinstance(node, ast.Import):
        return [(a.name, []) for a in node.names]
    return []


def test_module_level_imports_form_no_cycle() -> None:
    deps: dict[str, set[str]] = {}
    for name, tree in _modules().items():
        deps[name] = {module for node in tree.body for module, _ in _imported(node) if module.startswith("tracer.")}
    graphlib.TopologicalSorter(deps).prepare()  # raises CycleError naming the cycle


def test_no_private_names_cross_modules() -> None:
    for name, tree in _modules().items():
        for node in ast.walk(tree):
            for module, names in _imported(node):
                if module.startswith(("tracer", "backend_wgpu", "ir", "passes")):
                    private = [n for n in names if n.startswith("_") and n != "__version__"]
                    assert not private, f"{name} imports private {private} from {module}"


def test_no_tracer_imports_inside_functions() -> None:
    for name, tree in _modules().items():
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                for module, _ in _imported(node):
                    if name.startswith("tracer.cmd_") or name == "tracer.cli":
                        continue  # each subcommand loads what it needs when it runs
                    assert module.split(".")[0] not in ("tracer", "ir", "passes") or module in DEFERRED_OK, (
                        f"{name}.{fn.name} imports {module} inside the function"
                    )
