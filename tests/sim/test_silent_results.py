"""No silent results: every way a run can be wrong or cut short exits non-zero and says why."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from stowage.cli import main
from stowage.sim import compare, sizing
from stowage.sim.cli import EXIT_INCOMPLETE, EXIT_INTERRUPTED
from stowage.sim.metrics import RunResult
from stowage.sim.report import run_problems

NODES = "nodes: [{name: n, count: 2, cpu: 2, memory: 4Gi}]\n"


def write(tmp_path: Path, jobs: str, name: str = "w.yaml") -> Path:
    path = tmp_path / name
    path.write_text(NODES + "jobs:\n" + jobs)
    return path


def simulate(tmp_path: Path, *args: str) -> object:
    return CliRunner().invoke(main, ["simulate", "--report", str(tmp_path / "r"), "--no-plots", *args])


# Eight 10 s tasks on 4 cores: two waves, 20 s of simulated time.
TWO_WAVES = "  - {name: j, groups: [{name: g, replicas: 8, demand: {cpu: 1, memory: 1Gi}, duration: 10, usage: 1}]}\n"


def test_a_run_stopped_by_the_time_cap_exits_3_naming_the_cap_and_the_option(tmp_path: Path) -> None:
    result = simulate(tmp_path, "--workload", str(write(tmp_path, TWO_WAVES)), "--policy", "kube-default",
                      "--max-sim-time", "15")
    assert result.exit_code == EXIT_INCOMPLETE, result.output
    assert "results incomplete" in result.output
    assert "simulated-time cap of 15 s" in result.output and "--max-sim-time SECONDS raises it" in result.output
    assert "4 tasks unfinished" in result.output
    assert "kube-default (incomplete)" in result.stdout  # the table says it too
    doc = json.loads((tmp_path / "r" / "report.json").read_text())
    assert doc["status"]["complete"] is False
    assert doc["policies"]["kube-default"]["time_cap_reached"] is True
    assert doc["policies"]["kube-default"]["lost_tasks"] == 4
    assert any("--max-sim-time" in p for p in doc["status"]["problems"])


def test_raising_the_cap_gives_a_complete_run(tmp_path: Path) -> None:
    result = simulate(tmp_path, "--workload", str(write(tmp_path, TWO_WAVES)), "--policy", "kube-default",
                      "--max-sim-time", "25")
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "r" / "report.json").read_text())
    assert doc["status"] == {"complete": True, "problems": []}
    assert doc["policies"]["kube-default"]["time_cap_reached"] is False


@pytest.mark.parametrize(
    ("jobs", "message"),
    [
        pytest.param("  - {name: late, arrival: 100000000, groups: [{name: g, replicas: 1, demand: {cpu: 1}, "
                     "duration: 5}]}\n"
                     "  - {name: early, groups: [{name: g, replicas: 1, demand: {cpu: 1}, duration: 5}]}\n",
                     "1 job arrives after the simulated-time cap", id="arrival-in-milliseconds"),
        pytest.param("  - {name: long, groups: [{name: g, replicas: 1, demand: {cpu: 1}, duration: 100000000}]}\n",
                     "jobs[long].groups[g]: a task of 1e+08 s starting 0 s after the first job ends at 1e+08 s, "
                     "past the simulated-time cap",
                     id="task-longer-than-the-cap"),
    ],
)
def test_work_past_the_time_cap_is_refused_before_the_runs(tmp_path: Path, jobs: str, message: str) -> None:
    result = simulate(tmp_path, "--workload", str(write(tmp_path, jobs)))
    assert result.exit_code == 1, result.output
    assert "refusing to start" in result.output and message in result.output
    assert "--max-sim-time SECONDS raises it" in result.output
    assert "task starts" not in result.output  # nothing ran
    assert not (tmp_path / "r").exists()


def test_lost_tasks_without_the_cap_are_a_problem_too() -> None:
    summary = {"time_cap_reached": False, "lost_tasks": 3, "jobs": 2, "jobs_finished": 1}
    result = RunResult("drf", summary, jct=None, arrival=None)  # type: ignore[arg-type]
    assert run_problems("drf", result, 100.0) == ["drf: 3 tasks never finished (1 jobs): nothing could place them"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--max-tasks", "7"], "8 tasks is above the limit of 7 (--max-tasks raises it", id="tasks"),
        pytest.param(["--max-nodes", "1"], "2 nodes is above the limit of 1 (--max-nodes raises it", id="nodes"),
        pytest.param(["--max-memory", "1Mi"], "of memory, above the 1 MB --max-memory allows", id="memory"),
    ],
)
def test_size_limits_refuse_before_any_work_naming_the_option(tmp_path: Path, args: list[str], message: str) -> None:
    result = simulate(tmp_path, "--workload", str(write(tmp_path, TWO_WAVES)), *args)
    assert result.exit_code == 1, result.output
    assert message in result.output
    assert "task starts" not in result.output


def test_the_size_line_states_counts_processes_and_memory(tmp_path: Path) -> None:
    result = simulate(tmp_path, "--workload", str(write(tmp_path, TWO_WAVES)), "--policy", "drf")
    assert result.exit_code == 0, result.output
    assert "size: 2 nodes, 1 jobs, 8 tasks; 2 runs serially; memory ~" in result.stderr


def test_memory_limit_lowers_the_process_count_and_says_so(tmp_path: Path) -> None:
    from stowage.sim.traces.workload_file import load_workload_file

    wl = load_workload_file(write(tmp_path, TWO_WAVES))
    per = sizing.estimate_memory(wl)
    plan = sizing.plan_runs(wl, ["stowage", "ubis"], processes=3, limits=sizing.Limits(max_memory=per * 2.5))
    assert plan.processes == 2
    assert "3 processes would need" in plan.describe() and "running 2 at a time" in plan.describe()


def test_a_negative_seed_is_a_usage_error_naming_the_option(tmp_path: Path) -> None:
    result = simulate(tmp_path, "--seed", "-1")
    assert result.exit_code == 2
    assert "Invalid value for '--seed'" in result.output and "-1" in result.output


def test_yaml_exponent_without_sign_gets_a_hint(tmp_path: Path) -> None:
    jobs = "  - {name: j, groups: [{name: g, replicas: 1, demand: {cpu: 1}, duration: 1.0e15}]}\n"
    result = simulate(tmp_path, "--workload", str(write(tmp_path, jobs)))
    assert result.exit_code == 1
    assert ("jobs[j].groups[g].duration: a positive number of seconds, got '1.0e15' "
            "(YAML reads 1.0e15 as text: write 1.0e+15 or 1000000000000000)") in result.output


def test_ctrl_c_keeps_the_finished_presets_in_a_partial_report(tmp_path: Path, monkeypatch) -> None:
    real = compare.simulate
    calls: list[str] = []

    def interrupted_on_the_third(workload, name, **kwargs):
        calls.append(name)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(workload, name, **kwargs)

    monkeypatch.setattr(compare, "simulate", interrupted_on_the_third)
    result = simulate(tmp_path, "--workload", str(write(tmp_path, TWO_WAVES)), "--jobs", "1")
    assert result.exit_code == EXIT_INTERRUPTED, result.output
    assert "error: partial report" in result.output
    assert "finished kube-default, binpack; not finished drf, load-aware, tetris, ubis, stowage" in result.output
    doc = json.loads((tmp_path / "r" / "report.json").read_text())
    assert list(doc["policies"]) == ["kube-default", "binpack"]
    assert doc["status"]["complete"] is False and "interrupted" in doc["status"]["problems"][0]
    # No drf run: slowdowns are unknown, not zero.
    assert doc["policies"]["binpack"]["slowed_jobs_fraction"] is None
    assert "kube-default" in result.stdout


SLOW = "".join(
    f"  - {{name: j{i}, arrival: {i}, groups: [{{name: g, replicas: 400, demand: {{cpu: 1, memory: 1Gi}}, "
    f"duration: {1 + i % 7}}}]}}\n"
    for i in range(60)
)


def test_ctrl_c_on_parallel_runs_stops_the_workers_and_keeps_the_finished(tmp_path: Path) -> None:
    # Three runs on two processes: when the first finishes, the third has only just started.
    workload = write(tmp_path, SLOW)
    cmd = [sys.executable, "-m", "stowage", "simulate", "--workload", str(workload), "--policy", "kube-default",
           "--policy", "stowage", "--jobs", "2", "--no-plots", "--report", str(tmp_path / "r")]
    # A shell starts background jobs with SIGINT ignored, and the child would inherit that: give it Ctrl-C's
    # default, as a terminal's foreground process has, whatever launched the suite.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if "task starts in" in line:
            break
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    err = "".join(lines) + err
    assert proc.returncode == EXIT_INTERRUPTED, err
    assert "partial report" in err
    doc = json.loads((tmp_path / "r" / "report.json").read_text())
    finished = list(doc["policies"]) + list(doc["reference_runs"])
    assert 1 <= len(finished) <= 2 and doc["status"]["complete"] is False  # the third was stopped, not waited for


def test_progress_lines_when_stderr_is_not_a_terminal(tmp_path: Path) -> None:
    result = simulate(tmp_path, "--workload", str(write(tmp_path, TWO_WAVES)), "--policy", "drf",
                      "--progress-every", "0.000001")
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("progress ")]
    assert lines, result.stderr
    assert "runs done" in lines[0] and "tasks" in lines[0] and "simulated" in lines[0] and "eta" in lines[0]


def test_no_progress_lines_when_asked_for_none(tmp_path: Path) -> None:
    result = simulate(tmp_path, "--workload", str(write(tmp_path, TWO_WAVES)), "--policy", "drf",
                      "--progress-every", "0")
    assert result.exit_code == 0, result.output
    assert "progress " not in result.stderr


def test_progress_line_gives_simulated_time_tasks_and_an_estimate() -> None:
    import io

    stream = io.StringIO()
    progress = compare.Progress(["a", "b"], 1000, bar=False, every_s=0.0, stream=stream)
    progress.update("a", 250, 7200.0)
    line = progress.line()
    assert "0/2 runs done; a 250/1,000 tasks, 2.00h simulated; eta ~" in line
    progress.run_finished("a")
    assert "1/2 runs done" in progress.line()


def test_an_existing_report_folder_is_not_overwritten(tmp_path: Path) -> None:
    args = ["--workload", str(write(tmp_path, TWO_WAVES)), "--policy", "drf"]
    assert simulate(tmp_path, *args).exit_code == 0
    (tmp_path / "r" / "report.json").write_text("earlier")
    second = simulate(tmp_path, *args)
    assert second.exit_code == 0, second.output
    assert f"{tmp_path / 'r'}/ holds an earlier report: writing to {tmp_path / 'r-2'}/ instead" in second.output
    assert (tmp_path / "r" / "report.json").read_text() == "earlier"
    assert json.loads((tmp_path / "r-2" / "report.json").read_text())["policies"]
    forced = simulate(tmp_path, *args, "--force")
    assert forced.exit_code == 0 and "holds an earlier report" not in forced.output
    assert json.loads((tmp_path / "r" / "report.json").read_text())["policies"]
