"""The next (task group, node) of a packing pass: the highest ``combined_score + boost``.

Tetris §3.3.2 picks, among every pending task and every node it fits, the pair with the highest
``a(t, n) − m·ā·p(t)/p̄ + boost(t)`` (``remaining_work.combined_score``; the barrier boost of
``fairness.barrier_boost`` on top). Tasks of one demand shape have identical alignment rows, so
the search works on the (shapes × nodes) alignment matrix, ``ShapeScores``, kept current one node
column at a time as tasks are placed.

Three searches, one answer (tests check it on ties and one-ulp near-ties):

* ``dense_best_candidate``: the reference, ``combined_score`` on the full (rows × nodes) matrix;
* ``exact_best_candidate``: the same floating-point operations without the matrix: ``work_penalty``
  gets the same feasible alignments in the same order, so ``ā`` and ``p̄`` have the same bits;
  O(rows × nodes) per call;
* ``best_candidate``: O(rows + nodes) per call. ``ā`` and ``p̄`` come from per-shape sums, with a
  rigorous bound on how far the reference's bits can be from them; the answer is returned only
  when no value inside that bound could change it (the winner beats every other row by more than
  the bound, and its best node beats the next distinct alignment by more than a rounding), else
  it asks ``exact_best_candidate``. ``stowage bench dispatcher`` is the benchmark that needs it
  (5,000 nodes: ~25 ms per task exact).
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np
from numpy.typing import NDArray

from stowage.policy import remaining_work

__all__ = [
    "UNDECIDED",
    "Rows",
    "ShapeScores",
    "best_candidate",
    "certified_best_candidate",
    "dense_best_candidate",
    "exact_best_candidate",
]

_U: Final = 2.0**-53  # unit roundoff of float64
_TINY: Final = 1e-290  # below this a mean may underflow: let the exact search decide
_REFRESH_REL_ERR: Final = 1e-11  # a shape's running sum is recomputed once its error bound passes this
_REFRESH_EVERY: Final = 8  # column updates between those checks (the bound holds in between; a check keeps it tight)

UNDECIDED: Final = (-1, -1)
"""``certified_best_candidate``'s answer when the bound cannot rule out another winner."""


class ShapeScores:
    """Alignment of each demand shape on each node (S, N), with what every search needs from it.

    ``score`` (S, N): alignment, ``-inf`` where the shape does not fit; ``count`` (S,) feasible
    nodes per shape; ``row_max`` (S,) best alignment per shape (``-inf`` when none fits); both kept
    current by ``set_column``. ``summaries()``: what only the certified search needs, made on first use
    and then updated column by column.
    """

    def __init__(self, score: NDArray[np.float64]) -> None:
        self.score = score
        self._flat: tuple[NDArray[np.float64], NDArray[np.int64]] | None = None
        self._summaries: _Summaries | None = None
        self._recount()

    def _recount(self) -> None:
        self._feasible: NDArray[np.bool_] | None = np.isfinite(self.score)
        self.count = self._feasible.sum(axis=1)
        self.row_max = np.where(self.count > 0, np.max(self.score, axis=1, initial=-np.inf), -np.inf)

    def summaries(self) -> _Summaries:
        """Per shape: the sum of its feasible alignments and a bound on that float sum's error."""
        if self._summaries is None:
            self._summaries = _Summaries(self.score)
        return self._summaries

    def set_column(self, n: int, column: NDArray[np.float64], feasible: NDArray[np.bool_] | None = None) -> None:
        """Node ``n``'s alignments changed (a task was placed there): update every summary.

        ``feasible``: ``np.isfinite(column)``, from a caller whose column has no NaN (``column.ColumnScorer``).
        """
        self._flat = None
        if feasible is None and np.isnan(column).any():  # outside the running sums' assumptions: rebuilt on use
            self.score[:, n] = column
            self._recount()
            self._summaries = None
            return
        old = self.score[:, n].copy()
        self.score[:, n] = column
        fin_old, fin_new = np.isfinite(old), np.isfinite(column) if feasible is None else feasible
        self._feasible = None
        self.count += fin_new
        self.count -= fin_old
        before = self.row_max
        # max is exact: raise it where the new value is higher, rescan rows whose maximum was lowered.
        lowered = np.flatnonzero((old == before) & (column < old))
        self.row_max = np.maximum(before, column)
        if lowered.size == 1:  # the usual case: one shape's best node was this one (no fancy-index copy)
            self.row_max[lowered[0]] = self.score[lowered[0]].max(initial=-np.inf)
        elif lowered.size:
            self.row_max[lowered] = self.score[lowered].max(axis=1, initial=-np.inf)
        if self._summaries is not None:
            self._summaries.update(self.score, old, column, fin_old, fin_new)

    def feasible_scores(self, rows_shape: NDArray[np.int64]) -> NDArray[np.float64]:
        """``score[rows_shape][feasible]`` in row-major order (what ``combined_score`` averages), in O(result)."""
        if self._flat is None:
            feasible = np.isfinite(self.score) if self._feasible is None else self._feasible
            values = self.score[feasible]  # row-major: shape 0's feasible scores, then shape 1's, ...
            self._flat = values, np.concatenate(([0], np.cumsum(self.count)[:-1]))
        values, offset = self._flat
        cnt = self.count[rows_shape]
        if rows_shape.size and (rows_shape == rows_shape[0]).all():
            s = int(rows_shape[0])
            return np.tile(values[offset[s] : offset[s] + cnt[0]], rows_shape.size)
        starts = np.concatenate(([0], np.cumsum(cnt)[:-1]))
        index = np.repeat(offset[rows_shape] - starts, cnt) + np.arange(int(cnt.sum()))
        return values[index]



