"""A load run on the whole stack, shared by the 200-node CI test (``test_scale.py``) and the on-demand load
report (``bench_load.py``): the workload, the same workload as a ``stowage simulate`` file, and what a run
measures (release-to-bind, extender latency, evictions, lost tasks, each process's CPU and peak RSS).

The workload (seeded, deterministic): ``jobs`` Jobs spread over three queues of weights 3:2:1, every task one
group of identical tasks (1 core / 1 GiB or 2 cores / 2 GiB, 10–30 s on the fake kubelet unless told), every
``opportunistic_every``-th Job ``opportunistic: "true"`` (the others ``"false"``), all submitted at once. The
simulator gets the same nodes (7.5 cores, 15 GiB allocatable; only the monitored ones harvest, as in the
stack), queues, jobs and durations, every arrival at 0, and its own usage model (the one
:class:`tests.support.stack.LoadModel` draws from).
"""

from __future__ import annotations

import datetime as dt
import math
import os
import random
import re
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from stowage import labels
from tests.support.stack import ALLOCATABLE, WholeStack

QUEUES: Mapping[str, float] = {"prod": 3.0, "batch": 2.0, "adhoc": 1.0}
SHAPES = (("1", "1Gi"), ("2", "2Gi"))
RUN_S = (10, 20, 30)


@dataclass(frozen=True)
class LoadJob:
    name: str
    queue: str
    tasks: int
    cpu: str
    memory: str
    run_s: int
    opportunistic: str


def load_jobs(tasks: int, jobs: int, seed: int = 0, opportunistic_every: int = 5,
              run_s: tuple[int, ...] = RUN_S) -> list[LoadJob]:
    """``jobs`` Jobs with ``tasks`` tasks in all (sizes differ by at most one), seeded; every
    ``opportunistic_every``-th Job ``opportunistic: "true"`` (it runs only where nodes harvest); each Job's
    tasks run one of ``run_s`` seconds (the same draws for any tuple of that length)."""
    rng = random.Random(seed)
    queues = list(QUEUES)
    out = []
    for i in range(jobs):
        cpu, memory = rng.choice(SHAPES)
        out.append(LoadJob(name=f"load-{i:04d}", queue=queues[i % len(queues)],
                           tasks=tasks // jobs + (1 if i < tasks % jobs else 0), cpu=cpu, memory=memory,
                           run_s=rng.choice(run_s),
                           opportunistic="true" if i % opportunistic_every == opportunistic_every - 1 else "false"))
    return [j for j in out if j.tasks > 0]


def submit(stack: WholeStack, ns: str, jobs: Iterable[LoadJob]) -> None:
    for q, weight in QUEUES.items():
        stack.create_queue(q, weight=weight)
    for j in jobs:
        stack.create_job(ns, stack.job_body(j.name, [{"name": "t", "replicas": j.tasks, "cpu": j.cpu,
                                                      "memory": j.memory, "run_s": j.run_s}],
                                            queue=j.queue, opportunistic=j.opportunistic))


def simulator_workload(jobs: Iterable[LoadJob], nodes: int, monitored: int) -> dict[str, Any]:
    """The same workload as a ``stowage simulate`` workload file (docs/workloads.md)."""
    shape = {"cpu": ALLOCATABLE["cpu"], "memory": ALLOCATABLE["memory"]}
    node_list = [{"name": "harvesting", "count": monitored, **shape}]
    if nodes > monitored:
        node_list.append({"name": "regular", "count": nodes - monitored, **shape, "harvest": False})
    return {
        "nodes": node_list,
        "queues": [{"name": q, "weight": w} for q, w in QUEUES.items()],
        "jobs": [{"name": j.name, "queue": j.queue, "arrival": 0, "opportunistic": j.opportunistic,
                  "groups": [{"name": "t", "replicas": j.tasks, "demand": {"cpu": j.cpu, "memory": j.memory},
                              "duration": j.run_s}]} for j in jobs],
    }


def write_simulator_workload(path: os.PathLike[str] | str, jobs: Iterable[LoadJob], nodes: int,
                             monitored: int) -> None:
    with open(path, "w") as out:
        yaml.safe_dump(simulator_workload(jobs, nodes, monitored), out, sort_keys=False)


# --- what a run measures -------------------------------------------------------------------------------


