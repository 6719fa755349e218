"""`stowage config show|check`: what an operator runs before deploying a config file."""

from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner

from stowage.cli import main
from stowage.config import StowageSettings, as_dict


def test_show_prints_a_config_that_loads_back_to_the_same_settings(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["config", "show"], env={"KUBECONFIG": ""})
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(result.output) == as_dict(StowageSettings())
    (tmp_path / "c.yaml").write_text(result.output)
    assert CliRunner().invoke(main, ["config", "check", "--config", str(tmp_path / "c.yaml")]).exit_code == 0


def test_check_lists_every_problem_and_fails(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("packing: {fairness_knob: 3}\ncontention: {policy: gentle}\n")
    result = CliRunner().invoke(main, ["config", "check", "--config", str(path)])
    assert result.exit_code == 1
    assert "packing.fairness_knob: must be within [0.0, 1.0], got 3.0" in result.output
    assert "contention.policy: must be one of aggressive, neutral, preserve, got 'gentle'" in result.output


def test_check_and_show_take_the_file_the_same_way_and_the_old_form_still_works(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("packing: {fairness_knob: 0.5}\n")
    shown = CliRunner().invoke(main, ["config", "show", "--config", str(path)])
    assert shown.exit_code == 0 and yaml.safe_load(shown.output)["packing"]["fairness_knob"] == 0.5
    checked = CliRunner().invoke(main, ["config", "check", "--config", str(path)])
    assert (checked.exit_code, checked.output) == (0, f"{path}: ok\n")
    old = CliRunner().invoke(main, ["config", "check", str(path)])
    assert old.exit_code == 0 and f"{path}: ok" in old.stdout
    assert f"`stowage config check PATH` is deprecated: use `stowage config check --config {path}`" in old.stderr
    assert CliRunner().invoke(main, ["config", "check"]).exit_code == 2  # no file: a usage error, not "ok"
    both = CliRunner().invoke(main, ["config", "check", "--config", str(path), str(path)])
    assert both.exit_code == 2 and "give the file once" in both.output
