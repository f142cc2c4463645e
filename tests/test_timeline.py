"""tr.timeline(): host stamps and per-chunk GPU timestamps of a loop's real runs (backend_wgpu.timeline)."""

from __future__ import annotations

import dataclasses
import json
import math
import threading
import weakref

import numpy as np
import pytest

import backend_wgpu.device as device_module
import backend_wgpu.program as program_module
import backend_wgpu.timeline as timeline_module
import tracer as tr
from tests.helpers import assert_close

LINKS = 7
CHUNK = 2


@pytest.fixture
def chain(monkeypatch):  # noqa: ANN001, ANN201
    """A jitted chain of matmul + softmax links, its input, the numpy reference and its dispatch count."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((8, 8), dtype=np.float32) / 3
    w = tr.tensor(a)

    @tr.jit
    def fn(x: tr.Tensor) -> tr.Tensor:
        for _ in range(LINKS):
            x = (x @ w).softmax(-1)
        return x

    x0 = rng.standard_normal((4, 8), dtype=np.float32)
    want = x0
    for _ in range(LINKS):
        z = want @ a
        z = np.exp(z - z.max(-1, keepdims=True))
        want = z / z.sum(-1, keepdims=True)
    x = tr.tensor(x0)
    monkeypatch.setattr(program_module, "SUBMIT_CHUNK", CHUNK)
    monkeypatch.setattr(program_module, "SUBMIT_GROWTH", 1.0)
    untimed = fn(x).numpy()  # traced and compiled outside the timeline
    program = next(iter(fn.traces.values())).program
    return fn, x, want, untimed, len(program.dispatches)


def _check_consistent(calls: list[timeline_module.CallTimes], gpu: bool) -> None:
    """What every call's figures must satisfy, within each clock."""
    for i, c in enumerate(calls):
        assert c.wall > 0
        assert 0 <= c.prelude <= c.to_first_submit <= c.wall
        # the host durations of a call with one read add up to its wall time (one clock, stamps in order)
        parts = c.to_first_submit + c.submitting + c.to_map_done + c.copy_out + c.after
        assert math.isclose(parts, c.wall, rel_tol=1e-9, abs_tol=1e-9)
        assert 0 <= c.to_read <= c.to_map_done and 0 <= c.map_wait <= c.to_map_done
        if not gpu:
            assert c.passes == 0 and c.gpu_busy is None and c.gpu_span is None and c.gpu_period is None
            continue
        assert c.passes == c.chunks
        assert 0 < c.gpu_busy <= c.gpu_span
        assert math.isclose(c.gpu_gaps, c.gpu_span - c.gpu_busy, abs_tol=1e-9) and c.gpu_gaps >= 0
        assert 0 <= c.gpu_max_gap <= c.gpu_gaps + 1e-9
        if i == len(calls) - 1:
            assert c.gpu_idle_after is None and c.gpu_period is None
        else:  # one queue runs the passes in order: this call's passes ended before the next call's began
            assert c.gpu_idle_after >= 0
            assert math.isclose(c.gpu_period, c.gpu_span + c.gpu_idle_after, rel_tol=1e-9, abs_tol=1e-6)