def _time(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def makespan_and_jct(jobs: Mapping[str, Mapping[str, Any]]) -> tuple[float, float]:
    """(last completion − first creation, mean completion − creation) over the Jobs, seconds (1 s resolution)."""
    created = {n: _time(j["metadata"]["creationTimestamp"]) for n, j in jobs.items()}
    done = {n: _time(j["status"]["completionTime"]) for n, j in jobs.items()}
    return max(done.values()) - min(created.values()), statistics.fmean(done[n] - created[n] for n in jobs)


def histogram_quantile(text: str, name: str, q: float, want: Mapping[str, str] | None = None) -> float:
    """Prometheus's ``histogram_quantile`` over one /metrics text (buckets summed over the other labels)."""
    buckets: dict[float, float] = {}
    for line in text.splitlines():
        found = re.match(rf"^{re.escape(name)}_bucket\{{(.*)\}} (\S+)$", line)
        if not found:
            continue
        have = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', found.group(1)))
        if all(have.get(k) == v for k, v in (want or {}).items()):
            le = math.inf if have["le"] == "+Inf" else float(have["le"])
            buckets[le] = buckets.get(le, 0.0) + float(found.group(2))
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] == 0:
        return math.nan
    rank, lower, below = q * buckets[bounds[-1]], 0.0, 0.0
    for le in bounds:
        if buckets[le] >= rank:
            if math.isinf(le):
                return lower  # in the +Inf bucket: the highest finite bound, as Prometheus answers
            return lower + (le - lower) * (rank - below) / max(buckets[le] - below, 1e-12)
        lower, below = le, buckets[le]
    return lower


@dataclass(frozen=True)
class ProcUsage:
    cpu_s: float
    peak_rss_mib: float


def proc_usage(pid: int) -> ProcUsage:
    """CPU seconds (user + system, the process itself) and peak RSS (VmHWM) of a live process, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime (fields 14, 15 of stat)
    with open(f"/proc/{pid}/status") as f:
        hwm = next((int(line.split()[1]) for line in f if line.startswith("VmHWM:")), 0)
    return ProcUsage(cpu, hwm / 1024)


def component_pids(stack: WholeStack) -> dict[str, list[int]]:
    """Every process of the stack (and the control plane's), by component."""
    plane = stack.plane
    out: dict[str, list[int]] = {
        "etcd": [plane._etcd.pid], "kube-apiserver": [plane._apiserver.pid],
        "kube-controller-manager": [plane._controller_manager.pid],
        "kube-scheduler": [stack.scheduler.pid if stack.scheduler else None],
        "stowage extender": [stack.extender.pid if stack.extender else None],
        "stowage operator": [stack.operator.pid if stack.operator else None],
        "stowage node-monitor (each)": [m.pid for m in stack.monitors.values()],
        "prometheus": [stack.prometheus.proc.pid if stack.prometheus and stack.prometheus.proc else None],
        "test process (fake kubelet, ledger)": [os.getpid()],
    }
    return {k: [p for p in v if p is not None] for k, v in out.items()}


def usage_table(before: Mapping[str, list[ProcUsage]], after: Mapping[str, list[ProcUsage]]) -> list[str]:
    """Markdown rows: component, CPU seconds during the run (per process for the monitors), peak RSS."""
    rows = ["| component | CPU s during the run | peak RSS MiB |", "|---|---|---|"]
    for name, now in after.items():
        was = before.get(name, [])
        deltas = [a.cpu_s - b.cpu_s for a, b in zip(now, was, strict=False)] or [a.cpu_s for a in now]
        if len(now) > 1:
            rows.append(f"| {name} × {len(now)} | {statistics.fmean(deltas):.1f} (mean) | "
                        f"{max(a.peak_rss_mib for a in now):.0f} (max) |")
        elif now:
            rows.append(f"| {name} | {deltas[0]:.1f} | {now[0].peak_rss_mib:.0f} |")
    return rows


def snapshot_usage(stack: WholeStack) -> dict[str, list[ProcUsage]]:
    return {name: [proc_usage(p) for p in pids] for name, pids in component_pids(stack).items()}


def bind_delays(pods: Iterable[Any]) -> dict[str, list[float]]:
    """Per class: seconds from each pod's creation (the operator creates a task's pod when it releases it) to
    its ``PodScheduled`` condition, from the pods' own timestamps (1 s resolution)."""
    out: dict[str, list[float]] = {}
    for pod in pods:
        scheduled = next((c for c in pod.status.conditions or [] if c.type == "PodScheduled" and c.status == "True"),
                         None)
        if scheduled is None or scheduled.last_transition_time is None:
            continue
        delay = (scheduled.last_transition_time - pod.metadata.creation_timestamp).total_seconds()
        out.setdefault((pod.metadata.labels or {}).get(labels.LABEL_CLASS, "?"), []).append(delay)
    return out


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile (linear between order statistics); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def evictions(jobs: Mapping[str, Mapping[str, Any]]) -> int:
    return sum(int(g.get("evicted", 0)) for j in jobs.values()
               for g in ((j.get("status") or {}).get("groups") or {}).values())


def opportunistic_pods(pods: Iterable[Mapping[str, Any]]) -> int:
    return sum(1 for p in pods if p["labels"].get(labels.LABEL_CLASS) == "opportunistic")
