"""Every documented ``helm --set`` / ``--set-json`` line, run with the real Helm.

The lines are found in README.md and docs/*.md, not copied here, so a newly documented line is tested the day
it is written: a ``helm install|upgrade|template`` of ``charts/stowage`` in a code block, a
``bash scripts/kind-up.sh ARGS`` (its extra arguments go to the Stowage chart), and an inline code span that
starts with ``--set``. Each renders with ``helm template``; a ``$ helm …`` line followed by ``Error: …`` lines
must fail with exactly those lines. Lines for other charts (kube-prometheus-stack) are listed in
:data:`OTHER_CHARTS`, so a new one is noticed too.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from stowage.config import load_settings
from tests.chart.render import CHART, REPO, helm

pytestmark = pytest.mark.usefixtures("helm_binary")

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SET_FLAGS = ("--set", "--set-json", "--set-string")
#: Charts that are not ours: their lines are not rendered here (no network in the tests), only counted.
OTHER_CHARTS = {"prometheus-community/kube-prometheus-stack"}
_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
_INLINE = re.compile(r"`([^`\n]*--set[^`]*)`")


@dataclass(frozen=True)
class DocLine:
    where: str
    text: str
    chart: str
    set_args: tuple[str, ...]
    namespace: str | None
    expected_error: tuple[str, ...]  # the `Error: …` lines a `$ helm` example shows; empty: it must render

    def __str__(self) -> str:
        return f"{self.where}: {self.text}"


def _set_args(tokens: list[str]) -> tuple[str, ...]:
    out: list[str] = []
    for i, token in enumerate(tokens):
        if token in SET_FLAGS and i + 1 < len(tokens):
            out += [token, tokens[i + 1]]
        elif token.split("=", 1)[0] in SET_FLAGS and "=" in token:
            out.append(token)
    return tuple(out)


def _namespace(tokens: list[str]) -> str | None:
    for flag in ("-n", "--namespace"):
        if flag in tokens and tokens.index(flag) + 1 < len(tokens):
            return tokens[tokens.index(flag) + 1]
    return None


def _logical_lines(block: str) -> list[tuple[str, list[str]]]:
    """(command, the lines after it until the next command) of a code block, continuation lines joined."""
    out: list[tuple[str, list[str]]] = []
    pending = ""
    for raw in block.splitlines():
        line = pending + raw.strip()
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        if out and not re.match(r"^(\$ )?(helm|bash|kubectl|kind|docker|minikube)\b", line):
            out[-1][1].append(line)
        else:
            out.append((line, []))
    return out


def _line(where: str, text: str, tokens: list[str], errors: tuple[str, ...]) -> DocLine:
    """The line's chart: kind-up.sh's extra arguments and a bare `--set …` span are the Stowage chart's."""
    ours = str(CHART.relative_to(REPO))
    if tokens[:2] == ["bash", "scripts/kind-up.sh"] or tokens[0] in SET_FLAGS:
        chart = ours
    elif tokens[0] == "helm" and len(tokens) > 3 and tokens[1] in ("install", "upgrade", "template"):
        chart = tokens[3]
    else:
        raise AssertionError(f"{where}: a --set line this test does not know how to run: {text}")
    return DocLine(where, text, chart, _set_args(tokens), _namespace(tokens), errors)


def documented_lines() -> list[DocLine]:
    found: list[DocLine] = []
    for doc in DOCS:
        text = doc.read_text()
        where = str(doc.relative_to(REPO))
        for block in _FENCE.findall(text):
            for command, after in _logical_lines(block):
                if not any(flag in command for flag in SET_FLAGS):
                    continue
                shown = command.startswith("$ ")
                tokens = shlex.split(command.removeprefix("$ "), comments=True)
                errors = tuple(a for a in after if a) if shown and after and after[0].startswith("Error:") else ()
                found.append(_line(where, command, tokens, errors))
        prose = _FENCE.sub("", text)
        for span in _INLINE.findall(prose):
            tokens = shlex.split(span)
            if len(tokens) < 2:
                continue  # the flag named alone, as in "`--set` splits on commas"
            found.append(_line(where, span, tokens, ()))
    return found


LINES = documented_lines()
OURS = [line for line in LINES if line.chart in ("charts/stowage", "./charts/stowage")]


def test_every_documented_line_is_ours_or_listed() -> None:
    assert len(OURS) >= 10, [str(line) for line in LINES]  # the extraction finds them (install.md alone has 9)
    others = {line.chart for line in LINES if line not in OURS}
    assert others <= OTHER_CHARTS, f"--set lines for a chart this test does not render: {others - OTHER_CHARTS}"
    assert all(line.set_args for line in LINES), [str(line) for line in LINES if not line.set_args]


