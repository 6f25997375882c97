"""The code blocks of a Markdown page, and the markers that say how a test treats each one.

A marker is an HTML comment on the lines right above a block's opening fence (invisible on the rendered page):

    <!-- fragment: why -->       not run: part of a program, a sample of output, a command that needs what tests
                                 here have not (Docker, a registry, another virtualenv); the reason is required
    <!-- ci -->                  run by CI exactly as written (.ci/run or tools/ci_checks.py), not by a test
    <!-- serve-config -->        a YAML config: the page's ``loop-detector serve`` runs with it
    <!-- file: NAME -->          the block is also written to NAME in the directory the page's commands run in
    <!-- expect: TEXT -->        what the block prints includes TEXT (several allowed)
    <!-- expect-re: REGEX -->    what the block prints matches REGEX (several allowed)

Every other block runs (``tests/docs/test_docs_run.py``), by its language: ``python`` as a program, ``ts`` with
node, ``bash`` command by command, ``yaml`` as a config that ``check-config`` accepts and ``serve`` starts with.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["DocBlock", "MARKERS", "bash_commands", "doc_blocks"]

MARKERS = ("fragment", "ci", "serve-config", "file", "expect", "expect-re")
_MARKER = re.compile(r"^<!--\s*([a-z-]+)\s*(?::\s*(.*?))?\s*-->$")
_FENCE = re.compile(r"^```(\S*)\s*$")


@dataclass(frozen=True)
class DocBlock:
    page: Path
    line: int  # of the opening fence, 1-based
    language: str
    text: str
    markers: dict[str, list[str]] = field(default_factory=dict)
    name: str = ""  # the page as the repository names it (examples/README.md)

    @property
    def id(self) -> str:
        return f"{self.name or self.page.name}:{self.line}"

    def marked(self, name: str) -> bool:
        return name in self.markers

    def values(self, name: str) -> list[str]:
        return self.markers.get(name, [])


def doc_blocks(page: Path, root: Path | None = None) -> list[DocBlock]:
    """Every fenced block of ``page``, with the markers above it (an unknown marker is an error); ``root``: what
    the blocks' ids name the page relative to."""
    name = page.relative_to(root).as_posix() if root else page.name
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[DocBlock] = []
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        markers: dict[str, list[str]] = {}
        j = i - 1
        while j >= 0 and (marker := _MARKER.match(lines[j].strip())):
            key, value = marker.group(1), marker.group(2) or ""
            if key not in MARKERS:
                raise ValueError(f"{name}:{j + 1}: unknown marker {key!r} (known: {', '.join(MARKERS)})")
            markers.setdefault(key, []).insert(0, value)
            j -= 1
        end = next((k for k in range(i + 1, len(lines)) if lines[k].startswith("```")), None)
        if end is None:
            raise ValueError(f"{name}:{i + 1}: a code block that is never closed")
        blocks.append(DocBlock(page, i + 1, fence.group(1), "\n".join(lines[i + 1:end]) + "\n", markers, name))
        i = end + 1
    return blocks


def bash_commands(text: str) -> list[str]:
    """A shell block's commands: continuation lines joined, comments (a line's own, or after two spaces) dropped."""
    commands = []
    for line in text.replace("\\\n", " ").splitlines():
        line = re.split(r"\s{2,}#\s", line.strip())[0].strip()
        if line and not line.startswith("#"):
            commands.append(re.sub(r"\s+", " ", line))
    return commands
