"""Benchmark: one detection cycle with 10,000 active sessions over 1M and 10M stored calls.

    .venv/bin/python bench/detector.py [--sessions 10000] [--stored 1000000,10000000] [--cycles 7]

For each history size it builds a fresh chDB store holding that many calls (older than the watermark),
warms 10,000 sessions with a first cycle, then times steady cycles that each bring one new call per
session (10,000 new calls). A cycle's cost must follow the new calls, not the table size: the table
prints the 10M/1M ratio (target <= 1.5) and the cycle time (target <= 500 ms for 10,000 new calls).
A last steady cycle has a checkpoint due, as one cycle in ``checkpoint_seconds`` has in production: it writes
every scope's state.
Each process first runs a throwaway round (the detector is a long-running process; the first measurement of a
fresh one also pays for growing its heap). Then the smallest size is timed once more in a subprocess running
the detection core from its Python source (``LOOP_DETECTOR_PURE_PYTHON=1``): what compiling the core
(``detector/native.py``) is worth, measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from detector import native  # noqa: E402
from detector.core.decisions import DecisionBook  # noqa: E402
from detector.detection.job import DetectorJob  # noqa: E402
from detector.settings.config import AppConfig  # noqa: E402
from detector.storage.schema import apply_schema
from detector.storage.transport import ChdbStore

# History generated in SQL: N calls over 100,000 sessions (never scanned by a cycle if pruning works).
FILL_HISTORY = """
INSERT INTO otel.genai_calls (ts, end_ts, trace_id, span_id, session_id, session_source, operation, call_kind,
    model, input_tokens, output_tokens, has_content, request_fp, turn_fp, input_simhash, output_simhash,
    out_tool_names, out_tool_fps, response_fp)
SELECT now64(9) - toIntervalSecond(3600) + toIntervalMillisecond(number % 3600000) AS ts, ts AS end_ts,
    concat('old-t', toString(number % 100000)) AS trace_id, lower(hex(number)) AS span_id,
    concat('old-s', toString(number % 100000)) AS session_id, 'gen_ai.conversation.id', 'chat', 'llm',
    'gpt-4o-mini', 500 + number % 1000, 50 + number % 100, 1, cityHash64(number), cityHash64(number, 1),
    cityHash64(number, 2) % 4294967296, cityHash64(number, 3) % 4294967296,
    ['read_file'], [cityHash64(number % 7)], cityHash64(number % 11)
FROM numbers({start:UInt64}, {n:UInt64})
"""

FILL_CHUNK = 1_000_000
WARM_UP_STORED = 100_000

# One new call per active session; every third session is stuck on one tool call.
NEW_CALLS = """
INSERT INTO otel.genai_calls (ts, end_ts, trace_id, span_id, session_id, session_source, operation, call_kind,
    model, input_tokens, output_tokens, has_content, request_fp, turn_fp, input_simhash, output_simhash,
    out_tool_names, out_tool_fps, response_fp)
SELECT now64(9) + toIntervalMillisecond({round:UInt32} * 1000 + number % 1000) AS ts, ts AS end_ts,
    concat('t', toString(number)) AS trace_id, concat(lower(hex(number)), '-', toString({round:UInt32})) AS span_id,
    concat('s', toString(number)) AS session_id, 'gen_ai.conversation.id', 'chat', 'llm', 'gpt-4o-mini',
    800 + 150 * {round:UInt32}, 60, 1,
    if(number % 3 = 0, cityHash64(number), cityHash64(number, {round:UInt32})),
    cityHash64(number, {round:UInt32}, 9),
    if(number % 3 = 0, 12345, cityHash64(number, {round:UInt32}, 2) % 4294967296),
    if(number % 3 = 0, 67890, cityHash64(number, {round:UInt32}, 3) % 4294967296),
    ['read_file'], [if(number % 3 = 0, 4242, cityHash64(number, {round:UInt32}))],
    if(number % 3 = 0, 99, cityHash64(number, {round:UInt32}, 4))
