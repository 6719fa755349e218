"""The operator's metrics: series a dashboard's rate() needs exist before their first event."""

from __future__ import annotations

from prometheus_client import generate_latest
from stowage.operator.metrics import OperatorMetrics, QueueNumbers

from stowage.labels import METRICS


def _numbers(name: str) -> QueueNumbers:
    return QueueNumbers(name=name, dominant_share={}, fair_share=0.5, allocated={}, pending_tasks=0, running_tasks=0)


def test_each_published_queue_has_a_completion_series_before_its_first_job() -> None:
    metrics = OperatorMetrics()
    metrics.publish_queues([_numbers("gold"), _numbers("bronze")])
    text = generate_latest(metrics.registry).decode()
    for queue in ("gold", "bronze"):
        assert f'{METRICS.JOB_COMPLETION_SECONDS}_count{{queue="{queue}"}} 0.0' in text


def test_no_completion_series_for_a_queue_never_published() -> None:
    metrics = OperatorMetrics()
    metrics.publish_queues([_numbers("gold")])
    assert 'queue="bronze"' not in generate_latest(metrics.registry).decode()


def _job(uid: str, created: str, queue: str = "gold", started: bool = False) -> dict[str, object]:
    return {"metadata": {"uid": uid, "namespace": "ns", "name": uid, "creationTimestamp": created},
            "spec": {"queue": queue}, "status": {"startTime": created} if started else {}}


def _wait(metrics: OperatorMetrics, queue: str, kind: str, suffix: str) -> float | None:
    return metrics.registry.get_sample_value(f"{METRICS.QUEUE_WAIT_SECONDS}_{suffix}", {"queue": queue, "kind": kind})


def test_a_jobs_queue_wait_is_observed_once_at_its_first_release() -> None:
    metrics = OperatorMetrics()
    metrics.publish_queues([_numbers("gold")])
    assert _wait(metrics, "gold", "job", "count") == 0  # the series exist before the first release
    created = "2026-01-01T00:00:00Z"
    t0 = 1767225600.0  # that instant, in epoch seconds
    for _ in range(3):  # three tasks released in one pass, before the status says it started
        metrics.observe_job_release(_job("a", created), t0 + 42)
    metrics.observe_job_release(_job("b", created, started=True), t0 + 99)  # released before a restart
    assert _wait(metrics, "gold", "job", "count") == 1
    assert _wait(metrics, "gold", "job", "sum") == 42
    assert _wait(metrics, "gold", "job", "bucket") is None  # (bucket samples carry le)
    assert metrics.registry.get_sample_value(f"{METRICS.QUEUE_WAIT_SECONDS}_bucket",
                                             {"queue": "gold", "kind": "job", "le": "30.0"}) == 0
    assert metrics.registry.get_sample_value(f"{METRICS.QUEUE_WAIT_SECONDS}_bucket",
                                             {"queue": "gold", "kind": "job", "le": "60.0"}) == 1


def test_a_plain_pods_queue_wait_is_its_gate_removal_less_its_creation() -> None:
    metrics = OperatorMetrics()
    pod = {"metadata": {"name": "p", "creationTimestamp": "2026-01-01T00:00:00Z",
                        "labels": {"stowage.io/queue": "bronze"}}}
    metrics.observe_pod_release(pod, 1767225600.0 + 7)
    metrics.observe_pod_release({"metadata": {"name": "q", "creationTimestamp": "2026-01-01T00:00:00Z"}},
                                1767225600.0 + 1)
    assert (_wait(metrics, "bronze", "pod", "count"), _wait(metrics, "bronze", "pod", "sum")) == (1, 7)
    assert (_wait(metrics, "default", "pod", "count"), _wait(metrics, "default", "pod", "sum")) == (1, 1)
    metrics.observe_pod_release({"metadata": {"name": "r"}}, 1767225600.0)  # no creation time: nothing to measure
    assert _wait(metrics, "default", "pod", "count") == 1
