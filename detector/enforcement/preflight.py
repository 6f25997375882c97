"""Pre-flight checks of the call about to be made (``POST /v1/check`` with ``pending``).

Spans arrive after a call ends, so a rule that trips on them stops a *later* call. The SDK narrows that
gap by sending, before each call, the fingerprint of the call it is about to make: the request
fingerprint (an opaque string, e.g. sha256 of the canonical model + messages) and/or the tool name and
arguments. The API keeps, per trace (or per session when the check names no trace), a bounded window of
the pending fingerprints it has been asked about, in memory, and runs the same detectors over it:

* exact prompt repeat: each enabled ``exact_prompt_repeat`` rule over the window plus the pending fingerprint;
* failure loop: the same tool call (name + canonical arguments) back to back, against each enabled
  ``failure_loop`` rule (the checks tell no errors: its error streak is 0 here);
* progress (``pending.evidence``, the app's fingerprints): the core's progress model
  (:class:`detector.core.progress.ProgressMemory`) over the steps the checks tell. A check before a tool runs names
  what it will do (``evidence.tool_args``, ``tool_args_simhash``); the next check before a model call tells what came
  back (its new input: ``evidence.input``, ``input_simhash``, ``input_chars``, ``input_failed``, ``input_shape``,
  ``input_pending``, ``input_ack``): together, one completed step, observed in the window's own memory of
  :data:`~detector.core.progress.MEMORY` steps. A run of wasted steps raises the early warning (``warn``,
  ``no_progress``) and trips each enforce-mode ``no_progress`` rule as the spans would, before the model call goes
  out. (A check before a model call that no tool check preceded completes no step: what was done is unknown.)

Whether a rule trips is asked of the core's :mod:`detector.core.trip_conditions`, the functions the spans' path asks,
with the rules as the engine plans them (:class:`detector.core.tuning.PlannedRule`: parameters read once per
configuration); only the state they are asked about (this window) is the pre-flight check's own.

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
from loop_detector_sdk.fingerprint import canonical_json

from detector.core.decisions import Decision
from detector.core.progress import EVIDENCE_NAMES, NONE, ProgressMemory
from detector.core.steps import STEP_TOOL, ProgressStep, mix_fingerprints, with_outcome
from detector.core.trip_conditions import failure_trip, no_progress_trip, repeat_trip, wasted_run
from detector.core.tuning import PlannedRule
from detector.settings.vocabulary import (
    ACTION_BLOCK,
    ACTION_WARN,
    DETECTOR_EXACT_PROMPT_REPEAT,
    DETECTOR_FAILURE_LOOP,
    DETECTOR_NO_PROGRESS,
    EVIDENCE_EXACT,
    MODE_ENFORCE,
    RULE_BLOCK,
    SCOPE_SESSION,
    SCOPE_TRACE,
)

__all__ = [
    "DEFAULT_MAX_WINDOWS", "MAX_ACTIONS", "PENDING_DETECTORS", "PendingAction", "PendingWindow", "PendingWindows",
    "WINDOW", "canonical_arguments", "completed_step", "fingerprint_int", "tool_fingerprint",
]

WINDOW = 100  # the largest exact_prompt_repeat window allowed
DEFAULT_MAX_WINDOWS = 100_000


def fingerprint_int(text: str) -> int:
    """A stable non-zero 63-bit integer for an opaque fingerprint string (0 means unknown to the rules)."""
    value = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big") >> 1
    return value or 1


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # as JSON.parse refuses NaN and Infinity


def _parse(text: str) -> Any:
    """A JSON string's value as ``JSON.parse`` reads it (integers beyond 2**53 as the nearest double, a number
    beyond the doubles as infinity); ``text`` itself when it is not JSON."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:  # a number beyond the doubles, nesting deeper than orjson's limit, not JSON
        pass
    try:
        return json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return text


def canonical_arguments(arguments: Any) -> str:
    """Tool arguments as the SDKs' canonical JSON (:func:`loop_detector_sdk.fingerprint.canonical_json`: what
    ``JSON.stringify`` writes, keys sorted by code point): a JSON string is parsed first, so ``'{"b":1,"a":2}'``
    and ``{"a": 2, "b": 1}`` are the same call, and numbers are doubles, so ``1.0`` from a Python agent and
    ``1`` from a JavaScript one are the same argument (``sdk/test-vectors/fingerprints.json``, ``tool_arguments``).

    Total: tool arguments come from the model, so any value must give a fingerprint, never an error (an error
    here was a 500 from ``/v1/check``, and an SDK failing open let a blocked session through): integers beyond
    64 bits are rounded like any other beyond 2**53, beyond the doubles they are null; nesting too deep for the
    canonical writer falls back to the standard library's encoder."""
    if isinstance(arguments, str):
        arguments = _parse(arguments)  # not JSON: the text itself is the argument
    try:
        return canonical_json(arguments)
    except RecursionError:
        return _deep_canonical(arguments)


