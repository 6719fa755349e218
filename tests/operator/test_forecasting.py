"""The forecast wired to the operator (``stowage.operator.forecasting``): the dispatcher's view as a forecast
snapshot, the refresh off the pass (once per change), what it writes to each Job's status and the Queue status."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
from stowage.operator import forecasting, jobs
from stowage.operator.dispatch_records import DispatchView, NodeRecord, PendingGroup, QueueRecord, RunningPod
from stowage.operator.job_writer import _comparable
from stowage.operator.metrics import OperatorMetrics

from stowage import forecast
from stowage.config import StowageSettings
from stowage.model import JobOrder
from stowage.policy.estimates import Source
from stowage.resources import ResourceVector

NOW = 1_800_000_000.0
CPU = ResourceVector({"cpu": 4.0, "memory": 8e9})


def _view() -> DispatchView:
    """Two 8-cpu nodes: a running Job task (4 cpu, 100 s in), a pod outside Stowage (4 cpu), two pending Jobs of two
    groups and one of one, and a gated plain pod."""
    node = ResourceVector({"cpu": 8.0, "memory": 32e9})
    running = [
        RunningPod("n1", CPU, queue="batch", started_at_s=NOW - 100, key="ns/a-map-0", job="ns/a", group="map"),
        RunningPod("n2", CPU, queue=None, key="kube-system/dns"),
    ]
    groups = [
        PendingGroup("ns/a/map", "batch", CPU, 0, job="ns/a", group="map", remaining_tasks=1, arrival_s=NOW - 300),
        PendingGroup("ns/a/reduce", "batch", CPU, 0, job="ns/a", group="reduce", remaining_tasks=1,
                     arrival_s=NOW - 300, depends_on=("map",)),
        PendingGroup("ns/b/train", "batch", CPU, 2, job="ns/b", group="train", remaining_tasks=2, arrival_s=NOW - 200),
        PendingGroup("ns/p", "batch", CPU, 1, group="p", remaining_tasks=1, arrival_s=NOW - 100),
    ]
    return DispatchView(nodes=[NodeRecord("n1", node), NodeRecord("n2", node)], running=running,
                        queues=[QueueRecord("batch", job_order=JobOrder.FIFO)], groups=groups)


HELD = {"ns/a/map": (300.0, "phase"), "ns/a/reduce": (60.0, "hint"), "ns/b/train": (600.0, "prior"),
        "ns/p": (120.0, "prior")}


def test_the_view_becomes_a_snapshot_with_running_tasks_barriers_and_foreign_pods_held() -> None:
    snap = forecasting.snapshot_of(_view(), HELD, {}, NOW, StowageSettings())
    assert [n.held for n in snap.nodes] == [ResourceVector(), CPU]  # the pod outside Stowage holds n2
    assert snap.running == (forecast.RunningTask("ns/a", "map", "n1", 100.0, False),)
    a, b, p = snap.jobs
    assert (a.key, a.kind, [g.name for g in a.groups]) == ("ns/a", "job", ["map", "reduce"])
    assert a.groups[1].depends_on == ("map",) and a.groups[0].source is Source.PHASE
    assert (b.groups[0].tasks, b.groups[0].estimate_s, b.groups[0].source) == (2, 600.0, Source.PRIOR)
    assert (p.key, p.kind, p.groups[0].estimate_s) == ("pod:ns/p", "pods", 120.0)  # apart from a Job "ns/p"


def test_a_learned_queue_prior_is_predicted_from_without_its_margin() -> None:
    """The decision's learned prior is the queue's mean × ``prior_margin``; the forecast predicts from the mean.
    Other sources (phase, hint) and a queue with nothing learned keep the decision's estimate."""
    snap = forecasting.snapshot_of(_view(), HELD, {}, NOW, StowageSettings(), means={"batch": 400.0, "other": 1.0})
    a, b, p = snap.jobs
    assert (b.groups[0].estimate_s, b.groups[0].source) == (400.0, Source.PRIOR)  # not the held 600 (= 400 × 1.5)
    assert (p.groups[0].estimate_s, a.groups[0].estimate_s, a.groups[1].estimate_s) == (400.0, 300.0, 60.0)
    unlearned = forecasting.snapshot_of(_view(), HELD, {}, NOW, StowageSettings(), means={"other": 1.0})
    assert unlearned.jobs[1].groups[0].estimate_s == 600.0


