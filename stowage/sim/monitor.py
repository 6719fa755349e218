"""The simulated node monitor: one sample per node per second, OOM kills, the real contention policy.

Each tick (``contention.sample_interval_s``, 1 s by default) it

1. draws new usage bursts (``stowage.sim.usage``) and samples every node's
   usage ``U = min(Σ task usage, C)`` (a saturated resource reads as full);
2. where memory use exceeds capacity, the kernel's OOM killer ends
   opportunistic tasks first (``oom_score_adj`` 999), largest memory use
   first, until the rest fits;
3. on presets with harvesting, runs ``stowage.policy.contention.step`` on every
   node that is over a threshold or still remembers a contention, sets the
   node's blocked capacity, and evicts ``choose_victims``' picks (given each task's
   progress, the work an eviction would waste).

Ticks are skipped when nothing could change: no opportunistic task is running
and no node's peak demand exceeds its capacity.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from stowage.policy import contention

if TYPE_CHECKING:
    from stowage.sim.engine import Simulation

__all__ = ["Monitor"]


class Monitor:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        r = len(sim.resources)
        self.states = [contention.ContentionState.initial(r) for _ in range(sim.cluster.n)]
        self.active = np.zeros(sim.cluster.n, dtype=bool)  # state not initial: must be stepped
        self.counts = np.zeros((sim.cluster.n, r), dtype=np.int64)  # consecutive over-threshold samples
        self.blocked_any = np.zeros(sim.cluster.n, dtype=bool)
        self.threshold = sim.settings.contention.t_preempt.array(sim.resources) * sim.cluster.cap
        self.last_tick = sim.now
        self.last_sample = -np.inf
        self.contentions = 0

    def needed(self) -> bool:
        sim = self.sim
        if sim.running.opp.any() or sim.overload_possible():
            return True
        # Harvestable room grows as running tasks' usage shows and their ramp-up allowance expires, with no
        # event of its own: a harvesting preset with tasks waiting looks again each sample, as the operator does.
        return sim.preset.harvesting and len(sim.running) > 0 and bool((sim.g_ready & (sim.g_pending > 0)).any())

    def sample(self) -> np.ndarray:
        """Refresh ``cluster.usage`` from the running tasks at the current time; returns per-task usage."""
        sim = self.sim
        use = sim.current_use()
        c = sim.cluster
        c.usage = np.minimum(c.node_sums(use, sim.running.node), c.cap) if len(use) else np.zeros_like(c.cap)
        self.last_sample = sim.now
        return use

    def tick(self) -> None:
        sim = self.sim
        run = sim.running
        dt = sim.now - self.last_tick
        self.last_tick = sim.now
        if len(run):
            run.burst_until = sim.usage_model.new_bursts(sim.rng, sim.now, dt, run.burst_until)
            run.version += 1
        use = self.sample()
        self._oom(use)
        if sim.preset.harvesting:
            self._contention()
        sim.update_rates()
        if sim.preset.harvesting and (sim.g_ready & (sim.g_pending > 0)).any():
            sim._changed = True  # harvestable capacity moved: try the waiting tasks again

    def _oom(self, use: np.ndarray) -> None:
        sim = self.sim
        c = sim.cluster
        m = c.mem
        raw = np.bincount(sim.running.node, weights=use[:, m], minlength=c.n) if len(use) else np.zeros(c.n)
        over = np.flatnonzero(raw > c.cap[:, m] * (1 + 1e-9))
        if over.size == 0:
            return
        victims: list[int] = []
        run = sim.running
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
            sim.evict(np.array(victims), oom=True)
            self.sample()

    def _contention(self) -> None:
        sim = self.sim
        c = sim.cluster
        run = sim.running
        has_opp = np.bincount(run.node[run.opp], minlength=c.n) > 0 if len(run) else np.zeros(c.n, bool)
        over = c.usage > self.threshold
        # A node with no opportunistic pod and nothing blocked has nothing to relieve and nothing
        # to decay (contention.step: relieve needs has_opportunistic; PRESERVE only moves B > 0):
        # its only change is the consecutive-sample count, advanced here for all such nodes at
        # once and handed to the policy state when the node next matters.
        quiet = ~has_opp & ~self.blocked_any
        self.counts[quiet] = np.where(over[quiet], self.counts[quiet] + 1, 0)
        settings = sim.settings.contention
        victims: list[int] = []
        use = None
        for n in np.flatnonzero(~quiet & (over.any(axis=1) | self.active | self.counts.any(axis=1))):
            state = self.states[n]
            if (not over[n].any() and not self.counts[n].any() and state.last_relief_s is not None
                    and sim.now - state.last_relief_s <= state.block_time_s):
                # Inside PRESERVE's block window with no contention: step would change nothing
                # (it only decays B once now − last_relief > BT; contention module docstring).
                continue
            if not np.array_equal(state.over_counts, self.counts[n]):
                state = replace(state, over_counts=self.counts[n].copy())
            state, decision = contention.step(
                state, c.usage[n], c.cap[n], sim.now, settings, sim.resources, bool(has_opp[n])
            )
            self.states[n] = state
            self.counts[n] = state.over_counts
            self.active[n] = bool(state.over_counts.any() or state.blocked.any())
            c.blocked[n] = decision.blocked if decision.blocked.shape == (c.r,) else 0.0
            self.blocked_any[n] = bool(c.blocked[n].any())
            if decision.acts and has_opp[n]:
                self.contentions += 1
                if use is None:
                    use = sim.current_use()
                rows = np.flatnonzero(run.node == n)
                done = sim.g_dur[run.group[rows]] - run.work_left[rows]  # what an eviction wastes
                picked = contention.choose_victims(
                    use[rows], run.start[rows], run.opp[rows], c.usage[n], self.threshold[n], decision.relieve,
                    lost_work=done,
                )
                victims.extend(int(rows[i]) for i in picked)
        if victims:
            sim.evict(np.array(sorted(set(victims))))
            self.sample()
