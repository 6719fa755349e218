"""How long one task of a group will run: estimates, not oracles (Tetris §4.1).

Remaining work (``remaining_work.py``) and FSP job sizes multiply tasks left by a per-task duration; users
rarely state one. :func:`estimate` gives every task group a finite, positive duration and says where it
came from (:class:`Source`). Per group (one row), the first that applies::

    HINT     the user's expectedDuration / stowage.io/expected-duration
    PHASE    the mean duration of the group's finished tasks, once ≥ min_finished finished
             (a phase's tasks are statistically alike, Tetris §4.1)
    HISTORY  the mean of this group over earlier runs of the same recurring job (:class:`RecurringHistory`)
    PRIOR    the queue's learned prior (:class:`DurationPriors`); no valid prior: default_prior_s

then the lower bound of what is already running::

    d ← elapsed · elapsed_margin, source ELAPSED    if elapsed > d   (elapsed: the longest running task's run time)
    d ← max(d, min_duration_s)

A value that is NaN, ±inf, zero or negative is absent wherever it appears: it is never propagated, so the
result is always finite and at least ``min_duration_s``. The margins (``prior_margin``, ``elapsed_margin``)
over- rather than under-estimate: a job taken for shorter than it is would jump the queue and stay.

:class:`DurationPriors` and :class:`RecurringHistory` are the state learned from finished tasks; both are
deterministic, bounded (at most :data:`MAX_KEYS` keys each, the least recently observed forgotten first), and
round-trip through ``state_dict`` / ``from_state`` (the operator saves them across restarts).
:func:`recurring_key` names the runs of one recurring job.
"""

from __future__ import annotations

import enum
import math
import re
import sys
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from stowage.config import MAX_LEARNED_KEYS, EstimateSettings
from stowage.errors import InvalidInput
from stowage.labels import LABEL_RECURRING

__all__ = [
    "MAX_KEYS",
    "SOURCE_NAMES",
    "DurationPriors",
    "Estimates",
    "Evidence",
    "RecurringHistory",
    "Source",
    "estimate",
    "recurring_key",
]

#: Keys each learned table keeps: queues in DurationPriors, (recurring key, group) pairs in RecurringHistory (where
#: ``estimates.history_max_entries`` may lower it). The operator saves both in one ConfigMap (1 MiB, shared with the
#: classifier); saved, a history row takes ~65 bytes and a queue's prior ~50 for typical names, so 1000 of each stay
#: under ~115 KiB together, while covering hundreds of recurring jobs and more queues than a cluster has.
MAX_KEYS: Final = MAX_LEARNED_KEYS

_STATE_VERSION = 1
_FLOAT_MAX = sys.float_info.max
_RUN_SUFFIX = re.compile(r"(.+)-[0-9]+")


class Source(enum.IntEnum):
    """Where a group's duration estimate came from, in the order :func:`estimate` tries them."""

    HINT = 0  # the user's expectedDuration / stowage.io/expected-duration
    PHASE = 1  # mean of the group's finished tasks (a phase's tasks are alike, Tetris §4.1)
    ELAPSED = 2  # a running task of the group has already run longer than the estimate: elapsed is a lower bound
    HISTORY = 3  # earlier runs of the same recurring job (same recurring key, same group name)
    PRIOR = 4  # nothing known: the queue's learned prior


#: ``Source`` values as label values (metrics, status), indexed by the value.
SOURCE_NAMES: tuple[str, ...] = ("hint", "phase", "elapsed", "history", "prior")


@dataclass(frozen=True, slots=True)
class Evidence:
    """What is known of each task group, one row per group; every field a (G,) array."""

    hint_s: NDArray[np.float64]  # the user's duration hint; NaN: none
    finished: NDArray[np.int64]  # tasks of the group that finished (succeeded)
    finished_mean_s: NDArray[np.float64]  # mean duration of those; ignored where finished == 0
    elapsed_s: NDArray[np.float64]  # longest elapsed run time among the group's running tasks; 0 or NaN: none
    history_s: NDArray[np.float64]  # earlier runs of the recurring job (RecurringHistory.get); NaN: none
    prior_s: NDArray[np.float64]  # the row's queue prior (DurationPriors.prior)


@dataclass(frozen=True, slots=True)
class Estimates:
    """One duration per task group and where it came from."""

    duration_s: NDArray[np.float64]  # (G,) finite, >= settings.min_duration_s, never NaN
    source: NDArray[np.int8]  # (G,) Source values


def _column(ev: Evidence, name: str, g: int | None) -> NDArray[np.float64]:
    values = np.asarray(getattr(ev, name), dtype=np.float64).reshape(-1)
    if g is not None and values.shape != (g,):
        raise InvalidInput(f"evidence.{name}.shape", values.shape, f"must be ({g},), one row per task group")
    return values


