"""The dispatcher: the operator's side of the one decision (``stowage.policy.decide``).

Plain records in (``DispatchView``, filled by the operator from its informers, the Job book and Prometheus),
plain records out (``Release``). ``Dispatcher.decide`` lines the view up as arrays (``dispatch_arrays``), hands
them to ``decide.Decider`` (the very decision the simulator's packing presets run: estimates, regular pass,
opportunistic pass, quotas, starvation guard, fairness over time) and aggregates its placements into releases.
No Kubernetes I/O here; the clock is injected.

What is the operator's own: tasks released by an earlier ``decide`` and not yet bound (``PendingGroup.unbound``)
keep their demand on the node they were released for, so a slow scheduler does not make the same capacity
count twice; the state a restarted operator reads back (``state_dict``: what the decider learned, the guard's
counts and holds, where unbound releases went, the decayed queue usage); and the queue numbers it publishes
(``queue_shares``).

Fairness over time (``packing.queue_usage_half_life_s`` > 0): the time the operator was down counts as the
shares of its last decision held throughout, as the pods it had released ran on; the state a restarted
operator loads is therefore the same until its decisions change the shares, and it writes nothing new.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray
from stowage.operator import queue_shares, usage_state
from stowage.operator.dispatch_arrays import (
    ViewArrays,
    bandwidth_mask,
    harvestable,
    job_arrival,
    promotable_arrays,
    queue_quota,
    queue_records,
    view_arrays,
)
from stowage.operator.dispatch_records import (
    DispatchView,
    NodeRecord,
    PendingGroup,
    QueueRecord,
    QueueShare,
    Release,
    RunningPod,
)

from stowage.config import StowageSettings
from stowage.labels import Opportunistic, PodClass
from stowage.model import Pool
from stowage.policy import classifier, decide, dispatch, estimates, holding, snapshot, tolerances

__all__ = [
    "DispatchView",
    "Dispatcher",
    "NodeRecord",
    "PendingGroup",
    "QueueRecord",
    "QueueShare",
    "Release",
    "RunningPod",
]

_STATE_VERSION = 5  # 5: decayed queue usage; 4: estimates (priors, history); 3: queue deficits; 2: classifier
_READS = (2, 3, 4, 5)  # earlier versions load with what they had; the rest starts empty
_POOLS = decide.POOLS
_INTENT = {Opportunistic.FALSE: decide.INTENT_FALSE, Opportunistic.AUTO: decide.INTENT_AUTO,
           Opportunistic.TRUE: decide.INTENT_TRUE}


def _sample_age(node: NodeRecord) -> float:
    """The node's sample age for ``decide.DecideInput.sample_age_s``: NaN when it does not harvest; a node with a
    usage but no age (a caller that states only fresh usage) counts as fresh."""
    if not node.harvest:
        return math.nan
    return 0.0 if node.usage is not None and not math.isfinite(node.sample_age_s) else node.sample_age_s


class Dispatcher:
    """Decides releases from a ``DispatchView`` with one ``decide.Decider``; keeps where unbound releases went."""

    def __init__(self, settings: StowageSettings, clock: Callable[[], float] = time.time, *,
                 on_pass: Callable[[Pool, dispatch.PassInput, dispatch.PassResult], None] | None = None,
                 explain: bool = True) -> None:
        """``on_pass``: called after each pass with its input and result (benchmarks, debugging); ``explain``:
        each decision says why the groups it left waiting wait (``holds``)."""
        self.settings = settings
        self.clock = clock
        self.explain = explain
        self.decider = decide.Decider(settings, on_pass=on_pass)
        self._released: dict[str, list[tuple[str, str]]] = {}  # group key → (node, pool) of recent releases
        self.holds: dict[str, holding.Hold] = {}
        """group key → why its tasks wait, at the last decision (``holding``): the groups it left waiting."""
        self.promote: Callable[[RunningPod], bool] | None = None
        """Which running opportunistic pods may be promoted in place (UBIS §IV-D); None: promotion is off (the
        cluster cannot resize pods). The operator sets it once it knows."""
        self.promoted: list[RunningPod] = []
        """The running pods the last decision promoted, in order (``decide.Decision.promoted``)."""

    @property
    def classifier(self) -> classifier.ShortLongClassifier:
        assert self.decider.classifier is not None
        return self.decider.classifier

    # --- learning and state ----------------------------------------------------------------------

    def observe_finished(self, features: Mapping[str, Any], durations_s: Sequence[float], *, queue: str = "",
                         group_key: str | None = None, recurring_key: str | None = None,
                         group: str = "") -> tuple[float, str] | None:
        """Learn from finished tasks of one group, their run times in the order they finished
        (``Decider.observe_finished``: the classifier, the queue's duration prior, the recurring history);
        returns the (estimate, source) the last decision held for ``group_key``."""
        return self.decider.observe_finished(features, durations_s, queue=queue, group=group,
                                             recurring_key=recurring_key, group_key=group_key)

    def observe_use(self, recurring_key: str, group: str, used: Mapping[str, float]) -> None:
        """Learn one finished task's sustained disk and network use, resource → use ÷ declared, into the recurring
        history (``estimates.RecurringHistory.observe_use``): the next runs' ``history`` row of
        ``policy.use_estimates``."""
        self.decider.history.observe_use(recurring_key, group, used)

    def estimates(self) -> dict[Hashable, tuple[float, str]]:
        """group key → (task duration estimate, source name) at the last decision."""
        return self.decider.estimates()

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state a restarted operator needs: what the decider learned (classifier, duration
        priors, recurring history), the starvation guard's counts and holds, where unbound releases were placed,
        and each pool's decayed queue usage (``usage_state``; none while ``packing.queue_usage_half_life_s`` is 0).
        FSP trackers are rebuilt from the jobs' arrival times."""
        inner = self.decider.state_dict()
        return {
            "version": _STATE_VERSION,
            "classifier": inner["classifier"],
            "priors": inner["priors"],
            "history": inner["history"],
            "skips": {str(k): v for k, v in inner["skips"]},
            "held": inner["held"],
            "released": {key: [list(x) for x in v] for key, v in sorted(self._released.items())},
            "usage": usage_state.to_state(self.decider.usage),
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore ``state_dict()``'s output. Raises ``ValueError``/``KeyError``/``TypeError`` if malformed.

        The classifier comes back through ``ShortLongClassifier.from_state`` (its counts, O(distinct feature
        values)). Its labels were given under its ``short_task_threshold_s``: a state learned under another
        threshold than the settings' is refused (``ValueError``) rather than mixed.

        Versions 2 and 3 (before estimates) start with no learned priors or history; versions 3 and 4 saved queue
        deficits, whose last shares become the usage (``usage_state.from_deficits``); version 2 starts every
        queue at no usage. With ``packing.queue_usage_half_life_s`` 0 the usage is dropped (nothing would keep it
        current). A queue deleted meanwhile drops out at the next decision, one added starts at 0
        (``QueueUsage.reordered``); the downtime counts as the last shares held (module docstring).
        """
        version = int(state["version"])
        if version not in _READS:
            raise ValueError(f"version: this operator reads state versions {_READS}, got {state['version']!r}")
        fresh = classifier.ShortLongClassifier.from_state(state["classifier"])
        if fresh.threshold_s != self.classifier.threshold_s:
            raise ValueError(f"classifier.threshold_s: learned under {fresh.threshold_s:g} s, the settings say "
                             f"{self.classifier.threshold_s:g} s (classifier.short_task_threshold_s)")
        est = self.settings.estimates
        priors = (estimates.DurationPriors.from_state(state["priors"], est) if version >= 4
                  else estimates.DurationPriors(est))
        history = (estimates.RecurringHistory.from_state(state["history"], est) if version >= 4
                   else estimates.RecurringHistory(est))
        skips = {str(k): int(v) for k, v in state["skips"].items()}
        held = {(str(k), str(p)): str(n) for k, p, n in state["held"]}
        released = {str(k): [(str(n), str(p)) for n, p in v] for k, v in state["released"].items()}
        usage = (usage_state.from_state(state.get("usage")) if version >= 5
                 else usage_state.from_deficits(state.get("deficits")) if version >= 3 else {})
        d = self.decider
        d.classifier, d.priors, d.history = fresh, priors, history
        d.skips, d.held = dict(skips), dict(held)
        self._released = released
        d.usage = usage if self.settings.packing.queue_usage_half_life_s > 0 else {}

    def held(self) -> dict[tuple[str, str], str]:
        """(group key, pool) → node held for a starved group (the starvation guard's reservations)."""
        return {(str(k), str(p)): str(n) for (k, p), n in self.decider.held.items()}

    # --- the decision ----------------------------------------------------------------------------

    def decide(self, view: DispatchView) -> list[Release]:
        """One ``decide.Decider.decide`` on the view; releases in the order they were chosen.

        The groups of a Draining queue enter it with nothing releasable (their unbound releases still hold their
        room), and are held with reason ``draining`` (``holding.draining``): the decision itself never sees a
        queue state, as the simulator's does not."""
        now = self.clock()
        draining = {q.name for q in view.queues if q.draining}
        drained = [g for g in view.groups if g.queue in draining and g.releasable > 0] if draining else []
        if drained:
            view = dataclasses.replace(view, groups=[dataclasses.replace(g, releasable=0) if g.queue in draining
                                                     else g for g in view.groups])
        a = self._arrays(view, trim=True)
        self._forget({g.key for g in a.groups})
        pods = self._promotable(view, a)
        inp = self.decide_input(view, a, now, pods)
        decision = self.decider.decide(inp)
        self.holds = {a.groups[g].key: hold for g, hold in decision.holds.items()}
        self.holds.update({g.key: holding.draining(g.queue) for g in drained})
        self.promoted = [pods[i] for i in decision.promoted.tolist()]
        return self._releases(a, decision.placements)

    def _promotable(self, view: DispatchView, a: ViewArrays) -> list[RunningPod]:
        """The running opportunistic pods of known queues on known nodes that ``promote`` accepts, oldest first
        (by start, else bind time: the most work at stake first); [] while promotion is off."""
        if self.promote is None:
            return []
        queues = {q.name for q in queue_records(view)}
        nodes = set(a.node_names)
        pods = [p for p in view.running if p.opportunistic and p.queue in queues and p.node in nodes and p.key
                and self.promote(p)]
        return sorted(pods, key=lambda p: (_started(p), p.key))

    def decide_input(self, view: DispatchView, a: ViewArrays, now: float,
                     promotable: Sequence[RunningPod] | None = None) -> decide.DecideInput:
        """The view as ``decide.DecideInput`` (the arrays ``_arrays`` built, unbound releases reserved), through
        the builder the simulator uses too (``snapshot.build``); ``promotable``: the running opportunistic pods
        promotion may walk, in order (None: promotion is off).

        The harvestable room and the classifier's features are built before the decision, and only when it may
        read them (``snapshot.build`` asks ``decide.needs_harvestable``, ``decide.needs_features``): no group that
        may harvest, no room computed."""
        queues = queue_records(view)
        groups = a.groups
        packed = a.estimated if a.estimated is not None else a.demand  # disk and network by estimated use
        shapes, group_shape = snapshot.shapes_of(packed.reshape(len(groups), len(a.resources)))
        mean_cap = a.alloc.mean(axis=0) if a.node_names else np.zeros(len(a.resources))
        snap = snapshot.PassSnapshot(
            now=now, capacity=a.alloc, regular_requests=a.reg_alloc, bandwidth=bandwidth_mask(a), shapes=shapes,
            regular_bandwidth=a.reg_bandwidth, bandwidth_fill=self.settings.estimates.bandwidth_fill,
            group_shape=group_shape, group_key=[g.key for g in groups], group_job=a.job, group_queue=a.queue,
            releasable=np.array([max(g.releasable, 0) for g in groups], dtype=np.int64),
            remaining=np.array([max(g.remaining_tasks, 0) for g in groups], dtype=np.int64),
            intent=np.array([decide.INTENT_CONVERTED if g.converted else _INTENT[g.intent] for g in groups],
                            dtype=np.int64),
            finished=np.array([g.finished_tasks for g in groups], dtype=np.int64),
            finished_fraction=np.array([g.finished_fraction for g in groups], dtype=np.float64),
            finished_mean_s=np.array([g.finished_mean_s for g in groups], dtype=np.float64),
            hint_s=np.array([g.expected_duration_s for g in groups], dtype=np.float64),
            elapsed_s=np.array([g.running_elapsed_s for g in groups], dtype=np.float64),
            history_s=np.array([self.decider.history.get(g.recurring_key, g.group)
                                if g.recurring_key is not None else np.nan for g in groups], dtype=np.float64),
            job_key=a.job_keys, job_arrival=job_arrival(a), queue_name=[q.name for q in queues],
            queue_weight=np.array([q.weight for q in queues], dtype=np.float64),
            queue_order=[q.job_order for q in queues],
            queue_opportunistic=np.array([q.opportunistic for q in queues], dtype=bool),
            queue_alloc=a.queue_alloc, node_key=a.node_names, queue_quota=queue_quota(a, queues),
            explain=self.explain, resources=a.resources,
            sample_age_s=np.array([_sample_age(n) for n in view.nodes], dtype=np.float64),
            promotable=promotable_arrays(a, queues, promotable),
            gang=np.array([max(g.gang, 0) for g in groups], dtype=np.int64) if any(g.gang > 0 for g in groups)
            else None,
            group_children=decide.children_of([g.job or g.key for g in groups], [g.group for g in groups],
                                              [g.depends_on for g in groups])
            if self.settings.packing.critical_path_fraction > 0 else None)
        return snapshot.build(
            snap, features=lambda g: self._features(a, g, mean_cap),
            harvestable=lambda: harvestable(self.settings.harvest, view, a, now,
                                            period_s=self.settings.contention.sample_interval_s))

    def _releases(self, a: ViewArrays, placed: Sequence[tuple[int, int, Pool]]) -> list[Release]:
        """Aggregate placements per (group, class, node), first-chosen first; remember where each went."""
        counts: dict[tuple[int, PodClass, int], int] = {}
        for g, n, pool in placed:
            cls = PodClass.REGULAR if pool is Pool.REGULAR else PodClass.OPPORTUNISTIC
            counts[(g, cls, n)] = counts.get((g, cls, n), 0) + 1
            self._released.setdefault(a.groups[g].key, []).append((a.node_names[n], pool.value))
        return [Release(a.groups[g].key, k, cls, a.node_names[n]) for (g, cls, n), k in counts.items()]

    # --- queue numbers ---------------------------------------------------------------------------

    def queue_shares(self, view: DispatchView) -> list[QueueShare]:
        """Per queue: allocation, dominant share per pool, fair share and usage target (``queue_shares``), from the
        view as a pass sees it."""
        now = self.clock()
        return queue_shares.queue_shares(self._arrays(view), view,
                                         lambda pool, names: self.decider.queue_usage(pool, names, now))

    # --- building arrays -------------------------------------------------------------------------

    def _arrays(self, view: DispatchView, *, trim: bool = False) -> ViewArrays:
        """``dispatch_arrays.view_arrays`` plus the released-but-unbound tasks where they were released."""
        a = view_arrays(view, self.settings.estimates, self.decider.history)
        self._reserve_unbound(a, {name: i for i, name in enumerate(a.node_names)}, trim=trim)
        return a

    def _reserve_unbound(self, a: ViewArrays, node_index: Mapping[str, int], *, trim: bool) -> None:
        """Released-but-unbound tasks hold their demand where they were released.

        The newest ``unbound`` releases of a group are taken as the unbound ones (earlier releases bind
        first); ``trim`` forgets the older ones (``decide`` does, before adding its own). kube-scheduler may bind
        a release on another node than planned (the node hint is off by default), taking the slot planned for
        a release still unbound: a regular release whose planned node no longer has its room is held where it
        now fits (``_regular_slot``), so the slot its peer left free is not released a second time.
        """
        placed: list[tuple[int, int]] = []  # (node, group) of the unbound releases whose node is known
        for g, group in enumerate(a.groups):
            recent = self._released.get(group.key, [])
            keep = recent[len(recent) - group.unbound:] if group.unbound > 0 else []
            if trim and keep:
                self._released[group.key] = keep
            elif trim:
                self._released.pop(group.key, None)
            for k in range(max(group.unbound, 0)):
                pool = keep[k][1] if k < len(keep) else Pool.REGULAR.value  # unknown (restart): count as regular
                p = 0 if pool == Pool.REGULAR.value else 1
                a.queue_alloc[p, a.queue[g]] += a.demand[g]
                n = node_index.get(keep[k][0]) if k < len(keep) else None
                if n is not None:
                    if p == 0:
                        n = _regular_slot(a, n, a.demand[g] if a.estimated is None else a.estimated[g])
                    (a.reg_alloc if p == 0 else a.opp_alloc)[n] += a.demand[g]
                    if p == 0 and a.reg_bandwidth is not None and a.estimated is not None:
                        a.reg_bandwidth[n] += a.estimated[g]  # reserved as its group is packed
                    placed.append((n, g))
        if placed:  # about to bind: in the ramp-up allowance S as just bound (NaN), as the extender will count them
            nodes, groups = np.array(placed, dtype=np.int64).T
            demands, on, bound = a.bound_pods
            a.bound_pods = (np.concatenate([demands.reshape(-1, len(a.resources)), a.demand[groups]]),
                            np.concatenate([on, nodes]), np.concatenate([bound, np.full(len(placed), np.nan)]))

    def _forget(self, known: set[str]) -> None:
        """Drop where the releases of groups that left the view went (the decider forgets its own state)."""
        for key in [k for k in self._released if k not in known]:
            del self._released[key]

    def _features(self, a: ViewArrays, g: int, mean_cap: NDArray[np.float64]) -> Mapping[str, str]:
        """What the classifier is asked about group ``g``'s tasks: the features a finished task of it teaches
        (``learning.lessons``), so the demand names the group's own resources, not every column of the view
        (a ``disk=0`` no lesson carries would make the finest level of every question one never seen)."""
        group = a.groups[g]
        if group.features is not None:
            return group.features
        job = group.recurring_key  # None (a plain gated pod): its job's or its own name, by the same rule
        if job is None:
            job = estimates.recurring_key(group.namespace, (group.job or group.key).rsplit("/", 1)[-1])
        mean = dict(zip(a.resources, mean_cap.tolist(), strict=True))
        return classifier.task_features(group.queue, job, group.group, {r: float(v) for r, v in group.demand.items()},
                                        mean, group.job_progress)


def _started(pod: RunningPod) -> float:
    """When the pod started (else was bound; +inf when neither is known): promotion walks the oldest first."""
    for t in (pod.started_at_s, pod.bound_at_s):
        if t is not None and math.isfinite(t):
            return t
    return math.inf


def _regular_slot(a: ViewArrays, planned: int, demand: NDArray[np.float64]) -> int:
    """Where an unbound regular release holds its demand: its planned node while it still has the room, else
    the node with the most room left among those it fits, else (it fits nowhere) the planned node."""
    need = demand * (1 - tolerances.FEASIBILITY_RTOL)
    bw = bandwidth_mask(a)

    def held(rows: NDArray[np.float64], bandwidth: NDArray[np.float64] | None) -> NDArray[np.float64]:
        return rows if bandwidth is None else np.where(bw, bandwidth, rows)  # bandwidth as it is packed

    if (a.alloc[planned] - held(a.reg_alloc[planned], None if a.reg_bandwidth is None else a.reg_bandwidth[planned])
            >= need).all():  # the common case: one row, not every node's
        return planned
    room = a.alloc - held(a.reg_alloc, a.reg_bandwidth)
    fits = (room >= need).all(axis=1)
    if not fits.any():
        return planned
    share = np.divide(room - demand, a.alloc, out=np.zeros_like(room), where=a.alloc > 0).min(axis=1)
    return int(np.flatnonzero(fits)[np.argmax(share[fits])])
