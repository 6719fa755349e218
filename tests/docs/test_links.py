"""Links between the docs land: every relative link in README.md and docs/*.md names a file that exists, and an
anchor that one of its headings makes (GitHub's rule: lower case, punctuation dropped, spaces to '-')."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```.*?^```", flags=re.M | re.S)
LINK = re.compile(r"\]\((?P<file>[^)\s#]+\.md)?(?P<anchor>#[^)\s]+)?\)")


def slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6} (.+)$", FENCE.sub("", text), flags=re.M):
        s = slug(heading)
        out.add(s if s not in seen else f"{s}-{seen[s]}")
        seen[s] = seen.get(s, 0) + 1
    return out


def broken(page: Path) -> list[str]:
    bad = []
    for m in LINK.finditer(FENCE.sub("", page.read_text())):
        target, anchor = m.group("file"), m.group("anchor")
        if not target and not anchor:
            continue
        path = (page.parent / target) if target else page
        if not path.exists():
            bad.append(f"{m.group(0)}: no such file")
        elif anchor and anchor[1:] not in anchors(path.read_text()):
            bad.append(f"{m.group(0)}: no such heading in {path.name}")
    return bad


def test_the_checker_finds_a_missing_file_and_a_missing_heading(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A page\n\n## Results (issue #12)\n\n```\n# not a heading\n```\n")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md#results-issue-12) [self](#b) [no](c.md) [gone](a.md#not-a-heading)\n\n# B\n")
    assert broken(page) == ["](c.md): no such file", "](a.md#not-a-heading): no such heading in a.md"]


@pytest.mark.parametrize("page", [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))], ids=lambda p: p.name)
def test_every_link_lands(page: Path) -> None:
    assert broken(page) == []
