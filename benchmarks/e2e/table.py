"""The e2e table: one row per wgjit variant, its wall and GPU time beside torch eager, CUDA graphs and torch.compile.

    python -m benchmarks.e2e.table A.json B.json ... [--md OUT.md] [--json OUT.json]

merges the records of several `wgjit bench --suite e2e --json` runs (the parts of
run_e2e_h200.sh) and prints their table.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

COLUMNS = ["case", "shape", "wgjit", "wall ms", "GPU ms", "host us/disp", "torch ms", "GPU ms", "vs torch",
           "CUDA graph ms", "vs graph", "torch.compile ms", "GPU ms", "vs compile", "compiles", "ok"]  # fmt: skip


def _f(v: Any, digits: int = 3) -> str:
    if v is None:
        return "-"
    if abs(v) >= 100:
        return f"{v:.0f}"
    return f"{v:.{digits}g}" if abs(v) < 1 else f"{v:.{digits}f}".rstrip("0").rstrip(".")


def rows(result: dict[str, Any]) -> list[list[str]]:
    out = []
    for r in result["records"]:
        if r.get("suite") != "e2e" or "error" in r:
            continue
        torch, graph = r["comparators"].get("torch"), r["comparators"].get("torch_cuda_graph")
        compiled = r["comparators"].get("torch_compile")
        for name, v in r["variants"].items():
            ratio = r["variant_ratios"][name]
            out.append([
                r["case"], r["shape"], name, _f(v["wall_ms"], 4), _f(v.get("gpu_ms"), 4),
                _f(v.get("host_us_per_dispatch")), _f(torch["wall_ms"], 4) if torch else "-",
                _f(torch.get("gpu_ms"), 4) if torch else "-", (_f(ratio["torch"]) + "x") if torch else "-",
                _f(graph["wall_ms"], 4) if graph else "-", (_f(ratio["torch_cuda_graph"]) + "x") if graph else "-",
                _f(compiled["wall_ms"], 4) if compiled else "-", _f(compiled.get("gpu_ms"), 4) if compiled else "-",
                (_f(ratio["torch_compile"]) + "x") if compiled else "-", str(v.get("compiles", "-")), {True: "yes", False: "NO"}[r["verified"]],
            ])  # fmt: skip
    return out


def _head(result: dict[str, Any]) -> str:
    dev = result["device"]
    torch = f", torch {dev['torch']} on {dev['torch_device']}" if dev.get("torch") else ", no torch comparator"
    return (
        f"wgjit e2e on {dev['adapter']} ({dev['backend']}){torch}: wall time per call with the read-back, "
        "median ms; GPU ms = one pass (timestamps / CUDA events); ratio = torch / wgjit wall (above 1: wgjit faster)"
    )


def terminal(result: dict[str, Any]) -> str:
    body = rows(result)
    if not body:
        return ""
    widths = [max(len(COLUMNS[i]), *(len(r[i]) for r in body)) for i in range(len(COLUMNS))]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()  # noqa: E731
    return "\n".join([_head(result), line(COLUMNS), line(["-" * w for w in widths]), *(line(r) for r in body)])


def markdown(result: dict[str, Any]) -> str:
    body = rows(result)
    if not body:
        return ""
    out = [_head(result), "", "| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" for _ in COLUMNS) + "|"]
    out += ["| " + " | ".join(c.replace("|", "/") for c in r) + " |" for r in body]
    return "\n".join(out) + "\n"


def merge(paths: list[str]) -> dict[str, Any]:
    """One result from several runs' JSON files: the first run's device, every run's records and notes."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    if not runs:
        raise SystemExit("no result files to merge")
    notes = list(dict.fromkeys(n for r in runs for n in r.get("notes", [])))
    return runs[0] | {"records": [rec for r in runs for rec in r["records"]], "notes": notes}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="merge e2e JSON results and print their table")
    ap.add_argument("files", nargs="+")
    ap.add_argument("--md", help="write the markdown table here")
    ap.add_argument("--json", help="write the merged result here")
    args = ap.parse_args(argv)
    result = merge([f for f in args.files if Path(f).is_file()])
    if args.md:
        Path(args.md).write_text(markdown(result) + "".join(f"- {n}\n" for n in result["notes"]))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))
    for n in result["notes"]:
        print(f"note: {n}")
    print(terminal(result))
    return 0 if all(r.get("verified") for r in result["records"] if r.get("suite") == "e2e") else 1


if __name__ == "__main__":
    sys.exit(main())
