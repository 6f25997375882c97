"""Pre-flight checks of the call about to be made (``POST /v1/check`` with ``pending``).

Spans arrive after a call ends, so a rule that trips on them stops a *later* call. The SDK narrows that
gap by sending, before each call, the fingerprint of the call it is about to make: the request
fingerprint (an opaque string, e.g. sha256 of the canonical model + messages) and/or the tool name and
arguments. The API keeps, per trace (or per session when the check names no trace), a bounded window of
the pending fingerprints it has been asked about, in memory, and runs the same detectors over it:

* exact prompt repeat: :func:`detector.core.rules.find_repeat` with each enabled ``exact_prompt_repeat``
  rule's parameters over the window plus the pending fingerprint;
* failure loop: the same tool call (name + canonical arguments) back to back, against each enabled
  ``failure_loop`` rule's ``same_tool_repeats``.

A pending call that would complete a loop of a blocking rule in enforce mode is refused before it is sent;
a notify rule gives ``warn``; a dry-run rule changes nothing. The window records every pending call asked
about, refused or not (a refused repeat asked again is still a repeat). Windows are evicted with their
session, when idle past the session timeout, and beyond ``max_windows`` (least recently used first).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from detector.core.decisions import Decision
from detector.core.rules import find_repeat
from detector.settings.config import Rule
from detector.settings.rule_params import ExactRepeatParams, FailureLoopParams
from detector.settings.vocabulary import (
    ACTION_BLOCK,
    ACTION_WARN,
    DETECTOR_EXACT_PROMPT_REPEAT,
    DETECTOR_FAILURE_LOOP,
    EVIDENCE_EXACT,
    MODE_ENFORCE,
    RULE_BLOCK,
    SCOPE_SESSION,
    SCOPE_TRACE,
)

__all__ = [
    "DEFAULT_MAX_WINDOWS", "PENDING_DETECTORS", "PendingWindow", "PendingWindows", "WINDOW", "canonical_arguments",
    "fingerprint_int", "tool_fingerprint",
]

WINDOW = 100  # the largest exact_prompt_repeat window allowed
DEFAULT_MAX_WINDOWS = 100_000


def fingerprint_int(text: str) -> int:
    """A stable non-zero 63-bit integer for an opaque fingerprint string (0 means unknown to the rules)."""
    value = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big") >> 1
    return value or 1


def canonical_arguments(arguments: Any) -> str:
    """Tool arguments as canonical JSON (sorted keys): a JSON string is parsed first, so ``'{"b":1,"a":2}'``
    and ``{"a": 2, "b": 1}`` are the same call; anything else that is not JSON is taken as it is.

    Total: tool arguments come from the model, so any value must give a fingerprint, never an error (an error
    here was a 500 from ``/v1/check``, and an SDK failing open let a blocked session through). orjson refuses
    integers beyond 64 bits and nesting deeper than 255; the standard library's encoder writes both."""
    if isinstance(arguments, str):
        try:
            arguments = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            return arguments
    try:
        return orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:  # orjson.JSONEncodeError: a big integer, deep nesting
        pass
    try:
        return json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr)
    except (TypeError, ValueError, RecursionError):
        return repr(arguments)


def tool_fingerprint(name: str, arguments: Any) -> int:
    return fingerprint_int(name + "\x00" + canonical_arguments(arguments if arguments is not None else {}))


@dataclass(slots=True)
class PendingWindow:
    session_id: str
    request_fps: deque[int] = field(default_factory=lambda: deque(maxlen=WINDOW))
    tool_fp: int = 0
    tool_streak: int = 0
    last_us: int = 0


# The blocking rules a pending call can trip before it is sent.
PENDING_DETECTORS: Final = (DETECTOR_EXACT_PROMPT_REPEAT, DETECTOR_FAILURE_LOOP)