class _Text(str):
    """Punctuation on :func:`_deep_canonical`'s stack (not a value to write)."""


def _deep_canonical(value: Any) -> str:
    """The canonical text of a value nested too deep for the recursive writer, with an explicit stack (lists
    and dicts walked here, every other value written by :func:`canonical_json`)."""
    out: list[str] = []
    stack: list[Any] = [value]
    while stack:
        v = stack.pop()
        if type(v) is _Text:
            out.append(v)
        elif isinstance(v, list | tuple):
            stack.append(_Text("]"))
            for i, item in enumerate(reversed(v)):
                stack.extend((_Text(","), item) if i else (item,))
            stack.append(_Text("["))
        elif isinstance(v, dict):
            items = sorted(((k if isinstance(k, str) else canonical_json(k).strip('"'), x) for k, x in v.items()),
                           key=lambda kv: kv[0])
            stack.append(_Text("}"))
            for i, (k, x) in enumerate(reversed(items)):
                if i:
                    stack.append(_Text(","))
                stack.extend((x, _Text(canonical_json(k) + ":")))
            stack.append(_Text("{"))
        else:
            out.append(canonical_json(v))
    return "".join(out)


def tool_fingerprint(name: str, arguments: Any) -> int:
    return fingerprint_int(name + "\x00" + canonical_arguments(arguments if arguments is not None else {}))


@dataclass(frozen=True, slots=True)
class PendingAction:
    """A tool about to run, as its check's evidence tells it: what the next model call's new input is the outcome of."""

    name: str
    act: int  # evidence.tool_args: the name + normalized arguments (args_fp)
    act_sim: int  # evidence.tool_args_simhash (args_simhash)


@dataclass(slots=True)
class PendingWindow:
    session_id: str
    request_fps: deque[int] = field(default_factory=lambda: deque(maxlen=WINDOW))
    tool_fp: int = 0
    tool_streak: int = 0
    last_us: int = 0
    actions: list[PendingAction] = field(default_factory=list)  # the tools checked since the last model call's check
    progress: ProgressMemory = field(default_factory=ProgressMemory)


# The blocking rules a pending call can trip before it is sent.
PENDING_DETECTORS: Final = (DETECTOR_EXACT_PROMPT_REPEAT, DETECTOR_FAILURE_LOOP, DETECTOR_NO_PROGRESS)
# At most so many tools checked between two model calls are remembered (parallel tool calls)
MAX_ACTIONS: Final = 16


def _u64(value: Any) -> int:
    return int(value) if value else 0


def completed_step(actions: list[PendingAction], evidence: dict[str, Any]) -> ProgressStep:
    """The step the tools checked since the last model call took (``actions``), completed by what came back: the
    new input the check before the next model call carries (``evidence``). As the spans' step
    (:func:`detector.core.steps.answered_tool_step`): the tools' names sorted, one tool's action as it is, several as
    one combined action; a failure keyed by the input's shape."""
    ordered = sorted(actions, key=lambda a: a.name)
    if len(ordered) == 1:
        act, act_sim = ordered[0].act, ordered[0].act_sim
    else:
        act, act_sim = mix_fingerprints([a.act for a in ordered]), 0
    ack, nothing = bool(evidence.get("input_ack")), bool(evidence.get("input_empty"))  # (input_ack: version 3)
    failed = bool(evidence.get("input_failed")) and not ack  # as the spans' step: an acknowledgement is no failure
    step = ProgressStep(STEP_TOOL, tuple(a.name for a in ordered), act, act_sim, _u64(evidence.get("input")),
                        _u64(evidence.get("input_simhash")), int(evidence.get("input_chars") or 0),
                        (_u64(evidence.get("input_shape")) or 1) if failed else 0)
    return with_outcome(step, nothing, ack, bool(evidence.get("input_pending")))


