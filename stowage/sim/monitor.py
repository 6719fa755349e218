"""The simulated node monitor: one sample per node per second, OOM kills, the real contention policy.

Each tick (``contention.sample_interval_s``, 1 s by default) it

1. draws new usage bursts (``stowage.sim.usage``) and samples every node's usage ``U = min(Σ task usage, C)`` (a
   saturated resource reads as full);
2. where memory use exceeds capacity, the kernel's OOM killer ends opportunistic tasks first (``oom_score_adj``
   999), largest memory use first, until the rest fits;
3. on presets with harvesting, runs the node monitor's contention policy, ``stowage.policy.contention.step``, on
   every node (through ``contention.Nodes``, which calls it where it can change something and is checked against
   it on every node and sample), sets the node's blocked capacity, and evicts ``choose_victims``' picks, called as
   the node monitor calls it: the work an eviction would waste is a task's run time, which a node knows, not its
   progress, which it does not.

Ticks are skipped when nothing could change: no opportunistic task is running and no node's peak demand exceeds its
capacity.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np
from numpy.typing import NDArray

from stowage.config import StowageSettings
from stowage.policy import contention, tolerances

if TYPE_CHECKING:
    from stowage.sim.cluster import Cluster, Running
    from stowage.sim.tables import Status
    from stowage.sim.usage import UsageModel

__all__ = ["Host", "Monitor"]


class Host(Protocol):
    """What the monitor asks of the engine: the time, its random draws, every running task's usage, whether some
    node's peak demand exceeds its capacity (only then can usage contend), evictions, fresh rates."""

    now: float
    rng: np.random.Generator
    settings: StowageSettings
    usage_model: UsageModel

    def current_use(self) -> NDArray[np.float64]: ...
    def overload_possible(self) -> bool: ...
    def evict(self, rows: NDArray[np.int64], *, oom: bool = False) -> None: ...
    def update_rates(self) -> None: ...


class Monitor:
    """The node monitor over the nodes (``cluster``) and their tasks (``running``); ``status`` says whether tasks
    wait."""

    def __init__(self, host: Host, status: Status, cluster: Cluster, running: Running, harvesting: bool) -> None:
        self.host, self.status, self.cluster, self.running = host, status, cluster, running
        self.harvesting = harvesting
        self.nodes = contention.Nodes(cluster.n, host.settings.contention, cluster.resources)
        self.threshold = contention.thresholds(host.settings.contention, cluster.resources, cluster.cap)
        self.last_tick = host.now
        self.last_sample = -np.inf
        self.contentions = 0

    def needed(self) -> bool:
        """Whether a tick could change anything."""
        run = self.running
        if run.opp.any() or self.host.overload_possible():
            return True
        # Harvestable room grows as running tasks' usage shows and their ramp-up allowance expires, with no
        # event of its own: a harvesting preset with tasks waiting looks again each sample, as the operator does.
        return self.harvesting and len(run) > 0 and bool(self.status.waiting().any())

    def sample(self) -> NDArray[np.float64]:
        """Refresh ``cluster.usage`` from the running tasks at the current time; returns per-task usage."""
        use = self.host.current_use()
        c = self.cluster
        c.usage = np.minimum(c.node_sums(use, self.running.node), c.cap) if len(use) else np.zeros_like(c.cap)
        self.last_sample = self.host.now
        return use

    def tick(self) -> bool:
        """One sample, its OOM kills and contention policy; whether waiting tasks should be tried again."""
        host, run = self.host, self.running
        dt = host.now - self.last_tick
        self.last_tick = host.now
        if len(run):
            run.burst_until = host.usage_model.new_bursts(host.rng, host.now, dt, run.burst_until)
            run.version += 1
        use = self.sample()
        self._oom(use)
        if self.harvesting:
            self._contention()
        host.update_rates()
        return self.harvesting and bool(self.status.waiting().any())  # harvestable capacity moved

    def _oom(self, use: NDArray[np.float64]) -> None:
        c = self.cluster
        m = c.mem
        raw = np.bincount(self.running.node, weights=use[:, m], minlength=c.n) if len(use) else np.zeros(c.n)
        over = np.flatnonzero(raw > c.cap[:, m] * (1 + tolerances.FEASIBILITY_RTOL))
        if over.size == 0:
            return
        victims: list[int] = []
        run = self.running
        for n in over:
            rows = np.flatnonzero((run.node == n) & run.opp)
            rows = rows[np.argsort(-use[rows, m], kind="stable")]
            excess = raw[n] - c.cap[n, m]
            for row in rows:
                if excess <= 0:
                    break
                victims.append(int(row))
                excess -= use[row, m]
        if victims:
            self.host.evict(np.array(victims), oom=True)
            self.sample()

    def _contention(self) -> None:
        """``contention.Nodes.step`` (``contention.step`` on the nodes where it can change something), then the
        node monitor's victims (``choose_victims``) on the nodes it acts on."""
        host, c, run = self.host, self.cluster, self.running
        has_opp = np.bincount(run.node[run.opp], minlength=c.n) > 0 if len(run) else np.zeros(c.n, bool)
        victims: list[int] = []
        use = None
        for n, decision in self.nodes.step(c.usage, c.cap, host.now, has_opp):
            c.blocked[n] = decision.blocked
            if decision.acts:
                self.contentions += 1
                if use is None:
                    use = host.current_use()
                rows = np.flatnonzero(run.node == n)
                picked = contention.choose_victims(
                    use[rows], run.start[rows], run.opp[rows], c.usage[n], self.threshold[n], decision.relieve,
                    now_s=host.now)
                victims.extend(int(rows[i]) for i in picked)
        if victims:
            host.evict(np.array(sorted(set(victims))))
            self.sample()
