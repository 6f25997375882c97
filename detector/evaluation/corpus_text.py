"""What the generated runs say and do: the pools of names and sentences they draw from (seeded), a productive tool
call, and :class:`RunBuilder`, which strings model calls and tool runs together with realistic sizes and gaps."""

from __future__ import annotations

import random
from collections.abc import Iterable

from detector.evaluation.corpus_records import CallSpec, ToolSpec

__all__ = [
    "CUSTOMERS", "FINDINGS", "GREETINGS", "MODULES", "MONTHS", "NOUNS", "QUESTIONS", "RunBuilder", "SUFFIXES",
    "SYMBOLS", "TOPICS", "VERBS", "code_result", "jitter", "module_path", "productive_tool", "sentence", "tokens_of",
]

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


def module_path(rng: random.Random) -> str:
    return f"src/{rng.choice(MODULES)}/{rng.choice(SUFFIXES)}.py"


def sentence(rng: random.Random, k: int) -> str:
    """A varied, specific sentence (distinct texts give unrelated SimHashes)."""
    return (f"{rng.choice(VERBS)} {rng.choice(NOUNS)} in {module_path(rng)}: {rng.choice(SYMBOLS)}() "
            f"{rng.choice(FINDINGS)} {rng.randint(2, 900)} items, so step {k + 1} is to "
            f"{rng.choice(['adjust', 'test', 'document', 'refactor', 'verify'])} {rng.choice(SYMBOLS)} next.")


def code_result(rng: random.Random, path: str) -> str:
    sym = rng.choice(SYMBOLS)
    return (f"# {path}\nimport {rng.choice(MODULES)}\n\ndef {sym}(value, limit={rng.randint(2, 500)}):\n"
            f"    if value > limit:\n        raise ValueError('{rng.choice(NOUNS)} exceeded at {rng.randint(10, 99)}')\n"
            f"    return {rng.choice(SYMBOLS)}(value) * {rng.randint(2, 9)}\n")


def productive_tool(rng: random.Random, k: int) -> ToolSpec:
    """A tool call with fresh arguments and a fresh result."""
    kind = rng.choice(["read_file", "grep", "list_dir", "run_command", "search_docs", "edit_file", "query_db"])
    path = module_path(rng)
    if kind == "read_file":
        return ToolSpec(kind, {"path": path}, code_result(rng, path), rng.randint(250, 1400), duration_s=0.05)
    if kind == "grep":
        sym = rng.choice(SYMBOLS)
        hits = "\n".join(f"{module_path(rng)}:{rng.randint(1, 400)}: {sym}(" for _ in range(rng.randint(2, 6)))
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
        self.pending_user_tokens = task_tokens if task_tokens is not None else (tokens_of(task) if task else 0)
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
            self.pending_user, self.pending_user_tokens = user_text, user_tokens or tokens_of(user_text)
        self.context += self.pending_user_tokens
        if output_tokens is None:
            output_tokens = tokens_of(output_text) + 18 * len(tools) if not error else 0
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
            self.context += sum(t.result_tokens or tokens_of(t.result or t.error_message) for t in spec.tools)
        return spec

    def productive(self, n: int, *, first_k: int = 0) -> None:
        for k in range(n):
            tool = productive_tool(self.rng, first_k + k)
            self.call(output_text=sentence(self.rng, first_k + k), tools=[tool], gap_s=self.rng.uniform(0.1, 1.5))

    def _last_tools(self) -> list[ToolSpec]:
        return self.calls[-1].tools if self.calls else []

    def tool_gap(self, extra: tuple[float, float] = (0.1, 1.2)) -> float:
        """Idle time before the next call, after the previous step's tools ended (the replay starts counting the gap
        there: ``CallSpec.gap_s``), so a tool's own duration is not counted twice."""
        return self.rng.uniform(*extra)


def tokens_of(text: str) -> int:
    return max(1, round(len(text) / 4))


def jitter(rng: random.Random, n: int, spread: int = 2) -> int:
    return max(1, n + rng.randint(-spread, spread))