class PendingWindows:
    """The per-trace (or per-session) windows of pending fingerprints; thread-safe."""

    def __init__(self, max_windows: int = DEFAULT_MAX_WINDOWS) -> None:
        self.max_windows = max_windows
        self._lock = threading.Lock()
        self._windows: OrderedDict[str, PendingWindow] = OrderedDict()

    def __len__(self) -> int:
        return len(self._windows)

    def snapshot(self) -> list[PendingWindow]:
        """The windows held now (for memory estimates)."""
        return list(self._windows.values())

    @staticmethod
    def key(session_id: str, trace_id: str | None) -> str:
        return f"t:{trace_id}" if trace_id else f"s:{session_id}"

    def evaluate(self, *, session_id: str, trace_id: str | None, rules: Iterable[PlannedRule], now_us: int,
                 request_fingerprint: str | None = None, tool_name: str | None = None,
                 tool_arguments: Any = None, tool_evidence: int | None = None,
                 base: Decision | None = None, evidence: dict[str, Any] | None = None,
                 early_warning: bool = True) -> list[Decision]:
        """Record the pending call and return the decisions of the rules it trips (none: it may proceed); ``rules``:
        the configuration's, as the engine plans them. The tool call is compared by name + canonical arguments:
        ``tool_arguments`` when the client sent them, else the app's own fingerprint of them (``tool_evidence``,
        ``evidence.tool`` of the check: the SDKs send no arguments). ``evidence``: the check's ``pending.evidence``,
        for the progress memory (``early_warning``: whether a run of wasted steps warns, as
        ``loop_detection.progress.early_warning`` says)."""
        rules = [r for r in rules if r.enabled and r.mode == MODE_ENFORCE and r.detector in PENDING_DETECTORS]
        key = self.key(session_id, trace_id)
        req_fp = fingerprint_int(request_fingerprint) if request_fingerprint else 0
        tool_fp = 0
        if tool_name:
            tool_fp = (tool_fingerprint(tool_name, tool_arguments) if tool_arguments is not None or tool_evidence is None
                       else (tool_evidence or 1))
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
            fps = list(window.request_fps) if req_fp else []  # a check without a request repeats none
            streak = window.tool_streak if tool_fp else 0
            self._observe(window, tool_name, evidence)
            run = wasted_run(window.progress)
        scope = SCOPE_TRACE if trace_id else SCOPE_SESSION
        scope_id = trace_id or session_id
        for rule in rules:
            evidence_name = EVIDENCE_EXACT
            if rule.detector == DETECTOR_EXACT_PROMPT_REPEAT:
                tripped = bool(fps) and repeat_trip(rule, fps) is not None
            elif rule.detector == DETECTOR_FAILURE_LOOP:
                tripped = bool(streak) and failure_trip(rule, streak, 0) is not None
            else:  # DETECTOR_NO_PROGRESS
                no_progress = no_progress_trip(rule, run)
                tripped = no_progress is not None
                evidence_name = no_progress.evidence if no_progress is not None else ""
            if not tripped:
                continue
            blocking = rule.action == RULE_BLOCK
            out.append(Decision(
                scope=scope, scope_id=scope_id, session_id=session_id, action=ACTION_BLOCK if blocking else ACTION_WARN,
                level=base.level if base else "none", confidence=base.confidence if base else 0.0,
                dominant_signal=base.dominant_signal if base else "none", detector=rule.detector,
                reason=rule.detector if blocking else "", rule_name=rule.name, evidence=evidence_name,
            ))
        if early_warning and run.flag:  # the window's run of wasted steps makes a loop (until progress)
            out.append(Decision(
                scope=scope, scope_id=scope_id, session_id=session_id, action=ACTION_WARN,
                level=base.level if base else "none", confidence=base.confidence if base else 0.0,
                dominant_signal=base.dominant_signal if base else "none", detector=DETECTOR_NO_PROGRESS,
                evidence=EVIDENCE_NAMES[run.flag]))
        return out

    @staticmethod
    def _observe(window: PendingWindow, tool_name: str | None, evidence: dict[str, Any] | None) -> int:
        """The progress memory's part of a check (under the lock): a tool check remembers what the tool will do; a
        model call's check with a new input completes the step of the tools checked before it and observes it.
        Returns that step's evidence level (``NONE`` when no step was completed)."""
        if not evidence:
            return NONE
        if tool_name:
            if evidence.get("tool_args") and len(window.actions) < MAX_ACTIONS:
                window.actions.append(PendingAction(tool_name, _u64(evidence["tool_args"]),
                                                    _u64(evidence.get("tool_args_simhash"))))
            return NONE
        if "input" not in evidence or not window.actions:
            return NONE
        step = completed_step(window.actions, evidence)
        window.actions = []
        return window.progress.observe(step)

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
