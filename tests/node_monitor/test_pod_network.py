"""Per-pod network: one process of each pod, its ``/proc/<pid>/net/dev``, host-network pods left out."""

from __future__ import annotations

import itertools
import math
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from stowage.node_monitor import cgroups, netdev
from stowage.node_monitor.cgroups import Driver, QoS
from stowage.node_monitor.metrics import MetricsServer, NodeMetrics
from stowage.node_monitor.monitor import NodeMonitor
from stowage.node_monitor.pods import PodStore, pod_info
from stowage.node_monitor.sampling import Sampler
from stowage.node_monitor.summary import RESOURCES, summarise
from stowage.node_monitor.synthetic import SyntheticNode

from stowage.config import ContentionSettings
from stowage.labels import METRICS

from .conftest import LAYOUTS

CPU, MEM, NET = (RESOURCES.index(r) for r in ("cpu", "memory", "network"))
POD = "7e57c0de-0000-4000-8000-000000000001"
OTHER = "7e57c0de-0000-4000-8000-000000000002"
MiB = 1 << 20


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# --- table: what happens between two samples one second apart, and the pod's network rate --------------------


def _traffic(node: SyntheticNode) -> None:
    node.advance_pod_net(POD, "eth0", rx=3 * MiB, tx=MiB)


def _loopback_and_excluded(node: SyntheticNode) -> None:
    node.advance_pod_net(POD, "eth0", rx=MiB)
    node.advance_pod_net(POD, "lo", rx=50 * MiB, tx=50 * MiB)  # the default --exclude-interfaces
    node.advance_pod_net(POD, "tunl0", rx=7 * MiB)  # excluded by the pattern of this case


def _sandbox_recreated_lower(node: SyntheticNode) -> None:
    node.recreate_pod_sandbox(POD, eth0=(5, 5))  # a new namespace, counters start over


def _sandbox_recreated_higher(node: SyntheticNode) -> None:
    # New namespace whose counters already exceed the old ones: the rate would be positive, and wrong.
    node.recreate_pod_sandbox(POD, eth0=(900 * MiB, 900 * MiB))


def _interface_removed(node: SyntheticNode) -> None:
    del node.pod_net[POD].interfaces["eth0"]  # same namespace, the sum goes down
    node.write_pod_net(POD)


def _process_exited(node: SyntheticNode) -> None:
    pid = node.pod_net[POD].pid
    for d in node.pod_dirs(POD):
        (d / node.container_rel(POD) / "cgroup.procs").write_text("")
    shutil.rmtree(node.proc_root / str(pid))


def _pids_of_another_pid_namespace(node: SyntheticNode) -> None:
    # What cgroup v2 shows a reader outside the host's pid namespace (no hostPID): other pods' pids as 0.
    for d in node.pod_dirs(POD):
        (d / node.container_rel(POD) / "cgroup.procs").write_text("0\n0\n")
    _process_exited(node)


def _first_process_gone_second_container_lives(node: SyntheticNode) -> None:
    # The container that gave the pid restarted: its cgroup is gone; another container of the pod has a process.
    net = node.pod_net[POD]
    old_pid = net.pid
    for d in node.pod_dirs(POD):
        os.rename(d / node.container_rel(POD), d / "cri-containerd-zz.scope")
        (d / "cri-containerd-zz.scope" / "cgroup.procs").write_text("4242\n")
    (node.proc_root / str(old_pid)).rename(node.proc_root / "4242")
    node.pod_net[POD].pid = 4242
    node.advance_pod_net(POD, "eth0", rx=2 * MiB)


def _nothing(node: SyntheticNode) -> None:
    pass


@dataclass(frozen=True)
class Case:
    change: Callable[[SyntheticNode], None]
    expected: float  # bytes/s; NaN: no value
    network: str = "pod"
    exclude: str = netdev.DEFAULT_EXCLUDE
    api_host_network: bool = False
    host_network: bool = False  # what the sample says about the pod