class _Summaries:
    """``sums`` (S,) of each shape's feasible alignments, ``error`` (S,) a bound on ``|sums − real sums|``,
    and ``exact_only``: a NaN or negative alignment was seen (outside the certified search's assumptions)."""

    def __init__(self, score: NDArray[np.float64]) -> None:
        feasible = np.isfinite(score)
        self.exact_only = bool(np.isnan(score).any() or (score[feasible] < 0).any())
        self.sums = np.zeros(score.shape[0])
        self.error = np.zeros(score.shape[0])
        self._updates = 0
        self._resum(score, np.arange(score.shape[0]))

    def _resum(self, score: NDArray[np.float64], shapes: NDArray[np.int64]) -> None:
        rows = score[shapes]
        self.sums[shapes] = np.where(np.isfinite(rows), rows, 0.0).sum(axis=1)
        # Any summation order: |float sum − real sum| ≤ (n − 1)·u·Σ|x| (x ≥ 0 here).
        self.error[shapes] = (rows.shape[1] + 2) * _U * self.sums[shapes]

    def update(self, score: NDArray[np.float64], old: NDArray[np.float64], new: NDArray[np.float64],
               fin_old: NDArray[np.bool_], fin_new: NDArray[np.bool_]) -> None:
        """One column went from ``old`` to ``new``: ``diff`` and the new sum each round once (≤ u each)."""
        if self.exact_only:  # the certified search does not read the sums then
            return
        new_sum = np.where(fin_new, new, 0.0)
        if new_sum.min(initial=0.0) < 0:
            self.exact_only = True
            return
        diff = new_sum - np.where(fin_old, old, 0.0)
        self.sums += diff
        self.error += 2 * _U * (np.abs(diff) + np.abs(self.sums))
        self._updates += 1
        if self._updates % _REFRESH_EVERY == 0:  # the bound holds either way; refreshing keeps it tight
            stale = np.flatnonzero(self.error > _REFRESH_REL_ERR * np.abs(self.sums))
            if stale.size:
                self._resum(score, stale)


