"""The command line's ``argparse`` parser: errors in one line, and help without the reST markup of docstrings.

The descriptions come from module docstrings written for Sphinx-style readers (````loop-detector````,
``:class:`...```` roles, single-backtick interpreted text); a terminal shows them as plain words.
"""

from __future__ import annotations

import argparse
import re
from typing import NoReturn

__all__ = ["Parser", "strip_markup"]

_ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`~?([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")
_INTERPRETED = re.compile(r"(?<![`\w])`([^`\n]+)`(?![`\w])")


def strip_markup(text: str) -> str:
    """``loop-detector`` -> loop-detector, :class:`x.Y` -> x.Y, `preset:` -> preset:."""
    return _INTERPRETED.sub(r"\1", _LITERAL.sub(r"\1", _ROLE.sub(r"\1", text)))


class Parser(argparse.ArgumentParser):
    """argparse, with its errors in one line (what is wrong, and where the help is) instead of the usage block,
    and its help as plain text."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")

    def format_help(self) -> str:
        return strip_markup(super().format_help())

    def format_usage(self) -> str:
        return strip_markup(super().format_usage())
