"""Pod usage counters read from the cgroup filesystem, in every layout the kubelet produces.

This module and :mod:`stowage.node_monitor.netdev` are the only code that reads
``/sys`` or ``/proc`` (STYLE §12). Layouts (``<root>`` is ``--cgroup-root``)::

    cgroup v2, systemd driver   <root>/kubepods.slice/                                   all pods
                                <root>/kubepods.slice/kubepods-pod<uid_>.slice/          guaranteed
                                <root>/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice/
                                <root>/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod<uid_>.slice/
    cgroup v2, cgroupfs driver  <root>/kubepods/  pod<uid>/  burstable/pod<uid>/  besteffort/pod<uid>/
    cgroup v1 (either driver)   the same relative paths under <root>/cpu,cpuacct (or cpuacct),
                                <root>/memory and <root>/blkio

``<uid_>`` is the pod uid with dashes turned into underscores (systemd forbids
dashes inside a slice name component). A kubelet started with ``--cgroup-root=/kubelet``
(kind, nested nodes) nests the same tree one level down: ``kubelet/kubepods/…`` or
``kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/…``. Files read per cgroup:

=========  =================================================  ==============================================
resource   cgroup v2                                          cgroup v1
=========  =================================================  ==============================================
cpu        ``cpu.stat`` ``usage_usec`` (cumulative µs)        ``cpuacct.usage`` (cumulative ns)
memory     ``memory.current − memory.stat:inactive_file``     ``memory.usage_in_bytes − memory.stat:
                                                              total_inactive_file``
disk       ``io.stat`` Σ ``rbytes + wbytes`` (cumulative)     ``blkio.throttle.io_service_bytes_recursive``
                                                              Σ Read + Write (cumulative)
=========  =================================================  ==============================================

Memory is the working set exactly as the kubelet computes it (floored at 0).
For per-pod network, :func:`pod_pid` finds one process of the pod: the first pid in the
``cgroup.procs`` of one of its container cgroups (``cri-containerd-<id>.scope``, ``crio-<id>.scope``,
``docker-<id>.scope`` or ``<id>`` below the pod's cgroup; on cgroup v1 under the memory controller),
whose ``/proc/<pid>/net/dev`` :mod:`stowage.node_monitor.netdev` reads.
A file that is missing or unreadable gives ``None`` for that counter, never 0;
a pod whose directory disappears between listing and reading is dropped from
the sample. Files are read with ``os.open``/``os.read``: 110 pods × 4 files must
fit in a few milliseconds.
"""

from __future__ import annotations

import enum
import os
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Counters",
    "Driver",
    "Layout",
    "PodCgroup",
    "QoS",
    "detect_layout",
    "list_pods",
    "pod_pid",
    "read_counters",
]


class QoS(enum.StrEnum):
    """The pod's QoS class, as the kubelet encodes it in the cgroup path."""

    GUARANTEED = "guaranteed"
    BURSTABLE = "burstable"
    BESTEFFORT = "besteffort"


class Driver(enum.StrEnum):
    """The kubelet's ``cgroupDriver``."""

    SYSTEMD = "systemd"
    CGROUPFS = "cgroupfs"


@dataclass(frozen=True, slots=True)
class Counters:
    """One cgroup's counters at one instant; ``None`` means unknown (missing or unreadable)."""

    cpu_usec: float | None
    """Cumulative CPU time, microseconds (monotonic unless the cgroup was recreated)."""
    memory_bytes: float | None
    """Working set, bytes (a gauge)."""
    io_bytes: float | None
    """Cumulative bytes read plus written on block devices."""


@dataclass(frozen=True, slots=True)
class PodCgroup:
    """A pod's cgroup: its uid, QoS class and path relative to each controller's kubepods parent."""

    uid: str
    qos: QoS
    relpath: str


@dataclass(frozen=True, slots=True)
class Layout:
    """Where the counters live on this node.

    ``cpu``, ``memory``, ``io`` are the directories that hold the ``kubepods``
    cgroup for each controller (all the same directory on cgroup v2).
    ``kubepods`` is ``None`` when no kubepods cgroup exists: a node (or a test
    machine) without pods.
    """

    version: int
    driver: Driver | None
    cpu: Path
    memory: Path
    io: Path
    kubepods: str | None

    def describe(self) -> str:
        if self.kubepods is None:
            return f"cgroup v{self.version}, no kubepods cgroup under {self.memory}: no pods on this node"
        return f"cgroup v{self.version}, {self.driver} driver, pods under {self.memory / self.kubepods}"


# --- layout detection ---------------------------------------------------------------------------

_CHUNK = 65536
_IO_BYTES = re.compile(rb"\b[rw]bytes=(\d+)\b")
_V1_CPU_DIRS = ("cpu,cpuacct", "cpuacct,cpu", "cpuacct", "cpu")
_CGROUPFS_POD = re.compile(r"^pod([0-9A-Za-z-]+)$")
#: Where the kubelet puts the pods' parent cgroup: at the top, or under ``--cgroup-root=/kubelet``
#: (kind and other nested nodes). A systemd slice's name prefixes every slice below it.
_KUBEPODS = (
    ("kubepods.slice", Driver.SYSTEMD),
    ("kubepods", Driver.CGROUPFS),
    ("kubelet.slice/kubelet-kubepods.slice", Driver.SYSTEMD),
    ("kubelet/kubepods", Driver.CGROUPFS),
)


