"""The harness's outputs: a terminal table, a markdown table, the JSON file and PNG plots."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.e2e import table as e2e_table

COLUMNS = ["suite", "case", "shape", "dtype", "ours ms", "timer", "±%", "GB/s", "GFLOP/s", "torch ms", "vs torch",
           "torch.compile", "numpy ms", "vs numpy", "ok", "kernels"]  # fmt: skip


def _fmt(v: Any, digits: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if v == 0:
            return "0"
        if abs(v) >= 100:
            return f"{v:.0f}"
        return f"{v:.{digits}g}" if abs(v) < 1 else f"{v:.{digits}f}".rstrip("0").rstrip(".")
    return str(v)


def rows(result: dict[str, Any]) -> list[list[str]]:
    out = []
    for r in result["records"]:
        if r.get("suite") == "e2e" and "error" not in r:
            continue  # its own table (benchmarks/e2e/table.py)
        if "error" in r:
            out.append(
                [r["suite"], r["case"], r["shape"], r["dtype"], "ERROR"] + [""] * (len(COLUMNS) - 6) + [r["error"][:60]]
            )
            continue
        comp = r["comparators"]
        torch, tc, npy = comp.get("torch"), comp.get("torch_compile"), comp.get("numpy") or comp.get("wgpu_floor")
        tc_txt = f"{_fmt(tc['ms'])} ({_fmt(r['ratios'].get('torch_compile'))}x)" if tc else "-"
        npy_ratio = r["ratios"].get("numpy", r["ratios"].get("wgpu_floor"))
        kernels = sorted(set(r.get("kernels") or []))
        out.append(
            [
                r["suite"], r["case"], r["shape"], r["dtype"], _fmt(r["ours_ms"], 4), r["ours"]["timer"],
                _fmt(r["ours"]["spread_pct"], 2), _fmt(r.get("gbps")), _fmt(r.get("gflops")),
                _fmt(torch["ms"], 4) if torch else "-", _fmt(r["ratios"].get("torch")) + ("x" if torch else ""),
                tc_txt, _fmt(npy["ms"], 4) if npy else "-", (_fmt(npy_ratio) + "x") if npy else "-",
                {True: "yes", False: "NO", None: "?"}[r.get("verified")], ", ".join(kernels)[:70],
            ]
        )  # fmt: skip
    return out


def terminal_table(result: dict[str, Any]) -> str:
    body = rows(result)
    widths = [
        max(len(COLUMNS[i]), *(len(r[i]) for r in body)) if body else len(COLUMNS[i]) for i in range(len(COLUMNS))
    ]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()  # noqa: E731
    dev = result["device"]
    head = f"wgjit bench on {dev['adapter']} ({dev['backend']})" + (
        f", torch {dev['torch']} on {dev['torch_device']}" if dev.get("torch") else ""
    )
    out = [head, line(COLUMNS), line(["-" * w for w in widths])] + [line(r) for r in body] if body else [head]
    out += [f"note: {n}" for n in result.get("notes", [])]
    if body:
        out.append(
            "ratios: the comparator's median time over ours (above 1: wgjit is faster); GPU time where both have it"
        )
    e2e = e2e_table.terminal(result)
    return "\n".join(out + ([e2e] if e2e else []))


def markdown_table(result: dict[str, Any]) -> str:
    dev = result["device"]
    out = [
        f"Device: **{dev['adapter']}** ({dev['backend']}); timestamps: {dev['timestamps']}; "
        + (f"torch {dev['torch']} on {dev['torch_device']}" if dev.get("torch") else "no torch comparator"),
    ]
    body = rows(result)
    if body:
        out += ["", "| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" for _ in COLUMNS) + "|"]
        out += ["| " + " | ".join(c.replace("|", "/") for c in r) + " |" for r in body]
    e2e = e2e_table.markdown(result)
    out += ["", e2e] if e2e else []
    out += ["", *[f"- {n}" for n in result.get("notes", [])]]
    return "\n".join(out) + "\n"


def write_json(result: dict[str, Any], path: str) -> None:
    Path(path).write_text(json.dumps(result, indent=1, default=str))


def plot(result: dict[str, Any], directory: str) -> list[str]:
    """PNG plots of throughput against size, ours and the comparators: one file per op suite.

    matmul gets two panels: square products (GFLOP/s against n) and GEMVs (GB/s against the
    weight's elements). A family measured at one size only (attention shapes) stays in the table.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    by_suite: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in result["records"]:
        if "error" not in r and r.get("size") and (r.get("gbps") or r.get("gflops")):
            by_suite[r["suite"]].append(r)
    written = []
    Path(directory).mkdir(parents=True, exist_ok=True)
    for suite, recs in by_suite.items():
        if suite == "matmul":
            panels = [
                ("square matmul", "gflops", "n (an n x n x n product)", [r for r in recs if r["case"] == "square"]),
                (
                    "GEMV 1xK @ KxN",
                    "gbps",
                    "K x N (weight elements)",
                    [r for r in recs if r["case"].startswith("gemv")],
                ),
            ]
        else:
            panels = [(suite, "gbps", "elements", recs)]
        fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.5), squeeze=False)
        for ax, (title, metric, xlabel, items) in zip(axes[0], panels, strict=True):
            _panel(ax, items, metric, f"{title} on {result['device']['adapter']}", xlabel)
        fig.tight_layout()
        path = str(Path(directory) / f"plot_{suite}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def _panel(ax: Any, recs: list[dict[str, Any]], metric: str, title: str, xlabel: str) -> None:
    families: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in recs:
        # row ops: one line per row count (8192 x n), so equal sizes of other shapes do not stack
        rows = f" {r['shape'].split('x')[0]} rows" if r["suite"] in ("reduce", "softmax", "norm") else ""
        families[f"{r['case']}{rows} {r['dtype']}"].append(r)
    for fam, items in families.items():
        if len({r["size"] for r in items}) < 2:
            continue
        items.sort(key=lambda r: r["size"])
        xs = [r["size"] for r in items]
        (line,) = ax.plot(xs, [r.get(metric) or float("nan") for r in items], "o-", label=f"wgjit {fam}")
        for comp, style in (("torch", "s--"), ("torch_compile", "^:"), ("numpy", "x:")):
            cys = [(r["comparators"].get(comp) or {}).get(metric) for r in items]
            if any(cys):
                ax.plot(
                    xs,
                    [c or float("nan") for c in cys],
                    style,
                    color=line.get_color(),
                    alpha=0.6,
                    label=f"{comp} {fam}",
                )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("GFLOP/s" if metric == "gflops" else "GB/s (counted bytes)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
