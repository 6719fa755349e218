"""Comparing runs: the JSON report (a contract) and the text table.

JSON shape (every number deterministic for a seed; no wall-clock values)::

    {"workload": {"name", "model", "nodes", "jobs", "tasks", "resources", "usage_model", "seed"},
     "settings": {...StowageSettings...},
     "reference": {"ratios": "kube-default", "slowdown": "drf"},
     "policies": {"<preset>": {"makespan_s", "jct_mean_s", "jct_p50_s", "jct_p95_s",
                               "makespan_lower_bound_s", "utilization": {"<resource>": {"allocated", "used"}},
                               "opportunistic_fraction", "evictions", "lost_tasks", "slowed_jobs_fraction",
                               "tasks", "jobs", ...more}}}
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

__all__ = ["RATIO_BASELINE", "SLOWDOWN_REFERENCE", "build_report", "format_table"]

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


def build_report(
    workload: Workload,
    results: Mapping[str, RunResult],
    *,
    shown: list[str],
    settings: StowageSettings,
    usage: UsageModel,
    seed: int,
) -> dict[str, Any]:
    """The report for the presets in ``shown`` (``results`` may hold extra reference runs)."""
    ref = results.get(SLOWDOWN_REFERENCE)
    base = results.get(RATIO_BASELINE)
    policies: dict[str, Any] = {}
    for name in shown:
        r = results[name]
        summary = dict(r.summary)
        summary["slowed_jobs_fraction"] = slowed_fraction(r.jct, ref.jct) if ref is not None else 0.0
        if base is not None:
            bs = base.summary
            summary["makespan_vs_kube_default"] = (
                r.summary["makespan_s"] / bs["makespan_s"] if bs["makespan_s"] else 1.0
            )
            summary["jct_mean_vs_kube_default"] = (
                r.summary["jct_mean_s"] / bs["jct_mean_s"] if bs["jct_mean_s"] else 1.0
            )
        policies[name] = summary
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
        "reference": {"ratios": RATIO_BASELINE, "slowdown": SLOWDOWN_REFERENCE},
        "policies": policies,
    })


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.2f}h"
    if seconds >= 60:
        return f"{seconds / 60:.1f}m"
    return f"{seconds:.1f}s"


def format_table(report: Mapping[str, Any]) -> str:
    """A fixed-width comparison table, ratios against kube-default."""
    pols = report["policies"]
    header = ("policy", "makespan", "×kube", "mean JCT", "×kube", "p50", "p95", "÷LB",
              "cpu alloc/used", "mem alloc/used", "opp", "evict", "lost", "slowed")
    rows = [header]
    for name, p in pols.items():
        u = p["utilization"]
        rows.append((
            name,
            _duration(p["makespan_s"]),
            f"{p.get('makespan_vs_kube_default', float('nan')):.2f}",
            _duration(p["jct_mean_s"]),
            f"{p.get('jct_mean_vs_kube_default', float('nan')):.2f}",
            _duration(p["jct_p50_s"]),
            _duration(p["jct_p95_s"]),
            f"{p['makespan_to_lower_bound']:.2f}",
            f"{u['cpu']['allocated']:.0%}/{u['cpu']['used']:.0%}",
            f"{u['memory']['allocated']:.0%}/{u['memory']['used']:.0%}",
            f"{p['opportunistic_fraction']:.0%}",
            str(p["evictions"] + p.get("oom_kills", 0)),
            str(p["lost_tasks"]),
            f"{p['slowed_jobs_fraction']:.0%}",
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
