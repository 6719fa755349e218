"""Every Stowage knob, its default and why, in one place; loading and validation.

Three steps, kept apart (STYLE §7): parse a YAML file / env / flags into a
nested dict of overrides (wire form) → :func:`apply_overrides` onto the
defaults → :func:`validate`, which reports *every* problem with its dotted
path, the value and the allowed range. :func:`load_settings` does all three.

YAML file shape (every key optional)::

    harvest:    {t_alloc: {cpu: 0.9, memory: 0.9}, ramp_up_s: 30, utilization_stale_after_s: 30, usage_window_s: 15}
    contention: {t_preempt: {cpu: 0.99, memory: 0.95}, sustained_count: 3, sustained_count_cpu: 6,
                 sample_interval_s: 1, policy: preserve, alpha: 2, ...}
    packing:    {fairness_knob: 0.25, barrier_knob: 0.9, remaining_work_weight: 1.0, remote_penalty: 0.1,
                 bottleneck_weight: 0, critical_path_fraction: 0, critical_tier_budget: 1,
                 starvation_skip_limit: 30, gang_ready_timeout_s: 300}
    classifier: {short_task_threshold_s: 60}
    estimates:  {default_prior_s: 300, prior_margin: 1.5, min_finished: 1, elapsed_margin: 1.25, min_duration_s: 1,
                 history_weight_cap: 100, history_max_entries: 1000, forecast_interval_s: 5, bandwidth_margin: 1.25,
                 bandwidth_window_s: 30, bandwidth_fill: 1.0}

Environment: ``STOWAGE_<SECTION>__<KEY>`` (``STOWAGE_CONTENTION__POLICY=neutral``;
per-resource keys as ``STOWAGE_HARVEST__T_ALLOC__CPU=0.8``).
"""

from __future__ import annotations

import dataclasses
import enum
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from stowage.errors import ConfigError
from stowage.resources import CPU, DISK, MEMORY, NETWORK

__all__ = [
    "MAX_LEARNED_KEYS",
    "ClassifierSettings",
    "ContentionPolicy",
    "ContentionSettings",
    "EstimateSettings",
    "HarvestSettings",
    "PackingSettings",
    "PerResource",
    "StowageSettings",
    "apply_overrides",
    "env_overrides",
    "load_settings",
    "validate",
]

ENV_PREFIX = "STOWAGE_"
#: Keys each learned table of the estimator keeps at most (queues' priors, recurring (job, group) pairs): the operator
#: saves them with the classifier in one ConfigMap of at most 1 MiB (``stowage.policy.estimates.MAX_KEYS``).
MAX_LEARNED_KEYS = 1000


@dataclass(frozen=True, slots=True)
class PerResource:
    """A fraction per resource; ``other`` covers extended resources."""

    cpu: float
    memory: float
    disk: float
    network: float
    other: float

    def get(self, resource: str) -> float:
        return {CPU: self.cpu, MEMORY: self.memory, DISK: self.disk, NETWORK: self.network}.get(resource, self.other)

    def array(self, resources: tuple[str, ...] | list[str]) -> Any:
        """The fractions lined up with a resource axis, as a numpy array."""
        return np.array([self.get(r) for r in resources], dtype=np.float64)


class ContentionPolicy(enum.StrEnum):
    """OPERA Algorithm 1 ``RelieveContention`` policies."""

    AGGRESSIVE = "aggressive"  # evict only under memory contention
    NEUTRAL = "neutral"  # evict under contention of any resource
    PRESERVE = "preserve"  # neutral, plus block harvestable capacity after contention


