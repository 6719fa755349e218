"""Tetris packing (``tetris``) and everything Stowage does on top of it (``stowage``).

Both presets run the operator's decision, ``stowage.policy.decide`` (one path, no copy): this module only
builds its ``DecideInput`` from the simulation and places what it returns. ``stowage`` is the operator's
dispatcher as configured (harvesting, each queue's job order, OPERA's classifier, the starvation guard);
``tetris`` is the paper's policy (regular only, no job-order mask, no guard).

The decision sees what a cluster knows: each group's ``expectedDuration`` if the workload states one, its
finished tasks' run times, its running tasks' elapsed times, earlier runs of the same recurring job and the
queue's learned prior (``stowage.policy.estimates``); true durations only with ``SimConfig.oracle_durations``
(an upper bound).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from stowage.model import Pool
from stowage.policy import decide, dispatch, estimates
from stowage.sim.preset import Preset

if TYPE_CHECKING:
    from stowage.sim.engine import Simulation

__all__ = ["PackingPreset"]


class PackingPreset(Preset):
    """Tetris packing (alignment + remaining work, fairness and barrier knobs); ``stowage`` adds the rest."""

    def __init__(self, name: str, *, harvesting: bool, job_order: bool, classifier: bool, guard: bool) -> None:
        self.name, self.harvesting, self.job_order, self.use_classifier = name, harvesting, job_order, classifier
        self.guard = guard

    def attach(self, sim: Simulation) -> None:
        super().attach(sim)
        self.decider = decide.Decider(sim.settings, job_order=self.job_order, use_classifier=self.use_classifier,
                                      guard=self.guard)
        self.knobs = self.decider.knobs
        self.mean_cap = sim.cluster.cap.mean(axis=0)
        self._cap_norm = np.where(self.mean_cap > 0, self.mean_cap, 1.0)
        self._static_features: dict[int, dict[str, str]] = {}
        self._hint = np.array([np.nan if d is None else d for d in sim.g_expected], dtype=np.float64)
        self._finished_s = np.zeros(sim.n_groups)  # Σ run time of each group's finished tasks
        self._history = np.full(sim.n_groups, np.nan)  # earlier runs of the job's recurring key, read at arrival
        self._job_key = [estimates.recurring_key("", job.name) for job in sim.jobs]

    # --- hooks ------------------------------------------------------------------------------------

    def on_job_arrived(self, j: int) -> None:
        sim = self.sim
        for g in sim.j_groups[j]:
            self._history[g] = self.decider.history.get(self._job_key[j], sim.g_name[g])

    def on_finished(self, groups: NDArray[np.int64], durations: NDArray[np.float64]) -> None:
        """What a cluster learns when tasks finish: their run times (estimates, classifier, history).

        The decider learns each run of consecutive tasks of one group in one call. Splitting at every change of
        group, rather than gathering a group's tasks from the whole array, feeds the queue priors and the
        recurring history (running means, whose floating-point results depend on the order; the history's
        recency) every duration in the order the tasks finished.
        """
        sim = self.sim
        np.add.at(self._finished_s, groups, durations)
        if groups.size == 0:
            return
        cuts = (np.flatnonzero(groups[1:] != groups[:-1]) + 1).tolist()
        gs, ds = groups.tolist(), durations.tolist()
        features: dict[int, dict[str, str] | None] = {}
        for lo, hi in zip([0, *cuts], [*cuts, len(gs)], strict=True):
            g = gs[lo]
            if g not in features:
                features[g] = self._features(g) if self.use_classifier else None
            j = int(sim.g_job[g])
            self.decider.observe_finished(features[g], ds[lo:hi], queue=sim.queue_names[sim.g_queue[g]],
                                          group=sim.g_name[g], recurring_key=self._job_key[j])

    def _features(self, g: int) -> dict[str, str]:
        """OPERA Eq. 1 properties of a task of group ``g``: framework, app, stage, progress, demand."""
        from stowage.policy import classifier

        sim = self.sim
        j = int(sim.g_job[g])
        static = self._static(g)
        groups = sim.j_groups[j]
        done = sum(int(sim.g_done[x]) for x in groups) / max(sum(int(sim.g_tasks[x]) for x in groups), 1)
        return {**static, "progress": classifier.bucket_progress(done)}

    def _static(self, g: int) -> dict[str, str]:
        """The properties of group ``g``'s tasks that never change (all but progress)."""
        static = self._static_features.get(g)
        if static is None:
            sim = self.sim
            static = self._static_features[g] = dispatch.task_features(
                sim.queue_names[sim.g_queue[g]],
                sim.jobs[int(sim.g_job[g])].name,
                sim.g_name[g],
                dict(zip(sim.resources, (sim.g_demand[g] / self._cap_norm).tolist(), strict=True)),
            )
        return static

    # --- the decision ---------------------------------------------------------------------------

    def schedule(self, sim: Simulation) -> None:
        """One ``decide.Decider.decide`` over the arrived, unfinished jobs; its placements become ``sim.place``."""
        live_job = sim.j_arrived & np.isnan(sim.j_finish)
        groups = np.flatnonzero(live_job[sim.g_job])
        if groups.size == 0 or not (sim.g_ready[groups] & (sim.g_pending[groups] > 0)).any():
            # Nothing to decide, but the shares change as tasks finish: the usage follows them, as the
            # operator's, which decides at every pass.
            self.decider.record_usage(sim.queue_names, sim.queue_alloc, sim.cluster.total, sim.now)
            return
        jobs = np.flatnonzero(live_job)
        c = sim.cluster
        ready = sim.g_ready[groups]
        finished = sim.g_done[groups]
        run = sim.running
        elapsed = np.zeros(sim.n_groups)
        if len(run):
            np.maximum.at(elapsed, run.group, sim.now - run.start)
        inp = decide.DecideInput(
            now=sim.now, capacity=c.cap, regular_free=sim.regular_free(), bandwidth=sim.io_resources,
            bandwidth_room=c.cap - c.reg_alloc - c.opp_alloc, shapes=sim.shapes, group_shape=sim.g_shape[groups],
            group_key=groups.tolist(), group_job=np.searchsorted(jobs, sim.g_job[groups]),
            group_queue=sim.g_queue[groups], releasable=np.where(ready, sim.g_pending[groups], 0),
            remaining=sim.g_tasks[groups] - finished, intent=sim.j_opp[sim.g_job[groups]],
            finished_fraction=finished / np.maximum(sim.g_tasks[groups], 1),
            evidence=estimates.Evidence(
                hint_s=self._hint[groups], finished=finished,
                finished_mean_s=self._finished_s[groups] / np.maximum(finished, 1), elapsed_s=elapsed[groups],
                history_s=self._history[groups], prior_s=np.full(groups.size, np.nan)),
            job_key=jobs.tolist(), job_arrival=sim.j_arrival[jobs], queue_name=sim.queue_names,
            queue_weight=sim.q_weight, queue_order=sim.q_order, queue_opportunistic=sim.q_opp,
            queue_alloc=sim.queue_alloc, pool_total=c.total, node_key=range(c.n),
            harvestable=(lambda: self._harvestable(sim)) if self.harvesting else None,
            features=lambda g: self._features(int(groups[g])),
            duration_s=sim.g_dur[groups] if sim.config.oracle_durations else None,
            group_children=self._children(groups) if self.knobs.critical_path_fraction > 0 else None,
            regular_changed=sim.regular_changed)
        for g, n, pool in self.decider.decide(inp).placements:
            sim.place(int(groups[g]), n, opp=pool is Pool.OPPORTUNISTIC)

    def _children(self, groups: NDArray[np.int64]) -> list[list[int]]:
        """``DecideInput.group_children`` renumbered to the rows of ``groups`` (a job's groups are all there)."""
        row = {g: i for i, g in enumerate(groups.tolist())}
        return [[row[c] for c in self.sim.g_children[g] if c in row] for g in groups.tolist()]


