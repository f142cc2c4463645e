"""The device diagnostics of the host path and of gemm_thin, run small on any adapter: their stamps come in
order and are undone after, and the thin sweep times gemm_thin beside the blocked GEMM with checked values."""

from __future__ import annotations

import importlib

import pytest

import backend_wgpu.device as device_module
import backend_wgpu.program as program_module
from backend_wgpu import get_device

pytestmark = pytest.mark.gpu


def test_critical_path_stamps_a_replay_in_order_and_undoes_its_wrappers() -> None:
    from benchmarks.device import critical_path
    from benchmarks.device.timeline import decoder_case

    jit_module = importlib.import_module("tracer.jit")
    originals = (program_module.Program.run, device_module.Device.read_array, jit_module.JitFunction.__call__)
    rows, spent, walls = critical_path.measure_calls(decoder_case("tiny"), calls=6, warm_s=0.2)
    assert len(rows) == len(spent) == len(walls) == 6 and min(walls) > 0
    order = ["b jit call", "d bound", "f Program.run", "i plan", "j 1st submit returned", "k replay returned"]
    # a call that first ran another program (the decode loop's prefill, when its cache filled) stamps that
    # program's stages before its own jit call: the rest show each stage in the order they run
    plain = [(row, used) for row, used in zip(rows, spent, strict=True) if row["b jit call"] < row["f Program.run"]]
    assert plain, rows
    for row, used in plain:
        stamps = [row[k] for k in order]
        assert stamps == sorted(stamps) and stamps[0] >= 0, row
        assert used["i plan"] > 0 and used["j 1st submit returned"] > 0
    now = (program_module.Program.run, device_module.Device.read_array, jit_module.JitFunction.__call__)
    assert now == originals  # the wrappers are gone: later code runs unwrapped


def test_thin_sweep_times_gemm_thin_beside_the_blocked_gemm(monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks.device import gemm_sweep
    from benchmarks.timing import ProgramTimer

    monkeypatch.setattr(gemm_sweep, "THIN_SWEEP", True)
    case = gemm_sweep.Case("thin 8x24x64", (), 8, 24, 64, True)
    medians, builtin, failures = gemm_sweep.run_case(case, ProgramTimer(get_device()), "cpu", 1, 2)
    assert failures == 0
    assert "thin" in medians and builtin in medians and builtin != "thin"
    import passes.select_kernels as rules

    assert rules.THIN_GEMM_MAX_M == 64 and rules.THIN_GEMM_ALWAYS_M == 16  # thin_rows restored the rule


def test_readback_map_probe_reads_back_every_layout(monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # noqa: ANN001
    """benchmarks/device/readback_map.py at 1 MB: every layout's copy arrives whole (it asserts the values)."""
    from benchmarks.device import readback_map

    monkeypatch.setattr("sys.argv", ["readback_map", "--mb", "1", "--reads", "2"])
    assert readback_map.main() == 0
    table = capsys.readouterr().out.splitlines()[-5:]
    assert [line.split()[0] for line in table] == ["one", "2MB", "512KB", "64KB", "host"]


def test_qthin_sweep_checks_and_times_every_setting(monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # noqa: ANN001
    """benchmarks/device/qthin_sweep.py --quick: qgemm, the rule and each qgemm_thin setting (split ones too)
    checked against numpy and timed."""
    from benchmarks.device import qthin_sweep

    monkeypatch.setattr(qthin_sweep, "QUICK_ROWS", [3])
    monkeypatch.setattr("sys.argv", ["qthin_sweep", "--quick", "--formats", "q4_0", "--blocks", "1", "--runs", "1"])
    assert qthin_sweep.main() == 0
    out = capsys.readouterr().out
    assert "0 check failures" in out and "c4t64s" in out and "qgemm " in out


def test_qprefill_compares_the_rules_with_qgemm(monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # noqa: ANN001
    """benchmarks/device/qprefill.py on the tiny decoder: four programs from one graph agree, each timed."""
    from benchmarks.device import qprefill

    argv = ["qprefill", "--config", "tiny", "--formats", "q8_0", "--lengths", "5", "--blocks", "1", "--runs", "1"]
    monkeypatch.setattr("sys.argv", argv)
    ((fmt, tokens, times, err),) = qprefill.main()
    assert (fmt, tokens) == ("q8_0", 5) and err < 1e-4
    assert set(times) == {"rules", "no_dequant", "qgemm", "dequant_all"} and min(min(t) for t in times.values()) > 0
    assert "every weight that fits dequantized" in capsys.readouterr().out


def test_occupancy_probe_builds_the_asked_tiles_at_each_multiple(monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # noqa: ANN001
    """benchmarks/device/occupancy.py, two multiprocessors assumed: one flash tile and one GEMM configuration,
    each compiled as asked for 1-4 times as many workgroups (one per head, or per output tile), a row each."""
    from benchmarks.device import occupancy

    # no subgroup row maxes: the tile fits any adapter
    monkeypatch.setitem(occupancy.TILES, "32x16t8", (32, 16, 8, False, True, False, False, False, False))
    monkeypatch.setattr(
        "sys.argv",
        ["occupancy", "--sms", "2", "--keys", "64", "--blocks", "1", "--runs", "1"]
        + ["--tiles", "32x16t8", "--gemm", "b64"],
    )
    built = occupancy.attention_programs("32x16t8", 2, 64)
    assert built is not None
    programs, label = built
    assert sorted(programs) == [1, 2, 3, 4] and ":32x16t8:" in label, label
    heads = [p.graph[p.graph.outputs[0]].shape[1] for p, _ in programs.values()]
    assert heads == [2, 4, 6, 8]  # one 32-row block per head: 2, 4, 6, 8 workgroups
    gemms, glabel = occupancy.gemm_programs("b64", 2, 64)
    assert ":64x64x16:" in glabel and [p.graph[p.graph.outputs[0]].shape for p, _ in gemms.values()] == [
        (64, 128),
        (128, 128),
        (192, 128),
        (256, 128),
    ]
    assert occupancy.main() == 0
    table = capsys.readouterr().out.splitlines()[-2:]
    assert [line.split()[:2] for line in table] == [["flash", "32x16t8"], ["gemm", "b64"]]
    monkeypatch.setattr("sys.argv", ["occupancy", "--gemm", "b64,nonesuch"])
    with pytest.raises(SystemExit):
        occupancy.main()
