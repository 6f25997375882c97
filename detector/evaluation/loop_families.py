"""The generated corpus's loops, one generator per family: each returns (calls, onset, description), ``v`` the
variant (it selects the sub-pattern, so every family covers its variations whatever the seed). The last ones vary
what they say without making progress (a reworded search, a shifted re-read, a handoff bounced back and forth)."""

from __future__ import annotations

import json
import random

from detector.evaluation.corpus_records import MAX_CALLS_PER_TRACE, CallSpec, ToolSpec
from detector.evaluation.corpus_text import (
    CUSTOMERS,
    MODULES,
    NOUNS,
    SYMBOLS,
    TOPICS,
    RunBuilder,
    code_result,
    jitter,
    module_path,
    productive_tool,
    sentence,
    tokens_of,
)

__all__ = [
    "GO_ON", "PLANS", "SEARCH_TOPICS", "TO_BILLING", "TO_SPECIALIST", "coding_task", "gen_ab_cycle",
    "gen_context_growth", "gen_empty_responses", "gen_error_retry", "gen_exact_tool_repeat", "gen_fresh_id_error",
    "gen_handoff_bounce", "gen_long_cycle", "gen_monologue", "gen_regenerated_text", "gen_replan_go_on",
    "gen_restart_loop", "gen_reworded_search", "gen_runaway_cost", "gen_shifted_reread", "no_results", "refund_run",
]

def coding_task(rng: random.Random) -> str:
    return (f"The nightly job for {rng.choice(CUSTOMERS)} fails in {rng.choice(MODULES)}. Find the cause in "
            f"{module_path(rng)} and fix it; keep the tests green.")


