"""The span processor that copies the loop ids onto spans (needs opentelemetry-sdk; see :mod:`.context`)."""

from __future__ import annotations

from typing import Any

from loop_detector_sdk.context import (
    CONVERSATION_ATTR,
    FEATURE_ATTR,
    SESSION_ATTR,
    VIRTUAL_KEY_ATTR,
    _otel,
    current_ids,
)

try:  # subclass the SDK's processor when it is installed (it calls private hooks on processors)
    from opentelemetry.sdk.trace import SpanProcessor as _Base
except ImportError:  # pragma: no cover - without the SDK there is no provider to register with anyway
    _Base = object  # type: ignore[assignment,misc]


class LoopAttributesSpanProcessor(_Base):  # type: ignore[misc,valid-type]
    """Copies the loop ids (OTel baggage set by :func:`loop_context`, else the context variable) onto every
    span as it starts: ``loop_detector.session_id``, ``loop_detector.virtual_key``, ``loop_detector.feature``
    and, when the span has no ``gen_ai.conversation.id``, that too. Attributes the span already has win."""

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        values: dict[str, str] = {}
        otel = _otel()
        if otel is not None:
            baggage = otel[0]
            for key in (SESSION_ATTR, VIRTUAL_KEY_ATTR, FEATURE_ATTR):
                value = baggage.get_baggage(key, context=parent_context)
                if value:
                    values[key] = str(value)
        for key, value in current_ids().attributes().items():
            values.setdefault(key, value)
        if not values:
            return
        existing = getattr(span, "attributes", None) or {}
        for key, value in values.items():
            if key not in existing:
                span.set_attribute(key, value)
        session = values.get(SESSION_ATTR)
        if session and CONVERSATION_ATTR not in existing:
            span.set_attribute(CONVERSATION_ATTR, session)

    def _on_ending(self, span: Any) -> None:
        pass

    def on_end(self, span: Any) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True
