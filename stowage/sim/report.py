"""Comparing runs: the JSON report (a contract) and the text table.

JSON shape (every number deterministic for a seed; no wall-clock values)::

    {"workload": {"name", "model", "nodes", "jobs", "tasks", "resources", "usage_model", "seed"},
     "settings": {...StowageSettings...},
     "reference": {"ratios": "kube-default", "slowdown": "drf"},
     "status": {"complete": true, "problems": []},
     "policies": {"<preset>": {"makespan_s", "jct_mean_s", "jct_p50_s", "jct_p95_s",
                               "makespan_lower_bound_s", "jct_mean_lower_bound_s",
                               "utilization": {"<resource>": {"allocated", "used"}},
                               "opportunistic_fraction", "harvested_fraction", "lost_fraction", "promotions",
                               "regular_slowdown_mean", "regular_slowdown_p95", "wasted_work_s",
                               "evictions", "lost_tasks", "time_cap_reached",
                               "slowed_jobs_fraction", "slowed_vs_fluid_fraction", "jct_mean_fluid_s",
                               "queues_over_time": {"usage_deviation_max", "over_tolerance_fraction",
                                                    "below_floor_longest_s", "usage_samples"},
                               "tasks", "jobs", ...more}},
     "reference_runs": {"<reference preset not asked for>": {...the same keys...}}}

A run is complete when no preset stopped at the simulated-time cap, none left a task unfinished,
and none was interrupted; otherwise ``status.problems`` says what happened to which preset.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from stowage.config import StowageSettings, as_dict
from stowage.sim.metrics import RunResult, slowed_fraction
from stowage.sim.usage import UsageModel
from stowage.sim.workload import Workload

__all__ = ["RATIO_BASELINE", "SLOWDOWN_REFERENCE", "build_report", "format_duration", "format_table", "run_problems",
           "time_cap"]

RATIO_BASELINE = "kube-default"
SLOWDOWN_REFERENCE = "drf"


def _plain(value: Any) -> Any:
    """JSON-safe plain data: numpy scalars to Python, NaN/inf to None, enums to values."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "value") and not isinstance(value, int | float | str | bool):
        return _plain(value.value)
    return value


def time_cap(max_sim_s: float) -> str:
    """The simulated-time cap as messages name it, with the option that raises it."""
    days = f" = {max_sim_s / 86400:,.1f} days" if max_sim_s >= 86400 else ""
    return (f"the simulated-time cap of {max_sim_s:,.0f} s{days} after the first arrival "
            "(--max-sim-time SECONDS raises it)")


def run_problems(name: str, result: RunResult, max_sim_s: float) -> list[str]:
    """What makes one run's numbers incomplete, each said with the option that changes it."""
    s = result.summary
    if s.get("time_cap_reached"):
        return [f"{name}: stopped at {time_cap(max_sim_s)} with {s['lost_tasks']:,} tasks unfinished"]
    if s["lost_tasks"]:
        return [f"{name}: {s['lost_tasks']:,} tasks never finished "
                f"({s['jobs'] - s['jobs_finished']:,} jobs): nothing could place them"]
    return []


