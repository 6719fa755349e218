"""The spec pages say what is (issue #34): the simulator's and the cluster benchmark's pages define the model, the
metrics and how to measure; the numbers live on docs/results.md, each under its command and commit."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
SPECS = ["simulator.md", "benchmarks-cluster.md"]
#: A commit hash: 7 to 40 hex digits with a digit and a letter among them (not a number, not a word).
HASH = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")


@pytest.mark.parametrize("name", SPECS)
def test_a_spec_page_names_no_commit_and_keeps_no_history(name: str) -> None:
    text = (DOCS / name).read_text()
    assert HASH.findall(text) == []
    for phrase in ("kept from", "used to", "Earlier results", "at this commit"):
        assert phrase.lower() not in text.lower(), phrase
    assert "results.md" in text, "a spec page points to where its numbers are"


def test_the_simulator_page_is_the_spec_only() -> None:
    text = (DOCS / "simulator.md").read_text()
    assert len(text.splitlines()) <= 450
    # A doc does not state its own size.
    assert not re.search(r"simulator\.md[^.\n]*\b\d[\d,]* lines\b", text)
    for section in ("## The model", "## The presets", "## Metrics", "## The JSON contract", "## How to benchmark"):
        assert section in text, section


def test_the_hash_pattern_tells_commits_from_numbers_and_words() -> None:
    assert HASH.findall("at d600dbe and 57d9371, not 1234567, deadbeefcafe or 0.9622") == ["d600dbe", "57d9371"]
