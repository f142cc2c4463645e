"""Shared test fixtures and options."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.fixture(scope="session")
def device():  # noqa: ANN201
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
    if not config.getoption("--skip-model"):
        return
    skip = pytest.mark.skip(reason="--skip-model given")
    for item in items:
        if "model" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def no_fusion(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run with the fuse pass off (WGJIT_FUSION=0): for tests written about one node per kernel."""
    monkeypatch.setenv("WGJIT_FUSION", "0")
