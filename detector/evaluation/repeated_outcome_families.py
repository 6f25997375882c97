"""Honest runs in which an outcome repeats and the run still progresses (issue 31): one procedure over items whose
results have the same size, different questions with the same empty answer, different files acknowledged the same
way, one document read under different arguments, a health probe between real work. What repeats is a fixed step or
an answer; the questions, the items, the work around them are new. Each generator returns (calls, None,
description); ``v`` selects the sub-pattern. The fixed workaround cycle is in :mod:`workaround_cycle`."""

from __future__ import annotations

import json
import random

from detector.evaluation.corpus_records import MAX_CALLS_PER_TRACE, CallSpec, ToolSpec
from detector.evaluation.corpus_text import CUSTOMERS, MONTHS, RunBuilder, jitter, tokens_of

__all__ = [
    "PEOPLE", "gen_acknowledged_writes", "gen_equal_size_batch", "gen_health_probe_between", "gen_idempotent_read",
    "gen_same_empty_answer",
]

PEOPLE = ["Priya Raman", "Tomasz Nowak", "Aisha Bello", "Lucas Ferreira", "Mei Lin Chen", "Jonas Becker",
          "Fatima Zahra Idrissi", "Oliver Hughes", "Sofia Rossi", "Kenji Watanabe", "Amara Okafor", "Mateo Gonzalez",
          "Ingrid Solberg", "Ravi Shankar Iyer", "Chloe Martin", "Dmitri Volkov", "Hannah Schmidt", "Yusuf Demir"]

# ------------------------------------------------------------------------------ one procedure, equal sizes


# what the stock procedure's items are: names of every length, as a catalogue has them
PRODUCTS = ["USB-C cable 1 m", "Ergonomic office chair, mesh back, black", "A4 paper", "Label printer tape 12 mm",
            "Noise-cancelling headset with boom microphone", "Stapler", "27-inch monitor arm, dual", "HDMI adapter",
            "Whiteboard markers, assorted colours, pack of 12", "Desk lamp", "Laptop stand, aluminium, adjustable"]


def _invoice_record(rng: random.Random, num: str) -> str:
    """A fixed-width invoice record, as a billing API returns it (every record the same size)."""
    return json.dumps({"id": num, "customer": f"cus_{rng.randint(10_000, 99_999)}", "status": rng.choice(
        ["paid", "open", "void"]), "amount_cents": rng.randint(100_000, 999_999), "currency": "EUR",
        "due": f"2024-{rng.randint(10, 12)}-{rng.randint(10, 28)}", "lines": rng.randint(1, 9)})


def _stock_record(rng: random.Random, sku: str) -> str:
    return json.dumps({"sku": sku, "warehouse": rng.choice(["FRA-2", "AMS-1", "WAW-3"]), "on_hand": rng.randint(100, 999),
                       "reserved": rng.randint(10, 99), "reorder_point": rng.randint(100, 400)})