FROM numbers({sessions:UInt32})
"""


def measure(stored: int, sessions: int, cycles: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-detector-") as tmp:
        store = ChdbStore(tmp)
        apply_schema(store)
        t = time.perf_counter()
        for start in range(0, stored, FILL_CHUNK):  # in chunks: bounded memory for the 10M case
            store.command(FILL_HISTORY, {"start": start, "n": min(FILL_CHUNK, stored - start)})
        fill_s = time.perf_counter() - t
        config = AppConfig()
        config.detector.checkpoint_seconds = 3600  # checkpoints are timed on their own, below and in a last cycle
        job = DetectorJob(store, config, DecisionBook())
        job.load()
        job.last_checkpoint_us = 2**62  # no automatic checkpoint: they are timed on their own
        # the stored history is older than the watermark: a cycle must never read it again
        job.watermark_us = job.processed_us = int(store.rows(
            "SELECT toUnixTimestamp64Micro(max(inserted_at)) AS m FROM otel.genai_calls")[0]["m"])

        store.command(NEW_CALLS, {"round": 0, "sessions": sessions})
        t = time.perf_counter()
        first = job.run_cycle()
        cold_s = time.perf_counter() - t
        assert first.calls_scored == sessions, first

        t = time.perf_counter()
        saved = job.checkpoint()
        checkpoint_s = time.perf_counter() - t
        # a restart: a new detector on the same store; the sessions are only in loop_state now, loaded by the next cycle
        job = DetectorJob(store, config, DecisionBook())
        job.load()
        job.last_checkpoint_us = 2**62
        assert len(job.stored) == 2 * sessions, len(job.stored)
        store.command(NEW_CALLS, {"round": 1, "sessions": sessions})
        t = time.perf_counter()
        job.run_cycle()
        restart_s = time.perf_counter() - t
        assert not job.stored, len(job.stored)  # every persisted scope came back: steady cycles need not look

        warm, phases = [], []
        for r in range(2, 2 + cycles):
            store.command(NEW_CALLS, {"round": r, "sessions": sessions})
            t = time.perf_counter()
            stats = job.run_cycle()
            warm.append(time.perf_counter() - t)
            phases.append(stats.phases)
            assert stats.calls_scored == sessions, stats
        # one more steady cycle, with a checkpoint due (in production one cycle in checkpoint_seconds / interval):
        # every session had a call since the last one, so all their scopes are written, histories and all
        store.command(NEW_CALLS, {"round": 2 + cycles, "sessions": sessions})
        unsaved = len(job._unsaved_scopes())  # all 2 x sessions: each cycle touches every session and its trace
        job.last_checkpoint_us = 0
        t = time.perf_counter()
        stats = job.run_cycle()
        with_checkpoint_s = time.perf_counter() - t
        assert job.checkpoint_us == job.watermark_us and not job.unsaved, "the checkpoint did not run"
        store.close()
    return {"fill_s": fill_s, "cold_s": cold_s, "restart_s": restart_s, "warm_s": statistics.median(warm),
            "warm_min_s": min(warm),
            "checkpoint_s": checkpoint_s, "saved": saved, "with_checkpoint_s": with_checkpoint_s,
            "in_cycle_checkpoint_s": stats.phases["checkpoint"], "unsaved": unsaved,
            "phases": {name: statistics.median(p[name] for p in phases) for name in phases[0]}}


def pure_baseline(stored: int, sessions: int, cycles: int) -> dict[str, Any]:
    """``measure`` in a fresh process running the core from its Python source (``LOOP_DETECTOR_PURE_PYTHON``)."""
    env = {**os.environ, native.PURE_ENV: "1"}
    done = subprocess.run([sys.executable, __file__, "--json", "--stored", str(stored), "--sessions", str(sessions),
                           "--cycles", str(cycles)], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--stored", default="1000000,10000000")
    parser.add_argument("--cycles", type=int, default=7)
    parser.add_argument("--no-pure-baseline", action="store_true",
                        help="skip the steady cycle of the Python-source core (a subprocess, smallest size only)")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # one size's results, for the baseline
    args = parser.parse_args()
    sizes = [int(x) for x in args.stored.split(",")]
    # A throwaway round first: the first measurement of a process also pays for growing its heap (and chDB's
    # caches), ~10-20% of a cycle here, which a long-running detector has paid long before.
    measure(min(sizes[0], WARM_UP_STORED), args.sessions, 2)
    if args.json:
        print(json.dumps(measure(sizes[0], args.sessions, args.cycles)))
        return
    results = {n: measure(n, args.sessions, args.cycles) for n in sizes}
    base = results[sizes[0]]
    rows = []
    if not args.no_pure_baseline:  # the same cycles on the interpreted core: what compiling it is worth
        pure = pure_baseline(sizes[0], args.sessions, args.cycles)
        rows.append((f"cycle, {args.sessions} new calls, {sizes[0] / 1e6:g}M stored, Python-source core",
                     pure["warm_s"] * 1000, "ms", pure["warm_s"] / base["warm_s"]))
        rows.append((f"  best Python-source cycle of {args.cycles}, {sizes[0] / 1e6:g}M stored", pure["warm_min_s"] * 1000,
                     "ms", pure["warm_min_s"] / base["warm_s"]))
        rows.append((f"  Python-source core: score, {sizes[0] / 1e6:g}M stored", pure["phases"]["score"] * 1000, "ms",
                     pure["phases"]["score"] / base["warm_s"]))
    for n, r in results.items():
        tag = f"{n / 1e6:g}M stored"
        rows.append((f"cycle, {args.sessions} new calls, {tag} (steady, median)", r["warm_s"] * 1000, "ms",
                     r["warm_s"] / base["warm_s"]))
        rows.append((f"  best steady cycle of {args.cycles}, {tag}", r["warm_min_s"] * 1000, "ms",
                     r["warm_min_s"] / base["warm_s"]))
        rows.append((f"per new call, {tag}", r["warm_s"] / args.sessions * 1e6, "us",
                     r["warm_s"] / base["warm_s"]))
        for phase, seconds in r["phases"].items():  # CycleStats.phases, each the median over the steady cycles
            rows.append((f"  steady cycle: {phase}, {tag}", seconds * 1000, "ms", seconds / base["warm_s"]))
        rows.append((f"cycle after restart (state loaded), {tag}", r["restart_s"] * 1000, "ms",
                     r["restart_s"] / base["warm_s"]))
        rows.append((f"first cycle (new sessions), {tag}", r["cold_s"] * 1000, "ms", r["cold_s"] / base["warm_s"]))
        rows.append((f"checkpoint of {r['saved']} one-call scope states, {tag}", r["checkpoint_s"] * 1000, "ms",
                     r["checkpoint_s"] / base["warm_s"]))
        rows.append((f"steady cycle with a checkpoint due, {tag}", r["with_checkpoint_s"] * 1000, "ms",
                     r["with_checkpoint_s"] / base["warm_s"]))
        rows.append((f"  its checkpoint ({r['unsaved']} scope states), {tag}", r["in_cycle_checkpoint_s"] * 1000, "ms",
                     r["in_cycle_checkpoint_s"] / base["warm_s"]))
    print(f"{'figure':<58} {'value':>10} {'unit':<5} {'ratio':>7}")
    print("-" * 84)
    for figure, value, unit, ratio in rows:
        print(f"{figure:<58} {value:>10.1f} {unit:<5} {ratio:>7.2f}")
    print(f"(ratio: against the steady cycle over {sizes[0] / 1e6:g}M stored calls, measured in the same run)")
    print(f"(detection core: {native.status()})")


if __name__ == "__main__":
    main()
