"""What every reliability probe's table is made of: a header naming the machine's load, and rows of figure, value,
unit and ratio against a baseline measured in the same run."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["FAST", "config_file", "header", "row"]

# A detection cycle every half second: the probes wait for decisions, not for the default schedule.
FAST = "detector:\n  interval_seconds: 0.5\n"


def row(figure: str, value: float | str, unit: str = "", ratio: str = "") -> str:
    shown = f"{value:,.2f}" if isinstance(value, float) else f"{value:,}" if isinstance(value, int) else value
    return f"| {figure} | {shown} | {unit} | {ratio} |"


def header(title: str) -> list[str]:
    return [f"### {title} (load average {os.getloadavg()[0]:.1f} before, 2 CPUs)", "",
            "| figure | value | unit | ratio vs baseline |", "|---|---|---|---|"]


def config_file(directory: Path, text: str = FAST) -> Path:
    path = directory / "config.yaml"
    path.write_text(text)
    return path