def _valid(values: NDArray[np.float64]) -> NDArray[np.bool_]:
    """Finite and positive: everything else (NaN, ±inf, 0, negative) is no evidence."""
    return np.isfinite(values) & (values > 0.0)


def estimate(ev: Evidence, settings: EstimateSettings) -> Estimates:
    """Per task group, the expected duration of one task and its :class:`Source` (module docstring).

    Args:
        ev: (G,) arrays; NaN, ±inf, zero and negative values are treated as absent in every field.
        settings: ``min_finished``, ``elapsed_margin``, ``min_duration_s``, ``default_prior_s``.

    Returns:
        :class:`Estimates` with ``duration_s`` finite and ``>= min_duration_s`` on every row.

    Raises:
        InvalidInput: the fields do not all have the same length.
    """
    hint = _column(ev, "hint_s", None)
    g = hint.shape[0]
    finished, mean = _column(ev, "finished", g), _column(ev, "finished_mean_s", g)
    elapsed, history, prior = _column(ev, "elapsed_s", g), _column(ev, "history_s", g), _column(ev, "prior_s", g)

    # First that applies: hint, the phase's finished tasks, earlier runs, the queue's prior.
    hint_ok = _valid(hint)
    phase_ok = ~hint_ok & (finished >= settings.min_finished) & _valid(mean)
    history_ok = ~hint_ok & ~phase_ok & _valid(history)
    duration = np.where(_valid(prior), prior, settings.default_prior_s)
    duration = np.where(history_ok, history, duration)
    duration = np.where(phase_ok, mean, duration)
    duration = np.where(hint_ok, hint, duration)
    source = np.full(g, Source.PRIOR, dtype=np.int8)
    source[history_ok] = Source.HISTORY
    source[phase_ok] = Source.PHASE
    source[hint_ok] = Source.HINT

    # A task that has already run longer than the estimate will run somewhat longer still.
    longer = _valid(elapsed) & (elapsed > duration)
    with np.errstate(over="ignore"):  # a huge elapsed × margin is capped just below, never inf
        stretched = np.minimum(elapsed * settings.elapsed_margin, _FLOAT_MAX)
    duration = np.where(longer, stretched, duration)
    source[longer] = Source.ELAPSED
    return Estimates(duration_s=np.maximum(duration, settings.min_duration_s), source=source)


# --- learned state ------------------------------------------------------------------------------


def _usable(duration_s: float) -> bool:
    """A finished task's duration worth learning from: finite and not negative."""
    return math.isfinite(duration_s) and duration_s >= 0.0


def _mean_entry(row: Sequence[Any], where: str) -> tuple[int, float]:
    """``[count, mean]`` from saved state: a count >= 1 and a finite mean >= 0, else ValueError/TypeError."""
    count, mean = row
    if isinstance(count, bool) or not isinstance(count, int):
        raise TypeError(f"{where}: the count must be a whole number, got {count!r}")
    mean = float(mean)
    if count < 1 or not _usable(mean):
        raise ValueError(f"{where}: must hold a count >= 1 and a finite mean >= 0, got {[count, mean]!r}")
    return count, mean


def _check_version(state: Mapping[str, Any], what: str) -> None:
    if state["version"] != _STATE_VERSION:
        raise ValueError(f"version: this reads {what} state version {_STATE_VERSION}, got {state['version']!r}")


