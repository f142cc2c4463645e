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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("--skip-model"):
        return
    skip = pytest.mark.skip(reason="--skip-model given")
    for item in items:
        if "model" in item.keywords:
            item.add_marker(skip)