def _summaries(
    names: list[str], results: Mapping[str, RunResult], ref: RunResult | None, base: RunResult | None
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in names:
        r = results[name]
        summary = dict(r.summary)
        summary["slowed_jobs_fraction"] = slowed_fraction(r.jct, ref.jct) if ref is not None else None
        if base is not None:
            for key in ("makespan", "jct_mean"):
                b = base.summary[f"{key}_s"]
                summary[f"{key}_vs_kube_default"] = r.summary[f"{key}_s"] / b if b else 1.0
        out[name] = summary
    return out


def build_report(
    workload: Workload,
    results: Mapping[str, RunResult],
    *,
    shown: list[str],
    settings: StowageSettings,
    usage: UsageModel,
    seed: int,
    problems: list[str] | None = None,
    pass_delay_s: float = 0.0,
    oracle_durations: bool = False,
) -> dict[str, Any]:
    """The report for the presets in ``shown`` that finished; ``results`` may hold extra reference runs.

    Reference runs that finished without being in ``shown`` go to ``reference_runs``. ``problems``:
    what makes the results incomplete (``status``); without a reference run its numbers are null.
    ``pass_delay_s``, ``oracle_durations``: ``SimConfig``'s of the runs, recorded under ``engine``.
    """
    ref = results.get(SLOWDOWN_REFERENCE)
    base = results.get(RATIO_BASELINE)
    asked = [name for name in shown if name in results]
    extra = [name for name in (RATIO_BASELINE, SLOWDOWN_REFERENCE) if name in results and name not in shown]
    return _plain({
        "workload": {
            "name": workload.name,
            "model": dict(workload.model),
            "nodes": len(workload.nodes),
            "jobs": len(workload.jobs),
            "tasks": workload.task_count,
            "resources": list(next(iter(results.values())).series.get("resources", ())) if results else [],
            "usage_model": usage.as_dict(),
            "seed": seed,
        },
        "settings": as_dict(settings),
        "engine": {"pass_delay_s": pass_delay_s, "oracle_durations": oracle_durations},
        "reference": {"ratios": RATIO_BASELINE, "slowdown": SLOWDOWN_REFERENCE},
        "status": {"complete": not problems, "problems": list(problems or [])},
        "policies": _summaries(asked, results, ref, base),
        "reference_runs": _summaries(extra, results, ref, base),
    })


def format_duration(seconds: float) -> str:
    """Seconds as the table shows them: ``3.10h``, ``11.0m``, ``4.6s``."""
    if seconds >= 3600:
        return f"{seconds / 3600:.2f}h"
    if seconds >= 60:
        return f"{seconds / 60:.1f}m"
    return f"{seconds:.1f}s"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def format_table(report: Mapping[str, Any]) -> str:
    """A fixed-width comparison table, ratios against kube-default.

    Reference runs nobody asked for follow the asked presets, marked ``(ref)``; a run that stopped at
    the time cap or left tasks unfinished is marked ``(incomplete)``; a ratio or slowdown whose
    reference run did not finish shows as ``-``. ``slow/fluid``: jobs > 10 % later than under fluid
    weighted fair sharing (:mod:`stowage.sim.fluid`); ``slow/drf``: than in the ``drf`` run. ``usage±``: the
    largest deviation of a backlogged queue's decayed usage from its weights' share; ``<floor``: the longest a
    backlogged queue held less than its floor, in seconds (``metrics.fairness_over_time``). ``harvest``: the share
    of task-seconds run on harvested capacity; ``opp lost``: the opportunistic work evictions threw away, as a
    share of those task-seconds; ``reg slow``: regular tasks' slowdown against running alone, mean/p95.
    """
    header = ("policy", "makespan", "×kube", "mean JCT", "×kube", "p50", "p95", "÷LB",
              "cpu alloc/used", "mem alloc/used", "harvest", "opp lost", "reg slow", "evict", "lost", "slow/fluid",
              "slow/drf",
              "usage±", "<floor")
    rows = [header]
    listed = list(report["policies"].items())
    listed += [(f"{name} (ref)", p) for name, p in report.get("reference_runs", {}).items()]
    for name, p in listed:
        if p.get("time_cap_reached") or p["lost_tasks"]:
            name += " (incomplete)"  # its numbers cover only the jobs that finished
        u = p["utilization"]
        slowed = p.get("slowed_jobs_fraction")
        over = p.get("queues_over_time") or {}
        rows.append((
            name,
            format_duration(p["makespan_s"]),
            _ratio(p.get("makespan_vs_kube_default")),
            format_duration(p["jct_mean_s"]),
            _ratio(p.get("jct_mean_vs_kube_default")),
            format_duration(p["jct_p50_s"]),
            format_duration(p["jct_p95_s"]),
            f"{p['makespan_to_lower_bound']:.2f}",
            f"{u['cpu']['allocated']:.0%}/{u['cpu']['used']:.0%}",
            f"{u['memory']['allocated']:.0%}/{u['memory']['used']:.0%}",
            f"{p.get('harvested_fraction', 0.0):.0%}",
            f"{p.get('lost_fraction', 0.0):.0%}",
            f"{p.get('regular_slowdown_mean', 0.0):.0%}/{p.get('regular_slowdown_p95', 0.0):.0%}",
            str(p["evictions"] + p.get("oom_kills", 0)),
            str(p["lost_tasks"]),
            f"{p.get('slowed_vs_fluid_fraction', 0.0):.0%}",
            "-" if slowed is None else f"{slowed:.0%}",
            f"{over.get('usage_deviation_max', 0.0):.0%}" if over.get("usage_samples") else "-",
            f"{over.get('below_floor_longest_s', 0.0):.0f}",
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
