"""Run several presets over one workload, with the reference runs the report needs."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence

from stowage.sim.engine import SimConfig, simulate
from stowage.sim.metrics import RunResult
from stowage.sim.presets import PRESETS
from stowage.sim.report import RATIO_BASELINE, SLOWDOWN_REFERENCE
from stowage.sim.workload import Workload

__all__ = ["run_all"]


def run_all(
    workload: Workload,
    policies: Sequence[str] = PRESETS,
    *,
    config: SimConfig | None = None,
    seed: int = 0,
    progress: bool | None = None,
    on_done: Callable[[str, RunResult, float], None] | None = None,
) -> tuple[dict[str, RunResult], dict[str, float]]:
    """Results per preset (plus ``drf`` and ``kube-default`` as references) and wall seconds per run.

    Every run starts from the same seed, so each preset sees the same random
    stream from the same state. ``progress``: a tqdm bar on stderr (default: only
    when stderr is a terminal). ``on_done(name, result, wall_s)`` after each run.
    """
    wanted = list(dict.fromkeys(policies))
    runs = wanted + [p for p in (RATIO_BASELINE, SLOWDOWN_REFERENCE) if p not in wanted]
    show = sys.stderr.isatty() if progress is None else progress
    bar = None
    if show:
        try:
            from tqdm import tqdm
        except ModuleNotFoundError:
            # A progress bar is a nicety: run without it, and say how to get it.
            print("stowage: no progress bar (tqdm is in the `sim` extra: pip install 'stowage[sim]')", file=sys.stderr)
        else:
            bar = tqdm(total=workload.task_count * len(runs), unit="task", file=sys.stderr, leave=False)
    results: dict[str, RunResult] = {}
    wall: dict[str, float] = {}
    try:
        for name in runs:
            if bar is not None:
                bar.set_description(name)
            start = time.perf_counter()
            results[name] = simulate(
                workload, name, config=config, seed=seed, progress=bar.update if bar is not None else None
            )
            wall[name] = time.perf_counter() - start
            if on_done is not None:
                on_done(name, results[name], wall[name])
    finally:
        if bar is not None:
            bar.close()
    return results, wall
