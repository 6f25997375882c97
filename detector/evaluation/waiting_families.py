"""Honest runs that wait for the world (issue 31): a job polled whose answer is a bare status word, a call failing
with the same 503 until growing waits let it through, a rollout polled at a jittered interval while its numbers move.
Each repeats a call whose answer, for a while, says only "not yet"; asking again is waiting, never waste. Each
generator returns (calls, None, description); ``v`` selects the sub-pattern (``v % 3``: every sub-pattern runs with
content captured and without)."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from detector.evaluation.corpus_records import CallSpec, ToolSpec
from detector.evaluation.corpus_text import CUSTOMERS, RunBuilder, jitter, tokens_of

__all__ = ["BareStatusJob", "gen_bare_status_poll", "gen_retry_503_backoff", "gen_rollout_poll_jitter"]


# ------------------------------------------------------------------------------------------ bare status poll


@dataclass(frozen=True)
class BareStatusJob:
    """A batch system whose status query answers one word: how the job is started, polled and read back (each a tool
    name and its arguments)."""

    task: str
    start: tuple[str, dict[str, Any]]
    start_result: str
    poll: tuple[str, dict[str, Any]]
    running: str  # the word while the job runs
    done: str  # the word when it has finished
    fetch: tuple[str, dict[str, Any]]
    fetch_result: str


def _shell(cmd: str) -> tuple[str, dict[str, Any]]:
    return "run_command", {"cmd": cmd}


def _glue_job(rng: random.Random) -> BareStatusJob:
    job = rng.choice(["nightly-orders-etl", "customer-dedupe", "events-compaction", "invoice-rollup"])
    run_id = f"jr_{rng.getrandbits(128):032x}"
    day = f"2024-10-{rng.randint(10, 28)}"
    rows = rng.randint(120_000, 4_800_000)
    return BareStatusJob(
        task=f"Re-run the Glue job {job} for {day} and tell me how many rows it wrote.",
        start=_shell(f"aws glue start-job-run --job-name {job} --arguments '--run_date={day}'"),
        start_result=json.dumps({"JobRunId": run_id}, indent=4),
        poll=_shell(f"aws glue get-job-run --job-name {job} --run-id {run_id} --query 'JobRun.JobRunState' "
                    "--output text"),
        running="RUNNING", done="SUCCEEDED",
        fetch=_shell(f"aws s3 cp s3://etl-reports/{job}/{day}/summary.json -"),
        fetch_result=json.dumps({"job": job, "run_date": day, "rows_written": rows, "rejected": rng.randint(0, 40)}),
    )


def _export_job(rng: random.Random) -> BareStatusJob:
    customer = rng.choice(CUSTOMERS)
    job = f"exp-{rng.randint(1000, 9999)}"
    return BareStatusJob(
        task=f"Export all {customer} tickets of the last quarter to CSV and give me the download link.",
        start=("start_export", {"customer": customer, "entity": "tickets", "range": "last_quarter"}),
        start_result=json.dumps({"job_id": job}),
        poll=("get_export_status", {"job_id": job}), running="running", done="succeeded",
        fetch=("get_export_result", {"job_id": job}),
        fetch_result=json.dumps({"url": f"https://exports.example.com/{job}.csv", "rows": rng.randint(800, 26_000),
                                 "expires_in_hours": 24}),
    )


def _cloud_build(rng: random.Random) -> BareStatusJob:
    build = (f"{rng.getrandbits(32):08x}-{rng.getrandbits(16):04x}-4{rng.getrandbits(12):03x}-"
             f"{rng.getrandbits(16):04x}-{rng.getrandbits(48):012x}")
    service = rng.choice(["checkout-api", "search-indexer", "billing-worker", "notify-gateway"])
    tag = f"v{rng.randint(1, 4)}.{rng.randint(0, 30)}.{rng.randint(0, 9)}"
    return BareStatusJob(
        task=f"Build {service} {tag} with Cloud Build and give me the image digest.",
        start=_shell(f"gcloud builds submit --async --config cloudbuild.yaml --substitutions=_TAG={tag} ."),
        start_result=(f"Created [https://cloudbuild.googleapis.com/v1/projects/acme-prod/locations/global/builds/{build}].\n"
                      f"ID: {build}\nSTATUS: QUEUED"),
        poll=_shell(f"gcloud builds describe {build} --format='value(status)'"), running="WORKING", done="SUCCESS",
        fetch=_shell(f"gcloud builds describe {build} --format='value(results.images[0].digest)'"),
        fetch_result=f"sha256:{rng.getrandbits(256):064x}",
    )


def gen_bare_status_poll(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    job = (_glue_job, _export_job, _cloud_build)[v % 3](rng)
    b = RunBuilder(rng, task=job.task)

    def tool(call: tuple[str, dict[str, Any]], result: str, duration: float) -> ToolSpec:
        return ToolSpec(call[0], dict(call[1]), result, tokens_of(result) + 4, duration_s=duration)

    b.call(output_text="Starting the job.", tools=[tool(job.start, job.start_result, 1.2)], gap_s=rng.uniform(0.5, 2.0))
    running = rng.randint(4, 5)  # answers "still running" before the one that says done
    wait = rng.uniform(1.8, 2.3)
    for i in range(running + 1):
        done = i == running
        text = "" if v % 2 else ("Checking the status." if i == 0 else rng.choice(
            ["Still running; waiting longer before the next check.", "Not done yet, backing off.",
             f"{job.running.capitalize()}. I'll check again in a bit."]))
        b.call(output_text=text, output_tokens=jitter(rng, 24, 1),
               tools=[tool(job.poll, job.done if done else job.running, rng.uniform(0.4, 1.1))],
               gap_s=rng.uniform(0.3, 1.0) if i == 0 else wait)
        if i:
            wait *= rng.uniform(1.9, 2.1)  # ~2, 4, 8, 16 s
    b.call(output_text="The job finished; reading its result.", gap_s=b.tool_gap(),
           tools=[tool(job.fetch, job.fetch_result, 0.8)])
    b.call(output_text=f"Done: {job.fetch_result}", output_tokens=jitter(rng, tokens_of(job.fetch_result) + 20),
           gap_s=b.tool_gap())
    return b.calls, None, (f"a job polled {running + 1} times, the answer a bare '{job.running}' until "
                           f"'{job.done}', waits doubling from ~2 s")


# ------------------------------------------------------------------------------------ 503, growing waits


@dataclass(frozen=True)
class FlakyEndpoint:
    """An API that answers 503 for a while: the call, its failure (the same text every time), its answer, and the
    work that follows once it has answered."""

    task: str
    tool: str
    arguments: dict[str, Any]
    error_type: str
    error: str
    answer: str
    follow_ups: tuple[tuple[str, ToolSpec], ...]  # (what the model says, the tool it runs)
    conclusion: str


def _github(rng: random.Random) -> FlakyEndpoint:
    repo = rng.choice(["payments", "web-frontend", "ingest-pipeline", "mobile-app"])
    picked = rng.sample([("Fix rounding in invoice totals", "mkowalski"), ("Bump urllib3 to 2.2.2", "dependabot[bot]"),
                         ("Add retry to webhook sender", "ana-ruiz"), ("Migrate CI to larger runners", "tchen"),
                         ("Drop Python 3.8 support", "jdoe"), ("Cache exchange rates for 10 min", "priya-r")], 3)
    prs = [{"number": rng.randint(800, 2400), "title": t, "user": {"login": a}, "draft": False} for t, a in picked]
    follow: list[tuple[str, ToolSpec]] = []
    pending = []
    for pr in prs:
        reviews = [] if rng.random() < 0.6 else [{"user": {"login": "tchen"}, "state": "APPROVED"}]
        if not reviews:
            pending.append(f"#{pr['number']} {pr['title']}")
        follow.append((f"Checking the reviews of #{pr['number']}.", ToolSpec(
            "http_get", {"url": f"https://api.github.com/repos/acme/{repo}/pulls/{pr['number']}/reviews"},
            json.dumps(reviews), 12 + 30 * len(reviews), duration_s=0.4)))
    summary = f"Open PRs in acme/{repo} waiting for a review: " + ("; ".join(pending) or "none")
    follow.append(("Posting the summary.", ToolSpec("slack_post", {"channel": "#eng", "text": summary},
                                                    json.dumps({"ok": True, "ts": f"{rng.randint(1_700_000_000, 1_730_000_000)}.{rng.randint(100_000, 999_999)}"}),
                                                    20, duration_s=0.3)))
    return FlakyEndpoint(
        task=f"List the open pull requests of acme/{repo} that still need a review and post a summary in #eng.",
        tool="http_get", arguments={"url": f"https://api.github.com/repos/acme/{repo}/pulls?state=open&per_page=50"},
        error_type="HTTPError",
        error="503 Service Unavailable: No server is currently available to service your request. Sorry about that. "
              "Please try refreshing and contact us if the problem persists.",
        answer=json.dumps(prs), follow_ups=tuple(follow), conclusion=f"Posted in #eng. {summary}.",
    )


def _forecast(rng: random.Random) -> FlakyEndpoint:
    city, lat, lon = rng.choice([("Lisbon", 38.72, -9.14), ("Oslo", 59.91, 10.75), ("Denver", 39.74, -104.99),
                                 ("Osaka", 34.69, 135.5)])
    days = [{"date": f"2024-11-{d:02d}", "t_max": rng.randint(2, 24), "precip_mm": round(rng.uniform(0, 12), 1)}
            for d in range(4, 7)]
    driest = min(days, key=lambda d: d["precip_mm"])
    venue = rng.choice(["the harbour walk", "the botanical garden", "the old town tour", "the kayak trip"])
    follow = (
        (f"{driest['date']} is the driest; checking {venue}'s availability.",
         ToolSpec("check_availability", {"activity": venue, "date": driest["date"], "people": rng.randint(12, 40)},
                  json.dumps({"available": True, "slots": ["10:00", "14:00"]}), 24, duration_s=0.5)),
        ("Holding the 14:00 slot.",
         ToolSpec("hold_booking", {"activity": venue, "date": driest["date"], "time": "14:00"},
                  json.dumps({"hold_id": f"H-{rng.randint(10_000, 99_999)}", "expires": "48h"}), 20, duration_s=0.5)),
    )
    return FlakyEndpoint(
        task=f"Plan the outdoor part of the {city} offsite: pick the driest of the next three days and hold a slot.",
        tool="get_forecast", arguments={"latitude": lat, "longitude": lon, "days": 3},
        error_type="ServiceUnavailable", error="HTTP 503 Service Unavailable",
        answer=json.dumps({"city": city, "daily": days}), follow_ups=follow,
        conclusion=f"{driest['date']} is the driest day ({driest['precip_mm']} mm); {venue} is held at 14:00 for 48 h.",
    )


def _inventory(rng: random.Random) -> FlakyEndpoint:
    sku = f"SKU-{rng.randint(100_000, 999_999)}"
    on_hand = rng.randint(60, 600)
    follow = (
        ("Stock is there; checking carrier pick-up slots.",
         ToolSpec("get_pickup_slots", {"warehouse": "FRA-2", "carrier": "DHL Freight", "week": "2024-W45"},
                  json.dumps({"slots": ["2024-11-05 08:00", "2024-11-07 08:00"]}), 30, duration_s=0.4)),
        ("Reserving the 40 units.",
         ToolSpec("reserve_stock", {"sku": sku, "warehouse": "FRA-2", "quantity": 40},
                  json.dumps({"reservation": f"R-{rng.randint(100_000, 999_999)}", "status": "confirmed"}), 20,
                  duration_s=0.4)),
    )
    return FlakyEndpoint(
        task=f"Can we ship 40 units of {sku} from the Frankfurt warehouse this week? If so, reserve them.",
        tool="call_api", arguments={"method": "GET", "path": f"/v2/inventory/{sku}", "params": {"warehouse": "FRA-2"}},
        error_type="HTTPError",
        error="503 Service Unavailable: upstream connect error or disconnect/reset before headers. reset reason: overflow",
        answer=json.dumps({"sku": sku, "warehouse": "FRA-2", "on_hand": on_hand, "reserved": rng.randint(0, 20),
                           "next_inbound": "2024-11-12"}),
        follow_ups=follow, conclusion=f"Yes: {on_hand} on hand; 40 units reserved, DHL pick-up on 5 November.",
    )


def gen_retry_503_backoff(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    ep = (_github, _forecast, _inventory)[v % 3](rng)
    b = RunBuilder(rng, task=ep.task)
    failures = 3 if v < 6 else 4
    as_text = v % 2 == 1  # the tool reports the failure as its result text, not as a failed span
    wait = rng.uniform(2.3, 2.5)
    for i in range(failures + 1):
        ok = i == failures
        text = ("Fetching the data." if i == 0 else
                rng.choice(["Retrying after backing off.", "The service is still unavailable; waiting longer.",
                            f"Trying again after {wait:.1f} s."]))
        if ok:
            t = ToolSpec(ep.tool, dict(ep.arguments), ep.answer, tokens_of(ep.answer), duration_s=rng.uniform(0.3, 0.9))
        elif as_text:
            t = ToolSpec(ep.tool, dict(ep.arguments), f"Error: {ep.error}", tokens_of(ep.error) + 3, duration_s=0.2)
        else:
            t = ToolSpec(ep.tool, dict(ep.arguments), "", tokens_of(ep.error), error=ep.error_type,
                         error_message=ep.error, duration_s=0.2)
        b.call(output_text=text, output_tokens=jitter(rng, 30, 1), tools=[t],
               gap_s=b.tool_gap() if i == 0 else wait)
        if i:
            wait *= 2  # ~2.4, 4.8, 9.6 (19.2) s
    for text, tool in ep.follow_ups:
        b.call(output_text=text, tools=[tool], gap_s=b.tool_gap())
    b.call(output_text=ep.conclusion, gap_s=b.tool_gap())
    return b.calls, None, f"{ep.tool} failing {failures} times with the same 503, waits doubling from 2.4 s, then answered"


# ------------------------------------------------------------------------------------ jittered rollout poll


def _rollout_states(rng: random.Random, total: int) -> list[tuple[int, int]]:
    """(updated, available) after each poll: both climb to ``total``; now and then a poll sees no move (never two
    in a row)."""
    updated, available, states = 0, 0, []
    while available < total:
        if len(states) > 1 and states[-1] != states[-2] and rng.random() < 0.2:
            states.append(states[-1])
            continue
        updated = min(total, updated + rng.randint(1, 3))
        available = min(updated, available + rng.randint(1 if updated == total else 0, 3))
        states.append((updated, available))
    return states


def _kubectl_status(name: str, total: int, updated: int, available: int) -> str:
    if updated < total:
        return (f'Waiting for deployment "{name}" rollout to finish: {updated} out of {total} new replicas have been '
                "updated...")
    if available < total:
        return (f'Waiting for deployment "{name}" rollout to finish: {available} of {total} updated replicas are '
                "available...")
    return f'deployment "{name}" successfully rolled out'


def _deploy_tool_status(deploy_id: str, total: int, updated: int, available: int) -> str:
    done = available == total
    return json.dumps({"deploy_id": deploy_id, "state": "complete" if done else "in_progress",
                       "message": "rollout complete" if done else f"rollout in progress: {updated} of {total} pods updated",
                       "updated": updated, "available": available, "total": total})


def gen_rollout_poll_jitter(rng: random.Random, v: int) -> tuple[list[CallSpec], int | None, str]:
    name = rng.choice(["web", "checkout", "search-api", "payments-worker", "gateway"])
    version = f"{rng.randint(1, 5)}.{rng.randint(0, 40)}.{rng.randint(0, 9)}"
    total = rng.choice([6, 8, 10, 12])
    interval = rng.choice([5.0, 10.0])
    b = RunBuilder(rng, task=f"Roll out {name} {version} to production and confirm it is healthy.")
    kubectl = v % 3 != 1
    ns = rng.choice(["prod", "production", "shop-prod"])
    if kubectl:
        b.call(output_text=f"Updating the {name} image to {version}.", gap_s=rng.uniform(0.5, 2.0),
               tools=[ToolSpec("run_command", {"cmd": f"kubectl -n {ns} set image deployment/{name} "
                               f"{name}=registry.acme.io/{name}:{version}"},
                               f"deployment.apps/{name} image updated", 12, duration_s=0.9)])
    deploy_id = f"d-{rng.randint(10_000, 99_999)}"
    if not kubectl:
        b.call(output_text=f"Starting the deploy of {name} {version}.", gap_s=rng.uniform(0.5, 2.0),
               tools=[ToolSpec("start_deploy", {"service": name, "version": version, "env": "production"},
                               json.dumps({"deploy_id": deploy_id, "state": "queued"}), 20, duration_s=0.6)])
    states = _rollout_states(rng, total)[:14]
    for i, (updated, available) in enumerate(states):
        if kubectl:
            result = _kubectl_status(name, total, updated, available)
            t = ToolSpec("run_command", {"cmd": f"kubectl -n {ns} rollout status deployment/{name} --watch=false"},
                         result, tokens_of(result), duration_s=rng.uniform(0.3, 0.8))
        else:
            result = _deploy_tool_status(deploy_id, total, updated, available)
            t = ToolSpec("get_rollout_status", {"deploy_id": deploy_id}, result, tokens_of(result), duration_s=0.3)
        seen = f"{updated}/{total} updated" if updated < total else f"{available}/{total} available"
        text = "" if v % 2 else ("Checking the rollout." if i == 0 else f"{seen} so far; checking again.")
        b.call(output_text=text, output_tokens=jitter(rng, 22, 1), tools=[t],
               gap_s=interval * rng.uniform(0.8, 1.2) if i else b.tool_gap())  # a fixed interval, +-20% jitter
    smoke = json.dumps({"passed": rng.randint(18, 40), "failed": 0, "p95_ms": rng.randint(80, 400)})
    b.call(output_text="Rolled out; running the smoke tests.", gap_s=b.tool_gap(),
           tools=[ToolSpec("run_smoke_tests", {"service": name, "env": "production"}, smoke, 30, duration_s=6.0)])
    b.call(output_text=f"{name} {version} is live on all {total} replicas and the smoke tests pass ({smoke}).",
           gap_s=b.tool_gap())
    return b.calls, None, f"a rollout of {total} replicas polled every ~{interval:g} s (+-20%), its numbers moving"
