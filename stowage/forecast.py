"""When will my job run? A live cluster's snapshot run forward with the operator's own decision (issue #36 §1).

``predict(snapshot, settings) -> Forecast``: for every unfinished Job and gated plain-pod group of the
:class:`Snapshot`, its position in its queue (by the queue's job order, as the decision ranks it) and across
queues (by predicted start), its predicted start and finish (clock seconds), and what the prediction assumed
(each group's duration estimate and its ``estimates.Source``).

How: the snapshot becomes a simulator workload and an ``engine.Start`` (the clock at ``now``, running tasks with
their elapsed time, finished tasks done), and ``stowage.sim.engine.Simulation`` replays it with a packing preset
(``stowage-regular`` by default), whose decision is ``stowage.policy.decide.Decider``: the one the operator runs.
There is no second simulator and no copy of the decision here.

What the run assumes, since the future is not known:

* **Durations are the snapshot's estimates** (what the operator's decision estimated from what the cluster knows),
  never true durations: the simulated world runs each task for exactly its group's estimate, and the decision is
  handed the same numbers (the engine's oracle path, ``SimConfig.oracle_durations``), so it ranks and packs as the
  operator did. A running task has ``estimate − elapsed`` left, at least ``estimates.min_duration_s``.
* **Tasks use their request** (no draw, no ramp, no bursts): requests are what a cluster knows of a pod's use, and
  the regular pool packs requests, so on the default preset usage changes nothing but contention where running
  opportunistic pods overcommit a node (then the conservative reading: they use what they asked for).
* **Regular room only** by default: harvested room depends on measured usage the forecast cannot know, so a
  prediction says when a job starts in regular room (a harvesting preset can be asked for by name).
* No new arrivals, no failures, no quotas (the simulator's queues have none), no suspended jobs; pods outside
  Stowage hold their requests for the whole forecast (``Node.held``).

This module needs no Kubernetes: the operator fills a :class:`Snapshot` from its informers (its ``DispatchView``
and the decider's estimates and usage) and calls :func:`predict` off its dispatch pass. It lives in ``stowage``,
not ``stowage.sim``, because the operator may not import the simulator package (the adapters import no other
adapter, ``tests/core/test_import_contracts.py``); it is the one module that joins the two.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np
from numpy.typing import NDArray

from stowage.config import StowageSettings
from stowage.labels import Opportunistic
from stowage.model import Pool
from stowage.policy import dispatch, estimates, fairness, tolerances
from stowage.resources import ResourceVector
from stowage.sim import presets
from stowage.sim.engine import SimConfig, Simulation, Start
from stowage.sim.engine import StartTask as RunningTask
from stowage.sim.packing import PackingPreset
from stowage.sim.usage import UsageModel
from stowage.sim.workload import JobSpec, NodeSpec, TaskGroup, Workload
from stowage.sim.workload import QueueSpec as Queue

__all__ = [
    "AS_REQUESTED",
    "Forecast",
    "ForecastOptions",
    "Group",
    "Job",
    "JobForecast",
    "Node",
    "Queue",
    "RunningTask",
    "Snapshot",
    "predict",
]

#: Every task uses its request from its start: no draw, no ramp-up, no bursts (module docstring).
AS_REQUESTED = UsageModel(mean_fraction=1.0, concentration=0.0, ramp_s=0.0, burst_rate_per_s=0.0)
_JOB = "job"
# A queue (name, weight, job order, opportunistic allowed) and a running task (job, group, node, elapsed time,
# opportunistic) are the simulator's own records (``QueueSpec``, ``engine.StartTask``), under these names.


# --- the snapshot -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    allocatable: ResourceVector
    held: ResourceVector = field(default_factory=ResourceVector)
    """Requests of pods outside Stowage on it: held for the whole forecast (nobody knows when they end)."""
    harvest: bool = True


@dataclass(frozen=True, slots=True)
class Group:
    """One task group of a job (or a set of gated plain pods alike)."""

    name: str
    demand: ResourceVector
    """Per task (requests)."""
    tasks: int
    """All its tasks: finished, running and not started."""
    estimate_s: float
    """One task's duration as the decision estimates it now (``Decider.estimates()``)."""
    source: estimates.Source = estimates.Source.PRIOR
    finished: int = 0
    depends_on: tuple[str, ...] = ()
    """Groups of the same job that must finish first (the barrier)."""


