"""The package layout promised by DESIGN.md, and the one CLI."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest
from click.testing import CliRunner

import stowage
from stowage.cli import main


def test_import_operator_still_gives_the_standard_library() -> None:
    # Run in a fresh interpreter from the repo root, where a folder named operator/ exists.
    code = "import operator, stowage.operator; print(operator.__file__); print(stowage.operator.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert "site-packages" not in out[0] and out[0].endswith("operator.py")
    assert "/lib/python3" in out[0]
    assert out[1] == "stowage.operator"


@pytest.mark.parametrize("module", ["stowage.operator", "stowage.extender", "stowage.node_monitor"])
def test_cluster_parts_import_under_the_stowage_namespace(module: str) -> None:
    mod = importlib.import_module(module)
    assert mod.__doc__, f"{module} must state its charter in a docstring"
    assert mod.__name__ == module


def test_cli_version_prints_the_package_version() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert stowage.__version__ in result.output


def test_cli_help_describes_stowage_and_lists_subcommands() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    assert "stowage simulate" in result.output
    assert "bench" in result.output


def test_cli_unknown_subcommand_fails_with_a_message() -> None:
    result = CliRunner().invoke(main, ["no-such-command"])
    assert result.exit_code != 0
    assert "No such command" in result.output


@pytest.mark.parametrize(
    "module", ["stowage.resources", "stowage.labels", "stowage.config", "stowage.errors", "stowage.model"]
)
def test_public_modules_declare_all_and_export_what_they_name(module: str) -> None:
    mod = importlib.import_module(module)
    assert hasattr(mod, "__all__")
    missing = [name for name in mod.__all__ if not hasattr(mod, name)]
    assert missing == []
