"""Synthetic cgroup trees laid out exactly as the kubelet lays them out, in the kernel's file formats.

Used by the tests, by ``stowage bench node-monitor`` and for running the node
monitor without a cluster (``--no-kubernetes --cgroup-root <tree>``). Nothing
here is used by a real node monitor.

Each pod's counters are set explicitly; the ``kubepods`` parent (and the QoS
parent) is kept consistent the way the kernel keeps it: cumulative counters of
a removed pod stay in its parents, memory leaves with the pod.

Each pod also gets a process, as a running pod has: a container cgroup
(``cri-containerd-<id>.scope`` with the systemd driver, ``<id>`` with cgroupfs)
whose ``cgroup.procs`` lists a pid, and under the proc root ``<pid>/net/dev``
(the pod's interfaces) and ``<pid>/ns/net`` (a link ``net:[N]``, as the kernel's
reads). ``self/ns/net`` is the node's namespace, the one a ``hostNetwork``
monitor runs in. A host-network pod's ``<pid>/net`` is the node's ``net`` and its
``ns/net`` the node's namespace.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from stowage.node_monitor.cgroups import Driver, QoS

__all__ = ["NODE_NETNS", "PodNet", "PodState", "SyntheticNode"]

_V2_CONTROLLERS = "cpuset cpu io memory hugetlb pids rdma misc\n"
_DEVICES = ("8:0", "259:0")
NODE_NETNS = 4026531840
"""The node's (initial) network namespace inode, as ``readlink /proc/1/ns/net`` shows it on most hosts."""
Network = Literal["pod", "host", "none"]


@dataclass(slots=True)
class PodState:
    """Counters of one synthetic cgroup. Cumulative: cpu_usec, rbytes, wbytes. Gauges: memory."""

    cpu_usec: int = 0
    memory_current: int = 0
    inactive_file: int = 0
    rbytes: int = 0
    wbytes: int = 0


@dataclass(slots=True)
class PodNet:
    """A pod's process and network namespace: ``pid`` (``None``: no process), ``netns`` inode, interfaces' counters."""

    pid: int | None
    netns: int
    host: bool = False
    container: str = ""
    interfaces: dict[str, tuple[int, int]] = field(default_factory=lambda: {"lo": (0, 0), "eth0": (0, 0)})


def _netdev_text(interfaces: dict[str, tuple[int, int]]) -> str:
    lines = [
        "Inter-|   Receive                                                |  Transmit",
        " face |bytes    packets errs drop fifo frame compressed multicast"
        "|bytes    packets errs drop fifo colls carrier compressed",
    ]
    zeros_rx = "    0    0    0     0          0         0"
    zeros_tx = "    0    0    0     0       0          0"
    for name, (rx, tx) in interfaces.items():
        lines.append(f"{name:>6}: {rx:>9} {rx // 1500:>7}{zeros_rx} {tx:>9} {tx // 1500:>7}{zeros_tx}")
    return "\n".join(lines) + "\n"


