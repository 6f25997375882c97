"""Hand-built turns for the signal tests: one LLM call with its tool spans per ``turn(...)``, and whole runs (a
stuck tool loop, a healthy coding agent, polling with backoff...) built from them."""

from __future__ import annotations

import hashlib
import math

from detector.core.models import Call, Turn
from detector.settings.loop_settings import LoopDetectionConfig, Weights
from support.reference_signals import Signals, window_signals
from support.scores import weighted_confidence

CFG = LoopDetectionConfig()
WEIGHTS = Weights()
S = 1_000_000_000  # ns per second
T0 = 1_700_000_000 * S


def fp(label: str) -> int:
    """A stable 64-bit fingerprint for a label (what cityHash64 would give the real thing)."""
    return int.from_bytes(hashlib.blake2b(label.encode(), digest_size=8).digest(), "big") or 1


def simhash(label: str, flip: int = 0) -> int:
    """A 32-bit SimHash for a text label; ``flip`` bits changed makes a near-duplicate of it."""
    value = fp("simhash:" + label) & 0xFFFF_FFFF or 1
    for bit in range(flip):
        value ^= 1 << (bit * 5 % 32)
    return value


def bucket(tokens: int) -> int:
    return round(math.log2(tokens + 1) * 4)


def turn(
    t: float,
    *,
    in_tok: int = 2000,
    out_tok: int = 40,
    inp: str | None = None,
    out: str | None = None,
    inp_flip: int = 0,
    out_flip: int = 0,
    tools: tuple[str, ...] = (),
    request: str | None = None,
    content: bool = True,
    error: str | None = None,
    tool_error: str | None = None,
    dur: float = 1.5,
    price: tuple[float, float] = (3.0, 15.0),
    args_captured: bool = True,
) -> Turn:
    """One LLM call at ``t`` seconds, with its tool calls. ``inp`` / ``out`` label the new content (last
    input message, output text); tools are ``"name:args"`` labels. Without content, only the
    execute_tool spans carry tool fingerprints (name only unless ``args_captured``)."""
    ts = T0 + int(t * S)
    tool_fps = tuple(fp("tool:" + x) for x in tools)
    response_fp = fp(f"resp|{'tool' if tools else 'text'}|{'' if error else 'stop'}|{bucket(out_tok)}")
    call = Call(
        ts_ns=ts,
        end_ns=ts + int(dur * S),
        trace_id="trace-1",
        span_id=f"span-{t}",
        session_id="session-1",
        input_tokens=in_tok,
        output_tokens=0 if error else out_tok,
        is_error=error is not None,
        error_type=error or "",
        error_fp=fp("err:" + error) if error else 0,
        has_content=content,
        request_fp=fp("req:" + (request or f"{t}:{in_tok}")),
        input_simhash=simhash(inp, inp_flip) if content and inp else 0,
        output_simhash=simhash(out, out_flip) if content and out and not error else 0,
        out_tool_names=tuple(x.split(":")[0] for x in tools) if content and not error else (),
        out_tool_fps=tool_fps if content and not error else (),
        response_fp=fp(f"resp|error|{bucket(0)}") if error else response_fp,
    )
    spans = []
    for i, label in enumerate(tools):
        name = label.split(":")[0]
        spans.append(
            Call(
                ts_ns=ts + int(dur * S) + i,
                end_ns=ts + int((dur + 0.2) * S) + i,
                trace_id="trace-1",
                span_id=f"tool-{t}-{i}",
                session_id="session-1",
                operation="execute_tool",
                call_kind="tool",
                tool_name=name,
                tool_fp=fp("tool:" + (label if args_captured else name)),
                is_error=tool_error is not None,
                error_fp=fp("err:" + tool_error) if tool_error else 0,
            )
        )
    cost = (in_tok * price[0] + (0 if error else out_tok) * price[1]) / 1e6
    return Turn(call=call, tools=spans if not error else [], cost_usd=cost)


def score_run(turns: list[Turn], cfg: LoopDetectionConfig = CFG) -> list[tuple[Signals, float]]:
    """Signals and raw weighted confidence of each turn, as production scores them (a fresh window of the last
    ``history_depth`` turns: what the engine's incremental window gives, bit for bit)."""
    out = []
    for i, t in enumerate(turns):
        history = turns[max(0, i - cfg.history_depth) : i]
        sig = window_signals(history, t, cfg)
        out.append((sig, weighted_confidence(sig, cfg.weights)))
    return out


# ----------------------------------------------------------------------------------------- scenarios


def stuck_tool_loop(n: int = 10, *, content: bool = True) -> list[Turn]:
    """The same read_file("a.py") again and again: same result, same reply, context growing."""
    return [
        turn(3.0 * i, in_tok=4000 + 450 * i, out_tok=42, inp="contents of a.py", out="Let me read a.py",
             tools=("read_file:a.py",), content=content)
        for i in range(n)
    ]


