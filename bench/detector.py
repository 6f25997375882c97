"""Benchmark: one detection cycle of 10,000 new calls (one per active session), the normalization of their spans
included, over 1M stored calls, beside the same cycle of another checkout measured in the same run.

    .venv/bin/python bench/detector.py [--sessions 10000] [--stored 1000000] [--cycles 7] [--content off,on]
                                       [--baseline /work/wt26-base] [--rounds 2] [--update-docs]

For each history size and content mode a fresh chDB store holds that many calls in ``otel.genai_calls`` (over
100,000 older sessions, all before the watermark; the staged spans of the same history in ``otel.genai_spans`` too,
where the schema has that table), and 10,000 active sessions each bring one new GenAI chat span per cycle (a third
of them stuck on one tool call), inserted into ``otel.otel_traces`` as the receiver inserts them, before the cycle
(not timed): a checkout that normalizes on insert (c7acdac and before) does it there, this one stages them and
normalizes in the cycle. The timed cycle is ``DetectorJob.run_cycle``: the transform (here), the read, the scoring,
the writes. ``--content``: ``off``, spans as instrumentations send them by default (model, usage, finish reasons,
the tool calls asked for, no messages); ``on``, with the messages captured (~0.9 kB of input, ~0.3 kB of output, as
``bench/ingest.py``'s spans).

``--baseline DIR`` runs the same measurement on the checkout in DIR (with DIR's own ``.venv``, so its compiled core),
alternating with this checkout, ``--rounds`` times each; every figure is shown beside the baseline's of the same
round, and the ratio is this checkout's over the baseline's. Steady cycles run with the sessions' state in memory;
their median and best, and each phase's median (``CycleStats.phases``), are shown; beside them the first cycle (new
sessions), the checkpoint after it (every scope's state), and the first cycle of a new ``DetectorJob`` on the same
store (as after a restart: the sessions' state loaded from ``otel.loop_state``). Each process first runs a
throwaway round (the first measurement of a fresh process also pays for growing its heap).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _code_root() -> Path:
    """The checkout whose package is measured: ``--code DIR`` (the baseline's subprocess), else this one."""
    if "--code" in sys.argv:
        return Path(sys.argv[sys.argv.index("--code") + 1]).resolve()
    return Path(__file__).resolve().parent.parent


ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_code_root()))

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402
from opentelemetry.proto.trace.v1 import trace_pb2  # noqa: E402
from otlp_attributes import key_value  # noqa: E402

from detector import native  # noqa: E402
from detector.core.decisions import DecisionBook  # noqa: E402
from detector.detection.job import DetectorJob  # noqa: E402
from detector.ingest.otlp import decode_protobuf  # noqa: E402

# (from config, where every checkout measured has them: --baseline runs this file against older code)
from detector.settings.config import AppConfig, IngestSettings  # noqa: E402
from detector.storage.schema import apply_schema  # noqa: E402
from detector.storage.transport import ChdbStore  # noqa: E402

SECTION = "## Detection cycle (bench/detector.py)"
SECOND = 1_000_000_000
# History generated in SQL: N calls over 100,000 sessions (never scanned by a cycle if pruning works).
FILL_HISTORY = """
INSERT INTO otel.genai_calls (inserted_at, ts, end_ts, trace_id, span_id, session_id, session_source, operation,
    call_kind, model, input_tokens, output_tokens, has_content, request_fp, turn_fp, input_simhash, output_simhash,
    out_tool_names, out_tool_fps, response_fp)
SELECT now64(6) - toIntervalSecond(7200) AS inserted_at,
    now64(9) - toIntervalSecond(3600) + toIntervalMillisecond(number % 3600000) AS ts, ts AS end_ts,
    concat('old-t', toString(number % 100000)) AS trace_id, lower(hex(number)) AS span_id,
    concat('old-s', toString(number % 100000)) AS session_id, 'gen_ai.conversation.id', 'chat', 'llm',
    'gpt-4o-mini', 500 + number % 1000, 50 + number % 100, 1, cityHash64(number), cityHash64(number, 1),
    cityHash64(number, 2) % 4294967296, cityHash64(number, 3) % 4294967296,
    ['read_file'], [cityHash64(number % 7)], cityHash64(number % 11)
FROM numbers({start:UInt64}, {n:UInt64})
"""
# The same history's spans, staged (where the schema stages spans): the transform must never read them again.
FILL_STAGED = """
INSERT INTO otel.genai_spans (inserted_at, ts, trace_id, span_id, service_name, span_name, attributes)
SELECT now64(6) - toIntervalSecond(7200), now64(9) - toIntervalSecond(3600) + toIntervalMillisecond(number % 3600000),
    concat('old-t', toString(number % 100000)), lower(hex(number)), 'agent', 'chat gpt-4o-mini',
    map('gen_ai.operation.name', 'chat', 'gen_ai.conversation.id', concat('old-s', toString(number % 100000)),
        'gen_ai.request.model', 'gpt-4o-mini')
FROM numbers({start:UInt64}, {n:UInt64})
"""
HAS_STAGING = "SELECT count() AS n FROM system.tables WHERE database = 'otel' AND name = 'genai_spans'"
FILL_CHUNK = 1_000_000
WARM_UP_STORED = 100_000
_SENTENCE = ("the agent reads the failing test then searches the repository for the helper it calls and patches the off "
             "by one error in the loop before running the suite again to confirm that every case passes")
