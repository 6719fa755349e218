"""How long opportunistic pods held for missing utilization wait once Prometheus is back.

    .venv/bin/python -m tests.scheduler.bench_recovery [--rounds 4] [--pods 2] [--unschedulable-retry 1s]

One control plane (``KUBEBUILDER_ASSETS`` or ``.envtest/``) and the scheduling path of
:class:`tests.scheduler.stack.Stack` (three fake nodes, node monitors, a real Prometheus, ``stowage extender``,
the fault proxy), with kube-scheduler started from ``manifests/scheduler-config.yaml`` and the chart's
``--pod-max-in-unschedulable-pods-duration`` (``scheduler.unschedulableRetry``, 1s; ``--unschedulable-retry``).

Each round: Prometheus stopped; ``--pods`` opportunistic pods created and rejected by the extender for
missing utilization (their ``FailedScheduling`` event says so), so they sit in kube-scheduler's unschedulable
pool; Prometheus started again (same port). Measured: from the moment the extender's ``/metrics`` shows
harvestable memory on every node again (the samples are fresh; polled every 0.1 s) to the moment every held
pod is bound (polled every 0.1 s), and the same from Prometheus' start. No pod is deleted meanwhile: nothing
but the extender (its nudge) or kube-scheduler's own periodic look at its unschedulable pool (every 30 s)
moves the pods. Round ``i`` of ``n`` waits ``30·i/n`` s after the last rejection before starting Prometheus, so
the rounds meet that 30 s period at spread phases (else each round starts right after the previous one's
flush and sees the same phase). Also reported: the extender's
``stowage_extender_nudges_total`` by outcome after all rounds.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.scheduler.stack import NO_UTILIZATION, Stack, extender_metric, manifest, opportunistic_pod, wait_for
from tests.support.controlplane import (
    FEATURE_GATES,
    SCHEDULER,
    ControlPlane,
    SchedulerHandle,
    _Process,
    find_assets,
    missing_assets_reason,
)

__all__ = ["Round", "main", "run", "start_scheduler_with_retry", "table"]

_POLL_S = 0.1


@dataclass(frozen=True)
class Round:
    """One recovery: seconds from fresh samples (and from Prometheus' start) to the last held pod bound."""

    pods: int
    from_fresh_s: float
    from_start_s: float


def start_scheduler_with_retry(stack: Stack, retry: str) -> SchedulerHandle:
    """The manifest's kube-scheduler (as :meth:`Stack.use_scheduler` starts it) plus the chart's
    ``--pod-max-in-unschedulable-pods-duration``; the stack's own schedulers are stopped first."""
    plane = stack.plane
    assert stack.proxy is not None
    for handle in stack.schedulers.values():
        if handle.running:
            handle.stop()
    name = f"stowage-scheduler-retry-{stack.id}"
    config = plane.scheduler_config(plane.scheduler_config(manifest(), stack.proxy.url))
    path = plane.workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    kc = str(plane.kubeconfig)
    argv = [str(plane.assets / SCHEDULER), f"--config={path}", f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}", "--bind-address=127.0.0.1", "--secure-port=0", "--v=2",
            f"--feature-gates={FEATURE_GATES}", f"--pod-max-in-unschedulable-pods-duration={retry}"]
    handle = SchedulerHandle(name, path, _Process(name, lambda: argv, plane.logs / f"{name}.log"), plane)
    plane.schedulers[name] = handle  # stopped with the control plane
    return handle.start(plane.ready_timeout_s)


def _all_fresh(stack: Stack) -> bool:
    h = stack.harvestable()
    return all(h.get((n, "memory"), 0.0) >= 1.0 for n in stack.nodes)


#: kube-scheduler's fixed period for looking at its unschedulable pool (``flushUnschedulablePodsLeftover``).
FLUSH_PERIOD_S = 30.0


def one_round(stack: Stack, pods: int, index: int, rounds: int = 1) -> Round:
    with stack.namespace(prefix=f"recovery-{index}") as ns:
        stack.stop_prometheus()
        wait_for(lambda: all(stack.harvestable().get((n, "memory"), 1.0) == 0.0 for n in stack.nodes), 120,
                 "the extender to harvest nothing without Prometheus")
        names = [f"held-{i}" for i in range(pods)]
        for name in names:
            stack.create(ns, opportunistic_pod(name, cpu="100m", memory="256Mi", stack_id=stack.id))
        for name in names:
            stack.wait_event(ns, name, NO_UTILIZATION)
        time.sleep(FLUSH_PERIOD_S * index / max(rounds, 1))
        started = time.monotonic()
        stack.start_prometheus()
        wait_for(lambda: _all_fresh(stack), 180, "fresh utilization in the extender", interval_s=_POLL_S)
        fresh = time.monotonic()

        def bound() -> bool:
            return all(p.spec.node_name for p in stack.core.list_namespaced_pod(ns).items)

        wait_for(bound, 600, f"the held pods of {ns} bound", interval_s=_POLL_S)
        done = time.monotonic()
    return Round(pods, done - fresh, done - started)


def run(plane: ControlPlane, workdir: Path, rounds: int = 4, pods: int = 2, retry: str = "1s",
        say: Callable[[str], object] = print) -> tuple[list[Round], str]:
    """``rounds`` recoveries on one stack; returns them and the extender's /metrics text afterwards."""
    with Stack(plane, workdir / "stack") as stack:
        start_scheduler_with_retry(stack, retry)
        out = []
        for i in range(rounds):
            result = one_round(stack, pods, i, rounds)
            say(f"round {i + 1}: {result.pods} pods bound {result.from_fresh_s:.1f} s after fresh samples "
                f"({result.from_start_s:.1f} s after Prometheus started)")
            out.append(result)
        return out, stack.extender_metrics()


def table(results: list[Round], metrics_text: str) -> str:
    fresh = [r.from_fresh_s for r in results]
    start = [r.from_start_s for r in results]
    lines = [
        f"rounds {len(results)}, pods per round {results[0].pods if results else 0}",
        f"from fresh samples to bound: median {statistics.median(fresh):.1f} s, "
        f"range {min(fresh):.1f}–{max(fresh):.1f} s",
        f"from Prometheus start to bound: median {statistics.median(start):.1f} s, "
        f"range {min(start):.1f}–{max(start):.1f} s",
    ]
    outcomes = ("patched", "gone", "failed", "dropped")
    counts = {o: extender_metric(metrics_text, "stowage_extender_nudges_total", {"outcome": o}) for o in outcomes}
    lines.append("extender nudges: " + ", ".join(f"{o} {counts[o]:g}" for o in outcomes))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.scheduler.bench_recovery",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--pods", type=int, default=2, help="held opportunistic pods per round")
    parser.add_argument("--unschedulable-retry", default="1s",
                        help="kube-scheduler --pod-max-in-unschedulable-pods-duration (the chart's default: 1s)")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="keep every process's logs here (default: a temporary folder, removed)")
    args = parser.parse_args(argv)
    assets = find_assets()
    if assets is None:
        print(missing_assets_reason(), file=sys.stderr)
        return 2
    with contextlib.ExitStack() as stack:
        tmp = args.workdir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="stowage-bench-recovery-")))
        plane = stack.enter_context(ControlPlane(tmp / "control-plane", assets, controller_manager=True))
        results, metrics_text = run(plane, tmp, args.rounds, args.pods, args.unschedulable_retry)
    print()
    print(table(results, metrics_text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