def test_the_offer_carries_the_learned_means_to_the_snapshot() -> None:
    client, metrics = _Client(), OperatorMetrics()
    seen: list[forecast.Snapshot] = []

    def spy(snap: forecast.Snapshot, settings: StowageSettings) -> forecast.Forecast:
        seen.append(snap)
        return forecast.predict(snap, settings)

    f = _forecaster(client, metrics, predict=spy)
    f.offer(_view(), HELD, {}, NOW, {"batch": 400.0})
    assert f.refresh()
    assert seen[0].jobs[1].groups[0].estimate_s == 400.0


def test_the_snapshot_predicts_each_pending_job_in_queue_order() -> None:
    snap = forecasting.snapshot_of(_view(), HELD, {}, NOW, StowageSettings())
    f = forecast.predict(snap, StowageSettings())
    a, b, p = (f.job(k) for k in ("ns/a", "ns/b", "pod:ns/p"))
    assert not a.pending and a.finish_s is not None  # running: its map finishes at +200 s, then reduce
    assert (b.queue_position, p.queue_position) == (1, 2)  # FIFO: b arrived first
    assert b.start_s is not None and b.start_s >= NOW  # one 4-cpu slot free on n1: b's first task starts now
    assert a.finish_s >= NOW + 200 + 60 - 1


class _Client:
    def __init__(self) -> None:
        self.patches: list[tuple[str, Any]] = []

    def patch(self, path: str, body: Any) -> Any:
        self.patches.append((path, body))
        return body


def _forecaster(client: _Client, metrics: OperatorMetrics, **kw: Any) -> forecasting.Forecaster:
    book = jobs.JobBook(metrics, clock=lambda: NOW)
    return forecasting.Forecaster(StowageSettings(), client, book, metrics, dry_run=False,  # type: ignore[arg-type]
                                  clock=lambda: NOW, **kw)


def test_a_refresh_writes_each_jobs_forecast_once_per_change() -> None:
    client, metrics = _Client(), OperatorMetrics()
    f = _forecaster(client, metrics)
    view = _view()
    f.offer(view, HELD, {}, NOW)
    assert f.refresh()
    written = {path: body["status"]["forecast"] for path, body in client.patches}
    b = written["/apis/stowage.io/v1alpha1/namespaces/ns/jobs/b/status"]
    assert (b["queuePosition"], b["sources"], b["note"]) == (1, {"train": "prior"}, None)
    assert b["start"] == "2027-01-15T08:00:00Z"  # NOW: b starts at once
    a = written["/apis/stowage.io/v1alpha1/namespaces/ns/jobs/a/status"]
    assert a["queuePosition"] is None and a["start"] is None and a["finish"] is not None  # running
    assert set(written) == {"/apis/stowage.io/v1alpha1/namespaces/ns/jobs/a/status",
                            "/apis/stowage.io/v1alpha1/namespaces/ns/jobs/b/status"}  # the plain pod: Queue status
    assert f.pending_pods("batch") == [{"pod": "ns/p", "queuePosition": 2, "position": 2,
                                        "start": f.pending_pods("batch")[0]["start"],
                                        "finish": f.pending_pods("batch")[0]["finish"], "source": "prior"}]
    text = metrics.render().decode()
    assert 'stowage_queue_predicted_wait_seconds{job="first",queue="batch"} 0.0' in text
    assert "stowage_forecast_seconds_count 1.0" in text
    # The same view again (a later pass, nothing changed): no prediction, no write.
    client.patches.clear()
    f.offer(view, HELD, {}, NOW + 5)
    assert not f.refresh() and client.patches == []
    # A change: b's estimate doubles. Its start does not move (it starts now), its finish does.
    f.offer(view, {**HELD, "ns/b/train": (1200.0, "prior")}, {}, NOW + 5)
    assert f.refresh()
    assert [p for p, _ in client.patches] == ["/apis/stowage.io/v1alpha1/namespaces/ns/jobs/b/status"]
    # Acting again after standing by: what it wrote is forgotten, the same view is predicted again.
    client.patches.clear()
    f.forget()
    f.offer(view, {**HELD, "ns/b/train": (1200.0, "prior")}, {}, NOW + 5)
    assert f.refresh() and len(client.patches) == 2  # the book has no stored forecast here: both written again


