"""Autotuning: the per-user cache, WGJIT_AUTOTUNE=0, explain's wording, checked candidates, `wgjit tune`.

Every test points the cache at its own directory (WGJIT_CACHE_DIR); timings on lavapipe are
only used to pick a winner, never asserted.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gemm_tuning import gemm_keys, run_tuned, table_for

import tracer as tr
from backend_wgpu import get_device
from backend_wgpu.autotune import problem_graph, tunable_problems, tune_gemm, tune_graphs
from backend_wgpu.kernels import KERNELS
from backend_wgpu.kernels.matmul.gemm_blocked import BlockedGemmKernel
from backend_wgpu.tuning_cache import adapter_key, load_table, save_table
from ir.caps import DeviceCaps
from ir.tuning import TunedEntry, TuningTable, bucket
from passes import run_pipeline
from passes import select_kernels as sk
from passes.dce import dce
from passes.fold_views import fold_views
from tracer.graph_builder import build_graph
from tracer.inspect.why import why

RNG = np.random.default_rng(5)
CAPS_A = DeviceCaps(name="GPU A", driver="driver 1", backend="Vulkan")
ENTRY = TunedEntry("b64t8", 1.5e-5, "b64", 2.5e-5, ("b32x64",))


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("WGJIT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("WGJIT_AUTOTUNE", raising=False)
    return tmp_path


def randn(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


# --- the cache file ------------------------------------------------------------------------------
def test_cache_round_trip_keyed_by_adapter(cache_dir: Path) -> None:
    table = TuningTable().with_entry("gemm k1", ENTRY)
    path = save_table(CAPS_A, table)
    assert path == cache_dir / "tuning.json"
    assert load_table(CAPS_A).get("gemm k1") == ENTRY
    assert load_table(CAPS_A).source == str(path)
    # another adapter, or the same one with another driver, starts from the built-in rules
    assert len(load_table(dataclasses.replace(CAPS_A, name="GPU B"))) == 0
    assert len(load_table(dataclasses.replace(CAPS_A, driver="driver 2"))) == 0
    # saving another adapter's table keeps the first one's
    save_table(dataclasses.replace(CAPS_A, name="GPU B"), TuningTable().with_entry("gemm k2", ENTRY))
    data = json.loads(path.read_text())
    assert set(data["adapters"]) == {adapter_key(CAPS_A), "GPU B | driver 1 | Vulkan"}
    assert load_table(CAPS_A).get("gemm k1") == ENTRY


@pytest.mark.parametrize(
    "content",
    ['{"wgjit_tuning": 1, "adapters": {', "not json at all", '{"wgjit_tuning": 99, "adapters": {}}', "[1, 2]"],
)
def test_corrupt_cache_warns_and_keeps_builtin_rules(cache_dir: Path, content: str) -> None:
    (cache_dir / "tuning.json").write_text(content)
    with pytest.warns(UserWarning, match="ignoring the tuning cache"):
        table = load_table(CAPS_A)
    assert len(table) == 0
    # and a save replaces the unreadable file with a good one
    save_table(CAPS_A, TuningTable().with_entry("gemm k1", ENTRY))
    assert load_table(CAPS_A).get("gemm k1") == ENTRY


def test_malformed_entry_is_skipped_with_a_warning(cache_dir: Path) -> None:
    good = ENTRY.to_json()
    data = {"wgjit_tuning": 1, "adapters": {adapter_key(CAPS_A): {"entries": {"ok": good, "bad": {"config": 3}}}}}
    (cache_dir / "tuning.json").write_text(json.dumps(data))
    with pytest.warns(UserWarning, match="1 malformed"):
        table = load_table(CAPS_A)
    assert table.get("ok") == ENTRY and table.get("bad") is None


def test_autotune_off_ignores_the_cache(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    save_table(CAPS_A, TuningTable().with_entry("gemm k1", ENTRY))
    monkeypatch.setenv("WGJIT_AUTOTUNE", "0")
    assert len(load_table(CAPS_A)) == 0
    # tuning more under WGJIT_AUTOTUNE=0 adds to the file and forgets nothing
    save_table(CAPS_A, TuningTable().with_entry("gemm k2", ENTRY))
    monkeypatch.setenv("WGJIT_AUTOTUNE", "1")
    assert {k for k, _ in load_table(CAPS_A).entries} == {"gemm k1", "gemm k2"}


def test_bucket() -> None:
    assert [bucket(n) for n in (0, 1, 2, 3, 384, 512, 513, 1536)] == [1, 1, 2, 4, 512, 512, 1024, 2048]


# --- select_kernels reads the table as data ---------------------------------------------------------
def _graph(y: tr.Tensor) -> object:
    return build_graph([y._lazy]).graph


def test_select_kernels_uses_a_tuned_entry_and_explain_says_so() -> None:
    y = tr.tensor(randn(70, 50)) @ tr.tensor(randn(50, 90))
    graph, caps = _graph(y), DeviceCaps(max_workgroup_storage=32768)
    (key,) = gemm_keys(graph, caps)
    assert key == "gemm_blocked float32,float32->float32 a_s.b_s.o1 b1 m128 n128 k64"  # k = 50, n = 90: no vec4 loads
    tuned = dataclasses.replace(caps, tuning=TuningTable(((key, ENTRY),), source="/x/tuning.json"))
    g = run_pipeline(graph, tuned).graph
    (mm,) = [n for n in g if n.kernel is not None and n.kernel.name == "gemm_blocked"]
    assert mm.kernel.param("config") == "b64t8" and mm.kernel.workgroup == (8, 8, 1)
    said = why(g, mm)
    assert "b64t8 tiles 64x64x16" in said
    assert f"tuned (/x/tuning.json, entry '{key}': b64t8 15.0 us, built-in b64 25.0 us)" in said
    # without the table: the built-in rule, and explain says that
    g0 = run_pipeline(graph, caps).graph
    (mm0,) = [n for n in g0 if n.kernel is not None and n.kernel.name == "gemm_blocked"]
    assert mm0.kernel.param("config") == "b64" and why(g0, mm0).endswith("; built-in rule")


def test_unknown_or_unfitting_entry_falls_back_to_builtin() -> None:
    y = tr.tensor(randn(70, 50)) @ tr.tensor(randn(50, 90))
    graph, caps = _graph(y), DeviceCaps(max_workgroup_storage=16384)
    (key,) = gemm_keys(graph, caps)
    for config in ("no_such_config", "b128k16"):  # b128k16 needs 32 KiB of workgroup memory
        table = TuningTable(((key, dataclasses.replace(ENTRY, config=config)),))
        g = run_pipeline(graph, dataclasses.replace(caps, tuning=table)).graph
        (mm,) = [n for n in g if n.kernel is not None and n.kernel.name == "gemm_blocked"]
        assert mm.kernel.param("config") == "b64" and mm.kernel.param("tuned") is None


def test_the_device_loads_the_cache_and_autotune_off_keeps_builtin(cache_dir: Path) -> None:
    """A fresh process with a cache entry for this adapter runs the tuned config; WGJIT_AUTOTUNE=0 does not."""
    dev = get_device()
    y = tr.tensor(randn(40, 24)) @ tr.tensor(randn(24, 36))
    (key,) = gemm_keys(_graph(y), dev.caps)
    save_table(dev.caps, TuningTable().with_entry(key, ENTRY))
    script = (
        "import numpy as np, tracer as tr\n"
        "rng = np.random.default_rng(1)\n"
        "a, b = rng.standard_normal((40, 24)).astype(np.float32), rng.standard_normal((24, 36)).astype(np.float32)\n"
        "y = tr.tensor(a) @ tr.tensor(b)\n"
        "print([d.workgroup_size for d in tr.compile(y).dispatches])\n"
        "assert np.abs(y.numpy() - a.astype(np.float64) @ b).max() < 1e-4\n"
    )
    env = dict(os.environ, WGJIT_CACHE_DIR=str(cache_dir))
    on = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    off = subprocess.run(
        [sys.executable, "-c", script], env=dict(env, WGJIT_AUTOTUNE="0"), capture_output=True, text=True, timeout=300
    )
    assert on.returncode == 0 and off.returncode == 0, on.stderr + off.stderr
    # the entry names b64t8 (8x8 threads); the built-in rule picks b64 (16x16)
    assert on.stdout.strip() == "[(8, 8, 1)]" and off.stdout.strip() == "[(16, 16, 1)]", (on.stdout, off.stdout)


# --- tuning ----------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_tuned_config_gives_numpys_answer() -> None:
    a, b = randn(3, 37, 21), randn(21, 50)
    got, program = run_tuned(tr.tensor(a) @ tr.tensor(b), "b64x128")
    assert any(d.workgroup_size == (16, 8, 1) for d in program.dispatches)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


class _DropsFirstK(BlockedGemmKernel):
    """A deliberately wrong GEMM: the first k step of every tile is skipped."""

    name = "gemm_drops_k"

    def _k_step(self, b: object, kk: int) -> None:
        if kk:
            super()._k_step(b, kk)


@pytest.mark.gpu
def test_wrong_candidate_is_rejected(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(KERNELS, _DropsFirstK.name, _DropsFirstK)
    wrong = dataclasses.replace(sk.GEMM_CONFIGS["b64t8"], kernel=_DropsFirstK.name)
    monkeypatch.setitem(sk.GEMM_CONFIGS, "wrong", wrong)
    y = tr.tensor(randn(30, 40)) @ tr.tensor(randn(40, 20))
    dev = get_device()
    g = fold_views(dce(_graph(y), dev.caps), dev.caps)
    (p,) = tunable_problems([g]).values()
    result = tune_gemm(p, dev, repeats=1, candidates=["wrong", "b64"])
    assert "wrong" in result.rejected and "max |difference|" in result.rejected["wrong"]
    assert result.entry.config == "b64" and result.entry.rejected == ("wrong",)
    assert set(result.times) == {"b64"}


@pytest.mark.gpu
def test_tune_graphs_saves_installs_and_is_used(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import backend_wgpu.autotune as at

    # two candidates keep lavapipe quick (the CLI times every configuration that fits)
    monkeypatch.setattr(at, "matmul_candidates", lambda p, caps: ["b64", "b32x64"])
    dev = get_device()
    monkeypatch.setattr(dev, "caps", dev.caps)  # restored afterwards: tune_graphs installs its table
    a, b = randn(24, 40), randn(40, 28)
    g = fold_views(dce(_graph(tr.tensor(a) @ tr.tensor(b)), dev.caps), dev.caps)
    (key,) = tunable_problems([g])
    (r,) = tune_graphs([g], dev, repeats=1)
    assert r.key == key and r.entry.config in ("b64", "b32x64") and r.entry.builtin == "b64"
    assert set(r.times) == {"b64", "b32x64"}
    assert load_table(dev.caps).get(key) == r.entry  # in the file
    assert dev.caps.tuning.get(key) == r.entry  # and on the device
    y = tr.tensor(a) @ tr.tensor(b)
    d = [d for d in tr.compile(y).dispatches if d.kernel == "gemm_blocked"][0]
    assert (d.workgroup_size == (16, 8, 1)) == (r.entry.config == "b32x64")
    np.testing.assert_allclose(y.numpy(), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_problem_graph_matches_numpy_layouts() -> None:
    """The tuner's stand-in graph reproduces strided, offset and broadcast operands."""
    x, w = tr.tensor(randn(2, 9, 12)), tr.tensor(randn(30, 12))
    y = x[:, 1:8] @ w[::2].T  # A offset rows, B transposed with a row stride of 2, broadcast over batch
    dev = get_device()
    g = fold_views(dce(_graph(y), dev.caps), dev.caps)
    (p,) = tunable_problems([g]).values()
    graph, hosts, want = problem_graph(p, np.random.default_rng(0))
    assert want.shape == (2, 7, 15)
    result = tune_gemm(p, dev, repeats=1, candidates=["b64"])
    assert result.times and not result.rejected