@dataclass(frozen=True, slots=True)
class HarvestSettings:
    """How much reserved-but-idle capacity opportunistic pods may use (UBIS Alg. 1, OPERA Eq. 4)."""

    t_alloc: PerResource = field(default_factory=lambda: PerResource(0.9, 0.9, 0.9, 0.9, 0.9))
    """Opportunistic allocation stops at ``t_alloc·C`` of measured usage. UBIS §V-C found 0.9 best."""
    ramp_up_s: float = 30.0
    """A newly bound pod, regular or opportunistic, counts at its full demand this long (Tetris §4.1, UBIS §V-A)."""
    utilization_stale_after_s: float = 30.0
    """Past this age of the node monitor's newest sample (its sample time, not the scrape's) a node harvests
    nothing. Needs a scrape interval ≤ 10 s; the chart scrapes every 5 s."""
    usage_window_s: float = 15.0
    """Usage is the maximum over this window (``max_over_time``): a burst seen in one scrape keeps counting this
    long, so one quiet 1-second rate never opens capacity (ours; three 5-s scrapes)."""


@dataclass(frozen=True, slots=True)
class ContentionSettings:
    """When the node monitor declares contention and what it does about it (UBIS §IV-C, OPERA Alg. 1)."""

    t_preempt: PerResource = field(default_factory=lambda: PerResource(0.99, 0.95, 0.99, 0.99, 0.99))
    """Usage above ``t_preempt·C`` is contention. UBIS §V-C: 0.99 cpu, 0.95 memory."""
    sustained_count: int = 3
    """Consecutive over-threshold samples before acting on memory, disk, network and extended resources (UBIS §V-A:
    3 at 1 s): an overshoot there fails tasks (memory) or slows the regular pods beside the opportunistic ones (disk
    and network are shared in proportion)."""
    sustained_count_cpu: int = 6
    """Consecutive over-threshold samples before acting on cpu. While opportunistic pods contend for cpu the regular
    pods keep their share (cpu.weight: opportunistic pods get what regular ones leave), so an overshoot slows only
    the opportunistic pods and most overshoots end by themselves (a burst, a new pod's ramp-up): UBIS §IV-C "for
    malleable resources like CPU, we can tolerate 100% utilization for short bursts". Ours: measured against 3 and
    against 6 on disk and network too (docs/policy.md, "Contention")."""
    sample_interval_s: float = 1.0
    """Node monitor sampling period (UBIS §V-A)."""
    policy: ContentionPolicy = ContentionPolicy.PRESERVE
    """OPERA §III-C: preserve kills least work (632 → 248 killed tasks in its evaluation)."""
    alpha: float = 2.0
    """PRESERVE growth/decay factor for blocked resources and block time (OPERA Alg. 1: doubling)."""
    blocked_initial_fraction: float = 0.05
    """First block after a contention: this fraction of capacity on the contended resource (ours)."""
    blocked_max_fraction: float = 0.5
    """Cap on blocked capacity, so one noisy node never blocks harvesting entirely (ours)."""
    block_time_initial_s: float = 30.0
    """First block window; one ramp-up period (ours)."""
    block_time_max_s: float = 600.0
    """Cap on the block window: ten minutes (ours)."""


