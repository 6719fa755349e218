"""Sustained contention on a node and what to do about it (UBIS §IV-C, OPERA §III-C Algorithm 1).

One call of :func:`step` is one monitor sample of one node (the node monitor
samples every ``sample_interval_s``, UBIS §V-A: 1 s). Per resource ``r``:

    over_r      = U_r > T_preempt,r · C_r                    (UBIS §IV-C; OPERA CRes, ρ·C)
    count_r     ← count_r + 1 if over_r else 0
    sustained_r = count_r ≥ K_r                              (UBIS §V-A: 3 consecutive checks)

with ``K_r`` = ``sustained_count_cpu`` (6) on cpu and ``sustained_count`` (3) elsewhere. While opportunistic pods
contend for cpu the regular pods keep their share (cpu.weight), so an overshoot slows only the opportunistic pods and
a burst or a new pod's ramp-up passes without an eviction (UBIS §IV-C: "for malleable resources like CPU, we can
tolerate 100% utilization for short bursts of time"); memory fails tasks, and disk and network are shared in
proportion, so an overshoot there slows the regular pods too (:func:`sustained_counts`).

and the policy (OPERA Alg. 1 ``RelieveContention``) picks the resources it acts on:

    AGGRESSIVE  relieve = sustained ∧ (r = memory)           (Alg. 1 l.19–20)
    NEUTRAL     relieve = sustained                          (l.21–22)
    PRESERVE    relieve = sustained, plus blocked resources  (l.23–33)

Nothing is relieved on a node without opportunistic pods (Alg. 1 l.8: no
opportunistic task, no contention of ours to relieve); ``over`` and
``sustained`` are still reported so the extender can keep new pods away.
After acting on resource ``r`` its count restarts at 0: the next action on ``r``
needs another ``sustained_count`` consecutive samples over the threshold, which
gives the evictions time to show in the usage (UBIS: "preempt enough, then let
the scheduler follow up").

PRESERVE blocked resources ``BR`` (absolute amounts, per resource) and block time
``BT`` (s), with ``α = settings.alpha``, ``f0/fmax = blocked_initial/max_fraction``,
``BT0/BTmax = block_time_initial/max_s``:

* on an action at time ``now`` (some resource relieved):
  if nothing is blocked (first contention, or the block has decayed away):
  ``BR_r = f0·C_r`` on the relieved resources, ``BT = BT0``; otherwise (a new
  contention inside the block window) ``BR ← min(α·BR, fmax·C)`` and relieved
  resources not yet blocked get ``f0·C_r``, ``BT ← min(α·BT, BTmax)``;
  ``last_relief = now`` (Alg. 1 l.24–28).
* on a sample without action, if ``now − last_relief > BT``: ``BR ← BR/α``,
  ``BT ← max(BT/α, BT0)``, ``last_relief = now`` (l.29–33); an amount that falls
  below ``f0·C_r`` is released to 0, and once nothing is blocked the block
  window closes (``BT = 0``), so the next contention starts again from ``f0``/``BT0``.

The harvest side subtracts ``BR`` from harvestable capacity (OPERA Eq. 4).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
from numpy.typing import ArrayLike, NDArray

from stowage.config import ContentionPolicy, ContentionSettings
from stowage.errors import InvalidInput
from stowage.policy.tolerances import ROUNDING_EPS
from stowage.resources import CPU, MEMORY

__all__ = ["ContentionDecision", "ContentionState", "Nodes", "choose_victims", "over_threshold", "step",
           "sustained_counts", "thresholds"]

def _readonly(a: NDArray) -> NDArray:
    a = np.array(a, copy=True)
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)  # numpy fields: compare arrays explicitly
class ContentionState:
    """What the monitor remembers about one node between samples.

    ``over_counts`` (R,) consecutive over-threshold samples; ``blocked`` (R,)
    absolute amounts held back from harvesting (OPERA ``BR_i``; resource units);
    ``block_time_s`` the block window (``BT_i``; 0 when nothing is blocked);
    ``last_relief_s`` time of the last action or decay step (None before any);
    ``contentions`` total actions taken on this node.
    """

    over_counts: NDArray[np.int64]
    blocked: NDArray[np.float64]
    block_time_s: float = 0.0
    last_relief_s: float | None = None
    contentions: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "over_counts", _readonly(np.asarray(self.over_counts, dtype=np.int64)))
        object.__setattr__(self, "blocked", _readonly(np.asarray(self.blocked, dtype=np.float64)))

    @classmethod
    def initial(cls, n_resources: int) -> ContentionState:
        """No history: zero counts, nothing blocked, no block window."""
        return cls(np.zeros(n_resources, dtype=np.int64), np.zeros(n_resources))


@dataclass(frozen=True, eq=False)  # numpy fields: compare arrays explicitly
class ContentionDecision:
    """The outcome of one sample, per resource (R,).

    ``over``: this sample is above ``T_preempt·C``; ``sustained``: for at least
    ``sustained_count`` consecutive samples; ``relieve``: resources the policy acts
    on now (evict opportunistic pods, see :func:`choose_victims`); ``blocked``:
    amounts held back from harvesting after this sample.
    """

    over: NDArray[np.bool_]
    sustained: NDArray[np.bool_]
    relieve: NDArray[np.bool_]
    blocked: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))

    @property
    def acts(self) -> bool:
        """True when at least one resource is relieved now."""
        return bool(self.relieve.any())


def _clean(values: ArrayLike, name: str, n: int) -> NDArray[np.float64]:
    v = np.asarray(values, dtype=np.float64)
    if v.ndim == 0:
        v = np.full(n, float(v))
    if v.shape != (n,):
        raise InvalidInput(name, v.shape, f"must have one entry per resource ({n})")
    return np.where(np.isfinite(v), np.maximum(v, 0.0), 0.0)


def thresholds(settings: ContentionSettings, resources: tuple[str, ...], capacity: ArrayLike) -> NDArray[np.float64]:
    """``T_preempt,r · C_r`` for one node (R,) or many (N, R): the usage above which a resource is over, and down to
    which ``choose_victims`` relieves it."""
    return settings.t_preempt.array(resources) * np.asarray(capacity, dtype=np.float64)


def over_threshold(usage: NDArray[np.float64], capacity: NDArray[np.float64],
                   threshold: NDArray[np.float64]) -> NDArray[np.bool_]:
    """``over_r = C_r > 0 ∧ U_r > T_preempt,r·C_r`` on cleaned usage and capacity (``threshold`` = ``T·C``), for one
    node (R,) or many (N, R): a resource with zero capacity is never over."""
    return (capacity > 0) & (usage > threshold)


def sustained_counts(settings: ContentionSettings, resources: tuple[str, ...]) -> NDArray[np.int64]:
    """(R,) ``K_r``, the consecutive over-threshold samples before acting on each resource (module docstring):
    ``sustained_count_cpu`` on cpu, ``sustained_count`` elsewhere; at least 1."""
    counts = [settings.sustained_count_cpu if r == CPU else settings.sustained_count for r in resources]
    return np.maximum(np.array(counts, dtype=np.int64), 1)


def step(
    state: ContentionState,
    usage: ArrayLike,
    capacity: ArrayLike,
    now_s: float,
    settings: ContentionSettings,
    resources: tuple[str, ...],
    has_opportunistic: bool = True,
) -> tuple[ContentionState, ContentionDecision]:
    """Advance one node's contention state by one monitor sample (module docstring for the rules).

    ``usage``, ``capacity``: (R,) in resource units, aligned with ``resources``;
    NaN or negative entries count as 0, and a resource with zero capacity is never
    over. ``now_s``: sample time in seconds (monotone; it only drives PRESERVE's
    block window). Pure: returns the new state and the decision.
    """
    n = len(resources)
    if state.over_counts.shape != (n,):
        raise InvalidInput("state.over_counts", state.over_counts.shape, f"must have one entry per resource ({n})")
    u = _clean(usage, "usage", n)
    c = _clean(capacity, "capacity", n)
    over = over_threshold(u, c, thresholds(settings, resources, c))
    counts = np.where(over, state.over_counts + 1, 0)
    sustained = counts >= sustained_counts(settings, resources)

    policy = ContentionPolicy(settings.policy)
    if not has_opportunistic:
        relieve = np.zeros(n, dtype=bool)
    elif policy is ContentionPolicy.AGGRESSIVE:
        # Memory contention fails tasks; CPU contention only slows them (OPERA §III-C).
        relieve = sustained & np.array([r == MEMORY for r in resources], dtype=bool)
    else:
        relieve = sustained.copy()
    counts = np.where(relieve, 0, counts)  # the next action needs a fresh sustained period

    blocked, bt, last = state.blocked.astype(np.float64), float(state.block_time_s), state.last_relief_s
    contentions = state.contentions + int(relieve.any())
    now = float(now_s)
    if policy is ContentionPolicy.PRESERVE:
        blocked, bt, last = _preserve(blocked, bt, last, relieve, c, now, settings)
    else:
        blocked = np.zeros(n)
    if relieve.any() and policy is not ContentionPolicy.PRESERVE:
        last = now

    new_state = replace(
        state,
        over_counts=counts.astype(np.int64),
        blocked=blocked,
        block_time_s=bt,
        last_relief_s=last,
        contentions=contentions,
    )
    return new_state, ContentionDecision(over=over, sustained=sustained, relieve=relieve, blocked=_readonly(blocked))


class Nodes:
    """``step`` on N nodes at once, one call per sample, for a caller that watches many (the simulator's monitor).

    ``step`` is called on the nodes where it can change something. The others are known without calling it:

    * a node with no opportunistic pod and nothing blocked (``quiet``): nothing is relieved (no opportunistic pod)
      and PRESERVE has nothing to decay (only ``B > 0`` decays), so ``step`` changes only its counts; they are
      advanced here for all such nodes at once and handed to its state when it next matters (``state``);
    * a node with nothing over, no count running and, if something is blocked, still inside PRESERVE's block
      window (``now − last_relief ≤ BT``): ``step`` would return its state as it is.

    ``tests/policy/test_contention.py`` checks this against ``step`` on every node at every sample.
    """

    def __init__(self, n_nodes: int, settings: ContentionSettings, resources: tuple[str, ...]) -> None:
        self.settings, self.resources = settings, resources
        self._states = [ContentionState.initial(len(resources)) for _ in range(n_nodes)]
        self.counts = np.zeros((n_nodes, len(resources)), dtype=np.int64)
        """(N, R) each node's ``over_counts`` (its state's may lag behind on a quiet node)."""
        self.blocked = np.zeros((n_nodes, len(resources)))
        """(N, R) each node's blocked amounts after the last sample (``ContentionDecision.blocked``)."""
        self._blocked_any = np.zeros(n_nodes, dtype=bool)

    def state(self, n: int) -> ContentionState:
        """Node ``n``'s state, as ``step`` on every sample would have left it."""
        state = self._states[n]
        if not np.array_equal(state.over_counts, self.counts[n]):
            state = self._states[n] = replace(state, over_counts=self.counts[n].copy())
        return state

    def step(self, usage: NDArray[np.float64], capacity: NDArray[np.float64], now_s: float,
             has_opportunistic: NDArray[np.bool_]) -> list[tuple[int, ContentionDecision]]:
        """One sample of every node: ``usage``, ``capacity`` (N, R) as ``step`` takes them, ``has_opportunistic``
        (N,). Returns (node, decision) for the nodes ``step`` was called on, in node order; the others' decisions
        relieve nothing and leave ``blocked`` as it was."""
        u = np.where(np.isfinite(usage), np.maximum(usage, 0.0), 0.0)
        c = np.where(np.isfinite(capacity), np.maximum(capacity, 0.0), 0.0)
        over = over_threshold(u, c, thresholds(self.settings, self.resources, c))
        quiet = ~np.asarray(has_opportunistic, dtype=bool) & ~self._blocked_any
        self.counts[quiet] = np.where(over[quiet], self.counts[quiet] + 1, 0)
        out: list[tuple[int, ContentionDecision]] = []
        now = float(now_s)
        for n in np.flatnonzero(~quiet & (over.any(axis=1) | self.counts.any(axis=1) | self._blocked_any)).tolist():
            state = self._states[n]
            if (not over[n].any() and not self.counts[n].any() and state.last_relief_s is not None
                    and now - state.last_relief_s <= state.block_time_s):
                continue  # inside the block window, nothing over: step decays nothing (``_preserve``)
            state, decision = step(self.state(n), u[n], c[n], now, self.settings, self.resources,
                                   bool(has_opportunistic[n]))
            self._states[n] = state
            self.counts[n] = state.over_counts
            self.blocked[n] = decision.blocked
            self._blocked_any[n] = bool(decision.blocked.any())
            out.append((n, decision))
        return out


