"""The words loop-detector speaks: scopes, levels, actions, detectors, signals, rule actions and modes.

Each vocabulary is a ``Literal`` type (what a field may hold: mypy and pydantic check it) with one ``Final``
constant per word (what code writes instead of a bare string) and, where order matters, the words in order.
Constants rather than an ``Enum``: the values are stored in ClickHouse, sent in JSON and compared call after call
in the compiled core, where a ``Final`` string is a C constant and an enum member a module-attribute lookup.
"""

from __future__ import annotations

from typing import Final, Literal

__all__ = [
    "ACTIONS", "ACTION_ALLOW", "ACTION_BLOCK", "ACTION_INJECT", "ACTION_THROTTLE", "ACTION_WARN", "Action",
    "BUDGET_ALERT", "BUDGET_BLOCK", "BUDGET_SCOPES", "BudgetAction", "BudgetScope",
    "COMMIT_COMMITTED", "COMMIT_RETRYABLE", "CommitStatus",
    "EVENT_BUDGET", "EVENT_ESCALATION", "EVENT_MANUAL", "EVENT_PROGRESS", "EVENT_RULE", "EVENT_RULE_CLEAR", "EventKind",
    "SESSION_SOURCE_TRACE",
    "AlertEventKind", "DETECTOR_BLOCK_SESSION", "DETECTOR_BUDGET", "DETECTOR_MANUAL", "DETECTOR_RESET_SESSION", "DETECTOR_REVOKE_KEY",
    "MANUAL_BLOCK", "MANUAL_REVOKE", "ManualScope",
    "DETECTOR_CONFIDENCE", "DETECTOR_EXACT_PROMPT_REPEAT", "DETECTOR_FAILURE_LOOP", "DETECTOR_NONE",
    "DETECTOR_TRACE_CAP", "DETECTOR_VELOCITY", "RULE_DETECTORS", "DetectorName", "RuleDetector",
    "LEVELS", "LEVEL_HARD_STOP", "LEVEL_INJECT", "LEVEL_NONE", "LEVEL_THROTTLE", "LEVEL_WARN", "Level",
    "MODE_DRY_RUN", "MODE_ENFORCE", "RULE_BLOCK", "RULE_NOTIFY", "RuleAction", "RuleMode",
    "SCOPES", "SCOPE_FEATURE", "SCOPE_KEY", "SCOPE_SESSION", "SCOPE_TRACE", "Scope",
    "SIGNAL_NAMES", "SignalName",
    "DETECTOR_NO_PROGRESS", "EVIDENCE", "EVIDENCE_EXACT", "EVIDENCE_FUZZY", "EVIDENCE_NONE", "EVIDENCE_RATE",
    "EVIDENCE_SIZES", "EVIDENCE_STRUCTURE", "Evidence", "PRESET_DEFAULT", "PRESET_PROTECT", "PRESETS", "Preset",
    "TOOL_CALL_FINISHES",
]

# -- scopes: what a state, a score or a decision is about -------------------------------------------------------
Scope = Literal["trace", "session", "key", "feature"]
SCOPE_TRACE: Final = "trace"  # one agent run (a TraceId)
SCOPE_SESSION: Final = "session"  # one conversation or caller
SCOPE_KEY: Final = "key"  # a virtual key (the caller's key id)
SCOPE_FEATURE: Final = "feature"  # a product feature (budgets)
SCOPES: Final[tuple[Scope, ...]] = (SCOPE_TRACE, SCOPE_SESSION, SCOPE_KEY, SCOPE_FEATURE)

BudgetScope = Literal["feature", "session", "key"]
BUDGET_SCOPES: Final[tuple[BudgetScope, ...]] = (SCOPE_FEATURE, SCOPE_SESSION, SCOPE_KEY)

