"""Put the session, virtual key and feature on the current spans (and give them to the guard).

``loop_context(session_id=..., virtual_key=..., feature=...)`` is a context manager (sync and async code
alike: it uses context variables) that

* makes the ids the defaults of :class:`~loop_detector_sdk.LoopGuard` checks made inside it, and
* when ``opentelemetry-api`` is installed, sets them as OTel baggage (``loop_detector.session_id``,
  ``loop_detector.virtual_key``, ``loop_detector.feature``), which :class:`LoopAttributesSpanProcessor`
  copies as attributes onto every span started inside, plus ``gen_ai.conversation.id`` when the span has
  none. loop-detector's ClickHouse view resolves those attribute names to the call's session, key and feature.

Register the processor (:mod:`loop_detector_sdk.otel`) once:
``tracer_provider.add_span_processor(LoopAttributesSpanProcessor())``. OpenTelemetry is optional: it is
imported on first use, and only when installed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

SESSION_ATTR = "loop_detector.session_id"
VIRTUAL_KEY_ATTR = "loop_detector.virtual_key"
FEATURE_ATTR = "loop_detector.feature"
CONVERSATION_ATTR = "gen_ai.conversation.id"


@dataclass(frozen=True, slots=True)
class LoopIds:
    session_id: str | None = None
    virtual_key: str | None = None
    feature: str | None = None

    def attributes(self) -> dict[str, str]:
        out = {SESSION_ATTR: self.session_id, VIRTUAL_KEY_ATTR: self.virtual_key, FEATURE_ATTR: self.feature}
        return {k: v for k, v in out.items() if v}


_NONE = LoopIds()
_CURRENT: ContextVar[LoopIds | None] = ContextVar("loop_detector_ids", default=None)


def current_ids() -> LoopIds:
    """The ids of the innermost :func:`loop_context` (all None outside one)."""
    return _CURRENT.get() or _NONE


_OTEL: list[tuple[Any, Any, Any] | None] = []


def _otel() -> tuple[Any, Any, Any] | None:
    """(baggage, context, trace) of opentelemetry-api, imported on first use; None when not installed."""
    if not _OTEL:
        try:
            from opentelemetry import baggage
            from opentelemetry import context as otel_context
            from opentelemetry import trace as otel_trace
        except ImportError:  # opentelemetry-api is optional
            _OTEL.append(None)
        else:
            _OTEL.append((baggage, otel_context, otel_trace))
    return _OTEL[0]


def current_trace_id() -> str | None:
    """The current OTel span's trace id (32 hex digits), if opentelemetry-api is installed and a span is active."""
    otel = _otel()
    if otel is None:
        return None
    ctx = otel[2].get_current_span().get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else None


@contextmanager
def loop_context(session_id: str | None = None, virtual_key: str | None = None,
                 feature: str | None = None) -> Iterator[LoopIds]:
    """Ids for everything inside: guard checks default to them, and (with OpenTelemetry) spans get them."""
    parent = current_ids()
    ids = LoopIds(session_id or parent.session_id, virtual_key or parent.virtual_key, feature or parent.feature)
    token = _CURRENT.set(ids)
    otel = _otel()
    otel_token = None
    if otel is not None:
        baggage, otel_context, _ = otel
        ctx = otel_context.get_current()
        for key, value in ids.attributes().items():
            ctx = baggage.set_baggage(key, value, context=ctx)
        otel_token = otel_context.attach(ctx)
    try:
        yield ids
    finally:
        if otel_token is not None and otel is not None:
            otel[1].detach(otel_token)
        _CURRENT.reset(token)
