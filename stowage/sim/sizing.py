"""Size and sanity checks before any simulation work: counts, simulated-time span, memory.

:func:`plan_runs` refuses, naming the option that raises each limit, a workload with more tasks or nodes than the
limits, one whose jobs arrive or tasks last past the simulated-time cap (a timestamp unit mistake, typically), or
one whose estimated memory exceeds what is available; and decides how many worker processes to use. See
docs/simulator.md "No silent results".
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from stowage.errors import StowageError
from stowage.sim.engine import SimConfig
from stowage.sim.report import RATIO_BASELINE, SLOWDOWN_REFERENCE, time_cap
from stowage.sim.tables import resource_axis
from stowage.sim.workload import Workload, nodes_over_limit

__all__ = ["DEFAULT_MAX_NODES", "DEFAULT_MAX_TASKS", "Limits", "Plan", "available_cores", "available_memory",
           "estimate_memory", "plan_runs", "reference_runs"]

#: Refuse workloads with more tasks than this (``--max-tasks``): about five FB-2009 days, which at the
#: measured ~1,000–12,000 tasks placed per second take 3–40 minutes per preset on one core.
DEFAULT_MAX_TASKS = 2_000_000
#: Refuse more nodes than this (``--max-nodes``): every kube-like placement scores every node, so time
#: grows with tasks × nodes; 20,000 is 33 times the FB-2009 cluster.
DEFAULT_MAX_NODES = 20_000
#: Below this many task-runs (tasks × runs) a worker process costs more to start than it saves.
_SERIAL_BELOW_TASK_RUNS = 20_000

# Memory model (bytes), an upper-side fit to peak resident sizes measured on this project's machine
# (docs/simulator.md "No silent results"): an interpreter with numpy, the simulator and the trace
# readers (33-39 MB measured), then per node, per task group and per job (the workload's objects and
# the engine's per-group arrays), and per task that can run at once (the running table and its
# per-event temporaries).
# Tasks themselves cost nothing: a group holds counts, not one object per task.
_MEM_BASE = 45e6
_MEM_PER_NODE = 8e3
_MEM_PER_GROUP = 1.5e3
_MEM_PER_JOB = 1e3
_MEM_PER_RUNNING = 1.5e3


def reference_runs(policies: Sequence[str]) -> list[str]:
    """The reference runs the report needs that ``policies`` does not include (ratios, slowdowns)."""
    return [p for p in (RATIO_BASELINE, SLOWDOWN_REFERENCE) if p not in policies]


def available_cores() -> int:
    """CPUs this process may run on (the affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def available_memory() -> float | None:
    """Bytes of memory available now (``MemAvailable`` in /proc/meminfo), None where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024.0
    except OSError:
        return None
    return None


def estimate_memory(workload: Workload) -> float:
    """Peak bytes one process needs to run one preset over ``workload`` (the fitted model above).

    Running tasks are bounded by the tasks and by what the nodes can hold at once: on each node, the
    most tasks of any one demand that fit (over the distinct demands and node shapes), twice over
    for harvesting.
    """
    resources = resource_axis(workload)
    demands = np.unique([g.demand.to_array(resources) for j in workload.jobs for g in j.groups]
                        or [np.zeros(len(resources))], axis=0)
    caps, counts = np.unique([n.capacity.to_array(resources) for n in workload.nodes] or [np.zeros(len(resources))],
                             axis=0, return_counts=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        fit = np.where(demands[None] > 0, caps[:, None] / demands[None], np.inf).min(axis=2)  # (shapes, demands)
    fit = np.where(np.isfinite(fit), np.floor(fit), 0.0)  # a demand of nothing takes no room: not counted
    running = min(float(workload.task_count), 2.0 * float((fit.max(axis=1) * counts).sum()))
    groups = sum(len(j.groups) for j in workload.jobs)
    return (_MEM_BASE + _MEM_PER_NODE * len(workload.nodes) + _MEM_PER_GROUP * groups
            + _MEM_PER_JOB * len(workload.jobs) + _MEM_PER_RUNNING * running)


@dataclass(frozen=True, slots=True)
class Limits:
    """What :func:`plan_runs` refuses past (each has a ``stowage simulate`` option)."""

    max_tasks: int = DEFAULT_MAX_TASKS
    max_nodes: int = DEFAULT_MAX_NODES
    max_memory: float | None = None
    """Bytes all processes together may use; None: the memory available when the run starts."""


@dataclass(frozen=True, slots=True)
class Plan:
    """The runs to make and how, after the size checks."""

    runs: tuple[str, ...]
    references: tuple[str, ...]
    processes: int
    nodes: int
    jobs: int
    tasks: int
    memory_per_process: float
    memory_limit: float | None
    notes: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line for stderr: sizes, processes, memory estimate, and any adjustment made."""
        how = "serially" if self.processes == 1 else f"in {self.processes} processes"
        limit = f" of {_gb(self.memory_limit)} available" if self.memory_limit is not None else ""
        text = (f"size: {self.nodes:,} nodes, {self.jobs:,} jobs, {self.tasks:,} tasks; {len(self.runs)} runs "
                f"{how}; memory ~{_gb(self.memory_per_process * self.processes)}{limit}")
        return "; ".join([text, *self.notes])


def _gb(value: float) -> str:
    return f"{value / 1e9:.1f} GB" if value >= 1e9 else f"{value / 1e6:.0f} MB"


def _time_problems(workload: Workload, max_sim_s: float) -> list[str]:
    """Jobs no schedule could finish inside the simulated-time cap: arrivals or task durations past it."""
    if not workload.jobs:
        return []
    t0 = min(j.arrival_s for j in workload.jobs)
    cap = time_cap(max_sim_s)
    problems: list[str] = []
    late = [j for j in workload.jobs if j.arrival_s - t0 > max_sim_s]
    if late:
        last = max(late, key=lambda j: j.arrival_s)
        count = "1 job arrives" if len(late) == 1 else f"{len(late):,} jobs arrive"
        problems.append(f"{count} after {cap}, e.g. {last.name} at {last.arrival_s:g} s "
                        f"({last.arrival_s - t0:g} s after the first job; a timestamp in ms?)")
    for job in workload.jobs:
        longest = max(job.groups, key=lambda g: g.duration_s, default=None)
        if longest is None or job.arrival_s - t0 > max_sim_s:
            continue
        ends = job.arrival_s - t0 + longest.duration_s
        if ends > max_sim_s:
            problems.append(f"jobs[{job.name}].groups[{longest.name}]: a task of {longest.duration_s:g} s "
                            f"starting {job.arrival_s - t0:g} s after the first job ends at {ends:g} s, "
                            f"past {cap}")
            break  # one example says it; every such job would
    return problems


def plan_runs(
    workload: Workload,
    policies: Sequence[str],
    *,
    config: SimConfig | None = None,
    processes: int | None = None,
    limits: Limits | None = None,
) -> Plan:
    """Check the workload's size before any work; raise :class:`StowageError` saying what to change.

    ``processes``: worker processes wanted (None: one per core, serial for a tiny workload). It is
    lowered to the number of runs, and to what fits in the memory limit (said in ``Plan.notes``).
    """
    config = config or SimConfig()
    limits = limits or Limits()
    wanted = list(dict.fromkeys(policies))
    refs = reference_runs(wanted)
    runs = tuple(wanted + refs)
    tasks, nodes = workload.task_count, len(workload.nodes)
    problems: list[str] = []
    if tasks > limits.max_tasks:
        problems.append(f"{tasks:,} tasks is above the limit of {limits.max_tasks:,} (--max-tasks raises it; "
                        "--first-jobs N or --hours A-B replay a slice)")
    too_many = nodes_over_limit(nodes, limits.max_nodes)
    if too_many:
        problems.append(too_many)
    problems += _time_problems(workload, config.max_sim_s)
    per_process = estimate_memory(workload)
    limit = limits.max_memory if limits.max_memory is not None else available_memory()
    if limit is not None and per_process > limit:
        problems.append(f"one run needs ~{_gb(per_process)} of memory, above the {_gb(limit)} "
                        + ("--max-memory allows" if limits.max_memory is not None else
                           "available now (--max-memory SIZE raises the limit)")
                        + "; --first-jobs N or --hours A-B replay a slice")
    if problems:
        raise StowageError("refusing to start:\n  " + "\n  ".join(problems))
    notes: list[str] = []
    if processes is None:
        processes = 1 if tasks * len(runs) < _SERIAL_BELOW_TASK_RUNS else available_cores()
    count = max(1, min(processes, len(runs)))
    if limit is not None and per_process * count > limit:
        fit = max(1, int(limit // per_process))
        notes.append(f"{count} processes would need ~{_gb(per_process * count)}: running {fit} at a time")
        count = fit
    return Plan(runs, tuple(refs), count, nodes, len(workload.jobs), tasks, per_process, limit, tuple(notes))
