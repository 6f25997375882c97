"""Benchmark: the detection engine alone (no store), compiled core against the Python-source core.

    .venv/bin/python bench/engine.py [--sessions 10000] [--cycles 8]

The calls are those of ``bench/detector.py`` (10,000 sessions, one new call each per cycle, a third of them
stuck on one tool call), built in memory and handed to ``Engine.process`` cycle by cycle: what scoring costs
without reading and writing. The same cycles then run in a subprocess on the Python source
(``LOOP_DETECTOR_PURE_PYTHON=1``), the baseline of the same run.

Wall time on a shared machine drifts; for a deterministic figure, count instructions instead::

    valgrind --tool=callgrind --toggle-collect='CPyPy_engine___Engine___process' \\
        .venv/bin/python bench/engine.py --sessions 2000 --cycles 6 --no-baseline
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from detector import native  # noqa: E402
from detector.core.engine import Engine, span_order  # noqa: E402
from detector.core.models import Call  # noqa: E402
from detector.detection.engine_config import engine_tuning  # noqa: E402
from detector.settings.config import AppConfig  # noqa: E402

T0 = 1_780_000_000 * 10**9


def fp(*parts: int) -> int:
    """A stable, non-zero 62-bit fingerprint of some integers."""
    x = 1469598103934665603
    for p in parts:
        x = ((x ^ (p & 0xFFFFFFFFFFFFFFFF)) * 1099511628211) & 0x3FFFFFFFFFFFFFFF
    return x or 1


def cycle_calls(round_: int, sessions: int) -> list[Call]:
    calls = []
    for n in range(sessions):
        stuck = n % 3 == 0
        ts = T0 + (round_ * 1000 + n % 1000) * 1_000_000
        calls.append(Call(
            ts_ns=ts, end_ns=ts, trace_id=f"t{n}", span_id=f"{n:x}-{round_}", session_id=f"s{n}",
            model="gpt-4o-mini", input_tokens=800 + 150 * round_, output_tokens=60, has_content=True,
            request_fp=fp(n) if stuck else fp(n, round_), turn_fp=fp(n, round_, 9),
            input_simhash=12345 if stuck else fp(n, round_, 2) % 2**32,
            output_simhash=67890 if stuck else fp(n, round_, 3) % 2**32,
            out_tool_names=("read_file",), out_tool_fps=(4242 if stuck else fp(n, round_),),
            response_fp=99 if stuck else fp(n, round_, 4),
        ))
    return calls


def measure(sessions: int, cycles: int) -> dict[str, float]:
    # in span order, as the job's query returns them (Engine.process then need not sort them)
    batches = [sorted(cycle_calls(r, sessions), key=span_order) for r in range(cycles)]
    engine = Engine(engine_tuning(AppConfig()))
    seconds = []
    gc.disable()  # as the detector job runs its cycles (detector.detection.gc_policy)
    for batch in batches:
        t = time.perf_counter()
        engine.process(batch, now_us=T0 // 1000)
        seconds.append(time.perf_counter() - t)
        gc.freeze()
    steady = seconds[2:] or seconds  # the first two create the scopes and fill their windows
    return {"first_s": seconds[0], "median_s": statistics.median(steady), "best_s": min(steady)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--cycles", type=int, default=8)
    parser.add_argument("--no-baseline", action="store_true", help="skip the Python-source run")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    result = measure(args.sessions, args.cycles)
    if args.json:
        print(json.dumps(result))
        return
    rows = [(f"engine cycle, {args.sessions} new calls, median ({native.status()})", result["median_s"]),
            ("  best engine cycle", result["best_s"]),
            (f"first cycle ({args.sessions} new sessions)", result["first_s"])]
    if not args.no_baseline:
        env = {**os.environ, native.PURE_ENV: "1"}
        done = subprocess.run([sys.executable, __file__, "--json", "--sessions", str(args.sessions), "--cycles",
                               str(args.cycles)], env=env, capture_output=True, text=True, check=True)
        pure = json.loads(done.stdout.strip().splitlines()[-1])
        rows += [("engine cycle, Python-source core, median (baseline)", pure["median_s"]),
                 ("  best engine cycle, Python-source core", pure["best_s"]),
                 ("first cycle, Python-source core", pure["first_s"])]
    print(f"{'figure':<72} {'value':>8} {'unit':<4} {'ratio':>6}")
    print("-" * 94)
    for figure, seconds in rows:
        print(f"{figure:<72} {seconds * 1000:>8.1f} {'ms':<4} {seconds / result['median_s']:>6.2f}")
    print("(ratio: against the compiled engine's median cycle, measured in the same run)")


if __name__ == "__main__":
    main()
