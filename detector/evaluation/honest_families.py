"""The generated corpus's honest runs, one generator per family: legitimate look-alikes of loops (batch jobs, polling
with backoff, pagination, a transient error) and honest counterparts of the loop families (a refined search, a paged
read, a handoff that resolves). Each returns (calls, None, description)."""

from __future__ import annotations

import json
import random
from typing import Any

from detector.evaluation.corpus_records import MAX_CALLS_PER_TRACE, CallSpec, ToolSpec
from detector.evaluation.corpus_text import (
    CUSTOMERS,
    GREETINGS,
    MODULES,
    MONTHS,
    NOUNS,
    QUESTIONS,
    SYMBOLS,
    RunBuilder,
    jitter,
    module_path,
    productive_tool,
    sentence,
    tokens_of,
)
from detector.evaluation.loop_families import GO_ON, PLANS, SEARCH_TOPICS, coding_task, no_results, refund_run

__all__ = [
    "RUNBOOK", "gen_batch_template", "gen_ci_poll_fixed", "gen_edit_test_cycle", "gen_flaky_backoff",
    "gen_go_on_progress", "gen_handoff_resolved", "gen_long_productive", "gen_page_scroll", "gen_paged_read",
    "gen_pagination", "gen_parallel_burst", "gen_polling_backoff", "gen_refined_search", "gen_restart_recovers",
    "gen_same_greeting", "gen_transient_error",
]

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
            b.call(output_text=out, output_tokens=tokens_of(out) + rng.randint(0, 6), gap_s=0.25)
        else:  # stateless: the template with the document inline
            b.call(output_text=out, user_text=template + doc, user_tokens=doc_tokens, restart=True,
                   output_tokens=tokens_of(out) + rng.randint(0, 6), gap_s=rng.uniform(0.1, 0.8))
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
    b = RunBuilder(rng, task=coding_task(rng))
    b.productive(rng.randint(4, 8))
    if v % 2 == 0:  # provider error, the same request retried once after a short wait
        b.call(error=rng.choice(["rate_limit_exceeded", "server_error", "timeout"]),
               error_message="temporary failure", gap_s=b.tool_gap())
        b.call(output_text=sentence(rng, 50), tools=[productive_tool(rng, 50)], gap_s=rng.uniform(1.0, 4.0))
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
            b.call(output_text=f"Sure. {sentence(rng, s)}", user_text=q, session=s, gap_s=rng.uniform(4.0, 20.0),
                   tools=[productive_tool(rng, s)] if v % 2 else [])
    return b.calls, None, "support conversations that all open with the same greeting"


