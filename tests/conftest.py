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
    parser.addoption(
        "--fuzz-long",
        action="store_true",
        default=False,
        help="differential fuzzing: run 10,000 random programs (WGJIT_FUZZ_EXAMPLES=N picks another count)",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--fuzz-long", default=False):
        os.environ.setdefault("WGJIT_FUZZ_EXAMPLES", "10000")
