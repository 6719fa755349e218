"""The results page is regenerated, not edited: ``scripts/update_results.py`` rewrites one marked section from a
script's output, and ``scripts/random_workloads.py --from-runs --write-results`` rebuilds its tables from kept
runs without running anything."""

from __future__ import annotations

import importlib.util
import io
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"scripts_{name}", ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their class's module up
    spec.loader.exec_module(module)
    return module


update = _script("update_results")


@pytest.fixture(autouse=True)
def _scripts_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """As when a script runs: its folder first on ``sys.path``, so ``import update_results`` finds the writer."""
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))

PAGE = """# Results

What the table shows, by hand.

<!-- results:alpha -->
old alpha
<!-- /results:alpha -->

Between the sections, by hand.

<!-- results:beta -->
old beta
<!-- /results:beta -->
"""


def test_a_section_is_rewritten_under_its_command_and_commit_and_nothing_else_moves() -> None:
    out = update.replace_section(PAGE, "alpha", "stowage simulate --jobs 2", "| a | b |\n|---|---|\n| 1 | 2 |\n",
                                 "abc1234")
    inner = update.read_section(out, "alpha")
    assert inner.startswith("\n```console\n$ stowage simulate --jobs 2\n```\n")
    assert "Measured at `abc1234`; written by `scripts/update_results.py`." in inner
    assert inner.rstrip().endswith("| 1 | 2 |")
    assert "old alpha" not in out
    # Outside the section's markers, byte for byte the same page.
    before, after = PAGE.split("<!-- results:alpha -->")[0], PAGE.split("<!-- /results:alpha -->")[1]
    assert out.startswith(before + "<!-- results:alpha -->") and out.endswith("<!-- /results:alpha -->" + after)
    # Regenerating from the same output gives the same page.
    assert update.replace_section(out, "alpha", "stowage simulate --jobs 2", "| a | b |\n|---|---|\n| 1 | 2 |\n",
                                  "abc1234") == out


def test_plain_text_output_goes_in_a_fenced_block() -> None:
    out = update.replace_section(PAGE, "beta", "stowage bench simulator", "preset  CPU\nstowage 1 s\n", "c0ffee1",
                                 code=True)
    assert "```\npreset  CPU\nstowage 1 s\n```" in update.read_section(out, "beta")


@pytest.mark.parametrize(("page", "message"), [
    (PAGE, "sections: alpha, beta"),  # no such section: refused, naming those there are
    (PAGE + "<!-- results:gamma -->\n<!-- results:gamma -->\n<!-- /results:gamma -->\n", "found 2 and 1"),
    ("<!-- /results:gamma -->\n<!-- results:gamma -->\n", "comes before"),
])
def test_a_missing_doubled_or_reversed_section_is_refused(page: str, message: str) -> None:
    with pytest.raises(update.SectionError, match=message):
        update.replace_section(page, "gamma", "cmd", "body", "abc1234")


def test_the_command_line_runs_a_command_or_reads_stdin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    page = tmp_path / "results.md"
    page.write_text(PAGE)
    assert update.main([str(page), "alpha", "--commit", "abc1234", "--", sys.executable, "-c",
                        "print('| x |')"]) == 0
    assert "$ " + sys.executable in page.read_text() and "| x |" in page.read_text()
    monkeypatch.setattr(sys, "stdin", io.StringIO("| y |\n"))
    assert update.main([str(page), "beta", "--command", "make y", "--commit", "abc1234"]) == 0
    text = page.read_text()
    assert "$ make y" in text and "| y |" in text and "| x |" in text
    # A failing command or a missing section leaves the page as it was.
    assert update.main([str(page), "alpha", "--", sys.executable, "-c", "raise SystemExit(3)"]) == 3
    monkeypatch.setattr(sys, "stdin", io.StringIO("| z |\n"))
    assert update.main([str(page), "nope", "--command", "c", "--commit", "abc1234"]) == 1
    monkeypatch.setattr(sys, "stdin", io.StringIO("| z |\n"))
    assert update.main([str(tmp_path / "missing.md"), "alpha", "--command", "c", "--commit", "abc1234"]) == 1
    assert page.read_text() == text


def _row(seed: int, preset: str) -> dict:
    better = preset != "kube-default"
    return {"seed": seed, "preset": preset, "commit": "abc1234", "wall_s": 1.0 + seed,
            "workload": {"n_nodes": 4, "load": 1.0, "usage_mean": 0.6 + 0.1 * seed, "queues": 1, "jobs": 3,
                         "tasks": 9},
            "summary": {"makespan_s": 100.0 - 5 * better - seed, "jct_mean_s": 50.0 - 10 * better,
                        "jct_mean_lower_bound_s": 30.0, "makespan_lower_bound_s": 80.0,
                        "slowed_vs_fluid_fraction": 0.1, "lost_tasks": 0,
                        "harvested_fraction": 0.2 * (preset == "stowage"), "lost_fraction": 0.01,
                        "regular_slowdown_mean": 0.0, "regular_slowdown_p95": 0.0}}


