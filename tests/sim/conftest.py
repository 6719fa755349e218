"""Fixtures for the simulator tests (helpers live in ``tests.sim.kit``)."""

from __future__ import annotations

import pytest

from stowage.sim.engine import SimConfig
from tests.sim.kit import FLAT


@pytest.fixture
def flat_config() -> SimConfig:
    """Usage exactly as requested, invariants checked at every event."""
    return SimConfig(usage=FLAT, check=True)
