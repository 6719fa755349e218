"""Rewrite one named section of the results page (``docs/results.md``) from a script's output.

A section is the block between ``<!-- results:NAME -->`` and ``<!-- /results:NAME -->``. Writing it replaces
what lies between the two markers, and nothing else, with:

- the command that made the table, as a ``console`` block;
- one line naming the commit it was measured at and that this tool wrote it;
- the table itself (the script's Markdown, or its plain text in a fenced block with ``--code``).

The page's own prose (what each table shows) sits outside the markers and is kept byte for byte. A section
missing from the page, or whose markers are doubled or out of order, is refused, naming it: a table is never
appended where nobody reads it.

From another script (``scripts/random_workloads.py --write-results``, ``scripts/makespan_table.py``)::

    from update_results import write_section
    write_section(Path("docs/results.md"), "random-workloads", command, body, commit)

From the shell, either a command to run (its stdout is the body) or a body on stdin::

    .venv/bin/python scripts/update_results.py docs/results.md embedded-default --code -- \\
        stowage simulate --no-plots --jobs 2
    .venv/bin/python scripts/random_workloads.py --from-runs | \\
        .venv/bin/python scripts/update_results.py docs/results.md random-workloads \\
        --command ".venv/bin/python scripts/random_workloads.py --policy stowage-regular --jobs 2"
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results.md"
TOOL = "scripts/update_results.py"
_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")


class SectionError(ValueError):
    """The page has no usable section of that name."""


def start_marker(name: str) -> str:
    return f"<!-- results:{name} -->"


def end_marker(name: str) -> str:
    return f"<!-- /results:{name} -->"


def section_names(text: str) -> list[str]:
    """The sections of a page, in page order."""
    return re.findall(r"<!-- results:([a-z0-9][a-z0-9-]*) -->", text)


def commit_of(root: Path = ROOT) -> str:
    """``git rev-parse --short HEAD`` of ``root``, ``+dirty`` if tracked files changed; ``unknown`` without git."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def render(command: str, body: str, commit: str, code: bool = False) -> str:
    """What goes between a section's markers (with a blank line at each end)."""
    table = f"```\n{body.strip(chr(10))}\n```" if code else body.strip("\n")
    return (f"\n```console\n$ {command.strip()}\n```\n\n"
            f"Measured at `{commit}`; written by `{TOOL}`.\n\n{table}\n\n")


def replace_section(text: str, name: str, command: str, body: str, commit: str, code: bool = False) -> str:
    """``text`` with section ``name``'s content replaced; everything outside its markers unchanged."""
    if not _NAME.fullmatch(name):
        raise SectionError(f"section name {name!r}: lower-case letters, digits and '-' only")
    start, end = start_marker(name), end_marker(name)
    if text.count(start) != 1 or text.count(end) != 1:
        known = ", ".join(section_names(text)) or "none"
        raise SectionError(f"section {name!r}: the page needs exactly one {start} and one {end} "
                           f"(found {text.count(start)} and {text.count(end)}; sections: {known})")
    i, j = text.index(start) + len(start), text.index(end)
    if j < i:
        raise SectionError(f"section {name!r}: {end} comes before {start}")
    return text[:i] + render(command, body, commit, code) + text[j:]


def read_section(text: str, name: str) -> str:
    """What lies between section ``name``'s markers."""
    start, end = start_marker(name), end_marker(name)
    if start not in text or end not in text:
        raise SectionError(f"section {name!r} is not in the page")
    return text[text.index(start) + len(start):text.index(end)]


def write_section(path: Path, name: str, command: str, body: str, commit: str | None = None,
                  code: bool = False) -> None:
    """Rewrite section ``name`` of the page at ``path`` (``commit`` defaults to this checkout's)."""
    text = path.read_text()
    path.write_text(replace_section(text, name, command, body, commit or commit_of(), code))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("page", type=Path, help="the results page, e.g. docs/results.md")
    ap.add_argument("name", help="the section: the NAME of <!-- results:NAME -->")
    ap.add_argument("--command", help="the command line to print above the table (with the body on stdin)")
    ap.add_argument("--commit", help="the commit measured (default: this checkout's HEAD, +dirty if changed)")
    ap.add_argument("--code", action="store_true", help="the body is plain text: put it in a fenced block")
    ap.epilog = "-- COMMAND...: run COMMAND here (from the repository root); its stdout is the body"
    argv = list(sys.argv[1:] if argv is None else argv)
    run = argv[argv.index("--") + 1:] if "--" in argv else []
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if run:
        done = subprocess.run(run, cwd=ROOT, capture_output=True, text=True, check=False)
        sys.stderr.write(done.stderr)
        if done.returncode != 0:
            print(f"{shlex.join(run)} exited {done.returncode}: the page is left as it was", file=sys.stderr)
            return done.returncode
        command, body = args.command or shlex.join(run), done.stdout
    elif args.command:
        command, body = args.command, sys.stdin.read()
    else:
        ap.error("give --command with the body on stdin, or -- COMMAND to run")
    if not body.strip():
        print(f"empty output: section {args.name!r} is left as it was", file=sys.stderr)
        return 1
    try:
        write_section(args.page, args.name, command, body, args.commit, args.code)
    except (SectionError, OSError) as e:
        print(f"error: {args.page}: {e}", file=sys.stderr)
        return 1
    print(f"{args.page}: section {args.name} rewritten", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
