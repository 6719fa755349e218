"""The discrete-event engine: arrivals, barriers, placements, progress, finishes, evictions.

Hybrid design for speed: the next event is the earliest of the next job arrival, the next task finish
(``work_left / rate`` over the running set, one vectorised min) and, only while something could change there, the
node monitor's 1 s tick (``stowage.sim.monitor``: usage samples, OOM kills, contention policy). Progress rates
change only at events and ticks. Every preset decides at a cadence (``SimConfig.pass_delay_s``, the operator's
0.2 s): one pass places what it can for every change since the last one, and tasks started together finish together,
at one event. Tasks of one group are identical, so candidates are (group × node).

No task is lost: an evicted or OOM-killed opportunistic task goes back to its group's pending count and later
restarts from zero (its progress counts as wasted work).

A run may start mid-flight (:class:`Start`, for ``stowage.forecast``): the clock at a given time, every job that
arrived by then present at once, tasks already finished counted done, and tasks already running placed on their
nodes with the work their duration leaves after their elapsed time.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from stowage.config import StowageSettings
from stowage.policy import tolerances
from stowage.sim import monitor, presets, rates
from stowage.sim.cluster import Cluster, Running
from stowage.sim.metrics import Recorder, RunResult
from stowage.sim.preset import View
from stowage.sim.tables import Spec, Status, Truth, resource_axis
from stowage.sim.usage import UsageModel
from stowage.sim.workload import Workload

if TYPE_CHECKING:
    from stowage.sim.preset import Preset

__all__ = ["MAX_SIM_S", "InvariantViolation", "SimConfig", "Simulation", "Start", "StartTask", "simulate"]

_EPS_WORK = 1e-7  # seconds of work below which a task counts as finished (float noise)
_PROGRESS_EVERY_S = 0.5  # wall seconds between progress calls: often enough for a bar, never a cost
#: The default simulated-time cap: a quarter year past the first arrival (no bundled workload needs a day).
MAX_SIM_S = 90 * 86400.0


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
    finish_grid_s: float = 0.0
    """Tasks finish at the next multiple of this many seconds (of the clock) at or after they would: fewer events
    and passes, each finish up to this much late (``stowage.forecast``'s speed). 0: exact finishes."""
    finish_grid_fraction: float = 0.0
    """With ``finish_grid_s``: the grid widens, in powers of two of ``finish_grid_s``, to at most this fraction of
    the clock (seconds since the run's 0) where that is wider, so a finish hours ahead is late by at most this
    fraction of the time to it, and the far future takes few passes (the forecast's: its clock's 0 is now).
    0: a fixed grid."""
    learn: bool = True
    """Finished tasks teach the decision their run times (estimates, classifier, recurring history), as a cluster
    does. False: they teach nothing, for a run whose decision reads fixed durations (``oracle_durations``) on
    regular room only, where nothing learned is read (the forecast's)."""


@dataclass(frozen=True, slots=True)
class StartTask:
    """A task already running when the run starts: ``elapsed_s`` of its group's duration are behind it."""

    job: str
    group: str
    node: str
    elapsed_s: float
    opportunistic: bool = False


@dataclass(frozen=True, slots=True)
class Start:
    """Where a run starts instead of an empty cluster at the first arrival (a live cluster's state)."""

    at_s: float
    """The clock at the start; every job that arrived by then is there at once, keeping its arrival time. Keep the
    clock near 0 (seconds since the snapshot): at Unix times a float's step (~2e-7 s) is as coarse as the last work
    of a task, whose finish would then never come."""
    finished: Mapping[tuple[str, str], int] = field(default_factory=dict)
    """(job, group) → tasks already finished (they count for barriers, the finished fraction, the job's end)."""
    running: Sequence[StartTask] = ()
    min_left_s: float = 0.0
    """Work left of a running task whose elapsed time is at or past its duration (its duration is then an
    underestimate: it finishes this much later, not at once)."""


class Simulation:
    """One run of one preset over one workload (state and event loop), from an empty cluster or ``start``."""

    def __init__(self, workload: Workload, preset: Preset, config: SimConfig, seed: int, *,
                 start: Start | None = None) -> None:
        self.workload, self.preset, self.config, self.seed = workload, preset, config, seed
        self.settings, self.usage_model = config.settings, config.usage
        self.rng = np.random.default_rng(seed)
        res = resource_axis(workload)
        cap = np.array([n.capacity.to_array(res) for n in workload.nodes], dtype=np.float64).reshape(-1, len(res))
        self.cluster = Cluster(res, cap, np.array([n.harvest for n in workload.nodes], dtype=bool))
        self.spec = Spec(workload, res, cap)
        self.truth = Truth([workload.jobs[i] for i in self.spec.j_source])
        self.status, self.running = Status(self.spec), Running()
        self.now = self.t_start = self.spec.t0  # t_start: where max_sim_s counts from
        self.time_cap_reached = False
        self._next_job = 0  # the next job to arrive
        self.events = 0  # loop iterations (arrivals, finishes, ticks): the unit of `stowage bench simulator`
        self._buffer: list[tuple[int, int, bool]] = []
        self.log: list[tuple[float, str, str, str, bool]] | None = [] if config.trace else None
        self._use_key: tuple[float, int] | None = None
        self._rates_key: tuple[float, int] | None = None
        self._tracker = rates.RateTracker(self.spec, self.cluster, self.running, self.usage_model)
        self._changed = True
        self.regular_changed = True  # regular capacity freed or new work since the last pass
        self._overload_dirty = True
        self._overload = False
        self.monitor = monitor.Monitor(self, self.status, self.cluster, self.running, preset.harvesting)
        self.recorder = Recorder(self.spec, self.truth, self.status, self.cluster, self.running, self.current_use,
                                 config.sample_s, self.settings)
        self.preset.attach(View(self))
        self._resumed = start is not None
        if start is not None:
            self._resume(start)

    def _resume(self, start: Start) -> None:
        """The state ``start`` describes (module docstring); its tasks are no placements (no log, no start)."""
        spec, st = self.spec, self.status
        self.now = self.t_start = float(start.at_s)
        self.recorder.next_sample = max(self.recorder.next_sample, self.now)
        self.monitor.last_tick = self.now
        group_of = {(spec.j_name[int(spec.g_job[g])], spec.g_name[g]): g for g in range(spec.n_groups)}
        for key, done in start.finished.items():
            st.g_done[group_of[key]] = done  # before the arrivals: _open counts them as done
        while self._next_job < spec.n_jobs and spec.j_arrival[self._next_job] <= self.now:
            self._arrive(self._next_job)
            self._next_job += 1
        if not start.running:
            return
        node_of = {n.name: i for i, n in enumerate(self.workload.nodes)}
        gs = np.array([group_of[(t.job, t.group)] for t in start.running], dtype=np.int64)
        ns = np.array([node_of[t.node] for t in start.running], dtype=np.int64)
        opp = np.array([t.opportunistic for t in start.running], dtype=bool)
        elapsed = np.array([max(float(t.elapsed_s), 0.0) for t in start.running])
        for g, n, o in zip(gs.tolist(), ns.tolist(), opp.tolist(), strict=True):
            if st.g_pending[g] <= 0:
                raise InvariantViolation(f"{spec.j_name[int(spec.g_job[g])]}/{spec.g_name[g]}: more tasks running "
                                         "than left, or running behind a closed barrier")
            self._allocate(g, n, o)
        override = self.truth.g_usage[gs]
        base = self.usage_model.draw_base(self.rng, override)
        work = np.maximum(self.truth.g_dur[gs] - elapsed, start.min_left_s)
        # started elapsed_s ago: the preset reads a row's run time as now − start
        self.running.append(gs, ns, self.now - elapsed, work, base, self.usage_model.io_base(base, override), opp)

    # --- placement: the one thing a preset changes ---------------------------------------------

    def place(self, g: int, n: int, opp: bool) -> None:
        """Start a task of group ``g`` on node ``n`` (as opportunistic if ``opp``)."""
        self._allocate(g, n, opp)
        self.status.task_starts += 1
        self._buffer.append((g, n, opp))
        if self.log is not None:
            spec = self.spec
            self.log.append((self.now, spec.j_name[spec.g_job[g]], spec.g_name[g], self.workload.nodes[n].name, opp))
        if self.config.check and not opp:
            self._check_capacity(n)

    def _allocate(self, g: int, n: int, opp: bool) -> None:
        """A task of group ``g`` holds its demand on node ``n`` and its job and queue, and is no longer pending."""
        spec, st, c = self.spec, self.status, self.cluster
        d = spec.g_demand[g]
        if opp:
            c.opp_alloc[n] += d
        else:
            c.reg_alloc[n] += d
        st.g_pending[g] -= 1
        st.g_running[g] += 1
        j = spec.g_job[g]
        st.job_alloc[j] += d
        st.queue_alloc[1 if opp else 0, spec.g_queue[g]] += d
        st.alloc_total += d
        self._changed = True
        self._overload_dirty = True

    def promote(self, rows: NDArray[np.int64]) -> None:
        """Make running opportunistic rows regular in place (UBIS §IV-D): their allocation moves to the regular
        pool of their node and queue; they keep their work."""
        rows = np.asarray(rows, dtype=np.int64)
        run, c, spec, st = self.running, self.cluster, self.spec, self.status
        rows = rows[run.opp[rows]]
        if rows.size == 0:
            return
        gs, ns = run.group[rows], run.node[rows]
        d = spec.g_demand[gs]
        np.subtract.at(c.opp_alloc, ns, d)
        np.add.at(c.reg_alloc, ns, d)
        np.maximum(c.opp_alloc, 0.0, out=c.opp_alloc)
        q = spec.g_queue[gs]
        np.subtract.at(st.queue_alloc[1], q, d)
        np.add.at(st.queue_alloc[0], q, d)
        np.maximum(st.queue_alloc[1], 0.0, out=st.queue_alloc[1])
        st.harvested_s += float((self.now - run.start[rows]).sum())
        st.promotions += rows.size
        opp, promoted = run.opp, run.promoted
        opp[rows], promoted[rows] = False, True
        run.opp, run.promoted = opp, promoted
        run.version += 1
        self._tracker.pause()  # its per-row class bins are stale: the next rates start afresh
        self._changed = True
        self._overload_dirty = True
        if self.config.check:
            for n in np.unique(ns).tolist():
                self._check_capacity(n)

    def _flush(self) -> None:
        if not self._buffer:
            return
        gs, ns, opp = np.array(self._buffer, dtype=np.int64).reshape(-1, 3).T  # (group, node, opp) per place()
        override = self.truth.g_usage[gs]
        base = self.usage_model.draw_base(self.rng, override)
        io = self.usage_model.io_base(base, override)
        self.running.append(gs, ns, self.now, self.truth.g_dur[gs], base, io, opp.astype(bool))
        self._buffer.clear()

    # --- removal (finish, eviction) -------------------------------------------------------------

    def _release(self, rows: NDArray[np.int64], gs: NDArray[np.int64]) -> None:
        """Take the allocations of running rows (of groups ``gs``) off their nodes, jobs and queues."""
        run, c, spec, st = self.running, self.cluster, self.spec, self.status
        ns, opp = run.node[rows], run.opp[rows]
        d = spec.g_demand[gs]
        np.subtract.at(c.reg_alloc, ns[~opp], d[~opp])
        np.subtract.at(c.opp_alloc, ns[opp], d[opp])
        np.subtract.at(st.job_alloc, spec.g_job[gs], d)
        np.subtract.at(st.queue_alloc, (opp.astype(np.int64), spec.g_queue[gs]), d)
        st.alloc_total -= d.sum(axis=0)
        np.maximum(c.reg_alloc, 0.0, out=c.reg_alloc)  # float noise below 0 after the last task leaves
        np.maximum(c.opp_alloc, 0.0, out=c.opp_alloc)
        np.subtract.at(st.g_running, gs, 1)
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
        np.add.at(self.status.g_pending, gs, 1)
        self.status.wasted_work_s += float((self.truth.g_dur[gs] - run.work_left[rows]).sum())
        ran = float((self.now - run.start[rows]).sum())
        self.status.harvested_s += ran
        self.status.run_s += ran
        if oom:
            self.status.oom_kills += rows.size
        else:
            self.status.evictions += rows.size
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
        np.add.at(self.status.g_done, gs, 1)
        opp = run.opp[rows]
        self.status.opp_done += int(opp.sum())
        took = self.now - run.start[rows]
        self.status.harvested_s += float(took[opp].sum())
        self.status.run_s += float(took.sum())
        regular = ~opp & ~run.promoted[rows]
        if regular.any():
            alone = self.truth.g_dur[gs[regular]]
            self.status.regular_runs.extend((took[regular] / np.where(alone > 0, alone, 1.0)).tolist())
        self.status.tasks_done += rows.size
        if self.config.learn:
            self.preset.on_finished(gs, self.now - run.start[rows], rows)
        run.drop(rows)
        # Completing a group never changes another group's done count: the complete ones are known now.
        groups = np.unique(gs)
        done = groups[self.status.g_done[groups] == self.spec.g_tasks[groups]].tolist()
        for g in done:
            self._group_complete(g)

    def _group_complete(self, g: int) -> None:
        for child in self.spec.g_children[g]:
            self.status.g_unmet[child] -= 1
            if self.status.g_unmet[child] == 0:
                self._open(child)
        j = int(self.spec.g_job[g])
        self.status.j_open_groups[j] -= 1
        if self.status.j_open_groups[j] == 0:
            self.status.j_finish[j] = self.now

    def _open(self, g: int) -> None:
        """The barrier before ``g`` is open: its tasks become pending."""
        self.status.g_ready[g] = True
        self.status.g_ready_at[g] = self.now
        left = self.spec.g_tasks[g] - self.status.g_done[g]  # a resumed run's finished tasks are done (Start)
        self.status.g_pending[g] = left
        self._changed = True
        self.regular_changed = True
        if left <= 0:
            self._group_complete(g)

    def _arrive(self, j: int) -> None:
        self.status.j_arrived[j] = True
        self.preset.on_job_arrived(j)
        if not self.spec.j_groups[j]:
            self.status.j_finish[j] = self.now
            return
        for g in self.spec.j_groups[j]:
            if self.status.g_unmet[g] == 0:
                self._open(g)

    # --- progress -------------------------------------------------------------------------------

    def current_use(self, t: float | None = None) -> NDArray[np.float64]:
        """(P, R) usage of each running task now (or at ``t``, with the tasks running now)."""
        run = self.running
        key = (self.now if t is None else t, run.version)
        if self._use_key != key:
            self._use = self._tracker.current_use(key[0])  # only rows that can have changed are recomputed
            self._use_key = key
        return self._use

    def overload_possible(self) -> bool:
        """Whether any node's peak demand exceeds its capacity (only then can usage contend)."""
        if self._overload_dirty:
            c = self.cluster
            self._overload = bool(((c.reg_alloc + c.opp_alloc) > c.cap * (1 + tolerances.FEASIBILITY_RTOL)).any())
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
        # The contention model over every task, kept incrementally (stowage.sim.rates), in place.
        self._tracker.rates(self.now, out=run.rate)

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
        grid = self.config.finish_grid_s
        if grid > 0 and math.isfinite(soonest):
            wide = self.config.finish_grid_fraction * (self.now + soonest) / grid
            if wide >= 2:  # a power of two times the grid: finishes near each other share their points
                grid *= 2.0 ** math.floor(math.log2(wide))
            # The first grid point the soonest finish reaches: every row due by then finishes there together.
            return max(math.ceil((self.now + soonest - _EPS_WORK) / grid) * grid, self.now)
        return self.now + soonest

    def _check_capacity(self, n: int | None = None) -> None:
        c = self.cluster
        rows = slice(None) if n is None else slice(n, n + 1)
        fit_res = self.preset.regular_resources()
        slack = 1 + tolerances.FEASIBILITY_RTOL
        over = c.reg_alloc[rows][:, fit_res] > c.cap[rows][:, fit_res] * slack + tolerances.ROUNDING_EPS
        if over.any():
            raise InvariantViolation(f"regular requests exceed capacity on node(s) {np.flatnonzero(over.any(1))}")

    def _check_all(self) -> None:
        self._check_capacity()
        st = self.status
        if (st.g_ready & (st.g_pending + st.g_running + st.g_done != self.spec.g_tasks)).any():
            raise InvariantViolation("a task was lost or duplicated (pending + running + done ≠ tasks)")
        if np.bincount(self.running.group, minlength=self.spec.n_groups).tolist() != st.g_running.tolist():
            raise InvariantViolation("running table disagrees with group counts")

    # --- the loop -------------------------------------------------------------------------------

    def run(self, progress: Callable[[int, float], None] | None = None) -> RunResult:
        """Replay to the end (or to ``max_sim_s``); ``progress(tasks_done, simulated_s)`` every ~0.5 s of wall."""
        self.advance(progress)
        return self.recorder.result(self.now, self.preset, self.monitor.contentions, self.time_cap_reached)

    def advance(self, progress: Callable[[int, float], None] | None = None) -> None:
        """``run`` without the run's metrics at the end (a caller that reads the state, as a forecast does)."""
        interval = self.settings.contention.sample_interval_s
        next_tick = math.inf
        # The pass cadence (SimConfig.pass_delay_s): pass_at is when the next pass is due (inf: none).
        delay = self.config.pass_delay_s
        pass_at, last_pass = (self.now if self._resumed else math.inf), -math.inf  # a resumed run decides at once
        n_jobs = self.spec.n_jobs
        next_report = time.monotonic() + _PROGRESS_EVERY_S if progress is not None else math.inf
        while True:
            ta = float(self.spec.j_arrival[self._next_job]) if self._next_job < n_jobs else math.inf
            tf = self._next_finish()
            if not self.monitor.needed():
                next_tick = math.inf
            elif next_tick == math.inf:
                next_tick = (math.floor(self.now / interval) + 1) * interval
            tw = self.preset.wake_at()
            t = min(ta, tf, next_tick, pass_at, tw)
            if t == math.inf:
                break
            if t - self.t_start > self.config.max_sim_s:
                self.time_cap_reached = True
                break
            self.events += 1
            self.recorder.sample_until(t, self.now)
            self._advance(t)
            self._finish_due()
            while self._next_job < n_jobs and self.spec.j_arrival[self._next_job] <= self.now:
                self._arrive(self._next_job)
                self._next_job += 1
            if next_tick <= self.now:
                self._changed |= self.monitor.tick()
                next_tick = self.now + interval
            if tw <= self.now:  # the preset sees something new (a task's use shown): its room may have grown
                self._changed = self.regular_changed = True
            if self._changed:
                if pass_at == math.inf:
                    pass_at = max(self.now, last_pass + delay)
                if self.now >= pass_at:
                    self.preset.schedule()
                    self._flush()
                    self._changed = False
                    self.regular_changed = False
                    pass_at, last_pass = math.inf, self.now
                self.update_rates()
            if self.config.check:
                self._check_all()
            if progress is not None and time.monotonic() >= next_report:
                # Wall time only paces the reports; it never reaches the simulation's state.
                progress(self.status.tasks_done, self.now - self.t_start)
                next_report = time.monotonic() + _PROGRESS_EVERY_S
        if progress is not None:
            progress(self.status.tasks_done, self.now - self.t_start)


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