@dataclass(frozen=True, slots=True)
class PackingSettings:
    """Tetris knobs (§3.2–3.5, defaults from §5.3)."""

    fairness_knob: float = 0.25
    """``f``: inside a queue only its first ⌈(1−f)·J_q⌉ jobs in job order compete (``dispatch.pack``; Tetris
    §5.3: 0.25); 0: every job, and every queue whatever the tiers."""
    queue_usage_half_life_s: float = 300.0
    """``H``: fairness between queues holds on usage decayed with this half-life (``fairness.QueueUsage``): a
    queue's weight is honoured on the moving average of its dominant share, not at every slot, so a queue that
    is momentarily ahead may still start its short jobs. 0: no memory (shares at every slot). Default from the
    sweep in docs/simulator.md ("Fairness over time") (ours; Kueue, Slurm and Volcano decay usage likewise)."""
    queue_usage_tolerance: float = 0.1
    """How far (relative) a queue's projected usage per weight may exceed the backlogged queues' before it is
    held back (``fairness.queue_tiers``); within it every queue competes and packing and job order decide (ours)."""
    queue_share_floor: float = 0.5
    """A backlogged queue holding less than this fraction of its weighted fair share goes first, whatever its
    usage (the short-term floor; YARN's fair-share preemption threshold is 0.5 likewise) (ours)."""
    barrier_knob: float = 0.9
    """``b``: once this fraction of a group before a barrier finished, its stragglers go first."""
    remaining_work_weight: float = 1.0
    """``m`` in ``ε = m·ā/p̄`` (Tetris §3.3.1: m = 1 works well)."""
    remote_penalty: float = 0.10
    """Alignment penalty on nodes not holding the pod's data (Tetris §3.2: 10%)."""
    bottleneck_weight: float = 0.0
    """``β``: waiting tasks score ``β·Σ_r (d_r/C̄_r)·D_r/max D`` more, ``D_r`` the time the waiting work would
    keep resource ``r`` busy (``remaining_work.bottleneck_bonus``), so work heavy on the bottleneck starts
    while it has room (Graphene). 0: Tetris's score."""
    critical_path_fraction: float = 0.0
    """``c``: a waiting task whose chain (its duration plus the longest chain of group durations behind it in
    its job) is at least ``c`` × the time the pool needs to drain all waiting work (``max_r D_r``) goes first,
    whatever the job order and queue masks say (``remaining_work.critical_rows``; end-game awareness,
    Graphene). 0 turns it off."""
    critical_tier_budget: float = 1.0
    """``k``: with ``c`` on, a critical task also crosses its queue's fairness tier while its queue holds less than
    ``k`` × the dominant share its waiting work needs to drain when all waiting work drains
    (``remaining_work.queue_budgets``). 0: critical tasks keep their queue's tier."""
    starvation_skip_limit: int = 30
    """``ε_s`` (OPERA §III-E, multi-chance reservation): a task group passed over in more than this many
    dispatcher passes that released other work, while it fits some node's capacity, gets a reservation
    (it goes first; if it fits nowhere now, one node is held for it). 0 turns the guard off. OPERA leaves
    the value open; 30 passes is about half a minute at the dispatcher's 1 s loop (ours). The simulator's
    presets run without it."""
    gang_ready_timeout_s: float = 300.0
    """An all-or-nothing group (``minAvailable``, ``stowage.io/pod-group``) released whole that does not have every
    member Running within this is taken back (its pods deleted) and waits to start whole again, so a gang that
    cannot come up holds no room. Five minutes: an image pull and a container start, with margin (ours; Kueue's
    ``waitForPodsReady`` timeout is 5 minutes too)."""


@dataclass(frozen=True, slots=True)
class ClassifierSettings:
    """OPERA's short/long task classifier (§III-B)."""

    short_task_threshold_s: float = 60.0
    """Tasks finishing within this are 'short' and may run opportunistically (OPERA §III-B)."""


@dataclass(frozen=True, slots=True)
class EstimateSettings:
    """How long one task of a group is expected to run when nobody said (Tetris §4.1; ``policy.estimates``)."""

    default_prior_s: float = 300.0
    """A queue's prior before any of its tasks finished: five minutes, longer than the 60 s short/long line (ours)."""
    prior_margin: float = 1.5
    """A learned prior is the queue's mean finished duration × this: over- rather than under-estimate (ours)."""
    min_finished: int = 1
    """Finished tasks of a group before their mean is its estimate: a phase's tasks are alike (Tetris §4.1)."""
    elapsed_margin: float = 1.25
    """A running task that has run ``t`` past its estimate is expected to run ``t`` × this: a bit longer (ours)."""
    min_duration_s: float = 1.0
    """Floor of every estimate, so remaining work is positive for any job with tasks left (ours)."""
    history_weight_cap: int = 100
    """A recurring job's mean counts at most this many earlier runs, so newer runs keep moving it (ours)."""
    history_max_entries: int = MAX_LEARNED_KEYS
    """(recurring job, group) pairs remembered at most, the least recently updated dropped: bounds the state (ours);
    at most :data:`MAX_LEARNED_KEYS`."""
    forecast_interval_s: float = 5.0
    """The operator predicts when each pending Job starts and finishes at most this often, off its dispatch pass,
    and only when the cluster changed since (``stowage.forecast``); 0 turns the prediction off (ours)."""
    bandwidth_margin: float = 1.25
    """A group's disk and network estimate is the highest sustained use seen × this, never above what it declared:
    over- rather than under-estimate (``policy.use_estimates``; Tetris §4.1)."""
    bandwidth_window_s: float = 30.0
    """Sustained use is averaged over this window: bandwidth is compressible, so a burst shorter than it slows its
    neighbours for seconds and is not reserved for a task's whole life (ours)."""
    bandwidth_fill: float = 1.0
    """Regular pods' estimated disk and network use may fill this fraction of a node's declared disk and network
    bandwidth (``policy.room.bandwidth_room``): bandwidth is compressible, so above 1 packs past the declared fit
    and the tasks share what is over, below 1 keeps headroom (docs/policy.md, "How far to fill a disk or link";
    measured, ours)."""


