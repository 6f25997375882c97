"""A labeled corpus of agent runs for measuring detection quality (``loop-detector eval``).

Every scenario is one agent run (or, for the cross-session family, a few short conversations of one
caller) described call by call: the model call with its usage, its output text and the tools it asked
for, the ``execute_tool`` runs with their results or errors, timings, and optional message content.
:mod:`detector.evaluation.emit` turns each call into real GenAI spans (OpenTelemetry SDK, OTLP/HTTP) and
replays the corpus through the running service.

Labels:

- ``loop`` with ``onset``: the index (0-based, among the scenario's model calls) of the **first wasted
  call**, the first one that repeats earlier behaviour without progress (the first repeat of a tool
  call, the first retry of a failing call, the first regenerated answer, ...). The calls before it are
  a legitimate prefix. A perfect detector could raise a flag at ``onset`` at the earliest.
- ``legit``: a legitimate run, often one that *looks* repetitive (batch jobs, polling, pagination, ...).

Generation is pure and seeded (:func:`generate_corpus`): the same seed gives the same corpus, byte for
byte, independent of the machine and of ``PYTHONHASHSEED``. Timings are relative (gaps and durations in
seconds); the replay anchors each run so that it ends at about "now". Every run stays below 25 model
calls per trace, so the default per-trace call cap (a ceiling, not a loop detector) never decides.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CORPUS_VERSION", "CallSpec", "DEFAULT_SEED", "DEFAULT_VARIANTS", "FAMILIES", "FAMILY_DESCRIPTIONS",
    "GENERATORS", "Gen", "LEGIT_FAMILIES", "LOOP_FAMILIES", "MAX_CALLS_PER_TRACE",
    "RunBuilder", "Scenario", "ToolSpec",
    "gen_ab_cycle", "gen_batch_template", "gen_context_growth", "gen_edit_test_cycle",
    "gen_empty_responses", "gen_error_retry", "gen_exact_tool_repeat", "gen_long_cycle", "gen_long_productive",
    "gen_monologue", "gen_pagination", "gen_parallel_burst", "gen_polling_backoff", "gen_regenerated_text",
    "gen_runaway_cost", "gen_same_greeting", "gen_transient_error", "generate_corpus", "generate_scenario",
    "read_corpus", "validate_scenario", "write_corpus",
    "LOOKALIKE_WITHOUT_CONTENT", "STRUCTURE_ONLY_WITHOUT_CONTENT", "gen_ci_poll_fixed",
    "gen_flaky_backoff", "gen_fresh_id_error", "gen_go_on_progress", "gen_handoff_bounce", "gen_handoff_resolved",
    "gen_page_scroll", "gen_paged_read", "gen_refined_search", "gen_replan_go_on", "gen_restart_loop",
    "gen_restart_recovers", "gen_reworded_search", "gen_shifted_reread",
]

DEFAULT_SEED = 20240611
DEFAULT_VARIANTS = 8  # runs per family; half with content capture on, half off
CORPUS_VERSION = 1
MAX_CALLS_PER_TRACE = 24  # below the default 25-call cap


@dataclass
class ToolSpec:
    """One tool the model asked for, and how its ``execute_tool`` run went."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    result: str = ""  # the tool's output (the next model call sees it); content capture only
    result_tokens: int = 0  # how much the result adds to the context
    error: str | None = None  # error.type when the tool fails
    error_message: str = ""
    duration_s: float = 0.2


@dataclass
class CallSpec:
    """One model call of a run (a ``chat`` span) and the tools it ran afterwards."""

    user_text: str = ""  # a new user / harness message appended before this call
    output_text: str = ""
    tools: list[ToolSpec] = field(default_factory=list)
    input_tokens: int = 500
    output_tokens: int = 60
    model: str = "gpt-4o-mini"
    error: str | None = None  # error.type when the model call itself fails
    error_message: str = ""
    duration_s: float = 1.0
    gap_s: float = 0.5  # idle time between the end of the previous step and this call
    session: int = 0  # which conversation of the scenario (a new trace and session id each)
    run: int = 0  # which agent run of the conversation (a new trace, the same session: a restarted run)
    cost_usd: float | None = None  # gen_ai.usage.cost, as OpenLIT-style instrumentations report it
    max_tokens: int | None = None
    restart: bool = False  # the conversation history is reset before this call (a stateless request)
    keep_output: bool = True  # the reply is appended to the conversation (False: the harness discards it)


@dataclass
class Scenario:
    id: str
    family: str
    label: str  # 'loop' | 'legit'
    onset: int | None
    capture_content: bool
    description: str
    calls: list[CallSpec]
    virtual_key: str = ""
    agent_name: str = "agent"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Scenario:
        calls = []
        for c in data["calls"]:
            c = dict(c)
            c["tools"] = [ToolSpec(**t) for t in c.get("tools", [])]
            calls.append(CallSpec(**c))
        values = {k: v for k, v in data.items() if k != "calls"}
        return cls(**values, calls=calls)

    @property
    def sessions(self) -> list[int]:
        return sorted({c.session for c in self.calls})


# ------------------------------------------------------------------------------------------ families

LOOP_FAMILIES = (
    "exact_tool_repeat",
    "ab_cycle",
    "long_cycle",
    "error_retry",
    "regenerated_text",
    "context_growth",
    "runaway_cost",
    "monologue",
    "empty_responses",
    "reworded_search",
    "shifted_reread",
    "handoff_bounce",
    "replan_go_on",
    "restart_loop",
    "fresh_id_error",
)
LEGIT_FAMILIES = (
    "batch_template",
    "polling_backoff",
    "transient_error",
    "pagination",
    "same_greeting",
    "long_productive",
    "parallel_burst",
    "edit_test_cycle",
    "refined_search",
    "paged_read",
    "handoff_resolved",
    "go_on_progress",
    "restart_recovers",
    "flaky_backoff",
    "ci_poll_fixed",
    "page_scroll",
)
FAMILIES = LOOP_FAMILIES + LEGIT_FAMILIES
# Loop families whose runs without captured content carry nothing but structure: the request varies (a reworded
# query, a reworded reason, a restated plan) and so does every size; nothing tells them from honest work but the
# content, which is not there (docs/detection-quality.md reports them apart).
# Loops whose runs without content carry nothing but structure: a reworded request, every size varying (a query's echo,
# a reply's length, a rewrite's output). Measured with content only in the CI subset (tests/evaluation).
STRUCTURE_ONLY_WITHOUT_CONTENT = frozenset({"reworded_search", "handoff_bounce", "replan_go_on", "runaway_cost"})
# Honest runs that, without content, are the very steps of a loop: a status polled at a fixed interval, a retry through
# a wait tool (the same sizes each time; only the clock tells them apart, and timing is not evidence). With content,
# the status in progress and the growing wait are seen.
LOOKALIKE_WITHOUT_CONTENT = frozenset({"ci_poll_fixed", "flaky_backoff"})

FAMILY_DESCRIPTIONS = {
    "exact_tool_repeat": "the same tool call with the same arguments, again and again",
    "ab_cycle": "two steps alternating: A, B, A, B, ...",
    "long_cycle": "a cycle of 3 or 4 steps repeating",
    "error_retry": "the same failing tool call or request retried, failing the same way",
    "regenerated_text": "the harness rejects the answer; near-identical text regenerated (numbers, times, paraphrase)",
    "context_growth": "the context keeps growing with re-retrieved, already-seen material",
    "runaway_cost": "large contexts re-sent fast: tokens and cost burn without progress",
    "monologue": "the model talks to itself without tools, restating the same plan",
    "empty_responses": "empty model responses, re-prompted again and again",
    "batch_template": "one prompt template over many different documents",
    "polling_backoff": "a status check repeated with exponential backoff until the job is done",
    "transient_error": "a transient error retried once, then the run goes on",
    "pagination": "the same listing call page after page (cursor changes, results differ)",
    "same_greeting": "many short conversations opening with the same greeting",
    "long_productive": "a long run of varied, productive steps",
    "parallel_burst": "bursts of parallel tool calls (same tool, different arguments)",
    "edit_test_cycle": "edit, run the tests, edit, run the tests: the edits and the test output change",
    "reworded_search": "a search reworded again and again, returning the same nothing",
    "shifted_reread": "the same log re-read at shifting offsets, ~9k tokens a read, every window the same lines",
    "handoff_bounce": "two agents handing the task back and forth with reworded reasons",
    "replan_go_on": "no tools: the same plan restated while the user says 'go on'",
    "restart_loop": "a run restarted again and again in new traces of one session, failing the same way",
    "fresh_id_error": "the same call failing the same way, a fresh request id and time in each error",
    "refined_search": "an empty search or two, then a refined one finds the answer",
    "paged_read": "a large log read window after window, each new",
    "handoff_resolved": "a hand-off and a hand-back after progress (the crash confirmed), then the refund",
    "go_on_progress": "no tools: after each 'go on', the next step of a runbook",
    "restart_recovers": "a run failing on a transient error, restarted once, succeeding",
    "flaky_backoff": "a flaky API retried with growing backoff, then it works and the run goes on",
    "ci_poll_fixed": "a CI run polled at a fixed interval, the same answer until it succeeds",
    "page_scroll": "a page scrolled viewport after viewport: the same call, pages of about the same size",
}