def _link(path: Path, target: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.exists():
        path.unlink()
    path.symlink_to(target)


def _put(path: Path, text: str) -> None:
    """Replace a file atomically: a reader sees the old or the new content, as with kernel files, never half."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _add(a: PodState, b: PodState, sign: int = 1, gauges: bool = True) -> None:
    a.cpu_usec += sign * b.cpu_usec
    a.rbytes += sign * b.rbytes
    a.wbytes += sign * b.wbytes
    if gauges:
        a.memory_current += sign * b.memory_current
        a.inactive_file += sign * b.inactive_file


class SyntheticNode:
    """A kubelet-shaped cgroup tree under ``root``; ``net/dev`` and the pods' processes under ``proc_root``.

    ``version`` 1 or 2; ``driver`` systemd or cgroupfs; ``nested`` puts the tree
    under the kubelet's ``--cgroup-root=/kubelet`` as kind does.
    """

    def __init__(
        self,
        root: Path | str,
        version: int = 2,
        driver: Driver = Driver.SYSTEMD,
        proc_root: Path | str | None = None,
        nested: bool = False,
    ) -> None:
        if version not in (1, 2):
            raise ValueError(f"version: must be 1 or 2, got {version!r}")
        self.root = Path(root)
        self.version = version
        self.driver = Driver(driver)
        self.nested = nested
        self.proc_root = Path(proc_root) if proc_root is not None else self.root.parent / "proc"
        self.pods: dict[str, tuple[QoS, PodState]] = {}
        self.kubepods = PodState()
        self.qos_totals = {q: PodState() for q in (QoS.BURSTABLE, QoS.BESTEFFORT)}
        self.net: dict[str, tuple[int, int]] = {"lo": (0, 0), "eth0": (0, 0)}
        self.pod_net: dict[str, PodNet] = {}
        self._pids = itertools.count(1000)
        self._netns = itertools.count(NODE_NETNS + 400)
        self._setup()

    # --- paths --------------------------------------------------------------------------------

    @property
    def kubepods_rel(self) -> str:
        if self.driver is Driver.SYSTEMD:
            return "kubelet.slice/kubelet-kubepods.slice" if self.nested else "kubepods.slice"
        return "kubelet/kubepods" if self.nested else "kubepods"

    @property
    def slice_prefix(self) -> str:
        return "kubelet-kubepods" if self.nested else "kubepods"

    def qos_rel(self, qos: QoS) -> str:
        k = self.kubepods_rel
        if qos is QoS.GUARANTEED:
            return k
        return f"{k}/{self.slice_prefix}-{qos}.slice" if self.driver is Driver.SYSTEMD else f"{k}/{qos}"

    def pod_rel(self, uid: str, qos: QoS) -> str:
        if self.driver is Driver.SYSTEMD:
            infix = "" if qos is QoS.GUARANTEED else f"-{qos}"
            return f"{self.qos_rel(qos)}/{self.slice_prefix}{infix}-pod{uid.replace('-', '_')}.slice"
        return f"{self.qos_rel(qos)}/pod{uid}"

    def _controller_dirs(self) -> dict[str, Path]:
        if self.version == 2:
            return {"all": self.root}
        return {"cpu": self.root / "cpu,cpuacct", "memory": self.root / "memory", "blkio": self.root / "blkio"}

    def pod_dirs(self, uid: str) -> list[Path]:
        """The pod's cgroup directories (one on v2, one per controller on v1)."""
        return self.pod_dirs_for(uid, self.pods[uid][0])

    def pod_dirs_for(self, uid: str, qos: QoS) -> list[Path]:
        return [base / self.pod_rel(uid, qos) for base in self._controller_dirs().values()]

    # --- writing ------------------------------------------------------------------------------

    def _setup(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if self.version == 2:
            (self.root / "cgroup.controllers").write_text(_V2_CONTROLLERS)
        else:
            for base in self._controller_dirs().values():
                base.mkdir(exist_ok=True)
            # Real hosts mount cpu,cpuacct once and link both names to it.
            for alias in ("cpu", "cpuacct"):
                link = self.root / alias
                if not link.exists():
                    link.symlink_to("cpu,cpuacct")
        for qos in (QoS.GUARANTEED, QoS.BURSTABLE, QoS.BESTEFFORT):
            self._write(self.qos_rel(qos), self.qos_totals.get(qos, self.kubepods))
        self._write(self.kubepods_rel, self.kubepods)
        self.write_net()
        _link(self.proc_root / "self" / "ns" / "net", f"net:[{NODE_NETNS}]")

    def _write(self, rel: str, s: PodState) -> None:
        if self.version == 2:
            d = self.root / rel
            d.mkdir(parents=True, exist_ok=True)
            (d / "cgroup.procs").touch()
            user = s.cpu_usec * 3 // 4
            _put(d / "cpu.stat",
                f"usage_usec {s.cpu_usec}\nuser_usec {user}\nsystem_usec {s.cpu_usec - user}\n"
                "nr_periods 0\nnr_throttled 0\nthrottled_usec 0\nnr_bursts 0\nburst_usec 0\n"
            )
            _put(d / "memory.current", f"{s.memory_current}\n")
            anon = max(0, s.memory_current - s.inactive_file)
            _put(d / "memory.stat",
                f"anon {anon}\nfile {s.inactive_file}\nkernel 0\nkernel_stack 0\npagetables 0\nsec_pagetables 0\n"
                f"percpu 0\nsock 0\nvmalloc 0\nshmem 0\nfile_mapped 0\nfile_dirty 0\nfile_writeback 0\n"
                f"swapcached 0\nanon_thp 0\nfile_thp 0\nshmem_thp 0\ninactive_anon 0\nactive_anon {anon}\n"
                f"inactive_file {s.inactive_file}\nactive_file 0\nunevictable 0\nslab_reclaimable 0\n"
                f"slab_unreclaimable 0\nslab 0\npgfault 0\npgmajfault 0\n"
            )
            # The kernel splits I/O per device; two devices check that they are summed.
            r0, w0 = s.rbytes // 2, s.wbytes // 2
            _put(d / "io.stat",
                f"{_DEVICES[0]} rbytes={r0} wbytes={w0} rios=1 wios=1 dbytes=0 dios=0\n"
                f"{_DEVICES[1]} rbytes={s.rbytes - r0} wbytes={s.wbytes - w0} rios=1 wios=1 dbytes=0 dios=0\n"
                if s.rbytes or s.wbytes
                else ""
            )
            return
        dirs = self._controller_dirs()
        cpu = dirs["cpu"] / rel
        cpu.mkdir(parents=True, exist_ok=True)
        _put(cpu / "cpuacct.usage", f"{s.cpu_usec * 1000}\n")
        _put(cpu / "cpu.shares", "1024\n")
        mem = dirs["memory"] / rel
        mem.mkdir(parents=True, exist_ok=True)
        _put(mem / "memory.usage_in_bytes", f"{s.memory_current}\n")
        rss = max(0, s.memory_current - s.inactive_file)
        _put(mem / "memory.stat",
            f"cache {s.inactive_file}\nrss {rss}\nrss_huge 0\nshmem 0\nmapped_file 0\ndirty 0\nwriteback 0\n"
            f"inactive_anon 0\nactive_anon {rss}\ninactive_file {s.inactive_file}\nactive_file 0\nunevictable 0\n"
            f"hierarchical_memory_limit 9223372036854771712\ntotal_cache {s.inactive_file}\ntotal_rss {rss}\n"
            f"total_inactive_anon 0\ntotal_active_anon {rss}\ntotal_inactive_file {s.inactive_file}\n"
            f"total_active_file 0\ntotal_unevictable 0\n"
        )
        blk = dirs["blkio"] / rel
        blk.mkdir(parents=True, exist_ok=True)
        r0, w0 = s.rbytes // 2, s.wbytes // 2
        lines = []
        for dev, r, w in ((_DEVICES[0], r0, w0), (_DEVICES[1], s.rbytes - r0, s.wbytes - w0)):
            lines += [f"{dev} Read {r}", f"{dev} Write {w}", f"{dev} Sync {r + w}", f"{dev} Async 0",
                      f"{dev} Discard 0", f"{dev} Total {r + w}"]
        lines.append(f"Total {s.rbytes + s.wbytes}")
        _put(blk / "blkio.throttle.io_service_bytes_recursive", "\n".join(lines) + "\n")

    def write_net(self) -> None:
        (self.proc_root / "net").mkdir(parents=True, exist_ok=True)
        _put(self.proc_root / "net" / "dev", _netdev_text(self.net))

    # --- pod processes and network namespaces -------------------------------------------------

    def container_rel(self, uid: str) -> str:
        """The pod's container cgroup, relative to the pod cgroup (the kubelet's naming for this driver)."""
        cid = hashlib.sha256(uid.encode()).hexdigest()
        return f"cri-containerd-{cid}.scope" if self.driver is Driver.SYSTEMD else cid

    def _start_process(self, uid: str, net: PodNet) -> None:
        """Give the pod a new process (and, unless host-network, the namespace ``net.netns``) under the proc root."""
        net.pid = next(self._pids)
        net.container = self.container_rel(uid)
        for d in self.pod_dirs(uid):
            (d / net.container).mkdir(parents=True, exist_ok=True)
            # The pause process first, then the app's: the monitor reads the first.
            _put(d / net.container / "cgroup.procs", f"{net.pid}\n{net.pid + 100000}\n")
        proc = self.proc_root / str(net.pid)
        if net.host:
            _link(proc / "ns" / "net", f"net:[{NODE_NETNS}]")
            _link(proc / "net", "../net")  # /proc/<pid>/net of a host-network process is the node's
        else:
            _link(proc / "ns" / "net", f"net:[{net.netns}]")
            self.write_pod_net(uid)

    def write_pod_net(self, uid: str) -> None:
        net = self.pod_net[uid]
        if net.pid is not None and not net.host:
            (self.proc_root / str(net.pid) / "net").mkdir(parents=True, exist_ok=True)
            _put(self.proc_root / str(net.pid) / "net" / "dev", _netdev_text(net.interfaces))

    def _stop_process(self, net: PodNet) -> None:
        if net.pid is not None:
            shutil.rmtree(self.proc_root / str(net.pid), ignore_errors=True)

    def advance_pod_net(self, uid: str, iface: str = "eth0", rx: int = 0, tx: int = 0) -> None:
        """Add to the counters of one interface of the pod's network namespace."""
        net = self.pod_net[uid]
        r, t = net.interfaces.get(iface, (0, 0))
        net.interfaces[iface] = (r + rx, t + tx)
        self.write_pod_net(uid)

    def recreate_pod_sandbox(self, uid: str, **interfaces: tuple[int, int]) -> None:
        """The pod's sandbox is recreated: a new process in a new namespace whose counters start over
        (``interfaces``: their values there, e.g. ``eth0=(5, 5)``; default zeros)."""
        old = self.pod_net[uid]
        self._stop_process(old)
        for d in self.pod_dirs(uid):
            shutil.rmtree(d / old.container, ignore_errors=True)
        new = PodNet(None, next(self._netns), old.host)
        new.interfaces.update(interfaces)
        self.pod_net[uid] = new
        self._start_process(uid, new)

    # --- pods ---------------------------------------------------------------------------------

    def add_pod(self, uid: str, qos: QoS = QoS.BURSTABLE, network: Network = "pod", **counters: int) -> None:
        """Create a pod cgroup with the given counters (``cpu_usec``, ``memory_current``, ...).

        ``network``: ``pod`` (a process in the pod's own namespace), ``host`` (a process in the node's
        namespace, as with ``hostNetwork: true``) or ``none`` (no process yet: containers not started).
        """
        if uid in self.pods:
            raise ValueError(f"pod {uid} already exists")
        if network not in ("pod", "host", "none"):
            raise ValueError(f"network: must be pod, host or none, got {network!r}")
        state = PodState(**counters)
        self.pods[uid] = (QoS(qos), state)
        self._propagate(QoS(qos), state, +1)
        self._write(self.pod_rel(uid, QoS(qos)), state)
        net = PodNet(None, next(self._netns), host=network == "host")
        self.pod_net[uid] = net
        if network != "none":
            self._start_process(uid, net)

    def set_pod(self, uid: str, **counters: int) -> None:
        """Set a pod's counters (absolute values); parents follow."""
        qos, state = self.pods[uid]
        self._propagate(qos, state, -1)
        for key, value in counters.items():
            setattr(state, key, int(value))
        self._propagate(qos, state, +1)
        self._write(self.pod_rel(uid, qos), state)

    def advance_pod(self, uid: str, **deltas: int) -> None:
        """Add to a pod's counters (``cpu_usec=500_000`` is half a core-second)."""
        _, state = self.pods[uid]
        self.set_pod(uid, **{k: getattr(state, k) + v for k, v in deltas.items()})

    def remove_pod(self, uid: str) -> None:
        """Delete a pod's cgroup; its cumulative counters stay in the parents, its memory leaves."""
        qos, state = self.pods.pop(uid)
        net = self.pod_net.pop(uid, None)
        if net is not None:
            self._stop_process(net)
        gone = PodState(memory_current=state.memory_current, inactive_file=state.inactive_file)
        self._propagate(qos, gone, -1)
        for d in self.pod_dirs_for(uid, qos):
            shutil.rmtree(d, ignore_errors=True)

    def _propagate(self, qos: QoS, state: PodState, sign: int) -> None:
        _add(self.kubepods, state, sign)
        if qos in self.qos_totals:
            _add(self.qos_totals[qos], state, sign)
            self._write(self.qos_rel(qos), self.qos_totals[qos])
        self._write(self.kubepods_rel, self.kubepods)

    def advance_net(self, iface: str = "eth0", rx: int = 0, tx: int = 0) -> None:
        r, t = self.net.get(iface, (0, 0))
        self.net[iface] = (r + rx, t + tx)
        self.write_net()