class DurationPriors:
    """Per-queue learned prior of one task's duration: before any task of the queue finished,
    settings.default_prior_s; after, the mean of the queue's finished task durations × settings.prior_margin
    (over- rather than under-estimate).

    The prior is at least ``settings.min_duration_s`` (a queue of zero-length tasks still has a positive
    prior) and finite. The state is a count and a running mean per queue, for at most :data:`MAX_KEYS` queues
    (the least recently observed forgotten: it has the default prior again); the margin is applied when asked,
    so a changed setting takes effect on restored state.
    """

    def __init__(self, settings: EstimateSettings) -> None:
        self.settings = settings
        self._queues: OrderedDict[str, tuple[int, float]] = OrderedDict()  # least recently observed first

    def __len__(self) -> int:
        return len(self._queues)

    def observe(self, queue: str, duration_s: float) -> None:
        """Learn from one finished task of ``queue``; a non-finite or negative duration is ignored."""
        duration_s = float(duration_s)
        if not _usable(duration_s):
            return
        count, mean = self._queues.pop(queue, (0, 0.0))
        count += 1
        self._queues[queue] = (count, mean + (duration_s - mean) / count)  # running mean: no overflowing sum
        while len(self._queues) > MAX_KEYS:
            self._queues.popitem(last=False)

    def prior(self, queue: str) -> float:
        """Seconds: the queue's prior (class docstring)."""
        if queue not in self._queues:
            return self.settings.default_prior_s
        learned = min(self._queues[queue][1] * self.settings.prior_margin, _FLOAT_MAX)
        return max(learned, self.settings.min_duration_s)

    def learned_mean(self, queue: str) -> float | None:
        """Seconds: the mean of the queue's finished task durations, without the margin (None: none learned).
        The forecast predicts from it; the decision reads :meth:`prior`."""
        entry = self._queues.get(queue)
        return None if entry is None else max(entry[1], self.settings.min_duration_s)

    def priors(self, queues: Sequence[str]) -> NDArray[np.float64]:
        """(len(queues),) the prior of each row's queue, for :attr:`Evidence.prior_s`."""
        known = {q: self.prior(q) for q in set(queues)}
        return np.array([known[q] for q in queues], dtype=np.float64)

    def state_dict(self) -> dict[str, Any]:
        """``{"version": 1, "queues": {queue: [count, mean_s]}, "recent": [queue, ...]}``, JSON-serialisable, keys
        sorted; ``recent`` names the queues least recently observed first (a mapping's order does not survive
        ``json.dumps(sort_keys=True)``)."""
        return {"version": _STATE_VERSION, "queues": {q: list(self._queues[q]) for q in sorted(self._queues)},
                "recent": list(self._queues)}

    @classmethod
    def from_state(cls, state: Mapping[str, Any], settings: EstimateSettings) -> DurationPriors:
        """The priors ``state_dict()`` describes; without ``recent`` (an unbounded table), the queues in sorted
        order; past :data:`MAX_KEYS` the least recently observed are dropped.
        ValueError, KeyError or TypeError when ``state`` is malformed."""
        _check_version(state, "duration priors")
        queues = state["queues"]
        if not isinstance(queues, Mapping):
            raise TypeError(f"queues: must map queue names to [count, mean_s], got {queues!r}")
        recent = state.get("recent")
        if recent is None:
            recent = sorted(queues)
        elif not isinstance(recent, list) or sorted(recent) != sorted(queues):
            raise ValueError(f"recent: must name each queue of queues once, got {recent!r}")
        out = cls(settings)
        for queue in recent:
            out._queues[str(queue)] = _mean_entry(queues[queue], f"queues[{queue!r}]")
        while len(out._queues) > MAX_KEYS:
            out._queues.popitem(last=False)
        return out