def test_records_one_pass_per_chunk_and_keeps_the_values(device, chain) -> None:
    fn, x, want, untimed, dispatches = chain
    chunks = -(-dispatches // CHUNK)
    assert chunks > 1, "the test needs a run of several chunks"
    submits = device.stats["submits"]
    calls = 5
    with tr.timeline() as tl:
        got = [fn(x).numpy() for _ in range(calls)]
    assert device.stats["submits"] - submits == calls * chunks
    for g in got:
        np.testing.assert_array_equal(g, untimed)  # the same program, the same bits
        assert_close(g, want, rtol=1e-4, atol=1e-5)
    recorded = tl.calls()
    assert len(recorded) == calls
    assert all(c.dispatches == dispatches and c.chunks == chunks and c.reads == 1 for c in recorded)
    assert tl.gpu == device.caps.timestamps
    _check_consistent(recorded, tl.gpu)
    (report,) = tl.report()
    assert len(report.calls) == calls and report.chunks == chunks and report.dispatches == dispatches
    assert report.median("wall") == pytest.approx(np.median([c.wall for c in recorded]))
    if tl.gpu:
        assert report.median("gpu_busy") <= report.median("gpu_span")


def test_disabled_after_the_block_and_nothing_recorded_then(chain) -> None:
    fn, x, _, untimed, _ = chain
    with tr.timeline() as tl:
        assert program_module._TIMELINE is tl and device_module.READ_STAMP is not None
        fn(x).numpy()
    assert program_module._TIMELINE is None and device_module.READ_STAMP is None
    np.testing.assert_array_equal(fn(x).numpy(), untimed)
    assert len(tl.calls()) == 1
    with pytest.raises(RuntimeError, match="already recording"), tr.timeline(), tr.timeline():
        pass
    assert program_module._TIMELINE is None


def test_an_error_inside_the_block_stops_it_cleanly(chain) -> None:
    fn, x, _, untimed, dispatches = chain
    with pytest.raises(ZeroDivisionError), tr.timeline() as tl:
        fn(x).numpy()
        fn(x).numpy()
        1 / 0  # noqa: B018
    assert program_module._TIMELINE is None and device_module.READ_STAMP is None
    calls = tl.calls()
    assert len(calls) == 2 and all(c.chunks == -(-dispatches // CHUNK) for c in calls)
    _check_consistent(calls, tl.gpu)
    np.testing.assert_array_equal(fn(x).numpy(), untimed)


def test_host_only_without_timestamps(device, chain, monkeypatch) -> None:
    fn, x, _, untimed, dispatches = chain
    monkeypatch.setattr(device, "caps", dataclasses.replace(device.caps, timestamps=False))
    with tr.timeline() as tl:
        got = [fn(x).numpy() for _ in range(3)]
    assert not tl.gpu and any("no timestamp-query" in n for n in tl.notes)
    assert all(np.array_equal(g, untimed) for g in got)
    calls = tl.calls()
    assert len(calls) == 3 and all(c.chunks == -(-dispatches // CHUNK) for c in calls)
    _check_consistent(calls, gpu=False)
    assert "no timestamp-query" in tl.table()
    medians = tl.to_dict()["programs"][0]["median_ms"]
    assert medians["gpu_busy"] is None and medians["wall"] > 0


def test_query_sets_fill_roll_over_and_are_read_inside_the_loop(device, chain, monkeypatch) -> None:
    if not device.caps.timestamps:
        pytest.skip("this adapter has no timestamp queries")
    fn, x, _, untimed, dispatches = chain
    chunks = -(-dispatches // CHUNK)
    monkeypatch.setattr(timeline_module, "QUERIES_PER_SET", 6)  # 3 passes a set
    monkeypatch.setattr(timeline_module, "MAX_PENDING_SETS", 2)
    monkeypatch.setattr(timeline_module, "_POOLS", weakref.WeakKeyDictionary())  # no larger pooled sets
    calls = 4
    with tr.timeline() as tl:
        got = [fn(x).numpy() for _ in range(calls)]
    assert all(np.array_equal(g, untimed) for g in got)
    assert calls * chunks > 3 * 2  # more passes than two sets hold: read back inside the loop
    assert any("read back inside the loop" in n for n in tl.notes)
    recorded = tl.calls()
    assert [c.passes for c in recorded] == [chunks] * calls
    _check_consistent(recorded, gpu=True)
    assert len(timeline_module._POOLS[device]) <= timeline_module.POOL_SETS


def test_other_threads_and_caller_timed_runs(device, chain) -> None:
    fn, x, _, untimed, _ = chain
    out: list[np.ndarray] = []
    with tr.timeline() as tl:
        worker = threading.Thread(target=lambda: out.append(fn(x).numpy()))
        worker.start()
        worker.join()
        fn(x).numpy()
    assert tl.skipped_runs == 1 and len(tl.calls()) == 1
    np.testing.assert_array_equal(out[0], untimed)
    if device.caps.timestamps:  # a run the caller brackets with its own timestamps records host stamps only
        import wgpu

        from tracer.graph_builder import build_graph
        from tracer.realize import device_buffer, program_for

        built = build_graph([(x * 2.0 + 1.0)._lazy])
        program = program_for(built.graph)
        buffers = [device_buffer(lz) for lz in built.inputs]
        qs = device.device.create_query_set(type=wgpu.QueryType.timestamp, count=2)
        writes = {"query_set": qs, "beginning_of_pass_write_index": 0, "end_of_pass_write_index": 1}
        with tr.timeline() as tl:
            program.run(buffers, timestamp_writes=writes)
        (call,) = tl.calls()
        assert call.chunks == 0 and call.passes == 0 and call.to_first_submit is None


def test_to_dict_is_json_and_matches_the_calls(chain) -> None:
    fn, x, _, _, dispatches = chain
    with tr.timeline() as tl:
        for _ in range(3):
            fn(x).numpy()
    d = json.loads(json.dumps(tl.to_dict()))
    (prog,) = d["programs"]
    assert prog["calls"] == 3 and prog["dispatches"] == dispatches and len(prog["per_call_ms"]) == 3
    assert prog["median_ms"]["wall"] == pytest.approx(np.median([c["wall"] for c in prog["per_call_ms"]]))
    assert d["submit_chunk"] == CHUNK and d["gpu_timestamps"] == tl.gpu
    text = tl.table("chain")
    assert text.splitlines()[-1].startswith("chain") or "note:" in text


def test_device_benchmark_runs_the_decoder_loop_per_chunk_setting(tmp_path, capsys) -> None:
    """benchmarks/device/timeline.py on the tiny decoder: one row per chunk setting, JSON beside the tables."""
    from benchmarks.device import timeline as bench

    before = program_module.SUBMIT_CHUNK
    out = tmp_path / "timeline.json"
    bench.main(["--cases", "tiny", "--calls", "3", "--chunks", "2,4", "--warm", "0", "--plain", "--json", str(out)])
    assert program_module.SUBMIT_CHUNK == before  # restored
    text = capsys.readouterr().out
    assert "| decoder tiny | 2x2 |" in text or "| decoder tiny | 2 |" in text
    rows = json.loads(out.read_text())["rows"]
    assert [r["setting"].split("x")[0] for r in rows] == ["2", "4"]
    for r in rows:
        (main, *_) = r["timeline"]["programs"]
        assert main["chunks"] == len(
            program_module._chunks(r["dispatches"], int(r["setting"].split("x")[0]), program_module.SUBMIT_GROWTH)
        )
        assert r["timeline"]["submit_chunk"] == int(r["setting"].split("x")[0])
        assert r["host_only"]["gpu_timestamps"] is False and r["host_only"]["programs"]


def test_a_submission_that_fails_inside_a_run_leaves_no_unwritten_query(device, chain, monkeypatch) -> None:
    """A chunk whose command buffer never went out takes no query pair: resolving never reads an unwritten one."""
    fn, x, _, untimed, dispatches = chain
    chunks = -(-dispatches // CHUNK)
    real = program_module._FINISH
    count = {"n": 0}

    def finish(*args):  # noqa: ANN002, ANN202
        count["n"] += 1
        if count["n"] == chunks + 2:  # the second call's second chunk
            raise RuntimeError("injected finish failure")
        return real(*args)

    monkeypatch.setattr(program_module, "_FINISH", finish)
    with tr.timeline() as tl:
        first = fn(x).numpy()
        with pytest.raises(RuntimeError, match="injected"):
            fn(x).numpy()
        last = fn(x).numpy()
    np.testing.assert_array_equal(first, untimed)
    np.testing.assert_array_equal(last, untimed)
    calls = tl.calls()
    assert [c.chunks for c in calls] == [chunks, 1, chunks]  # the failed call submitted its first chunk only
    if tl.gpu:
        assert [c.passes for c in calls] == [chunks, 1, chunks]
        assert not any("unusable" in n for n in tl.notes)


def test_calls_are_grouped_by_program(chain) -> None:
    fn, x, _, untimed, dispatches = chain
    with tr.timeline() as tl:
        a = fn(x).numpy()
        b = (x * 3.0).numpy()
        c = fn(x).numpy()
    np.testing.assert_array_equal(a, untimed)
    np.testing.assert_array_equal(c, untimed)
    np.testing.assert_allclose(b, x.numpy() * 3.0)
    reports = tl.report()
    assert [len(r.calls) for r in reports] == [2, 1] and reports[0].dispatches == dispatches
    assert [r["calls"] for r in tl.to_dict()["programs"]] == [2, 1]
