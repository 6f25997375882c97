"""Loops judged by their outcome (issue 31): many different changes after which the same check comes back byte for
byte (the changes are not taking effect), a command re-run while its captured output stays empty, and a failing
action re-sent with a ``think`` step between the attempts. The requests vary or are interleaved with neutral steps;
what comes back never does. Each generator returns (calls, onset, description); ``v`` selects the sub-pattern
(``v % 3``: every sub-pattern runs with content captured and without)."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from detector.evaluation.corpus_records import CallSpec, ToolSpec
from detector.evaluation.corpus_text import RunBuilder, jitter, tokens_of

__all__ = ["gen_empty_output_rerun", "gen_same_outcome", "gen_think_between_failures"]

EXIT = "\n[The command completed with exit code {code}.]"

# ------------------------------------------------------------------------- many changes, the same check

TIMEPARSE = [  # /workspace/app/src/app/timeparse.py as the agent first sees it
    "import re", "", 'UNITS = {"s": 1, "m": 60, "h": 3600}', 'PATTERN = re.compile(r"^(\\d+)([smh])$")', "", "",
    "def parse_duration(text):", '    """Seconds in a duration such as 90s, 15m or 2h."""', "    text = text.strip()",
    "    match = PATTERN.match(text)", "    if not match:", '        raise ValueError(f"invalid duration: {text!r}")',
    "    value, unit = match.groups()", "    return int(value) * UNITS[unit]",
]
TIMEPARSE_EDITS = [  # (old line, new line): each a plausible step towards accepting "1h30m"
    ('PATTERN = re.compile(r"^(\\d+)([smh])$")', 'PATTERN = re.compile(r"(\\d+)([smhd])")'),
    ("    match = PATTERN.match(text)", "    matches = PATTERN.findall(text)"),
    ("    if not match:", "    if not matches:"),
    ("    value, unit = match.groups()", "    total = sum(int(v) * UNITS[u] for v, u in matches)"),
    ("    return int(value) * UNITS[unit]", "    return total"),
    ("    text = text.strip()", "    text = text.strip().lower().replace(' ', '')"),
    ('UNITS = {"s": 1, "m": 60, "h": 3600}', 'UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}'),
    ("def parse_duration(text):", "def parse_duration(text: str) -> int:"),
    ('        raise ValueError(f"invalid duration: {text!r}")',
     '        raise ValueError(f"invalid duration: {text!r} (expected e.g. 90s or 1h30m)")'),
    ('    """Seconds in a duration such as 90s, 15m or 2h."""', '    """Seconds in a duration: 90s, 15m, 2h or 1h30m."""'),
]

CONFIG_CHANGES = [  # (key, old, new)
    ("DB_HOST", "10.40.2.17", "pg-primary.prod.internal"), ("DB_PORT", "5432", "6432"), ("DB_POOL_SIZE", "20", "40"),
    ("DB_CONNECT_TIMEOUT_MS", "2000", "10000"), ("DB_SSLMODE", "require", "verify-full"),
    ("DB_USER", "checkout", "checkout_app"), ("PGBOUNCER_ENABLED", "false", "true"), ("DB_MAX_IDLE", "5", "10"),
    ("DB_STATEMENT_TIMEOUT_MS", "30000", "60000"), ("DB_NAME", "checkout", "checkout_prod"),
]

FORM_CHANGES = [  # (action, arguments, acknowledgement) on a checkout's billing form
    ("fill", {"selector": "#vat-id", "value": "DE123456789"}, "Filled \"VAT ID\""),
    ("fill", {"selector": "#vat-id", "value": "DE 123 456 789"}, "Filled \"VAT ID\""),
    ("fill", {"selector": "#vat-id", "value": "123456789"}, "Filled \"VAT ID\""),
    ("select_option", {"selector": "#country", "value": "DE"}, "Selected \"Germany\" in \"Country\""),
    ("fill", {"selector": "#company", "value": "Acme GmbH"}, "Filled \"Company name\""),
    ("fill", {"selector": "#postcode", "value": "10115"}, "Filled \"Postcode\""),
    ("check", {"selector": "#business-purchase"}, "Checked \"This is a business purchase\""),
    ("fill", {"selector": "#billing-email", "value": "ap@acme.example"}, "Filled \"Billing email\""),
    ("fill", {"selector": "#company", "value": "ACME GMBH"}, "Filled \"Company name\""),
    ("select_option", {"selector": "#country", "value": "AT"}, "Selected \"Austria\" in \"Country\""),
    ("fill", {"selector": "#street", "value": "Invalidenstr. 117"}, "Filled \"Street\""),
    ("uncheck", {"selector": "#business-purchase"}, "Unchecked \"This is a business purchase\""),
]
BILLING_PAGE = (
    "Page: Checkout - Billing (step 2 of 3)\nURL: https://shop.example.com/checkout/billing\n"
    "- alert: We couldn't verify your billing details. Please review the form and try again.\n"
    "- textbox \"Company name\"\n- textbox \"VAT ID\"\n- textbox \"Street\"\n- textbox \"Postcode\"\n"
    "- combobox \"Country\"\n- textbox \"Billing email\"\n- checkbox \"This is a business purchase\"\n"
    "- button \"Continue\"\n- link \"Back to shipping\""
)


@dataclass(frozen=True)
class _Fixing:
    """An agent changing one thing after another and checking each time: its task, its first look, the check (the
    same output every time) and the changes (each acknowledged differently)."""

    task: str
    model: str
    look: tuple[str, ToolSpec]
    check: ToolSpec
    check_say: str
    changes: list[tuple[str, ToolSpec]]


def _snippet(lines: list[str], index: int, path: str) -> str:
    lo, hi = max(0, index - 2), min(len(lines), index + 3)
    body = "\n".join(f"{n + 1:6d}\t{lines[n]}" for n in range(lo, hi))
    return (f"The file {path} has been edited. Here's the result of running `cat -n` on a snippet of {path}:\n{body}\n"
            "Review the changes and make sure they are as expected. Edit the file again if necessary.")


def _code_changes(rng: random.Random, n: int) -> _Fixing:
    """The edits go to the checkout while the script imports the installed package: none takes effect."""
    path = "/workspace/app/src/app/timeparse.py"
    lines = list(TIMEPARSE)
    changes = []
    for old, new in rng.sample(TIMEPARSE_EDITS, n):
        index = lines.index(old)
        lines[index] = new
        ack = _snippet(lines, index, path)
        changes.append(("Adjusting the parser.", ToolSpec("str_replace_editor", {
            "command": "str_replace", "path": path, "old_str": old, "new_str": new}, ack, tokens_of(ack), duration_s=0.05)))
    duration = rng.choice(["1h30m", "2h15m", "1d2h", "45m30s"])
    trace = ("Traceback (most recent call last):\n  File \"/workspace/app/reproduce.py\", line 3, in <module>\n"
             f"    print(parse_duration(\"{duration}\"))\n"
             "  File \"/usr/local/lib/python3.11/site-packages/app/timeparse.py\", line 12, in parse_duration\n"
             "    raise ValueError(f\"invalid duration: {text!r}\")\n"
             f"ValueError: invalid duration: '{duration}'" + EXIT.format(code=1))
    listing = "\n".join(f"{i + 1:6d}\t{line}" for i, line in enumerate(TIMEPARSE))
    return _Fixing(
        task=(f"<uploaded_files>\n/workspace/app\n</uploaded_files>\nparse_duration() should accept compound durations "
              f"such as \"{duration}\". Make the change in src/app/timeparse.py."),
        model="claude-3-5-sonnet",
        look=("Let me look at the parser first.", ToolSpec("str_replace_editor", {"command": "view", "path": path},
                                                           listing, tokens_of(listing), duration_s=0.05)),
        check=ToolSpec("execute_bash", {"command": "cd /workspace/app && python reproduce.py"}, trace, tokens_of(trace),
                       duration_s=0.6),
        check_say="Running the reproduction script again.", changes=changes)


def _config_changes(rng: random.Random, n: int) -> _Fixing:
    """The service reads its configuration at start-up and is never restarted: no change takes effect."""
    service = rng.choice(["checkout-api", "orders-api", "billing-api"])
    version = f"3.{rng.randint(2, 9)}.{rng.randint(0, 9)}"
    started = f"2024-11-04T09:{rng.randint(10, 13)}:{rng.randint(10, 59)}Z"
    changes = []
    for key, old, new in rng.sample(CONFIG_CHANGES, n):
        ack = f"Updated config key {key} for {service} (prod): {old} -> {new}"
        changes.append((f"Setting {key} to {new}.", ToolSpec("set_config", {
            "service": service, "env": "prod", "key": key, "value": new}, ack, tokens_of(ack), duration_s=0.3)))
    body = json.dumps({"status": "unhealthy", "checks": {
        "postgres": {"status": "down", "error": "connection refused (10.40.2.17:5432)"}, "redis": {"status": "up"}},
        "version": version, "started_at": started})
    result = f"HTTP 503\n{body}"
    events = (f"09:02 failover: pg-primary moved to 10.40.3.22\n{started[11:16]} deploy {service} {version}\n"
              f"09:14 {service} healthz failing")
    return _Fixing(
        task=f"{service} in prod reports unhealthy since the database failover. Get it healthy again.", model="gpt-4o",
        look=("Looking at the recent deploys and the failover.", ToolSpec(
            "get_events", {"service": service, "since": "2h"}, events, tokens_of(events), duration_s=0.4)),
        check=ToolSpec("http_get", {"url": f"https://{service}.prod.internal/healthz"}, result, tokens_of(result),
                       duration_s=0.2),
        check_say="Checking the health endpoint again.", changes=changes)


def gen_same_outcome(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    kind = v % 3
    if kind == 2:
        return _browser_same_page(rng, v)
    n = rng.randint(6, 9)
    fix = (_code_changes if kind == 0 else _config_changes)(rng, n)
    b = RunBuilder(rng, model=fix.model, task=fix.task)
    b.call(output_text=fix.look[0], tools=[fix.look[1]], gap_s=rng.uniform(0.5, 2.0))
    quiet = v % 4 >= 2  # the model says nothing beside its tool calls
    b.call(output_text="" if quiet else "First, the current state.", tools=[_copy(fix.check)], gap_s=b.tool_gap())
    onset = len(b.calls) + 1  # the check after the first change
    for say, change in fix.changes:
        b.call(output_text="" if quiet else say, tools=[change], gap_s=b.tool_gap(),
               output_tokens=tokens_of(json.dumps(change.arguments)) + 20)
        b.call(output_text="" if quiet else fix.check_say, tools=[_copy(fix.check)], output_tokens=jitter(rng, 28),
               gap_s=b.tool_gap())
    what = "edits" if kind == 0 else "config changes"
    return b.calls, onset, f"{n} different {what}, each followed by the same check with byte-identical output"


def _browser_same_page(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    b = RunBuilder(rng, model="gpt-4o", task="Buy the 12-month team licence for Acme GmbH (VAT ID DE123456789) on "
                   "shop.example.com; billing address Invalidenstr. 117, 10115 Berlin.")
    prefix = [("navigate", {"url": "https://shop.example.com/pricing"}, "Page: Pricing\n- button \"Team, 12 months\"\n- button \"Team, monthly\""),
              ("click", {"selector": "text=Team, 12 months"}, "Page: Cart\n- Team licence, 12 months: 1,188.00 EUR\n- button \"Checkout\""),
              ("click", {"selector": "text=Checkout"}, "Page: Checkout - Shipping (step 1 of 3)\n- button \"Continue\""),
              ("click", {"selector": "text=Continue"}, BILLING_PAGE.replace(
                  "- alert: We couldn't verify your billing details. Please review the form and try again.\n", ""))]
    for name, args, page in prefix:
        b.call(output_text="", tools=[ToolSpec(f"browser_{name}", args, page, tokens_of(page), duration_s=1.2)],
               gap_s=b.tool_gap(), output_tokens=jitter(rng, 40))
    submit = ToolSpec("browser_click", {"selector": "button:has-text('Continue')"}, BILLING_PAGE, tokens_of(BILLING_PAGE),
                      duration_s=1.5)
    attempts = rng.randint(8, 12)
    picks = rng.sample(FORM_CHANGES, attempts)
    onset = len(b.calls) + 1  # the first attempt shows the error page; the second shows it again after a change
    for i, (action, args, ack) in enumerate(picks):
        text = "" if v % 4 >= 2 else ("Filling in the billing form and continuing." if i == 0 else rng.choice(
            ["The form was rejected; trying a different value.", "Still rejected. Changing another field.",
             "Maybe the format is the problem; adjusting it and continuing."]))
        b.call(output_text=text, gap_s=b.tool_gap(), output_tokens=jitter(rng, 60),
               tools=[ToolSpec(f"browser_{action}", dict(args), ack, tokens_of(ack), duration_s=0.3), _copy(submit)])
    return b.calls, onset, f"{attempts} different form changes, each submitted: the same billing page back every time"


def _copy(t: ToolSpec) -> ToolSpec:
    return ToolSpec(t.name, dict(t.arguments), t.result, t.result_tokens, t.error, t.error_message, t.duration_s)


# ------------------------------------------------------------------------------ the same empty output

EMPTY_COMMANDS: list[tuple[str, str, list[tuple[str, str]]]] = [  # (command, task, [(first look, its output)])
    ("docker logs payments-worker --since 10m", "The payments worker stopped processing refunds. Find out why.",
     [("docker ps --filter name=payments-worker --format '{{.Names}} {{.Status}}'", "payments-worker Up 3 hours"),
      ("docker inspect --format '{{.State.Status}} {{.RestartCount}}' payments-worker", "running 0")]),
    ("kubectl -n jobs logs job/db-migrate", "The db-migrate job hangs in the release pipeline. Find out why.",
     [("kubectl -n jobs get pods -l job-name=db-migrate", "NAME               READY   STATUS     RESTARTS   AGE\n"
       "db-migrate-x7k2p   0/1     Init:0/1   0          14m"),
      ("kubectl -n jobs get job db-migrate -o jsonpath='{.status.active}'", "1")]),
    ("cat /var/log/app/worker.err", "Background exports fail silently. Find the error.",
     [("ls -la /var/log/app/", "total 5120\n-rw-r--r-- 1 app app 5242880 Nov  4 09:14 worker.log\n"
       "-rw-r--r-- 1 app app       0 Nov  4 06:25 worker.err"),
      ("tail -n 3 /var/log/app/worker.log", "09:14:02 INFO export 8812 queued\n09:14:02 INFO export 8812 started\n"
       "09:14:03 INFO export 8812 handed to subprocess")]),
    ("python scripts/export_orders.py --since 2024-11-01", "The orders export for November produced no file. Debug it.",
     [("ls -la exports/", "total 0\ndrwxr-xr-x  2 dev dev  64 Nov  4 09:10 .\ndrwxr-xr-x 14 dev dev 448 Nov  4 09:02 .."),
      ("head -n 12 scripts/export_orders.py", "import argparse\nimport csv\n\nfrom shop.db import orders_since\n\n\n"
       "def main():\n    args = parse_args()\n    rows = orders_since(args.since)\n    if not rows:\n        return\n"
       "    write_csv(rows, args.out)")]),
    ("grep -rn 'ORDER_TIMEOUT' config/", "Orders time out after 5 s in staging; find where the timeout is configured.",
     [("ls config/", "base.yaml  production.yaml  staging.yaml  logging.ini"),
      ("grep -rn 'timeout' config/staging.yaml", "config/staging.yaml:14:  http_timeout_s: 5\n"
       "config/staging.yaml:31:  db_timeout_s: 2")]),
]


def gen_empty_output_rerun(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    cmd, task, looks = EMPTY_COMMANDS[(v + v // 5) % len(EMPTY_COMMANDS)]
    b = RunBuilder(rng, task=task)
    tool = "execute_bash" if v % 2 else "run_command"
    for look, output in looks:
        b.call(output_text="" if v % 4 >= 2 else "Looking around first.", gap_s=b.tool_gap(),
               tools=[ToolSpec(tool, {"command": look}, output, tokens_of(output), duration_s=rng.uniform(0.2, 1.0))])
    first = "" if v % 4 >= 2 else "Let me look at the output."
    b.call(output_text=first, tools=[ToolSpec(tool, {"command": cmd}, "", 1, duration_s=rng.uniform(0.3, 2.0))],
           gap_s=b.tool_gap())
    onset = len(b.calls)
    for _ in range(rng.randint(8, 12)):
        text = "" if v % 4 >= 2 else rng.choice(["No output. Let me run it again.", "Still nothing; running it again.",
                                                 "The output is empty, maybe it needs a moment. Again.",
                                                 "Nothing printed. Retrying the same command."])
        b.call(output_text=text, output_tokens=jitter(rng, 30), gap_s=b.tool_gap(),
               tools=[ToolSpec(tool, {"command": cmd}, "", 1, duration_s=rng.uniform(0.3, 2.0))])
    return b.calls, onset, f"`{cmd}` re-run again and again, its output empty every time"


# --------------------------------------------------------------------- a failing action, thinking between


@dataclass(frozen=True)
class _Booking:
    task: str
    prefix: tuple[tuple[str, ToolSpec], ...]
    action: ToolSpec  # fails the same way every time
    thoughts: tuple[str, ...]


def _airline(rng: random.Random) -> _Booking:
    user = f"{rng.choice(['mia', 'noah', 'liam', 'emma', 'yara'])}_{rng.choice(['kim', 'garcia', 'khan', 'smith'])}_{rng.randint(1000, 9999)}"
    gift = f"gift_card_{rng.randint(1_000_000, 9_999_999)}"
    flight = f"HAT{rng.randint(10, 299):03d}"
    profile = json.dumps({"user_id": user, "payment_methods": {gift: {"source": "gift_card", "amount": rng.randint(40, 120)}},
                          "membership": "regular"})
    flights = json.dumps([{"flight_number": flight, "origin": "JFK", "destination": "SEA", "date": "2024-05-20",
                           "prices": {"economy": rng.randint(150, 400)}, "available_seats": {"economy": 9}}])
    args = {"user_id": user, "origin": "JFK", "destination": "SEA", "flight_type": "one_way", "cabin": "economy",
            "flights": [{"flight_number": flight, "date": "2024-05-20"}], "passengers": [{"first_name": user.split("_")[0].title(),
            "last_name": user.split("_")[1].title(), "dob": "1990-04-12"}], "payment_methods": [
            {"payment_id": gift, "amount": json.loads(flights)[0]["prices"]["economy"]}], "total_baggages": 1,
            "nonfree_baggages": 0, "insurance": "no"}
    return _Booking(
        task=f"Hi, I'm {user}. Book me the cheapest economy flight from JFK to Seattle on May 20, pay with my gift card.",
        prefix=(("", ToolSpec("get_user_details", {"user_id": user}, profile, tokens_of(profile))),
                ("", ToolSpec("search_direct_flight", {"origin": "JFK", "destination": "SEA", "date": "2024-05-20"},
                              flights, tokens_of(flights)))),
        action=ToolSpec("book_reservation", args, "Error: gift card balance is not enough", 10, duration_s=0.2),
        thoughts=("The booking failed on the gift card. Maybe the amount should not include the baggage; it is free.",
                  "The user asked to pay with the gift card only. I should keep the same payment and try once more.",
                  "Perhaps the failure was transient. The details match the user's request exactly.",
                  "Let me double-check: one passenger, economy, one free bag, no insurance. Everything is right.",
                  "The price might have been cached at a different value; the reservation should go through now.",
                  "The user insisted on the gift card. I'll submit the same booking again.",
                  "Maybe the system needs the passenger's date of birth, which I included. Retrying.",
                  "I have verified the flight number and date. The booking should succeed this time."),
    )


def _hotel(rng: random.Random) -> _Booking:
    hotel = f"htl_{rng.randint(10_000, 99_999)}"
    args = {"hotel_id": hotel, "check_in": "2024-12-14", "check_out": "2024-12-17", "guests": 2, "rate_code": "FLEX-BB"}
    rates = json.dumps({"hotel_id": hotel, "rates": [{"code": "FLEX-BB", "nightly": rng.randint(140, 260)},
                                                     {"code": "NONREF-RO", "nightly": rng.randint(100, 139)}]})
    return _Booking(
        task="Book a double room with breakfast in Vienna for 14-17 December, flexible cancellation.",
        prefix=(("Searching hotels.", ToolSpec("search_hotels", {"city": "Vienna", "check_in": "2024-12-14",
                 "check_out": "2024-12-17", "guests": 2}, json.dumps([{"hotel_id": hotel, "name": "Hotel Am Ring",
                 "stars": 4}]), 60)),
                ("Getting the rates.", ToolSpec("get_rates", {"hotel_id": hotel, "check_in": "2024-12-14",
                 "check_out": "2024-12-17"}, rates, tokens_of(rates)))),
        action=ToolSpec("create_booking", args, "", 30, error="RateUnavailable", error_message=(
            f"422 Unprocessable Entity: rate FLEX-BB is not available for {hotel} from 2024-12-14 to 2024-12-17"),
            duration_s=0.5),
        thoughts=("The flexible rate was listed a moment ago; availability may lag. I'll book it again.",
                  "The user wants breakfast and free cancellation; FLEX-BB is the only rate with both.",
                  "Maybe the inventory was locked by another session for a few seconds.",
                  "Dates are right, two guests, FLEX-BB. Nothing to change in the request.",
                  "The rate list showed FLEX-BB, so the booking endpoint should accept it.",
                  "I'll try again; 422 might have been caused by a stale cache on their side.",
                  "The non-refundable rate would not meet the request, so FLEX-BB it is.",
                  "Let me make sure the hotel id is right: it is the one from the search. Retrying."),
    )


def _restaurant(rng: random.Random) -> _Booking:
    rid = f"rst_{rng.randint(1000, 9999)}"
    args = {"restaurant_id": rid, "date": "2024-11-22", "time": "19:30", "party_size": 9, "name": "Team dinner"}
    return _Booking(
        task="Reserve a table for the 9 of us at Trattoria Da Enzo on Friday 22 November at 19:30.",
        prefix=(("Finding the restaurant.", ToolSpec("search_restaurants", {"name": "Trattoria Da Enzo", "city": "Rome"},
                 json.dumps([{"restaurant_id": rid, "name": "Trattoria Da Enzo", "rating": 4.6}]), 40)),
                ("Checking availability.", ToolSpec("get_availability", {"restaurant_id": rid, "date": "2024-11-22"},
                 json.dumps({"19:00": True, "19:30": True, "20:00": False}), 30))),
        action=ToolSpec("reserve_table", args, json.dumps({"ok": False, "error": "party_size 9 exceeds the online "
                        "booking limit of 8; please call the restaurant"}), 30, duration_s=0.4),
        thoughts=("The slot at 19:30 is available, so the reservation should work.",
                  "The user said nine people; I must not change the party size.",
                  "Maybe the booking system had a hiccup. I'll send the same reservation again.",
                  "Everything in the request matches what the user asked for.",
                  "Availability showed 19:30 as free, so it should accept the booking now.",
                  "I cannot split the party without asking, so the same request it is.",
                  "Let me retry; the error might be temporary.",
                  "The restaurant id comes from the search result, it is correct. Trying again."),
    )


def gen_think_between_failures(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    booking = (_airline, _hotel, _restaurant)[v % 3](rng)
    b = RunBuilder(rng, model="gpt-4o", task=booking.task)
    for say, tool in booking.prefix:
        b.call(output_text=say, tools=[tool], gap_s=b.tool_gap())
    think_result = "" if v % 2 == 0 else "ok"
    resends = rng.randint(5, 7)
    thoughts = rng.sample(booking.thoughts, resends)
    action_tokens = tokens_of(json.dumps(booking.action.arguments)) + 12
    b.call(output_text="Booking it now.", tools=[_copy(booking.action)], gap_s=b.tool_gap(),
           output_tokens=action_tokens + 5)
    onset = len(b.calls) + 1  # the first re-send (the think step before it is neutral)
    for thought in thoughts:
        b.call(output_text="", tools=[ToolSpec("think", {"thought": thought}, think_result, 1, duration_s=0.01)],
               output_tokens=tokens_of(thought) + 16, gap_s=b.tool_gap())
        b.call(output_text="", tools=[_copy(booking.action)], output_tokens=jitter(rng, action_tokens),
               gap_s=b.tool_gap())
    return b.calls, onset, (f"{booking.action.name} re-sent {resends} times with the same failure, a different think "
                            f"step (result {think_result!r}) between the attempts")
