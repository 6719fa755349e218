"""What Grafana does with the chart's dashboard before Prometheus sees a query, as pure functions.

Grafana never sends ``$node`` or ``$__rate_interval`` to Prometheus: it interpolates them first. These
functions do the same for the dashboard's queries, so a test can run exactly what a person's Grafana would:

- ``$__interval``: the panel's step, ``range / maxDataPoints``, never below the data source's scrape
  interval (Grafana also rounds it to a "nice" value; the unrounded step only makes the plot finer);
- ``$__rate_interval``: ``max($__interval + scrape interval, 4 × scrape interval)`` (Grafana's docs);
- ``$__range``: the dashboard's time range;
- a query variable (``$var``, ``${var}``, ``[[var]]``) holding several values, or "All" without a custom
  all-value, becomes the regex ``(a|b)`` of its values with regex metacharacters escaped, as the Prometheus
  data source formats multi-value variables; one value is inserted as it is.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Target", "duration", "interpolate", "legend", "rate_interval_s", "targets", "variable_queries"]

_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$(\w+)")
_REGEX_SPECIAL = re.compile(r"[\\^$*+?.()|{}\[\]]")


@dataclass(frozen=True)
class Target:
    """One query of one panel."""

    panel_id: int
    panel: str
    ref_id: str
    expr: str
    legend_format: str


def targets(dashboard: Mapping[str, Any]) -> Iterator[Target]:
    """Every query of every panel (rows' nested panels too), in the dashboard's order."""
    def walk(panels: Sequence[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
        for panel in panels:
            yield panel
            yield from walk(panel.get("panels") or [])

    for panel in walk(dashboard.get("panels") or []):
        for target in panel.get("targets") or []:
            if target.get("expr"):
                yield Target(int(panel["id"]), str(panel.get("title", "")), str(target.get("refId", "")),
                             str(target["expr"]), str(target.get("legendFormat", "")))


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def variable_queries(dashboard: Mapping[str, Any]) -> dict[str, str]:
    """Query variables → their query (``label_values(metric, label)``), as Grafana's templating lists them."""
    out: dict[str, str] = {}
    for variable in (dashboard.get("templating") or {}).get("list") or []:
        if variable.get("type") == "query":
            query = variable.get("query")
            out[variable["name"]] = query.get("query", "") if isinstance(query, Mapping) else str(query or "")
    return out


def duration(seconds: float) -> str:
    """A PromQL duration in whole milliseconds (``4s``, ``1500ms``)."""
    ms = max(round(seconds * 1000), 1)
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def interval_s(range_s: float, max_data_points: int, scrape_interval_s: float) -> float:
    return max(range_s / max(max_data_points, 1), scrape_interval_s)


def rate_interval_s(interval: float, scrape_interval_s: float) -> float:
    return max(interval + scrape_interval_s, 4 * scrape_interval_s)


def _format(values: Sequence[str]) -> str:
    if len(values) == 1:
        return values[0]
    return "(" + "|".join(_REGEX_SPECIAL.sub(lambda m: "\\\\" + m.group(0), v) for v in values) + ")"


def interpolate(expr: str, variables: Mapping[str, Sequence[str]], *, range_s: float, scrape_interval_s: float,
                max_data_points: int = 1000) -> str:
    """``expr`` as Grafana sends it: built-in intervals and the dashboard's variables substituted.

    ``variables`` maps a name to its selected values (``All`` = every value the variable's query found).
    An unknown variable is left in place, so the query fails loudly at Prometheus instead of matching nothing.
    """
    step = interval_s(range_s, max_data_points, scrape_interval_s)
    builtins = {"__interval": duration(step), "__interval_ms": str(int(step * 1000)),
                "__rate_interval": duration(rate_interval_s(step, scrape_interval_s)),
                "__range": duration(range_s), "__range_s": str(int(range_s)),
                "__range_ms": str(int(range_s * 1000))}

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2) or match.group(3)
        if name in builtins:
            return builtins[name]
        if name in variables:
            return _format(list(variables[name]))
        return match.group(0)

    return _VARIABLE.sub(substitute, expr)


def legend(legend_format: str, labels: Mapping[str, str]) -> str:
    """Grafana's legend: ``{{label}}`` replaced by the series' label value (empty when absent)."""
    if not legend_format:
        return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), legend_format)