def _preserve(
    blocked: NDArray[np.float64],
    bt: float,
    last: float | None,
    relieve: NDArray[np.bool_],
    capacity: NDArray[np.float64],
    now: float,
    s: ContentionSettings,
) -> tuple[NDArray[np.float64], float, float | None]:
    """OPERA Alg. 1 l.23–33 with initial values, caps and release (module docstring)."""
    alpha = max(float(s.alpha), 1.0)
    floor = s.blocked_initial_fraction * capacity
    cap = s.blocked_max_fraction * capacity
    if relieve.any():
        if not (blocked > 0).any():
            # First contention (or the previous block decayed away): start small.
            blocked = np.where(relieve, floor, 0.0)
            bt = s.block_time_initial_s
        else:
            blocked = np.where(blocked > 0, alpha * blocked, np.where(relieve, floor, 0.0))
            bt = alpha * bt
        blocked = np.minimum(blocked, cap)
        bt = min(max(bt, s.block_time_initial_s), s.block_time_max_s)
        return blocked, bt, now
    if last is not None and (blocked > 0).any() and now - last > bt:
        # A quiet window of BT: relax one step.
        blocked = blocked / alpha
        blocked = np.where(blocked < floor - ROUNDING_EPS * np.maximum(capacity, 1.0), 0.0, blocked)
        bt = max(bt / alpha, s.block_time_initial_s)
        last = now
        if not (blocked > 0).any():
            bt = 0.0  # the block is lifted: no window until the next contention
    return blocked, bt, last


