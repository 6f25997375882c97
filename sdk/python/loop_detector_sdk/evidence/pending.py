"""The ``evidence`` of a guard's check (``POST /v1/check``, ``pending.evidence``): the app's fingerprints of the
call about to be made, never its content. Computing them never fails the check: on an error (a message of a shape
no converter knows) the check goes without them, and the log says so by the error's type only."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from loop_detector_sdk.evidence.fingerprints import call_evidence, tool_run_evidence
from loop_detector_sdk.evidence.messages import Message, arguments_text

__all__ = ["model_evidence", "tool_evidence"]

log = logging.getLogger("loop_detector.sdk")


def model_evidence(model: str | None, convert: Callable[..., list[Message]], *args: Any) -> dict[str, Any] | None:
    """A model call's evidence (its request and new input), from its messages as ``convert(*args)`` reads them."""
    try:
        return call_evidence(model, convert(*args)).check_evidence()
    except Exception as exc:
        log.warning("loop-detector could not fingerprint the call (%s); checking without fingerprints",
                    type(exc).__name__)
        return None


def tool_evidence(name: str, arguments: Any) -> dict[str, Any] | None:
    """A tool run's evidence (name + canonical arguments, normalized arguments)."""
    try:
        return tool_run_evidence(name, arguments_text(arguments) if arguments is not None else "")
    except Exception as exc:
        log.warning("loop-detector could not fingerprint the tool call (%s); checking without fingerprints",
                    type(exc).__name__)
        return None