@dataclass(frozen=True, slots=True)
class StowageSettings:
    """All settings, one dataclass per concern."""

    harvest: HarvestSettings = field(default_factory=HarvestSettings)
    contention: ContentionSettings = field(default_factory=ContentionSettings)
    packing: PackingSettings = field(default_factory=PackingSettings)
    classifier: ClassifierSettings = field(default_factory=ClassifierSettings)
    estimates: EstimateSettings = field(default_factory=EstimateSettings)


# --- overrides ----------------------------------------------------------------------------------


def _coerce(value: Any, current: Any, path: str, problems: list[str]) -> Any:
    """Convert an override to the type of the default it replaces."""
    if isinstance(current, enum.Enum):
        try:
            return type(current)(str(value).strip().lower())
        except ValueError:
            allowed = ", ".join(m.value for m in type(current))
            problems.append(f"{path}: must be one of {allowed}, got {value!r}")
            return current
    if isinstance(current, bool):
        if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0"):
            return value.strip().lower() in ("true", "1")
        if isinstance(value, bool):
            return value
        problems.append(f"{path}: must be true or false, got {value!r}")
        return current
    if isinstance(current, int | float):
        try:
            number = float(value) if not isinstance(value, bool) else math.nan
        except (TypeError, ValueError):
            number = math.nan
        if math.isnan(number):
            problems.append(f"{path}: must be a number, got {value!r}")
            return current
        if isinstance(current, int):
            if number != int(number):
                problems.append(f"{path}: must be a whole number, got {value!r}")
                return current
            return int(number)
        return number
    return value


REPLACED: dict[str, str] = {
    key: "queues share over time on decayed usage instead: set packing.queue_usage_half_life_s (0: shares at "
         "every slot) and packing.queue_usage_tolerance (docs/configuration.md)"
    for key in ("packing.queue_share_slack", "packing.queue_share_deficit_s")}
"""Settings an earlier release had, and what replaced them: a config that still sets one is refused saying so."""


def _apply(obj: Any, overrides: Mapping[str, Any], path: str, problems: list[str]) -> Any:
    if not isinstance(overrides, Mapping):
        problems.append(f"{path or 'config'}: must be a mapping, got {overrides!r}")
        return obj
    names = {f.name for f in dataclasses.fields(obj)}
    changes: dict[str, Any] = {}
    for key, value in overrides.items():
        dotted = f"{path}.{key}" if path else str(key)
        if dotted in REPLACED:
            problems.append(f"{dotted}: no longer a setting; {REPLACED[dotted]}")
            continue
        if key not in names:
            problems.append(f"{dotted}: unknown key; known keys: {', '.join(sorted(names))}")
            continue
        current = getattr(obj, key)
        if dataclasses.is_dataclass(current):
            changes[key] = _apply(current, value, dotted, problems)
        else:
            changes[key] = _coerce(value, current, dotted, problems)
    return dataclasses.replace(obj, **changes)


