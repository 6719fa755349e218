"""Network byte counters from ``net/dev``: the node's, and each pod's through one of its processes.

Format (two header lines, then one line per interface)::

    Inter-|   Receive                                                |  Transmit
     face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets ...
      eth0: 305565702   10085    0    0    0     0          0         0   601070    6097 ...

Received bytes are the first field after the colon, transmitted bytes the ninth.
The counters are those of a network namespace:

* ``<proc>/net/dev`` is the reading process's own namespace: the DaemonSet runs with
  ``hostNetwork: true`` so that this is the node's;
* ``<proc>/<pid>/net/dev`` is the namespace of process ``pid``. Every container of a pod
  shares the pod's namespace, so any process of the pod gives the pod's counters (cAdvisor
  reads the same file). The file is readable without ptrace rights.

A namespace is identified by ``/proc/<pid>/ns/net`` (``net:[4026532177]``, the namespace's
inode). Reading that link needs ptrace access to the process (same uid and capabilities, or
``CAP_SYS_PTRACE``), which a pod of another uid denies; then the inode of the ``net/dev``
file itself identifies the namespace (procfs creates one ``dev`` entry per namespace, and its
inode number is the same through every procfs mount). Both forms are strings, so two
samples and the node's own identities compare directly.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["DEFAULT_EXCLUDE", "node_netns", "parse_net_bytes", "read_net_bytes", "read_netdev", "read_pid_net"]

DEFAULT_EXCLUDE = r"^lo$"
"""Interfaces left out by default: loopback traffic never leaves the node (or the pod)."""

_CHUNK = 65536


def parse_net_bytes(data: bytes, exclude: re.Pattern[str]) -> float:
    """Σ (rx + tx) bytes of a ``net/dev`` file's interfaces not matching ``exclude`` (garbage lines skipped)."""
    total = 0
    for line in data.split(b"\n")[2:]:
        name, sep, rest = line.partition(b":")
        if not sep:
            continue
        fields = rest.split()
        if len(fields) < 9 or exclude.search(name.strip().decode("ascii", "replace")):
            continue
        try:
            total += int(fields[0]) + int(fields[8])
        except ValueError:
            continue
    return float(total)


def read_netdev(path: str, exclude: re.Pattern[str], inode: bool = True) -> tuple[float | None, int | None]:
    """(Σ rx + tx bytes, the file's inode) of the ``net/dev`` file at ``path``; (None, None) if unreadable.

    ``inode=False`` saves the ``fstat`` (the inode is then 0).
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None, None
    try:
        data = os.read(fd, _CHUNK)
        if len(data) == _CHUNK:  # a node with hundreds of interfaces: read on (a short read is the end)
            chunks = [data]
            while chunk := os.read(fd, _CHUNK):
                chunks.append(chunk)
            data = b"".join(chunks)
        ino = os.fstat(fd).st_ino if inode else 0
    except OSError:
        return None, None
    finally:
        os.close(fd)
    return parse_net_bytes(data, exclude), ino


def read_net_bytes(proc_root: Path | str, exclude: re.Pattern[str] | str = DEFAULT_EXCLUDE) -> float | None:
    """Σ (rx + tx) bytes of ``<proc_root>/net/dev`` over the interfaces not matching ``exclude``; ``None`` if
    the file is unreadable."""
    pattern = re.compile(exclude) if isinstance(exclude, str) else exclude
    return read_netdev(f"{proc_root}/net/dev", pattern)[0]


def _inode_id(inode: int) -> str:
    return f"net/dev:{inode}"


def read_pid_net(proc_root: str, pid: int, exclude: re.Pattern[str]) -> tuple[float | None, str | None]:
    """(Σ rx + tx bytes, namespace identity) of process ``pid``'s network namespace; (None, None) when the
    process is gone or its ``net/dev`` unreadable.

    The identity is the ``ns/net`` link (``net:[N]``) or, when that link may not be read, ``net/dev:<inode>``.
    """
    base = f"{proc_root}/{pid}/"
    try:
        ns: str | None = os.readlink(base + "ns/net")
    except OSError:  # EACCES without ptrace access to the process; ENOENT when it is gone
        ns = None
    total, inode = read_netdev(base + "net/dev", exclude, inode=ns is None)
    if total is None or inode is None:
        return None, None
    return total, ns if ns is not None else _inode_id(inode)


def node_netns(proc_root: str, node_netdev_inode: int | None) -> set[str]:
    """Every identity the node's own network namespace may be seen under, in the forms of :func:`read_pid_net`.

    ``<proc>/self/ns/net`` is this process's namespace (the node's, with ``hostNetwork: true``; always
    readable: it is our own), ``<proc>/1/ns/net`` the host init's (readable when privileged), and the inode
    of the node's ``net/dev`` (read through ``<proc>/net``, i.e. this process's namespace).
    """
    ids: set[str] = set()
    for who in ("self", "1"):
        try:
            ids.add(os.readlink(f"{proc_root}/{who}/ns/net"))
        except OSError:
            continue
    if node_netdev_inode is not None:
        ids.add(_inode_id(node_netdev_inode))
    return ids