def gen_long_productive(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    b = RunBuilder(rng, task=coding_task(rng))
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
                arg = {"path": module_path(rng)}
            tools.append(ToolSpec(tool, arg, sentence(rng, burst), rng.randint(200, 900), duration_s=rng.uniform(0.2, 1.5)))
        b.call(output_text=f"Fetching {len(tools)} sources in parallel for {rng.choice(NOUNS)}.", tools=tools,
               gap_s=b.tool_gap())
        b.call(output_text=sentence(rng, burst) + " " + sentence(rng, burst + 1), gap_s=b.tool_gap())
    return b.calls, None, "bursts of parallel fetches, each followed by a synthesis"


def gen_edit_test_cycle(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    b = RunBuilder(rng, task=coding_task(rng))
    b.productive(rng.randint(2, 4))
    cmd = f"pytest tests/test_{rng.choice(MODULES)}.py -q"
    failing = rng.randint(6, 9)
    path = module_path(rng)
    for _ in range(rng.randint(6, 8)):
        b.call(output_text="Running the tests." if v % 2 == 0 else "", output_tokens=rng.randint(15, 25),
               tools=[ToolSpec("run_command", {"cmd": cmd}, f"$ {cmd}\n{failing} failed, {40 - failing} passed; first "
                               f"failure: test_{rng.choice(SYMBOLS)} ({rng.choice(NOUNS)})", rng.randint(150, 700),
                               duration_s=rng.uniform(2.0, 6.0))], gap_s=b.tool_gap())
        failing = max(0, failing - rng.randint(1, 2))
        b.call(output_text=sentence(rng, failing), tools=[ToolSpec("edit_file", {"path": path, "line": rng.randint(1, 400),
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
               output_tokens=jitter(rng, 30), gap_s=b.tool_gap(),
               tools=[ToolSpec("search_docs", {"query": queries[i]}, no_results(rng, queries[i], v),
                               tokens_of(queries[i]) + 18, duration_s=0.3)])
    art = f"KB-{rng.randint(1000, 9999)}"
    found = json.dumps({"query": queries[-1], "total": 2, "results": [
        {"id": art, "title": f"How to {goal}", "score": 0.91},
        {"id": f"KB-{rng.randint(1000, 9999)}", "title": f"{rng.choice(NOUNS).capitalize()} overview", "score": 0.6}]})
    b.call(output_text="The docs use another term; searching for it.", output_tokens=jitter(rng, 30),
           gap_s=b.tool_gap(), tools=[ToolSpec("search_docs", {"query": queries[-1]}, found, 90, duration_s=0.3)])
    b.call(output_text=f"{art} looks right; reading it.", output_tokens=jitter(rng, 24), gap_s=b.tool_gap(),
           tools=[ToolSpec("read_article", {"article_id": art}, " ".join(sentence(rng, k) for k in range(6)), 600,
                           duration_s=0.3)])
    b.productive(rng.randint(1, 3), first_k=40)
    b.call(output_text=f"Here is how to {goal}: " + sentence(rng, 9), gap_s=b.tool_gap())
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
               output_tokens=jitter(rng, 30), gap_s=b.tool_gap(),
               tools=[ToolSpec("read_file", {"path": path, "offset": p * 400, "limit": 400}, lines,
                               rng.randint(8_000, 10_500), duration_s=0.1)])
    b.call(output_text="Root cause: the orders DB connection pool is exhausted from line 1235 on.", gap_s=b.tool_gap())
    return b.calls, None, f"{path} read in successive windows, each new"


def gen_handoff_resolved(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    order = rng.randint(10_000, 99_999)
    b = RunBuilder(rng, task=f"I was charged twice for order {order} after the app crashed at checkout. Fix it.")
    charges = json.dumps({"order_id": order, "charges": [{"id": "ch_1", "amount": 84.9}, {"id": "ch_2", "amount": 84.9}]})
    b.call(output_text="Let me look at the charges.", output_tokens=jitter(rng, 24), gap_s=b.tool_gap(),
           tools=[ToolSpec("lookup_charges", {"order_id": order}, charges, 70, duration_s=0.2)])
    b.call(output_text="Two identical charges 38 s apart; technical support must confirm the crash. Transferring.",
           output_tokens=jitter(rng, 36), gap_s=b.tool_gap(),
           tools=[ToolSpec("transfer_to_technical_support", {}, json.dumps({"assistant": "technical_support"}), 12,
                           duration_s=0.01)])
    b.call(output_text="Checking the crash reports for this order.", output_tokens=jitter(rng, 24), gap_s=b.tool_gap(),
           tools=[ToolSpec("get_crash_report", {"order_id": order}, json.dumps({"signal": "SIGABRT", "summary":
                  "payment confirmation callback fired twice"}), 60, duration_s=0.2)])
    b.call(output_text="Confirmed: the crash resubmitted the payment. Handing back to billing for the refund.",
           output_tokens=jitter(rng, 36), gap_s=b.tool_gap(),
           tools=[ToolSpec("transfer_to_billing", {}, json.dumps({"assistant": "billing"}), 12, duration_s=0.01)])
    b.call(output_text="Refunding the second charge.", output_tokens=jitter(rng, 24), gap_s=b.tool_gap(),
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
           "minimal downtime.", output_tokens=jitter(rng, tokens_of(RUNBOOK[0])), gap_s=rng.uniform(1.0, 5.0))
    for i, step in enumerate(RUNBOOK[1:]):
        b.call(output_text=step, user_text=GO_ON[i % len(GO_ON)], output_tokens=jitter(rng, tokens_of(step)),
               gap_s=rng.uniform(2.0, 8.0))
    return b.calls, None, "after each 'go on' the next step of the runbook"


def gen_restart_recovers(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    order = str(rng.randint(10_000, 99_999))
    b = RunBuilder(rng, system_tokens=rng.randint(400, 900))
    refund_run(b, rng, 0, order, "transient")  # a transient failure: the job is restarted once and succeeds
    refund_run(b, rng, 1, order, "ok")
    return b.calls, None, "a refund job failing on a transient 503, restarted once in a new trace, succeeding"


def gen_flaky_backoff(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    b = RunBuilder(rng, task="Convert our Q4 budget of EUR 250,000 to USD, GBP and CHF at today's rates.")
    b.productive(rng.randint(0, 2))
    failures = rng.randint(2, 3)
    wait = rng.choice([1.0, 2.0])
    for i in range(failures):
        rid = f"req_{rng.getrandbits(64):016x}"
        b.call(output_text="Fetching today's rates." if i == 0 else "Retrying the rates fetch.",
               output_tokens=jitter(rng, 24), gap_s=b.tool_gap(),
               tools=[ToolSpec("fetch_exchange_rates", {"base": "EUR"}, "", 40, error="ServiceUnavailable",
                               error_message=f"503 Service Unavailable: overloaded (request_id={rid}, "
                                             f"retry_after={int(wait)}s)", duration_s=0.3)])
        b.call(output_text="The provider is overloaded; backing off before retrying.", output_tokens=jitter(rng, 24),
               gap_s=b.tool_gap(), tools=[ToolSpec("wait", {"seconds": wait}, f"waited {wait:g}s", 8, duration_s=wait)])
        wait *= 2
    rates = json.dumps({"base": "EUR", "rates": {"USD": 1.0873, "GBP": 0.8391, "CHF": 0.9402}})
    b.call(output_text="Retrying the rates fetch.", output_tokens=jitter(rng, 24), gap_s=b.tool_gap(),
           tools=[ToolSpec("fetch_exchange_rates", {"base": "EUR"}, rates, 60, duration_s=0.3)])
    for cur, rate in (("USD", 1.0873), ("GBP", 0.8391), ("CHF", 0.9402)):
        b.call(output_text=f"Converting to {cur}.", output_tokens=jitter(rng, 30), gap_s=b.tool_gap(),
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
        b.call(output_text=text, output_tokens=jitter(rng, 20), tools=[call],
               gap_s=b.tool_gap() + (interval if v % 2 else 0.0))
    b.call(output_text=f"CI run {run_id} finished: success.", gap_s=b.tool_gap())
    return b.calls, None, f"a CI run polled every {interval:g} s ({polls} identical answers), until it succeeds"


def gen_page_scroll(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    b = RunBuilder(rng, task="Collect the prices of every product in the catalogue page.")
    b.productive(rng.randint(0, 2))
    size = rng.randint(380, 420)  # a browser tool returns a viewport of about the same size every time
    for p in range(rng.randint(8, 12)):
        items = "; ".join(f"{rng.choice(SYMBOLS).replace('_', ' ')} {rng.uniform(3, 400):.2f} EUR" for _ in range(8))
        b.call(output_text="Scrolling down." if v % 4 < 2 else "", output_tokens=jitter(rng, 20, 1),
               tools=[ToolSpec("scroll_page", {"direction": "down"}, f"viewport {p + 1}: {items}",
                               size + rng.randint(-12, 12), duration_s=0.4)], gap_s=b.tool_gap())
    b.call(output_text="I collected 80 prices; here is the table.", gap_s=b.tool_gap())
    return b.calls, None, "a page scrolled down viewport after viewport (the same call, different content)"
