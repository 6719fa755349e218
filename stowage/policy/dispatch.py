"""One packing pass over one pool: which pending task starts on which node, until nothing more fits.

The decision core of the simulator's ``tetris``/``stowage`` presets and of the operator's dispatcher
(Tetris §3.2–3.5 on DRF queues, UBIS §IV-E, OPERA §III-E). Per placement:

1. **Queues** (fairness over time, ``fairness.queue_tiers``): a backlogged queue below
   ``packing.queue_share_floor`` of its weighted fair share competes first; then the queues not ahead of
   their weight on decayed usage (``PassInput.queue_usage``, within ``packing.queue_usage_tolerance``), as
   equals; then the ones ahead. If none of a tier's rows fits, the next tier gets the step (work-conserving).
   ``f = 0``: every queue competes.
2. **Jobs** (each queue's ``jobOrder``): inside a queue only its first ``max(1, ⌈(1−f)·J_q⌉)`` jobs in the
   caller's ranking (FIFO/SRTF from ``ordering.order_jobs``, FSP from the caller's ``FspTracker``).
3. **Score** (Tetris §3.3.2, §3.5): the best ``a(t, n) − m·ā·p(job)/p̄`` among the allowed rows, plus
   ``10⁶`` for groups the barrier knob boosts; if no allowed row fits anywhere, among all rows. End game
   (Graphene; both off by default, ``PassInput.group_duration_s``): ``packing.bottleneck_weight`` adds
   ``remaining_work.bottleneck_bonus``; with ``packing.critical_path_fraction`` a row whose chain outlasts the
   waiting work's drain time (``remaining_work.critical_rows``) gets ``10⁶`` and passes the job mask, and its
   queue's tier while the queue holds less than ``packing.critical_tier_budget`` × the dominant share its
   waiting work needs to drain when all waiting work drains (``remaining_work.queue_budgets``).
4. **Place** one task; take its demand off the node's free vector and add it to its queue's allocation;
   a row whose pending count reaches 0 leaves the pass.

Quota (``PassInput.queue_quota``, a Queue's ``spec.quota``): a row whose next task would take its queue's
allocation in this pool above the quota on any resource leaves the pass (before it, and after each
placement of its queue); it is not *skipped* (below), since no capacity could have helped it.

Starvation guard (OPERA §III-E, multi-chance reservation; ``PackingSettings.starvation_skip_limit`` = ε_s,
0 = off): the caller counts, per row, the passes it was *skipped* in (``PassResult.skipped``: it got nothing
while the pass placed other work, and it fits some node's capacity). A row skipped more than ε_s times is
*starved*: it competes in every step whatever the job mask says, with a boost of ``2·10⁶`` above every other
row (its queue's tier still applies: a row held back because its queue is ahead of its weight is neither
passed over nor starved); if it fits no node now, one node is **held** for it (no other row is placed there,
so the node's free capacity accumulates): the one held before if it can still take the task, else the node whose
largest shortfall ``max_r (d_r − A_r)⁺/C_r`` is smallest (ties: lowest index).

Pure and deterministic: every input is an array the caller built; nothing here keeps state between passes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

import numpy as np
from numpy.typing import NDArray

from stowage.config import PackingSettings
from stowage.model import JobOrder
from stowage.policy import alignment, candidates, column, fairness, ordering, remaining_work
from stowage.policy import gang as gang_rule

__all__ = [
    "BOOST",
    "PassInput",
    "PassResult",
    "Placement",
    "job_ranks",
    "pack",
]

PASS_DELAY_S: Final = 0.2
"""The operator's dispatcher passes at most once per this many seconds (``operator.runtime``'s throttle): an event
after a quiet spell gets its pass at once, a burst within the delay of a pass shares the next one; the simulator's
``--pass-delay`` models it."""

BOOST: Final = 1e6
"""Barrier-boosted rows outrank any combined score (alignments are in [0, R]); starved rows get twice this."""

JobWork = NDArray[np.float64] | Callable[[], NDArray[np.float64]]
JobRank = Callable[[NDArray[np.int64]], NDArray[np.float64]]


class Placement(NamedTuple):
    """Start one task of row ``group`` (an index into the pass's rows) on node ``node``."""

    group: int
    node: int


@dataclass(frozen=True, slots=True)
class PassInput:
    """What one pass reads. Shapes: N nodes, R resources, S demand shapes, G rows (task groups), J jobs, Q queues.

    ``pack`` copies what it changes (``available``, ``queue_alloc``, ``pending``); the caller's arrays stay as given.
    """

    capacity: NDArray[np.float64]
    """(N, R) node capacity ``C``: alignment's normaliser, and what "fits some node" means for the guard."""
    available: NDArray[np.float64]
    """(N, R) this pool's free capacity: regular free (``harvest.regular_available``) or harvestable."""
    shapes: NDArray[np.float64]
    """(S, R) per-task demands; rows of one shape have identical alignments, so scores are per shape."""
    group_shape: NDArray[np.int64]
    """(G,) each row's index into ``shapes``."""
    group_job: NDArray[np.int64]
    """(G,) each row's job, an index into ``job_work``."""
    group_queue: NDArray[np.int64]
    """(G,) each row's queue, ``0..Q-1``."""
    pending: NDArray[np.int64]
    """(G,) tasks of the row that may start now (barrier open, not suspended); rows at 0 take no part."""
    finished_fraction: NDArray[np.float64]
    """(G,) finished / total tasks of the group: the barrier knob's input (the job's end waits on every group)."""
    job_work: JobWork
    """(J,) remaining work ``p`` (``remaining_work.remaining_work``), or a callable asked once, if some row fits."""
    queue_alloc: NDArray[np.float64]
    """(Q, R) what each queue holds in this pool."""
    pool_total: NDArray[np.float64]
    """(R,) the denominator of dominant shares."""
    queue_weight: NDArray[np.float64]
    """(Q,) DRF weights (``spec.weight``)."""
    job_rank: JobRank | None = None
    """Each job's rank inside its queue (lower first, ``inf`` last, ties by job index), asked once per pass with
    the sorted jobs of the rows that fit (see ``job_ranks``). None: no job order mask (the ``tetris`` preset)."""
    skips: NDArray[np.int64] | None = None
    """(G,) passes each row was skipped in so far (starvation guard); None: guard off."""
    held: NDArray[np.int64] | None = None
    """(G,) node held for each row by the previous pass, −1 for none."""
    queue_quota: NDArray[np.float64] | None = None
    """(Q, R) the most each queue may hold in this pool (``+inf`` where unlimited); None: no quotas."""
    queue_usage: NDArray[np.float64] | None = None
    """(Q,) each queue's decayed usage of the pool at the pass (``fairness.QueueUsage.usage_at``); None: no memory
    (half-life 0), the usage is the dominant share the queue holds at each placement. Shorter than Q: the rest 0."""
    group_duration_s: NDArray[np.float64] | None = None
    """(G,) expected task duration per row: the waiting work's drain time per resource
    (``remaining_work.drain_times``) for ``packing.bottleneck_weight`` and ``critical_path_fraction``; None:
    neither applies."""
    group_path_s: NDArray[np.float64] | None = None
    """(G,) a task's duration plus the longest chain of group durations behind it in its job, for
    ``packing.critical_path_fraction`` (``remaining_work.critical_rows``); None: off."""
    gang: NDArray[np.int64] | None = None
    """(G,) tasks of each row that start together or not at all in this pass (0: not a gang; ``gang``); a row with
    fewer pending takes no part. None: no gangs."""


@dataclass(frozen=True, slots=True)
class PassResult:
    """What a pass decided; ``skipped`` and ``held`` are all-False / all −1 when the guard is off."""

    placements: list[Placement]
    skipped: NDArray[np.bool_]
    """(G,) rows that got nothing while the pass placed other work, and that fit some node's capacity."""
    held: NDArray[np.int64]
    """(G,) node held for each starved row that fits nowhere now, −1 for none."""


def pack(inp: PassInput, knobs: PackingSettings, *, limit: int | None = None) -> PassResult:
    """Place pending tasks one at a time, best ``combined score + boost`` first, until nothing fits (or ``limit``).

    ``knobs``: ``fairness_knob`` f, ``barrier_knob`` b, ``remaining_work_weight`` m, ``starvation_skip_limit``
    ε_s (module docstring). Each placement is what the previous ones left: availability, queue allocations
    and pending counts are updated exactly as the simulator's ``Simulation.place`` updates its own.
    """
    g_all = int(inp.group_shape.shape[0])
    placements: list[Placement] = []
    held_out = np.full(g_all, -1, dtype=np.int64)
    guard = inp.skips is not None and knobs.starvation_skip_limit > 0
    rows = np.flatnonzero(np.asarray(inp.pending) > 0)
    if inp.gang is not None:
        rows = rows[np.asarray(inp.gang)[rows] <= np.asarray(inp.pending)[rows]]
    if inp.queue_quota is not None:
        rows = rows[_within_quota(inp, rows, np.asarray(inp.queue_alloc, dtype=np.float64))]
    if rows.size == 0:
        return PassResult(placements, np.zeros(g_all, dtype=bool), held_out)
    avail = np.array(inp.available, dtype=np.float64)
    cap = np.asarray(inp.capacity, dtype=np.float64)
    # Rows of one demand shape have identical alignment rows: score each shape, not each row.
    present, shape_of = np.unique(inp.group_shape[rows], return_inverse=True)
    shape_of = shape_of.reshape(-1)
    shapes = np.asarray(inp.shapes, dtype=np.float64)[present]
    score = alignment.alignment(shapes, cap, avail)  # (S, N)
    starved = np.zeros(rows.size, dtype=bool)
    if guard:
        assert inp.skips is not None
        starved = inp.skips[rows] > knobs.starvation_skip_limit
    live = np.isfinite(score).any(axis=1)[shape_of]
    if starved.any() and (starved & ~live).any():
        held_out = _hold(inp, rows, shape_of, shapes, cap, avail, starved & ~live, held_out)
        score[:, held_out[held_out >= 0]] = -np.inf
        live = np.isfinite(score).any(axis=1)[shape_of]
    rows, shape_of, starved = rows[live], shape_of[live], starved[live]
    if rows.size:
        work = inp.job_work() if callable(inp.job_work) else inp.job_work
        _place_all(inp, knobs, rows, shape_of, shapes, score, avail, starved, work, limit, placements)
    skipped = np.zeros(g_all, dtype=bool)
    if guard and placements:
        # Passed over: it got nothing while other work started, and some node's capacity could take it.
        waiting = np.flatnonzero(np.asarray(inp.pending) > 0)
        ever = alignment.feasible(np.asarray(inp.shapes, dtype=np.float64), cap).any(axis=1)
        skipped[waiting] = ever[inp.group_shape[waiting]]
        skipped[[pl.group for pl in placements]] = False
        qa = np.array(inp.queue_alloc, dtype=np.float64)
        placed = np.array([pl.group for pl in placements], dtype=np.int64)
        np.add.at(qa, inp.group_queue[placed], np.asarray(inp.shapes, dtype=np.float64)[inp.group_shape[placed]])
        if inp.queue_quota is not None:  # held back by its quota, not passed over
            skipped[waiting[~_within_quota(inp, waiting, qa)]] = False
        weight = np.asarray(inp.queue_weight, dtype=np.float64)
        queues = inp.group_queue[waiting]
        if not _every_queue_competes(queues, weight.shape[0], knobs.fairness_knob):
            # Held back for its queue's share, not passed over: a queue ahead of its weight would otherwise get
            # its rows starved and past every queue rule (a queue of many one-task jobs would take 64 % against 2:1).
            shares = fairness.PoolShares(qa, inp.pool_total, weight, inp.queue_usage)
            present = np.bincount(queues, minlength=weight.shape[0]) > 0
            tiers = shares.tiers(shares.rule(present, knobs.queue_usage_tolerance, knobs.queue_share_floor))
            ahead = tiers == fairness.AHEAD
            skipped[waiting[ahead[queues]]] = False
    return PassResult(placements, skipped, held_out)


def _place_all(
    inp: PassInput,
    knobs: PackingSettings,
    rows: NDArray[np.int64],
    shape_of: NDArray[np.int64],
    shapes: NDArray[np.float64],
    score: NDArray[np.float64],
    avail: NDArray[np.float64],
    starved: NDArray[np.bool_],
    work: NDArray[np.float64],
    limit: int | None,
    placements: list[Placement],
) -> None:
    """The placement loop of ``pack`` over the rows that fit somewhere at the start."""
    f, m = knobs.fairness_knob, knobs.remaining_work_weight
    cap = np.asarray(inp.capacity, dtype=np.float64)
    jobs = inp.group_job[rows]
    p = work[jobs]
    has_waiters = np.ones(rows.size, dtype=bool)  # the job's end waits on every group
    # Barrier boost and job order depend on finishes and arrivals only: fixed during a pass.
    boost = fairness.barrier_boost(inp.finished_fraction[rows], has_waiters, knobs.barrier_knob) * BOOST
    if starved.any():
        boost = boost + starved * (2 * BOOST)
    bonus, critical = _end_game(inp, knobs, rows, shapes[shape_of], cap)
    boost = boost + bonus + critical * BOOST
    budget = (knobs.critical_tier_budget * _budgets(inp, rows, shapes[shape_of])
              if critical.any() and knobs.critical_tier_budget > 0 else None)
    urgent = starved | critical  # rows that compete whatever the job mask says (within their queue's tier)
    any_urgent = bool(urgent.any())
    queues = inp.group_queue[rows]
    ranks = _Ranks(inp.job_rank, jobs, queues, f)
    jobs_ok = ranks.mask()
    pending = np.asarray(inp.pending)[rows].copy()
    gang = None if inp.gang is None or not (np.asarray(inp.gang)[rows] > 0).any() else np.array(inp.gang)[rows]
    qa = np.array(inp.queue_alloc, dtype=np.float64)
    weight = np.asarray(inp.queue_weight, dtype=np.float64)
    shares = fairness.PoolShares(qa, inp.pool_total, weight, inp.queue_usage)
    shaped = candidates.ShapeScores(score)
    searched = candidates.Rows(shape_of, p, boost)
    rescore = column.ColumnScorer(shapes, cap)  # alignment of one node's column, cleaned once per pass
    present = np.bincount(queues, minlength=weight.shape[0]) > 0  # queues with rows: changes only when rows go
    tolerance, floor = knobs.queue_usage_tolerance, knobs.queue_share_floor
    rule = None if _every_queue_competes(queues, weight.shape[0], f) else shares.rule(present, tolerance, floor)
    masks_for: tuple[bytes, bytes, bytes] | None = None  # (shapes that fit, tiers) the search mask was made for
    allowed = np.ones(rows.size, dtype=bool)
    while rows.size and (limit is None or len(placements) < limit):
        # Tiers change only with a placement: once per placement. No rule: every queue competes (f = 0 or one
        # queue left).
        shape_fits = shaped.count > 0
        tiers = None if rule is None else shares.tiers(rule)
        # Critical rows cross their queue's tier while the queue holds less than its budget (``_budgets``).
        crossing = None if tiers is None or budget is None else shares.dominant < budget
        state = (shape_fits.tobytes(), b"" if tiers is None else tiers.tobytes(),
                 b"" if crossing is None else crossing.tobytes())
        if state != masks_for:
            # The rows searched: those whose shape fits some node now, of the first tier that has one. A search
            # returns None only when no row it may take fits, so the mask alone decides which tier that is, and
            # the same mask object serves until the shapes that fit, the tiers or the rows change.
            fits = shape_fits[shape_of]
            if not fits.any():
                return
            # The reservation and the critical path pass the job mask, not the queue tiers: a queue's share is
            # not starvation (its many one-task jobs, all "passed over", would otherwise take every slot).
            open_rows = ((jobs_ok | urgent) if any_urgent else jobs_ok) & fits
            allowed = np.ones(rows.size, dtype=bool)  # no tier has a row that may go: any row
            for level in (None,) if tiers is None else sorted(set(tiers.tolist()) - {fairness.IDLE}):
                in_tier = open_rows if level is None else open_rows & (tiers == level)[queues]
                if in_tier.any():
                    allowed = in_tier
                    break
            if crossing is not None:
                allowed = allowed | (critical & fits & crossing[queues])
            masks_for = state
        best = candidates.best_candidate(shaped, searched, allowed, m)
        if best is None:
            return
        i, n = best
        d = shapes[shape_of[i]]
        nodes = [n]
        whole = True  # False: a gang that does not fit whole; it leaves the pass, nothing placed
        if gang is not None and gang[i] > 0:
            k = int(gang[i])
            got = gang_rule.place(d, avail, shaped.score[shape_of[i]], k)
            if got is not None and inp.queue_quota is not None:
                q = np.asarray(inp.queue_quota, dtype=np.float64)[queues[i]]
                got = None if alignment.over_quota(qa[queues[i]] + k * d, q).any() else got
            whole, nodes = got is not None, got or []
            gang[i] = 0  # placed whole: its other tasks go one at a time
        for n in nodes:
            placements.append(Placement(int(rows[i]), n))
            pending[i] -= 1
            if inp.queue_quota is not None:
                qa[queues[i]] += d
            if rule is not None:  # no rule: every queue competes, and stays so (queues only leave); shares unread
                shares.add(queues[i], d)
            avail[n] = np.maximum(avail[n] - d, 0.0)
        for n in sorted(set(nodes)):
            shaped.set_column(n, *rescore.with_fits(n, avail[n]))
        if whole and pending[i] and inp.queue_quota is None:
            continue  # every row stays
        keep = np.ones(rows.size, dtype=bool) if pending[i] and whole else np.arange(rows.size) != i
        if inp.queue_quota is not None:
            mine = np.flatnonzero(queues == queues[i])
            keep[mine[~_within_quota(inp, rows[mine], qa)]] = False
        if not keep.all():
            masks_for = None
            rows, shape_of, searched, queues = rows[keep], shape_of[keep], searched.kept(keep), queues[keep]
            pending, urgent, critical = pending[keep], urgent[keep], critical[keep]
            gang = None if gang is None else gang[keep]
            jobs_ok = ranks.mask(keep)
            now_present = np.bincount(queues, minlength=weight.shape[0]) > 0
            if _every_queue_competes(queues, weight.shape[0], f):  # stays so: queues only leave
                rule = None
            elif (now_present != present).any():
                rule = shares.rule(now_present, tolerance, floor)
            present = now_present


def _end_game(
    inp: PassInput, knobs: PackingSettings, rows: NDArray[np.int64], demand: NDArray[np.float64],
    cap: NDArray[np.float64],
) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    """Per row: the bottleneck bonus and whether it is on the critical path (Graphene; both off by default)."""
    bonus, critical = np.zeros(rows.size), np.zeros(rows.size, dtype=bool)
    if inp.group_duration_s is None or (knobs.bottleneck_weight <= 0 and knobs.critical_path_fraction <= 0):
        return bonus, critical
    drain = remaining_work.drain_times(demand, np.asarray(inp.pending)[rows],
                                       np.asarray(inp.group_duration_s)[rows], inp.pool_total)
    bonus = remaining_work.bottleneck_bonus(demand, drain, cap.mean(axis=0), knobs.bottleneck_weight)
    if inp.group_path_s is not None:
        critical = remaining_work.critical_rows(np.asarray(inp.group_path_s)[rows], drain, knobs.critical_path_fraction)
    return bonus, critical


def _budgets(inp: PassInput, rows: NDArray[np.int64], demand: NDArray[np.float64]) -> NDArray[np.float64]:
    """(Q,) the dominant share each queue may hold while its critical rows cross its tier: what its waiting work
    needs to drain when all of it drains (``remaining_work.queue_budgets``, over the pass's rows)."""
    assert inp.group_duration_s is not None  # critical rows need durations
    n_queues = int(np.asarray(inp.queue_weight).shape[0])
    return remaining_work.queue_budgets(demand, np.asarray(inp.pending)[rows], np.asarray(inp.group_duration_s)[rows],
                                        inp.group_queue[rows], n_queues, inp.pool_total)


def _within_quota(inp: PassInput, rows: NDArray[np.int64], qa: NDArray[np.float64]) -> NDArray[np.bool_]:
    """Rows whose next task keeps its queue within ``queue_quota`` on every resource (``alignment.over_quota``)."""
    assert inp.queue_quota is not None
    q = inp.group_queue[rows]
    after = qa[q] + np.asarray(inp.shapes, dtype=np.float64)[inp.group_shape[rows]]
    quota = np.asarray(inp.queue_quota, dtype=np.float64)[q]
    return ~alignment.over_quota(after, quota).any(axis=1)


def _every_queue_competes(queues: NDArray[np.int64], n_queues: int, f: float) -> bool:
    """Whether the fairness knob lets every active queue compete whatever the shares (no tiers).

    True with at most one active queue, or with ``f = 0`` (Tetris's most efficient setting: no fairness mask);
    then the shares need not be computed.
    """
    return f <= 0.0 or int(np.count_nonzero(np.bincount(queues, minlength=n_queues))) <= 1


class _Ranks:
    """Each job's rank inside its queue, asked of the caller once per pass, for the job order mask.

    ``mask`` marks the rows whose job is among the first ``max(1, ⌈(1−f)·J_q⌉)`` of its queue (ties: job index).
    Rows only leave during a pass (``mask(keep)``), so the (queue, rank, job) order of the pass's jobs is sorted
    once; each call marks the jobs still present in it and counts positions per queue (no sort per call).
    """

    def __init__(self, job_rank: JobRank | None, jobs: NDArray[np.int64], queues: NDArray[np.int64],
                 f: float) -> None:
        self.off, self.f, self.size = job_rank is None, f, jobs.size
        if job_rank is None:
            return
        self.jobs, first, self.at = np.unique(jobs, return_index=True, return_inverse=True)
        self.at = self.at.reshape(-1)  # each row's job, an index into self.jobs
        rank = np.asarray(job_rank(self.jobs), dtype=np.float64).reshape(-1)
        q = queues[first]  # a job's queue: its first row's
        self._order = np.lexsort((self.jobs, rank, q))
        self._q_sorted = q[self._order]
        self._q_first = np.searchsorted(self._q_sorted, self._q_sorted, side="left")
        self._minlength = int(self._q_sorted.max(initial=0)) + 1

    def mask(self, keep: NDArray[np.bool_] | None = None) -> NDArray[np.bool_]:
        """(rows,) the job order mask of the rows left after ``keep`` (None: all of them)."""
        if self.off:
            self.size = self.size if keep is None else int(np.count_nonzero(keep))
            return np.ones(self.size, dtype=bool)
        if keep is not None:
            self.at = self.at[keep]
        live = np.zeros(self.jobs.size, dtype=bool)
        live[self.at] = True
        live = live[self._order]
        seen = np.cumsum(live)
        pos = seen - (seen[self._q_first] - live[self._q_first]) - 1  # among present jobs of the queue
        counts = np.bincount(self._q_sorted[live], minlength=self._minlength)
        k = np.maximum(1.0, np.ceil((1.0 - self.f) * counts[self._q_sorted]))
        allowed = np.zeros(self.jobs.size, dtype=bool)
        allowed[self._order] = live & (pos < k)
        return allowed[self.at]


def _hold(
    inp: PassInput,
    rows: NDArray[np.int64],
    shape_of: NDArray[np.int64],
    shapes: NDArray[np.float64],
    cap: NDArray[np.float64],
    avail: NDArray[np.float64],
    needs: NDArray[np.bool_],
    held_out: NDArray[np.int64],
) -> NDArray[np.int64]:
    """Pick the node each starved row that fits nowhere waits on (module docstring), most skipped first."""
    assert inp.skips is not None
    previous = inp.held if inp.held is not None else np.full(held_out.shape, -1, dtype=np.int64)
    taken = np.zeros(cap.shape[0], dtype=bool)
    which = np.flatnonzero(needs)
    for k in which[np.lexsort((rows[which], -inp.skips[rows[which]]))].tolist():
        d = shapes[shape_of[k]]
        can = alignment.feasible(d, cap) & ~taken  # nodes whose capacity could ever take the task
        if not can.any():
            continue
        before = int(previous[rows[k]])
        if 0 <= before < cap.shape[0] and can[before]:
            node = before
        else:
            node = int(np.argmin(np.where(can, alignment.shortfall(d, avail, cap), np.inf)))
        held_out[rows[k]] = node
        taken[node] = True
    return held_out


# --- what callers share --------------------------------------------------------------------------


def job_ranks(
    jobs: NDArray[np.int64],
    job_queue: NDArray[np.int64],
    queue_order: Sequence[JobOrder],
    arrival_s: NDArray[np.float64],
    work: NDArray[np.float64],
    fsp_order: Callable[[int], Sequence[int]],
) -> NDArray[np.float64]:
    """Rank of each of ``jobs`` (sorted job indices) inside its queue, for ``PassInput.job_rank``.

    FIFO and SRTF: positions in ``ordering.order_jobs(order, arrival, work)`` over the listed jobs of the
    queue (a strict order, so any subset keeps it). FSP: positions in ``fsp_order(q)`` (the caller's
    ``FspTracker.order()``, advanced to now), ``inf`` for a job the tracker does not know.
    ``job_queue``, ``arrival_s``, ``work``: (J,) by job index.
    """
    rank = np.empty(jobs.size, dtype=np.float64)
    queues = job_queue[jobs]
    for q in np.unique(queues).tolist():
        sel = np.flatnonzero(queues == q)
        js = jobs[sel]
        order = queue_order[q]
        if order is JobOrder.FSP:
            position = {j: i for i, j in enumerate(fsp_order(q))}
            rank[sel] = [position.get(j, math.inf) for j in js.tolist()]
        else:
            ranked = ordering.order_jobs(order, arrival_s[js], work[js])
            rank[sel[ranked]] = np.arange(js.size, dtype=np.float64)
    return rank