def gen_equal_size_batch(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    """Content capture off only: with content the items differ in every result; without it every step of the
    procedure has the same sizes, the results counted to the token."""
    kind = v % 3
    n = rng.randint(20, 25) if kind == 1 else rng.randint(20, MAX_CALLS_PER_TRACE - 1)
    task = ["Go through the {n} open invoices of {month} and note the status of each.", "",
            "Check the stock of the {n} SKUs on the reorder list and flag any below the reorder point."][kind]
    b = RunBuilder(rng, system_tokens=rng.randint(500, 1200), task=task.format(n=n, month=rng.choice(MONTHS)))
    result_tokens = rng.randint(52, 64)
    out_tokens = rng.randint(24, 30)
    if kind == 1:  # one conversation per invoice: fetch it, then the summary in a fixed JSON shape
        for s in range(n):
            num = f"INV-2024-{rng.randint(10_000, 99_999)}"
            b.call(user_text=f"Summarize invoice {num} as JSON (customer, status, amount, due).", user_tokens=24,
                   restart=True, session=s, output_tokens=out_tokens, gap_s=rng.uniform(0.2, 1.5),
                   tools=[ToolSpec("get_invoice", {"id": num}, _invoice_record(rng, num), result_tokens, duration_s=0.2)])
            summary = json.dumps({"invoice": num, "status": rng.choice(["paid", "open"]),
                                  "amount": f"{rng.randint(1000, 9999)}.{rng.randint(10, 99)} EUR"})
            b.call(output_text=summary, output_tokens=result_tokens - 20, session=s, gap_s=b.tool_gap())
        return b.calls, None, f"{n} invoices, one conversation each (fetch, summarize), every size equal"
    if kind == 0:
        prev = ""
        for _ in range(n):
            num = f"INV-2024-{rng.randint(10_000, 99_999)}"
            customer = rng.choice(CUSTOMERS)
            text = f"{prev} noted. Next: {num} ({customer})." if prev else f"Starting with {num} ({customer})."
            # the request names the item: its length is the item's (the results all have one size)
            b.call(output_text=text, output_tokens=out_tokens + tokens_of(customer), gap_s=b.tool_gap(),
                   tools=[ToolSpec("get_invoice", {"id": num, "customer": customer}, _invoice_record(rng, num),
                                   result_tokens, duration_s=0.2)])
            prev = num
        b.call(output_text=f"All {n} invoices noted; {rng.randint(2, 9)} are still open.", gap_s=b.tool_gap())
        return b.calls, None, f"get_invoice over {n} invoices in one conversation, every result {result_tokens} tokens"
    for _ in range(n):
        sku = f"SKU-{rng.randint(100_000, 999_999)}"
        product = rng.choice(PRODUCTS)
        b.call(output_text="", output_tokens=out_tokens + tokens_of(product), gap_s=b.tool_gap(),
               tools=[ToolSpec("get_stock_level", {"sku": sku, "product": product}, _stock_record(rng, sku),
                               result_tokens, duration_s=0.1)])
    b.call(output_text=f"Checked {n} SKUs; {rng.randint(1, 6)} are below their reorder point.", gap_s=b.tool_gap())
    return b.calls, None, f"get_stock_level over {n} SKUs, every result {result_tokens} tokens"


# ------------------------------------------------------------------------ different questions, empty answers


def gen_same_empty_answer(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    kind = v % 3
    names = rng.sample(PEOPLE, rng.randint(6, 8))
    company = rng.choice(CUSTOMERS)
    domain = company.lower().replace(" ", "").replace(".", "") + ".com"
    task = [f"These people signed up for the security training: {', '.join(names)}. Which of them already have an "
            "SSO account?",
            f"Screen the new supplier contacts of {company} against the sanctions lists: {', '.join(names)}.",
            f"Add the webinar attendees from {company} to the CRM unless they are already there: "
            + ", ".join(f"{n.split()[0].lower()}.{n.split()[-1].lower()}@{domain}" for n in names) + "."][kind]
    b = RunBuilder(rng, task=task)
    for i, name in enumerate(names):
        first, last = name.split()[0].lower(), name.split()[-1].lower()
        tool = [ToolSpec("directory_search", {"name": name}, "[]", 3, duration_s=0.2),
                ToolSpec("screen_name", {"name": name, "lists": ["OFAC-SDN", "EU-CFSP", "UN-SC"]}, "[]", 3,
                         duration_s=0.6),
                ToolSpec("crm_find_contacts", {"email": f"{first}.{last}@{domain}"}, "[]", 3, duration_s=0.3)][kind]
        text = "" if v % 2 else (f"Checking {name}." if i == 0 else rng.choice(
            [f"No match for {names[i - 1]}; next, {name}.", f"{names[i - 1]}: nothing. Checking {name}.",
             f"Next: {name}."]))
        b.call(output_text=text, output_tokens=jitter(rng, 20 + tokens_of(name)), tools=[tool], gap_s=b.tool_gap())
    if kind == 0:
        found = json.dumps([{"email": f"{n.split()[0].lower()}.{n.split()[-1].lower()}@{domain}",
                             "invited": f"2024-10-{rng.randint(10, 28)}", "state": "pending"} for n in names[:3]])
        b.call(output_text="None has an account; checking whether invitations are pending.", gap_s=b.tool_gap(),
               tools=[ToolSpec("list_pending_invites", {"group": "security-training"}, found, tokens_of(found))])
        end = f"No one has an SSO account yet; {', '.join(names[:3])} have pending invitations, the others need one."
    elif kind == 1:
        extra = rng.choice(["Viktor Petrov", "Ali Hassan Rahimi", "Kim Jong-su"])
        hit = json.dumps([{"entry_id": f"SDN-{rng.randint(10_000, 39_999)}", "list": "OFAC-SDN", "name": extra.upper(),
                           "score": round(rng.uniform(0.82, 0.93), 2)}])
        b.call(output_text=f"Last contact: {extra}.", gap_s=b.tool_gap(),
               tools=[ToolSpec("screen_name", {"name": extra, "lists": ["OFAC-SDN", "EU-CFSP", "UN-SC"]}, hit,
                               tokens_of(hit), duration_s=0.6)])
        entry = json.loads(hit)[0]["entry_id"]
        detail = json.dumps({"entry_id": entry, "dob": f"19{rng.randint(50, 70)}-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}",
                             "nationality": "RU", "programs": ["UKRAINE-EO13661"]})
        b.call(output_text=f"A potential match for {extra}; reading the list entry.", gap_s=b.tool_gap(),
               tools=[ToolSpec("get_sanctions_entry", {"entry_id": entry}, detail, tokens_of(detail), duration_s=0.4)])
        end = (f"{len(names)} contacts are clear. {extra} is a potential match ({entry}); the date of birth must be "
               "checked against the supplier's records before onboarding.")
    else:
        account = json.dumps([{"id": f"001{rng.getrandbits(40):010X}", "name": company, "domain": domain,
                               "owner": "Sofia Rossi"}])
        b.call(output_text=f"None of them are contacts yet; looking up the {company} account.", gap_s=b.tool_gap(),
               tools=[ToolSpec("crm_find_accounts", {"domain": domain}, account, tokens_of(account), duration_s=0.3)])
        created = json.dumps({"created": len(names), "account": company})
        b.call(output_text=f"Creating the {len(names)} contacts under that account.", gap_s=b.tool_gap(),
               tools=[ToolSpec("crm_create_contacts", {"account_domain": domain, "contacts": [
                   {"name": n} for n in names]}, created, 16, duration_s=0.8)])
        end = f"Added {len(names)} attendees as contacts of {company}; none existed before."
    b.call(output_text=end, gap_s=b.tool_gap())
    return b.calls, None, f"{len(names)} different people checked, each answered '[]', then something found"


# ------------------------------------------------------------------------------------ acknowledgements


def _csv_report(rng: random.Random, region: str) -> str:
    rows = [f"{rng.choice(CUSTOMERS)},{rng.randint(2, 90)},{rng.uniform(1_000, 90_000):.2f}" for _ in range(rng.randint(4, 9))]
    return "customer,orders,revenue_eur\n" + "\n".join(rows) + f"\n# region {region}\n"


def _incident_doc(rng: random.Random, incident: str, name: str) -> str:
    minute = rng.randint(0, 40)
    return {
        "timeline.md": f"# {incident} timeline\n\n- 14:{minute:02d} UTC checkout error rate above 5%\n- 14:{minute + 6:02d} "
                       f"on-call paged\n- 14:{minute + 19:02d} bad config rolled back\n",
        "impact.md": f"# Impact\n\n{rng.randint(800, 9000)} failed checkouts over {rng.randint(18, 45)} minutes; "
                     f"no data loss.\n",
        "root-cause.md": "# Root cause\n\nA feature flag default flipped the payment provider's timeout to 500 ms.\n",
        "action-items.md": f"# Action items\n\n1. Validate flag defaults in CI (owner: {rng.choice(PEOPLE)})\n"
                           f"2. Alert on provider timeouts (owner: {rng.choice(PEOPLE)})\n",
        "error-rate.csv": "minute,error_rate\n" + "\n".join(f"{m},{rng.uniform(0, 12):.2f}" for m in range(0, 40, 5)),
    }[name]


def gen_acknowledged_writes(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    reports = v % 2 == 0
    incident = f"INC-{rng.randint(1000, 9999)}"
    if reports:
        month = rng.choice(MONTHS)
        regions = rng.sample(["emea", "apac", "amer", "dach", "nordics", "benelux", "iberia", "uk-ie"], rng.randint(5, 7))
        task = f"Write the {month} revenue report per region as CSV under reports/ and attach them to the monthly email."
        files = [(f"reports/{month.lower()}/{r}.csv", _csv_report(rng, r)) for r in regions]
        write_tool, ack = "write_file", "File written."
    else:
        names = ["timeline.md", "impact.md", "root-cause.md", "action-items.md", "error-rate.csv"]
        task = (f"Write up incident {incident} in docs/incidents/{incident}/ (timeline, impact, root cause, action "
                "items, the error-rate series) and attach the files to the Jira issue.")
        files = [(f"docs/incidents/{incident}/{n}", _incident_doc(rng, incident, n)) for n in names]
        write_tool, ack = "create_file", "File created"
    b = RunBuilder(rng, task=task)
    if reports:
        source = ToolSpec("query_warehouse", {"sql": "SELECT region, customer, count(*), sum(total) FROM orders GROUP BY 1, 2"},
                          json.dumps({"rows": rng.randint(200, 4000), "columns": ["region", "customer", "orders", "revenue_eur"]}),
                          rng.randint(600, 1800), duration_s=1.2)
    else:
        source = ToolSpec("get_incident", {"id": incident}, json.dumps(
            {"id": incident, "severity": "SEV-2", "service": "checkout", "started": "14:05 UTC", "resolved": "14:41 UTC",
             "slack_channel": f"#inc-{incident.lower()}", "messages": rng.randint(80, 400)}), rng.randint(600, 1800))
    b.call(output_text="Pulling the data first.", gap_s=b.tool_gap(), tools=[source])
    for path, content in files:
        b.call(output_text="" if v % 4 >= 2 else f"Writing {path}.", tools=[ToolSpec(
            write_tool, {"path": path, "content": content}, ack, 4, duration_s=0.05)],
            output_tokens=tokens_of(content) + 20, gap_s=b.tool_gap())
    target = ("draft_id", f"r-{rng.getrandbits(48):012x}") if reports else ("issue", f"OPS-{rng.randint(100, 9999)}")
    for path, _ in files:
        b.call(output_text="" if v % 4 >= 2 else f"Attaching {path.rsplit('/', 1)[1]}.",
               tools=[ToolSpec("attach_file", {target[0]: target[1], "path": path}, "True", 1, duration_s=0.4)],
               gap_s=b.tool_gap())
    if reports:
        b.call(output_text="Sending the email.", gap_s=b.tool_gap(), tools=[ToolSpec(
            "send_draft", {"draft_id": target[1]}, json.dumps({"id": f"<{rng.getrandbits(64):016x}@mail.acme.io>",
                                                               "status": "sent"}), 20, duration_s=0.6)])
    b.call(output_text=f"Done: {len(files)} files written and attached to {target[1]}.", gap_s=b.tool_gap())
    return b.calls, None, f"{len(files)} different files written ('{ack}') and attached ('True')"


# ------------------------------------------------------------------------ one document, different arguments


def _report_text(rng: random.Random, quarter: str) -> str:
    arr, churn, nrr = rng.uniform(18, 90), rng.uniform(0.8, 3.5), rng.randint(102, 128)
    return (f"{quarter} Business Review. ARR closed at EUR {arr:.1f}M (+{rng.randint(4, 19)}% QoQ). Gross churn "
            f"{churn:.1f}% monthly, net revenue retention {nrr}%. Enterprise bookings: {rng.randint(9, 40)} new logos, "
            f"largest {rng.choice(CUSTOMERS)} at EUR {rng.randint(200, 900)}k. Headcount {rng.randint(120, 480)}. "
            "Risks: the EU data-residency launch slipped to next quarter; two enterprise renewals are at risk. "
            f"Cash runway {rng.randint(20, 40)} months.")


def gen_idempotent_read(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    quarter = rng.choice(["Q2 2024", "Q3 2024", "Q4 2024"])
    slug = quarter.split()[0].lower() + "-report"
    doc_id = rng.randint(3, 480)
    text = _report_text(rng, quarter)
    size = rng.randint(700, 1400)  # the whole document, not just the excerpt above
    b = RunBuilder(rng, task=f"Prepare the board update for {quarter}: the headline numbers, what changed since last "
                             "quarter, and the top risks.")
    reads = [{"id": doc_id}, {"id": str(doc_id), "fields": None}, {"slug": slug}]
    if v % 2:
        reads.append({"id": doc_id, "format": "markdown"})
    work = [
        ("Comparing with last quarter's metrics.", ToolSpec("query_metrics", {"metric": "arr", "period": "last_2_quarters"},
         json.dumps({"arr_eur_m": [round(rng.uniform(15, 80), 1), round(rng.uniform(18, 90), 1)]}), 30)),
        ("Checking the churn drivers.", ToolSpec("search_docs", {"query": f"churn drivers {quarter}"}, json.dumps(
            [{"id": rng.randint(500, 900), "title": f"Churn analysis {quarter}", "snippet": "pricing and onboarding"}]), 60)),
        ("Looking at the pipeline.", ToolSpec("crm_report", {"report": "enterprise_pipeline", "quarter": quarter},
         json.dumps({"open_deals": rng.randint(20, 80), "weighted_eur_k": rng.randint(900, 6000)}), 30)),
        ("Reading the risk register.", ToolSpec("get_sheet", {"name": "Risk register", "range": "A1:F20"},
         "\n".join(f"R{k}, {r}, owner {rng.choice(PEOPLE)}" for k, r in enumerate(
             ["EU residency launch", "Renewal Globex", "Renewal Initech", "Hiring plan"], 1)), 90)),
        ("Drafting the update.", ToolSpec("create_doc", {"title": f"Board update {quarter}", "body": text[:160]},
         json.dumps({"id": rng.randint(500, 999), "url": f"https://docs.acme.io/d/{rng.getrandbits(40):010x}"}), 20)),
    ]
    rng.shuffle(work)
    sayings = ["Reading the quarterly report.", "Re-reading the report for the exact numbers.",
               "Checking the report's risk section.", "One more look at the report's cash figures."]
    for i, args in enumerate(reads):
        b.call(output_text=sayings[i], gap_s=b.tool_gap(),
               tools=[ToolSpec("get_doc", args, text, size, duration_s=0.3)])
        for say, tool in work[i * 2:i * 2 + 2] if i < len(reads) - 1 else work[i * 2:]:
            b.call(output_text=say, tools=[tool], gap_s=b.tool_gap())
    b.call(output_text=f"The {quarter} board update is drafted: " + text[:200], gap_s=b.tool_gap())
    return b.calls, None, f"the {quarter} report read {len(reads)} times under different arguments, between other work"


# ------------------------------------------------------------------------------ a health probe between work


MIGRATED_TABLES = {  # table -> what its migration re-points
    "orders": "customers, addresses", "order_items": "orders, products", "invoices": "orders, customers",
    "payments": "invoices, payment_methods", "refunds": "payments, orders", "shipments": "orders, warehouses, carriers",
    "customers": "accounts", "addresses": "customers, countries", "products": "categories, suppliers",
}
INDUSTRIES = ["logistics", "retail banking", "industrial robotics", "specialty chemicals", "B2B software",
              "food distribution", "medical devices", "renewable energy", "freight forwarding", "insurance brokerage"]
CITIES = ["Rotterdam", "Lyon", "Austin", "Gdansk", "Porto", "Leeds", "Graz", "Malmo", "Bilbao", "Osaka", "Pune"]
DISTRICTS = [("Prenzlauer Berg", "Kastanienallee"), ("Kreuzberg", "Oranienstrasse"), ("Neukoelln", "Weserstrasse"),
             ("Charlottenburg", "Kantstrasse"), ("Friedrichshain", "Simon-Dach-Strasse"), ("Wedding", "Mullerstrasse"),
             ("Schoeneberg", "Akazienstrasse"), ("Moabit", "Turmstrasse"), ("Pankow", "Florastrasse"),
             ("Mitte", "Torstrasse"), ("Steglitz", "Schlossstrasse"), ("Tempelhof", "Manfred-von-Richthofen-Strasse"),
             ("Lichtenberg", "Frankfurter Allee"), ("Treptow", "Karl-Kunger-Strasse"), ("Wilmersdorf", "Uhlandstrasse"),
             ("Spandau", "Carl-Schurz-Strasse"), ("Koepenick", "Bahnhofstrasse"), ("Zehlendorf", "Teltower Damm")]
AMENITIES = ["balcony", "lift", "fitted kitchen", "garden share", "cellar", "parquet", "bathtub", "south-facing",
             "bike storage", "roof terrace", "underfloor heating", "quiet courtyard"]


def _health_work(rng: random.Random, kind: int, k: int, tables: list[str], companies: list[str]) -> ToolSpec:
    """One step of real work, its result new in words, not only in numbers."""
    if kind == 0:
        table = tables[k]
        rows = rng.randint(8_000, 240_000)
        done = (f"Copied {rows:,} rows of {table}; foreign keys to {MIGRATED_TABLES[table]} re-pointed; checksum "
                f"{rng.getrandbits(32):08x} matches the source.")
        return ToolSpec("migrate_table", {"table": table}, done, tokens_of(done), duration_s=rng.uniform(4, 12))
    if kind == 1:
        company = companies[k]
        domain = company.lower().replace(" ", "-").replace(".", "") + rng.choice([".com", ".io", ".de", ".co.uk"])
        record = json.dumps({"domain": domain, "name": company, "industry": rng.choice(INDUSTRIES),
                             "employees": rng.choice(["11-50", "51-200", "201-1000", "1001-5000"]),
                             "hq": rng.choice(CITIES), "linkedin": f"https://linkedin.com/company/{domain.split('.')[0]}"})
        return ToolSpec("enrich_company", {"domain": domain}, record, tokens_of(record), duration_s=rng.uniform(0.5, 2.0))
    rows = "\n".join(f"L-{rng.randint(100_000, 999_999)} {rng.randint(1, 5)}-room {rng.choice(['flat', 'loft', 'house'])}, "
                     f"{d}, {st} {rng.randint(1, 120)}, {rng.randint(600, 3200)} EUR, "
                     + ", ".join(rng.sample(AMENITIES, 2)) for d, st in rng.sample(DISTRICTS, 5))
    return ToolSpec("get_listings", {"page": k + 1, "per_page": 5}, rows, tokens_of(rows) + 20, duration_s=0.8)


def gen_health_probe_between(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    kind = v % 3
    probe_result = [json.dumps({"status": "ok", "version": f"2.4.{rng.randint(0, 9)}", "db": "up"}),
                    json.dumps({"status": "ok", "provider": "clearbit-proxy", "quota": "available"}),
                    json.dumps({"status": "ok", "version": f"3.{rng.randint(10, 14)}.0", "maintenance": False})][kind]
    probe = [("health_check", {"service": "migrator"}), ("enrichment_health", {}), ("api_health", {})][kind]
    batches = rng.randint(5, 8)
    tables = rng.sample(sorted(MIGRATED_TABLES), batches)
    companies = rng.sample(CUSTOMERS, batches)
    task = ["Migrate the shop database to the new cluster table by table, checking the migrator's health in between.",
            f"Enrich the {batches} new sign-ups' companies from the enrichment API; stop if it degrades.",
            "Collect the flat listings in Berlin from the partner API, page by page, watching its health."][kind]
    b = RunBuilder(rng, task=task)
    parallel = v % 2 == 1  # the probe runs beside the work in the same step, or as a step of its own
    for k in range(batches):
        work = _health_work(rng, kind, k, tables, companies)
        probe_spec = ToolSpec(probe[0], dict(probe[1]), probe_result, tokens_of(probe_result), duration_s=0.1)
        if parallel:
            b.call(output_text="" if v % 4 == 3 else f"Step {k + 1}, with a health check.",
                   tools=[probe_spec, work], gap_s=b.tool_gap())
        else:
            b.call(output_text="" if v % 4 == 2 else f"Step {k + 1}.", tools=[work], gap_s=b.tool_gap())
            b.call(output_text="" if v % 4 == 2 else "Checking health before the next step.", tools=[probe_spec],
                   gap_s=b.tool_gap())
    b.call(output_text=f"All {batches} steps done; the service stayed healthy throughout.", gap_s=b.tool_gap())
    return b.calls, None, (f"{batches} steps of real work, each with a health probe ({probe[0]}) returning the same "
                           "payload" + (" beside it" if parallel else " after it"))