# -- escalation levels, lowest first ---------------------------------------------------------------------------
Level = Literal["none", "warn", "throttle", "inject", "hard_stop"]
LEVEL_NONE: Final = "none"
LEVEL_WARN: Final = "warn"
LEVEL_THROTTLE: Final = "throttle"
LEVEL_INJECT: Final = "inject"
LEVEL_HARD_STOP: Final = "hard_stop"
LEVELS: Final[tuple[Level, ...]] = (LEVEL_NONE, LEVEL_WARN, LEVEL_THROTTLE, LEVEL_INJECT, LEVEL_HARD_STOP)

# -- what a decision tells the agent, weakest first (each level's action is at the same index) -------------------
Action = Literal["allow", "warn", "throttle", "inject", "block"]
ACTION_ALLOW: Final = "allow"
ACTION_WARN: Final = "warn"
ACTION_THROTTLE: Final = "throttle"
ACTION_INJECT: Final = "inject"
ACTION_BLOCK: Final = "block"
ACTIONS: Final[tuple[Action, ...]] = (ACTION_ALLOW, ACTION_WARN, ACTION_THROTTLE, ACTION_INJECT, ACTION_BLOCK)

# -- detectors: who made a decision or an event ----------------------------------------------------------------
RuleDetector = Literal["exact_prompt_repeat", "trace_cap", "failure_loop", "velocity", "no_progress"]
DETECTOR_EXACT_PROMPT_REPEAT: Final = "exact_prompt_repeat"
DETECTOR_TRACE_CAP: Final = "trace_cap"
DETECTOR_FAILURE_LOOP: Final = "failure_loop"
DETECTOR_VELOCITY: Final = "velocity"
# calls that repeat earlier ones without progress (detector.core.progress): the early warning (built in, warn), and
# a rule detector of that name (trace and session scope; what the protect preset blocks with)
DETECTOR_NO_PROGRESS: Final = "no_progress"
RULE_DETECTORS: Final[tuple[RuleDetector, ...]] = (
    DETECTOR_EXACT_PROMPT_REPEAT, DETECTOR_TRACE_CAP, DETECTOR_FAILURE_LOOP, DETECTOR_VELOCITY, DETECTOR_NO_PROGRESS)
DETECTOR_CONFIDENCE: Final = "confidence"  # the weighted, smoothed score and its escalation
DETECTOR_BUDGET: Final = "budget"  # an exhausted budget
DETECTOR_MANUAL: Final = "manual"  # an operator's block or revocation
DETECTOR_NONE: Final = "none"  # an allow decision
DetectorName = Literal["none", "confidence", "exact_prompt_repeat", "trace_cap", "failure_loop", "velocity", "budget",
                       "manual", "block_session", "revoke_key", "reset_session", "no_progress"]

# -- evidence: what a signal, a decision or an event rests on, weakest first (detector.core.progress) --------------
# structure: the shape of the calls only (the same tool names, similar token counts): never raises a flag alone;
# sizes: content capture off, the same tools bringing back the same amount, answered with as many tokens, to the
# token; fuzzy: content reworded or shifted (SimHash), with nothing new coming back; exact: normalized content
# identity (the same call with the same result, the same normalized error, the same reply to nothing new).
# rate: token or cost velocity, beside the others.
Evidence = Literal["none", "structure", "sizes", "fuzzy", "exact", "rate"]
EVIDENCE_NONE: Final = "none"
EVIDENCE_STRUCTURE: Final = "structure"
EVIDENCE_SIZES: Final = "sizes"
EVIDENCE_FUZZY: Final = "fuzzy"
EVIDENCE_EXACT: Final = "exact"
EVIDENCE_RATE: Final = "rate"
EVIDENCE: Final[tuple[Evidence, ...]] = (EVIDENCE_NONE, EVIDENCE_STRUCTURE, EVIDENCE_SIZES, EVIDENCE_FUZZY,
                                         EVIDENCE_EXACT, EVIDENCE_RATE)