class Rows:
    """The rows a pass searches: each one's demand shape (an index into ``ShapeScores``), its job's remaining
    work ``p`` and its boost, with what the certified search reads of them computed once (rows only leave a
    pass: ``kept``). ``p`` is read as ``combined_score`` reads it: negative → 0, NaN or ±inf unknown.

    ``key``: rows with the same shape, boost and work get the same key, and bitwise-equal values in every search
    (the same alignment, the same ``p/p̄``); ``b_max``: the largest ``|boost|``; ``finite``: every boost is.
    """

    __slots__ = ("_selected", "b_max", "boost", "finite", "key", "known", "p", "pc", "shape_of")

    def __init__(self, shape_of: NDArray[np.int64], p: NDArray[np.float64], boost: NDArray[np.float64]) -> None:
        self.shape_of = np.asarray(shape_of, dtype=np.int64)
        self.p, self.boost = np.asarray(p, dtype=np.float64), np.asarray(boost, dtype=np.float64)
        self.pc = np.where(np.isnan(self.p), np.nan, np.maximum(self.p, 0.0))
        self.known = np.isfinite(self.pc)
        work = np.where(self.known, self.pc, -1.0)  # unknown work: p/p̄ is exactly 1 for every such row
        # Rows compared by their bytes (−0.0 ≠ 0.0 here: a key too many only costs an exact search).
        rows = np.stack([self.shape_of.astype(np.float64), self.boost, work], axis=1)
        self.key = np.unique(rows, axis=0, return_inverse=True)[1].reshape(-1)
        self.finite = bool(np.isfinite(self.boost).all())
        self.b_max = float(np.abs(self.boost).max(initial=0.0))
        self._selected: _Selection | None = None

    def kept(self, keep: NDArray[np.bool_]) -> Rows:
        """The rows where ``keep`` is True (keys and ``b_max`` stay valid for a subset)."""
        out = object.__new__(Rows)
        for name in Rows.__slots__:
            value = getattr(self, name)
            setattr(out, name, value[keep] if isinstance(value, np.ndarray) else value)
        out._selected = None
        return out

    def select(self, allowed: NDArray[np.bool_], n_shapes: int) -> _Selection:
        """What the certified search reads of the ``allowed`` rows, made again only for another mask object (a pass
        reuses one mask while the rows, the shapes that fit and the queue tiers stay the same)."""
        sel = self._selected
        if sel is None or sel.mask is not allowed or sel.per_shape.shape[0] != n_shapes:
            sel = self._selected = _Selection(self, allowed, n_shapes)
        return sel


class _Selection:
    """The ``allowed`` rows of a ``Rows`` (``idx``) with their shape, boost, key, work and known work, and per demand
    shape how many of them there are (``per_shape``), how many have known work (``known_per_shape``) and the sum of
    that work (``work_per_shape``): the search's sums over rows are then sums over a few shapes."""

    __slots__ = ("_q", "b", "idx", "key", "known", "known_per_shape", "mask", "pc", "per_shape", "s",
                 "shapes_present", "work_per_shape")

    def __init__(self, rows: Rows, allowed: NDArray[np.bool_], n_shapes: int) -> None:
        self.mask = allowed
        self.idx = np.flatnonzero(allowed)
        self.s, self.b, self.key = rows.shape_of[self.idx], rows.boost[self.idx], rows.key[self.idx]
        self.pc, self.known = rows.pc[self.idx], rows.known[self.idx]
        self.per_shape = np.bincount(self.s, minlength=n_shapes).astype(np.float64)
        self.shapes_present = np.flatnonzero(self.per_shape)
        ks = self.s[self.known]
        self.known_per_shape = np.bincount(ks, minlength=n_shapes)
        self.work_per_shape = np.bincount(ks, weights=self.pc[self.known], minlength=n_shapes)
        self._q: tuple[float, NDArray[np.float64]] | None = None

    def q(self, p_bar: float) -> NDArray[np.float64]:
        """Each row's ``p/p̄`` (1 where the work is unknown), kept until ``p̄`` changes."""
        if self._q is None or self._q[0] != p_bar:
            self._q = p_bar, np.where(self.known, self.pc / p_bar, 1.0)
        return self._q[1]


