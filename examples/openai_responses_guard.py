"""A tool-calling agent on OpenAI's Responses API, guarded by loop-detector (sync, ``--async``, ``--stream``).

    python examples/openai_responses_guard.py                 # stub model + loop-detector in-process
    python examples/openai_responses_guard.py --async --stream
    python examples/openai_responses_guard.py --loop-detector http://127.0.0.1:8080 --model-url http://127.0.0.1:8765

``guard_openai`` checks every ``responses.create`` / ``responses.stream`` first, with the request's
fingerprint as ``pending``; the agent also checks each tool call before running it (``pending_tool``). The
stub model asks for ``read_file("config.yaml")`` again and again: the third identical tool call is refused
before it runs. Needs ``pip install openai`` (or the SDK's ``openai`` extra).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from _harness import local_stack, parser
from loop_detector_sdk import AsyncLoopGuard, LoopBlockedError, LoopGuard, guard_openai, pending_tool
from openai import AsyncOpenAI, OpenAI

TOOLS = [{"type": "function", "name": "read_file", "description": "Read a file",
          "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]


def read_file(path: str) -> str:
    return "port: 8080\n"


def step_input(response: Any) -> list[dict[str, Any]]:
    """The model's output items, as input items of the next turn (the function results follow them)."""
    return [o.model_dump(exclude_none=True) for o in response.output]


def run_sync(api: str, base: str, session: str, stream: bool) -> None:
    with LoopGuard(api) as guard:
        client = guard_openai(OpenAI(base_url=base + "/v1", api_key="sk-stub", max_retries=0), guard, session_id=session)
        items: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing config."}]
        for step in range(1, 11):
            kwargs = {"model": "gpt-4o-mini", "instructions": "You fix configs. [loop]", "input": items, "tools": TOOLS}
            if stream:
                with client.responses.stream(**kwargs) as s:
                    response = s.get_final_response()
            else:
                response = client.responses.create(**kwargs)
            items += step_input(response)
            for call in [o for o in response.output if o.type == "function_call"]:
                args = json.loads(call.arguments)
                guard.before_call(session_id=session, pending=pending_tool(call.name, args))  # raises on block
                print(f"{step:>3}  {call.name}({call.arguments})")
                items.append({"type": "function_call_output", "call_id": call.call_id, "output": read_file(**args)})


async def run_async(api: str, base: str, session: str, stream: bool) -> None:
    async with AsyncLoopGuard(api) as guard:
        client = guard_openai(AsyncOpenAI(base_url=base + "/v1", api_key="sk-stub", max_retries=0), guard,
                              session_id=session)
        items: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing config."}]
        for step in range(1, 11):
            kwargs = {"model": "gpt-4o-mini", "instructions": "You fix configs. [loop]", "input": items, "tools": TOOLS}
            if stream:
                async with client.responses.stream(**kwargs) as s:
                    response = await s.get_final_response()
            else:
                response = await client.responses.create(**kwargs)
            items += step_input(response)
            for call in [o for o in response.output if o.type == "function_call"]:
                args = json.loads(call.arguments)
                await guard.before_call(session_id=session, pending=pending_tool(call.name, args))
                print(f"{step:>3}  {call.name}({call.arguments})")
                items.append({"type": "function_call_output", "call_id": call.call_id, "output": read_file(**args)})


def main() -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--async", dest="use_async", action="store_true")
    p.add_argument("--stream", action="store_true")
    args = p.parse_args()
    session = args.session or f"responses-{uuid.uuid4().hex[:6]}"
    with local_stack(args.loop_detector, args.model_url) as (api, base):
        print(f"session {session}")
        try:
            if args.use_async:
                asyncio.run(run_async(api, base, session, args.stream))
            else:
                run_sync(api, base, session, args.stream)
        except LoopBlockedError as exc:
            print(f"blocked by loop-detector: {json.dumps(exc.body)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