def _kubepods_in(base: Path) -> tuple[Driver | None, str | None]:
    for rel, driver in _KUBEPODS:
        if (base / rel).is_dir():
            return driver, rel
    return None, None


def _slice_prefix(kubepods: str) -> str:
    """``kubelet.slice/kubelet-kubepods.slice`` → ``kubelet-kubepods``."""
    return kubepods.rsplit("/", 1)[-1].removesuffix(".slice")


def _systemd_pod(prefix: str) -> re.Pattern[str]:
    return re.compile(rf"^{re.escape(prefix)}(?:-(burstable|besteffort))?-pod([0-9A-Za-z_]+)\.slice$")


def detect_layout(root: Path | str) -> Layout | None:
    """The cgroup layout under ``root``; ``None`` when ``root`` is not a cgroup mount at all.

    cgroup v2 is recognised by ``cgroup.controllers`` at the root; otherwise the
    v1 controller directories are looked up (a hybrid host's ``unified``
    directory carries no controllers and is ignored).
    """
    root = Path(root)
    if (root / "cgroup.controllers").is_file():
        driver, kubepods = _kubepods_in(root)
        return Layout(2, driver, root, root, root, kubepods)
    memory = root / "memory"
    if not memory.is_dir():
        return None
    cpu = next((root / d for d in _V1_CPU_DIRS if (root / d / "cpuacct.usage").is_file()), root / "cpuacct")
    driver, kubepods = _kubepods_in(memory)
    return Layout(1, driver, cpu, memory, root / "blkio", kubepods)


def _qos_dirs(layout: Layout) -> list[tuple[str, QoS | None]]:
    """Directories (relative to the memory/unified root) that hold pod cgroups, with their QoS."""
    assert layout.kubepods is not None
    k = layout.kubepods
    if layout.driver is Driver.SYSTEMD:
        prefix = _slice_prefix(k)
        return [
            (k, None),  # guaranteed pods and the two QoS slices; QoS read from the name
            (f"{k}/{prefix}-burstable.slice", QoS.BURSTABLE),
            (f"{k}/{prefix}-besteffort.slice", QoS.BESTEFFORT),
        ]
    return [(k, QoS.GUARANTEED), (f"{k}/burstable", QoS.BURSTABLE), (f"{k}/besteffort", QoS.BESTEFFORT)]


def list_pods(layout: Layout) -> list[PodCgroup]:
    """Every pod cgroup present now (listing only; nothing is read)."""
    if layout.kubepods is None:
        return []
    pods: list[PodCgroup] = []
    systemd = layout.driver is Driver.SYSTEMD
    pattern = _systemd_pod(_slice_prefix(layout.kubepods)) if systemd else _CGROUPFS_POD
    for rel, qos in _qos_dirs(layout):
        try:
            entries = list(os.scandir(layout.memory / rel))
        except OSError:  # a QoS level with no pods may not exist yet
            continue
        for entry in entries:
            if systemd:
                m = pattern.match(entry.name)
                if m is None:
                    continue
                # In the top slice only guaranteed pods match "kubepods-pod…"; the QoS slices
                # carry their own prefix, so the group tells which one this is.
                pod_qos = QoS(m.group(1)) if m.group(1) else QoS.GUARANTEED
                if qos is not None and pod_qos is not qos:
                    continue
                uid = m.group(2).replace("_", "-")
            else:
                m = pattern.match(entry.name)
                if m is None:
                    continue
                pod_qos, uid = qos or QoS.GUARANTEED, m.group(1)
            pods.append(PodCgroup(uid=uid, qos=pod_qos, relpath=f"{rel}/{entry.name}"))
    return pods


# --- reading ------------------------------------------------------------------------------------


