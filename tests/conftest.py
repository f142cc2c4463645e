"""Shared test fixtures and options."""

from __future__ import annotations

import os
import re
import tempfile

import numpy as np
import pytest

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
# the tests assert the built-in kernel rules: a tuning cache of the user's (`wgjit tune`) must not change them
os.environ["WGJIT_CACHE_DIR"] = os.path.join(tempfile.mkdtemp(prefix="wgjit-test-cache-"))


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.fixture
def device():  # noqa: ANN201
    """The current device (per test: a test that calls reset_device() leaves a new one for the next)."""
    from backend_wgpu import get_device

    return get_device()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--skip-model", action="store_true", help="skip the tests marked `model` (they load a real model)")
    parser.addoption(
        "--fuzz-long",
        action="store_true",
        default=False,
        help="differential fuzzing: run 10,000 random programs (WGJIT_FUZZ_EXAMPLES=N picks another count)",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--fuzz-long", default=False):
        os.environ.setdefault("WGJIT_FUZZ_EXAMPLES", "10000")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--skip-model"):
        skip = pytest.mark.skip(reason="--skip-model given")
        for item in items:
            if "model" in item.keywords:
                item.add_marker(skip)
    _skip_float16_without_the_feature(items)


_F16_NAME = re.compile(r"float16|f16", re.IGNORECASE)


def _uses_float16(item: pytest.Item) -> bool:
    """A test marked f16, in a float16 module, or named or parametrized for float16."""
    return "f16" in item.keywords or _F16_NAME.search(item.name) is not None or item.path.name == "test_f16.py"


def _skip_float16_without_the_feature(items: list[pytest.Item]) -> None:
    """float16 tests skip, saying why, on an adapter without shader-f16 (Mesa's GL adapter, some GPUs)."""
    f16_items = [item for item in items if _uses_float16(item)]
    if not f16_items:
        return
    try:
        from backend_wgpu import get_device

        caps = get_device().caps
    except Exception:  # no adapter: the GPU tests fail on their own, saying so
        return
    if caps.shader_f16:
        return
    skip = pytest.mark.skip(reason=f"the adapter {caps.name} ({caps.backend}) lacks shader-f16: float16 cannot run")
    for item in f16_items:
        item.add_marker(skip)


@pytest.fixture
def no_fusion(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run with the fuse pass off (WGJIT_FUSION=0): for tests written about one node per kernel."""
    monkeypatch.setenv("WGJIT_FUSION", "0")
