"""Short/long task classifier (OPERA §III-B): hierarchical naive Bayes, learned online.

Only ``auto`` pods use it: a task classified *short* may run on harvested
capacity; a *long* (or unknown) task waits for regular capacity.

Features (OPERA Eq. 1). A task ``t`` is described by categorical properties —
framework ``F``, application ``A``, stage ``S``, job progress ``P`` and demand
``D`` (numbers turned into buckets by :func:`bucket_progress` /
:func:`bucket_demand`) — combined into a *hierarchy* of features:

    𝓕_t = ( {F}, {F, A}, {F, A, S}, {F, A, S, P, D} )

each element one categorical value (the tuple of the properties it names).
Posterior (Eq. 2–3), with Laplace smoothing (``a`` = 1):

    P(C | 𝓕_t) ∝ P(C) · Π_i P(𝓕_t^i | C),     C ∈ {short, long}
    P(C)          = (n_C + a) / (n + 2a)
    P(v | C)      = (n_{C,i,v} + a) / (n_C + a·(V_i + 1))

``n`` tasks observed, ``n_C`` of class C, ``n_{C,i,v}`` of class C whose level-``i``
feature was ``v``, ``V_i`` distinct level-``i`` values seen (+1 keeps mass for an
unseen value). A task is short when ``P(short|𝓕) > P(long|𝓕)`` (a tie is long).

Training (§III-B): "probabilities … are online learned and updated upon the
completion of tasks": a finished task is short when its duration is at most the
threshold (default 60 s, "e.g., 1 minute"). Unseen tasks: "when an application
with all new features is submitted, i.e., no historical information can be
referred … we opt to conservatively classify the task as a *long* one" — so a
task none of whose hierarchy features has ever been observed (and every task
before the first observation) is long, with ``probability_short = 0``.

Bounded (ours): each level keeps at most ``max_values`` values (:data:`MAX_VALUES`), the least recently
observed forgotten first. A forgotten value's counts stay in ``n_C`` and ``n`` (those tasks were observed) and
are tallied per level as *forgotten*, so every level still adds up to the class totals.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from stowage.config import ClassifierSettings
from stowage.policy.tolerances import ROUNDING_EPS

__all__ = [
    "DEFAULT_LEVELS",
    "MAX_VALUES",
    "ShortLongClassifier",
    "app_name",
    "bucket_demand",
    "bucket_progress",
    "task_features",
    "with_progress",
]

#: OPERA Eq. 1: framework, +application, +stage, +progress and demand.
DEFAULT_LEVELS: tuple[tuple[str, ...], ...] = (
    ("framework",),
    ("framework", "app"),
    ("framework", "app", "stage"),
    ("framework", "app", "stage", "progress", "demand"),
)

#: Values kept per level. The operator saves every row in one ConfigMap (1 MiB, shared with the estimates); saved, a
#: row takes ~25 bytes at the coarsest level to ~100 at the finest for typical names, so 500 per level is ~125 KiB.
#: That still holds hundreds of recurring apps at the (framework, app) level, which judges a task unseen at finer ones.
MAX_VALUES: Final = 500

_SHORT, _LONG = 0, 1
_STATE_VERSION = 1


class ShortLongClassifier:
    """Online hierarchical naive Bayes over categorical task features (module docstring).

    ``threshold_s``: a finished task of at most this duration is short
    (``ClassifierSettings.short_task_threshold_s``). ``levels``: the feature
    hierarchy, each level a tuple of property names looked up in the features
    mapping (a missing property is the empty string). ``smoothing``: Laplace ``a``.
    ``min_evidence_level``: evidence is required at this level or a finer one
    (0 = the paper's rule: any level seen before). ``max_values``: values kept per level, the least recently
    observed forgotten first (module docstring).
    Deterministic: state is counts and the order values were last observed in.
    """

    def __init__(
        self,
        threshold_s: float = ClassifierSettings().short_task_threshold_s,
        *,
        levels: Sequence[Sequence[str]] = DEFAULT_LEVELS,
        smoothing: float = 1.0,
        min_evidence_level: int = 0,
        max_values: int = MAX_VALUES,
    ) -> None:
        threshold = float(threshold_s)
        self.threshold_s = (
            threshold if math.isfinite(threshold) and threshold > 0 else (ClassifierSettings().short_task_threshold_s)
        )
        self.levels: tuple[tuple[str, ...], ...] = tuple(tuple(level) for level in levels) or DEFAULT_LEVELS
        a = float(smoothing)
        self.smoothing = a if math.isfinite(a) and a > 0 else 1.0
        self.min_evidence_level = min(max(int(min_evidence_level), 0), len(self.levels) - 1)
        self.max_values = max(int(max_values), 1)
        self._class_counts = [0, 0]
        # Per level: value → [short, long], least recently observed first; and the counts of values forgotten.
        self._counts: list[OrderedDict[tuple[str, ...], list[int]]] = [OrderedDict() for _ in self.levels]
        self._forgotten = [[0, 0] for _ in self.levels]

    # --- learning ---

    def _values(self, features: Mapping[str, object]) -> list[tuple[str, ...]]:
        return [tuple(str(features.get(name, "")) for name in level) for level in self.levels]

    def observe_many(self, features: Mapping[str, object], durations_s: Iterable[float]) -> tuple[int, int]:
        """Learn from finished tasks that share ``features``; returns how many counted (short, long).

        A NaN or infinite duration teaches nothing; a negative one counts as 0. The hierarchy values are built
        once for all of them and each count grows by the number of tasks: the counts are integers, so this
        equals learning the tasks one at a time, in any order.
        """
        counted = [0, 0]
        for duration in durations_s:
            d = float(duration)
            if math.isfinite(d):
                counted[_SHORT if max(d, 0.0) <= self.threshold_s else _LONG] += 1
        short, long_ = counted
        if short or long_:  # no row for features that taught nothing: V_i counts values seen
            self._class_counts[_SHORT] += short
            self._class_counts[_LONG] += long_
            for table, value in zip(self._counts, self._values(features), strict=True):
                row = table.setdefault(value, [0, 0])
                table.move_to_end(value)
                row[_SHORT] += short
                row[_LONG] += long_
            self._forget_oldest()
        return short, long_

    def _forget_oldest(self) -> None:
        """Drop the least recently observed values past ``max_values``; their counts move to the level's forgotten."""
        for table, forgotten in zip(self._counts, self._forgotten, strict=True):
            while len(table) > self.max_values:
                _, n = table.popitem(last=False)
                forgotten[_SHORT] += n[_SHORT]
                forgotten[_LONG] += n[_LONG]

    def observe(self, features: Mapping[str, object], duration_s: float) -> bool | None:
        """Learn from one finished task (``observe_many``); returns whether it counted as short (None: ignored)."""
        short, long_ = self.observe_many(features, (duration_s,))
        return None if short + long_ == 0 else short == 1

    @property
    def n_observed(self) -> int:
        """Tasks learned from so far."""
        return self._class_counts[_SHORT] + self._class_counts[_LONG]

    @property
    def class_counts(self) -> tuple[int, int]:
        """(short, long) tasks observed."""
        return self._class_counts[_SHORT], self._class_counts[_LONG]

    # --- inference ---

    def has_evidence(self, features: Mapping[str, object]) -> bool:
        """True if some hierarchy feature of this task (at ``min_evidence_level`` or finer) was seen."""
        values = self._values(features)
        return any(values[i] in self._counts[i] for i in range(self.min_evidence_level, len(self.levels)))

    def probability_short(self, features: Mapping[str, object]) -> float:
        """Posterior ``P(short | 𝓕_t)`` in [0, 1]; 0 for a task without evidence (the paper's rule)."""
        if self.n_observed == 0 or not self.has_evidence(features):
            return 0.0
        a = self.smoothing
        n = self.n_observed
        log_post = [0.0, 0.0]
        values = self._values(features)
        for c in (_SHORT, _LONG):
            n_c = self._class_counts[c]
            lp = math.log((n_c + a) / (n + 2 * a))
            for table, value in zip(self._counts, values, strict=True):
                hits = table.get(value, (0, 0))[c]
                lp += math.log((hits + a) / (n_c + a * (len(table) + 1)))
            log_post[c] = lp
        # Normalise in log space: P(short) = 1 / (1 + exp(lp_long − lp_short)).
        diff = log_post[_LONG] - log_post[_SHORT]
        if diff > 700:
            return 0.0
        return 1.0 / (1.0 + math.exp(diff))

    def is_short(self, features: Mapping[str, object]) -> bool:
        """Short (eligible for harvested capacity) iff ``P(short) > P(long)``; unknown and ties are long."""
        return self.probability_short(features) > 0.5

    # --- state ---

    def state_dict(self) -> dict[str, Any]:
        """Everything the classifier knows, JSON-serialisable: its parameters and its counts.

        ``{"version": 1, "threshold_s", "levels", "smoothing", "min_evidence_level", "class_counts": [short,
        long], "counts": [[[*value, short, long], ...] per level], "forgotten": [[short, long] per level]}``, each
        level's rows least recently observed first (the order forgetting follows). Its size is at most
        ``max_values`` rows per level, whatever the number of tasks observed.
        """
        return {
            "version": _STATE_VERSION,
            "threshold_s": self.threshold_s,
            "levels": [list(level) for level in self.levels],
            "smoothing": self.smoothing,
            "min_evidence_level": self.min_evidence_level,
            "class_counts": list(self._class_counts),
            "counts": [[[*value, n[_SHORT], n[_LONG]] for value, n in table.items()] for table in self._counts],
            "forgotten": [list(f) for f in self._forgotten],
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any], *, max_values: int = MAX_VALUES) -> ShortLongClassifier:
        """The classifier ``state_dict()`` describes, predicting exactly as the original did.

        A state without ``forgotten`` (an unbounded classifier's) has forgotten nothing, and its rows, sorted, are
        taken as the order they were observed in. Past ``max_values`` rows in a level the first ones are forgotten.

        Raises ``ValueError`` (wrong version, a row of the wrong length, negative counts, class totals that
        disagree with a level's rows and forgotten counts), ``KeyError`` or ``TypeError`` when ``state`` is
        malformed.
        """
        if int(state["version"]) != _STATE_VERSION:
            raise ValueError(f"version: this reads classifier state version {_STATE_VERSION}, got {state['version']!r}")
        out = cls(float(state["threshold_s"]), levels=[[str(n) for n in level] for level in state["levels"]],
                  smoothing=float(state["smoothing"]), min_evidence_level=int(state["min_evidence_level"]),
                  max_values=max_values)
        short, long_ = (int(x) for x in state["class_counts"])
        rows = list(state["counts"])
        if len(rows) != len(out.levels):
            raise ValueError(f"counts: {len(rows)} levels, the classifier has {len(out.levels)}")
        forgotten = [[int(x) for x in f] for f in state.get("forgotten") or [[0, 0] for _ in rows]]
        if len(forgotten) != len(rows) or any(len(f) != 2 for f in forgotten):
            raise ValueError(f"forgotten: must hold [short, long] for each of the {len(out.levels)} levels")
        if min(min(f) for f in forgotten) < 0:
            raise ValueError("forgotten: negative count")
        for level, table, level_rows, gone in zip(out.levels, out._counts, rows, forgotten, strict=True):
            for row in level_rows:
                if len(row) != len(level) + 2:
                    raise ValueError(f"counts: row {row!r} must hold {len(level)} values and two counts")
                n = [int(row[-2]), int(row[-1])]
                if min(n) < 0:
                    raise ValueError(f"counts: negative count in {row!r}")
                table[tuple(str(v) for v in row[:-2])] = n
            totals = [sum(n[c] for n in table.values()) + gone[c] for c in (_SHORT, _LONG)]
            if (level_rows or any(gone)) and totals != [short, long_]:
                raise ValueError("counts: a level's counts and forgotten counts do not add up to class_counts")
        if min(short, long_) < 0:
            raise ValueError("class_counts: negative count")
        out._class_counts = [short, long_]
        out._forgotten = forgotten
        out._forget_oldest()
        return out