# --- the command ---------------------------------------------------------------------------------------
TINY = """\
import numpy as np
import tracer as tr
rng = np.random.default_rng(0)
a, b = rng.standard_normal((48, 40)).astype(np.float32), rng.standard_normal((40, 36)).astype(np.float32)
y = (tr.tensor(a) @ tr.tensor(b)).numpy()
assert np.abs(y - a.astype(np.float64) @ b).max() < 1e-4
print("tiny done")
"""


@pytest.mark.gpu
def test_wgjit_tune_on_a_tiny_script(tmp_path: Path) -> None:
    script = tmp_path / "tiny.py"
    script.write_text(TINY)
    cache = tmp_path / "cache"
    env = dict(os.environ, WGJIT_CACHE_DIR=str(cache))
    env.pop("WGJIT_AUTOTUNE", None)
    cmd = [sys.executable, "-m", "tracer.cli", "tune", str(script), "--repeats", "1"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "tiny done" in out.stderr  # the script's prints go to stderr
    assert "[tune] [1/1] gemm_blocked float32,float32->float32 a_k4.b_n4.o4 b1 m64 n64 k64" in out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["problem", "winner", "us", "built-in", "us", "speedup", "rejected"]
    winner, _, builtin = lines[2].split()[2:5]
    assert lines[2].startswith("48x36x40 float32") and winner in sk.GEMM_CONFIGS and builtin == "b64"
    assert f"written to {cache / 'tuning.json'}" in out.stdout
    data = json.loads((cache / "tuning.json").read_text())
    (entries,) = [a["entries"] for a in data["adapters"].values()]
    (entry,) = entries.values()
    assert entry["config"] == winner and entry["builtin"] == "b64" and entry["rejected"] == []
    # explain in a fresh process names the entry
    explain = subprocess.run(
        [sys.executable, "-m", "tracer.cli", "explain", str(script), "--plain"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert explain.returncode == 0, explain.stderr
    assert (
        f"{winner} tiles" in explain.stdout
        and "tuned (" in explain.stdout
        and "entry 'gemm_blocked float32" in explain.stdout
    )


def test_wgjit_tune_needs_a_script_and_known_families(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from tracer.cli import main

    assert main(["tune"]) == 2
    script = tmp_path / "never_run.py"
    script.write_text("raise SystemExit('the script must not run')\n")
    assert main(["tune", str(script), "--only", "gemv,gemm"]) == 2
    assert (
        "--only gemm: choose among gemm_blocked, gemm_thin, gemv, gemv_split, qgemm_thin, qgemv"
        in capsys.readouterr().err
    )


@pytest.mark.gpu
def test_tune_graphs_only_the_families_asked_for(cache_dir: Path) -> None:
    dev = get_device()
    g = fold_views(dce(_graph(tr.tensor(randn(24, 40)) @ tr.tensor(randn(40, 28))), dev.caps), dev.caps)
    before = dev.caps
    assert tune_graphs([g], dev, repeats=1, families={"gemv", "qgemv"}) == []
    assert dev.caps is before and not (cache_dir / "tuning.json").exists()


# --- GEMVs --------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["gemv", "gemv_split"])
def test_gemv_configs_are_tuned_checked_and_used(layout: str) -> None:
    """One output row: x @ W.T reads W along k (gemv), x @ W along n (gemv_split); each candidate named
    in the table runs with its threads and gives numpy's answer, and the tuner's baseline is a candidate."""
    x, w = randn(1, 300), randn(300, 52)
    tw = tr.tensor(np.ascontiguousarray(w.T)).T if layout == "gemv" else tr.tensor(w)
    y = tr.tensor(x) @ tw
    dev = get_device()
    g = fold_views(dce(_graph(y), dev.caps), dev.caps)
    (p,) = tunable_problems([g]).values()
    assert p.family == layout and p.tuning_key().startswith(f"{layout} float32,float32->float32")
    names = sk.matmul_candidates(p, dev.caps)
    assert sk.builtin_matmul_config(p, dev.caps) in names
    for name in names[:: max(1, len(names) // 4)]:  # a few across the range, to keep lavapipe quick
        got, program = run_tuned(tr.tensor(x) @ tw, name)
        (d,) = program.dispatches
        numbers = sk._gemv_numbers(name)
        assert d.kernel == layout and d.workgroup_size[: len(numbers) - 1] == numbers[:-1], (name, d)
        np.testing.assert_allclose(got, x.astype(np.float64) @ w, rtol=1e-5, atol=1e-5)
    result = tune_gemm(p, dev, repeats=1, candidates=names[:2])
    assert not result.rejected and result.entry.config in names[:2] + [result.entry.builtin]
    tuned_caps = dataclasses.replace(dev.caps, tuning=table_for([p.tuning_key()], names[0]))
    g2 = run_pipeline(_graph(tr.tensor(x) @ tw), tuned_caps).graph
    (mm,) = [n for n in g2 if n.kernel is not None and n.kernel.name == layout]
    assert "; tuned (test table, entry" in why(g2, mm)


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["q8_0", "q4_0"])
def test_qgemv_configs_are_tuned_checked_and_used(fmt: str) -> None:
    """One row times a quantized weight: the tuner's stand-in matches the dequantized product, a tuned
    configuration runs with its threads and rows, and explain names the entry."""
    rng = np.random.default_rng(3)
    wf, x = rng.standard_normal((40, 256)).astype(np.float32), rng.standard_normal((1, 256)).astype(np.float32)
    wq = tr.quantize(wf, fmt)
    values = tr.quantize(wf, fmt).astype(tr.float32).numpy()  # the weight's dequantized values
    dev = get_device()
    g = fold_views(dce(_graph(tr.tensor(x) @ wq.T), dev.caps), dev.caps)
    (p,) = tunable_problems([g]).values()
    assert p.tuning_key() == f"qgemv float32,{fmt}->float32 x4 n64 k256"
    names = sk.matmul_candidates(p, dev.caps)
    assert sk.builtin_matmul_config(p, dev.caps) in names
    result = tune_gemm(p, dev, repeats=1, candidates=["wx16.wy2.r2.u1", "wx64.wy4.r4.u4"])
    assert not result.rejected and set(result.times) == {"wx16.wy2.r2.u1", "wx64.wy4.r4.u4", result.entry.builtin}
    got, program = run_tuned(tr.tensor(x) @ wq.T, "wx64.wy4.r4.u4")
    (d,) = program.dispatches
    assert d.kernel == "qgemv" and d.workgroup_size[:2] == (64, 4) and "rows4" in d.variant, d
    np.testing.assert_allclose(got, x.astype(np.float64) @ values.T, rtol=1e-4, atol=1e-4)
    tuned_caps = dataclasses.replace(dev.caps, tuning=table_for([p.tuning_key()], "wx64.wy4.r4.u4"))
    g2 = run_pipeline(_graph(tr.tensor(x) @ wq.T), tuned_caps).graph
    (mm,) = [n for n in g2 if n.kernel is not None and n.kernel.name == "qgemv"]
    assert "4 weight rows per thread, 64 threads along each row" in why(g2, mm) and "tuned (test table" in why(g2, mm)


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["q8_0", "q4_k"])
def test_qgemm_thin_configs_are_tuned_checked_and_used(fmt: str) -> None:
    """A few rows times a quantized weight: the tuner's stand-in (x of those rows) matches the dequantized
    product for split and whole units, a tuned configuration runs with its weight rows, threads and split,
    and explain names the entry."""
    rng = np.random.default_rng(4)
    wf, x = rng.standard_normal((40, 256)).astype(np.float32), rng.standard_normal((5, 256)).astype(np.float32)
    wq = tr.quantize(wf, fmt)
    values = tr.quantize(wf, fmt).astype(tr.float32).numpy()
    dev = get_device()
    g = fold_views(dce(_graph(tr.tensor(x) @ wq.T), dev.caps), dev.caps)
    (p,) = tunable_problems([g]).values()
    assert p.family == "qgemm_thin" and p.tuning_key() == f"qgemm_thin float32,{fmt}->float32 x4 m8 n64 k256"
    names = sk.matmul_candidates(p, dev.caps)
    assert sk.builtin_matmul_config(p, dev.caps) in names and "c1.t32.s" in names and "c4.t64" in names
    result = tune_gemm(p, dev, repeats=1, candidates=["c1.t32.s", "c4.t64"])
    assert not result.rejected and set(result.times) == {"c1.t32.s", "c4.t64", result.entry.builtin}
    got, program = run_tuned(tr.tensor(x) @ wq.T, "c1.t32.s")
    (d,) = program.dispatches
    assert d.kernel == "qgemm_thin" and d.workgroup_size[0] == 32 and "split" in d.variant, d
    np.testing.assert_allclose(got, x.astype(np.float64) @ values.T, rtol=1e-4, atol=1e-4)
    tuned_caps = dataclasses.replace(dev.caps, tuning=table_for([p.tuning_key()], "c1.t32.s"))
    g2 = run_pipeline(_graph(tr.tensor(x) @ wq.T), tuned_caps).graph
    (mm,) = [n for n in g2 if n.kernel is not None and n.kernel.name == "qgemm_thin"]
    said = why(g2, mm)
    assert "by 1 weight row, 32 threads" in said and "split among four threads" in said and "tuned (test table" in said
