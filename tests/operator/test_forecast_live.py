"""When will my job run, on a real control plane: a pending Job gets a position and a predicted start in its status,
`kubectl get sjob`'s printer columns show them (the CRD's additionalPrinterColumns, read through the API's Table),
and `stowage queue` lists it with a gated plain pod of the same queue.

The operator runs as a process (:mod:`tests.operator.support`); the cluster is full of a Job whose tasks state their
duration, so what the forecast predicts follows from those estimates, not from how fast the machine is.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
from stowage.operator import crd

from stowage.kube.records import parse_timestamp
from tests.operator.conftest import RawApi
from tests.operator.support import OperatorStack, job_body, metric, wait_for
from tests.operator.test_plain_pods_live import plain_pod
from tests.scheduler.stack import Proc
from tests.support.stack import STOWAGE

pytestmark = pytest.mark.timeout(600)

NAMESPACE_PREFIX = "eta"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
BUSY_S = 600  # the running Job's tasks: they outlast the test, their estimate is what they state


def test_a_pending_job_gets_a_position_and_an_eta_in_its_status_columns_and_stowage_queue(
        operator_stack: OperatorStack, operator: Proc, ns: str, kube: RawApi) -> None:
    stack = operator_stack
    n = len(stack.nodes)
    stack.create_job(ns, job_body("busy", [{"name": "work", "replicas": n, "cpu": "7", "run_s": BUSY_S,
                                            "expectedDuration": BUSY_S}], stack_id=stack.id))
    wait_for(lambda: (stack.job(ns, "busy").get("status") or {}).get("groups", {}).get("work", {}).get("running") == n,
             180, "every task of the busy Job running", interval_s=1.0)
    stack.create_job(ns, job_body("next", [{"name": "a", "replicas": 1, "cpu": "7", "run_s": 5,
                                            "expectedDuration": 60}], stack_id=stack.id))
    stack.core.create_namespaced_pod(ns, plain_pod("gated", stack, cpu="7", memory="1Gi", queue="default", run_s=5))

    def predicted() -> dict[str, Any] | None:
        f = (stack.job(ns, "next").get("status") or {}).get("forecast") or {}
        return f if f.get("start") else None

    forecast = wait_for(predicted, 120, "a predicted start in the pending Job's status.forecast", interval_s=1.0)
    busy = stack.job(ns, "busy")
    started = parse_timestamp(busy["status"]["startTime"])
    assert started is not None
    # The busy Job's tasks end at their stated 600 s (the forecast's grid is 30 s, timestamps whole seconds):
    # the next Job starts then, on the first node freed, and runs its 60 s.
    start, finish = parse_timestamp(forecast["start"]), parse_timestamp(forecast["finish"])
    assert start is not None and finish is not None
    assert started + BUSY_S - 5 <= start <= started + BUSY_S + 90, (forecast, busy["status"]["startTime"])
    assert 60 - 1 <= finish - start <= 60 + 31
    assert forecast["queuePosition"] in (1, 2) and forecast["position"] >= forecast["queuePosition"]
    assert forecast["sources"] == {"a": "hint"} and forecast.get("note") is None
    assert (busy["status"].get("forecast") or {}).get("queuePosition") is None  # started: no position

    # kubectl get sjob: the CRD's printer columns, as the API server renders them.
    table = kube.ok("GET", crd.JOB.path(namespace=ns), accept=TABLE)
    names = [c["name"] for c in table["columnDefinitions"]]
    rows = {r["object"]["metadata"]["name"]: r["cells"] for r in table["rows"]}
    assert rows["next"][names.index("Position")] == forecast["queuePosition"]
    assert rows["next"][names.index("ETA")] == forecast["start"]
    assert rows["busy"][names.index("Position")] is None and rows["busy"][names.index("ETA")] is None

    wide = stack.kubectl("get", "sjob", "-n", ns, "-o", "wide")  # what a user sees (docs/operator.md shows it)
    print(f"\n$ kubectl get sjob -n {ns} -o wide\n{wide}")
    header = wide.splitlines()[0].split()
    assert header[:12] == ["NAME", "QUEUE", "PHASE", "DONE", "OPP", "RUNNING", "EST.", "REMAINING", "HELD",
                           "POSITION", "ETA", "AGE"]
    assert forecast["start"] in next(line for line in wide.splitlines() if line.startswith("next "))

    # stowage queue: the Job and the gated plain pod, in queue order, with positions and predicted starts.
    def listed() -> list[dict[str, Any]] | None:
        done = subprocess.run([str(STOWAGE), "queue", "default", "--kubeconfig", str(stack.plane.kubeconfig),
                               "-n", ns, "-o", "json"], capture_output=True, text=True, timeout=60, check=True)
        rows = json.loads(done.stdout)
        return rows if {r["name"] for r in rows} == {f"{ns}/next", f"{ns}/gated"} and \
            all(r["queue_position"] for r in rows) else None

    rows_ = wait_for(listed, 120, "stowage queue lists the pending Job and the gated pod", interval_s=2.0)
    assert sorted(r["queue_position"] for r in rows_) == [1, 2]
    by_name = {r["name"]: r for r in rows_}
    assert by_name[f"{ns}/next"]["kind"] == "job" and by_name[f"{ns}/gated"]["kind"] == "pod"
    assert by_name[f"{ns}/gated"]["start"] is not None
    table_text = subprocess.run([str(STOWAGE), "queue", "default", "--kubeconfig", str(stack.plane.kubeconfig),
                                 "-n", ns], capture_output=True, text=True, timeout=60, check=True).stdout
    assert table_text.splitlines()[0].split()[:4] == ["POSITION", "OVERALL", "KIND", "NAME"]
    assert f"{ns}/next" in table_text and f"{ns}/gated" in table_text
    print(f"\n$ stowage queue default -n {ns}\n{table_text}")

    text = stack.operator_metrics(operator)
    assert metric(text, "stowage_queue_predicted_wait_seconds", {"queue": "default", "job": "first"}) >= 0
    assert metric(text, "stowage_forecast_seconds_count") >= 1


def test_stowage_queue_refuses_a_queue_that_does_not_exist(operator_stack: OperatorStack, operator: Proc) -> None:
    done = subprocess.run([str(STOWAGE), "queue", "no-such-queue", "--kubeconfig",
                           str(operator_stack.plane.kubeconfig)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip() == "Error: queue 'no-such-queue': no such Queue (kubectl get sq lists them)"
