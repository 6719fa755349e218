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
