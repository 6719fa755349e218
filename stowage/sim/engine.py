"""The discrete-event engine: arrivals, barriers, placements, progress, finishes, evictions.

Hybrid design for speed: the next event is the earliest of the next job
arrival, the next task finish (``work_left / rate`` over the running set, one
vectorised min) and, only while something could change there, the node
monitor's 1 s tick (``stowage.sim.monitor``: usage samples, OOM kills,
contention policy). Progress rates change only at events and ticks. Every
preset decides at a cadence (``SimConfig.pass_delay_s``, the operator's 0.2 s):
one pass places what it can for every change since the last one, and tasks
started together finish together, at one event. Tasks of one group are
identical, so candidates are (group × node).

No task is lost: an evicted or OOM-killed opportunistic task goes back to its
group's pending count and later restarts from zero (its progress counts as
wasted work).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from stowage.config import StowageSettings
from stowage.errors import WorkloadError
from stowage.labels import Opportunistic
from stowage.policy import alignment
from stowage.resources import CORE_RESOURCES, DISK, NETWORK
from stowage.sim import monitor, presets, rates
from stowage.sim.cluster import Cluster, Running
from stowage.sim.metrics import Recorder, RunResult
from stowage.sim.preset import OPP_AUTO, OPP_FALSE, OPP_TRUE
from stowage.sim.usage import UsageModel
from stowage.sim.workload import QueueSpec, Workload

if TYPE_CHECKING:
    from stowage.sim.preset import Preset

__all__ = ["MAX_SIM_S", "InvariantViolation", "SimConfig", "Simulation", "resource_axis", "simulate"]

_EPS_WORK = 1e-7  # seconds of work below which a task counts as finished (float noise)
_PROGRESS_EVERY_S = 0.5  # wall seconds between progress calls: often enough for a bar, never a cost
#: The default simulated-time cap: a quarter year past the first arrival (no bundled workload needs a day).
MAX_SIM_S = 90 * 86400.0
_OPP_CODE = {Opportunistic.FALSE: OPP_FALSE, Opportunistic.AUTO: OPP_AUTO, Opportunistic.TRUE: OPP_TRUE}


class InvariantViolation(AssertionError):
    """Raised in checking mode when the simulator breaks one of its own invariants."""


@dataclass(frozen=True, slots=True)
class SimConfig:
    settings: StowageSettings = field(default_factory=StowageSettings)
    usage: UsageModel = field(default_factory=UsageModel)
    check: bool = False
    """Assert the invariants at every event (slow; for tests)."""
    sample_s: float | None = None
    """Metrics sampling period; None → about 400 samples over the expected span."""
    trace: bool = False
    """Keep every placement in ``Simulation.log`` as (time, job, group, node, opportunistic)."""
    max_sim_s: float = MAX_SIM_S
    """Stop this many simulated seconds after the first arrival; the result says so (``time_cap_reached``),
    counts the unfinished tasks as lost, and ``stowage simulate`` exits non-zero (``--max-sim-time``)."""
    pass_delay_s: float = 0.0
    """The decision cadence of every preset: a pass at most once per this many seconds, as the operator's
    throttle (``dispatch.PASS_DELAY_S``) does; a change after a quiet spell gets its pass at once, changes within
    the delay of a pass share the next one. 0: a pass at every event (``--pass-delay``)."""
    oracle_durations: bool = False
    """The packing presets' decision reads each task's true duration instead of estimating it from what a
    cluster knows (``--oracle-durations``): an upper bound, never what a cluster gets."""


def resource_axis(workload: Workload) -> tuple[str, ...]:
    """cpu, memory, disk, network, then any extended resource in name order."""
    extra = set().union(*(n.capacity for n in workload.nodes), *(g.demand for j in workload.jobs for g in j.groups))
    return CORE_RESOURCES + tuple(sorted(extra - set(CORE_RESOURCES)))


class Simulation:
    """One run of one preset over one workload (state and event loop)."""

    def __init__(self, workload: Workload, preset: Preset, config: SimConfig, seed: int) -> None:
        self.workload, self.preset, self.config, self.seed = workload, preset, config, seed
        self.settings = config.settings
        self.usage_model = config.usage
        self.rng = np.random.default_rng(seed)
        self.resources = resource_axis(workload)
        self.kube_resources = np.array([r not in (DISK, NETWORK) for r in self.resources])
        self.io_resources = ~self.kube_resources
        cap = np.array([n.capacity.to_array(self.resources) for n in workload.nodes], dtype=np.float64)
        self.cluster = Cluster(self.resources, cap.reshape(len(workload.nodes), len(self.resources)),
                               np.array([n.harvest for n in workload.nodes], dtype=bool))
        self._build_static()
        self.running = Running()
        self.now = self.t0
        self.evictions = 0
        self.oom_kills = 0
        self.wasted_work_s = 0.0
        self.task_starts = 0
        self.opp_done = 0
        self.tasks_done = 0
        self.time_cap_reached = False
        self.events = 0  # loop iterations (arrivals, finishes, ticks): the unit of `stowage bench simulator`
        self._buffer: list[tuple[int, int, bool]] = []
        self.log: list[tuple[float, str, str, str, bool]] | None = [] if config.trace else None
        self._use_key: tuple[float, int] | None = None
        self._rates_key: tuple[float, int] | None = None
        self._tracker = rates.RateTracker(self)
        self._changed = True
        self.regular_changed = True  # regular capacity freed or new work since the last pass
        self._overload_dirty = True
        self._overload = False
        self.monitor = monitor.Monitor(self)
        self.recorder = Recorder(self)
        self.preset.attach(self)

    # --- static model ---------------------------------------------------------------------------

    def _build_static(self) -> None:
        wl, res = self.workload, self.resources
        if not wl.nodes:
            raise WorkloadError(["nodes: must list at least one node"])
        queues = wl.queues or (QueueSpec("default"),)  # no queue listed: one with every default
        self.queue_names = [q.name for q in queues]
        qidx = {name: i for i, name in enumerate(self.queue_names)}
        self.q_weight = np.array([q.weight for q in queues])
        self.q_order = [q.job_order for q in queues]
        self.q_opp = np.array([q.opportunistic_allowed for q in queues])
        jobs = sorted(range(len(wl.jobs)), key=lambda i: (wl.jobs[i].arrival_s, i))
        self.jobs = [wl.jobs[i] for i in jobs]
        self.j_source = np.array(jobs, dtype=np.int64)  # engine job index → index in workload.jobs
        problems: list[str] = []
        g_job, g_demand, g_dur, g_tasks, g_usage, g_deps, self.g_name = [], [], [], [], [], [], []
        self.g_expected: list[float | None] = []  # the workload's expectedDuration per group (a hint), None: none
        self.j_groups: list[list[int]] = []
        biggest = self.cluster.cap.max(axis=0)
        for j, job in enumerate(self.jobs):
            if job.queue not in qidx:
                problems.append(f"jobs[{job.name}].queue: {job.queue!r} is not a queue; known: {self.queue_names}")
            names = {g.name: len(g_job) + k for k, g in enumerate(job.groups)}
            self.j_groups.append(list(range(len(g_job), len(g_job) + len(job.groups))))
            for g in job.groups:
                d = g.demand.to_array(res)
                too_big = [r for r, x, b in zip(res, d, biggest, strict=True) if x > b * (1 + 1e-9)]
                if too_big:
                    problems.append(f"jobs[{job.name}].groups[{g.name}].demand: exceeds every node on {too_big}")
                elif not (d <= self.cluster.cap * (1 + 1e-9)).all(axis=1).any():
                    # Each resource fits somewhere but never all on one node: its tasks could never
                    # start, and the run would end with them unfinished.
                    problems.append(f"jobs[{job.name}].groups[{g.name}].demand: fits on no single node "
                                    "(each resource fits somewhere, never all together)")
                missing = [dep for dep in g.depends_on if dep not in names]
                if missing:
                    problems.append(f"jobs[{job.name}].groups[{g.name}].dependsOn: unknown groups {missing}")
                g_job.append(j)
                g_demand.append(d)
                g_dur.append(max(float(g.duration_s), 0.0))
                self.g_expected.append(g.expected_duration_s)
                g_tasks.append(int(g.tasks))
                g_usage.append(math.nan if g.usage is None else float(g.usage))
                g_deps.append([names[dep] for dep in g.depends_on if dep in names])
                self.g_name.append(g.name)
        if problems:
            raise WorkloadError(problems)
        self.n_jobs, self.n_groups = len(self.jobs), len(g_job)
        self.g_job = np.array(g_job, dtype=np.int64)
        self.g_demand = np.array(g_demand, dtype=np.float64).reshape(self.n_groups, len(res))
        self.g_uses = self.g_demand > 0
        # Groups share a handful of demand shapes: per-pass fit checks run once per shape.
        self.shapes, g_shape = np.unique(self.g_demand, axis=0, return_inverse=True)
        self.g_shape: NDArray[np.int64] = g_shape.reshape(-1)
        self.clamped_shapes = alignment.clamp_demand(self.shapes)  # as alignment.feasible cleans them
        self.g_dur = np.array(g_dur)
        self.g_tasks = np.array(g_tasks, dtype=np.int64)
        self.g_usage = np.array(g_usage)
        self.g_deps = g_deps
        self.g_children: list[list[int]] = [[] for _ in range(self.n_groups)]
        for g, deps in enumerate(g_deps):
            for d in deps:
                self.g_children[d].append(g)
        self.j_arrival = np.array([j.arrival_s for j in self.jobs], dtype=np.float64)
        self.j_queue = np.array([qidx.get(j.queue, 0) for j in self.jobs], dtype=np.int64)
        self.j_priority = np.array([j.priority for j in self.jobs], dtype=np.int64)
        self.j_opp = np.array([_OPP_CODE[Opportunistic(j.opportunistic)] for j in self.jobs], dtype=np.int64)
        self.g_queue = self.j_queue[self.g_job]
        self.t0 = float(self.j_arrival.min()) if self.n_jobs else 0.0
        # dynamic
        self.g_pending = np.zeros(self.n_groups, np.int64)
        self.g_running = np.zeros(self.n_groups, np.int64)
        self.g_done = np.zeros(self.n_groups, np.int64)
        self.g_unmet = np.array([len(d) for d in g_deps], dtype=np.int64)
        self.g_ready = np.zeros(self.n_groups, bool)
        self.g_ready_at = np.full(self.n_groups, np.inf)
        self.j_open_groups = np.array([len(gs) for gs in self.j_groups], dtype=np.int64)
        self.j_finish = np.full(self.n_jobs, np.nan)
        self.j_arrived = np.zeros(self.n_jobs, bool)
        R, Q = len(res), len(self.queue_names)
        self.job_alloc = np.zeros((self.n_jobs, R))
        self.queue_alloc = np.zeros((2, Q, R))  # [regular, opportunistic]
        self.alloc_total = np.zeros(R)
        self._next_job = 0

    # --- placement API for presets --------------------------------------------------------------

    def ready_groups(self) -> NDArray[np.int64]:
        """Groups whose barrier is open and that have tasks waiting."""
        return np.flatnonzero(self.g_ready & (self.g_pending > 0))

    def regular_free(self) -> NDArray[np.float64]:
        return self.cluster.cap - self.cluster.reg_alloc

    def place(self, g: int, n: int, opp: bool) -> None:
        """Start a task of group ``g`` on node ``n`` (as opportunistic if ``opp``)."""
        d = self.g_demand[g]
        c = self.cluster
        if opp:
            c.opp_alloc[n] += d
        else:
            c.reg_alloc[n] += d
        self.g_pending[g] -= 1
        self.g_running[g] += 1
        j, q = self.g_job[g], self.g_queue[g]
        self.job_alloc[j] += d
        self.queue_alloc[1 if opp else 0, q] += d
        self.alloc_total += d
        self.task_starts += 1
        self._buffer.append((g, n, opp))
        if self.log is not None:
            self.log.append((self.now, self.jobs[j].name, self.g_name[g], self.workload.nodes[n].name, opp))
        self._changed = True
        self._overload_dirty = True
        if self.config.check and not opp:
            self._check_capacity(n)

    def _flush(self) -> None:
        if not self._buffer:
            return
        gs, ns, opp = np.array(self._buffer, dtype=np.int64).reshape(-1, 3).T  # (group, node, opp) per place()
        override = self.g_usage[gs]
        base = self.usage_model.draw_base(self.rng, override)
        io = self.usage_model.io_base(base, override)
        self.running.append(gs, ns, self.now, self.g_dur[gs], base, io, opp.astype(bool))
        self._buffer.clear()

    # --- removal (finish, eviction) -------------------------------------------------------------

    def _release(self, rows: NDArray[np.int64], gs: NDArray[np.int64]) -> None:
        """Take the allocations of running rows (of groups ``gs``) off their nodes, jobs and queues."""
        run, c = self.running, self.cluster
        ns, opp = run.node[rows], run.opp[rows]
        d = self.g_demand[gs]
        np.subtract.at(c.reg_alloc, ns[~opp], d[~opp])
        np.subtract.at(c.opp_alloc, ns[opp], d[opp])
        np.subtract.at(self.job_alloc, self.g_job[gs], d)
        np.subtract.at(self.queue_alloc, (opp.astype(np.int64), self.g_queue[gs]), d)
        self.alloc_total -= d.sum(axis=0)
        np.maximum(c.reg_alloc, 0.0, out=c.reg_alloc)  # float noise below 0 after the last task leaves
        np.maximum(c.opp_alloc, 0.0, out=c.opp_alloc)
        np.subtract.at(self.g_running, gs, 1)
        self._changed = True
        self.regular_changed = True
        self._overload_dirty = True

    def evict(self, rows: NDArray[np.int64], *, oom: bool = False) -> None:
        """Stop running rows (opportunistic only) and put their tasks back in their queue."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size == 0:
            return
        run = self.running
        if self.config.check and not run.opp[rows].all():
            raise InvariantViolation("a regular task was chosen for eviction")
        gs = run.group[rows]
        self._release(rows, gs)
        np.add.at(self.g_pending, gs, 1)
        self.wasted_work_s += float((self.g_dur[gs] - run.work_left[rows]).sum())
        if oom:
            self.oom_kills += rows.size
        else:
            self.evictions += rows.size
        run.drop(rows)

    def _finish_due(self) -> None:
        run = self.running
        if not len(run):
            return
        # Nearly every event is a finish (33,821 of the first 33,872 on the FB-2009 batch day): find the
        # rows first, then check the minimum only when there are none (NaN work left goes on, as before).
        left = run.work_left
        rows = (left <= _EPS_WORK).nonzero()[0]  # np.flatnonzero without its ravel
        if rows.size == 0 and left.min() > _EPS_WORK:
            return
        gs = run.group[rows]
        self._release(rows, gs)
        np.add.at(self.g_done, gs, 1)
        self.opp_done += int(run.opp[rows].sum())
        self.tasks_done += rows.size
        self.preset.on_finished(gs, self.now - run.start[rows])
        run.drop(rows)
        # Completing a group never changes another group's done count: the complete ones are known now.
        groups = np.unique(gs)
        done = groups[self.g_done[groups] == self.g_tasks[groups]].tolist()
        for g in done:
            self._group_complete(g)

    def _group_complete(self, g: int) -> None:
        for child in self.g_children[g]:
            self.g_unmet[child] -= 1
            if self.g_unmet[child] == 0:
                self._open(child)
        j = int(self.g_job[g])
        self.j_open_groups[j] -= 1
        if self.j_open_groups[j] == 0:
            self.j_finish[j] = self.now

    def _open(self, g: int) -> None:
        """The barrier before ``g`` is open: its tasks become pending."""
        self.g_ready[g] = True
        self.g_ready_at[g] = self.now
        self.g_pending[g] = self.g_tasks[g]
        self._changed = True
        self.regular_changed = True
        if self.g_tasks[g] == 0:
            self._group_complete(g)

    def _arrive(self, j: int) -> None:
        self.j_arrived[j] = True
        self.preset.on_job_arrived(j)
        if not self.j_groups[j]:
            self.j_finish[j] = self.now
            return
        for g in self.j_groups[j]:
            if self.g_unmet[g] == 0:
                self._open(g)

    # --- progress -------------------------------------------------------------------------------

    def current_use(self) -> NDArray[np.float64]:
        """(P, R) usage of each running task now."""
        run = self.running
        key = (self.now, run.version)
        if self._use_key != key:
            self._use = self._tracker.current_use()  # only rows that can have changed are recomputed
            self._use_key = key
        return self._use

    def overload_possible(self) -> bool:
        """Whether any node's peak demand exceeds its capacity (only then can usage contend)."""
        if self._overload_dirty:
            c = self.cluster
            self._overload = bool(((c.reg_alloc + c.opp_alloc) > c.cap * (1 + 1e-9)).any())
            self._overload_dirty = False
        return self._overload

    def update_rates(self) -> None:
        run = self.running
        if not len(run):
            return
        key = (self.now, run.version)
        if key == self._rates_key:
            return  # same tasks, same usage: same rates
        self._rates_key = key
        if not self.overload_possible():
            self._tracker.pause()
            run.rate.fill(1.0)
            return
        # Cluster.rates over every task, kept incrementally (stowage.sim.rates; same numbers), in place.
        self._tracker.rates(out=run.rate)

    def _advance(self, t: float) -> None:
        dt = t - self.now
        if dt > 0:
            run = self.running
            if len(run):
                left = run.work_left  # a view: updated in place
                left -= run.rate * dt
            self.recorder.integrate(dt)
            self.now = t

    def _next_finish(self) -> float:
        run = self.running
        if not len(run):
            return math.inf
        with np.errstate(divide="ignore", invalid="ignore"):
            soonest = float((run.work_left / run.rate).min())  # a stopped row (rate 0) gives +inf
            if soonest != soonest:  # NaN: a stopped row with no work left; it never finishes
                soonest = float(np.where(run.rate > 0, run.work_left / run.rate, np.inf).min())
        return self.now + soonest

    def _check_capacity(self, n: int | None = None) -> None:
        c = self.cluster
        rows = slice(None) if n is None else slice(n, n + 1)
        fit_res = self.preset.regular_resources(self)
        over = c.reg_alloc[rows][:, fit_res] > c.cap[rows][:, fit_res] * (1 + 1e-9) + 1e-9
        if over.any():
            raise InvariantViolation(f"regular requests exceed capacity on node(s) {np.flatnonzero(over.any(1))}")

    def _check_all(self) -> None:
        self._check_capacity()
        total = self.g_pending + self.g_running + self.g_done
        if (self.g_ready & (total != self.g_tasks)).any():
            raise InvariantViolation("a task was lost or duplicated (pending + running + done ≠ tasks)")
        if np.bincount(self.running.group, minlength=self.n_groups).tolist() != self.g_running.tolist():
            raise InvariantViolation("running table disagrees with group counts")

    # --- the loop -------------------------------------------------------------------------------

    def run(self, progress: Callable[[int, float], None] | None = None) -> RunResult:
        """Replay to the end (or to ``max_sim_s``); ``progress(tasks_done, simulated_s)`` every ~0.5 s of wall."""
        interval = self.settings.contention.sample_interval_s
        next_tick = math.inf
        # The pass cadence (SimConfig.pass_delay_s): pass_at is when the next pass is due (inf: none).
        delay = self.config.pass_delay_s
        pass_at, last_pass = math.inf, -math.inf
        n_jobs = self.n_jobs
        next_report = time.monotonic() + _PROGRESS_EVERY_S if progress is not None else math.inf
        while True:
            ta = float(self.j_arrival[self._next_job]) if self._next_job < n_jobs else math.inf
            tf = self._next_finish()
            if not self.monitor.needed():
                next_tick = math.inf
            elif next_tick == math.inf:
                next_tick = (math.floor(self.now / interval) + 1) * interval
            t = min(ta, tf, next_tick, pass_at)
            if t == math.inf:
                break
            if t - self.t0 > self.config.max_sim_s:
                self.time_cap_reached = True
                break
            self.events += 1
            self.recorder.sample_until(t)
            self._advance(t)
            self._finish_due()
            while self._next_job < n_jobs and self.j_arrival[self._next_job] <= self.now:
                self._arrive(self._next_job)
                self._next_job += 1
            if next_tick <= self.now:
                self.monitor.tick()
                next_tick = self.now + interval
            if self._changed:
                if pass_at == math.inf:
                    pass_at = max(self.now, last_pass + delay)
                if self.now >= pass_at:
                    self.preset.schedule(self)
                    self._flush()
                    self._changed = False
                    self.regular_changed = False
                    pass_at, last_pass = math.inf, self.now
                self.update_rates()
            if self.config.check:
                self._check_all()
            if progress is not None and time.monotonic() >= next_report:
                # Wall time only paces the reports; it never reaches the simulation's state.
                progress(self.tasks_done, self.now - self.t0)
                next_report = time.monotonic() + _PROGRESS_EVERY_S
        if progress is not None:
            progress(self.tasks_done, self.now - self.t0)
        return self.recorder.result()


def simulate(
    workload: Workload,
    preset: str | Preset,
    *,
    config: SimConfig | None = None,
    seed: int = 0,
    progress: Callable[[int, float], None] | None = None,
) -> RunResult:
    """Run ``preset`` (a name from ``stowage.sim.presets.PRESETS`` or an instance) over ``workload``.

    ``progress(tasks_done, simulated_s)``: called about twice a wall second and once at the end.
    """
    p = presets.make(preset) if isinstance(preset, str) else preset
    return Simulation(workload, p, config or SimConfig(), seed).run(progress)
