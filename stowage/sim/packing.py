"""Tetris packing (``tetris``) and everything Stowage does on top of it (``stowage``).

Both presets run the operator's decision, ``stowage.policy.decide`` (one path, no copy): this module only fills its
``snapshot.PassSnapshot`` from the simulation (``snapshot.build``, the operator's builder, makes the input) and
places what it returns. ``stowage`` is the operator's dispatcher as configured (harvesting, each queue's job order,
OPERA's classifier, the starvation guard); ``tetris`` is the paper's policy (regular only, no job-order mask, no
guard).

The decision sees what a cluster knows: each group's ``expectedDuration`` if the workload states one, its finished
tasks' run times, its running tasks' elapsed times, earlier runs of the same recurring job and the queue's learned
prior (``stowage.policy.estimates``); true durations only with ``SimConfig.oracle_durations`` (an upper bound).
Disk and network are packed by each group's estimated use (``stowage.policy.use_estimates``), learned from the
sustained use the node monitor has shown of its tasks (``View.sustained_use``), as the operator's dispatcher does.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from stowage.model import Pool
from stowage.policy import classifier, decide, estimates, snapshot, use_estimates
from stowage.sim.preset import Preset, View

__all__ = ["PackingPreset"]


class PackingPreset(Preset):
    """Tetris packing (alignment + remaining work, fairness and barrier knobs); ``stowage`` adds the rest."""

    def __init__(self, name: str, *, harvesting: bool, job_order: bool, classifier: bool, guard: bool) -> None:
        self.name, self.harvesting, self.job_order, self.use_classifier = name, harvesting, job_order, classifier
        self.guard = guard

    def attach(self, view: View) -> None:
        super().attach(view)
        spec = view.spec
        self.decider = decide.Decider(view.settings, job_order=self.job_order, use_classifier=self.use_classifier,
                                      guard=self.guard)
        self.knobs = self.decider.knobs
        self.mean_cap = view.cluster.cap.mean(axis=0)
        self._mean_capacity = dict(zip(spec.resources, self.mean_cap.tolist(), strict=True))
        self._static_features: dict[int, dict[str, str]] = {}
        self._hint = np.array([np.nan if d is None else d for d in spec.g_expected], dtype=np.float64)
        self._finished_s = np.zeros(spec.n_groups)  # Σ run time of each group's finished tasks
        self._history = np.full(spec.n_groups, np.nan)  # earlier runs of the job's recurring key, read at arrival
        self._job_key = [estimates.recurring_key("", name) for name in spec.j_name]
        self._peak = np.full(spec.g_demand.shape, np.nan)  # highest sustained use seen per group (use_estimates)
        self._recalled = np.full(spec.g_demand.shape, np.nan)  # earlier runs' use (RecurringHistory.use), at arrival
        self._declares_io = (spec.g_demand[:, spec.io_resources] > 0).any(axis=1)
        self._wake_version, self._seen_at = -1, np.zeros(0)

    def wake_at(self) -> float:
        """When the next running task of a group that declares disk or network and has tasks waiting is first seen
        (``View.sustained_use``): its group's estimate changes then, as a cluster's pass would find."""
        v = self.view
        run = v.running
        if not self._declares_io.any() or not len(run):
            return math.inf
        if self._wake_version != run.version:
            rows = self._declares_io[run.group]
            self._seen_at = np.sort(v.seen_at(v.settings.estimates.bandwidth_window_s)[rows])
            self._wake_version = run.version
        i = int(np.searchsorted(self._seen_at, v.now, side="right"))
        if i == self._seen_at.size or not v.status.waiting().any():
            return math.inf
        return float(self._seen_at[i])

    def regular_resources(self) -> NDArray[np.bool_]:
        """Requests are fitted as declared; disk and network by estimated use (``use_estimates``), which may sum to
        more than the declarations leave."""
        return self.view.spec.kube_resources.copy()

    def _use_estimates(self) -> NDArray[np.float64]:
        """(all groups, R) per-task demand with disk and network estimated from the sustained use seen so far."""
        v = self.view
        run = v.running
        if len(run):
            seen = v.sustained_use(v.settings.estimates.bandwidth_window_s)
            rows = np.flatnonzero(np.isfinite(seen).any(axis=1))
            if rows.size:
                peak = np.nan_to_num(self._peak, nan=-np.inf)
                np.maximum.at(peak, run.group[rows], np.nan_to_num(seen[rows], nan=-np.inf))
                self._peak = np.where(np.isfinite(peak), peak, np.nan)
        ev = use_estimates.UseSeen(declared=v.spec.g_demand, peak=self._peak, history=self._recalled)
        return use_estimates.estimate(ev, v.spec.io_resources, v.settings.estimates).demand

    # --- hooks ------------------------------------------------------------------------------------

    def on_job_arrived(self, j: int) -> None:
        spec = self.view.spec
        history = self.decider.history
        for g in spec.j_groups[j]:
            self._history[g] = history.get(self._job_key[j], spec.g_name[g])
            if self._declares_io[g]:
                self._recalled[g] = use_estimates.history_use(
                    spec.g_demand[g][None, :], [history.use(self._job_key[j], spec.g_name[g])], spec.resources)[0]

    def on_finished(self, groups: NDArray[np.int64], durations: NDArray[np.float64],
                    rows: NDArray[np.int64] | None = None) -> None:
        """What a cluster learns when tasks finish: their run times (estimates, classifier, history) and, of the
        ``rows`` (``View.running``) that were seen, their sustained disk and network use (the recurring history's).

        The decider learns each run of consecutive tasks of one group in one call. Splitting at every change of
        group, rather than gathering a group's tasks from the whole array, feeds the queue priors and the
        recurring history (running means, whose floating-point results depend on the order; the history's
        recency) every duration in the order the tasks finished.
        """
        spec = self.view.spec
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
            j = int(spec.g_job[g])
            self.decider.observe_finished(features[g], ds[lo:hi], queue=spec.queue_names[spec.g_queue[g]],
                                          group=spec.g_name[g], recurring_key=self._job_key[j])
        if rows is not None and self._declares_io[groups].any():
            self._learn_use(groups, rows)

    def _learn_use(self, groups: NDArray[np.int64], rows: NDArray[np.int64]) -> None:
        """Each finished row's sustained use (``View.sustained_use``, as the node monitor showed it) into the
        recurring history, in the order the rows finished (``policy.use_estimates.use_fractions``)."""
        v = self.view
        spec = v.spec
        seen = v.sustained_use(v.settings.estimates.bandwidth_window_s)[rows]
        for g, used in zip(groups.tolist(), seen, strict=True):
            if self._declares_io[g]:
                fractions = use_estimates.use_fractions(used, spec.g_demand[g], spec.resources, spec.io_resources)
                self.decider.history.observe_use(self._job_key[int(spec.g_job[g])], spec.g_name[g], fractions)

    def _features(self, g: int) -> dict[str, str]:
        """OPERA Eq. 1 properties of a task of group ``g``: framework, app, stage, progress, demand."""
        spec, st = self.view.spec, self.view.status
        static = self._static(g)
        groups = spec.j_groups[int(spec.g_job[g])]
        done = sum(int(st.g_done[x]) for x in groups) / max(sum(int(spec.g_tasks[x]) for x in groups), 1)
        return classifier.with_progress(static, done)

    def _static(self, g: int) -> dict[str, str]:
        """The properties of group ``g``'s tasks that never change (all but progress)."""
        static = self._static_features.get(g)
        if static is None:
            spec = self.view.spec
            static = self._static_features[g] = classifier.task_features(
                spec.queue_names[spec.g_queue[g]],
                self._job_key[int(spec.g_job[g])],  # the app, as the operator's: the recurring key
                spec.g_name[g],
                dict(zip(spec.resources, spec.g_demand[g].tolist(), strict=True)),
                self._mean_capacity,
            )
        return static

    # --- the decision ---------------------------------------------------------------------------

    def schedule(self) -> None:
        """One ``decide.Decider.decide`` over the arrived, unfinished jobs; its placements become ``View.place``.

        The input comes from ``snapshot.build``, the operator's builder: it asks for the harvestable room and the
        classifier's features only when some group may harvest. The room reads the monitor's sample (taken again
        when a period old, ``View.usage``, as the node monitor samples every period anyway)."""
        v = self.view
        spec, st = v.spec, v.status
        c = v.cluster
        live_job = st.j_arrived & np.isnan(st.j_finish)
        groups = np.flatnonzero(live_job[spec.g_job])
        run = v.running
        promotable = self.harvesting and v.regular_changed and bool(run.opp.any())
        if not promotable and (groups.size == 0 or not (st.g_ready[groups] & (st.g_pending[groups] > 0)).any()):
            # Nothing to decide, but the shares change as tasks finish: the usage follows them, as the
            # operator's, which decides at every pass.
            self.decider.record_usage(spec.queue_names, st.queue_alloc, c.total, v.now)
            return
        jobs = np.flatnonzero(live_job)
        ready = st.g_ready[groups]
        finished = st.g_done[groups]
        elapsed = np.zeros(spec.n_groups)
        if len(run):
            np.maximum.at(elapsed, run.group, v.now - run.start)
        releasable = np.where(ready, st.g_pending[groups], 0)
        remaining = spec.g_tasks[groups] - finished
        # A gang starts whole while none of its group runs (the operator's rule, plan._gangs).
        gang = np.where((spec.g_gang[groups] > 0) & (st.g_running[groups] == 0),
                        np.minimum(spec.g_gang[groups], remaining), 0)
        self._demand = demand = self._use_estimates()
        shapes, group_shape = snapshot.shapes_of(demand[groups])
        regular = np.flatnonzero(~run.opp)
        snap = snapshot.PassSnapshot(
            now=v.now, capacity=c.cap, regular_requests=c.reg_alloc, bandwidth=spec.io_resources,
            regular_bandwidth=use_estimates.reserved(run.group[regular], run.node[regular], demand, c.n),
            bandwidth_fill=v.settings.estimates.bandwidth_fill,
            shapes=shapes, group_shape=group_shape, group_key=groups.tolist(),
            group_job=np.searchsorted(jobs, spec.g_job[groups]), group_queue=spec.g_queue[groups],
            releasable=releasable, remaining=remaining, intent=spec.j_opp[spec.g_job[groups]],
            finished=finished, finished_fraction=finished / np.maximum(spec.g_tasks[groups], 1),
            finished_mean_s=self._finished_s[groups] / np.maximum(finished, 1), hint_s=self._hint[groups],
            elapsed_s=elapsed[groups], history_s=self._history[groups],
            job_key=jobs.tolist(), job_arrival=spec.j_arrival[jobs], queue_name=spec.queue_names,
            queue_weight=spec.q_weight, queue_order=spec.q_order, queue_opportunistic=spec.q_opp,
            queue_alloc=st.queue_alloc, node_key=range(c.n),
            duration_s=None if v.oracle_durations is None else v.oracle_durations[groups],
            group_children=self._children(groups) if self.knobs.critical_path_fraction > 0 else None,
            regular_changed=v.regular_changed, promotable=self._promotable() if promotable else None,
            gang=gang if gang.any() else None)
        inp = snapshot.build(snap, harvestable=self._harvestable if self.harvesting else None,
                             features=(lambda i: self._features(int(groups[i]))) if self.use_classifier else None)
        decision = self.decider.decide(inp)
        if decision.promoted.size:
            v.promote(self._opp_rows[decision.promoted])
        for g, n, pool in decision.placements:
            v.place(int(groups[g]), n, opp=pool is Pool.OPPORTUNISTIC)

    def _promotable(self) -> decide.Promotable:
        """The running opportunistic rows, oldest first (the running table is in start order)."""
        run, spec = self.view.running, self.view.spec
        self._opp_rows = rows = np.flatnonzero(run.opp)
        gs = run.group[rows]
        return decide.Promotable(self._demand[gs], run.node[rows].copy(), spec.g_queue[gs])

    def _children(self, groups: NDArray[np.int64]) -> list[list[int]]:
        """``DecideInput.group_children`` renumbered to the rows of ``groups`` (a job's groups are all there)."""
        row = {g: i for i, g in enumerate(groups.tolist())}
        return [[row[c] for c in self.view.spec.g_children[g] if c in row] for g in groups.tolist()]