class RecurringHistory:
    """Per (recurring key, group name): the mean duration of one task over earlier runs, the count capped at
    settings.history_weight_cap so newer runs move it; at most :attr:`max_entries` keys (least recently updated
    dropped).

    Past the cap the mean moves by ``(d − mean)/cap`` per finished task, an exponential average, so a
    recurring job that got slower is followed. Entries are (key, group) pairs.

    Beside durations, per the same pairs and under the same bounds, the sustained disk and network use of one task
    (:meth:`observe_use`, :meth:`use`; ``policy.use_estimates``' ``HISTORY`` row), as a fraction of what the task
    declared: a run that declares more or less than the last one keeps what its tasks use of it. A fraction
    higher than the one kept replaces it at once, a lower one moves it by ``(f − kept)/count`` (count capped as
    above): the kept value is a peak, over- rather than under-estimated (as the ``OBSERVED`` row, the highest of
    the group's tasks), that follows a recurring job that got lighter.
    """

    def __init__(self, settings: EstimateSettings) -> None:
        self.settings = settings
        self.max_entries = min(settings.history_max_entries, MAX_KEYS)
        self._entries: OrderedDict[tuple[str, str], tuple[int, float]] = OrderedDict()  # oldest update first
        self._use: OrderedDict[tuple[str, str], tuple[int, dict[str, float]]] = OrderedDict()  # the same, of use

    def __len__(self) -> int:
        return len(self._entries)

    def observe_use(self, key: str, group: str, used: Mapping[str, float]) -> None:
        """Learn one finished task's sustained use: ``used`` maps a resource to its use ÷ what the task declared
        of it (class docstring). Non-finite or negative fractions are ignored; nothing left: nothing learned."""
        fractions = {str(r): float(f) for r, f in used.items() if _usable(float(f))}
        if not fractions:
            return
        count, kept = self._use.pop((key, group), (0, {}))
        count = min(count + 1, self.settings.history_weight_cap)
        for r, f in fractions.items():
            old = kept.get(r)
            kept[r] = f if old is None or f >= old else old + (f - old) / count
        self._use[(key, group)] = (count, kept)
        while len(self._use) > self.max_entries:
            self._use.popitem(last=False)

    def use(self, key: str, group: str) -> dict[str, float]:
        """resource → the group's sustained use over earlier runs, as a fraction of the declared; {} when unknown."""
        entry = self._use.get((key, group))
        return {} if entry is None else dict(entry[1])

    def observe(self, key: str, group: str, duration_s: float) -> None:
        """Learn from one finished task of ``group`` in a run of ``key``; non-finite or negative ignored."""
        duration_s = float(duration_s)
        if not _usable(duration_s):
            return
        count, mean = self._entries.pop((key, group), (0, 0.0))
        count = min(count + 1, self.settings.history_weight_cap)
        self._entries[(key, group)] = (count, mean + (duration_s - mean) / count)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def get(self, key: str, group: str) -> float:
        """Seconds: the group's mean over earlier runs; NaN when unknown."""
        entry = self._entries.get((key, group))
        return math.nan if entry is None else entry[1]

    def state_dict(self) -> dict[str, Any]:
        """``{"version": 1, "entries": [[key, group, count, mean_s], ...], "use": [[key, group, count, {resource:
        fraction}], ...]}``, least recently updated first (a state without ``use`` reads as none learned)."""
        return {"version": _STATE_VERSION, "entries": [[k, g, c, m] for (k, g), (c, m) in self._entries.items()],
                "use": [[k, g, c, dict(sorted(f.items()))] for (k, g), (c, f) in self._use.items()]}

    @classmethod
    def from_state(cls, state: Mapping[str, Any], settings: EstimateSettings) -> RecurringHistory:
        """The history ``state_dict()`` describes, under ``settings``' bounds (counts above the cap are
        capped; past :attr:`max_entries` the least recently updated are dropped).
        ValueError, KeyError or TypeError when ``state`` is malformed."""
        _check_version(state, "recurring history")
        out = cls(settings)
        for i, row in enumerate(state["entries"]):
            if not isinstance(row, Sequence) or isinstance(row, str) or len(row) != 4:
                raise ValueError(f"entries[{i}]: must be [key, group, count, mean_s], got {row!r}")
            key, group = row[0], row[1]
            if not isinstance(key, str) or not isinstance(group, str):
                raise TypeError(f"entries[{i}]: key and group must be strings, got {row[:2]!r}")
            if (key, group) in out._entries:
                raise ValueError(f"entries[{i}]: ({key!r}, {group!r}) appears twice")
            count, mean = _mean_entry(row[2:], f"entries[{i}]")
            out._entries[(key, group)] = (min(count, settings.history_weight_cap), mean)
        while len(out._entries) > out.max_entries:
            out._entries.popitem(last=False)
        for i, row in enumerate(state.get("use") or ()):
            if not isinstance(row, Sequence) or isinstance(row, str) or len(row) != 4 \
                    or not isinstance(row[3], Mapping):
                raise ValueError(f"use[{i}]: must be [key, group, count, {{resource: fraction}}], got {row!r}")
            key, group, count, fractions = row
            if not isinstance(key, str) or not isinstance(group, str):
                raise TypeError(f"use[{i}]: key and group must be strings, got {row[:2]!r}")
            if (key, group) in out._use:
                raise ValueError(f"use[{i}]: ({key!r}, {group!r}) appears twice")
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise ValueError(f"use[{i}]: count must be a whole number ≥ 1, got {count!r}")
            kept = {str(r): float(f) for r, f in fractions.items()}
            if not all(_usable(f) for f in kept.values()):
                raise ValueError(f"use[{i}]: fractions must be finite and ≥ 0, got {fractions!r}")
            out._use[(key, group)] = (min(count, settings.history_weight_cap), kept)
        while len(out._use) > out.max_entries:
            out._use.popitem(last=False)
        return out


def recurring_key(
    namespace: str, name: str, labels: Mapping[str, str] | None = None, generate_name: str | None = None
) -> str:
    """namespace/ + the value of label stowage.io/recurring if set; else metadata.generateName without its
    trailing '-'; else the name with one trailing run suffix '-<digits>' removed (nightly-etl-42 → nightly-etl,
    etl-20261127 → etl); else the name.

    A blank label or a generateName of only '-' counts as unset.
    """
    label = str((labels or {}).get(LABEL_RECURRING, "")).strip()
    if label:
        return f"{namespace}/{label}"
    base = (generate_name or "").removesuffix("-")
    if base:
        return f"{namespace}/{base}"
    run = _RUN_SUFFIX.fullmatch(name)
    return f"{namespace}/{run.group(1) if run else name}"