CASES = [
    pytest.param(Case(_traffic, 4 * MiB), id="traffic-rx-plus-tx"),
    pytest.param(Case(_nothing, 0.0), id="no-traffic-is-zero-not-unknown"),
    pytest.param(Case(_loopback_and_excluded, MiB, exclude=r"^(lo|tunl0)$"), id="excluded-interfaces"),
    pytest.param(Case(_traffic, math.nan, network="none"), id="no-process-is-unknown"),
    pytest.param(Case(_process_exited, math.nan), id="process-gone-is-unknown"),
    pytest.param(Case(_pids_of_another_pid_namespace, math.nan), id="pid-0-without-hostPID-is-unknown"),
    pytest.param(Case(_first_process_gone_second_container_lives, 2 * MiB), id="another-container-takes-over"),
    pytest.param(Case(_sandbox_recreated_lower, math.nan), id="reset-counters-lower-no-negative"),
    pytest.param(Case(_sandbox_recreated_higher, math.nan), id="reset-new-namespace-counters-higher"),
    pytest.param(Case(_interface_removed, math.nan), id="reset-same-namespace-sum-down"),
    pytest.param(Case(_traffic, math.nan, network="host", host_network=True), id="host-network-detected-by-netns"),
    pytest.param(Case(_traffic, math.nan, api_host_network=True, host_network=True), id="host-network-from-the-api"),
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize(("version", "driver"), LAYOUTS)
def test_a_pods_network_rate(make_node, version: int, driver: Driver, case: Case) -> None:
    node = make_node(version, driver)
    node.add_pod(POD, QoS.BURSTABLE, network=case.network, memory_current=64 * MiB)
    node.add_pod(OTHER, QoS.BESTEFFORT)
    node.advance_pod_net(POD, "eth0", rx=MiB, tx=MiB)  # traffic so far: what a reset would go below
    if case.network == "host":
        node.advance_net("eth0", rx=MiB)  # the node's counters, which a host-network pod would see
    clock = Clock()
    sampler = Sampler(node.root, node.proc_root, case.exclude, clock=clock)
    api_host = {POD} if case.api_host_network else set()
    first = sampler.sample(api_host)
    case.change(node)
    node.advance_pod_net(OTHER, "eth0", tx=MiB)
    node.advance_net("eth0", rx=10 * MiB)
    clock.now += 1.0
    second = sampler.sample(api_host)
    usage = summarise(first, second)
    rows = dict(zip(usage.pod_uids, usage.pods, strict=True))

    got = rows[POD][NET]
    if math.isnan(case.expected):
        assert math.isnan(got), got
    else:
        assert got == pytest.approx(case.expected)
    assert second.pods[POD].host_network is case.host_network
    assert rows[POD][MEM] == 64 * MiB  # the pod's other resources are measured as ever
    assert rows[OTHER][NET] == pytest.approx(MiB)  # the other pod is unaffected
    assert usage.node[NET] == pytest.approx(10 * MiB)  # the node's network stays the node's


def test_a_reset_gives_a_rate_again_from_the_next_sample(make_node) -> None:
    node = make_node()
    node.add_pod(POD)
    node.advance_pod_net(POD, "eth0", rx=500 * MiB)
    clock = Clock()
    sampler = Sampler(node.root, node.proc_root, clock=clock)
    samples = [sampler.sample()]
    node.recreate_pod_sandbox(POD)
    for _ in range(2):
        clock.now += 1.0
        samples.append(sampler.sample())
        node.advance_pod_net(POD, "eth0", tx=3 * MiB)
    rates = [summarise(a, b).pods[0][NET] for a, b in itertools.pairwise(samples)]
    assert math.isnan(rates[0])
    assert rates[1] == pytest.approx(3 * MiB)
    assert all(math.isnan(r) or r >= 0 for r in rates)


def test_a_host_network_pod_is_recognised_without_ptrace_rights_by_its_net_dev(make_node) -> None:
    """``ns/net`` of another uid's process is unreadable (EACCES): the ``net/dev`` file's inode decides."""
    node = make_node()
    node.add_pod(POD, network="host")
    node.add_pod(OTHER)
    for uid in (POD, OTHER):
        (node.proc_root / str(node.pod_net[uid].pid) / "ns" / "net").unlink()
    sample = Sampler(node.root, node.proc_root).sample()
    assert sample.pods[POD].host_network and sample.pods[POD].net_bytes is None
    other = sample.pods[OTHER]
    assert not other.host_network and other.net_bytes == 0.0 and other.netns.startswith("net/dev:")


def test_a_host_network_pods_process_is_not_even_looked_up(make_node) -> None:
    node = make_node()
    node.add_pod(POD, network="pod")  # were it read, it would give a value
    node.advance_pod_net(POD, "eth0", rx=MiB)
    sample = Sampler(node.root, node.proc_root).sample(host_network={POD})
    assert sample.pods[POD].host_network and sample.pods[POD].net_bytes is None and sample.pod_pids == 0


@pytest.mark.parametrize(("version", "driver"), LAYOUTS)
def test_the_first_pid_of_a_container_cgroup_is_the_pods_process(make_node, version: int, driver: Driver) -> None:
    node = make_node(version, driver)
    node.add_pod(POD)
    layout = cgroups.detect_layout(node.root)
    (pod,) = cgroups.list_pods(layout)
    pid, at = cgroups.pod_pid(layout, pod.relpath)
    assert pid == node.pod_net[POD].pid and at == node.container_rel(POD)
    # A delegated sub-cgroup one level down (crun's "<scope>/container") is found too.
    for d in node.pod_dirs(POD):
        (d / node.container_rel(POD) / "cgroup.procs").write_text("")
        (d / node.container_rel(POD) / "container").mkdir()
        (d / node.container_rel(POD) / "container" / "cgroup.procs").write_text("77\n")
    assert cgroups.pod_pid(layout, pod.relpath, hint=at) == (77, f"{node.container_rel(POD)}/container")


def test_conmon_cgroups_are_not_taken_for_the_pods_process(make_node) -> None:
    """CRI-O's conmon lives in the pod's slice but in the host's network namespace."""
    node = make_node(2, Driver.SYSTEMD)
    node.add_pod(POD, network="none")
    d = node.pod_dirs(POD)[0]
    (d / "crio-conmon-abc.scope").mkdir()
    (d / "crio-conmon-abc.scope" / "cgroup.procs").write_text("55\n")
    layout = cgroups.detect_layout(node.root)
    assert cgroups.pod_pid(layout, cgroups.list_pods(layout)[0].relpath) == (None, None)
    (d / "crio-abc.scope").mkdir()
    (d / "crio-abc.scope" / "cgroup.procs").write_text("56\n")
    assert cgroups.pod_pid(layout, cgroups.list_pods(layout)[0].relpath) == (56, "crio-abc.scope")


def test_spec_host_network_is_read_from_the_pod() -> None:
    def pod(spec: dict) -> dict:
        return {"metadata": {"uid": "u", "name": "p", "namespace": "ns"}, "spec": {"nodeName": "n1", **spec}}

    assert pod_info(pod({"hostNetwork": True})).host_network is True
    assert pod_info(pod({"hostNetwork": False})).host_network is False
    assert pod_info(pod({})).host_network is False


# --- exported where per-pod disk is exported ------------------------------------------------------------------


def test_metrics_export_each_pods_network_and_none_for_a_host_network_pod(tmp_path: Path) -> None:
    node = SyntheticNode(tmp_path / "cg", 2, Driver.SYSTEMD, tmp_path / "proc")
    node.add_pod(POD, memory_current=MiB)
    node.add_pod(OTHER, memory_current=MiB)
    store = PodStore("n1")
    store.replace([
        {"metadata": {"uid": POD, "name": "web", "namespace": "ns"}, "spec": {"nodeName": "n1"}},
        {"metadata": {"uid": OTHER, "name": "proxy", "namespace": "ns"},
         "spec": {"nodeName": "n1", "hostNetwork": True}},
    ])
    clock = Clock()
    metrics = NodeMetrics("n1")
    monitor = NodeMonitor("n1", Sampler(node.root, node.proc_root, clock=clock), ContentionSettings(), metrics,
                          pods=store, clock=clock)
    server = MetricsServer(metrics, "127.0.0.1", 0, stale_after_s=10.0, clock=clock).start()
    try:
        monitor.tick()
        node.advance_pod_net(POD, "eth0", rx=2 * MiB, tx=2 * MiB)
        clock.now += 2.0
        monitor.tick()
        text = httpx.get(f"http://127.0.0.1:{server.port}/metrics").text
    finally:
        server.stop()
    pods = {(s.labels["pod"], s.labels["resource"]): s.value for f in text_string_to_metric_families(text)
            for s in f.samples if s.name == METRICS.POD_USAGE}
    assert pods[("web", "network")] == pytest.approx(2 * MiB)
    assert ("proxy", "network") not in pods  # host network: no row (it would repeat the node's traffic)
    assert pods[("proxy", "memory")] == MiB and ("proxy", "cpu") in pods and ("proxy", "disk") in pods


# --- this machine's real /proc ---------------------------------------------------------------------------------


def test_this_process_net_dev_is_read_and_its_namespace_is_the_one_we_run_in() -> None:
    """On the real /proc: our own pid's counters are those of our namespace, which is "the node's" from here."""
    exclude = re.compile(netdev.DEFAULT_EXCLUDE)
    pid = os.getpid()
    before = netdev.read_net_bytes("/proc", exclude)
    total, netns = netdev.read_pid_net("/proc", pid, exclude)
    after = netdev.read_net_bytes("/proc", exclude)
    assert total is not None and before is not None and after is not None
    assert before <= total <= after  # the same counters, read a moment apart
    assert netns == os.readlink("/proc/self/ns/net") and netns.startswith("net:[")
    _, node_inode = netdev.read_netdev("/proc/net/dev", exclude)
    assert netns in netdev.node_netns("/proc", node_inode)  # so a pod like us would count as host-network
    assert netdev.read_pid_net("/proc", 2**22 + 1, exclude) == (None, None)  # above pid_max: no such process


@pytest.mark.skipif(not hasattr(os, "fork") or os.geteuid() != 0, reason="needs root to become another user")
def test_without_ptrace_rights_the_real_net_dev_inode_still_names_the_namespace() -> None:
    """As the chart runs the monitor (another uid, no capabilities): another uid's ``ns/net`` is unreadable on
    the real /proc, its ``net/dev`` is not, and that file's inode is the one of our own namespace's ``net/dev``."""
    exclude = re.compile(netdev.DEFAULT_EXCLUDE)
    target = os.getpid()  # root's process: a reader of another uid may not ptrace it
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            try:
                os.readlink(f"/proc/{target}/ns/net")
                link = "readable"
            except PermissionError:
                link = "denied"
            total, netns = netdev.read_pid_net("/proc", target, exclude)
            _, inode = netdev.read_netdev("/proc/net/dev", exclude)
            same = netns in netdev.node_netns("/proc", inode)
            os.write(write_end, f"{link} {total is not None} {netns} {same}".encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        answer = pipe.read().split()
    os.waitpid(child, 0)
    link, readable, netns, same = answer
    assert link == "denied" and readable == "True"
    assert netns.startswith("net/dev:") and same == "True"  # the same namespace as the reader's, recognised
