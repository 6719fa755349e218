"""What the operator learned fits its ConfigMap for good (issue #31, defect 9).

The classifier's app is the Job's recurring key, so generateName'd runs of one Job teach one app; the classifier's
tables, the queue priors and the recurring history keep at most a fixed number of keys, the least recently observed
forgotten first. Learned through the operator's own calls and saved as the operator saves it, 100,000 Jobs with
distinct generated names stay far below the 1 MiB an object may hold, and what was learned last is still known.
"""

from __future__ import annotations

import json
import math
import random
from collections import deque
from typing import Any

from stowage.operator import jobs, learning
from stowage.operator.dispatcher import Dispatcher, QueueRecord
from stowage.operator.metrics import OperatorMetrics
from stowage.operator.runtime import STATE_KEY, OperatorRuntime
from stowage.operator.snapshot import pending_groups

from stowage.config import StowageSettings
from stowage.labels import PodClass
from stowage.policy import classifier
from tests.operator.test_dispatcher import GI, _full_node_view
from tests.operator.test_estimates_operator import T0, succeeded
from tests.operator.test_jobbook import StubClient
from tests.operator.test_tasks import group, job

CONFIGMAP_LIMIT = 1 << 20  # bytes: what the API server stores in one object (etcd's request limit)
BUDGET = 256 << 10  # "far below": a quarter of it


def _generated(base: str, suffix: str, uid: str) -> dict[str, Any]:
    """An ``auto`` Job made with ``generateName: <base>-``, named as the API server names it."""
    j = job(group("map", 4, duration=None), name=f"{base}-{suffix}")
    j["metadata"].update(generateName=f"{base}-", uid=uid)
    return j


def test_100000_generated_jobs_fit_a_quarter_of_a_configmap_and_the_recent_ones_are_still_known() -> None:
    rng = random.Random(31)
    settings = StowageSettings()
    dispatcher = Dispatcher(settings, clock=lambda: 0.0)
    runtime = OperatorRuntime(settings, StubClient(), dispatcher=dispatcher, clock=lambda: 0.0)  # type: ignore[arg-type]
    alphabet = "bcdfghjklmnpqrstvwxz2456789"  # the API server's generateName suffix alphabet
    recent: deque[tuple[dict[str, str], str, str, str]] = deque(maxlen=100)
    sizes = {}
    for i in range(100_000):
        # Nearly every Job a new app: 100 namespaces × 5000 generateNames, 300 queues, 50 stage names.
        namespace, base = f"team-{rng.randrange(100):02d}", f"etl-report-{rng.randrange(5000):04d}"
        name = f"{base}-{''.join(rng.choices(alphabet, k=5))}"
        meta = {"metadata": {"namespace": namespace, "name": name, "generateName": f"{base}-"}}
        key = jobs.job_recurring_key(meta)
        queue, stage = f"queue-{rng.randrange(300):03d}", f"stage-{rng.randrange(50)}"
        demand = {"cpu": rng.choice([0.03, 0.06, 0.125, 0.25]), "memory": rng.choice([0.05, 0.1, 0.2])}
        features = classifier.task_features(queue, key, stage, demand, None, rng.random())  # as learning.lessons
        dispatcher.observe_finished(features, [rng.expovariate(1 / 60)], queue=queue,
                                    group_key=f"{namespace}/{name}/{stage}", recurring_key=key, group=stage)
        runtime.jobs.learned.add(f"{namespace}-{name}-0", T0 + 10.0 * i)  # one Job finishing every 10 s
        recent.append((features, key, stage, queue))
        if i + 1 in (1_500, 10_000, 100_000):
            sizes[i + 1] = len(runtime.learning.state_data().encode())
    # Before the bound (job names as apps, no caps), this stream took 0.42 MB at 1,500 Jobs, 2.6 MB at 10,000 and
    # 20.5 MB at 100,000; now ~190 KB from about 1,000 Jobs on.
    assert max(sizes.values()) <= BUDGET < CONFIGMAP_LIMIT, sizes
    assert sizes[100_000] <= 1.05 * sizes[10_000], f"still growing: {sizes}"

    # What the ConfigMap holds loads into a restarted operator, which still knows the last 100 Jobs' apps.
    saved = json.loads(json.loads(runtime.learning.state_data())[STATE_KEY])
    restarted = Dispatcher(settings, clock=lambda: 0.0)
    restarted.load_state(saved)
    apps = {tuple(row[:2]) for row in saved["classifier"]["counts"][1]}
    for features, key, stage, queue in recent:
        assert (features["framework"], features["app"]) in apps
        assert restarted.classifier.probability_short(features) == dispatcher.classifier.probability_short(features)
        assert not math.isnan(restarted.decider.history.get(key, stage))
        assert restarted.decider.priors.prior(queue) != settings.estimates.default_prior_s


def test_a_new_generated_run_is_judged_by_what_the_earlier_runs_taught() -> None:
    """Two runs of ``generateName: etl-`` share the app the JobBook teaches and the dispatcher asks about: once
    the first run's tasks finished in 5 s, the second run's ``auto`` tasks are short and go to harvested capacity;
    a Job of another generateName, never seen, stays long and waits for regular capacity."""
    dispatcher = Dispatcher(StowageSettings(), clock=lambda: 0.0)
    book = jobs.JobBook(OperatorMetrics(), clock=lambda: T0 + 100)
    first = _generated("etl", "x7k2p", "uid-1")
    book.upsert_job(first)
    for i in range(4):
        book.apply_pod_event("ADDED", succeeded(first, "map", i, T0 + 10, T0 + 15))
    key = ("ns", "etl-x7k2p")
    mean_capacity = {"cpu": 8.0, "memory": 32 * GI}  # the one node of the view below
    lessons = learning.lessons(book, key, book.plans(lambda _: set(), None)[key], mean_capacity)
    assert len(lessons) == 4 and {lesson.features["app"] for lesson in lessons} == {"ns/etl"}
    for lesson in lessons:
        dispatcher.observe_finished(lesson.features, (lesson.duration_s,), queue=lesson.queue,
                                    group_key=lesson.group_key, recurring_key=lesson.recurring_key, group=lesson.group)
    book.upsert_job(_generated("etl", "q9z4m", "uid-2"))
    book.upsert_job(_generated("ml", "b4n8c", "uid-3"))
    pending = pending_groups(book, book.plans(lambda _: set(), None), T0 + 100)  # the finished first run is not
    assert sorted(g.key for g in pending) == ["ns/etl-q9z4m/map", "ns/ml-b4n8c/map"]
    released = dispatcher.decide(_full_node_view(*pending, queue=QueueRecord("research")))
    assert {(r.group_key, r.pod_class) for r in released} == {("ns/etl-q9z4m/map", PodClass.OPPORTUNISTIC)}
