"""Report plots (matplotlib, Agg backend: no display needed).

* ``jct_cdf.png``: the CDF of job completion time, one line per policy; each policy has its own line style and
  marker, so policies whose curves coincide stay visible.
* ``utilization.png``: allocated (solid, dash-dot) vs used (dashed, dotted) CPU and memory over time, one panel per
  policy, like UBIS Figure 1: the gap is what harvesting can take. Every panel has the same time and share axes.
* ``queue_shares.png``: each queue's dominant share of the cluster over time, stacked, one panel per policy on the
  same axes. The shares count every allocation: on a harvesting preset that includes opportunistic demand, which can
  take the total above 1.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from stowage.sim.metrics import RunResult

__all__ = ["MISSING_MATPLOTLIB", "jct_figure", "queue_shares_figure", "utilization_figure", "write_plots"]

#: The message when the ``sim`` extra is not installed (the cluster image leaves it out).
MISSING_MATPLOTLIB = (
    "the report plots need matplotlib, which is in Stowage's `sim` extra: "
    "pip install 'stowage[sim]' (from a checkout: pip install -e '.[sim]'), or pass --no-plots"
)


#: One (line style, marker) per policy, cycled: coinciding curves stay visible.
_STYLES = (("-", "o"), ("--", "s"), ("-.", "^"), (":", "D"), ("-", "v"), ("--", "P"), ("-.", "X"), (":", "*"))
#: (resource, allocated style, used style, marker): cpu and memory differ in style as well as colour.
_UTILIZATION = (("cpu", "tab:blue", "-", "--", "o"), ("memory", "tab:orange", "-.", ":", "s"))
_MARKS = 8  # markers per curve


def _pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend; :data:`MISSING_MATPLOTLIB` when it is not installed."""
    try:
        import matplotlib
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(MISSING_MATPLOTLIB, name=exc.name) from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_plots(results: Mapping[str, RunResult], folder: str | Path) -> list[Path]:
    """Write the three PNGs into ``folder`` (created if needed); returns their paths.

    Raises :class:`ModuleNotFoundError` with :data:`MISSING_MATPLOTLIB` when matplotlib is not installed.
    """
    plt = _pyplot()
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for build, name, dpi in ((jct_figure, "jct_cdf.png", 110), (utilization_figure, "utilization.png", 100),
                             (queue_shares_figure, "queue_shares.png", 100)):
        fig = build(results)
        written.append(out / name)
        fig.savefig(written[-1], dpi=dpi)
        plt.close(fig)
    return written


def jct_figure(results: Mapping[str, RunResult]) -> Any:
    """The JCT CDF: one line per policy, each with its own style and marker, thinner for later ones."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for k, (name, r) in enumerate(results.items()):
        jct = np.sort(r.jct[np.isfinite(r.jct)])
        if jct.size:
            ls, marker = _STYLES[k % len(_STYLES)]
            ax.step(np.maximum(jct, 1e-3), np.arange(1, jct.size + 1) / jct.size, where="post", label=name,
                    ls=ls, marker=marker, markevery=max(1, jct.size // _MARKS), ms=4,
                    lw=2.4 - 1.6 * k / max(len(results) - 1, 1), alpha=0.85)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (s)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("Job completion time CDF")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _panels(results: Mapping[str, RunResult]) -> tuple[Any, Any, float]:
    """A grid of per-policy panels sharing both axes, and the time axis's end (h): the longest run."""
    plt = _pyplot()
    cols = min(len(results), 4)
    rows = math.ceil(len(results) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 2.8 * rows), squeeze=False, sharex=True, sharey=True)
    end = max([float(r.series["t"].max(initial=0.0)) / 3600.0 for r in results.values()] + [1e-3])
    return fig, axes, end


def utilization_figure(results: Mapping[str, RunResult]) -> Any:
    """Allocated vs used cpu and memory per policy (UBIS Fig. 1), on one time axis and one share axis."""
    shown = [[list(r.series["resources"]).index(x) for x in ("cpu", "memory")] for r in results.values()]
    top = max([1.05] + [float(r.series["allocated"][:, cols].max(initial=0.0)) * 1.05
                        for r, cols in zip(results.values(), shown, strict=True)])
    fig, axes, end = _panels(results)
    for ax, (name, r) in zip(axes.flat, results.items(), strict=False):
        s = r.series
        res = list(s["resources"])
        t = s["t"] / 3600.0
        every = max(1, t.size // _MARKS)
        for resource, color, alloc_ls, used_ls, marker in _UTILIZATION:
            i = res.index(resource)
            ax.plot(t, s["allocated"][:, i], color=color, lw=1.2, ls=alloc_ls, marker=marker, markevery=every,
                    ms=3.5, label=f"{resource} allocated")
            ax.plot(t, s["used"][:, i], color=color, lw=1.2, ls=used_ls, marker=marker, markevery=every, ms=3.5,
                    mfc="none", label=f"{resource} used")
        ax.set_title(name, fontsize=9)
        ax.set_ylim(0, top)  # above 1: opportunistic pods over-commit
    return _finish_grid(fig, axes, len(results), end, "lower right", "fraction of cluster",
                        "Allocated vs used (UBIS Fig. 1)")


def queue_shares_figure(results: Mapping[str, RunResult]) -> Any:
    """Each queue's dominant share over time, stacked; harvesting panels say they count opportunistic demand."""
    harvesting = [name for name, r in results.items() if r.series.get("harvesting")]
    fig, axes, end = _panels(results)
    for ax, (name, r) in zip(axes.flat, results.items(), strict=False):
        s = r.series
        t = s["t"] / 3600.0
        shares = s["shares"]
        if shares.size:
            ax.stackplot(t, shares.T, labels=s["queues"])
        ax.set_title(f"{name} (regular + opportunistic)" if name in harvesting else name, fontsize=9)
    above = "harvesting or bandwidth over-committed" if harvesting else "bandwidth over-allocated"
    return _finish_grid(fig, axes, len(results), end, "upper right",
                        f"dominant share of the cluster, stacked by queue\n(above 1: {above})",
                        "Queue shares over time")


def _finish_grid(fig: Any, axes: Any, used: int, end: float, legend_loc: str, ylabel: str, title: str) -> Any:
    """Blank the unused panels, label the grid of per-policy panels over time (0 to ``end`` h)."""
    for ax in axes.flat[used:]:
        ax.axis("off")
    cols = axes.shape[1]
    for i, ax in enumerate(axes.flat[:used]):
        ax.set_xlim(0, end)
        ax.grid(alpha=0.3)
        if i + cols >= used:  # no panel below it: its time ticks must show (sharex hides them)
            ax.xaxis.set_tick_params(labelbottom=True)
    axes.flat[0].legend(fontsize=7, loc=legend_loc)
    fig.supxlabel("time (h)")
    fig.supylabel(ylabel)
    fig.suptitle(title)
    fig.tight_layout()
    return fig