# ----------------------------------------------------------------------------------------- text pools

MODULES = ["billing", "auth", "search", "export", "scheduler", "payments", "reports", "invoices", "users",
           "notifications", "cache", "storage", "metrics", "webhooks", "ingest", "parser", "router", "session"]
SUFFIXES = ["service", "client", "models", "utils", "handlers", "config", "views", "tasks", "schema", "api"]
SYMBOLS = ["retry_policy", "load_config", "parse_header", "compute_total", "flush_queue", "render_page",
           "validate_token", "open_connection", "merge_records", "apply_discount", "send_email", "resolve_user",
           "build_index", "rotate_keys", "close_period", "sync_accounts", "format_date", "split_batch"]
VERBS = ["Checking", "Reading", "Looking at", "Inspecting", "Comparing", "Reviewing", "Tracing", "Examining"]
NOUNS = ["the timeout handling", "the retry logic", "how the totals are rounded", "the cache invalidation",
         "the date parsing", "the error mapping", "the pagination cursor", "the permission checks",
         "the batch size", "the connection pool", "the schema migration", "the webhook signature",
         "the currency conversion", "the locale fallback", "the queue consumer", "the index rebuild"]
FINDINGS = ["uses a hard-coded limit of", "rounds half up after", "retries at most", "caches entries for",
            "opens a new connection every", "splits batches of", "logs a warning after", "skips records older than"]
CUSTOMERS = ["Acme Corp", "Globex", "Initech", "Umbrella Ltd", "Stark Industries", "Wayne Enterprises", "Hooli",
             "Vandelay Imports", "Soylent Co", "Tyrell Systems", "Cyberdyne", "Wonka Foods", "Oscorp", "Aperture",
             "Massive Dynamic", "Pied Piper", "Monarch Solutions", "Nakatomi Trading", "Gringotts", "Dunder Mifflin"]
TOPICS = ["refund policy for EU customers", "SLA for enterprise support", "data retention period",
          "password rotation rules", "on-call escalation path", "invoice dispute process",
          "GDPR deletion requests", "API rate limits per plan"]
