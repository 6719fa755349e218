"""Run several presets over one workload, serially or in worker processes, and show progress.

* :func:`run_all` runs the presets the user asked for plus the reference runs the report needs (``kube-default`` for
  ratios, ``drf`` for slowdowns; :func:`sizing.reference_runs`), in ``processes`` worker processes or in this one.
  Every run starts from the same seed in its own :class:`~stowage.sim.engine.Simulation`, so a run in a worker gives
  the same numbers as in this process, and results are kept in the order asked, never in completion order. Ctrl-C
  keeps the runs that finished.
* :class:`Progress` shows how far the runs are: a tqdm bar on a terminal, else a line every few seconds.

The size checks that come before (``stowage.sim.sizing``) decide ``processes``.
"""

from __future__ import annotations

import multiprocessing
import queue
import signal
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, TextIO

from stowage.errors import StowageError
from stowage.sim.engine import SimConfig, simulate
from stowage.sim.metrics import RunResult
from stowage.sim.presets import DEFAULT_PRESETS
from stowage.sim.report import format_duration
from stowage.sim.sizing import reference_runs
from stowage.sim.workload import Workload

__all__ = ["Progress", "Runs", "run_all"]


@dataclass
class Runs:
    """What :func:`run_all` produced: results and wall seconds of the finished runs, in plan order."""

    planned: tuple[str, ...]
    results: dict[str, RunResult] = field(default_factory=dict)
    wall: dict[str, float] = field(default_factory=dict)
    interrupted: bool = False

    @property
    def unfinished(self) -> list[str]:
        return [name for name in self.planned if name not in self.results]

    def ordered(self) -> Runs:
        """The same runs with results and wall times in plan order (completion order never shows)."""
        done = [name for name in self.planned if name in self.results]
        return Runs(self.planned, {n: self.results[n] for n in done}, {n: self.wall[n] for n in done},
                    self.interrupted)


class Progress:
    """Progress of a set of runs on a stream: a tqdm bar (``bar=True``), else a line every ``every_s`` s.

    Each line gives the wall time so far, the runs done, each running preset's tasks finished and
    simulated time, and an estimate of the time left (from the tasks finished per wall second so far).
    ``every_s = 0`` and ``bar=False``: silent.
    """

    def __init__(self, runs: Sequence[str], tasks: int, *, bar: bool, every_s: float,
                 stream: TextIO | None = None) -> None:
        self.runs, self.tasks, self.every_s = list(runs), max(tasks, 1), every_s
        self.stream = stream if stream is not None else sys.stderr
        self.start = time.monotonic()
        self.next_line = self.start + every_s
        self.done: dict[str, int] = {}
        self.sim_s: dict[str, float] = {}
        self.finished: list[str] = []
        self.bar: Any = None
        if bar:
            try:
                from tqdm import tqdm
            except ModuleNotFoundError:
                # A progress bar is a nicety: fall back to lines, and say how to get the bar.
                print("stowage: no progress bar (tqdm is in the `sim` extra: pip install 'stowage[sim]')",
                      file=self.stream)
                self.every_s = self.every_s or 10.0
            else:
                self.bar = tqdm(total=self.tasks * len(self.runs), unit="task", file=self.stream, leave=False)

    def update(self, name: str, done: int, sim_s: float) -> None:
        before = self.done.get(name, 0)
        self.done[name], self.sim_s[name] = done, sim_s
        if self.bar is not None:
            self.bar.set_description(", ".join(self._running()) or name, refresh=False)
            self.bar.update(done - before)
        elif self.every_s > 0 and time.monotonic() >= self.next_line:
            print(self.line(), file=self.stream, flush=True)
            self.next_line = time.monotonic() + self.every_s

    def run_finished(self, name: str) -> None:
        self.finished.append(name)
        if self.bar is not None:
            self.bar.update(self.tasks - self.done.get(name, 0))
        self.done[name] = self.tasks

    def _running(self) -> list[str]:
        return [n for n in self.done if n not in self.finished]

    def line(self) -> str:
        elapsed = time.monotonic() - self.start
        total = self.tasks * len(self.runs)
        done = sum(self.done.values())
        parts = [f"{n} {self.done[n]:,}/{self.tasks:,} tasks, {format_duration(self.sim_s[n])} simulated"
                 for n in self._running()]
        eta = f"eta ~{format_duration(elapsed * (total - done) / done)}" if done else "eta unknown yet"
        return (f"progress {format_duration(elapsed)}: {len(self.finished)}/{len(self.runs)} runs done"
                + ("; " + "; ".join(parts) if parts else "") + f"; {eta}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run_all(
    workload: Workload,
    policies: Sequence[str] = DEFAULT_PRESETS,
    *,
    config: SimConfig | None = None,
    seed: int = 0,
    processes: int = 1,
    progress: Progress | None = None,
    on_done: Callable[[str, RunResult, float], None] | None = None,
) -> Runs:
    """Run each preset in ``policies`` and the missing reference runs; Ctrl-C keeps the finished ones.

    ``processes > 1`` runs them in that many worker processes (started with 'forkserver' where the
    OS has it, else 'spawn'); the numbers are those of a serial run. ``on_done(name, result, wall_s)``
    after each run, in completion order; :attr:`Runs.results` is in the order of ``policies``.
    """
    wanted = list(dict.fromkeys(policies))
    runs = Runs(tuple(wanted + reference_runs(wanted)))
    config = config or SimConfig()
    try:
        if processes <= 1 or len(runs.planned) == 1:
            _run_serial(workload, runs, config, seed, progress, on_done)
        else:
            _run_parallel(workload, runs, config, seed, min(processes, len(runs.planned)), progress, on_done)
    except KeyboardInterrupt:
        runs.interrupted = True
    finally:
        if progress is not None:
            progress.close()
    return runs.ordered()


