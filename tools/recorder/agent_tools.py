"""The agents' tools: plain, typed Python functions with docstrings, as users hand them to a framework.

Each recording gets a fresh :class:`World` (the systems the tools talk to), so the results are deterministic:
a function of the scenario and of the order of the calls, never of the clock or of this machine. Where a real
system would put a fresh request id or timestamp in a result, the world derives it from a counter, so ids differ
call to call and are the same on every re-recording. Polling tools really sleep (``time.sleep``): the gaps
between the calls in the recorded spans are real.

Failures are raised as :class:`ToolError`; each framework adapter hands them to the model its own way.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from typing import Any


class ToolError(Exception):
    """A tool failed the way the system behind it fails (an HTTP error, a rejected request)."""


def _rid(*parts: Any) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def _stamp(seconds: int) -> str:
    base = 1730714400 + seconds  # 2024-11-04T10:00:00Z
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(base))


def _export_log() -> list[str]:
    """A nightly export log: 2,000 lines of repetitive heartbeat and batch lines, the crash near the end."""
    lines = []
    for i in range(2000):
        t = _stamp(i * 3)
        k = i % 8
        if i == 1987:
            lines.append(f"{t} ERROR exporter.writer: batch 1987 failed: S3 PutObject AccessDenied "
                         "(bucket=acme-exports-eu, key=orders/2024-11-02/part-1987.parquet)")
        elif i > 1987:
            lines.append(f"{t} ERROR exporter.main: aborting export after writer failure (exit code 3)")
        elif k == 0:
            lines.append(f"{t} INFO  exporter.scheduler: heartbeat queue_depth=0 workers=8 mem_mb=412")
        elif k in (1, 2, 3, 4, 5):
            lines.append(f"{t} INFO  exporter.writer: batch exported rows=5000 format=parquet status=ok")
        else:
            lines.append(f"{t} DEBUG exporter.pool: worker idle, waiting for next batch (timeout=30s)")
    return lines


def _service_log() -> list[str]:
    """A service log whose windows differ: startup, traffic, a slow dependency, then the crash."""
    lines = []
    for i in range(1600):
        t = _stamp(i * 2)
        if i < 400:
            lines.append(f"{t} INFO  api.boot: loading module {['auth', 'orders', 'billing', 'search'][i % 4]}"
                         f" step={i} config_keys={100 + i % 37}")
        elif i < 800:
            lines.append(f"{t} INFO  api.http: GET /v1/orders/{88000 + i} 200 {12 + i % 40}ms user=u{i % 97}")
        elif i < 1200:
            lines.append(f"{t} WARN  api.db: pool wait {200 + i % 300}ms for connection (pool=orders, in_use=20/20)")
        elif i == 1234:
            lines.append(f"{t} ERROR api.db: connection pool exhausted after 30000ms; "
                         "raising PoolTimeout in OrdersRepository.list_for_user")
        else:
            lines.append(f"{t} ERROR api.http: GET /v1/orders/{90000 + i} 503 30001ms user=u{i % 97}")
    return lines


SETTINGS_PY = '''"""Application settings, read once at import."""
import os

ENV = os.environ.get("APP_ENV", "development")
DATABASE_URL = os.environ["DATABASE_URL"]
FEATURE_FLAGS = os.environ.get("FEATURE_FLAGS", "")  # comma-separated
if ENV == "production":
    FEATURE_FLAGS = ""  # flags are managed by the flag service in production
CACHE_TTL_SECONDS = int(os.environ.get("CACHE_TTL_SECONDS", "300"))
'''

SESSION_PY = '''from datetime import datetime, timedelta, timezone

SESSION_TTL = timedelta(minutes=30)


def is_expired(created_at: datetime, now: datetime | None = None) -> bool:
    now = now or datetime.now()
    return now - created_at > SESSION_TTL


def refresh(session: dict) -> dict:
    session["created_at"] = datetime.now()
    return session
'''

TICKETS = [
    ("Checkout button unresponsive on Safari 17", "P2", "web"),
    ("Invoice PDF shows wrong VAT rate for AT", "P2", "billing"),
    ("Password reset email arrives after 20 minutes", "P3", "auth"),
    ("Search returns archived products", "P3", "search"),
    ("Mobile app crashes when opening order history", "P1", "mobile"),
    ("CSV export truncates long product names", "P4", "export"),
    ("2FA codes rejected for users in UTC+13", "P1", "auth"),
    ("Shipping estimate missing for Norway", "P3", "shipping"),
    ("Refund status stuck at 'pending' for PayPal", "P2", "billing"),
    ("Dark mode: unreadable text on pricing page", "P4", "web"),
    ("Webhooks retried forever after 410 Gone", "P2", "platform"),
    ("Bulk import fails on UTF-8 BOM", "P3", "import"),
    ("Inventory count negative after cancellation", "P1", "inventory"),
    ("Coupon stacking allows 100% discount", "P1", "pricing"),
    ("Slow dashboard load for accounts with 10k orders", "P2", "web"),
    ("Address autocomplete ignores apartment number", "P3", "checkout"),
    ("Gift card balance not shown in app", "P3", "mobile"),
    ("Duplicate order confirmation emails", "P2", "notifications"),
    ("Tax report off by one day (timezone)", "P2", "billing"),
    ("Product images 404 after CDN migration", "P1", "web"),
    ("API rate limit headers missing", "P4", "platform"),
    ("Order notes lose line breaks", "P4", "orders"),
    ("SSO login loops for Okta tenants", "P1", "auth"),
    ("Wishlist not synced between devices", "P3", "mobile"),
]


class World:
    """The systems behind the tools, for one recording. Counters make results a function of call order."""

    def __init__(self, scenario: str) -> None:
        self.scenario = scenario
        self.calls: dict[str, int] = {}
        self.export_log = _export_log()
        self.service_log = _service_log()
        self.edits = 0

    def count(self, name: str) -> int:
        """How many times ``name`` was called before this call (0 the first time)."""
        n = self.calls.get(name, 0)
        self.calls[name] = n + 1
        return n

    def request_id(self, name: str, n: int) -> str:
        return "req_" + _rid(self.scenario, name, n)[:20]


def make_tools(world: World) -> dict[str, Callable[..., str]]:
    """Every tool, bound to ``world``; a scenario exposes a few of them to its agent."""
    sc = world.scenario

    def get_deploy_status(service: str) -> str:
        """Get the current rollout status of a service's deployment in production."""
        world.count("get_deploy_status")
        return json.dumps({"service": service, "revision": f"{service}-7f9c2e1", "strategy": "RollingUpdate",
                           "replicas": {"desired": 3, "updated": 3, "ready": 2, "available": 2},
                           "status": "Degraded",
                           "conditions": [{"type": "Available", "status": "False",
                                           "reason": "MinimumReplicasUnavailable"},
                                          {"type": "Progressing", "status": "True",
                                           "reason": "NewReplicaSetAvailable"}],
                           "message": f"1 pod in CrashLoopBackOff ({service}-7f9c2e1-x2k9p)"})

    def search_docs(query: str) -> str:
        """Search the internal knowledge base. Returns matching article ids and titles."""
        n = world.count("search_docs")
        q = query.lower()
        if sc == "kb_search_refined" and "rotat" in q and ("signing" in q or "jwks" in q) and n >= 1:
            return json.dumps({"query": query, "total": 2, "took_ms": 31, "results": [
                {"id": "KB-1142", "title": "Rotating JWT signing keys with overlapping JWKS", "score": 0.91},
                {"id": "KB-0987", "title": "Tenant key management (EU region)", "score": 0.74}]})
        return json.dumps({"query": query, "total": 0, "took_ms": 9 + (len(query) * 7) % 23, "results": []})

    def read_article(article_id: str) -> str:
        """Read a knowledge-base article by id."""
        world.count("read_article")
        if article_id == "KB-1142":
            return ("# Rotating JWT signing keys with overlapping JWKS\n\n1. Generate the new key pair with "
                    "`keyctl generate --tenant eu-1 --alg ES256`.\n2. Publish it in the JWKS next to the old key "
                    "(`keyctl publish --stage next`). Verifiers pick it up within 10 minutes (JWKS cache TTL).\n"
                    "3. Switch signing to the new key: `keyctl promote --tenant eu-1`.\n4. Keep the old key in "
                    "the JWKS for the longest token lifetime (24 h), then `keyctl retire`.\nNo downtime: tokens "
                    "signed by either key verify during the overlap.")
        raise ToolError(f"404 Not Found: article {article_id} does not exist")

    def read_file(path: str, offset: int = 0, limit: int = 400) -> str:
        """Read a text file from the repository or the log directory, `limit` lines from line `offset`."""
        world.count("read_file")
        if path.startswith("logs/export"):
            lines = world.export_log
        elif path.startswith("logs/api"):
            lines = world.service_log
        elif path == "config/settings.py":
            lines = SETTINGS_PY.splitlines()
        elif path == "src/auth/session.py":
            lines = SESSION_PY.splitlines()
        elif path.endswith(".py"):
            stem = path.rsplit("/", 1)[-1][:-3]
            lines = [f'"""{stem}: part of the orders service."""', "", f"def {stem}_handler(request):",
                     f"    data = validate_{stem}(request.json())", f"    return {stem}_service.process(data)"]
        elif path.endswith(".md"):
            lines = [f"# {path}", "", "Run `make test` before pushing. Settings are read from the environment "
                     "(see config/settings.py)."]
        else:
            raise ToolError(f"ENOENT: no such file or directory: '{path}'")
        window = lines[offset:offset + limit]
        body = "\n".join(f"{offset + i + 1:>5}  {line}" for i, line in enumerate(window))
        return f"{path} (lines {offset + 1}-{offset + len(window)} of {len(lines)})\n{body}"

    def list_dir(path: str) -> str:
        """List the entries of a directory in the repository."""
        world.count("list_dir")
        listing = {
            "config": ["__init__.py", "settings.py", "logging.yaml", "flags.example.env"],
            "src/orders": ["__init__.py", "api.py", "models.py", "repository.py", "service.py"],
            "src/billing": ["__init__.py", "invoices.py", "tax.py", "webhooks.py"],
            "src/auth": ["__init__.py", "session.py", "tokens.py"],
            "tests": ["conftest.py", "test_auth.py", "test_orders.py", "test_billing.py"],
            "docs": ["architecture.md", "deploy.md", "flags.md"],
        }.get(path.rstrip("/"))
        if listing is None:
            raise ToolError(f"ENOENT: no such directory: '{path}'")
        return "\n".join(listing)

    def grep(pattern: str, path: str) -> str:
        """Search files under `path` for a regular expression; returns file:line: text matches."""
        world.count("grep")
        if "SESSION_TTL" in pattern:
            return ("src/auth/session.py:3:SESSION_TTL = timedelta(minutes=30)\n"
                    "src/auth/session.py:8:    return now - created_at > SESSION_TTL")
        if "FEATURE_FLAGS" in pattern:
            return ("config/settings.py:6:FEATURE_FLAGS = os.environ.get(\"FEATURE_FLAGS\", \"\")\n"
                    "config/settings.py:8:    FEATURE_FLAGS = \"\"")
        return f"src/orders/service.py:{len(pattern) + 10}:    {pattern}(data)"

    def run_tests(target: str) -> str:
        """Run the test suite (or one test file) with pytest and return the summary."""
        n = world.count("run_tests")
        if sc == "edit_test_until_pass":
            failing = [["test_expired_session", "test_refresh_extends", "test_naive_datetime_rejected"],
                       ["test_naive_datetime_rejected"], []][min(world.edits, 2)]
            if failing:
                lines = [f"FAILED tests/test_auth.py::{t} - AssertionError" for t in failing]
                return "\n".join([*lines, f"{len(failing)} failed, {14 - len(failing)} passed in 1.{31 + n}s"])
            return "14 passed in 1.27s"
        if sc == "healthy_coding_agent":
            return "41 passed in 3.08s" if world.edits else (
                "FAILED tests/test_orders.py::test_list_orders_paginates - assert 50 == 20\n1 failed, 40 passed in 3.12s")
        return ("FAILED tests/test_auth.py::test_expired_session - TypeError: can't subtract offset-naive and "
                "offset-aware datetimes\n1 failed, 13 passed in 1.42s")

    def edit_file(path: str, old: str, new: str) -> str:
        """Replace the text `old` with `new` in a file."""
        world.count("edit_file")
        world.edits += 1
        return f"Edited {path}: replaced 1 occurrence ({len(old.splitlines()) or 1} line(s) -> {len(new.splitlines()) or 1})."

    def git_status() -> str:
        """Show the working tree status."""
        world.count("git_status")
        if world.edits:
            return f"On branch fix/session-expiry\nChanges not staged for commit:\n\tmodified:   src/auth/session.py ({world.edits} hunk(s))"
        return "On branch fix/session-expiry\nnothing to commit, working tree clean"

    def git_diff() -> str:
        """Show the unstaged changes."""
        world.count("git_diff")
        return ("--- a/src/orders/repository.py\n+++ b/src/orders/repository.py\n@@ -41,7 +41,7 @@\n"
                "-    PAGE_SIZE = 50\n+    PAGE_SIZE = 20\n")

    def create_invoice(customer_id: str, amount_cents: int, currency: str) -> str:
        """Create an invoice for a customer. `amount_cents` is the amount in minor units (integer cents)."""
        n = world.count("create_invoice")
        if sc == "error_then_fixed_args" and n == 0:
            raise ToolError(f"422 Unprocessable Entity: amount_cents must be a multiple of 100 for currency {currency}"
                            f" in this account (got {amount_cents}); request_id={world.request_id('inv', n)}")
        if sc == "error_then_fixed_args":
            return json.dumps({"invoice_id": "in_1QdX82", "customer_id": customer_id, "amount_cents": amount_cents,
                               "currency": currency, "status": "draft"})
        raise ToolError(f"502 Bad Gateway from billing-api: upstream connect error or disconnect/reset before "
                        f"headers (request_id={world.request_id('inv', n)}, at={_stamp(1500 + 7 * n + n * n)})")

    def send_invoice(invoice_id: str) -> str:
        """Finalize an invoice and email it to the customer."""
        world.count("send_invoice")
        return json.dumps({"invoice_id": invoice_id, "status": "open", "emailed_to": "ap@northwind.example"})

    def fetch_exchange_rates(base: str) -> str:
        """Fetch today's exchange rates for a base currency from the rates provider."""
        n = world.count("fetch_exchange_rates")
        if n < 2:
            raise ToolError(f"503 Service Unavailable from rates.provider: overloaded, retry later "
                            f"(request_id={world.request_id('fx', n)}, retry_after={n + 1}s)")
        return json.dumps({"base": base, "date": "2024-11-04", "rates": {"USD": 1.0873, "GBP": 0.8391,
                                                                        "CHF": 0.9402, "JPY": 165.12}})

    def wait(seconds: float) -> str:
        """Wait before retrying (backoff). Sleeps for the given number of seconds."""
        world.count("wait")
        time.sleep(min(float(seconds), 5.0))
        return f"waited {float(seconds):g}s"

    def convert_amount(amount: float, currency: str, rate: float) -> str:
        """Convert an amount in EUR to another currency at the given rate, rounded to cents."""
        world.count("convert_amount")
        return f"{amount:.2f} EUR = {amount * rate:.2f} {currency}"

    def write_report(title: str, body: str) -> str:
        """Save a report to the shared drive; returns its path."""
        world.count("write_report")
        return f"saved reports/{title.lower().replace(' ', '-')[:40]}.md ({len(body)} bytes)"

    def lookup_customer(email: str) -> str:
        """Find a customer record by email in the CRM."""
        n = world.count("lookup_customer")
        if n == 0:
            raise ToolError(f"CRM request timed out after 10.0s (request_id={world.request_id('crm', n)})")
        return json.dumps({"customer_id": "cus_7731", "email": email, "name": "Dana Whitfield", "plan": "team"})

    def get_subscription(customer_id: str) -> str:
        """Get the active subscription of a customer."""
        world.count("get_subscription")
        return json.dumps({"customer_id": customer_id, "plan": "team", "seats": 12, "renews_at": "2024-12-01",
                           "status": "active", "payment_method": "card_visa_4242"})

    def start_export(dataset: str) -> str:
        """Start an asynchronous export job of a dataset; returns the job id."""
        world.count("start_export")
        return json.dumps({"job_id": "exp_5521", "dataset": dataset, "state": "queued"})

    def get_export_status(job_id: str, wait_seconds: float) -> str:
        """Wait `wait_seconds` (long poll), then return the export job's state and progress."""
        n = world.count("get_export_status")
        time.sleep(min(float(wait_seconds), 4.0))
        states = [("running", 0.12, None), ("running", 0.41, None), ("running", 0.83, None),
                  ("succeeded", 1.0, "s3://acme-exports-eu/orders_2024/exp_5521.parquet")]
        state, progress, url = states[min(n, len(states) - 1)]
        out: dict[str, Any] = {"job_id": job_id, "state": state, "progress": progress,
                               "rows_exported": int(progress * 1_840_000)}
        if url:
            out["result_url"] = url
        return json.dumps(out)

    def get_ci_run(run_id: str) -> str:
        """Check a CI workflow run; polls the CI API every 2 s, so each check takes 2 seconds."""
        n = world.count("get_ci_run")
        time.sleep(2.0)
        if n < 4:
            return json.dumps({"id": int(run_id), "name": "ci", "status": "in_progress", "conclusion": None,
                               "head_branch": "feature/rate-limits", "run_attempt": 1})
        return json.dumps({"id": int(run_id), "name": "ci", "status": "completed", "conclusion": "success",
                           "head_branch": "feature/rate-limits", "run_attempt": 1,
                           "jobs": {"lint": "success", "test": "success", "build": "success"}})

    def list_tickets(status: str, page: int) -> str:
        """List support tickets with a status, 4 per page (pages start at 1)."""
        world.count("list_tickets")
        start = (page - 1) * 4
        rows = [{"id": 4100 + start + i, "title": t, "priority": p, "component": c}
                for i, (t, p, c) in enumerate(TICKETS[start:start + 4])]
        next_page = page + 1 if start + 4 < len(TICKETS) else None
        return json.dumps({"status": status, "page": page, "tickets": rows, "next_page": next_page})

    def lookup_charges(order_id: str) -> str:
        """List the card charges of an order."""
        world.count("lookup_charges")
        return json.dumps({"order_id": order_id, "charges": [
            {"charge_id": "ch_3PqA1", "amount": 84.90, "currency": "EUR", "status": "succeeded",
             "created": "2024-11-03T18:02:11Z"},
            {"charge_id": "ch_3PqA7", "amount": 84.90, "currency": "EUR", "status": "succeeded",
             "created": "2024-11-03T18:02:49Z"}]})

    def get_crash_report(order_id: str) -> str:
        """Get the client crash reports linked to an order's checkout session."""
        world.count("get_crash_report")
        return json.dumps({"order_id": order_id, "reports": [
            {"app": "ios 5.12.0", "signal": "SIGABRT", "at": "2024-11-03T18:02:13Z",
             "summary": "CheckoutViewController: payment confirmation callback fired after view dismissed; "
                        "the client resubmitted the payment intent"}]})

    def refund_charge(charge_id: str, reason: str) -> str:
        """Refund a card charge in full."""
        world.count("refund_charge")
        return json.dumps({"refund_id": "re_9Lx2", "charge_id": charge_id, "status": "succeeded", "reason": reason})

    def lookup_order(order_id: str) -> str:
        """Get an order with its payment and refund requests."""
        world.count("lookup_order")
        return json.dumps({"order_id": order_id, "customer": "cus_4821", "total": 129.0, "currency": "EUR",
                           "payment": {"method": "card", "last4": "0019", "exp": "10/24"},
                           "refund_requests": [{"id": "RR-5531", "amount": 129.0, "status": "approved"}]})

    def issue_refund(order_id: str, amount: float) -> str:
        """Issue a refund for an order through the payment gateway."""
        n = world.count("issue_refund")
        rid = world.request_id("refund", n)
        if sc == "restart_once_recovers" and n >= 1:
            return json.dumps({"refund_id": "re_77Qm", "order_id": order_id, "amount": amount, "status": "succeeded"})
        if sc == "restart_once_recovers":
            raise ToolError(f"payment-gateway 503: temporarily unavailable, try again later (request_id={rid})")
        raise ToolError(f"payment-gateway 402: card_expired: the card on file (****0019) expired 10/24; "
                        f"refund to original payment method impossible (request_id={rid})")

    return {f.__name__: f for f in [
        get_deploy_status, search_docs, read_article, read_file, list_dir, grep, run_tests, edit_file, git_status,
        git_diff, create_invoice, send_invoice, fetch_exchange_rates, wait, convert_amount, write_report,
        lookup_customer, get_subscription, start_export, get_export_status, get_ci_run, list_tickets,
        lookup_charges, get_crash_report, refund_charge, lookup_order, issue_refund]}
