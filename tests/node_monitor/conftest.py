"""Fixtures for the node monitor tests: kubelet-shaped cgroup trees in tmp_path."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from stowage.node_monitor.cgroups import Driver
from stowage.node_monitor.synthetic import SyntheticNode

#: Every layout the kubelet produces: (cgroup version, driver), with readable ids.
LAYOUTS = [
    pytest.param(2, Driver.SYSTEMD, id="v2-systemd"),
    pytest.param(2, Driver.CGROUPFS, id="v2-cgroupfs"),
    pytest.param(1, Driver.SYSTEMD, id="v1-systemd"),
    pytest.param(1, Driver.CGROUPFS, id="v1-cgroupfs"),
]


@pytest.fixture()
def make_node(tmp_path: Path) -> Callable[..., SyntheticNode]:
    """Build a synthetic node (cgroup tree + /proc/net/dev) under tmp_path."""

    def make(version: int = 2, driver: Driver = Driver.SYSTEMD) -> SyntheticNode:
        return SyntheticNode(tmp_path / "cgroup", version, driver, tmp_path / "proc")

    return make