_WORDS = tuple(_SENTENCE.split(" "))



def _text(rng: random.Random, size: int) -> str:
    out: list[str] = []
    while sum(len(w) + 1 for w in out) < size:
        out.append(rng.choice(_WORDS))
    return " ".join(out)


def new_spans(round_: int, sessions: int, content: bool, now_ns: int) -> Any:
    """One chat span per session, as the receiver would insert it (the real decoder's Arrow table): every third
    session stuck on read_file("a.py") with the same reply, the others reading a new file with a new reply."""
    rng = random.Random(round_)
    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add()
    scope.resource.attributes.extend([key_value("service.name", "coding-agent"), key_value("telemetry.sdk.language", "python")])
    spans = scope.scope_spans.add()
    spans.scope.name = "opentelemetry.instrumentation.openai_v2"
    for n in range(sessions):
        stuck = n % 3 == 0
        path = "a.py" if stuck else f"src/m{n}_{round_}.py"
        span = spans.spans.add()
        span.trace_id, span.span_id = (n + 1).to_bytes(16, "big"), (n * 1000 + round_ + 1).to_bytes(8, "big")
        start = now_ns + round_ * SECOND + (n % 1000) * 1_000_000
        span.start_time_unix_nano, span.end_time_unix_nano = start, start + 500_000_000
        span.name, span.kind = "chat gpt-4o-mini", trace_pb2.Span.SPAN_KIND_CLIENT
        span.attributes.extend([
            key_value("gen_ai.operation.name", "chat"), key_value("gen_ai.provider.name", "openai"),
            key_value("gen_ai.request.model", "gpt-4o-mini"), key_value("gen_ai.response.model", "gpt-4o-mini"),
            key_value("gen_ai.conversation.id", f"s{n}"), key_value("gen_ai.usage.input_tokens", 800 + 150 * round_),
            key_value("gen_ai.usage.output_tokens", 60), key_value("gen_ai.response.finish_reasons", ["tool_calls"])])
        if content:
            reply = "Let me read a.py again." if stuck else _text(rng, 250)
            messages = [{"role": "system", "parts": [{"type": "text", "content": _text(random.Random(n), 250)}]},
                        {"role": "user", "parts": [{"type": "text", "content": "fix the bug" if stuck else _text(rng, 650)}]}]
            output = [{"role": "assistant", "finish_reason": "tool_calls", "parts": [
                {"type": "text", "content": reply},
                {"type": "tool_call", "id": "c1", "name": "read_file", "arguments": {"path": path}}]}]
            span.attributes.extend([key_value("gen_ai.input.messages", json.dumps(messages)),
                                    key_value("gen_ai.output.messages", json.dumps(output))])
    return decode_protobuf(request.SerializeToString(), IngestSettings(max_body_bytes=1 << 30), now_ns).spans.to_arrow()