def choose_victims(
    pod_usage: ArrayLike,
    started_at_s: ArrayLike,
    opportunistic: ArrayLike,
    node_usage: ArrayLike,
    threshold: ArrayLike,
    relieve: ArrayLike,
    lost_work: ArrayLike | None = None,
    *,
    now_s: float,
) -> list[int]:
    """Opportunistic pods to evict so usage on every relieved resource drops to the threshold, losing little work.

    Rule (UBIS §IV-C "preempt enough opportunistic containers to bring the
    utilization under the threshold"; OPERA §III-C "kill the most recently
    launched opportunistic task", i.e. the one that loses the least work):
    candidates are opportunistic pods whose usage on some relieved resource is
    positive. Each pod would lose ``lost_work`` (seconds of work done; default:
    how long it has run, ``now_s`` − its start, so the order is newest first).
    Two plans, each the shortest prefix of an order with

        node_usage_r − Σ_{victims} pod_usage_r ≤ threshold_r   for every relieved r,

    then pruned (from the most work lost down, a victim the others cover
    without is spared):

    * least work lost first (ties: newest, then larger ``Σ_{r relieved}
      usage_r/threshold_r``, then index): newest first, as the papers say;
    * least work lost per unit of relief first: one older pod that frees
      enough can cost less than several new ones that each free a little
      (run times count from now: from the newest start, the newest pod would
      lose nothing and several new ones always look cheaper than one older).

    The plan that loses less work in total wins (ties: the first). If even all
    candidates cannot bring usage under, return all candidates. Never a
    non-opportunistic pod; empty when nothing is relieved or usage is already
    under the threshold. Victims are listed newest first (least work lost first).

    Shapes: ``pod_usage`` (P,R), ``started_at_s`` (P,), ``opportunistic`` (P,)
    bool, ``node_usage``/``threshold`` (R,) in resource units, ``relieve`` (R,)
    bool, ``now_s`` on the clock of ``started_at_s``, ``lost_work`` (P,) seconds
    (for a caller that knows more than the run time; NaN: from its start; the
    node monitor and the simulator pass none: a node knows when a pod started,
    not how far it got). NaN or negative usage counts as 0; NaN start times
    count as oldest.
    """
    rel = np.asarray(relieve, dtype=bool)
    n_res = rel.shape[0]
    usage = np.asarray(pod_usage, dtype=np.float64).reshape(-1, n_res) if n_res else np.zeros((0, 0))
    n_pods = usage.shape[0]
    if not rel.any() or n_pods == 0:
        return []
    usage = np.where(np.isfinite(usage), np.maximum(usage, 0.0), 0.0)
    started = np.asarray(started_at_s, dtype=np.float64).reshape(n_pods)
    started = np.where(np.isnan(started), -np.inf, started)
    opp = np.asarray(opportunistic, dtype=bool).reshape(n_pods)
    node = _clean(node_usage, "node_usage", n_res)[rel]
    thr = _clean(threshold, "threshold", n_res)[rel]
    need = node - thr
    tol = ROUNDING_EPS * np.maximum(np.abs(thr), 1.0)  # this close to the threshold is under it: sums are inexact
    if (need <= tol).all():
        return []
    on_relieved = usage[:, rel]
    helps = opp & (on_relieved > 0).any(axis=1)
    candidates = np.flatnonzero(helps)
    if candidates.size == 0:
        return []
    lost = _lost_work(started, lost_work, now_s)
    with np.errstate(over="ignore"):  # a tiny threshold only makes the tie-break key huge
        weight = (on_relieved / np.where(thr > 0, thr, 1.0)).sum(axis=1)
    newest = candidates[np.lexsort((candidates, -weight[candidates], -started[candidates], lost[candidates]))]
    if not (on_relieved[candidates].sum(axis=0) >= need - tol).all():
        return [int(i) for i in newest]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # a tiny weight: a huge key, as meant
        per_relief = np.where(weight > 0, lost / weight, np.inf)
    cheap = candidates[np.lexsort((candidates, lost[candidates], per_relief[candidates]))]
    plans = [_cover(order, on_relieved, need - tol, lost) for order in (newest, cheap)]
    best = min(plans, key=lambda victims: float(lost[victims].sum()))  # min keeps the first on ties
    return [int(i) for i in newest[np.isin(newest, best)]]  # evicted newest first


