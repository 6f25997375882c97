"""What the process writes to its own log: structured JSON, one object per line (the record's ``extra`` fields included),
and the escalation transitions of each detection cycle. (Not the OTLP log records agents send: :mod:`detector.ingest.logs`.)

Only structural metadata is ever logged (ids, levels, signal values, hashes); never prompt or
response content.
"""

from __future__ import annotations

import logging
import sys
import time

import orjson

from detector.settings.vocabulary import EVENT_ESCALATION, LEVEL_HARD_STOP, SCOPE_SESSION

__all__ = ["JsonFormatter", "TransitionLogger", "configure_logging"]

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, object] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                payload[key] = value
        if record.exc_info:
            payload["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(payload, default=str).decode()


def configure_logging(level: str = "INFO", json_format: bool = True) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if json_format else logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("apscheduler", "uvicorn.access", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


class TransitionLogger:
    """A detector-cycle observer: INFO on each enforcement transition, ERROR with the session's state dump
    (hashes, fingerprints, response descriptors, escalation history, tokens, cost) on hard stop."""

    def __init__(self, store: object) -> None:
        self.store = store
        self.log = logging.getLogger("loop_detector.enforcement")

    def __call__(self, out: object, stats: object) -> None:
        from detector.api.session_views import session_detail

        for event in getattr(out, "events", []):
            if event["kind"] != EVENT_ESCALATION:
                continue
            fields = {
                "event": "enforcement_transition",
                "scope": event["scope"],
                "session_id": event["session_id"],
                "trace_id": event["trace_id"],
                "span_id": event["span_id"],
                "virtual_key": event["virtual_key"],
                "from_level": event["from_level"],
                "to_level": event["to_level"],
                "confidence": round(event["confidence"], 4),
                "signals": {k: round(v, 4) for k, v in event["signals"].items()},
                "dominant_signal": event["dominant_signal"],
                "consecutive": event["consecutive"],
                "call_time": event["ts"],
            }
            self.log.info("enforcement transition", extra=fields)
            if event["to_level"] == LEVEL_HARD_STOP and event["scope"] == SCOPE_SESSION:
                dump = session_detail(self.store, event["session_id"], history_limit=20)  # type: ignore[arg-type]
                self.log.error("hard stop", extra={**fields, "event": "hard_stop", "state": dump})