@dataclass(frozen=True, slots=True)
class Job:
    """An unfinished Stowage Job, or a gated plain-pod group (``kind="pods"``: pods of one owner, or one pod)."""

    key: str
    """Unique: ``namespace/name`` (or the plain pods' group key)."""
    queue: str
    groups: tuple[Group, ...]
    arrival_s: float = math.nan
    """Creation time (clock seconds): FIFO order and FSP arrival; NaN or later than ``now``: ``now``."""
    opportunistic: Opportunistic = Opportunistic.FALSE
    kind: str = _JOB


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A live cluster at ``now`` (clock seconds), as the operator knows it."""

    now: float
    nodes: tuple[Node, ...]
    queues: tuple[Queue, ...]
    jobs: tuple[Job, ...]
    """Every unfinished job: those running (they hold and free room) and those pending."""
    running: tuple[RunningTask, ...] = ()
    usage: Mapping[Pool, tuple[tuple[str, ...], fairness.QueueUsage]] = field(default_factory=dict)
    """Each pool's decayed queue usage as ``Decider.usage`` keeps it (queue names, state); {}: none yet."""


@dataclass(frozen=True, slots=True)
class ForecastOptions:
    preset: str = "stowage-regular"
    """A packing preset (``stowage.sim.packing``): the operator's decision, regular room only by default."""
    pass_delay_s: float = dispatch.PASS_DELAY_S
    """The decision cadence, as the operator's throttle."""
    grid_s: float = 5.0
    """Tasks finish on a grid of this many seconds (``SimConfig.finish_grid_s``): a finish is predicted up to this
    much late, and the run has a pass per grid step at most instead of one per finish (the cost). Each stage
    behind a barrier starts at a grid point, so a job of k stages is up to k grid steps late: 30 s predicted a
    job of two 20 s and 10 s stages to finish at 60 s instead of 30 s; 5 s keeps that within 10 s for about a
    third more CPU on ``stowage bench forecast``."""
    grid_fraction: float = 0.02
    """The grid widens (in powers of two of ``grid_s``) to this fraction of the time from ``now`` where that is
    wider (``SimConfig.finish_grid_fraction``): a finish hours ahead is late by at most 2 % of the wait for it,
    and the far future takes fewer passes. 0: a fixed grid."""
    horizon_s: float = 7 * 86400.0
    """Simulated seconds past ``now`` after which nothing more is predicted (start or finish None)."""


# --- the answer -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobForecast:
    key: str
    queue: str
    kind: str
    """``"job"`` or ``"pods"`` (a gated plain-pod group)."""
    pending: bool
    """Nothing of it has started yet (no task running or finished)."""
    queue_position: int | None
    """1-based among its queue's pending jobs, by the queue's job order as the decision ranks them; None: started."""
    position: int | None
    """1-based among every pending job, by predicted start (ties by queue position, then key); None: started."""
    start_s: float | None
    """Predicted start (clock seconds; its first task placed); a started job: when its oldest running task
    started; None: not within the horizon, or it fits no node."""
    finish_s: float | None
    """Predicted finish (its last task done); None: not within the horizon, or it fits no node."""
    estimate_s: Mapping[str, float]
    """group → the duration estimate the prediction used."""
    source: Mapping[str, str]
    """group → where that estimate came from (``estimates.SOURCE_NAMES``)."""
    fits: bool = True
    """False: some group of it fits no node (it can never start as the cluster stands)."""


@dataclass(frozen=True, slots=True)
class Forecast:
    now: float
    jobs: tuple[JobForecast, ...]
    """In the snapshot's order."""
    preset: str
    horizon_reached: bool
    """The run stopped at ``ForecastOptions.horizon_s`` with work left (those jobs have None times)."""

    def job(self, key: str) -> JobForecast:
        return next(j for j in self.jobs if j.key == key)

    def queue(self, name: str) -> list[JobForecast]:
        """The queue's pending jobs in queue order (a ``stowage queue`` listing)."""
        mine = [j for j in self.jobs if j.queue == name and j.pending]
        return sorted(mine, key=lambda j: (j.queue_position or 0, j.key))

    def pending(self) -> list[JobForecast]:
        """Every pending job, by global position."""
        return sorted((j for j in self.jobs if j.pending), key=lambda j: (j.position or 0, j.key))


