"""An OpenTelemetry GenAI completion hook that puts the app's fingerprints on every model call's span, with
content capture off: loop-detector then sees what the call saw and said (hashes of it) without the text leaving
the app.

    OTEL_INSTRUMENTATION_GENAI_COMPLETION_HOOK=loop_detector

is the whole set-up for any instrumentation built on ``opentelemetry-util-genai`` (``opentelemetry-instrumentation-
openai-v2``, ``-google-genai`` and the others): util-genai loads the hook from the entry point group
``opentelemetry_genai_completion_hook`` (both the ``loop-detector-sdk`` and the ``loop-detector`` distributions
register ``loop_detector``) and calls :meth:`LoopDetectorHook.on_completion` with the call's inputs and outputs,
whatever the content capturing mode, just before the span ends. The hook sets the ``loop_detector.fp.*``
attributes (:mod:`loop_detector_sdk.evidence.fingerprints`; ``docs/sdk.md``, "Fingerprints") and nothing else:
it never writes, logs or keeps the text (a bounded cache maps texts to their fingerprints, in memory).

With a real hook configured util-genai *collects* the messages (so that the hook gets them), but it still writes
them onto the span or into log records only as ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` says
(unset: never). A failure inside the hook is logged by util-genai (type only here) and never reaches the app.
"""

from __future__ import annotations

import logging
from typing import Any

from loop_detector_sdk.evidence.fingerprints import genai_call_evidence

__all__ = ["LoopDetectorHook", "loop_detector_hook"]

log = logging.getLogger("loop_detector.sdk")


def _model_of(span: Any) -> str:
    """The model asked for (``gen_ai.request.model``, set when the span starts; a guard knows no other)."""
    attributes = getattr(span, "attributes", None) or {}
    model = attributes.get("gen_ai.request.model")
    return model if isinstance(model, str) else ""


class LoopDetectorHook:
    """util-genai's ``CompletionHook``: sets the call's fingerprints on its span."""

    def on_completion(self, *, inputs: list[Any] | None = None, outputs: list[Any] | None = None,
                      system_instruction: list[Any] | None = None, tool_definitions: list[Any] | None = None,
                      span: Any = None, log_record: Any = None, **_later: Any) -> None:
        # (**_later: arguments a later util-genai may add; the hook reads the ones above)
        if span is None or not span.is_recording():
            return
        try:
            evidence = genai_call_evidence(_model_of(span), inputs or (), outputs or (), system_instruction or ())
            span.set_attributes(evidence.span_attributes())
        except Exception as exc:  # never the app's problem; never the content in the log
            log.warning("loop-detector completion hook failed (%s); the span has no fingerprints", type(exc).__name__)


def loop_detector_hook() -> LoopDetectorHook:
    """The entry point util-genai loads (``opentelemetry_genai_completion_hook`` = ``loop_detector``)."""
    return LoopDetectorHook()
