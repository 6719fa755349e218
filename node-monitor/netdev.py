"""Node network byte counters from ``/proc/net/dev``.

Format (two header lines, then one line per interface)::

    Inter-|   Receive                                                |  Transmit
     face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets ...
      eth0: 305565702   10085    0    0    0     0          0         0   601070    6097 ...

Received bytes are the first field after the colon, transmitted bytes the ninth.
The counters are those of the network namespace the process lives in: the
DaemonSet runs with ``hostNetwork: true`` so that this is the node's.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["DEFAULT_EXCLUDE", "read_net_bytes"]

DEFAULT_EXCLUDE = r"^lo$"
"""Interfaces left out by default: loopback traffic never leaves the node."""


def read_net_bytes(proc_root: Path | str, exclude: re.Pattern[str] | str = DEFAULT_EXCLUDE) -> float | None:
    """Σ (rx + tx) bytes over the interfaces not matching ``exclude``; ``None`` if the file is unreadable."""
    pattern = re.compile(exclude) if isinstance(exclude, str) else exclude
    try:
        text = (Path(proc_root) / "net" / "dev").read_text()
    except OSError:
        return None
    total = 0
    for line in text.splitlines()[2:]:
        name, sep, rest = line.partition(":")
        if not sep:
            continue
        name = name.strip()
        fields = rest.split()
        if pattern.search(name) or len(fields) < 9:
            continue
        try:
            total += int(fields[0]) + int(fields[8])
        except ValueError:
            continue
    return float(total)
