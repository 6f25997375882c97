"""Hand-built ``Call`` streams for the engine tests: LLM calls and execute_tool spans, looping and healthy runs."""

from __future__ import annotations

from detector.core.models import Call, ns_to_ch

T0 = 1_780_000_000 * 10**9


def llm(i: int, *, session="s1", trace="t1", tool_fp=0, request_fp=None, out_sim=None, key="", error=False,
        tokens=(500, 50), ts=None, tool_name="read_file") -> Call:
    return Call(
        ts_ns=ts if ts is not None else T0 + i * 2 * 10**9, trace_id=trace, span_id=f"{trace}-{i:04d}", session_id=session,
        virtual_key=key, input_tokens=tokens[0] + 100 * i, output_tokens=tokens[1], has_content=True,
        request_fp=request_fp if request_fp is not None else 1000 + i, turn_fp=7 if tool_fp else 2000 + i,
        input_simhash=0x0F0F0F0F if tool_fp else (i * 2654435761) & 0xFFFFFFFF,
        output_simhash=out_sim if out_sim is not None else (0x12345678 if tool_fp else (i * 40503 * 65537) & 0xFFFFFFFF),
        response_fp=99 if tool_fp else 3000 + i, out_tool_fps=(tool_fp,) if tool_fp else (),
        out_tool_names=(tool_name,) if tool_fp else (), is_error=error, error_fp=55 if error else 0,
        error_type="timeout" if error else "", finish_reasons=("tool_calls",) if tool_fp else ("stop",),
        # what came back since the previous call (its new input, normalized): the same result in a tool loop
        observation_fp=0x0F0F if tool_fp else 5000 + i, observation_chars=300,
    )


def tool_span(i: int, *, trace="t1", fp=0, error=False) -> Call:
    return Call(ts_ns=T0 + i * 2 * 10**9 + 10**9, trace_id=trace, span_id=f"{trace}-tool-{i:04d}", session_id=trace,
                session_source="trace", operation="execute_tool", call_kind="tool", tool_name="read_file", tool_fp=fp,
                is_error=error, error_fp=77 if error else 0, error_type="FileNotFoundError" if error else "")


def looping(n: int, **kw) -> list[Call]:
    calls = []
    for i in range(n):
        calls.append(llm(i, tool_fp=4242, **kw))
        calls.append(tool_span(i, trace=kw.get("trace", "t1"), fp=4242))
    return calls


def healthy(n: int, **kw) -> list[Call]:
    calls = []
    for i in range(n):
        calls.append(llm(i, tool_fp=10_000 + i, **kw) if i % 3 else llm(i, **kw))
    return calls


def genai_rows(calls) -> list[dict]:
    """genai_calls rows for hand-built calls (inserted straight into the table the MV fills)."""
    rows = []
    for c in calls:
        rows.append({
            "ts": ns_to_ch(c.ts_ns), "end_ts": ns_to_ch(c.ts_ns), "trace_id": c.trace_id, "span_id": c.span_id,
            "session_id": c.session_id, "session_source": c.session_source, "operation": c.operation,
            "call_kind": c.call_kind, "input_tokens": c.input_tokens, "output_tokens": c.output_tokens,
            "has_content": int(c.has_content), "request_fp": c.request_fp, "turn_fp": c.turn_fp,
            "input_simhash": c.input_simhash, "output_simhash": c.output_simhash, "tool_fp": c.tool_fp,
            "tool_name": c.tool_name, "out_tool_names": list(c.out_tool_names), "out_tool_fps": list(c.out_tool_fps),
            "response_fp": c.response_fp, "is_error": int(c.is_error), "error_fp": c.error_fp,
            "finish_reasons": list(c.finish_reasons),
        })
    return rows


# -------------------------------------------------------------------------- calls with progress fingerprints


def agent_llm(i: int, *, trace="t1", session="s1", t0=T0, at=None, duration=0.8, tokens=(500, 40), text=0, told=0,
              told_chars=80, out_sim=0, told_sim=0, tools=(), error=0, content=True, request=None,
              finish=None) -> Call:
    """An LLM call as the view writes it with the progress fingerprints: ``text`` its normalized reply, ``told`` its
    new input, ``tools`` the (name, args_fp) it asks for; times in seconds from ``t0``."""
    ts = t0 + int((at if at is not None else i * 3.0) * 1e9)
    names = tuple(n for n, _ in tools)
    return Call(
        ts_ns=ts, end_ns=ts + int(duration * 1e9), trace_id=trace, span_id=f"{trace}-llm-{i:04d}", session_id=session,
        input_tokens=tokens[0], output_tokens=tokens[1], has_content=content, is_error=bool(error),
        error_fp=error, error_type="E" if error else "", request_fp=request if request is not None else 1000 + i,
        output_fp=text if content else 0, output_norm_simhash=out_sim if content else 0,
        observation_fp=told if content else 0, observation_simhash=told_sim if content else 0,
        observation_chars=told_chars if content and told else 0, out_tool_names=names,
        out_tool_fps=tuple(fp for _, fp in tools) if content else (),
        finish_reasons=finish if finish is not None else (("tool_calls",) if tools else ("stop",)),
    )


def agent_tool(i: int, name: str, *, trace="t1", t0=T0, at=None, duration=0.1, args=1, result=0, result_sim=0,
               result_chars=300, empty=False, error=0, args_sim=0, content=True, failed=False, shape=0,
               pending=False, ack=False) -> Call:
    """An execute_tool span with the progress fingerprints (``args``/``result`` normalized; 0: not captured;
    ``failed``: the result says it failed, ``shape``: the result with its numbers replaced, ``pending``: it says the
    work is still in progress, ``ack``: it only acknowledges what was done, ``empty``: it says "nothing")."""
    ts = t0 + int((at if at is not None else i * 3.0 + 1.0) * 1e9)
    return Call(
        ts_ns=ts, end_ns=ts + int(duration * 1e9), trace_id=trace, span_id=f"{trace}-tool-{i:04d}", session_id=trace,
        session_source="trace", operation="execute_tool", call_kind="tool", tool_name=name,
        tool_fp=(args * 31 + 7) if content else 5000 + len(name), args_fp=args if content else 0,
        args_simhash=args_sim if content else 0, observation_fp=result if content and not error else 0,
        observation_simhash=result_sim if content and not error else 0,
        observation_chars=result_chars if content and result and not error else 0,
        observation_empty=empty and content, is_error=bool(error), error_fp=error, error_type="E" if error else "",
        observation_failed=failed and content, observation_shape_fp=(shape or result) if content else 0,
        observation_pending=pending and content, observation_ack=ack and content,
    )