def _read(path: str) -> bytes | None:
    """File content, or ``None`` when missing or unreadable (a removed cgroup's files raise ENODEV)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        # cgroup files are generated whole on the first read; only a full buffer needs another read.
        data = os.read(fd, _CHUNK)
        if len(data) < _CHUNK:
            return data
        chunks = [data]
        while chunk := os.read(fd, _CHUNK):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _int(data: bytes | None) -> float | None:
    if data is None:
        return None
    try:
        return float(int(data.strip()))
    except ValueError:
        return None


def _keyed(data: bytes | None, key: bytes) -> float | None:
    """Value of ``key N`` in a flat-keyed file such as ``memory.stat`` or ``cpu.stat``."""
    if data is None:
        return None
    at = data.find(b"\n" + key + b" ")
    start = at + 1 if at >= 0 else (0 if data.startswith(key + b" ") else -1)
    if start < 0:
        return None
    end = data.find(b"\n", start)
    try:
        return float(int(data[start + len(key) + 1 : end if end >= 0 else None]))
    except ValueError:
        return None


def _io_stat_v2(data: bytes | None) -> float | None:
    """Σ rbytes + wbytes over the devices of an ``io.stat`` file (empty file: no I/O yet → 0)."""
    if data is None:
        return None
    values = _IO_BYTES.findall(data)
    if len(values) != 2 * data.count(b"rbytes="):  # a malformed value: unknown, not a partial sum
        return None
    return float(sum(int(v) for v in values))


def _io_stat_v1(data: bytes | None) -> float | None:
    """Σ Read + Write rows of a ``blkio.*io_service_bytes_recursive`` file (``MAJ:MIN Op N``)."""
    if data is None:
        return None
    total = 0
    for line in data.split(b"\n"):
        parts = line.split()
        if len(parts) == 3 and parts[1] in (b"Read", b"Write"):
            try:
                total += int(parts[2])
            except ValueError:
                return None
    return float(total)


def _working_set(usage: float | None, inactive_file: float | None) -> float | None:
    if usage is None:
        return None
    # The kubelet's working set: usage minus inactive page cache, never negative.
    return max(0.0, usage - (inactive_file or 0.0))


def read_counters(layout: Layout, relpath: str) -> Counters | None:
    """The counters of the cgroup at ``relpath`` (e.g. a :class:`PodCgroup`'s, or ``layout.kubepods``).

    Returns ``None`` when the cgroup vanished while being read (the pod is gone:
    report nothing rather than a partial, misleading sample).
    """
    mem = f"{layout.memory}/{relpath}/"
    if layout.version == 2:
        cpu = _keyed(_read(mem + "cpu.stat"), b"usage_usec")
        memory = _working_set(_int(_read(mem + "memory.current")), _keyed(_read(mem + "memory.stat"), b"inactive_file"))
        io = _io_stat_v2(_read(mem + "io.stat"))
    else:
        cpu_ns = _int(_read(f"{layout.cpu}/{relpath}/cpuacct.usage"))
        cpu = None if cpu_ns is None else cpu_ns / 1000.0
        memory = _working_set(
            _int(_read(mem + "memory.usage_in_bytes")), _keyed(_read(mem + "memory.stat"), b"total_inactive_file")
        )
        blkio = f"{layout.io}/{relpath}/"
        raw = _read(blkio + "blkio.throttle.io_service_bytes_recursive")
        io = _io_stat_v1(raw if raw is not None else _read(blkio + "blkio.io_service_bytes_recursive"))
    # Only a failed read costs a stat: was it a missing file, or did the whole cgroup go away?
    if (cpu is None or memory is None or io is None) and not os.path.isdir(mem):
        return None
    return Counters(cpu, memory, io)


# --- one process of a pod -----------------------------------------------------------------------

_PID_READ = 32  # the first line of cgroup.procs: a pid is at most 7 digits


def _first_pid(path: str) -> int | None:
    """The first pid listed in the ``cgroup.procs`` file at ``path``; ``None`` when empty or unreadable.

    The kernel lists pids as the reader's pid namespace sees them: outside the host's (no
    ``hostPID``), cgroup v2 shows other pods' processes as ``0`` and v1 leaves them out.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        data = os.read(fd, _PID_READ)
    except OSError:
        return None
    finally:
        os.close(fd)
    end = data.find(b"\n")
    try:
        pid = int(data[:end] if end >= 0 else data)
    except ValueError:
        return None
    return pid if pid > 0 else None


def _sub_cgroups(path: str) -> list[str]:
    """Child cgroups of ``path``, sorted; conmon's (CRI-O's monitor, in the host's network namespace) left out."""
    try:
        with os.scandir(path) as entries:
            return sorted(e.name for e in entries if e.is_dir(follow_symlinks=False) and "conmon" not in e.name)
    except OSError:
        return []


def pod_pid(layout: Layout, relpath: str, hint: str | None = None) -> tuple[int | None, str | None]:
    """One process of the pod at ``relpath``: (pid, where it was found relative to the pod cgroup).

    ``hint`` is where the previous call found one: tried first, so a steady pod costs one read.
    Otherwise the container cgroups are tried in name order (and their own children: runtimes that
    delegate a sub-cgroup such as ``<scope>/container``), then the pod cgroup itself. (None, None):
    no process visible (containers not started yet, the pod gone, or no ``hostPID``).
    """
    base = f"{layout.memory}/{relpath}"
    if hint is not None:
        pid = _first_pid(f"{base}/{hint}/cgroup.procs" if hint else f"{base}/cgroup.procs")
        if pid is not None:
            return pid, hint
    for name in _sub_cgroups(base):
        pid = _first_pid(f"{base}/{name}/cgroup.procs") if name != hint else None
        if pid is not None:
            return pid, name
        for child in _sub_cgroups(f"{base}/{name}"):
            rel = f"{name}/{child}"
            pid = _first_pid(f"{base}/{rel}/cgroup.procs") if rel != hint else None
            if pid is not None:
                return pid, rel
    if hint != "":
        pid = _first_pid(f"{base}/cgroup.procs")
        if pid is not None:
            return pid, ""
    return None, None