def test_random_workloads_rebuilds_its_section_from_kept_runs_without_running(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    script = _script("random_workloads")

    def no_runs(*_: object) -> None:
        raise AssertionError("--from-runs ran a simulation")

    monkeypatch.setattr(script, "run_seed", no_runs)
    runs = tmp_path / "runs.jsonl"
    presets = ("kube-default", "stowage", "stowage-regular")
    runs.write_text("".join(json.dumps(_row(s, p)) + "\n" for s in range(3) for p in presets))
    page = tmp_path / "results.md"
    page.write_text("# Results\n\n<!-- results:random-workloads -->\n<!-- /results:random-workloads -->\n")
    argv = ["--seeds", "3", "--policy", "stowage-regular", "--out", str(runs), "--from-runs",
            "--write-results", str(page)]
    assert script.main(argv) == 0
    inner = update.read_section(page.read_text(), "random-workloads")
    # The command that makes the tables, without the options that only say where they go.
    assert f"$ .venv/bin/python scripts/random_workloads.py --seeds 3 --policy stowage-regular --out {runs}\n" in inner
    assert "--from-runs" not in inner and "--write-results" not in inner
    assert "Measured at `abc1234`" in inner
    assert "3 random workloads (seeds 0–2)" in inner
    # stowage's makespans 95, 94, 93 s against 100, 99, 98 s: min 0.949, max 0.950 at seed 0.
    assert "| makespan ÷ kube-default | stowage | 0.949 | 0.949 | 0.950 | 0.950 | 0 |" in inner
    assert "Harvesting against `stowage-regular`" in inner
    # A seed missing from the kept runs is refused, naming it; the page stays as it was.
    before = page.read_text()
    assert script.main(["--seeds", "4", "--out", str(runs), "--from-runs", "--write-results", str(page)]) == 1
    assert page.read_text() == before
    # A section the page does not have is refused, not appended.
    assert script.main([*argv, "--section", "nowhere"]) == 1
    assert page.read_text() == before


def test_the_results_page_is_made_of_well_formed_sections() -> None:
    text = (ROOT / "docs" / "results.md").read_text()
    names = update.section_names(text)
    assert names and len(names) == len(set(names)), names
    assert re.findall(r"<!-- /results:([a-z0-9-]+) -->", text) == names
    for name in names:
        inner = update.read_section(text, name)
        assert inner.startswith("\n```console\n$ "), f"{name}: its command first"
        assert re.search(r"^Measured at .+; (written by `scripts/update_results.py`|moved by hand)", inner,
                         flags=re.M), f"{name}: the commit it was measured at, and how it got here"


def _report(oracle: bool, commit: str) -> dict:
    def run(makespan: float, jct: float, wasted: float) -> dict:
        return {"makespan_s": makespan, "jct_mean_s": jct, "makespan_to_lower_bound": 1.1, "wasted_work_s": wasted,
                "evictions": 1, "oom_kills": 0, "slowed_jobs_fraction": 0.04, "jct_mean_lower_bound_s": 100.0}

    policies = {"kube-default": run(1000, 600, 0), "stowage": run(900, 280, 10)}
    if not oracle:
        policies["ubis"] = run(950, 500, 50)
    return {"engine": {"oracle_durations": oracle}, "commit": commit, "policies": policies}


def test_makespan_table_writes_its_sections_from_kept_reports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = _script("makespan_table")

    def no_runs(*_: object, **__: object) -> None:
        raise AssertionError("a kept report was run again")

    monkeypatch.setattr(script.subprocess, "run", no_runs)
    for usage in script.USAGES:
        for oracle in (False, True):
            folder = tmp_path / "runs" / (f"embedded-{usage}" + ("-oracle" if oracle else ""))
            folder.mkdir(parents=True)
            (folder / "report.json").write_text(json.dumps(_report(oracle, "abc1234")))
    page = tmp_path / "results.md"
    page.write_text("".join(f"<!-- results:{n} -->\n<!-- /results:{n} -->\n"
                            for n in ("makespan-targets", "makespan-embedded")))
    assert script.main(["--out", str(tmp_path / "runs"), "--only", "embedded", "--doc", str(page)]) == 0
    text = page.read_text()
    targets, block = update.read_section(text, "makespan-targets"), update.read_section(text, "makespan-embedded")
    assert "$ .venv/bin/python scripts/makespan_table.py --jobs 2 --only embedded\n" in block
    assert "Measured at `abc1234`" in targets and "Measured at `abc1234`" in block
    assert "| embedded | 0.5 | 0.900 ✓ | 0.900 ✓ |" in targets
    assert "| 0.7 | **stowage** | 15.0m | **0.900** |" in block


def test_fairness_sweep_rebuilds_its_section_from_kept_runs_without_running(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    script = _script("fairness_sweep")
    monkeypatch.setattr(script, "workloads", lambda: ["embedded", "random:1"])

    def no_runs(*_: object) -> None:
        raise AssertionError("--from-runs ran a simulation")

    monkeypatch.setattr(script, "run", no_runs)
    settings = ["kube-default", *map(script._name, script.HALF_LIVES)]
    yardstick = {"usage_deviation_max": 0.4, "over_tolerance_fraction": 0.5, "usage_samples": 10,
                 "below_floor_longest_s": 120.0}
    runs = tmp_path / "sweep.jsonl"
    runs.write_text("".join(json.dumps({"workload": w, "setting": s, "commit": "abc1234", "wall_s": 1.0,
                                        "summary": {"jct_mean_s": 100.0 if s == "kube-default" else 55.0,
                                                    "makespan_s": 1000.0}, "yardstick": yardstick}) + "\n"
                            for w in ("embedded", "random:1") for s in settings))
    page = tmp_path / "results.md"
    page.write_text("<!-- results:fairness-sweep -->\n<!-- /results:fairness-sweep -->\n")
    assert script.main(["--out", str(runs), "--from-runs", "--write-results", str(page)]) == 0
    inner = update.read_section(page.read_text(), "fairness-sweep")
    assert f"$ .venv/bin/python scripts/fairness_sweep.py --jobs 2 --out {runs}\n" in inner
    assert "Measured at `abc1234`" in inner and "| 300 | 0.550 | 0.550 | 1.000 | 40% / 40% | 50% | 120 |" in inner
    runs.write_text(runs.read_text().splitlines(keepends=True)[0])
    assert script.main(["--out", str(runs), "--from-runs", "--write-results", str(page)]) == 1