def _lost_work(started: NDArray[np.float64], lost_work: ArrayLike | None, now_s: float) -> NDArray:
    """Work each pod would lose: ``lost_work`` where given, else its run time until ``now_s``."""
    by_start = np.where(np.isfinite(started), now_s - started, np.inf)  # NaN start: oldest, loses the most
    if lost_work is None:
        return np.maximum(by_start, 0.0)
    given = np.asarray(lost_work, dtype=np.float64).reshape(started.shape)
    return np.where(np.isnan(given), np.maximum(by_start, 0.0), np.maximum(given, 0.0))


def _cover(order: NDArray[np.intp], relief: NDArray[np.float64], need: NDArray[np.float64],
           lost: NDArray[np.float64]) -> NDArray[np.intp]:
    """The shortest prefix of ``order`` whose relief covers ``need``, minus victims the rest cover without."""
    freed = np.cumsum(relief[order], axis=0)
    k = int(np.argmax((freed >= need).all(axis=1)))  # the caller checked that all of them cover it
    chosen = list(order[: k + 1])
    total = freed[k].copy()
    # Spare the costliest first: each victim dropped is work kept.
    for i in sorted(chosen, key=lambda i: (-lost[i], -chosen.index(i))):
        if len(chosen) > 1 and (total - relief[i] >= need).all():
            chosen.remove(i)
            total = total - relief[i]
    return np.array(chosen, dtype=np.intp)