# -- finish reasons that say the model asked for tools, as instrumentations spell them: OpenAI's tool_calls (and its
# legacy function_call), Anthropic's tool_use, the Vercel AI SDK's tool-calls, tool_call. The normalization's response
# structure fingerprint counts them as one (clickhouse/genai_calls_normalized.sql.tmpl spells the same words:
# tests/storage/test_normalization.py holds them equal); the core reads them in detector.core.engine (which steps a
# call completes) and detector.core.scope_scoring (a final answer).
TOOL_CALL_FINISHES: Final[frozenset[str]] = frozenset({"tool_call", "tool_calls", "tool-calls", "function_call",
                                                      "tool_use"})

# -- configuration presets: the defaults (never block), protect (blocking that is safe for honest work) ----------
Preset = Literal["default", "protect"]
PRESET_DEFAULT: Final = "default"
PRESET_PROTECT: Final = "protect"
PRESETS: Final[tuple[Preset, ...]] = (PRESET_DEFAULT, PRESET_PROTECT)

# -- an operator's manual actions: on a session or a key -------------------------------------------------------
ManualScope = Literal["session", "key"]
MANUAL_BLOCK: Final = "block"  # a session blocked
MANUAL_REVOKE: Final = "revoke"  # a key revoked
DETECTOR_BLOCK_SESSION: Final = "block_session"
DETECTOR_REVOKE_KEY: Final = "revoke_key"
DETECTOR_RESET_SESSION: Final = "reset_session"

# -- where a call's session id came from: the attribute's name, or this when it fell back to the trace id ------
SESSION_SOURCE_TRACE: Final = "trace"

# -- kinds of otel.loop_events rows ----------------------------------------------------------------------------
EventKind = Literal["escalation", "rule", "rule_clear", "budget", "manual", "progress"]
AlertEventKind = Literal["escalation", "rule", "budget"]  # the kinds a webhook can subscribe to
EVENT_ESCALATION: Final = "escalation"  # a confidence level changed
EVENT_RULE: Final = "rule"  # a rule tripped
EVENT_RULE_CLEAR: Final = "rule_clear"  # a tripped rule's condition cleared
EVENT_BUDGET: Final = "budget"  # a budget was exhausted
EVENT_MANUAL: Final = "manual"  # an operator's action
# the early warning (detector no_progress) raised (action warn) or lifted (action allow): on the timeline, not sent
# to webhooks (a warn-level signal, often short-lived; a no_progress *rule* trips as a rule does)
EVENT_PROGRESS: Final = "progress"

# -- a budget's action: an alert (event, webhook) or a block ----------------------------------------------------
BudgetAction = Literal["alert", "block"]
BUDGET_ALERT: Final = "alert"
BUDGET_BLOCK: Final = "block"

# -- a rule's action and mode ----------------------------------------------------------------------------------
RuleAction = Literal["notify", "block"]
RULE_NOTIFY: Final = "notify"
RULE_BLOCK: Final = "block"
RuleMode = Literal["dry_run", "enforce"]
MODE_DRY_RUN: Final = "dry_run"
MODE_ENFORCE: Final = "enforce"

# -- the outcome of committing one OTLP export request (detector/ingest/commit.py) --------------------------------
CommitStatus = Literal["committed", "retryable"]
COMMIT_COMMITTED: Final = "committed"  # every accepted span is stored (some may have been rejected, said why)
COMMIT_RETRYABLE: Final = "retryable"  # nothing of the request is acknowledged: the sender should retry

# -- the seven signals, in the spec's order (weights, scores, events and dashboards all use it) ------------------
SignalName = Literal["content_similarity", "tool_call_repetition", "response_stagnation", "error_cycling",
                     "token_velocity", "context_growth", "cost_velocity"]
SIGNAL_NAMES: Final[tuple[SignalName, ...]] = (
    "content_similarity", "tool_call_repetition", "response_stagnation", "error_cycling", "token_velocity",
    "context_growth", "cost_velocity",
)
