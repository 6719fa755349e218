"""``sample()``: one snapshot of every counter the node monitor needs (the only step that reads /sys, /proc).

A :class:`RawSample` holds raw cumulative counters and gauges, not rates: rates
need two samples and are computed by the pure :func:`stowage.node_monitor.summary.summarise`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
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


@dataclass(frozen=True, slots=True)
class RawSample:
    """Everything read at one instant.

    ``node`` is the ``kubepods`` cgroup (every pod on the node, including pods
    that already exited: the parent's counters keep their usage) or ``None``
    when the node has no kubepods cgroup. ``net_bytes`` is ``None`` when
    ``/proc/net/dev`` was unreadable.
    """

    taken_at_s: float
    node: cgroups.Counters | None
    pods: Mapping[str, PodSample] = field(default_factory=dict)
    net_bytes: float | None = None
    layout: str = ""
    duration_s: float = 0.0


class Sampler:
    """Reads the cgroup tree under ``cgroup_root`` and ``<proc_root>/net/dev``.

    The layout is detected on first use and again while no kubepods cgroup has
    been found (the kubelet may create it after the monitor starts).
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

    @property
    def layout(self) -> cgroups.Layout | None:
        if self._layout is None or self._layout.kubepods is None:
            self._layout = cgroups.detect_layout(self.cgroup_root)
        return self._layout

    def sample(self) -> RawSample:
        """Read every counter once. Never raises for missing or vanishing files."""
        started = time.perf_counter()
        before = self._clock()
        layout = self.layout
        node: cgroups.Counters | None = None
        pods: dict[str, PodSample] = {}
        if layout is not None and layout.kubepods is not None:
            node = cgroups.read_counters(layout, layout.kubepods)
            for pod in cgroups.list_pods(layout):
                counters = cgroups.read_counters(layout, pod.relpath)
                if counters is not None:  # None: the pod vanished between listing and reading
                    pods[pod.uid] = PodSample(pod.uid, pod.qos, counters)
        net = netdev.read_net_bytes(self.proc_root, self._exclude)
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
        )
