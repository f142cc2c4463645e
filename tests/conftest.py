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