class PendingWindows:
    """The per-trace (or per-session) windows of pending fingerprints; thread-safe."""

    def __init__(self, max_windows: int = DEFAULT_MAX_WINDOWS) -> None:
        self.max_windows = max_windows
        self._lock = threading.Lock()
        self._windows: OrderedDict[str, PendingWindow] = OrderedDict()
        self._params: dict[int, tuple[Rule, Any]] = {}  # id(rule) -> (rule, parsed params): parsed once

    def _parsed(self, rule: Rule) -> Any:
        cached = self._params.get(id(rule))
        if cached is None or cached[0] is not rule:
            model = ExactRepeatParams if rule.detector == "exact_prompt_repeat" else FailureLoopParams
            if len(self._params) > 1000:
                self._params.clear()
            cached = self._params[id(rule)] = (rule, model(**rule.params))
        return cached[1]

    def __len__(self) -> int:
        return len(self._windows)

    def snapshot(self) -> list[PendingWindow]:
        """The windows held now (for memory estimates)."""
        return list(self._windows.values())

    @staticmethod
    def key(session_id: str, trace_id: str | None) -> str:
        return f"t:{trace_id}" if trace_id else f"s:{session_id}"

    def evaluate(self, *, session_id: str, trace_id: str | None, rules: Iterable[Rule], now_us: int,
                 request_fingerprint: str | None = None, tool_name: str | None = None,
                 tool_arguments: Any = None, base: Decision | None = None) -> list[Decision]:
        """Record the pending call and return the decisions of the rules it trips (none: it may proceed)."""
        rules = [r for r in rules if r.enabled and r.mode == MODE_ENFORCE and r.detector in PENDING_DETECTORS]
        key = self.key(session_id, trace_id)
        req_fp = fingerprint_int(request_fingerprint) if request_fingerprint else 0
        tool_fp = tool_fingerprint(tool_name, tool_arguments) if tool_name else 0
        out: list[Decision] = []
        with self._lock:
            window = self._windows.get(key)
            if window is None:
                window = self._windows[key] = PendingWindow(session_id)
                while len(self._windows) > self.max_windows:
                    self._windows.popitem(last=False)
            else:
                self._windows.move_to_end(key)
            window.last_us = now_us
            if req_fp:
                window.request_fps.append(req_fp)
            if tool_fp:
                if tool_fp == window.tool_fp:
                    window.tool_streak += 1
                else:
                    window.tool_fp, window.tool_streak = tool_fp, 1
            fps = list(window.request_fps) if req_fp else []
            streak = window.tool_streak if tool_fp else 0
        scope = SCOPE_TRACE if trace_id else SCOPE_SESSION
        scope_id = trace_id or session_id
        for rule in rules:
            detail = ""  # why it trips (kept for debugging; never logged with content)
            if rule.detector == DETECTOR_EXACT_PROMPT_REPEAT and fps:
                params = self._parsed(rule)
                match = find_repeat(fps, params.window, params.repeat_counts())
                if match:
                    detail = f"pending call would repeat a cycle of {match[0]} call(s) {match[1]} times"
            elif rule.detector == DETECTOR_FAILURE_LOOP and streak:
                need = self._parsed(rule).same_tool_repeats
                if streak >= need:
                    detail = f"pending tool call would be the same call {streak} times back to back"
            if not detail:
                continue
            blocking = rule.action == RULE_BLOCK
            out.append(Decision(
                scope=scope, scope_id=scope_id, session_id=session_id, action=ACTION_BLOCK if blocking else ACTION_WARN,
                level=base.level if base else "none", confidence=base.confidence if base else 0.0,
                dominant_signal=base.dominant_signal if base else "none", detector=rule.detector,
                reason=rule.detector if blocking else "", rule_name=rule.name,
                evidence=EVIDENCE_EXACT,  # the pending call's own fingerprints repeat
            ))
        return out

    def forget_sessions(self, session_ids: Iterable[str], trace_ids: Iterable[str] = ()) -> int:
        """Drop the windows of these sessions (and of these traces): eviction and admin reset."""
        sessions, traces = set(session_ids), {f"t:{t}" for t in trace_ids}
        with self._lock:
            drop = [k for k, w in self._windows.items() if w.session_id in sessions or k in traces]
            for k in drop:
                del self._windows[k]
        return len(drop)

    def evict_idle(self, cutoff_us: int) -> int:
        with self._lock:
            drop = [k for k, w in self._windows.items() if w.last_us < cutoff_us]
            for k in drop:
                del self._windows[k]
        return len(drop)
