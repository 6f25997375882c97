"""A random stream of calls through the engine, and everything it produced as exact JSON: what the compiled and
the Python-source core must agree on (``tests/core/test_native.py`` runs it in a subprocess of each kind).

    python tests/support/engine_digest.py [seed]   # a manual check: prints the digest's start
"""

from __future__ import annotations

import json
import random
import sys

T0 = 1_780_000_000 * 10**9


def random_stream(seed: int) -> list:
    """Several sessions, traces and keys: tool loops, error retries, exact repeats, healthy steps, tool spans."""
    from detector.core.models import Call

    rng = random.Random(seed)
    calls = []
    for i in range(600):
        s = rng.randrange(6)
        trace = f"t{s}-{i // 120}"
        ts = T0 + i * 700_000_000 + rng.randrange(300_000_000)
        # each session has a habit (stuck on a tool, failing, repeating itself, working) it sometimes breaks
        habit = ["loop", "error", "repeat", "healthy", "loop", "empty"][s]
        mode = habit if rng.random() < 0.85 else rng.choice(["loop", "error", "repeat", "healthy", "empty"])
        tool = 4242 + s if mode == "loop" else rng.randrange(1, 2**62) if mode == "healthy" else 0
        calls.append(Call(
            ts_ns=ts, end_ns=ts + 400_000_000, trace_id=trace, span_id=f"{i:05d}", session_id=f"s{s}",
            virtual_key=f"k{s % 2}", feature="search" if s % 3 else "", model=rng.choice(["gpt-4o", "gpt-4o-mini"]),
            input_tokens=500 + 120 * (i % 40) + rng.randrange(50), output_tokens=rng.choice([40, 60, 60, 900]),
            has_content=s % 2 == 0, request_fp=77 + s if mode == "repeat" else rng.randrange(1, 2**62),
            input_simhash=0x0F0F0F0F if mode != "healthy" else rng.randrange(2**32),
            output_simhash=0 if mode == "empty" else 0x12345678 if mode == "loop" else rng.randrange(2**32),
            response_fp=99 if mode in ("loop", "error") else rng.randrange(1, 2**62),
            out_tool_fps=(tool,) if tool and s % 2 == 0 else (), out_tool_names=("read_file",) if tool else (),
            is_error=mode == "error", error_fp=55 if mode == "error" else 0,
            finish_reasons=("tool_calls",) if tool else ("stop",),
        ))
        if tool and s % 2:  # no content: the tool call is known from its execute_tool span
            calls.append(Call(
                ts_ns=ts + 450_000_000, end_ns=ts + 600_000_000, trace_id=trace, span_id=f"{i:05d}-tool",
                session_id=trace, session_source="trace", operation="execute_tool", call_kind="tool",
                tool_name="read_file", tool_fp=tool, is_error=rng.random() < 0.2, error_fp=66,
            ))
    return calls


def engine_digest(seed: int) -> str:
    """Everything the engine produced for a random stream, in cycles, as exact JSON (floats by repr)."""
    from detector.core.engine import Engine
    from detector.detection.engine_config import engine_tuning
    from detector.settings.config import parse_config

    config = parse_config({
        "rules": [
            {"name": "repeat", "detector": "exact_prompt_repeat", "action": "block", "mode": "enforce"},
            {"name": "cap", "detector": "trace_cap", "action": "block", "params": {"unit": "tokens", "threshold": 90000}},
            {"name": "failures", "detector": "failure_loop", "action": "notify", "mode": "dry_run"},
            {"name": "tpm", "detector": "velocity", "action": "block", "params": {"tpm_limit": 40000}},
        ],
        "budgets": [{"name": "search", "scope": "feature", "match": "search", "limit_usd": 0.5, "action": "block"}],
        "prices": {"gpt-4o": {"input_per_million": 2.5, "output_per_million": 10.0}},
        "loop_detection": {"injection_strategy": "context_aware", "thresholds": {  # every level gets reached
            "warn_confidence": 0.2, "throttle_confidence": 0.3, "inject_confidence": 0.4, "hardstop_confidence": 0.5}},
    })
    engine = Engine(engine_tuning(config))
    calls = random_stream(seed)
    out = []
    for start in range(0, len(calls), 97):
        result = engine.process(calls[start:start + 97], now_us=T0 // 1000)
        out.append({"scores": result.score_dicts, "events": result.events,
                    "decisions": [d.to_row(1) for d in result.decisions], "scored": result.calls_scored})
    states = {f"{k[0]}:{k[1]}": st.to_row(1) for k, st in sorted(engine.states.items())}
    return json.dumps({"cycles": out, "states": states}, sort_keys=True, default=repr)


if __name__ == "__main__":  # pragma: no cover - a manual check
    from detector import native

    print(native.status())
    print(engine_digest(int(sys.argv[1]) if len(sys.argv) > 1 else 1)[:2000])
