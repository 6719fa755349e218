"""One dispatch decision: which waiting tasks start now, where, and as which class.

The one decision path of Stowage. The operator's dispatcher (``stowage.operator.dispatcher``) fills a
``snapshot.PassSnapshot`` from its informers and acts on the ``Decision``; the simulator's packing presets
(``stowage.sim.packing``) fill one from the simulation's arrays and place what it returns. Both make their
``DecideInput`` with the one builder, ``snapshot.build``; neither keeps a copy of the orchestration below.

``Decider.decide(inp)``:

1. **Estimates** (``estimates``, Tetris §4.1): each group's task duration from what a cluster knows (the
   user's hint, the group's finished tasks, earlier runs, the queue's prior; running tasks' elapsed time as a
   lower bound), or the caller's ``DecideInput.duration_s`` (the simulator's oracle, an upper bound). Remaining
   work ``p(job)`` (``remaining_work``) and FSP job sizes come from them, never NaN.
2. **Promotion** (UBIS Alg. 1 l.6–8, §IV-D): running opportunistic pods (``DecideInput.promotable``) whose node's
   regular room now holds them become regular in place, before any new allocation (``harvest.promotions``).
3. **Regular pass** (``dispatch.pack``) over every releasable group, whatever its intent (UBIS Alg. 1 l.11–19
   allocates regular containers first), on what ``DecideInput.regular_free`` leaves after the promotions.
4. **Opportunistic pass** (l.21–29) over the groups still releasable whose intent is ``true``, or ``auto`` and
   the short/long classifier calls them short (OPERA §III-B), in queues that allow it, on
   ``DecideInput.harvestable``; only groups that fit some node's harvestable room are asked about.

The decision works from the snapshot it is given: ``DecideInput`` holds data only, no callbacks into the adapter.
The two inputs that cost the adapter something to build, the harvestable room and the classifier's features, are
needed only when some group may harvest; ``harvest_candidates`` is that rule (the decision's own, asked again after
its regular pass), and ``needs_harvestable`` / ``needs_features`` tell the one builder (``snapshot.build``), from
the same arrays, whether to ask the adapter for them at all.

The regular pass caps disk and network at what the regular pods' declared bandwidth leaves (the extender's
filter; the opportunistic pass has measured room on them). Both passes share queues per pool by weighted DRF
over time (decayed usage, a floor) with the fairness knob, order jobs per queue (FIFO, SRTF, FSP), boost groups
at the barrier, apply queue quotas and the starvation guard, and pick by Tetris alignment + remaining work. A
placement's demand comes off its node's free vector before the next one is chosen, so a decision never places
more than fits.

State kept between decisions (``Decider``): the classifier, the duration priors per queue and the recurring
jobs' history (what the estimator learns), FSP trackers per queue, the starvation guard's skip counts and held
nodes (by group key), and each pool's decayed queue usage. Pure and deterministic: the clock comes in as
``DecideInput.now``; nothing here does I/O.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from stowage.config import StowageSettings
from stowage.model import JobOrder, Pool
from stowage.policy import (
    alignment,
    classifier,
    dispatch,
    estimates,
    fairness,
    harvest,
    holding,
    ordering,
    remaining_work,
)

__all__ = [
    "INTENT_AUTO",
    "INTENT_CONVERTED",
    "INTENT_FALSE",
    "INTENT_TRUE",
    "DecideInput",
    "Decider",
    "Decision",
    "PassFacts",
    "Promotable",
    "chains",
    "harvest_candidates",
    "needs_features",
    "needs_harvestable",
]

INTENT_FALSE: Final = 0
"""``stowage.io/opportunistic: "false"``: never opportunistic."""
INTENT_AUTO: Final = 1
"""``"auto"``: regular while it fits, else opportunistic if the classifier calls it short."""
INTENT_TRUE: Final = 2
"""``"true"``: may harvest: regular room first, harvested room when no regular room holds it."""
INTENT_CONVERTED: Final = 3
"""A plain pod converted at admission (``"true"``): its requests are already 0, so it takes harvested room only;
promotion (``DecideInput.promotable``) gives it regular room later."""

POOLS: Final = (Pool.REGULAR, Pool.OPPORTUNISTIC)


@dataclass(frozen=True, slots=True)
class Promotable:
    """Running opportunistic pods (P of them) in the order promotion walks them (oldest first)."""

    demand: NDArray[np.float64]
    """(P, R) each pod's demand, on ``DecideInput``'s resource axis."""
    node: NDArray[np.int64]
    """(P,) its node (a row of ``DecideInput.capacity``)."""
    queue: NDArray[np.int64]
    """(P,) its queue (a row of ``DecideInput.queue_name``; −1: none)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PassFacts:
    """What a pass knows that the decision reads as it is, on its axes: N nodes, R resources, S demand shapes,
    G groups, J jobs, Q queues. ``DecideInput`` and the adapters' ``snapshot.PassSnapshot`` both carry these;
    each adds its own (the input: what ``snapshot.build`` derives; the snapshot: what it derives them from).

    List every group of every unfinished job (remaining work and FSP sizes count them all); ``releasable`` says
    which may start now. Nothing here is changed by the decision.
    """

    now: float
    capacity: NDArray[np.float64]
    """(N, R) node capacity (allocatable)."""
    bandwidth: NDArray[np.bool_]
    """(R,) the declared-bandwidth columns (disk, network): the regular pass is capped at ``bandwidth_room``."""
    shapes: NDArray[np.float64]
    """(S, R) distinct per-task demands."""
    group_shape: NDArray[np.int64]
    """(G,) each group's row of ``shapes``."""
    group_key: Sequence[Hashable]
    """(G,) stable across decisions: the starvation guard's counts and holds, and ``estimates()``, use them."""
    group_job: NDArray[np.int64]
    group_queue: NDArray[np.int64]
    releasable: NDArray[np.int64]
    """(G,) tasks that may start now (barrier open, not suspended, not released yet)."""
    remaining: NDArray[np.int64]
    """(G,) tasks not finished (waiting or running): remaining work counts them."""
    intent: NDArray[np.int64]
    """(G,) ``INTENT_FALSE`` / ``INTENT_AUTO`` / ``INTENT_TRUE``."""
    finished_fraction: NDArray[np.float64]
    """(G,) finished / total tasks of the group (barrier knob)."""
    job_key: Sequence[Hashable]
    """(J,) stable job identities (FSP trackers)."""
    job_arrival: NDArray[np.float64]
    """(J,) creation times (FIFO order, FSP arrival); ``inf``/NaN: unknown (FSP: now)."""
    queue_name: Sequence[str]
    """(Q,) the queues, by name (priors, deficits)."""
    queue_weight: NDArray[np.float64]
    queue_order: Sequence[JobOrder]
    queue_opportunistic: NDArray[np.bool_]
    """(Q,) ``spec.opportunistic: Allow``."""
    queue_alloc: NDArray[np.float64]
    """(2, Q, R) what each queue holds, regular pool then opportunistic pool."""
    node_key: Sequence[Hashable]
    """(N,) stable node identities (held nodes survive by them)."""
    queue_quota: NDArray[np.float64] | None = None
    """(Q, R) ``spec.quota`` per pool (``+inf`` where none); None: no queue has one."""
    duration_s: NDArray[np.float64] | None = None
    """(G,) true task durations: the oracle (an upper bound, never what a cluster has); None: estimates."""
    group_children: Sequence[Sequence[int]] | None = None
    """(G,) groups that wait on each group (``packing.critical_path_fraction``); None: no chains."""
    regular_changed: bool = True
    """False: nothing freed regular capacity or added regular work since the last decision (skip that pass)."""
    explain: bool = False
    """True: ``Decision.holds`` says why each group left waiting waits (``holding``; the operator asks, the
    simulator need not)."""
    resources: Sequence[str] = ()
    """(R,) resource names, for ``Decision.holds``' messages."""
    sample_age_s: NDArray[np.float64] | None = None
    """(N,) seconds since each node's utilization sample (``inf``: none; NaN: the node does not harvest), for the
    ``sample`` hold; None: not known (no ``sample`` holds)."""
    promotable: Promotable | None = None
    """The running opportunistic pods that may be promoted, oldest first; None: promotion is off."""
    gang: NDArray[np.int64] | None = None
    """(G,) tasks of each group that start together or not at all (0: not a gang; ``gang``): such a group is
    released whole on regular room or not at all, never on harvested room. None: no gangs."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DecideInput(PassFacts):
    """One decision's view as arrays: the pass's facts (``PassFacts``) and what ``snapshot.build`` derives from
    them. Data only: no callbacks into the adapter. Nothing here is changed by the decision."""

    regular_free: NDArray[np.float64]
    """(N, R) ``allocatable − Σ requests of regular pods`` (``harvest.regular_available``)."""
    bandwidth_room: NDArray[np.float64]
    """(N, R) ``capacity − the regular pods' declared demand`` (read on the ``bandwidth`` columns only). The
    opportunistic pass is not capped by it: harvested room is measured on every resource, bandwidth included."""
    evidence: estimates.Evidence
    """(G,) what the cluster knows of each group's task duration. Its ``prior_s`` is not read: the decider
    fills in its own learned priors (``Decider.priors``)."""
    pool_total: NDArray[np.float64]
    """(R,) the denominator of dominant shares."""
    harvestable: NDArray[np.float64] | None = None
    """(N, R) ``A_opp`` (``harvest.harvestable``); None: harvesting is off for this decision (no opportunistic
    pass; holds are told in the regular pool). Read only when some group may harvest: an adapter that harvests
    builds it when ``needs_harvestable`` says so and passes None otherwise, for the same decision. Not changed."""
    features: Sequence[Mapping[str, str] | None] | None = None
    """(G,) each group's classifier features (``classifier.task_features``), read only for the groups
    ``needs_features`` marks (``auto`` groups that may harvest; None elsewhere will do); None: no classifier for
    this decision (every ``auto`` group that fits may harvest)."""


@dataclass(frozen=True, slots=True)
class Decision:
    """What one decision placed, in the order it chose them."""

    placements: list[tuple[int, int, Pool]]
    """(group, node, pool) per task."""
    skipped: NDArray[np.bool_]
    """(G,) groups passed over (starvation guard)."""
    duration_s: NDArray[np.float64]
    """(G,) the task duration estimates the decision used."""
    source: NDArray[np.int8]
    """(G,) where each came from (``estimates.Source``; the oracle counts as ``HINT``)."""
    holds: Mapping[int, holding.Hold] = field(default_factory=dict)
    """group → why its releasable tasks that were not placed wait (only with ``DecideInput.explain``)."""
    promoted: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    """Rows of ``DecideInput.promotable`` promoted to regular, in order (their demand is in the regular pool of
    the placements that follow)."""


def harvest_candidates(intent: NDArray[np.int64], releasable: NDArray[np.int64], group_queue: NDArray[np.int64],
                       queue_opportunistic: NDArray[np.bool_]) -> NDArray[np.bool_]:
    """(G,) the groups that may take harvested room: tasks releasable, intent not ``"false"``, in a queue that
    allows opportunistic pods (``spec.opportunistic: Allow``). ``decide``'s opportunistic pass considers exactly
    these (with what its regular pass left releasable), so an adapter asks the same before building its inputs."""
    intent = np.asarray(intent, dtype=np.int64)
    allowed = np.asarray(queue_opportunistic, dtype=bool)[np.asarray(group_queue, dtype=np.int64)]
    return allowed & (intent != INTENT_FALSE) & (np.asarray(releasable) > 0)


def needs_harvestable(intent: NDArray[np.int64], releasable: NDArray[np.int64], group_queue: NDArray[np.int64],
                      queue_opportunistic: NDArray[np.bool_], *, explain: bool = False) -> bool:
    """Whether ``decide`` may read ``DecideInput.harvestable``: some ``harvest_candidates``, or, with ``explain``,
    a group with tasks releasable whose holds are told in the harvested pool (intent ``"true"`` or converted,
    whatever its queue allows). False: passing None decides the same (placements, promotions and holds)."""
    if harvest_candidates(intent, releasable, group_queue, queue_opportunistic).any():
        return True
    return explain and bool(((np.asarray(intent) >= INTENT_TRUE) & (np.asarray(releasable) > 0)).any())


def needs_features(intent: NDArray[np.int64], releasable: NDArray[np.int64], group_queue: NDArray[np.int64],
                   queue_opportunistic: NDArray[np.bool_]) -> NDArray[np.bool_]:
    """(G,) the groups whose ``DecideInput.features`` ``decide`` may read: the ``auto`` ``harvest_candidates``
    (the classifier is asked only about those that fit some node's harvested room)."""
    return (harvest_candidates(intent, releasable, group_queue, queue_opportunistic)
            & (np.asarray(intent, dtype=np.int64) == INTENT_AUTO))


@dataclass(frozen=True, slots=True)
class _Plan:
    """One decision's constants, the same for both its passes (``Decider._plan``)."""

    capacity: NDArray[np.float64]
    demand: NDArray[np.float64]
    """(G, R) each group's per-task demand."""
    work: NDArray[np.float64]
    """(J,) remaining work (``remaining_work``)."""
    skips: NDArray[np.int64]
    """(G,) the starvation guard's skip counts at the start of the decision."""
    node_index: Mapping[Hashable, int]
    """node key → row, for the held nodes ({} when none is held)."""
    durations: NDArray[np.float64] | None
    paths: NDArray[np.float64] | None
    job_rank: Callable[[NDArray[np.int64]], NDArray[np.float64]] | None


@dataclass(slots=True)
class _Placed:
    """What one decision has placed so far: each pass reads it and adds its own (``add``)."""

    releasable: NDArray[np.int64]
    """(G,) tasks still releasable."""
    room: NDArray[np.float64]
    """(N, R) declared-bandwidth room left (``DecideInput.bandwidth_room`` less the placements)."""
    bandwidth: NDArray[np.bool_]
    queue_alloc: NDArray[np.float64]
    """(2, Q, R) each queue's allocation with the placements."""
    skipped: NDArray[np.bool_]
    placements: list[tuple[int, int, Pool]] = field(default_factory=list)
    left: dict[int, holding.PoolLeft] = field(default_factory=dict)
    """pool → what its pass left (``explain`` only)."""
    harvested: NDArray[np.float64] | None = None
    """The harvestable room the opportunistic pass started from, once read."""

    @classmethod
    def start(cls, inp: DecideInput) -> _Placed:
        return cls(releasable=np.array(inp.releasable, dtype=np.int64),
                   room=np.array(inp.bandwidth_room, dtype=np.float64),
                   bandwidth=np.asarray(inp.bandwidth, dtype=bool),
                   queue_alloc=np.array(inp.queue_alloc, dtype=np.float64),
                   skipped=np.zeros(len(inp.group_key), dtype=bool))

    def capped(self, avail: NDArray[np.float64]) -> NDArray[np.float64]:
        """``avail`` capped at the declared-bandwidth room left, on the bandwidth columns (the regular pool)."""
        out = np.array(avail, dtype=np.float64)
        bw = self.bandwidth
        out[:, bw] = np.minimum(out[:, bw], np.maximum(self.room[:, bw], 0.0))
        return out

    def add(self, inp: DecideInput, demand: NDArray[np.float64], pool: Pool, result: dispatch.PassResult,
            avail: NDArray[np.float64]) -> None:
        """A pass's placements on ``avail``: fewer releasable tasks, less bandwidth room, more queue allocation."""
        p = 0 if pool is Pool.REGULAR else 1
        after = np.array(avail, dtype=np.float64) if inp.explain else avail
        for pl in result.placements:
            g, n = pl.group, pl.node
            self.releasable[g] -= 1
            self.room[n] -= demand[g]
            self.queue_alloc[p, inp.group_queue[g]] += demand[g]
            self.placements.append((g, n, pool))
            if inp.explain:
                after[n] -= demand[g]
        if inp.explain:
            self.left[p] = holding.PoolLeft(after, self.queue_alloc[p].copy())
        self.skipped |= result.skipped


class Decider:
    """``decide`` and what it learns and keeps between decisions (module docstring).

    ``job_order``: each queue's ``jobOrder`` masks jobs (False: the ``tetris`` preset, no job mask);
    ``use_classifier``: ``auto`` groups are asked about (False: any ``auto`` group that fits may harvest);
    ``guard``: the starvation guard (``packing.starvation_skip_limit``; False: off whatever the setting).
    """

    def __init__(self, settings: StowageSettings, *, job_order: bool = True, use_classifier: bool = True,
                 guard: bool = True,
                 on_pass: Callable[[Pool, dispatch.PassInput, dispatch.PassResult], None] | None = None) -> None:
        self.settings = settings
        self.knobs = settings.packing if guard else replace(settings.packing, starvation_skip_limit=0)
        self.job_order = job_order
        self.on_pass = on_pass
        self.classifier = (classifier.ShortLongClassifier(settings.classifier.short_task_threshold_s)
                           if use_classifier else None)
        self.priors = estimates.DurationPriors(settings.estimates)
        self.history = estimates.RecurringHistory(settings.estimates)
        self.skips: dict[Hashable, int] = {}
        self.held: dict[tuple[Hashable, str], Hashable] = {}  # (group key, pool) → node key
        self.usage: dict[Pool, tuple[tuple[str, ...], fairness.QueueUsage]] = {}
        self._fsp: dict[str, ordering.FspTracker] = {}
        self._fsp_jobs: dict[Hashable, str] = {}
        self._ranks_kept: dict[str, tuple[bytes, NDArray[np.float64]]] = {}
        self._last_keys: Sequence[Hashable] = ()
        self._last_estimates: tuple[NDArray[np.float64], NDArray[np.int8]] = (np.zeros(0), np.zeros(0, np.int8))
        self._last_index: dict[Hashable, int] | None = None

    # --- learning ---------------------------------------------------------------------------------

    def observe_finished(self, features: Mapping[str, str] | None, durations_s: Sequence[float], *, queue: str,
                         group: str = "", recurring_key: str | None = None,
                         group_key: Hashable | None = None) -> tuple[float, str] | None:
        """Learn from finished tasks of one group, ``durations_s`` their run times in the order they finished:
        the classifier (OPERA: "upon the completion of tasks"; the tasks share ``features``, so it learns them
        in one ``observe_many``), the queue's duration prior and the recurring job's history (running means,
        fed one duration at a time in that order). Returns the (estimate, source) the last decision held for
        ``group_key`` (None: no key, or not in it), for the estimate-error metric."""
        if self.classifier is not None and features is not None:
            self.classifier.observe_many(features, durations_s)
        for duration in durations_s:
            self.priors.observe(queue, duration)
        if recurring_key is not None:
            for duration in durations_s:
                self.history.observe(recurring_key, group, duration)
        if group_key is None:
            return None
        if self._last_index is None:
            self._last_index = {k: i for i, k in enumerate(self._last_keys)}
        i = self._last_index.get(group_key)
        if i is None:
            return None
        dur, src = self._last_estimates
        return float(dur[i]), estimates.SOURCE_NAMES[int(src[i])]

    def estimates(self) -> dict[Hashable, tuple[float, str]]:
        """group key → (task duration estimate, source name) at the last decision."""
        dur, src = self._last_estimates
        return {k: (float(d), estimates.SOURCE_NAMES[int(s)])
                for k, d, s in zip(self._last_keys, dur.tolist(), src.tolist(), strict=True)}

    def estimate(self, inp: DecideInput) -> tuple[NDArray[np.float64], NDArray[np.int8]]:
        """(G,) task duration and source per group: the oracle if given, else ``estimates.estimate``."""
        g = len(inp.group_key)
        if inp.duration_s is not None:
            return np.asarray(inp.duration_s, dtype=np.float64), np.full(g, estimates.Source.HINT, np.int8)
        priors = self.priors.priors(inp.queue_name)[inp.group_queue] if g else np.zeros(0)
        out = estimates.estimate(replace(inp.evidence, prior_s=priors), self.settings.estimates)
        return out.duration_s, out.source

    # --- the decision -----------------------------------------------------------------------------

    def decide(self, inp: DecideInput) -> Decision:
        """Estimates, promotion, regular pass, opportunistic pass, holds (module docstring), one step each."""
        dur, source = self.estimate(inp)
        self._last_keys, self._last_estimates, self._last_index = inp.group_key, (dur, source), None
        self._forget(inp)
        promoted, inp = self._promote(inp)
        n_groups = len(inp.group_key)
        if n_groups == 0 or len(inp.node_key) == 0 or not (inp.releasable > 0).any():
            self.record_usage(inp.queue_name, np.asarray(inp.queue_alloc, dtype=np.float64), inp.pool_total, inp.now)
            holds = self._explain(inp, np.asarray(inp.releasable), {}) if inp.explain and n_groups else {}
            return Decision([], np.zeros(n_groups, dtype=bool), dur, source, holds, promoted)
        plan = self._plan(inp, dur)
        done = _Placed.start(inp)
        self._regular_pass(inp, plan, done)
        self._opportunistic_pass(inp, plan, done)
        self._count_skips(inp, done.placements, done.skipped)
        self.record_usage(inp.queue_name, done.queue_alloc, inp.pool_total, inp.now)  # held until the next decision
        holds = self._holds(inp, done) if inp.explain else {}
        return Decision(done.placements, done.skipped, dur, source, holds, promoted)

    def _plan(self, inp: DecideInput, dur: NDArray[np.float64]) -> _Plan:
        """What both passes read and neither changes: demand, remaining work (FSP arrivals with it), the guard's
        skip counts and held nodes' index, the durations the knobs read."""
        knobs = self.knobs
        cap = np.asarray(inp.capacity, dtype=np.float64)
        demand = np.asarray(inp.shapes, dtype=np.float64)[inp.group_shape]
        left = dur * np.maximum(inp.remaining, 0)
        work = remaining_work.remaining_work(left, demand, inp.group_job, len(inp.job_key), cap.mean(axis=0))
        if self.job_order:
            self._fsp_arrive(inp, left, demand, inp.now)
        skips = np.zeros(len(inp.group_key), dtype=np.int64)
        if self.skips:
            rows = np.flatnonzero(np.asarray(inp.releasable) > 0).tolist()
            skips[rows] = [self.skips.get(inp.group_key[g], 0) for g in rows]
        paths = (chains(dur, inp.group_children) if knobs.critical_path_fraction > 0
                 and inp.group_children is not None else None)
        return _Plan(
            capacity=cap, demand=demand, work=work, skips=skips,
            node_index={k: i for i, k in enumerate(inp.node_key)} if self.held else {},
            durations=dur if knobs.bottleneck_weight > 0 or knobs.critical_path_fraction > 0 else None, paths=paths,
            job_rank=partial(self._job_ranks, inp, work=work, now=inp.now) if self.job_order else None)

    def _regular_pass(self, inp: DecideInput, plan: _Plan, done: _Placed) -> None:
        """UBIS Alg. 1 l.11–19: every releasable group but the converted pods, on the regular room capped at the
        declared bandwidth; skipped when nothing changed in the regular pool since the last decision."""
        regular = np.where(np.asarray(inp.intent) != INTENT_CONVERTED, done.releasable, 0)
        if inp.regular_changed and (regular > 0).any():
            self._pass(inp, plan, done, Pool.REGULAR, regular, done.capped(inp.regular_free))

    def _opportunistic_pass(self, inp: DecideInput, plan: _Plan, done: _Placed) -> None:
        """l.21–29: the groups still releasable that may harvest, fit some node's harvested room, and (``auto``)
        the classifier calls short, on the harvestable room less this decision's regular placements."""
        if inp.harvestable is None:
            return
        intent = np.asarray(inp.intent, dtype=np.int64)
        eligible = harvest_candidates(intent, done.releasable, inp.group_queue, inp.queue_opportunistic)
        if inp.gang is not None:
            eligible &= np.asarray(inp.gang) <= 0  # a gang never starts on harvested room
        if not eligible.any():
            return
        # Harvested room is measured on every resource (T_alloc·C − U − B − S, bandwidth included): the declared
        # bandwidth caps the regular pool only, as requests do (opportunistic pods reserve nothing).
        avail = np.array(inp.harvestable, dtype=np.float64)  # a copy: the caller's array is not changed
        # This pass's regular placements bind before the opportunistic ones: each is then a pod just bound, in the
        # ramp-up allowance S at its full demand (harvest.assumed), where the extender sees it.
        just = [(n, g) for g, n, pool in done.placements if pool is Pool.REGULAR]
        if just:
            nodes, groups = np.array(just, dtype=np.int64).T
            np.subtract.at(avail, nodes, plan.demand[groups])
            np.maximum(avail, 0.0, out=avail)
        done.harvested = avail
        eligible &= self._fits_some_node(inp, eligible, avail)
        if self.classifier is not None and inp.features is not None:
            self._ask_classifier(inp, eligible & (intent == INTENT_AUTO), eligible)
        if eligible.any():
            self._pass(inp, plan, done, Pool.OPPORTUNISTIC, np.where(eligible, done.releasable, 0), avail)

    def _pass(self, inp: DecideInput, plan: _Plan, done: _Placed, pool: Pool, pending: NDArray[np.int64],
              avail: NDArray[np.float64]) -> None:
        """One ``dispatch.pack`` over ``pool`` for the ``pending`` tasks on ``avail``; its placements go into
        ``done`` (and, with ``explain``, what it left), its held nodes into the starvation guard."""
        p = 0 if pool is Pool.REGULAR else 1
        held = np.full(len(inp.group_key), -1, dtype=np.int64)
        if self.held:
            for g in np.flatnonzero(pending > 0).tolist():
                node = self.held.get((inp.group_key[g], pool.value))
                if node is not None:
                    held[g] = plan.node_index.get(node, -1)
        passed = dispatch.PassInput(
            capacity=plan.capacity, available=avail, shapes=inp.shapes, group_shape=inp.group_shape,
            group_job=inp.group_job, group_queue=inp.group_queue, pending=pending,
            finished_fraction=inp.finished_fraction, job_work=plan.work, queue_alloc=done.queue_alloc[p].copy(),
            pool_total=inp.pool_total, queue_weight=inp.queue_weight, job_rank=plan.job_rank, skips=plan.skips,
            held=held, queue_quota=inp.queue_quota, queue_usage=self.queue_usage(pool, inp.queue_name, inp.now),
            group_duration_s=plan.durations, group_path_s=plan.paths,
            gang=inp.gang if pool is Pool.REGULAR else None)
        result = dispatch.pack(passed, self.knobs)
        if self.on_pass is not None:
            self.on_pass(pool, passed, result)
        done.add(inp, plan.demand, pool, result, avail)
        for g in np.flatnonzero(pending > 0).tolist():
            node = int(result.held[g])
            if node >= 0:
                self.held[(inp.group_key[g], pool.value)] = inp.node_key[node]
            else:
                self.held.pop((inp.group_key[g], pool.value), None)

    def _holds(self, inp: DecideInput, done: _Placed) -> dict[int, holding.Hold]:
        """``_explain`` on what the passes left; a pool no pass ran in is told as the decision found it."""
        left = dict(done.left)
        if 0 not in left:
            left[0] = holding.PoolLeft(done.capped(inp.regular_free), done.queue_alloc[0].copy())
        if (1 not in left and inp.harvestable is not None
                and ((done.releasable > 0) & (np.asarray(inp.intent) >= INTENT_TRUE)).any()):
            # Only groups waiting in the harvested pool (``_explain``) are told on it.
            harvested = (done.harvested if done.harvested is not None
                         else np.array(inp.harvestable, dtype=np.float64))
            left[1] = holding.PoolLeft(harvested, done.queue_alloc[1].copy())
        if inp.gang is not None and done.placements:  # a gang placed whole: the tasks it left go one at a time
            gang = np.array(inp.gang, dtype=np.int64)
            gang[[g for g, _, _ in done.placements]] = 0
            inp = replace(inp, gang=gang)
        return self._explain(inp, done.releasable, left)

    @staticmethod
    def _promote(inp: DecideInput) -> tuple[NDArray[np.int64], DecideInput]:
        """``harvest.promotions`` of ``inp.promotable`` (with the queues' regular quota), and the input as the
        passes then see it: the promoted pods' demand taken from the regular room and moved from their queue's
        opportunistic allocation to its regular one."""
        pro = inp.promotable
        none = np.zeros(0, np.int64)
        if pro is None or len(pro.node) == 0 or not inp.regular_changed:
            return none, inp
        alloc = np.asarray(inp.queue_alloc, dtype=np.float64)
        quota = None if inp.queue_quota is None else np.asarray(inp.queue_quota, dtype=np.float64) - alloc[0]
        rows, reg = harvest.promotions(pro.demand, pro.node, pro.queue, inp.regular_free, quota)
        if rows.size == 0:
            return none, inp
        alloc = alloc.copy()
        d = np.asarray(pro.demand, dtype=np.float64)[rows]
        q = np.asarray(pro.queue, dtype=np.int64)[rows]
        mine = q >= 0
        np.add.at(alloc[0], q[mine], d[mine])
        np.subtract.at(alloc[1], q[mine], d[mine])
        np.maximum(alloc[1], 0.0, out=alloc[1])
        return rows, replace(inp, regular_free=reg, queue_alloc=alloc)

    def _explain(self, inp: DecideInput, waiting: NDArray[np.int64],
                 left: Mapping[int, holding.PoolLeft]) -> dict[int, holding.Hold]:
        """``holding.explain`` for the groups with ``waiting`` tasks: ``"true"`` groups wait in the harvested pool
        (when the caller harvests), every other in the regular one (tried first)."""
        n_res = np.asarray(inp.pool_total).shape[0]
        pool = (np.where(np.asarray(inp.intent) >= INTENT_TRUE, 1, 0) if inp.harvestable is not None
                else np.zeros(len(inp.group_key), dtype=np.int64))
        gang = np.zeros(len(inp.group_key), dtype=np.int64) if inp.gang is None else np.asarray(inp.gang)
        pool = np.where(gang > 0, 0, pool)  # a gang waits for regular room
        ctx = holding.Context(
            capacity=np.asarray(inp.capacity, dtype=np.float64), pool_total=np.asarray(inp.pool_total),
            queue_name=inp.queue_name, queue_weight=np.asarray(inp.queue_weight, dtype=np.float64),
            queue_quota=inp.queue_quota, queue_opportunistic=np.asarray(inp.queue_opportunistic, dtype=bool),
            node_key=inp.node_key, resources=inp.resources, sample_age_s=inp.sample_age_s,
            stale_after_s=self.settings.harvest.utilization_stale_after_s,
            usage_tolerance=self.knobs.queue_usage_tolerance, share_floor=self.knobs.queue_share_floor)
        demand = np.asarray(inp.shapes, dtype=np.float64)[inp.group_shape]
        pools = [replace(left.get(p) or holding.PoolLeft(np.zeros((len(inp.node_key), n_res)),
                                                         np.asarray(inp.queue_alloc[p])),
                         usage=self.queue_usage(kind, inp.queue_name, inp.now)) for p, kind in enumerate(Pool)]
        return holding.explain(np.asarray(waiting) > 0, pool, demand, np.asarray(inp.group_queue), pools, ctx,
                               gang=gang, count=np.asarray(waiting, dtype=np.int64))

    @staticmethod
    def _fits_some_node(inp: DecideInput, rows: NDArray[np.bool_], avail: NDArray[np.float64]) -> NDArray[np.bool_]:
        """(G,) rows whose shape fits some node's ``avail`` (only the shapes of ``rows`` are checked)."""
        present, shape_of = np.unique(inp.group_shape[rows], return_inverse=True)
        out = np.zeros(rows.shape[0], dtype=bool)
        out[np.flatnonzero(rows)] = alignment.feasible(np.asarray(inp.shapes)[present], avail).any(axis=1)[
            shape_of.reshape(-1)]
        return out

    def _ask_classifier(self, inp: DecideInput, auto: NDArray[np.bool_], eligible: NDArray[np.bool_]) -> None:
        """``auto`` rows stay eligible only if the classifier calls them short; each distinct set of features is
        asked once."""
        assert self.classifier is not None and inp.features is not None
        answers: dict[tuple[tuple[str, str], ...], bool] = {}
        for g in np.flatnonzero(auto).tolist():
            features = inp.features[g]
            if features is None:
                raise ValueError(f"DecideInput.features[{g}] is None: an auto group that may harvest "
                                 "(needs_features) needs its features")
            key = tuple(sorted(features.items()))
            if key not in answers:
                answers[key] = self.classifier.is_short(features)
            eligible[g] = answers[key]

    def _count_skips(self, inp: DecideInput, placements: list[tuple[int, int, Pool]],
                     skipped: NDArray[np.bool_]) -> None:
        """A group that got a task is no longer starved; one passed over counts one more skip."""
        got = {g for g, _, _ in placements}
        for g in got:
            key = inp.group_key[g]
            self.skips.pop(key, None)
            for pool in POOLS:
                self.held.pop((key, pool.value), None)
        for g in np.flatnonzero(skipped).tolist():
            if g not in got:
                key = inp.group_key[g]
                self.skips[key] = self.skips.get(key, 0) + 1

    def _forget(self, inp: DecideInput) -> None:
        """Drop the guard's state of groups that left the view (finished, deleted)."""
        if not self.skips and not self.held:
            return
        known = set(inp.group_key)
        for key in [k for k in self.skips if k not in known]:
            del self.skips[key]
        for hk in [k for k in self.held if k[0] not in known]:
            del self.held[hk]

    # --- job order --------------------------------------------------------------------------------

    def _fsp_arrive(self, inp: DecideInput, left: NDArray[np.float64], demand: NDArray[np.float64],
                    now: float) -> None:
        """New jobs of FSP queues enter their queue's virtual processor-sharing system, sized in "whole
        cluster" seconds on their dominant resource from the estimates; jobs that left the view leave it."""
        fsp_queues = [q for q, order in enumerate(inp.queue_order) if order is JobOrder.FSP]
        if not fsp_queues and not self._fsp_jobs:
            return
        job_queue = np.zeros(len(inp.job_key), dtype=np.int64)
        job_queue[inp.group_job] = inp.group_queue
        present = {key: j for j, key in enumerate(inp.job_key)}
        for job, q in list(self._fsp_jobs.items()):
            j = present.get(job)
            if j is None or inp.queue_name[int(job_queue[j])] != q:
                self._fsp[q].remove(job)
                del self._fsp_jobs[job]
        if not fsp_queues:
            return
        total = np.where(inp.pool_total > 0, inp.pool_total, 1.0)
        size = np.zeros(len(inp.job_key))
        np.add.at(size, inp.group_job, left * (demand / total).max(axis=1, initial=0.0))
        in_fsp = np.isin(job_queue, fsp_queues)
        new = [j for j in np.flatnonzero(in_fsp).tolist() if inp.job_key[j] not in self._fsp_jobs]
        arrival = np.asarray(inp.job_arrival, dtype=np.float64)
        for j in sorted(new, key=lambda j: (arrival[j], j)):
            q = inp.queue_name[int(job_queue[j])]
            tracker = self._fsp.setdefault(q, ordering.FspTracker(1.0))
            t = float(arrival[j]) if math.isfinite(arrival[j]) else now
            if inp.job_key[j] not in tracker:  # one that left the view and came back is still tracked
                tracker.arrive(inp.job_key[j], t, float(size[j]), 1.0)
            self._fsp_jobs[inp.job_key[j]] = q

    def _job_ranks(self, inp: DecideInput, jobs: NDArray[np.int64], work: NDArray[np.float64],
                   now: float) -> NDArray[np.float64]:
        """``dispatch.job_ranks`` per queue; a FIFO or SRTF queue whose jobs, arrivals and (SRTF) work are those of
        the last ask gets the same ranks again. FSP queues are always asked (asking advances their tracker)."""
        job_queue = np.zeros(len(inp.job_key), dtype=np.int64)
        job_queue[inp.group_job] = inp.group_queue
        queues = job_queue[jobs]
        rank = np.empty(jobs.size, dtype=np.float64)
        arrival = np.asarray(inp.job_arrival, dtype=np.float64)

        def fsp_order(q: int) -> list[int]:
            tracker = self._fsp.get(inp.queue_name[q])
            if tracker is None:
                return []
            tracker.advance(now)
            index = {inp.job_key[j]: j for j in np.flatnonzero(job_queue == q).tolist()}
            return [index[k] for k in tracker.order() if k in index]

        for q in np.unique(queues).tolist():
            sel = np.flatnonzero(queues == q)
            js = jobs[sel]
            order = inp.queue_order[q]
            if order is JobOrder.FSP:
                rank[sel] = dispatch.job_ranks(js, job_queue, inp.queue_order, arrival, work, fsp_order)
                continue
            key = js.tobytes() + arrival[js].tobytes() + (work[js].tobytes() if order is JobOrder.SRTF else b"")
            name = inp.queue_name[q]
            kept = self._ranks_kept.get(name)
            if kept is None or kept[0] != key:
                kept = self._ranks_kept[name] = (key, dispatch.job_ranks(js, job_queue, inp.queue_order, arrival,
                                                                         work, fsp_order))
            rank[sel] = kept[1]
        return rank

    # --- fairness over time -----------------------------------------------------------------------

    def queue_usage(self, pool: Pool, names: Sequence[str], now: float) -> NDArray[np.float64] | None:
        """(Q,) the pool's decayed usage at ``now`` listed by ``names``; None with a half-life of 0 (no memory) or
        before the first decision: the pass then takes the dominant shares for the usage."""
        half_life = self.knobs.queue_usage_half_life_s
        if half_life <= 0:
            return None
        before, state = self.usage.get(pool, ((), fairness.QueueUsage()))
        if math.isnan(state.at):
            return None  # nothing recorded yet: the shares held now stand for the past (``QueueUsage.recorded``)
        return state.reordered(before, list(names)).usage_at(now, half_life, len(names))

    def record_usage(self, queue_name: Sequence[str], queue_alloc: NDArray[np.float64], pool_total: NDArray[np.float64],
                     now: float) -> None:
        """Each pool's usage once the allocations are ``queue_alloc`` (2, Q, R) at ``now``: after a decision, or
        for a caller that skips a decision with nothing waiting (the shares still change as tasks finish).
        Unchanged shares keep the state as it is."""
        half_life = self.knobs.queue_usage_half_life_s
        if half_life <= 0 or len(queue_name) == 0:
            return
        names = tuple(queue_name)
        for p, pool in enumerate(Pool):
            before, state = self.usage.get(pool, ((), fairness.QueueUsage()))
            dom = fairness.dominant_shares(queue_alloc[p], pool_total, np.ones(len(names)))
            self.usage[pool] = (names, state.reordered(before, names).recorded(dom, now, half_life))

    # --- state ------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """What the decider learned and holds, JSON-serialisable except the queue usage (``self.usage``, which
        the caller serialises): the classifier, priors, history, the guard's skip counts and holds."""
        return {
            "classifier": self.classifier.state_dict() if self.classifier is not None else None,
            "priors": self.priors.state_dict(),
            "history": self.history.state_dict(),
            "skips": [[k, v] for k, v in sorted(self.skips.items(), key=lambda kv: str(kv[0]))],
            "held": [[k, p, n] for (k, p), n in sorted(self.held.items(), key=lambda kv: (str(kv[0][0]), kv[0][1]))],
        }