def _finish(runs: Runs, name: str, result: RunResult, wall: float, progress: Progress | None,
            on_done: Callable[[str, RunResult, float], None] | None) -> None:
    runs.results[name], runs.wall[name] = result, wall
    if progress is not None:
        progress.run_finished(name)
    if on_done is not None:
        on_done(name, result, wall)


def _run_serial(workload: Workload, runs: Runs, config: SimConfig, seed: int, progress: Progress | None,
                on_done: Callable[[str, RunResult, float], None] | None) -> None:
    for name in runs.planned:
        report = None if progress is None else (lambda done, sim_s, name=name: progress.update(name, done, sim_s))
        start = time.perf_counter()
        result = simulate(workload, name, config=config, seed=seed, progress=report)
        _finish(runs, name, result, time.perf_counter() - start, progress, on_done)


# --- worker processes ---------------------------------------------------------------------------

_WORKER: dict[str, Any] = {}


def _init_worker(workload: Workload, config: SimConfig, seed: int, updates: Any) -> None:
    # Ctrl-C is the parent's to handle: it keeps the finished runs and stops the workers itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _WORKER.update(workload=workload, config=config, seed=seed, updates=updates)


def _run_in_worker(name: str) -> tuple[RunResult, float]:
    updates = _WORKER["updates"]
    start = time.perf_counter()
    try:
        result = simulate(_WORKER["workload"], name, config=_WORKER["config"], seed=_WORKER["seed"],
                          progress=lambda done, sim_s: updates.put((name, done, sim_s)))
    except StowageError as exc:
        # Its subclasses take other arguments than their message and would not unpickle in the parent.
        raise StowageError(str(exc)) from None
    return result, time.perf_counter() - start


def _context() -> multiprocessing.context.BaseContext:
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["stowage.sim.compare"])  # workers fork with numpy and the engine loaded
        return ctx
    return multiprocessing.get_context("spawn")


def _run_parallel(workload: Workload, runs: Runs, config: SimConfig, seed: int, processes: int,
                  progress: Progress | None, on_done: Callable[[str, RunResult, float], None] | None) -> None:
    ctx = _context()
    updates = ctx.Queue()
    pool = ProcessPoolExecutor(processes, mp_context=ctx, initializer=_init_worker,
                               initargs=(workload, config, seed, updates))
    futures: dict[Future[tuple[RunResult, float]], str] = {}
    clean = False
    try:
        # Submitted in plan order, so with fewer processes than runs the asked-for presets go first.
        futures = {pool.submit(_run_in_worker, name): name for name in runs.planned}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=0.25, return_when=FIRST_COMPLETED)
            while True:  # drained with or without a Progress: the workers' puts must not pile up
                try:
                    update = updates.get_nowait()
                except queue.Empty:
                    break
                if progress is not None:
                    progress.update(*update)
            for future in sorted(done, key=lambda f: runs.planned.index(futures[f])):
                result, wall = future.result()  # a worker's exception is raised here
                _finish(runs, futures[future], result, wall, progress, on_done)
        clean = True
    finally:
        if not clean:
            # Interrupted or failed: stop the runs still going instead of waiting for them.
            for future in futures:
                future.cancel()
            for process in list(getattr(pool, "_processes", {}).values()):
                process.terminate()
        pool.shutdown(wait=clean, cancel_futures=True)
        updates.close()
        updates.cancel_join_thread()