def best_candidate(shaped: ShapeScores, rows: Rows, allowed: NDArray[np.bool_], m: float) -> tuple[int, int] | None:
    """The (row, node) with the highest ``combined_score + boost`` among the ``allowed`` rows, first on ties; None
    if none fits.

    Same answer, bit for bit, as ``dense_best_candidate(shaped.score[rows.shape_of], rows.p, rows.boost, allowed,
    m)``: ``certified_best_candidate`` when its bound decides, ``exact_best_candidate`` otherwise.
    """
    got = certified_best_candidate(shaped, rows, allowed, m)
    if got == UNDECIDED:
        return exact_best_candidate(shaped, rows, allowed, m)
    return got


def certified_best_candidate(
    shaped: ShapeScores, rows: Rows, allowed: NDArray[np.bool_], m: float
) -> tuple[int, int] | None:
    """``exact_best_candidate``'s answer in O(rows + nodes), or ``UNDECIDED`` when the bound cannot tell.

    The reference computes ``v_i = (a_i − t_i) + b_i`` with ``t_i = (m·ā)·(p_i/p̄)`` (``work_penalty``),
    ``a_i`` the row's best alignment. Only ``ā`` and ``p̄`` need the (rows × nodes) candidates; here
    they come from per-shape sums, and ``ρ`` bounds their relative distance to the reference's bits
    under any summation order (``(n + 2)·u`` per sum of n non-negative terms, plus the tracked error
    of the running shape sums). Rows of one ``Rows.key`` get bitwise-equal ``v_i`` here and in the reference;
    the first row of the winning key wins only if every other row's value is below its own by more than both
    radii: ``ρ·t + 8u·(a + t·(1 + ρ) + |b|)`` for the winner, the same with every term at its largest over
    the rows for the others. Its node is the first one at ``a_i``, if the next lower alignment
    is more than a rounding below (no ``fl`` can merge them). With ``m = 0`` or no known work the
    reference's ``t`` is exactly 0 and this computes the very same operations. Boosts that are not all
    finite are left to the exact search.
    """
    sel = rows.select(allowed, shaped.count.shape[0])
    if not (shaped.count[sel.shapes_present] > 0).any():
        return None
    summaries = shaped.summaries()
    if summaries.exact_only or not rows.finite:
        return UNDECIDED
    s, b = sel.s, sel.b
    a = shaped.row_max[s]
    t, rho = _penalty_bounds(shaped.count, summaries, sel, m)
    if t is None:
        return UNDECIDED
    v = (a - t) + b  # finite b and t: never NaN, −inf exactly where a row fits nowhere
    i = int(v.argmax())
    if rho is None:  # t is exactly the reference's zeros: same operations, same bits
        if not np.isfinite(v[i]):
            return None
        return int(sel.idx[i]), int(np.argmax((shaped.score[s[i]] - t[i]) + b[i]))
    # i is the first row at the top value; another key at exactly that value may be above it in the reference.
    top = v == v[i]
    if (top & (sel.key != sel.key[i])).any():
        return UNDECIDED
    t_max = float(t.max())
    reach = rho * t_max + 8 * _U * (float(shaped.row_max.max()) + t_max * (1 + rho) + rows.b_max)
    mine = rho * t[i] + 8 * _U * (a[i] + t[i] * (1 + rho) + abs(b[i]))
    if float(np.where(top, -np.inf, v).max()) + reach >= v[i] - mine:
        return UNDECIDED
    row = shaped.score[s[i]]
    below = row[row < a[i]]
    second = float(below.max()) if below.size else -math.inf
    if second > -math.inf and a[i] - second <= 16 * _U * (a[i] + t[i] * (1 + rho) + abs(b[i])):
        return UNDECIDED
    return int(sel.idx[i]), int((row == a[i]).argmax())


