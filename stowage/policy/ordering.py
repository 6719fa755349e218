"""Job order inside one queue: FIFO, SRTF, and FSP (processor-sharing finish order).

FSP (seed 002, Michiardi et al. §3.2 and Algorithm 1): the scheduler keeps a
*virtual* cluster that serves every submitted job by (generalised) processor
sharing, and serves the real jobs in the order they finish in that virtual
system. A newly arrived job that would finish earlier under PS goes first
(it "preempts" the others); a job that already finished in the virtual system
keeps its place ahead of everything still running there; running tasks are
never killed — the caller only stops *starting* tasks of overtaken jobs
(§3.2: "we simply let the current running task complete").

Processor sharing used here (FSP §3.2–3.3, GPS):

    rate_i(t) = min(m_i, λ(t)·w_i),   Σ_{i active} rate_i(t) = C   (or every job at its cap m_i)

with ``w_i`` the job's weight, ``m_i`` its maximum rate (the fraction of the
cluster it can use at most — FSP Figure 2's "requires 55% of the cluster";
uncapped when not given) and ``C`` the capacity. Without caps this is
``rate_i = C·w_i/Σ w`` — plain PS when all weights are equal. Job sizes are in
capacity·seconds: a job of size ``s`` alone and uncapped finishes after ``s/C``.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from stowage.errors import InvalidInput
from stowage.model import JobOrder
from stowage.policy.tolerances import ROUNDING_EPS, ZERO_ATOL

__all__ = [
    "FspTracker",
    "fifo_order",
    "fsp_order",
    "order_jobs",
    "ps_finish_times",
    "srtf_order",
]

# --- input cleaning ------------------------------------------------------------------------------


def _vector(values: ArrayLike, name: str, n: int | None = None) -> NDArray[np.float64]:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim == 0:
        arr = arr.reshape(1) if n is None else np.full(n, float(arr))
    if arr.ndim != 1:
        raise InvalidInput(name, arr.shape, "must be a 1-D array, one entry per job")
    if n is not None and arr.shape[0] != n:
        raise InvalidInput(name, arr.shape[0], f"must have one entry per job ({n})")
    return arr


def _arrivals(arrival_s: ArrayLike, n: int | None = None) -> NDArray[np.float64]:
    # A job without a usable arrival time sorts last rather than first.
    a = _vector(arrival_s, "arrival_s", n)
    return np.where(np.isnan(a), np.inf, a)


def _nonneg(values: ArrayLike, name: str, n: int, nan_as: float) -> NDArray[np.float64]:
    v = _vector(values, name, n)
    v = np.where(np.isnan(v), nan_as, v)
    return np.maximum(v, 0.0)


def _weights(weights: ArrayLike | None, n: int) -> NDArray[np.float64]:
    if weights is None:
        return np.ones(n)
    w = _vector(weights, "weights", n)
    # A weight that is not a positive finite number gets the neutral weight 1.
    return np.where(np.isfinite(w) & (w > 0), w, 1.0)


def _caps(max_rate: ArrayLike | None, n: int) -> NDArray[np.float64]:
    if max_rate is None:
        return np.full(n, np.inf)
    m = _vector(max_rate, "max_rate", n)
    # Zero parallelism is meaningless for ordering: treat it as "no cap".
    return np.where(np.isnan(m) | (m <= 0), np.inf, m)


def _capacity(capacity: float) -> float:
    c = float(capacity)
    return c if math.isfinite(c) and c > 0 else 0.0


# --- simple orders -------------------------------------------------------------------------------


def fifo_order(arrival_s: ArrayLike) -> NDArray[np.intp]:
    """Indices by arrival time, earliest first; stable (equal arrivals keep input order).

    ``arrival_s``: (J,) seconds. NaN arrivals sort last.
    """
    a = _arrivals(arrival_s)
    return np.argsort(a, kind="stable")


def srtf_order(remaining_work: ArrayLike, arrival_s: ArrayLike) -> NDArray[np.intp]:
    """Indices by remaining work, least first; ties by arrival, then input order.

    Tetris §3.3.1 (shortest remaining time first on a job's remaining work).
    ``remaining_work``: (J,) any non-negative unit (NaN sorts last, negatives count as 0);
    ``arrival_s``: (J,) seconds.
    """
    a = _arrivals(arrival_s)
    r = _nonneg(remaining_work, "remaining_work", a.shape[0], nan_as=np.inf)
    return np.lexsort((np.arange(a.shape[0]), a, r))


# --- processor sharing ---------------------------------------------------------------------------


def _rates(weights: NDArray[np.float64], caps: NDArray[np.float64], capacity: float) -> NDArray[np.float64]:
    """Water-filling GPS rates: ``min(m_i, λ·w_i)`` with ``Σ rate = C`` unless every job is capped."""
    if weights.size == 0 or capacity <= 0:
        return np.zeros_like(weights)
    if not np.isfinite(caps).any():
        return capacity * weights / weights.sum()
    if caps.sum() <= capacity:
        return caps.copy()
    ratio = caps / weights
    order = np.argsort(ratio, kind="stable")
    m_s, w_s, r_s = caps[order], weights[order], ratio[order]
    # λ_k if the k jobs with the smallest m/w are held at their caps and the rest share what is left.
    capped_before = np.concatenate(([0.0], np.cumsum(np.where(np.isfinite(m_s), m_s, 0.0))[:-1]))
    weight_from = np.cumsum(w_s[::-1])[::-1]
    lam = (capacity - capped_before) / weight_from
    # The first k whose own cap does not bind at λ_k is the fixed point of water-filling.
    k = int(np.argmax(lam <= r_s))
    return np.minimum(caps, lam[k] * weights)


class _VirtualPS:
    """Event-driven GPS state at time ``now``: active jobs with remaining work (no clock of its own)."""

    def __init__(self, capacity: float) -> None:
        self.capacity = _capacity(capacity)
        self.now = -math.inf
        self.keys: list[Any] = []
        self.rem = np.zeros(0)
        self.size = np.zeros(0)
        self.w = np.zeros(0)
        self.m = np.zeros(0)

    def add(self, key: Any, size: float, weight: float, cap: float) -> None:
        self.keys.append(key)
        self.rem = np.append(self.rem, size)
        self.size = np.append(self.size, size)
        self.w = np.append(self.w, weight)
        self.m = np.append(self.m, cap)

    def drop(self, keep: NDArray[np.bool_]) -> None:
        self.keys = [k for k, kept in zip(self.keys, keep, strict=True) if kept]
        self.rem, self.size, self.w, self.m = self.rem[keep], self.size[keep], self.w[keep], self.m[keep]

    def _done(self) -> NDArray[np.bool_]:
        # Float steps of a rate·dt subtraction never land exactly on zero: a sliver of the size is done.
        return self.rem <= ROUNDING_EPS * self.size + ZERO_ATOL

    def run_until(self, t_end: float) -> list[tuple[Any, float]]:
        """Serve until ``t_end`` (may be ``inf``); return ``(key, finish time)`` of jobs that finished."""
        finished: list[tuple[Any, float]] = []
        if self.now == -math.inf:
            self.now = t_end
        if self.keys and self.capacity > 0 and not np.isfinite(self.m).any() and t_end > self.now:
            finished.extend(self._run_uncapped(t_end))
        while self.keys:
            done = self._done()
            if done.any():
                finished.extend((k, self.now) for k, d in zip(self.keys, done, strict=True) if d)
                self.drop(~done)
                continue
            if self.now >= t_end:
                break
            rates = _rates(self.w, self.m, self.capacity)
            with np.errstate(divide="ignore"):
                ttf = np.where(rates > 0, self.rem / np.where(rates > 0, rates, 1.0), np.inf)
            first = int(np.argmin(ttf))
            dt = float(ttf[first])
            if not math.isfinite(dt):
                break  # nothing can progress (zero capacity): unfinished jobs never finish
            if self.now + dt <= t_end:
                self.rem = np.maximum(self.rem - rates * dt, 0.0)
                self.rem[first] = 0.0  # the job that defined the step is exactly done
                self.now += dt
            else:
                self.rem = np.maximum(self.rem - rates * (t_end - self.now), 0.0)
                self.now = t_end
        if self.now < t_end:
            self.now = t_end
        return finished

    def _run_uncapped(self, t_end: float) -> list[tuple[Any, float]]:
        # Without caps every departure before t_end is known in closed form (no arrival in between):
        # retire them all at once, then age the survivors by the virtual time that elapsed.
        projected = self.project()
        gone = projected <= t_end
        finished = [(k, float(t)) for k, t, g in zip(self.keys, projected, gone, strict=True) if g]
        if gone.any():
            last = int(np.argmax(np.where(gone, projected, -np.inf)))
            v_at_last, t_last = float(self.rem[last] / self.w[last]), float(projected[last])
        else:
            v_at_last, t_last = 0.0, self.now
        keep = ~gone
        if keep.any() and math.isfinite(t_end):
            dv = v_at_last + (t_end - t_last) * self.capacity / float(self.w[keep].sum())
            self.rem = np.where(keep, np.maximum(self.rem - dv * self.w, 0.0), 0.0)
        self.drop(keep)
        self.now = t_end if math.isfinite(t_end) else (t_last if finished else self.now)
        return finished

    def project(self) -> NDArray[np.float64]:
        """Finish time of every active job if nothing else arrives, in ``keys`` order (inf: never)."""
        n = len(self.keys)
        if n == 0:
            return np.zeros(0)
        if self.capacity > 0 and not np.isfinite(self.m).any():
            # Uncapped GPS, closed form: in virtual time dV/dt = C/Σw, job i ends at V = rem_i/w_i.
            v = self.rem / self.w
            order = np.lexsort((np.arange(n), v))
            v_s, w_s = v[order], self.w[order]
            weight_left = np.cumsum(w_s[::-1])[::-1]
            dv = np.diff(np.concatenate(([0.0], v_s)))
            out = np.empty(n)
            out[order] = self.now + np.cumsum(dv * weight_left) / self.capacity
            return out
        clone = _VirtualPS(self.capacity)
        clone.now, clone.keys = self.now, list(range(n))
        clone.rem, clone.size, clone.w, clone.m = self.rem.copy(), self.size.copy(), self.w, self.m
        out = np.full(n, np.inf)
        for idx, t in clone.run_until(math.inf):
            out[idx] = t
        return out


def ps_finish_times(
    arrival_s: ArrayLike,
    size: ArrayLike,
    weights: ArrayLike | None = None,
    capacity: float = 1.0,
    *,
    max_rate: ArrayLike | None = None,
) -> NDArray[np.float64]:
    """Exact finish time of every job under (generalised, weighted, capped) processor sharing.

    Event-driven: between two events (an arrival or a departure) every active job
    ``i`` is served at ``rate_i = min(m_i, λ·w_i)`` with ``Σ rate_i = C`` (module
    docstring); the next departure is ``min_i rem_i/rate_i``. O(J²) worst case.

    Shapes and units: ``arrival_s`` (J,) s; ``size`` (J,) capacity·seconds;
    ``weights`` (J,) > 0 (None: all 1; non-positive or NaN → 1); ``capacity`` in
    capacity units per second; ``max_rate`` (J,) capacity units per second
    (None, NaN or ≤ 0: uncapped). Returns (J,) seconds. A zero-size job finishes at
    its arrival; a non-positive capacity finishes nothing (inf). NaN arrivals are
    treated as arriving last (after every other job), NaN sizes as 0.
    Every job finishes no earlier than ``arrival + size/min(C, m_i)`` (work is conserved).
    """
    a = _arrivals(arrival_s)
    n = a.shape[0]
    s = _nonneg(size, "size", n, nan_as=0.0)
    w = _weights(weights, n)
    m = _caps(max_rate, n)
    finish = np.full(n, np.inf)
    if n == 0:
        return finish
    finite = a[np.isfinite(a)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0)
    finite_a = np.where(np.isfinite(a), a, np.where(a < 0, lo, hi))
    order = np.lexsort((np.arange(n), finite_a))
    ps = _VirtualPS(capacity)
    i = 0
    while i < n:
        t = float(finite_a[order[i]])
        for key, ft in ps.run_until(t):
            finish[key] = ft
        while i < n and finite_a[order[i]] == t:
            j = int(order[i])
            ps.add(j, float(s[j]), float(w[j]), float(m[j]))
            i += 1
    for key, ft in ps.run_until(math.inf):
        finish[key] = ft
    return finish


def _finish_order(finish: NDArray[np.float64], arrival: NDArray[np.float64]) -> NDArray[np.intp]:
    # Round away float noise so exact ties (in real arithmetic) fall back to arrival, then index.
    key = np.where(np.isfinite(finish), np.round(finish, 9), np.inf)
    return np.lexsort((np.arange(finish.shape[0]), arrival, key))


def fsp_order(
    arrival_s: ArrayLike,
    size: ArrayLike,
    weights: ArrayLike | None = None,
    capacity: float = 1.0,
    *,
    max_rate: ArrayLike | None = None,
) -> NDArray[np.intp]:
    """The order FSP serves jobs: by finish time in the virtual (G)PS system.

    FSP rule (seed 002 §3.2, Algorithm 1 l.1–6): "assuming a PS policy, where
    each job has its fair share, it is possible to compute the completion time.
    The order at which jobs complete in PS is used as a reference to schedule
    jobs in series"; on every submission or completion the finish times are
    recomputed and jobs sorted by them; a free slot goes to the first job in that
    order with an unlaunched task. Consequences: a newly arrived job that would
    finish earlier under PS goes first; a job already finished in the virtual
    system keeps its place (its virtual finish time is in the past, so no later
    arrival can precede it); nothing is killed — overtaken jobs just stop
    *starting* tasks. Ties: arrival time, then input order.

    Arguments as :func:`ps_finish_times`; returns a permutation of ``range(J)``.
    Pass only jobs already submitted: the virtual system must not see the future.
    """
    a = _arrivals(arrival_s)
    finish = ps_finish_times(a, size, weights, capacity, max_rate=max_rate)
    return _finish_order(finish, a)


# --- incremental FSP -----------------------------------------------------------------------------


class FspTracker:
    """Incremental virtual-PS state for FSP; deterministic, no clock (time comes in).

    ``arrive`` a job (advancing the virtual system to its arrival time first),
    ``advance`` virtual time, read the serving ``order()``; ``remove`` a job when
    it finishes for real. By default a removed job stays in the virtual system
    until its virtual finish (FSP's virtual PS is independent of the real one, which
    is what guarantees every job finishes no later than under PS); pass
    ``virtual=True`` to withdraw its virtual work too (a cancelled job).

    Cost: an uncapped tracker orders in O(n log n) per call (closed form); with
    ``max_rate`` caps the projection is event-driven, O(n²) per call, n = jobs in
    the virtual system.
    """

    def __init__(self, capacity: float = 1.0) -> None:
        self._ps = _VirtualPS(capacity)
        self._seq: dict[Hashable, int] = {}
        self._next_seq = 0
        self._virtually_done: dict[Hashable, float] = {}  # still in the real queue
        self._removed: set[Hashable] = set()  # gone from the real queue, still in the virtual one

    @property
    def now(self) -> float:
        """Virtual time reached so far (``-inf`` before the first event)."""
        return self._ps.now

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._seq and job_id not in self._removed

    def __len__(self) -> int:
        return len(self._seq) - len(self._removed)

    def advance(self, t: float) -> None:
        """Serve the virtual system up to ``t`` seconds (a time in the past is ignored)."""
        t = float(t)
        if not math.isnan(t) and t > self._ps.now:
            self._collect(t)

    def _collect(self, t: float) -> None:
        for key, ft in self._ps.run_until(t):
            if key in self._removed:
                self._removed.discard(key)
                del self._seq[key]
            else:
                self._virtually_done[key] = ft

    def arrive(
        self, job_id: Hashable, t: float, size: float, weight: float = 1.0, *, max_rate: float | None = None
    ) -> None:
        """Submit ``job_id`` at ``t`` s with ``size`` capacity·s (weight and cap as in :func:`ps_finish_times`).

        A time earlier than the tracker's present is taken as the present. Raises
        :class:`InvalidInput` if ``job_id`` is already tracked.
        """
        if job_id in self._seq:
            raise InvalidInput("job_id", job_id, "must be new: this job already arrived")
        self.advance(t)
        if self._ps.now == -math.inf:
            self._ps.now = float(t) if math.isfinite(float(t)) else 0.0
        s = float(_nonneg([size], "size", 1, nan_as=0.0)[0])
        w = float(_weights([weight], 1)[0])
        m = float(_caps(None if max_rate is None else [max_rate], 1)[0])
        self._seq[job_id] = self._next_seq
        self._next_seq += 1
        self._ps.add(job_id, s, w, m)
        if s == 0:
            self._collect(self._ps.now)  # a zero-size job is done on arrival

    def remove(self, job_id: Hashable, *, virtual: bool = False) -> None:
        """Drop ``job_id`` from the order (it finished for real); unknown ids are ignored."""
        if job_id not in self._seq or job_id in self._removed:
            return
        if job_id in self._virtually_done:
            del self._virtually_done[job_id]
            del self._seq[job_id]
            return
        if virtual:
            self._ps.drop(np.array([k != job_id for k in self._ps.keys], dtype=bool))
            del self._seq[job_id]
        else:
            self._removed.add(job_id)

    def virtual_finish(self, job_id: Hashable) -> float | None:
        """Virtual PS finish time of ``job_id`` (projected if still running there); None if unknown."""
        if job_id in self._virtually_done:
            return self._virtually_done[job_id]
        if job_id not in self or job_id not in self._ps.keys:
            return None
        return float(self._ps.project()[self._ps.keys.index(job_id)])

    def order(self) -> list[Hashable]:
        """Jobs still in the real queue, in FSP serving order (virtual finish, then arrival)."""
        done = sorted(self._virtually_done, key=lambda k: (self._virtually_done[k], self._seq[k]))
        projected = self._ps.project()
        live = [
            (round(float(t), 9), self._seq[k], k)
            for k, t in zip(self._ps.keys, projected, strict=True)
            if k not in self._removed
        ]
        live.sort(key=lambda x: (x[0], x[1]))
        return done + [k for _, _, k in live]


# --- dispatch ------------------------------------------------------------------------------------


def order_jobs(
    job_order: JobOrder,
    arrival_s: ArrayLike,
    remaining_work: ArrayLike,
    ps_finish: ArrayLike | None = None,
) -> NDArray[np.intp]:
    """Indices of a queue's jobs in the order ``job_order`` serves them.

    FIFO: :func:`fifo_order`. SRTF: :func:`srtf_order`. FSP: by ``ps_finish``
    (virtual PS finish times, e.g. from :class:`FspTracker` or
    :func:`ps_finish_times`), ties by arrival; without ``ps_finish`` the remaining
    work is taken as each job's size in a fresh virtual PS system
    (:func:`fsp_order`), exact only when no job has been served yet.
    """
    a = _arrivals(arrival_s)
    job_order = JobOrder(job_order)
    if job_order is JobOrder.FIFO:
        return fifo_order(a)
    if job_order is JobOrder.SRTF:
        return srtf_order(remaining_work, a)
    if ps_finish is None:
        return fsp_order(a, remaining_work)
    f = _vector(ps_finish, "ps_finish", a.shape[0])
    return _finish_order(np.where(np.isnan(f), np.inf, f), a)