def bucket_progress(fraction: float, *, buckets: int = 4) -> str:
    """A job's progress (fraction of its tasks finished) as one of ``buckets`` equal ranges.

    ``0.3`` with 4 buckets → ``"25-50%"``; 1.0 falls in the last bucket. Values are
    clamped to [0, 1]; NaN → ``"unknown"``.
    """
    f = float(fraction)
    if math.isnan(f):
        return "unknown"
    b = max(int(buckets), 1)
    f = min(max(f, 0.0), 1.0)
    i = min(int(f * b), b - 1)
    lo, hi = 100 * i / b, 100 * (i + 1) / b
    return f"{lo:g}-{hi:g}%"


def _log_bucket(value: float, base: float) -> str:
    if not math.isfinite(value) or value <= 0:
        return "0"
    # The epsilon keeps exact powers (1000 in base 10) in their own bucket despite log rounding.
    k = math.floor(math.log(value) / math.log(base) + ROUNDING_EPS)
    return f"{base:g}^{k}"


def bucket_demand(demand: Mapping[str, float] | float, *, base: float = 2.0) -> str:
    """A demand as a logarithmic bucket: ``floor(log_base v)``, per resource for a mapping.

    ``bucket_demand(3.0)`` → ``"2^1"``; ``bucket_demand({"cpu": 0.5, "memory": 2**30})`` →
    ``"cpu=2^-1,memory=2^30"`` (names sorted). Zero, negative or NaN → ``"0"``.
    A base that is not a finite number above 1 falls back to 2.
    """
    b = float(base)
    b = b if math.isfinite(b) and b > 1 else 2.0
    if isinstance(demand, Mapping):
        return ",".join(f"{name}={_log_bucket(float(demand[name]), b)}" for name in sorted(demand))
    return _log_bucket(float(demand), b)


