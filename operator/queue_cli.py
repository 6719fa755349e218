"""``stowage queue QUEUE``: a queue's pending work with positions and predicted start and finish, read from the cluster.

What the operator's forecast published (``operator.forecasting``): each pending Job's ``status.forecast`` and the
Queue's ``status.pendingPods`` (its gated plain pods, the first 100 in queue order). The listing is
:func:`pending_rows` (pure: the listed Jobs and the Queue in, rows out); the command only reads and prints.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import click
from stowage.operator import crd, forecasting, tasks

from stowage import labels
from stowage.errors import ConfigError
from stowage.kube import api
from stowage.kube.credentials import load_config
from stowage.kube.records import parse_timestamp

__all__ = ["Row", "pending_rows", "queue"]

_TERMINAL = (tasks.Phase.SUCCEEDED.value, tasks.Phase.FAILED.value)


@dataclass(frozen=True, slots=True)
class Row:
    kind: str
    """``job`` (a Stowage Job) or ``pod`` (a gated plain pod)."""
    name: str
    """``namespace/name``."""
    queue_position: int | None
    position: int | None
    start: str | None
    finish: str | None
    sources: str
    """group=source, … (what the prediction assumed)."""
    note: str = ""


def pending_rows(queue: str, listed_jobs: Sequence[Mapping[str, Any]],
                 queue_object: Mapping[str, Any] | None) -> list[Row]:
    """The queue's pending Jobs (not started, not finished, not suspended) and gated plain pods, in queue order;
    a pending Job the forecast has not placed yet comes last, with no position."""
    rows: list[Row] = []
    for job in listed_jobs:
        spec, status = job.get("spec") or {}, job.get("status") or {}
        meta = job.get("metadata") or {}
        if spec.get("queue", labels.DEFAULT_QUEUE) != queue or spec.get("suspend"):
            continue
        f = status.get("forecast") if isinstance(status.get("forecast"), Mapping) else {}
        if status.get("phase") in _TERMINAL or status.get("startTime") or (f and f.get("queuePosition") is None):
            continue  # finished, or started (the forecast places only what has not)
        sources = ", ".join(f"{g}={s}" for g, s in sorted((f.get("sources") or {}).items()))
        rows.append(Row("job", f"{meta.get('namespace')}/{meta.get('name')}", f.get("queuePosition"),
                        f.get("position"), f.get("start"), f.get("finish"), sources,
                        f.get("note") or ("" if f else "not predicted yet")))
    pods = ((queue_object or {}).get("status") or {}).get("pendingPods") or []
    for p in pods:
        if isinstance(p, Mapping):
            rows.append(Row("pod", str(p.get("pod")), p.get("queuePosition"), p.get("position"), p.get("start"),
                            p.get("finish"), str(p.get("source") or "")))
    return sorted(rows, key=lambda r: (r.queue_position is None, r.queue_position or 0, r.name))


def _in(at: str | None, now: float) -> str:
    """``at`` (RFC 3339) as a wait from ``now``: ``now``, ``in 5m``, ``in 2h10m``, ``in 3d4h``."""
    t = parse_timestamp(at) if at else None
    if t is None:
        return "-"
    s = max(t - now, 0.0)
    if s < 30:
        return "now"
    m, h, d = int(s // 60), int(s // 3600), int(s // 86400)
    if d:
        return f"in {d}d{h % 24}h"
    if h:
        return f"in {h}h{m % 60}m"
    return f"in {max(m, 1)}m"


def _table(rows: Sequence[Row], now: float) -> str:
    head = ("POSITION", "OVERALL", "KIND", "NAME", "START", "ETA", "FINISH", "ASSUMED")
    lines = [head] + [(str(r.queue_position or "-"), str(r.position or "-"), r.kind, r.name, _in(r.start, now),
                       r.start or "-", r.finish or "-", r.sources + (f"  ({r.note})" if r.note else ""))
                      for r in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(head) - 1)]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(line[:-1], widths, strict=True)) + "   " + line[-1]
                     for line in lines)


@click.command("queue", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("name")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), default=None,
              help="kubeconfig file (default: in-cluster, else $KUBECONFIG, else ~/.kube/config).")
@click.option("--context", default=None, help="kubeconfig context (default: the current one).")
@click.option("-n", "--namespace", default=None, help="Only this namespace's Jobs and pods (default: every one).")
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True)
def queue(name: str, kubeconfig: str | None, context: str | None, namespace: str | None, output: str) -> None:
    """List the pending work of Queue NAME, next to start first: where each Job and gated pod stands and when it
    is predicted to start and finish.

    \b
    POSITION  its place in the queue (1 starts next), in the queue's jobOrder as the dispatcher ranks it
    OVERALL   its place across every queue, by predicted start
    START     predicted start as a wait from now; ETA and FINISH: predicted start and finish (UTC)
    ASSUMED   each task group's duration estimate source (hint: expectedDuration; phase: the group's finished
              tasks; elapsed: a running task ran longer; history: earlier runs; prior: the queue's prior)

    The operator predicts by running its own scheduling decision forward from the cluster as it is (running
    tasks, their elapsed time, the estimates), at most every estimates.forecast_interval_s and only when
    something changed: no new arrivals, no failures, regular (not harvested) room only. It reads Job
    status.forecast and the Queue's status.pendingPods (the first 100 gated plain pods); kubectl get sjob
    shows the same POSITION and ETA columns. docs/operator.md "When will it run" says what the numbers mean
    and how far off they were measured to be.
    """
    try:
        client = api.KubeClient(load_config(kubeconfig, context))
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    with client:
        try:
            queue_object = client.get(crd.QUEUE.path(name))
        except api.ApiError as exc:
            if exc.status == 404:
                raise click.ClickException(f"queue {name!r}: no such Queue (kubectl get sq lists them)") from None
            raise click.ClickException(f"queue {name!r}: {exc}") from None
        try:
            listed, _ = client.list(crd.JOB.path(namespace=namespace))
        except api.ApiError as exc:
            raise click.ClickException(f"jobs: {exc}") from None
    rows = pending_rows(name, listed, queue_object)
    if namespace is not None:
        rows = [r for r in rows if r.name.startswith(f"{namespace}/")]
    if output == "json":
        click.echo(json.dumps([asdict(r) for r in rows], indent=2))
        return
    if not rows:
        click.echo(f"queue {name}: nothing pending")
        return
    click.echo(_table(rows, time.time()))
    cut = len((queue_object.get("status") or {}).get("pendingPods") or []) >= forecasting.MAX_QUEUE_PODS
    if cut:
        click.echo(f"(the Queue status lists the first {forecasting.MAX_QUEUE_PODS} gated pods only)", err=True)

