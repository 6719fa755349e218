"""docs/configuration.md documents every knob with its real default (one place for each fact)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from stowage.config import PerResource, StowageSettings, as_dict

DOC = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()


def _rows() -> dict[str, str]:
    rows = {}
    for key, default in re.findall(r"^\| `([^`]+)` \| `([^`]+)` \|", DOC, flags=re.M):
        match = re.fullmatch(r"(.*)\.\{(.*)\}", key)
        for name in match.group(2).split(",") if match else [None]:
            rows[f"{match.group(1)}.{name}" if match else key] = default
    return rows


def _knobs(obj: object, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for f in dataclasses.fields(obj):  # type: ignore[arg-type]
        value = getattr(obj, f.name)
        path = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            out |= _knobs(value, f"{path}.")
        else:
            out[path] = value
    return out


def test_every_knob_is_documented_with_its_default() -> None:
    rows = _rows()
    flat = as_dict(StowageSettings())
    for path in _knobs(StowageSettings()):
        assert path in rows, f"{path} is missing from docs/configuration.md"
        section, *rest = path.split(".")
        value = flat[section]
        for part in rest:
            value = value[part]
        assert rows[path] == str(value), f"{path}: documented {rows[path]}, real {value}"
    assert dataclasses.is_dataclass(PerResource)