def app_name(key: str) -> str:
    """An application: ``key`` without trailing numbers (``ns/sort-0042`` → ``ns/sort``)."""
    stem = key.rstrip("0123456789-_.")
    return stem or key


def task_features(queue: str, job_key: str, group: str, demand: Mapping[str, float],
                  mean_capacity: Mapping[str, float] | None = None, job_progress: float | None = None
                  ) -> dict[str, str]:
    """OPERA Eq. 1 properties of a task: the one builder the operator's dispatcher, its lessons and the simulator
    call, so the classifier is asked about what it was taught.

    framework = the queue; app = ``app_name(job_key)``: pass the job's ``estimates.recurring_key``, which runs of
    one job share (generateName'd ``etl-x7k2p`` and ``etl-q9z4m`` → ``ns/etl``), and without trailing numbers
    (``sort-0041``, ``sort-0042`` → ``ns/sort``), so the classifier learns one app per application, not one per
    run, and its tables stay bounded by the applications; stage = the group; demand = ``bucket_demand`` of
    ``demand`` divided by ``mean_capacity`` (the mean node capacity per resource; a resource without a positive
    one stays as given), so the buckets are fractions of a node; progress = ``bucket_progress(job_progress)``
    (finished / total tasks of the job; None leaves it out, for the parts that never change).
    """
    mean = mean_capacity or {}
    scaled = {r: v / mean[r] if mean.get(r, 0) > 0 else v for r, v in demand.items()}
    out = {"framework": queue, "app": app_name(job_key), "stage": group, "demand": bucket_demand(scaled)}
    return out if job_progress is None else with_progress(out, job_progress)


def with_progress(static: Mapping[str, str], job_progress: float) -> dict[str, str]:
    """``static`` (``task_features`` without progress, which a caller may keep per group) with the job's progress."""
    return {**static, "progress": bucket_progress(job_progress)}
