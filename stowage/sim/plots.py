"""Report plots (matplotlib, Agg backend: no display needed).

* ``jct_cdf.png``: the CDF of job completion time, one line per policy.
* ``utilization.png``: allocated (solid) vs used (dashed) CPU and memory over
  time, one panel per policy, like UBIS Figure 1: the gap is what harvesting
  can take.
* ``queue_shares.png``: each queue's dominant share of the cluster over time,
  one panel per policy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from stowage.sim.metrics import RunResult

__all__ = ["MISSING_MATPLOTLIB", "write_plots"]

#: The message when the ``sim`` extra is not installed (the cluster image leaves it out).
MISSING_MATPLOTLIB = (
    "the report plots need matplotlib, which is in Stowage's `sim` extra: "
    "pip install 'stowage[sim]' (from a checkout: pip install -e '.[sim]'), or pass --no-plots"
)


def _grid(n: int) -> tuple[int, int]:
    cols = min(n, 4)
    return math.ceil(n / cols), cols


def write_plots(results: Mapping[str, RunResult], folder: str | Path) -> list[Path]:
    """Write the three PNGs into ``folder`` (created if needed); returns their paths.

    Raises :class:`ModuleNotFoundError` with :data:`MISSING_MATPLOTLIB` when matplotlib is not installed.
    """
    try:
        import matplotlib
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(MISSING_MATPLOTLIB, name=exc.name) from exc

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, r in results.items():
        jct = np.sort(r.jct[np.isfinite(r.jct)])
        if jct.size:
            ax.step(np.maximum(jct, 1e-3), np.arange(1, jct.size + 1) / jct.size, where="post", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (s)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("Job completion time CDF")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    written.append(out / "jct_cdf.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)

    rows, cols = _grid(len(results))
    shown = [[list(r.series["resources"]).index(x) for x in ("cpu", "memory")] for r in results.values()]
    top = max([1.05] + [float(r.series["allocated"][:, cols].max(initial=0.0)) * 1.05
                        for r, cols in zip(results.values(), shown, strict=True)])
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 2.8 * rows), squeeze=False, sharey=True)
    for ax, (name, r) in zip(axes.flat, results.items(), strict=False):
        s = r.series
        res = list(s["resources"])
        t = s["t"] / 3600.0
        for resource, color in (("cpu", "tab:blue"), ("memory", "tab:orange")):
            i = res.index(resource)
            ax.plot(t, s["allocated"][:, i], color=color, lw=1, label=f"{resource} allocated")
            ax.plot(t, s["used"][:, i], color=color, lw=1, ls="--", label=f"{resource} used")
        ax.set_title(name, fontsize=9)
        ax.set_ylim(0, top)  # above 1: opportunistic pods over-commit
        ax.grid(alpha=0.3)
    written.append(_finish_grid(fig, axes, len(results), "lower right", "fraction of cluster",
                                "Allocated vs used (UBIS Fig. 1)", out / "utilization.png"))

    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 2.8 * rows), squeeze=False, sharey=True)
    for ax, (name, r) in zip(axes.flat, results.items(), strict=False):
        s = r.series
        t = s["t"] / 3600.0
        shares = s["shares"]
        if shares.size:
            ax.stackplot(t, shares.T, labels=s["queues"])
        ax.set_title(name, fontsize=9)
        ax.grid(alpha=0.3)
    written.append(_finish_grid(fig, axes, len(results), "upper right",
                                "dominant share (above 1: bandwidth over-allocated)", "Queue shares over time",
                                out / "queue_shares.png"))
    return written


def _finish_grid(fig: Any, axes: Any, used: int, legend_loc: str, ylabel: str, title: str, path: Path) -> Path:
    """Blank the unused panels, label the grid of per-policy panels over time, save and close."""
    import matplotlib.pyplot as plt  # already loaded (and set to Agg) by write_plots

    for ax in axes.flat[used:]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7, loc=legend_loc)
    fig.supxlabel("time (h)")
    fig.supylabel(ylabel)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
