"""``stowage node-monitor`` (a real process) against a real API server, PDBs and the disruption controller.

Each test: two fake nodes with allocatable memory 10Gi (capacity 12Gi), so the monitor's threshold
is 0.95 × 10Gi = 9.5Gi; pods bound by ``spec.nodeName``; the fake kubelet writes their memory usage
into the first node's cgroup tree; one monitor process watches that node with the RBAC the docs give.
Usage starts at 9Gi (under the threshold) and one regular pod's usage is then raised to cause contention.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from stowage.resources import parse_quantity
from tests.node_monitor_real.conftest import ALLOCATABLE
from tests.node_monitor_real.harness import (
    Cluster,
    GiB,
    NodeMonitor,
    opportunistic_pod,
    regular_pod,
)
from tests.support.fake_kubelet import FakeKubelet

LOW_CPU = 0.05
MEMORY_CAPACITY = parse_quantity(ALLOCATABLE["memory"])  # the monitor's C_memory: allocatable, not capacity


def _use(kubelet: FakeKubelet, cluster: Cluster, name: str, gib: float) -> None:
    kubelet.set_usage(f"{cluster.ns}/{name}", {"memory": gib * GiB, "cpu": LOW_CPU})


def _refusals(monitor: NodeMonitor, cluster: Cluster, name: str) -> list[str]:
    """The monitor's log lines saying the eviction of ``name`` was refused (the API server's 429)."""
    pattern = re.compile(rf"eviction of {re.escape(cluster.ns)}/{re.escape(name)} refused")
    return [line for line in monitor.log_text().splitlines() if pattern.search(line)]


def _assert_untouched(cluster: Cluster, names: list[str]) -> None:
    touched = [n for n in names if not cluster.untouched(n)]
    assert not touched, f"pods that must stay were evicted or deleted: {touched}"


def test_evicts_only_the_newest_opportunistic_pods(cluster: Cluster, nodes: list[str], fake_kubelet: FakeKubelet,
                                                   monitor_for: Callable[..., NodeMonitor]) -> None:
    node, other = nodes
    usage = {"reg-a": 3, "reg-b": 3, "opp-old": 1, "opp-mid": 1, "opp-new": 1, "opp-elsewhere": 4}
    for name, gib in usage.items():
        _use(fake_kubelet, cluster, name, gib)
    cluster.create(regular_pod("reg-a", node))
    cluster.create(regular_pod("reg-b", node))
    cluster.create_in_start_order([opportunistic_pod(n, node) for n in ("opp-old", "opp-mid", "opp-new")]
                                  + [opportunistic_pod("opp-elsewhere", other)])  # the newest of all, other node
    monitor = monitor_for(node)
    monitor.wait_ready({"reg-a": "regular", "reg-b": "regular", "opp-old": "opportunistic",
                        "opp-mid": "opportunistic", "opp-new": "opportunistic"}, MEMORY_CAPACITY)
    assert "opp-elsewhere" not in monitor.metrics().pods(node)
    monitor.wait_samples(4)  # 9Gi of 9.5Gi: no contention
    assert monitor.evictions() == 0
    _assert_untouched(cluster, list(usage))

    # 11Gi: 1.5Gi over the threshold. The newest frees 1Gi (not enough), the newest two free 2Gi.
    _use(fake_kubelet, cluster, "reg-a", 5)
    monitor.wait(lambda: cluster.gone("opp-new") and cluster.gone("opp-mid"), "opp-new and opp-mid evicted")
    monitor.wait(lambda: cluster.read("opp-new") is None and cluster.read("opp-mid") is None,
                 "the fake kubelet finished both deletions")
    monitor.wait(lambda: monitor.memory_usage() <= 9 * GiB, "node memory usage back to 9Gi")
    # Bounded window after relief: nothing more goes.
    monitor.wait_samples(6, check=lambda: _assert_untouched(cluster, ["reg-a", "reg-b", "opp-old"]))

    _assert_untouched(cluster, ["reg-a", "reg-b", "opp-old", "opp-elsewhere"])
    assert monitor.evictions() == 2
    assert cluster.evicted_events() == {"opp-new", "opp-mid"}
    assert "Traceback" not in monitor.log_text()


def test_pdb_429_moves_on_to_the_next_newest(cluster: Cluster, nodes: list[str], fake_kubelet: FakeKubelet,
                                             monitor_for: Callable[..., NodeMonitor]) -> None:
    """node-monitor/eviction.py and monitor.py: on 429 the pod is skipped and victims are chosen again without it."""
    node, _ = nodes
    for name, gib in {"reg-a": 3, "reg-b": 3, "opp-old": 1, "opp-mid": 1, "opp-new": 1}.items():
        _use(fake_kubelet, cluster, name, gib)
    cluster.create(regular_pod("reg-a", node))
    cluster.create(regular_pod("reg-b", node))
    cluster.create_in_start_order([
        opportunistic_pod("opp-old", node), opportunistic_pod("opp-mid", node),
        opportunistic_pod("opp-new", node, labels={"guard": "opp-new"}),
    ])
    cluster.create_pdb("guard-new", {"guard": "opp-new"}, expected_pods=1)
    monitor = monitor_for(node)
    monitor.wait_ready({"reg-a": "regular", "reg-b": "regular", "opp-old": "opportunistic",
                        "opp-mid": "opportunistic", "opp-new": "opportunistic"}, MEMORY_CAPACITY)

    # 10Gi: 0.5Gi over. opp-new would be enough, but its budget forbids it: opp-mid goes instead.
    _use(fake_kubelet, cluster, "reg-a", 4)
    monitor.wait(lambda: cluster.read("opp-mid") is None, "opp-mid evicted (the next newest)")
    assert _refusals(monitor, cluster, "opp-new"), "the 429 for opp-new is not in the monitor's log"
    monitor.wait_samples(6, check=lambda: _assert_untouched(cluster, ["reg-a", "reg-b", "opp-old", "opp-new"]))
    assert monitor.evictions() == 1
    assert cluster.evicted_events() == {"opp-mid"}

    # Budget gone and contention again (opp-new now uses 2Gi: 10Gi in all): opp-new, the newest, goes.
    cluster.delete_pdb("guard-new")
    _use(fake_kubelet, cluster, "opp-new", 2)
    monitor.wait(lambda: cluster.read("opp-new") is None, "opp-new evicted once its budget is gone")
    monitor.wait_samples(6, check=lambda: _assert_untouched(cluster, ["reg-a", "reg-b", "opp-old"]))
    assert monitor.evictions() == 2
    assert cluster.evicted_events() == {"opp-mid", "opp-new"}
    assert "Traceback" not in monitor.log_text()


def test_pdb_429_on_every_victim_retries_and_never_takes_a_regular_pod(
        cluster: Cluster, nodes: list[str], fake_kubelet: FakeKubelet,
        monitor_for: Callable[..., NodeMonitor]) -> None:
    node, _ = nodes
    for name, gib in {"reg-a": 4, "reg-b": 3, "opp-old": 1, "opp-new": 1}.items():
        _use(fake_kubelet, cluster, name, gib)
    cluster.create(regular_pod("reg-a", node))
    cluster.create(regular_pod("reg-b", node))
    cluster.create_in_start_order([opportunistic_pod(n, node, labels={"guard": "all-opp"})
                                   for n in ("opp-old", "opp-new")])
    cluster.create_pdb("guard-all", {"guard": "all-opp"}, expected_pods=2)
    monitor = monitor_for(node)
    monitor.wait_ready({"reg-a": "regular", "reg-b": "regular", "opp-old": "opportunistic",
                        "opp-new": "opportunistic"}, MEMORY_CAPACITY)

    # 10Gi, sustained: every opportunistic pod is refused, round after round; nothing else is tried.
    _use(fake_kubelet, cluster, "reg-a", 5)
    everyone = ["reg-a", "reg-b", "opp-old", "opp-new"]
    monitor.wait(lambda: len(_refusals(monitor, cluster, "opp-new")) >= 2
                 and len(_refusals(monitor, cluster, "opp-old")) >= 2, "two refused relief rounds logged")
    _assert_untouched(cluster, everyone)
    assert monitor.evictions() == 0
    assert cluster.evicted_events() == set()

    # The budget goes while contention persists: the newest is evicted, and only it (0.5Gi over, it frees 1Gi).
    cluster.delete_pdb("guard-all")
    monitor.wait(lambda: cluster.read("opp-new") is None, "opp-new evicted once the budget is gone")
    monitor.wait_samples(6, check=lambda: _assert_untouched(cluster, ["reg-a", "reg-b", "opp-old"]))
    assert monitor.evictions() == 1
    assert cluster.evicted_events() == {"opp-new"}
    assert "Traceback" not in monitor.log_text()


def test_never_evicts_a_regular_pod(cluster: Cluster, nodes: list[str], fake_kubelet: FakeKubelet,
                                    monitor_for: Callable[..., NodeMonitor]) -> None:
    """Contention caused by pods that are not opportunistic: regular, opted out (contradiction), never converted."""
    node, other = nodes
    pods = {
        "reg-a": regular_pod("reg-a", node),
        "reg-b": regular_pod("reg-b", node),
        # Converted, yet opted out: a contradiction, protected (stowage/labels.py:pod_class).
        "opp-optout": opportunistic_pod("opp-optout", node, labels={"stowage.io/opportunistic": "false"}),
        # Asked to be opportunistic but never converted (no class label): regular.
        "asked-only": regular_pod("asked-only", node, labels={"stowage.io/opportunistic": "true"}),
    }
    for name, gib in {"reg-a": 4, "reg-b": 3, "opp-optout": 2, "asked-only": 2, "opp-elsewhere": 1}.items():
        _use(fake_kubelet, cluster, name, gib)
    for body in pods.values():
        cluster.create(body)
    cluster.create(opportunistic_pod("opp-elsewhere", other))  # evictable, but on a node this monitor does not own
    monitor = monitor_for(node)
    monitor.wait_ready({name: "regular" for name in pods}, MEMORY_CAPACITY)

    # 11Gi of 9.5Gi from the start: the monitor must see sustained contention, yet act on nothing.
    monitor.wait(lambda: monitor.metrics().values("stowage_node_contention", node=node, resource="memory") == [1.0],
                 "sustained memory contention reported")
    monitor.wait_samples(10, check=lambda: _assert_untouched(cluster, [*pods, "opp-elsewhere"]))
    assert monitor.metrics().values("stowage_node_contention", node=node, resource="memory") == [1.0]
    assert monitor.evictions() == 0
    assert cluster.evicted_events() == set()
    assert not re.search(r"evicted |eviction of ", monitor.log_text())


def test_dry_run_counts_but_evicts_nothing(cluster: Cluster, nodes: list[str], fake_kubelet: FakeKubelet,
                                          monitor_for: Callable[..., NodeMonitor]) -> None:
    node, _ = nodes
    for name, gib in {"reg-a": 3, "reg-b": 3, "opp-old": 1, "opp-mid": 1, "opp-new": 1}.items():
        _use(fake_kubelet, cluster, name, gib)
    cluster.create(regular_pod("reg-a", node))
    cluster.create(regular_pod("reg-b", node))
    cluster.create_in_start_order([opportunistic_pod(n, node) for n in ("opp-old", "opp-mid", "opp-new")])
    monitor = monitor_for(node, "--dry-run")
    monitor.wait_ready({"reg-a": "regular", "reg-b": "regular", "opp-old": "opportunistic",
                        "opp-mid": "opportunistic", "opp-new": "opportunistic"}, MEMORY_CAPACITY)

    _use(fake_kubelet, cluster, "reg-a", 5)  # 11Gi: the newest two would go
    monitor.wait(lambda: monitor.evictions() >= 2, "two dry-run evictions counted")
    monitor.wait_samples(6, check=lambda: _assert_untouched(cluster, ["reg-a", "reg-b", "opp-old", "opp-mid",
                                                                       "opp-new"]))
    would = set(re.findall(rf"dry-run: would evict {re.escape(cluster.ns)}/([\w-]+)", monitor.log_text()))
    assert would == {"opp-new", "opp-mid"}
    assert cluster.evicted_events() == set()