def children_of(job: Sequence[Hashable], name: Sequence[str],
                depends_on: Sequence[Sequence[str]]) -> list[list[int]]:
    """``DecideInput.group_children`` from each group's job, name and the names of the groups of its job it
    waits for (``dependsOn``): the operator's view of the chains the simulator reads off its workload."""
    index = {(j, n): g for g, (j, n) in enumerate(zip(job, name, strict=True))}
    out: list[list[int]] = [[] for _ in name]
    for g, deps in enumerate(depends_on):
        for d in deps:
            parent = index.get((job[g], d))
            if parent is not None:
                out[parent].append(g)
    return out


def chains(duration: NDArray[np.float64], children: Sequence[Sequence[int]]) -> NDArray[np.float64]:
    """(G,) each group's duration plus the longest chain of durations through the groups that wait on it."""
    out = np.full(duration.shape[0], np.nan)
    for start in range(duration.shape[0]):
        stack, open_ = [start], {start}
        while stack:  # iterative depth-first: a deep chain of barriers cannot overflow the call stack
            g = stack[-1]
            todo = [c for c in children[g] if np.isnan(out[c]) and c not in open_]  # (a cycle is cut)
            if todo:  # one at a time: the stack is then a path, and open_ its groups
                stack.append(todo[0])
                open_.add(todo[0])
                continue
            open_.discard(g)
            stack.pop()
            out[g] = duration[g] + max((out[c] for c in children[g] if not np.isnan(out[c])), default=0.0)
    return out
