"""The command line's value types: each turns a wrong value into one line that says what was given and what is
accepted (argparse prints it after the option's name), never a traceback from deeper down."""

from __future__ import annotations

import argparse
from collections.abc import Callable

__all__ = ["LOG_LEVELS", "bounded_int", "log_level", "port"]

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def port(text: str) -> int:
    """A TCP port number: 0 (a free one, the startup line says which) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port (0-65535; 0: a free one)")
    return value


def log_level(text: str) -> str:
    """A logging level in any case (``debug``, ``DEBUG``, ``Debug``), returned as :mod:`logging` names it."""
    if text.strip().lower() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a log level (choose from {', '.join(LOG_LEVELS)}; "
                                         "any case)")
    return text.strip().upper()


def bounded_int(low: int, high: int, what: str) -> Callable[[str], int]:
    """An integer in ``[low, high]``; ``what`` names the range in the error (e.g. "a number of sessions")."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number ({what}: {low}-{high})") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is out of range ({what}: {low}-{high})")
        return value

    parse.__name__ = what  # argparse names the type in some messages
    return parse