def test_a_queue_with_a_quota_is_predicted_too() -> None:
    """The fingerprint reads a Queue's quota (a mapping) as its items: a quota never stops the forecast."""
    client, metrics = _Client(), OperatorMetrics()
    f = _forecaster(client, metrics)
    view = dataclasses.replace(_view(), queues=[QueueRecord("batch", job_order=JobOrder.FIFO, quota={"cpu": 64.0})])
    f.offer(view, HELD, {}, NOW)
    assert f.refresh() and f.latest is not None and f.latest.job("ns/b").queue_position == 1


def test_no_offer_no_refresh_and_an_interval_of_zero_turns_it_off() -> None:
    client, metrics = _Client(), OperatorMetrics()
    assert not _forecaster(client, metrics).refresh()
    settings = StowageSettings(estimates=dataclasses.replace(StowageSettings().estimates, forecast_interval_s=0.0))
    off = forecasting.Forecaster(settings, client, jobs.JobBook(metrics, clock=lambda: NOW), metrics,  # type: ignore[arg-type]
                                 dry_run=False)
    off.offer(_view(), HELD, {}, NOW)
    assert not off.enabled and not off.refresh() and client.patches == []


def test_predicted_times_move_only_past_the_tolerance() -> None:
    j = forecast.JobForecast("ns/b", "batch", "job", True, 1, 1, NOW + 3600, NOW + 7200, {"t": 60.0}, {"t": "prior"})
    first = forecasting.forecast_status(j, None, NOW)
    assert (first["start"], first["finish"]) == ("2027-01-15T09:00:00Z", "2027-01-15T10:00:00Z")
    # 5 minutes later in an hour's wait: within 10 % of the wait left, the status keeps what it said.
    later = forecasting.forecast_status(
        forecast.JobForecast("ns/b", "batch", "job", True, 2, 3, NOW + 3900, NOW + 7500, {"t": 60.0},
                             {"t": "prior"}), first, NOW)
    assert (later["start"], later["finish"], later["queuePosition"]) == (first["start"], first["finish"], 2)
    moved = forecasting.forecast_status(
        forecast.JobForecast("ns/b", "batch", "job", True, 1, 1, NOW + 5400, None, {}, {}, fits=True), first, NOW)
    assert moved["start"] == "2027-01-15T09:30:00Z" and moved["finish"] is None
    # A cleared forecast (the Job finished) removes every key but the first predicted finish, kept to the end.
    cleared = forecasting.forecast_status(None, first, NOW)
    assert cleared == dict.fromkeys(k for k in first if k not in forecasting.FIRST_KEYS)
    nofit = forecast.JobForecast("ns/b", "batch", "job", True, 1, 1, None, None, {}, {}, fits=False)
    assert "fits no node" in forecasting.forecast_status(nofit, None, NOW)["note"]


def test_the_first_predicted_finish_is_kept_and_measured_at_the_jobs_end() -> None:
    """``firstFinish`` is written with the first predicted finish and never moved; at the Job's success the error is
    ``|finish − firstFinish| ÷ completion time``, the benchmark's measure (stowage_forecast_error_ratio)."""
    pending = forecast.JobForecast("ns/b", "batch", "job", True, 1, 1, NOW + 60, None, {"t": 60.0}, {"t": "prior"})
    no_finish = forecasting.forecast_status(pending, None, NOW)
    assert not set(forecasting.FIRST_KEYS) & set(no_finish)  # nothing predicted a finish yet
    j = forecast.JobForecast("ns/b", "batch", "job", True, 1, 1, NOW + 60, NOW + 160, {"t": 60.0}, {"t": "prior"})
    first = forecasting.forecast_status(j, no_finish, NOW + 5)
    assert (first["firstFinish"], first["firstPredictedAt"]) == ("2027-01-15T08:02:40Z", "2027-01-15T08:00:05Z")
    moved = forecasting.forecast_status(
        forecast.JobForecast("ns/b", "batch", "job", False, None, None, NOW + 60, NOW + 400, {"t": 60.0},
                             {"t": "phase"}), first, NOW + 100)
    assert moved["finish"] == "2027-01-15T08:06:40Z" and moved["firstFinish"] == first["firstFinish"]
    created = NOW - 40  # the Job was created 40 s before the first prediction; it finishes at NOW + 200
    job = {"metadata": {"creationTimestamp": "2027-01-15T07:59:20Z"}, "status": {"forecast": moved}}
    assert forecasting.forecast_error(job, NOW + 200) == pytest.approx(40 / (NOW + 200 - created))
    assert forecasting.forecast_error({"metadata": job["metadata"], "status": {}}, NOW + 200) is None
    assert forecasting.forecast_error({"status": job["status"]}, NOW + 200) is None  # no creation time