def healthy_run(n: int = 20, *, content: bool = True, args_captured: bool = True) -> list[Turn]:
    """A productive coding agent: a different tool and arguments every turn, new results, new replies,
    context growing by varying amounts, output lengths varying."""
    tools = ["read_file", "grep", "edit_file", "list_dir", "run_tests", "write_file", "search_web"]
    growth = [310, 1210, 95, 640, 2200, 180, 870, 430, 1500, 60]
    turns, in_tok = [], 3000
    for i in range(n):
        name = tools[i % len(tools)]
        turns.append(
            turn(4.0 * i, in_tok=in_tok, out_tok=35 + (i * 37) % 160, inp=f"result {i}", out=f"step {i} reasoning",
                 tools=(f"{name}:arg{i}",), content=content, args_captured=args_captured)
        )
        in_tok += growth[i % len(growth)]
    return turns


def error_retry_loop(n: int = 8) -> list[Turn]:
    """The same request retried and failing with the same provider error each time."""
    return [turn(2.0 * i, in_tok=12000, inp="summarize the report", request="same", error="rate_limit") for i in range(n)]


def tool_error_loop(n: int = 8) -> list[Turn]:
    """The same tool call failing the same way, retried by the model."""
    return [
        turn(3.0 * i, in_tok=5000 + 300 * i, out_tok=30, inp="Error: permission denied", out="retry make",
             tools=("run:make",), tool_error="EACCES")
        for i in range(n)
    ]


def regenerated_text(n: int = 8) -> list[Turn]:
    """The harness rejects the answer with the same message; the model regenerates near-identical text."""
    return [
        turn(5.0 * i, in_tok=3000 + 260 * i, out_tok=250 + (i % 3), inp="Invalid JSON, try again",
             out="the answer", out_flip=i % 3)
        for i in range(n)
    ]


def monologue(n: int = 8) -> list[Turn]:
    """No tools, no new input: the model keeps producing near-identical messages, context growing."""
    return [
        turn(6.0 * i, in_tok=2500 + 180 * i, out_tok=170 + (i % 2), inp="I should check the config", inp_flip=i % 2,
             out="I should check the config", out_flip=(i + 1) % 2)
        for i in range(n)
    ]


def batch_job(n: int = 12, *, content: bool = True) -> list[Turn]:
    """Same prompt template, a different document each call: near inputs, different outputs, no growth."""
    return [
        turn(2.0 * i, in_tok=1400 + (i * 173) % 500, out_tok=180 + (i * 61) % 140, inp="summarize template",
             inp_flip=5 + i % 3, out=f"summary of doc {i}", content=content)
        for i in range(n)
    ]


def polling_with_backoff(n: int = 7) -> list[Turn]:
    """check_status(job) until done, waiting 2, 4, 8, 16 ... seconds: same call, same 'pending' result."""
    turns, t = [], 0.0
    for i in range(n):
        turns.append(turn(t, in_tok=1500 + 60 * i, out_tok=20, inp="status: pending", out="still pending",
                          tools=("check_status:job-1",)))
        t += 2.0 * 2**i
    return turns


def transient_error_retried_once() -> list[Turn]:
    base = healthy_run(6)
    failed = turn(24.0, in_tok=6000, inp="result 6", request="r6", error="timeout")
    retried = turn(26.0, in_tok=6000, out_tok=80, inp="result 6", out="step 6", tools=("grep:foo",), request="r6")
    after = turn(30.0, in_tok=6500, out_tok=60, inp="result 7", out="step 7", tools=("edit_file:x",))
    return [*base, failed, retried, after]


def edit_test_cycle(n: int = 12) -> list[Turn]:
    """Productive TDD: run_tests(), edit a different place, run_tests() ... the tests' output changes."""
    turns = []
    for i in range(n):
        if i % 2 == 0:
            turns.append(turn(4.0 * i, in_tok=3000 + 400 * i, out_tok=25, inp=f"edit {i} applied",
                              out="run the tests", tools=("run_tests:",)))
        else:
            turns.append(turn(4.0 * i, in_tok=3000 + 400 * i + 90 * i, out_tok=60 + 7 * i, inp=f"test failures {i}",
                              out=f"fix {i}", tools=(f"edit_file:fix{i}",)))
    return turns


def write_many_files(n: int = 10) -> list[Turn]:
    """write_file for a different file each turn: every tool result is the same 'File written.'"""
    return [
        turn(3.0 * i, in_tok=2000 + 350 * i, out_tok=300 + 11 * i, inp="File written.", out=f"code for module {i}",
             tools=(f"write_file:mod{i}.py",))
        for i in range(n)
    ]


def confidences(turns: list[Turn], cfg: LoopDetectionConfig = CFG) -> list[float]:
    return [c for _, c in score_run(turns, cfg)]


def signal_series(turns: list[Turn], name: str) -> list[float]:
    return [getattr(s, name) for s, _ in score_run(turns)]


def last_signals(turns: list[Turn]) -> Signals:
    return score_run(turns)[-1][0]


