"""Small value types shared by every part (policy, simulator, operator, extender)."""

from __future__ import annotations

import enum

__all__ = ["JobOrder", "Pool", "QueueOpportunistic"]


class JobOrder(enum.StrEnum):
    """How jobs inside one queue are ordered (Queue ``spec.jobOrder``)."""

    FIFO = "FIFO"  # arrival order
    SRTF = "SRTF"  # least remaining work first (Tetris §3.3.1)
    FSP = "FSP"  # finish order under (generalised) processor sharing (FSP §3)


class QueueOpportunistic(enum.StrEnum):
    """Whether a queue accepts harvested capacity (Queue ``spec.opportunistic``)."""

    ALLOW = "Allow"
    DENY = "Deny"


class Pool(enum.StrEnum):
    """The two resource pools DRF shares separately (UBIS §IV-E)."""

    REGULAR = "regular"
    OPPORTUNISTIC = "opportunistic"
