"""Draw every panel's range-query results into one PNG grid (matplotlib, the ``sim`` extra).

One subplot per non-row panel, in the dashboard's order, titled like the panel; one line per series,
named by the target's legendFormat. Time runs in seconds since the start of the run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.dashboard import grafana

__all__ = ["render"]

COLUMNS = 3


def render(dashboard: Mapping[str, Any], results: Mapping[tuple[int, str], list[dict[str, Any]]], start: float,
           path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_panel: dict[int, list[grafana.Target]] = {}
    for target in grafana.targets(dashboard):
        by_panel.setdefault(target.panel_id, []).append(target)
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
    fig.suptitle(f"{dashboard.get('title', 'dashboard')}: every panel, from a real Prometheus", fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path