def measure(stored: int, sessions: int, cycles: int, content: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-detector-") as tmp:
        store = ChdbStore(tmp)
        apply_schema(store)
        staging = bool(store.rows(HAS_STAGING)[0]["n"])
        for start in range(0, stored, FILL_CHUNK):  # in chunks: bounded memory for the 10M case
            params = {"start": start, "n": min(FILL_CHUNK, stored - start)}
            store.command(FILL_HISTORY, params)
            if staging:
                store.command(FILL_STAGED, params)
        config = AppConfig()
        config.detector.checkpoint_seconds = 3600  # checkpoints are timed on their own
        job = DetectorJob(store, config, DecisionBook())
        job.load()
        job.last_checkpoint_us = 2**62
        # the stored history is older than the watermark: a cycle must never read it again
        job.watermark_us = job.processed_us = int(store.rows(
            "SELECT toUnixTimestamp64Micro(now64(6)) - 3600000000 AS m")[0]["m"])
        now_ns = time.time_ns()

        def cycle(round_: int) -> tuple[float, dict[str, float]]:
            store.insert_arrow("otel.otel_traces", new_spans(round_, sessions, content, now_ns))
            t = time.perf_counter()
            stats = job.run_cycle()
            elapsed = time.perf_counter() - t
            assert stats.calls_scored == sessions, stats
            return elapsed, stats.phases

        cold_s, _ = cycle(0)
        t = time.perf_counter()
        job.checkpoint()  # every scope's state, as the checkpoint after the first cycle writes it
        checkpoint_s = time.perf_counter() - t
        # a restart: a new detector on the same store; the sessions are only in loop_state now, loaded by the next cycle
        job = DetectorJob(store, config, DecisionBook())
        job.load()
        job.last_checkpoint_us = 2**62
        restart_s, _ = cycle(1)
        warm, phases = [], []
        for r in range(2, 2 + cycles):
            seconds, p = cycle(r)
            warm.append(seconds)
            phases.append(p)
        store.close()
    return {"cold_s": cold_s, "restart_s": restart_s, "checkpoint_s": checkpoint_s, "warm_s": statistics.median(warm),
            "warm_min_s": min(warm), "staging": staging,
            "phases": {name: statistics.median(p.get(name, 0.0) for p in phases) for name in phases[0]},
            "core": native.status()}


def run_checkout(code: Path, python: Path, args: argparse.Namespace, stored: int, content: str) -> dict[str, Any]:
    """``measure`` in a fresh process of ``code``'s checkout (its venv, its compiled core)."""
    done = subprocess.run([str(python), __file__, "--json", "--code", str(code), "--stored", str(stored),
                           "--sessions", str(args.sessions), "--cycles", str(args.cycles), "--content", content],
                          capture_output=True, text=True, check=True, cwd=str(code))
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--stored", default="1000000")
    parser.add_argument("--cycles", type=int, default=7)
    parser.add_argument("--content", default="off,on", help="off, on, or both (comma-separated)")
    parser.add_argument("--baseline", type=Path, help="another checkout, measured alternately (its own .venv)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds (with --baseline)")
    parser.add_argument("--update-docs", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--code", help=argparse.SUPPRESS)  # the checkout measured (read before the imports)
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # one measurement, for the parent
    args = parser.parse_args()
    sizes = [int(x) for x in args.stored.split(",")]
    modes = args.content.split(",")
    if args.json:
        # A throwaway round first: the first measurement of a process also pays for growing its heap and chDB's caches.
        measure(min(sizes[0], WARM_UP_STORED), min(args.sessions, 2000), 2, modes[0] == "on")
        print(json.dumps(measure(sizes[0], args.sessions, args.cycles, modes[0] == "on")))
        return
    here, python = ROOT, Path(sys.executable)
    rows: list[tuple[str, float, float | None, str]] = []
    for size in sizes:
        for mode in modes:
            for r in range(args.rounds if args.baseline else 1):
                load = os.getloadavg()[0]
                base = run_checkout(args.baseline, args.baseline / ".venv" / "bin" / "python", args, size, mode) \
                    if args.baseline else None
                mine = run_checkout(here, python, args, size, mode)
                tag = f"{size / 1e6:g}M stored, content {mode}, round {r + 1} (load {load:.1f})"
                rows.append((f"steady cycle, median, {tag}", mine["warm_s"], base and base["warm_s"], "ms"))
                rows.append((f"  best of {args.cycles}", mine["warm_min_s"], base and base["warm_min_s"], "ms"))
                for phase, seconds in mine["phases"].items():
                    rows.append((f"  {phase}", seconds, base and base["phases"].get(phase), "ms"))
                rows.append(("  first cycle (new sessions)", mine["cold_s"], base and base["cold_s"], "ms"))
                rows.append(("  cycle after a restart (the sessions' state loaded)", mine["restart_s"],
                             base and base["restart_s"], "ms"))
                rows.append(("  checkpoint of every scope (not a cycle's)", mine["checkpoint_s"],
                             base and base["checkpoint_s"], "ms"))
    print(f"{'figure':<70} {'value':>9} {'baseline':>9} {'unit':<4} {'ratio':>6}")
    print("-" * 103)
    for figure, value, baseline, unit in rows:
        shown = f"{baseline * 1000:>9.1f}" if baseline is not None else f"{'':>9}"
        ratio = f"{value / baseline:>6.2f}" if baseline else f"{'':>6}"
        print(f"{figure:<70} {value * 1000:>9.1f} {shown} {unit:<4} {ratio}")
    print(f"(baseline: {args.baseline or 'none'}; ratio: this checkout's figure over the baseline's, same round)")


if __name__ == "__main__":
    main()
