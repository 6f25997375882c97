"""A tool-using agent on Anthropic's Messages API, guarded by loop-detector (``--stream``: ``messages.stream``).

    python examples/anthropic_guard.py                       # stub model + loop-detector in-process
    python examples/anthropic_guard.py --loop-detector http://127.0.0.1:8080 --model-url http://127.0.0.1:8765

``guard_anthropic`` checks every ``messages.create`` / ``messages.stream`` first (fingerprint of model,
messages and system as ``pending``); on inject the break instruction is added to ``system``. The agent checks
each ``tool_use`` before running it. The stub model repeats ``read_file("config.yaml")``: the third identical
tool call is refused before it runs. Needs ``pip install anthropic`` (or the SDK's ``anthropic`` extra).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from _harness import local_stack, parser
from anthropic import Anthropic
from loop_detector_sdk import LoopBlockedError, LoopGuard, guard_anthropic, pending_tool

TOOLS = [{"name": "read_file", "description": "Read a file",
          "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]


def main() -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--stream", action="store_true")
    args = p.parse_args()
    session = args.session or f"claude-{uuid.uuid4().hex[:6]}"
    with local_stack(args.loop_detector, args.model_url) as (api, base), LoopGuard(api) as guard:
        client = guard_anthropic(Anthropic(base_url=base, api_key="sk-stub", max_retries=0), guard, session_id=session)
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing config."}]
        print(f"session {session}")
        try:
            for step in range(1, 11):
                kwargs = {"model": "claude-sonnet-5", "max_tokens": 1024, "system": "You fix configs. [loop]",
                          "messages": messages, "tools": TOOLS}
                if args.stream:
                    with client.messages.stream(**kwargs) as stream:
                        message = stream.get_final_message()
                else:
                    message = client.messages.create(**kwargs)
                messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]})
                results = []
                for block in [b for b in message.content if b.type == "tool_use"]:
                    guard.before_call(session_id=session, pending=pending_tool(block.name, block.input))
                    print(f"{step:>3}  {block.name}({json.dumps(block.input)})")
                    results.append({"type": "tool_result", "tool_use_id": block.id, "content": "port: 8080"})
                if not results:
                    break
                messages.append({"role": "user", "content": results})
        except LoopBlockedError as exc:
            print(f"blocked by loop-detector: {json.dumps(exc.body)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