def test_a_short_wait_moves_by_less_than_a_minute() -> None:
    """A finish predicted 100 s ahead that moves by 30 s (30 % of the wait) is rewritten: for jobs of a minute or
    two, a fixed minute of tolerance would keep a prediction as far off as the job is long."""
    j = forecast.JobForecast("ns/b", "batch", "job", True, 1, 1, NOW + 40, NOW + 100, {"t": 60.0}, {"t": "prior"})
    first = forecasting.forecast_status(j, None, NOW)
    later = forecasting.forecast_status(
        forecast.JobForecast("ns/b", "batch", "job", True, 1, 1, NOW + 45, NOW + 130, {"t": 60.0},
                             {"t": "prior"}), first, NOW)
    assert later["start"] == first["start"]  # 5 s: within the tolerance
    assert later["finish"] == "2027-01-15T08:02:10Z"


def test_the_job_writer_leaves_the_forecast_to_the_forecaster() -> None:
    """A Job's status as the writer compares it ignores status.forecast: the forecaster's merge patches of that key
    never make the writer write the Job's status again."""
    assert _comparable({"phase": "Pending", "forecast": {"queuePosition": 1}, "kopf": {}}) == {"phase": "Pending"}
    assert math.isfinite(forecasting.MOVE_S)


def test_a_bound_pod_record_names_its_job_and_group_once_per_event() -> None:
    """The forecast runs a Job's running task to its group's estimate: the record says whose task the pod is."""
    from stowage import labels
    from stowage.kube.records import pod_record

    def pod(pod_labels: dict[str, str]) -> dict[str, Any]:
        return {"metadata": {"name": "etl-map-0", "namespace": "ns", "uid": "u", "labels": pod_labels},
                "spec": {"nodeName": "n1", "containers": []}, "status": {"phase": "Running"}}

    task = pod_record(pod({labels.LABEL_QUEUE: "batch", labels.LABEL_JOB: "etl", labels.LABEL_TASK_GROUP: "map"}), 0)
    assert task is not None and (task.job, task.task_group) == ("ns/etl", "map")
    foreign = pod_record(pod({labels.LABEL_JOB: "etl", labels.LABEL_TASK_GROUP: "map"}), 0)  # in no queue
    assert foreign is not None and (foreign.job, foreign.task_group) == (None, "")


def test_stowage_queue_lists_pending_jobs_and_gated_pods_in_queue_order() -> None:
    from stowage.operator.queue_cli import Row, pending_rows

    def job(name: str, queue: str = "batch", **status: Any) -> dict[str, Any]:
        return {"metadata": {"namespace": "ns", "name": name}, "spec": {"queue": queue}, "status": status}

    waiting = {"queuePosition": 2, "position": 3, "start": "2027-01-15T08:10:00Z", "finish": "2027-01-15T08:20:00Z",
               "sources": {"b": "prior", "a": "hint"}, "predictedAt": "2027-01-15T08:00:00Z"}
    listed = [
        job("second", forecast=waiting),
        job("running", startTime="2027-01-15T07:00:00Z", forecast={"finish": "2027-01-15T09:00:00Z"}),
        job("done", phase="Succeeded"),
        job("other-queue", queue="ml", forecast=waiting),
        job("fresh"),  # created since the last forecast
        {**job("paused"), "spec": {"queue": "batch", "suspend": True}},
    ]
    queue = {"status": {"pendingPods": [{"pod": "ns/p", "queuePosition": 1, "position": 1,
                                         "start": "2027-01-15T08:00:00Z", "finish": None, "source": "prior"}]}}
    assert pending_rows("batch", listed, queue) == [
        Row("pod", "ns/p", 1, 1, "2027-01-15T08:00:00Z", None, "prior"),
        Row("job", "ns/second", 2, 3, "2027-01-15T08:10:00Z", "2027-01-15T08:20:00Z", "a=hint, b=prior"),
        Row("job", "ns/fresh", None, None, None, None, "", "not predicted yet"),
    ]
    assert pending_rows("batch", [], None) == []