# --- the prediction ---------------------------------------------------------------------------------


def predict(snapshot: Snapshot, settings: StowageSettings, options: ForecastOptions | None = None) -> Forecast:
    """Run ``snapshot`` forward with the decision ``settings`` configure (module docstring). Deterministic: the
    same snapshot gives the same forecast. Raises ``stowage.errors.WorkloadError`` for a malformed snapshot (a
    job in no listed queue, a barrier on an unknown group) and ``KeyError`` for a running task of no listed job,
    group or node."""
    options = options or ForecastOptions()
    preset = presets.make(options.preset)
    if not isinstance(preset, PackingPreset):
        raise ValueError(f"preset {options.preset!r}: the forecast runs the operator's decision, a packing preset")
    now = float(snapshot.now)
    fits = _fitting(snapshot)
    placed = [job for job in (j if fits[j.key] else _only_running(j, snapshot.running) for j in snapshot.jobs)
              if job is not None]
    if not placed:
        return _answer(snapshot, fits, {}, {}, {}, horizon_reached=False, preset=options.preset)
    wl = Workload(
        "forecast",
        tuple(NodeSpec(n.name, _room(n), n.harvest) for n in snapshot.nodes),
        snapshot.queues,
        tuple(JobSpec(j.key, j.queue, _arrival(j, now) - now,
                      tuple(TaskGroup(g.name, g.tasks, g.demand, g.estimate_s, 1.0, g.depends_on) for g in j.groups),
                      j.opportunistic) for j in placed),
    )
    # The run's clock is seconds since ``now``: at 1.8e9 s a float step is ~2e-7 s, as coarse as a task's last
    # work, and a finish would never come. Arrivals and the usage's time shift with it.
    start = Start(0.0, {(j.key, g.name): g.finished for j in placed for g in j.groups if g.finished},
                  snapshot.running, min_left_s=settings.estimates.min_duration_s)
    config = SimConfig(settings=settings, usage=AS_REQUESTED, sample_s=math.inf, trace=True,
                       max_sim_s=options.horizon_s, pass_delay_s=options.pass_delay_s, oracle_durations=True,
                       finish_grid_s=options.grid_s, finish_grid_fraction=options.grid_fraction,
                       learn=preset.harvesting)  # fixed durations, regular room: nothing learned is read
    sim = Simulation(wl, preset, config, seed=0, start=start)
    ranks = _seed(sim, preset, snapshot)
    sim.advance()
    started: dict[str, float] = {}
    for t, job, *_ in sim.log or ():
        started.setdefault(job, now + t)  # the log is in time order: a job's first placement is its start
    names = sim.spec.j_name
    finished = {names[j]: now + t for j, t in enumerate(sim.status.j_finish.tolist())
                if not math.isnan(t) and fits[names[j]]}
    return _answer(snapshot, fits, started, finished, ranks, horizon_reached=sim.time_cap_reached,
                   preset=options.preset)


def _only_running(job: Job, running: tuple[RunningTask, ...]) -> Job | None:
    """A job that can never finish (a group fits no node) still holds its nodes while its running tasks run: it
    stays in the run as those tasks alone (None: it has none)."""
    count: dict[str, int] = {}
    for t in running:
        if t.job == job.key:
            count[t.group] = count.get(t.group, 0) + 1
    groups = tuple(Group(g.name, g.demand, count[g.name], g.estimate_s, g.source)
                   for g in job.groups if g.name in count)
    return Job(job.key, job.queue, groups, job.arrival_s, job.opportunistic, job.kind) if groups else None


def _room(node: Node) -> ResourceVector:
    """What Stowage's tasks may hold on ``node``: allocatable less what pods outside Stowage request."""
    return ResourceVector({r: max(v, 0.0) for r, v in (node.allocatable - node.held).items()})