def _penalty_bounds(
    count: NDArray[np.int64], summaries: _Summaries, sel: _Selection, m: float,
) -> tuple[NDArray[np.float64] | None, float | None]:
    """``t`` per selected row and a bound ``ρ`` on every row's relative radius; ``(zeros, None)`` when the
    reference's t is exactly 0.

    ``count``: feasible nodes per shape. The sums over rows are sums over shapes of per-shape totals (``_Selection``):
    a dot product over S shapes rounds at most (S + 1)·u, and a shape's total of its rows' work at most its rows'
    count times u, both within the (rows + 4)·u the radius allows for our sums. ``(None, None)``: too close to
    underflow to bound; let the exact search decide.
    """
    weight = remaining_work.clean_weight(m)
    n_known = int(count @ sel.known_per_shape)  # known work on rows that fit somewhere
    if weight == 0.0 or n_known == 0:
        return np.zeros(sel.s.shape), None
    p_sum = float(count @ sel.work_per_shape)
    if p_sum == 0.0:  # every known p is 0: the reference's p̄ is exactly 0
        return np.zeros(sel.s.shape), None
    a_sum = float(summaries.sums @ sel.per_shape)
    a_err = float(summaries.error @ sel.per_shape)
    if a_sum == 0.0 and a_err == 0.0:  # every feasible alignment is 0: ā is exactly 0
        return np.zeros(sel.s.shape), None
    n_all = int(count @ sel.per_shape)
    a_bar, p_bar = a_sum / n_all, p_sum / n_known
    # p/p̄ ≤ n_known (p ≥ 0), so t is finite when (m·ā)·n_known is.
    if not (a_bar > _TINY and p_bar > _TINY and math.isfinite(weight * a_bar * 2 * n_known)
            and math.isfinite(p_bar)):
        return None, None
    n_rows = sel.s.shape[0]
    rho_a = a_err / a_sum + (n_rows + 4) * _U + (n_all + 4) * _U  # our sums + the reference's mean
    rho_p = (n_rows + 4) * _U + (n_known + 4) * _U
    return (weight * a_bar) * sel.q(p_bar), 2 * (rho_a + rho_p) + 16 * _U


def exact_best_candidate(
    shaped: ShapeScores, rows: Rows, allowed: NDArray[np.bool_], m: float
) -> tuple[int, int] | None:
    """``dense_best_candidate``'s answer, bit for bit, without building the (rows × nodes) matrix.

    ``remaining_work.work_penalty`` gets the same feasible entries in the same order (so the same
    floating-point sums), and since ``x ↦ (x − t) + b`` is monotone under rounding, a row's best
    value is its best alignment's; only the winning row is scanned node by node for the first node
    reaching it.
    """
    if not allowed.any():
        return None
    idx = np.flatnonzero(allowed)
    s = rows.shape_of[idx]
    cnt = shaped.count[s]
    if not cnt.any():
        return None
    b = rows.boost[idx]
    t = remaining_work.work_penalty(shaped.feasible_scores(s), rows.p[idx], cnt, m)  # combined_score's, per row
    best_of_row = (shaped.row_max[s] - t) + b
    if np.isnan(best_of_row).any():  # cannot happen for finite inputs; keep the reference rule
        return dense_best_candidate(shaped.score[rows.shape_of], rows.p, rows.boost, allowed, m)
    i = int(np.argmax(best_of_row))
    if not np.isfinite(best_of_row[i]):
        return None
    n = int(np.argmax((shaped.score[s[i]] - t[i]) + b[i]))
    return int(idx[i]), n


def dense_best_candidate(
    score: NDArray[np.float64], p: NDArray[np.float64], boost: NDArray[np.float64], rows: NDArray[np.bool_], m: float
) -> tuple[int, int] | None:
    """The straightforward search over the full (rows × nodes) score matrix (reference for the fast ones)."""
    if not rows.any():
        return None
    idx = np.flatnonzero(rows)
    sub = score[idx]
    if not np.isfinite(sub).any():
        return None
    combined = remaining_work.combined_score(sub, p[idx], m) + boost[idx, None]
    flat = int(np.argmax(combined))
    i, n = divmod(flat, score.shape[1])
    if not np.isfinite(combined[i, n]):
        return None
    return int(idx[i]), int(n)