def apply_overrides(settings: StowageSettings, overrides: Mapping[str, Any]) -> StowageSettings:
    """Apply a nested dict of overrides; raise :class:`ConfigError` listing every bad key."""
    problems: list[str] = []
    result = _apply(settings, overrides, "", problems)
    if problems:
        raise ConfigError(problems)
    return result


def env_overrides(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``STOWAGE_SECTION__KEY[__SUBKEY]=value`` variables as a nested override dict."""
    environ = os.environ if environ is None else environ
    out: dict[str, Any] = {}
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        parts = name[len(ENV_PREFIX) :].lower().split("__")
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


# --- validation ---------------------------------------------------------------------------------


def _check_range(
    problems: list[str], path: str, value: float, lo: float, hi: float, lo_open: bool, hi_open: bool
) -> None:
    ok_lo = value > lo if lo_open else value >= lo
    ok_hi = value < hi if hi_open else value <= hi
    if not (ok_lo and ok_hi and math.isfinite(value)):
        left, right = "(" if lo_open else "[", ")" if hi_open else "]"
        problems.append(f"{path}: must be within {left}{lo}, {hi}{right}, got {value!r}")


def validate(settings: StowageSettings) -> list[str]:
    """Every problem in ``settings``, each as ``dotted.path: must be ..., got value``."""
    p: list[str] = []
    h, c, k, cl = settings.harvest, settings.contention, settings.packing, settings.classifier
    for res in ("cpu", "memory", "disk", "network", "other"):
        ta, tp = getattr(h.t_alloc, res), getattr(c.t_preempt, res)
        _check_range(p, f"harvest.t_alloc.{res}", ta, 0.0, 1.0, True, False)
        _check_range(p, f"contention.t_preempt.{res}", tp, 0.0, 1.0, True, False)
        if math.isfinite(ta) and math.isfinite(tp) and not ta < tp:
            p.append(
                f"harvest.t_alloc.{res}: must be below contention.t_preempt.{res} ({tp}) so harvesting "
                f"stops before eviction starts, got {ta}"
            )
    _check_range(p, "harvest.ramp_up_s", h.ramp_up_s, 0.0, 86400.0, False, False)
    _check_range(p, "harvest.utilization_stale_after_s", h.utilization_stale_after_s, 0.0, 3600.0, True, False)
    _check_range(p, "harvest.usage_window_s", h.usage_window_s, 0.0, 3600.0, True, False)
    for key in ("sustained_count", "sustained_count_cpu"):
        if getattr(c, key) < 1:
            p.append(f"contention.{key}: must be at least 1, got {getattr(c, key)!r}")
    _check_range(p, "contention.sample_interval_s", c.sample_interval_s, 0.0, 60.0, True, False)
    _check_range(p, "contention.alpha", c.alpha, 1.0, 16.0, False, False)
    _check_range(p, "contention.blocked_initial_fraction", c.blocked_initial_fraction, 0.0, 1.0, False, False)
    _check_range(p, "contention.blocked_max_fraction", c.blocked_max_fraction, 0.0, 1.0, False, False)
    if c.blocked_initial_fraction > c.blocked_max_fraction:
        p.append(
            "contention.blocked_initial_fraction: must not exceed contention.blocked_max_fraction "
            f"({c.blocked_max_fraction}), got {c.blocked_initial_fraction}"
        )
    _check_range(p, "contention.block_time_initial_s", c.block_time_initial_s, 0.0, 86400.0, True, False)
    _check_range(p, "contention.block_time_max_s", c.block_time_max_s, 0.0, 86400.0, True, False)
    if c.block_time_initial_s > c.block_time_max_s:
        p.append(
            "contention.block_time_initial_s: must not exceed contention.block_time_max_s "
            f"({c.block_time_max_s}), got {c.block_time_initial_s}"
        )
    _check_range(p, "packing.fairness_knob", k.fairness_knob, 0.0, 1.0, False, False)
    _check_range(p, "packing.queue_usage_half_life_s", k.queue_usage_half_life_s, 0.0, 30 * 86400.0, False, False)
    _check_range(p, "packing.queue_usage_tolerance", k.queue_usage_tolerance, 0.0, 10.0, False, False)
    _check_range(p, "packing.queue_share_floor", k.queue_share_floor, 0.0, 1.0, False, False)
    _check_range(p, "packing.barrier_knob", k.barrier_knob, 0.0, 1.0, False, False)
    _check_range(p, "packing.remaining_work_weight", k.remaining_work_weight, 0.0, 1000.0, False, False)
    _check_range(p, "packing.remote_penalty", k.remote_penalty, 0.0, 1.0, False, True)
    _check_range(p, "packing.bottleneck_weight", k.bottleneck_weight, 0.0, 100.0, False, False)
    _check_range(p, "packing.critical_path_fraction", k.critical_path_fraction, 0.0, 100.0, False, False)
    _check_range(p, "packing.critical_tier_budget", k.critical_tier_budget, 0.0, 100.0, False, False)
    _check_range(p, "packing.gang_ready_timeout_s", k.gang_ready_timeout_s, 0.0, 86400.0, True, False)
    if not 0 <= k.starvation_skip_limit <= 1_000_000:
        p.append(f"packing.starvation_skip_limit: must be within [0, 1000000] (0 turns the guard off), "
                 f"got {k.starvation_skip_limit!r}")
    _check_range(p, "classifier.short_task_threshold_s", cl.short_task_threshold_s, 0.0, 86400.0, True, False)
    e = settings.estimates
    _check_range(p, "estimates.default_prior_s", e.default_prior_s, 0.0, 604800.0, True, False)
    _check_range(p, "estimates.prior_margin", e.prior_margin, 1.0, 100.0, False, False)
    _check_range(p, "estimates.elapsed_margin", e.elapsed_margin, 1.0, 100.0, False, False)
    _check_range(p, "estimates.min_duration_s", e.min_duration_s, 0.0, 3600.0, True, False)
    _check_range(p, "estimates.forecast_interval_s", e.forecast_interval_s, 0.0, 3600.0, False, False)
    _check_range(p, "estimates.bandwidth_margin", e.bandwidth_margin, 1.0, 100.0, False, False)
    _check_range(p, "estimates.bandwidth_window_s", e.bandwidth_window_s, 0.0, 3600.0, True, False)
    _check_range(p, "estimates.bandwidth_fill", e.bandwidth_fill, 0.0, 10.0, True, False)
    for key, count, most in (
        ("min_finished", e.min_finished, 1_000_000),
        ("history_weight_cap", e.history_weight_cap, 1_000_000),
        ("history_max_entries", e.history_max_entries, MAX_LEARNED_KEYS),
    ):
        if not 1 <= count <= most:
            p.append(f"estimates.{key}: must be a whole number within [1, {most}], got {count!r}")
    return p


def load_settings(
    path: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> StowageSettings:
    """Defaults ← YAML file ← environment ← explicit overrides (flags), then validate.

    Raises :class:`ConfigError` naming every bad key; a missing or unreadable file
    is reported with its path.
    """
    settings = StowageSettings()
    problems: list[str] = []  # gathered across every source, so one run reports them all
    if path is not None:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise ConfigError([f"{path}: cannot read config file ({exc.strerror})"]) from exc
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError([f"{path}: not valid YAML ({exc})"]) from exc
        settings = _apply(settings, data, "", problems)
    settings = _apply(settings, env_overrides(environ), "", problems)
    if overrides:
        settings = _apply(settings, overrides, "", problems)
    problems += validate(settings)
    if problems:
        raise ConfigError(problems)
    return settings


def as_dict(settings: StowageSettings) -> dict[str, Any]:
    """Plain-data form (enums as their values), for reports and ``--print-config``."""

    def conv(v: Any) -> Any:
        if isinstance(v, enum.Enum):
            return v.value
        if isinstance(v, dict):
            return {k: conv(x) for k, x in v.items()}
        return v

    return conv(dataclasses.asdict(settings))
