"""The recorded scenarios: loops and their honest look-alikes, each a scripted model plus real tools.

A scenario is what a user asks (one or more turns), the tools the agent has, and a *policy*: the scripted
model, a pure function of the conversation it is sent (:class:`stub_model.Conversation`) returning the next
assistant turn. The policy also states the ground truth of each call: ``wasted=True`` marks an LLM call that
repeats earlier behaviour without progress. A loop's onset is the index (0-based, among the session's LLM
calls in time order) of the first wasted call; honest scenarios have none. Each onset rule is spelled out
in ``onset_rule`` and copied into the manifest.

Turns: ``history=True`` continues the conversation (a chat app's next message; a new agent run, so a new
trace in every framework, in the same session); ``history=False`` starts the agent afresh (a restarted job or
the next document of a batch), also a new trace in the same session.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from stub_model import Conversation, Reply, ToolCall

Framework = Literal["pydantic_ai", "openai_agents", "langgraph_openllmetry", "langgraph_openinference",
                    "openai_v2"]
Content = Literal["on", "off"]
Kind = Literal["tools", "handoff", "validate"]


@dataclass(frozen=True)
class Turn:
    user: str
    history: bool = True


@dataclass(frozen=True)
class AgentSpec:
    """One agent of a multi-agent scenario (handoffs): its instructions and tools."""

    name: str
    instructions: str
    tools: tuple[str, ...] = ()


@dataclass(frozen=True)
class Scenario:
    id: str
    family: str
    label: Literal["loop", "legit"]
    summary: str
    system: str
    turns: tuple[Turn, ...]
    policy: Callable[[Conversation], Reply]
    runs_on: tuple[tuple[Framework, Content], ...]
    tools: tuple[str, ...] = ()
    kind: Kind = "tools"
    max_calls: int = 12  # the framework's own per-run limit (request_limit, max_turns, recursion_limit)
    onset_rule: str = ""
    agents: tuple[AgentSpec, ...] = ()
    validator: Callable[[str], str | None] | None = None  # kind "validate": feedback, or None when accepted
    max_validations: int = 10
    look_alike_of: str = ""
    onset_turn: int | None = None  # restarts: the onset is the first LLM call of this turn (0-based)


def call(name: str, **args: object) -> tuple[ToolCall, ...]:
    return (ToolCall(name, dict(args)),)


def _transfer(conv: Conversation) -> str:
    return next(t for t in conv.tools if t.startswith("transfer_to"))


def _asked(conv: Conversation, word: str) -> bool:
    return word.lower() in conv.system.lower()


# --- same tool call, same result ---------------------------------------------------------------------------

def deploy_status_repeat(conv: Conversation) -> Reply:
    step = conv.calls_since_user
    if step == 0:
        return Reply("Let me check the rollout status of the billing deployment first.",
                     call("get_deploy_status", service="billing"))
    return Reply("The deployment is still degraded. Let me check the billing deployment status again.",
                 call("get_deploy_status", service="billing"), wasted=True)


def ci_poll_fixed(conv: Conversation) -> Reply:
    done = [r for r in conv.results("get_ci_run") if '"completed"' in r.output]
    if done:
        return Reply("CI run 9912 finished: **success** (lint, test and build all passed). Your PR is green.")
    n = len(conv.results("get_ci_run"))
    text = "I'll check the CI run now." if n == 0 else "Still in progress; checking again."
    return Reply(text, call("get_ci_run", run_id="9912"))


def job_poll_backoff(conv: Conversation) -> Reply:
    if not conv.results("start_export"):
        return Reply("Starting the export of orders_2024.", call("start_export", dataset="orders_2024"))
    polls = conv.results("get_export_status")
    if polls and '"succeeded"' in polls[-1].output:
        return Reply("The export finished: 1,840,000 rows written to "
                     "s3://acme-exports-eu/orders_2024/exp_5521.parquet.")
    wait = [0.5, 1, 2, 3][min(len(polls), 3)]
    text = "Export queued; polling its status." if not polls else (
        f"Export is running; checking again with a longer wait ({wait}s).")
    return Reply(text, call("get_export_status", job_id="exp_5521", wait_seconds=wait))


# --- reworded search, same nothing -------------------------------------------------------------------------

KB_QUERIES = [
    "rotate API signing key EU tenant without downtime",
    "how to rotate signing key zero downtime",
    "EU tenant key rotation procedure",
    "API key rotation no downtime Europe",
    "signing key rollover eu tenant",
    "replace API signing secret without outage",
    "key rotation runbook EU",
    "change tenant signing key safely",
    "rotate credentials signing EU region",
    "api signing key rotation steps",
]


def kb_search_reworded(conv: Conversation) -> Reply:
    n = len(conv.results("search_docs"))
    q = KB_QUERIES[n % len(KB_QUERIES)]
    text = "Let me search the knowledge base." if n == 0 else "No results. Let me try a different wording."
    return Reply(text, call("search_docs", query=q), wasted=n >= 1)


def kb_search_refined(conv: Conversation) -> Reply:
    searches = conv.results("search_docs")
    if not searches:
        return Reply("Let me search the knowledge base.", call("search_docs", query=KB_QUERIES[0]))
    if '"total": 0' in searches[-1].output and len(searches) == 1:
        return Reply("Nothing for that phrasing; the docs call these JWT signing keys and JWKS.",
                     call("search_docs", query="rotate JWT signing keys JWKS"))
    if not conv.results("read_article"):
        return Reply("KB-1142 looks right; reading it.", call("read_article", article_id="KB-1142"))
    return Reply("To rotate the EU tenant's signing key without downtime: generate the new key "
                 "(`keyctl generate --tenant eu-1 --alg ES256`), publish it next to the old one in the JWKS "
                 "(`keyctl publish --stage next`) and wait 10 minutes for verifier caches, promote it "
                 "(`keyctl promote --tenant eu-1`), then retire the old key after 24 h (`keyctl retire`).")


# --- the same file re-read with a shifting window ----------------------------------------------------------

def file_reread_window(conv: Conversation) -> Reply:
    n = len(conv.results("read_file"))
    offset = [0, 400, 420, 410, 440, 430, 460, 450, 480, 470][n % 10]
    text = ("Let me read the export log." if n == 0 else
            "Only heartbeats and successful batches so far; reading the log around there again.")
    return Reply(text, call("read_file", path="logs/export-2024-11-02.log", offset=offset, limit=400),
                 wasted=n >= 1)


def log_paged_read(conv: Conversation) -> Reply:
    reads = conv.results("read_file")
    if reads and "PoolTimeout" in reads[-1].output:
        return Reply("Root cause: the orders DB connection pool (20 connections) is exhausted. From line 801 "
                     "requests wait 200-500 ms for a connection, and at line 1235 `OrdersRepository.list_for_user` "
                     "raises PoolTimeout after 30 s; every request after it fails with 503. Raise the pool size or "
                     "fix the slow query in list_for_user.")
    offset = 400 * len(reads)
    text = "Reading the API log from the start." if not reads else "Nothing conclusive yet; reading the next part."
    return Reply(text, call("read_file", path="logs/api-2024-11-04.log", offset=offset, limit=400))


# --- the same error with a fresh request id ----------------------------------------------------------------

def invoice_error_fresh_id(conv: Conversation) -> Reply:
    n = len(conv.results("create_invoice"))
    text = ("Creating the November invoice for cus_4821." if n == 0 else
            "The billing API failed; retrying the invoice creation.")
    return Reply(text, call("create_invoice", customer_id="cus_4821", amount_cents=12900, currency="EUR"),
                 wasted=n >= 1)


def error_then_fixed_args(conv: Conversation) -> Reply:
    inv = conv.results("create_invoice")
    if not inv:
        return Reply("Creating the invoice.", call("create_invoice", customer_id="cus_4821", amount_cents=12950,
                                                   currency="EUR"))
    if len(inv) == 1:
        return Reply("The account only invoices whole euros; creating it for 129.00 EUR and noting the 0.50 EUR "
                     "difference.", call("create_invoice", customer_id="cus_4821", amount_cents=12900,
                                         currency="EUR"))
    if not conv.results("send_invoice"):
        return Reply("Invoice in_1QdX82 created; sending it.", call("send_invoice", invoice_id="in_1QdX82"))
    return Reply("Done: invoice in_1QdX82 (129.00 EUR) was created and emailed to ap@northwind.example. The "
                 "account only allows whole-euro amounts, so 0.50 EUR was left off.")


def rates_flaky_backoff(conv: Conversation) -> Reply:
    fetches, waits = conv.results("fetch_exchange_rates"), conv.results("wait")
    ok = [r for r in fetches if '"rates"' in r.output]
    if not ok:
        if len(fetches) > len(waits):
            return Reply("The rates provider is overloaded; backing off before retrying.",
                         call("wait", seconds=float(len(fetches))))
        return Reply("Fetching today's EUR exchange rates." if not fetches else "Retrying the rates fetch.",
                     call("fetch_exchange_rates", base="EUR"))
    todo = [("USD", 1.0873), ("GBP", 0.8391), ("CHF", 0.9402)]
    done = len(conv.results("convert_amount"))
    if done < len(todo):
        cur, rate = todo[done]
        return Reply(f"Converting the Q4 budget to {cur}.", call("convert_amount", amount=250000.0, currency=cur,
                                                                 rate=rate))
    if not conv.results("write_report"):
        return Reply("Writing the report.", call("write_report", title="Q4 budget in USD GBP CHF",
                                                 body="EUR 250,000 = USD 271,825 = GBP 209,775 = CHF 235,050"))
    return Reply("The Q4 budget of EUR 250,000 is USD 271,825, GBP 209,775 and CHF 235,050 at today's rates; the "
                 "report is saved at reports/q4-budget-in-usd-gbp-chf.md.")


def retry_once(conv: Conversation) -> Reply:
    look = conv.results("lookup_customer")
    if len(look) < 2:
        return Reply("Looking up the customer." if not look else "The CRM timed out; trying once more.",
                     call("lookup_customer", email="dana@whitfield.example"))
    if not conv.results("get_subscription"):
        return Reply("Found the customer; fetching the subscription.", call("get_subscription",
                                                                           customer_id="cus_7731"))
    return Reply("Dana Whitfield (cus_7731) is on the Team plan with 12 seats, active, renewing on 2024-12-01.")


# --- A/B and 3-step cycles ---------------------------------------------------------------------------------

def ab_cycle(conv: Conversation) -> Reply:
    n = len(conv.tool_results)
    if n % 2 == 0:
        return Reply("Let me look at the config directory." if n == 0 else "Let me check the config directory again.",
                     call("list_dir", path="config"), wasted=n >= 2)
    return Reply("Reading the settings module.", call("read_file", path="config/settings.py"), wasted=n >= 2)


AB_STEPS = [("src/orders", "src/orders/service.py"), ("src/billing", "src/billing/invoices.py"),
            ("src/auth", "src/auth/tokens.py"), ("docs", "docs/architecture.md")]


def ab_alternation_progress(conv: Conversation) -> Reply:
    n = len(conv.tool_results)
    if n >= 2 * len(AB_STEPS):
        return Reply("Overview: orders (api, models, repository, service), billing (invoices, tax, webhooks) and "
                     "auth (session, tokens) each expose a *_handler entry point that validates input and calls "
                     "its service; docs/architecture.md says to run `make test` before pushing.")
    d, f = AB_STEPS[n // 2]
    if n % 2 == 0:
        return Reply(f"Listing {d}.", call("list_dir", path=d))
    return Reply(f"Reading {f}.", call("read_file", path=f))


def three_step_cycle(conv: Conversation) -> Reply:
    n = len(conv.tool_results)
    k = n % 3
    wasted = n >= 3
    if k == 0:
        return Reply("Running the auth tests." if n == 0 else "Let me run the auth tests again.",
                     call("run_tests", target="tests/test_auth.py"), wasted=wasted)
    if k == 1:
        return Reply("test_expired_session fails with a naive/aware datetime mix. Reading the session module.",
                     call("read_file", path="src/auth/session.py"), wasted=wasted)
    return Reply("Checking where SESSION_TTL is used.", call("grep", pattern="SESSION_TTL", path="src"),
                 wasted=wasted)


EDITS = [
    ("    now = now or datetime.now()", "    now = now or datetime.now(timezone.utc)"),
    ('    session["created_at"] = datetime.now()', '    session["created_at"] = datetime.now(timezone.utc)'),
    ("def is_expired(created_at: datetime, now: datetime | None = None) -> bool:\n",
     "def is_expired(created_at: datetime, now: datetime | None = None) -> bool:\n"
     "    if created_at.tzinfo is None:\n        raise ValueError(\"created_at must be timezone-aware\")\n"),
]


def edit_test_until_pass(conv: Conversation) -> Reply:
    tests = conv.results("run_tests")
    if tests and "14 passed" in tests[-1].output and "failed" not in tests[-1].output:
        return Reply("All 14 auth tests pass. The session module now uses timezone-aware datetimes and rejects "
                     "naive ones.")
    if not tests:
        return Reply("Running the auth tests.", call("run_tests", target="tests/test_auth.py"))
    if not conv.results("read_file"):
        return Reply("Reading the session module.", call("read_file", path="src/auth/session.py"))
    edits = len(conv.results("edit_file"))
    if conv.tool_results[-1].name in ("run_tests", "read_file"):
        old, new = EDITS[min(edits, 2)]
        return Reply(f"Fixing: {['use an aware now()', 'make refresh() aware too', 'reject naive datetimes'][min(edits, 2)]}.",
                     call("edit_file", path="src/auth/session.py", old=old, new=new))
    return Reply("Re-running the auth tests.", call("run_tests", target="tests/test_auth.py"))


HEALTHY_STEPS: list[tuple[str, str, dict[str, object]]] = [
    ("Listing the orders package.", "list_dir", {"path": "src/orders"}),
    ("Running the tests to see the failure.", "run_tests", {"target": "tests/test_orders.py"}),
    ("Reading the repository module.", "read_file", {"path": "src/orders/repository.py"}),
    ("Searching for PAGE_SIZE.", "grep", {"pattern": "PAGE_SIZE", "path": "src"}),
    ("Fixing the page size.", "edit_file", {"path": "src/orders/repository.py", "old": "PAGE_SIZE = 50",
                                             "new": "PAGE_SIZE = 20"}),
    ("Running the whole suite.", "run_tests", {"target": "tests/"}),
    ("Reviewing the diff.", "git_diff", {}),
    ("Checking the working tree.", "git_status", {}),
]


def healthy_coding_agent(conv: Conversation) -> Reply:
    n = len(conv.tool_results)
    if n >= len(HEALTHY_STEPS):
        return Reply("Fixed: `OrdersRepository.PAGE_SIZE` was 50 while the API promises pages of 20; it is 20 "
                     "now and all 41 tests pass.")
    text, name, args = HEALTHY_STEPS[n]
    return Reply(text, call(name, **args))


def ticket_pagination(conv: Conversation) -> Reply:
    pages = conv.results("list_tickets")
    if pages and '"next_page": null' in pages[-1].output:
        return Reply("24 open tickets: 6 P1 (mobile crash in order history, 2FA for UTC+13, negative inventory, "
                     "coupon stacking, CDN image 404s, Okta SSO loop), 7 P2, 7 P3, 4 P4. Billing and auth have "
                     "the most (4 each).")
    return Reply("Listing open tickets." if not pages else f"Fetching page {len(pages) + 1}.",
                 call("list_tickets", status="open", page=len(pages) + 1))


# --- text-only: the same plan restated while the user says "go on" ----------------------------------------

PLAN_VARIANTS = [
    "Here is the plan for the Postgres 12 to 16 migration:\n1. Provision a Postgres 16 replica cluster.\n"
    "2. Set up logical replication from 12 to 16.\n3. Validate data and run the application test suite against "
    "16.\n4. Schedule a short cut-over window and switch the connection strings.\n5. Keep 12 as a fallback for "
    "a week, then decommission it.",
    "Sure. The migration plan:\n1. Provision a new Postgres 16 cluster as a replica.\n2. Configure logical "
    "replication from the 12 cluster to 16.\n3. Validate the data and run the app's tests against 16.\n"
    "4. Plan a brief cut-over window and switch the connection strings.\n5. Keep 12 around as a fallback for a "
    "week before decommissioning it.",
    "Of course. To migrate from Postgres 12 to 16:\n1. Provision the Postgres 16 cluster (replica).\n2. Set up "
    "logical replication 12 -> 16.\n3. Validate data, run the application test suite on 16.\n4. Schedule a "
    "short cut-over and switch connection strings.\n5. Keep Postgres 12 as a fallback for one week, then "
    "decommission.",
    "Continuing with the plan:\n1. Provision a Postgres 16 replica cluster.\n2. Establish logical replication "
    "from 12 to 16.\n3. Validate the data and test the application against 16.\n4. Cut over in a short "
    "maintenance window by switching connection strings.\n5. Keep 12 as fallback for a week, then decommission.",
]

GO_ON = ["go on", "ok, go on", "continue", "go on please", "yes, go on", "ok continue", "go on"]


def replan_go_on(conv: Conversation) -> Reply:
    n = len(conv.assistant_texts)
    return Reply(PLAN_VARIANTS[n % len(PLAN_VARIANTS)], wasted=n >= 1)


RUNBOOK = [
    PLAN_VARIANTS[0],
    "Step 1, provision Postgres 16: create the cluster with the same instance class (db.r6g.2xlarge), "
    "parameter group cloned from 12 with `shared_preload_libraries = 'pg_stat_statements'`, and "
    "`wal_level = logical` on the 12 primary (needs a restart: schedule it for Sunday 02:00).",
    "Step 2, logical replication: on 12 run `CREATE PUBLICATION mig FOR ALL TABLES;`, dump the schema with "
    "`pg_dump --schema-only` into 16, then `CREATE SUBSCRIPTION mig CONNECTION '...' PUBLICATION mig;`. Watch "
    "`pg_stat_subscription` until lag is under 1 s. Sequences are not replicated: sync them at cut-over.",
    "Step 3, validation: compare row counts per table and checksums of the 20 largest tables; run the app's "
    "integration suite against 16 in staging; check `pg_stat_statements` for plan regressions on the top 50 "
    "queries (16 changes some join estimates).",
    "Step 4, cut-over (15 min window): set the app read-only, wait for zero lag, run the sequence sync script, "
    "switch the `DATABASE_URL` secret to the 16 endpoint, roll the deployments, then drop the subscription.",
    "Step 5, fallback and cleanup: keep 12 running with reverse replication for 7 days; if nothing regresses, "
    "snapshot it and delete it. That completes the runbook.",
]


def go_on_progress(conv: Conversation) -> Reply:
    n = len(conv.assistant_texts)
    return Reply(RUNBOOK[min(n, len(RUNBOOK) - 1)])


# --- regenerating near-identical text (an output check that keeps rejecting it) ----------------------------

DRAFT = ("Release 4.2 brings faster checkout, with payment confirmation now up to 40% quicker on mobile. "
         "We have redesigned the order history page so you can filter by status and date, and exports now "
         "include tax details for every line item. Two-factor authentication supports hardware keys. We also "
         "fixed more than thirty bugs reported by customers, including the duplicate confirmation emails and "
         "the missing shipping estimates for Norway. Thank you for your feedback, which shaped this release.")
DRAFT_SWAPS = [("brings", "delivers"), ("We have redesigned", "We redesigned"), ("We also fixed", "We fixed"),
               ("Thank you for your feedback", "Thanks for your feedback"), ("now include", "include"),
               ("faster checkout", "a faster checkout"), ("more than thirty", "over thirty"),
               ("supports hardware keys", "now supports hardware keys"), ("shaped", "helped shape")]


def _words(text: str) -> int:
    return len(text.split())


def release_note_check(text: str) -> str | None:
    n = _words(text)
    return None if n <= 40 else f"The release note must be at most 40 words; this draft has {n}. Shorten it."


def regenerate_near_identical(conv: Conversation) -> Reply:
    n = len(conv.assistant_texts)
    draft = DRAFT
    for old, new in DRAFT_SWAPS[: n % (len(DRAFT_SWAPS) + 1)]:
        draft = draft.replace(old, new, 1)
    return Reply(draft, wasted=n >= 1)


FEEDBACK_DRAFTS = [
    DRAFT,
    "Release 4.2: payment confirmation is up to 40% faster on mobile, order history can be filtered by status and "
    "date, exports include per-line tax details, and 2FA supports hardware keys. We fixed over thirty "
    "customer-reported bugs, including duplicate confirmation emails and missing Norway shipping estimates. "
    "Thanks for your feedback!",
    "Release 4.2: 40% faster mobile payment confirmation, order history filters, per-line tax in exports, and "
    "hardware keys for 2FA. Plus 30+ customer-reported fixes. Thanks for your feedback!",
]


def regenerate_with_feedback(conv: Conversation) -> Reply:
    n = len(conv.assistant_texts)
    return Reply(FEEDBACK_DRAFTS[min(n, 2)])


# --- two agents handing a task back and forth --------------------------------------------------------------

TO_TECH = [
    "This looks like the app crashed during checkout, which is a technical issue. Transferring you to "
    "technical support.",
    "The duplicate charge seems to come from the checkout crash, so technical support should look at it first. "
    "Handing over.",
    "Since the charge was caused by an app failure, this belongs with our technical team. Transferring.",
    "This needs someone who can investigate the app crash. Passing you to technical support.",
    "A crash at checkout is outside billing's scope; technical support will take it from here.",
]
TO_BILLING = [
    "Duplicate charges and refunds are handled by billing, not technical support. Transferring you back to "
    "billing.",
    "Refunding a charge is a billing matter. Let me hand you over to the billing team.",
    "I can't issue refunds from technical support; billing handles payment corrections. Transferring.",
    "This is about money being charged twice, which is billing's area. Handing back to billing.",
    "Billing owns charge disputes. Transferring you to billing so they can resolve it.",
]


def handoff_ping_pong(conv: Conversation) -> Reply:
    hops = len([r for r in conv.tool_results if r.name.startswith("transfer_to")])
    if _asked(conv, "billing agent"):
        return Reply(TO_TECH[(hops // 2) % len(TO_TECH)], call(_transfer(conv)), wasted=hops >= 2)
    return Reply(TO_BILLING[(hops // 2) % len(TO_BILLING)], call(_transfer(conv)), wasted=hops >= 2)


def handoff_resolved(conv: Conversation) -> Reply:
    hops = len([r for r in conv.tool_results if r.name.startswith("transfer_to")])
    if _asked(conv, "billing agent"):
        if not conv.results("lookup_charges"):
            return Reply("Let me look at the charges on order 88231.", call("lookup_charges", order_id="88231"))
        if hops == 0:
            return Reply("There are two identical charges 38 s apart. Technical support needs to confirm the "
                         "second one came from the crash before I refund it. Transferring.", call(_transfer(conv)))
        if not conv.results("refund_charge"):
            return Reply("Technical support confirmed the duplicate. Refunding the second charge.",
                         call("refund_charge", charge_id="ch_3PqA7", reason="duplicate"))
        return Reply("I refunded the duplicate charge ch_3PqA7 (84.90 EUR); it will appear on your statement in "
                     "5-10 business days. The crash itself is filed with the iOS team.")
    if not conv.results("get_crash_report"):
        return Reply("Checking the crash reports for that checkout.", call("get_crash_report", order_id="88231"))
    return Reply("Confirmed: the iOS app crashed after payment and resubmitted the payment intent, so the "
                 "second charge is a duplicate. Handing back to billing for the refund.", call(_transfer(conv)))


# --- a run restarted again and again in the same session ---------------------------------------------------

def refund_run(conv: Conversation) -> Reply:
    """One run of the refund job; the session restarts it (same steps, same failure) in a new trace."""
    if not conv.results("lookup_order"):
        return Reply("Looking up order 88231 for refund request RR-5531.", call("lookup_order", order_id="88231"))
    refunds = conv.results("issue_refund")
    if not refunds:
        return Reply("The refund is approved; issuing 129.00 EUR.", call("issue_refund", order_id="88231",
                                                                          amount=129.0))
    if "succeeded" in refunds[-1].output:
        return Reply("Refund RR-5531 issued: 129.00 EUR back to the card ending 0019 (refund re_77Qm).")
    return Reply(f"I could not issue the refund: {refunds[-1].output.split('(request_id')[0].strip()}. The job "
                 "failed; please retry later or refund manually.")


# --- one prompt template over many documents ---------------------------------------------------------------

DOCS = [
    ("#4102", "Customer reports the mobile app crashes every time they open order history on iOS 17.1; "
              "reinstalling did not help. 40 similar reports since this morning."),
    ("#4107", "Our accountant says the invoice PDF for Austria shows 19% VAT instead of 20%. Affects all "
              "invoices since October."),
    ("#4111", "Password reset emails take about 20 minutes to arrive. Not blocking, but users complain."),
    ("#4113", "The CSV export cuts product names after 64 characters."),
    ("#4118", "Users in New Zealand (UTC+13) cannot log in: their 2FA codes are rejected as expired."),
    ("#4121", "A coupon code can be stacked with itself at checkout, giving a 100% discount. Seen in the wild."),
    ("#4124", "Dark mode makes the pricing page text unreadable (grey on grey)."),
    ("#4129", "Shipping estimate is missing for Norway addresses; checkout still works."),
]
DOC_SUMMARIES = {
    "#4102": "iOS 17.1 users' app crashes on opening order history (40 reports today, reinstall doesn't help). "
             "Priority: P1.",
    "#4107": "Austrian invoices show 19% VAT instead of 20% since October. Priority: P2.",
    "#4111": "Password reset emails arrive after ~20 minutes; annoying but not blocking. Priority: P3.",
    "#4113": "CSV export truncates product names at 64 characters. Priority: P4.",
    "#4118": "2FA codes are rejected as expired for UTC+13 users, locking them out. Priority: P1.",
    "#4121": "A coupon can be stacked with itself for a 100% discount, and it is being exploited. Priority: P1.",
    "#4124": "Pricing page text is unreadable in dark mode. Priority: P4.",
    "#4129": "No shipping estimate for Norway; checkout unaffected. Priority: P3.",
}
TEMPLATE = "Summarize the following support ticket in one or two sentences and assign a priority (P1-P4).\n\n" \
           "Ticket {id}:\n{body}"


def template_many_docs(conv: Conversation) -> Reply:
    last = conv.users[-1]
    for tid, summary in DOC_SUMMARIES.items():
        if f"Ticket {tid}:" in last:
            return Reply(summary)
    return Reply("I could not find a ticket in the message.")


# --- the scenarios -----------------------------------------------------------------------------------------

SRE = "You are an SRE assistant with access to production tooling. Investigate with the tools, then answer."
CODER = ("You are a coding agent working in the user's repository. Use the tools to inspect and change code, "
         "run the tests, and finish with a short summary.")
OPS = "You are a back-office operations assistant. Use the tools to do what the user asks, then report."
SUPPORT = "You are a support assistant with access to the knowledge base. Search it and answer from what you find."

_T = ("tools",)

SCENARIOS: tuple[Scenario, ...] = (
    Scenario("deploy_status_repeat", "same_call_same_result", "loop",
             "The same status check, same arguments, same degraded result, again and again.", SRE,
             (Turn("The billing service is degraded since the last deploy. Find out why and tell me what to do."),),
             deploy_status_repeat, (("pydantic_ai", "on"), ("pydantic_ai", "off"), ("openai_v2", "off"),
                                    ("langgraph_openllmetry", "on")),
             tools=("get_deploy_status", "read_file"), max_calls=10,
             onset_rule="Call 0 asks for get_deploy_status(billing); every later call asks for the same call with "
                        "the same arguments after seeing the same result: onset 1."),
    Scenario("ci_poll_fixed", "poll_fixed_interval", "legit",
             "Polls a CI run every 2 s (the tool sleeps); 'in_progress' four times, then success.", OPS,
             (Turn("Wait for CI run 9912 on my PR to finish and tell me whether it passed."),),
             ci_poll_fixed, (("pydantic_ai", "on"), ("openai_v2", "off"), ("langgraph_openllmetry", "on"),
                             ("openai_agents", "off")),
             tools=("get_ci_run",), look_alike_of="same_call_same_result"),
    Scenario("job_poll_backoff", "poll_backoff", "legit",
             "Starts an export job and polls it with a growing wait (0.5, 1, 2, 3 s) until it succeeds.", OPS,
             (Turn("Export the orders_2024 dataset and give me the file location when it's done."),),
             job_poll_backoff, (("openai_agents", "on"), ("langgraph_openinference", "off"), ("openai_v2", "off")),
             tools=("start_export", "get_export_status"), look_alike_of="same_call_same_result"),
    Scenario("kb_search_reworded", "reworded_search_empty", "loop",
             "A knowledge-base search reworded every call, every result empty.", SUPPORT,
             (Turn("How do I rotate the API signing key for the EU tenant without downtime?"),),
             kb_search_reworded, (("openai_agents", "on"), ("openai_agents", "off"),
                                  ("langgraph_openllmetry", "off"), ("pydantic_ai", "on")),
             tools=("search_docs", "read_article"), max_calls=10,
             onset_rule="Call 0's search returns nothing; every later call searches again with another wording and "
                        "gets the same empty result: onset 1."),
    Scenario("kb_search_refined", "search_refined_finds", "legit",
             "One empty search, one reworded search that finds the article, read it, answer.", SUPPORT,
             (Turn("How do I rotate the API signing key for the EU tenant without downtime?"),),
             kb_search_refined, (("openai_agents", "off"), ("langgraph_openllmetry", "on"), ("pydantic_ai", "off")),
             tools=("search_docs", "read_article"), look_alike_of="reworded_search_empty"),
    Scenario("file_reread_window", "file_reread_shifting_window", "loop",
             "Re-reads a 2,000-line log at shifting offsets (400 lines, ~9k tokens a read); every window holds the "
             "same heartbeat and batch lines, the crash near the end is never reached.", SRE,
             (Turn("The nightly export crashed. Find the root cause in logs/export-2024-11-02.log."),),
             file_reread_window, (("pydantic_ai", "on"), ("langgraph_openinference", "off"), ("openai_v2", "on")),
             tools=("read_file", "grep"), max_calls=8,
             onset_rule="Call 0 reads lines 1-400; every later call reads another 400-line window at offset 400-480 "
                        "whose lines are the same repeating heartbeat/batch lines (only timestamps differ): onset 1."),
    Scenario("log_paged_read", "paged_read_progress", "legit",
             "Reads a log in successive 400-line windows (~9k tokens each), each new, until it finds the cause.", SRE,
             (Turn("The orders API started returning 503s this morning. Find the cause in logs/api-2024-11-04.log."),),
             log_paged_read, (("pydantic_ai", "off"), ("langgraph_openinference", "on"), ("openai_v2", "off")),
             tools=("read_file", "grep"), look_alike_of="file_reread_shifting_window"),
    Scenario("invoice_error_fresh_id", "same_error_fresh_id", "loop",
             "The same invoice call fails with the same 502, each error with a fresh request id and timestamp.", OPS,
             (Turn("Create the November invoice for customer cus_4821 (129.00 EUR) and email it to them."),),
             invoice_error_fresh_id, (("openai_agents", "on"), ("langgraph_openllmetry", "off"), ("pydantic_ai", "off"),
                                      ("langgraph_openinference", "on")),
             tools=("create_invoice", "send_invoice"), max_calls=10,
             onset_rule="Call 0 creates the invoice and gets a 502; every later call retries the same call and "
                        "gets the same 502 (only request_id/at differ): onset 1."),
    Scenario("error_then_fixed_args", "error_fixed_progress", "legit",
             "A validation error, the call fixed with other arguments, success, then the next step.", OPS,
             (Turn("Create an invoice for customer cus_4821 for 129.50 EUR and email it."),),
             error_then_fixed_args, (("openai_agents", "off"), ("langgraph_openllmetry", "on"), ("pydantic_ai", "on")),
             tools=("create_invoice", "send_invoice"), look_alike_of="same_error_fresh_id"),
    Scenario("rates_flaky_backoff", "flaky_retry_recovers", "legit",
             "A flaky API (two 503s with fresh request ids, a real 1 s and 2 s backoff), then success and normal "
             "work: three conversions and a report.", OPS,
             (Turn("Convert our Q4 budget of EUR 250,000 to USD, GBP and CHF at today's rates and save a report."),),
             rates_flaky_backoff, (("pydantic_ai", "on"), ("pydantic_ai", "off"), ("openai_agents", "off"),
                                   ("langgraph_openinference", "on")),
             tools=("fetch_exchange_rates", "wait", "convert_amount", "write_report"),
             look_alike_of="same_error_fresh_id"),
    Scenario("retry_once", "retry_once_succeeds", "legit",
             "One CRM timeout, the same call retried once and succeeding, then the next step.", OPS,
             (Turn("What plan is dana@whitfield.example on, and when does it renew?"),),
             retry_once, (("langgraph_openinference", "on"), ("openai_agents", "off"), ("openai_v2", "off")),
             tools=("lookup_customer", "get_subscription"), look_alike_of="same_error_fresh_id"),
    Scenario("ab_cycle", "ab_cycle", "loop",
             "Alternates list_dir(config) and read_file(config/settings.py), same results each time.", CODER,
             (Turn("Why does the app ignore FEATURE_FLAGS in production?"),),
             ab_cycle, (("langgraph_openllmetry", "on"), ("langgraph_openllmetry", "off"), ("openai_agents", "off"),
                        ("pydantic_ai", "on")),
             tools=("list_dir", "read_file", "grep"), max_calls=10,
             onset_rule="Calls 0-1 list config/ and read settings.py (new); call 2 lists config/ again with the "
                        "same result, and the A/B cycle repeats from there: onset 2."),
    Scenario("ab_alternation_progress", "ab_alternation_progress", "legit",
             "Alternates list_dir and read_file over four different directories and files, then answers.", CODER,
             (Turn("Give me an overview of how the orders, billing and auth packages are structured."),),
             ab_alternation_progress, (("langgraph_openllmetry", "off"), ("openai_agents", "on"), ("openai_v2", "off")),
             tools=("list_dir", "read_file", "grep"), look_alike_of="ab_cycle"),
    Scenario("three_step_cycle", "three_step_cycle", "loop",
             "run_tests -> read_file -> grep, again and again, no edit, the same failure each time.", CODER,
             (Turn("tests/test_auth.py is failing. Fix it."),),
             three_step_cycle, (("langgraph_openinference", "on"), ("pydantic_ai", "off"), ("openai_v2", "on"),
                                ("openai_agents", "on")),
             tools=("run_tests", "read_file", "grep", "edit_file"), max_calls=12,
             onset_rule="Calls 0-2 run the tests, read session.py and grep SESSION_TTL (new); call 3 runs the "
                        "same tests with the same failure and the 3-step cycle repeats: onset 3."),
    Scenario("edit_test_until_pass", "edit_test_cycle", "legit",
             "Run tests, read, then edit/test cycles whose edits differ and whose failures shrink (3, 1, 0).", CODER,
             (Turn("tests/test_auth.py is failing. Fix it."),),
             edit_test_until_pass, (("langgraph_openinference", "off"), ("pydantic_ai", "on"), ("openai_v2", "off")),
             tools=("run_tests", "read_file", "grep", "edit_file"), max_calls=14, look_alike_of="three_step_cycle"),
    Scenario("healthy_coding_agent", "healthy_varied_tools", "legit",
             "A healthy coding agent: eight different tool calls, then a summary.", CODER,
             (Turn("The orders API returns 50 items per page but the docs say 20. Fix it."),),
             healthy_coding_agent, (("openai_v2", "off"), ("openai_v2", "on"), ("pydantic_ai", "off"),
                                    ("openai_agents", "off"), ("langgraph_openinference", "off")),
             tools=("list_dir", "read_file", "grep", "edit_file", "run_tests", "git_diff", "git_status")),
    Scenario("ticket_pagination", "pagination", "legit",
             "Pages through open tickets (six pages, each different), then summarizes.", OPS,
             (Turn("Summarize all open support tickets by priority."),),
             ticket_pagination, (("pydantic_ai", "off"), ("openai_agents", "off"), ("langgraph_openllmetry", "off"),
                                 ("openai_v2", "off"), ("langgraph_openinference", "on")),
             tools=("list_tickets",), look_alike_of="file_reread_shifting_window"),
    Scenario("replan_go_on", "text_replan", "loop",
             "No tools: the user says 'go on' and the assistant restates the same five-step plan, reworded.",
             "You are a senior database engineer helping plan infrastructure work.",
             (Turn("Plan the migration of our Postgres 12 cluster to Postgres 16 with minimal downtime."),
              *(Turn(g) for g in GO_ON)),
             replan_go_on, (("openai_agents", "on"), ("openai_agents", "off"), ("pydantic_ai", "off"),
                            ("openai_v2", "on")),
             onset_rule="Call 0 answers with the plan; every later call (after 'go on') restates the same plan in "
                        "other words: onset 1."),
    Scenario("go_on_progress", "chat_go_on_progress", "legit",
             "No tools: after each 'go on' the assistant details the next step of the runbook, then finishes.",
             "You are a senior database engineer helping plan infrastructure work.",
             (Turn("Plan the migration of our Postgres 12 cluster to Postgres 16 with minimal downtime."),
              *(Turn(g) for g in GO_ON[:5])),
             go_on_progress, (("openai_agents", "off"), ("pydantic_ai", "on"), ("openai_v2", "off")),
             look_alike_of="text_replan"),
    Scenario("regenerate_near_identical", "regenerate_near_identical", "loop",
             "An output check rejects a release note as too long; the model regenerates nearly the same text.",
             "You write customer-facing release notes.",
             (Turn("Write the release note for version 4.2 (faster mobile checkout, order history filters, tax in "
                   "exports, hardware keys for 2FA, 30+ bug fixes)."),),
             regenerate_near_identical, (("pydantic_ai", "on"), ("pydantic_ai", "off"),
                                         ("langgraph_openllmetry", "off"), ("openai_v2", "on")),
             kind="validate", validator=release_note_check, max_validations=9,
             onset_rule="Call 0 writes a 76-word draft that fails the 40-word check; every later call returns "
                        "nearly the same draft (a word or two changed) that fails again: onset 1."),
    Scenario("regenerate_with_feedback", "regenerate_progress", "legit",
             "The same output check; each regenerated draft follows the feedback and the third is accepted.",
             "You write customer-facing release notes.",
             (Turn("Write the release note for version 4.2 (faster mobile checkout, order history filters, tax in "
                   "exports, hardware keys for 2FA, 30+ bug fixes)."),),
             regenerate_with_feedback, (("pydantic_ai", "off"), ("langgraph_openllmetry", "on"), ("openai_v2", "off")),
             kind="validate", validator=release_note_check, look_alike_of="regenerate_near_identical"),
    Scenario("handoff_ping_pong", "handoff_ping_pong", "loop",
             "Billing and technical support hand the customer back and forth, each time with a reworded reason.",
             "", (Turn("I was charged twice for order 88231 after the app crashed at checkout. Please fix it."),),
             handoff_ping_pong, (("openai_agents", "on"), ("openai_agents", "off"), ("langgraph_openinference", "off"),
                                 ("langgraph_openllmetry", "on")),
             kind="handoff", max_calls=10,
             agents=(AgentSpec("Billing agent", "You are the billing agent. You handle charges and refunds.",
                               ("lookup_charges", "refund_charge")),
                     AgentSpec("Technical support agent", "You are the technical support agent. You investigate "
                               "app problems and crashes.", ("get_crash_report",))),
             onset_rule="Call 0 (billing) hands off to technical support, call 1 hands back; call 2 hands off "
                        "again with a reworded reason, repeating call 0 without progress: onset 2."),
    Scenario("handoff_resolved", "handoff_with_progress", "legit",
             "Billing checks the charges, hands to technical support, which confirms the crash and hands back; "
             "billing refunds.", "",
             (Turn("I was charged twice for order 88231 after the app crashed at checkout. Please fix it."),),
             handoff_resolved, (("openai_agents", "off"), ("langgraph_openinference", "on"),
                                ("langgraph_openllmetry", "off"), ("openai_agents", "on")),
             kind="handoff",
             agents=(AgentSpec("Billing agent", "You are the billing agent. You handle charges and refunds.",
                               ("lookup_charges", "refund_charge")),
                     AgentSpec("Technical support agent", "You are the technical support agent. You investigate "
                               "app problems and crashes.", ("get_crash_report",))),
             look_alike_of="handoff_ping_pong"),
    Scenario("restart_failing_run", "restart_same_session", "loop",
             "A refund job restarted five times (a new trace each, the same session), failing the same way.", OPS,
             tuple(Turn("Process refund request RR-5531 for order 88231.", history=False) for _ in range(5)),
             refund_run, (("pydantic_ai", "on"), ("openai_agents", "off"), ("langgraph_openllmetry", "off"),
                                   ("openai_v2", "off"), ("langgraph_openinference", "on")),
             tools=("lookup_order", "issue_refund"), onset_turn=1,
             onset_rule="Run 1 (calls 0-2) looks up the order, gets card_expired from the refund, reports failure. "
                        "The first call of run 2 starts the same steps over with nothing changed: onset = the "
                        "number of LLM calls in run 1 (3)."),
    Scenario("restart_once_recovers", "restart_once_succeeds", "legit",
             "The refund job fails on a transient 503, is restarted once in a new trace, and succeeds.", OPS,
             tuple(Turn("Process refund request RR-5531 for order 88231.", history=False) for _ in range(2)),
             refund_run, (("pydantic_ai", "off"), ("openai_agents", "on"), ("langgraph_openllmetry", "on")),
             tools=("lookup_order", "issue_refund"), look_alike_of="restart_same_session"),
    Scenario("template_many_docs", "template_over_documents", "legit",
             "One prompt template over eight tickets, each a fresh run (new trace) in the same batch session.",
             "You triage support tickets.",
             tuple(Turn(TEMPLATE.format(id=i, body=b), history=False) for i, b in DOCS),
             template_many_docs, (("langgraph_openinference", "off"), ("pydantic_ai", "on"), ("openai_v2", "off"),
                                  ("openai_agents", "off")),
             look_alike_of="restart_same_session"),
)

BY_ID = {s.id: s for s in SCENARIOS}
