"""A task's pod names and the index sets of a Job's status. Pure.

Names are deterministic, so a restarted operator finds what its predecessor made and a second create of
the same task fails with 409 instead of running it twice::

    <job>-<group>-<index>            the first attempt of task <index> of group <group>
    <job>-<group>-<index>-r<n>       attempt n (n ≥ 1): after a failure, an eviction or a lost pod
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["TaskRef", "format_indexes", "parse_indexes", "parse_pod_name", "pod_name"]

_ATTEMPT = re.compile(r"^(\d+)(?:-r(\d+))?$")


@dataclass(frozen=True, slots=True, order=True)
class TaskRef:
    """One attempt of one task: group name, index in the group, attempt number (0: the first)."""

    group: str
    index: int
    attempt: int = 0

    def pod_name(self, job: str) -> str:
        return pod_name(job, self.group, self.index, self.attempt)


def pod_name(job: str, group: str, index: int, attempt: int = 0) -> str:
    """``<job>-<group>-<index>``, and ``-r<attempt>`` from the second attempt on."""
    base = f"{job}-{group}-{int(index)}"
    return base if attempt <= 0 else f"{base}-r{int(attempt)}"


def parse_pod_name(job: str, group: str, name: str) -> tuple[int, int] | None:
    """``(index, attempt)`` of a pod named by :func:`pod_name` for this job and group; None for any other name."""
    prefix = f"{job}-{group}-"
    if not name.startswith(prefix):
        return None
    match = _ATTEMPT.match(name[len(prefix):])
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2) or 0)


def format_indexes(indexes: Iterable[int]) -> str:
    """Sorted indexes as ranges, like a Kubernetes indexed Job's ``completedIndexes``: ``0-3,5,7-8``."""
    out: list[str] = []
    run: list[int] = []
    for i in sorted(set(indexes)):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
        run = [i]
    if run:
        out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ",".join(out)


def parse_indexes(text: Any) -> set[int]:
    """The inverse of :func:`format_indexes`; anything unparseable is skipped (status is ours, but be total)."""
    out: set[int] = set()
    for part in str(text or "").split(","):
        lo, _, hi = part.strip().partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            continue
        out.update(range(int(lo), int(hi or lo) + 1))
    return out
