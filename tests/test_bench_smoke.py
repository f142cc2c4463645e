"""CI smoke test of the benchmark harness: a small run of a few suites, its JSON and its checks.

No timing is asserted (CI runs on a software adapter); what is checked is that every record
carries the fields RESULTS.md and the plots rely on, that each case was verified against
numpy, and that a wrong kernel would be caught by the harness's check.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks import harness, report
from tracer import cli

pytestmark = pytest.mark.gpu

RECORD_FIELDS = {"suite", "case", "shape", "dtype", "device", "ours", "ours_ms", "comparators", "ratios", "bytes", "flops",
                 "gbps", "gflops", "verified", "max_rel_err", "kernels", "dispatches"}  # fmt: skip


@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("bench")
    path = str(out / "bench.json")
    md = str(out / "bench.md")
    rc = cli.main(["bench", "--suite", "elementwise", "--suite", "matmul", "--suite", "dispatch", "--sizes", "small",
                   "--repeat", "3", "--warmup", "1", "--no-torch", "--json", path, "--md", md, "--quiet"])  # fmt: skip
    assert rc == 0, "a case failed its check against numpy"
    return json.loads(open(path).read()), open(md).read()


def test_json_has_every_field(small_run: tuple[dict, str]) -> None:
    result, _ = small_run
    assert result["device"]["adapter"]
    records = result["records"]
    assert {r["suite"] for r in records} == {"elementwise", "matmul", "dispatch"}
    for r in records:
        assert RECORD_FIELDS <= set(r), RECORD_FIELDS - set(r)
        assert r["ours_ms"] > 0 and r["ours"]["runs"] >= 3
        assert r["comparators"], r["case"]  # numpy (or the wgpu floor) always
        for name, c in r["comparators"].items():
            assert c["ms"] > 0 and r["ratios"][name] > 0
        assert r["verified"] is True, (r["case"], r["shape"], r["max_rel_err"])


def test_op_cases_match_numpy_and_count_bytes(small_run: tuple[dict, str]) -> None:
    result, md = small_run
    ops = [r for r in result["records"] if r["suite"] in ("elementwise", "matmul")]
    assert {r["case"] for r in ops} >= {"add", "chain6", "square", "gemv_32", "attn_qkT", "attn_pv"}
    for r in ops:
        assert "numpy" in r["comparators"] and r["max_rel_err"] < 1e-3
        assert r["bytes"] > 0 and r["gbps"] > 0
    add = next(r for r in ops if r["case"] == "add")
    assert add["bytes"] == 3 * 4 * int(add["shape"])
    square = next(r for r in ops if r["case"] == "square")
    n = int(square["shape"].split("x")[0])
    assert square["flops"] == 2 * n**3 and any("gemm_blocked" in k for k in square["kernels"])
    assert "| elementwise | add |" in md


def test_dispatch_suite_against_the_floor(small_run: tuple[dict, str]) -> None:
    result, _ = small_run
    (rec,) = [r for r in result["records"] if r["suite"] == "dispatch"]
    assert rec["dispatches"] == 16
    assert rec["us_per_dispatch"]["ours"] > 0 and rec["us_per_dispatch"]["wgpu_floor"] > 0


def test_harness_catches_a_wrong_result() -> None:
    """The check is real: a case whose 'ours' disagrees with its reference is marked unverified."""
    from benchmarks import cases as C

    ctx = harness.make_context(harness.Settings(repeat=3, warmup=0, use_torch=False, log=lambda _m: None))
    x = C.randn((64,), seed=3)
    wrong = C.Case(
        "elementwise", "wrong", "64", "float32", 64, [x], ours=lambda t: t[0] * 2.0, ref=lambda a: a[0] * 3.0, bytes=512
    )
    rec = harness.run_case(ctx, wrong)
    assert rec["verified"] is False and rec["max_rel_err"] > 0.1
    assert "NO" in report.terminal_table({"device": harness.device_info(ctx), "records": [rec], "notes": []})


def test_compile_suite_phases() -> None:
    ctx = harness.make_context(harness.Settings(repeat=3, warmup=0, use_torch=False, log=lambda _m: None))
    recs = harness.run_suite(ctx, "compile")
    assert [r["case"] for r in recs] == ["cold", "pipelines_cached", "warm"]
    cold, _, warm = recs
    assert set(cold["phases_ms"]) == {"trace", "build", "passes", "codegen", "total"}
    assert warm["phases_ms"]["passes"] == 0  # the program cache answered
    assert np.isfinite(cold["ours_ms"]) and cold["dispatches"] > 0
