"""Draw every panel's range-query results into one PNG grid (matplotlib, the ``sim`` extra).

One subplot per non-row panel, in the dashboard's order, titled like the panel; one line per series,
named by the target's legendFormat. Time runs in seconds since the start of the run. ``rows``: only the panels
under these rows (by title), e.g. the picture docs/operator.md shows of "Waiting pods" and the forecast.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from tests.dashboard import grafana

__all__ = ["render", "rows_panels"]

COLUMNS = 3


def rows_panels(dashboard: Mapping[str, Any], rows: Collection[str]) -> set[int]:
    """Ids of the panels under the rows titled ``rows`` (a row holds the panels after it, up to the next row)."""
    ids: set[int] = set()
    under = False
    for panel in dashboard.get("panels") or []:
        if panel.get("type") == "row":
            under = panel.get("title") in rows
        elif under:
            ids.add(int(panel["id"]))
    return ids


def render(dashboard: Mapping[str, Any], results: Mapping[tuple[int, str], list[dict[str, Any]]], start: float,
           path: Path, rows: Collection[str] = (), title: str | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_panel: dict[int, list[grafana.Target]] = {}
    for target in grafana.targets(dashboard):
        by_panel.setdefault(target.panel_id, []).append(target)
    if rows:
        keep = rows_panels(dashboard, rows)
        by_panel = {k: v for k, v in by_panel.items() if k in keep}
    panels = list(by_panel.items())
    rows = max(math.ceil(len(panels) / COLUMNS), 1)
    fig, axes = plt.subplots(rows, COLUMNS, figsize=(6 * COLUMNS, 3.4 * rows), squeeze=False)
    for ax, (_, targets) in zip(axes.flat, panels, strict=False):
        ax.set_title(targets[0].panel, fontsize=10)
        lines = 0
        for target in targets:
            for series in results.get((target.panel_id, target.ref_id), []):
                xs = [float(t) - start for t, _ in series["values"]]
                ys = [float(v) for _, v in series["values"]]  # NaN (no rate in the window) leaves a gap
                if not any(math.isfinite(y) for y in ys):
                    continue
                ax.plot(xs, ys, label=grafana.legend(target.legend_format, series["metric"])[:48], linewidth=1.2,
                        marker=".", markersize=3)
                lines += 1
        if lines == 0:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="red")
        ax.set_xlabel("seconds since the run started", fontsize=8)
        ax.tick_params(labelsize=7)
        if lines:
            ax.legend(fontsize=6, loc="best")
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    heading = title or f"{dashboard.get('title', 'dashboard')}: every panel, from a real Prometheus"
    fig.suptitle(heading, fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path
