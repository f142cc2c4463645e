"""Memory planning (passes/plan_memory.py): reuse happens, is legal, and nears the lower bound."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracer as tr
from benchmarks.bench_memory import _minilm_builder, chain
from ir.caps import DeviceCaps
from ir.dtypes import DType
from ir.graph import Graph
from ir.node import Node
from ir.ops import InputArg, Op
from passes import run_pipeline
from passes.pipeline import default_pipeline
from passes.plan_memory import buffer_groups, extent, lower_bound_bytes, memory_report, no_reuse_bytes
from tests.helpers import assert_close

CAPS = DeviceCaps()


def check_plan(graph: Graph) -> None:
    """No two values live at once share a buffer, and every buffer holds what is put in it."""
    _, groups = buffer_groups(graph)
    slot_of = {n.id: n.slot for n in graph}
    slots = graph.schedule.slots
    by_slot: dict[int, list] = {}
    for r, g in groups.items():
        s = slot_of[r]
        assert slots[s].nbytes >= g.nbytes, f"group %{r} of {g.nbytes} bytes in slot {s} of {slots[s].nbytes}"
        if g.input_index is not None:
            assert slots[s].kind == "input"
        by_slot.setdefault(s, []).append(g)
    for s, gs in by_slot.items():
        gs.sort(key=lambda g: g.first)
        for a, b in zip(gs, gs[1:], strict=False):
            assert a.last < b.first, f"slot {s}: %{a.root} [{a.first},{a.last}] overlaps %{b.root} [{b.first},{b.last}]"
    # arena ranges: values live at the same time never share bytes; ranges start aligned
    arena = [(g, slots[slot_of[r]]) for r, g in groups.items() if slots[slot_of[r]].offset is not None]
    for _, info in arena:
        assert info.kind == "temp" and info.offset % CAPS.storage_align == 0
    for i, (g, a) in enumerate(arena):
        for h, b in arena[i + 1 :]:
            if g.first <= h.last and h.first <= g.last:
                assert a.offset + extent(a.nbytes) <= b.offset or b.offset + extent(b.nbytes) <= a.offset, (
                    f"%{g.root} and %{h.root} are live together and overlap in the arena"
                )


def _elementwise_graph(sizes: list[int], links: list[int]) -> Graph:
    """A graph of unary ops: node i+1 reads node links[i] (<= i); sizes vary through reshapes-free casts."""
    nodes = [Node(0, Op.INPUT, (), (sizes[0],), DType.float32, InputArg(0))]
    for i, src in enumerate(links):
        nodes.append(Node(i + 1, Op.EXP, (src,), (sizes[0],), DType.float32))
    return Graph({n.id: n for n in nodes}, (len(nodes) - 1,))


# --- the figures -------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("fusion", [True, False])
def test_hundred_op_chain_peak_near_lower_bound(monkeypatch, fusion):
    monkeypatch.setenv("WGJIT_FUSION", "1" if fusion else "0")
    y, want = chain(100)
    program = tr.compile(y)
    report = memory_report(program.graph)
    check_plan(program.graph)
    assert report.peak <= 1.15 * report.lower_bound, str(report)
    assert report.peak <= 0.25 * report.no_reuse, str(report)  # far below one buffer per value
    assert_close(y.numpy(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
def test_fusion_stores_fewer_bytes():
    y, _ = chain(100)
    graph = y.graph()
    caps = tr.compile(y).device.caps
    fused = run_pipeline(graph, caps, passes=default_pipeline(fusion=True)).graph
    unfused = run_pipeline(graph, caps, passes=default_pipeline(fusion=False)).graph

    def stored(g: Graph) -> int:  # bytes the kernels write
        return sum(n.nbytes for n in g if n.kernel is not None)

    assert stored(fused) < 0.6 * stored(unfused)
    assert memory_report(fused).no_reuse <= memory_report(unfused).no_reuse


@pytest.mark.gpu
@pytest.mark.model
@pytest.mark.skipif(
    not (Path(__file__).resolve().parent.parent / "examples" / "minilm.py").exists(),
    reason="examples/minilm.py not on this branch",
)
def test_minilm_peak_near_lower_bound():
    build = _minilm_builder()
    assert build is not None, "MiniLM needs the examples extra: pip install -e '.[examples]', or pytest --skip-model"
    program = tr.compile(*build())
    report = memory_report(program.graph)
    check_plan(program.graph)
    assert report.peak <= 1.15 * report.lower_bound, str(report)
    assert report.peak < report.no_reuse / 2, str(report)


# --- the planner on hand-made graphs ------------------------------------------------------


def test_lower_bound_and_no_reuse_by_hand():
    # %1 = exp(%0) ; %2 = exp(%1) ; %3 = exp(%2) ; %4 = exp(%1) + ... : a value (%1) read late
    nodes = [Node(0, Op.INPUT, (), (16,), DType.float32, InputArg(0))]
    nodes += [Node(1, Op.EXP, (0,), (16,), DType.float32), Node(2, Op.EXP, (1,), (16,), DType.float32)]
    nodes += [Node(3, Op.EXP, (2,), (16,), DType.float32), Node(4, Op.ADD, (1, 3), (16,), DType.float32)]
    graph = Graph({n.id: n for n in nodes}, (4,))
    planned = run_pipeline(graph, CAPS, passes=default_pipeline(fusion=False)).graph
    check_plan(planned)
    # without in-place: at %3, %1 %2 %3 are live (3 x 64 bytes); every value: 4 x 64
    assert lower_bound_bytes(planned) <= 3 * 64
    assert no_reuse_bytes(planned) <= 4 * 64
    report = memory_report(planned)
    assert report.lower_bound <= report.peak <= report.no_reuse


def test_inplace_chain_is_one_buffer():
    graph = _elementwise_graph([256], list(range(20)))
    planned = run_pipeline(graph, CAPS, passes=default_pipeline(fusion=False)).graph
    check_plan(planned)
    assert sum(1 for n in planned if n.inplace is not None) == 19  # the first op may not overwrite the input
    report = memory_report(planned)
    assert report.peak == report.lower_bound == 256 * 4


def test_temporaries_live_in_the_output_buffer_before_it_is_written():
    # a 64-float temporary, then a 16-float one, then the 64-float output: no pool needed for the first
    nodes = [Node(0, Op.INPUT, (), (64,), DType.float32, InputArg(0, donatable=False))]
    nodes.append(Node(1, Op.EXP, (0,), (64,), DType.float32))
    nodes.append(Node(2, Op.SUM, (1,), (), DType.float32, 1))
    nodes.append(Node(3, Op.SIN, (0,), (64,), DType.float32))
    nodes.append(Node(4, Op.RESHAPE, (2,), (1,), DType.float32, (1,)))
    nodes.append(Node(5, Op.EXPAND, (4,), (64,), DType.float32, (64,)))
    nodes.append(Node(6, Op.MUL, (3, 5), (64,), DType.float32))
    graph = Graph({n.id: n for n in nodes}, (6,))
    planned = run_pipeline(graph, CAPS, passes=default_pipeline(fusion=False)).graph
    check_plan(planned)
    report = memory_report(planned)
    assert report.peak == report.lower_bound, str(report)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_random_plans_are_legal_and_bounded(data):
    n = data.draw(st.integers(2, 30))
    links = [data.draw(st.integers(max(0, i - 3), i)) for i in range(n)]
    sizes = data.draw(st.lists(st.sampled_from([4, 8, 12, 64]), min_size=n + 1, max_size=n + 1))
    nodes = [Node(0, Op.INPUT, (), (sizes[0],), DType.float32, InputArg(0))]
    values = [0]  # node id of each step's result
    for i, link in enumerate(links):
        # a sum and a broadcast change the size, so buffers of several sizes interleave
        src = values[link]
        s_in, s_out = nodes[src].shape[0], sizes[i + 1]
        nid = len(nodes)
        if s_in == s_out:
            nodes.append(Node(nid, Op.EXP, (src,), (s_out,), DType.float32))
        else:
            nodes.append(Node(nid, Op.SUM, (src,), (), DType.float32, 1))
            nodes.append(Node(nid + 1, Op.RESHAPE, (nid,), (1,), DType.float32, (1,)))
            nodes.append(Node(nid + 2, Op.EXPAND, (nid + 1,), (s_out,), DType.float32, (s_out,)))
            nodes.append(Node(nid + 3, Op.COPY, (nid + 2,), (s_out,), DType.float32))
        values.append(len(nodes) - 1)
    outputs = tuple(sorted({values[-1], values[data.draw(st.integers(1, len(values) - 1))]}))
    graph = Graph({nd.id: nd for nd in nodes}, outputs)
    for fusion in (True, False):
        planned = run_pipeline(graph, CAPS, passes=default_pipeline(fusion=fusion)).graph
        check_plan(planned)
        report = memory_report(planned)
        assert report.lower_bound <= report.peak <= report.no_reuse * 2  # an output may grow to 2x


# --- a core bug found on the way ----------------------------------------------------------


@pytest.mark.gpu
def test_inplace_operand_is_part_of_the_kernel_key(monkeypatch):
    """where(c, t, x) and where(c, x, t), each in place over the temporary t, are two shaders."""
    monkeypatch.setenv("WGJIT_FUSION", "0")
    c = tr.tensor(np.array([True, False, True, False]))
    x = tr.tensor(np.arange(4, dtype=np.float32))
    a = tr.where(c, x * 2, x)
    b = tr.where(c, x, x * 2)
    ka = [d.key for d in tr.compile(a).dispatches if d.inplace]
    kb = [d.key for d in tr.compile(b).dispatches if d.inplace]
    assert ka and kb and ka != kb
    assert_close(a.numpy(), np.array([0, 1, 4, 3], dtype=np.float32))
    assert_close(b.numpy(), np.array([0, 2, 2, 6], dtype=np.float32))


# --- the arena ------------------------------------------------------------------------------


ARENA_ARRAYS = [
    np.random.default_rng(3).standard_normal(s, dtype=np.float32) * 0.25
    for s in [(8, 16)] + [(16, 16)] * 4 + [(16, 64), (64, 16)]
]


def _five_live_then_wide(lib, arrays: list) -> object:  # noqa: ANN001
    """Four projections and their combination live at once, later a 4x wider value with two small ones.

    Whole buffers need the wide one plus three small (the wide buffer can hold one small value at a
    time); the lower bound is the wide phase's two small plus the wide one.
    """
    x, w1, w2, w3, w4, w_up, w_down = arrays
    a, b, c, d = x @ w1, x @ w2, x @ w3, x @ w4
    m = a * b + c * d
    h = m @ w_up
    h = np.maximum(h, 0) if lib is np else h.relu()
    return h @ w_down + m


def test_arena_when_whole_buffers_cannot_reach_the_bound():
    arrays = [tr.tensor(a) for a in ARENA_ARRAYS]  # held: no input is donated
    graph = _five_live_then_wide(tr, arrays).graph()
    planned = run_pipeline(graph, CAPS).graph
    check_plan(planned)
    report = memory_report(planned)
    assert report.arena, str(report)
    assert report.peak <= 1.15 * report.lower_bound, str(report)


@pytest.mark.gpu
def test_arena_kernels_bind_their_ranges_read_write_and_compute_the_same():
    arrays = [tr.tensor(a) for a in ARENA_ARRAYS]
    y = _five_live_then_wide(tr, arrays)
    program = tr.compile(y)
    assert any(s.offset is not None for s in program.slots)
    check_plan(program.graph)
    arena = {i for i, s in enumerate(program.slots) if s.offset is not None}
    checked = 0
    for d in program.dispatches:
        code = program.sources[d.key]
        if d.slots[-1] in arena and any(s in arena for s in d.slots[:-1]):
            assert "read_write> in" in code  # a read-only range of the written buffer would not validate
            checked += 1
    assert checked
    assert_close(y.numpy(), _five_live_then_wide(np, ARENA_ARRAYS), rtol=1e-4, atol=1e-5)
