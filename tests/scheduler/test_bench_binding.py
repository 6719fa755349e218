"""The binding benchmark runs end to end on the session's control plane (small, untimed: every pod binds)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scheduler.bench_binding import run, table
from tests.support.controlplane import ControlPlane

pytestmark = pytest.mark.timeout(900)


def test_every_pod_binds_in_every_configuration(control_plane: ControlPlane, tmp_path: Path) -> None:
    if not isinstance(control_plane, ControlPlane):
        pytest.skip("needs process control of kube-scheduler")
    results = run(control_plane, tmp_path, nodes=20, pods=200)

    assert [r.config for r in results] == ["a", "p", "b", "c"]
    for r in results:
        assert r.bound == 200, table(results)
        assert 0 < r.used_nodes <= 20
    by = {r.config: r for r in results}
    # managedResources keeps regular pods off the extender; without it every pod is filtered there.
    assert by["p"].filter_calls == 0 and by["b"].filter_calls == 0
    assert by["c"].filter_calls >= 1
    print("\n" + table(results))
