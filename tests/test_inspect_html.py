"""The HTML report: its tables, kernels and diffs read back, and the page opened in headless Chromium."""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from html.parser import HTMLParser

import pytest
from inspect_common import recorded_tiny

from tracer.inspect.html import NODE_COLUMNS, report

# tiny() shows an in-place chain and buffer reuse: fusion would fold them into one kernel
pytestmark = pytest.mark.usefixtures("no_fusion")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class Tables(HTMLParser):
    """Every <table> with an id: its header cells and its body rows (cell text)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, dict[str, list]] = {}
        self._id: str | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._in_head = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table" and a.get("id"):
            self._id = a["id"]
            self.tables[self._id] = {"head": [], "rows": []}
        elif tag == "thead":
            self._in_head = True
        elif tag == "tr" and self._id:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "table":
            self._id = None
        elif tag == "thead":
            self._in_head = False
        elif tag in ("td", "th") and self._cell is not None:
            self._row.append("".join(self._cell))
            self._cell = None
        elif tag == "tr" and self._row is not None and self._id:
            self.tables[self._id]["head" if self._in_head else "rows"].append(self._row)
            self._row = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def tables_of(page: str) -> dict[str, dict[str, list]]:
    parser = Tables()
    parser.feed(page)
    return parser.tables


@pytest.fixture(scope="module")
def rec():
    r = recorded_tiny()
    r.profile = r.program.profile(repeats=1)
    return r


def test_report_tables_kernels_and_diffs(rec):
    page = report([rec], "tiny.py", "test device", argv=["--x"])
    graph = rec.program.graph
    tables = tables_of(page)
    nodes = tables["nodes-0"]
    assert nodes["head"] == [list(NODE_COLUMNS)]
    rows = {int(r[0]): dict(zip(NODE_COLUMNS, r, strict=True)) for r in nodes["rows"]}
    assert list(rows) == list(graph.nodes)
    dispatch_of = {d.node: (i, d) for i, d in enumerate(rec.program.dispatches)}
    times = {k.node: k.seconds for k in rec.profile.kernels}
    for nid, row in rows.items():
        n = graph[nid]
        assert row["op"] == n.op.value and row["dtype"] == n.dtype.value and row["slot"] == str(n.slot)
        assert row["inputs"] == " ".join(f"%{s}" for s in n.srcs)
        assert row["in-place on"] == (f"%{n.srcs[n.inplace]}" if n.inplace is not None else "")
        if nid in dispatch_of:
            i, d = dispatch_of[nid]
            assert (row["kernel"], row["variant"], row["width"], row["dispatch"]) == (
                d.kernel,
                d.variant,
                str(d.element),
                str(i),
            )
            assert row["count"] == "x".join(map(str, d.workgroup_count))
            assert float(row["time (us)"]) == pytest.approx(times[nid] * 1e6, abs=0.05)
    assert [int(r[0]) for r in tables["profile-0"]["rows"]] == [d.node for d in rec.program.dispatches]
    assert len(tables["slots-0"]["rows"]) == len(rec.program.slots)
    assert [r[0] for r in tables["passes-0"]["rows"]][:-1] == list(rec.pass_seconds)
    for key, code in rec.program.sources.items():  # every kernel's WGSL, escaped
        assert html.escape(key) in page and html.escape(code) in page
    # one diff per pass; fold_views turned the expand into a strided view
    passes = re.findall(r'<details class="pass"><summary>(\w+)</summary>(.*?)</details>', page, re.S)
    assert [p for p, _ in passes] == [name for name, _ in rec.stages[1:]]
    fold = dict(passes)["fold_views"]
    assert re.search(r'<span class="del">-%4 = expand\(%3\)', fold) and re.search(
        r'<span class="add">\+%4 = view\(%3\)', fold
    )
    assert "no change" in dict(passes)["dce"]
    assert ("<svg" in page) == bool(shutil.which("dot"))
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page), (
        "the report must not load anything from the network"
    )


def test_report_without_graphviz_shows_dot_text(rec, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    page = report([rec], "tiny.py")
    assert "<svg" not in page and "apt-get install graphviz" in page
    assert '<pre class="dot">digraph wgjit {' in page
    assert len(tables_of(page)["nodes-0"]["rows"]) == len(rec.program.graph)


def open_in_chromium(path: str, tmp_path, fragment: str = "") -> tuple[str, list[str]]:
    """The DOM after the page's scripts ran, and every console message the page produced."""
    profile_dir = tmp_path / "chromium-profile"
    cmd = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile_dir}",
        "--enable-logging=stderr", "--v=0", "--dump-dom", f"file://{path}{fragment}",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, timeout=120, check=False)
    err = done.stderr.decode(errors="replace")
    console = [line for line in err.splitlines() if ":CONSOLE" in line]
    assert done.returncode == 0, err[-2000:]
    return done.stdout.decode(), console


@pytest.mark.skipif(
    CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium; ./dev test installs it)"
)
def test_console_check_catches_a_broken_page(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><script>throw new Error('wgjit-broken');</script></body></html>")
    _, console = open_in_chromium(str(bad), tmp_path)
    assert any("Uncaught Error: wgjit-broken" in line for line in console)


@pytest.mark.skipif(
    CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium; ./dev test installs it)"
)
def test_report_opens_in_chromium_with_graph_and_sortable_table(rec, tmp_path):
    path = tmp_path / "index.html"
    path.write_text(report([rec], "tiny.py", "test device"))
    dom, console = open_in_chromium(str(path), tmp_path, "#sort=nodes-0:0:desc")
    assert console == [], console
    assert 'data-ready="1"' in dom  # the script ran to its end
    tables = tables_of(dom)
    ids = [int(r[0]) for r in tables["nodes-0"]["rows"]]
    assert ids == sorted(rec.program.graph.nodes, reverse=True)  # sorted by the page's own script
    assert 'aria-sort="descending"' in dom
    if shutil.which("dot"):
        picture = dom.split('<div class="graph">')[1]
        assert picture.lstrip().startswith("<svg") and picture.count('class="node"') >= len(rec.program.graph)
    else:
        assert '<pre class="dot">' in dom


def test_huge_graphs_are_not_drawn(rec, monkeypatch):
    import tracer.inspect.dot as dot_module

    monkeypatch.setattr(dot_module, "MAX_DRAWN_NODES", 3)
    page = report([rec], "tiny.py")
    assert "<svg" not in page and f"a graph of {len(rec.program.graph)} nodes is not drawn (over 3)" in page
    assert len(tables_of(page)["nodes-0"]["rows"]) == len(rec.program.graph)
