"""Sampling cgroup trees laid out as the kubelet lays them out, in the kernel's file formats."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import numpy as np
import pytest
from stowage.node_monitor import cgroups, netdev
from stowage.node_monitor.cgroups import Driver, QoS
from stowage.node_monitor.sampling import Sampler
from stowage.node_monitor.summary import RESOURCES, summarise
from stowage.node_monitor.synthetic import SyntheticNode

from .conftest import LAYOUTS

CPU, MEM, DISK, NET = (RESOURCES.index(r) for r in ("cpu", "memory", "disk", "network"))
UID_G = "0f1e2d3c-aaaa-4bbb-8ccc-000000000001"
UID_B = "0f1e2d3c-aaaa-4bbb-8ccc-000000000002"
UID_BE = "0f1e2d3c-aaaa-4bbb-8ccc-000000000003"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _three_pods(node: SyntheticNode) -> None:
    node.add_pod(UID_G, QoS.GUARANTEED, memory_current=400 << 20, inactive_file=100 << 20)
    node.add_pod(UID_B, QoS.BURSTABLE, memory_current=200 << 20)
    node.add_pod(UID_BE, QoS.BESTEFFORT, memory_current=50 << 20)


@pytest.mark.parametrize(("version", "driver"), LAYOUTS)
def test_every_pod_is_found_with_its_qos_class(make_node, version, driver) -> None:
    node = make_node(version, driver)
    _three_pods(node)
    layout = cgroups.detect_layout(node.root)
    assert layout is not None and (layout.version, layout.driver) == (version, driver)
    found = {p.uid: p.qos for p in cgroups.list_pods(layout)}
    assert found == {UID_G: QoS.GUARANTEED, UID_B: QoS.BURSTABLE, UID_BE: QoS.BESTEFFORT}


@pytest.mark.parametrize("driver", [Driver.SYSTEMD, Driver.CGROUPFS])
def test_a_kubelet_with_its_own_cgroup_root_as_in_kind_is_found(tmp_path: Path, driver: Driver) -> None:
    node = SyntheticNode(tmp_path / "cg", 2, driver, tmp_path / "proc", nested=True)
    _three_pods(node)
    assert (tmp_path / "cg" / ("kubelet.slice" if driver is Driver.SYSTEMD else "kubelet")).is_dir()
    sample = Sampler(node.root, node.proc_root).sample()
    assert {u: p.qos for u, p in sample.pods.items()} == {
        UID_G: QoS.GUARANTEED, UID_B: QoS.BURSTABLE, UID_BE: QoS.BESTEFFORT}
    assert sample.node is not None and sample.node.memory_bytes == (300 + 200 + 50) << 20


def test_systemd_slice_names_turn_uid_dashes_into_underscores(make_node) -> None:
    node = make_node(2, Driver.SYSTEMD)
    node.add_pod(UID_B, QoS.BURSTABLE)
    slice_name = f"kubepods-burstable-pod{UID_B.replace('-', '_')}.slice"
    on_disk = node.root / "kubepods.slice" / "kubepods-burstable.slice" / slice_name
    assert on_disk.is_dir()
    assert [p.uid for p in cgroups.list_pods(cgroups.detect_layout(node.root))] == [UID_B]


@pytest.mark.parametrize(("version", "driver"), LAYOUTS)
def test_advancing_counters_give_cores_bytes_and_bandwidth(make_node, version, driver) -> None:
    node = make_node(version, driver)
    _three_pods(node)
    clock = Clock()
    sampler = Sampler(node.root, node.proc_root, clock=clock)
    first = sampler.sample()
    node.advance_pod(UID_G, cpu_usec=3_000_000, rbytes=4 << 20, wbytes=2 << 20)  # over 2 s: 1.5 cores, 3 MiB/s
    node.advance_pod(UID_B, cpu_usec=500_000)
    node.advance_net("eth0", rx=10 << 20, tx=2 << 20)
    node.advance_net("lo", rx=99 << 20, tx=99 << 20)  # loopback never counts
    node.advance_pod_net(UID_B, "eth0", rx=3 << 20, tx=1 << 20)  # the pod's own namespace: 2 MiB/s
    node.advance_pod_net(UID_B, "lo", rx=50 << 20, tx=50 << 20)
    clock.now += 2.0
    usage = summarise(first, sampler.sample())

    pods = dict(zip(usage.pod_uids, usage.pods, strict=True))
    assert pods[UID_G][CPU] == pytest.approx(1.5)
    assert pods[UID_G][DISK] == pytest.approx(3 << 20)
    assert pods[UID_B][CPU] == pytest.approx(0.25)
    assert pods[UID_BE][CPU] == 0.0
    assert usage.node[CPU] == pytest.approx(1.75)
    assert usage.node[DISK] == pytest.approx(3 << 20)
    assert usage.node[NET] == pytest.approx(6 << 20)
    assert pods[UID_B][NET] == pytest.approx(2 << 20)
    assert pods[UID_G][NET] == 0.0 and pods[UID_BE][NET] == 0.0  # measured: no traffic, not unknown


@pytest.mark.parametrize(("version", "driver"), LAYOUTS)
def test_memory_is_the_kubelets_working_set(make_node, version, driver) -> None:
    node = make_node(version, driver)
    _three_pods(node)
    usage = summarise(None, Sampler(node.root, node.proc_root).sample())
    pods = dict(zip(usage.pod_uids, usage.pods, strict=True))
    assert pods[UID_G][MEM] == 300 << 20  # memory.current − inactive_file
    assert pods[UID_B][MEM] == 200 << 20
    assert usage.node[MEM] == (300 + 200 + 50) << 20


def test_working_set_is_floored_at_zero(make_node) -> None:
    node = make_node(2, Driver.SYSTEMD)
    node.add_pod(UID_B, QoS.BURSTABLE, memory_current=10 << 20, inactive_file=30 << 20)
    usage = summarise(None, Sampler(node.root, node.proc_root).sample())
    assert usage.pods[0][MEM] == 0.0


@pytest.mark.parametrize(("version", "driver"), LAYOUTS)
def test_first_sample_gives_memory_but_no_rates(make_node, version, driver) -> None:
    node = make_node(version, driver)
    _three_pods(node)
    usage = summarise(None, Sampler(node.root, node.proc_root).sample())
    assert np.isnan(usage.node[[CPU, DISK, NET]]).all()
    assert np.isnan(usage.pods[:, [CPU, DISK, NET]]).all()
    assert not np.isnan(usage.pods[:, MEM]).any()


@pytest.mark.parametrize(("version", "driver"), LAYOUTS)
def test_a_counter_reset_gives_no_rate_rather_than_a_spike(make_node, version, driver) -> None:
    node = make_node(version, driver)
    node.add_pod(UID_B, QoS.BURSTABLE, cpu_usec=50_000_000, rbytes=1 << 30)
    node.add_pod(UID_G, QoS.GUARANTEED, cpu_usec=1_000_000)
    clock = Clock()
    sampler = Sampler(node.root, node.proc_root, clock=clock)
    first = sampler.sample()
    node.set_pod(UID_B, cpu_usec=1_000, rbytes=0)  # the pod's cgroup was recreated: counters restart
    node.advance_pod(UID_G, cpu_usec=1_000_000)
    clock.now += 1.0
    usage = summarise(first, sampler.sample())
    pods = dict(zip(usage.pod_uids, usage.pods, strict=True))
    assert math.isnan(pods[UID_B][CPU]) and math.isnan(pods[UID_B][DISK])
    assert pods[UID_G][CPU] == pytest.approx(1.0)  # the other pod is unaffected


def test_a_network_counter_reset_gives_no_rate(make_node) -> None:
    node = make_node()
    node.net["eth0"] = (10 << 30, 10 << 30)
    node.write_net()
    clock = Clock()
    sampler = Sampler(node.root, node.proc_root, clock=clock)
    first = sampler.sample()
    node.net["eth0"] = (5, 5)  # interface re-created
    node.write_net()
    clock.now += 1.0
    assert math.isnan(summarise(first, sampler.sample()).node[NET])


@pytest.mark.parametrize(("version", "driver"), LAYOUTS)
def test_a_pod_vanishing_between_listing_and_reading_is_dropped(make_node, version, driver) -> None:
    node = make_node(version, driver)
    _three_pods(node)
    layout = cgroups.detect_layout(node.root)
    listed = cgroups.list_pods(layout)
    node.remove_pod(UID_B)  # gone after the listing, before the read
    read = {p.uid: cgroups.read_counters(layout, p.relpath) for p in listed}
    assert read[UID_B] is None
    assert read[UID_G] is not None and read[UID_G].memory_bytes == 300 << 20


@pytest.mark.parametrize(("version", "driver"), LAYOUTS)
def test_a_removed_pod_leaves_the_sample_and_no_rate_is_invented(make_node, version, driver) -> None:
    node = make_node(version, driver)
    _three_pods(node)
    node.advance_pod(UID_B, cpu_usec=9_000_000)
    clock = Clock()
    sampler = Sampler(node.root, node.proc_root, clock=clock)
    first = sampler.sample()
    node.remove_pod(UID_B)
    clock.now += 1.0
    usage = summarise(first, sampler.sample())
    assert UID_B not in usage.pod_uids
    # The parent keeps a dead pod's CPU time: the node rate shows no negative or invented usage.
    assert usage.node[CPU] == 0.0
    assert usage.node[MEM] == (300 + 50) << 20


def test_missing_files_give_unknown_values_not_zeros(make_node) -> None:
    node = make_node(2, Driver.CGROUPFS)
    node.add_pod(UID_B, QoS.BURSTABLE, memory_current=64 << 20)
    pod_dir = node.pod_dirs(UID_B)[0]
    (pod_dir / "io.stat").unlink()  # io controller not enabled for this cgroup
    (pod_dir / "memory.stat").unlink()
    layout = cgroups.detect_layout(node.root)
    counters = cgroups.read_counters(layout, cgroups.list_pods(layout)[0].relpath)
    assert counters is not None
    assert counters.io_bytes is None
    assert counters.memory_bytes == 64 << 20  # without memory.stat: usage as the working set, as the kubelet does
    assert counters.cpu_usec == 0


def test_an_unreadable_file_gives_an_unknown_value_and_keeps_the_pod(make_node) -> None:
    node = make_node(2, Driver.SYSTEMD)
    node.add_pod(UID_B, QoS.BURSTABLE, cpu_usec=5, memory_current=1 << 20)
    cpu_stat = node.pod_dirs(UID_B)[0] / "cpu.stat"
    cpu_stat.unlink()
    cpu_stat.mkdir()  # opens fine, every read fails (EISDIR): unreadable even for root
    layout = cgroups.detect_layout(node.root)
    counters = cgroups.read_counters(layout, cgroups.list_pods(layout)[0].relpath)
    assert counters is not None and counters.cpu_usec is None and counters.memory_bytes == 1 << 20


def test_garbage_in_a_counter_file_gives_an_unknown_value(make_node) -> None:
    node = make_node(2, Driver.SYSTEMD)
    node.add_pod(UID_B, QoS.BURSTABLE)
    d = node.pod_dirs(UID_B)[0]
    (d / "cpu.stat").write_text("usage_usec banana\n")
    (d / "memory.current").write_text("max\n")
    (d / "io.stat").write_text("8:0 rbytes=x wbytes=1\n")
    layout = cgroups.detect_layout(node.root)
    assert cgroups.read_counters(layout, cgroups.list_pods(layout)[0].relpath) == cgroups.Counters(None, None, None)


def test_container_cgroups_inside_a_pod_are_not_mistaken_for_pods(make_node) -> None:
    node = make_node(2, Driver.SYSTEMD)
    node.add_pod(UID_B, QoS.BURSTABLE)
    pod_dir = node.pod_dirs(UID_B)[0]
    (pod_dir / "cri-containerd-0123abcd.scope").mkdir()
    (node.root / "kubepods.slice" / "kubepods-burstable.slice" / "not-a-pod.slice").mkdir()
    assert [p.uid for p in cgroups.list_pods(cgroups.detect_layout(node.root))] == [UID_B]


def test_a_node_without_kubepods_reports_no_pods(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu memory io\n")
    sample = Sampler(tmp_path, tmp_path / "proc").sample()
    assert sample.pods == {} and sample.node is None
    assert "no pods" in sample.layout
    assert math.isnan(summarise(None, sample).node[MEM])


def test_a_directory_that_is_not_a_cgroup_mount_reports_so(tmp_path: Path) -> None:
    sample = Sampler(tmp_path, tmp_path).sample()
    assert sample.pods == {} and "not a cgroup filesystem" in sample.layout
    assert sample.net_bytes is None  # no net/dev either: unknown, not zero


def test_kubepods_created_after_start_is_picked_up(tmp_path: Path) -> None:
    (tmp_path / "cg").mkdir()
    (tmp_path / "cg" / "cgroup.controllers").write_text("cpu memory io\n")
    sampler = Sampler(tmp_path / "cg", tmp_path / "proc")
    assert sampler.sample().pods == {}
    node = SyntheticNode(tmp_path / "cg", 2, Driver.SYSTEMD, tmp_path / "proc")  # the kubelet starts
    node.add_pod(UID_G, QoS.GUARANTEED)
    assert list(sampler.sample().pods) == [UID_G]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("", 0.0, id="header-only-file-counts-nothing"),
        pytest.param("  eth0: 100 1 0 0 0 0 0 0 50 1 0 0 0 0 0 0\n", 150.0, id="one-interface-rx-plus-tx"),
        pytest.param("    lo: 100 1 0 0 0 0 0 0 50 1 0 0 0 0 0 0\n", 0.0, id="loopback-excluded"),
        pytest.param("  eth0: 1 1 0 0 0 0 0 0 1 1 0 0 0 0 0 0\n  eth1: 2 1 0 0 0 0 0 0 2 1 0 0 0 0 0 0\n", 6.0,
                     id="interfaces-summed"),
        pytest.param("  eth0: x 1 0 0 0 0 0 0 1 1 0 0 0 0 0 0\n  eth1: 2 1 0 0 0 0 0 0 2 1 0 0 0 0 0 0\n", 4.0,
                     id="garbage-line-skipped"),
    ],
)
def test_proc_net_dev_is_parsed_as_the_kernel_writes_it(tmp_path: Path, text: str, expected: float) -> None:
    (tmp_path / "net").mkdir()
    header = "Inter-|   Receive |  Transmit\n face |bytes    packets|bytes    packets\n"
    (tmp_path / "net" / "dev").write_text(header + text)
    assert netdev.read_net_bytes(tmp_path) == expected


def test_this_machines_own_cgroups_sample_without_crashing() -> None:
    """Smoke test on the real /sys/fs/cgroup and /proc, whatever layout this machine has."""
    sampler = Sampler("/sys/fs/cgroup", "/proc")
    before = time.monotonic()
    first = sampler.sample()
    second = sampler.sample()
    elapsed = time.monotonic() - before
    usage = summarise(first, second)
    assert usage.layout  # a description, e.g. "cgroup v1, no kubepods cgroup ...: no pods on this node"
    if second.node is None:
        assert "no pods" in usage.layout or "not a cgroup" in usage.layout
        assert usage.pod_uids == ()
    else:
        assert usage.node[MEM] >= 0 and not math.isnan(usage.node[MEM])
        assert all(row[MEM] >= 0 for row in usage.pods if not math.isnan(row[MEM]))
    # The samples are microseconds apart and each reads its counters a moment after its timestamp, so the
    # rate itself is noise on a loaded machine; the CPU time it implies fits within the whole window, though.
    cpu = usage.node[CPU]
    dt = second.taken_at_s - first.taken_at_s
    assert math.isnan(cpu) or 0 <= cpu * dt <= (os.cpu_count() or 1) * elapsed * 1.5
    # Node network comes from /proc/net/dev, which every Linux machine has.
    assert second.net_bytes is not None and second.net_bytes >= 0
    assert usage.node[NET] >= 0 or math.isnan(usage.node[NET])
