"""The fake kubelet's pure parts: progress rates by the simulator's contention model, in-place resize decisions."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from stowage.sim.cluster import contention_table
from tests.support.fake_kubelet import (
    PROGRESS_RESOURCES,
    actuated_fields,
    container_resources,
    progress_rates,
    resize_actuation,
)

INF = np.inf
CPU_ONLY = (True, True, False, False)  # cpu and memory, as a task of the bench's workloads
DISK_TOO = (True, True, True, False)


def _direct(cap: np.ndarray, node: list[int], opp: list[bool], use: list[list[float]],
            uses: list[tuple[bool, ...]]) -> list[float]:
    """Each pod's cell of contention_table, built the way the simulator's RateTracker builds it."""
    reg, oppu = np.zeros_like(cap), np.zeros_like(cap)
    for i, o, u in zip(node, opp, use, strict=True):
        (oppu if o else reg)[i] += u
    masks = np.unique(np.array(uses, dtype=bool), axis=0)
    table = contention_table(reg, oppu, cap, 0, 1, masks)
    if table is None:
        return [1.0] * len(node)
    out = []
    for i, o, m in zip(node, opp, uses, strict=True):
        k = next(j for j, row in enumerate(masks.tolist()) if tuple(row) == tuple(m))
        out.append(float(table[int(o), k, i]))
    return out


def test_progress_rates_columns_are_cpu_memory_disk_network() -> None:
    assert PROGRESS_RESOURCES == ("cpu", "memory", "disk", "network")


def test_opportunistic_pods_get_the_cpu_regular_pods_leave() -> None:
    """One node of 7.5 cores: a regular pod using 4, two opportunistic pods using 2.5 each. Regular first:
    the regular pod runs at full speed, the opportunistic ones share the 3.5 cores left: 3.5 / 5 = 0.7."""
    cap = np.array([[7.5, 15 * 2**30, INF, INF]])
    node, opp = [0, 0, 0], [False, True, True]
    use = [[4.0, 2**30, 0, 0], [2.5, 2**30, 0, 0], [2.5, 2**30, 0, 0]]
    uses = [CPU_ONLY] * 3
    rates = progress_rates(cap, np.array(node), np.array(opp), np.array(use), np.array(uses))
    assert rates.tolist() == pytest.approx([1.0, 0.7, 0.7])
    assert rates.tolist() == pytest.approx(_direct(cap, node, opp, use, uses))


def test_a_promoted_pod_gets_a_regular_share() -> None:
    """The same node after one opportunistic pod became regular: 6.5 regular cores, 1 left for the other."""
    cap = np.array([[7.5, 15 * 2**30, INF, INF]])
    use = np.array([[4.0, 2**30, 0, 0], [2.5, 2**30, 0, 0], [2.5, 2**30, 0, 0]])
    rates = progress_rates(cap, np.array([0, 0, 0]), np.array([False, False, True]), use, np.array([CPU_ONLY] * 3))
    assert rates.tolist() == pytest.approx([1.0, 1.0, 0.4])


def test_regular_pods_slow_only_when_they_alone_exceed_the_node() -> None:
    cap = np.array([[7.5, 15 * 2**30, INF, INF], [7.5, 15 * 2**30, INF, INF]])
    node, opp = [0, 0, 1], [False, True, False]
    use = [[9.0, 2**30, 0, 0], [1.0, 2**30, 0, 0], [3.0, 2**30, 0, 0]]
    uses = [CPU_ONLY] * 3
    rates = progress_rates(cap, np.array(node), np.array(opp), np.array(use), np.array(uses))
    assert rates.tolist() == pytest.approx([7.5 / 9, 0.0, 1.0])
    assert rates.tolist() == pytest.approx(_direct(cap, node, opp, use, uses))


def test_disk_is_shared_in_proportion_and_only_by_pods_that_use_it() -> None:
    """Disk of 100 MB/s, 150 wanted: every pod using disk at 2/3, whatever its class; a pod without disk in
    its demand is not slowed by it; memory above capacity slows no one."""
    cap = np.array([[7.5, 2.0, 100.0, INF]])
    node, opp = [0, 0, 0], [False, True, False]
    use = [[1.0, 2.0, 80.0, 0], [1.0, 1.0, 70.0, 0], [1.0, 1.0, 0.0, 0]]
    uses = [DISK_TOO, DISK_TOO, CPU_ONLY]
    rates = progress_rates(cap, np.array(node), np.array(opp), np.array(use), np.array(uses))
    assert rates.tolist() == pytest.approx([100 / 150, 100 / 150, 1.0])
    assert rates.tolist() == pytest.approx(_direct(cap, node, opp, use, uses))


def test_no_contention_is_full_speed_and_no_pods_is_empty() -> None:
    cap = np.array([[7.5, 15.0, INF, INF]])
    rates = progress_rates(cap, np.array([0, 0]), np.array([False, True]), np.array([[3.0, 1, 0, 0], [4.0, 1, 0, 0]]),
                           np.array([CPU_ONLY] * 2))
    assert rates.tolist() == [1.0, 1.0]
    assert progress_rates(cap, np.array([], dtype=np.int64), np.array([], dtype=bool), np.zeros((0, 4)),
                          np.zeros((0, 4), dtype=bool)).size == 0


def test_random_node_states_match_the_simulators_table() -> None:
    rng = np.random.default_rng(7)
    for _ in range(50):
        n, p = int(rng.integers(1, 4)), int(rng.integers(1, 9))
        cap = np.column_stack([rng.uniform(2, 8, n), rng.uniform(4, 16, n), rng.uniform(50, 200, n),
                               np.where(rng.random(n) < 0.5, INF, 100.0)])
        node = rng.integers(0, n, p).tolist()
        opp = (rng.random(p) < 0.5).tolist()
        use = np.column_stack([rng.uniform(0, 5, p), rng.uniform(0, 6, p), rng.uniform(0, 120, p),
                               rng.uniform(0, 80, p)]).tolist()
        uses = [tuple(bool(x) for x in row) for row in (rng.random((p, 4)) < 0.7)]
        rates = progress_rates(cap, np.array(node), np.array(opp), np.array(use), np.array(uses))
        assert rates.tolist() == pytest.approx(_direct(cap, node, opp, use, uses))


# --- resize ---------------------------------------------------------------------------------------------------


def _pod(cpu: str, memory: str = "1Gi", limits: dict[str, str] | None = None) -> dict[str, Any]:
    res: dict[str, Any] = {"requests": {"cpu": cpu, "memory": memory}}
    if limits:
        res["limits"] = limits
    return {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "main", "image": "busybox", "resources": res},
        {"name": "side", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}]}}


def test_nothing_to_do_when_the_spec_is_what_was_actuated() -> None:
    pod = _pod("1", limits={"cpu": "2"})
    assert resize_actuation(pod, container_resources(pod)) is None
    same = {"main": {"requests": {"cpu": "1000m", "memory": "1024Mi"}, "limits": {"cpu": "2"}},
            "side": {"requests": {"cpu": "0.1"}, "limits": {}}}
    assert resize_actuation(pod, same) is None  # equal quantities written differently


def test_a_resized_spec_is_actuated_with_the_status_fields_of_a_v130_kubelet() -> None:
    before = container_resources(_pod("0", "1Gi"))
    pod = _pod("2", "2Gi", limits={"cpu": "3", "memory": "2Gi", "ephemeral-storage": "1Gi"})
    decision = resize_actuation(pod, before, allocatable={"cpu": 7.5, "memory": 15 * 2**30}, others={"cpu": 4.0})
    assert decision is not None and decision.state == "InProgress"
    assert decision.resources == container_resources(pod)
    assert decision.container_fields("main") == {
        "allocatedResources": {"cpu": "2", "memory": "2Gi"},
        "resources": {"requests": {"cpu": "2", "memory": "2Gi"}, "limits": {"cpu": "3", "memory": "2Gi"}}}
    assert decision.container_fields("side") == {"allocatedResources": {"cpu": "100m"},
                                                 "resources": {"requests": {"cpu": "100m"}}}
    assert actuated_fields({}) == {"allocatedResources": {}, "resources": {}}
    # Without the node's numbers (no room check) it is actuated too.
    assert resize_actuation(pod, before).state == "InProgress"  # type: ignore[union-attr]


def test_a_resize_beyond_the_node_is_infeasible_and_beyond_the_room_deferred() -> None:
    before = container_resources(_pod("1"))
    allocatable = {"cpu": 7.5, "memory": 15.0 * 2**30}
    huge = resize_actuation(_pod("8"), before, allocatable=allocatable, others={})
    assert huge is not None and huge.state == "Infeasible" and "cpu" in huge.reason
    # 2.1 cores wanted (the side container's 100m counts), 5.5 allocated to the other pods: 7.6 > 7.5.
    tight = resize_actuation(_pod("2"), before, allocatable=allocatable, others={"cpu": 5.5})
    assert tight is not None and tight.state == "Deferred"
    fits = resize_actuation(_pod("2"), before, allocatable=allocatable, others={"cpu": 5.4})
    assert fits is not None and fits.state == "InProgress"
