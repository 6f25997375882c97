"""Writing a bench's table into a page of docs/: its own ``## `` section, replaced in place on every run."""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["write_section"]


def write_section(path: Path, title: str, body: str) -> None:
    """Replace the section headed ``title`` (up to the next ``## `` heading) with ``body``, or append it. Text a
    person wrote about the figures belongs in a section of its own, so that a re-run keeps it."""
    current = path.read_text() if path.exists() else "# Benchmarks\n"
    pattern = re.compile(rf"^{re.escape(title)}\n.*?(?=^## |\Z)", re.S | re.M)
    block = f"{title}\n\n{body.rstrip()}\n\n"
    new = pattern.sub(lambda _: block, current) if pattern.search(current) else current.rstrip() + "\n\n" + block
    path.write_text(new.rstrip() + "\n")
