"""``stowage.forecast.predict``: a snapshot run forward with the operator's decision (issue #36 §1)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from click.testing import CliRunner

from stowage.bench import bench
from stowage.config import StowageSettings
from stowage.forecast import Forecast, ForecastOptions, Group, Job, Node, Queue, RunningTask, Snapshot, predict
from stowage.model import JobOrder, Pool
from stowage.policy import fairness
from stowage.policy.estimates import Source
from stowage.resources import ResourceVector
from stowage.sim.bench import busy_snapshot

NOW = 1.8e9  # a Unix time: the run's own clock starts at 0 (float steps at 1.8e9 are ~2e-7 s)
EXACT = ForecastOptions(grid_s=0.0)
SETTINGS = StowageSettings()


def cpu(n: float) -> ResourceVector:
    return ResourceVector({"cpu": n, "memory": n * 2**30})


def node(name: str, cores: float = 4.0) -> Node:
    return Node(name, cpu(cores))


def one(key: str, cores: float, estimate: float, *, tasks: int = 1, queue: str = "q", arrival: float = NOW - 100,
        source: Source = Source.HINT) -> Job:
    return Job(key, queue, (Group("g", cpu(cores), tasks, estimate, source),), arrival)


def snap(jobs: tuple[Job, ...], *, nodes: tuple[Node, ...] = (node("n0"),), running: tuple[RunningTask, ...] = (),
         queues: tuple[Queue, ...] = (Queue("q", job_order=JobOrder.FIFO),), **kw: object) -> Snapshot:
    return Snapshot(NOW, nodes, queues, jobs, running, **kw)  # type: ignore[arg-type]


def times(f: Forecast) -> dict[str, tuple[float | None, float | None]]:
    rel = {j.key: (None if j.start_s is None else j.start_s - NOW, None if j.finish_s is None else j.finish_s - NOW)
           for j in f.jobs}
    return {k: (None if s is None else round(s, 6), None if e is None else round(e, 6)) for k, (s, e) in rel.items()}


@pytest.mark.parametrize(("name", "snapshot", "expected"), [
    ("empty cluster: every job starts now",
     snap((one("a", 1, 60), one("b", 2, 30), one("c", 1, 90)), nodes=(node("n0"), node("n1"))),
     {"a": (0, 60), "b": (0, 30), "c": (0, 90)}),
    ("one node busy with a running task 40 s into its 100 s: the pending job starts when it ends",
     snap((one("old", 4, 100), one("new", 4, 50)), running=(RunningTask("old", "g", "n0", 40.0),)),
     {"old": (-40, 60), "new": (60, 110)}),
    ("a task past its estimate ends after the floor (estimates.min_duration_s)",
     snap((one("old", 4, 100), one("new", 4, 50)), running=(RunningTask("old", "g", "n0", 130.0),)),
     {"old": (-130, 1), "new": (1, 51)}),
    ("one slot, FIFO: the job order mask admits both (fairness knob 0.25), packing's remaining work takes b",
     snap((one("b", 4, 10, arrival=NOW - 5), one("a", 4, 20, arrival=NOW - 9))),
     {"a": (10, 30), "b": (0, 10)}),
    ("a barrier: the second stage starts after the first",
     snap((Job("j", "q", (Group("map", cpu(2), 2, 50, Source.PHASE),
                           Group("reduce", cpu(4), 1, 20, Source.PRIOR, depends_on=("map",))), NOW - 1),)),
     {"j": (0, 70)}),
    ("a stage half done, its last task running: the next stage starts when it ends",
     snap((Job("j", "q", (Group("map", cpu(2), 3, 50, Source.PHASE, finished=2),
                           Group("reduce", cpu(4), 1, 20, depends_on=("map",))), NOW - 100),),
          running=(RunningTask("j", "map", "n0", 30.0),)),
     {"j": (-30, 40)}),
])
def test_predicted_start_and_finish(name: str, snapshot: Snapshot, expected: dict) -> None:
    assert times(predict(snapshot, SETTINGS, EXACT)) == expected, name


def test_two_queues_share_by_weight() -> None:
    # 3 one-core slots, 6 equal jobs in each queue: the weight-2 queue gets two of the first three slots.
    queues = (Queue("heavy", 2.0, JobOrder.FIFO), Queue("light", 1.0, JobOrder.FIFO))
    jobs = tuple(one(f"{q}-{i}", 1, 100, queue=q, arrival=NOW - 50 + i) for i in range(6) for q in ("heavy", "light"))
    f = predict(snap(jobs, nodes=(node("n0", 3),), queues=queues), SETTINGS, EXACT)
    first = [j.key.split("-")[0] for j in f.pending() if j.start_s == NOW]
    assert sorted(first) == ["heavy", "heavy", "light"]
    mean = {q: sum(j.start_s - NOW for j in f.queue(q)) / 6 for q in ("heavy", "light")}
    assert mean["heavy"] < mean["light"]


def test_decayed_usage_is_read_a_queue_that_used_more_goes_second() -> None:
    # Without the short-term floor (both queues hold nothing now, below any floor), usage decides.
    settings = replace(SETTINGS, packing=replace(SETTINGS.packing, queue_share_floor=0.0))
    queues = (Queue("a", job_order=JobOrder.FIFO), Queue("b", job_order=JobOrder.FIFO))
    jobs = (one("a1", 4, 10, queue="a", arrival=NOW - 9), one("b1", 4, 10, queue="b", arrival=NOW - 1))
    usage = {Pool.REGULAR: (("a", "b"), fairness.QueueUsage((0.9, 0.0), (0.0, 0.0), NOW - 1.0))}
    plain = predict(snap(jobs, queues=queues), settings, EXACT)
    used = predict(snap(jobs, queues=queues, usage=usage), settings, EXACT)
    assert [j.key for j in plain.pending()] == ["a1", "b1"]
    assert [j.key for j in used.pending()] == ["b1", "a1"]


def test_positions_in_the_queue_by_its_order_and_across_queues_by_start() -> None:
    queues = (Queue("fifo", job_order=JobOrder.FIFO), Queue("srtf", job_order=JobOrder.SRTF))
    jobs = (one("old", 4, 100, queue="fifo", arrival=NOW - 500),
            one("f-late", 4, 10, queue="fifo", arrival=NOW - 10), one("f-early", 4, 30, queue="fifo", arrival=NOW - 90),
            one("s-long", 4, 50, queue="srtf", arrival=NOW - 80), one("s-short", 4, 5, queue="srtf", arrival=NOW - 5))
    f = predict(snap(jobs, queues=queues, running=(RunningTask("old", "g", "n0", 90.0),)), SETTINGS, EXACT)
    assert f.job("old").pending is False and f.job("old").queue_position is None and f.job("old").position is None
    assert [j.key for j in f.queue("fifo")] == ["f-early", "f-late"]  # by arrival
    assert [j.key for j in f.queue("srtf")] == ["s-short", "s-long"]  # by remaining work
    glob = [(j.key, j.position) for j in f.pending()]
    assert [p for _, p in glob] == [1, 2, 3, 4]
    starts = [f.job(k).start_s for k, _ in glob]
    assert starts == sorted(starts) and starts[0] == NOW + 10  # after the running task's last 10 s


def test_the_estimates_and_their_sources_are_reported() -> None:
    jobs = (Job("j", "q", (Group("map", cpu(1), 2, 42.0, Source.HISTORY),
                           Group("reduce", cpu(1), 1, 7.0, Source.PRIOR, depends_on=("map",))), NOW),)
    f = predict(snap(jobs), SETTINGS, EXACT).job("j")
    assert f.source == {"map": "history", "reduce": "prior"}
    assert f.estimate_s == {"map": 42.0, "reduce": 7.0}


def test_a_job_that_fits_no_node_and_plain_pods() -> None:
    jobs = (one("huge", 64, 10), Job("ns/pods", "q", (Group("pods", cpu(1), 3, 10.0),), NOW, kind="pods"))
    f = predict(snap(jobs, nodes=(Node("n0", cpu(4), held=cpu(2)),)), SETTINGS, EXACT)
    huge, pods = f.job("huge"), f.job("ns/pods")
    assert (huge.fits, huge.start_s, huge.finish_s) == (False, None, None)
    # Two cores left beside the held pods: two pods now, the third after them.
    assert (pods.kind, pods.start_s - NOW, pods.finish_s - NOW) == ("pods", 0.0, 20.0)


def test_a_job_that_can_never_finish_still_holds_its_node_while_its_tasks_run() -> None:
    stuck = Job("stuck", "q", (Group("map", cpu(4), 1, 100.0), Group("reduce", cpu(64), 1, 10.0, depends_on=("map",))),
                NOW - 50)
    f = predict(snap((stuck, one("next", 4, 10)), running=(RunningTask("stuck", "map", "n0", 40.0),)), SETTINGS, EXACT)
    assert (f.job("stuck").fits, f.job("stuck").finish_s) == (False, None)
    assert f.job("next").start_s == NOW + 60


def test_what_the_horizon_leaves_out_has_no_time() -> None:
    f = predict(snap((one("a", 4, 100), one("b", 4, 100))), SETTINGS, ForecastOptions(grid_s=0.0, horizon_s=150))
    assert f.horizon_reached
    assert times(f) == {"a": (0, 100), "b": (100, None)}


@pytest.mark.parametrize("seed", [1, 2])
def test_the_grid_moves_the_predicted_finishes_little(seed: int) -> None:
    """The 30 s finish grid (the forecast's speed) against exact finishes at the operator's 0.2 s cadence: the
    schedules differ (passes see more freed room at once), by a few percent of the time to finish at the median."""
    snapshot = busy_snapshot(jobs=40, nodes=8, seed=seed)
    exact, coarse = predict(snapshot, SETTINGS, EXACT), predict(snapshot, SETTINGS, ForecastOptions(grid_s=30.0))
    moved = [abs(c.finish_s - e.finish_s) / (e.finish_s - NOW)  # type: ignore[operator]
             for e, c in zip(exact.jobs, coarse.jobs, strict=True)]
    assert sorted(moved)[len(moved) // 2] < 0.10


def test_the_same_snapshot_gives_the_same_forecast() -> None:
    snapshot = busy_snapshot(jobs=40, nodes=8, seed=2)
    assert predict(snapshot, SETTINGS) == predict(snapshot, SETTINGS)


def test_bench_forecast_command_reports_cpu_per_prediction() -> None:
    result = CliRunner().invoke(bench, ["forecast", "--jobs", "20", "--nodes", "4", "--repeat", "1"])
    assert result.exit_code == 0, result.output
    assert "20 pending" in result.output and "s cpu per prediction" in result.output


def test_only_a_packing_preset_runs_the_operators_decision() -> None:
    with pytest.raises(ValueError, match="packing preset"):
        predict(snap((one("a", 1, 10),)), SETTINGS, ForecastOptions(preset="kube-default"))
    harvesting = predict(snap((one("a", 1, 10),)), SETTINGS, ForecastOptions(preset="stowage", grid_s=0.0))
    assert times(harvesting) == {"a": (0, 10)}


def test_exact_estimates_behind_a_barrier_predict_close_to_the_truth() -> None:
    """A job whose estimates are exact (map 8 × 20 s, then reduce 2 × 10 s behind the barrier) on an empty cluster
    finishes at 30 s: the default grid may put each stage's finish a grid step late, not a stage's length."""
    job = Job("etl", "q", (Group("map", cpu(1), 8, 20.0, Source.HISTORY),
                           Group("reduce", cpu(1), 2, 10.0, Source.HISTORY, depends_on=("map",))), NOW)
    f = predict(snap((job,), nodes=(node("n0", 8.0),)), SETTINGS).job("etl")
    assert f.start_s == NOW
    assert f.finish_s is not None and 30.0 <= f.finish_s - NOW <= 35.0
