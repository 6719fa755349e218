"""``sample()``: one snapshot of every counter the node monitor needs (the only step that reads /sys, /proc).

A :class:`RawSample` holds raw cumulative counters and gauges, not rates: rates
need two samples and are computed by the pure :func:`stowage.node_monitor.summary.summarise`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from stowage.node_monitor import cgroups, netdev

__all__ = ["PodSample", "RawSample", "Sampler"]


@dataclass(frozen=True, slots=True)
class PodSample:
    """One pod's counters in one sample."""

    uid: str
    qos: cgroups.QoS
    counters: cgroups.Counters
    net_bytes: float | None = None
    """Cumulative rx + tx bytes of the pod's network namespace (excluded interfaces left out); ``None``:
    no process of the pod visible, its ``net/dev`` unreadable, or a host-network pod."""
    netns: str | None = None
    """Identity of the namespace ``net_bytes`` came from (:func:`stowage.node_monitor.netdev.read_pid_net`):
    a different one in the next sample is a new namespace (the sandbox was recreated), whose counters restart."""
    host_network: bool = False
    """The pod shares the node's namespace (``spec.hostNetwork``, or its process is in the node's namespace):
    its traffic cannot be told from the node's, so it has no network value."""


@dataclass(frozen=True, slots=True)
class RawSample:
    """Everything read at one instant.

    ``node`` is the ``kubepods`` cgroup (every pod on the node, including pods
    that already exited: the parent's counters keep their usage) or ``None``
    when the node has no kubepods cgroup. ``net_bytes`` is ``None`` when
    ``/proc/net/dev`` was unreadable. ``pod_pids`` counts the pods (not host-network)
    with a process visible for their network counters.
    """

    taken_at_s: float
    node: cgroups.Counters | None
    pods: Mapping[str, PodSample] = field(default_factory=dict)
    net_bytes: float | None = None
    layout: str = ""
    duration_s: float = 0.0
    pod_pids: int = 0


class Sampler:
    """Reads the cgroup tree under ``cgroup_root``, ``<proc_root>/net/dev`` and each pod's
    ``<proc_root>/<pid>/net/dev``.

    The layout is detected on first use and again while no kubepods cgroup has
    been found (the kubelet may create it after the monitor starts). Per pod, one
    ``net/dev`` file is read from ``/proc``: that of the last sample's process while
    it lives in the same namespace, else that of the first pid in a container's
    ``cgroup.procs`` (the container that gave one last time is tried first).
    """

    def __init__(
        self,
        cgroup_root: Path | str,
        proc_root: Path | str,
        exclude_interfaces: str = netdev.DEFAULT_EXCLUDE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cgroup_root = Path(cgroup_root)
        self.proc_root = Path(proc_root)
        self._exclude = re.compile(exclude_interfaces)
        self._clock = clock
        self._layout: cgroups.Layout | None = None
        # uid → (pid, the container cgroup it was listed in, its namespace) of the last sample
        self._procs: dict[str, tuple[int, str, str]] = {}

    @property
    def layout(self) -> cgroups.Layout | None:
        if self._layout is None or self._layout.kubepods is None:
            self._layout = cgroups.detect_layout(self.cgroup_root)
        return self._layout

    def _pod_net(
        self, layout: cgroups.Layout, proc: str, pod: cgroups.PodCgroup
    ) -> tuple[int | None, float | None, str | None, str]:
        """(pid, rx + tx bytes, namespace identity, container cgroup) of one pod.

        The process of the last sample is read again while it lives in the same namespace; a process
        gone, or one whose pid now names a process elsewhere (another namespace), sends the lookup back
        to ``cgroup.procs``.
        """
        known = self._procs.get(pod.uid)
        if known is not None:
            pid, at, netns = known
            pod_bytes, now_ns = netdev.read_pid_net(proc, pid, self._exclude)
            if now_ns == netns:
                return pid, pod_bytes, netns, at
        found, at_found = cgroups.pod_pid(layout, pod.relpath, known[1] if known is not None else None)
        if found is None or at_found is None:
            return None, None, None, ""
        pod_bytes, netns_found = netdev.read_pid_net(proc, found, self._exclude)
        return found, pod_bytes, netns_found, at_found

    def sample(self, host_network: Collection[str] = ()) -> RawSample:
        """Read every counter once. Never raises for missing or vanishing files.

        ``host_network``: uids of pods known (from the API) to run with ``hostNetwork: true``; their
        processes are not looked up at all. A pod whose process turns out to be in the node's own
        namespace is marked host-network too.
        """
        started = time.perf_counter()
        before = self._clock()
        layout = self.layout
        proc = str(self.proc_root)
        net, node_inode = netdev.read_netdev(f"{proc}/net/dev", self._exclude)
        node_ns = netdev.node_netns(proc, node_inode)
        node: cgroups.Counters | None = None
        pods: dict[str, PodSample] = {}
        procs: dict[str, tuple[int, str, str]] = {}
        with_pid = 0
        if layout is not None and layout.kubepods is not None:
            node = cgroups.read_counters(layout, layout.kubepods)
            for pod in cgroups.list_pods(layout):
                counters = cgroups.read_counters(layout, pod.relpath)
                if counters is None:  # the pod vanished between listing and reading
                    continue
                if pod.uid in host_network:
                    pods[pod.uid] = PodSample(pod.uid, pod.qos, counters, host_network=True)
                    continue
                pid, pod_bytes, netns, at = self._pod_net(layout, proc, pod)
                if pid is None or netns is None:
                    pods[pod.uid] = PodSample(pod.uid, pod.qos, counters)
                    continue
                procs[pod.uid] = (pid, at, netns)
                if netns in node_ns:  # hostNetwork the API did not tell (or there is no API)
                    pods[pod.uid] = PodSample(pod.uid, pod.qos, counters, host_network=True)
                    continue
                with_pid += 1
                pods[pod.uid] = PodSample(pod.uid, pod.qos, counters, pod_bytes, netns)
        self._procs = procs  # pods gone, and pods without a process, are forgotten
        # Stamped at the middle of the reads: a read delayed on a busy node then skews two rates by half as much.
        taken_at = (before + self._clock()) / 2
        description = layout.describe() if layout is not None else f"{self.cgroup_root}: not a cgroup filesystem"
        return RawSample(
            taken_at_s=taken_at,
            node=node,
            pods=pods,
            net_bytes=net,
            layout=description,
            duration_s=time.perf_counter() - started,
            pod_pids=with_pid,
        )