GREETINGS = ["Hi! I'm the support assistant. How can I help you today?"]
QUESTIONS = ["Where is my order {n}?", "How do I reset my password?", "Can I change the billing address on invoice {n}?",
             "Why was I charged twice in {month}?", "How do I export my data?", "Is there a discount for annual plans?",
             "My login code never arrives, what can I do?", "Can you cancel subscription {n}?",
             "What are your support hours on weekends?", "How do I add a second admin to account {n}?"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October"]


def _path(rng: random.Random) -> str:
    return f"src/{rng.choice(MODULES)}/{rng.choice(SUFFIXES)}.py"


def _sentence(rng: random.Random, k: int) -> str:
    """A varied, specific sentence (distinct texts give unrelated SimHashes)."""
    return (f"{rng.choice(VERBS)} {rng.choice(NOUNS)} in {_path(rng)}: {rng.choice(SYMBOLS)}() "
            f"{rng.choice(FINDINGS)} {rng.randint(2, 900)} items, so step {k + 1} is to "
            f"{rng.choice(['adjust', 'test', 'document', 'refactor', 'verify'])} {rng.choice(SYMBOLS)} next.")


def _code_result(rng: random.Random, path: str) -> str:
    sym = rng.choice(SYMBOLS)
    return (f"# {path}\nimport {rng.choice(MODULES)}\n\ndef {sym}(value, limit={rng.randint(2, 500)}):\n"
            f"    if value > limit:\n        raise ValueError('{rng.choice(NOUNS)} exceeded at {rng.randint(10, 99)}')\n"
            f"    return {rng.choice(SYMBOLS)}(value) * {rng.randint(2, 9)}\n")


def _productive_tool(rng: random.Random, k: int) -> ToolSpec:
    """A tool call with fresh arguments and a fresh result."""
    kind = rng.choice(["read_file", "grep", "list_dir", "run_command", "search_docs", "edit_file", "query_db"])
    path = _path(rng)
    if kind == "read_file":
        return ToolSpec(kind, {"path": path}, _code_result(rng, path), rng.randint(250, 1400), duration_s=0.05)
    if kind == "grep":
        sym = rng.choice(SYMBOLS)
        hits = "\n".join(f"{_path(rng)}:{rng.randint(1, 400)}: {sym}(" for _ in range(rng.randint(2, 6)))
        return ToolSpec(kind, {"pattern": sym, "path": "src/"}, hits, rng.randint(60, 300), duration_s=0.3)
    if kind == "list_dir":
        d = f"src/{rng.choice(MODULES)}"
        files = ", ".join(f"{rng.choice(SUFFIXES)}_{rng.randint(1, 99)}.py" for _ in range(rng.randint(3, 8)))
        return ToolSpec(kind, {"path": d}, f"{d}: {files}", rng.randint(40, 160), duration_s=0.05)
    if kind == "run_command":
        cmd = rng.choice(["pytest -x tests/test_", "ruff check src/", "mypy src/", "python -m build "]) + \
            rng.choice(MODULES)
        out = f"$ {cmd}\n{rng.randint(3, 120)} passed, {rng.randint(0, 4)} warnings in {rng.randint(1, 30)}.{rng.randint(0, 9)}s"
        return ToolSpec(kind, {"cmd": cmd}, out, rng.randint(80, 600), duration_s=rng.uniform(1.0, 6.0))
    if kind == "search_docs":
        q = f"{rng.choice(NOUNS)} {rng.choice(SYMBOLS)}"
        return ToolSpec(kind, {"query": q}, f"Top result for '{q}': section {rng.randint(1, 40)}.{rng.randint(1, 9)} "
                        f"explains {rng.choice(NOUNS)} with an example using {rng.choice(SYMBOLS)}.",
                        rng.randint(200, 900), duration_s=0.8)
    if kind == "edit_file":
        return ToolSpec(kind, {"path": path, "line": rng.randint(1, 400), "new": f"{rng.choice(SYMBOLS)}(x, "
                        f"{rng.randint(1, 99)})"}, f"Edited {path}: 1 line changed.", 20, duration_s=0.05)
    table = rng.choice(["orders", "users", "invoices", "events", "payments"])
    sql = f"SELECT count(*) FROM {table} WHERE day = '2024-0{rng.randint(1, 9)}-{rng.randint(10, 28)}'"
    return ToolSpec(kind, {"sql": sql}, f"count\n{rng.randint(10, 99999)}", 30, duration_s=0.4)


class RunBuilder:
    """Builds one run call by call, keeping the context size (input tokens) consistent: each call's input
    is the system prompt plus everything said so far."""

    def __init__(self, rng: random.Random, *, model: str = "gpt-4o-mini", system_tokens: int | None = None,
                 task: str = "", task_tokens: int | None = None, tokens_per_second: float = 70.0) -> None:
        self.rng = rng
        self.model = model
        self.calls: list[CallSpec] = []
        self.system_tokens = system_tokens if system_tokens is not None else rng.randint(700, 2500)
        self.context = self.system_tokens
        self.pending_user = task
        self.pending_user_tokens = task_tokens if task_tokens is not None else (_tokens(task) if task else 0)
        self.tokens_per_second = tokens_per_second

    def call(self, *, output_text: str = "", tools: Iterable[ToolSpec] = (), output_tokens: int | None = None,
             user_text: str | None = None, user_tokens: int | None = None, error: str | None = None,
             error_message: str = "", gap_s: float | None = None, session: int = 0, cost_usd: float | None = None,
             max_tokens: int | None = None, restart: bool = False, model: str | None = None,
             keep_output: bool = True, run: int = 0) -> CallSpec:
        rng = self.rng
        tools = list(tools)
        if restart:
            self.context = self.system_tokens
        if user_text is not None:
            self.pending_user, self.pending_user_tokens = user_text, user_tokens or _tokens(user_text)
        self.context += self.pending_user_tokens
        if output_tokens is None:
            output_tokens = _tokens(output_text) + 18 * len(tools) if not error else 0
        if error:
            output_tokens = 0
        duration = 0.35 + output_tokens / self.tokens_per_second + self.context / 40_000 + rng.uniform(0.0, 0.3)
        spec = CallSpec(
            user_text=self.pending_user, output_text="" if error else output_text, tools=[] if error else tools,
            input_tokens=self.context, output_tokens=output_tokens, model=model or self.model, error=error,
            error_message=error_message, duration_s=round(duration, 3),
            gap_s=round(gap_s if gap_s is not None else rng.uniform(0.05, 0.6), 3), session=session,
            cost_usd=cost_usd, max_tokens=max_tokens, restart=restart, keep_output=keep_output, run=run,
        )
        self.calls.append(spec)
        self.pending_user, self.pending_user_tokens = "", 0
        if not error:
            if keep_output:
                self.context += output_tokens
            self.context += sum(t.result_tokens or _tokens(t.result or t.error_message) for t in spec.tools)
        return spec

    def productive(self, n: int, *, first_k: int = 0) -> None:
        for k in range(n):
            tool = _productive_tool(self.rng, first_k + k)
            self.call(output_text=_sentence(self.rng, first_k + k), tools=[tool], gap_s=self.rng.uniform(0.1, 1.5))

    def _last_tools(self) -> list[ToolSpec]:
        return self.calls[-1].tools if self.calls else []

    def tool_gap(self, extra: tuple[float, float] = (0.1, 1.2)) -> float:
        """Idle time before the next call, after the previous step's tools ended (the replay starts counting the gap
        there: ``CallSpec.gap_s``), so a tool's own duration is not counted twice."""
        return self.rng.uniform(*extra)


def _tokens(text: str) -> int:
    return max(1, round(len(text) / 4))


def _jitter(rng: random.Random, n: int, spread: int = 2) -> int:
    return max(1, n + rng.randint(-spread, spread))


# ---------------------------------------------------------------------------------------- generators
#
# Each generator returns (calls, onset, description). ``v`` is the variant number: it selects the
# sub-pattern, so every family covers its variations whatever the seed.

Gen = Callable[[random.Random, int], tuple[list[CallSpec], int | None, str]]


def _coding_task(rng: random.Random) -> str:
    return (f"The nightly job for {rng.choice(CUSTOMERS)} fails in {rng.choice(MODULES)}. Find the cause in "
            f"{_path(rng)} and fix it; keep the tests green.")


def gen_exact_tool_repeat(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    b = RunBuilder(rng, task=_coding_task(rng))
    b.productive(rng.randint(3, 8))
    path = _path(rng)
    parallel = v % 4 == 3
    stamped = v % 4 == 1
    base = [ToolSpec("read_file", {"path": path}, _code_result(rng, path), rng.randint(300, 1200), duration_s=0.05)]
    if parallel:
        base.append(ToolSpec("grep", {"pattern": rng.choice(SYMBOLS), "path": "src/"},
                             f"{path}:{rng.randint(1, 300)}: match", 40, duration_s=0.3))
    replies = [f"Let me read {path} to find where the limit is set.",
               f"I'll open {path} again to check where the limit is set.",
               f"Let me look at {path} to see where the limit is set."]
    onset = len(b.calls) + 1
    out_tok = rng.randint(25, 70)
    for i in range(rng.randint(10, 13)):
        tools = []
        for t in base:
            result = t.result + (f"\n# read at 10:{14 + i:02d}:{rng.randint(10, 59)}" if stamped else "")
            tools.append(ToolSpec(t.name, dict(t.arguments), result, t.result_tokens, duration_s=t.duration_s))
        text = "" if v % 4 == 2 else replies[i % len(replies)] if v % 4 == 0 else replies[0]
        b.call(output_text=text, tools=tools, output_tokens=_jitter(rng, out_tok), gap_s=b.tool_gap())
    return b.calls, onset, f"read_file({path}) repeated" + (" with a parallel grep" if parallel else "")


def gen_ab_cycle(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    b = RunBuilder(rng, task=_coding_task(rng))
    b.productive(rng.randint(3, 8))
    path = _path(rng)
    cmd = f"pytest tests/test_{rng.choice(MODULES)}.py -x"
    fail = f"FAILED tests/test_x.py::test_{rng.choice(SYMBOLS)} - AssertionError: {rng.randint(2, 99)} != {rng.randint(100, 999)}"
    a = ToolSpec("read_file", {"path": path}, _code_result(rng, path), rng.randint(300, 900), duration_s=0.05)
    bt = ToolSpec("run_command", {"cmd": cmd}, f"$ {cmd}\n{fail}\n1 failed, {rng.randint(10, 80)} passed", 120,
                  duration_s=rng.uniform(2.0, 5.0))
    if v % 2:  # B is a query instead of a test run
        bt = ToolSpec("query_db", {"sql": "SELECT status FROM jobs WHERE id = 4711"}, "status\nfailed", 20,
                      duration_s=0.3)
    texts = [f"Let me check {path} again.", "Now let me run that again to see the failure."]
    out = [rng.randint(20, 60), rng.randint(20, 60)]
    onset = len(b.calls) + 2
    for i in range(rng.randint(11, 14)):
        t = (a, bt)[i % 2]
        b.call(output_text=texts[i % 2] if v % 4 < 2 else "", output_tokens=_jitter(rng, out[i % 2]),
               tools=[ToolSpec(t.name, dict(t.arguments), t.result, t.result_tokens, duration_s=t.duration_s)],
               gap_s=b.tool_gap())
    return b.calls, onset, "read_file / run the same command, alternating"


def gen_long_cycle(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    b = RunBuilder(rng, task=_coding_task(rng))
    b.productive(rng.randint(2, 5))
    period = 3 if v % 2 == 0 else 4
    steps = []
    for _ in range(period):
        t = _productive_tool(rng, 0)
        steps.append((t, _sentence(rng, 0), rng.randint(25, 90)))
    onset = len(b.calls) + period
    n = min(MAX_CALLS_PER_TRACE - len(b.calls), period * 4 + rng.randint(0, 2))
    for i in range(n):
        t, text, out = steps[i % period]
        b.call(output_text=text if v % 4 < 2 else "", output_tokens=_jitter(rng, out),
               tools=[ToolSpec(t.name, dict(t.arguments), t.result, t.result_tokens, duration_s=t.duration_s)],
               gap_s=b.tool_gap())
    return b.calls, onset, f"a {period}-step cycle of tool calls"


def gen_error_retry(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    b = RunBuilder(rng, task=_coding_task(rng))
    b.productive(rng.randint(3, 7))
    kind = v % 4
    onset = len(b.calls) + 1
    n = rng.randint(9, 12)
    if kind in (0, 1):  # the same tool call failing the same way, retried by the model
        cmd = rng.choice(["npm install", "pip install -e .", "make build", "docker compose up -d"])
        msg = rng.choice([f"EACCES: permission denied, mkdir '/usr/lib/node_modules/{rng.choice(MODULES)}'",
                          f"Connection refused: localhost:{rng.randint(3000, 9999)}",
                          f"No space left on device: /var/lib/{rng.choice(MODULES)}"])
        text = rng.choice(["The command failed, let me try again.", "That failed; retrying the command."])
        for i in range(n):
            args = {"cmd": cmd} if kind == 0 else {"cmd": cmd, "attempt": i + 1}  # kind 1: a counter in the args
            b.call(output_text=text, output_tokens=_jitter(rng, 30),
                   tools=[ToolSpec("run_command", args, "", 40, error="CommandError", error_message=msg,
                                   duration_s=rng.uniform(0.5, 2.0))], gap_s=b.tool_gap())
        return b.calls, onset, f"run_command({cmd}) failing with the same error, retried"
    if kind == 2:  # the model call itself fails and the harness resends the same request at once
        err = rng.choice(["rate_limit_exceeded", "server_error", "context_length_exceeded"])
        msg = {"rate_limit_exceeded": "Rate limit reached for requests", "server_error": "The server had an error "
               "while processing your request", "context_length_exceeded": "maximum context length is 128000 tokens"}[err]
        b.call(output_text=_sentence(rng, 99), tools=[_productive_tool(rng, 99)], gap_s=b.tool_gap())
        onset = len(b.calls) + 1
        for _ in range(n):
            b.call(error=err, error_message=msg, gap_s=rng.uniform(0.2, 1.0))
        return b.calls, onset, f"the same request failing with {err}, resent"
    # kind 3: a tool failing with the same error while the model varies the arguments a little
    url = f"https://api.{rng.choice(MODULES)}.example.com/v1/{rng.choice(MODULES)}"
    for i in range(n):
        b.call(output_text=rng.choice(["Retrying the request with a different timeout.", "Let me try the request again."]),
               output_tokens=_jitter(rng, 35),
               tools=[ToolSpec("http_get", {"url": url, "timeout": 5 * (i % 3 + 1)}, "", 30, error="HTTPError",
                               error_message=f"503 Service Unavailable for url: {url}", duration_s=0.8)],
               gap_s=b.tool_gap())
    return b.calls, onset, "http_get failing with 503, retried with varying timeouts"


def _report(rng: random.Random, ts: str, n1: int, n2: int, amount: float, paraphrase: int) -> str:
    openers = ["Here is the daily summary", "Here's the daily summary", "Below is the daily summary",
               "This is the daily summary"]
    closers = ["The failed orders need a manual check before the nightly export can run again.",
               "The failed orders need a manual review before the nightly export can run again.",
               "The failed orders need to be checked by hand before the nightly export can run again."]
    return (f"{openers[paraphrase % len(openers)]} as of {ts}: {n1:,} orders processed, {n2} failed, revenue "
            f"{amount:,.2f} USD, average basket {amount / max(n1, 1):.2f} USD. {closers[paraphrase % len(closers)]} "
            f"No other anomalies were found in the payment, shipping or refund logs for this period.")


def gen_regenerated_text(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    task = (f"Write the daily sales summary for {rng.choice(CUSTOMERS)} as JSON with the fields summary, orders, "
            "failed and revenue.")
    b = RunBuilder(rng, model="gpt-4o", task=task)
    b.productive(rng.randint(2, 6))
    reject = rng.choice(["Validation failed: output is not valid JSON. Return only the JSON object.",
                         "The answer did not match the required schema. Try again and return only JSON."])
    n1, n2, amount = rng.randint(900, 5000), rng.randint(3, 40), rng.uniform(20_000, 90_000)
    first = _report(rng, "2024-05-01 10:42:13", n1, n2, amount, 0)
    b.call(output_text=first, gap_s=b.tool_gap())
    onset = len(b.calls)
    stateless = v % 2 == 1  # the harness resends the original request with the rejection (no history)
    for i in range(rng.randint(9, 12)):
        ts = f"2024-05-01 10:{43 + i:02d}:{rng.randint(10, 59)}"
        text = _report(rng, ts, n1 + rng.randint(0, 9), n2, amount + rng.uniform(0, 300), i if v % 4 >= 2 else 0)
        b.call(output_text=text, user_text=f"{task}\n{reject}" if stateless else reject, restart=stateless,
               output_tokens=_jitter(rng, _tokens(text), 3), gap_s=rng.uniform(0.2, 1.0))
    return b.calls, onset, "rejected answer regenerated with new numbers / timestamps" + (
        " and small paraphrases" if v % 4 >= 2 else "")


def gen_context_growth(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    topic = rng.choice(TOPICS)
    b = RunBuilder(rng, task=f"What is our {topic}? Answer from the policy documents and cite the section.")
    b.productive(rng.randint(2, 5))
    docs = "\n".join(f"[doc {rng.randint(100, 999)}] {rng.choice(CUSTOMERS)} {rng.choice(NOUNS)} handbook, section "
                     f"{rng.randint(1, 20)}: {_sentence(rng, 0)}" for _ in range(4))
    size = rng.randint(1500, 3500)
    queries = [topic, f"{topic} policy", f"our {topic}", f"{topic} rules", f"{topic} document", f"latest {topic}"]
    b.call(output_text=f"Let me search the knowledge base for the {topic}.",
           tools=[ToolSpec("search_kb", {"query": queries[0]}, docs, size, duration_s=0.6)], gap_s=b.tool_gap())
    onset = len(b.calls)
    for i in range(rng.randint(9, 12)):
        q = queries[(i + 1) % len(queries)] if v % 2 == 0 else queries[0]
        text = rng.choice([f"The retrieved documents do not mention the {topic}; let me search again.",
                           f"I still cannot find the {topic} in these documents; searching again."])
        b.call(output_text=text if v % 4 < 2 else f"Searching for the {topic} once more.",
               output_tokens=_jitter(rng, 28), tools=[ToolSpec("search_kb", {"query": q}, docs, size, duration_s=0.6)],
               gap_s=b.tool_gap())
    return b.calls, onset, "the same documents re-retrieved and appended" + (
        " (query reworded)" if v % 2 == 0 else "")


def gen_runaway_cost(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    model = "gpt-4o"
    price_in, price_out = 2.5, 10.0
    b = RunBuilder(rng, model=model, system_tokens=rng.randint(30_000, 60_000), task=_coding_task(rng),
                   tokens_per_second=90)
    cost = v % 2 == 0  # OpenLIT-style gen_ai.usage.cost on the spans

    def price(c: CallSpec) -> None:
        if cost:
            c.cost_usd = round((c.input_tokens * price_in + c.output_tokens * price_out) / 1e6, 6)

    for _ in range(rng.randint(2, 5)):
        price(b.call(output_text=_sentence(rng, 1), tools=[_productive_tool(rng, 1)], gap_s=b.tool_gap()))
    path = _path(rng)
    body = _code_result(rng, path) * 6
    onset = len(b.calls) + 1
    out_tok = rng.randint(1800, 3500)
    for i in range(rng.randint(10, 13)):
        # the whole module rewritten again and again, a cosmetic change each time; the same "File written."
        content = body.replace("limit=", f"limit_{i % 3}=")
        spec = b.call(output_text=f"I've rewritten {path} to fix the import order and the limit handling.",
                      tools=[ToolSpec("write_file", {"path": path, "content": content}, "File written.", 5,
                                      duration_s=0.05)],
                      output_tokens=_jitter(rng, out_tok, 40), gap_s=rng.uniform(0.1, 0.5))
        price(spec)
    return b.calls, onset, f"{path} rewritten over and over with a {b.system_tokens // 1000}k context"


def gen_monologue(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    b = RunBuilder(rng, task=f"Plan the migration of the {rng.choice(MODULES)} service to the new "
                   f"{rng.choice(MODULES)} cluster.")
    for k in range(rng.randint(2, 5)):  # a productive planning conversation
        b.call(output_text=_sentence(rng, k) + " " + _sentence(rng, k + 1), user_text=_sentence(rng, k + 7),
               gap_s=rng.uniform(3.0, 15.0))
    plan = [f"Let me think about this step by step. First I need to understand how the {rng.choice(MODULES)} "
            f"service stores its state, then check which {rng.choice(NOUNS)} depend on it, and only then decide "
            "the order of the migration steps.",
            f"Let me think about this carefully. First I need to understand how the {rng.choice(MODULES)} "
            f"service stores its state, then check which {rng.choice(NOUNS)} depend on it, and only then decide "
            "on the order of the migration steps."]
    b.call(output_text=plan[0], user_text="Continue.", gap_s=rng.uniform(0.2, 1.0))
    onset = len(b.calls)
    for i in range(rng.randint(9, 12)):
        text = plan[i % 2] if v % 2 else plan[0]
        b.call(output_text=text, user_text="Continue." if v % 4 < 2 else None, output_tokens=_jitter(rng, _tokens(text)),
               gap_s=rng.uniform(0.2, 1.0))
    return b.calls, onset, "the model restates the same plan, prompted to continue" if v % 4 < 2 else \
        "the model restates the same plan to itself"


def gen_empty_responses(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    b = RunBuilder(rng, task=_coding_task(rng))
    b.productive(rng.randint(3, 8))
    b.call(output_text="", output_tokens=rng.randint(0, 1), gap_s=b.tool_gap())
    onset = len(b.calls)
    nudge = rng.choice(["Please continue with the task.", "You returned an empty response. Continue."])
    b.calls[-1].keep_output = v % 2 == 1
    for _ in range(rng.randint(9, 12)):
        # re-prompted (the empty reply stays in the conversation), or resent as is (the harness drops it)
        b.call(output_text="", output_tokens=rng.randint(0, 1), user_text=nudge if v % 2 == 0 else None,
               user_tokens=_tokens(nudge), gap_s=rng.uniform(0.2, 1.2), keep_output=v % 2 == 0)
    return b.calls, onset, "empty responses, re-prompted" if v % 2 == 0 else "empty responses, resent as is"


# ------------------------------------------------------------------------- variation without progress
#
# The loops of issue 15's workloads: the request varies a little while nothing new comes back. Each has an
# honest look-alike below (``*_refined``, ``paged_read``, ``handoff_resolved``, ``go_on_progress``,
# ``restart_recovers``, ``flaky_backoff``).

SEARCH_TOPICS = [
    ("rotate the API signing key for the EU tenant without downtime",
     ["rotate API signing key EU tenant without downtime", "how to rotate signing key zero downtime",
      "EU tenant key rotation procedure", "API key rotation no downtime Europe", "signing key rollover eu tenant",
      "replace API signing secret without outage", "key rotation runbook EU", "change tenant signing key safely",
      "rotate credentials signing EU region", "api signing key rotation steps", "rolling signing key update"]),
    ("move a customer's data to the Frankfurt region",
     ["migrate customer data to Frankfurt region", "data residency move eu-central", "change tenant region Frankfurt",
      "relocate account data Germany region", "region migration procedure eu-central-1", "move tenant to Frankfurt",
      "customer data region transfer", "switch data region to Germany", "eu-central data migration steps",
      "tenant relocation Frankfurt", "data move between regions"]),
    ("set up SSO with Okta for a workspace",
     ["configure Okta SSO workspace", "Okta single sign-on setup", "SAML Okta integration steps",
      "enable SSO Okta tenant", "workspace SSO configuration Okta", "Okta SAML app settings",
      "set up single sign on", "Okta login integration guide", "SSO provider Okta configure",
      "identity provider Okta workspace", "Okta SAML metadata upload"]),
]


def _no_results(rng: random.Random, query: str, v: int) -> str:
    """A search that found nothing, echoing the query back (with a timing that varies), as search APIs answer."""
    if v % 2 == 0:
        return json.dumps({"query": query, "total": 0, "took_ms": rng.randint(5, 40), "results": []})
    return f"No results found for '{query}' ({rng.randint(5, 40)} ms)."


def gen_reworded_search(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    goal, queries = SEARCH_TOPICS[v % len(SEARCH_TOPICS)]
    b = RunBuilder(rng, task=f"How do I {goal}? Look it up in the knowledge base.")
    b.productive(rng.randint(1, 3))
    b.call(output_text="Let me search the knowledge base.", output_tokens=_jitter(rng, 30),
           tools=[ToolSpec("search_docs", {"query": queries[0]}, _no_results(rng, queries[0], v),
                           _tokens(queries[0]) + 18, duration_s=rng.uniform(0.2, 0.6))], gap_s=b.tool_gap())
    onset = len(b.calls)
    for i in range(1, rng.randint(9, 11)):
        q = queries[i % len(queries)]
        text = "No results. Let me try a different wording." if v % 4 < 2 else rng.choice(
            [f"Nothing for that; trying '{q}'.", "Still nothing, rephrasing the search.", f"Let me search for {q}."])
        b.call(output_text=text, output_tokens=_jitter(rng, 24 + _tokens(q)),
               tools=[ToolSpec("search_docs", {"query": q}, _no_results(rng, q, v), _tokens(q) + 18,
                               duration_s=rng.uniform(0.2, 0.6))], gap_s=b.tool_gap())
    return b.calls, onset, "a search reworded again and again, the same nothing back"


def _log_lines(rng: random.Random, start: int, n: int, base_minute: int) -> str:
    """``n`` lines of a repetitive log from line ``start``: heartbeats and successful batches, only the times and
    line numbers change."""
    kinds = ["DEBUG exporter.pool: worker idle, waiting for next batch (timeout=30s)",
             "INFO exporter.batch: batch exported, 500 rows, 0 errors",
             "DEBUG exporter.heartbeat: alive"]
    lines = []
    for i in range(start, start + n):
        minute, second = divmod(base_minute * 60 + i * 3, 60)
        lines.append(f"{i + 1:>5}  2024-11-02T01:{minute % 60:02d}:{second:02d}Z {kinds[i % 3]}")
    return "\n".join(lines)


def gen_shifted_reread(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    path = f"logs/export-2024-11-{rng.randint(10, 28)}.log"
    b = RunBuilder(rng, task=f"The nightly export crashed. Find the root cause in {path}.")
    b.productive(rng.randint(1, 3))
    window = 60  # lines shown (the result's size in tokens is that of a 400-line read)
    tokens = rng.randint(8_500, 9_800)
    b.call(output_text="Let me read the export log.", output_tokens=_jitter(rng, 30),
           tools=[ToolSpec("read_file", {"path": path, "offset": 0, "limit": 400}, _log_lines(rng, 0, window, 0),
                           tokens, duration_s=0.1)], gap_s=b.tool_gap())
    onset = len(b.calls)
    offsets = [400, 420, 410, 440, 430, 460, 450, 480, 470]
    for i in range(rng.randint(6, 8)):
        off = offsets[i % len(offsets)]
        text = "Only heartbeats and successful batches so far; reading the log around there again." if v % 2 == 0 \
            else f"Reading lines {off}-{off + 400} again."
        b.call(output_text=text, output_tokens=_jitter(rng, 34),
               tools=[ToolSpec("read_file", {"path": path, "offset": off, "limit": 400},
                               _log_lines(rng, off, window, off // 20), tokens, duration_s=0.1)], gap_s=b.tool_gap())
    return b.calls, onset, f"{path} re-read at shifting offsets, every window the same heartbeat lines"


TO_SPECIALIST = ["This looks like the app crashed during checkout, a technical issue. Transferring you to technical "
                 "support.", "The duplicate charge seems to come from the crash, so technical support should look "
                 "first. Handing over.", "Since the charge was caused by an app failure, this belongs with our "
                 "technical team. Transferring.", "This needs someone who can investigate the crash. Passing you to "
                 "technical support."]
TO_BILLING = ["Duplicate charges and refunds are handled by billing, not technical support. Transferring you back.",
              "Refunding a charge is a billing matter. Let me hand you over to billing.",
              "I can't issue refunds from technical support; billing handles payment corrections. Transferring.",
              "This is about money charged twice, which is billing's area. Handing back to billing."]


def gen_handoff_bounce(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    order = rng.randint(10_000, 99_999)
    b = RunBuilder(rng, task=f"I was charged twice for order {order} after the app crashed at checkout. Fix it.")
    onset = 2  # billing hands over, support hands back; billing hands over again: nothing has changed
    for i in range(rng.randint(9, 11)):
        to_support = i % 2 == 0
        reasons = TO_SPECIALIST if to_support else TO_BILLING
        text = reasons[(i // 2) % len(reasons)]
        target = "technical_support" if to_support else "billing"
        b.call(output_text=text, output_tokens=_jitter(rng, _tokens(text) + 12),
               tools=[ToolSpec(f"transfer_to_{target}", {}, json.dumps({"assistant": target}), 12, duration_s=0.01)],
               gap_s=b.tool_gap((0.05, 0.3)))
    return b.calls, onset, "two agents hand the customer back and forth with reworded reasons"


PLANS = [
    "Here is the plan for the Postgres 12 to 16 migration: 1. provision a 16 replica cluster; 2. set up logical "
    "replication from 12; 3. validate data and run the test suite against 16; 4. cut over in a short window by "
    "switching connection strings; 5. keep 12 as a fallback for a week.",
    "Sure. The migration plan: 1. provision a new Postgres 16 cluster as a replica; 2. configure logical "
    "replication from 12 to 16; 3. validate the data and run the app's tests on 16; 4. plan a brief cut-over and "
    "switch the connection strings; 5. keep 12 around as a fallback for a week.",
    "Of course. To migrate from Postgres 12 to 16: 1. provision the 16 cluster (replica); 2. set up logical "
    "replication 12 -> 16; 3. validate data, run the test suite on 16; 4. schedule a short cut-over, switch "
    "connection strings; 5. keep 12 as a fallback for one week.",
]
GO_ON = ["go on", "ok, go on", "continue", "go on please", "yes, go on", "ok continue", "please continue"]


def gen_replan_go_on(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    b = RunBuilder(rng, system_tokens=rng.randint(300, 900))
    b.call(output_text=PLANS[0], user_text="Plan the migration of our Postgres 12 cluster to Postgres 16 with minimal "
           "downtime.", output_tokens=_jitter(rng, _tokens(PLANS[0])), gap_s=rng.uniform(1.0, 5.0))
    onset = len(b.calls)
    for i in range(rng.randint(7, 9)):
        plan = PLANS[(i + 1) % len(PLANS)] if v % 2 == 0 else PLANS[0]
        b.call(output_text=plan, user_text=GO_ON[i % len(GO_ON)], output_tokens=_jitter(rng, _tokens(plan)),
               gap_s=rng.uniform(2.0, 8.0))
    return b.calls, onset, "the same plan restated while the user says 'go on'"


def _refund_run(b: RunBuilder, rng: random.Random, run: int, order: str, outcome: str) -> None:
    """One run of a refund job (a new trace): look the order up, issue the refund, report."""
    task = f"Process refund request RR-{order} for order {order}."
    b.call(output_text=f"Looking up order {order}.", user_text=task, restart=True, run=run, output_tokens=_jitter(rng, 30),
           tools=[ToolSpec("lookup_order", {"order_id": order}, json.dumps({"order_id": order, "total": 129.0,
                  "payment": {"method": "card", "exp": "10/24"}}), 60, duration_s=0.2)], gap_s=rng.uniform(0.5, 2.0))
    rid = f"req_{rng.getrandbits(64):016x}"
    refund = ToolSpec("issue_refund", {"order_id": order, "amount": 129.0}, "", 40, duration_s=0.4)
    if outcome == "expired":
        refund.error, refund.error_message = "PaymentError", (f"payment-gateway 402: card_expired: the card on file "
                                                              f"expired 10/24 (request_id={rid})")
    elif outcome == "transient":
        refund.error, refund.error_message = "PaymentError", (f"payment-gateway 503: temporarily unavailable, try "
                                                              f"again later (request_id={rid})")
    else:
        refund.result = json.dumps({"refund_id": f"re_{rng.getrandbits(32):08x}", "status": "succeeded"})
    b.call(output_text="The refund is approved; issuing 129.00 EUR.", run=run, output_tokens=_jitter(rng, 30),
           tools=[refund], gap_s=b.tool_gap())
    report = (f"Refund RR-{order} issued." if outcome == "ok" else
              f"I could not issue the refund: {refund.error_message.split(' (request_id')[0]}. The job failed.")
    b.call(output_text=report, run=run, output_tokens=_jitter(rng, _tokens(report)), gap_s=b.tool_gap())


def gen_restart_loop(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    order = str(rng.randint(10_000, 99_999))
    b = RunBuilder(rng, system_tokens=rng.randint(400, 900))
    for run in range(5):  # the job restarted in a new trace of the same session, failing the same way
        _refund_run(b, rng, run, order, "expired")
    return b.calls, 3, "a refund job restarted five times (new traces, one session), the same card_expired each time"


def gen_fresh_id_error(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    b = RunBuilder(rng, task=f"Create the November invoice for customer cus_{rng.randint(1000, 9999)} and email it.")
    b.productive(rng.randint(1, 4))
    onset = len(b.calls) + 1
    args = {"customer_id": f"cus_{rng.randint(1000, 9999)}", "amount_cents": 12900, "currency": "EUR"}
    for i in range(rng.randint(9, 11)):
        rid = f"req_{rng.getrandbits(80):020x}"
        at = f"2024-11-04T10:{25 + i // 6:02d}:{(i * 8) % 60:02d}Z"
        text = "Creating the invoice." if i == 0 else rng.choice(["The billing API failed; retrying.",
                                                                   "Retrying the invoice creation."])
        b.call(output_text=text, output_tokens=_jitter(rng, 28), gap_s=b.tool_gap((0.05, 0.5)),
               tools=[ToolSpec("create_invoice", dict(args), "", 50, error="BadGateway",
                               error_message=f"502 Bad Gateway from billing-api (request_id={rid}, at={at})",
                               duration_s=rng.uniform(0.1, 0.4))])
    return b.calls, onset, "the same call failing with the same 502, a fresh request id and time in each error"


# --------------------------------------------------------------------------------- legitimate look-alikes


def _invoice(rng: random.Random) -> tuple[str, str]:
    cust = rng.choice(CUSTOMERS)
    num = f"INV-2024-{rng.randint(1000, 9999)}"
    lines = "; ".join(f"{rng.randint(1, 40)} x {rng.choice(SYMBOLS).replace('_', ' ')} at {rng.uniform(3, 400):.2f}"
                      for _ in range(rng.randint(2, 9)))
    doc = (f"Invoice {num} from {cust}, issued {rng.randint(1, 28)} {rng.choice(MONTHS)} 2024, due in "
           f"{rng.choice([15, 30, 45, 60])} days. Lines: {lines}. Bank {rng.randint(10**7, 10**8)}.")
    total = rng.uniform(100, 40_000)
    out = json.dumps({"invoice": num, "customer": cust, "total": round(total, 2), "currency": "EUR"})
    return doc, out


def gen_batch_template(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    template = "Extract the invoice number, the customer, the total and the currency as JSON from this document:\n"
    b = RunBuilder(rng, system_tokens=rng.randint(300, 900))
    n = rng.randint(14, 22)
    with_tools = v % 2 == 1
    for _ in range(n):
        doc, out = _invoice(rng)
        doc_tokens = rng.randint(400, 3000)
        if with_tools:  # an agent: read the next document, then answer; one conversation per document
            doc_id = f"doc-{rng.randint(10_000, 99_999)}"
            b.call(output_text="", user_text=f"{template}{doc_id}", user_tokens=40, restart=True, output_tokens=22,
                   tools=[ToolSpec("read_document", {"id": doc_id}, doc, doc_tokens, duration_s=0.2)],
                   gap_s=rng.uniform(0.1, 0.8))
            b.call(output_text=out, output_tokens=_tokens(out) + rng.randint(0, 6), gap_s=0.25)
        else:  # stateless: the template with the document inline
            b.call(output_text=out, user_text=template + doc, user_tokens=doc_tokens, restart=True,
                   output_tokens=_tokens(out) + rng.randint(0, 6), gap_s=rng.uniform(0.1, 0.8))
    calls = b.calls[:MAX_CALLS_PER_TRACE]
    return calls, None, "invoice extraction over different documents" + (" with a read_document tool" if with_tools else "")


def gen_polling_backoff(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    b = RunBuilder(rng, task=f"Export the {rng.choice(MODULES)} data for {rng.choice(CUSTOMERS)} and send me the link.")
    b.productive(rng.randint(1, 4))
    job = f"job-{rng.randint(1000, 9999)}"
    b.call(output_text="Starting the export job.", tools=[ToolSpec("start_export", {"dataset": rng.choice(MODULES)},
           f'{{"job_id": "{job}", "status": "queued"}}', 20)], gap_s=b.tool_gap())
    wait = rng.choice([1.0, 2.0, 3.0])
    factor = rng.choice([2.0, 2.0, 1.6])
    n = rng.randint(6, 9)
    for i in range(n):
        done = i == n - 1
        status = "done" if done else "running"
        text = "" if v % 2 else "The export is still running; I'll check again shortly."
        b.call(output_text=text, output_tokens=rng.randint(18, 22),
               tools=[ToolSpec("get_job_status", {"job_id": job}, f'{{"job_id": "{job}", "status": "{status}"'
                               + (f', "url": "https://files.example.com/{job}.csv"}}' if done else "}"), 20)],
               gap_s=wait + 0.2)
        wait *= factor
    b.call(output_text=f"The export is ready: https://files.example.com/{job}.csv", gap_s=b.tool_gap())
    return b.calls, None, f"status polled with backoff x{factor}"


def gen_transient_error(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    b = RunBuilder(rng, task=_coding_task(rng))
    b.productive(rng.randint(4, 8))
    if v % 2 == 0:  # provider error, the same request retried once after a short wait
        b.call(error=rng.choice(["rate_limit_exceeded", "server_error", "timeout"]),
               error_message="temporary failure", gap_s=b.tool_gap())
        b.call(output_text=_sentence(rng, 50), tools=[_productive_tool(rng, 50)], gap_s=rng.uniform(1.0, 4.0))
    else:  # a tool times out once and succeeds on the retry
        cmd = f"curl -s https://api.{rng.choice(MODULES)}.example.com/health"
        b.call(output_text="Let me check the health endpoint.", gap_s=b.tool_gap(),
               tools=[ToolSpec("run_command", {"cmd": cmd}, "", 10, error="TimeoutError", error_message="timed out after 10s")])
        b.call(output_text="That timed out, retrying once.", gap_s=b.tool_gap(),
               tools=[ToolSpec("run_command", {"cmd": cmd}, '{"status": "ok"}', 10)])
    b.productive(rng.randint(4, 8), first_k=60)
    return b.calls, None, "one transient failure, retried once, then more work"


def gen_pagination(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    entity = ["orders", "tickets", "users", "invoices"][v % 4]
    row = {"orders": (20, 26), "invoices": (22, 30), "tickets": (12, 90), "users": (15, 60)}[entity]
    customer = rng.choice(CUSTOMERS)
    b = RunBuilder(rng, task=f"Find every {entity[:-1]} of {customer} flagged for review and list them.")
    b.productive(rng.randint(1, 3))
    pages = rng.randint(9, 14)
    cursor = None
    for p in range(pages):
        args: dict[str, Any] = {"customer": customer, "limit": 50}
        if v % 2 == 0:
            args["page"] = p + 1
        elif cursor:
            args["cursor"] = cursor
        cursor = f"c{rng.getrandbits(40):010x}"
        rows = "; ".join(f"{entity[:-1]} {rng.randint(10_000, 99_999)} {rng.choice(['ok', 'flagged', 'ok', 'pending'])}"
                         for _ in range(6))
        # a page's size is the sum of its 50 rows: records with free text (tickets, users) vary, fixed-width
        # records (orders, invoices) give pages of nearly the same size; the last page is shorter
        size = sum(rng.randint(*row) for _ in range(50 if p < pages - 1 else rng.randint(5, 45)))
        text = "" if v % 4 >= 2 else rng.choice(["Fetching the next page.", "More results; next page.", "Continuing."])
        b.call(output_text=text, output_tokens=rng.randint(18, 30), tools=[ToolSpec(f"list_{entity}", args,
               f"{rows} ... (50 rows) next_cursor={cursor}", size, duration_s=0.4)],
               gap_s=b.tool_gap())
    b.call(output_text=f"I found {rng.randint(3, 40)} flagged {entity}; here is the list.", gap_s=b.tool_gap())
    return b.calls, None, f"list_{entity} through {pages} pages" + (" (page numbers)" if v % 2 == 0 else " (cursor)")


def gen_same_greeting(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    b = RunBuilder(rng, system_tokens=rng.randint(600, 1200))
    greeting = GREETINGS[0]
    for s in range(rng.randint(5, 7)):
        b.call(output_text=greeting, user_text="Hello", output_tokens=14, restart=True, session=s,
               gap_s=rng.uniform(2.0, 30.0))
        for _ in range(rng.randint(1, 3)):
            q = rng.choice(QUESTIONS).format(n=rng.randint(10_000, 99_999), month=rng.choice(MONTHS))
            b.call(output_text=f"Sure. {_sentence(rng, s)}", user_text=q, session=s, gap_s=rng.uniform(4.0, 20.0),
                   tools=[_productive_tool(rng, s)] if v % 2 else [])
    return b.calls, None, "support conversations that all open with the same greeting"


def gen_long_productive(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    b = RunBuilder(rng, task=_coding_task(rng))
    n = rng.randint(18, MAX_CALLS_PER_TRACE)
    b.productive(n - 1)
    b.call(output_text="All tests pass now; the fix is committed.", gap_s=b.tool_gap())
    return b.calls, None, f"{n} varied steps"


def gen_parallel_burst(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    b = RunBuilder(rng, task=f"Compare the {rng.choice(NOUNS)} of our {rng.choice(MODULES)} API with the competitors'.")
    b.productive(rng.randint(1, 3))
    for burst in range(rng.randint(4, 7)):
        tool = rng.choice(["fetch_url", "web_search", "read_file"])
        tools = []
        for _ in range(rng.randint(3, 6)):
            if tool == "fetch_url":
                arg = {"url": f"https://{rng.choice(MODULES)}-{rng.randint(1, 999)}.example.com/docs/{rng.choice(SYMBOLS)}"}
            elif tool == "web_search":
                arg = {"query": f"{rng.choice(CUSTOMERS)} {rng.choice(NOUNS)} {rng.randint(2019, 2024)}"}
            else:
                arg = {"path": _path(rng)}
            tools.append(ToolSpec(tool, arg, _sentence(rng, burst), rng.randint(200, 900), duration_s=rng.uniform(0.2, 1.5)))
        b.call(output_text=f"Fetching {len(tools)} sources in parallel for {rng.choice(NOUNS)}.", tools=tools,
               gap_s=b.tool_gap())
        b.call(output_text=_sentence(rng, burst) + " " + _sentence(rng, burst + 1), gap_s=b.tool_gap())
    return b.calls, None, "bursts of parallel fetches, each followed by a synthesis"


def gen_edit_test_cycle(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    b = RunBuilder(rng, task=_coding_task(rng))
    b.productive(rng.randint(2, 4))
    cmd = f"pytest tests/test_{rng.choice(MODULES)}.py -q"
    failing = rng.randint(6, 9)
    path = _path(rng)
    for _ in range(rng.randint(6, 8)):
        b.call(output_text="Running the tests." if v % 2 == 0 else "", output_tokens=rng.randint(15, 25),
               tools=[ToolSpec("run_command", {"cmd": cmd}, f"$ {cmd}\n{failing} failed, {40 - failing} passed; first "
                               f"failure: test_{rng.choice(SYMBOLS)} ({rng.choice(NOUNS)})", rng.randint(150, 700),
                               duration_s=rng.uniform(2.0, 6.0))], gap_s=b.tool_gap())
        failing = max(0, failing - rng.randint(1, 2))
        b.call(output_text=_sentence(rng, failing), tools=[ToolSpec("edit_file", {"path": path, "line": rng.randint(1, 400),
               "new": f"{rng.choice(SYMBOLS)}(x, {rng.randint(1, 99)})"}, f"Edited {path}: 1 line changed.", 20)],
               gap_s=b.tool_gap())
        if failing == 0:
            break
    calls = b.calls[:MAX_CALLS_PER_TRACE]
    return calls, None, "run the tests, fix one failure, run the tests again"


# ------------------------------------------------------------------- honest look-alikes of those loops


def gen_refined_search(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    goal, queries = SEARCH_TOPICS[v % len(SEARCH_TOPICS)]
    b = RunBuilder(rng, task=f"How do I {goal}? Look it up in the knowledge base.")
    b.productive(rng.randint(1, 3))
    empty = rng.randint(1, 2)  # one or two searches find nothing, then a better one finds the article
    for i in range(empty):
        b.call(output_text="Let me search the knowledge base." if i == 0 else "Nothing; rephrasing.",
               output_tokens=_jitter(rng, 30), gap_s=b.tool_gap(),
               tools=[ToolSpec("search_docs", {"query": queries[i]}, _no_results(rng, queries[i], v),
                               _tokens(queries[i]) + 18, duration_s=0.3)])
    art = f"KB-{rng.randint(1000, 9999)}"
    found = json.dumps({"query": queries[-1], "total": 2, "results": [
        {"id": art, "title": f"How to {goal}", "score": 0.91},
        {"id": f"KB-{rng.randint(1000, 9999)}", "title": f"{rng.choice(NOUNS).capitalize()} overview", "score": 0.6}]})
    b.call(output_text="The docs use another term; searching for it.", output_tokens=_jitter(rng, 30),
           gap_s=b.tool_gap(), tools=[ToolSpec("search_docs", {"query": queries[-1]}, found, 90, duration_s=0.3)])
    b.call(output_text=f"{art} looks right; reading it.", output_tokens=_jitter(rng, 24), gap_s=b.tool_gap(),
           tools=[ToolSpec("read_article", {"article_id": art}, " ".join(_sentence(rng, k) for k in range(6)), 600,
                           duration_s=0.3)])
    b.productive(rng.randint(1, 3), first_k=40)
    b.call(output_text=f"Here is how to {goal}: " + _sentence(rng, 9), gap_s=b.tool_gap())
    return b.calls, None, "an empty search or two, then a refined one finds the article"


def gen_paged_read(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    path = f"logs/api-2024-11-{rng.randint(10, 28)}.log"
    b = RunBuilder(rng, task=f"The orders API started returning 503s. Find the cause in {path}.")
    b.productive(rng.randint(1, 2))
    pages = rng.randint(4, 6)
    for p in range(pages):
        lines = "\n".join(f"{p * 400 + i + 1:>5}  {rng.choice(['GET', 'POST'])} /orders/{rng.randint(1, 99999)} "
                          f"{rng.choice([200, 200, 201, 404, 503])} {rng.randint(5, 900)}ms user={rng.randint(1, 9999)}"
                          for i in range(40))
        b.call(output_text="Reading the log from the start." if p == 0 else "Nothing conclusive yet; next part.",
               output_tokens=_jitter(rng, 30), gap_s=b.tool_gap(),
               tools=[ToolSpec("read_file", {"path": path, "offset": p * 400, "limit": 400}, lines,
                               rng.randint(8_000, 10_500), duration_s=0.1)])
    b.call(output_text="Root cause: the orders DB connection pool is exhausted from line 1235 on.", gap_s=b.tool_gap())
    return b.calls, None, f"{path} read in successive windows, each new"


def gen_handoff_resolved(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    order = rng.randint(10_000, 99_999)
    b = RunBuilder(rng, task=f"I was charged twice for order {order} after the app crashed at checkout. Fix it.")
    charges = json.dumps({"order_id": order, "charges": [{"id": "ch_1", "amount": 84.9}, {"id": "ch_2", "amount": 84.9}]})
    b.call(output_text="Let me look at the charges.", output_tokens=_jitter(rng, 24), gap_s=b.tool_gap(),
           tools=[ToolSpec("lookup_charges", {"order_id": order}, charges, 70, duration_s=0.2)])
    b.call(output_text="Two identical charges 38 s apart; technical support must confirm the crash. Transferring.",
           output_tokens=_jitter(rng, 36), gap_s=b.tool_gap(),
           tools=[ToolSpec("transfer_to_technical_support", {}, json.dumps({"assistant": "technical_support"}), 12,
                           duration_s=0.01)])
    b.call(output_text="Checking the crash reports for this order.", output_tokens=_jitter(rng, 24), gap_s=b.tool_gap(),
           tools=[ToolSpec("get_crash_report", {"order_id": order}, json.dumps({"signal": "SIGABRT", "summary":
                  "payment confirmation callback fired twice"}), 60, duration_s=0.2)])
    b.call(output_text="Confirmed: the crash resubmitted the payment. Handing back to billing for the refund.",
           output_tokens=_jitter(rng, 36), gap_s=b.tool_gap(),
           tools=[ToolSpec("transfer_to_billing", {}, json.dumps({"assistant": "billing"}), 12, duration_s=0.01)])
    b.call(output_text="Refunding the second charge.", output_tokens=_jitter(rng, 24), gap_s=b.tool_gap(),
           tools=[ToolSpec("refund_charge", {"charge_id": "ch_2"}, json.dumps({"status": "succeeded"}), 20,
                           duration_s=0.3)])
    b.call(output_text="The duplicate charge is refunded; you will see it in 3-5 days.", gap_s=b.tool_gap())
    return b.calls, None, "billing hands to technical support, which confirms the crash and hands back; refunded"


RUNBOOK = [PLANS[0]] + [
    f"Step {k}: " + text for k, text in enumerate([
        "provision Postgres 16 with the same instance class, a parameter group cloned from 12 and wal_level=logical "
        "on the 12 primary (needs a restart: Sunday 02:00).",
        "logical replication: CREATE PUBLICATION on 12, dump the schema into 16, CREATE SUBSCRIPTION, watch "
        "pg_stat_subscription until lag is under a second; sequences are synced at cut-over.",
        "validation: compare row counts and checksums of the 20 largest tables, run the integration suite against "
        "16 in staging, compare the plans of the top 50 queries.",
        "cut-over in a 15-minute window: app read-only, wait for zero lag, sync sequences, switch DATABASE_URL, "
        "roll the deployments, drop the subscription.",
        "fallback and cleanup: keep 12 with reverse replication for 7 days, then snapshot and delete it. That "
        "completes the runbook."], start=1)]


def gen_go_on_progress(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    b = RunBuilder(rng, system_tokens=rng.randint(300, 900))
    b.call(output_text=RUNBOOK[0], user_text="Plan the migration of our Postgres 12 cluster to Postgres 16 with "
           "minimal downtime.", output_tokens=_jitter(rng, _tokens(RUNBOOK[0])), gap_s=rng.uniform(1.0, 5.0))
    for i, step in enumerate(RUNBOOK[1:]):
        b.call(output_text=step, user_text=GO_ON[i % len(GO_ON)], output_tokens=_jitter(rng, _tokens(step)),
               gap_s=rng.uniform(2.0, 8.0))
    return b.calls, None, "after each 'go on' the next step of the runbook"


def gen_restart_recovers(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    order = str(rng.randint(10_000, 99_999))
    b = RunBuilder(rng, system_tokens=rng.randint(400, 900))
    _refund_run(b, rng, 0, order, "transient")  # a transient failure: the job is restarted once and succeeds
    _refund_run(b, rng, 1, order, "ok")
    return b.calls, None, "a refund job failing on a transient 503, restarted once in a new trace, succeeding"


def gen_flaky_backoff(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    b = RunBuilder(rng, task="Convert our Q4 budget of EUR 250,000 to USD, GBP and CHF at today's rates.")
    b.productive(rng.randint(0, 2))
    failures = rng.randint(2, 3)
    wait = rng.choice([1.0, 2.0])
    for i in range(failures):
        rid = f"req_{rng.getrandbits(64):016x}"
        b.call(output_text="Fetching today's rates." if i == 0 else "Retrying the rates fetch.",
               output_tokens=_jitter(rng, 24), gap_s=b.tool_gap(),
               tools=[ToolSpec("fetch_exchange_rates", {"base": "EUR"}, "", 40, error="ServiceUnavailable",
                               error_message=f"503 Service Unavailable: overloaded (request_id={rid}, "
                                             f"retry_after={int(wait)}s)", duration_s=0.3)])
        b.call(output_text="The provider is overloaded; backing off before retrying.", output_tokens=_jitter(rng, 24),
               gap_s=b.tool_gap(), tools=[ToolSpec("wait", {"seconds": wait}, f"waited {wait:g}s", 8, duration_s=wait)])
        wait *= 2
    rates = json.dumps({"base": "EUR", "rates": {"USD": 1.0873, "GBP": 0.8391, "CHF": 0.9402}})
    b.call(output_text="Retrying the rates fetch.", output_tokens=_jitter(rng, 24), gap_s=b.tool_gap(),
           tools=[ToolSpec("fetch_exchange_rates", {"base": "EUR"}, rates, 60, duration_s=0.3)])
    for cur, rate in (("USD", 1.0873), ("GBP", 0.8391), ("CHF", 0.9402)):
        b.call(output_text=f"Converting to {cur}.", output_tokens=_jitter(rng, 30), gap_s=b.tool_gap(),
               tools=[ToolSpec("convert_amount", {"amount": 250000.0, "currency": cur, "rate": rate},
                               f"250000.00 EUR = {250000 * rate:.2f} {cur}", 20, duration_s=0.05)])
    b.call(output_text="The Q4 budget is USD 271,825, GBP 209,775 and CHF 235,050 at today's rates.", gap_s=b.tool_gap())
    return b.calls, None, f"a flaky API failing {failures} times with fresh request ids, backed off, then it works"


def gen_ci_poll_fixed(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    run_id = str(rng.randint(1000, 9999))
    b = RunBuilder(rng, task=f"Wait for CI run {run_id} on my PR to finish and tell me whether it passed.")
    interval = rng.choice([5.0, 10.0, 15.0, 30.0])
    pending = json.dumps({"id": int(run_id), "status": "in_progress", "conclusion": None, "head_branch": "feature/x"})
    polls = rng.randint(4, 8)
    for i in range(polls + 1):
        done = i == polls
        result = json.dumps({"id": int(run_id), "status": "completed", "conclusion": "success"}) if done else pending
        text = "I'll check the CI run now." if i == 0 else "Still in progress; checking again."
        call = ToolSpec("get_ci_run", {"run_id": run_id}, result, 40, duration_s=0.3 if v % 2 else interval)
        # the check waits in the tool (a blocking poll), or the agent sleeps between quick checks
        b.call(output_text=text, output_tokens=_jitter(rng, 20), tools=[call],
               gap_s=b.tool_gap() + (interval if v % 2 else 0.0))
    b.call(output_text=f"CI run {run_id} finished: success.", gap_s=b.tool_gap())
    return b.calls, None, f"a CI run polled every {interval:g} s ({polls} identical answers), until it succeeds"


def gen_page_scroll(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    b = RunBuilder(rng, task="Collect the prices of every product in the catalogue page.")
    b.productive(rng.randint(0, 2))
    size = rng.randint(380, 420)  # a browser tool returns a viewport of about the same size every time
    for p in range(rng.randint(8, 12)):
        items = "; ".join(f"{rng.choice(SYMBOLS).replace('_', ' ')} {rng.uniform(3, 400):.2f} EUR" for _ in range(8))
        b.call(output_text="Scrolling down." if v % 4 < 2 else "", output_tokens=_jitter(rng, 20, 1),
               tools=[ToolSpec("scroll_page", {"direction": "down"}, f"viewport {p + 1}: {items}",
                               size + rng.randint(-12, 12), duration_s=0.4)], gap_s=b.tool_gap())
    b.call(output_text="I collected 80 prices; here is the table.", gap_s=b.tool_gap())
    return b.calls, None, "a page scrolled down viewport after viewport (the same call, different content)"


GENERATORS: dict[str, Gen] = {
    "exact_tool_repeat": gen_exact_tool_repeat,
    "ab_cycle": gen_ab_cycle,
    "long_cycle": gen_long_cycle,
    "error_retry": gen_error_retry,
    "regenerated_text": gen_regenerated_text,
    "context_growth": gen_context_growth,
    "runaway_cost": gen_runaway_cost,
    "monologue": gen_monologue,
    "empty_responses": gen_empty_responses,
    "batch_template": gen_batch_template,
    "polling_backoff": gen_polling_backoff,
    "transient_error": gen_transient_error,
    "pagination": gen_pagination,
    "same_greeting": gen_same_greeting,
    "long_productive": gen_long_productive,
    "parallel_burst": gen_parallel_burst,
    "edit_test_cycle": gen_edit_test_cycle,
    "reworded_search": gen_reworded_search,
    "shifted_reread": gen_shifted_reread,
    "handoff_bounce": gen_handoff_bounce,
    "replan_go_on": gen_replan_go_on,
    "restart_loop": gen_restart_loop,
    "fresh_id_error": gen_fresh_id_error,
    "refined_search": gen_refined_search,
    "paged_read": gen_paged_read,
    "handoff_resolved": gen_handoff_resolved,
    "go_on_progress": gen_go_on_progress,
    "restart_recovers": gen_restart_recovers,
    "flaky_backoff": gen_flaky_backoff,
    "ci_poll_fixed": gen_ci_poll_fixed,
    "page_scroll": gen_page_scroll,
}


def generate_scenario(family: str, variant: int, seed: int = DEFAULT_SEED) -> Scenario:
    """One run of ``family``; variants alternate content capture (even: on, odd... see below) and cycle
    through the family's sub-patterns."""
    rng = random.Random(f"{seed}:{family}:{variant}")
    calls, onset, description = GENERATORS[family](rng, variant)
    capture = (variant // 2) % 2 == 0  # variants 0,1 on; 2,3 off; 4,5 on; ... (sub-patterns use variant % 4)
    label = "loop" if family in LOOP_FAMILIES else "legit"
    for session in {c.session for c in calls}:
        n = sum(1 for c in calls if c.session == session)
        if n > MAX_CALLS_PER_TRACE:
            raise AssertionError(f"{family}/{variant}: {n} calls in one trace")
    return Scenario(
        id=f"{family}-{variant:02d}", family=family, label=label, onset=onset, capture_content=capture,
        description=description, calls=calls, virtual_key=f"vk-{family.replace('_', '-')}",
        agent_name=f"{family}-agent",
    )


def generate_corpus(seed: int = DEFAULT_SEED, variants: int = DEFAULT_VARIANTS,
                    families: Iterable[str] = FAMILIES) -> list[Scenario]:
    """The built-in corpus: ``variants`` runs of every family (deterministic for a seed)."""
    return [generate_scenario(f, v, seed) for f in families for v in range(variants)]


def write_corpus(scenarios: Iterable[Scenario], directory: str | Path) -> list[Path]:
    """One JSON file per scenario (``<id>.json``), plus ``index.json`` listing them."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths, index = [], []
    for sc in scenarios:
        path = out / f"{sc.id}.json"
        path.write_text(json.dumps(sc.to_dict(), indent=1, sort_keys=True) + "\n")
        paths.append(path)
        index.append({"id": sc.id, "family": sc.family, "label": sc.label, "onset": sc.onset,
                      "capture_content": sc.capture_content, "calls": len(sc.calls)})
    (out / "index.json").write_text(json.dumps({"version": CORPUS_VERSION, "scenarios": index}, indent=1) + "\n")
    return paths


def read_corpus(directory: str | Path) -> list[Scenario]:
    """Every ``*.json`` scenario file of a directory (``index.json`` excluded), sorted by id."""
    scenarios = []
    for path in sorted(Path(directory).glob("*.json")):
        if path.name == "index.json":
            continue
        data = json.loads(path.read_text())
        scenarios.append(validate_scenario(Scenario.from_dict(data), str(path)))
    if not scenarios:
        raise ValueError(f"no scenario files in {directory}")
    return sorted(scenarios, key=lambda s: s.id)


def validate_scenario(sc: Scenario, source: str = "scenario") -> Scenario:
    errors = []
    if sc.label not in ("loop", "legit"):
        errors.append(f"label must be 'loop' or 'legit', got {sc.label!r}")
    if sc.label == "loop" and (sc.onset is None or not 0 <= sc.onset < len(sc.calls)):
        errors.append(f"a loop needs an onset in 0..{len(sc.calls) - 1}, got {sc.onset!r}")
    if sc.label == "legit" and sc.onset is not None:
        errors.append("a legit run has no onset")
    if not sc.calls:
        errors.append("no calls")
    if errors:
        raise ValueError(f"{source}: " + "; ".join(errors))
    return sc