@pytest.mark.parametrize("line", OURS, ids=[f"{line.where}:{' '.join(line.set_args)}" for line in OURS])
def test_documented_set_line_renders_as_documented(line: DocLine) -> None:
    args = ["template", "stowage", str(CHART), *line.set_args]
    if line.namespace:
        args += ["--namespace", line.namespace]
    done = helm(*args, check=False)
    if line.expected_error:
        assert done.returncode != 0, f"{line}: documented to fail, but it rendered"
        for expected in line.expected_error:
            # The doc shows `helm install`'s prefix (INSTALLATION FAILED); `helm template` prints the rest.
            assert expected.replace("Error: INSTALLATION FAILED: ", "Error: ") in done.stderr, (line, done.stderr)
    else:
        assert done.returncode == 0, f"{line}:\n{done.stderr}"


def test_a_fraction_passed_with_set_reaches_the_components_as_a_number(tmp_path: Path) -> None:
    """`--set` passes 0.8 as the string "0.8": the schema takes it and the settings file carries the number."""
    done = helm("template", "s", str(CHART), "--set", "settings.harvest.t_alloc.cpu=0.8",
                "--set", "settings.packing.fairness_knob=0.5", "--set", "settings.contention.policy=neutral",
                "--set", "defaultQueue.weight=0.5", "--set-string", "settings.packing.barrier_knob=0.7")
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    settings_cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-settings"))
    data = yaml.safe_load(settings_cm["data"]["settings.yaml"])
    assert data["harvest"]["t_alloc"]["cpu"] == 0.8 and isinstance(data["harvest"]["t_alloc"]["cpu"], float)
    assert data["packing"]["fairness_knob"] == 0.5
    assert data["packing"]["barrier_knob"] == 0.7  # --set-string: a string to Helm too
    assert data["contention"]["policy"] == "neutral"  # a word stays a word
    path = tmp_path / "settings.yaml"
    path.write_text(settings_cm["data"]["settings.yaml"])
    assert load_settings(path).harvest.t_alloc.cpu == pytest.approx(0.8)
    queue = next(d for d in docs if d["kind"] == "Queue")
    assert queue["spec"]["weight"] == 0.5


@pytest.mark.parametrize(("value", "message"), [
    ("1.5", "at '/settings/harvest/t_alloc/cpu': '1.5' does not match pattern"),
    ("0.0", "at '/settings/harvest/t_alloc/cpu': '0.0' does not match pattern"),
    ("0", "at '/settings/harvest/t_alloc/cpu': exclusiveMinimum: got 0, want 0"),  # --set reads a whole number as one
    ("high", "at '/settings/harvest/t_alloc/cpu': 'high' does not match pattern"),
])
def test_a_fraction_out_of_range_passed_with_set_is_still_refused(value: str, message: str) -> None:
    done = helm("template", "s", str(CHART), "--set", f"settings.harvest.t_alloc.cpu={value}", check=False)
    assert done.returncode != 0
    assert message in done.stderr, done.stderr


def _number_fields(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = []
    if isinstance(node.get("type"), list) and "number" in node["type"]:
        out.append((path, node))
    for key, sub in node.get("properties", {}).items():
        out += _number_fields(sub, f"{path}.{key}")
    return out


#: Decimal forms around every bound the schema uses (0, 0.5, 1) and far from them.
_DECIMALS = ["0", "0.0", "00", ".5", "0.05", "0.49", "0.5", "0.51", "0.9", "1", "1.0", "1.", "1.01", "1.5", "2",
             "10", "100.5", "2592001"]


def test_every_number_takes_its_string_form_within_the_bounds_the_pattern_can_hold() -> None:
    """The string pattern of each numeric value agrees with its numeric bounds: the lower bound always, the
    maximum when it is 1 (a fraction); other maxima are the components' to check (docs/install.md)."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    fields = _number_fields(schema)
    assert len(fields) >= 30
    assert all("pattern" in node for _, node in fields), [p for p, n in fields if "pattern" not in n]
    for path, node in fields:
        pattern = re.compile(node["pattern"])
        for text in _DECIMALS:
            value = float(text)
            ok = (value > node["exclusiveMinimum"] if "exclusiveMinimum" in node else value >= node.get("minimum", 0))
            if node.get("maximum") == 1:
                ok = ok and value <= 1
            assert bool(pattern.match(text)) == ok, f"{path}: {text!r} {'refused' if ok else 'accepted'}"
        for text in ("-1", "high", "", "0.8x", "1e3"):
            assert not pattern.match(text), f"{path}: {text!r} accepted"
