"""Node capacity from the Node object and from --capacity."""

from __future__ import annotations

import numpy as np
import pytest
from stowage.node_monitor.capacity import capacity_array, node_capacity, parse_capacity
from stowage.node_monitor.summary import RESOURCES

from stowage.errors import InvalidInput
from stowage.labels import ANN_DISK_BANDWIDTH, ANN_NETWORK_BANDWIDTH


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("cpu=4,memory=8Gi", {"cpu": 4.0, "memory": 8.0 * 2**30}, id="cpu-and-memory"),
        pytest.param(" disk=200Mi , network=1G ", {"disk": 200.0 * 2**20, "network": 1e9}, id="spaces-and-suffixes"),
        pytest.param("cpu=500m,", {"cpu": 0.5}, id="trailing-comma"),
        pytest.param("", {}, id="empty-means-none"),
    ],
)
def test_capacity_flag_parses_quantities(text: str, expected: dict) -> None:
    assert parse_capacity(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        pytest.param("cpu", "name=quantity pairs", id="missing-equals"),
        pytest.param("cpu=four", "Kubernetes quantity", id="bad-quantity"),
        pytest.param("cpu=-1", "non-negative", id="negative"),
        pytest.param("cpu=1,cpu=2", "appears twice", id="duplicate"),
    ],
)
def test_bad_capacity_flags_say_what_is_allowed(text: str, fragment: str) -> None:
    with pytest.raises(InvalidInput, match=fragment) as err:
        parse_capacity(text)
    assert err.value.field.startswith("--capacity")


def test_node_capacity_is_allocatable_plus_bandwidth_annotations() -> None:
    node = {
        "metadata": {"annotations": {ANN_DISK_BANDWIDTH: "300Mi", ANN_NETWORK_BANDWIDTH: "garbage"}},
        "status": {"capacity": {"cpu": "8"}, "allocatable": {"cpu": "7500m", "memory": "30Gi", "pods": "110"}},
    }
    # A malformed annotation is unknown capacity (no contention on it), not 0 bytes/s.
    assert node_capacity(node) == {"cpu": 7.5, "memory": 30.0 * 2**30, "disk": 300.0 * 2**20}


def test_flags_override_the_node_and_unknown_capacity_is_zero() -> None:
    arr = capacity_array(RESOURCES, {"cpu": 8.0, "memory": 16.0}, {"cpu": 4.0})
    assert np.array_equal(arr, np.array([4.0, 16.0, 0.0, 0.0]))
