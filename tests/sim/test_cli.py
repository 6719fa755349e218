"""``stowage simulate`` end to end through click, on a tiny workload file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from stowage.cli import main
from stowage.sim.cli import parse_usage
from stowage.sim.presets import DEFAULT_PRESETS

TINY = """
nodes:
  - {name: n, count: 2, cpu: 2, memory: 4Gi, disk: 100Mi, network: 100Mi}
queues:
  - {name: batch, weight: 1, jobOrder: SRTF, opportunistic: Allow}
jobs:
  - name: etl
    queue: batch
    arrival: 0
    groups:
      - {name: map, replicas: 4, demand: {cpu: 1, memory: 1Gi}, duration: 10, usage: 1.0}
      - {name: reduce, replicas: 1, demand: {cpu: 1, memory: 1Gi}, duration: 5, usage: 1.0, dependsOn: [map]}
  - name: late
    queue: batch
    arrival: 30
    groups:
      - {name: only, replicas: 2, demand: {cpu: 2, memory: 1Gi}, duration: 20, usage: 1.0}
"""

CONTRACT_KEYS = {
    "makespan_s", "jct_mean_s", "jct_p50_s", "jct_p95_s", "makespan_lower_bound_s", "jct_mean_lower_bound_s",
    "utilization",
    "opportunistic_fraction", "evictions", "lost_tasks", "slowed_jobs_fraction", "tasks", "jobs",
}


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    return path


def test_simulate_writes_the_json_contract_for_every_preset(tiny: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    report_dir = tmp_path / "report"
    # --pass-delay 0: the hand-checked times below hold for every preset (the default adds 0.2 s per pass).
    result = CliRunner().invoke(main, ["simulate", "--workload", str(tiny), "--json", str(out),
                                       "--report", str(report_dir), "--no-plots", "--check", "--pass-delay", "0"])
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc == json.loads((report_dir / "report.json").read_text())
    assert doc["engine"] == {"pass_delay_s": 0.0, "oracle_durations": False}
    assert doc["workload"]["jobs"] == 2 and doc["workload"]["tasks"] == 7
    assert doc["workload"]["usage_model"]["mean_fraction"] == 0.5
    assert list(doc["policies"]) == list(DEFAULT_PRESETS)
    for name, p in doc["policies"].items():
        assert set(p) >= CONTRACT_KEYS, name
        assert p["lost_tasks"] == 0
        assert (p["tasks"], p["jobs"]) == (7, 2)
        # etl: 4 maps fill both nodes for 10 s, then the reduce 5 s → 15 s; late: 2 whole-node tasks, 20 s.
        assert p["jct_mean_s"] == pytest.approx(17.5), name
        assert p["makespan_s"] == pytest.approx(50.0), name
        assert p["makespan_lower_bound_s"] == pytest.approx(50.0)
        assert p["jct_mean_lower_bound_s"] == pytest.approx(17.5)  # critical paths 15 s and 20 s: met here
        assert p["slowed_jobs_fraction"] == 0.0
        for resource in ("cpu", "memory", "disk", "network"):
            assert set(p["utilization"][resource]) == {"allocated", "used"}
        assert 0.0 < p["utilization"]["cpu"]["allocated"] <= 1.0
    # The table goes to stdout with ratios to kube-default; wall time only to stderr.
    assert "kube-default" in result.stdout and "×kube" in result.stdout
    assert "wall time" not in json.dumps(doc)


def test_simulate_draws_the_three_plots(tiny: Path, tmp_path: Path) -> None:
    report_dir = tmp_path / "report"
    result = CliRunner().invoke(main, ["simulate", "--workload", str(tiny), "--policy", "kube-default",
                                       "--policy", "stowage", "--report", str(report_dir)])
    assert result.exit_code == 0, result.output
    for name in ("jct_cdf.png", "utilization.png", "queue_shares.png"):
        data = (report_dir / name).read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 5000
    doc = json.loads((report_dir / "report.json").read_text())
    assert list(doc["policies"]) == ["kube-default", "stowage"]


def test_simulate_is_deterministic_for_a_seed(tiny: Path, tmp_path: Path) -> None:
    docs = []
    for run in ("a", "b"):
        out = tmp_path / f"{run}.json"
        result = CliRunner().invoke(main, ["simulate", "--workload", str(tiny), "--seed", "3", "--json", str(out),
                                           "--report", str(tmp_path / run), "--no-plots"])
        assert result.exit_code == 0, result.output
        docs.append(out.read_text())
    assert docs[0] == docs[1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--workload", "nope.yaml"], "nope.yaml: no such file", id="missing-workload-file"),
        pytest.param(["--workload", "/nonexistent"], "/nonexistent: no such file", id="missing-path-without-suffix"),
        pytest.param(["--workload", "bogus"], "--workload", id="unknown-workload-spec"),
        pytest.param(["--policy", "fair"], "'fair' is not one of", id="unknown-policy"),
    ],
)
def test_simulate_explains_bad_input(args: list[str], message: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["simulate", *args, "--report", str(tmp_path / "r"), "--no-plots"])
    assert result.exit_code != 0
    assert message in result.output


def test_simulate_reads_the_knobs_file(tiny: Path, tmp_path: Path) -> None:
    knobs = tmp_path / "knobs.yaml"
    knobs.write_text("packing: {fairness_knob: 0.5}\ncontention: {policy: neutral}\n")
    out = tmp_path / "out.json"
    result = CliRunner().invoke(main, ["simulate", "--workload", str(tiny), "--config", str(knobs), "--policy",
                                       "stowage", "--json", str(out), "--report", str(tmp_path / "r"), "--no-plots"])
    assert result.exit_code == 0, result.output
    settings = json.loads(out.read_text())["settings"]
    assert settings["packing"]["fairness_knob"] == 0.5
    assert settings["contention"]["policy"] == "neutral"
    bad = tmp_path / "bad.yaml"
    bad.write_text("packing: {fairness_knob: 3}\n")
    result = CliRunner().invoke(main, ["simulate", "--workload", str(tiny), "--config", str(bad),
                                       "--report", str(tmp_path / "r"), "--no-plots"])
    assert result.exit_code != 0
    assert "packing.fairness_knob" in result.output


@pytest.mark.parametrize(
    ("spec", "check"),
    [
        pytest.param("", lambda u: u.mean_fraction == 0.5 and u.io_fraction == 1.0, id="defaults"),
        pytest.param("mean_fraction=0.7, burst_s=2", lambda u: (u.mean_fraction, u.burst_s) == (0.7, 2.0),
                     id="two-keys"),
        pytest.param("io_fraction=none", lambda u: u.io_fraction is None, id="io-follows-the-draw"),
    ],
)
def test_usage_option_sets_the_usage_model(spec: str, check) -> None:
    assert check(parse_usage(spec))


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param("mean=0.5", "KEY one of", id="unknown-key"),
        pytest.param("mean_fraction=half", "a number", id="not-a-number"),
        pytest.param("mean_fraction=1.5", "within [0.0, 1.0]", id="out-of-range"),
    ],
)
def test_usage_option_explains_bad_values(spec: str, message: str, tiny: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["simulate", "--workload", str(tiny), "--usage", spec,
                                       "--report", str(tmp_path / "r"), "--no-plots"])
    assert result.exit_code != 0
    assert message in result.output


def test_usage_option_reaches_the_report(tiny: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    result = CliRunner().invoke(main, ["simulate", "--workload", str(tiny), "--policy", "ubis", "--usage",
                                       "mean_fraction=0.3", "--json", str(out), "--report", str(tmp_path / "r"),
                                       "--no-plots"])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["workload"]["usage_model"]["mean_fraction"] == 0.3


@pytest.mark.parametrize(("arrivals", "makespan"), [("trace", 50.0), ("batch", 35.0)])
def test_batch_arrivals_measure_makespan_from_a_common_start(
    tiny: Path, tmp_path: Path, arrivals: str, makespan: float
) -> None:
    # trace: 'late' arrives at 30 to an idle cluster and ends at 50. batch: it starts when etl's maps
    # end at 10, one task beside etl's reduce and one after it (15 → 35).
    out = tmp_path / "out.json"
    result = CliRunner().invoke(main, ["simulate", "--workload", str(tiny), "--json", str(out), "--no-plots",
                                       "--report", str(tmp_path / "r"), "--policy", "kube-default",
                                       "--arrivals", arrivals])
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["policies"]["kube-default"]["makespan_s"] == makespan
    assert ("arrivals" in doc["workload"]["model"]) is (arrivals == "batch")