def gen_exact_tool_repeat(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    b = RunBuilder(rng, task=coding_task(rng))
    b.productive(rng.randint(3, 8))
    path = module_path(rng)
    parallel = v % 4 == 3
    stamped = v % 4 == 1
    base = [ToolSpec("read_file", {"path": path}, code_result(rng, path), rng.randint(300, 1200), duration_s=0.05)]
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
        b.call(output_text=text, tools=tools, output_tokens=jitter(rng, out_tok), gap_s=b.tool_gap())
    return b.calls, onset, f"read_file({path}) repeated" + (" with a parallel grep" if parallel else "")


def gen_ab_cycle(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    b = RunBuilder(rng, task=coding_task(rng))
    b.productive(rng.randint(3, 8))
    path = module_path(rng)
    cmd = f"pytest tests/test_{rng.choice(MODULES)}.py -x"
    fail = f"FAILED tests/test_x.py::test_{rng.choice(SYMBOLS)} - AssertionError: {rng.randint(2, 99)} != {rng.randint(100, 999)}"
    a = ToolSpec("read_file", {"path": path}, code_result(rng, path), rng.randint(300, 900), duration_s=0.05)
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
        b.call(output_text=texts[i % 2] if v % 4 < 2 else "", output_tokens=jitter(rng, out[i % 2]),
               tools=[ToolSpec(t.name, dict(t.arguments), t.result, t.result_tokens, duration_s=t.duration_s)],
               gap_s=b.tool_gap())
    return b.calls, onset, "read_file / run the same command, alternating"


def gen_long_cycle(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    b = RunBuilder(rng, task=coding_task(rng))
    b.productive(rng.randint(2, 5))
    period = 3 if v % 2 == 0 else 4
    steps = []
    for _ in range(period):
        t = productive_tool(rng, 0)
        steps.append((t, sentence(rng, 0), rng.randint(25, 90)))
    onset = len(b.calls) + period
    n = min(MAX_CALLS_PER_TRACE - len(b.calls), period * 4 + rng.randint(0, 2))
    for i in range(n):
        t, text, out = steps[i % period]
        b.call(output_text=text if v % 4 < 2 else "", output_tokens=jitter(rng, out),
               tools=[ToolSpec(t.name, dict(t.arguments), t.result, t.result_tokens, duration_s=t.duration_s)],
               gap_s=b.tool_gap())
    return b.calls, onset, f"a {period}-step cycle of tool calls"


def gen_error_retry(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    b = RunBuilder(rng, task=coding_task(rng))
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
            b.call(output_text=text, output_tokens=jitter(rng, 30),
                   tools=[ToolSpec("run_command", args, "", 40, error="CommandError", error_message=msg,
                                   duration_s=rng.uniform(0.5, 2.0))], gap_s=b.tool_gap())
        return b.calls, onset, f"run_command({cmd}) failing with the same error, retried"
    if kind == 2:  # the model call itself fails and the harness resends the same request at once
        err = rng.choice(["rate_limit_exceeded", "server_error", "context_length_exceeded"])
        msg = {"rate_limit_exceeded": "Rate limit reached for requests", "server_error": "The server had an error "
               "while processing your request", "context_length_exceeded": "maximum context length is 128000 tokens"}[err]
        b.call(output_text=sentence(rng, 99), tools=[productive_tool(rng, 99)], gap_s=b.tool_gap())
        onset = len(b.calls) + 1
        for _ in range(n):
            b.call(error=err, error_message=msg, gap_s=rng.uniform(0.2, 1.0))
        return b.calls, onset, f"the same request failing with {err}, resent"
    # kind 3: a tool failing with the same error while the model varies the arguments a little
    url = f"https://api.{rng.choice(MODULES)}.example.com/v1/{rng.choice(MODULES)}"
    for i in range(n):
        b.call(output_text=rng.choice(["Retrying the request with a different timeout.", "Let me try the request again."]),
               output_tokens=jitter(rng, 35),
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
               output_tokens=jitter(rng, tokens_of(text), 3), gap_s=rng.uniform(0.2, 1.0))
    return b.calls, onset, "rejected answer regenerated with new numbers / timestamps" + (
        " and small paraphrases" if v % 4 >= 2 else "")


def gen_context_growth(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    topic = rng.choice(TOPICS)
    b = RunBuilder(rng, task=f"What is our {topic}? Answer from the policy documents and cite the section.")
    b.productive(rng.randint(2, 5))
    docs = "\n".join(f"[doc {rng.randint(100, 999)}] {rng.choice(CUSTOMERS)} {rng.choice(NOUNS)} handbook, section "
                     f"{rng.randint(1, 20)}: {sentence(rng, 0)}" for _ in range(4))
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
               output_tokens=jitter(rng, 28), tools=[ToolSpec("search_kb", {"query": q}, docs, size, duration_s=0.6)],
               gap_s=b.tool_gap())
    return b.calls, onset, "the same documents re-retrieved and appended" + (
        " (query reworded)" if v % 2 == 0 else "")


def gen_runaway_cost(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    model = "gpt-4o"
    price_in, price_out = 2.5, 10.0
    b = RunBuilder(rng, model=model, system_tokens=rng.randint(30_000, 60_000), task=coding_task(rng),
                   tokens_per_second=90)
    cost = v % 2 == 0  # OpenLIT-style gen_ai.usage.cost on the spans

    def price(c: CallSpec) -> None:
        if cost:
            c.cost_usd = round((c.input_tokens * price_in + c.output_tokens * price_out) / 1e6, 6)

    for _ in range(rng.randint(2, 5)):
        price(b.call(output_text=sentence(rng, 1), tools=[productive_tool(rng, 1)], gap_s=b.tool_gap()))
    path = module_path(rng)
    body = code_result(rng, path) * 6
    onset = len(b.calls) + 1
    out_tok = rng.randint(1800, 3500)
    for i in range(rng.randint(10, 13)):
        # the whole module rewritten again and again, a cosmetic change each time; the same "File written."
        content = body.replace("limit=", f"limit_{i % 3}=")
        spec = b.call(output_text=f"I've rewritten {path} to fix the import order and the limit handling.",
                      tools=[ToolSpec("write_file", {"path": path, "content": content}, "File written.", 5,
                                      duration_s=0.05)],
                      output_tokens=jitter(rng, out_tok, 40), gap_s=rng.uniform(0.1, 0.5))
        price(spec)
    return b.calls, onset, f"{path} rewritten over and over with a {b.system_tokens // 1000}k context"


def gen_monologue(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    b = RunBuilder(rng, task=f"Plan the migration of the {rng.choice(MODULES)} service to the new "
                   f"{rng.choice(MODULES)} cluster.")
    for k in range(rng.randint(2, 5)):  # a productive planning conversation
        b.call(output_text=sentence(rng, k) + " " + sentence(rng, k + 1), user_text=sentence(rng, k + 7),
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
        b.call(output_text=text, user_text="Continue." if v % 4 < 2 else None, output_tokens=jitter(rng, tokens_of(text)),
               gap_s=rng.uniform(0.2, 1.0))
    return b.calls, onset, "the model restates the same plan, prompted to continue" if v % 4 < 2 else \
        "the model restates the same plan to itself"


def gen_empty_responses(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    b = RunBuilder(rng, task=coding_task(rng))
    b.productive(rng.randint(3, 8))
    b.call(output_text="", output_tokens=rng.randint(0, 1), gap_s=b.tool_gap())
    onset = len(b.calls)
    nudge = rng.choice(["Please continue with the task.", "You returned an empty response. Continue."])
    b.calls[-1].keep_output = v % 2 == 1
    for _ in range(rng.randint(9, 12)):
        # re-prompted (the empty reply stays in the conversation), or resent as is (the harness drops it)
        b.call(output_text="", output_tokens=rng.randint(0, 1), user_text=nudge if v % 2 == 0 else None,
               user_tokens=tokens_of(nudge), gap_s=rng.uniform(0.2, 1.2), keep_output=v % 2 == 0)
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


def no_results(rng: random.Random, query: str, v: int) -> str:
    """A search that found nothing, echoing the query back (with a timing that varies), as search APIs answer."""
    if v % 2 == 0:
        return json.dumps({"query": query, "total": 0, "took_ms": rng.randint(5, 40), "results": []})
    return f"No results found for '{query}' ({rng.randint(5, 40)} ms)."


def gen_reworded_search(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    """A few rewordings of one search, each answered with nothing, then the same rewordings again: varied searches are
    honest work (the real runs' reviewers: "until a term comes back a second time"); asking them again is the loop."""
    goal, queries = SEARCH_TOPICS[v % len(SEARCH_TOPICS)]
    rewordings = queries[:rng.randint(3, 4)]
    b = RunBuilder(rng, task=f"How do I {goal}? Look it up in the knowledge base.")
    b.productive(rng.randint(1, 3))
    onset = None
    for i in range(rng.randint(10, 12)):
        q = rewordings[i % len(rewordings)]
        if i == len(rewordings):
            onset = len(b.calls)  # the first search asked again
        text = "Let me search the knowledge base." if i == 0 else "No results. Let me try a different wording." \
            if v % 4 < 2 else rng.choice([f"Nothing for that; trying '{q}'.", "Still nothing, rephrasing the search.",
                                          f"Let me search for {q}."])
        b.call(output_text=text, output_tokens=jitter(rng, 24 + tokens_of(q)),
               tools=[ToolSpec("search_docs", {"query": q}, no_results(rng, q, v), tokens_of(q) + 18,
                               duration_s=rng.uniform(0.2, 0.6))], gap_s=b.tool_gap())
    return b.calls, onset, "a few rewordings of a search, each answered with nothing, asked again and again"


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
    b.call(output_text="Let me read the export log.", output_tokens=jitter(rng, 30),
           tools=[ToolSpec("read_file", {"path": path, "offset": 0, "limit": 400}, _log_lines(rng, 0, window, 0),
                           tokens, duration_s=0.1)], gap_s=b.tool_gap())
    onset = len(b.calls)
    offsets = [400, 420, 410, 440, 430, 460, 450, 480, 470]
    for i in range(rng.randint(6, 8)):
        off = offsets[i % len(offsets)]
        text = "Only heartbeats and successful batches so far; reading the log around there again." if v % 2 == 0 \
            else f"Reading lines {off}-{off + 400} again."
        b.call(output_text=text, output_tokens=jitter(rng, 34),
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
        b.call(output_text=text, output_tokens=jitter(rng, tokens_of(text) + 12),
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
           "downtime.", output_tokens=jitter(rng, tokens_of(PLANS[0])), gap_s=rng.uniform(1.0, 5.0))
    onset = len(b.calls)
    for i in range(rng.randint(7, 9)):
        plan = PLANS[(i + 1) % len(PLANS)] if v % 2 == 0 else PLANS[0]
        b.call(output_text=plan, user_text=GO_ON[i % len(GO_ON)], output_tokens=jitter(rng, tokens_of(plan)),
               gap_s=rng.uniform(2.0, 8.0))
    return b.calls, onset, "the same plan restated while the user says 'go on'"


def refund_run(b: RunBuilder, rng: random.Random, run: int, order: str, outcome: str) -> None:
    """One run of a refund job (a new trace): look the order up, issue the refund, report."""
    task = f"Process refund request RR-{order} for order {order}."
    b.call(output_text=f"Looking up order {order}.", user_text=task, restart=True, run=run, output_tokens=jitter(rng, 30),
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
    b.call(output_text="The refund is approved; issuing 129.00 EUR.", run=run, output_tokens=jitter(rng, 30),
           tools=[refund], gap_s=b.tool_gap())
    report = (f"Refund RR-{order} issued." if outcome == "ok" else
              f"I could not issue the refund: {refund.error_message.split(' (request_id')[0]}. The job failed.")
    b.call(output_text=report, run=run, output_tokens=jitter(rng, tokens_of(report)), gap_s=b.tool_gap())


def gen_restart_loop(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    order = str(rng.randint(10_000, 99_999))
    b = RunBuilder(rng, system_tokens=rng.randint(400, 900))
    for run in range(5):  # the job restarted in a new trace of the same session, failing the same way
        refund_run(b, rng, run, order, "expired")
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
        b.call(output_text=text, output_tokens=jitter(rng, 28), gap_s=b.tool_gap((0.05, 0.5)),
               tools=[ToolSpec("create_invoice", dict(args), "", 50, error="BadGateway",
                               error_message=f"502 Bad Gateway from billing-api (request_id={rid}, at={at})",
                               duration_s=rng.uniform(0.1, 0.4))])
    return b.calls, onset, "the same call failing with the same 502, a fresh request id and time in each error"