def _arrival(job: Job, now: float) -> float:
    t = float(job.arrival_s)
    return t if math.isfinite(t) and t <= now else now


def _fitting(snapshot: Snapshot) -> dict[str, bool]:
    """job → whether each of its groups fits some node's room whole (else it can never start: left out)."""
    res = sorted({r for n in snapshot.nodes for r in n.allocatable} | {r for j in snapshot.jobs for g in j.groups
                                                                        for r in g.demand})
    room = np.array([_room(n).to_array(res) for n in snapshot.nodes], dtype=np.float64).reshape(-1, len(res))
    slack = 1 + tolerances.FEASIBILITY_RTOL
    known: dict[ResourceVector, bool] = {}
    out: dict[str, bool] = {}
    for j in snapshot.jobs:
        for g in j.groups:
            if g.demand not in known:
                known[g.demand] = bool((g.demand.to_array(res) <= room * slack).all(axis=1).any())
        out[j.key] = all(known[g.demand] for g in j.groups)
    return out


def _seed(sim: Simulation, preset: PackingPreset, snapshot: Snapshot) -> dict[str, float]:
    """Hand the decider the snapshot's decayed queue usage, and catch each job's rank in its queue as the first
    pass ranks it (the decision's own job order: FIFO, SRTF or FSP), for the queue positions."""
    decider = preset.decider
    decider.usage = {pool: (names_, replace(state, at=state.at - snapshot.now))
                     for pool, (names_, state) in snapshot.usage.items()}
    ranks: dict[str, float] = {}
    st, names = sim.status, sim.spec.j_name

    def first_pass(pool: Pool, passed: dispatch.PassInput, result: dispatch.PassResult) -> None:
        if ranks or pool is not Pool.REGULAR:
            return
        live = np.flatnonzero(st.j_arrived & np.isnan(st.j_finish))  # the decision's job axis (PackingPreset)
        rank: NDArray[np.float64] = (passed.job_rank(np.arange(live.size)) if passed.job_rank is not None
                                     else np.arange(live.size, dtype=np.float64))  # no job order: arrival
        ranks.update(zip((names[j] for j in live.tolist()), rank.tolist(), strict=True))

    decider.on_pass = first_pass
    return ranks


def _answer(snapshot: Snapshot, fits: Mapping[str, bool], started: Mapping[str, float],
            finished: Mapping[str, float], ranks: Mapping[str, float], *, horizon_reached: bool,
            preset: str) -> Forecast:
    now = float(snapshot.now)
    oldest: dict[str, float] = {}
    for t in snapshot.running:
        oldest[t.job] = max(oldest.get(t.job, 0.0), max(float(t.elapsed_s), 0.0))
    pending = {j.key for j in snapshot.jobs if j.key not in oldest and not any(g.finished for g in j.groups)}
    by_queue: dict[str, list[Job]] = {}
    for j in snapshot.jobs:
        if j.key in pending:
            by_queue.setdefault(j.queue, []).append(j)
    queue_pos: dict[str, int] = {}
    for jobs in by_queue.values():
        jobs.sort(key=lambda j: (ranks.get(j.key, math.inf), _arrival(j, now), j.key))
        queue_pos.update((j.key, i + 1) for i, j in enumerate(jobs))
    glob = sorted(pending, key=lambda k: (started.get(k, math.inf), queue_pos[k], k))
    position = {k: i + 1 for i, k in enumerate(glob)}
    out = []
    for j in snapshot.jobs:
        mine = j.key in pending
        start = started.get(j.key) if mine else (now - oldest[j.key] if j.key in oldest else None)
        out.append(JobForecast(
            key=j.key, queue=j.queue, kind=j.kind, pending=mine,
            queue_position=queue_pos.get(j.key), position=position.get(j.key), start_s=start,
            finish_s=finished.get(j.key), estimate_s={g.name: float(g.estimate_s) for g in j.groups},
            source={g.name: estimates.SOURCE_NAMES[int(g.source)] for g in j.groups}, fits=fits[j.key]))
    return Forecast(now, tuple(out), preset, horizon_reached)
